/* last_error.c: the thread-local message buffer and dlrt_last_error, the runtime's only exported
 * symbol. Kept apart from error.c so the setters there reach the buffer only through the exported
 * function (see error.c for why). */
#include "dlrt.h"

static _Thread_local char message[DLRT_ERROR_CAPACITY];

const char *dlrt_last_error(void) {
    return message;
}

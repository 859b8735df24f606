/* box.c: boxes, the reference-counted heap cells of the IR's `box{T}`: a 64-byte header holding
 * the count, then the content. Like a model object, a box is not shared between threads. */
#include <stdint.h>
#include <string.h>

#include "dlrt.h"
#include "internal.h"

_Static_assert(DLRT_BOX_HEADER % DLRT_ALIGNMENT == 0, "the content stays aligned");

void *dlrt_box_create(size_t bytes) {
    size_t total;
    if (!dlrt_checked_add(bytes, DLRT_BOX_HEADER, &total)) {
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_box_create: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    void *box = dlrt_alloc(total);
    if (box != NULL) {
        memset(box, 0, total);
        *(int64_t *)box = 1;
    }
    return box;
}

void dlrt_box_retain(void *box) {
    if (box != NULL) {
        *(int64_t *)box += 1;
    }
}

void dlrt_box_release(void *box) {
    if (box != NULL && --*(int64_t *)box <= 0) {
        dlrt_free(box);
    }
}

/* error.c: dlrt_error and dlrt_clear_error, which set the thread-local message behind
 * dlrt_last_error.
 *
 * Every library links its own copy of the runtime, but all of them export dlrt_last_error. When
 * a C program links two models, the dynamic linker binds every reference to that name to one
 * definition, so a program asking for the message gets the first library's buffer. The setters
 * therefore write through the exported function (a call the linker routes the same way, which is
 * why it lives in another file: the compiler cannot inline it), so all libraries bound to one
 * dlrt_last_error share its buffer; DLRT_ERROR_CAPACITY is part of the ABI for that reason. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dlrt.h"

/* The buffer dlrt_last_error returns; it is a writable thread-local array (last_error.c). */
static char *message_buffer(void) {
    return (char *)dlrt_last_error();
}

/* Cuts a message that did not fit to end in "..." without splitting a UTF-8 sequence, so
   readers that decode it strictly (Python) never fail. */
static void mark_truncated(char *text) {
    size_t end = DLRT_ERROR_CAPACITY - 4;
    while (end > 0 && ((unsigned char)text[end] & 0xC0) == 0x80) {
        end--;
    }
    memcpy(text + end, "...", 4);
}

dlrt_status dlrt_error(dlrt_status code, const char *fmt, ...) {
    /* Format into a local copy first: an argument may be the message buffer itself. */
    char text[DLRT_ERROR_CAPACITY];
    if (fmt == NULL) {
        snprintf(text, sizeof text, "(error %d without a message)", (int)code);
    } else {
        va_list args;
        va_start(args, fmt);
        int written = vsnprintf(text, sizeof text, fmt, args);
        va_end(args);
        if (written < 0) {
            snprintf(text, sizeof text, "(error %d: unprintable message '%.200s')", (int)code,
                     fmt);
        } else if ((size_t)written >= sizeof text) {
            mark_truncated(text);
        }
    }
    memcpy(message_buffer(), text, strlen(text) + 1);
    return code;
}

void dlrt_clear_error(void) {
    message_buffer()[0] = '\0';
}

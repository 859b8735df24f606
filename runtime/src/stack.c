/* stack.c: growable stacks of bytes, the tape of reverse-mode differentiation: the forward pass
 * pushes the values the backward pass pops, in reverse order. */
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "internal.h"

/* Capacity of a stack's first allocation, made at the first push. */
#define FIRST_CAPACITY ((size_t)4096)

struct dlrt_stack {
    unsigned char *bytes;
    size_t size;     /* bytes on the stack */
    size_t capacity; /* bytes allocated */
};

dlrt_stack *dlrt_stack_create(void) {
    dlrt_stack *s = calloc(1, sizeof *s);
    if (s == NULL) {
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_stack_create: cannot allocate a stack");
    }
    return s;
}

void dlrt_stack_destroy(dlrt_stack *s) {
    if (s != NULL) {
        free(s->bytes);
        free(s);
    }
}

/* Makes room for `needed` bytes in total, doubling the capacity. */
static dlrt_status reserve(dlrt_stack *s, size_t needed) {
    if (needed <= s->capacity) {
        return DLRT_OK;
    }
    size_t capacity = s->capacity == 0 ? FIRST_CAPACITY : s->capacity;
    while (capacity < needed) {
        if (!dlrt_checked_mul(capacity, 2, &capacity)) {
            capacity = needed;
        }
    }
    unsigned char *bytes = realloc(s->bytes, capacity);
    if (bytes == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY,
                          "dlrt_stack_push: cannot grow the stack to %zu bytes", needed);
    }
    s->bytes = bytes;
    s->capacity = capacity;
    return DLRT_OK;
}

dlrt_status dlrt_stack_push(dlrt_stack *s, const void *data, size_t bytes) {
    if (s == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_stack_push: argument 's' is NULL");
    }
    if (bytes == 0) {
        return DLRT_OK;
    }
    if (data == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "dlrt_stack_push: argument 'data' is NULL (pushing %zu bytes)", bytes);
    }
    size_t needed;
    if (!dlrt_checked_add(s->size, bytes, &needed)) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY,
                          "dlrt_stack_push: %zu bytes on a stack of %zu is too large", bytes,
                          s->size);
    }
    dlrt_status status = reserve(s, needed);
    if (status != DLRT_OK) {
        return status;
    }
    memcpy(s->bytes + s->size, data, bytes);
    s->size = needed;
    return DLRT_OK;
}

dlrt_status dlrt_stack_pop(dlrt_stack *s, void *out, size_t bytes) {
    if (s == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_stack_pop: argument 's' is NULL");
    }
    if (bytes > s->size) {
        return dlrt_error(DLRT_ERR_FORMAT,
                          "dlrt_stack_pop: popping %zu bytes from a stack that holds %zu "
                          "(pushes and pops do not match)",
                          bytes, s->size);
    }
    if (bytes == 0) {
        return DLRT_OK;
    }
    if (out == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "dlrt_stack_pop: argument 'out' is NULL (popping %zu bytes)", bytes);
    }
    s->size -= bytes;
    memcpy(out, s->bytes + s->size, bytes);
    return DLRT_OK;
}

/* internal.h: helpers shared by the runtime's source files (hidden, not part of the API). */
#ifndef DLRT_INTERNAL_H_
#define DLRT_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlrt.h"

/* Alignment of every dlrt_alloc block and arena push (a cache line, and enough for AVX-512). */
#define DLRT_ALIGNMENT 64

/* *out = a * b; false when that overflows size_t. */
static inline bool dlrt_checked_mul(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* *out = a + b; false when that overflows size_t. */
static inline bool dlrt_checked_add(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* *out = `bytes` rounded up to a multiple of DLRT_ALIGNMENT; false when that overflows. */
static inline bool dlrt_round_up(size_t bytes, size_t *out) {
    size_t padded;
    if (!dlrt_checked_add(bytes, DLRT_ALIGNMENT - 1, &padded)) {
        return false;
    }
    *out = padded & ~(size_t)(DLRT_ALIGNMENT - 1);
    return true;
}

/* dlrt_alloc without setting an error on failure (for callers with a fallback). */
void *dlrt_alloc_quiet(size_t bytes);

/* True when text[0, len) is well-formed UTF-8 (no overlong forms, surrogates or NULs). */
bool dlrt_valid_utf8(const char *text, size_t len);

/* The safetensors name of a dtype ("F32"); NULL for a value that is not a dlrt_dtype. */
const char *dlrt_dtype_tag(dlrt_dtype t);

/* Writes "[2, 3]" into buf, cut with "..." when it does not fit. */
void dlrt_format_shape(char *buf, size_t cap, const int64_t *shape, size_t rank);

#endif /* DLRT_INTERNAL_H_ */

/* safetensors_entries.c: checks of the tensor entries that callers of dlrt_save and dlrt_load
 * pass, and small helpers for their messages. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "safetensors.h"

/* Sets *bytes to the size of entry `t` (index i), or reports why it is not a valid tensor. */
static dlrt_status check_entry(const char *fn, const dlrt_tensor *t, size_t i, size_t *bytes) {
    if (t->name == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: tensor %zu has a NULL name", fn, i);
    }
    if (t->name[0] == '\0' || !dlrt_valid_utf8(t->name, strlen(t->name))) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: tensor %zu has a name that is empty or not UTF-8", fn, i);
    }
    if (strcmp(t->name, "__metadata__") == 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: tensor %zu is called '__metadata__', a name safetensors reserves",
                          fn, i);
    }
    size_t size = dlrt_dtype_size(t->dtype);
    if (size == 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: tensor '%s' has dtype %d, which is not a dlrt_dtype", fn, t->name,
                          (int)t->dtype);
    }
    if (t->rank < 0 || (t->rank > 0 && t->shape == NULL)) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has rank %" PRId32 "%s",
                          fn, t->name, t->rank, t->rank < 0 ? "" : " but a NULL shape");
    }
    for (int32_t axis = 0; axis < t->rank; axis++) {
        int64_t dim = t->shape[axis];
        if (dim < 0) {
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                              "%s: tensor '%s' has dimension %" PRId64 " on axis %" PRId32, fn,
                              t->name, dim, axis);
        }
        if ((uint64_t)dim > SIZE_MAX || !dlrt_checked_mul(size, (size_t)dim, &size)) {
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                              "%s: tensor '%s' is too large: its size in bytes overflows", fn,
                              t->name);
        }
    }
    if (size > INT64_MAX) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: tensor '%s' is too large: its size in bytes overflows", fn,
                          t->name);
    }
    if (size > 0 && t->data == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has a NULL data pointer",
                          fn, t->name);
    }
    *bytes = size;
    return DLRT_OK;
}

static int by_entry_name(const void *a, const void *b) {
    const dlrt_tensor *x = *(const dlrt_tensor *const *)a;
    const dlrt_tensor *y = *(const dlrt_tensor *const *)b;
    return strcmp(x->name, y->name);
}

dlrt_status sf_check_entries(const char *fn, const dlrt_tensor *ts, size_t n, size_t *bytes,
                             const dlrt_tensor ***sorted) {
    *sorted = NULL;
    for (size_t i = 0; i < n; i++) {
        dlrt_status status = check_entry(fn, &ts[i], i, &bytes[i]);
        if (status != DLRT_OK) {
            return status;
        }
    }
    const dlrt_tensor **order = malloc((n == 0 ? 1 : n) * sizeof *order);
    if (order == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu entries", fn, n);
    }
    for (size_t i = 0; i < n; i++) {
        order[i] = &ts[i];
    }
    if (n > 1) {
        qsort(order, n, sizeof *order, by_entry_name);
    }
    for (size_t i = 1; i < n; i++) {
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            dlrt_status status = dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                                            "%s: tensor name '%s' is given twice", fn,
                                            order[i]->name);
            free(order);
            return status;
        }
    }
    *sorted = order;
    return DLRT_OK;
}

const dlrt_tensor *sf_find_entry(const dlrt_tensor **sorted, size_t n, const char *name) {
    if (n == 0) {
        return NULL;
    }
    dlrt_tensor key = {.name = name};
    const dlrt_tensor *key_ptr = &key;
    const dlrt_tensor **hit = bsearch(&key_ptr, sorted, n, sizeof *sorted, by_entry_name);
    return hit == NULL ? NULL : *hit;
}

size_t sf_first_bad_bool(const unsigned char *data, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) {
        if (data[i] > 1) {
            return i;
        }
    }
    return bytes;
}

void dlrt_format_shape(char *buf, size_t cap, const int64_t *shape, size_t rank) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (size_t k = 0; k < rank && used < cap; k++) {
        used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, k == 0 ? "" : ", ",
                                 shape[k]);
    }
    if (used < cap) {
        used += (size_t)snprintf(buf + used, cap - used, "]");
    }
    if (used >= cap && cap >= 4) {
        memcpy(buf + cap - 4, "...", 4);
    }
}

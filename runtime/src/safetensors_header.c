/* safetensors_header.c: parses a safetensors header, a JSON object that maps "__metadata__" to
 * an object of strings and each tensor name to {"dtype", "shape", "data_offsets"}. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "safetensors.h"

/* Longest part of a tensor name quoted in a message. */
#define NAME_IN_MESSAGE 64

/* "__metadata__": null, or an object of strings (any strings: the reference keeps them). */
static bool parse_metadata(json_reader *r) {
    if (json_peek(r, 'n')) {
        return json_null(r, "as \"__metadata__\"");
    }
    if (!json_expect(r, '{', "to start \"__metadata__\"")) {
        return false;
    }
    if (json_accept(r, '}')) {
        return true;
    }
    do {
        bool ok = json_string_ex(r, NULL, "a key of \"__metadata__\"", true) &&
                  json_expect(r, ':', "after a key of \"__metadata__\"") &&
                  json_string_ex(r, NULL, "a value of \"__metadata__\"", true);
        if (!ok) {
            return false;
        }
    } while (json_accept(r, ','));
    return json_expect(r, '}', "or ',' in \"__metadata__\"");
}

/* The dtypes the reference knows (its Dtype enum); a file with another is malformed. */
static const char *const known_dtypes[] = {
    "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
    "U32", "F32", "C64", "F64", "I64", "U64",
};

/* A dtype: "NAME", or {"NAME": null} (serde's other spelling of a unit variant). */
static bool parse_dtype(json_reader *r, sf_tensor *t, const char *what) {
    bool braced = json_accept(r, '{');
    if (!json_string(r, &t->dtype, what)) {
        return false;
    }
    if (braced && !(json_expect(r, ':', "after the dtype's name") && json_null(r, what) &&
                    json_expect(r, '}', "after the dtype's null"))) {
        return false;
    }
    for (size_t k = 0; k < sizeof known_dtypes / sizeof *known_dtypes; k++) {
        if (strcmp(t->dtype, known_dtypes[k]) == 0) {
            return true;
        }
    }
    return json_fail(r, "%s is '%.16s', which is not a safetensors dtype", what, t->dtype);
}

/* data_offsets: exactly two integers. */
static bool parse_offsets(json_reader *r, sf_tensor *t, const char *what) {
    uint64_t *offsets = NULL;
    size_t count = 0;
    bool ok = json_uint_array(r, &offsets, &count, what);
    if (ok && count != 2) {
        ok = json_fail(r, "%s has %zu numbers, expected 2", what, count);
    }
    if (ok) {
        t->begin = offsets[0];
        t->end = offsets[1];
    }
    free(offsets);
    return ok;
}

/* Which keys of a tensor object were read. */
typedef struct {
    bool dtype, shape, offsets;
} keys_seen;

/* Reads one key of a tensor object and its value into `t`; skips the value of another key. */
static bool parse_tensor_key(json_reader *r, sf_tensor *t, keys_seen *seen) {
    char what[NAME_IN_MESSAGE + 64];
    snprintf(what, sizeof what, "a key of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
    char *key = NULL;
    if (!json_string_ex(r, &key, what, true) || !json_expect(r, ':', "after a key")) {
        free(key);
        return false;
    }
    bool *flag = strcmp(key, "dtype") == 0          ? &seen->dtype
                 : strcmp(key, "shape") == 0        ? &seen->shape
                 : strcmp(key, "data_offsets") == 0 ? &seen->offsets
                                                    : NULL;
    bool ok;
    if (flag == NULL) {
        ok = json_skip_value(r, 2); /* the header's object and this tensor's are open */
    } else if (*flag) {
        ok = json_fail(r, "tensor '%.*s' has key '%s' twice", NAME_IN_MESSAGE, t->name, key);
    } else if (flag == &seen->dtype) {
        snprintf(what, sizeof what, "the dtype of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
        ok = parse_dtype(r, t, what);
    } else if (flag == &seen->shape) {
        snprintf(what, sizeof what, "the shape of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
        ok = json_uint_array(r, &t->shape, &t->rank, what);
    } else {
        snprintf(what, sizeof what, "the data_offsets of tensor '%.*s'", NAME_IN_MESSAGE,
                 t->name);
        ok = parse_offsets(r, t, what);
    }
    if (flag != NULL) {
        *flag = true;
    }
    free(key);
    return ok;
}

/* Reads the array form of a tensor, [dtype, shape, data_offsets], after its '['. */
static bool parse_tensor_array(json_reader *r, sf_tensor *t) {
    char what[NAME_IN_MESSAGE + 64];
    snprintf(what, sizeof what, "the dtype of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
    if (!parse_dtype(r, t, what) || !json_expect(r, ',', "after a tensor's dtype")) {
        return false;
    }
    snprintf(what, sizeof what, "the shape of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
    if (!json_uint_array(r, &t->shape, &t->rank, what) ||
        !json_expect(r, ',', "after a tensor's shape")) {
        return false;
    }
    snprintf(what, sizeof what, "the data_offsets of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
    return parse_offsets(r, t, what) &&
           json_expect(r, ']', "after a tensor's data_offsets (3 items)");
}

/* Reads a tensor (an object or an array) into `t`, whose name is set. */
static bool parse_tensor(json_reader *r, sf_tensor *t) {
    if (json_accept(r, '[')) {
        return parse_tensor_array(r, t);
    }
    char where[NAME_IN_MESSAGE + 64];
    snprintf(where, sizeof where, "to start tensor '%.*s'", NAME_IN_MESSAGE, t->name);
    if (!json_expect(r, '{', where)) {
        return false;
    }
    keys_seen seen = {false, false, false};
    if (!json_accept(r, '}')) {
        do {
            if (!parse_tensor_key(r, t, &seen)) {
                return false;
            }
        } while (json_accept(r, ','));
        snprintf(where, sizeof where, "or ',' in tensor '%.*s'", NAME_IN_MESSAGE, t->name);
        if (!json_expect(r, '}', where)) {
            return false;
        }
    }
    const char *missing = !seen.dtype     ? "dtype"
                          : !seen.shape   ? "shape"
                          : !seen.offsets ? "data_offsets"
                                          : NULL;
    if (missing != NULL) {
        return json_fail(r, "tensor '%.*s' has no '%s'", NAME_IN_MESSAGE, t->name, missing);
    }
    return true;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const sf_tensor *)a)->name, ((const sf_tensor *)b)->name);
}

/* By name, then by position in the header. */
static int by_name_and_order(const void *a, const void *b) {
    int c = by_name(a, b);
    size_t x = ((const sf_tensor *)a)->order, y = ((const sf_tensor *)b)->order;
    return c != 0 ? c : (x > y) - (x < y);
}

static void free_tensor(sf_tensor *t) {
    free(t->name);
    free(t->dtype);
    free(t->shape);
}

/* Keeps the last definition of each name (sorted by name and order), as the reference does. */
static void drop_redefined(sf_header *h) {
    size_t kept = 0;
    for (size_t i = 0; i < h->count; i++) {
        if (i + 1 < h->count && strcmp(h->tensors[i].name, h->tensors[i + 1].name) == 0) {
            free_tensor(&h->tensors[i]);
        } else {
            h->tensors[kept++] = h->tensors[i];
        }
    }
    h->count = kept;
}

/* Appends an empty tensor called `name` (taking ownership of it) to the header. */
static sf_tensor *add_tensor(json_reader *r, sf_header *h, size_t *cap, char *name) {
    if (h->count == *cap) {
        size_t bigger = *cap == 0 ? 16 : *cap * 2;
        sf_tensor *grown = bigger > SIZE_MAX / sizeof *grown
                               ? NULL
                               : realloc(h->tensors, bigger * sizeof *grown);
        if (grown == NULL) {
            free(name);
            r->out_of_memory = true;
            json_fail(r, "out of memory");
            return NULL;
        }
        h->tensors = grown;
        *cap = bigger;
    }
    sf_tensor *t = &h->tensors[h->count];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->order = h->count++;
    return t;
}

bool sf_parse_header(json_reader *r, sf_header *h) {
    h->tensors = NULL;
    h->count = 0;
    size_t cap = 0;
    bool have_metadata = false;
    if (!json_expect(r, '{', "at the start of the header")) {
        return false;
    }
    if (!json_accept(r, '}')) {
        do {
            char *key = NULL;
            if (!json_string(r, &key, "a tensor name") ||
                !json_expect(r, ':', "after a tensor name")) {
                free(key);
                return false;
            }
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (have_metadata) {
                    return json_fail(r, "\"__metadata__\" appears twice");
                }
                have_metadata = true;
                if (!parse_metadata(r)) {
                    return false;
                }
                continue;
            }
            sf_tensor *t = add_tensor(r, h, &cap, key);
            if (t == NULL || !parse_tensor(r, t)) {
                return false;
            }
        } while (json_accept(r, ','));
        if (!json_expect(r, '}', "or ',' after a tensor")) {
            return false;
        }
    }
    if (!json_at_end(r)) {
        return json_fail(r, "unexpected text after the header's object");
    }
    if (h->count > 1) {
        qsort(h->tensors, h->count, sizeof *h->tensors, by_name_and_order);
        drop_redefined(h);
    }
    return true;
}

void sf_header_free(sf_header *h) {
    for (size_t i = 0; i < h->count; i++) {
        free_tensor(&h->tensors[i]);
    }
    free(h->tensors);
    h->tensors = NULL;
    h->count = 0;
}

const sf_tensor *sf_find(const sf_header *h, const char *name) {
    if (h->count == 0) {
        return NULL;
    }
    sf_tensor key = {.name = (char *)name};
    return bsearch(&key, h->tensors, h->count, sizeof key, by_name);
}

/* By data_offsets: begin, then end. */
static int by_offsets(const void *a, const void *b) {
    const sf_tensor *x = *(const sf_tensor *const *)a, *y = *(const sf_tensor *const *)b;
    if (x->begin != y->begin) {
        return x->begin < y->begin ? -1 : 1;
    }
    return (x->end > y->end) - (x->end < y->end);
}

/* Describes into `message` why tensor t, where the data so far ends at `start`, does not fit. */
static void describe_misfit(const sf_tensor *t, uint64_t start, char *message, size_t cap) {
    int n = snprintf(message, cap, "tensor '%.*s' has data_offsets [%" PRIu64 ", %" PRIu64 "], ",
                     NAME_IN_MESSAGE, t->name, t->begin, t->end);
    size_t used = n > 0 && (size_t)n < cap ? (size_t)n : cap - 1;
    if (t->end < t->begin) {
        snprintf(message + used, cap - used, "which are not a range of bytes");
    } else if (t->begin < start) {
        snprintf(message + used, cap - used,
                 "which overlap the data of another tensor (which ends at byte %" PRIu64 ")",
                 start);
    } else {
        snprintf(message + used, cap - used,
                 "which leave bytes [%" PRIu64 ", %" PRIu64 ") of the data unused", start,
                 t->begin);
    }
}

bool sf_check_layout(const sf_header *h, size_t data_len, char *message, size_t cap) {
    const sf_tensor **order = malloc((h->count ? h->count : 1) * sizeof *order);
    if (order == NULL) {
        snprintf(message, cap, "out of memory");
        return false;
    }
    for (size_t i = 0; i < h->count; i++) {
        order[i] = &h->tensors[i];
    }
    qsort(order, h->count, sizeof *order, by_offsets);
    /* The data section is the tensors' data back to back, from 0 to its end. */
    uint64_t start = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < h->count; i++) {
        ok = order[i]->begin == start && order[i]->end >= order[i]->begin;
        if (!ok) {
            describe_misfit(order[i], start, message, cap);
        }
        start = order[i]->end;
    }
    if (ok && start != data_len) {
        ok = false;
        snprintf(message, cap,
                 "the data section has %zu bytes, but the tensors' data ends at byte %" PRIu64,
                 data_len, start);
    }
    free(order);
    return ok;
}

/* safetensors_header.c: parses a safetensors header, a JSON object that maps "__metadata__" to
 * an object of strings and each tensor name to {"dtype", "shape", "data_offsets"}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "safetensors.h"

/* Longest part of a tensor name quoted in a message. */
#define NAME_IN_MESSAGE 64

static bool parse_metadata(json_reader *r) {
    if (!json_expect(r, '{', "to start \"__metadata__\"")) {
        return false;
    }
    if (json_accept(r, '}')) {
        return true;
    }
    do {
        char *key = NULL;
        char *value = NULL;
        bool ok = json_string(r, &key, "a key of \"__metadata__\"") &&
                  json_expect(r, ':', "after a key of \"__metadata__\"") &&
                  json_string(r, &value, "a value of \"__metadata__\"");
        free(key);
        free(value);
        if (!ok) {
            return false;
        }
    } while (json_accept(r, ','));
    return json_expect(r, '}', "or ',' in \"__metadata__\"");
}

/* Which keys of a tensor object were read. */
typedef struct {
    bool dtype, shape, offsets;
} keys_seen;

/* Reads one key of a tensor object and its value into `t`. */
static bool parse_tensor_key(json_reader *r, sf_tensor *t, keys_seen *seen) {
    char what[NAME_IN_MESSAGE + 64];
    snprintf(what, sizeof what, "a key of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
    char *key = NULL;
    if (!json_string(r, &key, what) || !json_expect(r, ':', "after a key")) {
        free(key);
        return false;
    }
    bool *flag = strcmp(key, "dtype") == 0          ? &seen->dtype
                 : strcmp(key, "shape") == 0        ? &seen->shape
                 : strcmp(key, "data_offsets") == 0 ? &seen->offsets
                                                    : NULL;
    bool ok;
    if (flag == NULL) {
        ok = json_fail(r, "tensor '%.*s' has an unknown key '%.*s'", NAME_IN_MESSAGE, t->name,
                       NAME_IN_MESSAGE, key);
    } else if (*flag) {
        ok = json_fail(r, "tensor '%.*s' has key '%s' twice", NAME_IN_MESSAGE, t->name, key);
    } else if (flag == &seen->dtype) {
        snprintf(what, sizeof what, "the dtype of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
        ok = json_string(r, &t->dtype, what);
    } else if (flag == &seen->shape) {
        snprintf(what, sizeof what, "the shape of tensor '%.*s'", NAME_IN_MESSAGE, t->name);
        ok = json_int_array(r, &t->shape, &t->rank, what);
    } else {
        snprintf(what, sizeof what, "the data_offsets of tensor '%.*s'", NAME_IN_MESSAGE,
                 t->name);
        int64_t *offsets = NULL;
        size_t count = 0;
        ok = json_int_array(r, &offsets, &count, what);
        if (ok && count != 2) {
            ok = json_fail(r, "%s has %zu numbers, expected 2", what, count);
        }
        if (ok) {
            t->begin = offsets[0];
            t->end = offsets[1];
        }
        free(offsets);
    }
    if (flag != NULL) {
        *flag = true;
    }
    free(key);
    return ok;
}

/* Reads a tensor object into `t` (whose name is set) and checks its values. */
static bool parse_tensor(json_reader *r, sf_tensor *t) {
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
    for (size_t k = 0; k < t->rank; k++) {
        if (t->shape[k] < 0) {
            return json_fail(r, "tensor '%.*s' has a negative dimension", NAME_IN_MESSAGE,
                             t->name);
        }
    }
    if (t->begin < 0 || t->end < t->begin) {
        return json_fail(r, "the data_offsets of tensor '%.*s' are not a range of bytes",
                         NAME_IN_MESSAGE, t->name);
    }
    return true;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const sf_tensor *)a)->name, ((const sf_tensor *)b)->name);
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
        qsort(h->tensors, h->count, sizeof *h->tensors, by_name);
    }
    for (size_t i = 1; i < h->count; i++) {
        if (strcmp(h->tensors[i - 1].name, h->tensors[i].name) == 0) {
            snprintf(r->message, sizeof r->message, "tensor '%.*s' appears twice",
                     NAME_IN_MESSAGE, h->tensors[i].name);
            return false;
        }
    }
    return true;
}

void sf_header_free(sf_header *h) {
    for (size_t i = 0; i < h->count; i++) {
        free(h->tensors[i].name);
        free(h->tensors[i].dtype);
        free(h->tensors[i].shape);
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

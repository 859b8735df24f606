/* safetensors_load.c: dlrt_load, which reads a whole safetensors file, checks every tensor
 * against the caller's entries, and only then copies the data: a failed load changes nothing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "json.h"
#include "safetensors.h"

/* Reads the whole regular file `path` into *out (malloc'd) and its length into *size. */
static dlrt_status read_file(const char *path, unsigned char **out, size_t *size) {
    char reason[128];
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int err = errno;
        if (strerror_r(err, reason, sizeof reason) != 0) {
            snprintf(reason, sizeof reason, "error %d", err);
        }
        return dlrt_error(DLRT_ERR_IO, "dlrt_load: cannot open '%s': %s", path, reason);
    }
    dlrt_status status = DLRT_OK;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        status = dlrt_error(DLRT_ERR_IO, "dlrt_load: '%s' is not a regular file", path);
    } else if ((uintmax_t)st.st_size >= SIZE_MAX) {
        status = dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_load: '%s' is too large to read", path);
    } else {
        *size = (size_t)st.st_size;
        *out = malloc(*size == 0 ? 1 : *size);
        if (*out == NULL) {
            status = dlrt_error(DLRT_ERR_OUT_OF_MEMORY,
                                "dlrt_load: cannot allocate %zu bytes to read '%s'", *size, path);
        } else if (fread(*out, 1, *size, f) != *size) {
            status = dlrt_error(DLRT_ERR_IO, "dlrt_load: cannot read '%s': %s", path,
                                ferror(f) ? "read error" : "the file shrank while it was read");
        }
    }
    fclose(f);
    if (status != DLRT_OK) {
        free(*out);
        *out = NULL;
    }
    return status;
}

/* Everything dlrt_load learns before it copies. */
typedef struct {
    const char *path;
    const dlrt_tensor *ts;
    size_t n;
    size_t required;
    const size_t *bytes;          /* size of each entry */
    const dlrt_tensor **sorted;   /* entries by name */
    const unsigned char *data;    /* the data section, after the header */
    size_t data_len;
    int64_t *begin;               /* where each entry's data starts in data; -1: not in the file */
} load_plan;

/* The first tensor, in header order, for which the file has no entry; NULL when none. */
static const sf_tensor *first_unexpected(const load_plan *p, const sf_header *h) {
    const sf_tensor *first = NULL;
    for (size_t k = 0; k < h->count; k++) {
        const sf_tensor *t = &h->tensors[k];
        if (sf_find_entry(p->sorted, p->n, t->name) == NULL &&
            (first == NULL || t->order < first->order)) {
            first = t;
        }
    }
    return first;
}

/* Writes a file's shape "[2, 3]" into buf, cut with "..." when it does not fit. */
static void format_file_shape(char *buf, size_t cap, const uint64_t *shape, size_t rank) {
    int64_t small[8];
    bool fits = rank <= 8;
    for (size_t k = 0; fits && k < rank; k++) {
        fits = shape[k] <= INT64_MAX;
        small[k] = fits ? (int64_t)shape[k] : 0;
    }
    if (fits) {
        dlrt_format_shape(buf, cap, small, rank);
    } else { /* a long shape, or dimensions past 2^63: say what it is instead */
        snprintf(buf, cap, "(%zu dimensions)", rank);
    }
}

/* Checks entry i against its tensor t in the file: dtype, shape, size and bool values. */
static dlrt_status check_match(const load_plan *p, size_t i, const sf_tensor *t) {
    const dlrt_tensor *e = &p->ts[i];
    const char *tag = dlrt_dtype_tag(e->dtype);
    bool same_shape = t->rank == (size_t)e->rank;
    for (size_t k = 0; same_shape && k < t->rank; k++) {
        same_shape = t->shape[k] == (uint64_t)e->shape[k];
    }
    if (strcmp(t->dtype, tag) != 0 || !same_shape) {
        char got[96], want[96];
        format_file_shape(got, sizeof got, t->shape, t->rank);
        dlrt_format_shape(want, sizeof want, e->shape, (size_t)e->rank);
        return dlrt_error(DLRT_ERR_FORMAT,
                          "dlrt_load: '%s': tensor '%s' is %.16s %s in the file, expected %s %s",
                          p->path, e->name, t->dtype, got, tag, want);
    }
    if (t->end - t->begin != p->bytes[i]) {
        return dlrt_error(DLRT_ERR_FORMAT,
                          "dlrt_load: '%s': tensor '%s' has %" PRIu64
                          " bytes of data in the file, expected %zu",
                          p->path, e->name, t->end - t->begin, p->bytes[i]);
    }
    if (e->dtype == DLRT_BOOL) {
        const unsigned char *bytes = p->data + t->begin;
        size_t bad = sf_first_bad_bool(bytes, p->bytes[i]);
        if (bad < p->bytes[i]) {
            return dlrt_error(DLRT_ERR_FORMAT,
                              "dlrt_load: '%s': bool tensor '%s' holds %u at element %zu (bools "
                              "are 0 or 1)",
                              p->path, e->name, bytes[bad], bad);
        }
    }
    return DLRT_OK;
}

/* Checks the file's tensors (their offsets, then against the entries) and fills p->begin. */
static dlrt_status check_tensors(load_plan *p, const sf_header *h) {
    for (size_t k = 0; k < h->count; k++) {
        const sf_tensor *t = &h->tensors[k];
        if (t->end > p->data_len || t->end < t->begin) {
            return dlrt_error(DLRT_ERR_FORMAT,
                              "dlrt_load: '%s': tensor '%s' has data_offsets [%" PRIu64
                              ", %" PRIu64 "] %s%zu bytes of data%s",
                              p->path, t->name, t->begin, t->end,
                              t->end < t->begin ? "(not a range of bytes) in the " : "past the ",
                              p->data_len, t->end < t->begin ? "" : " (truncated file?)");
        }
    }
    const sf_tensor *extra = first_unexpected(p, h);
    if (extra != NULL) {
        return dlrt_error(DLRT_ERR_FORMAT, "dlrt_load: '%s': unexpected tensor '%s' in the file",
                          p->path, extra->name);
    }
    for (size_t i = 0; i < p->required; i++) {
        if (sf_find(h, p->ts[i].name) == NULL) {
            return dlrt_error(DLRT_ERR_FORMAT,
                              "dlrt_load: '%s': tensor '%s' is missing from the file", p->path,
                              p->ts[i].name);
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        const sf_tensor *t = sf_find(h, p->ts[i].name);
        dlrt_status status = t == NULL ? DLRT_OK : check_match(p, i, t);
        if (status != DLRT_OK) {
            return status;
        }
        p->begin[i] = t == NULL ? -1 : (int64_t)t->begin; /* at most data_len */
    }
    /* Last, since a mismatch above says more: no overlap, hole or trailing byte. */
    char why[256];
    if (!sf_check_layout(h, p->data_len, why, sizeof why)) {
        return dlrt_error(DLRT_ERR_FORMAT, "dlrt_load: '%s': %s", p->path, why);
    }
    return DLRT_OK;
}

/* Splits the file into header and data, parses the header and checks every tensor. */
static dlrt_status check_file(load_plan *p, const unsigned char *file, size_t size) {
    if (size < 8) {
        return dlrt_error(DLRT_ERR_FORMAT,
                          "dlrt_load: '%s' has %zu bytes, too few for a safetensors file "
                          "(truncated?)",
                          p->path, size);
    }
    uint64_t header_len = 0;
    for (int k = 7; k >= 0; k--) {
        header_len = header_len << 8 | file[k];
    }
    if (header_len > SF_MAX_HEADER) {
        return dlrt_error(DLRT_ERR_FORMAT,
                          "dlrt_load: '%s': the header length %" PRIu64
                          " is more than safetensors allows (%u bytes)",
                          p->path, header_len, SF_MAX_HEADER);
    }
    if (header_len > size - 8) {
        return dlrt_error(DLRT_ERR_FORMAT,
                          "dlrt_load: '%s': the header length %" PRIu64
                          " is more than the %zu bytes after it (truncated file?)",
                          p->path, header_len, size - 8);
    }
    json_reader r = {.text = (const char *)file + 8, .len = (size_t)header_len};
    sf_header h;
    dlrt_status status = DLRT_OK;
    if (!sf_parse_header(&r, &h)) {
        status = dlrt_error(r.out_of_memory ? DLRT_ERR_OUT_OF_MEMORY : DLRT_ERR_FORMAT,
                            "dlrt_load: '%s': bad header: %s", p->path, r.message);
    } else {
        p->data = file + 8 + header_len;
        p->data_len = size - 8 - (size_t)header_len;
        status = check_tensors(p, &h);
    }
    sf_header_free(&h);
    return status;
}

dlrt_status dlrt_load(const char *path, const dlrt_tensor *ts, size_t n, size_t required) {
    if (path == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_load: argument 'path' is NULL");
    }
    if (ts == NULL && n > 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "dlrt_load: argument 'ts' is NULL but n is %zu", n);
    }
    if (required > n) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "dlrt_load: argument 'required' (%zu) is more than n (%zu)", required,
                          n);
    }
    if (n > SIZE_MAX / (sizeof(size_t) + sizeof(int64_t))) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_load: n (%zu) is too large", n);
    }
    size_t slots = n == 0 ? 1 : n;
    size_t *bytes = malloc(slots * sizeof *bytes);
    int64_t *begin = malloc(slots * sizeof *begin);
    const dlrt_tensor **sorted = NULL;
    unsigned char *file = NULL;
    size_t size = 0;
    dlrt_status status;
    if (bytes == NULL || begin == NULL) {
        status = dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_load: cannot allocate %zu entries", n);
    } else if ((status = sf_check_entries("dlrt_load", ts, n, bytes, &sorted)) == DLRT_OK &&
               (status = read_file(path, &file, &size)) == DLRT_OK) {
        load_plan plan = {.path = path, .ts = ts, .n = n, .required = required, .bytes = bytes,
                          .sorted = sorted, .begin = begin};
        status = check_file(&plan, file, size);
        /* Everything checked: only now touch the caller's buffers. */
        for (size_t i = 0; status == DLRT_OK && i < n; i++) {
            if (begin[i] >= 0 && bytes[i] > 0) {
                memcpy(ts[i].data, plan.data + begin[i], bytes[i]);
            }
        }
    }
    free(file);
    free(sorted);
    free(begin);
    free(bytes);
    return status;
}

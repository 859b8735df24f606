/* safetensors_save.c: dlrt_save, which writes tensors in the safetensors format atomically
 * (docs/c-abi.md section 3): a temporary file of its own (safetensors_temp.c), flushed and
 * synced, renamed over the target. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "json.h"
#include "safetensors.h"

/* The text of errno value `err`, thread-safely. */
static const char *describe(int err, char *buf, size_t cap) {
    if (err == 0) {
        return "unknown error";
    }
    if (strerror_r(err, buf, cap) != 0) {
        snprintf(buf, cap, "error %d", err);
    }
    return buf;
}

/* Fills order[] with the entries in the order their data is written: 8-byte types first, then
   4-, 2- and 1-byte types, each group in the given order. Every tensor thus starts at a
   multiple of its element size (the data begins 8-byte aligned), without gaps, which the
   format forbids. Sets offsets[i] to entry i's data offset. */
static void lay_out(const dlrt_tensor *ts, size_t n, const size_t *bytes, size_t *order,
                    int64_t *offsets) {
    size_t k = 0;
    int64_t offset = 0;
    for (size_t size = 8; size >= 1; size /= 2) {
        for (size_t i = 0; i < n; i++) {
            if (dlrt_dtype_size(ts[i].dtype) == size) {
                order[k++] = i;
                offsets[i] = offset;
                offset += (int64_t)bytes[i];
            }
        }
    }
}

/* Writes the JSON header: metadata first, then the tensors in the given order, padded with
   spaces to a multiple of 8 bytes. */
static void write_header(json_writer *w, const char *model, const dlrt_tensor *ts, size_t n,
                         const size_t *bytes, const int64_t *offsets) {
    json_raw(w, "{\"__metadata__\":{\"format\":\"dlvm\",\"model\":");
    json_quoted(w, model);
    json_raw(w, "}");
    for (size_t i = 0; i < n; i++) {
        json_raw(w, ",");
        json_quoted(w, ts[i].name);
        json_raw(w, ":{\"dtype\":");
        json_quoted(w, dlrt_dtype_tag(ts[i].dtype));
        json_raw(w, ",\"shape\":[");
        for (int32_t axis = 0; axis < ts[i].rank; axis++) {
            if (axis > 0) {
                json_raw(w, ",");
            }
            json_int64(w, ts[i].shape[axis]);
        }
        json_raw(w, "],\"data_offsets\":[");
        json_int64(w, offsets[i]);
        json_raw(w, ",");
        json_int64(w, offsets[i] + (int64_t)bytes[i]);
        json_raw(w, "]}");
    }
    json_raw(w, "}");
    while (!w->failed && w->len % 8 != 0) {
        json_raw(w, " ");
    }
}

/* Writes header and data to `f`; 0, or the errno of the first failure (-1 when unknown). */
static int write_contents(FILE *f, const json_writer *header, const dlrt_tensor *ts, size_t n,
                          const size_t *bytes, const size_t *order) {
    unsigned char length[8];
    for (int k = 0; k < 8; k++) {
        length[k] = (unsigned char)((uint64_t)header->len >> (8 * k));
    }
    errno = 0;
    bool ok = fwrite(length, 1, 8, f) == 8 &&
              fwrite(header->data, 1, header->len, f) == header->len;
    for (size_t k = 0; ok && k < n; k++) {
        size_t i = order[k];
        ok = bytes[i] == 0 || fwrite(ts[i].data, 1, bytes[i], f) == bytes[i];
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    return ok ? 0 : (errno != 0 ? errno : -1);
}

/* Writes a temporary file beside `path` (sf_temp_create), syncs it and renames it over `path`,
   then syncs the directory and removes what killed saves to `path` left; on any failure the
   temporary file is removed and `path` is untouched. */
static dlrt_status write_atomically(const char *path, const json_writer *header,
                                    const dlrt_tensor *ts, size_t n, const size_t *bytes,
                                    const size_t *order) {
    char reason[128];
    char *temp = NULL;
    int fd = sf_temp_create(path, sf_random, &temp);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (f == NULL) {
        int err = errno;
        if (fd >= 0) {
            close(fd);
            unlink(temp);
        }
        free(temp);
        return dlrt_error(DLRT_ERR_IO, "dlrt_save: cannot create a temporary file beside '%s': %s",
                          path, describe(err, reason, sizeof reason));
    }
    int err = write_contents(f, header, ts, n, bytes, order);
    if (fclose(f) != 0 && err == 0) {
        err = errno != 0 ? errno : -1;
    }
    dlrt_status status = DLRT_OK;
    if (err != 0) {
        status = dlrt_error(DLRT_ERR_IO, "dlrt_save: cannot write '%s': %s", temp,
                            describe(err < 0 ? 0 : err, reason, sizeof reason));
    } else if (rename(temp, path) != 0) {
        status = dlrt_error(DLRT_ERR_IO, "dlrt_save: cannot rename '%s' to '%s': %s", temp, path,
                            describe(errno, reason, sizeof reason));
    }
    if (status != DLRT_OK) {
        unlink(temp); /* the file this call created, never anything else */
    } else {
        sf_sync_directory(path);
        sf_remove_stale_temps(path);
    }
    free(temp);
    return status;
}

/* Checks the data of every bool tensor holds only 0 and 1, so the file loads back. */
static dlrt_status check_bools(const dlrt_tensor *ts, size_t n, const size_t *bytes) {
    for (size_t i = 0; i < n; i++) {
        if (ts[i].dtype != DLRT_BOOL) {
            continue;
        }
        size_t bad = sf_first_bad_bool(ts[i].data, bytes[i]);
        if (bad < bytes[i]) {
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                              "dlrt_save: bool tensor '%s' holds %u at element %zu (bools are 0 "
                              "or 1)",
                              ts[i].name, ((const unsigned char *)ts[i].data)[bad], bad);
        }
    }
    return DLRT_OK;
}

/* Checks the arguments of dlrt_save (entries in sf_check_entries) and the total size. */
static dlrt_status check_arguments(const char *path, const char *model, const dlrt_tensor *ts,
                                   size_t n) {
    if (path == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_save: argument 'path' is NULL");
    }
    if (path[0] == '\0') {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_save: argument 'path' is empty");
    }
    if (model == NULL) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_save: argument 'model' is NULL");
    }
    if (!dlrt_valid_utf8(model, strlen(model))) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "dlrt_save: argument 'model' is not valid UTF-8");
    }
    if (ts == NULL && n > 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "dlrt_save: argument 'ts' is NULL but n is %zu", n);
    }
    if (n > SIZE_MAX / (2 * sizeof(size_t) + sizeof(int64_t))) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_save: n (%zu) is too large", n);
    }
    return DLRT_OK;
}

dlrt_status dlrt_save(const char *path, const char *model, const dlrt_tensor *ts, size_t n) {
    dlrt_status status = check_arguments(path, model, ts, n);
    if (status != DLRT_OK) {
        return status;
    }
    size_t slots = n == 0 ? 1 : n;
    size_t *bytes = malloc(slots * sizeof *bytes);
    size_t *order = malloc(slots * sizeof *order);
    int64_t *offsets = malloc(slots * sizeof *offsets);
    const dlrt_tensor **sorted = NULL;
    json_writer header = {NULL, 0, 0, false};
    if (bytes == NULL || order == NULL || offsets == NULL) {
        status = dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_save: cannot allocate %zu entries", n);
        goto done;
    }
    status = sf_check_entries("dlrt_save", ts, n, bytes, &sorted);
    if (status != DLRT_OK || (status = check_bools(ts, n, bytes)) != DLRT_OK) {
        goto done;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!dlrt_checked_add(total, bytes[i], &total) || total > INT64_MAX) {
            status = dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                                "dlrt_save: the tensors are too large: their total size "
                                "overflows");
            goto done;
        }
    }
    lay_out(ts, n, bytes, order, offsets);
    write_header(&header, model, ts, n, bytes, offsets);
    if (header.failed) {
        status = dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_save: cannot allocate the header");
        goto done;
    }
    status = write_atomically(path, &header, ts, n, bytes, order);
done:
    json_writer_free(&header);
    free(sorted);
    free(offsets);
    free(order);
    free(bytes);
    return status;
}

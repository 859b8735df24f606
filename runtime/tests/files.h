/* files.h: helpers of the safetensors tests: a private directory of test files, writing and
 * reading files byte for byte, and the entry `w` (an F32 [2]) that malformed files are loaded
 * into. */
#ifndef DLRT_TEST_FILES_H_
#define DLRT_TEST_FILES_H_

#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dir[256];

/* dir/name, in a static buffer: the next call overwrites it. */
static inline const char *in_dir(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static inline void write_bytes(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s", path);
    if (f != NULL) {
        CHECK(fwrite(bytes, 1, len, f) == len, "cannot write %s", path);
        fclose(f);
    }
}

/* The whole file (malloc'd), or NULL when it cannot be read. */
static inline unsigned char *read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    unsigned char *bytes = malloc(1 << 20);
    *len = fread(bytes, 1, 1 << 20, f);
    fclose(f);
    return bytes;
}

/* Writes a file with the given header text and data. */
static inline void write_file(const char *path, const char *header, const void *data,
                              size_t data_len) {
    size_t header_len = strlen(header);
    size_t total = 8 + header_len + data_len;
    unsigned char *bytes = malloc(total);
    for (int k = 0; k < 8; k++) {
        bytes[k] = (unsigned char)((uint64_t)header_len >> (8 * k));
    }
    memcpy(bytes + 8, header, header_len);
    if (data_len > 0) {
        memcpy(bytes + 8 + header_len, data, data_len);
    }
    write_bytes(path, bytes, total);
    free(bytes);
}

static inline int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* How many temporary files of saves to `path` (named "<base>.tmp…") its directory holds. */
static inline int temporaries(const char *path) {
    char parent[512];
    const char *slash = strrchr(path, '/');
    const char *base = slash == NULL ? path : slash + 1;
    snprintf(parent, sizeof parent, "%.*s", slash == NULL ? 1 : (int)(slash - path),
             slash == NULL ? "." : path);
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s.tmp", base);
    int count = 0;
    DIR *d = opendir(parent);
    struct dirent *entry;
    while (d != NULL && (entry = readdir(d)) != NULL) {
        count += strncmp(entry->d_name, prefix, strlen(prefix)) == 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return count;
}

/* Makes the test directory in $TMPDIR (else /tmp); false when it cannot. */
static inline int open_test_dir(const char *test) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dlrt-test-XXXXXX", tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "%s: cannot create a directory in %s\n", test, dir);
        return 0;
    }
    return 1;
}

/* Removes the test directory and the files the test wrote in it. */
static inline void close_test_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *entry;
    while (d != NULL && (entry = readdir(d)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
            CHECK(unlink(in_dir(entry->d_name)) == 0, "remove %s", entry->d_name);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    CHECK(rmdir(dir) == 0, "remove %s", dir);
}

/* The entry files are loaded into: w, an F32 [2]. */
static float w_data[2];
static const int64_t w_shape[] = {2};
static const dlrt_tensor w_entry[] = {{"w", DLRT_F32, 1, w_shape, w_data}};

#endif /* DLRT_TEST_FILES_H_ */

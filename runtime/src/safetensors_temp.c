/* safetensors_temp.c: the temporary files of atomic saves (docs/c-abi.md section 3).
 *
 * A save writes `<path>.tmp-<host>-<pid>-<random>` beside `path`, created exclusively and never
 * through a symbolic link (O_CREAT | O_EXCL | O_NOFOLLOW), so two savers (threads or processes)
 * never share one and a link planted at any name is never followed. <host> is a hash of the
 * host name, <pid> the saving process, <random> 48 random bits (another name is tried when one
 * exists).
 *
 * A process killed while it saves leaves its temporary file behind. The next successful save to
 * the same path removes those whose process is gone: same host, another pid that kill(pid, 0)
 * says does not exist, a regular file of ours. A live process's temporary file is never touched
 * (this process's other threads, or another saver), nor one from another host sharing the
 * directory (its pid means nothing here). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#include "safetensors.h"

/* Names of temporary files keep within NAME_MAX bytes: the target's name is cut to fit. */
#define NAME_LIMIT 255
/* "-" and 12 hex digits of randomness end every temporary file's name. */
#define RANDOM_DIGITS 12
/* How many names a save tries before it gives up. */
#define ATTEMPTS 64

static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

uint64_t sf_random(void) {
    uint64_t value = 0;
#if defined(__linux__)
    if (getrandom(&value, sizeof value, GRND_NONBLOCK) == (ssize_t)sizeof value) {
        return value;
    }
#endif
    /* No entropy source: unique all the same (O_EXCL decides), only less hard to guess. */
    static atomic_uint_fast64_t counter;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    value = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    return splitmix64(value ^ splitmix64(atomic_fetch_add(&counter, 1) ^ (uint64_t)getpid()));
}

/* A 32-bit FNV-1a hash of the host name: temporary files of other hosts are not ours. */
static uint32_t host_hash(void) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) {
        host[0] = '\0';
    }
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)host; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return h;
}

/* The directory part of `path` ("." when none) and where its last component starts. */
static char *split_path(const char *path, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash == NULL ? path : slash + 1;
    size_t len = slash == NULL ? 1 : (slash == path ? 1 : (size_t)(slash - path));
    char *dir = malloc(len + 1);
    if (dir != NULL) {
        memcpy(dir, slash == NULL ? "." : path, len);
        dir[len] = '\0';
    }
    return dir;
}

/* "<base>.tmp-<host>-" for `path`'s base name, cut so a whole name fits NAME_LIMIT. */
static void temp_prefix(const char *base, char *out, size_t cap) {
    /* ".tmp-" + 8 + "-" + a pid of at most 10 digits + "-" + the random digits. */
    size_t suffix = 5 + 8 + 1 + 10 + 1 + RANDOM_DIGITS;
    size_t keep = strlen(base);
    if (keep > NAME_LIMIT - suffix) {
        keep = NAME_LIMIT - suffix;
    }
    snprintf(out, cap, "%.*s.tmp-%08" PRIx32 "-", (int)keep, base, host_hash());
}

int sf_temp_create(const char *path, uint64_t (*draw)(void), char **name) {
    *name = NULL;
    const char *base;
    char *dir = split_path(path, &base);
    char prefix[NAME_LIMIT + 1];
    size_t cap = strlen(path) + NAME_LIMIT + 2;
    char *temp = dir == NULL ? NULL : malloc(cap);
    free(dir);
    if (temp == NULL) {
        errno = ENOMEM;
        return -1;
    }
    temp_prefix(base, prefix, sizeof prefix);
    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < ATTEMPTS; attempt++) {
        uint64_t r = draw() & ((UINT64_C(1) << (4 * RANDOM_DIGITS)) - 1);
        snprintf(temp, cap, "%.*s%s%ld-%0*" PRIx64, (int)(base - path), path, prefix,
                 (long)getpid(), RANDOM_DIGITS, r);
        fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) {
            break;
        }
    }
    if (fd < 0) {
        int err = errno;
        free(temp);
        errno = err;
        return -1;
    }
    *name = temp;
    return fd;
}

/* The pid of temporary file `name` (which starts with the prefix of `prefix_len` bytes), or 0
   when the rest is not "<pid>-<random digits>". */
static pid_t temp_pid(const char *name, size_t prefix_len) {
    const char *p = name + prefix_len;
    long pid = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) {
        pid = pid * 10 + (*p - '0');
    }
    if (digits == 0 || *p != '-' || strlen(p + 1) != RANDOM_DIGITS) {
        return 0;
    }
    for (p++; *p != '\0'; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
            return 0;
        }
    }
    return (pid_t)pid;
}

/* Whether process `pid` of this host is gone (EPERM: it exists, as another user's). */
static int process_gone(pid_t pid) {
    return kill(pid, 0) != 0 && errno == ESRCH;
}

void sf_remove_stale_temps(const char *path) {
    const char *base;
    char *dir = split_path(path, &base);
    DIR *d = dir == NULL ? NULL : opendir(dir);
    free(dir);
    if (d == NULL) {
        return; /* best effort: the save itself succeeded */
    }
    char prefix[NAME_LIMIT + 1];
    temp_prefix(base, prefix, sizeof prefix);
    size_t prefix_len = strlen(prefix);
    int saved_errno = errno;
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        if (strncmp(entry->d_name, prefix, prefix_len) != 0) {
            continue;
        }
        pid_t pid = temp_pid(entry->d_name, prefix_len);
        struct stat st;
        if (pid > 0 && pid != getpid() && process_gone(pid) &&
            fstatat(dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
            (void)unlinkat(dirfd(d), entry->d_name, 0);
        }
    }
    closedir(d);
    errno = saved_errno;
}

void sf_sync_directory(const char *path) {
    const char *base;
    char *dir = split_path(path, &base);
    int fd = dir == NULL ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd >= 0) {
        (void)fsync(fd); /* some file systems cannot sync a directory: the file is complete */
        close(fd);
    }
}

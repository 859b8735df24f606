/* test_safetensors_atomic.c: saves are atomic across threads and processes and never follow a
 * symbolic link: each save has a temporary file of its own (created exclusively, never through
 * a link), two threads saving to one path while others read it never show a reader a missing,
 * partial or mixed file, and what killed savers leave behind is removed by the next save, while
 * the temporary files of live processes, of other hosts, and anything that is not a regular
 * file are kept. */
#include "files.h" /* first: it asks for POSIX */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "../src/safetensors.h" /* sf_temp_create, sf_random */

/* ---- symbolic links ---- */

static const char precious[] = "precious bytes";

static void make_victim(const char *victim) {
    write_bytes(victim, precious, sizeof precious);
}

static int victim_intact(const char *victim) {
    size_t len = 0;
    unsigned char *bytes = read_bytes(victim, &len);
    int same = bytes != NULL && len == sizeof precious && memcmp(bytes, precious, len) == 0;
    free(bytes);
    return same;
}

static int is_symlink(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static uint64_t draws[3];
static int next_draw;

static uint64_t scripted(void) {
    return draws[next_draw < 2 ? next_draw++ : 2];
}

static void test_planted_links(void) {
    char victim[512], path[512], name[600];
    snprintf(victim, sizeof victim, "%s", in_dir("victim"));
    snprintf(path, sizeof path, "%s", in_dir("linked.safetensors"));
    make_victim(victim);
    float w[2] = {1, 2};
    dlrt_tensor ts[] = {{"w", DLRT_F32, 1, w_shape, w}};

    /* The names earlier versions wrote through. */
    snprintf(name, sizeof name, "%s.tmp.%ld", path, (long)getpid());
    CHECK(symlink(victim, name) == 0, "plant %s", name);
    snprintf(name, sizeof name, "%s.tmp", path);
    CHECK(symlink(victim, name) == 0, "plant %s", name);
    CHECK(dlrt_save(path, "m", ts, 1) == DLRT_OK, "save beside planted links");
    CHECK(victim_intact(victim), "the links' target is untouched");
    unlink(name);
    snprintf(name, sizeof name, "%s.tmp.%ld", path, (long)getpid());
    unlink(name);

    /* A link at the very name a save draws: another name is drawn, the link is not followed. */
    char *first = NULL, *second = NULL;
    draws[0] = 0x1234, draws[1] = draws[2] = 0x5678, next_draw = 0;
    int fd = sf_temp_create(path, scripted, &first);
    CHECK(fd >= 0 && first != NULL, "a temporary file");
    close(fd);
    unlink(first);
    CHECK(symlink(victim, first) == 0, "plant a link at the name drawn next");
    next_draw = 0;
    fd = sf_temp_create(path, scripted, &second);
    CHECK(fd >= 0 && second != NULL && strcmp(first, second) != 0, "another name");
    CHECK(next_draw == 2, "after one more draw");
    if (fd >= 0) {
        CHECK(write(fd, "x", 1) == 1, "write the new file");
        close(fd);
        unlink(second);
    }
    CHECK(victim_intact(victim) && is_symlink(first), "the link is neither followed nor removed");
    draws[1] = draws[2] = 0x1234; /* every name drawn is taken: it gives up, without following */
    next_draw = 0;
    free(second);
    second = NULL;
    errno = 0;
    CHECK(sf_temp_create(path, scripted, &second) < 0 && errno == EEXIST && second == NULL,
          "gives up with EEXIST");
    CHECK(victim_intact(victim), "the link's target is untouched");
    unlink(first);
    free(first);

    /* A link at the target itself is replaced, not written through. */
    unlink(path);
    CHECK(symlink(victim, path) == 0, "plant a link at the target");
    CHECK(dlrt_save(path, "m", ts, 1) == DLRT_OK, "save over a link");
    CHECK(victim_intact(victim) && !is_symlink(path), "the link is replaced");
    unlink(path);
    unlink(victim);
}

/* ---- threads ---- */

#define VALUES 4096
static const int64_t values_shape[] = {VALUES};
static char shared_path[512];
static atomic_int writers_left;
static atomic_int failed_saves, failed_loads, mixed_loads, loads;

/* Saves `rounds` checkpoints whose values all equal one stamp of this thread and round. */
static void *writer(void *arg) {
    int id = (int)(intptr_t)arg;
    float *values = malloc(VALUES * sizeof *values);
    for (int round = 0; round < 60; round++) {
        for (int i = 0; i < VALUES; i++) {
            values[i] = (float)(id * 1000 + round);
        }
        dlrt_tensor t[] = {{"v", DLRT_F32, 1, values_shape, values}};
        if (dlrt_save(shared_path, "m", t, 1) != DLRT_OK) {
            fprintf(stderr, "writer %d: %s\n", id, dlrt_last_error());
            atomic_fetch_add(&failed_saves, 1);
        }
    }
    free(values);
    atomic_fetch_sub(&writers_left, 1);
    return NULL;
}

/* Loads the checkpoint until the writers are done: each load must succeed with one stamp. */
static void *reader(void *arg) {
    (void)arg;
    float *values = malloc(VALUES * sizeof *values);
    dlrt_tensor t[] = {{"v", DLRT_F32, 1, values_shape, values}};
    while (atomic_load(&writers_left) > 0) {
        atomic_fetch_add(&loads, 1);
        if (dlrt_load(shared_path, t, 1, 1) != DLRT_OK) {
            fprintf(stderr, "reader: %s\n", dlrt_last_error());
            atomic_fetch_add(&failed_loads, 1);
            continue;
        }
        for (int i = 1; i < VALUES; i++) {
            if (values[i] != values[0]) {
                atomic_fetch_add(&mixed_loads, 1);
                break;
            }
        }
    }
    free(values);
    return NULL;
}

static void test_threads(void) {
    snprintf(shared_path, sizeof shared_path, "%s", in_dir("shared.safetensors"));
    float zeros[VALUES] = {0};
    dlrt_tensor t[] = {{"v", DLRT_F32, 1, values_shape, zeros}};
    CHECK(dlrt_save(shared_path, "m", t, 1) == DLRT_OK, "the first checkpoint");
    pthread_t threads[4];
    atomic_store(&writers_left, 2);
    for (int k = 0; k < 4; k++) {
        pthread_create(&threads[k], NULL, k < 2 ? writer : reader, (void *)(intptr_t)(k + 1));
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(threads[k], NULL);
    }
    CHECK(failed_saves == 0, "%d saves failed", (int)failed_saves);
    CHECK(failed_loads == 0 && mixed_loads == 0, "of %d loads, %d failed and %d were mixed",
          (int)loads, (int)failed_loads, (int)mixed_loads);
    CHECK(temporaries(shared_path) == 0, "no temporary file is left");
    unlink(shared_path);
}

/* ---- killed savers and what they leave ---- */

/* The pid of a process that existed and is gone. */
static pid_t dead_pid(void) {
    fflush(stdout); /* so no child prints what this process has buffered */
    pid_t child = fork();
    if (child == 0) {
        _exit(0);
    }
    waitpid(child, NULL, 0);
    return child;
}

static void test_killed_savers(void) {
    char path[512];
    snprintf(path, sizeof path, "%s", in_dir("killed.safetensors"));
    enum { BIG = 1 << 18 };
    static const int64_t big_shape[] = {BIG};
    float *values = calloc(BIG, sizeof *values);
    dlrt_tensor t[] = {{"v", DLRT_F32, 1, big_shape, values}};
    CHECK(dlrt_save(path, "m", t, 1) == DLRT_OK, "the first checkpoint");
    int left = 0;
    unsigned seed = 12345;
    fflush(stdout);
    for (int round = 0; round < 30; round++) {
        pid_t child = fork();
        if (child == 0) {
            for (float stamp = 1;; stamp++) {
                for (int i = 0; i < BIG; i++) {
                    values[i] = stamp;
                }
                dlrt_save(path, "m", t, 1);
            }
        }
        struct timespec pause = {0, (long)(rand_r(&seed) % 4000) * 1000};
        nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        left = temporaries(path) > left ? temporaries(path) : left;
        static float back[BIG];
        dlrt_tensor b[] = {{"v", DLRT_F32, 1, big_shape, back}};
        CHECK(dlrt_load(path, b, 1, 1) == DLRT_OK && back[0] == back[BIG - 1],
              "round %d: the checkpoint is whole", round);
    }
    printf("test_killed_savers: up to %d temporary files left by killed savers\n", left);
    CHECK(dlrt_save(path, "m", t, 1) == DLRT_OK, "a save after the killings");
    CHECK(temporaries(path) == 0, "removes what the killed savers left: %d", temporaries(path));
    free(values);
    unlink(path);
}

/* Which leftovers the next save removes: only regular files of dead processes of this host. */
static void test_cleanup_policy(void) {
    char path[512], victim[512], prefix[600], name[700];
    snprintf(path, sizeof path, "%s", in_dir("policy.safetensors"));
    snprintf(victim, sizeof victim, "%s", in_dir("victim2"));
    make_victim(victim);
    char *temp = NULL;
    int fd = sf_temp_create(path, sf_random, &temp);
    CHECK(fd >= 0, "a temporary file, for its prefix");
    close(fd);
    unlink(temp);
    /* "<path>.tmp-<host>-": up to the dash before the pid. */
    snprintf(prefix, sizeof prefix, "%.*s", (int)(strrchr(temp, '-') - temp), temp);
    *strrchr(prefix, '-') = '\0';
    free(temp);
    long dead = (long)dead_pid();
    struct {
        const char *pattern;
        long pid;
        int removed;
    } files[] = {
        {"%s-%ld-0123456789ab", dead, 1},             /* a killed saver's */
        {"%s-%ld-0123456789ac", (long)getpid(), 0},    /* this process's (another thread's) */
        {"%s-%ld-0123456789ad", 1L, 0},                /* a live process's */
        {"%s-%ld-01234567", dead, 0},                  /* not a name saves write */
        {"%s-%ld-0123456789ae.bak", dead, 0},
    };
    size_t n = sizeof files / sizeof *files;
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, files[i].pattern, prefix, files[i].pid);
        write_bytes(name, "x", 1);
    }
    char other_host[700], link_name[700], dir_name[700];
    snprintf(other_host, sizeof other_host, "%s.tmp-00000000-%ld-0123456789ab", path, dead);
    if (strncmp(other_host, prefix, strlen(prefix)) != 0) {
        write_bytes(other_host, "x", 1);
    }
    snprintf(link_name, sizeof link_name, "%s-%ld-0123456789af", prefix, dead);
    CHECK(symlink(victim, link_name) == 0, "a link named like a leftover");
    snprintf(dir_name, sizeof dir_name, "%s-%ld-0123456789b0", prefix, dead);
    CHECK(mkdir(dir_name, 0700) == 0, "a directory named like a leftover");

    float w[2] = {1, 2};
    dlrt_tensor ts[] = {{"w", DLRT_F32, 1, w_shape, w}};
    CHECK(dlrt_save(path, "m", ts, 1) == DLRT_OK, "save");
    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, files[i].pattern, prefix, files[i].pid);
        CHECK(exists(name) == !files[i].removed, "%s is %s", name,
              files[i].removed ? "removed" : "kept");
        unlink(name);
    }
    CHECK(exists(other_host) || strncmp(other_host, prefix, strlen(prefix)) == 0,
          "another host's file is kept");
    unlink(other_host);
    CHECK(is_symlink(link_name) && victim_intact(victim), "the link is kept, its target intact");
    CHECK(rmdir(dir_name) == 0, "the directory is kept");
    unlink(link_name);
    unlink(victim);
    unlink(path);
}

int main(void) {
    if (!open_test_dir("test_safetensors_atomic")) {
        return 1;
    }
    test_planted_links();
    test_threads();
    test_killed_savers();
    test_cleanup_policy();
    close_test_dir();
    return check_summary("test_safetensors_atomic");
}

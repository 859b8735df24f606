/* test_threadpool.c: dlrt_parallel_for (and dlrt_parallel_split) covers every index exactly once in chunks of at least
 * `grain`, split the same way every time, for many n, grain and thread counts; nested loops,
 * concurrent callers, resizing and fork() do not deadlock; DLRT_NUM_THREADS is honoured; workers
 * are pinned to one CPU each unless DLRT_PIN_THREADS=0. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define MAX_CHUNKS 4096

/* What one loop did: hits per index and the chunks it was split into. */
typedef struct {
    int64_t n;
    atomic_int *hits;
    atomic_int chunk_count;
    atomic_int bad_chunks;
    int64_t begins[MAX_CHUNKS];
    int64_t ends[MAX_CHUNKS];
} record;

static void record_chunk(void *ctx, int64_t begin, int64_t end) {
    record *r = ctx;
    if (begin < 0 || end > r->n || begin >= end) {
        atomic_fetch_add(&r->bad_chunks, 1);
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&r->hits[i], 1);
    }
    int k = atomic_fetch_add(&r->chunk_count, 1);
    if (k < MAX_CHUNKS) {
        r->begins[k] = begin;
        r->ends[k] = end;
    }
}

static record *run_recorded(int64_t n, int64_t grain, int64_t per_thread) {
    record *r = calloc(1, sizeof *r);
    r->n = n;
    r->hits = calloc((size_t)(n > 0 ? n : 1), sizeof *r->hits);
    if (per_thread == 4) {
        dlrt_parallel_for(n, grain, record_chunk, r); /* the same as dlrt_parallel_split(…, 4, …) */
    } else {
        dlrt_parallel_split(n, grain, per_thread, record_chunk, r);
    }
    /* Chunks are disjoint, so sorting by start gives the split. */
    int count = atomic_load(&r->chunk_count);
    for (int i = 1; i < count && i < MAX_CHUNKS; i++) {
        for (int j = i; j > 0 && r->begins[j - 1] > r->begins[j]; j--) {
            int64_t b = r->begins[j], e = r->ends[j];
            r->begins[j] = r->begins[j - 1], r->ends[j] = r->ends[j - 1];
            r->begins[j - 1] = b, r->ends[j - 1] = e;
        }
    }
    return r;
}

static void free_record(record *r) {
    free(r->hits);
    free(r);
}

static void check_loop(int threads, int64_t n, int64_t grain, int64_t per_thread) {
    record *r = run_recorded(n, grain, per_thread);
    record *again = run_recorded(n, grain, per_thread);
    int64_t effective = grain < 1 ? 1 : grain;
    int64_t cap = (per_thread < 1 ? 1 : per_thread) * threads;
    int count = atomic_load(&r->chunk_count);
    CHECK(atomic_load(&r->bad_chunks) == 0, "threads=%d n=%lld grain=%lld: chunks in range",
          threads, (long long)n, (long long)grain);
    for (int64_t i = 0; i < n; i++) {
        if (atomic_load(&r->hits[i]) != 1) {
            CHECK(0, "threads=%d n=%lld grain=%lld: index %lld ran %d times", threads,
                  (long long)n, (long long)grain, (long long)i, atomic_load(&r->hits[i]));
            break;
        }
    }
    /* n / grain chunks have at least `grain` indices each, capped at per_thread per thread. */
    int64_t expected = n <= 0 ? 0 : (n <= effective || threads == 1 ? 1 : n / effective);
    if (expected > cap) {
        expected = cap;
    }
    CHECK(count == expected, "threads=%d n=%lld grain=%lld: %d chunks, expected %lld", threads,
          (long long)n, (long long)grain, count, (long long)expected);
    if (count == 1) {
        CHECK(r->begins[0] == 0 && r->ends[0] == n, "one chunk is the whole range");
    }
    for (int k = 0; count > 1 && k < count; k++) {
        CHECK(r->ends[k] - r->begins[k] >= effective,
              "threads=%d n=%lld grain=%lld: chunk [%lld, %lld) is below the grain", threads,
              (long long)n, (long long)grain, (long long)r->begins[k], (long long)r->ends[k]);
    }
    CHECK(atomic_load(&again->chunk_count) == count &&
              memcmp(again->begins, r->begins, sizeof r->begins) == 0 &&
              memcmp(again->ends, r->ends, sizeof r->ends) == 0,
          "threads=%d n=%lld grain=%lld: the same chunks twice", threads, (long long)n,
          (long long)grain);
    free_record(r);
    free_record(again);
}

static void test_coverage(void) {
    static const int threads[] = {1, 2, 3, 4, 8, 16};
    static const int64_t sizes[] = {-3, 0, 1, 2, 3, 7, 64, 65, 1000, 4099, 100003};
    static const int64_t grains[] = {-5, 0, 1, 2, 7, 64, 1000, INT64_MAX};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        dlrt_set_num_threads(threads[t]);
        CHECK(dlrt_num_threads() == threads[t], "set to %d", threads[t]);
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            for (size_t g = 0; g < sizeof grains / sizeof *grains; g++) {
                check_loop(threads[t], sizes[s], grains[g], 4);
                check_loop(threads[t], sizes[s], grains[g], 1);
                check_loop(threads[t], sizes[s], grains[g], 0);
            }
        }
    }
}

/* Nested loops: every outer index runs an inner loop over its own block of indices. */
enum { OUTER = 16, INNER = 500 };
static atomic_int nested_hits[OUTER * INNER];

static void inner_task(void *ctx, int64_t begin, int64_t end) {
    int64_t base = *(const int64_t *)ctx;
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&nested_hits[base + i], 1);
    }
}

static void outer_task(void *ctx, int64_t begin, int64_t end) {
    (void)ctx;
    for (int64_t o = begin; o < end; o++) {
        int64_t base = o * INNER;
        dlrt_parallel_for(INNER, 10, inner_task, &base);
    }
}

static void test_nested(void) {
    dlrt_set_num_threads(4);
    memset(nested_hits, 0, sizeof nested_hits);
    dlrt_parallel_for(OUTER, 1, outer_task, NULL);
    for (int i = 0; i < OUTER * INNER; i++) {
        if (atomic_load(&nested_hits[i]) != 1) {
            CHECK(0, "nested: index %d ran %d times", i, atomic_load(&nested_hits[i]));
            break;
        }
    }
}

/* Several application threads run loops at once. */
static void *caller_main(void *arg) {
    int *ok = arg;
    for (int round = 0; round < 30; round++) {
        record *r = run_recorded(1000, 8, 4);
        for (int i = 0; i < 1000; i++) {
            *ok = *ok && atomic_load(&r->hits[i]) == 1;
        }
        free_record(r);
    }
    return NULL;
}

static void test_concurrent_callers(void) {
    dlrt_set_num_threads(4);
    pthread_t callers[4];
    int ok[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_create(&callers[i], NULL, caller_main, &ok[i]) == 0, "caller %d", i);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(callers[i], NULL);
        CHECK(ok[i], "caller %d covered every index once in every loop", i);
    }
}

static void resizing_task(void *ctx, int64_t begin, int64_t end) {
    (void)ctx, (void)begin, (void)end;
    dlrt_set_num_threads(2); /* from inside a task: applies to the next loop */
}

static void test_resizing(void) {
    for (int t = 8; t >= 1; t--) {
        dlrt_set_num_threads(t);
        check_loop(t, 5000, 16, 4);
    }
    dlrt_set_num_threads(6);
    dlrt_parallel_for(100, 1, resizing_task, NULL);
    CHECK(dlrt_num_threads() == 2, "set from a task");
    check_loop(2, 5000, 16, 4);
    dlrt_set_num_threads(100000);
    CHECK(dlrt_num_threads() == 1024, "capped at 1024, got %d", dlrt_num_threads());
}

static void noop_task(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    atomic_fetch_add((atomic_int *)ctx, 1);
}

static void test_nothing_to_do(void) {
    atomic_int calls = 0;
    dlrt_parallel_for(0, 1, noop_task, &calls);
    dlrt_parallel_for(-10, 1, noop_task, &calls);
    dlrt_parallel_for(INT64_MIN, 1, noop_task, &calls);
    CHECK(atomic_load(&calls) == 0, "no chunk for n <= 0");
    dlrt_parallel_for(10, 1, NULL, &calls); /* ignored, not a crash */
}

/* After fork() the child has no workers; its loops must still run (not wait forever).
   ThreadSanitizer cannot follow a multithreaded fork, so it skips this test. */
#if defined(__SANITIZE_THREAD__)
#define FORK_TESTED 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FORK_TESTED 0
#endif
#endif
#ifndef FORK_TESTED
#define FORK_TESTED 1
#endif

static void test_fork(void) {
    if (!FORK_TESTED) {
        printf("test_fork: skipped under ThreadSanitizer\n");
        return;
    }
    dlrt_set_num_threads(4);
    check_loop(4, 1000, 10, 4); /* the pool is running */
    pid_t child = fork();
    if (child == 0) {
        alarm(30); /* a deadlock fails the test instead of hanging it */
        check_loop(4, 1000, 10, 4);
        dlrt_set_num_threads(3);
        check_loop(3, 1000, 10, 4);
        _exit(check_failures == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child, "forked");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's loops ran (status %d)",
          status);
}

/* Runs this program again with DLRT_NUM_THREADS set to `value` (NULL: unset) and returns
   the thread count it prints. */
static int threads_with_env(const char *self, const char *value) {
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    pid_t child = fork();
    if (child == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (value == NULL) {
            unsetenv("DLRT_NUM_THREADS");
        } else {
            setenv("DLRT_NUM_THREADS", value, 1);
        }
        execl(self, self, "--print-threads", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char text[32] = {0};
    ssize_t got = read(fds[0], text, sizeof text - 1);
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? atoi(text) : -1;
}

static void test_environment(const char *self) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int cpus = online < 1 ? 1 : (online > 1024 ? 1024 : (int)online);
    static const struct {
        const char *value;
        int expected; /* 0: the CPU count */
    } cases[] = {{"3", 3},  {"1", 1},   {"5000", 1024}, {NULL, 0}, {"", 0},
                 {"0", 0},  {"-2", 0},  {"abc", 0},     {"7x", 0}, {"99999999999999999999", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int expected = cases[i].expected == 0 ? cpus : cases[i].expected;
        int got = threads_with_env(self, cases[i].value);
        CHECK(got == expected, "DLRT_NUM_THREADS=%s: %d threads, expected %d",
              cases[i].value == NULL ? "(unset)" : cases[i].value, got, expected);
    }
}

/* Two chunks that wait for each other (up to 2 s), so that a worker runs one: the number of CPUs
   the worker may run on, or 0 when no worker joined in time. */
static atomic_int started;
static atomic_int worker_cpus;
static pthread_t caller;

static void meet(void *ctx, int64_t begin, int64_t end) {
    (void)ctx, (void)begin, (void)end;
    atomic_fetch_add(&started, 1);
    if (!pthread_equal(pthread_self(), caller)) {
        cpu_set_t mine;
        if (sched_getaffinity(0, sizeof mine, &mine) == 0) {
            atomic_store(&worker_cpus, CPU_COUNT(&mine));
        }
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (atomic_load(&started) < 2 && t.tv_sec - t0.tv_sec < 2);
}

static int cpus_of_a_worker(void) {
    dlrt_set_num_threads(3); /* a new pool: pinning is decided when workers start */
    dlrt_parallel_for(4, 1, meet, NULL);
    dlrt_set_num_threads(2);
    for (int attempt = 0; attempt < 5; attempt++) {
        atomic_store(&started, 0);
        atomic_store(&worker_cpus, 0);
        dlrt_parallel_split(2, 1, 1, meet, NULL);
        if (atomic_load(&worker_cpus) > 0) {
            return atomic_load(&worker_cpus);
        }
    }
    return 0;
}

static void test_pinning(void) {
    cpu_set_t process;
    if (sched_getaffinity(0, sizeof process, &process) != 0 || CPU_COUNT(&process) < 2) {
        return; /* one CPU: nothing to pin to */
    }
    caller = pthread_self();
    int pinned = cpus_of_a_worker();
    CHECK(pinned == 1 || pinned == 0, "a pinned worker may run on %d CPUs, expected 1", pinned);
    setenv("DLRT_PIN_THREADS", "0", 1);
    int free_to_move = cpus_of_a_worker();
    CHECK(free_to_move == CPU_COUNT(&process) || free_to_move == 0,
          "DLRT_PIN_THREADS=0: a worker may run on %d CPUs, expected %d", free_to_move,
          CPU_COUNT(&process));
    unsetenv("DLRT_PIN_THREADS");
    CHECK(pinned > 0 || free_to_move > 0, "no worker joined a loop in 2 s (5 attempts)");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--print-threads") == 0) {
        printf("%d\n", dlrt_num_threads());
        return 0;
    }
    test_environment(argv[0]);
    test_nothing_to_do();
    test_coverage();
    test_nested();
    test_concurrent_callers();
    test_resizing();
    test_fork();
    test_pinning();
    dlrt_set_num_threads(0);
    return check_summary("test_threadpool");
}

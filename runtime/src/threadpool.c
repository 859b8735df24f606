/* threadpool.c: dlrt_parallel_for and dlrt_parallel_split on a lazily started pool of dlrt_num_threads() - 1 workers.
 *
 * A loop is split into chunks that depend only on (n, grain, thread count); the caller and the
 * workers claim chunks from an atomic counter until none is left. When the caller runs out of
 * chunks it closes the loop, so that a worker not yet awake skips it, and returns once every
 * worker that joined has finished: a worker the OS has not scheduled (the machine is busy) costs
 * the caller nothing but the chunks it did itself, never a wait for a time slice. One loop uses the pool at a time (others wait); a
 * loop started from inside a task runs its chunks inline, so nesting cannot deadlock. The pool
 * is stopped when the library is unloaded, and forgotten in the child after fork() (forking from
 * inside a task is not supported).
 *
 * A worker that finishes a loop, and a caller waiting for its workers, spin for a short while
 * (SPIN_ROUNDS pauses, a few hundred microseconds) before sleeping on a condition variable: an
 * entry point runs its kernels back to back, and a worker that sleeps between them is woken late
 * (on a busy or virtualised machine, late enough that the caller has done every chunk alone).
 * Workers are pinned to CPUs other than the one the pool was started from (pin_workers). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrt.h"

#define MAX_THREADS 1024
/* Chunks per thread: a few, so a slow thread does not hold the loop up. */
#define CHUNKS_PER_THREAD 4
/* Pauses a thread spins before it sleeps (a pause is tens of cycles). */
#define SPIN_ROUNDS 20000

static inline void pause_briefly(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* True on pool workers, and on a caller while its loop runs: loops started here run inline. */
static _Thread_local bool inside_loop;

static atomic_int requested_threads; /* dlrt_set_num_threads; 0 means the default */
static atomic_int default_threads;   /* computed on first use; 0 means not yet */

/* One parallel loop: chunk i is [i * base + min(i, rem), that + base + (i < rem)). */
typedef struct {
    dlrt_task fn;
    void *ctx;
    int64_t chunks;
    int64_t base;
    int64_t rem;
    atomic_int_fast64_t next; /* the next chunk to claim */
} loop;

static struct {
    pthread_mutex_t run_lock; /* held by the caller of the loop that uses the pool */
    pthread_mutex_t lock;     /* guards generation..current */
    pthread_cond_t wake;      /* workers: a new loop (generation) or stopping */
    pthread_cond_t done;      /* caller: running reached 0 */
    pthread_t *threads;       /* threads and workers change only under run_lock */
    int workers;
    /* Written under `lock`; also read without it by spinning threads, hence atomic. */
    _Atomic uint64_t generation; /* counts loops published to the workers */
    uint64_t spawn_generation;   /* generation when the workers were started */
    atomic_int running;          /* workers that joined the current loop and are still in it */
    atomic_bool stopping;
    loop *current;
} pool = {.run_lock = PTHREAD_MUTEX_INITIALIZER,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static void run_chunks(loop *l) {
    for (;;) {
        int64_t i = atomic_fetch_add(&l->next, 1);
        if (i >= l->chunks) {
            return;
        }
        int64_t begin = i * l->base + (i < l->rem ? i : l->rem);
        l->fn(l->ctx, begin, begin + l->base + (i < l->rem ? 1 : 0));
    }
}

static void *worker_main(void *unused) {
    (void)unused;
    inside_loop = true;
    pthread_mutex_lock(&pool.lock);
    uint64_t seen = pool.spawn_generation;
    for (;;) {
        if (!pool.stopping && pool.generation == seen) {
            pthread_mutex_unlock(&pool.lock); /* spin a while for the next loop, then sleep */
            for (int i = 0; i < SPIN_ROUNDS && !atomic_load(&pool.stopping) &&
                            atomic_load(&pool.generation) == seen;
                 i++) {
                pause_briefly();
            }
            pthread_mutex_lock(&pool.lock);
        }
        while (!pool.stopping && pool.generation == seen) {
            pthread_cond_wait(&pool.wake, &pool.lock);
        }
        if (pool.stopping) {
            break;
        }
        seen = pool.generation;
        loop *l = pool.current;
        if (l == NULL) {
            continue; /* the caller closed it: every chunk is done */
        }
        pool.running++;
        pthread_mutex_unlock(&pool.lock);
        run_chunks(l);
        pthread_mutex_lock(&pool.lock);
        if (--pool.running == 0) {
            pthread_cond_signal(&pool.done);
        }
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* Stops and joins every worker. Called with run_lock held (or at unload). */
static void stop_workers(void) {
    pthread_mutex_lock(&pool.lock);
    pool.stopping = true;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.workers; i++) {
        pthread_join(pool.threads[i], NULL);
    }
    free(pool.threads);
    pool.threads = NULL;
    pool.workers = 0;
    pool.stopping = false;
}

/* fork() handlers: the child has none of the workers, so it forgets them and starts its own. */
static bool fork_took_run_lock;

static void before_fork(void) {
    fork_took_run_lock = !inside_loop; /* a task's own caller already holds run_lock */
    if (fork_took_run_lock) {
        pthread_mutex_lock(&pool.run_lock);
    }
    pthread_mutex_lock(&pool.lock);
}

static void after_fork_in_parent(void) {
    pthread_mutex_unlock(&pool.lock);
    if (fork_took_run_lock) {
        pthread_mutex_unlock(&pool.run_lock);
    }
}

static void after_fork_in_child(void) {
    free(pool.threads);
    pool.threads = NULL;
    pool.workers = 0;
    pool.running = 0;
    pool.current = NULL;
    pool.stopping = false;
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    after_fork_in_parent();
}

static void register_fork_handlers(void) {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

/* Pins worker k to the k-th CPU this process may use other than the caller's, unless
   $DLRT_PIN_THREADS is 0. Unpinned, the OS sometimes wakes a worker on its caller's CPU and
   leaves it there (seen on a 2-vCPU VM after the pool slept): the two then share one core and
   a loop takes longer than on one thread. */
static void pin_workers(void) {
#ifdef __linux__
    const char *pin = getenv("DLRT_PIN_THREADS");
    if (pin != NULL && strcmp(pin, "0") == 0) {
        return;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        return;
    }
    int here = sched_getcpu();
    size_t cpus[CPU_SETSIZE], count = 0;
    for (size_t c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &allowed) && (here < 0 || c != (size_t)here)) {
            cpus[count++] = c;
        }
    }
    for (size_t k = 0; k < (size_t)pool.workers && count > 0; k++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[k % count], &one);
        pthread_setaffinity_np(pool.threads[k], sizeof one, &one);
    }
#endif
}

/* Makes the pool have `wanted` workers (fewer if the system refuses threads: loops still run,
   on fewer threads). Called with run_lock held. */
static void resize_pool(int wanted) {
    static pthread_once_t fork_handlers = PTHREAD_ONCE_INIT;
    if (pool.workers == wanted) {
        return;
    }
    pthread_once(&fork_handlers, register_fork_handlers);
    stop_workers();
    pool.threads = calloc((size_t)wanted, sizeof *pool.threads);
    if (pool.threads == NULL) {
        return;
    }
    pthread_mutex_lock(&pool.lock);
    pool.spawn_generation = pool.generation;
    pthread_mutex_unlock(&pool.lock);
    /* Workers block every signal, so asynchronous signals reach the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (pool.workers < wanted &&
           pthread_create(&pool.threads[pool.workers], NULL, worker_main, NULL) == 0) {
        pool.workers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pin_workers();
}

/* Stops the workers when the library is unloaded (or the process exits). Skipped if a loop is
   still running, since its workers are busy and the process is going away anyway. */
__attribute__((destructor)) static void shut_down_pool(void) {
    if (pthread_mutex_trylock(&pool.run_lock) != 0) {
        return;
    }
    stop_workers();
    pthread_mutex_unlock(&pool.run_lock);
}

/* Runs `l` on the calling thread and the pool's workers; returns when every chunk ran. */
static void run_on_pool(loop *l, int threads) {
    pthread_mutex_lock(&pool.run_lock);
    resize_pool(threads - 1);
    inside_loop = true;
    pthread_mutex_lock(&pool.lock);
    pool.current = l;
    pool.running = 0;
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_chunks(l);

    /* Close the loop (a worker that wakes from now on skips it), then wait for the workers
       still inside a chunk. */
    pthread_mutex_lock(&pool.lock);
    pool.current = NULL;
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < SPIN_ROUNDS && atomic_load(&pool.running) > 0; i++) {
        pause_briefly();
    }
    pthread_mutex_lock(&pool.lock);
    while (pool.running > 0) {
        pthread_cond_wait(&pool.done, &pool.lock);
    }
    pthread_mutex_unlock(&pool.lock);
    inside_loop = false;
    pthread_mutex_unlock(&pool.run_lock);
}

void dlrt_parallel_for(int64_t n, int64_t grain, dlrt_task fn, void *ctx) {
    dlrt_parallel_split(n, grain, CHUNKS_PER_THREAD, fn, ctx);
}

void dlrt_parallel_split(int64_t n, int64_t grain, int64_t per_thread, dlrt_task fn, void *ctx) {
    if (n <= 0 || fn == NULL) {
        return;
    }
    if (grain < 1) {
        grain = 1;
    }
    if (per_thread < 1) {
        per_thread = 1;
    }
    int threads = dlrt_num_threads();
    /* n / grain chunks have at least `grain` indices each; more than a few per thread only
       adds overhead. */
    int64_t chunks = 1;
    if (threads > 1 && n > grain) {
        chunks = n / grain;
        if (chunks / threads >= per_thread) { /* chunks >= per_thread * threads, unwrapped */
            chunks = per_thread * threads;
        }
    }
    loop l = {.fn = fn, .ctx = ctx, .chunks = chunks, .base = n / chunks, .rem = n % chunks};
    atomic_init(&l.next, 0);
    if (chunks == 1 || inside_loop) {
        run_chunks(&l);
    } else {
        run_on_pool(&l, threads);
    }
}

/* $DLRT_NUM_THREADS when it is a positive integer, else the number of online CPUs. */
static int threads_by_default(void) {
    const char *text = getenv("DLRT_NUM_THREADS");
    if (text != NULL && *text != '\0') {
        char *end = NULL;
        errno = 0;
        long value = strtol(text, &end, 10);
        if (errno == 0 && *end == '\0' && value >= 1) {
            return value > MAX_THREADS ? MAX_THREADS : (int)value;
        }
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) {
        return 1;
    }
    return cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
}

int dlrt_num_threads(void) {
    int n = atomic_load(&requested_threads);
    if (n > 0) {
        return n;
    }
    n = atomic_load(&default_threads);
    if (n == 0) {
        n = threads_by_default();
        atomic_store(&default_threads, n);
    }
    return n;
}

void dlrt_set_num_threads(int n) {
    atomic_store(&requested_threads, n < 1 ? 0 : (n > MAX_THREADS ? MAX_THREADS : n));
}

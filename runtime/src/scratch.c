/* scratch.c: dlrt_scratch, one buffer per thread that kernels pack matrix panels into.
 *
 * A thread's buffer is kept between calls (so an entry point allocates nothing once warm) and
 * only grows. It is freed when its thread exits, and every buffer still held is freed when the
 * library is unloaded: the thread-specific key is deleted first, so that a thread exiting after
 * the unload does not call into unmapped code. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "dlrt.h"

#define ALIGNMENT 64

typedef struct scratch {
    struct scratch *prev, *next; /* every live buffer, for the unload */
    size_t size;
    void *data;
} scratch;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static bool key_made;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static scratch *live;

static void unlink_buffer(scratch *s) {
    if (s->prev != NULL) {
        s->prev->next = s->next;
    } else {
        live = s->next;
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
}

static void release(void *p) {
    scratch *s = p;
    pthread_mutex_lock(&lock);
    unlink_buffer(s);
    pthread_mutex_unlock(&lock);
    free(s->data);
    free(s);
}

static void make_key(void) { key_made = pthread_key_create(&key, release) == 0; }

void *dlrt_scratch(int64_t bytes) {
    pthread_once(&key_once, make_key);
    if (!key_made || bytes < 0) {
        return NULL;
    }
    scratch *s = pthread_getspecific(key);
    if (s != NULL && s->size >= (size_t)bytes) {
        return s->data;
    }
    /* More than size_t holds, once rounded up to the alignment: no buffer. */
    if ((uint64_t)bytes > SIZE_MAX - (ALIGNMENT - 1)) {
        return NULL;
    }
    size_t size = ((size_t)bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    void *data = aligned_alloc(ALIGNMENT, size == 0 ? ALIGNMENT : size);
    if (data == NULL) {
        return NULL;
    }
    if (s == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL || pthread_setspecific(key, s) != 0) {
            free(s);
            free(data);
            return NULL;
        }
        pthread_mutex_lock(&lock);
        s->next = live;
        if (live != NULL) {
            live->prev = s;
        }
        live = s;
        pthread_mutex_unlock(&lock);
    }
    free(s->data);
    s->data = data;
    s->size = size;
    return data;
}

__attribute__((destructor)) static void free_all(void) {
    if (!key_made) {
        return;
    }
    pthread_key_delete(key);
    pthread_mutex_lock(&lock);
    while (live != NULL) {
        scratch *s = live;
        unlink_buffer(s);
        free(s->data);
        free(s);
    }
    pthread_mutex_unlock(&lock);
}

/* memory.c: 64-byte aligned allocation and the arena, a stack of frames kept in a chain of
 * chunks. A push that does not fit starts a new chunk (so earlier pushes never move); a reset
 * frees the chunks started after the mark. Under AddressSanitizer the bytes of a chunk that no
 * live push owns are poisoned, so code that overruns its frame is caught. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "dlrt.h"
#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define DLRT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DLRT_ASAN 1
#endif
#endif

#ifdef DLRT_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Size of an arena's first chunk when dlrt_arena_create is given 0. */
#define DEFAULT_CHUNK_BYTES ((size_t)64 * 1024)

void *dlrt_alloc_quiet(size_t bytes) {
    size_t size;
    /* posix_memalign may return NULL for 0 bytes; a unique block keeps NULL meaning failure. */
    if (!dlrt_round_up(bytes == 0 ? 1 : bytes, &size)) {
        return NULL;
    }
    void *p = NULL;
    if (posix_memalign(&p, DLRT_ALIGNMENT, size) != 0) {
        return NULL;
    }
    return p;
}

void *dlrt_alloc(size_t bytes) {
    void *p = dlrt_alloc_quiet(bytes);
    if (p == NULL) {
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_alloc: cannot allocate %zu bytes", bytes);
    }
    return p;
}

void dlrt_free(void *p) {
    free(p);
}

/* A chunk: this header, padded to DLRT_ALIGNMENT bytes, followed by `size` bytes of data. Arena
   positions (marks) number the bytes of all chunks in order: data[i] of a chunk is position
   base + i, and a new chunk starts where the previous one's capacity ends. */
typedef struct chunk {
    struct chunk *prev;
    size_t base;
    size_t size;
    size_t used;
} chunk;

_Static_assert(sizeof(chunk) <= DLRT_ALIGNMENT, "a chunk header must fit in its padding");

struct dlrt_arena {
    chunk *top;
    size_t peak; /* most capacity ever held, for one big chunk once the arena is empty */
};

static unsigned char *chunk_data(chunk *c) {
    return (unsigned char *)c + DLRT_ALIGNMENT;
}

/* A chunk of `size` bytes (a multiple of DLRT_ALIGNMENT) on top of `prev`; NULL on OOM. */
static chunk *chunk_create(chunk *prev, size_t size) {
    size_t total;
    if (!dlrt_checked_add(size, DLRT_ALIGNMENT, &total)) {
        return NULL;
    }
    chunk *c = dlrt_alloc_quiet(total);
    if (c == NULL) {
        return NULL;
    }
    c->prev = prev;
    c->base = prev == NULL ? 0 : prev->base + prev->size;
    c->size = size;
    c->used = 0;
    POISON(chunk_data(c), size);
    return c;
}

static void chunk_free(chunk *c) {
    UNPOISON(chunk_data(c), c->size);
    free(c);
}

dlrt_arena *dlrt_arena_create(size_t initial_bytes) {
    size_t size;
    if (!dlrt_round_up(initial_bytes == 0 ? DEFAULT_CHUNK_BYTES : initial_bytes, &size)) {
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_arena_create: %zu bytes is too large",
                   initial_bytes);
        return NULL;
    }
    dlrt_arena *a = malloc(sizeof *a);
    chunk *first = a == NULL ? NULL : chunk_create(NULL, size);
    if (first == NULL) {
        free(a);
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_arena_create: cannot allocate %zu bytes", size);
        return NULL;
    }
    a->top = first;
    a->peak = size;
    return a;
}

void dlrt_arena_destroy(dlrt_arena *a) {
    if (a == NULL) {
        return;
    }
    while (a->top != NULL) {
        chunk *c = a->top;
        a->top = c->prev;
        chunk_free(c);
    }
    free(a);
}

void *dlrt_arena_push(dlrt_arena *a, size_t bytes) {
    if (a == NULL) {
        dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_arena_push: argument 'a' is NULL");
        return NULL;
    }
    size_t need;
    if (!dlrt_round_up(bytes, &need)) {
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_arena_push: %zu bytes is too large", bytes);
        return NULL;
    }
    chunk *top = a->top;
    if (top->size - top->used < need) {
        /* Double the capacity so a growing workload needs few chunks; fall back to the exact
           size when doubling is impossible. */
        size_t doubled;
        chunk *next = NULL;
        if (dlrt_checked_mul(top->size, 2, &doubled) && doubled > need) {
            next = chunk_create(top, doubled);
        }
        if (next == NULL) {
            next = chunk_create(top, need);
        }
        if (next == NULL) {
            dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_arena_push: cannot allocate %zu bytes",
                       bytes);
            return NULL;
        }
        a->top = top = next;
        if (top->base + top->size > a->peak) {
            a->peak = top->base + top->size;
        }
    }
    void *p = chunk_data(top) + top->used;
    top->used += need;
    UNPOISON(p, bytes); /* not the padding: reading past `bytes` is a bug */
    return p;
}

size_t dlrt_arena_mark(const dlrt_arena *a) {
    return a == NULL ? 0 : a->top->base + a->top->used;
}

/* Replaces the only chunk of an empty arena by one of its peak capacity, so a workload that grew
   the arena once runs in one chunk from then on instead of allocating chunks every frame. */
static void grow_first_chunk(dlrt_arena *a) {
    chunk *merged = chunk_create(NULL, a->peak);
    if (merged == NULL) {
        return; /* keep the chunk we have: correct, only slower */
    }
    chunk_free(a->top);
    a->top = merged;
}

void dlrt_arena_reset(dlrt_arena *a, size_t mark) {
    if (a == NULL || mark > dlrt_arena_mark(a)) {
        return;
    }
    /* Marks are multiples of the alignment; rounding any other value up keeps pushes aligned
       and never frees more than asked. It cannot overflow: mark <= the (aligned) top. */
    size_t aligned = mark;
    (void)dlrt_round_up(mark, &aligned);
    while (a->top->prev != NULL && a->top->base >= aligned) {
        chunk *c = a->top;
        a->top = c->prev;
        chunk_free(c);
    }
    size_t used = aligned - a->top->base;
    if (used < a->top->used) { /* a mark not from dlrt_arena_mark may lie past the pushes */
        POISON(chunk_data(a->top) + used, a->top->used - used);
    }
    a->top->used = used;
    if (aligned == 0 && a->top->size < a->peak) {
        grow_first_chunk(a);
    }
}

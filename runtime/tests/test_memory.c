/* test_memory.c: dlrt_alloc/dlrt_free and the arena: alignment, growth by chunks (earlier pushes
 * stay put and keep their contents), marks and resets, and failures reported as errors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int aligned(const void *p) {
    return ((uintptr_t)p % 64) == 0;
}

static void test_alloc(void) {
    void *a = dlrt_alloc(0);
    void *b = dlrt_alloc(0);
    CHECK(a != NULL && b != NULL && a != b, "0 bytes gives unique blocks");
    dlrt_free(a);
    dlrt_free(b);
    for (size_t bytes = 1; bytes < 5000; bytes = bytes * 3 + 1) {
        unsigned char *p = dlrt_alloc(bytes);
        CHECK(p != NULL && aligned(p), "%zu bytes: 64-byte aligned block", bytes);
        if (p != NULL) {
            memset(p, 0xAB, bytes);
        }
        dlrt_free(p);
    }
    dlrt_free(NULL);
    dlrt_clear_error();
    CHECK(dlrt_alloc(SIZE_MAX) == NULL, "SIZE_MAX bytes fails");
    CHECK(strstr(dlrt_last_error(), "dlrt_alloc") != NULL, "and says so");
    dlrt_clear_error();
    CHECK(dlrt_alloc(SIZE_MAX / 2) == NULL, "half of the address space fails");
    CHECK(strstr(dlrt_last_error(), "cannot allocate") != NULL, "and says so");
}

/* Pushes blocks of growing sizes, fills each with its own byte, and checks them all at the end:
   growth must never move or overwrite an earlier push. */
static void test_arena_growth(void) {
    dlrt_arena *a = dlrt_arena_create(256);
    CHECK(a != NULL, "created");
    if (a == NULL) {
        return;
    }
    CHECK(dlrt_arena_mark(a) == 0, "empty");
    enum { PUSHES = 40 };
    unsigned char *blocks[PUSHES];
    size_t sizes[PUSHES];
    for (int i = 0; i < PUSHES; i++) {
        sizes[i] = (size_t)(i * 37 % 300) + (i == 20 ? 100000 : 0);
        blocks[i] = dlrt_arena_push(a, sizes[i]);
        CHECK(blocks[i] != NULL && aligned(blocks[i]), "push %d of %zu bytes", i, sizes[i]);
        if (blocks[i] != NULL) {
            memset(blocks[i], i + 1, sizes[i]);
        }
    }
    for (int i = 0; i < PUSHES; i++) {
        for (size_t k = 0; blocks[i] != NULL && k < sizes[i]; k++) {
            if (blocks[i][k] != (unsigned char)(i + 1)) {
                CHECK(0, "push %d byte %zu was overwritten", i, k);
                break;
            }
        }
    }
    dlrt_arena_destroy(a);
}

static void test_arena_mark_and_reset(void) {
    dlrt_arena *a = dlrt_arena_create(128);
    unsigned char *first = dlrt_arena_push(a, 64);
    size_t mark = dlrt_arena_mark(a);
    CHECK(mark == 64, "the mark counts pushed bytes, got %zu", mark);
    unsigned char *second = dlrt_arena_push(a, 10);
    CHECK(dlrt_arena_mark(a) == 128, "pushes round up to 64 bytes");
    unsigned char *big = dlrt_arena_push(a, 1000); /* a new chunk */
    CHECK(big != NULL, "grown");
    memset(big, 1, 1000);
    dlrt_arena_reset(a, mark);
    CHECK(dlrt_arena_mark(a) == mark, "back to the mark");
    CHECK(dlrt_arena_push(a, 10) == second, "the frame after the mark is reused");

    dlrt_arena_reset(a, dlrt_arena_mark(a) + 640); /* above the top: ignored */
    CHECK(dlrt_arena_mark(a) == 128, "a mark above the top changes nothing");

    /* Emptied after growing: from now on one chunk holds the peak, so pushes are contiguous. */
    dlrt_arena_reset(a, 0);
    CHECK(dlrt_arena_mark(a) == 0, "empty again");
    unsigned char *p1 = dlrt_arena_push(a, 128);
    unsigned char *p2 = dlrt_arena_push(a, 1024);
    CHECK(p1 != NULL && p2 == p1 + 128, "after a reset to 0, one chunk holds the peak");
    (void)first;

    /* Nested frames, as host functions calling host functions use them. */
    for (int round = 0; round < 3; round++) {
        size_t outer = dlrt_arena_mark(a);
        for (int depth = 0; depth < 50; depth++) {
            size_t m = dlrt_arena_mark(a);
            unsigned char *frame = dlrt_arena_push(a, (size_t)depth * 100 + 1);
            CHECK(frame != NULL, "frame %d", depth);
            if (frame != NULL) {
                frame[0] = 7;
            }
            if (depth % 2 == 0) {
                dlrt_arena_reset(a, m);
                CHECK(dlrt_arena_mark(a) == m, "frame %d popped", depth);
            }
        }
        dlrt_arena_reset(a, outer);
        CHECK(dlrt_arena_mark(a) == outer, "round %d popped", round);
    }
    dlrt_arena_destroy(a);
}

static void test_arena_failures(void) {
    dlrt_arena *a = dlrt_arena_create(0);
    CHECK(a != NULL, "0 bytes gives a default first chunk");
    dlrt_clear_error();
    CHECK(dlrt_arena_push(a, SIZE_MAX) == NULL, "SIZE_MAX bytes fails");
    CHECK(strstr(dlrt_last_error(), "dlrt_arena_push") != NULL, "and says so");
    dlrt_clear_error();
    CHECK(dlrt_arena_push(a, SIZE_MAX / 2) == NULL, "half of the address space fails");
    CHECK(strstr(dlrt_last_error(), "cannot allocate") != NULL, "and says so");
    CHECK(dlrt_arena_mark(a) == 0, "a failed push changes nothing");
    CHECK(dlrt_arena_push(a, 100) != NULL, "the arena still works");
    dlrt_arena_destroy(a);

    dlrt_clear_error();
    CHECK(dlrt_arena_create(SIZE_MAX) == NULL, "SIZE_MAX bytes fails");
    CHECK(strstr(dlrt_last_error(), "dlrt_arena_create") != NULL, "and says so");
    dlrt_clear_error();
    CHECK(dlrt_arena_create(SIZE_MAX / 4) == NULL, "a quarter of the address space fails");
    CHECK(strstr(dlrt_last_error(), "cannot allocate") != NULL, "and says so");

    dlrt_clear_error();
    CHECK(dlrt_arena_push(NULL, 8) == NULL, "NULL arena");
    CHECK(strstr(dlrt_last_error(), "argument 'a' is NULL") != NULL, "says which argument");
    CHECK(dlrt_arena_mark(NULL) == 0, "NULL arena has mark 0");
    dlrt_arena_reset(NULL, 0);
    dlrt_arena_destroy(NULL);
}

/* Under AddressSanitizer, bytes of the arena that no live push owns are poisoned. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>

static void test_arena_poisoning(void) {
    dlrt_arena *a = dlrt_arena_create(256);
    size_t mark = dlrt_arena_mark(a);
    unsigned char *p = dlrt_arena_push(a, 24);
    CHECK(!__asan_address_is_poisoned(p) && !__asan_address_is_poisoned(p + 23), "pushed");
    CHECK(__asan_address_is_poisoned(p + 24), "the padding after a push is poisoned");
    CHECK(__asan_address_is_poisoned(p + 64), "the rest of the chunk is poisoned");
    dlrt_arena_reset(a, mark);
    CHECK(__asan_address_is_poisoned(p), "popped frames are poisoned");
    dlrt_arena_destroy(a);
}
#else
static void test_arena_poisoning(void) {
    printf("test_arena_poisoning: needs AddressSanitizer, skipped\n");
}
#endif

int main(void) {
    test_alloc();
    test_arena_growth();
    test_arena_mark_and_reset();
    test_arena_failures();
    test_arena_poisoning();
    return check_summary("test_memory");
}

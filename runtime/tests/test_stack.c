/* test_stack.c: byte stacks: pushes pop back in reverse order, growth keeps the contents, and
 * underflow and NULL arguments are errors with messages. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void test_lifo(void) {
    dlrt_stack *s = dlrt_stack_create();
    CHECK(s != NULL, "created");
    double d = 3.5;
    int32_t i = -7;
    char text[] = "tape";
    CHECK(dlrt_stack_push(s, &d, sizeof d) == DLRT_OK, "push double");
    CHECK(dlrt_stack_push(s, &i, sizeof i) == DLRT_OK, "push int");
    CHECK(dlrt_stack_push(s, text, sizeof text) == DLRT_OK, "push text");
    CHECK(dlrt_stack_push(s, NULL, 0) == DLRT_OK, "push nothing");
    char text_out[sizeof text] = {0};
    int32_t i_out = 0;
    double d_out = 0;
    CHECK(dlrt_stack_pop(s, text_out, sizeof text_out) == DLRT_OK, "pop text");
    CHECK(dlrt_stack_pop(s, &i_out, sizeof i_out) == DLRT_OK, "pop int");
    CHECK(dlrt_stack_pop(s, NULL, 0) == DLRT_OK, "pop nothing");
    CHECK(dlrt_stack_pop(s, &d_out, sizeof d_out) == DLRT_OK, "pop double");
    CHECK(strcmp(text_out, "tape") == 0 && i_out == -7 && d_out == 3.5, "values come back");
    dlrt_stack_destroy(s);
}

/* Many pushes of different sizes (past several doublings), popped and checked in reverse. */
static void test_growth(void) {
    dlrt_stack *s = dlrt_stack_create();
    enum { PUSHES = 2000 };
    unsigned char block[700];
    for (int k = 0; k < PUSHES; k++) {
        size_t n = (size_t)(k * 13 % 700);
        memset(block, k & 0xFF, n);
        CHECK(dlrt_stack_push(s, block, n) == DLRT_OK, "push %d", k);
    }
    for (int k = PUSHES - 1; k >= 0; k--) {
        size_t n = (size_t)(k * 13 % 700);
        memset(block, 0xEE, sizeof block);
        CHECK(dlrt_stack_pop(s, block, n) == DLRT_OK, "pop %d", k);
        for (size_t b = 0; b < n; b++) {
            if (block[b] != (unsigned char)(k & 0xFF)) {
                CHECK(0, "pop %d: byte %zu is %u", k, b, block[b]);
                break;
            }
        }
    }
    unsigned char one;
    CHECK_STATUS(dlrt_stack_pop(s, &one, 1), DLRT_ERR_FORMAT, "holds 0");
    dlrt_stack_destroy(s);
}

static void test_errors(void) {
    dlrt_stack *s = dlrt_stack_create();
    int32_t x = 5;
    double out = 0;
    CHECK(dlrt_stack_push(s, &x, sizeof x) == DLRT_OK, "push");
    CHECK_STATUS(dlrt_stack_pop(s, &out, sizeof out), DLRT_ERR_FORMAT,
                 "dlrt_stack_pop: popping 8 bytes from a stack that holds 4");
    int32_t back = 0;
    CHECK(dlrt_stack_pop(s, &back, sizeof back) == DLRT_OK && back == 5,
          "a failed pop leaves the stack as it was");
    CHECK_STATUS(dlrt_stack_push(NULL, &x, 4), DLRT_ERR_INVALID_ARGUMENT, "argument 's' is NULL");
    CHECK_STATUS(dlrt_stack_pop(NULL, &x, 4), DLRT_ERR_INVALID_ARGUMENT, "argument 's' is NULL");
    CHECK_STATUS(dlrt_stack_push(s, NULL, 4), DLRT_ERR_INVALID_ARGUMENT,
                 "argument 'data' is NULL");
    CHECK(dlrt_stack_push(s, &x, 4) == DLRT_OK, "push");
    CHECK_STATUS(dlrt_stack_pop(s, NULL, 4), DLRT_ERR_INVALID_ARGUMENT, "argument 'out' is NULL");
    CHECK_STATUS(dlrt_stack_push(s, &x, SIZE_MAX), DLRT_ERR_OUT_OF_MEMORY, "dlrt_stack_push");
    CHECK(dlrt_stack_pop(s, &back, 4) == DLRT_OK && back == 5, "failed pushes change nothing");
    dlrt_stack_destroy(s);
    dlrt_stack_destroy(NULL);
}

int main(void) {
    test_lifo();
    test_growth();
    test_errors();
    return check_summary("test_stack");
}

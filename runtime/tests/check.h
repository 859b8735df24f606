/* check.h: the few macros the runtime's C tests share. A failed check prints where and why (and
 * the runtime's last error) and the test keeps going; check_summary gives the exit status. */
#ifndef DLRT_TEST_CHECK_H_
#define DLRT_TEST_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "dlrt.h"

static int check_failures;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n  dlrt_last_error(): \"%s\"\n", dlrt_last_error());        \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)

/* Checks that `expr` returns status `code` and that the last error contains `text`. */
#define CHECK_STATUS(expr, code, text)                                                     \
    do {                                                                                   \
        dlrt_status check_status_ = (expr);                                                \
        CHECK(check_status_ == (code), "%s returned %d, expected %d", #expr,               \
              (int)check_status_, (int)(code));                                            \
        CHECK(strstr(dlrt_last_error(), (text)) != NULL, "%s: the message lacks \"%s\"",   \
              #expr, (text));                                                              \
    } while (0)

/* Prints the outcome; returns the process exit status. */
static int check_summary(const char *test) {
    if (check_failures > 0) {
        fprintf(stderr, "%s: FAILED (%d checks)\n", test, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", test);
    return 0;
}

/* Under AddressSanitizer, let huge allocations fail (the runtime must report them) instead of
   aborting the test. Unused without the sanitizer. */
__attribute__((used, visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "allocator_may_return_null=1:detect_leaks=1";
}
__attribute__((used, visibility("default"))) const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) {
    return "print_stacktrace=1";
}

#endif /* DLRT_TEST_CHECK_H_ */

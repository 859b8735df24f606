/* test_error.c: dlrt_error, dlrt_last_error and dlrt_clear_error: formatting, truncation,
 * messages built from the previous one, and one message per thread. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>

#include "check.h"

static void test_set_and_clear(void) {
    CHECK(strcmp(dlrt_last_error(), "") == 0, "no error is set at start");
    dlrt_status s =
        dlrt_error(DLRT_ERR_IO, "f: cannot open '%s' (%d, %zu)", "x.bin", -3, (size_t)7);
    CHECK(s == DLRT_ERR_IO, "dlrt_error returns its code, got %d", (int)s);
    CHECK(strcmp(dlrt_last_error(), "f: cannot open 'x.bin' (-3, 7)") == 0, "formatted");
    dlrt_clear_error();
    CHECK(strcmp(dlrt_last_error(), "") == 0, "cleared");
    CHECK(dlrt_last_error() != NULL, "never NULL");
}

static void test_wrapping_the_previous_message(void) {
    dlrt_error(DLRT_ERR_FORMAT, "inner problem");
    dlrt_error(DLRT_ERR_FORMAT, "outer: %s (again: %s)", dlrt_last_error(), dlrt_last_error());
    CHECK(strcmp(dlrt_last_error(), "outer: inner problem (again: inner problem)") == 0,
          "got \"%s\"", dlrt_last_error());
}

static void test_null_format(void) {
    CHECK(dlrt_error(DLRT_ERR_INTERNAL, NULL) == DLRT_ERR_INTERNAL, "code returned");
    CHECK(strstr(dlrt_last_error(), "6") != NULL, "the message names the code");
}

static void test_truncation(void) {
    static char long_text[5000];
    memset(long_text, 'x', sizeof long_text - 1);
    dlrt_error(DLRT_ERR_IO, "%s", long_text);
    size_t len = strlen(dlrt_last_error());
    CHECK(len == DLRT_ERROR_CAPACITY - 1, "cut to the buffer, got %zu bytes", len);
    CHECK(strcmp(dlrt_last_error() + len - 3, "...") == 0, "ends in ...");

    /* "a" then two-byte characters: the cut must not split one. */
    static char accents[4000];
    accents[0] = 'a';
    for (size_t i = 1; i + 2 < sizeof accents; i += 2) {
        accents[i] = (char)0xC3;
        accents[i + 1] = (char)0xA9;
    }
    dlrt_error(DLRT_ERR_IO, "%s", accents);
    const char *msg = dlrt_last_error();
    len = strlen(msg);
    CHECK(strcmp(msg + len - 3, "...") == 0, "ends in ...");
    CHECK((unsigned char)msg[len - 4] == 0xA9, "the last character before ... is complete");
    CHECK(len < DLRT_ERROR_CAPACITY, "fits");
}

static void *thread_main(void *arg) {
    (void)arg;
    int ok = strcmp(dlrt_last_error(), "") == 0;
    dlrt_error(DLRT_ERR_DEVICE, "from the thread");
    ok = ok && strcmp(dlrt_last_error(), "from the thread") == 0;
    return ok ? arg : NULL;
}

static void test_one_message_per_thread(void) {
    dlrt_error(DLRT_ERR_IO, "from main");
    pthread_t thread;
    int token = 1;
    void *result = NULL;
    CHECK(pthread_create(&thread, NULL, thread_main, &token) == 0, "thread started");
    pthread_join(thread, &result);
    CHECK(result == &token, "the thread saw its own empty message, then its own message");
    CHECK(strcmp(dlrt_last_error(), "from main") == 0, "main keeps its message");
}

int main(void) {
    test_set_and_clear();
    test_wrapping_the_previous_message();
    test_null_format();
    test_truncation();
    test_one_message_per_thread();
    return check_summary("test_error");
}

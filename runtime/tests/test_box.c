/* test_box.c: boxes: zeroed aligned content after the header, freed when the last reference
 * goes (the leak checker and AddressSanitizer watch), sizes that overflow are errors. */
#include <stdint.h>
#include <string.h>

#include "check.h"

static void test_counts(void) {
    unsigned char *box = dlrt_box_create(100);
    CHECK(box != NULL, "created");
    unsigned char *content = box + DLRT_BOX_HEADER;
    CHECK((uintptr_t)content % 64 == 0, "content aligned");
    int zero = 1;
    for (int i = 0; i < 100; i++) {
        zero &= content[i] == 0;
    }
    CHECK(zero, "content zeroed");
    memset(content, 7, 100);
    dlrt_box_retain(box);
    dlrt_box_release(box);
    CHECK(content[99] == 7, "one reference keeps it");
    dlrt_box_release(box); /* freed: a leak or a double free would be reported */
    dlrt_box_retain(NULL);
    dlrt_box_release(NULL);
}

static void test_empty_and_free(void) {
    void *box = dlrt_box_create(0);
    CHECK(box != NULL, "an empty box");
    dlrt_box_retain(box);
    dlrt_free(box); /* deallocate: freed whatever its count */
}

static void test_too_big(void) {
    dlrt_clear_error();
    CHECK(dlrt_box_create(SIZE_MAX - 8) == NULL, "overflow");
    CHECK(strstr(dlrt_last_error(), "dlrt_box_create") != NULL, "message");
}

int main(void) {
    test_counts();
    test_empty_and_free();
    test_too_big();
    return check_summary("test_box");
}

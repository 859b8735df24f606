/* json_write.c: the growable string that safetensors headers are written into (see json.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "json.h"

static void append(json_writer *w, const char *bytes, size_t n) {
    if (w->failed) {
        return;
    }
    size_t needed;
    if (!dlrt_checked_add(w->len, n + 1, &needed)) {
        w->failed = true;
        return;
    }
    if (needed > w->cap) {
        size_t cap = w->cap == 0 ? 256 : w->cap;
        while (cap < needed) {
            if (!dlrt_checked_mul(cap, 2, &cap)) {
                cap = needed;
            }
        }
        char *grown = realloc(w->data, cap);
        if (grown == NULL) {
            w->failed = true;
            return;
        }
        w->data = grown;
        w->cap = cap;
    }
    memcpy(w->data + w->len, bytes, n);
    w->len += n;
    w->data[w->len] = '\0';
}

void json_raw(json_writer *w, const char *text) {
    append(w, text, strlen(text));
}

void json_quoted(json_writer *w, const char *text) {
    append(w, "\"", 1);
    for (const char *p = text; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        char escaped[8];
        if (c == '"' || c == '\\') {
            escaped[0] = '\\';
            escaped[1] = (char)c;
            append(w, escaped, 2);
        } else if (c < 0x20) {
            snprintf(escaped, sizeof escaped, "\\u%04x", c);
            append(w, escaped, 6);
        } else {
            append(w, p, 1);
        }
    }
    append(w, "\"", 1);
}

void json_int64(json_writer *w, int64_t value) {
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%" PRId64, value);
    append(w, digits, (size_t)n);
}

void json_writer_free(json_writer *w) {
    free(w->data);
    w->data = NULL;
    w->len = w->cap = 0;
}

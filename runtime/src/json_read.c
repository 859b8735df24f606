/* json_read.c: the strict JSON reader for safetensors headers (see json.h), and the UTF-8
 * check shared with the writer's callers. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "json.h"

bool dlrt_valid_utf8(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        uint32_t c = s[i];
        if (c == 0) {
            return false;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t extra;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) {
            extra = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (len - i <= extra) {
            return false;
        }
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8. */
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += extra + 1;
    }
    return true;
}

bool json_fail(json_reader *r, const char *fmt, ...) {
    if (r->message[0] != '\0') {
        return false; /* keep the first failure: later ones are its consequences */
    }
    int head = snprintf(r->message, sizeof r->message, "header byte %zu: ", r->pos);
    va_list args;
    va_start(args, fmt);
    vsnprintf(r->message + head, sizeof r->message - (size_t)head, fmt, args);
    va_end(args);
    return false;
}

static bool fail_out_of_memory(json_reader *r) {
    r->out_of_memory = true;
    return json_fail(r, "out of memory");
}

static void skip_space(json_reader *r) {
    while (r->pos < r->len) {
        char c = r->text[r->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            return;
        }
        r->pos++;
    }
}

/* Describes the next character for a message ("'x'", "byte 0x01", "the end of the header"). */
static const char *next_char(const json_reader *r, char *buf, size_t cap) {
    if (r->pos >= r->len) {
        return "the end of the header";
    }
    unsigned char c = (unsigned char)r->text[r->pos];
    if (c >= 0x20 && c < 0x7F) {
        snprintf(buf, cap, "'%c'", c);
    } else {
        snprintf(buf, cap, "byte 0x%02x", c);
    }
    return buf;
}

bool json_accept(json_reader *r, char c) {
    skip_space(r);
    if (r->pos < r->len && r->text[r->pos] == c) {
        r->pos++;
        return true;
    }
    return false;
}

bool json_peek(json_reader *r, char c) {
    skip_space(r);
    return r->pos < r->len && r->text[r->pos] == c;
}

bool json_null(json_reader *r, const char *what) {
    skip_space(r);
    if (r->len - r->pos >= 4 && memcmp(r->text + r->pos, "null", 4) == 0) {
        r->pos += 4;
        return true;
    }
    char buf[16];
    return json_fail(r, "expected null (%s), found %s", what, next_char(r, buf, sizeof buf));
}

bool json_expect(json_reader *r, char c, const char *where) {
    if (json_accept(r, c)) {
        return true;
    }
    char buf[16];
    return json_fail(r, "expected '%c' %s, found %s", c, where, next_char(r, buf, sizeof buf));
}

bool json_at_end(json_reader *r) {
    skip_space(r);
    return r->pos == r->len;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Reads the 4 hex digits after "\u" at r->pos. */
static bool read_hex4(json_reader *r, uint32_t *out) {
    uint32_t value = 0;
    for (int k = 0; k < 4; k++) {
        int digit = r->pos < r->len ? hex_value(r->text[r->pos]) : -1;
        if (digit < 0) {
            return json_fail(r, "expected 4 hex digits after \\u");
        }
        value = value * 16 + (uint32_t)digit;
        r->pos++;
    }
    *out = value;
    return true;
}

/* Reads the code point of a \u escape (r->pos just after "\u"), joining surrogate pairs; a
   NUL character only when `allow_nul`. */
static bool read_unicode_escape(json_reader *r, uint32_t *out, bool allow_nul) {
    uint32_t cp;
    if (!read_hex4(r, &cp)) {
        return false;
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return json_fail(r, "\\u%04" PRIX32 " is a low surrogate without a high one", cp);
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t low;
        if (r->len - r->pos < 2 || r->text[r->pos] != '\\' || r->text[r->pos + 1] != 'u') {
            return json_fail(r, "\\u%04" PRIX32 " is a high surrogate without a low one", cp);
        }
        r->pos += 2;
        if (!read_hex4(r, &low)) {
            return false;
        }
        if (low < 0xDC00 || low > 0xDFFF) {
            return json_fail(r, "\\u%04" PRIX32 " does not follow a high surrogate", low);
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp == 0 && !allow_nul) {
        return json_fail(r, "\\u0000 (a NUL character) is not allowed in a string");
    }
    *out = cp;
    return true;
}

/* Appends the UTF-8 encoding of `cp` (a valid code point) at out[*n]. */
static void put_utf8(char *out, size_t *n, uint32_t cp) {
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* The character a one-letter escape (the letter after a backslash) stands for; -1 if none. */
static int simple_escape(char letter) {
    switch (letter) {
    case '"':
    case '\\':
    case '/':
        return letter;
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    default:
        return -1;
    }
}

/* Decodes the string body at r->pos (after the opening quote) into `out`, which has room for
   the raw body (escapes only shrink); stops after the closing quote. */
static bool decode_string(json_reader *r, char *out, size_t *n, const char *what,
                          bool allow_nul) {
    *n = 0;
    for (;;) {
        if (r->pos >= r->len) {
            return json_fail(r, "unterminated string (%s)", what);
        }
        unsigned char c = (unsigned char)r->text[r->pos];
        if (c == '"') {
            r->pos++;
            return true;
        }
        if (c < 0x20) {
            return json_fail(r, "control character 0x%02x in a string (%s) must be escaped", c,
                             what);
        }
        if (c != '\\') {
            out[(*n)++] = (char)c;
            r->pos++;
            continue;
        }
        r->pos++;
        char letter = r->pos < r->len ? r->text[r->pos] : '\0';
        int simple = simple_escape(letter);
        if (simple >= 0) {
            out[(*n)++] = (char)simple;
            r->pos++;
        } else if (letter == 'u') {
            uint32_t cp = 0;
            r->pos++;
            if (!read_unicode_escape(r, &cp, allow_nul)) {
                return false;
            }
            put_utf8(out, n, cp);
        } else {
            return json_fail(r, "invalid escape in a string (%s)", what);
        }
    }
}

bool json_string(json_reader *r, char **out, const char *what) {
    return json_string_ex(r, out, what, false);
}

bool json_string_ex(json_reader *r, char **out, const char *what, bool allow_nul) {
    if (out != NULL) {
        *out = NULL;
    }
    skip_space(r);
    if (r->pos >= r->len || r->text[r->pos] != '"') {
        char buf[16];
        return json_fail(r, "expected a string (%s), found %s", what,
                         next_char(r, buf, sizeof buf));
    }
    size_t start = ++r->pos;
    /* The body is at most the rest of the header; find its end to size the copy. */
    size_t end = start;
    while (end < r->len && r->text[end] != '"') {
        end += r->text[end] == '\\' ? 2 : 1;
    }
    size_t cap = (end < r->len ? end : r->len) - start + 1;
    char *text = malloc(cap);
    if (text == NULL) {
        return fail_out_of_memory(r);
    }
    size_t n;
    if (!decode_string(r, text, &n, what, allow_nul)) {
        free(text);
        return false;
    }
    /* The raw body: escapes are ASCII, and it holds no NUL byte (a control character). */
    if (!dlrt_valid_utf8(r->text + start, r->pos - 1 - start)) {
        free(text);
        r->pos = start - 1;
        return json_fail(r, "the string (%s) is not valid UTF-8", what);
    }
    text[n] = '\0';
    if (out != NULL) {
        *out = text;
    } else {
        free(text);
    }
    return true;
}

bool json_uint(json_reader *r, uint64_t *out, const char *what) {
    skip_space(r);
    size_t start = r->pos;
    if (r->pos >= r->len || r->text[r->pos] < '0' || r->text[r->pos] > '9') {
        char buf[16];
        return json_fail(r, "expected a non-negative integer (%s), found %s", what,
                         next_char(r, buf, sizeof buf));
    }
    if (r->text[r->pos] == '0' && r->pos + 1 < r->len && r->text[r->pos + 1] >= '0' &&
        r->text[r->pos + 1] <= '9') {
        return json_fail(r, "a number (%s) has a leading zero", what);
    }
    uint64_t value = 0;
    while (r->pos < r->len && r->text[r->pos] >= '0' && r->text[r->pos] <= '9') {
        uint64_t digit = (uint64_t)(r->text[r->pos] - '0');
        if (value > (UINT64_MAX - digit) / 10) {
            r->pos = start;
            return json_fail(r, "an integer (%s) is out of the 64-bit range", what);
        }
        value = value * 10 + digit;
        r->pos++;
    }
    char after = r->pos < r->len ? r->text[r->pos] : '\0';
    if (after == '.' || after == 'e' || after == 'E') {
        r->pos = start;
        return json_fail(r, "expected an integer (%s), found a number with a fraction or exponent",
                         what);
    }
    *out = value;
    return true;
}

bool json_uint_array(json_reader *r, uint64_t **out, size_t *count, const char *what) {
    *out = NULL;
    *count = 0;
    char where[96];
    snprintf(where, sizeof where, "to start %s", what);
    if (!json_expect(r, '[', where)) {
        return false;
    }
    if (json_accept(r, ']')) {
        return true;
    }
    size_t cap = 0;
    for (;;) {
        if (*count == cap) {
            size_t bigger = cap == 0 ? 4 : cap * 2;
            uint64_t *grown = bigger > SIZE_MAX / sizeof **out
                                 ? NULL
                                 : realloc(*out, bigger * sizeof **out);
            if (grown == NULL) {
                free(*out);
                *out = NULL;
                return fail_out_of_memory(r);
            }
            *out = grown;
            cap = bigger;
        }
        if (!json_uint(r, &(*out)[*count], what)) {
            break;
        }
        ++*count;
        if (json_accept(r, ',')) {
            continue;
        }
        snprintf(where, sizeof where, "or ',' in %s", what);
        if (json_expect(r, ']', where)) {
            return true;
        }
        break;
    }
    free(*out);
    *out = NULL;
    *count = 0;
    return false;
}

/* json_skip.c: skipping a JSON value of any kind (json_skip_value), as the safetensors reference
 * does with the keys of a tensor it does not know: it accepts exactly what serde_json parses.
 * Beside JSON's grammar, that is a nesting limit and serde_json's own reading of numbers: an
 * integer that fits 64 bits, or else a float computed from a 64-bit significand and a power of
 * ten, which fails ("number out of range") when it overflows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static bool is_digit(const json_reader *r, size_t pos) {
    return pos < r->len && r->text[pos] >= '0' && r->text[pos] <= '9';
}

/* serde_json's overflow!(a * 10 + b, max): whether a * 10 + b exceeds max. */
static bool overflows_u64(uint64_t a, uint64_t b) {
    return a >= UINT64_MAX / 10 && (a > UINT64_MAX / 10 || b > UINT64_MAX % 10);
}

static bool overflows_i32(int32_t a, int32_t b) {
    return a >= INT32_MAX / 10 && (a > INT32_MAX / 10 || b > INT32_MAX % 10);
}

/* 10^k for 0 <= k <= 308, rounded correctly (as Rust's literals are). */
static double power_of_ten(int32_t k) {
    char text[8];
    snprintf(text, sizeof text, "1e%d", (int)k);
    return strtod(text, NULL); /* no decimal point: the locale does not matter */
}

/* serde_json's f64_from_parts: whether significand * 10^exponent is finite. */
static bool finite_from_parts(uint64_t significand, int32_t exponent) {
    double f = (double)significand;
    if (exponent < 0 || f == 0) {
        return true; /* divisions: they never overflow */
    }
    return exponent <= 308 && !isinf(f * power_of_ten(exponent));
}

/* a + b (or a - b), saturating at the int32_t range as Rust's saturating_add does. */
static int32_t saturating(int32_t a, int32_t b, bool add) {
    int64_t sum = add ? (int64_t)a + b : (int64_t)a - b;
    return sum > INT32_MAX ? INT32_MAX : sum < INT32_MIN ? INT32_MIN : (int32_t)sum;
}

/* Skips the number at r->pos; fails where serde_json does. */
static bool skip_number(json_reader *r) {
    size_t p = r->pos;
    if (p < r->len && r->text[p] == '-') {
        p++;
    }
    if (!is_digit(r, p)) {
        return json_fail(r, "invalid number");
    }
    uint64_t significand = 0;
    int32_t exponent = 0;
    bool is_float = false, overflowed = false;
    if (r->text[p] == '0') {
        if (is_digit(r, ++p)) {
            return json_fail(r, "invalid number: a leading zero");
        }
    }
    for (; is_digit(r, p); p++) { /* the integer part: digits past 64 bits scale it */
        uint64_t digit = (uint64_t)(r->text[p] - '0');
        overflowed = overflowed || overflows_u64(significand, digit);
        if (overflowed) {
            exponent++;
        } else {
            significand = significand * 10 + digit;
        }
    }
    is_float = overflowed;
    if (p < r->len && r->text[p] == '.') {
        is_float = true;
        if (!is_digit(r, ++p)) {
            return json_fail(r, "invalid number: no digit after '.'");
        }
        bool dropping = false; /* digits past 64 bits are dropped */
        for (; is_digit(r, p); p++) {
            uint64_t digit = (uint64_t)(r->text[p] - '0');
            dropping = dropping || overflows_u64(significand, digit);
            if (!dropping) {
                significand = significand * 10 + digit;
                exponent--;
            }
        }
    }
    if (p < r->len && (r->text[p] == 'e' || r->text[p] == 'E')) {
        is_float = true;
        bool positive = true;
        if (++p < r->len && (r->text[p] == '+' || r->text[p] == '-')) {
            positive = r->text[p++] == '+';
        }
        if (!is_digit(r, p)) {
            return json_fail(r, "invalid number: no digit in the exponent");
        }
        int32_t value = 0;
        bool too_long = false;
        for (; is_digit(r, p); p++) {
            int32_t digit = r->text[p] - '0';
            too_long = too_long || overflows_i32(value, digit);
            if (!too_long) {
                value = value * 10 + digit;
            }
        }
        if (too_long) { /* +/- infinity is an error; a vanishing number is 0 */
            r->pos = p;
            return significand == 0 || !positive || json_fail(r, "number out of range");
        }
        exponent = saturating(exponent, value, positive);
    }
    r->pos = p;
    if (is_float && !finite_from_parts(significand, exponent)) {
        return json_fail(r, "number out of range");
    }
    return true;
}

/* Skips `word` (true, false, null). */
static bool skip_word(json_reader *r, const char *word) {
    size_t n = strlen(word);
    if (r->len - r->pos < n || memcmp(r->text + r->pos, word, n) != 0) {
        return json_fail(r, "expected a JSON value");
    }
    r->pos += n;
    return true;
}

/* Skips the members of an array or object, whose bracket is read. */
static bool skip_members(json_reader *r, bool object, int depth) {
    char close = object ? '}' : ']';
    if (json_accept(r, close)) {
        return true;
    }
    do {
        if (object && (!json_string_ex(r, NULL, "a key", true) ||
                       !json_expect(r, ':', "after a key"))) {
            return false;
        }
        if (!json_skip_value(r, depth)) {
            return false;
        }
    } while (json_accept(r, ','));
    return json_expect(r, close, object ? "or ',' in an object" : "or ',' in an array");
}

bool json_skip_value(json_reader *r, int depth) {
    if (json_peek(r, '"')) {
        return json_string_ex(r, NULL, "a value", true);
    }
    if (json_accept(r, '{') || json_accept(r, '[')) {
        if (depth + 1 > JSON_MAX_DEPTH) {
            return json_fail(r, "more than %d arrays and objects are nested", JSON_MAX_DEPTH);
        }
        return skip_members(r, r->text[r->pos - 1] == '{', depth + 1);
    }
    char c = r->pos < r->len ? r->text[r->pos] : '\0';
    if (c == '-' || (c >= '0' && c <= '9')) {
        return skip_number(r);
    }
    return skip_word(r, c == 't' ? "true" : c == 'f' ? "false" : "null");
}

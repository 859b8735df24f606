/* json.h: the small strict JSON reader and writer behind safetensors headers (internal).
 *
 * The reader handles what a header holds: objects, strings (every escape, UTF-8 checked),
 * non-negative integers and arrays of them, and skips any other value as the safetensors
 * reference's serde_json accepts it. Anything malformed fails with a message that says what was
 * expected and at which byte of the header. */
#ifndef DLRT_JSON_H_
#define DLRT_JSON_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *text;
    size_t len;
    size_t pos;
    bool out_of_memory; /* the failure was an allocation, not the text */
    char message[256];  /* set by the first failure */
} json_reader;

/* Records a failure at the current position ("byte N: ...") and returns false. */
bool json_fail(json_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Skips whitespace; true (and consumes it) when the next character is `c`. */
bool json_accept(json_reader *r, char c);
/* Skips whitespace and consumes `c`, or fails saying `c` was expected `where`. */
bool json_expect(json_reader *r, char c, const char *where);
/* True when only whitespace is left. */
bool json_at_end(json_reader *r);
/* Reads a string into a NUL-terminated malloc'd copy (*out, owned by the caller). Fails on bad
   escapes, control characters, invalid UTF-8, lone surrogates and NUL characters. */
bool json_string(json_reader *r, char **out, const char *what);
/* json_string, with \u0000 allowed when `allow_nul`, and the copy dropped when out is NULL. */
bool json_string_ex(json_reader *r, char **out, const char *what, bool allow_nul);
/* Reads a non-negative integer that fits uint64_t (no sign, fraction or exponent). */
bool json_uint(json_reader *r, uint64_t *out, const char *what);
/* Reads an array of such integers into a malloc'd array (*out, owned by the caller; NULL when
   empty). */
bool json_uint_array(json_reader *r, uint64_t **out, size_t *count, const char *what);
/* Skips whitespace; true when the next character is `c` (which stays unread). */
bool json_peek(json_reader *r, char c);
/* Skips one JSON value of any kind as serde_json (the safetensors reference) accepts it: at most
   JSON_MAX_DEPTH arrays and objects open at once, counting the `depth` already open, and no
   number out of its range. */
bool json_skip_value(json_reader *r, int depth);
/* Reads the literal null. */
bool json_null(json_reader *r, const char *what);

/* serde_json's limit on nested arrays and objects. */
#define JSON_MAX_DEPTH 127

/* A growable string; `failed` is set (and further appends ignored) once an allocation fails. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} json_writer;

void json_raw(json_writer *w, const char *text);
/* Appends `text` as a JSON string literal, quotes included. */
void json_quoted(json_writer *w, const char *text);
void json_int64(json_writer *w, int64_t value);
void json_writer_free(json_writer *w);

#endif /* DLRT_JSON_H_ */

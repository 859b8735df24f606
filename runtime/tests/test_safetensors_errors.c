/* test_safetensors_errors.c: dlrt_load and dlrt_save that fail: truncated and malformed files
 * (exactly what the reference implementation rejects: it accepts the odd headers listed in
 * good_headers, and rejects overlapping, holed and trailing data), wrong dtypes and shapes,
 * missing and extra tensors, bad bools and bad arguments, each with its status and message,
 * and never a change to the caller's data. */
#include "files.h"

/* ---- failed loads ---- */

/* Loads `path` into w_entry, expecting `code` with `text` in the message and w untouched. */
static void expect_load_failure(const char *path, const char *label, dlrt_status code,
                                const char *text) {
    w_data[0] = 111, w_data[1] = 222;
    dlrt_clear_error();
    dlrt_status status = dlrt_load(path, w_entry, 1, 1);
    CHECK(status == code, "%s: status %d, expected %d", label, (int)status, (int)code);
    CHECK(strstr(dlrt_last_error(), text) != NULL, "%s: the message lacks \"%s\"", label, text);
    CHECK(w_data[0] == 111 && w_data[1] == 222, "%s: a failed load changed the data", label);
}

static void test_truncated(void) {
    float w[2] = {5, 6};
    dlrt_tensor ts[] = {{"w", DLRT_F32, 1, w_shape, w}};
    char full[512];
    snprintf(full, sizeof full, "%s", in_dir("full.safetensors"));
    CHECK(dlrt_save(full, "m", ts, 1) == DLRT_OK, "save");
    size_t len = 0;
    unsigned char *bytes = read_bytes(full, &len);
    CHECK(bytes != NULL && len > 16, "read back");
    const char *cut = in_dir("cut.safetensors");
    for (size_t keep = 0; bytes != NULL && keep < len; keep++) {
        write_bytes(cut, bytes, keep);
        char label[64];
        snprintf(label, sizeof label, "cut to %zu of %zu bytes", keep, len);
        expect_load_failure(cut, label, DLRT_ERR_FORMAT, "truncated");
    }
    free(bytes);
    w_data[0] = w_data[1] = 0;
    CHECK(dlrt_load(full, w_entry, 1, 1) == DLRT_OK && w_data[0] == 5 && w_data[1] == 6,
          "the whole file loads");
}

static const struct {
    const char *header;
    const char *message;
} bad_headers[] = {
    {"", "expected '{' at the start of the header, found the end"},
    {"not json", "header byte 0: expected '{' at the start of the header, found 'n'"},
    {"[1, 2]", "expected '{'"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", "expected a string"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", "expected '}'"},
    {"{\"w", "unterminated string"},
    {"{\"w\\q\":{}}", "invalid escape"},
    {"{\"w\" {}}", "expected ':'"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", "leading zero"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", "fraction or exponent"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", "fraction or exponent"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-],\"data_offsets\":[0,8]}}",
     "expected a non-negative integer"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}",
     "out of the 64-bit range"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "non-negative"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-0],\"data_offsets\":[0,8]}}", "non-negative"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", "non-negative"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":null,\"data_offsets\":[0,8]}}", "expected '['"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2 3],\"data_offsets\":[0,8]}}", "expected ']'"},
    {"{\"w\":{\"dtype\":F32,\"shape\":[2],\"data_offsets\":[0,8]}}", "expected a string"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", "not a range"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", "non-negative"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", "expected 2"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", "expected 2"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", "past the 8 bytes"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "has 4 bytes of data"},
    {"{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", "tensor 'w' has no 'dtype'"},
    {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", "tensor 'w' has no 'shape'"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", "tensor 'w' has no 'data_offsets'"},
    {"{\"w\":{}}", "has no 'dtype'"},
    {"{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     "key 'dtype' twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", "\"__metadata__\" appears twice"},
    {"{\"__metadata__\":{\"a\":1}}", "expected a string (a value of \"__metadata__\")"},
    {"{\"__metadata__\":[]}", "expected '{' to start \"__metadata__\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", "unexpected text"},
    {"{\"w\x01\":{}}", "control character 0x01"},
    {"{\"w\xff\":{}}", "not valid UTF-8"},
    {"{\"w\xc0\xaf\":{}}", "not valid UTF-8"},
    {"{\"w\xed\xa0\x80\":{}}", "not valid UTF-8"},
    {"{\"\\ud800\":{}}", "high surrogate without a low one"},
    {"{\"\\udc00\":{}}", "low surrogate without a high one"},
    {"{\"\\ud800\\u0041\":{}}", "does not follow a high surrogate"},
    {"{\"\\u12\":{}}", "4 hex digits"},
    {"{\"\\u0000\":{}}", "NUL character"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", "expected '}' or ','"},
    /* What the reference (the safetensors package) rejects too. */
    {"{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     "is 'F33', which is not a safetensors dtype"},
    {"{\"w\":{\"dtype\":{\"F32\":1},\"shape\":[2],\"data_offsets\":[0,8]}}", "expected null"},
    {"{\"w\":{\"dtype\":{},\"shape\":[2],\"data_offsets\":[0,8]}}", "expected a string"},
    {"{\"w\":[\"F32\",[2]]}", "expected ','"},
    {"{\"w\":[\"F32\",[2],[0,8],1]}", "expected ']' after a tensor's data_offsets"},
    {"{\"w\":null}", "expected '{' to start tensor 'w'"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1e400}}",
     "number out of range"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[1,]}}",
     "expected a JSON value"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":\"\\ud800\"}}",
     "high surrogate without a low one"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":01}}",
     "leading zero"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":tru}}",
     "expected a JSON value"},
    {"{\"__metadata__\":{\"a\":null}}", "expected a string (a value of \"__metadata__\")"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", "past the 8 bytes"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
     "[8, 0] (not a range of bytes)"},
};

/* Headers the reference accepts, which load into w: serde_json's leniencies, all of them. */
static const char *const good_headers[] = {
    /* Another key in a tensor's object is skipped, whatever its value. */
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[{\"y\":null},"
    "true,false,-0,1.5e-3,1E-400000000000,0e999,18446744073709551616,\"\\u0000\"]}}",
    /* A tensor named twice is its last definition. */
    "{\"w\":{\"dtype\":\"F64\",\"shape\":[7],\"data_offsets\":[9,5]},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    /* A tensor as an array, and a dtype as an object. */
    "{\"w\":[\"F32\",[2],[0,8]]}",
    "{\"w\":{\"dtype\":{\"F32\":null},\"shape\":[2],\"data_offsets\":[0,8]}}",
    /* Metadata: null, or strings with NUL characters and keys given twice. */
    "{\"__metadata__\":null,\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    "{\"__metadata__\":{\"k\":\"\\u0000\",\"k\":\"v\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
};

/* Writes `header` with the 8 bytes of data {1, 2} (as w) after it. */
static void write_with_w(const char *path, const char *header) {
    float data[2] = {1, 2};
    write_file(path, header, data, sizeof data);
}

static void test_lenient_headers(void) {
    const char *path = in_dir("lenient.safetensors");
    for (size_t i = 0; i < sizeof good_headers / sizeof *good_headers; i++) {
        write_with_w(path, good_headers[i]);
        w_data[0] = w_data[1] = 0;
        CHECK(dlrt_load(path, w_entry, 1, 1) == DLRT_OK && w_data[0] == 1 && w_data[1] == 2,
              "good header %zu (%s)", i, good_headers[i]);
    }
    /* serde_json's nesting limit: 127 arrays and objects open at once. */
    char deep[600];
    for (int n = 124; n <= 126; n++) {
        int used = snprintf(deep, sizeof deep, "%s",
                            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":");
        for (int k = 0; k < n; k++) {
            deep[used++] = '[';
        }
        for (int k = 0; k < n; k++) {
            deep[used++] = ']';
        }
        snprintf(deep + used, sizeof deep - (size_t)used, "}}");
        write_with_w(path, deep);
        char label[32];
        snprintf(label, sizeof label, "%d nested arrays", n);
        if (n < 126) {
            CHECK(dlrt_load(path, w_entry, 1, 1) == DLRT_OK, "%s load", label);
        } else {
            expect_load_failure(path, label, DLRT_ERR_FORMAT, "more than 127 arrays");
        }
    }
}

/* The data section: the tensors' data back to back, nothing more (the reference's rule). */
static void test_layout(void) {
    const char *path = in_dir("layout.safetensors");
    float data[5] = {1, 2, 3, 4, 5};
    write_file(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 12);
    expect_load_failure(path, "a trailing byte", DLRT_ERR_FORMAT,
                        "the data section has 12 bytes, but the tensors' data ends at byte 8");
    write_file(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", data, 12);
    expect_load_failure(path, "a hole", DLRT_ERR_FORMAT,
                        "tensor 'w' has data_offsets [4, 12], which leave bytes [0, 4) of the "
                        "data unused");
    float a[2], b[2];
    static const int64_t s2[] = {2};
    dlrt_tensor two[] = {{"a", DLRT_F32, 1, s2, a}, {"b", DLRT_F32, 1, s2, b}};
    write_file(path,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               data, 12);
    a[0] = -1;
    CHECK_STATUS(dlrt_load(path, two, 2, 2), DLRT_ERR_FORMAT,
                 "tensor 'b' has data_offsets [4, 12], which overlap the data of another tensor");
    CHECK(a[0] == -1, "unchanged");
    write_file(path,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               data, 8);
    CHECK_STATUS(dlrt_load(path, two, 2, 2), DLRT_ERR_FORMAT, "which overlap");
    /* Misaligned but back to back: the reference reads it, and so does dlrt_load. */
    int8_t c[1];
    static const int64_t s1[] = {1};
    dlrt_tensor odd[] = {{"c", DLRT_I8, 1, s1, c}, {"a", DLRT_F32, 1, s2, a}};
    unsigned char bytes[9] = {7, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};
    write_file(path,
               "{\"c\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}",
               bytes, 9);
    CHECK(dlrt_load(path, odd, 2, 2) == DLRT_OK && c[0] == 7 && a[0] == 1 && a[1] == 2,
          "a misaligned tensor");
    /* Empty tensors may sit anywhere along the data, even on one byte. */
    dlrt_tensor with_empty[] = {{"a", DLRT_F32, 1, s2, a}, {"e", DLRT_F32, 1, (int64_t[]){0}, a}};
    write_file(path,
               "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               data, 8);
    CHECK(dlrt_load(path, with_empty, 2, 2) == DLRT_OK, "an empty tensor at the end");
    write_file(path,
               "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               data, 8);
    CHECK_STATUS(dlrt_load(path, with_empty, 2, 2), DLRT_ERR_FORMAT, "which overlap");
}

static void test_bad_headers(void) {
    float data[2] = {1, 2};
    const char *path = in_dir("bad.safetensors");
    for (size_t i = 0; i < sizeof bad_headers / sizeof *bad_headers; i++) {
        const char *header = bad_headers[i].header;
        size_t len = strlen(header);
        unsigned char file[512];
        for (int k = 0; k < 8; k++) {
            file[k] = (unsigned char)((uint64_t)len >> (8 * k));
        }
        memcpy(file + 8, header, len);
        memcpy(file + 8 + len, data, sizeof data);
        write_bytes(path, file, 8 + len + sizeof data);
        char label[300];
        snprintf(label, sizeof label, "header %zu (%s)", i, header);
        expect_load_failure(path, label, DLRT_ERR_FORMAT, bad_headers[i].message);
    }

    /* Padding with NUL bytes instead of spaces. */
    static const char nul_padded[] =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}\0\0";
    unsigned char padded_file[8 + sizeof nul_padded + sizeof data] = {sizeof nul_padded};
    memcpy(padded_file + 8, nul_padded, sizeof nul_padded);
    memcpy(padded_file + 8 + sizeof nul_padded, data, sizeof data);
    write_bytes(path, padded_file, sizeof padded_file);
    expect_load_failure(path, "NUL padding", DLRT_ERR_FORMAT, "unexpected text");

    /* The header length itself wrong: more than the file, or than safetensors allows. */
    unsigned char too_long[16] = {0x01, 0xE1, 0xF5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 10^8 + 1 */
    write_bytes(path, too_long, sizeof too_long);
    expect_load_failure(path, "a header over 10^8 bytes", DLRT_ERR_FORMAT,
                        "is more than safetensors allows (100000000 bytes)");
    unsigned char file[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, '{', '}'};
    write_bytes(path, file, sizeof file);
    expect_load_failure(path, "huge header length", DLRT_ERR_FORMAT, "header length");
    write_bytes(path, file, 5);
    expect_load_failure(path, "5-byte file", DLRT_ERR_FORMAT, "has 5 bytes, too few");

    /* Padding with spaces (and other whitespace) is fine. */
    write_file(path, " \n{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}\t\r   ",
               data, sizeof data);
    CHECK(dlrt_load(path, w_entry, 1, 1) == DLRT_OK && w_data[0] == 1, "whitespace is allowed");
}

static void test_mismatches(void) {
    float data[4] = {1, 2, 3, 4};
    const char *path = in_dir("mismatch.safetensors");
    write_file(path, "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", data, 8);
    expect_load_failure(path, "dtype", DLRT_ERR_FORMAT,
                        "tensor 'w' is F64 [1] in the file, expected F32 [2]");
    write_file(path, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", data, 8);
    expect_load_failure(path, "bf16 for f32", DLRT_ERR_FORMAT, "is BF16 [4] in the file");
    write_file(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}", data, 8);
    expect_load_failure(path, "shape", DLRT_ERR_FORMAT,
                        "tensor 'w' is F32 [1, 2] in the file, expected F32 [2]");
    write_file(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", data, 8);
    expect_load_failure(path, "scalar", DLRT_ERR_FORMAT, "is F32 [] in the file");
    write_file(path,
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"zzz\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               data, 16);
    expect_load_failure(path, "extra", DLRT_ERR_FORMAT, "unexpected tensor 'zzz' in the file");
    write_file(path, "{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    expect_load_failure(path, "extra before missing", DLRT_ERR_FORMAT,
                        "unexpected tensor 'v' in the file");
    write_file(path, "{\"__metadata__\":{\"format\":\"pt\"}}", NULL, 0);
    expect_load_failure(path, "missing", DLRT_ERR_FORMAT, "tensor 'w' is missing from the file");
}

static void test_bools(void) {
    const char *path = in_dir("bools.safetensors");
    unsigned char data[3] = {1, 2, 0};
    write_file(path, "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", data, 3);
    unsigned char out[3] = {9, 9, 9};
    static const int64_t s3[] = {3};
    dlrt_tensor entry[] = {{"b", DLRT_BOOL, 1, s3, out}};
    CHECK_STATUS(dlrt_load(path, entry, 1, 1), DLRT_ERR_FORMAT,
                 "bool tensor 'b' holds 2 at element 1");
    CHECK(out[0] == 9, "unchanged");
    dlrt_tensor bad[] = {{"b", DLRT_BOOL, 1, s3, data}};
    CHECK_STATUS(dlrt_save(path, "m", bad, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "bool tensor 'b' holds 2 at element 1");
}

/* Random mutations of a valid file (bytes flipped, set to JSON punctuation, cut, doubled): every
   load must end in OK or FORMAT, and a failed one must leave the data alone. Deterministic. */
static void test_mutations(void) {
    float w[2] = {5, 6};
    dlrt_tensor ts[] = {{"w", DLRT_F32, 1, w_shape, w}};
    char full[512];
    snprintf(full, sizeof full, "%s", in_dir("seed.safetensors"));
    CHECK(dlrt_save(full, "m", ts, 1) == DLRT_OK, "save");
    size_t len = 0;
    unsigned char *seed = read_bytes(full, &len);
    if (seed == NULL) {
        return;
    }
    static const char punctuation[] = "{}[]:,\"\\-0123456789e.u \x01\x80\xff";
    uint64_t state = 0x9E3779B97F4A7C15u;
    unsigned char file[1024];
    const char *path = in_dir("mutant.safetensors");
    for (int round = 0; round < 3000; round++) {
        memcpy(file, seed, len);
        size_t size = len;
        int edits = 1 + round % 4;
        for (int e = 0; e < edits; e++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            size_t at = (size_t)(state >> 8) % size;
            switch ((state >> 40) % 4) {
            case 0:
                file[at] ^= (unsigned char)(1u << ((state >> 50) % 8));
                break;
            case 1:
                file[at] = (unsigned char)punctuation[(state >> 50) % (sizeof punctuation - 1)];
                break;
            case 2:
                size = at + 1;
                break;
            default:
                if (size + 8 <= sizeof file) {
                    memmove(file + at + 8, file + at, size - at);
                    size += 8;
                }
            }
        }
        write_bytes(path, file, size);
        w_data[0] = 111, w_data[1] = 222;
        dlrt_status status = dlrt_load(path, w_entry, 1, 1);
        CHECK(status == DLRT_OK || status == DLRT_ERR_FORMAT, "mutant %d: status %d", round,
              (int)status);
        CHECK(status == DLRT_OK || (w_data[0] == 111 && w_data[1] == 222),
              "mutant %d: a failed load changed the data", round);
        CHECK(status == DLRT_OK || dlrt_last_error()[0] != '\0', "mutant %d: no message", round);
    }
    free(seed);
}

/* ---- bad arguments ---- */

static void test_bad_arguments(void) {
    static float x[2] = {0, 0};
    static const int64_t s2[] = {2}, neg[] = {2, -1}, huge[] = {INT64_MAX, INT64_MAX};
    dlrt_tensor good = {"x", DLRT_F32, 1, s2, x};
    const char *path = in_dir("args.safetensors");
    static const struct {
        dlrt_tensor t;
        const char *message;
    } cases[] = {
        {{NULL, DLRT_F32, 1, s2, x}, "tensor 0 has a NULL name"},
        {{"", DLRT_F32, 1, s2, x}, "tensor 0 has a name that is empty or not UTF-8"},
        {{"\xff", DLRT_F32, 1, s2, x}, "not UTF-8"},
        {{"__metadata__", DLRT_F32, 1, s2, x}, "a name safetensors reserves"},
        {{"x", (dlrt_dtype)99, 1, s2, x}, "tensor 'x' has dtype 99, which is not a dlrt_dtype"},
        {{"x", DLRT_F32, -1, s2, x}, "tensor 'x' has rank -1"},
        {{"x", DLRT_F32, 2, NULL, x}, "tensor 'x' has rank 2 but a NULL shape"},
        {{"x", DLRT_F32, 2, neg, x}, "tensor 'x' has dimension -1 on axis 1"},
        {{"x", DLRT_F32, 2, huge, x}, "tensor 'x' is too large"},
        {{"x", DLRT_F32, 1, s2, NULL}, "tensor 'x' has a NULL data pointer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dlrt_tensor ts[2] = {cases[i].t, good};
        CHECK_STATUS(dlrt_save(path, "m", ts, 1), DLRT_ERR_INVALID_ARGUMENT, cases[i].message);
        CHECK_STATUS(dlrt_load(path, ts, 1, 1), DLRT_ERR_INVALID_ARGUMENT, cases[i].message);
    }
    CHECK(!exists(path) && temporaries(path) == 0, "failed saves create no file");

    dlrt_tensor twice[] = {good, good};
    CHECK_STATUS(dlrt_save(path, "m", twice, 2), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_save: tensor name 'x' is given twice");
    CHECK_STATUS(dlrt_load(path, twice, 2, 2), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_load: tensor name 'x' is given twice");
    CHECK_STATUS(dlrt_save(NULL, "m", &good, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_save: argument 'path' is NULL");
    CHECK_STATUS(dlrt_save("", "m", &good, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_save: argument 'path' is empty");
    CHECK_STATUS(dlrt_save(path, NULL, &good, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_save: argument 'model' is NULL");
    CHECK_STATUS(dlrt_save(path, "\xc3", &good, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "argument 'model' is not valid UTF-8");
    CHECK_STATUS(dlrt_save(path, "m", NULL, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_save: argument 'ts' is NULL but n is 1");
    CHECK_STATUS(dlrt_load(NULL, &good, 1, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_load: argument 'path' is NULL");
    CHECK_STATUS(dlrt_load(path, NULL, 1, 1), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_load: argument 'ts' is NULL but n is 1");
    CHECK_STATUS(dlrt_load(path, &good, 1, 2), DLRT_ERR_INVALID_ARGUMENT,
                 "argument 'required' (2) is more than n (1)");
    CHECK_STATUS(dlrt_load(in_dir("no-such-file"), &good, 1, 1), DLRT_ERR_IO,
                 "dlrt_load: cannot open");
    CHECK(strstr(dlrt_last_error(), "No such file") != NULL, "says why");
    CHECK_STATUS(dlrt_load(dir, &good, 1, 1), DLRT_ERR_IO, "is not a regular file");
    CHECK_STATUS(dlrt_save(dir, "m", &good, 1), DLRT_ERR_IO, "dlrt_save: cannot rename");
    CHECK(temporaries(dir) == 0, "the temporary file is removed after a failed rename");
    CHECK(dlrt_dtype_size((dlrt_dtype)9) == 0 && dlrt_dtype_size((dlrt_dtype)-1) == 0,
          "not dtypes");
    CHECK(dlrt_dtype_size(DLRT_BOOL) == 1 && dlrt_dtype_size(DLRT_I16) == 2 &&
              dlrt_dtype_size(DLRT_F16) == 2 && dlrt_dtype_size(DLRT_I32) == 4 &&
              dlrt_dtype_size(DLRT_F64) == 8 && dlrt_dtype_size(DLRT_BF16) == 2,
          "sizes");
}

int main(void) {
    if (!open_test_dir("test_safetensors_errors")) {
        return 1;
    }
    test_truncated();
    test_bad_headers();
    test_lenient_headers();
    test_layout();
    test_mismatches();
    test_bools();
    test_mutations();
    test_bad_arguments();
    close_test_dir();
    return check_summary("test_safetensors_errors");
}

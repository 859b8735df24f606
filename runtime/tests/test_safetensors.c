/* test_safetensors.c: dlrt_save and dlrt_load that work: round trips of every dtype, the exact
 * bytes of a file, escaped names, optional entries, and atomic saves (a failed save keeps the
 * previous file). */
#include "files.h"

#include <sys/wait.h>

/* ---- round trips ---- */

static void test_round_trip(void) {
    uint8_t flags[5] = {1, 0, 0, 1, 1};
    int8_t i8[3] = {-128, 0, 127};
    int16_t i16[2][2] = {{-32768, 1}, {2, 32767}};
    int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
    int64_t i64 = INT64_MIN; /* a scalar, like __step__ */
    uint16_t f16[3] = {0x3C00, 0xC000, 0x7BFF};
    float f32[2][3] = {{1.5f, -2.25f, 0}, {1e-30f, 3e38f, -0.0f}};
    double f64[1] = {3.141592653589793};
    float empty[1];
    static const int64_t s5[] = {5}, s3[] = {3}, s22[] = {2, 2}, s4[] = {4}, s23[] = {2, 3},
                         s1[] = {1}, s03[] = {0, 3};
    dlrt_tensor ts[] = {
        {"flags", DLRT_BOOL, 1, s5, flags}, {"i8", DLRT_I8, 1, s3, i8},
        {"i16", DLRT_I16, 2, s22, i16},     {"i32", DLRT_I32, 1, s4, i32},
        {"__step__", DLRT_I64, 0, NULL, &i64}, {"f16", DLRT_F16, 1, s3, f16},
        {"W", DLRT_F32, 2, s23, f32},       {"f64", DLRT_F64, 1, s1, f64},
        {"empty", DLRT_F32, 2, s03, empty},
    };
    size_t n = sizeof ts / sizeof *ts;
    const char *path = in_dir("round.safetensors");
    CHECK(dlrt_save(path, "digits", ts, n) == DLRT_OK, "save");
    CHECK(temporaries(path) == 0, "no temporary file is left");

    uint8_t flags2[5];
    int8_t i8b[3];
    int16_t i16b[2][2];
    int32_t i32b[4];
    int64_t i64b;
    uint16_t f16b[3];
    float f32b[2][3];
    double f64b[1];
    dlrt_tensor back[] = {
        {"flags", DLRT_BOOL, 1, s5, flags2}, {"i8", DLRT_I8, 1, s3, i8b},
        {"i16", DLRT_I16, 2, s22, i16b},     {"i32", DLRT_I32, 1, s4, i32b},
        {"__step__", DLRT_I64, 0, NULL, &i64b}, {"f16", DLRT_F16, 1, s3, f16b},
        {"W", DLRT_F32, 2, s23, f32b},       {"f64", DLRT_F64, 1, s1, f64b},
        {"empty", DLRT_F32, 2, s03, NULL},
    };
    CHECK(dlrt_load(path, back, n, n) == DLRT_OK, "load");
    for (size_t i = 0; i + 1 < n; i++) {
        size_t bytes = dlrt_dtype_size(ts[i].dtype);
        for (int32_t a = 0; a < ts[i].rank; a++) {
            bytes *= (size_t)ts[i].shape[a];
        }
        CHECK(memcmp(ts[i].data, back[i].data, bytes) == 0, "tensor '%s' comes back",
              ts[i].name);
    }
}

static void test_exact_bytes(void) {
    int8_t a[3] = {1, 2, 3};
    float b[2] = {1.0f, 2.0f};
    static const int64_t s3[] = {3}, s2[] = {2};
    dlrt_tensor ts[] = {{"a", DLRT_I8, 1, s3, a}, {"b", DLRT_F32, 1, s2, b}};
    const char *path = in_dir("exact.safetensors");
    CHECK(dlrt_save(path, "m\"x", ts, 2) == DLRT_OK, "save");
    size_t len = 0;
    unsigned char *bytes = read_bytes(path, &len);
    const char *header = "{\"__metadata__\":{\"format\":\"dlvm\",\"model\":\"m\\\"x\"},"
                         "\"a\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[8,11]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t header_len = strlen(header);
    size_t padded = (header_len + 7) / 8 * 8;
    CHECK(bytes != NULL && len == 8 + padded + 11, "file size %zu", len);
    if (bytes == NULL || len != 8 + padded + 11) {
        free(bytes);
        return;
    }
    uint64_t stored = 0;
    for (int k = 7; k >= 0; k--) {
        stored = stored << 8 | bytes[k];
    }
    CHECK(stored == padded, "little-endian header length %llu", (unsigned long long)stored);
    CHECK(memcmp(bytes + 8, header, header_len) == 0, "header is \"%.*s\"", (int)padded,
          (const char *)bytes + 8);
    for (size_t k = header_len; k < padded; k++) {
        CHECK(bytes[8 + k] == ' ', "padded with spaces");
    }
    /* 4-byte floats first, so every tensor is aligned to its element size. */
    CHECK(memcmp(bytes + 8 + padded, b, 8) == 0 && memcmp(bytes + 8 + padded + 8, a, 3) == 0,
          "data");
    free(bytes);
}

static void test_escaped_names(void) {
    float x[1] = {1}, y[1] = {2}, z[1] = {3}, w[1] = {4};
    static const int64_t s1[] = {1};
    dlrt_tensor ts[] = {{"q\"b\\s", DLRT_F32, 1, s1, x},
                        {"tab\tnl\n", DLRT_F32, 1, s1, y},
                        {"\xc3\xa9t\xc3\xa9", DLRT_F32, 1, s1, z},
                        {"\xf0\x9f\x98\x80", DLRT_F32, 1, s1, w}};
    const char *path = in_dir("names.safetensors");
    CHECK(dlrt_save(path, "m", ts, 4) == DLRT_OK, "save");
    float x2[1] = {0}, y2[1] = {0}, z2[1] = {0}, w2[1] = {0};
    dlrt_tensor back[] = {{"q\"b\\s", DLRT_F32, 1, s1, x2},
                          {"tab\tnl\n", DLRT_F32, 1, s1, y2},
                          {"\xc3\xa9t\xc3\xa9", DLRT_F32, 1, s1, z2},
                          {"\xf0\x9f\x98\x80", DLRT_F32, 1, s1, w2}};
    CHECK(dlrt_load(path, back, 4, 4) == DLRT_OK, "load");
    CHECK(x2[0] == 1 && y2[0] == 2 && z2[0] == 3 && w2[0] == 4, "values");

    /* The same names written with \u escapes (and a surrogate pair) by another writer. */
    const char *header =
        "{\"\\u00e9t\\u00E9\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"\\ud83d\\ude00\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"q\\\"b\\\\s\" : { \"data_offsets\" : [8, 12], \"shape\":[1], \"dtype\":\"F32\"},"
        "\"tab\\u0009nl\\n\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}  ";
    float data[4] = {30, 40, 10, 20};
    write_file(in_dir("escapes.safetensors"), header, data, sizeof data);
    CHECK(dlrt_load(in_dir("escapes.safetensors"), back, 4, 4) == DLRT_OK, "load escapes");
    CHECK(x2[0] == 10 && y2[0] == 20 && z2[0] == 30 && w2[0] == 40, "values by name");
}

static void test_no_tensors(void) {
    const char *path = in_dir("empty.safetensors");
    CHECK(dlrt_save(path, "", NULL, 0) == DLRT_OK, "save nothing");
    CHECK(dlrt_load(path, NULL, 0, 0) == DLRT_OK, "load nothing");
    write_file(path, "{}", NULL, 0);
    CHECK(dlrt_load(path, NULL, 0, 0) == DLRT_OK, "an empty header");
}

static void test_optional_entries(void) {
    float w[2] = {1, 2}, m[2] = {3, 4};
    int64_t step = 9;
    static const int64_t s2[] = {2};
    dlrt_tensor all[] = {{"w", DLRT_F32, 1, s2, w},
                         {"w_m", DLRT_F32, 1, s2, m},
                         {"__step__", DLRT_I64, 0, NULL, &step}};
    const char *path = in_dir("params_only.safetensors");
    CHECK(dlrt_save(path, "m", all, 1) == DLRT_OK, "save the parameter only");
    float w2[2] = {0, 0}, m2[2] = {-1, -1};
    int64_t step2 = -1;
    dlrt_tensor back[] = {{"w", DLRT_F32, 1, s2, w2},
                          {"w_m", DLRT_F32, 1, s2, m2},
                          {"__step__", DLRT_I64, 0, NULL, &step2}};
    CHECK(dlrt_load(path, back, 3, 1) == DLRT_OK, "optional entries may be missing");
    CHECK(w2[0] == 1 && w2[1] == 2, "the parameter is loaded");
    CHECK(m2[0] == -1 && step2 == -1, "missing optional entries keep their data");
    CHECK_STATUS(dlrt_load(path, back, 3, 2), DLRT_ERR_FORMAT, "tensor 'w_m' is missing");
    CHECK(dlrt_save(path, "m", all, 3) == DLRT_OK, "save everything");
    CHECK(dlrt_load(path, back, 3, 1) == DLRT_OK && m2[1] == 4 && step2 == 9,
          "present optional entries are loaded");
}

/* ---- atomic saves ---- */

/* Saves over `path` in a directory this process cannot write: the save fails cleanly. */
static void save_into_unwritable_directory(const char *path, const dlrt_tensor *new_t) {
    CHECK_STATUS(dlrt_save(path, "m", new_t, 1), DLRT_ERR_IO, "Permission denied");
    CHECK(strstr(dlrt_last_error(), "dlrt_save: cannot create a temporary file") != NULL,
          "says what failed");
    CHECK(temporaries(path) == 0, "no temporary file");
}

/* Tries the save into a directory that is not writable. Root ignores permissions, so as root a
   child process that became `nobody` tries, in a directory root owns. */
static void test_unwritable_directory(const char *sub, const char *path,
                                      const dlrt_tensor *new_t) {
    if (geteuid() != 0) {
        CHECK(chmod(sub, 0555) == 0, "chmod");
        save_into_unwritable_directory(path, new_t);
        chmod(sub, 0755);
        return;
    }
    pid_t child = fork();
    if (child == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            _exit(2);
        }
        save_into_unwritable_directory(path, new_t);
        _exit(check_failures == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child, "forked");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
        printf("test_atomic_save: cannot become nobody; the unwritable directory is skipped\n");
    } else {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the save into an unwritable directory (as nobody) failed cleanly");
    }
}

static void test_atomic_save(void) {
    float old_w[2] = {1, 2}, new_w[2] = {3, 4};
    dlrt_tensor old_t[] = {{"w", DLRT_F32, 1, w_shape, old_w}};
    dlrt_tensor new_t[] = {{"w", DLRT_F32, 1, w_shape, new_w}};
    /* In /tmp, which everyone may traverse (the test directory may sit in private ones). */
    char sub[] = "/tmp/dlrt-locked-XXXXXX";
    CHECK(mkdtemp(sub) != NULL && chmod(sub, 0755) == 0, "mkdtemp %s", sub);
    char path[400];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", sub);
    CHECK(dlrt_save(path, "m", old_t, 1) == DLRT_OK, "first checkpoint");

    /* The temporary file cannot be created (even by root): its directory does not exist. */
    char missing[450];
    snprintf(missing, sizeof missing, "%s/no-such-dir/ckpt.safetensors", sub);
    CHECK_STATUS(dlrt_save(missing, "m", new_t, 1), DLRT_ERR_IO,
                 "dlrt_save: cannot create a temporary file beside");
    CHECK(strstr(dlrt_last_error(), missing) != NULL, "names the file");
    CHECK(strstr(dlrt_last_error(), "No such file or directory") != NULL, "says why");

    test_unwritable_directory(sub, path, new_t);
    w_data[0] = w_data[1] = 0;
    CHECK(dlrt_load(path, w_entry, 1, 1) == DLRT_OK && w_data[0] == 1 && w_data[1] == 2,
          "the old checkpoint survives");

    CHECK(dlrt_save(path, "m", new_t, 1) == DLRT_OK, "a later save works");
    CHECK(dlrt_load(path, w_entry, 1, 1) == DLRT_OK && w_data[0] == 3, "and replaces the file");
    CHECK(temporaries(path) == 0, "no temporary file is left");
    unlink(path);
    CHECK(rmdir(sub) == 0, "%s holds no unexpected file", sub);
}

int main(void) {
    if (!open_test_dir("test_safetensors")) {
        return 1;
    }
    test_round_trip();
    test_exact_bytes();
    test_escaped_names();
    test_no_tensors();
    test_optional_entries();
    test_atomic_save();
    close_test_dir();
    return check_summary("test_safetensors");
}

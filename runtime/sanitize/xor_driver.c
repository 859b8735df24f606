/* xor_driver.c: the workload of `make sanitize` (runtime/sanitize/sanitize.sh), a program using
 * the library of samples/xor.tel built with sanitizers (or run under valgrind): it trains the
 * model, saves and loads checkpoints, loads broken ones, misuses every function (NULLs, unknown
 * names and devices, hostile DLTensors), trains through the all-reduce hook of a library built
 * with --distributed (a hook that doubles the sums, as two equal ranks would, and one that
 * fails), and trains two models on two threads that save to one path. A wrong result is a message and exit status 1; the sanitizers stop it at the first
 * memory error, data race or undefined behaviour.
 *
 * Usage: xor_driver DIRECTORY (where its files go). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xor.h"

static int failures;
static const char *dir;

#define EXPECT(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "xor_driver:%d: ", __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, " (last error: \"%s\")\n", dlrt_last_error());                 \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

/* `code` and a message that starts with `prefix`. */
#define EXPECT_ERROR(expr, code, prefix)                                                   \
    do {                                                                                   \
        dlrt_status s_ = (expr);                                                           \
        EXPECT(s_ == (code) && strncmp(dlrt_last_error(), prefix, strlen(prefix)) == 0,   \
               "%s gave %d, expected %d with \"%s\"", #expr, (int)s_, (int)(code), prefix); \
    } while (0)

static const float X[8] = {0, 0, 0, 1, 1, 0, 1, 1};
static const float LABELS[4] = {0, 1, 1, 0};

static const char *file(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static xor_model *create(uint64_t seed) {
    xor_model *m = NULL;
    EXPECT(xor_create("cpu", seed, &m) == DLRT_OK && m != NULL, "create");
    return m;
}

static float train(xor_model *m, int steps) {
    float loss = -1;
    for (int i = 0; i < steps; i++) {
        EXPECT(xor_train_step(m, X, LABELS, &loss) == DLRT_OK, "train step %d", i);
    }
    return loss;
}

static void test_train(void) {
    xor_model *m = create(1);
    float first = train(m, 1), last = train(m, 299), y[4];
    EXPECT(last < first, "the loss fell: %g to %g", (double)first, (double)last);
    EXPECT(xor_infer(m, X, y) == DLRT_OK, "infer");
    for (int i = 0; i < 4; i++) {
        EXPECT((y[i] > 0.5f) == (LABELS[i] == 1), "example %d classified: %g", i, (double)y[i]);
    }
    xor_destroy(m);
}

static void test_save_load(void) {
    char path[512];
    xor_model *a = create(1), *b = create(2);
    train(a, 20);
    EXPECT(xor_save(a, file("ckpt.safetensors", path, sizeof path)) == DLRT_OK, "save");
    EXPECT(xor_load(b, path) == DLRT_OK, "load");
    float ya[4], yb[4], w[16], w2[16];
    EXPECT(xor_infer(a, X, ya) == DLRT_OK && xor_infer(b, X, yb) == DLRT_OK, "infer");
    EXPECT(memcmp(ya, yb, sizeof ya) == 0, "the loaded model infers the same");
    /* States and step came along: the next steps agree too. */
    EXPECT(train(a, 5) == train(b, 5), "the same steps after loading");
    EXPECT(xor_get_param(a, "W1", w) == DLRT_OK, "get");
    for (int i = 0; i < 16; i++) {
        w[i] += 1;
    }
    EXPECT(xor_set_param(b, "W1", w) == DLRT_OK && xor_get_param(b, "W1", w2) == DLRT_OK, "set");
    EXPECT(memcmp(w, w2, sizeof w) == 0, "get what was set");
    xor_destroy(a);
    xor_destroy(b);
}

/* Every prefix of a checkpoint, and copies with one byte changed: each load fails cleanly (or
   loads) and a failed one leaves the model as it was. */
static void test_broken_files(void) {
    char path[512], broken[512];
    xor_model *m = create(3);
    train(m, 3);
    EXPECT(xor_save(m, file("good.safetensors", path, sizeof path)) == DLRT_OK, "save");
    FILE *f = fopen(path, "rb");
    static unsigned char bytes[1 << 16];
    size_t len = f != NULL ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    EXPECT(len > 100, "read the checkpoint back");
    float before[4], after[4];
    EXPECT(xor_infer(m, X, before) == DLRT_OK, "infer");
    file("broken.safetensors", broken, sizeof broken);
    for (size_t k = 0; k < len; k += 3) {
        for (int mode = 0; mode < 2; mode++) {
            FILE *out = fopen(broken, "wb");
            unsigned char saved = bytes[k];
            bytes[k] = mode == 0 ? saved : (unsigned char)(saved ^ 0x5A);
            fwrite(bytes, 1, mode == 0 ? k : len, out);
            fclose(out);
            bytes[k] = saved;
            dlrt_status s = xor_load(m, broken);
            EXPECT(s == DLRT_OK || s == DLRT_ERR_FORMAT, "load of a broken file: %d", (int)s);
            if (s != DLRT_OK) {
                EXPECT(strncmp(dlrt_last_error(), "xor_load: ", 10) == 0, "the message");
                EXPECT(xor_infer(m, X, after) == DLRT_OK && !memcmp(before, after, sizeof after),
                       "a failed load changed the model (byte %zu)", k);
            } else { /* a changed byte of data loads: take the file's values as the new ones */
                EXPECT(xor_infer(m, X, before) == DLRT_OK, "infer");
            }
        }
    }
    xor_destroy(m);
}

static DLTensor tensor(float *data, int32_t ndim, int64_t *shape) {
    DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, NULL, 0};
    return t;
}

static void test_misuse(void) {
    char path[512];
    xor_model *m = NULL, *live = create(4);
    float x[8] = {0}, y[4], loss, w[16];
    EXPECT_ERROR(xor_create("tpu", 0, &m), DLRT_ERR_INVALID_ARGUMENT, "xor_create: unknown");
    EXPECT(m == NULL, "no model");
    EXPECT_ERROR(xor_create("cuda:0", 0, &m), DLRT_ERR_DEVICE, "xor_create: device 'cuda:0'");
    EXPECT_ERROR(xor_create("cpu", 0, NULL), DLRT_ERR_INVALID_ARGUMENT, "xor_create");
    EXPECT_ERROR(xor_infer(NULL, x, y), DLRT_ERR_INVALID_ARGUMENT, "xor_infer: argument 'm'");
    EXPECT_ERROR(xor_infer(live, NULL, y), DLRT_ERR_INVALID_ARGUMENT, "xor_infer: argument 'x'");
    EXPECT_ERROR(xor_train_step(live, x, NULL, &loss), DLRT_ERR_INVALID_ARGUMENT,
                 "xor_train_step: argument 'labels'");
    EXPECT_ERROR(xor_get_param(live, "W9", w), DLRT_ERR_INVALID_ARGUMENT,
                 "xor_get_param: unknown parameter 'W9'");
    EXPECT_ERROR(xor_get_param(live, NULL, w), DLRT_ERR_INVALID_ARGUMENT, "xor_get_param");
    EXPECT_ERROR(xor_set_param(live, "W1", NULL), DLRT_ERR_INVALID_ARGUMENT, "xor_set_param");
    EXPECT_ERROR(xor_save(live, ""), DLRT_ERR_INVALID_ARGUMENT, "xor_save");
    EXPECT_ERROR(xor_save(NULL, "x"), DLRT_ERR_INVALID_ARGUMENT, "xor_save: argument 'm'");
    EXPECT_ERROR(xor_load(live, file("no-such-file", path, sizeof path)), DLRT_ERR_IO,
                 "xor_load");
    EXPECT_ERROR(xor_load(live, dir), DLRT_ERR_IO, "xor_load");
    EXPECT_ERROR(xor_save(live, dir), DLRT_ERR_IO, "xor_save");

    int64_t sx[] = {4, 2}, sy[] = {4, 1}, wrong[] = {2, 4}, strides[] = {1, 4};
    DLTensor tx = tensor(x, 2, sx), ty = tensor(y, 2, sy);
    DLTensor *args[] = {&tx, &ty};
    EXPECT(xor_infer_dl(live, args) == DLRT_OK, "infer_dl");
    EXPECT_ERROR(xor_infer_dl(live, NULL), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    DLTensor *none[] = {NULL, &ty};
    EXPECT_ERROR(xor_infer_dl(live, none), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.ndim = 3;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.ndim = 2, tx.shape = wrong;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.shape = sx, tx.strides = strides;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.strides = NULL, tx.dtype.bits = 64;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.dtype.bits = 32, tx.device.device_type = kDLCUDA;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_DEVICE, "xor_infer_dl");
    tx.device.device_type = kDLCPU, tx.byte_offset = UINT64_C(1) << 63;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.byte_offset = 2;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    tx.byte_offset = 0, tx.data = NULL;
    EXPECT_ERROR(xor_infer_dl(live, args), DLRT_ERR_INVALID_ARGUMENT, "xor_infer_dl");
    xor_destroy(live);
    xor_destroy(NULL);
}

/* A hook standing for two ranks with the same gradients: each sum is twice the value. */
static int32_t doubling(void *ctx, void *buffer, int64_t count, dlrt_dtype dtype,
                        DLDevice device) {
    if (dtype != DLRT_F32 || device.device_type != kDLCPU) {
        return 2;
    }
    float *sums = buffer;
    for (int64_t i = 0; i < count; i++) {
        sums[i] *= 2;
    }
    ++*(int *)ctx;
    return 0;
}

/* A hook that writes garbage (half-done sums) and fails. */
static int32_t failing(void *ctx, void *buffer, int64_t count, dlrt_dtype dtype,
                       DLDevice device) {
    (void)ctx, (void)device;
    memset(buffer, 0xff, (size_t)count * (dtype == DLRT_F64 ? 8 : dtype == DLRT_F16 ? 2 : 4));
    return 7;
}

static void test_allreduce(void) {
    xor_model *plain = create(5), *ranked = create(5);
    int calls = 0;
    float w[XOR_PARAM_W1_SIZE], v[XOR_PARAM_W1_SIZE], loss = 0;
    EXPECT(xor_set_allreduce(ranked, doubling, &calls, 2) == DLRT_OK, "set_allreduce");
    for (int i = 0; i < 20; i++) {
        float a = -1, b = -2;
        EXPECT(xor_train_step(plain, X, LABELS, &a) == DLRT_OK, "plain step %d", i);
        EXPECT(xor_train_step(ranked, X, LABELS, &b) == DLRT_OK, "ranked step %d", i);
        EXPECT(a == b, "step %d: the same loss, %g and %g", i, (double)a, (double)b);
    }
    EXPECT(calls == 20, "the hook ran once a step (%d)", calls);
    xor_get_param(plain, "W1", w);
    xor_get_param(ranked, "W1", v);
    EXPECT(memcmp(w, v, sizeof w) == 0, "two equal ranks train exactly as one");
    EXPECT(xor_set_allreduce(ranked, failing, NULL, 2) == DLRT_OK, "set a failing hook");
    EXPECT_ERROR(xor_train_step(ranked, X, LABELS, &loss), DLRT_ERR_COLLECTIVE,
                 "xor_train_step: the all-reduce hook failed");
    xor_get_param(ranked, "W1", v);
    EXPECT(memcmp(w, v, sizeof w) == 0, "a failed step changes nothing");
    EXPECT_ERROR(xor_set_allreduce(ranked, doubling, &calls, 0), DLRT_ERR_INVALID_ARGUMENT,
                 "xor_set_allreduce: ranks is 0");
    EXPECT_ERROR(xor_set_allreduce(NULL, doubling, &calls, 2), DLRT_ERR_INVALID_ARGUMENT,
                 "xor_set_allreduce: argument 'm' is NULL");
    EXPECT(xor_set_allreduce(ranked, doubling, &calls, 2) == DLRT_OK, "set again");
    xor_destroy(plain); /* `ranked` keeps its hook and block: destroy frees both */
    xor_destroy(ranked);
}

/* Two threads, each training its own model and saving it to one path every few steps. */
static void *trainer(void *arg) {
    char path[512];
    xor_model *m = create((uint64_t)(uintptr_t)arg);
    for (int round = 0; round < 10; round++) {
        train(m, 5);
        EXPECT(xor_save(m, file("shared.safetensors", path, sizeof path)) == DLRT_OK, "save");
        EXPECT(xor_load(m, path) == DLRT_OK, "load what either thread saved");
    }
    xor_destroy(m);
    return NULL;
}

static void test_threads(void) {
    pthread_t threads[2];
    for (int k = 0; k < 2; k++) {
        pthread_create(&threads[k], NULL, trainer, (void *)(uintptr_t)(k + 10));
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(threads[k], NULL);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: xor_driver DIRECTORY\n");
        return 2;
    }
    dir = argv[1];
    test_train();
    test_save_load();
    test_broken_files();
    test_misuse();
    test_allreduce();
    test_threads();
    if (failures > 0) {
        fprintf(stderr, "xor_driver: %d checks failed\n", failures);
        return 1;
    }
    printf("xor_driver: all checks passed\n");
    return 0;
}

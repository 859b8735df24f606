/* test_model_derived.c: derived states (`telc build --quantize int8`'s int8 weights; docs/c-abi.md
 * section 6), driven by hand-written tables: computed by the spec's derive host before an infer
 * entry only when the parameters changed since (create, set_param, load, train steps, failed or
 * not), neither saved nor loaded nor in the manifest; a failed derive fails the entry and is
 * tried again by the next one. */
#include "files.h" /* first: it asks for POSIX (setenv, mkdtemp) */

static int derive_calls;

static int32_t init(dlrt_context *c, void *const *a) {
    float *W = a[0];
    (void)c;
    W[0] = 1, W[1] = 2;
    return DLRT_OK;
}

/* W; W_d = 2 W. Fails for W[0] == 666. */
static int32_t derive(dlrt_context *c, void *const *a) {
    const float *W = a[0];
    float *D = a[1];
    (void)c;
    derive_calls++;
    if (W[0] == 666) {
        return dlrt_error(DLRT_ERR_INTERNAL, "dl_derive: cursed weight");
    }
    for (int i = 0; i < 2; i++) {
        D[i] = 2 * W[i];
    }
    return DLRT_OK;
}

/* x, W, W_d; y = x + W_d. */
static int32_t infer(dlrt_context *c, void *const *a) {
    const float *x = a[0], *D = a[2];
    float *y = a[3];
    (void)c;
    for (int i = 0; i < 2; i++) {
        y[i] = x[i] + D[i];
    }
    return DLRT_OK;
}

/* x, W; loss, W' = W + x. Fails when x[0] < 0. */
static int32_t train(dlrt_context *c, void *const *a) {
    const float *x = a[0], *W = a[1];
    float *loss = a[2], *W2 = a[3];
    (void)c;
    if (x[0] < 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dl_train: x is negative");
    }
    *loss = 0;
    for (int i = 0; i < 2; i++) {
        W2[i] = W[i] + x[i];
    }
    return DLRT_OK;
}

static const int64_t shapes[] = {2};
static const dlrt_tensor tensors[] = {
    {"W", DLRT_F32, 1, shapes, NULL}, {"W_d", DLRT_F32, 1, shapes, NULL},
    {"x", DLRT_F32, 1, shapes, NULL}, {"y", DLRT_F32, 1, shapes, NULL},
    {"x", DLRT_F32, 1, shapes, NULL}, {"loss", DLRT_F32, 0, NULL, NULL},
};
static const int32_t indices[] = {0, 1};
static const dlrt_entry entries[] = {
    {"infer", "infer", "d_infer", "dl_infer", infer, 1, 1, tensors + 2, 2, indices, -1, NULL,
     NULL},
    {"train", "train", "d_train", "dl_train", train, 1, 1, tensors + 4, 1, indices, -1, NULL,
     NULL},
};
static const int32_t state_params[] = {0};
static const dlrt_model_spec spec = {"d", "d", "test 1", 1, 1, tensors, state_params, init,
                                     "dl_init", 2, entries, NULL, 0, 1, derive, "dl_derive"};

static const char expected_manifest[] =
    "{\"abi\": 1, \"name\": \"d\", \"compiler\": \"test 1\", \"devices\": [\"cpu\"], "
    "\"params\": [{\"name\": \"W\", \"dtype\": \"f32\", \"shape\": [2]}], \"states\": [], "
    "\"entries\": [{\"name\": \"infer\", \"kind\": \"infer\", \"symbol\": \"d_infer\", "
    "\"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2]}], \"outputs\": "
    "[{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2]}]}, {\"name\": \"train\", "
    "\"kind\": \"train\", \"symbol\": \"d_train\", \"inputs\": [{\"name\": \"x\", "
    "\"dtype\": \"f32\", \"shape\": [2]}], \"outputs\": [{\"name\": \"loss\", \"dtype\": "
    "\"f32\", \"shape\": []}]}]}";

/* y of infer on x = 0: W_d, as the model last derived it. */
static float derived(dlrt_model *m, int i) {
    float x[2] = {0, 0}, y[2] = {-1, -1};
    void *args[] = {x, y};
    CHECK(dlrt_model_call(&spec, 0, m, args) == DLRT_OK, "infer");
    return y[i];
}

static void test_when_derived(void) {
    dlrt_model *m = NULL;
    CHECK(dlrt_model_create(&spec, "cpu", 0, &m) == DLRT_OK, "create");
    CHECK(derive_calls == 0, "create derives nothing");
    CHECK(derived(m, 0) == 2 && derived(m, 1) == 4 && derive_calls == 1, "derived once");
    float w[2] = {3, 4};
    CHECK(dlrt_model_set_param(&spec, m, "W", w) == DLRT_OK, "set W");
    CHECK(derive_calls == 1, "set_param derives nothing");
    CHECK(derived(m, 0) == 6 && derived(m, 1) == 8 && derive_calls == 2, "after set_param");
    float x[2] = {1, 1}, loss;
    void *args[] = {x, &loss};
    CHECK(dlrt_model_call(&spec, 1, m, args) == DLRT_OK, "a train step");
    CHECK(derived(m, 0) == 8 && derive_calls == 3, "after a train step");
    x[0] = -1;
    CHECK(dlrt_model_call(&spec, 1, m, args) != DLRT_OK, "a failed train step");
    CHECK(derived(m, 0) == 8 && derive_calls == 4, "derived again after a failed step");
    w[0] = 666;
    CHECK(dlrt_model_set_param(&spec, m, "W", w) == DLRT_OK, "a cursed W");
    float y[2];
    void *infer_args[] = {x, y};
    CHECK_STATUS(dlrt_model_call(&spec, 0, m, infer_args), DLRT_ERR_INTERNAL,
                 "d_infer: dl_derive: cursed weight");
    w[0] = 5;
    CHECK(dlrt_model_set_param(&spec, m, "W", w) == DLRT_OK, "W again");
    CHECK(derived(m, 0) == 10 && derive_calls == 6, "a failed derive is tried again");
    dlrt_model_destroy(m);
}

static void test_not_saved(void) {
    dlrt_model *m = NULL, *other = NULL;
    CHECK(dlrt_model_create(&spec, "cpu", 0, &m) == DLRT_OK, "create");
    CHECK(dlrt_model_create(&spec, "cpu", 0, &other) == DLRT_OK, "create another");
    float w[2] = {7, 8};
    CHECK(dlrt_model_set_param(&spec, m, "W", w) == DLRT_OK, "set W");
    CHECK(derived(m, 0) == 14 && derived(other, 0) == 2, "each its own");
    const char *path = in_dir("d.safetensors");
    CHECK(dlrt_model_save(&spec, m, path) == DLRT_OK, "save");
    size_t len = 0;
    unsigned char *bytes = read_bytes(path, &len);
    CHECK(bytes != NULL && len > 8, "read back");
    if (bytes != NULL) {
        const char *header = (const char *)bytes + 8;
        CHECK(strstr(header, "\"W\"") != NULL && strstr(header, "W_d") == NULL, "W alone");
        free(bytes);
    }
    CHECK(dlrt_model_load(&spec, other, path) == DLRT_OK, "load");
    CHECK(derived(other, 0) == 14 && derived(other, 1) == 16, "derived from what it loaded");
    static char json[sizeof expected_manifest];
    const char *manifest = dlrt_model_manifest(&spec, json, sizeof json);
    CHECK(strcmp(manifest, expected_manifest) == 0, "no state in the manifest: %s", manifest);
    dlrt_model_destroy(m);
    dlrt_model_destroy(other);
}

int main(void) {
    if (!open_test_dir("test_model_derived")) {
        return 1;
    }
    test_when_derived();
    test_not_saved();
    close_test_dir();
    return check_summary("test_model_derived");
}

/* test_model.c: the model object behind a library's NAME_* functions (dlrt_model_*), driven by
 * hand-written tables as the glue writes them: create with its devices and init, entries with
 * their argument checks and host failures (which change nothing), train steps and their step
 * count, DLPack arguments, save and load, get and set, the manifest byte for byte, a model on a
 * GPU where no driver loads, and running out of memory. */
#include "files.h" /* first: it asks for POSIX (setenv, mkdtemp) */

/* ---- the "compiled model": y = x * W + b; a train step of momentum SGD on sum(x * W) ---- */

static int32_t init(dlrt_context *c, void *const *a) {
    float *W = a[0], *b = a[1];
    W[0] = (float)c->seed;
    W[1] = (float)c->counter++;
    *b = 0.5f;
    if (c->seed == 666) {
        return (int32_t)dlrt_error(DLRT_ERR_INTERNAL, "dl_init: cursed seed");
    }
    return DLRT_OK;
}

/* x, W, b; y. x[0] < 0 fails with a message, x[0] == 99 without one; both after a draw. */
static int32_t infer(dlrt_context *c, void *const *a) {
    const float *x = a[0], *W = a[1], *b = a[2];
    float *y = a[3];
    c->counter++;
    if (x[0] < 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dl_infer: x is negative");
    }
    if (x[0] == 99) {
        return DLRT_ERR_INTERNAL;
    }
    for (int i = 0; i < 2; i++) {
        y[i] = x[i] * W[i] + *b;
    }
    return DLRT_OK;
}

/* x, W, W_v, step; loss, W', W_v'. Scribbles on the new buffers, then fails when x[0] < 0. */
static int32_t train(dlrt_context *c, void *const *a) {
    const float *x = a[0], *W = a[1], *Wv = a[2], *step = a[3];
    float *loss = a[4], *W2 = a[5], *Wv2 = a[6];
    (void)c;
    W2[0] = Wv2[0] = 1e9f;
    if (x[0] < 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dl_train: x is negative");
    }
    *loss = 0;
    for (int i = 0; i < 2; i++) {
        *loss += x[i] * W[i];
        Wv2[i] = 0.5f * Wv[i] + x[i];
        W2[i] = W[i] - Wv2[i] / *step;
    }
    return DLRT_OK;
}

static int nothing_calls;

static int32_t nothing(dlrt_context *c, void *const *a) {
    (void)c, (void)a;
    nothing_calls++;
    return DLRT_OK;
}

static const int64_t shapes[] = {2};
static const dlrt_tensor tensors[] = {
    {"W", DLRT_F32, 1, shapes, NULL},    {"b", DLRT_F32, 0, NULL, NULL},
    {"W_v", DLRT_F32, 1, shapes, NULL},  {"x", DLRT_F32, 1, shapes, NULL},
    {"y", DLRT_F32, 1, shapes, NULL},    {"x", DLRT_F32, 1, shapes, NULL},
    {"loss", DLRT_F32, 0, NULL, NULL},
};
static const int32_t indices[] = {0, 1, 0, 2};
static const dlrt_entry entries[] = {
    {"infer", "infer", "tiny_infer", "dl_infer", infer, 1, 1, tensors + 3, 2, indices, -1, NULL,
     NULL},
    {"train", "train", "tiny_train", "dl_train", train, 1, 1, tensors + 5, 2, indices + 2, DLRT_F32,
     NULL, NULL},
    {"nothing", "export", "tiny_nothing", "dl_nothing", nothing, 0, 0, NULL, 0, NULL, -1, NULL,
     NULL},
};
static const dlrt_model_spec tiny = {"tiny", "tiny", "test 1", 2, 1, tensors, indices + 2, init,
                                     "dl_init", 3, entries, NULL, 0};

static const char tiny_manifest[] =
    "{\"abi\": 1, \"name\": \"tiny\", \"compiler\": \"test 1\", \"devices\": [\"cpu\"], "
    "\"params\": [{\"name\": \"W\", \"dtype\": \"f32\", \"shape\": [2]}, {\"name\": \"b\", "
    "\"dtype\": \"f32\", \"shape\": []}], \"states\": [{\"name\": \"W_v\", \"param\": \"W\", "
    "\"dtype\": \"f32\", \"shape\": [2]}], \"entries\": [{\"name\": \"infer\", \"kind\": "
    "\"infer\", \"symbol\": \"tiny_infer\", \"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", "
    "\"shape\": [2]}], \"outputs\": [{\"name\": \"y\", \"dtype\": \"f32\", \"shape\": [2]}]}, "
    "{\"name\": \"train\", \"kind\": \"train\", \"symbol\": \"tiny_train\", \"inputs\": "
    "[{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2]}], \"outputs\": [{\"name\": "
    "\"loss\", \"dtype\": \"f32\", \"shape\": []}]}, {\"name\": \"nothing\", \"kind\": "
    "\"export\", \"symbol\": \"tiny_nothing\", \"inputs\": [], \"outputs\": []}]}";

static dlrt_model *create(uint64_t seed) {
    dlrt_model *m = NULL;
    CHECK(dlrt_model_create(&tiny, "cpu", seed, &m) == DLRT_OK && m != NULL, "create");
    return m;
}

static float param(const dlrt_model *m, const char *name, int i) {
    float v[2] = {-1, -1};
    CHECK(dlrt_model_get_param(&tiny, m, name, v) == DLRT_OK, "get %s", name);
    return v[i];
}

/* ---- create and destroy ---- */

static void test_create(void) {
    dlrt_model *m = (dlrt_model *)&m;
    CHECK_STATUS(dlrt_model_create(&tiny, "cpu", 0, NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_create: argument 'out' is NULL");
    CHECK_STATUS(dlrt_model_create(&tiny, "tpu", 0, &m), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_create: unknown device 'tpu' (expected \"cpu\" or \"cuda:N\")");
    CHECK(m == NULL, "*out is NULL after a failure");
    CHECK_STATUS(dlrt_model_create(&tiny, "cuda:", 0, &m), DLRT_ERR_INVALID_ARGUMENT,
                 "unknown device 'cuda:'");
    CHECK_STATUS(dlrt_model_create(&tiny, "cuda:1x", 0, &m), DLRT_ERR_INVALID_ARGUMENT,
                 "unknown device 'cuda:1x'");
    CHECK_STATUS(dlrt_model_create(&tiny, "cuda:0", 0, &m), DLRT_ERR_DEVICE,
                 "tiny_create: device 'cuda:0': this library has no CUDA kernels");
    CHECK(dlrt_model_create(&tiny, NULL, 7, &m) == DLRT_OK, "NULL is the CPU");
    CHECK(param(m, "W", 0) == 7 && param(m, "W", 1) == 0 && param(m, "b", 0) == 0.5f,
          "init ran with the seed");
    dlrt_model_destroy(m);
    dlrt_model_destroy(NULL);
    m = (dlrt_model *)&m;
    CHECK_STATUS(dlrt_model_create(&tiny, "cpu", 666, &m), DLRT_ERR_INTERNAL,
                 "tiny_create: dl_init: cursed seed");
    CHECK(m == NULL, "a failed init leaves no model (and no leak)");
}

/* ---- entries ---- */

static void test_infer(void) {
    dlrt_model *m = create(3);
    float x[2] = {2, 10}, y[2] = {0, 0};
    void *args[] = {x, y};
    CHECK(dlrt_model_call(&tiny, 0, m, args) == DLRT_OK, "infer");
    CHECK(y[0] == 2 * 3 + 0.5f && y[1] == 0.5f, "y = x * W + b: %g %g", y[0], y[1]);
    void *no_x[] = {NULL, y}, *no_y[] = {x, NULL};
    CHECK_STATUS(dlrt_model_call(&tiny, 0, NULL, args), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer: argument 'm' is NULL");
    CHECK_STATUS(dlrt_model_call(&tiny, 0, m, no_x), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer: argument 'x' is NULL");
    CHECK_STATUS(dlrt_model_call(&tiny, 0, m, no_y), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer: argument 'y' is NULL");
    x[0] = -1;
    CHECK_STATUS(dlrt_model_call(&tiny, 0, m, args), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer: dl_infer: x is negative");
    x[0] = 99;
    CHECK_STATUS(dlrt_model_call(&tiny, 0, m, args), DLRT_ERR_INTERNAL,
                 "tiny_infer: dl_infer failed with status 6");
    /* The failed calls gave back their random draws: the next create-time counter is 1. */
    x[0] = 2;
    CHECK(dlrt_model_call(&tiny, 0, m, args) == DLRT_OK, "infer again");
    CHECK(dlrt_model_call(&tiny, 2, m, NULL) == DLRT_OK && nothing_calls == 1, "no arguments");
    CHECK_STATUS(dlrt_model_call(&tiny, 2, NULL, NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_nothing: argument 'm' is NULL");
    dlrt_model_destroy(m);
}

static void test_train(void) {
    dlrt_model *m = create(4);
    float x[2] = {1, 2}, loss = 0;
    void *args[] = {x, &loss};
    /* W = {4, 0}, W_v = 0: W_v' = x, W' = W - x / step. */
    CHECK(dlrt_model_call(&tiny, 1, m, args) == DLRT_OK, "step 1");
    CHECK(loss == 4, "loss %g", loss);
    CHECK(param(m, "W", 0) == 3 && param(m, "W", 1) == -2, "W after step 1");
    CHECK(dlrt_model_call(&tiny, 1, m, args) == DLRT_OK, "step 2");
    /* W_v = 0.5 {1, 2} + {1, 2} = {1.5, 3}; W = {3, -2} - W_v / 2. */
    CHECK(param(m, "W", 0) == 2.25f && param(m, "W", 1) == -3.5f, "step 2 divides by 2");
    x[0] = -1;
    CHECK_STATUS(dlrt_model_call(&tiny, 1, m, args), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_train: dl_train: x is negative");
    CHECK(param(m, "W", 0) == 2.25f && param(m, "W", 1) == -3.5f, "a failed step changes nothing");
    x[0] = 1;
    CHECK(dlrt_model_call(&tiny, 1, m, args) == DLRT_OK, "step 3 (not 4)");
    CHECK(param(m, "W", 0) == 2.25f - 1.75f / 3, "the step count did not move on failure");
    dlrt_model_destroy(m);
}

/* ---- DLPack ---- */

static DLTensor host_tensor(float *data, int32_t ndim, int64_t *shape) {
    DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, NULL, 0};
    return t;
}

static void test_dlpack(void) {
    dlrt_model *m = create(3);
    float x[2] = {2, 10}, y[2] = {0, 0};
    int64_t shape[] = {2};
    DLTensor tx = host_tensor(x, 1, shape), ty = host_tensor(y, 1, shape);
    DLTensor *args[] = {&tx, &ty};
    CHECK(dlrt_model_call_dl(&tiny, 0, m, args) == DLRT_OK && y[0] == 6.5f, "infer_dl");
    CHECK_STATUS(dlrt_model_call_dl(&tiny, 0, NULL, args), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer_dl: argument 'm' is NULL");
    CHECK_STATUS(dlrt_model_call_dl(&tiny, 0, m, NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer_dl: argument 'args' is NULL");
    tx.dtype.bits = 64;
    CHECK_STATUS(dlrt_model_call_dl(&tiny, 0, m, args), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_infer_dl: argument 'x' has DLPack type code 2 with 64 bits");
    tx.dtype.bits = 32;
    tx.device.device_type = kDLCUDA;
    CHECK_STATUS(dlrt_model_call_dl(&tiny, 0, m, args), DLRT_ERR_DEVICE,
                 "argument 'x' is on cuda:0, but the model runs on the CPU");
    tx.device.device_type = kDLCPU;
    x[0] = 99;
    CHECK_STATUS(dlrt_model_call_dl(&tiny, 0, m, args), DLRT_ERR_INTERNAL,
                 "tiny_infer: dl_infer failed");
    CHECK(dlrt_model_call_dl(&tiny, 2, m, NULL) == DLRT_OK, "no arguments: none to check");
    CHECK_STATUS(dlrt_model_call_dl(&tiny, 2, NULL, NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_nothing: argument 'm' is NULL");
    dlrt_model_destroy(m);
}

/* ---- parameters and files ---- */

static void test_get_set(void) {
    dlrt_model *m = create(5);
    float w[2] = {8, 9}, out[2];
    CHECK(dlrt_model_set_param(&tiny, m, "W", w) == DLRT_OK, "set");
    CHECK(param(m, "W", 0) == 8 && param(m, "W", 1) == 9, "get what was set");
    CHECK_STATUS(dlrt_model_get_param(&tiny, m, "W_v", out), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_get_param: unknown parameter 'W_v' (known: W, b)");
    CHECK_STATUS(dlrt_model_get_param(&tiny, NULL, "W", out), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_get_param: argument 'm' is NULL");
    CHECK_STATUS(dlrt_model_get_param(&tiny, m, NULL, out), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_get_param: argument 'name' is NULL");
    CHECK_STATUS(dlrt_model_get_param(&tiny, m, "W", NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_get_param: argument 'out' is NULL");
    CHECK_STATUS(dlrt_model_set_param(&tiny, m, "W", NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_set_param: argument 'data' is NULL");
    dlrt_model_destroy(m);

    static const dlrt_model_spec bare = {"bare", "bare", "t", 0, 0, NULL, NULL, NULL, NULL,
                                         0,      NULL,   NULL, 0};
    CHECK(dlrt_model_create(&bare, "cpu", 0, &m) == DLRT_OK, "a model of nothing");
    CHECK_STATUS(dlrt_model_set_param(&bare, m, "W", w), DLRT_ERR_INVALID_ARGUMENT,
                 "bare_set_param: unknown parameter 'W' (known: none)");
    const char *path = in_dir("bare.safetensors");
    CHECK(dlrt_model_save(&bare, m, path) == DLRT_OK, "save nothing");
    CHECK(dlrt_model_load(&bare, m, path) == DLRT_OK, "load nothing");
    dlrt_model_destroy(m);
}

static void test_save_load(void) {
    dlrt_model *m = create(6), *other = create(7);
    float x[2] = {1, 2}, loss;
    void *args[] = {x, &loss};
    CHECK(dlrt_model_call(&tiny, 1, m, args) == DLRT_OK, "a step, so there is a state");
    char path[512];
    snprintf(path, sizeof path, "%s", in_dir("tiny.safetensors"));
    CHECK(dlrt_model_save(&tiny, m, path) == DLRT_OK, "save");
    CHECK(exists(path) && temporaries(path) == 0, "saved by a rename");
    size_t len = 0;
    unsigned char *bytes = read_bytes(path, &len);
    CHECK(bytes != NULL && len > 8, "read back");
    if (bytes != NULL) { /* the parameters, then the state, then the step */
        const char *header = (const char *)bytes + 8;
        const char *W = strstr(header, "\"W\""), *Wv = strstr(header, "\"W_v\"");
        const char *step = strstr(header, "\"__step__\"");
        CHECK(strstr(header, "\"model\":\"tiny\"") != NULL, "the model's name");
        CHECK(W != NULL && Wv != NULL && step != NULL && W < Wv && Wv < step, "in order");
        free(bytes);
    }
    CHECK(dlrt_model_load(&tiny, other, path) == DLRT_OK, "load");
    CHECK(param(other, "W", 0) == param(m, "W", 0) && param(other, "b", 0) == 0.5f, "params");
    /* States and step came along: the next steps agree. */
    CHECK(dlrt_model_call(&tiny, 1, m, args) == DLRT_OK, "m step 2");
    CHECK(dlrt_model_call(&tiny, 1, other, args) == DLRT_OK, "other step 2");
    CHECK(param(other, "W", 1) == param(m, "W", 1), "the same step 2");
    CHECK_STATUS(dlrt_model_save(&tiny, NULL, path), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_save: argument 'm' is NULL");
    CHECK_STATUS(dlrt_model_save(&tiny, m, NULL), DLRT_ERR_INVALID_ARGUMENT,
                 "tiny_save: argument 'path' is NULL");
    CHECK_STATUS(dlrt_model_load(&tiny, m, "/nonexistent/dir/x.safetensors"), DLRT_ERR_IO,
                 "tiny_load: ");
    const char *bad = in_dir("bad.safetensors");
    write_file(bad, "not json", NULL, 0);
    CHECK_STATUS(dlrt_model_load(&tiny, m, bad), DLRT_ERR_FORMAT, "tiny_load: ");
    /* A file without b: the model is unchanged. */
    float w[2] = {5, 5};
    dlrt_tensor only_w[] = {{"W", DLRT_F32, 1, shapes, w}};
    const char *partial = in_dir("partial.safetensors");
    CHECK(dlrt_save(partial, "tiny", only_w, 1) == DLRT_OK, "a file of W alone");
    float before = param(m, "W", 0);
    CHECK_STATUS(dlrt_model_load(&tiny, m, partial), DLRT_ERR_FORMAT, "tiny_load: ");
    CHECK(strstr(dlrt_last_error(), "'b'") != NULL, "names the missing tensor");
    CHECK(param(m, "W", 0) == before, "a failed load changes nothing");
    dlrt_model_destroy(m);
    dlrt_model_destroy(other);
}

/* ---- the manifest ---- */

static void test_manifest(void) {
    static char json[sizeof tiny_manifest];
    const char *text = dlrt_model_manifest(&tiny, json, sizeof json);
    CHECK(text == json && strcmp(text, tiny_manifest) == 0, "the manifest:\n%s", text);
    CHECK(dlrt_model_manifest(&tiny, json, sizeof json) == json, "written once, then kept");
    static char short_buffer[10];
    CHECK(strcmp(dlrt_model_manifest(&tiny, short_buffer, sizeof short_buffer), "") == 0,
          "a buffer of the wrong size stays empty");

    /* Every character outside printable ASCII escaped as json.dumps does. */
    static const int64_t shape[] = {0, 3};
    static const dlrt_tensor odd_tensors[] = {{"w\x1f", DLRT_I8, 2, shape, NULL}};
    static const dlrt_model_spec odd = {"q\"\\\xc3\xa9\xf0\x9f\x98\x80\n\x01\x7f\t/", "q", "c",
                                        1, 0, odd_tensors, NULL, NULL, NULL, 0, NULL, NULL, 0};
    static const char expected[] =
        "{\"abi\": 1, \"name\": \"q\\\"\\\\\\u00e9\\ud83d\\ude00\\n\\u0001\\u007f\\t/\", "
        "\"compiler\": \"c\", \"devices\": [\"cpu\"], \"params\": [{\"name\": \"w\\u001f\", "
        "\"dtype\": \"i8\", \"shape\": [0, 3]}], \"states\": [], \"entries\": []}";
    static char odd_json[sizeof expected];
    text = dlrt_model_manifest(&odd, odd_json, sizeof odd_json);
    CHECK(strcmp(text, expected) == 0, "escapes:\n%s\n%s", text, expected);
}

/* ---- a library built for CUDA, where no driver loads ---- */

static void test_cuda(void) {
    static const dlrt_kernel kernels[] = {{"k", {1, 1, 1}, {32, 1, 1}, 2}};
    static const dlrt_model_cuda cuda = {"sm_90", ".version 7.8\n", kernels, 1, 256};
    static const dlrt_slot slots[] = {{-1, -1, 0}, {-1, 0, 256}};
    static const int32_t slot_lists[] = {0, 1};
    static const dlrt_launch launches[] = {{0, slot_lists}};
    static const dlrt_plan plan = {launches, 1, 2, slots, slot_lists, slot_lists + 1};
    static const dlrt_entry cuda_entries[] = {
        {"infer", "infer", "gpu_infer", "dl_infer", infer, 1, 1, tensors + 3, 2, indices, -1,
         &plan, NULL},
        {"nothing", "export", "gpu_nothing", "dl_nothing", nothing, 0, 0, NULL, 0, NULL, -1, NULL,
         "@nothing has control flow"},
    };
    static const dlrt_model_spec gpu = {"gpu", "gpu", "t", 2, 0, tensors, NULL, init, "dl_init",
                                        2, cuda_entries, &cuda, 0};
    setenv("DLRT_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    dlrt_model *m = (dlrt_model *)&m;
    CHECK_STATUS(dlrt_model_create(&gpu, "cuda:0", 0, &m), DLRT_ERR_DEVICE,
                 "gpu_create: cuda:0: cannot load the CUDA driver /nonexistent/libcuda.so.1");
    CHECK(m == NULL, "no model");
    CHECK_STATUS(dlrt_model_create(&gpu, "cuda:99999999", 0, &m), DLRT_ERR_DEVICE,
                 "gpu_create: device 'cuda:99999999': no such device");
    CHECK(dlrt_model_create(&gpu, "cpu", 2, &m) == DLRT_OK, "the CPU needs no driver");
    float x[2] = {1, 1}, y[2];
    void *args[] = {x, y};
    CHECK(dlrt_model_call(&gpu, 0, m, args) == DLRT_OK && y[0] == 2.5f, "a plan is for a GPU");
    dlrt_model_destroy(m);
    static const char expected[] =
        "{\"abi\": 1, \"name\": \"gpu\", \"compiler\": \"t\", \"devices\": [\"cpu\", \"cuda\"], "
        "\"gpu\": \"sm_90\", \"params\": [{\"name\": \"W\", \"dtype\": \"f32\", \"shape\": [2]}, "
        "{\"name\": \"b\", \"dtype\": \"f32\", \"shape\": []}], \"states\": [], \"entries\": "
        "[{\"name\": \"infer\", \"kind\": \"infer\", \"symbol\": \"gpu_infer\", \"inputs\": "
        "[{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [2]}], \"outputs\": [{\"name\": "
        "\"y\", \"dtype\": \"f32\", \"shape\": [2]}], \"cuda\": \"gpu\"}, {\"name\": \"nothing\", "
        "\"kind\": \"export\", \"symbol\": \"gpu_nothing\", \"inputs\": [], \"outputs\": [], "
        "\"cuda\": \"cpu: @nothing has control flow\"}]}";
    static char json[sizeof expected];
    const char *text = dlrt_model_manifest(&gpu, json, sizeof json);
    CHECK(strcmp(text, expected) == 0, "where each entry runs:\n%s", text);
}

/* ---- out of memory ---- */

static void test_out_of_memory(void) {
    /* 2^62 f32 elements: more bytes than size_t holds. */
    static const int64_t huge_shape[] = {INT64_C(1) << 31, INT64_C(1) << 31};
    static const dlrt_tensor huge_tensors[] = {{"huge", DLRT_F32, 2, huge_shape, NULL}};
    static const dlrt_model_spec huge = {"huge", "huge", "t", 1, 0, huge_tensors, NULL, NULL,
                                         NULL, 0, NULL, NULL, 0};
    dlrt_model *m = (dlrt_model *)&m;
    CHECK_STATUS(dlrt_model_create(&huge, "cpu", 0, &m), DLRT_ERR_OUT_OF_MEMORY,
                 "huge_create: parameter 'huge' (F32 [2147483648, 2147483648]) is too large");
    CHECK(m == NULL, "no model");
}

int main(void) {
    if (!open_test_dir("test_model")) {
        return 1;
    }
    test_create();
    test_infer();
    test_train();
    test_dlpack();
    test_get_set();
    test_save_load();
    test_manifest();
    test_cuda();
    test_out_of_memory();
    close_test_dir();
    return check_summary("test_model");
}

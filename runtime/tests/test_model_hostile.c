/* test_model_hostile.c: hostile tables and arguments. Tables whose sizes overflow or whose
 * counts and indices are out of range fail create (and leave the manifest empty) with a message
 * instead of allocating a wrapped size or reading past a table; DLTensor arguments whose
 * byte_offset wraps the address space or misaligns the data, or whose shape's size overflows,
 * are refused; the size arguments of the scratch buffer and the thread pool cannot overflow. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

static int32_t host(dlrt_context *c, void *const *a) {
    (void)c, (void)a;
    return DLRT_OK;
}

static const int64_t two[] = {2};
static const int64_t huge2[] = {INT64_C(1) << 31, INT64_C(1) << 31}; /* 2^62 elements */
static const int64_t wraps[] = {INT64_C(1) << 62, 4};                 /* 2^64 elements */
static const int64_t negative[] = {2, -3};
static const int32_t zero[] = {0};
static const int32_t far[] = {7};

static const dlrt_tensor w[] = {{"W", DLRT_F32, 1, two, NULL}, {"W_m", DLRT_F32, 1, two, NULL}};
static const dlrt_tensor xy[] = {{"x", DLRT_F32, 1, two, NULL}, {"y", DLRT_F32, 1, two, NULL}};

/* A model of parameter W (state W_m) and entry `e`, with `params` and `tensors` replaced. */
static dlrt_model_spec spec_of(const dlrt_tensor *tensors, int32_t params, int32_t states,
                               const dlrt_entry *e) {
    dlrt_model_spec s = {"h", "h", "t", params, states, tensors, zero, NULL, NULL,
                         e != NULL, e, NULL, 0};
    return s;
}

/* Create fails with `code` and `text`, leaves *out NULL, and the manifest stays empty. */
static void refused(const dlrt_model_spec *spec, dlrt_status code, const char *text) {
    dlrt_model *m = (dlrt_model *)&m;
    CHECK_STATUS(dlrt_model_create(spec, "cpu", 0, &m), code, text);
    CHECK(m == NULL, "no model for \"%s\"", text);
    static char buffer[4096];
    buffer[0] = '\0';
    CHECK(dlrt_model_manifest(spec, buffer, sizeof buffer)[0] == '\0', "no manifest");
}

static void test_sizes(void) {
    dlrt_tensor t[] = {{"huge", DLRT_F32, 2, huge2, NULL}};
    dlrt_model_spec s = spec_of(t, 1, 0, NULL);
    refused(&s, DLRT_ERR_OUT_OF_MEMORY,
            "h_create: parameter 'huge' (F32 [2147483648, 2147483648]) is too large: its size "
            "in bytes does not fit in the address space");
    t[0].shape = wraps; /* 2^66 bytes, which wrap to 0 in 64 bits */
    refused(&s, DLRT_ERR_OUT_OF_MEMORY, "parameter 'huge' (F32 [4611686018427387904, 4])");
    t[0].dtype = DLRT_I8; /* 2^64 bytes */
    refused(&s, DLRT_ERR_OUT_OF_MEMORY, "is too large");
    t[0].shape = negative;
    refused(&s, DLRT_ERR_INTERNAL, "h_create: parameter 'huge' has dimension -3 on axis 1");
    t[0].shape = two;
    t[0].dtype = (dlrt_dtype)99;
    refused(&s, DLRT_ERR_INTERNAL, "parameter 'huge' has dtype 99");
    t[0].dtype = DLRT_F32;
    t[0].shape = NULL;
    refused(&s, DLRT_ERR_INTERNAL, "rank 2 but no shape");

    /* An entry's argument too large (a DLPack call would multiply its shape). */
    dlrt_tensor args[] = {{"x", DLRT_F32, 2, wraps, NULL}, {"y", DLRT_F32, 1, two, NULL}};
    dlrt_entry e = {"f", "infer", "h_f", "dl_f", host, 1, 1, args, 0, NULL, -1, NULL, NULL};
    s = spec_of(w, 1, 1, &e);
    refused(&s, DLRT_ERR_OUT_OF_MEMORY, "h_create: argument 'x' (F32 [4611686018427387904, 4])");
}

static void test_counts_and_indices(void) {
    dlrt_model_spec s = spec_of(w, INT32_MAX, 1, NULL); /* params + states overflows */
    refused(&s, DLRT_ERR_INTERNAL, "h_create: the library's tables are inconsistent");
    s = spec_of(w, -1, 0, NULL);
    refused(&s, DLRT_ERR_INTERNAL, "(-1 parameters");
    s = spec_of(NULL, 2, 0, NULL);
    refused(&s, DLRT_ERR_INTERNAL, "2 parameters but no table of them");
    s = spec_of(w, 1, 1, NULL);
    s.state_params = far;
    refused(&s, DLRT_ERR_INTERNAL, "a state belongs to no parameter");

    dlrt_entry e = {"f", "train", "h_f", "dl_f", host, 1, 1, xy, 1, far, -1, NULL, NULL};
    s = spec_of(w, 1, 1, &e); /* a buffer index past the tensors */
    refused(&s, DLRT_ERR_INTERNAL, "entry 'f' names a tensor or a step type");
    e.buffer = zero;
    e.step = 42;
    refused(&s, DLRT_ERR_INTERNAL, "entry 'f' names a tensor or a step type");
    e.step = -1;
    e.outputs = INT32_MAX; /* inputs + outputs overflows */
    refused(&s, DLRT_ERR_INTERNAL, "entry 'f' has 1 inputs, 2147483647 outputs");
    e.outputs = -1;
    refused(&s, DLRT_ERR_INTERNAL, "entry 'f' has 1 inputs, -1 outputs");
    e.outputs = 1;
    e.host = NULL;
    refused(&s, DLRT_ERR_INTERNAL, "an entry lacks a name or a host function");
    e.host = host;
    dlrt_model *m = NULL;
    CHECK(dlrt_model_create(&s, "cpu", 0, &m) == DLRT_OK, "the repaired tables work");
    dlrt_model_destroy(m);
}

static void test_cuda_tables(void) {
    static const dlrt_kernel kernels[] = {{"k", {1, 1, 1}, {32, 1, 1}, 2}};
    dlrt_model_cuda cuda = {"sm_90", "", kernels, 1, -1};
    dlrt_model_spec s = spec_of(w, 1, 1, NULL);
    s.cuda = &cuda;
    refused(&s, DLRT_ERR_INTERNAL, "-1 bytes of scratch memory");
    cuda.scratch = 256;
    dlrt_slot slots[] = {{-1, -1, 0}, {-1, 0, 512}}; /* 512: past the scratch block */
    static const int32_t lists[] = {0, 1};
    dlrt_launch launches[] = {{0, lists}};
    dlrt_plan plan = {launches, 1, 2, slots, lists, lists + 1};
    dlrt_entry e = {"f", "infer", "h_f", "dl_f", host, 1, 1, xy, 0, NULL, -1, &plan, NULL};
    s.entry_count = 1;
    s.entries = &e;
    refused(&s, DLRT_ERR_INTERNAL, "the device plan of entry 'f' does not fit");
    slots[1].offset = 128;
    launches[0].kernel = 1; /* no such kernel */
    refused(&s, DLRT_ERR_INTERNAL, "the device plan of entry 'f' does not fit");
    launches[0].kernel = 0;
    plan.slot_count = INT32_MAX; /* slot_count + 1 overflows */
    refused(&s, DLRT_ERR_INTERNAL, "the device plan of entry 'f' does not fit");
    plan.slot_count = 2;
    dlrt_model *m = NULL;
    CHECK(dlrt_model_create(&s, "cpu", 0, &m) == DLRT_OK, "the repaired plan works on the CPU");
    dlrt_model_destroy(m);
}

/* ---- DLPack arguments ---- */

static void test_dlpack(void) {
    static float data[4];
    int64_t shape[] = {2};
    DLTensor t = {data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
    void *p = NULL;
    unsigned char dev = 9;
    CHECK(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, two, -1, &p, &dev) == DLRT_OK &&
              p == data && dev == 0,
          "a plain tensor");
    t.byte_offset = 8;
    CHECK(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, two, -1, &p, &dev) == DLRT_OK &&
              p == data + 2,
          "an aligned byte_offset");
    t.byte_offset = UINT64_C(1) << 63;
    CHECK_STATUS(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, two, -1, &p, &dev),
                 DLRT_ERR_INVALID_ARGUMENT,
                 "f: argument 'x' has byte_offset 9223372036854775808 and 2 elements of 4 bytes, "
                 "which do not fit in the address space");
    t.byte_offset = UINT64_MAX - 3;
    CHECK_STATUS(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, two, -1, &p, &dev),
                 DLRT_ERR_INVALID_ARGUMENT, "which do not fit in the address space");
    t.byte_offset = 2;
    CHECK_STATUS(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, two, -1, &p, &dev),
                 DLRT_ERR_INVALID_ARGUMENT, "f: argument 'x' is misaligned: its first element");
    /* An empty tensor without data: no pointer is made from NULL. */
    int64_t empty[] = {0};
    t = (DLTensor){NULL, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, empty, NULL, 64};
    CHECK(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, empty, -1, &p, &dev) == DLRT_OK &&
              p == NULL,
          "an empty tensor");
    t.byte_offset = UINT64_C(1) << 63;
    CHECK_STATUS(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, empty, -1, &p, &dev),
                 DLRT_ERR_INVALID_ARGUMENT, "which do not fit in the address space");
    /* A shape whose element count overflows int64_t. */
    t = (DLTensor){data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, (int64_t *)wraps, NULL, 0};
    CHECK_STATUS(dlrt_dl_argument("f", "x", &t, DLRT_F32, 2, wraps, -1, &p, &dev),
                 DLRT_ERR_INVALID_ARGUMENT, "f: argument 'x' has a shape whose size overflows");
    int64_t big[] = {INT64_C(1) << 61}; /* 2^63 bytes of f32: no overflow, but past the end */
    t = (DLTensor){data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, big, NULL, 0};
    CHECK_STATUS(dlrt_dl_argument("f", "x", &t, DLRT_F32, 1, big, -1, &p, &dev),
                 DLRT_ERR_INVALID_ARGUMENT, "which do not fit in the address space");
}

/* A model entry called through DLPack with a byte_offset of 2^63 (the crash). */
static void test_dlpack_entry(void) {
    dlrt_entry e = {"f", "infer", "h_f", "dl_f", host, 1, 1, xy, 1, zero, -1, NULL, NULL};
    dlrt_model_spec s = spec_of(w, 1, 1, &e);
    dlrt_model *m = NULL;
    CHECK(dlrt_model_create(&s, "cpu", 0, &m) == DLRT_OK, "create");
    float x[2] = {1, 2}, y[2];
    int64_t shape[] = {2};
    DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, UINT64_C(1) << 63};
    DLTensor ty = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
    DLTensor *args[] = {&tx, &ty};
    CHECK_STATUS(dlrt_model_call_dl(&s, 0, m, args), DLRT_ERR_INVALID_ARGUMENT,
                 "h_f_dl: argument 'x' has byte_offset 9223372036854775808");
    tx.byte_offset = 0;
    CHECK(dlrt_model_call_dl(&s, 0, m, args) == DLRT_OK, "then it works");
    dlrt_model_destroy(m);
}

/* ---- size arguments of the scratch buffer and the thread pool ---- */

static int64_t covered;

static void count(void *ctx, int64_t begin, int64_t end) {
    (void)ctx;
    __atomic_fetch_add(&covered, end - begin, __ATOMIC_RELAXED);
}

static void test_runtime_sizes(void) {
    CHECK(dlrt_scratch(INT64_MAX) == NULL, "no scratch buffer of 2^63 bytes");
    CHECK(dlrt_scratch(-1) == NULL, "nor of -1");
    CHECK(dlrt_scratch(100) != NULL, "a small one");
    dlrt_set_num_threads(3);
    dlrt_parallel_split(1000, 1, INT64_MAX, count, NULL); /* per_thread * threads overflows */
    CHECK(covered == 1000, "every index once: %lld", (long long)covered);
    dlrt_set_num_threads(0);
}

int main(void) {
    test_sizes();
    test_counts_and_indices();
    test_cuda_tables();
    test_dlpack();
    test_dlpack_entry();
    test_runtime_sizes();
    return check_summary("test_model_hostile");
}

/* dlrt.h: the whole API of the runtime linked into every shipped model library (docs/c-abi.md
 * section 4): status codes and the thread-local last error, aligned memory and arenas, the thread
 * pool, byte stacks for the differentiation tape, safetensors files, the DLPack v0.8 structs, and
 * the model object behind a library's NAME_* functions, driven by its glue's tables.
 *
 * The runtime is compiled with -fvisibility=hidden, so every function here is private to the
 * library that links it except those marked DLRT_EXPORT (only dlrt_last_error). Several models
 * can therefore live in one process, each with its own copy of the runtime. */
#ifndef DLRT_H_
#define DLRT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a symbol that the shipped library exports (default visibility). */
#if defined(__GNUC__) || defined(__clang__)
#define DLRT_EXPORT __attribute__((visibility("default")))
#else
#define DLRT_EXPORT
#endif

/* Lets the compiler check dlrt_error's format string against its arguments. */
#if defined(__GNUC__) || defined(__clang__)
#define DLRT_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define DLRT_PRINTF(fmt_index, first_arg)
#endif

/* ---- Status codes: 0 is success; the list is append-only (part of the ABI). ---- */

typedef enum {
    DLRT_OK = 0,
    DLRT_ERR_INVALID_ARGUMENT = 1,
    DLRT_ERR_OUT_OF_MEMORY = 2,
    DLRT_ERR_DEVICE = 3,
    DLRT_ERR_IO = 4,
    DLRT_ERR_FORMAT = 5,
    DLRT_ERR_INTERNAL = 6,
    DLRT_ERR_TRAP = 7, /* the program ran a `trap` instruction */
    DLRT_ERR_COLLECTIVE = 8 /* the all-reduce hook of a data-parallel train step failed */
} dlrt_status;

/* ---- Errors: one message per thread, set by every function that returns a non-OK status. ---- */

/* Capacity of the message buffer, terminating NUL included; longer messages are cut and end in
   "...". Part of the ABI: libraries built from this header share the buffer (see error.c). */
#define DLRT_ERROR_CAPACITY 1024

/* The calling thread's message for the last non-OK status; "" when none. Never NULL. */
DLRT_EXPORT const char *dlrt_last_error(void);
/* Sets the calling thread's message from a printf format and returns `code`. The arguments may
   include dlrt_last_error() itself, to add context to an earlier message. */
dlrt_status dlrt_error(dlrt_status code, const char *fmt, ...) DLRT_PRINTF(2, 3);
/* Makes dlrt_last_error() return "" on the calling thread. */
void dlrt_clear_error(void);

/* ---- Memory: 64-byte aligned blocks; NULL (and a set error) when out of memory. ---- */

/* A 64-byte aligned block of `bytes` bytes (a unique non-NULL block for 0 bytes). */
void *dlrt_alloc(size_t bytes);
/* Frees a block of dlrt_alloc; NULL does nothing. */
void dlrt_free(void *p);

/* Arena: a stack of frames in chunks; each host-function call takes one frame. A push that does
   not fit in the current chunk starts a new chunk, so earlier pointers stay valid. */
typedef struct dlrt_arena dlrt_arena;
/* An empty arena whose first chunk holds `initial_bytes` (a default size for 0); NULL on OOM. */
dlrt_arena *dlrt_arena_create(size_t initial_bytes);
/* Frees the arena and every chunk; NULL does nothing. */
void dlrt_arena_destroy(dlrt_arena *a);
/* `bytes` bytes, 64-byte aligned, valid until a reset to a mark taken before this push. NULL
   (and a set error) when out of memory or `a` is NULL. */
void *dlrt_arena_push(dlrt_arena *a, size_t bytes);
/* The current top of the arena, for a later dlrt_arena_reset; 0 for an empty (or NULL) arena. */
size_t dlrt_arena_mark(const dlrt_arena *a);
/* Pops every push made after `mark` was taken and frees the chunks they started. A mark above
   the current top (or a NULL arena) does nothing. */
void dlrt_arena_reset(dlrt_arena *a, size_t mark);

/* ---- Thread pool ---- */

/* One chunk of a parallel loop: indices [begin, end). */
typedef void (*dlrt_task)(void *ctx, int64_t begin, int64_t end);
/* Runs fn(ctx, begin, end) over [0, n) in chunks of at least `grain` indices (grain < 1 counts as
   1) on the calling thread plus the pool's workers and returns after every chunk ran. Runs
   inline as one chunk when n <= grain or with one thread, and inline (same chunks) when called
   from inside a task. The chunks depend only on (n, grain, dlrt_num_threads()). n <= 0 or a
   NULL fn does nothing. */
void dlrt_parallel_for(int64_t n, int64_t grain, dlrt_task fn, void *ctx);
/* dlrt_parallel_for with at most `per_thread` chunks per thread (dlrt_parallel_for: 4; < 1 counts
   as 1): 1 for a loop whose every chunk pays a fixed cost, such as a matrix product that packs
   its right operand. */
void dlrt_parallel_split(int64_t n, int64_t grain, int64_t per_thread, dlrt_task fn, void *ctx);
/* Threads used by dlrt_parallel_for: the last dlrt_set_num_threads, else $DLRT_NUM_THREADS (a
   positive integer), else the number of online CPUs; at most 1024. On Linux each worker thread
   is pinned to one of the process's CPUs other than the caller's when the pool starts
   ($DLRT_PIN_THREADS=0: not pinned). */
int dlrt_num_threads(void);
/* Sets the thread count (n < 1: back to the default); the pool is resized at the next loop. */
void dlrt_set_num_threads(int n);
/* A buffer of at least `bytes` bytes, 64-byte aligned, that belongs to the calling thread and is
   kept for its next call (a larger request replaces it; the old contents are lost); NULL when it
   cannot be allocated. Kernels pack matrix panels into it. Freed when the thread exits or the
   library is unloaded. */
void *dlrt_scratch(int64_t bytes);

/* ---- Stacks of bytes for the differentiation tape (createStack/push/pop) ---- */

typedef struct dlrt_stack dlrt_stack;
/* An empty stack; NULL (and a set error) on OOM. */
dlrt_stack *dlrt_stack_create(void);
/* Frees the stack; NULL does nothing. */
void dlrt_stack_destroy(dlrt_stack *s);
/* Pushes a copy of `bytes` bytes of `data`. */
dlrt_status dlrt_stack_push(dlrt_stack *s, const void *data, size_t bytes);
/* Pops the top `bytes` bytes into `out`; DLRT_ERR_FORMAT when fewer bytes are on the stack. */
dlrt_status dlrt_stack_pop(dlrt_stack *s, void *out, size_t bytes);

/* ---- Boxes: reference-counted heap cells (allocateBox, projectBox, retain, release) ---- */

/* Bytes from a box's address to its content (so the content is 64-byte aligned too). */
#define DLRT_BOX_HEADER 64
/* A box holding `bytes` zeroed bytes at DLRT_BOX_HEADER past its address, with one reference;
   NULL (and a set error) when out of memory. dlrt_free frees it whatever its count. */
void *dlrt_box_create(size_t bytes);
/* Adds a reference to a box (NULL does nothing). */
void dlrt_box_retain(void *box);
/* Drops a reference; frees the box when none is left (NULL does nothing). */
void dlrt_box_release(void *box);

/* ---- Safetensors files (docs/c-abi.md section 3) ---- */

/* Element types, named as in the IR (`bool` is one byte, 0 or 1); append-only. */
typedef enum {
    DLRT_BOOL = 0,
    DLRT_I8 = 1,
    DLRT_I16 = 2,
    DLRT_I32 = 3,
    DLRT_I64 = 4,
    DLRT_F16 = 5,
    DLRT_F32 = 6,
    DLRT_F64 = 7,
    DLRT_BF16 = 8 /* bfloat16: the high 16 bits of an f32 (as uint16_t in headers) */
} dlrt_dtype;

/* A named contiguous row-major tensor; rank 0 is a scalar (shape may then be NULL). */
typedef struct {
    const char *name;
    dlrt_dtype dtype;
    int32_t rank;
    const int64_t *shape;
    void *data;
} dlrt_tensor;

/* Writes the tensors (header in the given order, after "__metadata__": {"format": "dlvm",
   "model": model}) to `path` atomically: to a temporary file of its own beside it
   (`path.tmp-<host>-<pid>-<random>`, created exclusively and never through a symbolic link),
   flushed and synced, then renamed over `path`, and the directory synced; on failure the
   temporary file is removed and `path` is untouched. A successful save also removes the
   temporary files that saves to `path` by processes of this host that no longer run left. */
dlrt_status dlrt_save(const char *path, const char *model, const dlrt_tensor *ts, size_t n);
/* Reads `path` and fills every entry's data, or changes nothing: the first `required` entries
   must be in the file, later ones are optional (a missing optional entry keeps its data), and
   every tensor in the file must be an entry with the same dtype and shape. */
dlrt_status dlrt_load(const char *path, const dlrt_tensor *ts, size_t n, size_t required);
/* Bytes per element of `t`; 0 for a value that is not a dlrt_dtype. */
size_t dlrt_dtype_size(dlrt_dtype t);

/* ---- CUDA (docs/c-abi.md section 7): the NVIDIA driver opened with dlopen at run time ----
   Nothing of CUDA is needed to build or load a library: libcuda.so.1 ($DLRT_CUDA_DRIVER, when set,
   names another file) is opened by the first dlrt_cuda_open. Device pointers are plain pointers
   here; only the device may dereference them. */

/* One kernel of a library's PTX: its .entry name, launch grid and block, and the number of
   pointers it takes (its inputs', then its output's). */
typedef struct {
    const char *name;
    uint32_t grid[3];
    uint32_t block[3];
    int32_t pointers;
} dlrt_kernel;

/* A step of a device plan: `kernel` (an index into the dlrt_kernel table) launched with the
   pointers slots[0 .. pointers) of the binding table passed to dlrt_cuda_run. */
typedef struct {
    int32_t kernel;
    const int32_t *slots;
} dlrt_launch;

/* A CUDA device opened for one model: the device's primary context, the library's PTX module
   with its kernels, and a stream every call of the model runs on. */
typedef struct dlrt_cuda dlrt_cuda;

/* Opens device `ordinal` with the PTX text and its `count` kernels. DLRT_ERR_DEVICE with a
   message saying what is missing when there is no driver, no such device, a device older than
   the PTX's target, or a driver too old for the PTX ISA version. */
dlrt_status dlrt_cuda_open(int ordinal, const char *ptx, const dlrt_kernel *kernels,
                           int32_t count, dlrt_cuda **out);
/* Waits for the stream's work and frees what dlrt_cuda_open made; NULL does nothing. */
void dlrt_cuda_close(dlrt_cuda *c);
/* `bytes` (at least 1) of zeroed device memory. */
dlrt_status dlrt_cuda_alloc(dlrt_cuda *c, size_t bytes, void **out);
/* Frees device memory of dlrt_cuda_alloc after the stream's work; NULL does nothing. */
void dlrt_cuda_free(dlrt_cuda *c, void *device);
/* Host to device, ordered on the stream (the host buffer may be reused on return). */
dlrt_status dlrt_cuda_upload(dlrt_cuda *c, void *device, const void *host, size_t bytes);
/* Device to host, after the stream's earlier work; waits until the bytes are there. */
dlrt_status dlrt_cuda_download(dlrt_cuda *c, void *host, const void *device, size_t bytes);
/* Device to device, ordered on the stream. */
dlrt_status dlrt_cuda_copy(dlrt_cuda *c, void *device_dst, const void *device_src, size_t bytes);
/* Launches the plan's steps in order on the stream; slots[k] is the device pointer of slot k. A
   plan of several steps run a second time with the same pointers is captured as a CUDA graph
   and launched whole from then on ($DLRT_CUDA_GRAPHS=0: never). */
dlrt_status dlrt_cuda_run(dlrt_cuda *c, const dlrt_launch *steps, int32_t count,
                          void *const *slots);
/* Waits for the stream's work; reports an error a kernel raised. */
dlrt_status dlrt_cuda_sync(dlrt_cuda *c);

/* ---- DLPack v0.8 (https://github.com/dmlc/dlpack), the layout every framework exchanges ----
   Skipped when dlpack.h was included first; include a newer dlpack.h before this header if its
   additions are needed. */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#define DLPACK_VERSION 80
#define DLPACK_ABI_VERSION 1

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLOpaqueHandle = 3,
    kDLBfloat = 4,
    kDLComplex = 5,
    kDLBool = 6
} DLDataTypeCode;

typedef struct {
    uint8_t code;   /* a DLDataTypeCode */
    uint8_t bits;   /* bits per lane: 8, 16, 32, 64 */
    uint16_t lanes; /* 1 for a scalar element */
} DLDataType;

typedef struct {
    void *data;           /* start of the allocation (see byte_offset) */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;       /* ndim extents */
    int64_t *strides;     /* ndim strides in elements; NULL means compact row-major */
    uint64_t byte_offset; /* from data to the first element */
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;                              /* owner's state, for the deleter */
    void (*deleter)(struct DLManagedTensor *self);  /* called by the consumer when done */
} DLManagedTensor;

#endif /* DLPACK_DLPACK_H_ */

/* ---- Data-parallel training (docs/distributed.md) ----
   The collective a host hands a model with NAME_set_allreduce: sums the `count` elements of
   `dtype` at `buffer` in place across the processes that train the model (MPI_Allreduce with
   MPI_SUM, ncclAllReduce with ncclSum), and returns 0 once the sums are there (for GPU memory:
   once the work it queued is finished). `device` says where `buffer` is: {kDLCPU, 0}, or
   {kDLCUDA, N} for a model on "cuda:N". Any other return value fails the step, which then
   changes nothing in the model. */
typedef int32_t (*dlrt_allreduce_fn)(void *ctx, void *buffer, int64_t count, dlrt_dtype dtype,
                                     DLDevice device);

/* Checks DLTensor `t`, argument `name` of function `fn`, against a dtype and shape (contiguous
   row-major; bool is kDLBool of 8 bits) and its byte_offset (data + byte_offset + its bytes in
   the address space as one object, the first element aligned to its size); sets *data to its
   first element (NULL for an empty tensor without data) and *on_device to
   whether it lives in the memory of GPU `ordinal` (kDLCUDA; -1 for a model on the CPU, which
   takes only host memory: kDLCPU, kDLCUDAHost, kDLCUDAManaged). DLRT_ERR_INVALID_ARGUMENT or
   DLRT_ERR_DEVICE with a message naming the argument otherwise. */
dlrt_status dlrt_dl_argument(const char *fn, const char *name, const DLTensor *t, dlrt_dtype dtype,
                             int32_t ndim, const int64_t *shape, int ordinal, void **data,
                             unsigned char *on_device);

/* ---- Models (docs/c-abi.md section 6): the object behind a library's NAME_* functions ----
   The generated glue describes its model in constant tables (dlrt_model_spec) and forwards each
   NAME_* function to the dlrt_model_* function of the same name, which checks the arguments,
   runs the host functions and reports failures in the words of docs/c-abi.md section 1. */

/* What every host function takes first (docs/c-abi.md section 5). */
typedef struct {
    dlrt_arena *arena; /* frames of host functions */
    uint64_t seed;     /* the random stream: draw k uses key hash(seed, counter++) */
    uint64_t counter;
} dlrt_context;

/* A host function called through the glue: `args` holds its arguments, then its results. */
typedef int32_t (*dlrt_host)(dlrt_context *ctx, void *const *args);

/* A slot of a device plan: a parameter or state in device memory (`argument`, the host
   argument it is), or `offset` bytes into the model's scratch block. `result` >= 0 says only a
   kernel writes it and it is that result, which the kernel may write in place. */
typedef struct {
    int32_t argument; /* or -1 */
    int32_t result;   /* or -1 */
    int64_t offset;
} dlrt_slot;

/* An entry's device plan (dlvm/codegen/device_plan.py): `count` kernel launches over slots. */
typedef struct {
    const dlrt_launch *steps;
    int32_t count;
    int32_t slot_count;
    const dlrt_slot *slots;
    const int32_t *uploads; /* the slot of each input, then of the step when there is one */
    const int32_t *results; /* the slot of each output, then of each new parameter and state */
} dlrt_plan;

/* An entry point NAME_<entry>: its host function takes the inputs, the model's tensors listed
   in `buffer`, the step (a scalar of dtype `step`) and then the outputs; a "train" entry's
   host also returns the new values of the `buffer` tensors. A train entry of a library built
   with --distributed has two parts, entries of their own (docs/distributed.md): `grads` (the
   loss, each gradient and each updated buffer, as outputs) and `apply` (a train entry taking
   their sums across processes and the scale 1/ranks, an f64 scalar). */
typedef struct dlrt_entry dlrt_entry;
struct dlrt_entry {
    const char *name;       /* as in the manifest */
    const char *kind;       /* "infer", "train" or "export" */
    const char *symbol;     /* NAME_<entry> */
    const char *host_name;  /* "dl_<host>", for messages */
    dlrt_host host;
    int32_t inputs;
    int32_t outputs;
    const dlrt_tensor *args; /* inputs, then outputs (data NULL) */
    int32_t buffers;
    const int32_t *buffer;   /* indices into the model's tensors */
    int32_t step;            /* a dlrt_dtype, or -1 when the host takes no step */
    const dlrt_plan *plan;   /* CUDA: the entry's device plan, or NULL: it runs on the CPU */
    const char *cpu;         /* CUDA: why the entry has no plan (NULL with a plan) */
    const dlrt_entry *grads; /* --distributed: the train entry's parts, or NULL */
    const dlrt_entry *apply;
};

/* The CUDA part of a library built for CUDA: the kernels' PTX and their launches. */
typedef struct {
    const char *gpu; /* the architecture the kernels were built for: "sm_90" */
    const char *ptx;
    const dlrt_kernel *kernels;
    int32_t count;
    int64_t scratch; /* bytes of device memory the plans' inputs and temporaries need */
} dlrt_model_cuda;

/* A whole model. The tensors are its parameters, then its optimiser states (data NULL); the
   last `buffers` parameters are buffers (non-trainable state, docs/tel.md), which the runtime
   treats as parameters and the manifest marks "kind": "buffer". */
typedef struct {
    const char *name;     /* the model's name (manifest, safetensors metadata) */
    const char *c_name;   /* NAME */
    const char *compiler; /* for the manifest: "telc 0.1.0" */
    int32_t params;
    int32_t states;
    const dlrt_tensor *tensors;
    const int32_t *state_params; /* the parameter (a tensor index) of each state */
    dlrt_host init;              /* fills the parameters; NULL for a model without any */
    const char *init_name;       /* "dl_<init>", for messages */
    int32_t entry_count;
    const dlrt_entry *entries;
    const dlrt_model_cuda *cuda; /* NULL: a library without CUDA kernels */
    int32_t buffers;             /* how many of the last parameters are buffers */
    int32_t derived;             /* how many of the last states derive from the parameters */
    dlrt_host derive;            /* parameters -> derived states; NULL when derived is 0 */
    const char *derive_name;
} dlrt_model_spec;

/* A model object: buffers of its tensors, the step count, an arena, a device. */
typedef struct dlrt_model dlrt_model;

/* NAME_create: `out` points to the caller's NAME_model pointer (all pointers to structs share one
   representation), which is set to the new model, or to NULL on failure. */
dlrt_status dlrt_model_create(const dlrt_model_spec *spec, const char *device, uint64_t seed,
                              void *out);
/* NAME_destroy: NULL does nothing. */
void dlrt_model_destroy(dlrt_model *m);
/* NAME_<entry> of entries[entry]: `args` holds its inputs, then its outputs. */
dlrt_status dlrt_model_call(const dlrt_model_spec *spec, int32_t entry, dlrt_model *m,
                            void *const *args);
/* NAME_<entry>_dl: the same with DLTensor arguments, checked by dlrt_dl_argument. */
dlrt_status dlrt_model_call_dl(const dlrt_model_spec *spec, int32_t entry, dlrt_model *m,
                               DLTensor *const *args);
/* NAME_save, NAME_load, NAME_get_param and NAME_set_param (docs/c-abi.md sections 1 and 3). */
dlrt_status dlrt_model_save(const dlrt_model_spec *spec, const dlrt_model *m, const char *path);
dlrt_status dlrt_model_load(const dlrt_model_spec *spec, dlrt_model *m, const char *path);
dlrt_status dlrt_model_get_param(const dlrt_model_spec *spec, const dlrt_model *m,
                                 const char *name, void *out);
dlrt_status dlrt_model_set_param(const dlrt_model_spec *spec, dlrt_model *m, const char *name,
                                 const void *data);
/* NAME_set_allreduce (docs/distributed.md): the collective a train step sums across processes
   with, over `ranks` processes; fn NULL removes it. */
dlrt_status dlrt_model_set_allreduce(const dlrt_model_spec *spec, dlrt_model *m,
                                     dlrt_allreduce_fn fn, void *ctx, int32_t ranks);
/* NAME_manifest: the manifest (docs/c-abi.md section 2) written into `buffer` (the glue's, of
   exactly its length plus one) by the first call, and returned; "" when it cannot be. */
const char *dlrt_model_manifest(const dlrt_model_spec *spec, char *buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_H_ */

/* A stand-in for the NVIDIA driver (libcuda.so.1) with the entry points the runtime uses
 * (runtime/src/cuda.c), for testing a library's CUDA path where no GPU is: "device memory" is
 * host memory, and a launch runs the kernel's CPU emulation (cuda_emulator.c) from the library
 * named by $DLVM_FAKE_CUDA_KERNELS, found by the kernel's name. Loaded through
 * $DLRT_CUDA_DRIVER. Other variables make it fail as a real driver would:
 *   DLVM_FAKE_CUDA_DEVICES  devices it reports (default 1)
 *   DLVM_FAKE_CUDA_CC       their compute capability, major·10 + minor (default 90)
 *   DLVM_FAKE_CUDA_OLD_PTX  when set, the driver is CUDA 11.2 and rejects the PTX's ISA version
 * fake_cuda_counts() tells how many launches and copies each way were made. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static long launches, uploads, downloads, copies, graph_launches;

/* Kernels run, copies up, down and on the device, and CUDA graphs launched, so far. */
void fake_cuda_counts(long out[5]) {
    out[0] = launches;
    out[1] = uploads;
    out[2] = downloads;
    out[3] = copies;
    out[4] = graph_launches;
}

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? atoi(v) : fallback;
}

CUresult cuInit(unsigned flags) {
    (void)flags;
    return 0;
}

CUresult cuDriverGetVersion(int *v) {
    *v = getenv("DLVM_FAKE_CUDA_OLD_PTX") ? 11020 : 12040;
    return 0;
}

CUresult cuDeviceGetCount(int *n) {
    *n = env_int("DLVM_FAKE_CUDA_DEVICES", 1);
    return 0;
}

CUresult cuDeviceGet(int *d, int ordinal) {
    *d = ordinal;
    return 0;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    int cc = env_int("DLVM_FAKE_CUDA_CC", 90);
    *value = attribute == 75 ? cc / 10 : cc % 10;
    return 0;
}

static int context;

CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
    (void)device;
    *ctx = &context;
    return 0;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
    (void)device;
    return 0;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
    return ctx == &context ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
    *ctx = &context;
    return 0;
}

CUresult cuModuleLoadDataEx(void **module, const void *ptx, unsigned n, int *options,
                            void **values) {
    (void)n, (void)options, (void)values;
    if (getenv("DLVM_FAKE_CUDA_OLD_PTX"))
        return 222; /* CUDA_ERROR_UNSUPPORTED_PTX_VERSION */
    if (strstr(ptx, ".entry") == NULL && strstr(ptx, ".version") == NULL)
        return 218; /* CUDA_ERROR_INVALID_PTX */
    const char *path = getenv("DLVM_FAKE_CUDA_KERNELS");
    void *kernels = path != NULL ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (kernels == NULL)
        return 218;
    *module = kernels;
    return 0;
}

typedef int (*emulated_launch)(void *, const unsigned *, const unsigned *, int, void **);

/* A kernel, and the emulator of the library it is in (whose thread-locals it reads). */
typedef struct {
    void *kernel;
    emulated_launch launch;
} fake_function;

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    fake_function *f = malloc(sizeof *f);
    if (f == NULL)
        return 2;
    f->kernel = dlsym(module, name);
    f->launch = (emulated_launch)dlsym(module, "dlemu_launch");
    if (f->kernel == NULL || f->launch == NULL) {
        free(f);
        return 500; /* CUDA_ERROR_NOT_FOUND */
    }
    *function = f; /* never freed: a test process loads few modules */
    return 0;
}

CUresult cuModuleUnload(void *module) {
    (void)module;
    return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    void *block = aligned_alloc(256, (bytes + 255) / 256 * 256);
    *p = (CUdeviceptr)(uintptr_t)block;
    return block != NULL ? 0 : 2; /* CUDA_ERROR_OUT_OF_MEMORY */
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    free((void *)(uintptr_t)p);
    return 0;
}

CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char value, size_t bytes, void *stream) {
    (void)stream;
    memset((void *)(uintptr_t)p, value, bytes);
    return 0;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream) {
    (void)stream;
    uploads++;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream) {
    (void)stream;
    downloads++;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream) {
    (void)stream;
    copies++;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

/* One launch, as run or as recorded by a stream capture. */
typedef struct {
    const fake_function *function;
    unsigned grid[3], block[3];
    int n;
    void *pointers[64];
} fake_launch;

static CUresult run(fake_launch *l) {
    launches++;
    return l->function->launch(l->function->kernel, l->grid, l->block, l->n, l->pointers) == 0
               ? 0
               : 719; /* CUDA_ERROR_LAUNCH_FAILED */
}

/* A graph: the launches captured between cuStreamBeginCapture and cuStreamEndCapture. */
typedef struct {
    int count;
    fake_launch launches[256];
} fake_graph;

static fake_graph *capture; /* the graph being captured, or NULL */

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)shared, (void)stream, (void)extra;
    /* Grid-stride kernels compute the same for any grid: at most 3 blocks, to keep the
       emulator's thread count down; tiled kernels (2-D blocks) need theirs. */
    fake_launch l = {f, {by == 1 && gx > 3 ? 3 : gx, gy, gz}, {bx, by, bz}, 0, {0}};
    while (l.n < 64 && params[l.n] != NULL) { /* the runtime ends the list with NULL */
        l.pointers[l.n] = *(void **)params[l.n];
        l.n++;
    }
    if (capture != NULL) {
        if (capture->count == 256)
            return 1;
        capture->launches[capture->count++] = l;
        return 0;
    }
    return run(&l);
}

CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
    (void)stream, (void)mode;
    if (getenv("DLVM_FAKE_CUDA_NO_GRAPHS"))
        return 801; /* CUDA_ERROR_NOT_SUPPORTED */
    capture = calloc(1, sizeof *capture);
    return capture != NULL ? 0 : 2;
}

CUresult cuStreamEndCapture(void *stream, void **graph) {
    (void)stream;
    *graph = capture;
    capture = NULL;
    return 0;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    fake_graph *copy = malloc(sizeof *copy);
    if (copy == NULL)
        return 2;
    memcpy(copy, graph, sizeof *copy);
    *exec = copy;
    return 0;
}

CUresult cuGraphLaunch(void *exec, void *stream) {
    (void)stream;
    fake_graph *g = exec;
    graph_launches++;
    for (int i = 0; i < g->count; ++i) {
        CUresult rc = run(&g->launches[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

CUresult cuGraphExecDestroy(void *exec) {
    free(exec);
    return 0;
}

CUresult cuGraphDestroy(void *graph) {
    free(graph);
    return 0;
}

static int stream;

CUresult cuStreamCreate(void **s, unsigned flags) {
    (void)flags;
    *s = &stream;
    return 0;
}

CUresult cuStreamSynchronize(void *s) {
    (void)s;
    return 0;
}

CUresult cuStreamDestroy_v2(void *s) {
    (void)s;
    return 0;
}

CUresult cuGetErrorString(CUresult rc, const char **text) {
    *text = rc == 222 ? "the provided PTX was compiled with an unsupported toolchain."
                      : "fake driver error";
    return 0;
}

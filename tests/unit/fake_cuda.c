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

static long launches, uploads, downloads, copies;

void fake_cuda_counts(long out[4]) {
    out[0] = launches;
    out[1] = uploads;
    out[2] = downloads;
    out[3] = copies;
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

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)shared, (void)stream, (void)extra;
    const fake_function *function = f;
    void *pointers[64];
    int n = 0;
    while (n < 64 && params[n] != NULL) { /* the runtime ends the list with NULL */
        pointers[n] = *(void **)params[n];
        n++;
    }
    /* Grid-stride kernels compute the same for any grid: at most 3 blocks, to keep the
       emulator's thread count down; tiled kernels (2-D blocks) need theirs. */
    unsigned grid[3] = {by == 1 && gx > 3 ? 3 : gx, gy, gz};
    unsigned block[3] = {bx, by, bz};
    launches++;
    return function->launch(function->kernel, grid, block, n, pointers) == 0 ? 0 : 719;
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

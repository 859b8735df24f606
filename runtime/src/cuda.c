/* cuda.c: the CUDA driver API opened with dlopen at run time (dlrt.h, "CUDA"). No CUDA header or
 * library is needed to build this: the few driver types and entry points used are declared here,
 * as the driver's ABI defines them. Every call makes the device's primary context current on
 * the calling thread for its duration, so any thread may call a model. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef int CUresult; /* 0 is CUDA_SUCCESS */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_STREAM_NON_BLOCKING = 1,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
};

/* The driver's entry points, looked up once (`struct driver` lists them with their symbols). */
static struct driver {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*GetErrorString)(CUresult, const char **);
} cu;

static const char *const symbols[] = {
    "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2", "cuModuleLoadDataEx", "cuModuleGetFunction", "cuModuleUnload",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemsetD8Async", "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuLaunchKernel", "cuStreamCreate",
    "cuStreamSynchronize", "cuStreamDestroy_v2", "cuGetErrorString",
};

/* CUDA graphs (CUDA 11.4 and later): used when the driver has them. */
static struct graphs {
    CUresult (*BeginCapture)(CUstream, int);
    CUresult (*EndCapture)(CUstream, CUgraph *);
    CUresult (*Instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*Launch)(CUgraphExec, CUstream);
    CUresult (*ExecDestroy)(CUgraphExec);
    CUresult (*Destroy)(CUgraph);
} graph;

static const char *const graph_symbols[] = {
    "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
    "cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy",
};

static pthread_once_t loaded = PTHREAD_ONCE_INIT;
static char load_error[512]; /* why the driver could not be used; "" when it can */

static void load_driver(void) {
    const char *path = getenv("DLRT_CUDA_DRIVER");
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(load_error, sizeof load_error,
                 "cannot load the CUDA driver %s (%s): is an NVIDIA driver installed?", path,
                 dlerror());
        return;
    }
    _Static_assert(sizeof cu == sizeof symbols / sizeof symbols[0] * sizeof(void *),
                   "one symbol per entry point of struct driver");
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; ++i) {
        void *entry = dlsym(lib, symbols[i]);
        /* POSIX lets dlsym's pointer be used as a function pointer of the symbol's type. */
        memcpy((char *)&cu + i * sizeof entry, &entry, sizeof entry);
        if (entry == NULL) {
            snprintf(load_error, sizeof load_error,
                     "the CUDA driver %s has no %s: it is too old (CUDA 11.0 or newer is needed)",
                     path, symbols[i]);
            return;
        }
    }
    _Static_assert(sizeof graph == sizeof graph_symbols / sizeof graph_symbols[0] *
                       sizeof(void *), "one symbol per entry point of struct graphs");
    int all = 1;
    for (size_t i = 0; i < sizeof graph_symbols / sizeof graph_symbols[0]; ++i) {
        void *entry = dlsym(lib, graph_symbols[i]);
        memcpy((char *)&graph + i * sizeof entry, &entry, sizeof entry);
        all = all && entry != NULL;
    }
    const char *off = getenv("DLRT_CUDA_GRAPHS");
    if (!all || (off != NULL && strcmp(off, "0") == 0))
        memset(&graph, 0, sizeof graph); /* launches one by one */
    CUresult rc = cu.Init(0);
    if (rc == CUDA_ERROR_NO_DEVICE) {
        snprintf(load_error, sizeof load_error, "the CUDA driver found no GPU");
    } else if (rc != 0) {
        const char *text = NULL;
        cu.GetErrorString(rc, &text);
        snprintf(load_error, sizeof load_error, "the CUDA driver could not start: %s (error %d)",
                 text ? text : "unknown error", rc);
    }
}

/* The driver's name for a status. */
static const char *describe(CUresult rc) {
    const char *text = NULL;
    if (cu.GetErrorString == NULL || cu.GetErrorString(rc, &text) != 0 || text == NULL)
        return "unknown error";
    return text;
}

/* A plan's launches captured as a CUDA graph, for the pointers they were captured with. */
typedef struct {
    const dlrt_launch *steps;
    int32_t count;
    size_t n;         /* pointers */
    void **pointers;  /* every launch's pointers, in order */
    CUgraphExec exec;
    uint64_t used;    /* for least-recently-used replacement */
} captured;

enum { GRAPHS = 8 };

struct dlrt_cuda {
    captured graphs[GRAPHS];
    uint64_t clock;
    int ordinal;
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUstream stream;
    int32_t count;
    CUfunction *functions;
    dlrt_kernel *kernels;
};

/* DLRT_ERR_DEVICE "cuda:N: what: the driver's message" for a failed driver call. */
static dlrt_status failed(const dlrt_cuda *c, const char *what, CUresult rc) {
    return dlrt_error(DLRT_ERR_DEVICE, "cuda:%d: %s failed: %s (CUDA error %d)", c->ordinal, what,
                      describe(rc), rc);
}

static dlrt_status enter(const dlrt_cuda *c) {
    CUresult rc = cu.CtxPushCurrent(c->context);
    return rc == 0 ? DLRT_OK : failed(c, "making the context current", rc);
}

static void leave(void) {
    CUcontext ignored;
    cu.CtxPopCurrent(&ignored);
}

/* "X.Y" of the PTX's `.version X.Y` line into version (empty when there is none). */
static void ptx_version(const char *ptx, char *version, size_t size) {
    const char *v = strstr(ptx, ".version ");
    version[0] = '\0';
    if (v != NULL)
        sscanf(v + 9, "%15[0-9.]", version);
    (void)size;
}

/* The N of the PTX's `.target sm_N` line; 0 when there is none. */
static int ptx_target(const char *ptx) {
    const char *t = strstr(ptx, ".target sm_");
    int sm = 0;
    if (t != NULL)
        sscanf(t + 11, "%d", &sm);
    return sm;
}

static dlrt_status open_module(dlrt_cuda *c, const char *ptx) {
    char log[2048] = "";
    int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, (void *)(uintptr_t)sizeof log};
    CUresult rc = cu.ModuleLoadDataEx(&c->module, ptx, 2, options, values);
    if (rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
        char version[16];
        int driver = 0;
        ptx_version(ptx, version, sizeof version);
        cu.DriverGetVersion(&driver);
        return dlrt_error(DLRT_ERR_DEVICE,
                          "cuda:%d: the NVIDIA driver (CUDA %d.%d) is too old for this library's "
                          "kernels (PTX ISA %s): update the driver (PTX ISA 7.0, 7.4 and 7.8 "
                          "need CUDA 11.0, 11.4 and 11.8 or newer)",
                          c->ordinal, driver / 1000, driver % 1000 / 10, version);
    }
    if (rc != 0) {
        c->module = NULL;
        return dlrt_error(DLRT_ERR_DEVICE, "cuda:%d: the driver rejected the kernels: %s (CUDA "
                          "error %d)%s%s", c->ordinal, describe(rc), rc, log[0] ? ": " : "", log);
    }
    return DLRT_OK;
}

dlrt_status dlrt_cuda_open(int ordinal, const char *ptx, const dlrt_kernel *kernels,
                           int32_t count, dlrt_cuda **out) {
    if (out == NULL || ptx == NULL || (kernels == NULL && count > 0) || count < 0)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_open: invalid arguments");
    *out = NULL;
    pthread_once(&loaded, load_driver);
    if (load_error[0] != '\0')
        return dlrt_error(DLRT_ERR_DEVICE, "cuda:%d: %s", ordinal, load_error);
    int devices = 0;
    CUresult rc = cu.DeviceGetCount(&devices);
    if (rc != 0 || ordinal < 0 || ordinal >= devices)
        return dlrt_error(DLRT_ERR_DEVICE, "cuda:%d: no such device (this machine has %d CUDA "
                          "device%s)", ordinal, devices, devices == 1 ? "" : "s");
    dlrt_cuda *c = calloc(1, sizeof *c);
    if (c == NULL)
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_cuda_open: out of memory");
    c->ordinal = ordinal;
    c->count = count;
    c->functions = calloc((size_t)count + 1, sizeof *c->functions);
    c->kernels = calloc((size_t)count + 1, sizeof *c->kernels);
    if (c->functions == NULL || c->kernels == NULL) {
        dlrt_cuda_close(c);
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "dlrt_cuda_open: out of memory");
    }
    if (count > 0)
        memcpy(c->kernels, kernels, sizeof *kernels * (size_t)count);
    dlrt_status status = DLRT_OK;
    if ((rc = cu.DeviceGet(&c->device, ordinal)) != 0) {
        status = failed(c, "finding the device", rc);
        goto fail;
    }
    int major = 0, minor = 0, target = ptx_target(ptx);
    cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->device);
    cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->device);
    if (major * 10 + minor < target) {
        status = dlrt_error(DLRT_ERR_DEVICE, "cuda:%d is an sm_%d%d GPU, older than sm_%d, the "
                            "architecture this library's kernels were built for (build with "
                            "--gpu sm_%d%d)", ordinal, major, minor, target, major, minor);
        goto fail;
    }
    if ((rc = cu.DevicePrimaryCtxRetain(&c->context, c->device)) != 0) {
        c->context = NULL;
        status = failed(c, "creating a context", rc);
        goto fail;
    }
    if ((status = enter(c)) != DLRT_OK)
        goto fail;
    if ((status = open_module(c, ptx)) == DLRT_OK) {
        for (int32_t i = 0; i < count; ++i) {
            if ((rc = cu.ModuleGetFunction(&c->functions[i], c->module, kernels[i].name)) != 0) {
                status = dlrt_error(DLRT_ERR_DEVICE, "cuda:%d: the kernels have no %s: %s",
                                    ordinal, kernels[i].name, describe(rc));
                break;
            }
        }
    }
    if (status == DLRT_OK && (rc = cu.StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING)) != 0) {
        c->stream = NULL;
        status = failed(c, "creating a stream", rc);
    }
    leave();
    if (status != DLRT_OK)
        goto fail;
    *out = c;
    return DLRT_OK;
fail:
    dlrt_cuda_close(c);
    return status;
}

static void forget(captured *g) {
    if (g->exec != NULL)
        graph.ExecDestroy(g->exec);
    free(g->pointers);
    memset(g, 0, sizeof *g);
}

void dlrt_cuda_close(dlrt_cuda *c) {
    if (c == NULL)
        return;
    if (c->context != NULL && enter(c) == DLRT_OK) {
        for (int i = 0; i < GRAPHS; ++i)
            forget(&c->graphs[i]);
        if (c->stream != NULL) {
            cu.StreamSynchronize(c->stream);
            cu.StreamDestroy(c->stream);
        }
        if (c->module != NULL)
            cu.ModuleUnload(c->module);
        leave();
        cu.DevicePrimaryCtxRelease(c->device);
    }
    free(c->functions);
    free(c->kernels);
    free(c);
}

dlrt_status dlrt_cuda_alloc(dlrt_cuda *c, size_t bytes, void **out) {
    if (c == NULL || out == NULL)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_alloc: invalid arguments");
    *out = NULL;
    dlrt_status status = enter(c);
    if (status != DLRT_OK)
        return status;
    CUdeviceptr p = 0;
    CUresult rc = cu.MemAlloc(&p, bytes ? bytes : 1);
    if (rc == 0 && (rc = cu.MemsetD8Async(p, 0, bytes ? bytes : 1, c->stream)) != 0)
        cu.MemFree(p);
    leave();
    if (rc != 0)
        return dlrt_error(rc == 2 ? DLRT_ERR_OUT_OF_MEMORY : DLRT_ERR_DEVICE,
                          "cuda:%d: cannot allocate %zu bytes of device memory: %s", c->ordinal,
                          bytes, describe(rc));
    *out = (void *)(uintptr_t)p;
    return DLRT_OK;
}

void dlrt_cuda_free(dlrt_cuda *c, void *device) {
    if (c == NULL || device == NULL || enter(c) != DLRT_OK)
        return;
    cu.StreamSynchronize(c->stream);
    cu.MemFree((CUdeviceptr)(uintptr_t)device);
    leave();
}

dlrt_status dlrt_cuda_upload(dlrt_cuda *c, void *device, const void *host, size_t bytes) {
    if (c == NULL || (bytes > 0 && (device == NULL || host == NULL)))
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_upload: invalid arguments");
    if (bytes == 0)
        return DLRT_OK;
    dlrt_status status = enter(c);
    if (status != DLRT_OK)
        return status;
    CUresult rc = cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)device, host, bytes, c->stream);
    leave();
    return rc == 0 ? DLRT_OK : failed(c, "copying to the device", rc);
}

dlrt_status dlrt_cuda_download(dlrt_cuda *c, void *host, const void *device, size_t bytes) {
    if (c == NULL || (bytes > 0 && (device == NULL || host == NULL)))
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_download: invalid arguments");
    dlrt_status status = enter(c);
    if (status != DLRT_OK)
        return status;
    CUresult rc = 0;
    if (bytes > 0)
        rc = cu.MemcpyDtoHAsync(host, (CUdeviceptr)(uintptr_t)device, bytes, c->stream);
    if (rc == 0)
        rc = cu.StreamSynchronize(c->stream);
    leave();
    return rc == 0 ? DLRT_OK : failed(c, "copying from the device", rc);
}

dlrt_status dlrt_cuda_copy(dlrt_cuda *c, void *device_dst, const void *device_src, size_t bytes) {
    if (c == NULL || (bytes > 0 && (device_dst == NULL || device_src == NULL)))
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_copy: invalid arguments");
    if (bytes == 0 || device_dst == device_src)
        return DLRT_OK;
    dlrt_status status = enter(c);
    if (status != DLRT_OK)
        return status;
    CUresult rc = cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)device_dst,
                                     (CUdeviceptr)(uintptr_t)device_src, bytes, c->stream);
    leave();
    return rc == 0 ? DLRT_OK : failed(c, "copying on the device", rc);
}

enum { MAX_POINTERS = 64 };

/* Launches the steps one by one on the stream (the context is current). */
static dlrt_status launch_all(dlrt_cuda *c, const dlrt_launch *steps, int32_t count,
                              void *const *slots) {
    for (int32_t s = 0; s < count; ++s) {
        const dlrt_kernel *kernel = &c->kernels[steps[s].kernel];
        /* The values of the kernel's parameters, and cuLaunchKernel's pointers to them; the
           list ends with NULL, which the driver does not read. */
        void *values[MAX_POINTERS];
        void *params[MAX_POINTERS + 1];
        for (int32_t i = 0; i < kernel->pointers; ++i) {
            values[i] = slots[steps[s].slots[i]];
            params[i] = &values[i];
        }
        params[kernel->pointers] = NULL;
        CUresult rc = cu.LaunchKernel(c->functions[steps[s].kernel], kernel->grid[0],
                                      kernel->grid[1], kernel->grid[2], kernel->block[0],
                                      kernel->block[1], kernel->block[2], 0, c->stream, params,
                                      NULL);
        if (rc != 0)
            return dlrt_error(DLRT_ERR_DEVICE, "cuda:%d: launching %s failed: %s (CUDA error %d)",
                              c->ordinal, kernel->name, describe(rc), rc);
    }
    return DLRT_OK;
}

/* Every launch's pointers in order into out (when not NULL); how many there are. */
static size_t gather(const dlrt_cuda *c, const dlrt_launch *steps, int32_t count,
                     void *const *slots, void **out) {
    size_t n = 0;
    for (int32_t s = 0; s < count; ++s)
        for (int32_t i = 0; i < c->kernels[steps[s].kernel].pointers; ++i, ++n)
            if (out != NULL)
                out[n] = slots[steps[s].slots[i]];
    return n;
}

/* Keeps `pointers` in the least recently used entry (forgetting its graph): the entry. */
static captured *remember(dlrt_cuda *c, const dlrt_launch *steps, int32_t count,
                          void **pointers, size_t n) {
    captured *oldest = &c->graphs[0];
    for (int i = 1; i < GRAPHS; ++i)
        if (c->graphs[i].used < oldest->used)
            oldest = &c->graphs[i];
    void **copy = malloc(n * sizeof *pointers);
    if (copy == NULL)
        return NULL;
    forget(oldest);
    memcpy(copy, pointers, n * sizeof *pointers);
    *oldest = (captured){steps, count, n, copy, NULL, ++c->clock};
    return oldest;
}

/* The plan's graph for these pointers, or NULL (the caller launches one by one). A set of
   pointers is captured the second time it comes, not the first: a caller that passes new
   device arrays on every call would otherwise pay a capture for each. */
static captured *graph_for(dlrt_cuda *c, const dlrt_launch *steps, int32_t count,
                           void *const *slots, void **pointers, size_t n) {
    captured *g = NULL;
    for (int i = 0; i < GRAPHS && g == NULL; ++i) {
        captured *e = &c->graphs[i];
        if (e->pointers != NULL && e->steps == steps && e->count == count && e->n == n &&
            memcmp(e->pointers, pointers, n * sizeof *pointers) == 0)
            g = e;
    }
    if (g == NULL) { /* the first time: remembered, launched one by one */
        remember(c, steps, count, pointers, n);
        return NULL;
    }
    g->used = ++c->clock;
    if (g->exec != NULL)
        return g;
    if (graph.BeginCapture(c->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != 0)
        return NULL;
    dlrt_status launched = launch_all(c, steps, count, slots); /* recorded, not run */
    CUgraph captured_graph = NULL;
    CUgraphExec exec = NULL;
    CUresult rc = graph.EndCapture(c->stream, &captured_graph);
    if (rc == 0 && launched == DLRT_OK)
        rc = graph.Instantiate(&exec, captured_graph, 0);
    if (captured_graph != NULL)
        graph.Destroy(captured_graph);
    if (rc != 0 || launched != DLRT_OK || exec == NULL) {
        dlrt_clear_error();
        return NULL;
    }
    g->exec = exec;
    return g;
}

dlrt_status dlrt_cuda_run(dlrt_cuda *c, const dlrt_launch *steps, int32_t count,
                          void *const *slots) {
    if (c == NULL || (count > 0 && (steps == NULL || slots == NULL)) || count < 0)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_run: invalid arguments");
    for (int32_t s = 0; s < count; ++s) {
        int32_t k = steps[s].kernel;
        if (k < 0 || k >= c->count || c->kernels[k].pointers > MAX_POINTERS)
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_run: step %d: bad kernel %d",
                              (int)s, (int)k);
    }
    dlrt_status status = enter(c);
    if (status != DLRT_OK)
        return status;
    /* A plan of several kernels runs as one CUDA graph: one launch instead of one per kernel. */
    captured *g = NULL;
    if (graph.Launch != NULL && count > 1) {
        size_t n = gather(c, steps, count, slots, NULL);
        void *stack[256];
        void **pointers = n <= 256 ? stack : malloc(n * sizeof *pointers);
        if (pointers != NULL) {
            gather(c, steps, count, slots, pointers);
            g = graph_for(c, steps, count, slots, pointers, n);
            if (pointers != stack)
                free(pointers);
        }
    }
    if (g != NULL) {
        CUresult rc = graph.Launch(g->exec, c->stream);
        if (rc != 0)
            status = failed(c, "launching the kernels' graph", rc);
    } else {
        status = launch_all(c, steps, count, slots);
    }
    leave();
    return status;
}

dlrt_status dlrt_cuda_sync(dlrt_cuda *c) {
    if (c == NULL)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_sync: invalid arguments");
    dlrt_status status = enter(c);
    if (status != DLRT_OK)
        return status;
    CUresult rc = cu.StreamSynchronize(c->stream);
    leave();
    return rc == 0 ? DLRT_OK : failed(c, "running the kernels", rc);
}

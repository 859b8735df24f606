/* test_cuda.c: the CUDA calls where no driver can be loaded (as on a machine without a GPU):
 * opening a device is a DEVICE error that names the driver and says what to do, every other
 * call checks its arguments, and closing or freeing nothing is allowed. (Runs with a driver are
 * tested through compiled models: tests/unit/test_cuda_library.py, tests/gpu.) */
#include <stdlib.h>

#include "check.h"

static void test_no_driver(void) {
    static const dlrt_kernel kernels[1] = {{"k", {1, 1, 1}, {32, 1, 1}, 1}};
    dlrt_cuda *c = (dlrt_cuda *)1;
    setenv("DLRT_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    CHECK_STATUS(dlrt_cuda_open(0, ".version 7.8\n.target sm_90\n", kernels, 1, &c),
                 DLRT_ERR_DEVICE, "cuda:0: cannot load the CUDA driver /nonexistent/libcuda.so.1");
    CHECK(c == NULL, "no device is set on failure");
    CHECK(strstr(dlrt_last_error(), "is an NVIDIA driver installed?") != NULL, "says what to do");
    /* The driver is looked for once; later opens give the same answer. */
    CHECK_STATUS(dlrt_cuda_open(1, "", kernels, 1, &c), DLRT_ERR_DEVICE, "cuda:1: cannot load");
}

static void test_arguments(void) {
    dlrt_cuda *c = NULL;
    void *p = NULL;
    CHECK_STATUS(dlrt_cuda_open(0, NULL, NULL, 0, &c), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_open");
    CHECK_STATUS(dlrt_cuda_open(0, "", NULL, 0, NULL), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_open");
    CHECK_STATUS(dlrt_cuda_alloc(NULL, 8, &p), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_alloc");
    CHECK_STATUS(dlrt_cuda_upload(NULL, p, p, 8), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_upload");
    CHECK_STATUS(dlrt_cuda_download(NULL, p, p, 8), DLRT_ERR_INVALID_ARGUMENT,
                 "dlrt_cuda_download");
    CHECK_STATUS(dlrt_cuda_copy(NULL, p, p, 8), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_copy");
    CHECK_STATUS(dlrt_cuda_run(NULL, NULL, 0, NULL), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_run");
    CHECK_STATUS(dlrt_cuda_sync(NULL), DLRT_ERR_INVALID_ARGUMENT, "dlrt_cuda_sync");
    dlrt_cuda_free(NULL, NULL);
    dlrt_cuda_close(NULL);
}

int main(void) {
    test_no_driver();
    test_arguments();
    return check_summary("test_cuda");
}

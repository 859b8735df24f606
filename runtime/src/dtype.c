/* dtype.c: the element types of dlrt_tensor: their sizes and safetensors names. */
#include "dlrt.h"
#include "internal.h"

static const struct {
    size_t size;
    const char *tag;
} dtypes[] = {
    [DLRT_BOOL] = {1, "BOOL"}, [DLRT_I8] = {1, "I8"},   [DLRT_I16] = {2, "I16"},
    [DLRT_I32] = {4, "I32"},   [DLRT_I64] = {8, "I64"}, [DLRT_F16] = {2, "F16"},
    [DLRT_F32] = {4, "F32"},   [DLRT_F64] = {8, "F64"}, [DLRT_BF16] = {2, "BF16"},
};

/* Tests the value as an unsigned number: an enum may be signed or unsigned. */
static bool known(dlrt_dtype t) {
    return (unsigned)t < sizeof dtypes / sizeof dtypes[0];
}

size_t dlrt_dtype_size(dlrt_dtype t) {
    return known(t) ? dtypes[t].size : 0;
}

const char *dlrt_dtype_tag(dlrt_dtype t) {
    return known(t) ? dtypes[t].tag : NULL;
}

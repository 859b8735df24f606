/* dlpack.c: DLTensor arguments of the NAME_<entry>_dl entry points (dlrt.h). */
#include "internal.h"

/* The DLPack type code and bits of a dlrt dtype. */
static void dl_type(dlrt_dtype dtype, uint8_t *code, uint8_t *bits) {
    *bits = (uint8_t)(8 * dlrt_dtype_size(dtype));
    switch (dtype) {
    case DLRT_BOOL:
        *code = kDLBool;
        break;
    case DLRT_F16:
    case DLRT_F32:
    case DLRT_F64:
        *code = kDLFloat;
        break;
    default:
        *code = kDLInt;
        break;
    }
}

dlrt_status dlrt_dl_argument(const char *fn, const char *name, const DLTensor *t, dlrt_dtype dtype,
                             int32_t ndim, const int64_t *shape, int ordinal, void **data,
                             unsigned char *on_device) {
    uint8_t code, bits;
    int64_t stride = 1;
    if (t == NULL)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: argument '%s' is NULL", fn, name);
    dl_type(dtype, &code, &bits);
    if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: argument '%s' has DLPack type code %d with %d bits and %d lanes; "
                          "it must be code %d with %d bits", fn, name, (int)t->dtype.code,
                          (int)t->dtype.bits, (int)t->dtype.lanes, (int)code, (int)bits);
    if (t->ndim != ndim || (ndim > 0 && t->shape == NULL))
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: argument '%s' has %d dimensions; it must have %d", fn, name,
                          (int)t->ndim, (int)ndim);
    for (int32_t i = ndim - 1; i >= 0; --i) {
        if (t->shape[i] != shape[i])
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                              "%s: argument '%s' has %lld in dimension %d; it must have %lld", fn,
                              name, (long long)t->shape[i], (int)i, (long long)shape[i]);
        if (t->strides != NULL && shape[i] != 1 && t->strides[i] != stride)
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                              "%s: argument '%s' is not contiguous row-major (stride %lld in "
                              "dimension %d)", fn, name, (long long)t->strides[i], (int)i);
        stride *= shape[i];
    }
    if (t->data == NULL && stride > 0)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: argument '%s' has no data", fn, name);
    switch (t->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLCUDAManaged:
        *on_device = 0;
        break;
    case kDLCUDA:
        if (ordinal < 0)
            return dlrt_error(DLRT_ERR_DEVICE,
                              "%s: argument '%s' is on cuda:%d, but the model runs on the CPU",
                              fn, name, (int)t->device.device_id);
        if (t->device.device_id != ordinal)
            return dlrt_error(DLRT_ERR_DEVICE,
                              "%s: argument '%s' is on cuda:%d, but the model runs on cuda:%d",
                              fn, name, (int)t->device.device_id, ordinal);
        *on_device = 1;
        break;
    default:
        return dlrt_error(DLRT_ERR_DEVICE,
                          "%s: argument '%s' is on DLPack device type %d, which this library "
                          "cannot use", fn, name, (int)t->device.device_type);
    }
    *data = (char *)t->data + t->byte_offset;
    return DLRT_OK;
}

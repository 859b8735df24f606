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
    case DLRT_BF16:
        *code = kDLBfloat;
        break;
    default:
        *code = kDLInt;
        break;
    }
}

/* Checks that the `count` elements of `size` bytes at t->data + t->byte_offset lie inside the
   address space and that the first is aligned to its size, as the host code assumes. */
static dlrt_status check_extent(const char *fn, const char *name, const DLTensor *t,
                                uint64_t count, uint64_t size) {
    uint64_t bytes, extent, last;
    uint64_t base = (uint64_t)(uintptr_t)t->data;
    /* [data, data + byte_offset + bytes) is one object: at most PTRDIFF_MAX bytes, and not
       past the last address. */
    if (__builtin_mul_overflow(count, size, &bytes) ||
        __builtin_add_overflow(t->byte_offset, bytes, &extent) || extent > PTRDIFF_MAX ||
        __builtin_add_overflow(base, extent, &last) || last > UINTPTR_MAX)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: argument '%s' has byte_offset %llu and %llu elements of %llu "
                          "bytes, which do not fit in the address space", fn, name,
                          (unsigned long long)t->byte_offset, (unsigned long long)count,
                          (unsigned long long)size);
    if (t->data != NULL && (base + t->byte_offset) % size != 0)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: argument '%s' is misaligned: its first element (data %p + "
                          "byte_offset %llu) is not aligned to its %llu-byte size", fn, name,
                          t->data, (unsigned long long)t->byte_offset, (unsigned long long)size);
    return DLRT_OK;
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
        if (shape[i] < 0 || __builtin_mul_overflow(stride, shape[i], &stride))
            return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                              "%s: argument '%s' has a shape whose size overflows", fn, name);
    }
    if (t->data == NULL && stride > 0)
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: argument '%s' has no data", fn, name);
    dlrt_status s = check_extent(fn, name, t, (uint64_t)stride, bits / 8);
    if (s != DLRT_OK)
        return s;
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
    /* An empty tensor may have no data at all: never offset a NULL pointer. */
    *data = t->data == NULL ? NULL : (char *)t->data + t->byte_offset;
    return DLRT_OK;
}

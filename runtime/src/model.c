/* model.c: the model object of a library (dlrt_model_create, dlrt_model_destroy): a buffer per
 * parameter and state (and a spare one for those a train entry updates), the step count, the
 * arena of the host functions' frames, and the device it runs on. Parameters come from the
 * model's init host function, run with a random stream seeded by the caller. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "model.h"

void dlrt_model_fn(char *fn, const dlrt_model_spec *spec, const char *what) {
    snprintf(fn, DLRT_MODEL_FN, "%s_%s", spec->c_name, what);
}

dlrt_status dlrt_model_null(const char *fn, const char *arg) {
    return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: argument '%s' is NULL", fn, arg);
}

size_t dlrt_model_bytes(const dlrt_tensor *t) {
    size_t bytes = dlrt_dtype_size(t->dtype);
    for (int32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0 || !dlrt_checked_mul(bytes, (size_t)t->shape[i], &bytes)) {
            return SIZE_MAX;
        }
    }
    return bytes;
}

bool dlrt_model_trains(const dlrt_entry *e) {
    return strcmp(e->kind, "train") == 0;
}

bool dlrt_model_updated(const dlrt_model_spec *spec, int32_t index) {
    for (int32_t k = 0; k < spec->entry_count; k++) {
        const dlrt_entry *e = &spec->entries[k];
        for (int32_t b = 0; dlrt_model_trains(e) && b < e->buffers; b++) {
            if (e->buffer[b] == index) {
                return true;
            }
        }
    }
    return false;
}

bool dlrt_model_has_step(const dlrt_model_spec *spec) {
    for (int32_t k = 0; k < spec->entry_count; k++) {
        if (dlrt_model_trains(&spec->entries[k]) && spec->entries[k].step >= 0) {
            return true;
        }
    }
    return false;
}

void dlrt_model_destroy(dlrt_model *m) {
    if (m == NULL) {
        return;
    }
    dlrt_model_allreduce_close(m);
    if (m->cuda != NULL) {
        dlrt_model_cuda_close(m);
    }
    for (int32_t i = 0; i < dlrt_model_tensor_count(m->spec); i++) {
        dlrt_free(m->buf[i]);
        dlrt_free(m->spare[i]);
    }
    if (m->ctx.arena != NULL) {
        dlrt_arena_destroy(m->ctx.arena);
    }
    dlrt_free(m);
}

/* A zeroed buffer of at least one byte, so that an empty tensor has one too. */
static void *zeros(size_t bytes) {
    void *p = dlrt_alloc(bytes ? bytes : 1);
    if (p != NULL) {
        memset(p, 0, bytes);
    }
    return p;
}

/* Whether `device` is "cuda:N" (N decimal digits). */
static bool is_cuda(const char *device) {
    const char *p = device + 5;
    if (strncmp(device, "cuda:", 5) != 0 || *p == '\0') {
        return false;
    }
    for (; *p != '\0'; ++p) {
        if (*p < '0' || *p > '9') {
            return false;
        }
    }
    return true;
}

/* *ordinal: the GPU `device` names, or -1 for the CPU; an error for a device this library
   cannot use. */
static dlrt_status device_ordinal(const dlrt_model_spec *spec, const char *fn, const char *device,
                                  int *ordinal) {
    *ordinal = -1;
    if (device == NULL || strcmp(device, "cpu") == 0) {
        return DLRT_OK;
    }
    if (!is_cuda(device)) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: unknown device '%s' (expected \"cpu\" or \"cuda:N\")", fn, device);
    }
    if (spec->cuda == NULL) {
        return dlrt_error(DLRT_ERR_DEVICE, "%s: device '%s': this library has no CUDA kernels",
                          fn, device);
    }
    *ordinal = dlrt_model_ordinal(device);
    if (*ordinal < 0) {
        return dlrt_error(DLRT_ERR_DEVICE, "%s: device '%s': no such device", fn, device);
    }
    return DLRT_OK;
}

/* The model object with every buffer zeroed; NULL (with an error naming `fn`) on OOM. */
static dlrt_model *allocate(const dlrt_model_spec *spec, const char *fn) {
    size_t n = (size_t)dlrt_model_tensor_count(spec);
    /* One block: the object, then its four pointer arrays (one pointer each when empty). */
    size_t arrays = 0, total = 0;
    dlrt_model *m = NULL;
    if (dlrt_checked_mul(4 * sizeof(void *), n ? n : 1, &arrays) &&
        dlrt_checked_add(sizeof *m, arrays, &total)) {
        m = dlrt_alloc(total);
    }
    if (m == NULL) {
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        return NULL;
    }
    memset(m, 0, total);
    void **pointers = (void **)(m + 1);
    m->buf = pointers;
    m->spare = pointers + (n ? n : 1);
    m->dbuf = pointers + 2 * (n ? n : 1);
    m->dspare = pointers + 3 * (n ? n : 1);
    m->spec = spec;
    m->ordinal = -1;
    m->ctx.arena = dlrt_arena_create(0);
    bool ok = m->ctx.arena != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        m->buf[i] = zeros(dlrt_model_bytes(&spec->tensors[i]));
        ok = m->buf[i] != NULL;
    }
    for (size_t i = 0; ok && i < n; i++) {
        if (dlrt_model_updated(spec, (int32_t)i)) {
            m->spare[i] = zeros(dlrt_model_bytes(&spec->tensors[i]));
            ok = m->spare[i] != NULL;
        }
    }
    if (!ok) {
        dlrt_model_destroy(m);
        dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        return NULL;
    }
    return m;
}

dlrt_status dlrt_model_host_status(const char *fn, const char *host, int32_t rc) {
    if (dlrt_last_error()[0] == '\0') {
        return dlrt_error((dlrt_status)rc, "%s: %s failed with status %d", fn, host, (int)rc);
    }
    return dlrt_error((dlrt_status)rc, "%s: %s", fn, dlrt_last_error());
}

/* Runs init into the parameters' buffers. */
static dlrt_status run_init(dlrt_model *m, const char *fn) {
    const dlrt_model_spec *spec = m->spec;
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    void **args = dlrt_arena_push(m->ctx.arena, sizeof(void *) * ((size_t)spec->params + 1));
    if (args == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (int32_t i = 0; i < spec->params; i++) {
        args[i] = m->buf[i];
    }
    dlrt_clear_error();
    int32_t rc = spec->init(&m->ctx, args);
    dlrt_arena_reset(m->ctx.arena, mark);
    if (rc != DLRT_OK) {
        dlrt_model_host_status(fn, spec->init_name, rc);
        return (dlrt_status)rc;
    }
    return DLRT_OK;
}

dlrt_status dlrt_model_create(const dlrt_model_spec *spec, const char *device, uint64_t seed,
                              void *out) {
    char fn[DLRT_MODEL_FN];
    dlrt_model_fn(fn, spec, "create");
    dlrt_model *m = NULL;
    if (out == NULL) {
        return dlrt_model_null(fn, "out");
    }
    memcpy(out, &m, sizeof m);
    int ordinal;
    dlrt_status s = dlrt_model_check(spec, fn);
    if (s != DLRT_OK) {
        return s;
    }
    s = device_ordinal(spec, fn, device, &ordinal);
    if (s != DLRT_OK) {
        return s;
    }
    m = allocate(spec, fn);
    if (m == NULL) {
        return DLRT_ERR_OUT_OF_MEMORY;
    }
    m->ctx.seed = seed;
    m->version = 1; /* derived states, computed at version 0 (never), are stale */
    if (spec->init != NULL) {
        s = run_init(m, fn);
        if (s != DLRT_OK) {
            dlrt_model_destroy(m);
            return s;
        }
    }
    if (ordinal >= 0) {
        s = dlrt_model_cuda_open(m, ordinal);
        m->ordinal = ordinal;
        if (s != DLRT_OK) {
            char why[DLRT_ERROR_CAPACITY];
            snprintf(why, sizeof why, "%s", dlrt_last_error());
            dlrt_model_destroy(m);
            return dlrt_error(s, "%s: %s", fn, why);
        }
    }
    memcpy(out, &m, sizeof m);
    return DLRT_OK;
}

/* model_entry.c: a model's entry points (dlrt_model_call, dlrt_model_call_dl): the arguments
 * checked, then the entry's host function called inside one arena frame with the inputs, the
 * model's tensors, the step and the outputs, or its device plan run on the model's GPU. A
 * failed call leaves the model as it was; a train step swaps in the new tensors. */
#include <stdio.h>

#include "internal.h"
#include "model.h"

/* Pointers a host function takes that fit on the stack of a call. */
#define HOST_POINTERS 64

void dlrt_model_step(const dlrt_model *m, const dlrt_entry *e, dlrt_step_value *out) {
    /* The host sees the 1-based number of this step (docs/tel.md, optimisers). */
    int64_t step = m->step + 1;
    switch (e->step) {
    case DLRT_I8:
        out->i8 = (int8_t)step;
        break;
    case DLRT_I16:
        out->i16 = (int16_t)step;
        break;
    case DLRT_I32:
        out->i32 = (int32_t)step;
        break;
    case DLRT_F32:
        out->f32 = (float)step;
        break;
    case DLRT_F64:
        out->f64 = (double)step;
        break;
    default:
        out->i64 = step;
        break;
    }
}

/* Computes the derived states from the parameters when they changed since (spec->derive). */
static dlrt_status derive(dlrt_model *m, const char *fn) {
    const dlrt_model_spec *spec = m->spec;
    if (spec->derive == NULL || m->derived_at == m->version) {
        return DLRT_OK;
    }
    size_t count = (size_t)spec->params + (size_t)spec->derived;
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    void **args = dlrt_arena_push(m->ctx.arena, sizeof(void *) * count);
    if (args == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    int32_t first = dlrt_model_tensor_count(spec) - spec->derived;
    for (int32_t i = 0; i < spec->params; i++) {
        args[i] = m->buf[i];
    }
    for (int32_t i = 0; i < spec->derived; i++) {
        args[spec->params + i] = m->buf[first + i];
    }
    dlrt_clear_error();
    int32_t rc = spec->derive(&m->ctx, args);
    dlrt_arena_reset(m->ctx.arena, mark);
    if (rc != DLRT_OK) {
        return dlrt_model_host_status(fn, spec->derive_name, rc);
    }
    m->derived_at = m->version;
    return DLRT_OK;
}

dlrt_status dlrt_model_run_cpu(dlrt_model *m, const dlrt_entry *e, void *const *args,
                               const char *fn) {
    bool train = dlrt_model_trains(e);
    if (!train) { /* a train entry's call counted a new version (dlrt_model_call) */
        dlrt_status s = derive(m, fn);
        if (s != DLRT_OK) {
            return s;
        }
    }
    size_t count = (size_t)(e->inputs + e->buffers + (e->step >= 0) + e->outputs) +
                   (train ? (size_t)e->buffers : 0);
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    /* The host's pointers: on the stack, unless there are very many of them. */
    void *on_stack[HOST_POINTERS];
    void **host = count <= HOST_POINTERS ? on_stack
                                         : dlrt_arena_push(m->ctx.arena, sizeof(void *) * count);
    if (host == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    dlrt_step_value step;
    size_t k = 0;
    for (int32_t i = 0; i < e->inputs; i++) {
        host[k++] = args[i];
    }
    for (int32_t b = 0; b < e->buffers; b++) {
        host[k++] = m->buf[e->buffer[b]];
    }
    if (e->step >= 0) {
        dlrt_model_step(m, e, &step);
        host[k++] = &step;
    }
    for (int32_t i = 0; i < e->outputs; i++) {
        host[k++] = args[e->inputs + i];
    }
    for (int32_t b = 0; train && b < e->buffers; b++) {
        host[k++] = m->spare[e->buffer[b]];
    }
    uint64_t counter = m->ctx.counter;
    dlrt_clear_error();
    int32_t rc = e->host(&m->ctx, host);
    dlrt_arena_reset(m->ctx.arena, mark);
    if (rc != DLRT_OK) {
        m->ctx.counter = counter; /* a failed call leaves the model as it was */
        return dlrt_model_host_status(fn, e->host_name, rc);
    }
    for (int32_t b = 0; train && b < e->buffers; b++) {
        int32_t i = e->buffer[b];
        void *t = m->buf[i];
        m->buf[i] = m->spare[i];
        m->spare[i] = t;
    }
    if (e->step >= 0) {
        m->step += 1;
    }
    if (train && e->buffers > 0 && m->cuda != NULL && dlrt_model_push(m) != DLRT_OK) {
        return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", fn, dlrt_last_error());
    }
    return DLRT_OK;
}

dlrt_status dlrt_model_call(const dlrt_model_spec *spec, int32_t entry, dlrt_model *m,
                            void *const *args) {
    const dlrt_entry *e = &spec->entries[entry];
    const char *fn = e->symbol;
    if (m == NULL) {
        return dlrt_model_null(fn, "m");
    }
    for (int32_t i = 0; i < e->inputs + e->outputs; i++) {
        if (args[i] == NULL) {
            return dlrt_model_null(fn, e->args[i].name);
        }
    }
    if (dlrt_model_trains(e)) {
        m->version += 1; /* the parameters change, on whichever path; a failed step too: a
                            version too many only recomputes the derived states */
    }
    if (e->grads != NULL && m->allreduce != NULL) {
        return dlrt_model_distributed(m, e, args, NULL);
    }
    if (m->cuda != NULL) {
        if (e->plan != NULL) {
            return dlrt_model_run_plan(m, e, args, NULL);
        }
        /* On the CPU, with the device's parameters. */
        if (dlrt_model_pull(m) != DLRT_OK) {
            return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", fn, dlrt_last_error());
        }
    }
    return dlrt_model_run_cpu(m, e, args, fn);
}

/* "NAME_<entry>_dl" in `fn` (DLRT_MODEL_FN bytes), for messages: made only on failure, so that
   a call pays no formatting. */
static const char *dl_name(const dlrt_entry *e, char *fn) {
    snprintf(fn, DLRT_MODEL_FN, "%s_dl", e->symbol);
    return fn;
}

dlrt_status dlrt_model_call_dl(const dlrt_model_spec *spec, int32_t entry, dlrt_model *m,
                               DLTensor *const *args) {
    const dlrt_entry *e = &spec->entries[entry];
    int32_t n = e->inputs + e->outputs;
    char fn[DLRT_MODEL_FN];
    if (n == 0) { /* nothing to check */
        return dlrt_model_call(spec, entry, m, NULL);
    }
    if (m == NULL) {
        return dlrt_model_null(dl_name(e, fn), "m");
    }
    if (args == NULL) {
        return dlrt_model_null(dl_name(e, fn), "args");
    }
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    void **data = dlrt_arena_push(m->ctx.arena, (sizeof(void *) + 1) * (size_t)n);
    if (data == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", dl_name(e, fn));
    }
    unsigned char *dev = (unsigned char *)(data + n);
    /* A model on the CPU takes host memory only. */
    int ordinal = m->cuda != NULL ? m->ordinal : -1;
    bool on_device = false;
    dlrt_status s = DLRT_OK;
    for (int32_t i = 0; i < n && s == DLRT_OK; i++) {
        const dlrt_tensor *t = &e->args[i];
        s = dlrt_dl_argument(e->symbol, t->name, args[i], t->dtype, t->rank, t->shape, ordinal,
                             &data[i], &dev[i]);
        if (s != DLRT_OK) { /* the same check again, for a message that names this function */
            s = dlrt_dl_argument(dl_name(e, fn), t->name, args[i], t->dtype, t->rank, t->shape,
                                 ordinal, &data[i], &dev[i]);
        }
        on_device |= s == DLRT_OK && dev[i];
    }
    if (s == DLRT_OK && dlrt_model_trains(e)) {
        m->version += 1;
    }
    if (s == DLRT_OK && e->grads != NULL && m->allreduce != NULL) {
        s = dlrt_model_distributed(m, e, data, dev);
    } else if (s == DLRT_OK && on_device && e->plan != NULL) {
        s = dlrt_model_run_plan(m, e, data, dev);
    } else if (s == DLRT_OK && on_device) {
        s = dlrt_error(DLRT_ERR_DEVICE,
                       "%s: this entry runs on the CPU for a model on a GPU: pass host memory "
                       "(kDLCPU)", dl_name(e, fn));
    } else if (s == DLRT_OK) {
        s = dlrt_model_call(spec, entry, m, data);
    }
    dlrt_arena_reset(m->ctx.arena, mark);
    return s;
}

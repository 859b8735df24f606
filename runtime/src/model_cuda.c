/* model_cuda.c: a model on a GPU (docs/c-abi.md section 7). It keeps its parameters and states
 * in device memory (dbuf, with dspare for a train step's new values) and a host copy (buf)
 * brought up to date only when the host needs it: host_stale says the device holds newer
 * values. An entry with a device plan uploads its inputs (and step) into the scratch block,
 * launches the plan's kernels on the model's stream, downloads its outputs and, for a train
 * step, swaps the new tensors in; arguments already in the GPU's memory are used in place. */
#include "internal.h"
#include "model.h"

int dlrt_model_ordinal(const char *device) {
    long n = 0;
    for (const char *p = device + 5; *p != '\0'; ++p) {
        n = n * 10 + (*p - '0');
        if (n > 65535) {
            return -1;
        }
    }
    return (int)n;
}

dlrt_status dlrt_model_cuda_open(dlrt_model *m, int ordinal) {
    const dlrt_model_spec *spec = m->spec;
    const dlrt_model_cuda *c = spec->cuda;
    dlrt_status s = dlrt_cuda_open(ordinal, c->ptx, c->kernels, c->count, &m->cuda);
    for (int32_t i = 0; s == DLRT_OK && i < dlrt_model_tensor_count(spec); i++) {
        s = dlrt_cuda_alloc(m->cuda, dlrt_model_bytes(&spec->tensors[i]), &m->dbuf[i]);
    }
    for (int32_t i = 0; s == DLRT_OK && i < dlrt_model_tensor_count(spec); i++) {
        if (dlrt_model_updated(spec, i)) {
            s = dlrt_cuda_alloc(m->cuda, dlrt_model_bytes(&spec->tensors[i]), &m->dspare[i]);
        }
    }
    if (s == DLRT_OK) {
        s = dlrt_cuda_alloc(m->cuda, (size_t)c->scratch, &m->scratch);
    }
    return s == DLRT_OK ? dlrt_model_push(m) : s;
}

void dlrt_model_cuda_close(dlrt_model *m) {
    for (int32_t i = 0; i < dlrt_model_tensor_count(m->spec); i++) {
        dlrt_cuda_free(m->cuda, m->dbuf[i]);
        dlrt_cuda_free(m->cuda, m->dspare[i]);
        m->dbuf[i] = m->dspare[i] = NULL;
    }
    dlrt_cuda_free(m->cuda, m->scratch);
    dlrt_cuda_close(m->cuda);
    m->scratch = NULL;
    m->cuda = NULL;
}

dlrt_status dlrt_model_pull(dlrt_model *m) {
    if (m->cuda == NULL || !m->host_stale) {
        return DLRT_OK;
    }
    for (int32_t i = 0; i < dlrt_model_tensor_count(m->spec); i++) {
        size_t bytes = dlrt_model_bytes(&m->spec->tensors[i]);
        dlrt_status s = dlrt_cuda_download(m->cuda, m->buf[i], m->dbuf[i], bytes);
        if (s != DLRT_OK) {
            return s;
        }
    }
    m->host_stale = 0;
    return DLRT_OK;
}

dlrt_status dlrt_model_push(dlrt_model *m) {
    if (m->cuda == NULL) {
        return DLRT_OK;
    }
    for (int32_t i = 0; i < dlrt_model_tensor_count(m->spec); i++) {
        size_t bytes = dlrt_model_bytes(&m->spec->tensors[i]);
        dlrt_status s = dlrt_cuda_upload(m->cuda, m->dbuf[i], m->buf[i], bytes);
        if (s != DLRT_OK) {
            return s;
        }
    }
    m->host_stale = 0;
    return DLRT_OK;
}

/* Which upload slot k is (its position in plan->uploads), or -1. */
static int32_t upload_of(const dlrt_plan *plan, int32_t uploads, int32_t k) {
    for (int32_t u = 0; u < uploads; u++) {
        if (plan->uploads[u] == k) {
            return u;
        }
    }
    return -1;
}

/* Where each slot's tensor is: a parameter's device buffer, the argument itself when it is in
   the GPU's memory, or a place in the scratch block. */
static void bind_slots(dlrt_model *m, const dlrt_entry *e, void *const *args,
                       const unsigned char *dev, int32_t uploads, void **slots) {
    const dlrt_plan *plan = e->plan;
    for (int32_t k = 0; k < plan->slot_count; k++) {
        const dlrt_slot *slot = &plan->slots[k];
        void *scratch = (char *)m->scratch + slot->offset;
        int32_t u = upload_of(plan, uploads, k);
        if (slot->argument >= 0) {
            slots[k] = m->dbuf[e->buffer[slot->argument - e->inputs]];
        } else if (slot->result >= e->outputs) {
            slots[k] = m->dspare[e->buffer[slot->result - e->outputs]];
        } else if (slot->result >= 0 || (u >= 0 && u < e->inputs)) {
            int32_t i = u >= 0 ? u : e->inputs + slot->result;
            slots[k] = dev != NULL && dev[i] ? args[i] : scratch;
        } else {
            slots[k] = scratch;
        }
    }
}

/* The plan's uploads: the inputs not in the GPU's memory, and the step. */
static dlrt_status upload(dlrt_model *m, const dlrt_entry *e, void *const *args,
                          const unsigned char *dev, int32_t uploads, void *const *slots) {
    dlrt_step_value step;
    for (int32_t u = 0; u < uploads; u++) {
        void *slot = slots[e->plan->uploads[u]];
        dlrt_status s = DLRT_OK;
        if (u >= e->inputs) {
            dlrt_model_step(m, e, &step);
            s = dlrt_cuda_upload(m->cuda, slot, &step, dlrt_dtype_size((dlrt_dtype)e->step));
        } else if (dev == NULL || !dev[u]) {
            s = dlrt_cuda_upload(m->cuda, slot, args[u], dlrt_model_bytes(&e->args[u]));
        }
        if (s != DLRT_OK) {
            return s;
        }
    }
    return DLRT_OK;
}

/* The plan's results to where they go: outputs to the caller (downloaded, or copied within the
   GPU unless the kernel wrote them in place), new tensors into dspare. */
static dlrt_status deliver(dlrt_model *m, const dlrt_entry *e, void *const *args,
                           const unsigned char *dev, int32_t results, void *const *slots) {
    for (int32_t position = 0; position < results; position++) {
        int32_t k = e->plan->results[position];
        bool in_place = e->plan->slots[k].result == position;
        dlrt_status s = DLRT_OK;
        if (position < e->outputs) {
            int32_t i = e->inputs + position;
            size_t bytes = dlrt_model_bytes(&e->args[i]);
            if (dev == NULL || !dev[i]) {
                s = dlrt_cuda_download(m->cuda, args[i], slots[k], bytes);
            } else if (!in_place) {
                s = dlrt_cuda_copy(m->cuda, args[i], slots[k], bytes);
            }
        } else if (!in_place) {
            int32_t index = e->buffer[position - e->outputs];
            size_t bytes = dlrt_model_bytes(&m->spec->tensors[index]);
            s = dlrt_cuda_copy(m->cuda, m->dspare[index], slots[k], bytes);
        }
        if (s != DLRT_OK) {
            return s;
        }
    }
    /* Downloads wait for the stream; without one, wait here, so that errors surface now. */
    return dlrt_cuda_sync(m->cuda);
}

dlrt_status dlrt_model_run_plan(dlrt_model *m, const dlrt_entry *e, void *const *args,
                                const unsigned char *dev) {
    const dlrt_plan *plan = e->plan;
    int32_t uploads = e->inputs + (e->step >= 0);
    int32_t results = e->outputs + (dlrt_model_trains(e) ? e->buffers : 0);
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    void **slots = dlrt_arena_push(m->ctx.arena, sizeof(void *) * (size_t)(plan->slot_count + 1));
    if (slots == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", e->symbol);
    }
    bind_slots(m, e, args, dev, uploads, slots);
    dlrt_status s = upload(m, e, args, dev, uploads, slots);
    if (s == DLRT_OK) {
        s = dlrt_cuda_run(m->cuda, plan->steps, plan->count, slots);
    }
    if (s == DLRT_OK) {
        s = deliver(m, e, args, dev, results, slots);
    }
    dlrt_arena_reset(m->ctx.arena, mark);
    if (s != DLRT_OK) {
        return dlrt_error(s, "%s: %s", e->symbol, dlrt_last_error());
    }
    for (int32_t position = e->outputs; position < results; position++) {
        int32_t index = e->buffer[position - e->outputs];
        void *t = m->dbuf[index];
        m->dbuf[index] = m->dspare[index];
        m->dspare[index] = t;
    }
    if (results > e->outputs) {
        m->host_stale = 1;
    }
    if (e->step >= 0) {
        m->step += 1;
    }
    return DLRT_OK;
}

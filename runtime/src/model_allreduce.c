/* model_allreduce.c: data-parallel train steps (docs/distributed.md). With a hook set by
 * NAME_set_allreduce, a train entry that has parts (a library built with --distributed) runs
 * its grads part with the outputs (loss, gradients, updated buffers) laid end to end in one
 * block, calls the hook on each run of float elements of one dtype, then runs its apply part
 * on the sums with the scale 1/ranks. The block is host memory, or the GPU's when both parts
 * have device plans. A failure anywhere, the hook's included, leaves the model as it was: the
 * grads part changes nothing, and only apply, the last step, updates the model. */
#include <inttypes.h>

#include "internal.h"
#include "model.h"

/* Where runs of different dtypes start in the block (a cache line, as dlrt_alloc's blocks). */
#define RUN_ALIGN 64

static size_t align_up(size_t n) {
    return (n + RUN_ALIGN - 1) / RUN_ALIGN * RUN_ALIGN;
}

/* The offset of each output of grads part `g` in the block (outputs of one dtype end to end,
   a new dtype at the next multiple of RUN_ALIGN), into `offsets` when not NULL; the block's
   bytes, or SIZE_MAX when that overflows. */
static size_t block_layout(const dlrt_entry *g, size_t *offsets) {
    size_t at = 0;
    for (int32_t i = 0; i < g->outputs; i++) {
        const dlrt_tensor *t = &g->args[g->inputs + i];
        size_t bytes = dlrt_model_bytes(t);
        if (i > 0 && t->dtype != g->args[g->inputs + i - 1].dtype) {
            at = align_up(at);
        }
        if (bytes == SIZE_MAX || at > SIZE_MAX - RUN_ALIGN - bytes) {
            return SIZE_MAX;
        }
        if (offsets != NULL) {
            offsets[i] = at;
        }
        at += bytes;
    }
    return align_up(at);
}

void dlrt_model_allreduce_close(dlrt_model *m) {
    dlrt_free(m->sums);
    if (m->dsums != NULL) {
        dlrt_cuda_free(m->cuda, m->dsums);
    }
    m->sums = m->dsums = NULL;
    m->sums_bytes = 0;
    m->allreduce = NULL;
    m->allreduce_ctx = NULL;
    m->ranks = 1;
}

dlrt_status dlrt_model_set_allreduce(const dlrt_model_spec *spec, dlrt_model *m,
                                     dlrt_allreduce_fn fn, void *ctx, int32_t ranks) {
    char name[DLRT_MODEL_FN];
    dlrt_model_fn(name, spec, "set_allreduce");
    if (m == NULL) {
        return dlrt_model_null(name, "m");
    }
    if (fn == NULL) {
        dlrt_model_allreduce_close(m);
        return DLRT_OK;
    }
    if (ranks < 1) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: ranks is %d; it must be the number of processes (at least 1)",
                          name, (int)ranks);
    }
    size_t bytes = 0;
    for (int32_t k = 0; k < spec->entry_count; k++) {
        const dlrt_entry *g = spec->entries[k].grads;
        size_t need = g != NULL ? block_layout(g, NULL) : 0;
        if (need == SIZE_MAX) {
            return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", name);
        }
        bytes = need > bytes ? need : bytes;
    }
    if (bytes == 0) {
        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,
                          "%s: the library was built without --distributed, so its train steps "
                          "cannot sum gradients across processes (rebuild it with telc build "
                          "--distributed)",
                          name);
    }
    dlrt_model_allreduce_close(m);
    m->sums = dlrt_alloc(bytes);
    dlrt_status s = m->sums != NULL ? DLRT_OK : DLRT_ERR_OUT_OF_MEMORY;
    if (s == DLRT_OK && m->cuda != NULL) {
        s = dlrt_cuda_alloc(m->cuda, bytes, &m->dsums);
    }
    if (s != DLRT_OK) {
        dlrt_model_allreduce_close(m);
        return dlrt_error(s, "%s: %s", name, dlrt_last_error());
    }
    m->sums_bytes = bytes;
    m->allreduce = fn;
    m->allreduce_ctx = ctx;
    m->ranks = ranks;
    return DLRT_OK;
}

static bool is_float(dlrt_dtype t) {
    return t == DLRT_F16 || t == DLRT_F32 || t == DLRT_F64 || t == DLRT_BF16;
}

/* The hook on each run of float outputs of `g` in `block`; a failure names entry `e`. */
static dlrt_status reduce(dlrt_model *m, const dlrt_entry *e, const dlrt_entry *g, char *block,
                          const size_t *offsets, DLDevice device) {
    int32_t i = 0;
    while (i < g->outputs) {
        dlrt_dtype dtype = g->args[g->inputs + i].dtype;
        int32_t end = i;
        int64_t count = 0;
        while (end < g->outputs && g->args[g->inputs + end].dtype == dtype) {
            count += (int64_t)(dlrt_model_bytes(&g->args[g->inputs + end]) /
                               dlrt_dtype_size(dtype));
            end++;
        }
        if (is_float(dtype) && count > 0) {
            dlrt_clear_error();
            int32_t rc = m->allreduce(m->allreduce_ctx, block + offsets[i], count, dtype, device);
            if (rc != 0) {
                return dlrt_error(DLRT_ERR_COLLECTIVE,
                                  "%s: the all-reduce hook failed (it returned %d) on %" PRId64
                                  " %s elements; the step was not taken and the model is as it "
                                  "was",
                                  e->symbol, (int)rc, count, dlrt_dtype_tag(dtype));
            }
        }
        i = end;
    }
    return DLRT_OK;
}

/* Part `p` of `e` run where the block is: its device plan, or its host function on the CPU. */
static dlrt_status run_part(dlrt_model *m, const dlrt_entry *e, const dlrt_entry *p,
                            void *const *args, const unsigned char *dev, bool on_gpu) {
    return on_gpu ? dlrt_model_run_plan(m, p, args, dev)
                  : dlrt_model_run_cpu(m, p, args, e->symbol);
}

dlrt_status dlrt_model_distributed(dlrt_model *m, const dlrt_entry *e, void *const *args,
                                   const unsigned char *dev) {
    const dlrt_entry *g = e->grads, *a = e->apply;
    bool on_gpu = m->cuda != NULL && g->plan != NULL && a->plan != NULL;
    bool given_on_gpu = false;
    for (int32_t i = 0; dev != NULL && i < e->inputs + e->outputs; i++) {
        given_on_gpu |= dev[i] != 0;
    }
    if (given_on_gpu && !on_gpu) {
        return dlrt_error(DLRT_ERR_DEVICE,
                          "%s_dl: this entry runs on the CPU for a model on a GPU: pass host "
                          "memory (kDLCPU)",
                          e->symbol);
    }
    if (m->cuda != NULL && !on_gpu && dlrt_model_pull(m) != DLRT_OK) {
        return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", e->symbol, dlrt_last_error());
    }
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    size_t n = (size_t)(g->inputs + g->outputs) + (size_t)(a->inputs + a->outputs);
    size_t *offsets = dlrt_arena_push(m->ctx.arena, sizeof(size_t) * ((size_t)g->outputs + 1));
    void **gargs = dlrt_arena_push(m->ctx.arena, (sizeof(void *) + 1) * (n + 1));
    if (offsets == NULL || gargs == NULL) {
        dlrt_arena_reset(m->ctx.arena, mark);
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", e->symbol);
    }
    void **aargs = gargs + g->inputs + g->outputs;
    unsigned char *gdev = (unsigned char *)(gargs + n + 1);
    unsigned char *adev = gdev + g->inputs + g->outputs;
    block_layout(g, offsets);
    char *block = on_gpu ? m->dsums : m->sums;
    /* grads: e's inputs, then its outputs into the block. */
    for (int32_t i = 0; i < g->inputs; i++) {
        gargs[i] = args[i];
        gdev[i] = dev != NULL && dev[i];
    }
    for (int32_t i = 0; i < g->outputs; i++) {
        gargs[g->inputs + i] = block + offsets[i];
        gdev[g->inputs + i] = on_gpu;
    }
    /* apply: the sums, the scale (host memory), then e's outputs. */
    double scale = 1.0 / (double)m->ranks;
    for (int32_t i = 0; i < g->outputs; i++) {
        aargs[i] = block + offsets[i];
        adev[i] = on_gpu;
    }
    aargs[g->outputs] = &scale;
    adev[g->outputs] = 0;
    for (int32_t i = 0; i < e->outputs; i++) {
        aargs[a->inputs + i] = args[e->inputs + i];
        adev[a->inputs + i] = dev != NULL && dev[e->inputs + i];
    }
    uint64_t counter = m->ctx.counter;
    DLDevice device = {on_gpu ? kDLCUDA : kDLCPU, on_gpu ? m->ordinal : 0};
    dlrt_status s = run_part(m, e, g, gargs, gdev, on_gpu);
    if (s == DLRT_OK) {
        s = reduce(m, e, g, block, offsets, device);
    }
    if (s == DLRT_OK) {
        s = run_part(m, e, a, aargs, adev, on_gpu);
    }
    if (s != DLRT_OK) {
        m->ctx.counter = counter; /* a failed step leaves the random stream as it was too */
    }
    dlrt_arena_reset(m->ctx.arena, mark);
    return s;
}

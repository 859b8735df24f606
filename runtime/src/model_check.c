/* model_check.c: the checks of a model's tables (dlrt_model_spec) before anything is sized or
 * indexed from them: counts that are not negative and whose sums fit, tensors whose size in
 * bytes fits the address space, and indices (buffers, states, device plans) in range. The rest
 * of the runtime relies on them, so a library whose glue is wrong fails with a message instead
 * of allocating a wrapped size or reading past a table. */
#include <inttypes.h>
#include <stdio.h>

#include "internal.h"
#include "model.h"

dlrt_status dlrt_tensor_bytes(const char *fn, const char *what, const dlrt_tensor *t,
                              size_t *out) {
    if (t->name == NULL) {
        return dlrt_error(DLRT_ERR_INTERNAL, "%s: %s has no name", fn, what);
    }
    size_t bytes = dlrt_dtype_size(t->dtype);
    if (bytes == 0 || t->rank < 0 || (t->rank > 0 && t->shape == NULL)) {
        return dlrt_error(DLRT_ERR_INTERNAL,
                          "%s: %s '%s' has dtype %d and rank %" PRId32 "%s, which the runtime "
                          "cannot read",
                          fn, what, t->name, (int)t->dtype, t->rank,
                          t->rank > 0 && t->shape == NULL ? " but no shape" : "");
    }
    bool fits = true;
    for (int32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0) {
            return dlrt_error(DLRT_ERR_INTERNAL,
                              "%s: %s '%s' has dimension %" PRId64 " on axis %" PRId32, fn, what,
                              t->name, t->shape[i], i);
        }
        /* Keep checking the other axes for negative values after an overflow. */
        fits = fits && (uint64_t)t->shape[i] <= SIZE_MAX &&
               dlrt_checked_mul(bytes, (size_t)t->shape[i], &bytes);
    }
    if (!fits || bytes > (size_t)PTRDIFF_MAX) {
        char shape[96];
        dlrt_format_shape(shape, sizeof shape, t->shape, (size_t)t->rank);
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY,
                          "%s: %s '%s' (%s %s) is too large: its size in bytes does not fit in "
                          "the address space",
                          fn, what, t->name, dlrt_dtype_tag(t->dtype), shape);
    }
    *out = bytes;
    return DLRT_OK;
}

/* Checks `count` tensors of a table (`what` names them in messages). */
static dlrt_status check_tensors(const char *fn, const char *what, const dlrt_tensor *ts,
                                 int32_t count) {
    if (count > 0 && ts == NULL) {
        return dlrt_error(DLRT_ERR_INTERNAL, "%s: %d %ss but no table of them", fn, (int)count,
                          what);
    }
    size_t bytes;
    for (int32_t i = 0; i < count; i++) {
        dlrt_status s = dlrt_tensor_bytes(fn, what, &ts[i], &bytes);
        if (s != DLRT_OK) {
            return s;
        }
    }
    return DLRT_OK;
}

/* Whether the `count` int32 values of `list` (non-NULL when count > 0) lie in [0, bound). */
static bool all_below(const int32_t *list, int64_t count, int64_t bound) {
    if (count > 0 && list == NULL) {
        return false;
    }
    for (int64_t i = 0; i < count; i++) {
        if (list[i] < 0 || list[i] >= bound) {
            return false;
        }
    }
    return true;
}

/* Checks the device plan of entry `e` against the kernels and the scratch block. */
static dlrt_status check_plan(const char *fn, const dlrt_model_spec *spec, const dlrt_entry *e) {
    const dlrt_plan *p = e->plan;
    const dlrt_model_cuda *c = spec->cuda;
    int64_t uploads = (int64_t)e->inputs + (e->step >= 0);
    int64_t results = (int64_t)e->outputs + (dlrt_model_trains(e) ? e->buffers : 0);
    bool ok = c != NULL && p->count >= 0 && p->slot_count >= 0 && p->slot_count < INT32_MAX &&
              (p->count == 0 || p->steps != NULL) && (p->slot_count == 0 || p->slots != NULL) &&
              all_below(p->uploads, uploads, p->slot_count) &&
              all_below(p->results, results, p->slot_count);
    for (int32_t k = 0; ok && k < p->slot_count; k++) {
        const dlrt_slot *s = &p->slots[k];
        ok = s->offset >= 0 && s->offset <= c->scratch &&
             (s->argument == -1 ||
              (s->argument >= e->inputs && s->argument - e->inputs < e->buffers)) &&
             s->result >= -1 && s->result < results;
    }
    for (int32_t k = 0; ok && k < p->count; k++) {
        const dlrt_launch *l = &p->steps[k];
        ok = l->kernel >= 0 && l->kernel < c->count &&
             all_below(l->slots, c->kernels[l->kernel].pointers, p->slot_count);
    }
    return ok ? DLRT_OK
              : dlrt_error(DLRT_ERR_INTERNAL,
                           "%s: the device plan of entry '%s' does not fit the library's "
                           "kernels and scratch memory",
                           fn, e->name);
}

/* Checks entry `e`: its counts, arguments, buffers, step and plan. */
static dlrt_status check_entry(const char *fn, const dlrt_model_spec *spec, const dlrt_entry *e) {
    if (e->name == NULL || e->kind == NULL || e->symbol == NULL || e->host_name == NULL ||
        e->host == NULL) {
        return dlrt_error(DLRT_ERR_INTERNAL, "%s: an entry lacks a name or a host function", fn);
    }
    /* Every pointer a host takes (inputs, buffers, step, outputs, new buffers) must be
       countable in an int32_t, as the runtime counts them. */
    int64_t pointers = (int64_t)e->inputs + e->outputs + 2 * (int64_t)e->buffers + 1;
    if (e->inputs < 0 || e->outputs < 0 || e->buffers < 0 || pointers > INT32_MAX) {
        return dlrt_error(DLRT_ERR_INTERNAL,
                          "%s: entry '%s' has %" PRId32 " inputs, %" PRId32 " outputs and %" PRId32
                          " buffers",
                          fn, e->name, e->inputs, e->outputs, e->buffers);
    }
    dlrt_status s = check_tensors(fn, "argument", e->args, e->inputs + e->outputs);
    if (s != DLRT_OK) {
        return s;
    }
    if (!all_below(e->buffer, e->buffers, dlrt_model_tensor_count(spec)) || e->step < -1 ||
        e->step > DLRT_F64) {
        return dlrt_error(DLRT_ERR_INTERNAL,
                          "%s: entry '%s' names a tensor or a step type the model does not have",
                          fn, e->name);
    }
    return e->plan == NULL ? DLRT_OK : check_plan(fn, spec, e);
}

/* Checks the parts of train entry `e` (--distributed): both or neither; grads takes e's inputs
   and buffers and is no train entry; apply is one, over e's buffers and step, with e's outputs
   after its inputs, the last of which is the f64 scale; grads' outputs are apply's first inputs. */
static dlrt_status check_parts(const char *fn, const dlrt_model_spec *spec, const dlrt_entry *e) {
    const dlrt_entry *g = e->grads, *a = e->apply;
    if (g == NULL && a == NULL) {
        return DLRT_OK;
    }
    bool ok = g != NULL && a != NULL && dlrt_model_trains(e) && g->grads == NULL &&
              a->grads == NULL && g->apply == NULL && a->apply == NULL;
    dlrt_status s = ok ? check_entry(fn, spec, g) : DLRT_OK;
    if (ok && s == DLRT_OK) {
        s = check_entry(fn, spec, a);
    }
    if (s != DLRT_OK) {
        return s;
    }
    ok = ok && !dlrt_model_trains(g) && dlrt_model_trains(a) && g->inputs == e->inputs &&
         a->inputs == g->outputs + 1 && a->outputs == e->outputs && a->buffers == e->buffers &&
         a->step == e->step && a->args[a->inputs - 1].dtype == DLRT_F64 &&
         a->args[a->inputs - 1].rank == 0;
    for (int32_t i = 0; ok && i < g->outputs; i++) {
        const dlrt_tensor *x = &g->args[g->inputs + i], *y = &a->args[i];
        ok = x->dtype == y->dtype && dlrt_model_bytes(x) == dlrt_model_bytes(y);
    }
    if (!ok) {
        return dlrt_error(DLRT_ERR_INTERNAL,
                          "%s: the distributed parts of entry '%s' do not fit together", fn,
                          e->name);
    }
    return DLRT_OK;
}

dlrt_status dlrt_model_check(const dlrt_model_spec *spec, const char *fn) {
    if (spec->name == NULL || spec->compiler == NULL || spec->params < 0 || spec->states < 0 ||
        spec->params > INT32_MAX - spec->states || spec->entry_count < 0 || spec->buffers < 0 ||
        spec->buffers > spec->params || spec->derived < 0 || spec->derived > spec->states ||
        (spec->derived > 0 && spec->derive == NULL) ||
        (spec->entry_count > 0 && spec->entries == NULL)) {
        return dlrt_error(DLRT_ERR_INTERNAL,
                          "%s: the library's tables are inconsistent (%" PRId32
                          " parameters, %" PRId32 " states, %" PRId32 " entries)",
                          fn, spec->params, spec->states, spec->entry_count);
    }
    dlrt_status s = check_tensors(fn, "parameter", spec->tensors, spec->params);
    if (s == DLRT_OK) {
        s = check_tensors(fn, "state", spec->tensors + spec->params, spec->states);
    }
    if (s != DLRT_OK) {
        return s;
    }
    if (!all_below(spec->state_params, spec->states, spec->params)) {
        return dlrt_error(DLRT_ERR_INTERNAL, "%s: a state belongs to no parameter", fn);
    }
    const dlrt_model_cuda *c = spec->cuda;
    if (c != NULL && (c->gpu == NULL || c->ptx == NULL || c->count < 0 ||
                      (c->count > 0 && c->kernels == NULL) || c->scratch < 0 ||
                      (uint64_t)c->scratch > SIZE_MAX)) {
        return dlrt_error(DLRT_ERR_INTERNAL,
                          "%s: the library's CUDA tables are inconsistent (%" PRId32
                          " kernels, %" PRId64 " bytes of scratch memory)",
                          fn, c->count, c->scratch);
    }
    for (int32_t k = 0; k < spec->entry_count; k++) {
        s = check_entry(fn, spec, &spec->entries[k]);
        if (s == DLRT_OK) {
            s = check_parts(fn, spec, &spec->entries[k]);
        }
        if (s != DLRT_OK) {
            return s;
        }
    }
    return DLRT_OK;
}

/* model_tensors.c: a model's parameters and states from outside (dlrt_model_save, _load,
 * _get_param, _set_param): every tensor (and `__step__`) to and from a safetensors file, one
 * parameter to and from a caller's buffer. On a GPU, the host's copy is brought up to date
 * first, and the device's after a change. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "model.h"

/* The host's copy of m's tensors made current; `fn` names the caller in the message. The model
   is logically unchanged, so a const one may be brought up to date too. */
static dlrt_status pull(const dlrt_model *m, const char *fn) {
    if (m->cuda != NULL && dlrt_model_pull((dlrt_model *)m) != DLRT_OK) {
        return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", fn, dlrt_last_error());
    }
    return DLRT_OK;
}

/* The device's copy of m's tensors replaced by the host's. */
static dlrt_status push(dlrt_model *m, const char *fn) {
    if (m->cuda != NULL && dlrt_model_push(m) != DLRT_OK) {
        return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", fn, dlrt_last_error());
    }
    return DLRT_OK;
}

/* Saves (`save`) or loads m's tensors, the step count after them when the model has one. */
static dlrt_status save_or_load(const dlrt_model_spec *spec, dlrt_model *m, const char *path,
                                bool save) {
    char fn[DLRT_MODEL_FN];
    dlrt_model_fn(fn, spec, save ? "save" : "load");
    if (m == NULL) {
        return dlrt_model_null(fn, "m");
    }
    if (path == NULL) {
        return dlrt_model_null(fn, "path");
    }
    dlrt_status s = pull(m, fn); /* load too: it keeps the states a file lacks */
    if (s != DLRT_OK) {
        return s;
    }
    if (!save) {
        m->version += 1; /* even a failed load may have written some parameters */
    }
    /* Derived states are the parameters' (--quantize): neither saved nor loaded. */
    size_t n = (size_t)(dlrt_model_tensor_count(spec) - spec->derived);
    size_t total = n + dlrt_model_has_step(spec);
    size_t mark = dlrt_arena_mark(m->ctx.arena);
    dlrt_tensor *ts = dlrt_arena_push(m->ctx.arena, sizeof *ts * (total ? total : 1));
    if (ts == NULL) {
        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (size_t i = 0; i < n; i++) {
        ts[i] = spec->tensors[i];
        ts[i].data = m->buf[i];
    }
    if (total > n) {
        ts[n] = (dlrt_tensor){"__step__", DLRT_I64, 0, NULL, &m->step};
    }
    s = save ? dlrt_save(path, spec->name, ts, total)
             : dlrt_load(path, ts, total, (size_t)spec->params);
    dlrt_arena_reset(m->ctx.arena, mark);
    if (s != DLRT_OK) {
        return dlrt_error(s, "%s: %s", fn, dlrt_last_error());
    }
    return save ? DLRT_OK : push(m, fn);
}

dlrt_status dlrt_model_save(const dlrt_model_spec *spec, const dlrt_model *m, const char *path) {
    /* Saving changes nothing but the arena's scratch frame and the host's copy of a GPU's
       tensors, both invisible to the caller. */
    return save_or_load(spec, (dlrt_model *)m, path, true);
}

dlrt_status dlrt_model_load(const dlrt_model_spec *spec, dlrt_model *m, const char *path) {
    return save_or_load(spec, m, path, false);
}

/* The index of parameter `name`, or -1 with an error naming the known parameters. */
static int32_t find_param(const dlrt_model_spec *spec, const char *fn, const char *name) {
    char known[DLRT_ERROR_CAPACITY] = "none";
    size_t used = 0;
    for (int32_t i = 0; i < spec->params; i++) {
        if (strcmp(spec->tensors[i].name, name) == 0) {
            return i;
        }
        if (used < sizeof known) { /* as much of the list as a message can show */
            int n = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                             spec->tensors[i].name);
            used += n > 0 ? (size_t)n : 0;
        }
    }
    dlrt_error(DLRT_ERR_INVALID_ARGUMENT, "%s: unknown parameter '%s' (known: %s)", fn, name,
               known);
    return -1;
}

/* Checks the arguments of get_param or set_param; *index is the parameter's. */
static dlrt_status param_arguments(const dlrt_model_spec *spec, const char *fn,
                                   const dlrt_model *m, const char *name, const void *buffer,
                                   const char *buffer_name, int32_t *index) {
    if (m == NULL) {
        return dlrt_model_null(fn, "m");
    }
    if (name == NULL) {
        return dlrt_model_null(fn, "name");
    }
    if (buffer == NULL) {
        return dlrt_model_null(fn, buffer_name);
    }
    *index = find_param(spec, fn, name);
    if (*index < 0) {
        return DLRT_ERR_INVALID_ARGUMENT;
    }
    return pull(m, fn);
}

dlrt_status dlrt_model_get_param(const dlrt_model_spec *spec, const dlrt_model *m,
                                 const char *name, void *out) {
    char fn[DLRT_MODEL_FN];
    dlrt_model_fn(fn, spec, "get_param");
    int32_t i;
    dlrt_status s = param_arguments(spec, fn, m, name, out, "out", &i);
    if (s != DLRT_OK) {
        return s;
    }
    memcpy(out, m->buf[i], dlrt_model_bytes(&spec->tensors[i]));
    return DLRT_OK;
}

dlrt_status dlrt_model_set_param(const dlrt_model_spec *spec, dlrt_model *m, const char *name,
                                 const void *data) {
    char fn[DLRT_MODEL_FN];
    dlrt_model_fn(fn, spec, "set_param");
    int32_t i;
    dlrt_status s = param_arguments(spec, fn, m, name, data, "data", &i);
    if (s != DLRT_OK) {
        return s;
    }
    memcpy(m->buf[i], data, dlrt_model_bytes(&spec->tensors[i]));
    m->version += 1;
    return push(m, fn);
}

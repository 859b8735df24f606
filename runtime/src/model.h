/* model.h: the model object behind dlrt_model_* (dlrt.h) and what its source files share
 * (internal): model.c creates and destroys it, model_entry.c runs entries, model_tensors.c saves,
 * loads and copies parameters, model_cuda.c keeps it on a GPU, model_manifest.c describes it. */
#ifndef DLRT_MODEL_H_
#define DLRT_MODEL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlrt.h"

/* Room for a function's name in messages ("NAME_get_param"); a longer one is cut, as the
   message it goes into would be. */
#define DLRT_MODEL_FN DLRT_ERROR_CAPACITY

struct dlrt_model {
    const dlrt_model_spec *spec;
    dlrt_context ctx;
    int64_t step; /* successful steps of entries that take one */
    void **buf;   /* the current value of each tensor of spec->tensors */
    void **spare; /* the second set for train entries, NULL where unused */
    /* On a GPU (model_cuda.c); cuda is NULL on the CPU. */
    dlrt_cuda *cuda;
    int ordinal;    /* N of cuda:N */
    void **dbuf;    /* on the device: the current value of each tensor */
    void **dspare;  /* on the device: the second set for train entries */
    void *scratch;  /* device memory of the plans' inputs and temporaries */
    int host_stale; /* the device's parameters are newer than buf's */
    /* Derived states (spec->derived, --quantize int8): `version` counts changes of the
       parameters (create, load, set_param, train steps); `derived_at` is the version the
       derived states were computed from, 0 for never. */
    uint64_t version;
    uint64_t derived_at;
    /* Data-parallel training (model_allreduce.c): the host's collective (NULL when unset),
       over `ranks` processes, and the block a train entry's grads part writes into: `sums`
       in host memory, `dsums` in the GPU's, `sums_bytes` each. */
    dlrt_allreduce_fn allreduce;
    void *allreduce_ctx;
    int32_t ranks;
    void *sums;
    void *dsums;
    size_t sums_bytes;
};

/* Every tensor of the model: parameters, then states. */
static inline int32_t dlrt_model_tensor_count(const dlrt_model_spec *spec) {
    return spec->params + spec->states;
}

/* "NAME_what" (NAME_create, NAME_save…) in `fn`, which holds DLRT_MODEL_FN bytes. */
void dlrt_model_fn(char *fn, const dlrt_model_spec *spec, const char *what);
/* DLRT_ERR_INVALID_ARGUMENT: "fn: argument 'arg' is NULL". */
dlrt_status dlrt_model_null(const char *fn, const char *arg);
/* model_check.c. Checks the model's tables (counts, sizes, indices) for function `fn`:
   DLRT_ERR_OUT_OF_MEMORY for a tensor too large for the address space, DLRT_ERR_INTERNAL for
   tables the runtime cannot read. Every other function relies on a spec that passed. */
dlrt_status dlrt_model_check(const dlrt_model_spec *spec, const char *fn);
/* *out = the bytes of table tensor `t` (`what` it is, for messages: "parameter"), or the error
   of dlrt_model_check when they cannot be had. */
dlrt_status dlrt_tensor_bytes(const char *fn, const char *what, const dlrt_tensor *t,
                              size_t *out);
/* Bytes of a table tensor's data; SIZE_MAX, which no allocation gets, when that overflows. */
size_t dlrt_model_bytes(const dlrt_tensor *t);
/* Whether a train entry updates tensor `index` (the model then keeps a spare buffer of it). */
bool dlrt_model_updated(const dlrt_model_spec *spec, int32_t index);
/* Whether the model saves a step count (`__step__`): whether a train entry takes a step. */
bool dlrt_model_has_step(const dlrt_model_spec *spec);
/* A host function's failure `rc`: its message prefixed with `fn`, or one made up (naming the
   host) when it set none. */
dlrt_status dlrt_model_host_status(const char *fn, const char *host, int32_t rc);
/* Whether entry `e` is a train entry. */
bool dlrt_model_trains(const dlrt_entry *e);
/* model_entry.c. Entry `e` run by its host function on the CPU, its arguments checked (`fn`
   names it in messages). */
dlrt_status dlrt_model_run_cpu(dlrt_model *m, const dlrt_entry *e, void *const *args,
                               const char *fn);

/* model_allreduce.c. A train step of entry `e` (which has parts) across processes: its grads
   part into the sums block, the hook on each float run of it, then its apply part. `dev` (NULL:
   none) says which arguments are memory of the model's GPU. */
dlrt_status dlrt_model_distributed(dlrt_model *m, const dlrt_entry *e, void *const *args,
                                   const unsigned char *dev);
/* Frees the sums blocks and forgets the hook. */
void dlrt_model_allreduce_close(dlrt_model *m);

/* model_cuda.c. "cuda:N": N, or -1 when it is too large (`device` checked by the caller). */
int dlrt_model_ordinal(const char *device);
/* Opens GPU `ordinal` for `m`: its device memory, with the parameters uploaded. */
dlrt_status dlrt_model_cuda_open(dlrt_model *m, int ordinal);
/* Frees the device memory and closes the device; m->cuda is NULL after. */
void dlrt_model_cuda_close(dlrt_model *m);
/* The device's parameters and states copied to buf, when they are newer. */
dlrt_status dlrt_model_pull(dlrt_model *m);
/* buf copied to the device (after the host changed it). */
dlrt_status dlrt_model_push(dlrt_model *m);
/* Entry `e`'s device plan run on m's GPU. `args` holds the inputs' then the outputs' pointers;
   `dev` (NULL: none) says which of them are memory of that GPU, read and written in place. */
dlrt_status dlrt_model_run_plan(dlrt_model *m, const dlrt_entry *e, void *const *args,
                                const unsigned char *dev);
/* The step an entry is given: the 1-based number of this step, in the entry's dtype. */
typedef union {
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
} dlrt_step_value;
void dlrt_model_step(const dlrt_model *m, const dlrt_entry *e, dlrt_step_value *out);

#endif /* DLRT_MODEL_H_ */

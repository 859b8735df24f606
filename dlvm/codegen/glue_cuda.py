"""The CUDA half of a library's C glue (dlvm.codegen.glue), for a library built for CUDA: the
kernel table, each entry's device plan (dlvm.codegen.device_plan) as data, and the code that
runs a model created on "cuda:N".

A model on the GPU keeps its parameters and states in device memory (`dbuf`, with `dspare` for
a train step's new values) and a host copy (`buf`) that is brought up to date only when the
host needs it (save, get_param, an entry that runs on the CPU): `host_stale` says the device
holds newer values. An entry with a device plan uploads its inputs (and step) into the scratch
block, launches the plan's kernels on the model's stream, downloads its outputs and, for a train
step, swaps the new parameters in; there are no other copies between host and device. An
entry without a plan (control flow, random numbers) runs on the CPU between a download and an
upload of the parameters."""

from __future__ import annotations

from dataclasses import dataclass

from dlvm.codegen.cuda import Launch
from dlvm.codegen.device_plan import DevicePlan, NotPlannable, device_plan
from dlvm.codegen.spec import EntrySpec, LibrarySpec, c_identifier
from dlvm.ir.values import Function, Module


@dataclass(frozen=True)
class CudaGlue:
    """What the glue needs of a library's CUDA kernels: the GPU architecture, the launch of
    each kernel (in PTX order), and per entry name its device plan or why it has none."""

    gpu: str
    kernels: tuple[Launch, ...]
    plans: dict[str, DevicePlan | str]

    @property
    def scratch(self) -> int:
        return max([1, *(p.scratch for p in self.plans.values() if isinstance(p, DevicePlan))])


def cuda_glue(module: Module, spec: LibrarySpec, launches: list[Launch], gpu: str) -> CudaGlue:
    """The plans of spec's entries over a module scheduled for CUDA."""
    kernels: dict[Function, int] = {}
    for fn in module.functions:
        if fn.compute and fn.blocks:
            kernels[fn] = len(kernels)
    plans: dict[str, DevicePlan | str] = {}
    for e in spec.entries:
        host = module.function_named(e.host)
        assert host is not None, e.host
        n_in, n_out, n_state = len(e.inputs), len(e.outputs), len(e.params) + len(e.states)
        results = range(n_out, n_out + n_state) if e.kind == "train" else range(0)
        try:
            plans[e.name] = device_plan(host, kernels, range(n_in, n_in + n_state), results)
        except NotPlannable as why:
            plans[e.name] = str(why)
    return CudaGlue(gpu, tuple(launches), plans)


def declarations(cuda: CudaGlue, spec: LibrarySpec) -> list[str]:
    """The PTX's symbol, the kernel table and the plans' launch tables."""
    out = [
        "/* The kernels' PTX (a NUL-terminated string in the library's data), their launches, and",
        "   each entry's plan: kernel index and the binding-table slot of each pointer. */",
        '__attribute__((visibility("hidden"))) extern const char dl_cuda_ptx[];',
        f"static const dlrt_kernel glue_kernels[{max(1, len(cuda.kernels))}] = {{",
    ]
    for k in cuda.kernels:
        grid, block = ", ".join(map(str, k.grid)), ", ".join(map(str, k.block))
        out.append(f'    {{"{k.symbol}", {{{grid}}}, {{{block}}}, {k.pointers}}},')
    if not cuda.kernels:
        out.append('    {"", {1, 1, 1}, {1, 1, 1}, 0},')
    out.append("};")
    for e in spec.entries:
        plan = cuda.plans[e.name]
        if not isinstance(plan, DevicePlan):
            out.append(f"/* {_comment(e.name)} runs on the CPU: {_comment(plan)} */")
            continue
        table = f"glue_plan_{c_identifier(e.name)}"
        for i, (_, slots) in enumerate(plan.steps):
            out.append(f"static const int32_t {table}_{i}[] = {{{_ints(slots)}}};")
        out.append(f"static const dlrt_launch {table}[{max(1, len(plan.steps))}] = {{")
        out += [f"    {{{k}, {table}_{i}}}," for i, (k, _) in enumerate(plan.steps)]
        if not plan.steps:
            out.append("    {0, NULL},")
        out.append("};")
    return out


def _ints(values: list[int]) -> str:
    return ", ".join(map(str, values))


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


def struct_fields(n_tensors: int) -> list[str]:
    out = [
        "    dlrt_cuda *cuda;  /* the device, or NULL on the CPU */",
        "    int ordinal;      /* N of cuda:N */",
    ]
    if n_tensors:
        out += [
            f"    void *dbuf[{n_tensors}];   /* on the device: the current value of each tensor */",
            f"    void *dspare[{n_tensors}]; /* on the device: the second set for train entries */",
        ]
    out += [
        "    void *scratch;    /* device memory of the plans' inputs and temporaries */",
        "    int host_stale;   /* the device's parameters are newer than buf's */",
    ]
    return out


def helpers(name: str, n_tensors: int, spare: list[int], cuda: CudaGlue) -> list[str]:
    """glue_pull, glue_push, glue_cuda_open and glue_cuda_close."""
    model = f"{name}_model"
    out: list[str] = []
    for fn, comment, copy, stale in (
        ("glue_pull", "The device's parameters and states copied to buf, when they are newer.",
         "dlrt_cuda_download(m->cuda, m->buf[i], m->dbuf[i],", " || !m->host_stale"),
        ("glue_push", "buf copied to the device (after the host changed it).",
         "dlrt_cuda_upload(m->cuda, m->dbuf[i], m->buf[i],", ""),
    ):  # fmt: skip
        out += [f"/* {comment} */", f"static dlrt_status {fn}({model} *m) {{"]
        if n_tensors:
            out += [
                "    size_t i;",
                f"    if (m->cuda == NULL{stale})",
                "        return DLRT_OK;",
                f"    for (i = 0; i < {n_tensors}; ++i) {{",
                f"        dlrt_status s = {copy} glue_tensors[i].bytes);",
                "        if (s != DLRT_OK)",
                "            return s;",
                "    }",
            ]
        out += ["    m->host_stale = 0;", "    return DLRT_OK;", "}", ""]
    out += [
        '/* Device N of "cuda:N" (checked by glue_is_cuda); -1 when N is too large. */',
        "static int glue_cuda_ordinal(const char *device) {",
        "    long n = 0;",
        "    const char *p;",
        "    for (p = device + 5; *p != '\\0'; ++p) {",
        "        n = n * 10 + (*p - '0');",
        "        if (n > 65535)",
        "            return -1;",
        "    }",
        "    return (int)n;",
        "}",
        "",
        "static void glue_cuda_close(" + model + " *m) {",
    ]
    if n_tensors:
        out += [
            "    size_t i;",
            f"    for (i = 0; i < {n_tensors}; ++i) {{",
            "        dlrt_cuda_free(m->cuda, m->dbuf[i]);",
            "        dlrt_cuda_free(m->cuda, m->dspare[i]);",
            "    }",
        ]
    out += [
        "    dlrt_cuda_free(m->cuda, m->scratch);",
        "    dlrt_cuda_close(m->cuda);",
        "    m->cuda = NULL;",
        "}",
        "",
        "/* Opens the device, allocates the model's device memory and uploads buf. */",
        f"static dlrt_status glue_cuda_open({model} *m, int ordinal) {{",
        "    dlrt_status s;",
        f"    s = dlrt_cuda_open(ordinal, dl_cuda_ptx, glue_kernels, {len(cuda.kernels)},",
        "                       &m->cuda);",
        "    if (s != DLRT_OK)",
        "        return s;",
    ]
    for i in range(n_tensors):
        out += [
            f"    s = dlrt_cuda_alloc(m->cuda, glue_tensors[{i}].bytes, &m->dbuf[{i}]);",
            "    if (s != DLRT_OK)",
            "        return s;",
        ]
    for i in spare:
        out += [
            f"    s = dlrt_cuda_alloc(m->cuda, glue_tensors[{i}].bytes, &m->dspare[{i}]);",
            "    if (s != DLRT_OK)",
            "        return s;",
        ]
    out += [
        f"    s = dlrt_cuda_alloc(m->cuda, {cuda.scratch}u, &m->scratch);",
        "    if (s != DLRT_OK)",
        "        return s;",
        "    return glue_push(m);",
        "}",
        "",
    ]
    return out


@dataclass(frozen=True)
class EntryParts:
    """What the CUDA path of one entry needs from the glue: its C function's name, the buffer
    index of each parameter and state it takes, each tensor's bytes, and the step's C type."""

    function: str  # glue_<entry>_cuda
    symbol: str  # NAME_<entry>, for messages
    model: str
    buffers: list[int]  # buffer index of each of e.params + e.states
    input_bytes: list[int]
    output_bytes: list[int]
    buffer_bytes: list[int]
    step_type: str | None


def device_entry(e: EntrySpec, plan: DevicePlan, p: EntryParts) -> list[str]:
    """static glue_<entry>_cuda(m, args, dev): the entry's device plan run on m->cuda. args
    holds the inputs' then the outputs' pointers; dev (NULL: none) says which of them are device
    memory of m's GPU (from NAME_<entry>_dl): those are read and written in place, the others
    are uploaded and downloaded."""
    n_in, n_out = len(e.inputs), len(e.outputs)
    out = [
        f"static dlrt_status {p.function}({p.model} *m, void *const *args,",
        "                                  const unsigned char *dev) {",
        f'    static const char fn[] = "{p.symbol}";',
        f"    void *slots[{max(1, len(plan.slots))}];",
        "    dlrt_status s;",
    ]
    if p.step_type is not None:
        out.append(f"    {p.step_type} step = ({p.step_type})(m->step + 1);")
    uploaded = {slot: u for u, slot in enumerate(plan.uploads)}
    for k, slot in enumerate(plan.slots):
        scratch = f"(char *)m->scratch + {slot.offset}"
        if slot.argument is not None:
            out.append(f"    slots[{k}] = m->dbuf[{p.buffers[slot.argument - n_in]}];")
        elif slot.result is not None and slot.result >= n_out:
            out.append(f"    slots[{k}] = m->dspare[{p.buffers[slot.result - n_out]}];")
        elif slot.result is not None or (k in uploaded and uploaded[k] < n_in):
            i = uploaded[k] if k in uploaded else n_in + slot.result  # type: ignore[operator]
            out.append(f"    slots[{k}] = dev != NULL && dev[{i}] ? args[{i}] : {scratch};")
        else:
            out.append(f"    slots[{k}] = {scratch};")
    for u, k in enumerate(plan.uploads):
        if u < n_in:
            out.append(f"    if (dev == NULL || !dev[{u}])")
            out.append(f"        s = dlrt_cuda_upload(m->cuda, slots[{k}], args[{u}],"
                       f" {p.input_bytes[u]}u);")  # fmt: skip
            out += ["    else", "        s = DLRT_OK;"]
        else:
            out.append(f"    s = dlrt_cuda_upload(m->cuda, slots[{k}], &step, sizeof step);")
        out += ["    if (s != DLRT_OK)", "        goto fail;"]
    out += [
        f"    s = dlrt_cuda_run(m->cuda, glue_plan_{c_identifier(e.name)}, {len(plan.steps)},"
        " slots);",
        "    if (s != DLRT_OK)",
        "        goto fail;",
    ]
    updated = []
    for position, k in enumerate(plan.results):
        in_place = plan.slots[k].result == position
        if position < n_out:
            i, count = n_in + position, p.output_bytes[position]
            out += [
                f"    if (dev == NULL || !dev[{i}])",
                f"        s = dlrt_cuda_download(m->cuda, args[{i}], slots[{k}], {count}u);",
            ]
            if not in_place:
                out += ["    else", f"        s = dlrt_cuda_copy(m->cuda, args[{i}], slots[{k}],"
                        f" {count}u);"]  # fmt: skip
            else:
                out += ["    else", "        s = DLRT_OK;"]
        else:
            index = p.buffers[position - n_out]
            updated.append(index)
            if in_place:
                continue  # the kernel wrote it into dspare
            count = p.buffer_bytes[position - n_out]
            out.append(
                f"    s = dlrt_cuda_copy(m->cuda, m->dspare[{index}], slots[{k}], {count}u);"
            )
        out += ["    if (s != DLRT_OK)", "        goto fail;"]
    # Downloads wait for the stream; without one, wait here, so that errors surface now.
    out += ["    s = dlrt_cuda_sync(m->cuda);", "    if (s != DLRT_OK)", "        goto fail;"]
    for index in updated:
        out += [
            "    {",
            f"        void *t = m->dbuf[{index}];",
            f"        m->dbuf[{index}] = m->dspare[{index}];",
            f"        m->dspare[{index}] = t;",
            "    }",
        ]
    if updated:
        out.append("    m->host_stale = 1;")
    if p.step_type is not None:
        out.append("    m->step += 1;")
    out += [
        "    return DLRT_OK;",
        "fail:",
        '    return dlrt_error(s, "%s: %s", fn, dlrt_last_error());',
        "}",
        "",
    ]
    return out

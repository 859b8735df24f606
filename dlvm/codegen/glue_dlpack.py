"""The DLPack entry points of a library's C glue (docs/c-abi.md section 1): NAME_<entry>_dl takes
each input and output as a DLTensor, checked against the entry's dtype and shape, contiguous
row-major. Host memory (kDLCPU, kDLCUDAHost, kDLCUDAManaged) goes to the entry as its plain
pointer; memory of the GPU a model runs on (kDLCUDA) is read and written there in place, with
no copy through the host (dlvm.codegen.glue_cuda)."""

from __future__ import annotations

from dlvm.codegen.spec import EntrySpec, TensorSpec, c_identifier


def dl_prototype(symbol: str, model: str) -> str:
    return f"dlrt_status {symbol}_dl({model} *m, DLTensor *const *args)"


def dl_entry(
    e: EntrySpec,
    symbol: str,
    model: str,
    c_types: list[str],
    dtypes: list[str],
    cuda: bool,
    plan: bool,
) -> list[str]:
    """NAME_<entry>_dl: checks each DLTensor (dlrt_dl_argument; `dtypes` are their dlrt_dtype
    names), then calls NAME_<entry> with host pointers, or the entry's device plan when any
    argument is memory of the model's GPU."""
    args: list[TensorSpec] = [*e.inputs, *e.outputs]
    n = len(args)
    out = []
    for i, t in enumerate(args):
        shape = ", ".join(map(str, t.shape)) or "0"
        out.append(f"static const int64_t glue_dl_{c_identifier(e.name)}_{i}[] = {{{shape}}};")
    out += ['__attribute__((visibility("default")))', f"{dl_prototype(symbol, model)} {{"]
    if not n:  # nothing to check
        out += ["    (void)args;", f"    return {symbol}(m);", "}", ""]
        return out
    out += [
        f'    static const char fn[] = "{symbol}_dl";',
        f"    void *data[{max(1, n)}];",
        f"    unsigned char dev[{max(1, n)}];",
        "    int on_device = 0;",
        "    dlrt_status s;",
        "    if (m == NULL)",
        '        return glue_null(fn, "m");',
    ]
    out += ["    if (args == NULL)", '        return glue_null(fn, "args");']
    ordinal = "m->cuda != NULL ? m->ordinal : -1" if cuda else "-1"
    for i, t in enumerate(args):
        out += [
            f'    s = dlrt_dl_argument(fn, "{t.name}", args[{i}], {dtypes[i]},'
            f" {len(t.shape)}, glue_dl_{c_identifier(e.name)}_{i},",
            f"                         {ordinal}, &data[{i}], &dev[{i}]);",
            "    if (s != DLRT_OK)",
            "        return s;",
            f"    on_device |= dev[{i}];",
        ]
    if cuda and plan:
        out += [
            "    if (on_device)",
            f"        return glue_{c_identifier(e.name)}_cuda(m, data, dev);",
        ]
    elif cuda:
        out += [
            "    if (on_device)",
            '        return dlrt_error(DLRT_ERR_DEVICE, "%s: this entry runs on the CPU for a"',
            '                          " model on a GPU: pass host memory (kDLCPU)", fn);',
        ]
    else:
        out.append("    (void)on_device; /* a CPU model: glue_dl_tensor refused kDLCUDA */")
    casts = [f"({c}*)data[{i}]" for i, c in enumerate(c_types)]
    out.append(f"    return {symbol}({', '.join(['m', *casts])});")
    out += ["}", ""]
    return out

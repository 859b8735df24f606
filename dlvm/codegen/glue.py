"""The per-model C glue of a shipped library (docs/c-abi.md sections 1 and 6): constant tables
that describe the model to the runtime's model object (dlrt.h, runtime/src/model*.c), a thunk
per host function, and a one-line function per exported name; with the public header
(dlvm.codegen.glue_header) and the JSON manifest. All generated from a LibrarySpec, byte-stable."""

from __future__ import annotations

import json

from dlvm.codegen import glue_cuda
from dlvm.codegen.glue_cuda import CudaGlue
from dlvm.codegen.glue_header import api_prototypes, dl_prototype, entry_prototype, header_source
from dlvm.codegen.glue_layout import ABI_VERSION, DTYPES, Layout, SpecError, entry_args
from dlvm.codegen.glue_text import (
    Pool,
    c_comment,
    c_string,
    c_string_lines,
    element,
    wrap_call,
)
from dlvm.codegen.spec import EntrySpec, LibrarySpec, TensorSpec, host_symbol

__all__ = [
    "SpecError",
    "c_comment",
    "c_string",
    "c_string_lines",
    "check_spec",
    "glue_source",
    "header_source",
    "manifest_json",
]

EXPORT = "DLRT_EXPORT"


def manifest_json(spec: LibrarySpec, cuda: CudaGlue | None = None) -> str:
    """The manifest (docs/c-abi.md section 2): one line of JSON, keys in the documented order;
    a library built for CUDA also says its GPU architecture and which entries run there. The
    runtime writes the same bytes from the glue's tables (runtime/src/model_manifest.c)."""
    layout = Layout(spec)

    def tensor(t: TensorSpec) -> dict[str, object]:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}

    def param(i: int, t: TensorSpec) -> dict[str, object]:
        buffer = i >= len(spec.params) - spec.buffers
        return tensor(t) | ({"kind": "buffer"} if buffer else {})

    entries: list[dict[str, object]] = [
        {
            "name": e.name,
            "kind": e.kind,
            "symbol": layout.symbol(e),
            "inputs": [tensor(t) for t in e.inputs],
            "outputs": [tensor(t) for t in e.outputs],
        }
        for e in spec.entries
    ]
    doc: dict[str, object] = {
        "abi": ABI_VERSION,
        "name": spec.name,
        "compiler": spec.compiler,
        "devices": ["cpu"],
        "params": [param(i, p) for i, p in enumerate(spec.params)],
        "states": [
            {"name": s.name, "param": s.param, "dtype": s.dtype, "shape": list(s.shape)}
            for s in spec.states[: len(spec.states) - spec.derived]
        ],
        "entries": entries,
    }
    if cuda is not None:
        # After "devices": the GPU architecture; each entry says where it runs on "cuda:N".
        head = list(doc.items())
        doc = {**dict(head[:3]), "devices": ["cpu", "cuda"], "gpu": cuda.gpu, **dict(head[4:])}
        for entry, e in zip(entries, spec.entries):
            plan = cuda.plans[e.name]
            entry["cuda"] = "gpu" if isinstance(plan, glue_cuda.DevicePlan) else f"cpu: {plan}"
    return json.dumps(doc)


def check_spec(spec: LibrarySpec) -> None:
    """Raises SpecError when the C ABI cannot express `spec`; a build checks this first."""
    Layout(spec)


def glue_source(spec: LibrarySpec, cuda: CudaGlue | None = None) -> str:
    """The C11 glue implementing docs/c-abi.md section 1 over the model's host functions, through
    the runtime's model object; with `cuda`, models can also be created on "cuda:N"."""
    layout = Layout(spec)
    out = [
        f"/* {c_comment(spec.compiler)}: C glue of model {c_comment(repr(spec.name))}"
        " (docs/c-abi.md section 6).\n   Generated; do not edit. */",
        '#include "dlrt.h"',
        "",
        *_hosts(layout),
        "",
        *_tables(layout, cuda),
        "",
        *_api(layout, len(manifest_json(spec, cuda).encode("utf-8")) + 1),
    ]
    return "\n".join(out)


def _hosts(layout: Layout) -> list[str]:
    """The host functions' declarations, each with the thunk the runtime calls it through."""
    out = [
        "/* Host functions (docs/c-abi.md section 5), hidden in the library whatever their",
        "   object says, each called through a thunk that takes an array of pointers. */",
        "#pragma GCC visibility push(hidden)",
    ]
    for sym, n_args, n_results in layout.hosts():
        params = ["dlrt_context *", *["const void *"] * n_args, *["void *"] * n_results]
        out += wrap_call(f"extern int32_t {sym}(", params, ");")
    out.append("#pragma GCC visibility pop")
    for i, (sym, n_args, n_results) in enumerate(layout.hosts()):
        args = ["c", *(f"a[{k}]" for k in range(n_args + n_results))]
        out += [
            f"static int32_t host{i}(dlrt_context *c, void *const *a) {{",
            *wrap_call(f"    return {sym}(", args, ");"),
            "}",
        ]
    return out


def _tables(layout: Layout, cuda: CudaGlue | None) -> list[str]:
    """`spec` (a dlrt_model_spec) and the tables it points into. The glue's own names have no
    underscore, which every exported, host and runtime name has: they clash with none."""
    spec = layout.spec
    shapes, indices = Pool("shapes", "int64_t"), Pool("indices", "int32_t")
    thunks = {sym: f"host{i}" for i, (sym, _, _) in enumerate(layout.hosts())}
    rows: list[str] = []  # of tensors: the model's, then each entry's arguments

    def tensors(ts: list[TensorSpec]) -> str:
        where = f"tensors + {len(rows)}" if rows else "tensors"
        for t in ts:
            fields = [c_string(t.name), DTYPES[t.dtype][1], str(len(t.shape)), shapes.at(t.shape)]
            rows.append("{" + ", ".join(fields) + ", NULL}")
        return where if ts else "NULL"

    model_tensors = tensors([TensorSpec(t.name, t.dtype, t.shape) for t in layout.tensors])
    plans = glue_cuda.tables(cuda, spec, indices) if cuda is not None else None

    def row(e: EntrySpec, symbol: str, parts: tuple[str, str]) -> list[str]:
        sym = host_symbol(e.host)
        fields = [c_string(e.name), c_string(e.kind), c_string(symbol), c_string(sym)]
        fields += [thunks[sym], str(len(e.inputs)), str(len(e.outputs))]
        fields += [tensors(list(entry_args(e))), str(len(e.params) + len(e.states))]
        fields += [indices.at(layout.buffers(e))]
        fields.append(DTYPES[e.step_dtype][1] if e.step else "-1")
        plan = plans.plans[e.name] if plans is not None else "NULL"
        reason = cuda.plans[e.name] if cuda is not None else None
        fields += [plan, c_string(reason) if isinstance(reason, str) else "NULL", *parts]
        return fields

    # The halves of distributed train entries (entries of their own to the runtime, named by
    # their train entry's symbol in messages), then the entries.
    part_rows: list[list[str]] = []
    entries = []
    for e in spec.entries:
        parts = ("NULL", "NULL")
        if e.parts():
            parts = (element("parts", len(part_rows)), element("parts", len(part_rows) + 1))
            part_rows += [row(p, layout.symbol(e), ("NULL", "NULL")) for p in e.parts()]
        entries.append(row(e, layout.symbol(e), parts))
    state_params = indices.at([layout.index[s.param] for s in spec.states])
    init = host_symbol(spec.init) if spec.init is not None else None
    model = [c_string(spec.name), c_string(layout.name), c_string(spec.compiler)]
    model += [str(len(spec.params)), str(len(spec.states)), model_tensors, state_params]
    model += [thunks[init], c_string(init)] if init is not None else ["NULL", "NULL"]
    model += [str(len(entries)), "entries" if entries else "NULL"]
    model.append(plans.model if plans is not None else "NULL")
    model.append(str(spec.buffers))
    derive = host_symbol(spec.derive) if spec.derive is not None else None
    model.append(str(spec.derived))
    model += [thunks[derive], c_string(derive)] if derive is not None else ["NULL", "NULL"]
    out = [
        "/* The model: parameters, states, each entry's arguments; the entries. */",
        *shapes.declaration(),
    ]
    if rows:
        out += ["static const dlrt_tensor tensors[] = {", *(f"    {r}," for r in rows), "};"]
    out += indices.declaration()
    if plans is not None:
        out += plans.lines
    if part_rows:
        out.append("static const dlrt_entry parts[] = {")
        for fields in part_rows:
            out += wrap_call("    {", fields, "},", width=100)
        out.append("};")
    if entries:
        out.append("static const dlrt_entry entries[] = {")
        for fields in entries:
            out += wrap_call("    {", fields, "},", width=100)
        out.append("};")
    out += wrap_call("static const dlrt_model_spec spec = {", model, "};")
    return out


def _api(layout: Layout, manifest_bytes: int) -> list[str]:
    """NAME_create … NAME_manifest and each entry point, every one a call of the runtime."""
    name = layout.name
    api = api_prototypes(name)
    out = [f"typedef struct {name}_model {name}_model; /* a dlrt_model */", ""]
    model, const_model = "(dlrt_model *)m", "(const dlrt_model *)m"

    def define(prototype: str, *body: str) -> None:
        out.extend([EXPORT, f"{prototype} {{", *(f"    {line}" for line in body), "}"])

    def runtime(fn: str, *args: str) -> str:
        return f"return dlrt_model_{fn}({', '.join(['&spec', *args])});"

    define(api["create"], runtime("create", "device", "seed", "out"))
    define(api["destroy"], f"dlrt_model_destroy({model});")
    for k, e in enumerate(layout.spec.entries):
        names = [f"a{i}" for i in range(len(entry_args(e)))]
        values = [f"(void *){a}" if i < len(e.inputs) else a for i, a in enumerate(names)]
        array = [line[4:] for line in wrap_call("    void *args[] = {", values, "};")]
        define(
            entry_prototype(layout, e, names, comments=False),
            *(array if names else []),
            runtime("call", str(k), model, "args" if names else "NULL"),
        )
        define(
            dl_prototype(layout.symbol(e), f"{name}_model"),
            runtime("call_dl", str(k), model, "args"),
        )
    define(api["save"], runtime("save", const_model, "path"))
    define(api["load"], runtime("load", model, "path"))
    define(api["get_param"], runtime("get_param", const_model, "name", "out"))
    define(api["set_param"], runtime("set_param", model, "name", "data"))
    define(api["set_allreduce"], runtime("set_allreduce", model, "fn", "ctx", "ranks"))
    define(
        api["manifest"],
        f"static char json[{manifest_bytes}]; /* written by the first call */",
        "return dlrt_model_manifest(&spec, json, sizeof json);",
    )
    out.append("")
    return out

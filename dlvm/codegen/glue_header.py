"""The public header NAME.h of a library (docs/c-abi.md section 1): the API with every
argument's name, dtype and shape in a comment, and size macros for each argument and parameter,
generated from a LibrarySpec, byte-stable."""

from __future__ import annotations

import math

from dlvm.codegen.glue_cuda import CudaGlue
from dlvm.codegen.glue_layout import DTYPES, Layout, entry_args
from dlvm.codegen.glue_text import c_comment, dims, wrap_call
from dlvm.codegen.spec import EntrySpec, LibrarySpec, TensorSpec, c_identifier

# Names a header parameter may not take (C11 and C++ keywords, so the header works in both).
_KEYWORDS = """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local alignas alignof and bool catch class
    constexpr decltype delete explicit export false friend mutable namespace new noexcept not
    nullptr operator or private protected public template this throw true try typeid typename
    using virtual xor"""
RESERVED_WORDS = frozenset([*_KEYWORDS.split(), "m"])


def dl_prototype(symbol: str, model: str) -> str:
    """NAME_<entry>_dl, which takes the entry's arguments as DLPack tensors."""
    return f"dlrt_status {symbol}_dl({model} *m, DLTensor *const *args)"


def _arg_names(e: EntrySpec) -> list[str]:
    """Readable, distinct C parameter names for the header: the C identifier of each name, with
    `_` appended while it is a keyword, `m`, a likely macro (leading capital or underscore) or
    taken."""
    taken: set[str] = set()
    out = []
    for t in entry_args(e):
        name = c_identifier(t.name)
        if name[0].isupper() or name[0] == "_":
            name = "arg_" + name
        while name in RESERVED_WORDS or name in taken:
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def entry_prototype(layout: Layout, e: EntrySpec, names: list[str], comments: bool) -> str:
    model = f"{layout.name}_model"
    params = [f"{model} *m"]
    for i, (t, name) in enumerate(zip(entry_args(e), names, strict=True)):
        const = "const " if i < len(e.inputs) else ""
        params.append(f"{const}{DTYPES[t.dtype][0]} *{name}")
    if not comments:
        return "\n".join(wrap_call(f"dlrt_status {layout.symbol(e)}(", params, ")"))
    lines = [f"dlrt_status {layout.symbol(e)}("]
    for i, p in enumerate(params):
        sep = "," if i + 1 < len(params) else ""
        if i == 0:
            lines.append(f"    {p}{sep}")
            continue
        t = entry_args(e)[i - 1]
        role = "input" if i - 1 < len(e.inputs) else "output"
        note = c_comment(f"{role} '{t.name}': {t.dtype}{dims(t.shape)}")
        lines.append(f"    {p}{sep} /* {note} */")
    return "\n".join(lines) + ")"


def api_prototypes(name: str) -> dict[str, str]:
    """The prototypes of the NAME_<x> functions, wrapped at 100 columns."""
    model = f"{name}_model"
    table = {
        "create": ("dlrt_status", "const char *device", "uint64_t seed", f"{model} **out"),
        "destroy": ("void", f"{model} *m"),
        "save": ("dlrt_status", f"const {model} *m", "const char *path"),
        "load": ("dlrt_status", f"{model} *m", "const char *path"),
        "get_param": ("dlrt_status", f"const {model} *m", "const char *name", "void *out"),
        "set_param": ("dlrt_status", f"{model} *m", "const char *name", "const void *data"),
        "set_allreduce": (
            "dlrt_status",
            f"{model} *m",
            "dlrt_allreduce_fn fn",
            "void *ctx",
            "int32_t ranks",
        ),
        "manifest": ("const char *", "void"),
    }
    out = {}
    for fn, (result, *params) in table.items():
        space = "" if result.endswith("*") else " "
        out[fn] = "\n".join(wrap_call(f"{result}{space}{name}_{fn}(", params, ")"))
    return out


def header_source(spec: LibrarySpec, cuda: CudaGlue | None = None) -> str:
    """The public header `NAME.h`: the API of docs/c-abi.md section 1 with every argument's name,
    dtype and shape in a comment."""
    layout = Layout(spec)
    name = layout.name
    api = api_prototypes(name)
    guard = f"DLVM_MODEL_{name.upper()}_H"
    out = [
        f"/* {c_comment(spec.compiler)}: public API of model {c_comment(repr(spec.name))}"
        " (docs/c-abi.md).\n   Generated; do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        '#include "dlrt.h"',
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* Opaque: parameters, optimiser state, step count and arena. One call at a time per",
        "   object; different objects may be used from different threads. */",
        f"typedef struct {name}_model {name}_model;",
        "",
    ]
    out += _tensor_table_comment(spec)
    device = [
        '/* device: "cpu" (or NULL); "cuda:N" gives DLRT_ERR_DEVICE (this library has no CUDA',
        "   kernels). Runs init with a random stream seeded by `seed` and zeroes the optimiser",
    ]
    if cuda is not None:
        device = [
            '/* device: "cpu" (or NULL) or "cuda:N" (a GPU of '
            f"{cuda.gpu} or newer, through the NVIDIA",
            "   driver). Runs init (on the CPU) with a random stream seeded by `seed` and "
            "zeroes the optimiser",
        ]
    out += [
        *device,
        "   state and the step count. *out is set to the new model, or to NULL on failure. */",
        api["create"] + ";",
        "/* Frees everything the model holds; NULL is allowed and does nothing. */",
        api["destroy"] + ";",
        "",
        "/* Entry points: every pointer is to contiguous row-major data of its dtype (bool is one",
        "   byte, 0 or 1; f16 and bf16 are their 16 bits); a scalar ([]) is a pointer to one",
        "   element. */",
    ]
    names = {e.name: _arg_names(e) for e in spec.entries}
    for e in spec.entries:
        out.append(_entry_comment(e))
        out.append(entry_prototype(layout, e, names[e.name], comments=True) + ";")
    if spec.entries:
        out += [
            "",
            "/* The same with DLPack tensors: args[] holds the inputs, then the outputs, each",
            "   checked (dtype, shape, contiguous row-major). Host memory (kDLCPU) is used in",
            "   place; so is memory of the GPU the model runs on (kDLCUDA), without copies. */",
        ]
        out += [dl_prototype(layout.symbol(e), f"{name}_model") + ";"
                for e in spec.entries]  # fmt: skip
    out += ["", *_size_macros(spec)]
    out += [
        "",
        "/* Writes every parameter and optimiser state"
        + (" and the step count" if layout.has_step else "")
        + " to `path` (safetensors,",
        "   atomically: a temporary file renamed over `path`). */",
        api["save"] + ";",
        "/* Reads `path` (safetensors): every parameter must be there with its dtype and shape;",
        "   the others are optional (and keep their value when absent). On failure the model is",
        "   unchanged. */",
        api["load"] + ";",
        "/* Copies parameter `name` to / from a buffer of its size (see the table above). */",
        api["get_param"] + ";",
        api["set_param"] + ";",
        *_allreduce_comment(spec),
        api["set_allreduce"] + ";",
        "/* The manifest (JSON, docs/c-abi.md section 2); static storage. */",
        api["manifest"] + ";",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(out)


def _allreduce_comment(spec: LibrarySpec) -> list[str]:
    if any(e.parts() for e in spec.entries):
        return [
            "/* Data-parallel training (docs/distributed.md): with fn set, each train step sums",
            "   its loss, gradients and float buffers across `ranks` processes through fn, and",
            "   applies the optimiser to the means; fn NULL removes it. */",
        ]
    return [
        "/* Data-parallel training needs a library built with --distributed: this one answers",
        "   DLRT_ERR_INVALID_ARGUMENT, saying so, unless fn is NULL. */",
    ]


def _tensor_table_comment(spec: LibrarySpec) -> list[str]:
    if not spec.params:
        return ["/* The model has no parameters. */", ""]
    lines = ["/* Parameters (the names get_param and set_param take):"]
    lines += [c_comment(f"     {p.name}: {p.dtype}{dims(p.shape)}") for p in spec.params]
    states = spec.states[: len(spec.states) - spec.derived]
    if states:
        lines.append("   Optimiser states (saved and loaded with the parameters):")
        lines += [
            c_comment(f"     {s.name}: {s.dtype}{dims(s.shape)} of {s.param}") for s in states
        ]
    lines[-1] += " */"
    return [*lines, ""]


def _size_macros(spec: LibrarySpec) -> list[str]:
    """`NAME_ENTRY_ARG_SIZE` (elements) and `NAME_ENTRY_ARG_DIMS` (a brace list, rank >= 1) for
    every entry argument, and `NAME_PARAM_P_SIZE` / `_DIMS` for every parameter, so that a C
    program sizes its buffers from the header and fails to compile against another shape."""
    prefix = c_identifier(spec.name).upper()
    taken: set[str] = set()
    lines = ["/* Sizes (elements) and shapes of every argument and parameter. */"]

    def define(stem: str, t: TensorSpec) -> None:
        name = f"{prefix}_{stem.upper()}"
        while name in taken:
            name += "_"
        taken.add(name)
        lines.append(f"#define {name}_SIZE {math.prod(t.shape)}")
        if t.shape:
            lines.append(f"#define {name}_DIMS {{{', '.join(map(str, t.shape))}}}")

    for e in spec.entries:
        for t in entry_args(e):
            define(f"{c_identifier(e.name)}_{c_identifier(t.name)}", t)
    for p in spec.params:
        define(f"param_{c_identifier(p.name)}", p)
    return lines


def _entry_comment(e: EntrySpec) -> str:
    what = {
        "infer": "inference",
        "export": "an exported function",
        "train": "one training step. Updates the parameters, the optimiser state and\n"
        "   the step count and writes the outputs; on a non-OK status the model is unchanged",
    }[e.kind]
    return f"/* {c_comment(e.name)} ({e.kind}): {what}. */"

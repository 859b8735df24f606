"""The per-model C glue of a shipped library (docs/c-abi.md section 1): the model object that
holds the parameters, optimiser state, step and arena and wraps the compiled host functions, the
public header, and the JSON manifest. All three are generated from a LibrarySpec, byte-stable."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from dlvm.codegen import glue_cuda, glue_dlpack
from dlvm.codegen.glue_cuda import CudaGlue
from dlvm.codegen.spec import (
    EntrySpec,
    LibrarySpec,
    StateSpec,
    TensorSpec,
    c_identifier,
    host_symbol,
)
from dlvm.diagnostics import BuildFailure


class SpecError(BuildFailure, ValueError):
    """A library description the C ABI cannot express (an entry named like an API function,
    an unsupported step type, clashing names)."""


ABI_VERSION = 1

# IR element type → (C type, dlrt_dtype, bytes per element).
DTYPES: dict[str, tuple[str, str, int]] = {
    "bool": ("uint8_t", "DLRT_BOOL", 1),
    "i8": ("int8_t", "DLRT_I8", 1),
    "i16": ("int16_t", "DLRT_I16", 2),
    "i32": ("int32_t", "DLRT_I32", 4),
    "i64": ("int64_t", "DLRT_I64", 8),
    "f16": ("uint16_t", "DLRT_F16", 2),
    "f32": ("float", "DLRT_F32", 4),
    "f64": ("double", "DLRT_F64", 8),
}

# Step dtypes the glue converts its int64 step count to (an f16 step count is not supported).
STEP_DTYPES = ("i8", "i16", "i32", "i64", "f32", "f64")

ENTRY_KINDS = ("infer", "train", "export")

# NAME_<x> functions every library exports; an entry may not take one of these names.
API_FUNCTIONS = ("create", "destroy", "save", "load", "get_param", "set_param", "manifest")

STEP_TENSOR = "__step__"

# Names a header parameter may not take (C11 and C++ keywords, so the header works in both).
_KEYWORDS = """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local alignas alignof and bool catch class
    constexpr decltype delete explicit export false friend mutable namespace new noexcept not
    nullptr operator or private protected public template this throw true try typeid typename
    using virtual xor"""
RESERVED_WORDS = frozenset([*_KEYWORDS.split(), "m"])

EXPORT = '__attribute__((visibility("default")))'
HIDDEN = '__attribute__((visibility("hidden")))'

LITERAL_WIDTH = 76


def c_string(text: str) -> str:
    """`text` as one C string literal (UTF-8; quotes, backslashes, `?` (trigraphs) and bytes
    outside printable ASCII escaped)."""
    return '"' + "".join(_c_chars(text)) + '"'


def c_string_lines(text: str, width: int = LITERAL_WIDTH) -> list[str]:
    """`text` as adjacent C string literals of about `width` characters each (whose
    concatenation is `text`), split after ", " where possible and never inside an escape."""
    pieces: list[str] = []
    for word in re.split(r"(?<=, )", text):
        chars = list(_c_chars(word))
        if len("".join(chars)) <= width:
            pieces.append("".join(chars))
        else:
            pieces += chars
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line) + len(piece) > width:
            lines.append('"' + line + '"')
            line = ""
        line += piece
    lines.append('"' + line + '"')
    return lines


def _c_chars(text: str) -> Iterator[str]:
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\?':
            yield "\\" + ch
        elif 0x20 <= byte < 0x7F:
            yield ch
        else:
            yield f"\\{byte:03o}"  # octal: at most 3 digits, so the next character is safe


def c_comment(text: str) -> str:
    """`text` made safe inside a /* */ comment (no comment delimiters, no trigraphs)."""
    return text.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")


def dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def manifest_json(spec: LibrarySpec, cuda: CudaGlue | None = None) -> str:
    """The manifest (docs/c-abi.md section 2): one line of JSON, keys in the documented order;
    a library built for CUDA also says its GPU architecture and which entries run there."""
    layout = _Layout(spec, cuda)

    def tensor(t: TensorSpec) -> dict[str, object]:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}

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
        "params": [tensor(p) for p in spec.params],
        "states": [
            {"name": s.name, "param": s.param, "dtype": s.dtype, "shape": list(s.shape)}
            for s in spec.states
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


@dataclass(frozen=True)
class _Tensor:
    """A parameter or state buffer of the model object, at `index` of its buffer arrays."""

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.dtype][2]


class _Layout:
    """The checked shape of the generated code: buffer indices, symbols and host signatures."""

    def __init__(self, spec: LibrarySpec, cuda: CudaGlue | None = None) -> None:
        self.spec = spec
        self.cuda = cuda
        self.name = spec.c_name
        buffers: list[TensorSpec | StateSpec] = [*spec.params, *spec.states]
        self.tensors = [_Tensor(i, t.name, t.dtype, t.shape) for i, t in enumerate(buffers)]
        self.n_params = len(spec.params)
        self.index = {t.name: t.index for t in self.tensors}
        self.has_step = any(e.kind == "train" and e.step for e in spec.entries)
        self._check()
        self.spare = sorted(
            {
                self.index[n]
                for e in spec.entries
                if e.kind == "train"
                for n in (*e.params, *e.states)
            }
        )
        # Whether any code calls a host function (and so needs glue_host_status).
        self.calls_host = spec.init is not None or bool(spec.entries)

    def _check(self) -> None:
        spec = self.spec
        if len(self.index) != len(self.tensors):
            raise SpecError(f"model '{spec.name}': parameter and state names must be unique")
        every: list[TensorSpec | StateSpec] = [*spec.params, *spec.states]
        every += [a for e in spec.entries for a in _args(e)]
        for t in every:
            if t.dtype not in DTYPES:
                raise SpecError(f"model '{spec.name}': '{t.name}' has unknown dtype '{t.dtype}'")
            if any(d < 0 for d in t.shape):
                raise SpecError(f"model '{spec.name}': '{t.name}' has a negative dimension")
        params = {p.name for p in spec.params}
        for s in spec.states:
            if s.param not in params:
                raise SpecError(f"state '{s.name}' belongs to unknown parameter '{s.param}'")
        states = {s.name for s in spec.states}
        for e in spec.entries:
            where = f"entry '{e.name}'"
            if e.kind not in ENTRY_KINDS:
                raise SpecError(f"{where}: unknown kind '{e.kind}'")
            if c_identifier(e.name) in (*API_FUNCTIONS, "model"):
                raise SpecError(f"{where}: the name clashes with {self.name}_{e.name}")
            for n in e.params:
                if n not in params:
                    raise SpecError(f"{where}: unknown parameter '{n}'")
            for n in e.states:
                if n not in states:
                    raise SpecError(f"{where}: unknown state '{n}'")
            if len(set(e.params)) != len(e.params) or len(set(e.states)) != len(e.states):
                raise SpecError(f"{where}: a parameter or state is listed twice")
            if e.step and e.step_dtype not in STEP_DTYPES:
                raise SpecError(f"{where}: unsupported step dtype '{e.step_dtype}'")
            names = [t.name for t in _args(e)]
            if len(set(names)) != len(names):
                raise SpecError(f"{where}: argument names must be unique")
        exported = [f"{self.name}_{n}" for n in (*API_FUNCTIONS, "model")]
        exported += [self.symbol(e) + suffix for e in spec.entries for suffix in ("", "_dl")]
        hosts = {h for h, _, _ in self.hosts()}
        clash = sorted(
            {n for n in exported if exported.count(n) > 1}
            | (set(exported) & hosts)
            | {n for n in exported if n.startswith("dlrt_")}
        )
        if clash:
            raise SpecError(f"model '{spec.name}': generated names clash: {', '.join(clash)}")

    def symbol(self, e: EntrySpec) -> str:
        return f"{self.name}_{c_identifier(e.name)}"

    def host_arity(self, e: EntrySpec) -> tuple[int, int]:
        """(arguments, results) of the host function of entry `e` (docs/c-abi.md section 5)."""
        args = len(e.inputs) + len(e.params) + len(e.states) + int(e.step)
        results = len(e.outputs)
        if e.kind == "train":
            results += len(e.params) + len(e.states)
        return args, results

    def hosts(self) -> list[tuple[str, int, int]]:
        """Each host function the glue calls, once, in first-use order: (symbol, args, results)."""
        found: dict[str, tuple[int, int]] = {}
        if self.spec.init is not None:
            found[host_symbol(self.spec.init)] = (0, self.n_params)
        for e in self.spec.entries:
            sym, arity = host_symbol(e.host), self.host_arity(e)
            if found.setdefault(sym, arity) != arity:
                raise SpecError(f"host function {sym} is called with two different signatures")
        return [(sym, a, r) for sym, (a, r) in found.items()]


def _args(e: EntrySpec) -> tuple[TensorSpec, ...]:
    return (*e.inputs, *e.outputs)


def _arg_names(e: EntrySpec) -> list[str]:
    """Readable, distinct C parameter names for the header: the C identifier of each name, with
    `_` appended while it is a keyword, `m`, a likely macro (leading capital or underscore) or
    taken."""
    taken: set[str] = set()
    out = []
    for t in _args(e):
        name = c_identifier(t.name)
        if name[0].isupper() or name[0] == "_":
            name = "arg_" + name
        while name in RESERVED_WORDS or name in taken:
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def _entry_prototype(layout: _Layout, e: EntrySpec, names: list[str], comments: bool) -> str:
    model = f"{layout.name}_model"
    params = [f"{model} *m"]
    for i, (t, name) in enumerate(zip(_args(e), names, strict=True)):
        const = "const " if i < len(e.inputs) else ""
        params.append(f"{const}{DTYPES[t.dtype][0]} *{name}")
    if not comments:
        return "\n".join(_call(f"dlrt_status {layout.symbol(e)}(", params, ")"))
    lines = [f"dlrt_status {layout.symbol(e)}("]
    for i, p in enumerate(params):
        sep = "," if i + 1 < len(params) else ""
        if i == 0:
            lines.append(f"    {p}{sep}")
            continue
        t = _args(e)[i - 1]
        role = "input" if i - 1 < len(e.inputs) else "output"
        note = c_comment(f"{role} '{t.name}': {t.dtype}{dims(t.shape)}")
        lines.append(f"    {p}{sep} /* {note} */")
    return "\n".join(lines) + ")"


def _api_prototypes(name: str) -> dict[str, str]:
    """The prototypes of the NAME_<x> functions, wrapped at 100 columns."""
    model = f"{name}_model"
    table = {
        "create": ("dlrt_status", "const char *device", "uint64_t seed", f"{model} **out"),
        "destroy": ("void", f"{model} *m"),
        "save": ("dlrt_status", f"const {model} *m", "const char *path"),
        "load": ("dlrt_status", f"{model} *m", "const char *path"),
        "get_param": ("dlrt_status", f"const {model} *m", "const char *name", "void *out"),
        "set_param": ("dlrt_status", f"{model} *m", "const char *name", "const void *data"),
        "manifest": ("const char *", "void"),
    }
    out = {}
    for fn, (result, *params) in table.items():
        space = "" if result.endswith("*") else " "
        out[fn] = "\n".join(_call(f"{result}{space}{name}_{fn}(", params, ")"))
    return out


def header_source(spec: LibrarySpec, cuda: CudaGlue | None = None) -> str:
    """The public header `NAME.h`: the API of docs/c-abi.md section 1 with every argument's name,
    dtype and shape in a comment."""
    layout = _Layout(spec, cuda)
    name = layout.name
    api = _api_prototypes(name)
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
        "   byte, 0 or 1; f16 is its 16 bits); a scalar ([]) is a pointer to one element. */",
    ]
    names = {e.name: _arg_names(e) for e in spec.entries}
    for e in spec.entries:
        out.append(_entry_comment(e))
        out.append(_entry_prototype(layout, e, names[e.name], comments=True) + ";")
    if spec.entries:
        out += [
            "",
            "/* The same with DLPack tensors: args[] holds the inputs, then the outputs, each",
            "   checked (dtype, shape, contiguous row-major). Host memory (kDLCPU) is used in",
            "   place; so is memory of the GPU the model runs on (kDLCUDA), without copies. */",
        ]
        out += [glue_dlpack.dl_prototype(layout.symbol(e), f"{name}_model") + ";"
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


def _tensor_table_comment(spec: LibrarySpec) -> list[str]:
    if not spec.params:
        return ["/* The model has no parameters. */", ""]
    lines = ["/* Parameters (the names get_param and set_param take):"]
    lines += [c_comment(f"     {p.name}: {p.dtype}{dims(p.shape)}") for p in spec.params]
    if spec.states:
        lines.append("   Optimiser states (saved and loaded with the parameters):")
        lines += [
            c_comment(f"     {s.name}: {s.dtype}{dims(s.shape)} of {s.param}") for s in spec.states
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
        for t in _args(e):
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


def check_spec(spec: LibrarySpec) -> None:
    """Raises SpecError when the C ABI cannot express `spec`; a build checks this first."""
    _Layout(spec)


def glue_source(spec: LibrarySpec, cuda: CudaGlue | None = None) -> str:
    """The C11 glue implementing docs/c-abi.md section 1 over the model's host functions; with
    `cuda`, models can also be created on "cuda:N" (dlvm.codegen.glue_cuda)."""
    layout = _Layout(spec, cuda)
    name = layout.name
    out = [
        f"/* {c_comment(spec.compiler)}: C glue of model {c_comment(repr(spec.name))}"
        " (docs/c-abi.md).\n   Generated; do not edit. */",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <string.h>",
        "",
        '#include "dlrt.h"',
        "",
        "typedef struct dl_context {",
        "    dlrt_arena *arena; /* frames of host functions */",
        "    uint64_t seed;     /* the random stream: draw k uses key hash(seed, counter++) */",
        "    uint64_t counter;",
        "} dl_context;",
        "",
        "/* Host functions (docs/c-abi.md section 5). Declared hidden so that the linker hides",
        "   them in the library whatever visibility their object gives them. */",
    ]
    for sym, n_args, n_results in layout.hosts():
        params = ["dl_context *ctx"]
        params += [f"const void *arg{i}" for i in range(n_args)]
        params += [f"void *res{i}" for i in range(n_results)]
        out += _call(f"{HIDDEN} extern int32_t {sym}(", params, ");")
    out += ["", *_model_struct(layout), ""]
    if cuda is not None:
        out += [*glue_cuda.declarations(cuda, spec), ""]
    out += _helpers(layout)
    out += _create_destroy(layout)
    for e in spec.entries:
        out += ["", *_entry_function(layout, e)]
    for e in spec.entries:
        out += ["", *_dl_entry(layout, e)]
    out += ["", *_save_load(layout), "", *_get_set_param(layout), ""]
    out += [EXPORT, f"{_api_prototypes(name)['manifest']} {{"]
    literal = c_string_lines(manifest_json(spec, cuda))
    out.append("    return " + literal[0])
    out += ["           " + line for line in literal[1:]]
    out[-1] += ";"
    out += ["}", ""]
    return "\n".join(out)


def _model_struct(layout: _Layout) -> list[str]:
    name, n = layout.name, len(layout.tensors)
    out: list[str] = []
    if n:
        out += [
            "/* Parameters, then optimiser states: the buffers of the model object. */",
            "typedef struct glue_tensor {",
            "    const char *name;",
            "    dlrt_dtype dtype;",
            "    int32_t rank;",
            "    const int64_t *shape;",
            "    size_t bytes;",
            "} glue_tensor;",
            "",
        ]
        for t in layout.tensors:
            shape = ", ".join(str(d) for d in t.shape) or "0"
            out.append(f"static const int64_t glue_shape_{t.index}[] = {{{shape}}};")
        out.append(f"static const glue_tensor glue_tensors[{n}] = {{")
        for t in layout.tensors:
            fields = [
                c_string(t.name),
                DTYPES[t.dtype][1],
                str(len(t.shape)),
                f"glue_shape_{t.index}",
                f"{t.bytes}u",
            ]
            out.append(f"    {{{', '.join(fields)}}},")
        out += ["};", ""]
    out += [f"typedef struct {name}_model {name}_model;", f"struct {name}_model {{"]
    out.append("    dl_context ctx;")
    if n:
        out.append(f"    void *buf[{n}];   /* the current value of each tensor of glue_tensors */")
        out.append(f"    void *spare[{n}]; /* the second set for train entries, NULL if unused */")
    out += ["    int64_t step;   /* successful train steps */"]
    if layout.cuda is not None:
        out += glue_cuda.struct_fields(n)
    out.append("};")
    return out


def _helpers(layout: _Layout) -> list[str]:
    name = layout.name
    out = [
        "static dlrt_status glue_null(const char *fn, const char *arg) {",
        "    return dlrt_error(DLRT_ERR_INVALID_ARGUMENT, \"%s: argument '%s' is NULL\", fn, arg);",
        "}",
        "",
        "static int glue_is_cuda(const char *device) {",
        "    const char *p = device + 5;",
        "    if (strncmp(device, \"cuda:\", 5) != 0 || *p == '\\0')",
        "        return 0;",
        "    for (; *p != '\\0'; ++p)",
        "        if (*p < '0' || *p > '9')",
        "            return 0;",
        "    return 1;",
        "}",
        "",
    ]
    if layout.calls_host:
        out += [
            "/* The host's status; its message is prefixed with `fn`, or made up when the host",
            "   function set none. */",
            "static dlrt_status glue_host_status(const char *fn, const char *host, int32_t rc) {",
            "    if (dlrt_last_error()[0] == '\\0')",
            '        return dlrt_error((dlrt_status)rc, "%s: %s failed with status %d", fn, host,'
            " (int)rc);",
            '    return dlrt_error((dlrt_status)rc, "%s: %s", fn, dlrt_last_error());',
            "}",
            "",
        ]
    if layout.tensors:
        out += [
            "/* A zeroed buffer of at least one byte, so that an empty tensor has one too. */",
            "static void *glue_zeros(size_t bytes) {",
            "    void *p = dlrt_alloc(bytes ? bytes : 1);",
            "    if (p != NULL)",
            "        memset(p, 0, bytes);",
            "    return p;",
            "}",
            "",
        ]
    if layout.spare:
        out += [
            f"static void glue_swap({name}_model *m, size_t i) {{",
            "    void *t = m->buf[i];",
            "    m->buf[i] = m->spare[i];",
            "    m->spare[i] = t;",
            "}",
            "",
        ]
    if layout.cuda is not None:
        out += glue_cuda.helpers(name, len(layout.tensors), layout.spare, layout.cuda)
    return out


def _create_destroy(layout: _Layout) -> list[str]:
    spec, name, n = layout.spec, layout.name, len(layout.tensors)
    api = _api_prototypes(name)
    fn = c_string(f"{name}_create")
    out = [EXPORT, f"{api['destroy']} {{"]
    if n:
        out.append("    size_t i;")
    out += ["    if (m == NULL)", "        return;"]
    if layout.cuda is not None:
        out += ["    if (m->cuda != NULL)", "        glue_cuda_close(m);"]
    if n:
        out += [
            f"    for (i = 0; i < {n}; ++i) {{",
            "        if (m->buf[i] != NULL)",
            "            dlrt_free(m->buf[i]);",
            "        if (m->spare[i] != NULL)",
            "            dlrt_free(m->spare[i]);",
            "    }",
        ]
    out += [
        "    if (m->ctx.arena != NULL)",
        "        dlrt_arena_destroy(m->ctx.arena);",
        "    dlrt_free(m);",
        "}",
        "",
        EXPORT,
        f"{api['create']} {{",
        f"    static const char fn[] = {fn};",
        f"    {name}_model *m;",
    ]
    if layout.cuda is not None:
        out.append("    int ordinal = -1;")
    if n:
        out.append("    size_t i;")
    if spec.init is not None:
        out += ["    size_t mark;", "    int32_t rc;"]
    unknown = [
        "        return dlrt_error(DLRT_ERR_INVALID_ARGUMENT,",
        '                          "%s: unknown device \'%s\' (expected \\"cpu\\" or'
        ' \\"cuda:N\\")", fn, device);',
    ]
    out += ["    if (out == NULL)", '        return glue_null(fn, "out");', "    *out = NULL;"]
    if layout.cuda is None:
        out += [
            '    if (device != NULL && strcmp(device, "cpu") != 0) {',
            "        if (glue_is_cuda(device))",
            "            return dlrt_error(DLRT_ERR_DEVICE,",
            "                              \"%s: device '%s': this library has no CUDA kernels\","
            " fn, device);",
            *unknown,
            "    }",
        ]
    else:
        out += [
            '    if (device != NULL && strcmp(device, "cpu") != 0) {',
            "        if (!glue_is_cuda(device))",
            *["    " + line for line in unknown],
            "        ordinal = glue_cuda_ordinal(device);",
            "        if (ordinal < 0)",
            "            return dlrt_error(DLRT_ERR_DEVICE, \"%s: device '%s': no such device\","
            " fn, device);",
            "    }",
        ]
    out += [
        "    m = dlrt_alloc(sizeof *m);",
        "    if (m == NULL)",
        '        return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);',
        "    memset(m, 0, sizeof *m);",
        "    m->ctx.seed = seed;",
        "    m->ctx.arena = dlrt_arena_create(0);",
        "    if (m->ctx.arena == NULL)",
        "        goto oom;",
    ]
    if n:
        out += [
            f"    for (i = 0; i < {n}; ++i) {{",
            "        m->buf[i] = glue_zeros(glue_tensors[i].bytes);",
            "        if (m->buf[i] == NULL)",
            "            goto oom;",
            "    }",
        ]
    if len(layout.spare) == n and n:
        out += [
            f"    for (i = 0; i < {n}; ++i) {{",
            "        m->spare[i] = glue_zeros(glue_tensors[i].bytes);",
            "        if (m->spare[i] == NULL)",
            "            goto oom;",
            "    }",
        ]
    else:
        for i in layout.spare:
            out += [
                f"    m->spare[{i}] = glue_zeros(glue_tensors[{i}].bytes);",
                f"    if (m->spare[{i}] == NULL)",
                "        goto oom;",
            ]
    if spec.init is not None:
        sym = host_symbol(spec.init)
        args = ", ".join(["&m->ctx"] + [f"m->buf[{i}]" for i in range(layout.n_params)])
        out += [
            "    mark = dlrt_arena_mark(m->ctx.arena);",
            "    dlrt_clear_error();",
            f"    rc = {sym}({args});",
            "    dlrt_arena_reset(m->ctx.arena, mark);",
            "    if (rc != DLRT_OK) {",
            f"        glue_host_status(fn, {c_string(sym)}, rc);",
            f"        {name}_destroy(m);",
            "        return (dlrt_status)rc;",
            "    }",
        ]
    if layout.cuda is not None:
        out += [
            "    if (ordinal >= 0) {",
            "        dlrt_status s = glue_cuda_open(m, ordinal);",
            "        m->ordinal = ordinal;",
            "        if (s != DLRT_OK) {",
            "            char why[DLRT_ERROR_CAPACITY];",
            "            strncpy(why, dlrt_last_error(), sizeof why - 1);",
            "            why[sizeof why - 1] = '\\0';",
            f"            {name}_destroy(m);",
            '            return dlrt_error(s, "%s: %s", fn, why);',
            "        }",
            "    }",
        ]
    out += [
        "    *out = m;",
        "    return DLRT_OK;",
        "oom:",
        f"    {name}_destroy(m);",
        '    return dlrt_error(DLRT_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);',
        "}",
    ]
    return out


def _entry_function(layout: _Layout, e: EntrySpec) -> list[str]:
    """NAME_<entry>: checks every pointer, calls the host function in the order EntrySpec
    documents inside one arena frame, and for a train entry swaps in the new buffers."""
    names = [f"a{i}" for i in range(len(_args(e)))]
    sym = host_symbol(e.host)
    train = e.kind == "train"
    cuda = layout.cuda
    plan = cuda.plans[e.name] if cuda is not None else None
    out: list[str] = []
    if isinstance(plan, glue_cuda.DevicePlan):
        buffers = [layout.index[n] for n in (*e.params, *e.states)]
        out += glue_cuda.device_entry(e, plan, glue_cuda.EntryParts(
            function=f"glue_{c_identifier(e.name)}_cuda",
            symbol=layout.symbol(e),
            model=f"{layout.name}_model",
            buffers=buffers,
            input_bytes=[_bytes(t) for t in e.inputs],
            output_bytes=[_bytes(t) for t in e.outputs],
            buffer_bytes=[layout.tensors[i].bytes for i in buffers],
            step_type=DTYPES[e.step_dtype][0] if e.step else None,
        ))  # fmt: skip
    out += [
        EXPORT,
        f"{_entry_prototype(layout, e, names, comments=False)} {{",
        f"    static const char fn[] = {c_string(layout.symbol(e))};",
        "    size_t mark;",
        "    uint64_t counter;",
        "    int32_t rc;",
    ]
    if e.step:
        out.append(f"    {DTYPES[e.step_dtype][0]} step;")
    out += ["    if (m == NULL)", '        return glue_null(fn, "m");']
    for t, a in zip(_args(e), names, strict=True):
        out += [f"    if ({a} == NULL)", f"        return glue_null(fn, {c_string(t.name)});"]
    if isinstance(plan, glue_cuda.DevicePlan):
        out += ["    if (m->cuda != NULL) {"]
        out += _call("        void *args[] = {", [f"(void *){a}" for a in names], "};")
        out += [f"        return glue_{c_identifier(e.name)}_cuda(m, args, NULL);", "    }"]
    elif cuda is not None:  # on the CPU, with the device's parameters
        out += _pull("    ", "fn")
    args = ["&m->ctx", *names[: len(e.inputs)]]
    args += [f"m->buf[{layout.index[n]}]" for n in (*e.params, *e.states)]
    if e.step:
        # The host sees the 1-based number of this step (docs/tel.md, optimisers).
        out.append(f"    step = ({DTYPES[e.step_dtype][0]})(m->step + 1);")
        args.append("&step")
    args += names[len(e.inputs) :]
    updated = [layout.index[n] for n in (*e.params, *e.states)] if train else []
    args += [f"m->spare[{i}]" for i in updated]
    out += [
        "    mark = dlrt_arena_mark(m->ctx.arena);",
        "    counter = m->ctx.counter;",
        "    dlrt_clear_error();",
        *_call(f"    rc = {sym}(", args, ");"),
        "    dlrt_arena_reset(m->ctx.arena, mark);",
        "    if (rc != DLRT_OK) {",
        "        m->ctx.counter = counter; /* a failed call leaves the model as it was */",
        f"        return glue_host_status(fn, {c_string(sym)}, rc);",
        "    }",
    ]
    out += [f"    glue_swap(m, {i});" for i in updated]
    if e.step:
        out.append("    m->step += 1;")
    if cuda is not None and updated:
        out += _push("    ", "fn")
    out += ["    return DLRT_OK;", "}"]
    return out


def _dl_entry(layout: _Layout, e: EntrySpec) -> list[str]:
    plan = layout.cuda.plans[e.name] if layout.cuda is not None else None
    c_types = [("const " if i < len(e.inputs) else "") + DTYPES[t.dtype][0] + " "
               for i, t in enumerate(_args(e))]  # fmt: skip
    dtypes = [DTYPES[t.dtype][1] for t in _args(e)]
    return glue_dlpack.dl_entry(
        e, layout.symbol(e), f"{layout.name}_model", c_types, dtypes, layout.cuda is not None,
        isinstance(plan, glue_cuda.DevicePlan),
    )  # fmt: skip


def _bytes(t: TensorSpec) -> int:
    return math.prod(t.shape) * DTYPES[t.dtype][2]


def _pull(indent: str, fn: str, model: str = "m") -> list[str]:
    """Brings the host's parameters up to date from the device (a CUDA model)."""
    return [
        f"{indent}if ({model}->cuda != NULL && glue_pull({model}) != DLRT_OK)",
        f'{indent}    return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", {fn}, dlrt_last_error());',
    ]


def _push(indent: str, fn: str) -> list[str]:
    """Sends the host's parameters to the device after the host changed them."""
    return [
        f"{indent}if (m->cuda != NULL && glue_push(m) != DLRT_OK)",
        f'{indent}    return dlrt_error(DLRT_ERR_DEVICE, "%s: %s", {fn}, dlrt_last_error());',
    ]


def _call(head: str, args: list[str], tail: str, width: int = 100) -> list[str]:
    """A call (or prototype) wrapped at `width` columns; continuation lines are aligned after
    the parenthesis, or indented by 4 when the head is long."""
    lines: list[str] = []
    line = head
    indent = " " * (len(head) if len(head) <= 48 else 4)
    for i, a in enumerate(args):
        piece = a + (", " if i + 1 < len(args) else tail)
        if line != head and line.strip() and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = indent
        line += piece
    if not args:
        line += tail
    lines.append(line)
    return lines


def _tensor_array(layout: _Layout, const: bool) -> list[str]:
    """Fills `ts` with every parameter and state (and `__step__`) of model `m`; sets `n`."""
    n = len(layout.tensors)
    cast = "(int64_t *)" if const else ""
    out = []
    if n:
        out += [
            f"    for (i = 0; i < {n}; ++i) {{",
            "        ts[i].name = glue_tensors[i].name;",
            "        ts[i].dtype = glue_tensors[i].dtype;",
            "        ts[i].rank = glue_tensors[i].rank;",
            "        ts[i].shape = glue_tensors[i].shape;",
            "        ts[i].data = m->buf[i];",
            "    }",
        ]
    if layout.has_step:
        out += [
            f"    ts[{n}].name = {c_string(STEP_TENSOR)};",
            f"    ts[{n}].dtype = DLRT_I64;",
            f"    ts[{n}].rank = 0;",
            f"    ts[{n}].shape = &glue_scalar_shape;",
            f"    ts[{n}].data = {cast}&m->step;",
        ]
    return out


def _save_load(layout: _Layout) -> list[str]:
    name, n = layout.name, len(layout.tensors)
    total = n + int(layout.has_step)
    api = _api_prototypes(name)
    out = []
    if layout.has_step:
        out += ["static const int64_t glue_scalar_shape = 0;", ""]
    for what, const in (("save", True), ("load", False)):
        out += [EXPORT, f"{api[what]} {{", f"    dlrt_tensor ts[{max(total, 1)}];"]
        out.append("    dlrt_status s;")
        if n:
            out.append("    size_t i;")
        out += [
            "    if (m == NULL)",
            f'        return glue_null("{name}_{what}", "m");',
            "    if (path == NULL)",
            f'        return glue_null("{name}_{what}", "path");',
        ]
        if not total:
            out.append("    memset(ts, 0, sizeof ts);")
        if layout.cuda is not None:  # the host's copy must be current (load keeps states)
            out += _pull("    ", f'"{name}_{what}"', f"(({name}_model *)m)")
        out += _tensor_array(layout, const)
        if what == "save":
            out.append(f"    s = dlrt_save(path, {c_string(layout.spec.name)}, ts, {total});")
        else:
            out.append(f"    s = dlrt_load(path, ts, {total}, {layout.n_params});")
        out += [
            "    if (s != DLRT_OK)",
            f'        dlrt_error(s, "{name}_{what}: %s", dlrt_last_error());',
        ]
        if layout.cuda is not None and what == "load":
            out += ["    else", *_push("        ", f'"{name}_{what}"')]
        out += ["    return s;", "}", ""]
    return out[:-1]


def _get_set_param(layout: _Layout) -> list[str]:
    name, n = layout.name, layout.n_params
    api = _api_prototypes(name)
    known = ", ".join(p.name for p in layout.spec.params) or "none"
    out = [
        "/* The index of parameter `name`, or -1 with an error naming the known parameters. */",
        "static int glue_find_param(const char *fn, const char *name) {",
    ]
    if n:
        out += [
            "    int i;",
            f"    for (i = 0; i < {n}; ++i)",
            "        if (strcmp(glue_tensors[i].name, name) == 0)",
            "            return i;",
        ]
    out += [
        "    dlrt_error(DLRT_ERR_INVALID_ARGUMENT, \"%s: unknown parameter '%s' (known: %s)\","
        " fn, name,",
        f"               {c_string(known)});",
        "    return -1;",
        "}",
    ]
    for what, dst, src, ptr in (
        ("get_param", "out", "m->buf[i]", "out"),
        ("set_param", "m->buf[i]", "data", "data"),
    ):
        out += [
            "",
            EXPORT,
            f"{api[what]} {{",
            f'    static const char fn[] = "{name}_{what}";',
            "    int i;",
            "    if (m == NULL)",
            '        return glue_null(fn, "m");',
            "    if (name == NULL)",
            '        return glue_null(fn, "name");',
            f"    if ({ptr} == NULL)",
            f'        return glue_null(fn, "{ptr}");',
            "    i = glue_find_param(fn, name);",
            "    if (i < 0)",
            "        return DLRT_ERR_INVALID_ARGUMENT;",
        ]
        if layout.cuda is not None:
            out += _pull("    ", "fn", f"(({name}_model *)m)")
        if n:
            out.append(f"    memcpy({dst}, {src}, glue_tensors[i].bytes);")
        if layout.cuda is not None and what == "set_param":
            out += _push("    ", "fn")
        out += ["    return DLRT_OK;", "}"]
    return out

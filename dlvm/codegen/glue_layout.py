"""What the C ABI can express of a LibrarySpec, checked once: names, dtypes, step types and the
symbols the glue defines, with the host functions it calls (docs/c-abi.md sections 1 and 5)."""

from __future__ import annotations

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
    "bf16": ("uint16_t", "DLRT_BF16", 2),
}

# Step dtypes the runtime converts its int64 step count to (an f16 or bf16 step count is not
# supported).
STEP_DTYPES = ("i8", "i16", "i32", "i64", "f32", "f64")

ENTRY_KINDS = ("infer", "train", "export")

# NAME_<x> functions every library exports; an entry may not take one of these names.
API_FUNCTIONS = (
    "create",
    "destroy",
    "save",
    "load",
    "get_param",
    "set_param",
    "set_allreduce",
    "manifest",
)


class Layout:
    """A checked LibrarySpec: the tensors of the model object (parameters, then states), the
    symbol of each entry, and the host functions the glue calls. SpecError when the C ABI
    cannot express the spec."""

    def __init__(self, spec: LibrarySpec) -> None:
        self.spec = spec
        self.name = spec.c_name
        self.tensors: list[TensorSpec | StateSpec] = [*spec.params, *spec.states]
        self.n_params = len(spec.params)
        self.index = {t.name: i for i, t in enumerate(self.tensors)}
        self.has_step = any(e.kind == "train" and e.step for e in spec.entries)
        self._check()

    def _check(self) -> None:
        spec = self.spec
        if len(self.index) != len(self.tensors):
            raise SpecError(f"model '{spec.name}': parameter and state names must be unique")
        every: list[TensorSpec | StateSpec] = [*spec.params, *spec.states]
        every += [a for e in spec.every_entry() for a in entry_args(e)]
        for t in every:
            if t.dtype not in DTYPES:
                raise SpecError(f"model '{spec.name}': '{t.name}' has unknown dtype '{t.dtype}'")
            if any(d < 0 for d in t.shape):
                raise SpecError(f"model '{spec.name}': '{t.name}' has a negative dimension")
        # Names reach the runtime as C strings, which end at the first NUL.
        names = [spec.name, spec.compiler, *(t.name for t in every)]
        names += [e.name for e in spec.entries]
        for n in names:
            if "\0" in n:
                raise SpecError(f"model '{spec.name}': the name {n!r} holds a NUL character")
        if not 0 <= spec.derived <= len(spec.states) or (spec.derive is None) != (
            spec.derived == 0
        ):
            raise SpecError(
                f"model '{spec.name}': {spec.derived} derived of {len(spec.states)} states, "
                f"derive {spec.derive!r}"
            )
        if not 0 <= spec.buffers <= len(spec.params):
            raise SpecError(
                f"model '{spec.name}': {spec.buffers} buffers of {len(spec.params)} parameters"
            )
        params = {p.name for p in spec.params}
        for s in spec.states:
            if s.param not in params:
                raise SpecError(f"state '{s.name}' belongs to unknown parameter '{s.param}'")
        for e in spec.every_entry():
            self._check_entry(e, params, {s.name for s in spec.states})
        for e in spec.entries:
            if (e.grads is None) != (e.apply is None) or (e.grads and e.kind != "train"):
                raise SpecError(f"entry '{e.name}': parts are a train entry's grads and apply")
        self._check_symbols()

    def _check_entry(self, e: EntrySpec, params: set[str], states: set[str]) -> None:
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
        names = [t.name for t in entry_args(e)]
        if len(set(names)) != len(names):
            raise SpecError(f"{where}: argument names must be unique")

    def _check_symbols(self) -> None:
        """Every exported name once, and none a host function's or the runtime's."""
        exported = [f"{self.name}_{n}" for n in (*API_FUNCTIONS, "model")]
        exported += [self.symbol(e) + suffix for e in self.spec.entries for suffix in ("", "_dl")]
        hosts = {h for h, _, _ in self.hosts()}
        clash = sorted(
            {n for n in exported if exported.count(n) > 1}
            | (set(exported) & hosts)
            | {n for n in exported if n.startswith("dlrt_")}
        )
        if clash:
            raise SpecError(f"model '{self.spec.name}': generated names clash: {', '.join(clash)}")

    def symbol(self, e: EntrySpec) -> str:
        return f"{self.name}_{c_identifier(e.name)}"

    def buffers(self, e: EntrySpec) -> list[int]:
        """The tensor index of each parameter and state the host function of `e` takes."""
        return [self.index[n] for n in (*e.params, *e.states)]

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
        functions: dict[str, str] = {}
        if self.spec.init is not None:
            found[host_symbol(self.spec.init)] = (0, self.n_params)
            functions[host_symbol(self.spec.init)] = self.spec.init
        if self.spec.derive is not None:
            found[host_symbol(self.spec.derive)] = (self.n_params, self.spec.derived)
            functions[host_symbol(self.spec.derive)] = self.spec.derive
        for e in self.spec.every_entry():
            sym, arity = host_symbol(e.host), self.host_arity(e)
            if found.setdefault(sym, arity) != arity:
                raise SpecError(f"host function {sym} is called with two different signatures")
            # Two IR functions whose names differ only where C has no character (`f.grads`
            # and `f_grads`) would be one symbol.
            if functions.setdefault(sym, e.host) != e.host:
                raise SpecError(f"functions '{functions[sym]}' and '{e.host}' are both {sym}")
        return [(sym, a, r) for sym, (a, r) in found.items()]


def entry_args(e: EntrySpec) -> tuple[TensorSpec, ...]:
    """The arguments of NAME_<entry>: its inputs, then its outputs."""
    return (*e.inputs, *e.outputs)

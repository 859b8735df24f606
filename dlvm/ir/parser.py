"""Reads the textual IR (docs/ir.md, "Textual format") into a Module.

Instructions are parsed through their declaration's syntax template. Errors are located
diagnostics; an error inside an instruction skips to the end of its line and parsing goes on, so
one run reports every mistake. A value whose definition failed is "poisoned": later uses of it
are dropped quietly instead of cascading into more errors.
"""

from __future__ import annotations

import gc
from typing import Any, TypeVar

from dlvm.diagnostics import DiagnosticError
from dlvm.ir import lexer as L
from dlvm.ir.parse_body import BodyParser
from dlvm.ir.parse_tokens import _Error, _unescape
from dlvm.ir.schedule import TARGETS, Schedule
from dlvm.ir.types import (
    VOID,
    AliasType,
    EnumType,
    FunctionType,
    NominalType,
    StructType,
)
from dlvm.ir.values import (
    EXTERN,
    STAGE_ALIASES,
    STAGES,
    Function,
    GlobalVariable,
    GradientDecl,
    Module,
)

_Nominal = TypeVar("_Nominal", bound=NominalType)
_DECLARING = frozenset(["struct", "enum", "type", "func", "var"])


class Parser(BodyParser):
    """Reads a whole module: header, type declarations, globals and functions."""

    def parse_module(self) -> Module:
        try:
            self.skip_newlines()
            self.expect("module", "'module' at the start of the file")
            name = self.expect_kind(L.STRING, "the module name as a string")
            self.module.name = _unescape(name[1:-1])
            self.expect_newline()
            self.skip_newlines()
            self.expect("stage", "'stage'")
            stage_pos = self.pos
            stage = self.expect_kind(L.WORD, "a stage name")
            stage = STAGE_ALIASES.get(stage, stage)
            if stage not in STAGES:
                self.error(
                    f"unknown stage '{stage}' (expected one of {', '.join(STAGES)})", stage_pos
                )
            self.module.stage = stage
            self.expect_newline()
        except _Error as e:
            self.record(e)
            return self.module
        self.prescan()
        type_starts = self.type_declarations()
        while True:
            self.skip_newlines()
            if self.kinds[self.pos] == L.EOF:
                break
            start = self.pos
            if start in type_starts:
                self.recover_toplevel(start)  # parsed already
                continue
            try:
                self.toplevel()
            except _Error as e:
                self.record(e)
                self.scope = None
                self.recover_toplevel(start)
        return self.module

    def recover_toplevel(self, start: int) -> None:
        """Skips to the next line that starts a top-level item. A failed attribute or
        declaration line takes its `func` with it, so the function is not reported again."""
        starters = ("struct", "enum", "type", "var", "func", "[")
        header_only = (self.texts[start] == "[" or self.kinds[start] == L.ATTR) and (
            "func" not in self.texts[start : self.pos]
        )
        self.pos = max(self.pos, start + 1)
        while self.kinds[self.pos] != L.EOF:
            if self.kinds[self.pos - 1] == L.NL and (
                self.texts[self.pos] in starters or self.kinds[self.pos] == L.ATTR
            ):
                if not (header_only and self.texts[self.pos] == "func"):
                    return
                header_only = False
            self.pos += 1

    def line_starts(self) -> list[int]:
        """Indices of the tokens that begin a line (computed once: the scans below would
        otherwise walk every token in Python)."""
        if self._line_starts is None:
            find, starts, i = self.kinds.index, [0], 0
            try:
                while True:  # list.index scans in C
                    i = find(L.NL, i) + 1
                    starts.append(i)
            except ValueError:
                pass
            self._line_starts = starts
        return self._line_starts

    def declaration_lines(self) -> list[int]:
        """The line starts that begin with struct, enum, type, func or var (a few among many
        lines of instructions), computed once for the scans below."""
        if self._declaration_lines is None:
            texts = self.texts
            self._declaration_lines = [i for i in self.line_starts() if texts[i] in _DECLARING]
        return self._declaration_lines

    def prescan(self) -> None:
        """Declares nominal types, function signatures and global variables so they may be used
        before they appear."""
        kinds, texts = self.kinds, self.texts
        n = len(kinds)
        for i in self.declaration_lines():
            if i >= n - 2:
                continue
            t = texts[i]
            if t in ("struct", "enum", "type") and kinds[i] == L.WORD and kinds[i + 1] == L.TYPE:
                name = texts[i + 1][1:]
                if name in self.types:
                    continue  # reported when the duplicate is parsed
                cls = {"struct": StructType, "enum": EnumType, "type": AliasType}[t]
                ty = cls(name)
                ty.loc = self.loc(self.offsets[i + 1], len(texts[i + 1]))
                self.types[name] = ty
        for i in self.declaration_lines():
            if i >= n - 2 or texts[i] not in ("func", "var"):
                continue
            if kinds[i + 1] != L.GLOBAL:
                continue
            name = texts[i + 1][1:]
            if name in self.globals:
                continue
            save = self.pos
            self.pos = i + 2
            loc = self.loc(self.offsets[i + 1], len(texts[i + 1]))
            try:
                self.expect(":")
                ty = self.type_()
                if texts[i] == "var":
                    self.globals[name] = GlobalVariable(name, ty, loc)
                elif not isinstance(ty, FunctionType):
                    self.error(f"a function needs a function type, found {ty}", i + 3)
            except _Error:
                ty = FunctionType((), VOID)  # reported again when the item is parsed
            self.pos = save
            if texts[i] == "func":
                self.globals[name] = Function(name, ty, loc)

    def type_declarations(self) -> set[int]:
        """Parses every struct, enum and alias before anything else, so that a type used before
        its declaration already has its fields, cases or target. Returns where each starts."""
        kinds, texts = self.kinds, self.texts
        save, starts = self.pos, set()
        for i in self.declaration_lines():
            if i >= len(kinds) - 1 or kinds[i] != L.WORD or kinds[i + 1] != L.TYPE:
                continue
            if texts[i] not in ("struct", "enum", "type"):
                continue
            starts.add(i)
            self.pos = i
            try:
                self.toplevel()
            except _Error as e:
                self.record(e)
        self.pos = save
        return starts

    def toplevel(self) -> None:
        t = self.texts[self.pos]
        kind = self.kinds[self.pos]
        if kind == L.WORD and t in ("struct", "enum"):
            self.nominal_decl(t)
        elif kind == L.WORD and t == "type":
            self.alias_decl()
        elif kind == L.WORD and t == "var":
            self.var_decl()
        elif kind == L.ATTR or (kind == L.PUNCT and t == "[") or (kind == L.WORD and t == "func"):
            self.function()
        else:
            self.error(
                f"expected a top-level declaration (struct, enum, type, var or func), "
                f"found {self.describe()}"
            )

    def declared_type(self, cls: type[_Nominal]) -> _Nominal:
        pos = self.pos
        name = self.expect_kind(L.TYPE, "a type name ($Name)")[1:]
        ty = self.types.get(name)
        if any(t.name == name for t in self.module.types) or not isinstance(ty, cls):
            self.error(f"type ${name} is already defined", pos)
        return ty

    def nominal_decl(self, word: str) -> None:
        self.pos += 1
        cls: type[StructType | EnumType] = StructType if word == "struct" else EnumType
        ty = self.declared_type(cls)
        self.module.add_type(ty)
        self.expect("{")
        self.skip_newlines()
        seen: set[str] = set()
        while not self.at("}"):
            pos = self.pos
            if word == "struct":
                name = self.expect_kind(L.KEY, "a field (#name)")[1:]
                self.expect(":")
                member: Any = self.type_()
            else:
                name = self.expect_kind(L.CASE, "an enum case (?name)")[1:]
                self.expect("(")
                member = self.type_list(")")
                self.expect(")")
            if name in seen:
                what = "field #" if word == "struct" else "case ?"
                self.error(f"duplicate {what}{name} in ${ty.name}", pos)
            seen.add(name)
            if isinstance(ty, StructType):
                ty.fields.append((name, member))
            else:
                ty.cases.append((name, member))
            if not self.accept(",") and not self.at("}"):
                self.expect_newline()
            self.skip_newlines()
        self.expect("}")
        self.expect_newline()

    def alias_decl(self) -> None:
        self.pos += 1
        ty = self.declared_type(AliasType)
        self.module.add_type(ty)
        self.expect("=")
        if not self.accept("opaque"):
            target_pos = self.pos
            ty.target = self.type_()
            probe, steps = ty.target, 0
            while isinstance(probe, AliasType) and probe.target is not None and steps < 100:
                probe, steps = probe.target, steps + 1
            if probe is ty or steps >= 100:
                self.error(f"type alias ${ty.name} refers to itself", target_pos)
        self.expect_newline()

    def var_decl(self) -> None:
        self.pos += 1
        pos = self.pos
        name = self.expect_kind(L.GLOBAL, "a global name (@name)")[1:]
        prior = self.globals.get(name)
        # The prescan made this very variable already (so it may be used before it appears).
        own = (
            isinstance(prior, GlobalVariable)
            and prior.module is None
            and prior.loc is not None
            and prior.loc.offset == self.offsets[pos]
        )
        if prior is not None and not own:
            self.error(f"@{name} is already defined", pos)
        self.expect(":")
        ty = self.type_()
        if own:
            assert isinstance(prior, GlobalVariable)  # `own` checked it
            g = prior
        else:
            g = GlobalVariable(name, ty, self.loc(self.offsets[pos], len(self.texts[pos])))
        self.globals[name] = g
        self.module.add_global(g)
        self.expect_newline()

    # Functions -------------------------------------------------------------------------------

    def function(self) -> None:
        attributes: list[str] = []
        declaration: Any = None
        while self.kinds[self.pos] == L.ATTR:
            attributes.append(self.texts[self.pos][1:])
            self.pos += 1
            self.expect_newline()
            self.skip_newlines()
        compute = False
        schedules: dict[str, Schedule] = {}
        while self.at("["):
            pos = self.pos
            line = self.declaration_line()
            self.skip_newlines()
            if line == "compute":
                compute = True
            elif isinstance(line, Schedule):
                # One CPU or host schedule, and one CUDA schedule beside it.
                slot = "cuda" if line.target == "cuda" else "cpu"
                if slot in schedules:
                    what = "cuda schedule" if slot == "cuda" else "cpu or host schedule"
                    self.error(f"a function has at most one {what}", pos + 1)
                schedules[slot] = line
            else:
                declaration = line
        self.expect("func", "'func'")
        pos = self.pos
        name = self.expect_kind(L.GLOBAL, "a function name (@name)")[1:]
        fn = self.globals.get(name)
        if not isinstance(fn, Function) or fn.module is not None:
            self.error(f"@{name} is already defined", pos)
        self.expect(":")
        type_pos = self.pos
        ty = self.type_()
        if not isinstance(ty, FunctionType):
            self.error(f"a function needs a function type, found {ty}", type_pos)
        fn.type = ty
        fn.attributes = attributes
        fn.compute = compute
        fn.schedule = schedules.get("cpu")
        fn.cuda_schedule = schedules.get("cuda")
        if isinstance(declaration, tuple):
            of_name, of_pos, decl = declaration
            of = self.globals.get(of_name)
            if not isinstance(of, Function):
                self.error(f"unknown function @{of_name} in gradient declaration", of_pos)
            decl.of = of
            declaration = decl
        fn.declaration = declaration
        self.module.add_function(fn)
        if self.at("{"):
            if declaration is not None:
                self.error(f"a declaration ([{_decl_word(declaration)}]) has no body")
            self.body(fn)
        elif declaration is None:
            self.error(f"expected '{{' to begin the body of @{name}, found {self.describe()}")
        self.expect_newline()

    def schedule_line(self) -> Schedule:
        """The rest of `[schedule TARGET key value …]` (dlvm.ir.schedule)."""
        pos = self.pos
        target = self.expect_kind(L.WORD, "a schedule target (cpu, cuda or host)")
        if target not in TARGETS:
            self.error(f"unknown schedule target '{target}' (expected cpu, cuda or host)", pos)
        items = []
        while not self.at("]"):
            key = self.expect_kind(L.WORD, "a schedule key or ']'")
            value = [self.int_(f"a number after '{key}'")]
            while self.accept("x"):
                value.append(self.int_(f"a number after 'x' in '{key}'"))
            items.append((key, tuple(value)))
        self.expect("]")
        self.expect_newline()
        return Schedule(target, tuple(items))

    def declaration_line(self) -> Any:
        self.expect("[")
        pos = self.pos
        word = self.expect_kind(L.WORD, "'extern', 'gradient', 'adjoint', 'compute' or 'schedule'")
        if word in ("extern", "compute"):
            self.expect("]")
            self.expect_newline()
            return EXTERN if word == "extern" else "compute"
        if word == "schedule":
            return self.schedule_line()
        if word not in ("gradient", "adjoint"):
            self.error(f"unknown declaration kind '{word}'", pos)
        of_pos = self.pos
        of_name = self.expect_kind(L.GLOBAL, "the function to differentiate (@name)")[1:]
        decl = GradientDecl(of=None, spelling=word)  # type: ignore[arg-type]
        if self.accept("from"):
            decl.source = self.int_("a result index after 'from'")
        if self.accept("wrt"):
            decl.wrt = self.int_list("an argument index after 'wrt'")
        if self.accept("keeping"):
            decl.keeping = self.int_list("a result index after 'keeping'")
        if self.accept("seedable"):
            decl.seedable = True
        self.expect("]", "']' or one of 'from', 'wrt', 'keeping', 'seedable'")
        self.expect_newline()
        return (of_name, of_pos, decl)


def _decl_word(decl: Any) -> str:
    return decl if isinstance(decl, str) else decl.spelling


def parse_module(text: str, filename: str = "<input>") -> Module:
    """Parses a module; raises DiagnosticError with every syntax and name error found."""
    # Parsing builds many long-lived objects and no garbage: the cyclic collector would only
    # rescan them again and again (a fifth of the time on a big module).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        p = Parser(text, filename)
        module = p.parse_module()
    finally:
        if gc_was_enabled:
            gc.enable()
    if p.diags:
        # Type declarations are parsed first: report in the order of the text.
        p.diags.sort(key=lambda d: d.loc.offset if d.loc is not None else -1)
        raise DiagnosticError(p.diags)
    module.source = p.source  # type: ignore[attr-defined]
    return module

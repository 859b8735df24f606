"""The built-in registry checks a call against the built-in's declared signature (arity,
keyword names, defaults, kinds, element type) before the built-in's lowering runs: a probe
built-in records what reaches it, and a rejected call never does."""

from __future__ import annotations

from pathlib import Path

import pytest

import telc.lower.calls
from dlvm.diagnostics import DiagnosticError
from dlvm.ir.types import DataType
from telc.lower import lower
from telc.lower.builtins import BUILTINS, UNARY_FLOAT
from telc.lower.registry import Call, ElementRule, Kind, Param, Registry, Signature
from telc.lower.values import TV, Elaborated
from telc.program import load

ROOT = Path(__file__).resolve().parents[2]
PROBE = Signature(
    (
        Param("x"),
        Param("axis", Kind.AXES, None),
        Param("scale", Kind.INTS, (2,), count=1),
        Param("keep", Kind.FLAG, False),
    ),
    rule=ElementRule("x", "float", "{name} needs a float tensor, found {type}", materialise="own"),
)
FIXED = Signature(positional=1, usage="{name} takes one tensor: {name}(x)")


@pytest.fixture
def reached(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """What each call of the probe built-ins received; they are the only built-ins."""
    seen: list[dict] = []
    registry = Registry()

    @registry.define("probe", PROBE)
    def probe(c: Call) -> Elaborated:
        x = c.tensor("x")
        seen.append(
            {
                "dtype": x.dtype,
                "axis": c.axes("axis"),
                "scale": c.ints("scale"),
                "keep": c.flag("keep"),
            }
        )
        return x

    @registry.define("fixed", FIXED)
    def fixed(c: Call) -> Elaborated:
        seen.append({"fixed": len(c.e.positional)})
        tv = c.host.exprs.lower_expr(c.e.positional[0], c.scope)
        assert isinstance(tv, TV)
        return tv

    monkeypatch.setattr(telc.lower.calls, "BUILTINS", registry)
    return seen


def lower_body(body: str) -> None:
    text = f"export def f(x: f32[3], i: i32[3]) -> f32[3] = {body}\n"
    lower(load("probe.tel", text))


def errors_of(body: str) -> list[str]:
    with pytest.raises(DiagnosticError) as info:
        lower_body(body)
    return [d.message for d in info.value.diagnostics]


def test_a_call_that_fits_reaches_the_built_in_with_its_defaults(reached):
    lower_body("probe(x)")
    assert reached == [{"dtype": DataType.F32, "axis": [0], "scale": (2,), "keep": False}]


def test_arguments_by_position_and_keyword_are_converted_by_kind(reached):
    lower_body("probe(x, -1, keep: true, scale: 3)")
    assert reached == [{"dtype": DataType.F32, "axis": [0], "scale": (3,), "keep": True}]


def test_a_weak_number_takes_its_type_before_the_rule_sees_it(reached):
    lower_body("probe(2.5) + x")
    assert reached[0]["dtype"] is DataType.F32


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("probe(x, 0, 3, false, 1)", "probe takes at most 4 arguments, 5 given"),
        ("probe(x, bogus: 1)", "probe has no option 'bogus'"),
        ("probe(x, sclae: 1)", "probe has no option 'sclae'; did you mean 'scale'?"),
        ("probe(x, 0, axis: 0)", "'axis' is given twice"),
        ("probe(axis: 0)", "probe needs the argument 'x'"),
        ("probe(i)", "probe needs a float tensor, found i32[3]"),
        ("probe(f)", "'x' must be a tensor, found the function 'f'"),
        ("probe(x, axis: 1)", "axis 1 is out of range for f32[3]"),
        ("probe(x, axis: 1.5)", "'axis' must be an integer or a tuple of integers"),
        ("probe(x, scale: (1, 2))", "'scale' needs 1 integer, found 2"),
        ("probe(x, keep: 1)", "'keep' must be true or false"),
        ("fixed(x, x)", "fixed takes one tensor: fixed(x)"),
        ("fixed(x: x)", "fixed takes one tensor: fixed(x)"),
    ],
)
def test_a_call_that_does_not_fit_is_reported_and_never_reaches_the_built_in(
    reached, body, message
):
    assert errors_of(body) == [message]
    assert reached == []


def test_each_stage_reports_every_problem_it_finds_before_stopping(reached):
    assert errors_of("probe(x, axis: 1.5, keep: 2)") == [
        "'axis' must be an integer or a tuple of integers",
        "'keep' must be true or false",
    ]
    # A tensor that is not one stops the call before its integers are looked at.
    assert errors_of("probe(f, axis: 1.5)") == ["'x' must be a tensor, found the function 'f'"]
    assert reached == []


def test_the_fixed_form_leaves_its_arguments_to_the_built_in(reached):
    lower_body("fixed(x)")
    assert reached == [{"fixed": 1}]


def test_the_elementwise_built_ins_are_the_documented_ones_and_come_from_the_ir():
    """UNARY_FLOAT is derived from the IR's list; docs/tel.md's table says what TEL offers."""
    from dlvm.ir import ops

    table = (ROOT / "docs" / "tel.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| `exp "))
    documented = set(row.split("`")[1].split())
    assert documented == set(UNARY_FLOAT) | {"abs", "sign", "floor", "ceil", "round"}
    assert set(UNARY_FLOAT) <= set(ops.UNARY_FLOAT)
    assert all(name in BUILTINS for name in documented)
    assert "lgamma" not in BUILTINS

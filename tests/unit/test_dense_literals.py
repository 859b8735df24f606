"""Dense tensor literals (docs/ir.md, "Literals and uses"): `literal dense "…": T`, a tensor's
bytes in memory order. They print and parse back; the type rule refuses a wrong one where it is
written; the interpreter reads them; the passes treat one as a single value, never element by
element; and the code generator makes one constant of the bytes, in host code and in a kernel
(for the CPU and for CUDA), which a library returns as the interpreter does."""

from __future__ import annotations

import time

import numpy as np
import pytest
from cuda_emulator import EmulatedInterpreter, Emulator
from irlib import ir_library

import dlvm
from dlvm.codegen import static_data
from dlvm.codegen.build import schedule
from dlvm.codegen.cuda import check_ptx, ptx
from dlvm.codegen.device_plan import NotPlannable, device_plan
from dlvm.diagnostics import DiagnosticError
from dlvm.interp import InterpreterError, run_function
from dlvm.ir import module_text, parse_module
from dlvm.ir.builder import tensor_literal
from dlvm.ir.literals import DenseLiteral, ScalarLiteral
from dlvm.ir.types import DATA_TYPES, TensorType
from dlvm.ir.values import Instruction, LiteralValue
from dlvm.ir.verifier import verify
from dlvm.tools import dlc
from dlvm.transforms.pass_manager import PassManager

RNG = np.random.default_rng(7)
# One array of each element type, of a shape of its own.
ARRAYS = {
    "bool": RNG.random((7,)) < 0.5,
    "i8": RNG.integers(-128, 128, (3, 2)).astype(np.int8),
    "i16": RNG.integers(-(2**15), 2**15, (5,)).astype(np.int16),
    "i32": RNG.integers(-(2**31), 2**31, (2, 3)).astype(np.int32),
    "i64": RNG.integers(-(2**62), 2**62, (2, 3)),
    "f16": RNG.standard_normal((2, 2, 3)).astype(np.float16),
    "f32": RNG.standard_normal((3, 5)).astype(np.float32),
    "f64": RNG.standard_normal((4,)),
}


def type_of(name: str) -> TensorType:
    return TensorType(ARRAYS[name].shape, DATA_TYPES[name])


def returning(uses: dict[str, str]) -> str:
    """A module of one function per name returning `literal USE`."""
    fns = []
    for name, use in uses.items():
        ty = use.rsplit(": ", 1)[1]
        fns.append(
            f"func @{name}: () -> {ty} {{\n'entry():\n    %a = literal {use}\n"
            f"    return %a: {ty}\n}}\n"
        )
    return 'module "dense"\nstage raw\n\n' + "\n".join(fns)


def run_passes(module, *names: str) -> list[bool]:
    return [changed for _, changed in PassManager().run(module, PassManager.resolve(list(names)))]


# The literal --------------------------------------------------------------------------------


def test_tensor_literal_holds_the_bytes_in_memory_order():
    use = tensor_literal(np.array([[1, 2], [3, 4]]), TensorType((2, 2), DATA_TYPES["f32"]))
    assert isinstance(use.literal, DenseLiteral)
    assert use.literal.data == np.array([1, 2, 3, 4], "<f4").tobytes()
    assert use.use_text() == 'dense "0000803f000000400000404000008040": <2 x 2 x f32>'
    # A scalar keeps its own literal; an array of another shape is refused.
    scalar = tensor_literal(np.float32(2.5), TensorType((), DATA_TYPES["f32"]))
    assert scalar.literal == ScalarLiteral(2.5)
    with pytest.raises(ValueError, match=r"shape \(3,\) for a literal of type <2 x f32>"):
        tensor_literal(np.zeros(3), TensorType((2,), DATA_TYPES["f32"]))
    with pytest.raises(ValueError, match="300 is past the range of i8"):
        tensor_literal(np.array([1, 300]), TensorType((2,), DATA_TYPES["i8"]))


def test_equal_dense_literals_are_one_value():
    t = type_of("f32")
    a, b = tensor_literal(ARRAYS["f32"], t), tensor_literal(ARRAYS["f32"].copy(), t)
    assert a == b and hash(a) == hash(b)
    assert a != tensor_literal(ARRAYS["f32"] + 1, t)
    assert a != LiteralValue(a.literal, TensorType((15,), DATA_TYPES["f32"]))


@pytest.mark.parametrize("name", list(ARRAYS))
def test_dense_literals_print_and_parse_back(name):
    use = tensor_literal(ARRAYS[name], type_of(name))
    text = returning({"f": use.use_text()})
    module = parse_module(text)
    assert verify(module) == []
    assert module_text(module) == text
    (literal,) = [i for i in module.functions[0].instructions() if i.opcode == "literal"]
    assert literal.operands[0] == use


def test_a_dense_literal_may_be_an_element_of_a_tuple_literal():
    text = returning({"f": '(dense "0102": <2 x i8>, 3: i8): (<2 x i8>, i8)'})
    module = parse_module(text)
    assert module_text(module) == text
    got = run_function(module, "f", [])
    np.testing.assert_array_equal(got[0], [1, 2])


WRONG = [
    ('dense "0000803f": <2 x f32>', 18, "literal: dense literal has 4 bytes, <2 x f32> needs 8"),
    ('dense "0000803f": f32', 18, "a dense literal needs a tensor type with dimensions, found f32"),
    ('dense "00": (<1 x i8>)', 18, "a dense literal needs a tensor type with dimensions"),
    ('dense "0002": <2 x bool>', 18, "a dense literal of bools has a byte other than 00 or 01"),
    ('dense "0 0": <1 x i8>', 24, "a dense literal's bytes are hex digits, two per byte"),
    ('dense "0g": <1 x i8>', 24, "a dense literal's bytes are hex digits, two per byte"),
    ('dense "012": <1 x i8>', 24, "a dense literal's bytes are hex digits, two per byte"),
    ("dense 12: <1 x i8>", 24, "expected the bytes as a hex string (\"0000803f\"), found '12'"),
]


@pytest.mark.parametrize(("use", "column", "message"), WRONG)
def test_a_wrong_dense_literal_is_an_error_where_it_is_written(use, column, message):
    text = f'module "m"\nstage raw\n\nfunc @f: () -> () {{\n\'entry():\n    %a = literal {use}\n'
    with pytest.raises(DiagnosticError) as got:
        parse_module(text + "    return\n}\n", "m.dl")
    (d,) = got.value.diagnostics
    assert message in d.message
    assert str(d.loc).endswith(f"m.dl:6:{column}")


def test_only_literal_takes_a_dense_literal_and_messages_give_its_size():
    text = (
        'module "m"\nstage raw\n\nfunc @f: (<2 x f32>) -> <2 x f32> {\n\'entry(%x: <2 x f32>):\n'
        '    %a = add %x: <2 x f32>, dense "0000803f00000040": <2 x f32>\n'
        "    return %a: <2 x f32>\n}\n"
    )
    with pytest.raises(DiagnosticError) as got:
        parse_module(text)
    assert got.value.diagnostics[0].message == (
        "only 'literal' may take the non-scalar literal dense (8 bytes): <2 x f32>; "
        "define it with a literal instruction"
    )


def test_the_verifier_refuses_a_dense_literal_made_with_the_wrong_bytes():
    module = parse_module(returning({"f": 'dense "0102": <2 x i8>'}), "m.dl")
    (literal,) = [i for i in module.functions[0].instructions() if i.opcode == "literal"]
    literal.operands[0] = LiteralValue(DenseLiteral(b"\x01"), literal.type)
    (d,) = verify(module)
    assert d.message.endswith("literal: dense literal has 1 byte, <2 x i8> needs 2")
    assert str(d.loc).endswith("m.dl:6:5")


# The interpreter ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ARRAYS))
def test_the_interpreter_reads_each_element_type(name):
    module = parse_module(returning({"f": tensor_literal(ARRAYS[name], type_of(name)).use_text()}))
    got = run_function(module, "f", [])
    assert got.dtype == ARRAYS[name].dtype
    np.testing.assert_array_equal(got, ARRAYS[name])
    if name.startswith("f"):  # in float64 mode, the same values widened
        wide = run_function(module, "f", [], float64=True)
        assert wide.dtype == np.float64
        np.testing.assert_array_equal(wide, ARRAYS[name].astype(np.float64))


def test_the_interpreter_refuses_a_dense_literal_of_the_wrong_bytes():
    module = parse_module(returning({"f": 'dense "0102": <2 x i8>'}))
    (literal,) = [i for i in module.functions[0].instructions() if i.opcode == "literal"]
    literal.operands[0] = LiteralValue(DenseLiteral(b"\x01\x02\x03"), literal.type)
    with pytest.raises(InterpreterError, match="dense literal has 3 bytes, <2 x i8> needs 2"):
        run_function(module, "f", [])


# Passes -------------------------------------------------------------------------------------

W = tensor_literal(
    np.arange(30, dtype=np.float32).reshape(5, 6) / 7, TensorType((5, 6), DATA_TYPES["f32"])
)


def _literals(module) -> list[Instruction]:
    return [i for f in module.functions for i in f.instructions() if i.opcode == "literal"]


def test_common_subexpression_elimination_merges_equal_dense_literals():
    other = tensor_literal(np.ones((5, 6)) * 2, W.type)  # the same type, other bytes
    text = f"""module "cse"
stage optimizable

func @f: (<5 x 6 x f32>) -> <5 x 6 x f32> {{
'entry(%x: <5 x 6 x f32>):
    %a = literal {W.use_text()}
    %b = literal {W.use_text()}
    %c = literal {other.use_text()}
    %s = add %a: <5 x 6 x f32>, %b: <5 x 6 x f32>
    %t = add %s: <5 x 6 x f32>, %c: <5 x 6 x f32>
    %u = add %t: <5 x 6 x f32>, %x: <5 x 6 x f32>
    return %u: <5 x 6 x f32>
}}
"""
    module = parse_module(text)
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    want = run_function(module, "f", [x])
    assert run_passes(module, "CSE") == [True]
    assert [i.operands[0] for i in _literals(module)] == [W, other]
    np.testing.assert_array_equal(run_function(module, "f", [x]), want)


def test_constant_propagation_folds_an_op_on_a_dense_literal_into_a_dense_literal():
    text = f"""module "fold"
stage optimizable

func @f: () -> (<6 x 5 x f32>, <6 x f32>, f32) {{
'entry():
    %w = literal {W.use_text()}
    %t = transpose %w: <5 x 6 x f32>
    %r = extract 2 from %w: <5 x 6 x f32>
    %e = extract 2, 3 from %w: <5 x 6 x f32>
    %all = literal (%t: <6 x 5 x f32>, %r: <6 x f32>, %e: f32): (<6 x 5 x f32>, <6 x f32>, f32)
    return %all: (<6 x 5 x f32>, <6 x f32>, f32)
}}
"""
    module = parse_module(text)
    want = run_function(module, "f", [])
    assert run_passes(module, "ConstProp", "DCE") == [True, True]
    printed = module_text(module)
    assert "transpose" not in printed and "extract" not in printed
    # The transpose and the row are dense literals; the element, a scalar one.
    *dense, result = [i.operands[0] for i in _literals(module)]
    assert all(isinstance(d.literal, DenseLiteral) for d in dense)
    assert sorted(str(d.type) for d in dense) == ["<6 x 5 x f32>", "<6 x f32>"]
    assert isinstance(result.literal.elements()[2].literal, ScalarLiteral)
    for got, expected in zip(run_function(module, "f", []), want):
        np.testing.assert_array_equal(got, expected)


def test_constant_propagation_leaves_large_results_of_splats_computed():
    """Only an operand that is dense already makes a large result dense: 17 sums of ones stay
    a scan, as before dense literals."""
    text = """module "scan"
stage raw

func @f: () -> <17 x i32> {
'entry():
    %ones = literal 1: <17 x i32>
    %s = scan %ones: <17 x i32> by add along 0
    return %s: <17 x i32>
}
"""
    module = parse_module(text)
    assert run_passes(module, "ConstProp") == [False]


def test_a_folded_dense_literal_reads_back_bit_for_bit():
    bits = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 65504, np.nan, 3], np.float32)
    t = TensorType((8, 3), DATA_TYPES["f32"])
    use = tensor_literal(np.repeat(bits, 3).reshape(8, 3), t)
    text = f"""module "bits"
stage raw

func @f: () -> <3 x 8 x f32> {{
'entry():
    %w = literal {use.use_text()}
    %t = transpose %w: <8 x 3 x f32>
    return %t: <3 x 8 x f32>
}}
"""
    module = parse_module(text)
    assert run_passes(module, "ConstProp", "DCE") == [True, True]
    (literal,) = _literals(module)
    assert literal.operands[0].literal.data == np.tile(bits, (3, 1)).astype("<f4").tobytes()


# Code generation ----------------------------------------------------------------------------

KERNEL = """module "kernel"
stage compute

[compute]
func @shift_kernel: (<3 x 5 x f32>) -> <3 x 5 x f32> {
'entry(%x: <3 x 5 x f32>):
    %w = literal WEIGHTS
    %y = add %x: <3 x 5 x f32>, %w: <3 x 5 x f32>
    return %y: <3 x 5 x f32>
}

func @shift: (<3 x 5 x f32>) -> <3 x 5 x f32> {
'entry(%x: <3 x 5 x f32>):
    %y = apply @shift_kernel(%x: <3 x 5 x f32>): (<3 x 5 x f32>) -> <3 x 5 x f32>
    return %y: <3 x 5 x f32>
}
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A library returning a dense literal of each element type, and one adding one to its
    argument (the literal stays in the host, read by the add's kernel)."""
    uses = {name: tensor_literal(a, type_of(name)).use_text() for name, a in ARRAYS.items()}
    text = returning(uses)
    text += f"""
func @plus: (<3 x 5 x f32>) -> <3 x 5 x f32> {{
'entry(%x: <3 x 5 x f32>):
    %w = literal {uses["f32"]}
    %y = multiply %x: <3 x 5 x f32>, %w: <3 x 5 x f32>
    %z = add %y: <3 x 5 x f32>, %w: <3 x 5 x f32>
    return %z: <3 x 5 x f32>
}}
"""
    module = parse_module(text)
    with dlvm.load(ir_library(text, "dense", tmp_path_factory.mktemp("dense"))) as lib:
        yield module, lib


@pytest.mark.parametrize("name", list(ARRAYS))
def test_a_host_dense_literal_is_what_the_interpreter_reads(host, name):
    module, lib = host
    got = getattr(lib, name)()
    assert got.dtype == ARRAYS[name].dtype
    np.testing.assert_array_equal(got, run_function(module, name, []))


def test_kernels_read_a_host_dense_literal(host):
    module, lib = host
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(lib.plus(x), run_function(module, "plus", [x]))


def test_a_kernel_holding_a_dense_literal_reads_it(tmp_path):
    weights = tensor_literal(ARRAYS["f32"], type_of("f32")).use_text()
    text = KERNEL.replace("WEIGHTS", weights)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    with dlvm.load(ir_library(text, "kernel", tmp_path)) as lib:
        np.testing.assert_array_equal(lib.shift(x), x + ARRAYS["f32"])


def test_a_64_mb_dense_literal_builds_in_seconds(tmp_path):
    """16 Mi f32 values, one constant of 64 MB: about 5 s on two shared cores, parsing the
    128 MB of hex included (a nested literal of one element each could not be built)."""
    n = 1 << 24
    values = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    use = tensor_literal(values, TensorType((n,), DATA_TYPES["f32"]))
    start = time.perf_counter()
    path = ir_library(returning({"w": use.use_text()}), "big", tmp_path)
    seconds = time.perf_counter() - start
    with dlvm.load(path) as lib:
        np.testing.assert_array_equal(lib.w(), values)
    assert seconds < 60, f"a 64 MB literal took {seconds:.1f} s to build"


def test_a_cuda_kernel_holding_a_dense_literal_reads_it_and_assembles(tmp_path):
    """Run by the emulator of the CUDA execution model, and as PTX accepted by ptxas."""
    text = KERNEL.replace("WEIGHTS", tensor_literal(ARRAYS["f32"], type_of("f32")).use_text())
    module = schedule(parse_module(text, "kernel.dl"), cuda=True)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    got = EmulatedInterpreter(module, Emulator(module, tmp_path)).run("shift", [x])
    np.testing.assert_array_equal(got, x + ARRAYS["f32"])
    assembly, _ = ptx(module)
    check_ptx(assembly)


def test_a_host_dense_literal_keeps_its_entry_on_the_cpu():
    """Compute generation leaves a dense literal in the host function (one constant there,
    whichever kernels read it): a device plan has no upload of constants, so it runs on the
    CPU."""
    text = returning({"w": tensor_literal(ARRAYS["f32"], type_of("f32")).use_text()})
    module = schedule(parse_module(text), cuda=True)
    (host,) = [f for f in module.functions if not f.compute]
    assert [i.opcode for i in host.instructions()] == ["literal", "return"]
    with pytest.raises(NotPlannable, match="'literal' runs on the CPU"):
        device_plan(host, {})


def test_a_dense_literal_counts_against_the_static_data_limit(tmp_path, capsys, monkeypatch):
    """Its bytes are static data, held to the 1 GiB limit (here lowered to 32 bytes, as a
    literal past 1 GiB would take gigabytes to write out) with a located error."""
    monkeypatch.setattr(static_data, "MAX_STATIC_BYTES", 32)
    use = tensor_literal(np.zeros(9), TensorType((9,), DATA_TYPES["f32"]))
    src = tmp_path / "m.dl"
    src.write_text(returning({"w": use.use_text()}))
    assert dlc.main([str(src), "--emit", "llvm", "-o", str(tmp_path / "m.ll")]) == 1
    err = capsys.readouterr().err
    assert "m.dl:6:5: in @w, literal: a dense literal <9 x f32>: 36 bytes, more than" in err
    assert "Traceback" not in err

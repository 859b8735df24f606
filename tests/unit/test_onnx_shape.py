"""Layout and shape operators (Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Concat, Split,
Slice, Expand, Pad, Tile, Gather) and folding at import, against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, model, normal, single  # noqa: E402

X = normal(2, 3, 4)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis):
    check(single("Flatten", {"x": X}, axis=axis), {"x": X})


@pytest.mark.parametrize("shape", [(6, 4), (0, -1), (-1,), (2, 0, 2, 2)])
def test_reshape_with_zero_and_minus_one(shape):
    check(single("Reshape", {"x": X}, {"shape": i64(*shape)}), {"x": X})


@pytest.mark.parametrize("perm", [None, (0, 2, 1), (1, 0, 2), (2, 0, 1)])
def test_transpose(perm):
    attrs = {} if perm is None else {"perm": list(perm)}
    check(single("Transpose", {"x": X}, **attrs), {"x": X})


def test_squeeze_and_unsqueeze_before_and_after_opset_13():
    x = normal(2, 1, 3, 1)
    check(single("Squeeze", {"x": x}, {"axes": i64(1, -1)}, opset=13), {"x": x})
    check(single("Squeeze", {"x": x}, opset=11, axes=[1]), {"x": x})
    check(single("Squeeze", {"x": x}, opset=13), {"x": x})
    check(single("Unsqueeze", {"x": X}, {"axes": i64(0, -1)}, opset=13), {"x": X})
    check(single("Unsqueeze", {"x": X}, opset=11, axes=[1]), {"x": X})


def test_concat_and_split():
    a, b = normal(2, 3, 4, seed=1), normal(2, 5, 4, seed=2)
    check(single("Concat", {"a": a, "b": b}, axis=1), {"a": a, "b": b})
    check(single("Split", {"x": b}, {"split": i64(2, 3)}, opset=13, outputs=2, axis=1), {"x": b})
    check(single("Split", {"x": X}, opset=18, outputs=2, axis=-1, num_outputs=2), {"x": X})


def test_an_empty_piece_of_a_split_adds_nothing_to_a_concat():
    x = normal(2, 5)
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["a", "empty"], axis=1),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Concat", ["r", "empty"], ["y"], axis=1),
    ]
    check(model(nodes, {"x": x}, ["y"], {"sizes": i64(5, 0)}, opset=18), {"x": x})


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ((1,), (3,), (1,), (1,)),
        ((0, 1), (2, 4), (0, 2), (1, 1)),
        ((-1,), (-100,), (2,), (-1,)),  # reversed
        ((0,), (4,), (2,), (2,)),
        ((1,), (1000,), (-1,), (1,)),  # clamped
    ],
)
def test_slice(starts, ends, axes, steps):
    inits = {"s": i64(*starts), "e": i64(*ends), "a": i64(*axes), "t": i64(*steps)}
    check(single("Slice", {"x": X}, inits), {"x": X})


def test_slice_before_opset_10():
    check(single("Slice", {"x": X}, opset=9, starts=[1], ends=[3], axes=[2]), {"x": X})


def test_expand_tile_pad():
    x = normal(3, 1)
    check(single("Expand", {"x": x}, {"shape": i64(2, 3, 4)}), {"x": x})
    check(single("Tile", {"x": x}, {"repeats": i64(2, 3)}), {"x": x})
    pads = {"pads": i64(1, 0, 2, 3), "value": np.array(1.5, np.float32)}
    check(single("Pad", {"x": x}, pads, opset=13), {"x": x})


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes_that_read_the_tensor(mode):
    x = normal(3, 4)
    pads = {"pads": i64(2, 0, 1, 5)}  # more than an axis holds
    check(single("Pad", {"x": x}, pads, opset=19, mode=mode), {"x": x})
    check(single("Pad", {"x": x}, opset=2, mode=mode, pads=[1, 3, 0, 2]), {"x": x})


def test_gather_of_known_and_computed_indices():
    table = normal(5, 3)
    check(single("Gather", {"x": table}, {"i": i64(4, -1, 0)}, axis=0), {"x": table})
    check(single("Gather", {"x": table}, {"i": np.array(2, np.int64)}, axis=1), {"x": table})
    ids = np.array([[1, 4], [0, 0]], np.int32)
    check(single("Gather", {"x": table, "i": ids}, axis=0), {"x": table, "i": ids})


def test_shape_computations_fold_away():
    # Reshape(x, Concat(Shape(x)[0:1], [-1])): what exporters emit for x.view(x.size(0), -1).
    x = normal(2, 3, 4)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node(
            "ConstantOfShape", ["target2"], ["ones"], value=helper.make_tensor("v", 1, [1], [1.0])
        ),
        helper.make_node("Add", ["y", "ones"], ["z"]),
    ]
    inits = {"zero": np.array(0, np.int64), "axes": i64(0), "minus": i64(-1), "target2": i64(2, 12)}
    imp = check(model(nodes, {"x": x}, ["z"], inits, opset=13), {"x": x})
    ops = [inst.opcode for inst in imp.function.blocks[0].instructions]
    assert ops == ["shapeCast", "literal", "add", "literal", "return"]


def test_gather_of_negative_computed_indices():
    table = normal(5, 3)
    ids = np.array([-1, 0, -5], np.int64)
    check(single("Gather", {"x": table, "i": ids}, axis=0), {"x": table, "i": ids})


@pytest.mark.parametrize(
    "attrs", [{}, {"reverse": 1}, {"exclusive": 1}, {"reverse": 1, "exclusive": 1}]
)
def test_cumsum(attrs):
    check(single("CumSum", {"x": X}, {"axis": np.array(1, np.int64)}, **attrs), {"x": X})


@pytest.mark.parametrize("upper, k", [(1, 0), (0, 0), (1, 1), (0, -1)])
def test_trilu(upper, k):
    check(single("Trilu", {"x": X}, {"k": np.array(k, np.int64)}, upper=upper), {"x": X})


def test_an_empty_result_is_refused_as_a_diagnostic():
    from dlvm.diagnostics import DiagnosticError
    from dlvm.onnx import import_model

    m = model([helper.make_node("Shape", ["x"], ["y"], start=2, end=1)], {"x": X}, ["y"], opset=15)
    with pytest.raises(DiagnosticError, match="an output: an empty tensor"):
        import_model(m)


RESIZE = [
    ("nearest", "asymmetric", "floor", {"scales": np.array([1, 1, 2, 2], np.float32)}),
    (
        "nearest",
        "half_pixel",
        "round_prefer_ceil",
        {"scales": np.array([1, 1, 0.5, 1.5], np.float32)},
    ),
    ("linear", "half_pixel", None, {"scales": np.array([1, 1, 2, 3], np.float32)}),
    ("linear", "align_corners", None, {"sizes": i64(2, 3, 5, 3)}),
    ("linear", "pytorch_half_pixel", None, {"sizes": i64(2, 3, 1, 7)}),
]


@pytest.mark.parametrize("mode, transform, rounding, given", RESIZE)
def test_resize(mode, transform, rounding, given):
    x = normal(2, 3, 4, 5)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    if rounding:
        attrs["nearest_mode"] = rounding
    inputs = ["x", "", "scales" if "scales" in given else "", "sizes" if "sizes" in given else ""]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    check(model([node], {"x": x}, ["y"], given, opset=19), {"x": x})


def test_folding_runs_each_operator_at_the_models_opset():
    # Unsqueeze with its axes an attribute exists only before opset 13: a Constant's value
    # unsqueezed at opset 9 must fold as opset 9 defines it.
    x = normal(3, 1, 1)
    value = helper.make_tensor("v", 1, [3], [1.0, 2.0, 3.0])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=value),
        helper.make_node("Unsqueeze", ["c"], ["c3"], axes=[1, 2]),
        helper.make_node("Add", ["x", "c3"], ["y"]),
    ]
    imp = check(model(nodes, {"x": x}, ["y"], opset=9), {"x": x})
    assert imp.params == []


def test_cast_like_to_a_computed_tensors_type_folds():
    # Attention's function body pads its mask with CastLike(-inf, the mask): Pad's value must
    # be known at import, and CastLike reads only the mask's element type.
    x = normal(2, 3)
    fill = helper.make_tensor("fill", 11, [], [-np.inf])  # a double
    nodes = [
        helper.make_node("Constant", [], ["fill"], value=fill),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("CastLike", ["fill", "r"], ["value"]),
        helper.make_node("Pad", ["r", "pads", "value"], ["y"]),
    ]
    check(model(nodes, {"x": x}, ["y"], {"pads": i64(0, 0, 0, 2)}, opset=19), {"x": x})


def test_folding_infers_shapes_again_where_onnx_stops(monkeypatch):
    # x.view(n, 4, d // 4) and then a view of that by its own shape: ONNX's data propagation
    # stops at the Div, so the second Shape waits for the shapes inferred again.
    from dlvm.onnx import fold

    calls = []
    real = fold._infer_again
    monkeypatch.setattr(fold, "_infer_again", lambda *a: calls.append(1) or real(*a))
    x = normal(2, 12)
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["rows"], axis=0),
        n("Gather", ["s", "one"], ["cols"], axis=0),
        n("Div", ["cols", "four"], ["per"]),
        n("Unsqueeze", ["rows", "axes"], ["rows1"]),
        n("Unsqueeze", ["per", "axes"], ["per1"]),
        n("Concat", ["rows1", "four1", "per1"], ["target"], axis=0),
        n("Reshape", ["x", "target"], ["r"]),
        n("Shape", ["r"], ["s2"]),
        n("Gather", ["s2", "two"], ["last"], axis=0),
        n("Unsqueeze", ["last", "axes"], ["last1"]),
        n("Concat", ["minus", "last1"], ["target2"], axis=0),
        n("Reshape", ["r", "target2"], ["y"]),
    ]
    scalars = {"zero": 0, "one": 1, "two": 2, "four": 4}
    inits = {k: np.array(v, np.int64) for k, v in scalars.items()}
    inits |= {"axes": i64(0), "four1": i64(4), "minus": i64(-1)}
    imp = check(model(nodes, {"x": x}, ["y"], inits, opset=13), {"x": x})
    assert imp.outputs[0][1].shape == (8, 3)
    assert calls

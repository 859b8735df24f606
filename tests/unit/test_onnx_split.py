"""A zero-size piece of a Split (RotaryEmbedding's expansion makes one): left out of the Concat
that reads it, refused as a located diagnostic anywhere else."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import helper  # noqa: E402
from onnxlib import check, model, normal  # noqa: E402


def test_a_zero_size_split_piece_is_left_out_of_a_concat():
    x = normal(2, 4)
    sizes = {"sizes": np.array([4, 0], np.int64)}
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["a", "empty"], axis=1),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Concat", ["b", "empty"], ["y"], axis=1),
    ]
    check(model(nodes, {"x": x}, ["y"], sizes, opset=18), {"x": x})


def test_an_empty_split_piece_as_an_output_is_refused():
    from dlvm.diagnostics import DiagnosticError
    from dlvm.onnx import import_model

    x = normal(2, 4)
    sizes = {"sizes": np.array([4, 0], np.int64)}
    node = helper.make_node("Split", ["x", "sizes"], ["a", "empty"], axis=1)
    with pytest.raises(DiagnosticError, match="tensor 'empty' is empty"):
        import_model(model([node], {"x": x}, ["a", "empty"], sizes, opset=18))

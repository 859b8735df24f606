"""Attention, RotaryEmbedding, SwiGLU, CausalConvWithState and LinearAttention imported and run
against ONNX's reference evaluator, through the interpreter and one compiled library, and what
their handlers refuse."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from irlib import ir_library  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnxlib import check, model, normal, run  # noqa: E402

import dlvm  # noqa: E402
from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.ir import module_text  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

N = helper.make_node


def attention(inputs: dict[str, np.ndarray], outputs: int = 1, opset: int = 23, **attrs):
    """A model of one Attention node; inputs by name in the operator's order ("" for none)."""
    order = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
    names = [n if n in inputs else "" for n in order]
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "present_key", "present_value", "qk"][:outputs]
    node = N("Attention", names, outs, name="attn", **attrs)
    return model([node], inputs, outs, opset=opset)


def qkv(b=2, hq=4, hk=2, sq=3, skv=5, d=8, dv=6, dtype=np.float32):
    return {
        "Q": normal(b, hq, sq, d, dtype=dtype, seed=1),
        "K": normal(b, hk, skv, d, dtype=dtype, seed=2),
        "V": normal(b, hk, skv, dv, dtype=dtype, seed=3),
    }


def compiled_matches(m, inputs: dict[str, np.ndarray], tmp_path, exact: bool = False) -> None:
    """m built into a library whose every output matches the reference evaluator's."""
    imp = import_model(m, name="f")
    expected = ReferenceEvaluator(m).run(None, inputs)
    args = [inputs[name] for name, _ in imp.inputs] + [p.value for p in imp.params]
    with dlvm.load(ir_library(module_text(imp.module), "f", tmp_path)) as lib:
        got = lib.f(*args)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        if exact:
            np.testing.assert_array_equal(np.asarray(g), e)
        else:
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-6)


def test_attention_4d_with_grouped_heads_causal_and_every_output(tmp_path):
    inputs = qkv() | {
        "past_key": normal(2, 2, 2, 8, seed=4),
        "past_value": normal(2, 2, 2, 6, seed=5),
    }
    m = attention(inputs, outputs=4, is_causal=1, qk_matmul_output_mode=2)
    check(m, inputs)
    compiled_matches(m, inputs, tmp_path)


def test_attention_3d_heads_scale_and_softcap():
    inputs = {
        "Q": normal(2, 3, 16, seed=1),
        "K": normal(2, 4, 8, seed=2),
        "V": normal(2, 4, 6, seed=3),
    }
    m = attention(inputs, q_num_heads=4, kv_num_heads=2, scale=0.3, softcap=1.5)
    check(m, inputs)


@pytest.mark.parametrize("mode", [0, 1, 3])
def test_attention_short_bool_mask_is_padded_and_a_masked_row_is_zero(mode):
    inputs = qkv(hq=2)
    mask = np.ones((3, 4), dtype=bool)  # 4 of the 5 keys: the last one is masked
    mask[1] = False  # query 1 attends nothing: its output is zeros
    inputs["attn_mask"] = mask
    m = attention(inputs, outputs=4, qk_matmul_output_mode=mode, softcap=2.0)
    y = run(check(m, inputs), inputs)[0]
    assert np.all(y[:, :, 1] == 0) and np.all(np.abs(y[:, :, 0]) > 0)


def test_attention_float_mask_broadcast_and_softmax_precision():
    inputs = qkv(hq=2, dtype=np.float16)
    inputs["attn_mask"] = normal(2, 1, 3, 5, dtype=np.float16, seed=6)
    m = attention(inputs, outputs=4, softmax_precision=TensorProto.FLOAT, qk_matmul_output_mode=3)
    check(m, inputs, rtol=0, atol=0)


def test_attention_padded_keys_with_a_causal_window():
    inputs = qkv(b=3, sq=2, skv=6)
    inputs["nonpad_kv_seqlen"] = np.array([6, 4, 1], dtype=np.int64)
    m = attention(inputs, opset=25, is_causal=1, left_window_size=2, right_window_size=0)
    check(m, inputs)


def test_attention_float16_compiled_is_the_references_to_the_bit(tmp_path):
    """An f16 product compiled sums in f16; the reference (NumPy) sums in f32 and rounds once,
    which the importer's f32 product does too."""
    inputs = qkv(hq=2, hk=2, skv=40, d=64, dv=16, dtype=np.float16)
    compiled_matches(attention(inputs), inputs, tmp_path, exact=True)


def test_rotary_embedding_interleaved_part_with_position_ids(tmp_path):
    inputs = {
        "x": normal(2, 4, 3, 8, seed=1),  # [batch, heads, sequence, size]
        "cos": normal(10, 3, seed=2),
        "sin": normal(10, 3, seed=3),
        "ids": np.array([[0, 4, 9], [3, 2, 1]], dtype=np.int64),
    }
    node = N(
        "RotaryEmbedding",
        ["x", "cos", "sin", "ids"],
        ["y"],
        interleaved=1,
        rotary_embedding_dim=6,
    )
    m = model([node], inputs, ["y"], opset=23)
    check(m, inputs)
    compiled_matches(m, inputs, tmp_path)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_3d_halves_without_position_ids(interleaved):
    inputs = {"x": normal(2, 3, 16, seed=1), "cos": normal(2, 3, 4), "sin": normal(2, 3, 4)}
    node = N("RotaryEmbedding", ["x", "cos", "sin"], ["y"], num_heads=2, interleaved=interleaved)
    check(model([node], inputs, ["y"], opset=23), inputs)


def test_swiglu(tmp_path):
    inputs = {"a": normal(3, 5, seed=1) * 4, "b": normal(3, 5, seed=2)}
    m = model([N("SwiGLU", ["a", "b"], ["y"], alpha=0.7)], inputs, ["y"], opset=28)
    check(m, inputs)
    compiled_matches(m, inputs, tmp_path)


@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_with_state(activation, tmp_path):
    inputs = {
        "x": normal(2, 3, 5, seed=1),
        "w": normal(3, 1, 4, seed=2),
        "b": normal(3, seed=3),
        "past": normal(2, 3, 3, seed=4),
    }
    node = N("CausalConvWithState", ["x", "w", "b", "past"], ["y", "state"], activation=activation)
    m = model([node], inputs, ["y", "state"], opset=27)
    check(m, inputs)
    compiled_matches(m, inputs, tmp_path)


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_every_rule_with_grouped_heads(rule, tmp_path):
    inputs = {
        "q": normal(2, 3, 16, seed=1),
        "k": normal(2, 3, 8, seed=2),
        "v": normal(2, 3, 6, seed=3),
        "past": normal(2, 2, 4, 3, seed=4),
    }
    names = ["q", "k", "v", "past"]
    if rule in ("gated", "gated_delta"):
        inputs["decay"] = -np.abs(normal(2, 3, 8, seed=5))
        names.append("decay")
    if rule in ("delta", "gated_delta"):
        inputs["beta"] = np.abs(normal(2, 3, 1, seed=6))
        names += [""] * (5 - len(names)) + ["beta"]
    node = N(
        "LinearAttention",
        names,
        ["y", "state"],
        q_num_heads=4,
        kv_num_heads=2,
        update_rule=rule,
    )
    m = model([node], inputs, ["y", "state"], opset=27)
    check(m, inputs, rtol=1e-5, atol=1e-5)
    if rule == "gated_delta":
        compiled_matches(m, inputs, tmp_path)


def messages(e: pytest.ExceptionInfo[DiagnosticError]) -> list[str]:
    return [d.render() for d in e.value.diagnostics]


def test_refused_attributes_are_located_diagnostics():
    q = normal(1, 2, 8)
    nodes = [
        N("Attention", ["q", "q", "q"], ["a"], name="attn", softmax_precision=TensorProto.INT32),
        N(
            "LinearAttention",
            ["a", "a", "a"],
            ["y", "s"],
            name="lin",
            update_rule="quadratic",
            q_num_heads=3,
            kv_num_heads=2,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, q.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, q.shape)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert messages(e) == [
        "error: <onnx model>: node 'attn' (Attention, opset 27): not supported: "
        "softmax_precision=INT32 (a float type only)",
        "error: <onnx model>: node 'attn' (Attention, opset 27): not supported: "
        "3-D inputs without q_num_heads and kv_num_heads",
        "error: <onnx model>: node 'lin' (LinearAttention, opset 27): not supported: "
        "update_rule=quadratic (one of linear, gated, delta, gated_delta)",
        "error: <onnx model>: node 'lin' (LinearAttention, opset 27): not supported: "
        "q_num_heads not a multiple of kv_num_heads",
    ]


def test_a_kernel_of_one_is_refused_for_its_empty_state():
    inputs = {"x": normal(1, 2, 4), "w": normal(2, 1, 1)}
    node = N("CausalConvWithState", ["x", "w"], ["y", "state"], name="conv")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2, 4))],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert messages(e) == [
        "error: <onnx model>: node 'conv' (CausalConvWithState, opset 27): not supported: a "
        "kernel of length 1, whose present_state is empty (DLVM IR has none)"
    ]


PREVIEW = [helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]


def flex(inputs: dict[str, np.ndarray], **attrs):
    """A model of one FlexAttention node (the ai.onnx.preview domain) at opset 26."""
    node = N(
        "FlexAttention", ["Q", "K", "V"], ["Y"], name="flex", domain="ai.onnx.preview", **attrs
    )
    elem = helper.np_dtype_to_tensor_dtype(inputs["Q"].dtype)
    (b, h, rows, _), dv = inputs["Q"].shape, inputs["V"].shape[3]
    graph = helper.make_graph(
        [node],
        "flex",
        [helper.make_tensor_value_info(n, elem, v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("Y", elem, (b, h, rows, dv))],
    )
    return helper.make_model(graph, opset_imports=PREVIEW)


def test_flex_attention_with_a_causal_score_mod_graph(tmp_path):
    """score_mod: scores where the query's index ≥ the key's, −∞ elsewhere, the mask computed
    from Shape and Range of the scores, which fold at import."""
    consts = {
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "two": np.array(2, np.int64),
        "three": np.array(3, np.int64),
        "rows": np.array([1, 1, -1, 1], np.int64),
        "cols": np.array([1, 1, 1, -1], np.int64),
        "ninf": np.array(-np.inf, np.float32),
    }
    body = [
        N("Shape", ["s"], ["shape"]),
        N("Gather", ["shape", "two"], ["L"], axis=0),
        N("Gather", ["shape", "three"], ["S"], axis=0),
        N("Range", ["zero", "L", "one"], ["i"]),
        N("Reshape", ["i", "rows"], ["i4"]),
        N("Range", ["zero", "S", "one"], ["j"]),
        N("Reshape", ["j", "cols"], ["j4"]),
        N("GreaterOrEqual", ["i4", "j4"], ["keep"]),
        N("Where", ["keep", "s", "ninf"], ["out"]),
    ]
    score_mod = helper.make_graph(
        body,
        "causal",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [
            helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape, v.ravel())
            for n, v in consts.items()
        ],
    )
    inputs = qkv(sq=4, skv=4)
    m = flex(inputs, score_mod=score_mod, scale=0.2)
    check(m, inputs)
    compiled_matches(m, inputs, tmp_path)


def test_flex_attention_float16_sums_in_float32():
    inputs = qkv(hq=4, hk=1, dtype=np.float16)
    check(flex(inputs), inputs, rtol=1e-3, atol=1e-3)


def test_flex_attention_refuses_a_graph_with_an_unsupported_node():
    prob_mod = helper.make_graph(
        [N("NonZero", ["p"], ["out"])],
        "nonzero",
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    m = flex(qkv(), prob_mod=prob_mod)
    with pytest.raises(DiagnosticError) as e:
        import_model(m)
    assert messages(e) == [
        "error: <onnx model>: node 'flex' (ai.onnx.preview.FlexAttention, opset 1): not "
        "supported: prob_mod: node #0 (output 'out') (NonZero, opset 26): NonZero is not supported "
        "there"
    ]

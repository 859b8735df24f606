"""TfIdfVectorizer over integer tokens (modes TF, IDF, TFIDF, with and without weights, skips,
unigrams with bigrams, one row or a batch) against ONNX's reference evaluator, and a compiled
build; a pool of strings is refused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")  # an optional extra (telc[onnx]); `make` installs it

from onnx import TensorProto, helper  # noqa: E402
from onnxlib import check, check_compiled, run, single  # noqa: E402

from dlvm.diagnostics import DiagnosticError  # noqa: E402
from dlvm.onnx import import_model  # noqa: E402

TOKENS = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int64)
POOL = {
    "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
    "ngram_counts": [0, 4],
    "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
}


GRAMS = [((1, 2), 0), ((2, 2), 2), ((1, 1), 3)]


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skips", GRAMS)
def test_tfidf(mode, grams, skips):
    attrs = dict(POOL, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1],
                 max_skip_count=skips, weights=[0.5, 1, 2, 1, 0.25, 3, 1])  # fmt: skip
    check(single("TfIdfVectorizer", {"x": TOKENS}, opset=9, **attrs), {"x": TOKENS})


@pytest.mark.parametrize("grams,skips", GRAMS)
def test_tfidf_without_weights(grams, skips):
    """The reference evaluator fails on IDF and TFIDF without weights: they are checked
    against its TF counts (IDF: 1 where an n-gram occurs; TFIDF: the counts)."""
    attrs = dict(POOL, min_gram_length=grams[0], max_gram_length=grams[1],
                 max_skip_count=skips)  # fmt: skip
    (counts,) = run(check(single("TfIdfVectorizer", {"x": TOKENS}, opset=9, mode="TF", **attrs),
                          {"x": TOKENS}), {"x": TOKENS})  # fmt: skip
    for mode, want in (("IDF", (counts > 0).astype(np.float32)), ("TFIDF", counts)):
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, **attrs)
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.INT64, TOKENS.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, counts.shape)],
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
        np.testing.assert_array_equal(run(import_model(m), {"x": TOKENS})[0], want)


def test_tfidf_of_one_row_compiled(tmp_path):
    x = TOKENS[1].astype(np.int32)
    attrs = dict(POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=5)
    check_compiled(single("TfIdfVectorizer", {"x": x}, opset=9, **attrs), {"x": x}, tmp_path)


def test_a_pool_of_strings_is_refused():
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
                 pool_strings=["a", "b"], ngram_counts=[0], ngram_indexes=[0, 1])  # fmt: skip
    with pytest.raises(DiagnosticError) as e:
        import_model(single("TfIdfVectorizer", {"x": TOKENS}, opset=9, **attrs))
    assert "(TfIdfVectorizer, opset 9): not supported: a pool of strings" in str(e.value)

"""Checkpoints against the reference implementation: a corpus of well-formed and malformed
safetensors files (the reference's leniencies and its rules on the data section among them),
each loaded by the `safetensors` package and into a model of every dtype (tests/unit/modellib.py):
the model loads exactly the files the reference accepts that hold its tensors, with the
reference's values, and a failed load changes nothing (tests/unit/checkpoints.py)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from checkpoints import check_load, join, reference, split
from modellib import zoo_library

import dlvm


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo_library(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
def base(library: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A checkpoint of a trained model of seed 5: what every case starts from."""
    path = tmp_path_factory.mktemp("base") / "base.safetensors"
    with dlvm.load(library, seed=5) as m:
        m.entries["train"](np.array([1, 2, 3], np.float32))
        m.save(path)
    return path.read_bytes()


Edit = Callable[[dict[str, Any], bytes], bytes]


def header_edit(change: Callable[[dict[str, Any]], None]) -> Edit:
    """A file whose header `change` edited, with the same data."""

    def edit(header: dict[str, Any], data: bytes) -> bytes:
        change(header)
        return join(header, data)

    return edit


def text_edit(old: str, new: str, count: int = 1) -> Edit:
    """A file whose header text has `old` replaced by `new`."""

    def edit(header: dict[str, Any], data: bytes) -> bytes:
        text = json.dumps(header, separators=(",", ":"))
        assert old in text, old
        return join(text.replace(old, new, count), data)

    return edit


def tensor_json(header: dict[str, Any], name: str) -> str:
    return json.dumps({name: header[name]}, separators=(",", ":"))[1:-1]


def with_tensor_text(name: str, text: str) -> Edit:
    """A file whose tensor `name` is written as the raw JSON `text`."""

    def edit(header: dict[str, Any], data: bytes) -> bytes:
        whole = json.dumps(header, separators=(",", ":"))
        return join(whole.replace(tensor_json(header, name), f'"{name}":{text}'), data)

    return edit


def unknown_key(value: str) -> Edit:
    """A file whose tensor W has another key, holding the raw JSON `value`."""
    return text_edit('"W":{', f'"W":{{"extra":{value},')


def move(name: str, delta: int) -> Edit:
    """A file whose tensor `name` has its data_offsets moved by `delta` bytes."""

    def change(header: dict[str, Any]) -> None:
        header[name]["data_offsets"] = [o + delta for o in header[name]["data_offsets"]]

    return header_edit(change)


def drop(*names: str) -> Edit:
    """A file without tensors `names`: the others' data moved up to stay back to back."""

    def edit(header: dict[str, Any], data: bytes) -> bytes:
        kept = {k: v for k, v in header.items() if k == "__metadata__" or k not in names}
        out, chunks = {}, []
        at = 0
        for k, v in kept.items():
            if k != "__metadata__":
                begin, end = v["data_offsets"]
                chunks.append(data[begin:end])
                v = {**v, "data_offsets": [at, at + end - begin]}
                at += end - begin
            out[k] = v
        return join(out, b"".join(chunks))

    return edit


def retype(name: str, dtype: str, shape: list[int], data: bytes) -> Edit:
    """A file whose tensor `name` (the last in the data) is replaced by one of `dtype`."""

    def edit(header: dict[str, Any], old: bytes) -> bytes:
        begin, end = header[name]["data_offsets"]
        assert end == len(old), "the tensor must be last in the data"
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + len(data)]}
        return join(header, old[:begin] + data)

    return edit


def last(header: dict[str, Any]) -> str:
    """The tensor whose data comes last."""
    return max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])


def raw(make: Callable[[dict[str, Any], bytes, bytes], bytes]) -> Edit:
    """A file made from the header, the data and the whole base file."""
    return lambda header, data: make(header, data, join(header, data))


def reference_writer(header: dict[str, Any], data: bytes) -> bytes:
    """The same tensors written by the reference implementation (another layout)."""
    tensors = safetensors.numpy.load(join(header, data))
    return safetensors.numpy.save(dict(reversed(tensors.items())), metadata={"x": "\0"})


def two_tensors_share(header: dict[str, Any], data: bytes) -> bytes:
    """W_v (of W's size) given W's offsets: two tensors on the same bytes, a hole elsewhere."""
    header["W_v"]["data_offsets"] = list(header["W"]["data_offsets"])
    return join(header, data)


def move_all(header: dict[str, Any], data: bytes, delta: int) -> bytes:
    """Every tensor moved `delta` bytes on, after `delta` zero bytes: a hole at the start."""
    for k, v in header.items():
        if k != "__metadata__":
            v["data_offsets"] = [o + delta for o in v["data_offsets"]]
    return join(header, b"\0" * delta + data)


def bool_of(value: int) -> Edit:
    """A file whose mask holds `value` in its first element."""

    def edit(header: dict[str, Any], data: bytes) -> bytes:
        begin = header["mask"]["data_offsets"][0]
        return join(header, data[:begin] + bytes([value]) + data[begin + 1 :])

    return edit


def misaligned_layout(header: dict[str, Any], data: bytes) -> bytes:
    """The tensors' data back to back in header order, whatever their alignment (c, of 3 bytes,
    before the floats)."""
    order = ["c", *(k for k in header if k not in ("__metadata__", "c"))]
    out, chunks, at = {"__metadata__": header["__metadata__"]}, [], 0
    for k in order:
        begin, end = header[k]["data_offsets"]
        chunks.append(data[begin:end])
        out[k] = {**header[k], "data_offsets": [at, at + end - begin]}
        at += end - begin
    return join(out, b"".join(chunks))


CASES: dict[str, Edit] = {
    "as saved": lambda h, d: join(h, d),
    "written by the reference": reference_writer,
    "parameters only": drop("W_v", "b_v", "__step__"),
    "without the step": drop("__step__"),
    "a parameter missing": drop("k"),
    "an extra tensor": lambda h, d: join(
        {**h, "zz": {"dtype": "U8", "shape": [1], "data_offsets": [len(d), len(d) + 1]}},
        d + b"\1",
    ),
    "a dtype the model does not have": lambda h, d: retype(last(h), "U8", [2], b"\0\0")(h, d),
    "the wrong dtype": header_edit(lambda h: h["n"].update(dtype="F16")),
    "the wrong shape": header_edit(lambda h: h["W"].update(shape=[2, 3])),
    "a scalar as [1]": header_edit(lambda h: h["k"].update(shape=[1])),
    # The data section.
    "a trailing byte": lambda h, d: join(h, d + b"\0"),
    "a missing byte": lambda h, d: join(h, d[:-1]),
    "two tensors on the same bytes": two_tensors_share,
    "a hole before the first tensor": lambda h, d: move_all(h, d, 4),
    "a tensor moved by 8 bytes": move("__step__", 8),
    "offsets reversed": header_edit(
        lambda h: h["c"].update(data_offsets=h["c"]["data_offsets"][::-1])
    ),
    "an empty tensor past the end": header_edit(
        lambda h: h["z"].update(data_offsets=[10**6, 10**6])
    ),
    "an empty tensor inside another": header_edit(lambda h: h["z"].update(data_offsets=[4, 4])),
    "misaligned data": misaligned_layout,
    # JSON the reference's serde_json accepts.
    "another key in a tensor": unknown_key('[{"a":null},true,false,-0,1.5e-3,"\\u0000"]'),
    "another key holding 1.7976931348623157e308": unknown_key("1.7976931348623157e308"),
    "another key holding 1.7976931348623158e308": unknown_key("1.7976931348623158e308"),
    "another key holding 1e400": unknown_key("1e400"),
    "another key holding 1e-400": unknown_key("1e-400"),
    "another key holding 0e99999999999": unknown_key("0e99999999999"),
    "another key holding 1e99999999999": unknown_key("1e99999999999"),
    "another key holding a 400-digit integer": unknown_key("1" * 400),
    "another key holding a 300-digit integer": unknown_key("1" * 300),
    "another key holding -9223372036854775809": unknown_key("-9223372036854775809"),
    "another key holding 01": unknown_key("01"),
    "another key holding 1.": unknown_key("1."),
    "another key holding [1,]": unknown_key("[1,]"),
    "another key holding a lone surrogate": unknown_key('"\\ud800"'),
    "another key holding 125 nested arrays": unknown_key("[" * 125 + "]" * 125),
    "another key holding 126 nested arrays": unknown_key("[" * 126 + "]" * 126),
    "another key holding invalid UTF-8": lambda h, d: join(
        json.dumps(h, separators=(",", ":")).encode().replace(b'"W":{', b'"W":{"x":"\xff",'), d
    ),
    "a key given twice": text_edit('"W":{"dtype":"F32"', '"W":{"dtype":"F32","dtype":"F32"'),
    "a tensor given twice, the last right": lambda h, d: join(
        "{"
        + tensor_json({"W": {**h["W"], "dtype": "I32"}}, "W")
        + ","
        + json.dumps(h, separators=(",", ":"))[1:],
        d,
    ),
    "a tensor given twice, the last wrong": lambda h, d: join(
        json.dumps(h, separators=(",", ":"))[:-1]
        + ","
        + tensor_json({"W": {**h["W"], "dtype": "I32"}}, "W")
        + "}",
        d,
    ),
    "a tensor given twice, the first malformed": lambda h, d: join(
        '{"W":{"dtype":"F99"},' + json.dumps(h, separators=(",", ":"))[1:], d
    ),
    "a tensor as an array": lambda h, d: with_tensor_text(
        "W", json.dumps([h["W"]["dtype"], h["W"]["shape"], h["W"]["data_offsets"]])
    )(h, d),
    "a tensor as a short array": lambda h, d: with_tensor_text(
        "W", json.dumps([h["W"]["dtype"], h["W"]["shape"]])
    )(h, d),
    "a dtype as an object": text_edit('"W":{"dtype":"F32"', '"W":{"dtype":{"F32":null}'),
    "a dtype as an object with a value": text_edit('"W":{"dtype":"F32"', '"W":{"dtype":{"F32":0}'),
    "a dtype in lower case": text_edit('"W":{"dtype":"F32"', '"W":{"dtype":"f32"'),
    "an unknown dtype": text_edit('"W":{"dtype":"F32"', '"W":{"dtype":"F33"'),
    "metadata null": header_edit(lambda h: h.update(__metadata__=None)),
    "metadata with a NUL": header_edit(lambda h: h.update(__metadata__={"a\0": "\0"})),
    "metadata of a number": header_edit(lambda h: h.update(__metadata__={"a": 1})),
    "metadata twice": lambda h, d: join(
        '{"__metadata__":{},' + json.dumps(h, separators=(",", ":"))[1:], d
    ),
    "no metadata": header_edit(lambda h: h.pop("__metadata__")),
    "a shape of floats": text_edit('"shape":[3,2]', '"shape":[3.0,2]'),
    "a shape of -0": text_edit('"shape":[3,2]', '"shape":[-0,2]'),
    "a shape with an exponent": text_edit('"shape":[3,2]', '"shape":[3e0,2]'),
    "a shape with a leading zero": text_edit('"shape":[3,2]', '"shape":[03,2]'),
    "a shape past 64 bits": text_edit('"shape":[3,2]', '"shape":[18446744073709551619,2]'),
    "a trailing comma": text_edit('"shape":[3,2]', '"shape":[3,2,]'),
    "leading whitespace": lambda h, d: join(" \n\t\r" + json.dumps(h), d),
    "trailing whitespace": lambda h, d: join(json.dumps(h) + " \n\t\r", d),
    "a trailing NUL": lambda h, d: join(json.dumps(h) + "\0", d),
    "a form feed": lambda h, d: join(json.dumps(h) + "\f", d),
    "a byte order mark": lambda h, d: join(b"\xef\xbb\xbf" + json.dumps(h).encode(), d),
    "an escaped name": text_edit('"W":{', '"\\u0057":{'),
    "an escaped key": text_edit('"W":{"dtype"', '"W":{"\\u0064type"'),
    "a NUL in a name": text_edit('"W":{', '"W\\u0000":{'),
    # Broken files.
    "empty": raw(lambda h, d, whole: b""),
    "a header length of 0": raw(lambda h, d, whole: struct.pack("<Q", 0)),
    "a header length past the file": raw(
        lambda h, d, whole: struct.pack("<Q", len(whole)) + whole[8:]
    ),
    "a header length of 10^8 + 1": raw(
        lambda h, d, whole: struct.pack("<Q", 10**8 + 1) + whole[8:]
    ),
    "a header length of 2^64 - 1": raw(lambda h, d, whole: b"\xff" * 8 + whole[8:]),
    "cut in the header": raw(lambda h, d, whole: whole[:40]),
    "cut in the data": raw(lambda h, d, whole: whole[:-5]),
    "not JSON": lambda h, d: join("not json", d),
    "a JSON array": lambda h, d: join("[]", d),
    "a bool of 2": bool_of(2),
    "a bool of 1": bool_of(1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loads_what_the_reference_loads(
    case: str, library: Path, base: bytes, tmp_path: Path
) -> None:
    header, data = split(base)
    path = tmp_path / "case.safetensors"
    path.write_bytes(CASES[case](header, data))
    with dlvm.load(library, seed=9) as model:
        check_load(model, path, tmp_path / "scratch.safetensors")


def test_the_corpus_covers_both_outcomes(base: bytes, tmp_path: Path) -> None:
    """Of the corpus, the reference accepts some and rejects others (so neither side of the
    comparison is vacuous); the documented cases come out as the reference's rules say."""
    header, data = split(base)
    outcome = {}
    for case, edit in CASES.items():
        path = tmp_path / "case.safetensors"
        path.write_bytes(edit(json.loads(json.dumps(header)), data))
        outcome[case] = reference(path) is not None
    accepted = {c for c, ok in outcome.items() if ok}
    assert {
        "written by the reference",
        "another key in a tensor",
        "a tensor given twice, the last right",
        "a tensor as an array",
        "a dtype as an object",
        "metadata null",
        "misaligned data",
        "a bool of 2",
        "another key holding 125 nested arrays",
    } <= accepted
    assert (
        not {
            "a trailing byte",
            "two tensors on the same bytes",
            "a hole before the first tensor",
            "a tensor given twice, the first malformed",
            "another key holding 126 nested arrays",
            "another key holding 1.7976931348623158e308",
            "a header length of 10^8 + 1",
        }
        & accepted
    )

"""Fuzzing checkpoint loading: mutants of a model's checkpoint (bytes flipped, cut or inserted;
the header's JSON edited as text or as a structure: dtypes, shapes, offsets, other keys of any
JSON value, numbers serde_json may reject, tensors dropped, doubled or written as arrays; the
data moved, cut, padded or its bools set) are loaded into a model of every dtype and by the
reference implementation: each load is a clean error or a correct load, exactly when the
reference accepts the file and it holds the model's tensors, and a failed load changes nothing
(tests/unit/checkpoints.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from checkpoints import check_load, join, split
from fuzzing import fuzz_settings
from hypothesis import event, given
from hypothesis import strategies as st
from modellib import zoo_library

import dlvm

DTYPES = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64",
          "U64", "F8_E4M3", "C64", "f32", "F33", ""]  # fmt: skip
PUNCTUATION = b'{}[]:,"\\-+.0123456789eEtrufalsn \t\n\x00\x01\x7f\x80\xff'


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo_library(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="module")
def bases(library: Path, tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """Checkpoints to mutate: as the model saves one, and as the reference writes the same."""
    path = tmp_path_factory.mktemp("base") / "base.safetensors"
    with dlvm.load(library, seed=5) as m:
        m.entries["train"](np.array([1, 2, 3], np.float32))
        m.save(path)
    saved = path.read_bytes()
    tensors = safetensors.numpy.load(saved)
    return [saved, safetensors.numpy.save(dict(sorted(tensors.items())))]


# serde_json's numbers: any JSON number text, long ones and large exponents included.
NUMBER_TEXT = st.from_regex(
    r"-?(0|[1-9][0-9]{0,30}|[1-9][0-9]{290,420})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,12})?",
    fullmatch=True,
)
JSON_TEXT = st.recursive(
    st.one_of(
        st.sampled_from(
            [
                "null",
                "true",
                "false",
                '""',
                '"\\u0000"',
                '"\\ud800"',
                "01",
                "1.",
                "[1,]",
                "{}",
                "[]",
                "NaN",
                "-",
            ]
        ),  # fmt: skip
        NUMBER_TEXT,
        st.text(max_size=8).map(json.dumps),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(st.text(max_size=4).map(json.dumps), inner), max_size=3).map(
            lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"
        ),
        inner.map(lambda x: "[" * 40 + x + "]" * 40),
    ),
    max_leaves=8,
)


def tensor_names(header: dict[str, Any]) -> list[str]:
    return [k for k in header if k != "__metadata__"]


def text_of(header: dict[str, Any]) -> str:
    return json.dumps(header, separators=(",", ":"))


@st.composite
def structural(draw: st.DrawFn, header: dict[str, Any], data: bytes) -> tuple[Any, bytes]:
    """One edit of the header's structure or of the data; the header may come back as text."""
    names = tensor_names(header)
    name = draw(st.sampled_from(names))
    t = header[name]
    kind = draw(st.integers(0, 11))
    if kind == 0:
        t["dtype"] = draw(st.sampled_from(DTYPES))
    elif kind == 1:
        t["shape"] = draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 6, 2**63, 2**64 - 1]),
                                   max_size=3))  # fmt: skip
    elif kind == 2:
        begin, end = t["data_offsets"]
        delta = st.sampled_from([0, 0, -1, 1, -4, 4, 8, -8, 2**63])
        t["data_offsets"] = [max(0, begin + draw(delta)), max(0, end + draw(delta))]
    elif kind == 3:
        header.pop(name)
    elif kind == 4:  # another key of any JSON value
        text = text_of(header)
        head = json.dumps(name) + ":{"
        return text.replace(head, f"{head}{json.dumps(draw(st.text(max_size=6)))}:"
                            f"{draw(JSON_TEXT)},", 1), data  # fmt: skip
    elif kind == 5:  # the tensor again, before or after, maybe changed
        other = dict(t, dtype=draw(st.sampled_from([t["dtype"], "F32", "I8", "F99"])))
        extra = json.dumps({name: other}, separators=(",", ":"))[1:-1]
        text = text_of(header)
        return ("{" + extra + "," + text[1:] if draw(st.booleans())
                else text[:-1] + "," + extra + "}"), data  # fmt: skip
    elif kind == 6:  # the array form, and the dtype's object form (then no more edits)
        form: list[Any] = [t["dtype"], t["shape"], t["data_offsets"]]
        if draw(st.booleans()):
            form[0] = {t["dtype"]: None}
        objects = {"dtype": form[0], "shape": t["shape"], "data_offsets": t["data_offsets"]}
        header[name] = draw(st.sampled_from([form, form[:2], [*form, 0], objects]))
        return text_of(header), data
    elif kind == 7:
        header["__metadata__"] = draw(
            st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=3)),
                      st.dictionaries(st.text(max_size=3), st.integers(), min_size=1))
        )  # fmt: skip
    elif kind == 8:  # swap two tensors' places in the data: still back to back
        other = header[draw(st.sampled_from(names))]
        (a, b), (c, d) = sorted([t["data_offsets"], other["data_offsets"]])
        if b <= c:
            data = data[:a] + data[c:d] + data[b:c] + data[a:b] + data[d:]
            shift = (d - c) - (b - a)
            for v in header.values():
                if isinstance(v, dict) and "data_offsets" in v and b <= v["data_offsets"][0] < c:
                    v["data_offsets"] = [o + shift for o in v["data_offsets"]]
            moved_first = [a, a + d - c]
            moved_last = [d - (b - a), d]
            if t["data_offsets"] == [a, b]:
                t["data_offsets"], other["data_offsets"] = moved_last, moved_first
            else:
                other["data_offsets"], t["data_offsets"] = moved_last, moved_first
    elif kind == 9:
        data = draw(st.sampled_from([data + b"\0", data[:-1], data + data[:8], data[8:]]))
    elif kind == 10:  # a byte of the data: reaches the bools
        at = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:at] + bytes([draw(st.sampled_from([0, 1, 2, 255]))]) + data[at + 1 :]
    else:
        t["data_offsets"] = t["data_offsets"][::-1] if draw(st.booleans()) else [0, 0]
    return header, data


@st.composite
def text_edit(draw: st.DrawFn, text: bytes) -> bytes:
    """The header's text with a few bytes replaced, inserted or removed."""
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        byte = bytes([draw(st.sampled_from(PUNCTUATION))])
        how = draw(st.integers(0, 2))
        if how == 0:
            text = text[:at] + byte + text[at + 1 :]
        elif how == 1:
            text = text[:at] + byte + text[at:]
        else:
            text = text[:at] + text[at + 1 :]
    return text


@st.composite
def byte_edit(draw: st.DrawFn, file: bytes) -> bytes:
    """The whole file with a bit flipped, a byte set, or its end cut or padded."""
    at = draw(st.integers(0, max(0, len(file) - 1)))
    how = draw(st.integers(0, 3))
    if how == 0:
        return file[:at] + bytes([file[at] ^ (1 << draw(st.integers(0, 7)))]) + file[at + 1 :]
    if how == 1:
        return file[:at] + bytes([draw(st.sampled_from(PUNCTUATION))]) + file[at + 1 :]
    if how == 2:
        return file[:at]
    return file[:at] + draw(st.binary(min_size=1, max_size=8)) + file[at:]


def mutant(draw: Callable[..., Any], base: bytes) -> bytes:
    header, data = split(base)
    edited: Any = header
    for _ in range(draw(st.integers(1, 3))):
        if isinstance(edited, str):
            break
        edited, data = draw(structural(edited, data))
    text = (edited if isinstance(edited, str) else text_of(edited)).encode()
    if draw(st.integers(0, 3)) == 0:
        text = draw(text_edit(text))
    file = join(text, data)
    if draw(st.integers(0, 5)) == 0:
        file = draw(byte_edit(file))
    return file


@given(data=st.data())
@fuzz_settings(40, 4000)
def test_mutated_checkpoints(
    data: st.DataObject, library: Path, bases: list[bytes], tmp_path_factory
) -> None:
    directory = tmp_path_factory.mktemp("mutants", numbered=True)
    path = directory / "mutant.safetensors"
    path.write_bytes(mutant(data.draw, data.draw(st.sampled_from(bases))))
    with dlvm.load(library, seed=9) as model:
        event("loaded" if check_load(model, path, directory / "scratch.safetensors") else "refused")

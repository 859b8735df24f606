"""The TEL parser's LALR tables in the compiler's cache (dlvm.artifacts): stored once, reused,
and built again when the stored copy is damaged or cannot be written."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlvm.artifacts import read_checked, sha256
from dlvm.diagnostics import Source
from telc import syntax

SOURCE = Source("m.tel", "module m\nx: in[4]\ny: out[4] = relu(x * 2.0)\n")


@pytest.fixture
def tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh parser cache in tmp_path/cache, and a parser that is not yet built."""
    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path / "cache"))
    syntax._parser.cache_clear()
    yield tmp_path / "cache"
    syntax._parser.cache_clear()  # the next test's parser comes from its own cache


def fresh_parse() -> object:
    syntax._parser.cache_clear()
    return syntax.parse(SOURCE)


def test_the_tables_are_stored_once_then_reused(tables: Path) -> None:
    built = fresh_parse()
    [stored] = tables.glob("telc-parser-*")
    stamp = stored.stat().st_mtime_ns
    assert fresh_parse() == built
    assert stored.stat().st_mtime_ns == stamp, "loaded, not written again"
    assert list(tables.glob("*.tmp")) == []


@pytest.mark.parametrize(
    "damage",
    [b"", b"0" * 64 + b"\nnot tables", sha256(b"x").encode() + b"\nx"],
    ids=["empty", "bad-checksum", "not-tables"],  # not-tables: from another lark, say
)
def test_damaged_tables_are_built_again(tables: Path, damage: bytes) -> None:
    built = fresh_parse()
    [stored] = tables.glob("telc-parser-*")
    stored.write_bytes(damage)
    assert fresh_parse() == built
    assert stored.read_bytes() != damage and read_checked(stored) is not None
    stamp = stored.stat().st_mtime_ns
    assert fresh_parse() == built
    assert stored.stat().st_mtime_ns == stamp, "the tables built again are reused"


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DLVM_CACHE_DIR", str(blocker / "cache"))
    syntax._parser.cache_clear()
    try:
        assert syntax.parse(SOURCE) is not None
    finally:
        syntax._parser.cache_clear()

"""Every complete TEL program of docs/tel.md and docs/tutorial.md (a `tel` block not marked
`invalid`) builds into a shared library that loads: test_docs.py checks that each one checks,
this that none of them checks and then fails to build."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_docs import ROOT, Block, code_blocks

import dlvm
from dlvm.codegen.build import build_library
from telc.driver import compile_text, optimize

DOCUMENTS = [ROOT / "docs" / "tel.md", ROOT / "docs" / "tutorial.md"]
PROGRAMS = [b for p in DOCUMENTS for b in code_blocks(p) if b.lang == "tel"]
PROGRAMS = [b for b in PROGRAMS if "invalid" not in b.words]


def test_the_documents_have_programs_to_build() -> None:
    assert {b.path.name for b in PROGRAMS} == {"tel.md", "tutorial.md"}
    assert len(PROGRAMS) >= 10


@pytest.mark.parametrize("block", PROGRAMS, ids=lambda b: b.id)
def test_a_documented_program_builds(block: Block, tmp_path: Path) -> None:
    # The files the document's blocks write (for a later block to `use`) are all there, and
    # samples/ as test_docs.py links it (an ONNX model there is `use`d).
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    for other in code_blocks(block.path):
        if other.lang == "tel" and "file" in other.words:
            (tmp_path / other.words["file"]).write_text(other.text, encoding="utf-8")
    path = tmp_path / block.words.get("file", f"block_L{block.line}.tel")
    path.write_text(block.text, encoding="utf-8")
    compiled = compile_text(str(path), block.text)
    optimize(compiled.module)
    library = tmp_path / f"{path.stem}.so"
    build_library(compiled.module, compiled.spec, library)
    with dlvm.load(library) as model:
        names = [e["name"] for e in model.manifest["entries"]]
    assert names == [e.name for e in compiled.spec.entries]

"""One library build as stages (dlvm.codegen.build.LibraryBuild): the caller's module is never
changed, the build copies it only when it must, and each stage (the spec, the schedule, the CUDA
plans, the glue and header) is computed once per build, telc build included; the library's
manifest is the compiler's, byte for byte."""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
from telhelp import compiled_sample, sample_names, sample_path

import dlvm.codegen.build as build_module
import dlvm.loader
import telc.build
import telc.driver
from dlvm.codegen.build import (
    BuildError,
    LibraryBuild,
    Target,
    build_library,
    keep_reachable,
    schedule,
)
from dlvm.codegen.glue import SpecError, check_spec, glue_source, manifest_json
from dlvm.codegen.spec import EntrySpec, LibrarySpec, TensorSpec
from dlvm.ir.printer import module_text
from dlvm.runtime import runtime_dir
from telc.build import produce
from telc.driver import BuildOptions


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "cuda"])
def test_a_build_leaves_the_callers_module_as_it_was(cuda: bool, tmp_path: Path) -> None:
    compiled = compiled_sample("xor")
    before = module_text(compiled.module)
    result = build_library(compiled.module, compiled.spec, tmp_path / "xor.so", cuda=cuda)
    assert module_text(compiled.module) == before
    assert result.module is not compiled.module and result.module.stage == "schedule"


def test_a_module_ready_to_compile_is_not_copied(tmp_path: Path) -> None:
    compiled = compiled_sample("xor")
    spec = compiled.spec
    module = schedule(copy.deepcopy(compiled.module))
    keep_reachable(module, {e.host for e in spec.entries} | ({spec.init} if spec.init else set()))
    before = module_text(module)
    build = LibraryBuild(module, spec, tmp_path / "xor.so")
    assert build.module is module
    build.run()
    assert module_text(module) == before
    assert [name for name, _ in build.timings] == ["llvm", "runtime", "glue", "link", "write"]


def test_each_stage_is_computed_once(tmp_path: Path) -> None:
    compiled = compiled_sample("xor")
    build = LibraryBuild(compiled.module, compiled.spec, tmp_path / "xor.so", Target(cuda=True))
    assert build.sources is build.sources and build.device is build.device
    assert build.module is build.module
    build.run()
    assert [name for name, _ in build.timings] == [
        *("compute stages", "ptx", "llvm", "runtime", "glue", "link", "write")
    ]


def test_a_bad_spec_fails_before_any_work(tmp_path: Path) -> None:
    compiled = compiled_sample("xor")
    entries = (*compiled.spec.entries, EntrySpec("save", "export", "f"))
    bad = dataclasses.replace(compiled.spec, entries=entries)
    steps: list[str] = []
    with pytest.raises(SpecError, match="clashes with xor_save"):
        LibraryBuild(compiled.module, bad, tmp_path / "xor.so", progress=steps.append)
    assert steps == []


def counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Replaces module.name by a wrapper that counts its calls (in the returned list)."""
    calls = [0]
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_telc_build_computes_the_spec_and_the_glue_once(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = {
        name: counting(monkeypatch, where, name)
        for where, name in [
            (telc.driver, "library_spec"),
            (build_module, "glue_source"),
            (build_module, "header_source"),
            (build_module, "cuda_glue"),
            (build_module, "schedule"),
        ]
    }
    product = produce(sample_path("xor"), "so", BuildOptions(target=target), tmp_path / "xor.so")
    expected = {"library_spec": 1, "glue_source": 1, "header_source": 1, "schedule": 1}
    expected["cuda_glue"] = int(target == "cuda")
    assert {name: calls[0] for name, calls in counts.items()} == expected
    # --verbose describes the scheduled module the build compiled.
    assert product.report["kernels"] > 0 and product.report["frames"]
    assert product.report["entries"][0].startswith("infer(x: f32[4 x 2])")


def library_manifest(path: Path, name: str) -> bytes:
    """NAME_manifest() of the library at `path`, as its bytes."""
    manifest = getattr(ctypes.CDLL(str(path)), f"{name}_manifest")
    manifest.restype = ctypes.c_char_p
    return manifest()


@pytest.mark.parametrize("name", sample_names())
def test_every_sample_library_writes_the_compilers_manifest(name: str, sample_library) -> None:
    compiled = compiled_sample(name)
    expected = manifest_json(compiled.spec).encode()
    assert library_manifest(sample_library(name), compiled.spec.c_name) == expected


def test_a_cuda_library_writes_the_compilers_manifest(tmp_path: Path) -> None:
    compiled = compiled_sample("autoencoder")  # an entry on the GPU, another on the CPU
    path = tmp_path / "autoencoder.so"
    build = LibraryBuild(compiled.module, compiled.spec, path, Target(cuda=True))
    build.run()
    assert build.device is not None
    expected = manifest_json(compiled.spec, build.device.kernels).encode()
    assert library_manifest(path, "autoencoder") == expected
    assert b'"cuda": "gpu"' in expected and b'"cuda": "cpu: ' in expected


def test_names_like_the_glues_own_are_fine(tmp_path: Path) -> None:
    """The glue's file-scope names (spec, tensors, entries, host0…) have no underscore, so no
    model, entry or host function name can clash with them."""
    t = TensorSpec("x", "f32", (2,))
    spec = LibrarySpec("spec", "t", (t,), init="host0", entries=(
        EntrySpec("tensors", "infer", "entries", (TensorSpec("shapes", "f32", ()),), (t,)),
    ))  # fmt: skip
    (tmp_path / "glue.c").write_text(glue_source(spec))
    cc = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"]
    done = subprocess.run([*cc, f"-I{runtime_dir() / 'include'}", str(tmp_path / "glue.c")],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_name_with_a_nul_is_refused() -> None:
    with pytest.raises(SpecError, match="holds a NUL character"):
        check_spec(LibrarySpec("m", "t", (TensorSpec("w\0", "f32", ()),)))


# -- the C compiler command (dlvm.c_compiler) --


def logging_compiler(directory: Path) -> tuple[Path, Path]:
    """A C compiler that logs each command line to a file and runs cc: the script, in a
    directory whose name has a space (so the command must be quoted), and its log."""
    directory.mkdir()
    log = directory / "commands.log"
    script = directory / "cc"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec cc "$@"\n')
    script.chmod(0o755)
    return script, log


@pytest.mark.parametrize("given", ["env", "option"])
def test_a_c_compiler_command_with_arguments_compiles_and_links(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CC="'/a b/cc' -DDLVM_CC_WORD=1" (or Target.cc) is a program and its flags, for the
    runtime's objects, the glue and the link alike (the link took the whole string as the
    program's name)."""
    monkeypatch.setenv("DLVM_CACHE_DIR", str(tmp_path / "cache"))  # the runtime, with this CC
    script, log = logging_compiler(tmp_path / "a compiler")
    command = f"{shlex.quote(str(script))} -DDLVM_CC_WORD=1"
    compiled = compiled_sample("xor")
    if given == "env":
        monkeypatch.setenv("CC", command)
        build_library(compiled.module, compiled.spec, tmp_path / "xor.so")
    else:
        monkeypatch.setenv("CC", "no-such-compiler")
        build_library(compiled.module, compiled.spec, tmp_path / "xor.so", cc=command)
    lines = log.read_text().splitlines()
    assert all(line.startswith("-DDLVM_CC_WORD=1 ") for line in lines)
    assert any(" -c glue.c " in line for line in lines)
    assert any("-shared -o xor.so" in line for line in lines)
    assert any(" -c runtime/src/" in line for line in lines)
    with dlvm.loader.load(tmp_path / "xor.so") as model:
        assert model.infer(np.zeros((4, 2), np.float32)).shape == (4, 1)


@pytest.mark.parametrize("command", ["", "   ", "cc 'unclosed"])
def test_a_c_compiler_command_that_cannot_run_is_a_build_error(
    command: str, tmp_path: Path
) -> None:
    compiled = compiled_sample("xor")
    with pytest.raises(BuildError, match="compiler command"):
        build_library(compiled.module, compiled.spec, tmp_path / "xor.so", cc=command)


def test_the_build_cache_key_holds_the_c_compiler_command_as_its_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = {}
    for command in ["cc", "cc -O0", "cc   -O0", "'cc' -O0"]:
        monkeypatch.setenv("CC", command)
        keys[command] = telc.build._cc_identity()
    assert keys["cc"] != keys["cc -O0"]
    assert keys["cc -O0"] == keys["cc   -O0"] == keys["'cc' -O0"]
    assert keys["cc -O0"].startswith("cc -O0\n0\n")  # ran `cc -O0 --version`
    monkeypatch.setenv("CC", "cc 'unclosed")
    assert "does not parse" in telc.build._cc_identity()

"""dlc: compiles a DLVM IR module: `--emit ir` (verified and printed), `--emit llvm` (optimised
LLVM IR), `--emit ptx` (its kernels for CUDA, for `--gpu`), `--emit so` (a shared library with
every function an entry point, docs/c-abi.md).
The kind defaults from the output's suffix (`-o m.so`), else ir."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlvm import __version__
from dlvm.codegen.gpus import DEFAULT_GPU, GPUS
from dlvm.diagnostics import BuildFailure, Diagnostic, DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.tools.driver import (
    EXIT_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    command,
    load_module,
    report,
)

EMIT_KINDS = ("ir", "llvm", "ptx", "so")


@command("dlc")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlc", description="Compile DLVM IR modules.")
    ap.add_argument("input", metavar="FILE")
    ap.add_argument("--emit", help="what to produce: " + ", ".join(EMIT_KINDS))
    ap.add_argument("-o", "--output", metavar="OUT")
    ap.add_argument("--cpu", default="native", help="target CPU (native, x86-64-v3, …)")
    ap.add_argument("--gpu", default=DEFAULT_GPU, choices=GPUS, help="CUDA architecture (ptx)")
    ap.add_argument("--tf32", action="store_true", help="f32 products in TF32 on tensor cores")
    args = ap.parse_args(argv)
    emit = args.emit or ("so" if args.output and args.output.endswith(".so") else "ir")
    if emit not in EMIT_KINDS:
        report([Diagnostic(f"dlc cannot emit '{emit}'; it can emit: " + ", ".join(EMIT_KINDS))])
        return EXIT_USAGE
    if emit == "so" and not args.output:
        report([Diagnostic("dlc --emit so needs -o OUT.so")])
        return EXIT_USAGE
    try:
        module = load_module(args.input)
    except DiagnosticError as e:
        report(e.diagnostics)
        return EXIT_INPUT
    if emit == "ir":
        return _write(module_text(module), args.output)
    return _compile(module, emit, args)


def _compile(module, emit: str, args: argparse.Namespace) -> int:
    # Code generation loads llvmlite: only when asked for.
    from dlvm.codegen.build import build_library, schedule
    from dlvm.codegen.llgen import compile_object
    from dlvm.codegen.spec import module_spec
    from dlvm.transforms.differentiation import Differentiation

    try:
        if module.stage == "raw":
            Differentiation().run(module)
        if emit == "llvm":
            return _write(compile_object(schedule(module, args.cpu), cpu=args.cpu)[1], args.output)
        if emit == "ptx":
            from dlvm.codegen.cuda import ptx

            scheduled = schedule(module, args.cpu, cuda=True, tf32=args.tf32)
            return _write(ptx(scheduled, args.gpu)[0], args.output)
        build_library(module, module_spec(module, f"dlc {__version__}"), Path(args.output),
                      cpu=args.cpu)  # fmt: skip
    except DiagnosticError as e:
        report(e.diagnostics)
        return EXIT_INPUT
    except BuildFailure as e:
        report([Diagnostic(f"cannot build: {e}")])
        return EXIT_INPUT
    except OSError as e:  # the output cannot be written
        report([Diagnostic(f"{e.filename or args.output}: cannot write: {e.strerror}")])
        return EXIT_INPUT
    return EXIT_OK


def _write(text: str, output: str | None) -> int:
    if not output:
        sys.stdout.write(text)
        return EXIT_OK
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        report([Diagnostic(f"{output}: cannot write: {e.strerror}")])
        return EXIT_INPUT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""dlopt: runs IR passes over `.dl` files (docs/ir.md, "Passes") and can run a function.

    dlopt FILE… [-O0|-O1|-O2] [-p PASS…] [--print-ir] [-o OUT…] [--print-after PASS…] [--no-verify]
    dlopt FILE --run @f --args ARG…

For each input it prints `Source file: PATH`, one `ALIAS: changed|unchanged` line per pass run
(differentiation first, then the -O level's pipeline round by round, then the -p passes), then,
with --print-ir, an empty line and the module. Without --print-ir the module is
written to `-o OUT` (never over its input). Diagnostics go to stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.tools.driver import (
    EXIT_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    command,
    load_module,
    report,
)
from dlvm.transforms import PASSES
from dlvm.transforms.checkpointing import Checkpointing
from dlvm.transforms.compute_scheduling import ComputeScheduling
from dlvm.transforms.differentiation import Differentiation
from dlvm.transforms.pass_manager import PassManager
from dlvm.transforms.pipelines import PIPELINES

EPILOG = """examples:
  dlopt model.dl -p DCE CSE --print-ir       run two passes and print the result
  dlopt model.dl -p dead-code-elimination -o out.dl
  dlopt model.dl -O2 --print-ir                 the -O2 pipeline, to its fixpoint
  dlopt model.dl --run @f --args 1.5 "[[1, 2], [3, 4]]" x.npy

passes (name, alias):
""" + "\n".join(f"  {p.name:40} {p.alias:9} {p.summary}" for p in PASSES.values())
EPILOG += "\n\nlevels:\n" + "\n".join(f"  -O{n}  {p.summary}" for n, p in PIPELINES.items())


# What argparse must read as a negative number, not as an unknown option: what JSON and the IR
# spell as one (`-1e999`, `-.5`, `-Infinity`, `-inf`), so that `--args -1e999` is an argument.
NEGATIVE_NUMBER = re.compile(r"^-(?:[0-9]|\.[0-9]|Infinity$|inf$|nan$|NaN$)")


class _ArgumentParser(argparse.ArgumentParser):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        # argparse's own test takes only `-1` and `-1.5`. No option of dlopt starts with a digit,
        # so nothing is lost.
        self._negative_number_matcher = NEGATIVE_NUMBER


def parser() -> argparse.ArgumentParser:
    ap = _ArgumentParser(
        prog="dlopt",
        description="Optimise DLVM IR modules.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("inputs", nargs="+", metavar="FILE", help=".dl files to process")
    ap.add_argument(
        "-p",
        "--passes",
        nargs="+",
        default=[],
        metavar="PASS",
        help="passes to run, in order, by name or alias",
    )
    ap.add_argument(
        "-O",
        dest="level",
        type=int,
        choices=sorted(PIPELINES),
        default=0,
        metavar="N",
        help="run the optimisation pipeline of level N (0, 1 or 2) before the -p passes",
    )
    ap.add_argument(
        "-o",
        "--outputs",
        nargs="+",
        default=[],
        metavar="OUT",
        help="where to write each module (one per input)",
    )
    ap.add_argument("--print-ir", action="store_true", help="print each module after the passes")
    ap.add_argument(
        "--print-after",
        nargs="+",
        default=[],
        metavar="PASS",
        help="print the IR after these passes ('all' for every pass)",
    )
    ap.add_argument("--no-verify", action="store_true", help="do not verify after each pass")
    ap.add_argument(
        "--verify-diagnostics",
        action="store_true",
        help="check the diagnostics against expected-error comments",
    )
    ap.add_argument(
        "--split-input-file",
        action="store_true",
        help="treat '// -----' lines as separators between modules",
    )
    ap.add_argument("--run", metavar="@FUNC", help="run a function with the interpreter")
    ap.add_argument(
        "--args",
        nargs="*",
        default=[],
        metavar="ARG",
        help="arguments for --run: numbers, nested lists, or .npy files",
    )
    ap.add_argument("--float64", action="store_true", help="with --run, compute in float64")
    ap.add_argument(
        "--checkpoint-budget",
        type=int,
        default=0,
        metavar="BYTES",
        help="memory the checkpointing pass (CP) may keep live per block (default 0)",
    )
    ap.add_argument(
        "--target",
        choices=("cpu", "cuda"),
        default="cpu",
        help="what compute-scheduling (CS) schedules kernels for: cpu, or cuda (a CUDA launch "
        "beside each CPU schedule)",
    )
    return ap


@command("dlopt")
def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.checkpoint_budget < 0:
        ap.error("--checkpoint-budget must be 0 or more bytes")
    if args.outputs and len(args.outputs) != len(args.inputs):
        report([Diagnostic(f"{len(args.inputs)} inputs but {len(args.outputs)} outputs")])
        return EXIT_USAGE
    for i, path in enumerate(args.inputs):
        out = args.outputs[i] if args.outputs else None
        if out is not None and os.path.abspath(out) == os.path.abspath(path):
            report([Diagnostic(f"refusing to write over the input {path}")])
            return EXIT_USAGE
    try:
        # Differentiation always runs first (docs/ir.md, "Passes"); naming it adds nothing.
        passes = [Differentiation] + [
            p for p in PassManager.resolve(args.passes) if p is not Differentiation
        ]
        PassManager.resolve([n for n in args.print_after if n != "all"])
    except DiagnosticError as e:
        report(e.diagnostics)
        return EXIT_USAGE
    if args.verify_diagnostics:
        return _verify_diagnostics(args.inputs, args.split_input_file)
    Checkpointing.default_budget = args.checkpoint_budget
    ComputeScheduling.default_cuda = args.target == "cuda"
    status = EXIT_OK
    for i, path in enumerate(args.inputs):
        print(f"Source file: {path}", flush=True)
        try:
            module = load_module(path)
            manager = PassManager(not args.no_verify, args.print_after)
            results = manager.run(module, passes[:1])
            results += manager.run_pipeline(module, PIPELINES[args.level])
            results += manager.run(module, passes[1:])
            for cls, changed in results:
                print(f"{cls.alias}: {'changed' if changed else 'unchanged'}")
            if args.print_ir:
                print()
                sys.stdout.write(module_text(module))
            if args.outputs:
                with open(args.outputs[i], "w", encoding="utf-8") as f:
                    f.write(module_text(module))
            if args.run:
                from dlvm.tools.run import run_and_print

                run_and_print(module, args.run, args.args, args.float64)
        except DiagnosticError as e:
            sys.stdout.flush()
            report(e.diagnostics)
            status = EXIT_INPUT
        except BrokenPipeError:
            raise  # the reader stopped: `command` ends the run
        except OSError as e:
            report([Diagnostic(f"{e.filename or path}: {e.strerror}")])
            status = EXIT_INPUT
    return status


def _verify_diagnostics(paths: list[str], split: bool) -> int:
    from dlvm.sources import read_text
    from dlvm.tools.verify_diagnostics import verify_diagnostics

    status = EXIT_OK
    for path in paths:
        try:
            problems = verify_diagnostics(read_text(path), path, split)
        except DiagnosticError as e:
            problems = e.diagnostics
        if problems:
            report(problems)
            status = EXIT_INPUT
    return status


if __name__ == "__main__":
    sys.exit(main())

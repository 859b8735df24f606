"""The `telc` command: `telc check FILE`, `telc build FILE --emit STAGE [-o OUT] [-D N=V] [-q]`,
and `telc FILE …` as a short form of `telc build FILE …`. `build` shows the running stage and
then each stage's time on stderr (telc/progress.py); stdout carries only `--emit` text. Exit
status 0 success, 1 rejected input, 2 bad usage, 3 an internal error (a bug in telc, reported
without a traceback)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from dlvm.diagnostics import BuildFailure, DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.tools.driver import EXIT_INPUT, read_text, report
from telc import __version__
from telc.ast import dump
from telc.driver import STAGES, compile_text, optimize, parse_defines
from telc.program import load
from telc.progress import Progress

if TYPE_CHECKING:
    from dlvm.codegen.build import BuildResult

EXIT_INTERNAL = 3


class _Group(click.Group):
    """Treats `telc model.tel …` as `telc build model.tel …`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_Group, help="Compile TEL models. The IR tools are dlopt and dlc.")
@click.version_option(__version__, prog_name="telc")
def cli() -> None:
    pass


_define = click.option(
    "-D", "defines", multiple=True, metavar="NAME=VALUE", help="Override a dim or const."
)


@cli.command(help="Check FILE and report every error; writes nothing.")
@click.argument("file")
@_define
def check(file: str, defines: tuple[str, ...]) -> None:
    _run(lambda: compile_text(file, read_text(file), parse_defines(list(defines))))


@cli.command(
    help="Compile FILE and write the chosen stage. Building a library (the default) shows "
    "each stage's time on stderr."
)
@click.argument("file")
@click.option(
    "--emit",
    type=click.Choice(STAGES),
    default="so",
    show_default=True,
    help="ast: the syntax tree; ir: raw DLVM IR; optimized: IR after differentiation and "
    "optimisation; compute: with kernels outlined; schedule: with schedules; llvm: optimised "
    "LLVM IR; so: a shared library NAME.so with NAME.h and dlrt.h beside it.",
)
@click.option(
    "-o", "output", metavar="OUT", help="Write to OUT (for so: default FILE's stem + .so)."
)
@click.option(
    "--cpu", default="native", show_default=True, help="Target CPU: native, x86-64-v3, znver4…"
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@_define
def build(
    file: str, emit: str, output: str | None, cpu: str, quiet: bool, defines: tuple[str, ...]
) -> None:
    progress = Progress(quiet)  # stderr only: stdout carries the emitted text
    timings = progress.timings

    def stages() -> str | BuildResult:
        values = parse_defines(list(defines))
        text = read_text(file)
        if emit == "ast":
            with timings.stage("parse"):
                program = load(file, text, values)
            return dump(program.root.tree)
        compiled = compile_text(file, text, values, timings)
        if emit == "ir":
            return module_text(compiled.module)
        optimize(compiled.module, timings)
        if emit == "optimized":
            return module_text(compiled.module)
        with timings.stage("load llvm"):
            from telc.library import build_so, emit_stage  # llvmlite loads only when needed

        if emit == "so":
            target = output or os.path.splitext(os.path.basename(file))[0] + ".so"
            return build_so(compiled, target, cpu, timings)
        return emit_stage(compiled.module, emit, cpu, timings)

    def work() -> str | BuildResult:
        with progress:
            return stages()

    result = _run(work)
    if not isinstance(result, str):
        progress.summary(result.library, result.header)
        return
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(result)
        except OSError as e:
            click.echo(f"telc: cannot write {output}: {e.strerror}", err=True)
            sys.exit(EXIT_INPUT)
    else:
        click.echo(result, nl=False)


def _run(work):
    try:
        return work()
    except DiagnosticError as e:
        report(e.diagnostics)
        sys.exit(EXIT_INPUT)
    except BuildFailure as e:
        click.echo(f"telc: cannot build: {e}", err=True)
        sys.exit(EXIT_INPUT)
    except Exception as e:
        if os.environ.get("TELC_TRACEBACK"):  # our bug, not the user's: no traceback unless asked
            raise
        click.echo(
            f"telc: internal error: {type(e).__name__}: {e}\n"
            "This is a bug in telc; please report it with the input file "
            "(TELC_TRACEBACK=1 shows where it happened).",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)


def main() -> None:
    cli()

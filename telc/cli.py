"""The `telc` command: `telc check FILE`, `telc build FILE --emit STAGE [-o OUT] [-D N=V]`, and
`telc FILE …` as a short form of `telc build FILE …`. Exit status 0 success, 1 rejected input,
2 bad usage, 3 an internal error (a bug in telc, reported without a traceback)."""

from __future__ import annotations

import os
import sys

import click

from dlvm.diagnostics import DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.tools.driver import EXIT_INPUT, EXIT_USAGE, read_text, report
from telc import __version__
from telc.ast import dump
from telc.driver import STAGES, compile_text, optimize, parse_defines
from telc.program import load

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


@cli.command(help="Compile FILE and write the chosen stage.")
@click.argument("file")
@click.option(
    "--emit",
    type=click.Choice(STAGES),
    default="so",
    show_default=True,
    help="ast: the syntax tree; ir: raw DLVM IR; optimized: IR after differentiation and "
    "optimisation; so: a shared library.",
)
@click.option("-o", "output", metavar="OUT", help="Write to OUT instead of standard output.")
@_define
def build(file: str, emit: str, output: str | None, defines: tuple[str, ...]) -> None:
    def work() -> str:
        values = parse_defines(list(defines))
        text = read_text(file)
        if emit == "ast":
            program = load(file, text, values)
            return dump(program.root.tree)
        compiled = compile_text(file, text, values)
        if emit == "so":
            click.echo(
                f"telc: {file} is correct, but --emit so is not available yet: native code "
                "generation arrives with the code generation work; use --emit ir or "
                "--emit optimized",
                err=True,
            )
            sys.exit(EXIT_USAGE)
        if emit == "optimized":
            optimize(compiled.module)
        return module_text(compiled.module)

    text = _run(work)
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            click.echo(f"telc: cannot write {output}: {e.strerror}", err=True)
            sys.exit(EXIT_INPUT)
    else:
        click.echo(text, nl=False)


def _run(work):
    try:
        return work()
    except DiagnosticError as e:
        report(e.diagnostics)
        sys.exit(EXIT_INPUT)
    except Exception as e:  # our bug, not the user's: say so without a traceback
        if os.environ.get("TELC_TRACEBACK"):
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

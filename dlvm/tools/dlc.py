"""dlc: compiles a DLVM IR module. Today it reads, verifies and prints modules (`--emit ir`);
LLVM IR, objects and shared libraries come with the code generator."""

from __future__ import annotations

import argparse
import sys

from dlvm.diagnostics import Diagnostic, DiagnosticError
from dlvm.ir.printer import module_text
from dlvm.tools.driver import EXIT_INPUT, EXIT_OK, EXIT_USAGE, load_module, report

EMIT_KINDS = ("ir",)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlc", description="Compile DLVM IR modules.")
    ap.add_argument("input", metavar="FILE")
    ap.add_argument("--emit", default="ir", help="what to produce: " + ", ".join(EMIT_KINDS))
    ap.add_argument("-o", "--output", metavar="OUT")
    args = ap.parse_args(argv)
    if args.emit not in EMIT_KINDS:
        report(
            [
                Diagnostic(
                    f"dlc cannot emit '{args.emit}' yet; it can emit: " + ", ".join(EMIT_KINDS)
                )
            ]
        )
        return EXIT_USAGE
    try:
        module = load_module(args.input)
    except DiagnosticError as e:
        report(e.diagnostics)
        return EXIT_INPUT
    text = module_text(module)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

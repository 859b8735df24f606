"""The `telc` command. Its subcommands arrive with the TEL frontend; today it reports its
version and where the IR tools are."""

from __future__ import annotations

import click

from telc import __version__


@click.group(help="Compile TEL models. The IR tools are dlopt and dlc.")
@click.version_option(__version__, prog_name="telc")
def cli() -> None:
    pass


def main() -> None:
    cli()

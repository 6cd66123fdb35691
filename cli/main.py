"""The `sfc` command line: a thin layer that parses, calls the library and formats the result.

Exit codes mean one thing each: 0 ok, 1 the input is invalid or the run failed, 2 usage
(unusable arguments, an unreadable file).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer

app = typer.Typer(
    name="sfc",
    help="Run and inspect IEC 61131-3 Sequential Function Chart recipes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sfc {version('microdcs-sfc')}")
        raise typer.Exit(0)


@app.callback()
def main(
    _version_flag: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Run and inspect IEC 61131-3 Sequential Function Chart recipes."""


# Each command group lives in its own module and registers itself on `app`.
from cli import commands  # noqa: E402, F401

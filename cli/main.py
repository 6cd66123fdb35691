"""The `sfc` command line: a thin layer that parses, calls the library and formats the result.

Exit codes mean one thing each: 0 ok, 1 the input is invalid or the run failed, 2 usage
(unusable arguments, an unreadable file). docs/cli.md describes every command.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from typing import Annotated, Any

import typer
from typer.core import TyperOption

app = typer.Typer(
    name="sfc",
    help="Run and inspect IEC 61131-3 Sequential Function Chart recipes.",
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_display_type = TyperOption.display_type_rich


def _flag_shows_no_type(self: TyperOption, ctx: Any) -> str | None:
    """A flag (--json, --help) takes no value, so its help shows none; typer shows <bool>."""
    return None if self.is_flag else _display_type(self, ctx)


TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sfc {version('microdcs-sfc')}")
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    _version_flag: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Run and inspect IEC 61131-3 Sequential Function Chart recipes.

    Without a command, print this help and exit 0.
    """
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


HELP_WIDTH = 120
"""The width of `--help` written to a pipe or a file (rich takes 80 there, which squeezed
every option's help into a narrow column); a terminal's own width, `COLUMNS` and
`TERMINAL_WIDTH` go first."""


def run() -> None:
    """The `sfc` console script: the app, with `--help` at HELP_WIDTH when no terminal or
    variable says the width."""
    if not (os.environ.get("COLUMNS") or os.environ.get("TERMINAL_WIDTH")) and not (
        sys.stdout.isatty()
    ):
        import typer.rich_utils

        typer.rich_utils.MAX_WIDTH = HELP_WIDTH
    app(prog_name="sfc")


# Each command group lives in its own module and registers itself on `app`.
from cli import commands  # noqa: E402, F401

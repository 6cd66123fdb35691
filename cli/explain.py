"""`sfc explain`: a recipe, or a job's state, described in plain words (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from cli.files import console, load_graph, load_state, one_stdin, terminal
from cli.main import app
from sfc.explain import explain as explain_text

_ALERTS = ("The job FAULTED", "The job is HELD", "WARNING")


def _style(line: str) -> str:
    if line.startswith(_ALERTS):
        return "bold red" if "FAULTED" in line or "WARNING" in line else "bold yellow"
    if line and not line.startswith(" "):
        return "bold"
    return ""


@app.command()
def explain(
    recipe: Annotated[
        Path, typer.Argument(metavar="RECIPE", help="The recipe (wire JSON); - reads stdin.")
    ],
    state: Annotated[
        Path | None,
        typer.Option(
            metavar="STATE",
            help="A job's state (JSON, format 1.5; older formats are migrated): explain where "
            "the job is instead.",
        ),
    ] = None,
) -> None:
    """Describe RECIPE: steps, action blocks, transitions, divergences and what ends a job.

    With --state, say where the job is, what it waits for, when the next deadline is due, and whether it is held, ended or faulted. Exit 1 for an invalid recipe or state (the errors go to stderr), 2 for an unreadable file.
    """
    one_stdin(recipe, state)
    graph = load_graph(recipe, 1)
    job = None if state is None else load_state(state, graph)
    text = explain_text(graph, job)
    if not terminal():
        typer.echo(text, nl=False)
        return
    out = console()
    for line in text.splitlines():
        out.print(Text(line, style=_style(line)))

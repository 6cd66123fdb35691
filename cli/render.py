"""`sfc render`: draw a recipe's chart as Mermaid, Graphviz DOT or SVG (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from cli.files import load_graph, load_state, one_stdin
from cli.main import app
from sfc.render import render as render_chart
from sfc.svg import render_svg


@app.command()
def render(
    recipe: Annotated[
        Path, typer.Argument(metavar="RECIPE", help="The recipe (wire JSON); - reads stdin.")
    ],
    state: Annotated[
        Path | None,
        typer.Option(
            metavar="STATE", help="A job's state (JSON): mark its active steps and open actions."
        ),
    ] = None,
    fmt: Annotated[
        Literal["mermaid", "dot", "svg"],
        typer.Option(
            "--format",
            help="mermaid (renders on GitHub), dot (Graphviz) or svg (a picture, no tools needed).",
        ),
    ] = "mermaid",
) -> None:
    """Print RECIPE's chart in IEC 61131-3 style as Mermaid, DOT or SVG.

    Steps are boxes (the initial one with a double border), transitions carry their conditions, simultaneous divergences are double bars. Exit 1 for an invalid recipe or state (the errors go to stderr, never into the chart), 2 for an unreadable file.
    """
    one_stdin(recipe, state)
    graph = load_graph(recipe, 1)
    job = None if state is None else load_state(state, graph)
    text = render_svg(graph, job) if fmt == "svg" else render_chart(graph, job, fmt)
    typer.echo(text, nl=False)

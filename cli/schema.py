"""`sfc schema`: list the published wire schemas, or print one (docs/cli.md).

Exit codes: 0 ok, 2 an unknown schema name.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli import published
from cli.files import fail
from cli.main import app

SCHEMAS = published.SCHEMAS


@app.command()
def schema(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="A schema name from the list, e.g. recipe_v1_2_0."),
    ] = None,
    bundle: Annotated[
        bool,
        typer.Option(
            "--bundle",
            help="Print one self-contained schema: the schemas it refers to inlined under "
            "$defs, every $ref a local pointer.",
        ),
    ] = False,
) -> None:
    """List the wire schemas, or print one.

    Exit 0, or 2 for an unknown name.
    """
    available = published.names()
    if name is None:
        if bundle:
            fail("--bundle needs a schema NAME", 2)
        for stem in available:
            typer.echo(stem)
        return
    stem = name.removesuffix(".json")
    if stem not in available:
        fail(f"unknown schema {name!r}; known: {', '.join(available)}", 2)
    if bundle:
        typer.echo(json.dumps(published.bundle(stem), indent=2, ensure_ascii=False))
        return
    typer.echo((SCHEMAS / f"{stem}.json").read_text(encoding="utf-8"), nl=False)

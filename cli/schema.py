"""`sfc schema`: list the published wire schemas, or print one.

Exit codes: 0 ok, 2 an unknown schema name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.main import app

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


@app.command()
def schema(
    name: Annotated[
        str | None, typer.Argument(help="A schema name from the list, e.g. recipe_v1_1_0.")
    ] = None,
) -> None:
    """List the wire schemas, or print one."""
    available = sorted(p.stem for p in SCHEMAS.glob("*.json"))
    if name is None:
        for stem in available:
            typer.echo(stem)
        return
    stem = name.removesuffix(".json")
    if stem not in available:
        typer.echo(f"unknown schema {name!r}; known: {', '.join(available)}", err=True)
        raise typer.Exit(2)
    typer.echo((SCHEMAS / f"{stem}.json").read_text(encoding="utf-8"), nl=False)

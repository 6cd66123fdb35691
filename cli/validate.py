"""`sfc validate`: build recipes and print every build error (docs/cli.md).

Every file is a result: valid, invalid with its build errors, or unreadable with the reason.
Exit codes: 0 every recipe is valid, 1 some recipe is invalid or unreadable, 2 no recipe
could be read, unusable arguments, or capabilities that cannot be read or are not valid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from cli.files import (
    Unreadable,
    build_recipe,
    check_dataschema,
    format_error,
    json_path,
    load_capabilities,
    one_stdin,
    read_bytes,
)
from cli.main import app
from sfc.builder import RECIPE_V1_2_0, BuildResult

__all__ = ["format_error", "json_path", "validate"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True, slots=True)
class _Checked:
    file: str
    result: BuildResult | None
    """None when the file could not be read."""
    unreadable: str = ""


@app.command()
def validate(
    recipes: Annotated[
        list[str],
        typer.Argument(metavar="RECIPE", help="Recipe files (wire JSON); - reads stdin."),
    ],
    capabilities: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The station's capabilities (JSON). Without them every feature is on and any "
            "type id and any outcome the recipe uses are accepted.",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the results as JSON (paths without the leading $.)."),
    ] = False,
    dataschema: Annotated[
        str, typer.Option(metavar="URI", help="The recipe format of the files.")
    ] = RECIPE_V1_2_0,
) -> None:
    """Build recipes and print every build error (SFC000 to SFC026).

    Exit 0 when every recipe is valid, 1 when some is invalid or cannot be read, 2 when none could be read or the arguments are unusable.
    """
    one_stdin(*recipes, capabilities)
    check_dataschema(dataschema)
    station = load_capabilities(capabilities)
    checked: list[_Checked] = []
    for name in recipes:
        try:
            data = read_bytes(name, "recipe")
        except Unreadable as e:
            checked.append(_Checked(name, None, str(e)))
            continue
        checked.append(_Checked(name, build_recipe(data, station, dataschema)))
    if json_output:
        typer.echo(
            json.dumps(
                {"results": [_json(c) for c in checked]}, ensure_ascii=False, separators=(",", ":")
            )
        )
    else:
        prefix = len(checked) > 1
        for c in checked:
            if c.result is None:
                typer.echo(f"sfc: {c.unreadable}", err=True)
                continue
            if c.result.graph is not None:
                graph = c.result.graph
                counts = [_plural(len(graph.steps), "step"), _plural(len(graph.actions), "action")]
                resets = sum(len(names) for names in graph.resets.values())
                if resets:
                    counts.append(_plural(resets, "reset"))
                typer.echo(f"ok: {c.file} ({', '.join(counts)})")
            for error in c.result.errors:
                text = format_error(error)
                typer.echo(f"{c.file}: {text}" if prefix else text)
    if all(c.result is None for c in checked):
        raise typer.Exit(2)
    raise typer.Exit(0 if all(c.result is not None and c.result.ok for c in checked) else 1)


def _json(c: _Checked) -> dict[str, object]:
    if c.result is None:
        return {"file": c.file, "ok": False, "errors": [], "unreadable": c.unreadable}
    return {
        "file": c.file,
        "ok": c.result.ok,
        "errors": [
            {"code": e.code, "path": json_path(e.path), "message": e.message}
            for e in c.result.errors
        ],
    }

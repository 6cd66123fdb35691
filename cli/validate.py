"""`sfc validate`: build recipes and print every build error.

Exit codes: 0 every recipe is valid, 1 some recipe is invalid, 2 unusable arguments or a
file that cannot be read (a recipe or the capabilities), or capabilities that are not valid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from cli.files import decode_failure, fail, read
from cli.main import app
from generated.capabilities_v1_0 import Capabilities
from sfc.builder import RECIPE_V1_1_0, BuildError, BuildResult, build
from sfc.codec import capabilities_decoder
from sfc.interpreter import interpreter_for, known_dataschemas


def format_error(error: BuildError) -> str:
    """The text form of a build error: `CODE path: message`."""
    return f"{error.code} {error.path}: {error.message}"


def json_path(path: str) -> str:
    """A build error's path as the JSON output has it: without the leading `$.`."""
    return path.removeprefix("$").removeprefix(".")


def _capabilities(path: Path | None) -> Capabilities | None:
    if path is None:
        return None
    data = read(path, "capabilities")
    try:
        return capabilities_decoder.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, capabilities_decoder, e, "capabilities")
        fail(f"the capabilities {path} are not valid: {where}: {message}", 2)


@app.command()
def validate(
    recipes: Annotated[
        list[str], typer.Argument(metavar="RECIPE", help="Recipe files (wire JSON).")
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
    ] = RECIPE_V1_1_0,
) -> None:
    """Build recipes and print every build error (SFC000 to SFC020).

    Exit 0 when every recipe is valid, 1 when some is not, 2 on unusable arguments.
    """
    if interpreter_for(dataschema) is None:
        fail(f"unknown dataschema {dataschema}; known: {', '.join(known_dataschemas())}", 2)
    station = _capabilities(capabilities)
    documents = [(name, read(name, "recipe")) for name in recipes]
    results: list[tuple[str, BuildResult]] = [
        (name, build(data, station, dataschema=dataschema)) for name, data in documents
    ]
    if json_output:
        typer.echo(
            json.dumps(
                {
                    "results": [
                        {
                            "file": name,
                            "ok": result.ok,
                            "errors": [
                                {"code": e.code, "path": json_path(e.path), "message": e.message}
                                for e in result.errors
                            ],
                        }
                        for name, result in results
                    ]
                },
                ensure_ascii=False,
                separators=(",", ":"),
            )
        )
    else:
        prefix = len(results) > 1
        for name, result in results:
            if result.graph is not None:
                steps, actions = len(result.graph.steps), len(result.graph.actions)
                typer.echo(f"ok: {name} ({steps} steps, {actions} actions)")
            for error in result.errors:
                typer.echo(f"{name}: {format_error(error)}" if prefix else format_error(error))
    raise typer.Exit(0 if all(result.ok for _, result in results) else 1)

"""`sfc dryrun`: run a recipe on the virtual clock with scripted equipment.

Also holds what `sfc explain` and `sfc render` share with it: reading a recipe into a graph
(printing build errors as `sfc validate` does) and writing to a terminal with rich.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.text import Text

from cli.files import decode_failure, fail, read
from cli.main import app
from cli.validate import format_error
from generated.capabilities_v1_0 import Capabilities
from generated.state_v1_4 import SfcState
from sfc import codec
from sfc.builder import RECIPE_V1_1_0, build
from sfc.evolution import STATE_FORMAT
from sfc.graph import Graph
from sfc.interpreter import interpreter_for, known_dataschemas
from sfc.migrate import READERS, MigrationError, migrate, state_format
from sfc.simulation import (
    DEFAULT_EVALUATION_LIMIT,
    DEFAULT_TIME_LIMIT_MS,
    ScriptError,
    Simulation,
    job_id_problem,
    load_script,
)
from sfc.transcript import Tone, lines, to_json

TONES: dict[Tone, str] = {
    "applied": "",
    "absorbed": "dim",
    "rejected": "yellow",
    "completed": "bold green",
    "faulted": "bold red",
    "cancelled": "bold yellow",
    "limit": "bold magenta",
    "decision": "dim",
}


def terminal() -> bool:
    return sys.stdout.isatty()


def console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def load_capabilities(path: Path | None) -> Capabilities | None:
    if path is None:
        return None
    data = read(path, "capabilities")
    try:
        return codec.capabilities_decoder.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, codec.capabilities_decoder, e, "capabilities")
        fail(f"the capabilities {path} are not valid: {where}: {message}", 2)


def load_graph(
    path: Path,
    invalid_exit: int,
    capabilities: Capabilities | None = None,
    dataschema: str = RECIPE_V1_1_0,
) -> Graph:
    """Build the recipe; on build errors print them as `sfc validate` does and exit."""
    if interpreter_for(dataschema) is None:
        fail(f"unknown dataschema {dataschema}; known: {', '.join(known_dataschemas())}", 2)
    result = build(read(path, "recipe"), capabilities, dataschema=dataschema)
    if result.graph is None:
        for error in result.errors:
            typer.echo(format_error(error))
        typer.echo(f"sfc: {path} is not a valid recipe", err=True)
        raise typer.Exit(invalid_exit)
    return result.graph


def load_state(path: Path, graph: Graph) -> SfcState:
    """A job's state, refused (exit 1) when it is not one or belongs to another recipe.

    A state of an older format is migrated to the current one, and stderr says so.
    """
    data = read(path, "state")
    fmt = state_format(data)
    reader = READERS.get(fmt) if fmt is not None else None
    if reader is None:
        said = "no format" if fmt is None else f"format {fmt!r}"
        fail(
            f"state {path}: not a job state: it has {said}; "
            f"this engine reads state formats {', '.join(READERS)}",
            1,
        )
    try:
        reader.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, reader, e, "job state")
        fail(f"state {path}: not a job state (format {fmt}): {where}: {message}", 1)
    try:
        state = migrate(data, graph)
    except MigrationError as e:
        fail(f"state {path}: {e}", 1)
    if fmt != STATE_FORMAT:
        typer.echo(f"sfc: state {path}: format {fmt} migrated to {STATE_FORMAT}", err=True)
    if state.recipe_hash != graph.recipe_hash:
        fail(
            f"state {path}: the job runs recipe {state.recipe_hash[:12]}, "
            f"not this one ({graph.recipe_hash[:12]})",
            1,
        )
    return state


@app.command()
def dryrun(
    recipe: Annotated[Path, typer.Argument(help="The recipe (wire JSON).")],
    script: Annotated[
        Path | None,
        typer.Option(help="Simulation script (JSON). Without one every action answers ok at once."),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the dry-run result as JSON.")
    ] = False,
    time_limit_ms: Annotated[
        int, typer.Option(min=0, help="Virtual time after which the run stops.")
    ] = DEFAULT_TIME_LIMIT_MS,
    evaluation_limit: Annotated[
        int, typer.Option(min=1, help="Most evaluations before the run stops.")
    ] = DEFAULT_EVALUATION_LIMIT,
    job_id: Annotated[
        str,
        typer.Option(
            help="The job id (action keys are JOBID:ACTION): not empty, no white space "
            "or control characters."
        ),
    ] = "job-1",
    capabilities: Annotated[
        Path | None,
        typer.Option(help="Station capabilities (JSON): check types and outcomes at build."),
    ] = None,
    dataschema: Annotated[
        str, typer.Option(help="The recipe's dataschema URI (v1.0.0 or v1.1.0).")
    ] = RECIPE_V1_1_0,
    state_out: Annotated[
        Path | None,
        typer.Option(help="Write the job's state at the end of the run here, for `sfc explain`."),
    ] = None,
    decisions: Annotated[
        bool,
        typer.Option(
            "--decisions",
            help="Beneath each line, the decisions behind it (transitions fired, sequences "
            "started). The JSON form always has them.",
        ),
    ] = False,
) -> None:
    """Run RECIPE on a virtual clock with scripted equipment and print the transcript.

    Exit 0 when the job completed, 1 when it faulted, was cancelled or hit a limit,
    2 for an invalid recipe or script. The simulation is in memory: nothing is stored or sent.
    """
    problem = job_id_problem(job_id)
    if problem is not None:
        fail(f"--job-id: {problem}", 2)
    graph = load_graph(recipe, 2, load_capabilities(capabilities), dataschema)
    loaded = None
    if script is not None:
        try:
            loaded = load_script(read(script, "script"), graph)
        except ScriptError as e:
            fail(f"script {script}: {e.path}: {e.message}", 2)
    sim = Simulation(
        graph,
        loaded,
        job_id=job_id,
        time_limit_ms=time_limit_ms,
        evaluation_limit=evaluation_limit,
    )
    result = sim.run()
    if state_out is not None:
        try:
            state_out.write_bytes(codec.encode(sim.state) + b"\n")
        except OSError as e:
            fail(f"cannot write the state to {state_out}: {e.strerror or e}", 2)
    if json_output:
        sys.stdout.buffer.write(to_json(result))
        sys.stdout.flush()
    elif terminal():
        out = console()
        for line in lines(result, stalled=sim.stalled, decisions=decisions):
            out.print(Text(line.text, style=TONES[line.tone]))
    else:
        for line in lines(result, stalled=sim.stalled, decisions=decisions):
            typer.echo(line.text)
    raise typer.Exit(0 if result.end == "completed" else 1)

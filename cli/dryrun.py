"""`sfc dryrun`: run a recipe on the virtual clock with scripted equipment (docs/cli.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from cli.files import (
    check_dataschema,
    console,
    fail,
    load_capabilities,
    load_graph,
    load_script,
    one_stdin,
    terminal,
)
from cli.main import app
from sfc import codec
from sfc.builder import RECIPE_V1_2_0
from sfc.simulation import (
    DEFAULT_EVALUATION_LIMIT,
    DEFAULT_TIME_LIMIT_MS,
    Simulation,
    job_id_problem,
)
from sfc.transcript import Tone, lines, to_json

TONES: dict[Tone, str] = {
    "applied": "",
    "absorbed": "dim",
    "ignored": "dim",
    "note": "cyan",
    "rejected": "yellow",
    "completed": "bold green",
    "faulted": "bold red",
    "cancelled": "bold yellow",
    "limit": "bold magenta",
    "decision": "dim",
}


@app.command()
def dryrun(
    recipe: Annotated[
        Path, typer.Argument(metavar="RECIPE", help="The recipe (wire JSON); - reads stdin.")
    ],
    script: Annotated[
        Path | None,
        typer.Option(
            metavar="SCRIPT",
            help="Simulation script (JSON). Without one every action answers ok at once.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the dry-run result as JSON.")
    ] = False,
    time_limit_ms: Annotated[
        int, typer.Option(min=0, metavar="N", help="Virtual time (ms) after which the run stops.")
    ] = DEFAULT_TIME_LIMIT_MS,
    evaluation_limit: Annotated[
        int, typer.Option(min=1, metavar="N", help="Most evaluations before the run stops.")
    ] = DEFAULT_EVALUATION_LIMIT,
    job_id: Annotated[
        str,
        typer.Option(
            metavar="ID",
            help="The job id (action keys are JOBID:ACTION): not empty, no white space "
            "or control characters.",
        ),
    ] = "job-1",
    capabilities: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Station capabilities (JSON): check types and outcomes at build."
        ),
    ] = None,
    dataschema: Annotated[
        str,
        typer.Option(metavar="URI", help="The recipe's dataschema URI (v1.0.0, v1.1.0 or v1.2.0)."),
    ] = RECIPE_V1_2_0,
    state_out: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Write the job's state at the end of the run here, for `sfc explain`.",
        ),
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

    Exit 0 when the job completed, 1 when it faulted, was cancelled or hit a limit, 2 for an invalid recipe, script, capabilities or job id, or an unreadable file (build errors go to stderr; with --json stdout then stays empty). The simulation is in memory: nothing is stored or sent.
    """
    one_stdin(recipe, script, capabilities)
    problem = job_id_problem(job_id)
    if problem is not None:
        fail(f"--job-id: {problem}", 2)
    check_dataschema(dataschema)
    graph = load_graph(recipe, 2, load_capabilities(capabilities), dataschema)
    loaded = None if script is None else load_script(script, graph)
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

"""`sfc equipment --script SCRIPT`: scripted equipment on the real equipment stream
(docs/host.md, "The command line").

The script is in the dry-run format: the n-th time an action of a job is asked it gives the
n-th reply, on wall-clock time; `NAME:hold` and `NAME:restart` answer hold and restart, and
a wait is answered with an event that matches its selector. A script's `events` and
`controls` belong to the virtual clock and are refused: use `sfc event` and `sfc job`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer

from cli.files import read
from cli.hostcommon import (
    DataDirOption,
    RedisOption,
    ScopeOption,
    adapter_logs,
    check_scope,
    fail,
    open_store,
    warn_unregistered,
    watch_found_server,
)
from cli.hostcommon import server_errors as server_errors
from cli.main import app
from generated.simulation_script_v1_0 import SimulationScript
from host import facade
from host.scripted import DEFAULT_GROUP, ScriptedEquipment, load_host_script
from host.serve import stop_on_signals
from sfc.simulation import ScriptError


def read_host_script(path: Path | None) -> SimulationScript:
    """The script of `path` for the host (every action answers ok without one); exit 2 with
    the reason when it cannot be used."""
    data = b"{}" if path is None else read(path, "script")
    try:
        return load_host_script(data)
    except ScriptError as e:
        fail(f"script {path}: {e}", 2)
    except RecursionError:
        fail(f"script {path}: nested too deeply", 2)


@app.command()
def equipment(
    script: Annotated[
        Path | None,
        typer.Option(
            "--script",
            metavar="SCRIPT",
            help="The replies (dry-run script format, replies and default only); every "
            "action answers ok without one.",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        str, typer.Option("--group", metavar="NAME", help="The consumer group on the stream.")
    ] = DEFAULT_GROUP,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            metavar="F",
            min=0.0,
            help="Multiply every scripted delay by F (0.01: a hundred times faster).",
        ),
    ] = 1.0,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Scripted equipment on the real stream: answers push, hold and restart commands and
    waits, until stopped (Ctrl-C or SIGTERM)."""
    check_scope(scope)
    parsed = read_host_script(script)
    store = open_store(redis, data_dir)
    adapter_logs()
    stop = threading.Event()
    stop_on_signals(stop)  # not set in the handler: it could wait for the event's lock
    watch_found_server(redis, data_dir, stop, "sfc.equipment")
    with server_errors():
        warn_unregistered(store, scope)  # a mistyped scope: no job's work ever comes
        equipment = ScriptedEquipment(
            store,
            scope,
            parsed,
            group=group,
            time_scale=time_scale,
        )
        typer.echo(f"sfc equipment: answering scope {scope} as group {group}", err=True)
        equipment.run(stop)
    c = equipment.counters
    typer.echo(
        f"sfc equipment: stopped; {c.answered} answer(s), {c.events_published} event(s), "
        f"{c.silent} silent, {c.dropped_expired} expired",
        err=True,
    )
    facade.close(store)

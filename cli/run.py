"""`sfc run RECIPE`: the whole host in one command (docs/host.md, "The command line").

It starts an embedded Valkey on a fresh temporary data directory (unless given `--data-dir`
or `--redis`), K worker processes and the scripted equipment; submits N jobs; shows progress
on a terminal; prints a summary; and stops everything it started. Exit 0 when every job
completed.
"""

from __future__ import annotations

import secrets
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.equipment import read_host_script
from cli.files import read, terminal, visible
from cli.hostcommon import DataDirOption, RedisOption, fail, print_json, server_errors
from cli.main import app
from host import facade, joborder, jobs
from host.facade import Connection
from host.scripted import ScriptedEquipment
from host.serve import Serving, connect, scope_values, setup_scope, stop_on_signals
from host.server import ServerError
from host.settings import SettingsError, from_environment, scope_defaults
from sfc.builder import build


def _percentile(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@app.command()
def run(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE", help="The recipe (wire JSON).")],
    script: Annotated[
        Path | None,
        typer.Option(
            "--script", metavar="SCRIPT", help="The equipment's replies.", show_default=False
        ),
    ] = None,
    jobs_: Annotated[
        int, typer.Option("--jobs", metavar="N", min=1, max=100_000, help="Jobs to run.")
    ] = 1,
    workers: Annotated[
        int, typer.Option("--workers", metavar="K", min=1, max=64, help="Worker processes.")
    ] = 2,
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", metavar="F", min=0.0, help="Multiply scripted delays by F."),
    ] = 1.0,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="S", help="Give up after S seconds.")
    ] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run N jobs of RECIPE on the host: embedded server, workers and scripted equipment.
    SIGTERM, SIGINT or SIGHUP stops the run and everything it started."""
    text = read(recipe, "recipe")
    built = build(text)
    if built.graph is None:
        for e in built.errors:
            typer.echo(f"{recipe}: {e.code} {e.path}: {e.message}", err=True)
        raise typer.Exit(2)
    parsed = read_host_script(script)
    try:
        settings = from_environment()  # the SFC_* settings, as `sfc serve` reads them
        defaults = scope_defaults()
    except SettingsError as e:
        fail(str(e), 2)
    scope_settings = scope_values(
        max_attempts=defaults.max_attempts,
        equipment_hold=defaults.equipment_hold,
        expiry_grace=defaults.expiry_grace,
    )
    scope = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    signalled: list[int] = []
    stopped = threading.Event()  # by a signal: every loop below looks at it
    stop_on_signals(stopped, signalled)
    with tempfile.TemporaryDirectory(prefix="sfc-run-") as tmp:
        serving = Serving(
            redis_url=redis,
            data_dir=data_dir or (None if redis else Path(tmp)),
            workers=workers,
            scopes=[scope],
            settings=settings.texts(),
            server_dies_with_this=True,
        )
        stop = threading.Event()
        thread: threading.Thread | None = None
        store: Connection | None = None
        try:
            with server_errors():
                try:
                    url = serving.start_server()
                except ServerError as e:
                    fail(str(e), 2)
                store = connect(url)
                # SFC_MAX_ATTEMPTS, SFC_EQUIPMENT_HOLD and SFC_EXPIRY_GRACE are scope
                # settings: stored in the run's scope, as `sfc serve --scope` stores them
                facade.ensure_library(store)  # an ACL user without FUNCTION LOAD relies on setup
                setup_scope(store, scope, scope_settings)
                serving.start_workers()
                deadline = time.monotonic() + timeout
                _workers_serve(store, scope, workers, deadline, serving, stopped)
                equipment = ScriptedEquipment(
                    connect(url),
                    scope,
                    parsed,
                    time_scale=time_scale,
                )
                thread = threading.Thread(target=equipment.run, args=(stop,), daemon=True)
                thread.start()
                started = time.monotonic()
                ids = []
                for i in range(1, jobs_ + 1):
                    if stopped.is_set():
                        break
                    result = jobs.submit(store, scope, text, job_id=f"job-{i}")
                    if not result.ok:
                        fail(result.words(), 1)
                    ids.append(result.job)
                orders = _wait(store, scope, ids, started + timeout, serving, stopped)
                seconds = time.monotonic() - started
                events = _events(store, scope, ids)
        finally:
            stop.set()
            if thread is not None:
                thread.join(5)
            if store is not None:
                facade.close(store)
            serving.stop()
    if signalled:
        name = signal.Signals(signalled[0]).name
        fail(f"run: stopped by {name}; its workers and server stopped, nothing is left", 1)
    summary = _summary(orders, ids, events, seconds)
    if as_json:
        print_json(summary)
    else:
        typer.echo(visible(_text(summary, orders)))  # fault texts come from equipment
    if summary["completed"] != len(ids):
        raise typer.Exit(1)


def _workers_serve(
    store: Connection,
    scope: str,
    workers: int,
    deadline: float,
    serving: Serving,
    stopped: threading.Event,
) -> None:
    """Wait until every worker reads the scope's work stream, so that the run's times are
    the host's and not the workers' start (about a second each), or until `stopped`."""
    while time.monotonic() < deadline and all(serving.alive()) and not stopped.is_set():
        if facade.readers(store, scope) >= workers:
            return
        time.sleep(0.05)
    if not all(serving.alive()) and not stopped.is_set():
        fail("a worker exited at start; see its log above", 1)


def _wait(
    store: Connection,
    scope: str,
    ids: list[str],
    deadline: float,
    serving: Serving,
    stopped: threading.Event,
) -> dict[str, Any]:
    orders: dict[str, Any] = {}
    progress = None
    if terminal():
        from rich.progress import Progress

        progress = Progress(transient=True)
        task = progress.add_task("jobs", total=len(ids))
        progress.start()
    try:
        left = list(ids)
        while left and time.monotonic() < deadline:
            found = facade.orders(store, scope, left)
            for j in list(left):
                o = found[j]
                if o is None:
                    continue
                if joborder.ended(o):
                    orders[j] = o
                    left.remove(j)
            if progress is not None:
                progress.update(task, completed=len(orders))
            if not all(serving.alive()) or stopped.is_set():
                break
            if left:
                stopped.wait(0.05)
        # not ended: report where they stand
        orders.update((j, o) for j, o in facade.orders(store, scope, left).items() if o)
    finally:
        if progress is not None:
            progress.stop()
    return orders


def _events(store: Connection, scope: str, ids: list[str]) -> int:
    return facade.history_lengths(store, scope, ids)


def _summary(orders: dict[str, Any], ids: list[str], events: int, seconds: float) -> dict[str, Any]:
    counts = {"completed": 0, "faulted": 0, "cancelled": 0, "aborted": 0}
    durations: list[int] = []
    for j in ids:
        o = orders.get(j)
        if o is None or not joborder.ended(o):
            continue
        path = joborder.path_text(o)
        result = o.result
        if path == "Ended/Completed":
            counts["completed"] += 1
        elif path == "Ended/Closed":
            counts["cancelled"] += 1
        elif getattr(result, "ended_by", "") == "faulted":
            counts["faulted"] += 1
        else:
            counts["aborted"] += 1
        if o.ended_at is not None:
            durations.append(o.ended_at - o.stored_at)
    return {
        "jobs": len(ids),
        **counts,
        "events": events,
        "seconds": round(seconds, 3),
        "eventsPerSecond": round(events / seconds, 1) if seconds > 0 else 0.0,
        "jobMs": {
            "p50": int(statistics.median(durations)) if durations else 0,
            "p99": _percentile(durations, 0.99),
        },
    }


def _text(s: dict[str, Any], orders: dict[str, Any]) -> str:
    lines = [
        f"{s['jobs']} job(s): {s['completed']} completed, {s['faulted']} faulted, "
        f"{s['cancelled']} cancelled, {s['aborted']} aborted",
        f"{s['events']} evaluations in {s['seconds']:.2f} s ({s['eventsPerSecond']:.0f}/s); "
        f"job time p50 {s['jobMs']['p50']} ms, p99 {s['jobMs']['p99']} ms",
    ]
    unfinished = s["jobs"] - sum(s[k] for k in ("completed", "faulted", "cancelled", "aborted"))
    if unfinished:
        lines.append(f"{unfinished} job(s) did not end before the timeout")
    faults: dict[str, int] = {}
    for o in orders.values():
        r = o.result
        if joborder.ended(o) and getattr(r, "fault_code", None):
            key = f"{r.fault_code}: {r.fault_message}"
            faults[key] = faults.get(key, 0) + 1
    for fault, n in sorted(faults.items()):
        lines.append(f"  {n} x {fault}")
    return "\n".join(lines)

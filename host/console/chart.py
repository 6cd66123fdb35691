"""The console's chart of a job, and its check of a recipe: built from what is stored, or
from what was pasted, drawn by the core's pure SVG renderer. Nothing here writes."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from typing import Any

import msgspec

from generated.state_v1_5 import SfcState
from host.apply import decode_order
from host.jobview import recipe_graph
from host.readmodel import JobDetail
from host.store import Store
from sfc.builder import build
from sfc.explain import explain
from sfc.migrate import read_state
from sfc.simulation import ScriptError, Simulation, load_script
from sfc.svg import render_svg
from sfc.transcript import to_text

DRYRUN_LIMIT_MS = 24 * 3_600_000
"""The virtual time a dry run of the recipe page may take at most."""


DRAWN_KEPT = 256
"""The chart bodies kept drawn (render_svg's `drawn`), the most recently used."""


class Kept(MutableMapping[tuple[object, ...], tuple[str, int, int]]):
    """A bounded map, safe across the server's threads: the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.kept: OrderedDict[tuple[object, ...], tuple[str, int, int]] = OrderedDict()
        self.lock = threading.Lock()

    def __getitem__(self, key: tuple[object, ...]) -> tuple[str, int, int]:
        with self.lock:
            value = self.kept[key]
            self.kept.move_to_end(key)
            return value

    def __setitem__(self, key: tuple[object, ...], value: tuple[str, int, int]) -> None:
        with self.lock:
            self.kept[key] = value
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)

    def __delitem__(self, key: tuple[object, ...]) -> None:
        with self.lock:
            del self.kept[key]

    def __iter__(self) -> Iterator[tuple[object, ...]]:
        with self.lock:
            return iter(list(self.kept))

    def __len__(self) -> int:
        return len(self.kept)


def chart_of(
    store: Store, scope: str, job: str, drawn: Kept | None = None
) -> tuple[str | None, str]:
    """The job's chart with its state marked, or None and why it cannot be drawn; `drawn`
    keeps the bodies drawn for the next job alike."""
    record = store.job(scope, job)
    if record is None:
        return None, f"no job order {job!r} in scope {scope}"
    try:
        order = decode_order(record.order)
    except msgspec.DecodeError as e:
        return None, f"its stored order cannot be read: {e}"
    graph, problem = recipe_graph(store, order.recipe_hash, order.dataschema)
    if graph is None:
        return None, problem
    state: SfcState | None = None
    with contextlib.suppress(msgspec.DecodeError):
        state = read_state(record.state)
    return render_svg(graph, state, drawn), ""


def chart_of_detail(store: Store, detail: JobDetail, drawn: Kept | None = None) -> str | None:
    """The chart of the job as `detail` read it (no second read of the job); None when its
    order cannot be read or its recipe not built."""
    if detail.order is None:
        return None
    graph, _ = recipe_graph(store, detail.order.recipe_hash, detail.order.dataschema)
    return None if graph is None else render_svg(graph, detail.state, drawn)


def check_recipe(recipe: bytes, script: bytes | None) -> dict[str, Any]:
    """What `sfc validate`, `sfc explain`, `sfc render --format svg` and `sfc dryrun` say
    of a recipe (and a script): errors, or the explanation, the chart and the transcript."""
    built = build(recipe)
    if built.graph is None:
        return {
            "valid": False,
            "errors": [
                {"code": e.code, "path": e.path, "message": e.message} for e in built.errors
            ],
        }
    graph = built.graph
    out: dict[str, Any] = {
        "valid": True,
        "errors": [],
        "explain": explain(graph),
        "chart": render_svg(graph),
        "recipeHash": graph.recipe_hash,
    }
    if script is not None:
        try:
            loaded = load_script(script, graph)
        except ScriptError as e:
            out["dryrun"] = {"error": {"path": e.path, "message": e.message}}
            return out
        sim = Simulation(graph, loaded, time_limit_ms=DRYRUN_LIMIT_MS)
        result = sim.run()
        out["dryrun"] = {
            "status": sim.state.status,
            "transcript": to_text(result),
            "chart": render_svg(graph, sim.state),
        }
    return out


def list_waits(store: Store, scope: str, jobs: list[str]) -> dict[str, dict[str, Any]]:
    """What each listed job waits for and since when, from its stored order and state in one
    round trip: a start, a worker, a resume, or a running job's first open work of an N action by
    deadline (since its command went out: the deadline less the action's time), else a time."""
    _, records = store.load(scope, jobs)
    out: dict[str, dict[str, Any]] = {}
    for job, record in records.items():
        if record is None:
            continue
        try:
            order = decode_order(record.order)
            state = read_state(record.state)
        except msgspec.DecodeError:
            continue
        top = order.state[0].state_text if order.state else ""
        if top == "NotAllowedToStart":
            out[job] = {"for": "start", "what": "sfc job start", "since": order.stored_at}
        elif top == "AllowedToStart":
            out[job] = {"for": "worker", "what": "a worker to start it", "since": order.stored_at}
        elif top == "Interrupted":
            out[job] = {"for": "resume", "what": "an operator's resume", "since": state.held_at}
        elif top == "Running":
            out[job] = _running_wait(store, order.recipe_hash, order.dataschema, state)
    return out


def _running_wait(
    store: Store, recipe_hash: str, dataschema: str, state: SfcState
) -> dict[str, Any]:
    graph, _ = recipe_graph(store, recipe_hash, dataschema)
    opened = [
        (rec.deadline if rec.deadline is not None else 1 << 62, name, rec)
        for name, rec in state.actions.items()
        if rec.status == "open"
        # an open S, L, D... is not waited for: the job waits for its N actions or a time
        and (graph is None or name not in graph.actions or graph.actions[name].qualifier == "N")
    ]
    if not opened:
        if state.dwells:
            step, until = min(state.dwells.items(), key=lambda d: (d[1], d[0]))
            return {
                "for": "time",
                "what": f"the dwell of step {step}",
                "since": None,
                "deadline": until,
            }
        return {"for": "time", "what": "a step's time or a timer", "since": None}
    _, name, rec = min(opened, key=lambda o: (o[0], o[1]))
    spec = None if graph is None else graph.actions.get(name)
    since = None
    if rec.deadline is not None and spec is not None and rec.work != "restart":
        since = rec.deadline - spec.timeout_ms
    return {
        "for": "event" if rec.work == "await" else "answer",
        "what": f"{name} ({rec.command_id or rec.type_id})",
        "since": since,
        "deadline": rec.deadline,
        "held": rec.hold == "held",
    }

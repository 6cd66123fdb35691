"""Hypothesis strategies for the core: random valid recipes, and event sequences drawn from
the job's current state.

- `recipe_docs()` draws a recipe document (wire JSON as a dict, PascalCase) that is a valid
  chart: linear chains, decisions, loops, skips, selection and simultaneous divergences,
  push and pull actions, MaxAttempts, selectors, and push actions with Hold and Restart.
- `recipe_docs(qualifiers=True)` (also `qualified_recipe_docs()`) draws a valid recipe of
  format v1.2.0: push actions of every qualifier (N, P, P1, P0, S, L, D, SD, DS, SL) with
  DurationSeconds where the qualifier has a time, R blocks of stored actions in other
  steps, and steps with MinSeconds (timer steps among them). Pull events and actions with
  Hold stay N.
- `built_recipes()` encodes and builds it, and fails if `build()` refuses it: the generator
  and build() check each other.
- `next_event()` draws one event for a job as a host could see it: answers to open commands
  (with or without command id and round, current or stale), hold answers (`held`, other,
  error; silence is simply no answer), events of awaited types that do or do not match the
  selector, ticks at or after the next deadline with random outages, holds, releases,
  resumes with random live work, cancels, and junk. Times never go backwards.
- `job_traces()` draws a recipe, then events one at a time, runs `evolve` on each and
  returns the whole `Trace`. An exception from evolve ends the trace and is kept in it, so a
  property test can say what went wrong instead of hypothesis failing inside the strategy.

How the chart is drawn: a chain of top-level nodes n0 -> n1 -> ... (n0 an initial step,
the others steps or divergences), each linked to the next by a default "true" transition.
A node that waits for something (a step with an N action or MinSeconds, a simultaneous
divergence with such a step in some sequence, a selection divergence with one in every
sequence) may add
transitions on outcomes to any node: back (a loop), to itself, or forward (a skip). Only
waiting nodes have those, so every cycle contains a node that waits (no SFC013). Two pull
actions of one type that can wait together get distinct literal subjects (no SFC011).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

import msgspec
from hypothesis import strategies as st
from msgspec import UNSET, UnsetType

from generated.command_v1_0 import StartWork
from generated.event_v1_0 import (
    ActionCompleted,
    ActionFailed,
    Cancel,
    EventReceived,
    Hold,
    Release,
    Resume,
    Start,
    Tick,
)
from generated.snapshot_v1_0 import Snapshot
from generated.state_v1_5 import SfcState
from generated.step_result_v1_2 import StepResult
from sfc.builder import build
from sfc.evolution import ENDED, evolve, new_state, next_deadline
from sfc.graph import Graph

OUTCOMES = ("ok", "nok", "done", "retry", "timeout", "error")
"""Conditions of transitions; a small alphabet, so that answers sometimes match them."""
ANSWERS = ("ok", "done", "nok", "retry", "ok", "done", "ok", "held", "ok", "timeout", "error")
"""Outcomes of answers and events: mostly plain ones, so that runs go on; `held` answers a
hold (and, sent to the work, is just another outcome)."""
ERRORS: tuple[str | UnsetType, ...] = (UNSET, "", "jammed")
"""The error text of actionFailed: none, empty, or some."""
PUSH_TYPES = ("c.fit", "c.press", "c.test")
PULL_TYPES = ("e.scan", "e.qa")
SUBJECTS = ("left", "right", "{jobId}", "cell/{jobId}")
CORRELATIONS = ("c1", "c2", "{jobId}")
QUALIFIERS = ("N", "N", "N", "P", "P1", "P0", "S", "L", "D", "SD", "DS", "SL")
"""Qualifiers of a push action in a v1.2.0 recipe: N about one time in four."""
TIMED = frozenset({"L", "D", "SD", "DS", "SL"})
STORED = frozenset({"S", "SD", "DS", "SL"})
DURATIONS = (0.5, 1, 1.5, 2, 3, 5)
"""DurationSeconds and MinSeconds: of the order of the timeouts (1 to 5 s), so that timers
and deadlines interleave."""
JOB_ID = "job-1"
SCOPE = "test"

T = TypeVar("T")

# -------------------------------------------------------------------------------- recipes


@cache
def _permutations(n: int) -> st.SearchStrategy[list[int]]:
    return st.permutations(range(n))


@cache
def _below(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


def _pick(draw: st.DrawFn, options: Sequence[T]) -> T:
    """sampled_from without building a strategy for every draw (the pools change per state)."""
    return options[draw(_below(len(options)))]


def _int(draw: st.DrawFn, lo: int, hi: int) -> int:
    return lo + draw(_below(hi - lo + 1))


_BOOL = st.booleans()


def _push(draw: st.DrawFn, name: str, step: str) -> dict[str, Any]:
    type_id = _pick(draw, PUSH_TYPES)
    a: dict[str, Any] = {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": "push_command",
        "TypeId": type_id,
        "TimeoutSeconds": _int(draw, 1, 5),
    }
    if draw(_BOOL):
        a["MaxAttempts"] = _int(draw, 1, 3)
    if draw(_BOOL):
        a["Parameters"] = {"n": _int(draw, 0, 9)}
    if draw(_BOOL):
        a["Hold"] = {"TypeId": f"{type_id}.hold", "TimeoutSeconds": _int(draw, 1, 3)}
        a["Restart"] = {"TypeId": f"{type_id}.restart", "TimeoutSeconds": _int(draw, 1, 5)}
        if draw(_BOOL):
            a["Hold"]["Parameters"] = {"soft": True}
            a["Restart"]["Parameters"] = {"from": "hold"}
    return a


def _pull(draw: st.DrawFn, name: str, step: str) -> dict[str, Any]:
    a: dict[str, Any] = {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": "pull_event",
        "TypeId": _pick(draw, PULL_TYPES),
        "TimeoutSeconds": _int(draw, 1, 5),
    }
    selector: dict[str, str] = {}
    subject = _pick(draw, (None, *SUBJECTS))
    correlation = _pick(draw, (None, *CORRELATIONS))
    if subject is not None:
        selector["Subject"] = subject
    if correlation is not None:
        selector["CorrelationId"] = correlation
    if selector:
        a["Selector"] = selector
    return a


def _separate_waits(group: list[dict[str, Any]]) -> None:
    """Pull actions of one type that can wait together get distinct literal subjects."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for a in group:
        if a["Interaction"] == "pull_event":
            by_type.setdefault(a["TypeId"], []).append(a)
    for same in by_type.values():
        if len(same) > 1:
            for a in same:
                a["Selector"] = {**a.get("Selector", {}), "Subject": f"sub-{a['Name']}"}


def _qualify(draw: st.DrawFn, action: dict[str, Any]) -> None:
    """Give a push action a qualifier, and its time if the qualifier has one; an action with
    Hold keeps N or loses its Hold."""
    if action["Interaction"] != "push_command":
        return
    if "Hold" in action:
        if draw(_BOOL):
            return
        del action["Hold"], action["Restart"]
    qualifier = _pick(draw, QUALIFIERS)
    action["Qualifier"] = qualifier
    if qualifier in TIMED:
        action["DurationSeconds"] = _pick(draw, DURATIONS)


@st.composite
def recipe_docs(
    draw: st.DrawFn,
    max_nodes: int = 5,
    max_actions: int = 2,
    max_sequences: int = 3,
    qualifiers: bool = False,
) -> dict[str, Any]:
    """A valid recipe document (see the module docstring for its shape); with `qualifiers`,
    one of format v1.2.0 that uses every qualifier and MinSeconds."""
    steps: list[str] = []
    actions: list[dict[str, Any]] = []
    branches: list[dict[str, Any]] = []
    min_seconds: dict[str, float] = {}
    waiting: set[str] = set()
    """Steps that wait: an N action, or MinSeconds."""

    def new_step() -> list[dict[str, Any]]:
        name = f"s{len(steps)}"
        steps.append(name)
        own = []
        for _ in range(_int(draw, 0, max_actions)):
            kind = _pick(draw, (_push, _push, _pull))
            own.append(kind(draw, f"a{len(actions)}", name))
            if qualifiers:
                _qualify(draw, own[-1])
            actions.append(own[-1])
        if qualifiers and _int(draw, 0, 3) == 0:
            min_seconds[name] = _pick(draw, DURATIONS)
        if name in min_seconds or any(a["Qualifier"] == "N" for a in own):
            waiting.add(name)
        return own

    # Nodes: (name, waits, first steps of a selection divergence's sequences or None).
    nodes: list[tuple[str, bool, list[str] | None]] = []
    for i in range(_int(draw, 1, max_nodes)):
        kind = "step" if i == 0 else _pick(draw, ("step", "selection", "simultaneous"))
        if kind == "step":
            own = new_step()
            _separate_waits(own)
            nodes.append((steps[-1], steps[-1] in waiting, None))
            continue
        name = f"d{len(branches)}"
        sequences: list[list[str]] = []
        per_sequence: list[list[dict[str, Any]]] = []
        for _ in range(_int(draw, 1, max_sequences)):
            seq: list[str] = []
            acts: list[dict[str, Any]] = []
            for _ in range(_int(draw, 1, 3)):
                own = new_step()
                seq.append(steps[-1])
                acts += own
                if kind == "selection":
                    _separate_waits(own)
            sequences.append(seq)
            per_sequence.append(acts)
        if kind == "simultaneous":
            _separate_waits([a for acts in per_sequence for a in acts])
            waits = any(s in waiting for seq in sequences for s in seq)
        else:
            waits = all(any(s in waiting for s in seq) for seq in sequences)
        branches.append({"Name": name, "Type": kind, "Branches": sequences})
        firsts = [seq[0] for seq in sequences] if kind == "selection" else None
        nodes.append((name, waits, firsts))

    transitions: list[dict[str, Any]] = []
    last = len(nodes) - 1
    for i, (name, waits, firsts) in enumerate(nodes):
        leaving: list[tuple[str, str]] = []
        if firsts is not None:  # selection transitions: one default, the others on outcomes
            default = _int(draw, 0, len(firsts) - 1)
            leaving += [
                (first, "true" if k == default else _pick(draw, OUTCOMES))
                for k, first in enumerate(firsts)
            ]
        if i < last:
            leaving.append((nodes[i + 1][0], "true"))
        if waits:  # decisions, loops and skips, only from nodes that wait
            for _ in range(_int(draw, 0, 2 if i < last else 1)):
                target = nodes[_int(draw, 0, last)][0]
                leaving.append((target, _pick(draw, OUTCOMES)))
        priorities = draw(_permutations(len(leaving)))
        transitions += [
            {"Source": name, "Target": target, "Condition": condition, "Priority": priority}
            for (target, condition), priority in zip(leaving, priorities, strict=True)
        ]

    if qualifiers:  # R blocks: each stored action may be reset in other steps, once each
        for a in [a for a in actions if a["Qualifier"] in STORED]:
            others = [s for s in steps if s != a["Step"]]
            for step in sorted(
                {_pick(draw, others) for _ in range(_int(draw, 0, 2))} if others else ()
            ):
                reset = {"Name": a["Name"], "Step": step, "Qualifier": "R"}
                actions.insert(_int(draw, 0, len(actions)), reset)

    doc: dict[str, Any] = {
        "Steps": [
            {"Name": s, "Initial": s == "s0"}
            | ({"MinSeconds": min_seconds[s]} if s in min_seconds else {})
            for s in steps
        ],
        "Transitions": transitions,
        "Actions": actions,
    }
    if branches:
        doc["Branches"] = branches
    return doc


def qualified_recipe_docs(
    max_nodes: int = 5, max_actions: int = 2, max_sequences: int = 3
) -> st.SearchStrategy[dict[str, Any]]:
    """A valid recipe document of format v1.2.0 that uses every qualifier and MinSeconds."""
    return recipe_docs(max_nodes, max_actions, max_sequences, qualifiers=True)


@st.composite
def endless_recipe_docs(draw: st.DrawFn) -> dict[str, Any]:
    """One step whose actions lead back to it on every outcome, failures included: a job
    that never ends by itself (for long runs, such as the log's cap)."""
    actions = []
    for i in range(_int(draw, 1, 3)):
        kind = _pick(draw, (_push, _push, _pull))
        actions.append(kind(draw, f"a{i}", "s0"))
    _separate_waits(actions)
    loops = [("true", 0), ("timeout", 1), ("error", 2)]
    return {
        "Steps": [{"Name": "s0", "Initial": True}],
        "Transitions": [
            {"Source": "s0", "Target": "s0", "Condition": c, "Priority": p} for c, p in loops
        ],
        "Actions": actions,
    }


@dataclass(frozen=True)
class BuiltRecipe:
    doc: dict[str, Any]
    data: bytes
    graph: Graph


@st.composite
def built_recipes(
    draw: st.DrawFn, docs: st.SearchStrategy[dict[str, Any]] | None = None
) -> BuiltRecipe:
    """A recipe from `docs` (default `recipe_docs()`), built; build() must accept every one."""
    doc = draw(docs if docs is not None else recipe_docs())
    data = msgspec.json.encode(doc)
    result = build(data)
    assert result.graph is not None, "the generator drew an invalid recipe: " + "; ".join(
        str(e) for e in result.errors
    )
    return BuiltRecipe(doc, data, result.graph)


# -------------------------------------------------------------------------------- events


@dataclass
class HostMemory:
    """What a host remembers between events: the time, and every startWork it was given."""

    job_id: str = JOB_ID
    now: int = 0
    started: dict[str, list[StartWork]] = field(default_factory=dict)
    """startWork commands by action name, in order."""

    def observe(self, event: Any, result: StepResult) -> None:
        self.now = max(self.now, event.at)
        for c in result.commands:
            if isinstance(c, StartWork):
                self.started.setdefault(c.action_key.split(":", 1)[1], []).append(c)

    def ids(self, action: str, *works: str) -> list[str]:
        return list(
            dict.fromkeys(c.command_id for c in self.started.get(action, []) if c.work in works)
        )


def _later(draw: st.DrawFn, now: int) -> int:
    if draw(_BOOL):
        return now + _pick(draw, (0, 1, 100, 999, 1000, 2500, 6000))
    return now + _int(draw, 0, 3000)


def next_event(
    draw: st.DrawFn,
    graph: Graph,
    state: SfcState,
    host: HostMemory,
    max_attempts: int | None = None,
    cancels: bool = True,
) -> tuple[Snapshot | None, Any]:
    """One (snapshot, event) for the job in `state`, at or after `host.now`.

    A plain function, not a strategy: call it with the `draw` of a composite, or with
    `data.draw` in a `st.data()` loop. (A strategy built per event costs more than the event.)
    """
    job = host.job_id
    base = None if max_attempts is None else Snapshot(max_attempts=max_attempts)
    push_records = [n for n in state.actions if graph.actions[n].push]
    holds = [c for cs in host.started.values() for c in cs if c.work == "hold"]
    held = state.held_at is not None
    holdable = [
        n
        for n, r in state.actions.items()
        if r.status == "open" and graph.actions[n].hold is not None and r.hold is None
    ]
    open_holds = [r for r in state.actions.values() if r.hold == "open"]
    # Weights follow the state, so that long runs reach the interesting cases: answers while
    # the job runs, holds of work that can be held, hold answers and releases while held.
    # The last kind is junk: hypothesis draws the ends of a range more often than the middle.
    kinds = ["start"] * (8 if state.status == "ready" else 1)
    kinds += ["answer"] * (8 if push_records else 0)
    kinds += ["event"] * (3 if graph.waits_by_type else 0)
    kinds += ["hold"] * (1 if held else 4 if holdable else 2)
    kinds += ["hold answer"] * (6 if open_holds else 1 if holds else 0)
    kinds += ["release"] * (5 if held else 1)
    kinds += ["tick"] * 3 + ["resume", "cancel" if cancels else "tick", "junk"]
    kind = _pick(draw, kinds)
    at = _later(draw, host.now)

    if kind == "start":
        return base, Start(at=at)
    if kind == "hold":
        return base, Hold(at=at)
    if kind == "release":
        return base, Release(at=at)
    if kind == "cancel":  # rare: it ends the job
        if _int(draw, 0, 3) == 1:
            return base, Cancel(at=at, reason=_pick(draw, ("aborted", "stopped")))
        kind = "tick"
    if kind == "tick":
        deadline = next_deadline(state)
        if deadline is not None and draw(_BOOL):
            at = max(host.now, deadline + _pick(draw, (0, 0, 1, 300)))
        outage = _pick(draw, (0, 0, 0, 30_000)) if draw(_BOOL) else _int(draw, 0, 8000)
        return base, Tick(at=at, outage_ms=outage)
    if kind == "resume":
        open_ids = sorted(
            r.command_id
            for r in state.actions.values()
            if r.status == "open" and r.command_id is not None
        )
        live = [i for i in open_ids if draw(_BOOL)]
        if _int(draw, 0, 4) == 0:
            live.append(f"{job}:nowhere#1")
        snapshot = Snapshot(live_work=live, max_attempts=max_attempts or 3)
        return snapshot, Resume(at=at)
    if kind == "answer":
        open_records = [n for n in push_records if state.actions[n].status == "open"]
        pool = open_records if open_records and _int(draw, 0, 3) > 0 else push_records
        name = _pick(draw, pool)
        rec = state.actions[name]
        key = f"{job}:{name}"
        which = _pick(draw, ("current", "none", "earlier", "hold", "never issued"))
        command_id: str | Any = UNSET
        if which == "current" and rec.command_id is not None:
            command_id = rec.command_id
        elif which == "earlier" and host.ids(name, "push", "restart"):
            command_id = _pick(draw, host.ids(name, "push", "restart"))
        elif which == "hold" and host.ids(name, "hold"):
            command_id = _pick(draw, host.ids(name, "hold"))
        elif which == "never issued":
            command_id = f"{key}#{state.sequence + 100}"
        rounds = {"current": rec.round, "older": rec.round - 1, "newer": rec.round + 1}
        which_round = _pick(draw, ("none", "current", "none", "current", "older", "newer"))
        round_: int | UnsetType = rounds.get(which_round, 0) or UNSET  # round 0 does not exist
        if _int(draw, 0, 7) == 0:
            error = _pick(draw, ERRORS)
            return base, ActionFailed(
                at=at, action_key=key, error=error, command_id=command_id, round=round_
            )
        outcome = _pick(draw, ANSWERS)
        return base, ActionCompleted(
            at=at, action_key=key, outcome=outcome, command_id=command_id, round=round_
        )
    if kind == "hold answer":
        current = [r.hold_command_id for r in state.actions.values() if r.hold == "open"]
        if current and _int(draw, 0, 3) > 0:
            command_id = _pick(draw, current)
            hold = next(c for c in holds if c.command_id == command_id)
        else:
            hold = _pick(draw, holds)
        hold_round: int | UnsetType = hold.round if draw(_BOOL) else UNSET
        if _int(draw, 0, 4) == 0:
            return base, ActionFailed(
                at=at,
                action_key=hold.action_key,
                error="cannot hold",
                command_id=hold.command_id,
                round=hold_round,
            )
        return base, ActionCompleted(
            at=at,
            action_key=hold.action_key,
            outcome=_pick(draw, ("held", "held", "busy", "held")),
            command_id=hold.command_id,
            round=hold_round,
        )
    if kind == "event":
        waits = [s for specs in graph.waits_by_type.values() for s in specs]
        open_waits = [
            s for s in waits if s.name in state.actions and state.actions[s.name].status == "open"
        ]
        spec = _pick(draw, open_waits if open_waits and _int(draw, 0, 3) > 0 else waits)
        how = _pick(draw, ("match", "match", "match", "other selector", "other type"))
        field_values = ("left", "right", "c1", "c2", job, "nobody")

        def value(selector: str | None) -> Any:
            if how == "match" and selector is not None:
                return selector.replace("{jobId}", job)
            return _pick(draw, (UNSET, *field_values))

        return base, EventReceived(
            at=at,
            type_id="e.unknown" if how == "other type" else spec.type_id,
            outcome=_pick(draw, ANSWERS),
            subject=value(spec.subject),
            correlation_id=value(spec.correlation_id),
        )
    # junk: another job, an unknown action, an answer to a wait, another action's command id
    names = sorted(graph.actions) or ["a0"]
    name = _pick(draw, names)
    pulls = [n for n in names if n in graph.actions and not graph.actions[n].push]
    choice = _pick(draw, ("other job", "unknown action", "answer to a wait", "foreign"))
    if choice == "other job":
        return base, ActionCompleted(at=at, action_key=f"job-2:{name}", outcome="ok")
    if choice == "unknown action":
        return base, ActionFailed(at=at, action_key=f"{job}:nope", error="?")
    if choice == "answer to a wait" and pulls:
        return base, ActionCompleted(at=at, action_key=f"{job}:{_pick(draw, pulls)}")
    other = _pick(draw, names)
    return base, ActionCompleted(
        at=at, action_key=f"{job}:{name}", outcome="ok", command_id=f"{job}:{other}x#1"
    )


# -------------------------------------------------------------------------------- traces


@dataclass(frozen=True)
class Evolution:
    """One call of evolve: its inputs and its result, or the exception it raised."""

    prior: SfcState
    snapshot: Snapshot | None
    event: Any
    result: StepResult | None
    error: BaseException | None = None


@dataclass(frozen=True)
class Trace:
    recipe: BuiltRecipe
    initial: SfcState
    max_attempts: int | None
    steps: list[Evolution]

    @property
    def graph(self) -> Graph:
        return self.recipe.graph

    def __repr__(self) -> str:
        """The recipe and the events as wire JSON: what a failing example needs to be rerun."""
        lines = [f"Trace(max_attempts={self.max_attempts!r})", "recipe:", self.recipe.data.decode()]
        lines.append("events (snapshot, event):")
        for e in self.steps:
            snapshot = "null" if e.snapshot is None else msgspec.json.encode(e.snapshot).decode()
            lines.append(f"  {snapshot} {msgspec.json.encode(e.event).decode()}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # hypothesis prints falsifying examples with this

    def results(self) -> list[tuple[Evolution, StepResult]]:
        """Every evolution that returned, with its result."""
        return [(e, e.result) for e in self.steps if e.result is not None]


@st.composite
def job_traces(
    draw: st.DrawFn,
    max_events: int = 40,
    after_end: int = 3,
    recipes: st.SearchStrategy[BuiltRecipe] | None = None,
    cancels: bool = True,
) -> Trace:
    """A recipe and up to `max_events` events, each drawn from the state the last one left.

    After the job ended, at most `after_end` more events are drawn (they must be absorbed).
    With `cancels=False` no cancel is drawn, for jobs meant to run long.
    """
    built = draw(recipes if recipes is not None else built_recipes())
    max_attempts = _pick(draw, (None, 1, 2, 3))
    state = initial = new_state(built.graph, JOB_ID, SCOPE)
    host = HostMemory()
    steps: list[Evolution] = []
    ended = 0
    # Most traces run the full length (the job may end first); the count still shrinks.
    count = _int(draw, 1, max_events) if _int(draw, 0, 3) == 0 else max_events
    for _ in range(count):
        if state.status in ENDED:
            ended += 1
            if ended > after_end:
                break
        snapshot, event = next_event(draw, built.graph, state, host, max_attempts, cancels)
        try:
            result = evolve(built.graph, state, snapshot, event)
        except Exception as exc:  # property 1 reports it
            steps.append(Evolution(state, snapshot, event, None, exc))
            break
        steps.append(Evolution(state, snapshot, event, result))
        host.observe(event, result)
        state = result.state
    return Trace(built, initial, max_attempts, steps)

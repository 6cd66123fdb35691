"""Properties of evolve over random v1.2.0 recipes with every qualifier, and random traces.

A recipe is either a chain of steps (a back edge on `again` from some steps that gate), each
step with N blocks, non-gating blocks of any qualifier, R blocks of stored actions defined in
other steps, and sometimes MinSeconds; or one of tests/strategies.py's qualified charts
(divergences, pull events, holds). A trace is answers (to any block, gating or not, with
`done`, `again` or a failure), ticks (some after an outage), hold/release and cancel, at
increasing times. Properties:

1. evolve never raises, and every state round-trips;
2. the same trace gives byte-identical results;
3. a non-gating outcome never changes which steps are active, the job's status or its fault,
   nor any command: the trace with every non-gating outcome changed walks the same chart;
4. after the job's end, no non-pulse work stays open (every such command was answered,
   timed out or withdrawn), and a completed job keeps no non-gating record;
5. the state holds at most one record per action block, and a non-gating record only while
   its work is open, its timer pending or its step still counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generated.command_v1_0 import CancelWork, StartWork
from generated.event_v1_0 import (
    ActionCompleted,
    ActionFailed,
    Cancel,
    Hold,
    Release,
    Start,
    Tick,
)
from generated.step_result_v1_2 import StepResult
from sfc.builder import RECIPE_V1_2_0, build
from sfc.codec import encode, state_decoder
from sfc.evolution import ENDED, evolve, new_state
from sfc.graph import PULSES, STORED, TIMED, Graph
from tests.strategies import built_recipes, qualified_recipe_docs

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NON_GATING = ["P", "P1", "P0", "S", "L", "D", "SD", "DS", "SL"]
KINDS = ["answer"] * 8 + ["tick"] * 4 + ["outage", "hold", "release", "fail", "cancel"]
"""What a trace does next, weighted so that most jobs run to their end."""


@st.composite
def qualified_recipes(draw: st.DrawFn) -> Graph:
    n_steps = draw(st.integers(2, 5))
    steps = [f"s{i}" for i in range(n_steps)]
    actions: list[dict[str, Any]] = []
    gating: set[str] = set()
    stored: list[tuple[str, str]] = []  # (name, step)
    for i, step in enumerate(steps):
        for k in range(draw(st.integers(0, 2))):
            actions.append(_block(draw, f"n{i}_{k}", step, "N"))
            gating.add(step)
        for k in range(draw(st.integers(0, 3))):
            qualifier = draw(st.sampled_from(NON_GATING))
            name = f"{qualifier.lower()}{i}_{k}"
            actions.append(_block(draw, name, step, qualifier))
            if qualifier in STORED:
                stored.append((name, step))
    for step in steps:
        for name, home in stored:
            if home != step and draw(st.integers(0, 3)) == 0:
                actions.append({"Name": name, "Step": step, "Qualifier": "R"})
    doc_steps: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        entry: dict[str, Any] = {"Name": step, "Initial": i == 0}
        if draw(st.integers(0, 3)) == 0:
            entry["MinSeconds"] = draw(st.sampled_from([0.5, 1, 3, 10]))
        doc_steps.append(entry)
    transitions: list[dict[str, Any]] = []
    for i in range(n_steps - 1):
        a, b = steps[i], steps[i + 1]
        if a in gating and draw(st.booleans()):
            back = steps[draw(st.integers(0, i))]
            transitions.append({"Source": a, "Target": back, "Condition": "again", "Priority": 0})
            transitions.append({"Source": a, "Target": b, "Condition": "true", "Priority": 1})
        else:
            transitions.append({"Source": a, "Target": b, "Condition": "true", "Priority": 0})
    doc = {"Steps": doc_steps, "Transitions": transitions, "Actions": actions}
    result = build(msgspec.json.encode(doc), dataschema=RECIPE_V1_2_0)
    assert result.graph is not None, (result.errors, doc)
    return result.graph


def _block(draw: st.DrawFn, name: str, step: str, qualifier: str) -> dict[str, Any]:
    block: dict[str, Any] = {
        "Name": name,
        "Step": step,
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": f"t.{name}",
        "TimeoutSeconds": draw(st.sampled_from([2, 5, 30])),
        "MaxAttempts": draw(st.integers(1, 2)),
    }
    if qualifier in TIMED:
        block["DurationSeconds"] = draw(st.sampled_from([0.5, 1, 2, 5]))
    return block


@dataclass(frozen=True)
class Op:
    kind: str
    at: int
    action: str = ""
    outcome: str = ""
    outage: int = 0


@st.composite
def traces(draw: st.DrawFn, graph: Graph) -> list[Op]:
    names = sorted(graph.actions)
    ops: list[Op] = []
    at = 0
    for _ in range(draw(st.integers(1, 40))):
        at += draw(st.sampled_from([0, 100, 500, 1000, 2000, 5000]))
        kind = draw(st.sampled_from(KINDS))
        if kind in ("answer", "fail") and not names:
            kind = "tick"
        if kind in ("answer", "fail"):
            ops.append(
                Op(
                    kind,
                    at,
                    draw(st.sampled_from(names)),
                    draw(st.sampled_from(["done", "ok", "again"])),
                )
            )
        elif kind == "outage":
            gap = draw(st.sampled_from([1000, 3000, 8000]))
            at += gap
            ops.append(Op("tick", at, outage=gap))
        else:
            ops.append(Op(kind, at))
    return ops


def _event(op: Op, job: str) -> Any:
    if op.kind == "answer":
        return ActionCompleted(at=op.at, action_key=f"{job}:{op.action}", outcome=op.outcome)
    if op.kind == "fail":
        return ActionFailed(at=op.at, action_key=f"{job}:{op.action}", error="jammed")
    if op.kind == "tick":
        return Tick(at=op.at, outage_ms=op.outage)
    if op.kind == "hold":
        return Hold(at=op.at)
    if op.kind == "release":
        return Release(at=op.at)
    return Cancel(at=op.at, reason="operator stop")


def run(graph: Graph, ops: list[Op]) -> list[tuple[Op | None, StepResult]]:
    state = new_state(graph, "j", "p")
    out: list[tuple[Op | None, StepResult]] = []
    result = evolve(graph, state, None, Start(at=0))
    out.append((None, result))
    state = result.state
    for op in ops:
        result = evolve(graph, state, None, _event(op, "j"))
        out.append((op, result))
        state = result.state
    return out


def _non_gating(graph: Graph, op: Op | None) -> bool:
    return op is not None and op.kind in ("answer", "fail") and not graph.actions[op.action].gating


@st.composite
def cases(draw: st.DrawFn) -> tuple[Graph, list[Op]]:
    """A recipe of either strategy (this module's chains, or tests/strategies.py's charts
    with divergences, pull events and holds), and a trace."""
    if draw(st.booleans()):
        graph = draw(qualified_recipes())
    else:
        graph = draw(built_recipes(qualified_recipe_docs())).graph
    return graph, draw(traces(graph))


@PROPERTY
@given(cases())
def test_evolve_never_raises_and_states_round_trip(case: tuple[Graph, list[Op]]) -> None:
    graph, ops = case
    for _, result in run(graph, ops):
        assert result.disposition in ("applied", "absorbed", "rejected")
        assert state_decoder.decode(encode(result.state)) == result.state


@PROPERTY
@given(cases())
def test_the_same_trace_gives_byte_identical_results(case: tuple[Graph, list[Op]]) -> None:
    graph, ops = case
    first = [msgspec.json.encode(r) for _, r in run(graph, ops)]
    again = [msgspec.json.encode(r) for _, r in run(graph, ops)]
    assert first == again


def _walk(result: StepResult) -> tuple[Any, ...]:
    s = result.state
    return (s.active_steps, s.status, s.fault.code if s.fault else None, s.outcomes)


def _other_outcome(graph: Graph, op: Op) -> Op:
    """The same op with another outcome for a non-gating block: an answer becomes a
    failure, a failure an answer with an outcome no transition names."""
    if not _non_gating(graph, op):
        return op
    if op.kind == "answer":
        return Op("fail", op.at, op.action)
    return Op("answer", op.at, op.action, "unheard-of")


@PROPERTY
@given(cases())
def test_a_non_gating_outcome_never_changes_the_chart(case: tuple[Graph, list[Op]]) -> None:
    """The same trace with every non-gating outcome changed (done <-> error) walks the same
    chart, and gives the same commands: an outcome of a non-gating block routes nothing and
    faults nothing."""
    graph, ops = case
    first = run(graph, ops)
    other = run(graph, [_other_outcome(graph, op) for op in ops])
    assert [_walk(r) for _, r in first] == [_walk(r) for _, r in other]
    assert [r.commands for _, r in first] == [r.commands for _, r in other]


@PROPERTY
@given(cases())
def test_after_the_job_end_no_non_pulse_work_stays_open(case: tuple[Graph, list[Op]]) -> None:
    graph, ops = case
    results = run(graph, ops)
    open_work: dict[str, str] = {}  # action -> its open command id
    for op, r in results:
        # the commands first: timers due before an answer fire before it is applied
        for c in r.commands:
            name = c.action_key.rpartition(":")[2]
            if isinstance(c, StartWork) and c.work in ("push", "restart"):
                open_work[name] = c.command_id
            elif isinstance(c, CancelWork) and open_work.get(name) == c.command_id:
                del open_work[name]
        if op is not None and op.kind in ("answer", "fail") and r.disposition == "applied":
            rec = r.state.actions.get(op.action)
            if rec is None or rec.status == "done":
                open_work.pop(op.action, None)
    final = results[-1][1].state
    if final.status not in ENDED:
        return
    left = {n for n in open_work if graph.actions[n].qualifier not in PULSES}
    left -= {n for n, rec in final.actions.items() if rec.status == "done"}
    assert left == set(), (final.status, left)
    if final.status == "completed":
        assert all(graph.actions[n].gating for n in final.actions)


@PROPERTY
@given(cases())
def test_at_most_one_record_per_block_and_only_while_it_matters(
    case: tuple[Graph, list[Op]],
) -> None:
    graph, ops = case
    for _, r in run(graph, ops):
        s = r.state
        assert set(s.actions) <= set(graph.actions)
        if s.status != "running":
            continue
        for name, rec in s.actions.items():
            spec = graph.actions[name]
            if spec.gating or rec.status != "done":
                continue
            pos = graph.position.get(spec.step)
            live = spec.step in s.active_steps or (
                pos is not None and any(d.name == pos.divergence for d in s.divergences)
            )
            assert live, (name, rec)
        assert set(s.dwells) <= set(s.active_steps)

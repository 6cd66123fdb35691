"""Properties of evolve over random valid recipes and random event sequences (#4, #5).

In the manner of h2's `test_state_machines.py`: hypothesis draws a recipe (tests/strategies.py)
and then events one at a time from the job's current state, and every pair (state, event)
must give a valid state or the documented refusal. Each property is its own test, so a
failing one shrinks on its own and names itself.

1. evolve never raises;
2. the state, and the whole StepResult, survive an encode/decode round trip;
3. replaying the same events from the same start gives byte-identical results;
4. at most one open attempt per action: one record per action, every re-dispatch cancels
   the attempt it replaces first, and the host never holds two live commands for one open
   action;
5. next_deadline is the earliest deadline that counts (defined below from the spec), and a
   tick just before it is absorbed while a tick at it is applied;
6. while held, the only startWork is work=hold (#5);
7. a completed, faulted or cancelled job never changes again;
8. a restart is only ever sent after a `held` answer for that action (#5);
9. no command id is issued twice with different content, and no withdrawn command id is
   issued again (#5);
10. absorbed and rejected results leave the state byte-identical and emit no commands;
    every result has a reason;
11. the decision log never exceeds 200 entries, and it loses only its oldest entries.

What "content" means in 9: everything in startWork except the deadline. A command id is
issued again with the same work, type id, attempt, round, parameters and selector; its
deadline moves when a release or an outage moved the deadline of the open work.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st
from msgspec import UNSET
from msgspec.structs import replace

from generated.command_v1_0 import CancelWork, StartWork
from generated.event_v1_0 import ActionCompleted, Release, Start, Tick
from generated.state_v1_5 import ActionRecord, DivergenceRecord, SfcState
from generated.step_result_v1_0 import (
    Cancelled,
    Complete,
    Defer,
    FaultContinuation,
)
from generated.step_result_v1_2 import StepResult
from sfc.builder import build
from sfc.codec import encode, state_decoder, step_result_decoder
from sfc.evolution import ENDED, evolve, new_state, next_deadline
from sfc.graph import Graph
from tests.corehelpers import push, recipe, t
from tests.strategies import BuiltRecipe, Trace, built_recipes, endless_recipe_docs, job_traces

# Generation runs evolve (each event is drawn from the state the last one left), so it is
# slower than hypothesis expects of a strategy; that is the point, not a problem.
PROPERTY = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOLD_PROPERTY = settings(PROPERTY, max_examples=150)
"""For the properties of equipment hold, whose cases need a hold, an answer and a release."""


def starts(result: StepResult) -> list[StartWork]:
    return [c for c in result.commands if isinstance(c, StartWork)]


def action_of(action_key: str) -> str:
    return action_key.split(":", 1)[1]


# ------------------------------------------------------------------------ the generator


@settings(max_examples=50, deadline=None)
@given(built_recipes())
def test_every_drawn_recipe_builds(built: BuiltRecipe) -> None:
    # built_recipes() asserts it already; this says so where a reader looks for it.
    assert build(built.data).ok


# ------------------------------------------------------------------------ 1. never raises


@PROPERTY
@given(job_traces())
def test_evolve_never_raises(trace: Trace) -> None:
    for step in trace.steps:
        if step.error is not None:
            raise AssertionError(
                f"evolve raised on {msgspec.json.encode(step.event).decode()}"
            ) from step.error


# ------------------------------------------------------------------------ 2. round trip


@PROPERTY
@given(job_traces())
def test_state_and_result_survive_an_encode_decode_round_trip(trace: Trace) -> None:
    for _, result in trace.results():
        data = encode(result.state)
        back = state_decoder.decode(data)
        assert back == result.state
        assert encode(back) == data
        whole = encode(result)
        again = step_result_decoder.decode(whole)
        assert again == result
        assert encode(again) == whole


# ------------------------------------------------------------------------ 3. replay


@PROPERTY
@given(job_traces())
def test_replaying_the_same_events_gives_byte_identical_results(trace: Trace) -> None:
    state = new_state(trace.graph, trace.initial.job_id, trace.initial.scope)
    assert encode(state) == encode(trace.initial)
    for step, result in trace.results():
        again = evolve(trace.graph, state, step.snapshot, step.event)
        assert encode(again) == encode(result)
        # The same from a state that went through the wire: the host stores bytes.
        stored = state_decoder.decode(encode(step.prior))
        assert encode(evolve(trace.graph, stored, step.snapshot, step.event)) == encode(result)
        state = again.state


@PROPERTY
@given(job_traces())
def test_evolve_leaves_the_state_it_is_given_as_it_was(trace: Trace) -> None:
    """The host relies on it: it compares the loaded state with the new one (the waits
    index), and writes the stored bytes back unchanged when evolve returned the same state."""
    for step, _ in trace.results():
        before = encode(step.prior)
        result = evolve(trace.graph, step.prior, step.snapshot, step.event)
        assert encode(step.prior) == before
        if result.state is step.prior:
            assert encode(result.state) == before


# ------------------------------------------------------------------------ 4. one attempt


@PROPERTY
@given(job_traces())
def test_at_most_one_open_attempt_per_action(trace: Trace) -> None:
    graph = trace.graph
    live: dict[str, dict[str, StartWork]] = {}  # action name -> live work command ids
    last_push: dict[tuple[str, int], str] = {}  # (action, round) -> latest push command id
    for _, result in trace.results():
        state = result.state
        assert set(state.actions) <= set(graph.actions)
        assert all(s in graph.step_actions for s in state.active_steps)
        cancelled_here: dict[str, str] = {}
        for c in result.commands:
            if isinstance(c, CancelWork):
                cancelled_here[c.command_id] = c.reason
                live.get(action_of(c.action_key), {}).pop(c.command_id, None)
                continue
            name = action_of(c.action_key)
            if c.work == "hold":
                continue
            if c.work == "push":
                previous = last_push.get((name, c.round))
                if c.attempt > 1 and previous != c.command_id:
                    # a re-dispatch: the attempt it replaces is withdrawn first, in this result
                    assert previous is not None, f"attempt {c.attempt} of {name} has no first"
                    assert cancelled_here.get(previous) == "redispatch", (
                        f"{c.command_id} re-dispatches {name}, but {previous} was not "
                        f"cancelled before it (commands: {result.commands})"
                    )
                last_push[(name, c.round)] = c.command_id
            live.setdefault(name, {})[c.command_id] = c
        for name, rec in state.actions.items():
            if rec.status != "open":
                continue
            assert rec.command_id is not None
            same_round = {i for i, c in live.get(name, {}).items() if c.round == rec.round}
            allowed = set() if rec.hold == "held" else {rec.command_id}
            assert same_round <= allowed, (
                f"{name} is open with {rec.command_id} (hold {rec.hold}), but the host holds "
                f"{sorted(same_round)} live for round {rec.round}"
            )


# ------------------------------------------------------------------------ 5. next deadline


def deadline_that_counts(state: SfcState) -> int | None:
    """The earliest deadline the host must tick for, from the spec (docs/recipes.md, "Time, attempts and late responses"; "Hold and
    release; Equipment hold):

    - only a running job has one;
    - a hold command runs against its own deadline, also while the job is held;
    - while the job is held no other deadline counts (NextDeadline is empty without holds);
    - a work deadline counts for open work, except while its hold command is unanswered
      (after a release before the answer, "the answer decides").
    """
    if state.status != "running":
        return None
    due: list[int] = []
    for rec in state.actions.values():
        if rec.status != "open":
            continue
        if rec.hold == "open":
            assert rec.hold_deadline is not None
            due.append(rec.hold_deadline)
        elif state.held_at is None:
            assert rec.deadline is not None, "open work without a deadline"
            due.append(rec.deadline)
    return min(due, default=None)


@PROPERTY
@given(job_traces())
def test_next_deadline_is_the_earliest_deadline_that_counts(trace: Trace) -> None:
    graph = trace.graph
    for step, result in trace.results():
        state = result.state
        expected = deadline_that_counts(state)
        assert next_deadline(state) == expected
        if state.status != "running":
            continue
        now = step.event.at
        if expected is None:
            later = evolve(graph, state, None, Tick(at=now + 10**9))
            assert later.disposition == "absorbed", later.reason
            continue
        if expected - 1 >= now:
            before = evolve(graph, state, None, Tick(at=expected - 1))
            assert before.disposition == "absorbed", before.reason
        at = evolve(graph, state, None, Tick(at=max(expected, now)))
        assert at.disposition == "applied", at.reason


# ------------------------------------------------------------------------ 6. held


@HOLD_PROPERTY
@given(job_traces())
def test_no_startwork_while_held_except_hold_commands(trace: Trace) -> None:
    for step, result in trace.results():
        held = result.state.held_at is not None or (
            step.prior.held_at is not None and not isinstance(step.event, Release)
        )
        if held:
            works = [c.work for c in starts(result)]
            assert set(works) <= {"hold"}, f"{works} while held ({result.reason})"


# ------------------------------------------------------------------------ 7. ended jobs


@PROPERTY
@given(job_traces())
def test_an_ended_job_never_changes_again(trace: Trace) -> None:
    for step, result in trace.results():
        if step.prior.status in ENDED:
            assert result.disposition == "absorbed"
            assert encode(result.state) == encode(step.prior)
            assert result.commands == []


# ------------------------------------------------------------------------ 8. restart


@HOLD_PROPERTY
@given(job_traces())
def test_a_restart_is_only_sent_after_a_held_answer(trace: Trace) -> None:
    held_answers: Counter[str] = Counter()  # applied `held` answers not yet restarted
    issued: set[str] = set()
    for step, result in trace.results():
        ev = step.event
        if (
            result.disposition == "applied"
            and isinstance(ev, ActionCompleted)
            and ev.outcome == "held"
            and ev.command_id is not UNSET
            and ev.command_id.endswith(":hold")
        ):
            held_answers[action_of(ev.action_key)] += 1
        for c in starts(result):
            if c.work == "restart" and c.command_id not in issued:
                name = action_of(c.action_key)
                assert held_answers[name] > 0, f"restart {c.command_id} without a held answer"
                held_answers[name] -= 1
            issued.add(c.command_id)


# ------------------------------------------------------------------------ 9. command ids


def content(c: StartWork) -> tuple[Any, ...]:
    """What a re-issue of a command id must repeat: all of startWork but the deadline."""
    return (c.work, c.action_key, c.type_id, c.attempt, c.round, c.parameters, c.selector)


@HOLD_PROPERTY
@given(job_traces())
def test_no_command_id_is_issued_twice_with_different_content(trace: Trace) -> None:
    first: dict[str, StartWork] = {}
    withdrawn: set[str] = set()
    for _, result in trace.results():
        for c in result.commands:
            if isinstance(c, CancelWork):
                withdrawn.add(c.command_id)
                continue
            assert c.command_id not in withdrawn, f"{c.command_id} issued after its cancelWork"
            seen = first.setdefault(c.command_id, c)
            assert content(c) == content(seen), f"{c} re-issues {seen} with other content"


# ------------------------------------------------------------------------ 10. dispositions


@PROPERTY
@given(job_traces())
def test_absorbed_and_rejected_change_nothing_and_every_result_has_a_reason(
    trace: Trace,
) -> None:
    for step, result in trace.results():
        assert result.reason.strip()
        if result.disposition != "applied":
            assert encode(result.state) == encode(step.prior)
            assert result.commands == []
        status = result.state.status
        expected = {
            "completed": Complete,
            "faulted": FaultContinuation,
            "cancelled": Cancelled,
        }.get(status, Defer)
        assert isinstance(result.continuation, expected)
        if isinstance(step.event, Start) and step.prior.status == "ready":
            assert result.disposition == "applied"


# ------------------------------------------------------------------------ 11. a bounded state

_WIDEST = 10**19 - 1
"""A counter or time at its widest (19 digits)."""


def _texts(trace: Trace) -> tuple[int, int, int]:
    """The widest outcome, error and cancel reason the trace's events carry (its alphabet,
    not its length): the state keeps texts, never more of them as the job runs."""
    outcome = max(len(o) for o in ("timeout", "error", "done", "held"))
    error, reason = len("failure reported"), 0
    for e in trace.steps:
        ev = e.event
        if isinstance(getattr(ev, "outcome", None), str):
            outcome = max(outcome, len(ev.outcome))
        if isinstance(getattr(ev, "error", None), str):
            error = max(error, len(ev.error))
        if isinstance(getattr(ev, "reason", None), str):
            reason = max(reason, len(ev.reason))
    return outcome, error, reason


def state_bound(graph: Graph, job_id: str, scope: str, texts: tuple[int, int, int]) -> int:
    """The encoded size of the largest state a job of this recipe can have, fault aside.

    The records kept at once are those of one top-level step, or of every sequence of one
    divergence; each at its widest (counters of 19 digits, the widest texts), plus a round
    counter for every action on a cycle and every other field at its widest.
    """
    ow, ew, rw = texts
    type_width = max(
        [len(a.type_id) for a in graph.actions.values()]
        + [len(c.type_id) for a in graph.actions.values() for c in (a.hold, a.restart) if c]
        + [1]
    )
    top = [(s, [s], graph.step_actions[s], None) for s in graph.steps if s not in graph.position]
    groups = top + [
        (d, [x for seq in spec.sequences for x in seq], graph.divergence_actions[d], spec)
        for d, spec in graph.divergences.items()
    ]
    widest = 0
    for _, steps, specs, spec in groups:
        records = {
            a.name: ActionRecord(
                status="open",
                work="restart",
                type_id="t" * type_width,
                attempt=_WIDEST,
                round=_WIDEST,
                first_command=_WIDEST,
                deadline=_WIDEST,
                timer=_WIDEST,
                command_id=f"{job_id}:{a.name}#{_WIDEST}",
                outcome="o" * ow,
                error="e" * ew,
                hold="notHeld",
                hold_command_id=f"{job_id}:{a.name}#{_WIDEST}:hold",
                hold_deadline=_WIDEST,
                restarted=False,
            )
            for a in specs
        }
        n = 0 if spec is None else len(spec.sequences)
        state = SfcState(
            format="1.5",
            job_id=job_id,
            scope=scope,
            recipe_hash=graph.recipe_hash,
            status="cancelled",
            active_steps=steps,
            divergences=[]
            if spec is None
            else [
                DivergenceRecord(name=spec.name, sequences=list(range(n)), finished=list(range(n)))
            ],
            actions=records,
            rounds={a: _WIDEST for a in graph.cyclic},
            dwells={},
            sequence=_WIDEST,
            started_at=_WIDEST,
            held_at=_WIDEST,
            ended_at=_WIDEST,
            fault=None,
            outcomes=["o" * ow] * max(len(v) for v in graph.step_actions.values()),
            cancel_reason="r" * rw,
        )
        widest = max(widest, len(encode(state)))
    return widest


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        job_traces(),
        job_traces(max_events=250, recipes=built_recipes(endless_recipe_docs()), cancels=False),
    )
)
def test_the_state_never_outgrows_a_bound_computed_from_the_recipe(trace: Trace) -> None:
    """However long the trace, the state stays within what the recipe allows at once."""
    bound = state_bound(trace.graph, trace.initial.job_id, trace.initial.scope, _texts(trace))
    largest = 0
    for _, result in trace.results():
        size = len(encode(replace(result.state, fault=None)))
        assert size <= bound, (size, bound)
        largest = max(largest, size)
    target(float(largest) / bound, label="state size against its bound")


# ------------------------------------------------------------------------ propagation limit


def wide(n: int) -> bytes:
    """An action-free initial step into a simultaneous divergence of n one-action sequences."""
    doc = recipe(
        ["init", *(f"p{i}" for i in range(n))],
        transitions=[t("init", "par")],
        actions=[push(f"a{i}", f"p{i}") for i in range(n)],
        branches=[
            {"Name": "par", "Type": "simultaneous", "Branches": [[f"p{i}"] for i in range(n)]}
        ],
    )
    return msgspec.json.encode(doc)


def test_a_divergence_of_10001_sequences_faults_with_propagation_limit() -> None:
    built = build(wide(10_001))
    assert built.graph is not None, built.errors
    state = new_state(built.graph, "job-1", "test")
    result = evolve(built.graph, state, None, Start(at=0))
    assert result.disposition == "applied"
    assert isinstance(result.continuation, FaultContinuation)
    assert result.continuation.code == "propagation_limit"
    assert result.state.status == "faulted"
    assert result.state.fault is not None and result.state.fault.code == "propagation_limit"
    assert result.commands == []  # the evaluation is discarded; nothing was open before it
    assert state_decoder.decode(encode(result.state)) == result.state


def test_ten_thousand_step_entries_are_still_within_the_limit() -> None:
    built = build(wide(9_999))  # init + 9,999 steps entered, 9,999 commands dispatched
    assert built.graph is not None, built.errors
    result = evolve(built.graph, new_state(built.graph, "job-1", "test"), None, Start(at=0))
    assert result.disposition == "applied"
    assert isinstance(result.continuation, Defer)
    assert len(starts(result)) == 9_999

"""The simulation: scripted equipment (issue #6, item 2) and the virtual-clock host, rule by rule."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from generated.command_v1_0 import StartWork
from generated.dryrun_result_v1_2 import DryRunResult
from generated.event_v1_0 import (
    ActionCompleted,
    ActionFailed,
    Cancel,
    EventReceived,
    Hold,
    Release,
    Start,
    Tick,
)
from generated.simulation_script_v1_0 import SimulationScript
from generated.step_result_v1_0 import Cancelled, Complete, FaultContinuation
from sfc.codec import encode
from sfc.graph import Graph
from sfc.simulation import (
    DEFAULT_EVALUATION_LIMIT,
    DEFAULT_TIME_LIMIT_MS,
    Reply,
    ScriptError,
    Simulation,
    job_id_problem,
    load_script,
    parse_reply,
)
from tests.corehelpers import divergence, graph_of, pull, push, recipe, t

HOLD = {"TypeId": "t.hold", "TimeoutSeconds": 5}
RESTART = {"TypeId": "t.restart", "TimeoutSeconds": 20}


def one_push(timeout: int = 10, attempts: int = 3, **extra: Any) -> Graph:
    return graph_of(
        recipe(["s1"], actions=[push("a", "s1", timeout=timeout, MaxAttempts=attempts, **extra)])
    )


def script(doc: dict[str, Any], graph: Graph | None = None) -> SimulationScript:
    return load_script(msgspec.json.encode(doc), graph)


def run(graph: Graph, doc: dict[str, Any] | None = None, **kw: Any) -> Simulation:
    sim = Simulation(graph, None if doc is None else script(doc, graph), **kw)
    sim.run()
    return sim


def events(sim: Simulation, kind: type) -> list[Any]:
    return [e.event for e in sim.transcript if isinstance(e.event, kind)]


def started(sim: Simulation) -> list[StartWork]:
    return [c for e in sim.transcript for c in e.commands if isinstance(c, StartWork)]


def timeline(sim: Simulation) -> list[tuple[int, str]]:
    return [(e.at_ms, type(e.event).__name__) for e in sim.transcript]


# --------------------------------------------------------------------------- the n-th reply


def test_the_nth_ask_of_an_action_gets_the_nth_reply() -> None:
    sim = run(one_push(), {"replies": {"a": ["silent", "silent", "ok@100"]}})
    assert [(a.key, a.command_id, a.reply) for a in sim.asks] == [
        ("a", "job-1:a#1", "silent"),
        ("a", "job-1:a#2", "silent"),
        ("a", "job-1:a#3", "ok@100"),
    ]
    (answer,) = events(sim, ActionCompleted)
    assert (answer.at, answer.command_id) == (20_100, "job-1:a#3")
    assert sim.end == "completed"


def test_after_the_list_the_default_applies() -> None:
    sim = run(one_push(), {"default": "fine@50", "replies": {"a": ["silent"]}})
    assert [a.reply for a in sim.asks] == ["silent", "fine@50"]
    (answer,) = events(sim, ActionCompleted)
    assert (answer.at, answer.outcome) == (10_050, "fine")
    assert sim.result().transcript[-1].continuation == Complete(outcomes=["fine"])


def test_without_a_script_every_action_answers_ok_at_once() -> None:
    sim = run(one_push())
    assert timeline(sim) == [(0, "Start"), (0, "ActionCompleted")]
    assert events(sim, ActionCompleted)[0].outcome == "ok"
    assert sim.end == "completed"


def test_a_script_without_default_answers_ok() -> None:
    sim = run(one_push(), {"replies": {"a": []}})
    assert [a.reply for a in sim.asks] == ["ok"]


def test_each_round_of_a_loop_is_a_new_ask() -> None:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[push("a", "s1")],
            transitions=[t("s1", "s1", "again", 0), t("s1", "s2", "true", 1)],
        )
    )
    sim = run(graph, {"replies": {"a": ["again", "again", "enough"]}})
    assert [(c.command_id, c.round) for c in started(sim)] == [
        ("job-1:a#1", 1),
        ("job-1:a#2", 2),
        ("job-1:a#3", 3),
    ]
    assert [e.outcome for e in events(sim, ActionCompleted)] == ["again", "again", "enough"]


# --------------------------------------------------------------------------- the reply grammar


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ("silent", Reply("silent")),
        ("ok", Reply("outcome", outcome="ok")),
        ("torque_ok@250", Reply("outcome", outcome="torque_ok", delay_ms=250)),
        ("error", Reply("error")),
        ("error@7", Reply("error", delay_ms=7)),
        ("error:jammed", Reply("error", error="jammed")),
        ("error:bolt 3 jammed@1500", Reply("error", error="bolt 3 jammed", delay_ms=1500)),
        ("held", Reply("outcome", outcome="held")),
    ],
)
def test_reply_grammar(text: str, reply: Reply) -> None:
    assert parse_reply(text) == reply


@pytest.mark.parametrize(
    "text", ["", "ok@", "ok@-5", "ok@1.5", "o k", "a:b", "silent@5", "timeout", "error@x"]
)
def test_replies_outside_the_grammar_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a reply"):
        parse_reply(text)


def test_silent_lets_the_deadline_pass() -> None:
    sim = run(one_push(attempts=1), {"replies": {"a": ["silent"]}})
    assert timeline(sim) == [(0, "Start"), (10_000, "Tick")]
    assert sim.end == "faulted"
    assert sim.fault is not None and sim.fault.code == "timeout"


def test_an_error_reply_is_a_failure_with_its_text_after_its_delay() -> None:
    sim = run(one_push(), {"replies": {"a": ["error:jammed@300"]}})
    (failure,) = events(sim, ActionFailed)
    assert (failure.at, failure.error, failure.command_id, failure.round) == (
        300,
        "jammed",
        "job-1:a#1",
        1,
    )
    assert sim.end == "faulted"
    assert sim.fault is not None and sim.fault.code == "error"


def test_an_error_reply_without_text_carries_no_text() -> None:
    sim = run(one_push(), {"replies": {"a": ["error"]}})
    (failure,) = events(sim, ActionFailed)
    assert failure.error is msgspec.UNSET


# --------------------------------------------------------------------------- once per command id


def test_a_release_that_issues_a_command_id_again_does_not_ask_again() -> None:
    sim = run(
        one_push(),
        {
            "replies": {"a": ["ok@5000", "never"]},
            "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "release", "atMs": 2000}],
        },
    )
    release = next(e for e in sim.transcript if isinstance(e.event, Release))
    assert [c.command_id for c in release.commands if isinstance(c, StartWork)] == ["job-1:a#1"]
    assert [(a.command_id, a.reply) for a in sim.asks] == [("job-1:a#1", "ok@5000")]
    assert [(e.at, e.outcome) for e in events(sim, ActionCompleted)] == [(5000, "ok")]


# --------------------------------------------------------------------------- hold and restart


def held_tighten() -> Graph:
    return graph_of(
        recipe(
            ["s1", "s2"],
            actions=[push("tighten", "s1", timeout=60, Hold=HOLD, Restart=RESTART)],
            transitions=[t("s1", "s2")],
        )
    )


def test_hold_and_restart_commands_are_asked_under_their_own_keys() -> None:
    sim = run(
        held_tighten(),
        {
            "default": "nope",
            "replies": {"tighten": ["silent"], "tighten:restart": ["restarted@100"]},
            "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "release", "atMs": 3000}],
        },
    )
    assert [(a.key, a.command_id, a.reply) for a in sim.asks] == [
        ("tighten", "job-1:tighten#1", "silent"),
        ("tighten:hold", "job-1:tighten#2:hold", "held"),
        ("tighten:restart", "job-1:tighten#3", "restarted@100"),
    ]
    assert [c.work for c in started(sim)] == ["push", "hold", "restart"]
    assert sim.end == "completed"
    assert "tighten answered restarted" in [d.decision for e in sim.transcript for d in e.decisions]


def test_a_hold_reply_from_the_script_replaces_the_held_default() -> None:
    sim = run(
        held_tighten(),
        {
            "replies": {"tighten": ["ok@4000"], "tighten:hold": ["busy@10"]},
            "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "release", "atMs": 3000}],
        },
    )
    hold_answer = events(sim, ActionCompleted)[0]
    assert (hold_answer.at, hold_answer.outcome, hold_answer.command_id) == (
        1010,
        "busy",
        "job-1:tighten#2:hold",
    )
    assert [a.key for a in sim.asks] == ["tighten", "tighten:hold"]  # no restart: not held
    assert sim.end == "completed"


# --------------------------------------------------------------------------- pull replies


def test_a_reply_to_a_wait_is_an_event_that_matches_its_selector() -> None:
    graph = graph_of(
        recipe(
            ["s1"],
            actions=[
                pull(
                    "qa",
                    "s1",
                    type_id="t.qa",
                    Selector={"Subject": "line/{jobId}/qa", "CorrelationId": "{jobId}"},
                )
            ],
        )
    )
    sim = run(graph, {"replies": {"qa": ["pass@40"]}}, job_id="job-7")
    (event,) = events(sim, EventReceived)
    assert (event.at, event.type_id, event.outcome) == (40, "t.qa", "pass")
    assert (event.subject, event.correlation_id) == ("line/job-7/qa", "job-7")
    assert event.id == "job-7:qa#1"
    assert sim.transcript[-1].disposition == "applied"
    assert sim.end == "completed"


def test_a_reply_to_a_wait_without_selector_names_no_subject() -> None:
    graph = graph_of(recipe(["s1"], actions=[pull("qa", "s1", type_id="t.qa")]))
    (event,) = events(run(graph), EventReceived)
    assert event.subject is msgspec.UNSET and event.correlation_id is msgspec.UNSET


def test_an_error_reply_to_a_wait_is_an_event_with_the_outcome_error() -> None:
    graph = graph_of(recipe(["s1"], actions=[pull("qa", "s1", type_id="t.qa")]))
    sim = run(graph, {"replies": {"qa": ["error:camera offline"]}})
    (event,) = events(sim, EventReceived)
    assert event.outcome == "error"
    assert sim.fault is not None and sim.fault.code == "error"


# --------------------------------------------------------------------------- same time


def test_a_reply_that_lands_on_the_deadline_wins_over_the_tick() -> None:
    sim = run(one_push(), {"replies": {"a": ["ok@10000"]}})
    assert timeline(sim) == [(0, "Start"), (10_000, "ActionCompleted")]
    assert len(started(sim)) == 1


def test_a_reply_one_millisecond_late_loses_to_the_tick() -> None:
    sim = run(one_push(), {"replies": {"a": ["ok@10001", "silent"]}})
    assert timeline(sim) == [(0, "Start"), (10_000, "Tick"), (10_001, "ActionCompleted")]


def test_same_time_items_run_replies_then_events_then_controls_then_ticks() -> None:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[
                push("a", "s1", timeout=1),
                pull("b", "s1", type_id="t.b", timeout=1),
                push("c", "s2"),
            ],
            transitions=[t("s1", "s2")],
        )
    )
    sim = run(
        graph,
        {
            "replies": {"a": ["ok@1000"], "b": ["silent"], "c": ["silent"]},
            "events": [{"atMs": 1000, "typeId": "t.b", "outcome": "seen"}],
            "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "cancel", "atMs": 1000}],
        },
    )
    assert timeline(sim) == [
        (0, "Start"),
        (1000, "ActionCompleted"),
        (1000, "EventReceived"),
        (1000, "Hold"),  # after the event, so step s1 is done and s2 entered before the hold
        (1000, "Cancel"),
    ]
    assert [c.command_id for c in started(sim)] == ["job-1:a#1", "job-1:b#2", "job-1:c#3"]


def test_a_reply_without_delay_is_delivered_before_a_tick_of_the_same_time() -> None:
    # At 10 s attempt 2 of a goes out and is answered at once; b's deadline is also at 10 s.
    graph = graph_of(
        recipe(["s1"], actions=[push("a", "s1", timeout=10), push("b", "s1", timeout=20)])
    )
    sim = run(graph, {"replies": {"a": ["silent", "ok"], "b": ["ok@20000"]}})
    assert timeline(sim) == [
        (0, "Start"),
        (10_000, "Tick"),
        (10_000, "ActionCompleted"),
        (20_000, "ActionCompleted"),
    ]


# --------------------------------------------------------------------------- withdrawn attempts


def test_a_reply_to_a_withdrawn_attempt_is_still_delivered() -> None:
    sim = run(one_push(), {"replies": {"a": ["ok@15000", "silent"]}})
    tick = sim.transcript[1]
    assert isinstance(tick.event, Tick) and tick.at_ms == 10_000
    assert [(type(c).__name__, c.command_id) for c in tick.commands] == [
        ("CancelWork", "job-1:a#1"),
        ("StartWork", "job-1:a#2"),
    ]
    late = sim.transcript[2]
    assert isinstance(late.event, ActionCompleted)
    assert (late.at_ms, late.event.command_id) == (15_000, "job-1:a#1")
    assert late.disposition == "applied"  # an earlier attempt completes the open action


def test_the_answer_to_a_held_attempt_is_delivered_and_absorbed() -> None:
    sim = run(
        held_tighten(),
        {
            "replies": {"tighten": ["ok@2000"], "tighten:restart": ["ok@500"]},
            "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "release", "atMs": 5000}],
        },
    )
    late = next(e for e in sim.transcript if e.at_ms == 2000)
    assert isinstance(late.event, ActionCompleted)
    assert late.event.command_id == "job-1:tighten#1"
    assert late.disposition == "absorbed"


# --------------------------------------------------------------------------- causation


def test_every_reply_carries_the_command_id_and_round_it_answers() -> None:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[push("a", "s1", MaxAttempts=5)],
            transitions=[t("s1", "s1", "again", 0), t("s1", "s2", "true", 1)],
        )
    )
    sim = run(graph, {"replies": {"a": ["again", "silent", "again@10", "done@5"]}})
    sent = {c.command_id: c.round for c in started(sim)}
    answers = events(sim, ActionCompleted)
    assert len(answers) == 3
    for answer in answers:
        assert answer.command_id in sent
        assert answer.round == sent[answer.command_id]
    assert [a.round for a in answers] == [1, 2, 3]


# --------------------------------------------------------------------------- script events


def test_script_events_are_delivered_at_their_time() -> None:
    graph = graph_of(
        recipe(
            ["s1"],
            actions=[pull("qa", "s1", type_id="t.qa", timeout=60, Selector={"Subject": "x"})],
        )
    )
    sim = run(
        graph,
        {
            "replies": {"qa": ["silent"]},
            "events": [
                {"atMs": 2500, "typeId": "t.qa", "outcome": "pass", "subject": "y"},
                {"atMs": 4000, "typeId": "t.qa", "outcome": "pass", "subject": "x", "id": "e1"},
            ],
        },
    )
    assert [(e.at_ms, e.disposition) for e in sim.transcript[1:]] == [
        (2500, "absorbed"),
        (4000, "applied"),
    ]
    assert sim.transcript[2].event == EventReceived(
        at=4000, type_id="t.qa", outcome="pass", subject="x", id="e1"
    )


def test_a_script_event_without_outcome_has_the_outcome_done() -> None:
    graph = graph_of(recipe(["s1"], actions=[pull("qa", "s1", type_id="t.qa")]))
    sim = run(graph, {"replies": {"qa": ["silent"]}, "events": [{"atMs": 5, "typeId": "t.qa"}]})
    assert events(sim, EventReceived)[0].outcome == "done"


# --------------------------------------------------------------------------- controls


def test_an_outage_stops_ticks_then_sends_one_tick_with_its_length() -> None:
    sim = run(
        one_push(),
        {
            "replies": {"a": ["silent", "ok"]},
            "controls": [{"kind": "outage", "atMs": 5000, "ms": 20000}],
        },
    )
    assert events(sim, Tick) == [Tick(at=25_000, outage_ms=20_000), Tick(at=30_000)]
    assert [c.deadline for c in started(sim)] == [10_000, 40_000]


def test_replies_are_delivered_during_an_outage() -> None:
    sim = run(
        one_push(),
        {
            "replies": {"a": ["ok@7000"]},
            "controls": [{"kind": "outage", "atMs": 5000, "ms": 20000}],
        },
    )
    assert timeline(sim) == [(0, "Start"), (7000, "ActionCompleted")]


def test_hold_release_and_cancel_controls_become_events() -> None:
    sim = run(
        one_push(),
        {
            "replies": {"a": ["silent"]},
            "controls": [
                {"kind": "hold", "atMs": 1000},
                {"kind": "release", "atMs": 3000},
                {"kind": "cancel", "atMs": 4000, "reason": "line stop"},
            ],
        },
    )
    assert [e.event for e in sim.transcript[1:]] == [
        Hold(at=1000),
        Release(at=3000),
        Cancel(at=4000, reason="line stop"),
    ]
    assert sim.transcript[-1].continuation == Cancelled(reason="line stop")
    assert sim.end == "cancelled"


def test_a_cancel_without_reason_has_none() -> None:
    """docs/scripts.md: no `reason`, no reason: the line reads `job cancelled`, once."""
    sim = run(one_push(), {"default": "silent", "controls": [{"kind": "cancel", "atMs": 1}]})
    assert events(sim, Cancel) == [Cancel(at=1, reason="")]
    assert sim.transcript[-1].reason == "job cancelled"


def test_a_hold_moves_deadlines_so_the_hold_costs_no_attempt() -> None:
    sim = run(
        one_push(attempts=1),
        {
            "replies": {"a": ["ok@14000"]},
            "controls": [{"kind": "hold", "atMs": 2000}, {"kind": "release", "atMs": 7000}],
        },
    )
    assert sim.end == "completed"
    assert [c.deadline for c in started(sim)] == [10_000, 15_000]


# --------------------------------------------------------------------------- how a run ends


def test_the_clock_starts_at_zero_with_job_1() -> None:
    sim = run(one_push())
    assert sim.transcript[0].event == Start(at=0)
    assert started(sim)[0].action_key == "job-1:a"


def test_the_job_id_can_be_chosen() -> None:
    sim = run(one_push(), job_id="order-42")
    assert started(sim)[0].command_id == "order-42:a#1"
    assert sim.state.job_id == "order-42"


@pytest.mark.parametrize(
    ("job_id", "words"),
    [("", "empty"), (" job-1", "white space"), ("job 1", "white space"), ("job\x001", "control")],
)
def test_a_job_id_that_cannot_name_the_action_keys_is_refused(job_id: str, words: str) -> None:
    problem = job_id_problem(job_id)
    assert problem is not None and words in problem
    with pytest.raises(ValueError, match=words):
        Simulation(one_push(), job_id=job_id)


@pytest.mark.parametrize("job_id", ["job-1", "line:1", "line#1", "ordre-é"])
def test_a_job_id_with_colons_hashes_or_letters_beyond_ascii_is_fine(job_id: str) -> None:
    assert job_id_problem(job_id) is None


def test_a_fault_ends_the_run_with_the_fault() -> None:
    sim = run(one_push(attempts=2), {"default": "silent"})
    result = sim.result()
    assert (result.end, result.at_ms) == ("faulted", 20_000)
    assert result.fault is not None and result.fault.code == "timeout"
    assert isinstance(result.transcript[-1].continuation, FaultContinuation)


def test_the_time_limit_ends_a_run_that_goes_on() -> None:
    sim = run(one_push(timeout=3600, attempts=100), {"default": "silent"}, time_limit_ms=5000)
    result = sim.result()
    assert (result.end, result.at_ms, result.fault) == ("time_limit", 5000, None)
    assert timeline(sim) == [(0, "Start")]
    assert not sim.stalled


def test_an_item_exactly_at_the_time_limit_still_runs() -> None:
    sim = run(one_push(), {"replies": {"a": ["ok@5000"]}}, time_limit_ms=5000)
    assert sim.end == "completed"


def test_a_job_held_for_good_ends_at_the_time_limit() -> None:
    sim = run(
        one_push(),
        {"default": "silent", "controls": [{"kind": "hold", "atMs": 100}]},
        time_limit_ms=60_000,
    )
    assert (sim.end, sim.end_at) == ("time_limit", 60_000)
    assert sim.state.held_at == 100
    assert sim.stalled  # nothing more could happen


def test_the_evaluation_limit_ends_a_run() -> None:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[push("a", "s1")],
            transitions=[t("s1", "s1", "again", 0), t("s1", "s2", "true", 1)],
        )
    )
    sim = run(graph, {"default": "again@1"}, evaluation_limit=4)
    assert (sim.end, len(sim.transcript), sim.end_at) == ("evaluation_limit", 4, 3)


def test_the_default_limits_are_seven_days_and_100000_evaluations() -> None:
    sim = Simulation(one_push())
    assert (sim.time_limit_ms, sim.evaluation_limit) == (7 * 24 * 3600 * 1000, 100_000)
    assert (DEFAULT_TIME_LIMIT_MS, DEFAULT_EVALUATION_LIMIT) == (604_800_000, 100_000)


def test_a_run_is_deterministic() -> None:
    graph = graph_of(
        recipe(
            ["s0", "s1", "s2", "s3"],
            actions=[push("a", "s1"), pull("b", "s2", type_id="t.b"), push("c", "s3")],
            transitions=[t("s0", "d"), t("d", "s3")],
            branches=[divergence("d", "simultaneous", ["s1"], ["s2"])],
        )
    )
    doc = {
        "replies": {"a": ["silent", "ok@3"], "b": ["x@3"], "c": ["error@2", "ok"]},
        "controls": [{"kind": "hold", "atMs": 5}, {"kind": "release", "atMs": 9}],
    }
    first = encode(run(graph, doc).result())
    assert first == encode(run(graph, doc).result())
    assert isinstance(msgspec.json.decode(first, type=DryRunResult), DryRunResult)


def test_every_entry_carries_the_active_steps_after_its_evaluation() -> None:
    graph = graph_of(
        recipe(
            ["s0", "s1", "s4", "s2", "s3"],
            actions=[
                push("a", "s1"),
                push("e", "s4"),
                pull("b", "s2", type_id="t.b"),
                push("c", "s3"),
            ],
            transitions=[t("s0", "d"), t("d", "s3")],
            branches=[divergence("d", "simultaneous", ["s1", "s4"], ["s2"])],
        )
    )
    replies = {"a": ["ok@3"], "e": ["ok@10"], "b": ["x@5"], "c": ["ok@2"]}
    sim = Simulation(graph, script({"replies": replies}))
    seen = []
    while (entry := sim.step()) is not None:
        assert entry.active_steps == sim.state.active_steps
        seen.append((entry.at_ms, entry.active_steps))
    # In the order they became active: s4 comes after s2, which was active before it. A
    # branch that has finished waits at the convergence with no step active.
    assert seen == [(0, ["s1", "s2"]), (3, ["s2", "s4"]), (5, ["s4"]), (13, ["s3"]), (15, [])]
    assert sim.end == "completed"


def test_the_active_steps_stay_on_the_entry_that_ended_the_job() -> None:
    sim = run(one_push(timeout=1, attempts=1), {"default": "silent"})
    assert sim.end == "faulted"
    assert sim.transcript[-1].active_steps == sim.state.active_steps == ["s1"]


def test_result_before_the_end_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        Simulation(one_push()).result()


def test_step_runs_one_evaluation_at_a_time() -> None:
    sim = Simulation(one_push(), script({"replies": {"a": ["ok@5"]}}))
    first = sim.step()
    assert first is not None and first.event == Start(at=0)
    assert sim.end is None and sim.state.status == "running"
    assert sim.step() is not None
    assert sim.end == "completed"
    assert sim.step() is None


# --------------------------------------------------------------------------- bad scripts


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        (b'{"replies": {"a": ["ok", "ok@@5"]}}', "$.replies.a[1]", "not a reply: 'ok@@5'"),
        (b'{"replies": {"a:hold": ["b c"]}}', '$.replies["a:hold"][0]', "not a reply"),
        (b'{"replies": {"a": "ok"}}', "$.replies.a", "expected a list"),
        (b'{"replies": {"a": [5]}}', "$.replies.a[0]", "expected a string"),
        (b'{"replies": []}', "$.replies", "expected an object"),
        (b'{"default": "silent@5"}', "$.default", "silent takes no delay"),
        (b'{"default": "timeout"}', "$.default", "gives itself"),
        (b'{"speed": 2}', "$.speed", "unknown key"),
        (
            b'{"events": [{"atMs": 1, "typeId": "t", "colour": "red"}]}',
            "$.events[0].colour",
            "unknown key",
        ),
        (b'{"events": [{"atMs": -1, "typeId": "t"}]}', "$.events[0].atMs", ">= 0"),
        (b'{"controls": [{"kind": "hold", "atMs": -5}]}', "$.controls[0].atMs", ">= 0"),
        (b'{"controls": [{"kind": "pause", "atMs": 5}]}', "$.controls[0].kind", "pause"),
        (b'{"controls": [{"kind": "outage", "atMs": 5}]}', "$.controls[0]", "ms"),
        (b'{"events": [{"atMs": 1}]}', "$.events[0]", "typeId"),
        (b'{"default": 5}', "$.default", "Expected `str`"),
        (b'{"replies": {', "$", "not valid JSON"),
    ],
)
def test_bad_scripts_are_refused_with_the_path_of_the_problem(
    doc: bytes, path: str, words: str
) -> None:
    with pytest.raises(ScriptError) as caught:
        load_script(doc)
    assert caught.value.path == path
    assert words in caught.value.message
    assert str(caught.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("replies", "path", "words"),
    [
        ({"nope": ["ok"]}, "$.replies.nope", "the recipe has no action 'nope' (its actions: a)"),
        ({"a:hold": ["held"]}, '$.replies["a:hold"]', "no hold logic"),
        ({"a:stop": ["ok"]}, '$.replies["a:stop"]', "unknown key suffix"),
        ({"a:": ["ok"]}, '$.replies["a:"]', "an empty key suffix"),
        ({"a:hold:": ["ok"]}, '$.replies["a:hold:"]', "unknown key suffix 'hold:'"),
    ],
)
def test_replies_must_fit_the_recipe(replies: dict[str, list[str]], path: str, words: str) -> None:
    with pytest.raises(ScriptError) as caught:
        script({"replies": replies}, one_push())
    assert caught.value.path == path
    assert words in caught.value.message


@pytest.mark.parametrize(
    ("outages", "path", "other"),
    [
        ([(5_000, 30_000), (10_000, 30_000)], "$.controls[1]", "$.controls[0]"),
        ([(10_000, 30_000), (5_000, 30_000)], "$.controls[0]", "$.controls[1]"),
        ([(0, 100_000), (10_000, 1_000), (50_000, 1_000)], "$.controls[1]", "$.controls[0]"),
    ],
)
def test_overlapping_outages_are_refused(
    outages: list[tuple[int, int]], path: str, other: str
) -> None:
    doc = {"controls": [{"kind": "outage", "atMs": at, "ms": ms} for at, ms in outages]}
    with pytest.raises(ScriptError) as caught:
        script(doc)
    assert caught.value.path == path
    assert f"overlaps the outage at {other}" in caught.value.message
    with pytest.raises(ScriptError):
        Simulation(one_push(), msgspec.convert(doc, SimulationScript))


def test_outages_that_touch_are_two_outages() -> None:
    doc = {
        "default": "silent",
        "controls": [
            {"kind": "outage", "atMs": 1_000, "ms": 2_000},
            {"kind": "outage", "atMs": 3_000, "ms": 2_000},
        ],
    }
    sim = run(one_push(timeout=10, attempts=1), doc)
    ticks = [e for e in events(sim, Tick) if e.outage_ms]
    assert [(e.at, e.outage_ms) for e in ticks] == [(3_000, 2_000), (5_000, 2_000)]
    assert sim.result().at_ms == 14_000


def test_a_simulation_refuses_a_script_that_does_not_fit_its_recipe() -> None:
    unchecked = script({"replies": {"nope": ["ok"]}})
    with pytest.raises(ScriptError):
        Simulation(one_push(), unchecked)


def test_hold_and_restart_replies_fit_an_action_with_hold_logic() -> None:
    doc = {"replies": {"tighten:hold": ["held"], "tighten:restart": ["ok"]}}
    assert script(doc, held_tighten()).replies == doc["replies"]

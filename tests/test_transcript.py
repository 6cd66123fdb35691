"""The transcript: one readable line per evaluation, and the JSON form (the dry-run result)."""

from __future__ import annotations

import msgspec
import pytest
from msgspec import UNSET

from generated.command_v1_0 import CancelWork, StartWork
from generated.dryrun_result_v1_2 import DryRunResult, RunFault, TranscriptEntry
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
from generated.step_result_v1_0 import (
    Cancelled,
    Complete,
    Continuation,
    Defer,
    FaultContinuation,
)
from sfc.simulation import Simulation, load_script
from sfc.transcript import (
    describe_command,
    describe_continuation,
    describe_event,
    describe_steps,
    from_json,
    held_since,
    lines,
    seconds,
    span,
    to_json,
    to_text,
)
from tests.corehelpers import graph_of, pull, push, recipe, t


def work(command_id: str, work: str = "push", attempt: int = 1, round: int = 1) -> StartWork:
    action_key = command_id.split("#")[0]
    return StartWork(
        work=work,  # type: ignore[arg-type]
        action_key=action_key,
        command_id=command_id,
        type_id="t.x",
        attempt=attempt,
        round=round,
        deadline=61_500,
        parameters={},
        selector=None,
    )


def test_seconds() -> None:
    assert [seconds(ms) for ms in (0, 5, 1500, 604_800_000)] == [
        "0.000s",
        "0.005s",
        "1.500s",
        "604800.000s",
    ]


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0 s"),
        (59_999, "59.999 s"),
        (60_000, "1 min"),
        (90_500, "1 min 30.5 s"),
        (3_600_000, "1 h"),
        (86_400_000, "1 day"),
        (604_800_000, "7 days"),
        (90_061_000, "1 day 1 h 1 min 1 s"),
    ],
)
def test_lengths_of_time_read_in_one_style_with_points_in_time_apart(ms: int, text: str) -> None:
    assert span(ms) == text


# --------------------------------------------------------------------------- events


@pytest.mark.parametrize(
    ("event", "text"),
    [
        (Start(at=0), "start"),
        (Tick(at=5), "tick"),
        (Tick(at=5, outage_ms=30_000), "tick after an outage of 30 s"),
        (Tick(at=5, outage_ms=5_400_000), "tick after an outage of 1 h 30 min"),
        (Hold(at=5), "operator hold"),
        (Release(at=5), "operator release"),
        (Cancel(at=5, reason="shift end"), "operator cancel: shift end"),
        (Resume(at=5), "resume"),
        (ActionCompleted(at=5, action_key="job-1:tighten", outcome="ok"), "reply tighten: ok"),
        (ActionCompleted(at=5, action_key="job-1:tighten"), "reply tighten: done"),
        (
            ActionCompleted(
                at=5, action_key="job-1:tighten", outcome="ok", command_id="job-1:tighten#9"
            ),
            "reply tighten#9: ok",
        ),
        (
            ActionFailed(
                at=5, action_key="job-1:tighten", error="jammed", command_id="job-1:tighten#9"
            ),
            "failure tighten#9: error 'jammed'",
        ),
        (ActionFailed(at=5, action_key="job-1:tighten"), "failure tighten: error"),
        (EventReceived(at=5, type_id="t.qa", outcome="pass"), "event t.qa: pass"),
        (
            EventReceived(at=5, type_id="t.qa", outcome="pass", subject="s/1", correlation_id="c"),
            "event t.qa: pass (subject s/1, correlationId c)",
        ),
    ],
)
def test_describe_event(event: object, text: str) -> None:
    assert describe_event(event) == text


def test_a_reply_names_the_attempt_and_round_of_the_command_it_answers() -> None:
    issued = {
        "job-1:a#4": work("job-1:a#4", attempt=2, round=3),
        "job-1:a#5:hold": work("job-1:a#5:hold", work="hold", round=3),
        "job-1:a#6": work("job-1:a#6", work="restart"),
        "job-1:w#7": work("job-1:w#7", work="await"),
    }
    assert (
        describe_event(ActionCompleted(at=1, action_key="job-1:a", command_id="job-1:a#4"), issued)
        == "reply a#4 (attempt 2, round 3): done"
    )
    assert (
        describe_event(
            ActionCompleted(
                at=1, action_key="job-1:a", outcome="held", command_id="job-1:a#5:hold"
            ),
            issued,
        )
        == "reply a#5:hold (round 3): held"
    )
    assert (
        describe_event(ActionCompleted(at=1, action_key="job-1:a", command_id="job-1:a#6"), issued)
        == "reply a#6 (restart): done"
    )
    answer = EventReceived(at=1, type_id="t.x", outcome="pass", id="job-1:w#7")
    assert describe_event(answer, issued) == "event for w#7: pass"


def test_a_job_id_with_colons_is_cut_off_whole() -> None:
    event = ActionCompleted(
        at=1, action_key="plant:7:job:tighten", command_id="plant:7:job:tighten#2"
    )
    assert describe_event(event) == "reply tighten#2: done"


# --------------------------------------------------------------------------- commands


def test_describe_command() -> None:
    assert (
        describe_command(work("job-1:a#4", attempt=2)) == "push a#4 (attempt 2, deadline 61.500s)"
    )
    assert (
        describe_command(work("job-1:a#4", round=2))
        == "push a#4 (attempt 1, round 2, deadline 61.500s)"
    )
    assert describe_command(work("job-1:w#2", work="await")) == "await w#2 (deadline 61.500s)"
    assert (
        describe_command(work("job-1:a#3:hold", work="hold")) == "hold a#3:hold (deadline 61.500s)"
    )
    assert describe_command(work("job-1:a#5", work="restart")) == "restart a#5 (deadline 61.500s)"
    cancel = CancelWork(action_key="job-1:a", command_id="job-1:a#4", reason="redispatch")
    assert describe_command(cancel) == "withdraw a#4 (redispatch)"


def test_a_withdrawal_without_a_reason_has_no_empty_brackets() -> None:
    cancel = CancelWork(action_key="job-1:a", command_id="job-1:a#4", reason="")
    assert describe_command(cancel) == "withdraw a#4"
    assert describe_event(Cancel(at=5, reason="")) == "operator cancel"


def test_a_command_id_issued_before_reads_as_the_same_command_re_issued() -> None:
    """docs/cli.md "Transcript": a release re-issues the same command id; no second order."""
    first = work("job-1:a#1")
    issued = {first.command_id: first}
    moved = msgspec.structs.replace(first, deadline=65_500)
    assert describe_command(moved, issued) == (
        "push a#1 re-issued (same command id, attempt 1, deadline moved from 61.500s to 65.500s)"
    )
    assert describe_command(first, issued) == (
        "push a#1 re-issued (same command id, attempt 1, deadline 61.500s)"
    )
    assert describe_command(work("job-1:a#2"), issued) == "push a#2 (attempt 1, deadline 61.500s)"


def test_a_release_that_issues_work_again_says_so_in_the_transcript() -> None:
    graph = graph_of(recipe(["s1"], actions=[push("a", "s1", timeout=30)]))
    doc = {
        "replies": {"a": ["silent", "ok@100"]},
        "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "release", "atMs": 5000}],
    }
    sim = Simulation(graph, load_script(msgspec.json.encode(doc), graph))
    text = to_text(sim.run())
    assert (
        "=> push a#1 re-issued (same command id, attempt 1, deadline moved from 30.000s "
        "to 34.000s)\n"
    ) in text


def test_describe_continuation() -> None:
    assert describe_continuation(Defer()) is None
    assert describe_continuation(Complete(outcomes=[])) == "job completed"
    assert describe_continuation(Complete(outcomes=["ok", "torque_ok"])) == (
        "job completed with outcomes ok, torque_ok"
    )
    assert describe_continuation(FaultContinuation(code="timeout", message="s1 timed out")) == (
        "job FAULTED (timeout): s1 timed out"
    )
    assert describe_continuation(Cancelled(reason="x")) == "job cancelled"


# --------------------------------------------------------------------------- lines


def entry(at: int, event: object, disposition: str = "applied", **kw: object) -> TranscriptEntry:
    return TranscriptEntry(
        at_ms=at,
        event=event,  # type: ignore[arg-type]
        disposition=disposition,  # type: ignore[arg-type]
        reason=str(kw.get("reason", "why")),
        commands=list(kw.get("commands", [])),  # type: ignore[call-overload]
        continuation=kw.get("continuation", Defer()),  # type: ignore[arg-type]
        active_steps=kw.get("steps", UNSET),  # type: ignore[arg-type]
    )


def test_one_line_per_evaluation_then_the_end() -> None:
    result = DryRunResult(
        end="faulted",
        at_ms=10_000,
        fault=RunFault(code="timeout", message="a timed out"),
        transcript=[
            entry(0, Start(at=0), reason="job started", commands=[work("job-1:a#1")]),
            entry(1200, Tick(at=1200), "absorbed", reason="nothing is due"),
            entry(
                10_000,
                Tick(at=10_000),
                reason="1 deadline(s) expired",
                commands=[
                    CancelWork(action_key="job-1:a", command_id="job-1:a#1", reason="timeout")
                ],
                continuation=FaultContinuation(code="timeout", message="a timed out"),
            ),
        ],
    )
    assert to_text(result).splitlines() == [
        "     0.000s  start                               -> applied: job started  "
        "=> push a#1 (attempt 1, deadline 61.500s)",
        "     1.200s  tick                                -> absorbed: nothing is due",
        "    10.000s  tick                                -> applied: 1 deadline(s) expired  "
        "=> withdraw a#1 (timeout)  => job FAULTED (timeout): a timed out",
        "end: faulted at 10.000s after 3 evaluations (timeout: a timed out)",
    ]
    assert [line.tone for line in lines(result)] == ["applied", "absorbed", "faulted", "faulted"]


@pytest.mark.parametrize(
    ("end", "last", "tone"),
    [
        ("completed", "end: completed at 2.000s after 1 evaluation", "completed"),
        ("cancelled", "end: cancelled at 2.000s after 1 evaluation", "cancelled"),
        (
            "time_limit",
            "end: time limit of 2 s reached after 1 evaluation; the job had not ended",
            "limit",
        ),
        (
            "evaluation_limit",
            "end: evaluation limit of 1 evaluation reached at 2.000s; the job had not ended",
            "limit",
        ),
    ],
)
def test_the_last_line_says_how_the_run_ended(end: str, last: str, tone: str) -> None:
    result = DryRunResult(end=end, at_ms=2000, fault=None, transcript=[entry(0, Start(at=0))])  # type: ignore[arg-type]
    assert lines(result)[-1].text == last
    assert lines(result)[-1].tone == tone


HELD = [entry(0, Start(at=0)), entry(1000, Hold(at=1000))]


@pytest.mark.parametrize(
    ("transcript", "stalled", "why"),
    [
        (HELD, True, "the job is held since 1.000s and nothing more can happen"),
        (HELD, False, "the job had not ended (held since 1.000s)"),
        (HELD[:1], True, "nothing more can happen and the job had not ended"),
        ([*HELD, entry(2000, Release(at=2000))], False, "the job had not ended"),
        (
            [*HELD, entry(2000, Hold(at=2000), "absorbed")],
            True,
            "the job is held since 1.000s and nothing more can happen",
        ),
    ],
)
def test_a_time_limit_says_whether_the_job_is_held_and_whether_anything_could_happen(
    transcript: list[TranscriptEntry], stalled: bool, why: str
) -> None:
    result = DryRunResult(end="time_limit", at_ms=604_800_000, fault=None, transcript=transcript)
    last = lines(result, stalled=stalled)[-1].text
    n = len(transcript)
    assert last == (f"end: time limit of 7 days reached after {n} evaluation{'s' * (n > 1)}; {why}")
    assert to_text(result, stalled=stalled).endswith(last + "\n")


def test_a_cancel_ends_the_hold() -> None:
    result = DryRunResult(
        end="cancelled",
        at_ms=3000,
        fault=None,
        transcript=[*HELD, entry(3000, Cancel(at=3000, reason="x"))],
    )
    assert held_since(result.transcript) is None


def test_a_rejected_event_reads_as_rejected() -> None:
    result = DryRunResult(
        end="time_limit", at_ms=5, fault=None, transcript=[entry(5, Resume(at=5), "rejected")]
    )
    assert lines(result)[0].tone == "rejected"
    assert "-> rejected: why" in lines(result)[0].text


# --------------------------------------------------------------------------- a real run, both forms


def simulated() -> DryRunResult:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[
                push("tighten", "s1"),
                pull("qa", "s2", type_id="t.qa", Selector={"Subject": "q/{jobId}"}),
            ],
            transitions=[t("s1", "s2")],
        )
    )
    script = load_script(
        b'{"replies": {"tighten": ["silent", "ok@500"], "qa": ["pass@20"]}}', graph
    )
    return Simulation(graph, script).run()


def test_a_run_reads_as_a_plant_engineer_would_tell_it() -> None:
    assert to_text(simulated()).splitlines() == [
        "     0.000s  start                               -> applied: job started in step s1  "
        "=> push tighten#1 (attempt 1, deadline 10.000s)  [now: s1]",
        "    10.000s  tick                                -> applied: deadline passed: tighten "
        "sent again (attempt 2 of 3)  "
        "=> withdraw tighten#1 (redispatch); push tighten#2 (attempt 2, deadline 20.000s)",
        "    10.500s  reply tighten#2 (attempt 2): ok     -> applied: tighten answered ok  "
        "=> await qa#3 (deadline 20.500s)  [now: s2]",
        "    10.520s  event for qa#3: pass                -> applied: qa received t.qa: pass  "
        "=> job completed with outcomes pass",
        "end: completed at 10.520s after 4 evaluations",
    ]


def test_the_json_form_is_the_dry_run_result_in_schema_order() -> None:
    result = simulated()
    data = to_json(result)
    assert data.endswith(b"}\n")
    assert from_json(data) == result
    assert list(msgspec.json.decode(data)) == [
        "end",
        "atMs",
        "fault",
        "transcript",
        "evaluations",
        "endReason",
        "notes",
    ]
    first = msgspec.json.decode(data)["transcript"][0]
    assert list(first) == [
        "atMs",
        "event",
        "disposition",
        "reason",
        "commands",
        "continuation",
        "activeSteps",
        "decisions",
    ]
    assert to_json(result, indent=0) == msgspec.json.encode(result) + b"\n"


def test_the_json_form_carries_selectors_and_causation() -> None:
    doc = msgspec.json.decode(to_json(simulated()))
    await_cmd = doc["transcript"][2]["commands"][0]
    assert await_cmd["selector"] == {"subject": "q/job-1", "correlationId": None}
    reply = doc["transcript"][2]["event"]
    assert (reply["commandId"], reply["round"]) == ("job-1:tighten#2", 1)
    answer = doc["transcript"][3]["event"]
    assert (answer["kind"], answer["subject"], answer["id"]) == (
        "eventReceived",
        "q/job-1",
        "job-1:qa#3",
    )


# --------------------------------------------------------------------------- where the job is


def test_describe_steps() -> None:
    assert describe_steps(["TightenBolts", "QaCheck"]) == "[now: TightenBolts, QaCheck]"
    assert describe_steps(["s1"]) == "[now: s1]"
    assert describe_steps([]) == "[now: no active step]"


def test_the_json_entries_carry_the_active_steps_of_the_state() -> None:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[push("tighten", "s1"), pull("qa", "s2", type_id="t.qa")],
            transitions=[t("s1", "s2")],
        )
    )
    sim = Simulation(graph, load_script(b'{"replies": {"qa": ["pass@20"]}}', graph))
    states = []
    while sim.step() is not None:
        states.append(list(sim.state.active_steps))
    doc = msgspec.json.decode(to_json(sim.result()))
    assert [e["activeSteps"] for e in doc["transcript"]] == states == [["s1"], ["s2"], []]


def steps_result(*steps: list[str], end: Continuation | None = None) -> DryRunResult:
    """One applied tick per list of active steps; the last one ends the job with `end`."""
    transcript = [entry(i * 1000, Tick(at=i * 1000), steps=s) for i, s in enumerate(steps)]
    if end is not None:
        last = transcript[-1]
        transcript[-1] = entry(last.at_ms, last.event, continuation=end, steps=steps[-1])
    return DryRunResult(end="time_limit", at_ms=9000, fault=None, transcript=transcript)


def now(result: DryRunResult) -> list[str | None]:
    """The `[now: ...]` part of each evaluation's line, None where the line has none."""
    out: list[str | None] = []
    for line in lines(result)[:-1]:
        _, found, rest = line.text.partition("  [now: ")
        out.append(f"[now: {rest}" if found else None)
    return out


def test_a_line_shows_the_active_steps_exactly_when_they_changed() -> None:
    result = steps_result(
        ["a"],  # the first line always says where the job is
        ["a"],
        ["b", "c"],
        ["b", "c"],
        ["c", "b"],  # b was left and entered again: the order is when they became active
        ["c"],
        ["c", "d"],
    )
    assert now(result) == [
        "[now: a]",
        None,
        "[now: b, c]",
        None,
        "[now: c, b]",
        "[now: c]",
        "[now: c, d]",
    ]
    for line in lines(result)[:-1]:
        assert line.text.count("[now:") <= 1 and line.text.endswith(("]", "why"))


def test_the_steps_come_at_the_end_of_the_line_after_the_commands() -> None:
    result = DryRunResult(
        end="time_limit",
        at_ms=0,
        fault=None,
        transcript=[entry(0, Start(at=0), commands=[work("job-1:a#1")], steps=["A", "B"])],
    )
    assert lines(result)[0].text.endswith(
        "-> applied: why  => push a#1 (attempt 1, deadline 61.500s)  [now: A, B]"
    )


@pytest.mark.parametrize(
    "end",
    [
        Complete(outcomes=["ok"]),
        FaultContinuation(code="timeout", message="b timed out"),
        Cancelled(reason="x"),
    ],
)
def test_the_line_that_ends_the_job_shows_no_steps(end: Continuation) -> None:
    assert now(steps_result(["a"], ["b"], end=end)) == ["[now: a]", None]
    assert now(steps_result(["a"], ["a"], end=end)) == ["[now: a]", None]
    assert now(steps_result(["a"], [], end=end)) == ["[now: a]", None]


def test_a_document_without_active_steps_reads_as_before() -> None:
    old = DryRunResult(
        end="time_limit",
        at_ms=1000,
        fault=None,
        transcript=[entry(0, Start(at=0)), entry(1000, Tick(at=1000))],
    )
    assert now(old) == [None, None]
    assert b"activeSteps" not in to_json(old)
    assert from_json(to_json(old)) == old
    # Steps known on some lines only: each known line is compared with the last known one.
    mixed = DryRunResult(
        end="time_limit",
        at_ms=2000,
        fault=None,
        transcript=[
            entry(0, Start(at=0), steps=["a"]),
            entry(1000, Tick(at=1000)),
            entry(2000, Tick(at=2000), steps=["a"]),
        ],
    )
    assert now(mixed) == ["[now: a]", None, None]

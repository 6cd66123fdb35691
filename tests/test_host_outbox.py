"""Which commands a commit appends to the equipment stream: host/outbox.py (pure).

docs/host.md "Applying an event", "Which commands are appended": a startWork of work push, hold or
restart is appended exactly when its command id's number is above the loaded state's
sequence; an await is appended as a notice with its selector; every cancelWork becomes a
withdraw notice. The commands come from real evaluations of the core: the example recipe
tightening-hold (clamp, tighten with Hold and Restart, unclamp) and small recipes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generated.command_v1_0 import CancelWork
from generated.equipment_entry_v1_0 import AwaitData, AwaitSelector, CommandData, WithdrawData
from generated.event_v1_0 import (
    ActionCompleted,
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
from host import entries
from host.outbox import command_number, expires_at, outgoing
from sfc import evolve, new_state
from sfc.graph import Graph
from tests.corehelpers import Job, graph_of, pull, push, recipe, t

TIGHTENING = Path(__file__).parent.parent / "examples" / "tightening-hold" / "recipe.json"
GRACE = 2_000


def tightening() -> Job:
    return Job(graph_of(TIGHTENING.read_bytes()))


def appended(job: Job, event: Any) -> list[tuple[str, Any]]:
    """Send `event` to the job and return what its commit appends (as apply.py calls it)."""
    loaded = job.state.sequence
    result = job.send(event)
    assert result.disposition == "applied", result.reason
    return outgoing(
        result.commands,
        loaded_sequence=loaded,
        job=job.job_id,
        at=event.at,
        grace=GRACE,
        graph=job.graph,
    )


def short(items: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    return [(kind, data.command_id) for kind, data in items]


def answer(job: Job, action: str, outcome: str, at: int, command_id: str | None = None) -> Any:
    return ActionCompleted(
        at=at,
        action_key=job.key(action),
        outcome=outcome,
        command_id=msgspec.UNSET if command_id is None else command_id,
    )


# -- command numbers


@pytest.mark.parametrize(
    ("command_id", "number"),
    [
        ("job-1:clamp#1", 1),
        ("job-1:tighten#12", 12),
        ("job-1:tighten#3:hold", 3),
        ("job#2:a#7", 7),
        ("job-1:a#" + "9" * 19, int("9" * 19)),
        ("job-1:a#" + "9" * 20, None),
        ("job-1:a", None),
        ("job-1:a#", None),
        ("job-1:a#x", None),
        ("job-1:a#-1", None),
        ("job-1:a#1:held", None),
        ("job-1:a#\u00b2", None),
        ("job-1:a#\u0663", None),
        ("", None),
    ],
)
def test_command_number(command_id: str, number: int | None) -> None:
    assert command_number(command_id) == number


@given(st.text())
def test_command_number_of_any_text(command_id: str) -> None:
    number = command_number(command_id)
    assert number is None or (0 <= number < 10**19 and f"#{number}" in command_id)


# -- the hold cycle of the example recipe


def test_hold_release_appends_each_new_command_once() -> None:
    job = tightening()
    assert short(appended(job, Start(at=0))) == [("push", "job-1:clamp#1")]
    assert short(appended(job, answer(job, "clamp", "ok", 500))) == [("push", "job-1:tighten#2")]
    assert short(appended(job, Hold(at=1_000))) == [("hold", "job-1:tighten#3:hold")]
    held = appended(job, answer(job, "tighten", "held", 1_500, "job-1:tighten#3:hold"))
    assert short(held) == [("withdraw", "job-1:tighten#2")]
    assert short(appended(job, Release(at=3_000))) == [("restart", "job-1:tighten#4")]
    done = appended(job, answer(job, "tighten", "ok", 4_000, "job-1:tighten#4"))
    assert short(done) == [("push", "job-1:unclamp#5")]
    assert appended(job, answer(job, "unclamp", "ok", 4_500)) == []


def test_the_entries_carry_the_command() -> None:
    job = tightening()
    appended(job, Start(at=0))
    appended(job, answer(job, "clamp", "ok", 500))
    [(kind, hold)] = appended(job, Hold(at=1_000))
    assert kind == "hold"
    assert hold == CommandData(
        command_id="job-1:tighten#3:hold",
        action_key="job-1:tighten",
        job="job-1",
        type_id="com.example.tightening.hold.v1",
        attempt=1,
        round=1,
        deadline=11_000,
        expires_at=9_000,
        parameters={},
    )
    [(_, withdraw)] = appended(job, answer(job, "tighten", "held", 1_500, "job-1:tighten#3:hold"))
    assert withdraw == WithdrawData(
        command_id="job-1:tighten#2",
        action_key="job-1:tighten",
        job="job-1",
        type_id="com.example.tightening.run.v1",
        reason="held",
    )
    [(_, restart)] = appended(job, Release(at=3_000))
    assert restart == CommandData(
        command_id="job-1:tighten#4",
        action_key="job-1:tighten",
        job="job-1",
        type_id="com.example.tightening.restart.v1",
        attempt=1,
        round=1,
        deadline=123_000,
        expires_at=121_000,
        parameters={"program": 7, "resume_from": "last_bolt"},
    )
    # What the commit writes decodes as an equipment entry of the same kind.
    raw = {k.encode(): v for k, v in entries.fields("restart", restart).items()}
    assert entries.decode_equipment("3000-0", raw).data == restart


def test_a_release_reissues_open_work_with_its_old_id_and_appends_nothing() -> None:
    job = tightening()  # clamp has no Hold: the job hold leaves its command out
    appended(job, Start(at=0))
    assert appended(job, Hold(at=100)) == []
    result_commands = job.send(Release(at=300)).commands
    reissued = [c.command_id for c in result_commands]
    assert reissued == ["job-1:clamp#1"]  # the core does re-issue it ...
    out = outgoing(
        result_commands, loaded_sequence=1, job="job-1", at=300, grace=GRACE, graph=job.graph
    )
    assert out == []  # ... and the outbox, which sent it at the start, does not again


def test_work_the_equipment_could_not_hold_is_not_sent_again() -> None:
    job = tightening()
    appended(job, Start(at=0))
    appended(job, answer(job, "clamp", "ok", 500))
    appended(job, Hold(at=1_000))
    appended(job, Release(at=1_200))  # released before the hold was answered
    loaded = job.state.sequence
    result = job.send(answer(job, "tighten", "busy", 1_500, "job-1:tighten#3:hold"))
    assert [c.command_id for c in result.commands] == ["job-1:tighten#2"]
    out = outgoing(
        result.commands, loaded_sequence=loaded, job="job-1", at=1_500, grace=GRACE, graph=job.graph
    )
    assert out == []


def test_a_resume_withdraws_and_appends_the_work_under_a_new_id() -> None:
    job = Job(recipe(["s1", "s2"], [t("s1", "s2")], [push("a", "s1", "t.a")]))
    appended(job, Start(at=0))
    out = appended(job, Resume(at=100))
    assert short(out) == [("withdraw", "job-1:a#1"), ("push", "job-1:a#2")]
    assert out[0][1].reason == "redispatch" and out[0][1].type_id == "t.a"


def test_a_retry_after_a_timeout_is_a_new_command() -> None:
    job = Job(recipe(["s1", "s2"], [t("s1", "s2")], [push("a", "s1", "t.a", timeout=1)]))
    appended(job, Start(at=0))
    out = appended(job, Tick(at=1_000))
    assert short(out) == [("withdraw", "job-1:a#1"), ("push", "job-1:a#2")]
    assert out[1][1].attempt == 2


# -- await and withdraw notices


def waiting_job() -> Job:
    return Job(
        recipe(
            ["s1", "s2", "s3"],
            [t("s1", "s2"), t("s2", "s3")],
            [
                push("a", "s1", "t.a"),
                pull("qa", "s2", "t.qa", Selector={"Subject": "line1/{jobId}/qa"}),
                pull("any", "s3", "t.any"),
            ],
        )
    )


def test_an_await_is_a_notice_with_its_selector() -> None:
    job = waiting_job()
    appended(job, Start(at=0))
    [(kind, data)] = appended(job, answer(job, "a", "ok", 500))
    assert kind == "await"
    assert data == AwaitData(
        command_id="job-1:qa#2",
        action_key="job-1:qa",
        job="job-1",
        type_id="t.qa",
        attempt=1,
        round=1,
        deadline=10_500,
        expires_at=8_500,
        parameters={},
        selector=AwaitSelector(subject="line1/job-1/qa", correlation_id=None),
    )
    event = EventReceived(at=600, type_id="t.qa", outcome="ok", subject="line1/job-1/qa")
    [(kind, data)] = appended(job, event)
    assert kind == "await"
    assert data.selector is None and data.command_id == "job-1:any#3"


def test_every_cancel_is_a_withdraw_notice() -> None:
    job = waiting_job()
    appended(job, Start(at=0))
    appended(job, answer(job, "a", "ok", 500))
    [(kind, data)] = appended(job, Cancel(at=700, reason="aborted"))
    assert (kind, data) == (
        "withdraw",
        WithdrawData(
            command_id="job-1:qa#2",
            action_key="job-1:qa",
            job="job-1",
            type_id="t.qa",
            reason="aborted",
        ),
    )


# -- expiresAt


def test_expires_at_examples() -> None:
    assert expires_at(0, 10_000, 2_000) == 8_000  # the deadline less the grace
    assert expires_at(0, 3_000, 2_000) == 1_500  # never earlier than half the attempt's time
    assert expires_at(1_000, 1_000, 2_000) == 1_000
    assert expires_at(0, 10_000, 0) == 10_000


@given(
    at=st.integers(0, 2**45),
    timeout=st.integers(0, 2**40),
    grace=st.integers(0, 2**40),
)
def test_expires_at_is_the_deadline_less_grace_but_not_before_half_the_time(
    at: int, timeout: int, grace: int
) -> None:
    deadline = at + timeout
    value = expires_at(at, deadline, grace)
    assert value >= deadline - grace
    assert value >= at + timeout // 2
    assert value <= deadline
    assert value in (deadline - grace, at + timeout // 2)
    assert expires_at(at, deadline, grace + 1) <= value


# -- any run: every command goes out exactly once


EVENT_KINDS = st.sampled_from(
    ["ok", "ok", "hold", "held", "held", "busy", "release", "release", "tick", "resume", "late"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(EVENT_KINDS, st.integers(1, 6_000)), max_size=25))
def test_every_command_is_appended_exactly_once(script: list[tuple[str, int]]) -> None:
    """Over any run of the example, the outbox sends each pushed command id exactly once:
    none is lost (every push, hold and restart id the core emitted went out) and none twice."""
    graph = graph_of(TIGHTENING.read_bytes())
    state = new_state(graph, "job-1", "test")
    at = 0
    sent: list[str] = []
    emitted: set[str] = set()
    state = run(graph, state, Start(at=at), at, sent, emitted)
    for kind, gap in [("ok", 500), *script]:  # clamp answers: tighten, which holds, is out
        at += gap
        event = event_for(graph, state, kind, at)
        if event is not None:
            state = run(graph, state, event, at, sent, emitted)
    assert len(sent) == len(set(sent))
    assert set(sent) == emitted


def run(
    graph: Graph, state: SfcState, event: Any, at: int, sent: list[str], emitted: set[str]
) -> SfcState:
    result: StepResult = evolve(graph, state, Snapshot(live_work=[]), event)
    if result.disposition != "applied":
        assert result.commands == []
        return state
    for c in result.commands:
        if getattr(c, "work", "await") != "await":
            emitted.add(c.command_id)
    for kind, data in outgoing(
        result.commands,
        loaded_sequence=state.sequence,
        job="job-1",
        at=at,
        grace=GRACE,
        graph=graph,
    ):
        if kind in ("push", "hold", "restart"):
            sent.append(data.command_id)
            assert data.expires_at == expires_at(at, data.deadline, GRACE)
    return result.state


def event_for(graph: Graph, state: SfcState, kind: str, at: int) -> Any:
    """An event of the script's kind for the job as it stands, or None when none fits."""
    if kind == "hold":
        return Hold(at=at)
    if kind == "release":
        return Release(at=at)
    if kind == "tick":
        return Tick(at=at)
    if kind == "resume":
        return Resume(at=at)
    open_records = [(n, r) for n, r in state.actions.items() if r.status == "open"]
    if not open_records:
        return None
    name, rec = open_records[0]
    if kind == "late":  # an answer to an earlier command of the action
        return ActionCompleted(at=at, action_key=f"job-1:{name}", outcome="ok",
                               command_id=f"job-1:{name}#1")  # fmt: skip
    if kind in ("held", "busy"):
        if rec.hold != "open" or rec.hold_command_id is None:
            return None
        return ActionCompleted(
            at=at, action_key=f"job-1:{name}", outcome=kind, command_id=rec.hold_command_id
        )
    assert rec.command_id is not None
    return ActionCompleted(
        at=at, action_key=f"job-1:{name}", outcome="ok", command_id=rec.command_id
    )


def test_a_withdraw_of_an_action_the_recipe_lacks_has_no_type() -> None:
    graph = graph_of(TIGHTENING.read_bytes())
    cancel = CancelWork(action_key="job-1:gone", command_id="job-1:gone#9", reason="teardown")
    [(kind, data)] = outgoing(
        [cancel], loaded_sequence=0, job="job-1", at=0, grace=GRACE, graph=graph
    )
    assert (kind, data.type_id, data.reason) == ("withdraw", "", "teardown")

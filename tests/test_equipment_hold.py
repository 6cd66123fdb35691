"""Equipment hold and restart (ISA-88 hold logic for push commands), issue #5.

Spec: docs/recipes.md "Equipment hold" (the table) and docs/host.md.
Each test drives the core through a pause (Hold event) and a resume (Release event) on a
small recipe whose action `tighten` declares Hold and Restart, and asserts the exact
commands, dispositions, action records and the continuation.

The recipe: step s1 runs `tighten` (work 60 s, hold 10 s, restart 30 s). From s1 the job
goes to s2 on `retightened` (an outcome of the restart type), to s4 on `timeout`, else to
s3. s2, s3 and s4 run the plain pushes `report`, `rework` and `scrap`, so the command that
follows shows which step was entered.

Command ids are `job-1:{action}#{n}` with one counter per job: `#1` is the work, `#2:hold`
the first hold, `#3` the restart, and so on.

Map to the contract table (docs/recipes.md) and the rules of issue #5:
- row "pause while the command is out", rule 1 ....... test_row1_*, test_rule1_*
- row "the equipment answers held", rule 2 ........... test_row2_*, test_rule2_*
- row "any other answer, an error, no answer", rule 3  test_row3_*
- row "the work answers first", rule 4 ............... test_row4_*
- row "resume before the hold is answered", rule 5 ... test_row5_*
- row "the restart", rule 2 .......................... test_row6_*
- row "abort or stop", rule 7 ........................ test_row7_*
- rule 6 (matching by command id) .................... test_rule6_*
- rule 8 (resume) .................................... test_rule8_*
- rule 9 (the state) ................................. test_rule9_*
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec
import pytest
from msgspec.structs import replace

from generated.command_v1_0 import CancelWork, StartWork
from generated.state_v1_5 import ActionRecord, SfcState
from generated.step_result_v1_0 import Cancelled, Complete, Defer, FaultContinuation
from generated.step_result_v1_2 import StepResult
from tests.corehelpers import Job, push, recipe, summary, t

WORK_S, HOLD_S, RESTART_S = 60, 10, 30
WORK_PARAMS = {"torque": 5}
HOLD_PARAMS = {"mode": "soft"}
RESTART_PARAMS = {"resume": True}
KEY = "job-1:tighten"


def tighten(
    name: str = "tighten", timeout: int = WORK_S, hold: int = HOLD_S, **extra: Any
) -> dict[str, Any]:
    return push(
        name,
        "s1",
        "t.tighten",
        timeout,
        Parameters=WORK_PARAMS,
        Hold={"TypeId": "t.tighten.hold", "TimeoutSeconds": hold, "Parameters": HOLD_PARAMS},
        Restart={
            "TypeId": "t.tighten.restart",
            "TimeoutSeconds": RESTART_S,
            "Parameters": RESTART_PARAMS,
        },
        **extra,
    )


def chart(*s1_actions: dict[str, Any]) -> dict[str, Any]:
    return recipe(
        ["s1", "s2", "s3", "s4"],
        transitions=[
            t("s1", "s2", "retightened", 0),
            t("s1", "s4", "timeout", 1),
            t("s1", "s3", "true", 2),
        ],
        actions=[
            *(s1_actions or (tighten(),)),
            push("report", "s2", "t.report", 5),
            push("rework", "s3", "t.rework", 5),
            push("scrap", "s4", "t.scrap", 5),
        ],
    )


# -- expected commands and records


def cid(n: int) -> str:
    return f"{KEY}#{n}"


def hid(n: int) -> str:
    return f"{KEY}#{n}:hold"


def _start(
    work: Literal["push", "hold", "restart"],
    key: str,
    command_id: str,
    type_id: str,
    deadline: int,
    attempt: int,
    params: dict,
) -> StartWork:
    """A push, hold or restart command as the core must emit it (round 1, no selector)."""
    return StartWork(
        work=work,
        action_key=key,
        command_id=command_id,
        type_id=type_id,
        attempt=attempt,
        round=1,
        deadline=deadline,
        parameters=params,
        selector=None,
    )


def work(n: int, deadline: int, attempt: int = 1, key: str = KEY) -> StartWork:
    return _start("push", key, f"{key}#{n}", "t.tighten", deadline, attempt, WORK_PARAMS)


def hold(n: int, deadline: int, attempt: int = 1, key: str = KEY) -> StartWork:
    return _start("hold", key, f"{key}#{n}:hold", "t.tighten.hold", deadline, attempt, HOLD_PARAMS)


def restart(n: int, deadline: int, attempt: int = 1) -> StartWork:
    # "It uses no attempt": the restart carries the attempt it restarts and spends none.
    return _start("restart", KEY, cid(n), "t.tighten.restart", deadline, attempt, RESTART_PARAMS)


def plain(action: str, n: int, deadline: int) -> StartWork:
    """The push of `report` (step s2), `rework` (step s3) or `scrap` (step s4)."""
    key = f"job-1:{action}"
    return _start("push", key, f"{key}#{n}", f"t.{action}", deadline, 1, {})


def cancel(command_id: str, reason: str) -> CancelWork:
    return CancelWork(action_key=KEY, command_id=command_id, reason=reason)


RUNNING = ActionRecord(
    status="open",
    work="push",
    type_id="t.tighten",
    attempt=1,
    round=1,
    first_command=1,
    deadline=WORK_S * 1000,
    timer=None,
    command_id=cid(1),
    outcome=None,
    error=None,
    hold=None,
    hold_command_id=None,
    hold_deadline=None,
    restarted=False,
)
"""The record of `tighten` after a start at 0."""


# -- driving


def started(*s1_actions: dict[str, Any]) -> Job:
    job = Job(chart(*s1_actions))
    r = job.start(at=0)
    assert r.disposition == "applied"
    return job


def paused(at: int = 1_000) -> Job:
    """A job whose work #1 is out, paused at `at`: the hold #2:hold is open."""
    job = started()
    r = job.hold(at=at)
    assert r.disposition == "applied"
    assert r.commands == [hold(2, at + HOLD_S * 1000)]
    return job


def answer_hold(job: Job, n: int, how: str, at: int) -> StepResult:
    """The equipment answers hold #n: `held`, another outcome, `error`, or `silence`."""
    if how == "error":
        return job.fail("tighten", "cannot hold", at=at, command_id=hid(n))
    if how == "silence":
        return job.tick(at=at)
    return job.respond("tighten", how, at=at, command_id=hid(n))


def assert_absorbed(job: Job, r: StepResult, before: SfcState) -> None:
    assert r.disposition == "absorbed", r.reason
    assert r.commands == []
    assert r.state == before
    assert job.state == before


# ============================================================== row 1: pause while out


def test_row1_pause_sends_one_hold_that_runs_against_its_own_deadline_while_held():
    job = started()

    r = job.hold(at=1_000)
    assert r.disposition == "applied"
    assert r.continuation == Defer()
    assert r.commands == [hold(2, 11_000)]
    assert job.rec("tighten") == replace(
        RUNNING, hold="open", hold_command_id=hid(2), hold_deadline=11_000
    )
    assert job.next_deadline == 11_000

    # sent once: a second pause sends nothing, a tick before its deadline does nothing
    before = job.state
    assert_absorbed(job, job.hold(at=2_000), before)
    assert_absorbed(job, job.tick(at=10_999), before)

    # its own deadline runs while the job is held: it expires, and no command goes out
    r = job.tick(at=11_000)
    assert r.disposition == "applied"
    assert r.commands == []
    assert job.rec("tighten") == replace(RUNNING, hold="notHeld", hold_command_id=hid(2))
    assert job.next_deadline is None  # held: work deadlines wait for the release

    # resume: the work was not held, so it is issued again with its id, moved by the hold
    r = job.release(at=20_000)
    assert r.disposition == "applied"
    assert r.commands == [work(1, 60_000 + 19_000)]
    assert job.next_deadline == 79_000

    r = job.respond("tighten", "done", at=21_000, command_id=cid(1))
    assert r.commands == [plain("rework", 3, 26_000)]
    assert job.state.active_steps == ["s3"]


def test_rule1_next_deadline_while_held_is_the_earliest_hold_and_ticks_expire_only_holds():
    # a: work 5 s, hold 10 s; b: work 60 s, hold 4 s; c: a push without hold logic, 2 s
    job = started(tighten("a", timeout=5, hold=10), tighten("b", hold=4), push("c", "s1", "t.c", 2))
    assert job.next_deadline == 2_000

    r = job.hold(at=1_000)
    assert r.commands == [
        hold(4, 11_000, key="job-1:a"),
        hold(5, 5_000, key="job-1:b"),
    ]
    assert job.next_deadline == 5_000  # not c's 2 000 nor a's 5 000: only holds count

    # a tick past every work deadline expires only b's hold: no re-dispatch, no timeout
    r = job.tick(at=5_000)
    assert r.disposition == "applied"
    assert r.commands == []
    assert job.rec("b").hold == "notHeld"
    assert job.rec("a").hold == "open"
    assert [job.rec(n).attempt for n in "abc"] == [1, 1, 1]
    assert [job.rec(n).status for n in "abc"] == ["open"] * 3
    assert job.next_deadline == 11_000

    r = job.tick(at=20_000)
    assert r.commands == []
    assert job.rec("a").hold == "notHeld"
    assert job.next_deadline is None
    assert job.tick(at=30_000).disposition == "absorbed"

    # resume after 30 s: work deadlines move by it, nothing was spent
    r = job.release(at=31_000)
    assert r.commands == [
        work(1, 35_000, key="job-1:a"),
        work(2, 90_000, key="job-1:b"),
        StartWork(
            work="push",
            action_key="job-1:c",
            command_id="job-1:c#3",
            type_id="t.c",
            attempt=1,
            round=1,
            deadline=32_000,
            parameters={},
            selector=None,
        ),
    ]
    assert job.next_deadline == 32_000


def test_rule1_an_outage_while_held_moves_hold_deadlines_only():
    job = paused(at=1_000)
    r = job.tick(at=2_000, outage_ms=5_000)
    assert r.disposition == "applied"
    assert r.commands == []
    assert job.rec("tighten").hold_deadline == 16_000
    assert job.rec("tighten").deadline == 60_000  # the release moves it by the whole hold
    assert job.next_deadline == 16_000

    r = answer_hold(job, 2, "held", at=3_000)
    assert r.commands == [cancel(cid(1), "held")]
    r = job.release(at=4_000)
    assert r.commands == [restart(3, 34_000)]


# ============================================================== row 2: the answer `held`


def test_row2_held_withdraws_the_attempt_and_the_release_sends_the_restart():
    job = paused(at=1_000)

    r = answer_hold(job, 2, "held", at=3_000)
    assert r.disposition == "applied"
    assert r.continuation == Defer()
    assert r.commands == [cancel(cid(1), "held")]
    assert job.rec("tighten") == replace(
        RUNNING, deadline=None, hold="held", hold_command_id=hid(2)
    )
    assert job.next_deadline is None

    # a later answer to the held attempt is absorbed, with or without its command id
    before = job.state
    assert_absorbed(job, job.respond("tighten", "done", at=4_000, command_id=cid(1)), before)
    assert_absorbed(job, job.fail("tighten", "jammed", at=4_000, command_id=cid(1)), before)
    assert_absorbed(job, job.respond("tighten", "done", at=4_000), before)

    # resume: the restart, with a new id, its own type, parameters and deadline
    r = job.release(at=5_000)
    assert r.disposition == "applied"
    assert r.commands == [restart(3, 5_000 + RESTART_S * 1000)]
    rec = job.rec("tighten")
    assert (rec.status, rec.work, rec.type_id, rec.command_id) == (
        "open",
        "restart",
        "t.tighten.restart",
        cid(3),
    )
    assert (rec.attempt, rec.deadline, rec.hold, rec.hold_deadline, rec.restarted) == (
        1,
        35_000,
        None,
        None,
        True,
    )
    assert job.next_deadline == 35_000

    # and the answer to the attempt stays absorbed after the restart
    before = job.state
    assert_absorbed(job, job.respond("tighten", "done", at=6_000, command_id=cid(1)), before)

    r = job.respond("tighten", "retightened", at=7_000, command_id=cid(3))
    assert r.commands == [plain("report", 4, 12_000)]
    assert job.state.active_steps == ["s2"]


def test_rule2_the_restart_uses_no_attempt():
    job = started(tighten(MaxAttempts=3))
    r = job.tick(at=60_000)  # the first attempt expires: attempt 2 goes out
    assert r.commands == [cancel(cid(1), "redispatch"), work(2, 120_000, attempt=2)]

    r = job.hold(at=61_000)
    assert r.commands == [hold(3, 71_000, attempt=2)]
    assert answer_hold(job, 3, "held", at=62_000).commands == [cancel(cid(2), "held")]
    r = job.release(at=63_000)
    assert r.commands == [restart(4, 93_000, attempt=2)]
    assert job.rec("tighten").attempt == 2

    # one attempt is left, yet the restart's expiry is the outcome timeout, not attempt 3
    r = job.tick(at=93_000)
    assert r.commands == [cancel(cid(4), "timeout"), plain("scrap", 5, 98_000)]
    assert r.decisions[0].decision.startswith("tighten timed out")
    assert job.state.active_steps == ["s4"]  # s1 -> s4 on timeout


# ============================================================== row 3: not held


@pytest.mark.parametrize("how", ["busy", "error", "silence"])
def test_row3_work_not_held_runs_to_its_end_and_the_release_issues_it_again(how: str):
    job = paused(at=1_000)

    r = answer_hold(job, 2, how, at=3_000 if how != "silence" else 11_000)
    assert r.disposition == "applied"
    assert r.commands == []  # not withdrawn, nothing dispatched while held
    assert job.rec("tighten") == replace(RUNNING, hold="notHeld", hold_command_id=hid(2))
    assert job.next_deadline is None

    # a repeated non-held answer is absorbed
    if how != "silence":
        before = job.state
        assert_absorbed(job, answer_hold(job, 2, how, at=12_000), before)

    # resume: the same command id and attempt, with the deadline moved by the hold
    r = job.release(at=13_000)
    assert r.commands == [work(1, 72_000)]
    assert job.rec("tighten").restarted is False

    r = job.respond("tighten", "done", at=14_000, command_id=cid(1))
    assert r.commands == [plain("rework", 3, 19_000)]


def test_row3_the_work_answers_while_held_after_a_refused_hold_and_routes_on_release():
    job = paused(at=1_000)
    answer_hold(job, 2, "busy", at=2_000)

    r = job.respond("tighten", "done", at=3_000, command_id=cid(1))
    assert r.disposition == "applied"
    assert r.commands == []  # recorded; no transition fires while held
    assert job.rec("tighten").outcome == "done"
    assert job.state.active_steps == ["s1"]

    r = job.release(at=4_000)
    assert r.commands == [plain("rework", 3, 9_000)]
    assert job.state.active_steps == ["s3"]


def test_row3_a_late_held_while_still_held_counts_and_the_release_restarts():
    job = paused(at=1_000)
    assert job.tick(at=11_000).commands == []  # the hold expired: not held
    assert job.rec("tighten").hold == "notHeld"

    r = answer_hold(job, 2, "held", at=12_000)
    assert r.disposition == "applied"
    assert r.commands == [cancel(cid(1), "held")]
    assert job.rec("tighten") == replace(
        RUNNING, deadline=None, hold="held", hold_command_id=hid(2)
    )

    r = job.release(at=15_000)
    assert r.commands == [restart(3, 45_000)]
    assert job.rec("tighten").restarted is True


def test_row3_a_late_held_after_the_release_restarts_at_once():
    job = paused(at=1_000)
    job.tick(at=11_000)
    assert job.release(at=12_000).commands == [work(1, 71_000)]

    r = answer_hold(job, 2, "held", at=13_000)
    assert r.disposition == "applied"
    assert r.commands == [cancel(cid(1), "held"), restart(3, 43_000)]
    assert job.rec("tighten").work == "restart"
    assert job.next_deadline == 43_000

    # a repeated held is absorbed
    before = job.state
    assert_absorbed(job, answer_hold(job, 2, "held", at=14_000), before)


# ============================================================== row 4: the work answers first


def test_row4_the_work_answers_before_the_hold_supersedes_it():
    job = paused(at=1_000)

    r = job.respond("tighten", "done", at=2_000, command_id=cid(1))
    assert r.disposition == "applied"
    assert r.commands == [cancel(hid(2), "superseded")]
    assert job.rec("tighten") == replace(
        RUNNING, status="done", outcome="done", deadline=None, hold_command_id=hid(2)
    )
    assert job.next_deadline is None
    assert job.state.active_steps == ["s1"]  # held: nothing fires

    # a later answer to the hold is absorbed, whatever it says
    before = job.state
    assert_absorbed(job, answer_hold(job, 2, "held", at=3_000), before)
    assert_absorbed(job, answer_hold(job, 2, "error", at=3_000), before)
    assert_absorbed(job, job.tick(at=11_000), before)

    r = job.release(at=4_000)
    assert r.commands == [plain("rework", 3, 9_000)]
    assert job.state.active_steps == ["s3"]


# ============================================================== row 5: release before the answer


# docs/recipes.md "Equipment hold" "Release before the answer": the release moves the work's deadline but does not
# issue it again; the answer decides (held restarts at once, anything else issues the work
# again with its command id).


def test_row5_release_before_the_answer_then_held_sends_the_restart_at_once():
    job = paused(at=1_000)

    r = job.release(at=3_000)
    assert r.disposition == "applied"
    assert r.commands == []  # the answer decides
    assert job.rec("tighten").deadline == 62_000
    assert job.next_deadline == 11_000  # the hold's own deadline, not moved

    r = answer_hold(job, 2, "held", at=4_000)
    assert r.commands == [cancel(cid(1), "held"), restart(3, 34_000)]


@pytest.mark.parametrize("how", ["busy", "error", "silence"])
def test_row5_release_before_the_answer_then_not_held_lets_the_work_run_on(how: str):
    job = paused(at=1_000)

    r = job.release(at=3_000)
    assert r.commands == []
    assert job.next_deadline == 11_000

    r = answer_hold(job, 2, how, at=4_000 if how != "silence" else 11_000)
    assert r.disposition == "applied"
    assert r.commands == [work(1, 62_000)]  # issued again with its id; the host sends it once
    assert job.rec("tighten").hold == "notHeld"
    assert job.next_deadline == 62_000


def test_row5_release_before_the_answer_the_answer_decides():
    """The part of row 5 that does not depend on what the release itself emits."""
    job = paused(at=1_000)
    job.release(at=3_000)
    assert job.rec("tighten").deadline == 62_000  # moved by the hold
    assert job.rec("tighten").hold_deadline == 11_000  # the hold keeps its own deadline
    assert job.next_deadline == 11_000  # the work's deadline waits for the answer

    r = answer_hold(job, 2, "held", at=4_000)
    assert r.commands == [cancel(cid(1), "held"), restart(3, 34_000)]
    assert job.next_deadline == 34_000

    job2 = paused(at=1_000)
    job2.release(at=3_000)
    r = answer_hold(job2, 2, "busy", at=4_000)
    assert r.disposition == "applied"
    assert not [c for c in r.commands if isinstance(c, CancelWork)]
    assert job2.rec("tighten").hold == "notHeld"
    assert job2.next_deadline == 62_000


# ============================================================== row 6: the restart


def _restarted(released_at: int = 5_000) -> Job:
    job = paused(at=1_000)
    answer_hold(job, 2, "held", at=2_000)
    assert job.release(at=released_at).commands == [restart(3, released_at + 30_000)]
    return job


@pytest.mark.parametrize(
    ("outcome", "step", "next_command"),
    [("retightened", "s2", plain("report", 4, 11_000)), ("done", "s3", plain("rework", 4, 11_000))],
)
def test_row6_the_restart_response_completes_the_action_and_routes_on_its_outcome(
    outcome: str, step: str, next_command: StartWork
):
    job = _restarted()
    r = job.respond("tighten", outcome, at=6_000, command_id=cid(3))
    assert r.disposition == "applied"
    assert r.continuation == Defer()
    assert r.commands == [next_command]
    assert r.decisions[0].decision == f"tighten answered {outcome}"
    assert "tighten" not in job.state.actions  # s1 was left
    assert job.state.active_steps == [step]

    before = job.state
    assert_absorbed(job, job.respond("tighten", outcome, at=7_000, command_id=cid(3)), before)


def test_row6_the_restart_expires_with_the_outcome_timeout():
    job = _restarted(released_at=5_000)
    before = job.state
    assert_absorbed(job, job.tick(at=34_999), before)

    r = job.tick(at=35_000)
    assert r.disposition == "applied"
    assert r.commands == [cancel(cid(3), "timeout"), plain("scrap", 4, 40_000)]
    assert r.decisions[0].decision.startswith("tighten timed out")
    assert job.state.active_steps == ["s4"]

    r = job.respond("scrap", "done", at=36_000)
    assert r.continuation == Complete(outcomes=["done"])


def test_row6_a_failed_restart_is_the_outcome_error():
    job = _restarted()
    r = job.fail("tighten", "spindle", at=6_000, command_id=cid(3))
    assert r.disposition == "applied"
    assert job.rec("tighten").outcome == "error"
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "error"  # no transition names error
    assert r.commands == []


def test_row6_a_second_pause_holds_the_restarted_work_the_same_way():
    job = _restarted(released_at=5_000)

    r = job.hold(at=8_000)
    assert r.commands == [
        StartWork(
            work="hold",
            action_key=KEY,
            command_id=hid(4),
            type_id="t.tighten.hold",
            attempt=1,
            round=1,
            deadline=18_000,
            parameters=HOLD_PARAMS,
            selector=None,
        )
    ]
    rec = job.rec("tighten")
    assert (rec.work, rec.command_id, rec.hold, rec.hold_command_id, rec.hold_deadline) == (
        "restart",
        cid(3),
        "open",
        hid(4),
        18_000,
    )
    assert job.next_deadline == 18_000

    r = answer_hold(job, 4, "held", at=9_000)
    assert r.commands == [cancel(cid(3), "held")]

    r = job.release(at=10_000)
    assert r.commands == [restart(5, 40_000)]
    assert job.rec("tighten").restarted is True

    before = job.state
    assert_absorbed(
        job, job.respond("tighten", "retightened", at=11_000, command_id=cid(3)), before
    )
    r = job.respond("tighten", "retightened", at=11_000, command_id=cid(5))
    assert r.commands == [plain("report", 6, 16_000)]


def test_row6_a_restart_that_could_not_be_held_is_issued_again_with_its_id():
    job = _restarted(released_at=5_000)
    job.hold(at=8_000)
    assert answer_hold(job, 4, "busy", at=9_000).commands == []

    r = job.release(at=10_000)
    assert r.commands == [restart(3, 37_000)]  # same id, deadline moved by the 2 s hold
    assert job.next_deadline == 37_000


# ============================================================== row 7: abort or stop


def _cancel_while_hold_open_and_held(job: Job) -> list[CancelWork]:
    return [cancel(cid(1), "aborted"), cancel(hid(2), "aborted")]


def _cancel_while_hold_open_after_release(job: Job) -> list[CancelWork]:
    job.release(at=2_000)
    return [cancel(cid(1), "aborted"), cancel(hid(2), "aborted")]


def _cancel_while_work_held(job: Job) -> list[CancelWork]:
    answer_hold(job, 2, "held", at=2_000)
    return []  # the attempt was withdrawn (reason held), the hold is answered


def _cancel_while_restart_open(job: Job) -> list[CancelWork]:
    answer_hold(job, 2, "held", at=2_000)
    job.release(at=3_000)
    return [cancel(cid(3), "aborted")]


def _cancel_while_restart_hold_open(job: Job) -> list[CancelWork]:
    answer_hold(job, 2, "held", at=2_000)
    job.release(at=3_000)
    job.hold(at=4_000)
    return [cancel(cid(3), "aborted"), cancel(hid(4), "aborted")]


@pytest.mark.parametrize(
    "setup",
    [
        _cancel_while_hold_open_and_held,
        _cancel_while_hold_open_after_release,
        _cancel_while_work_held,
        _cancel_while_restart_open,
        _cancel_while_restart_hold_open,
    ],
)
def test_row7_cancel_withdraws_open_hold_and_restart_commands(
    setup: Callable[[Job], list[CancelWork]],
):
    job = paused(at=1_000)
    expected = setup(job)

    r = job.cancel(at=5_000, reason="aborted")
    assert r.disposition == "applied"
    assert r.commands == expected
    assert r.continuation == Cancelled(reason="aborted")
    assert job.state.status == "cancelled"
    assert job.next_deadline is None

    before = job.state
    for late in (
        job.release(at=6_000),
        answer_hold(job, 2, "held", at=6_000),
        job.respond("tighten", "done", at=6_000),
    ):
        assert late.disposition == "absorbed"
        assert late.commands == []
    assert job.state == before


# ============================================================== rule 6: matching by command id


def test_rule6_an_answer_to_an_earlier_hold_is_absorbed():
    job = paused(at=1_000)
    answer_hold(job, 2, "busy", at=2_000)
    assert job.release(at=3_000).commands == [work(1, 62_000)]
    assert job.hold(at=4_000).commands == [hold(3, 14_000)]

    before = job.state
    assert_absorbed(job, answer_hold(job, 2, "held", at=5_000), before)
    assert_absorbed(job, answer_hold(job, 2, "error", at=5_000), before)

    r = answer_hold(job, 3, "held", at=6_000)
    assert r.commands == [cancel(cid(1), "held")]
    assert job.release(at=7_000).commands == [restart(4, 37_000)]


def test_rule6_an_answer_to_the_withdrawn_work_is_absorbed_and_the_restart_answer_counts():
    job = _restarted(released_at=5_000)
    before = job.state
    assert_absorbed(job, job.respond("tighten", "retightened", at=6_000, command_id=cid(1)), before)
    assert_absorbed(job, job.fail("tighten", "late", at=6_000, command_id=cid(1)), before)

    r = job.respond("tighten", "retightened", at=6_000, command_id=cid(3))
    assert r.disposition == "applied"
    assert job.state.active_steps == ["s2"]


def test_rule6_an_answer_without_command_id_belongs_to_the_work_while_its_hold_is_open():
    job = paused(at=1_000)
    r = job.respond("tighten", "done", at=2_000)  # not an answer to the hold
    assert r.disposition == "applied"
    assert r.commands == [cancel(hid(2), "superseded")]
    assert job.rec("tighten").outcome == "done"
    assert job.rec("tighten").hold is None

    assert job.release(at=3_000).commands == [plain("rework", 3, 8_000)]


def test_rule6_an_answer_without_command_id_belongs_to_the_open_restart():
    job = _restarted(released_at=5_000)
    r = job.respond("tighten", "retightened", at=6_000)
    assert r.disposition == "applied"
    assert r.decisions[0].decision == "tighten answered retightened"
    assert r.commands == [plain("report", 4, 11_000)]


def test_rule6_a_hold_answer_for_another_action_key_is_rejected():
    job = paused(at=1_000)
    before = job.state
    r = job.respond("tighten", "held", at=2_000, command_id="job-1:other#2:hold")
    assert r.disposition == "rejected"
    assert r.commands == []
    assert job.state == before
    assert answer_hold(job, 2, "held", at=3_000).commands == [cancel(cid(1), "held")]
    assert job.release(at=4_000).commands == [restart(3, 34_000)]


# ============================================================== rule 8: resume


def test_rule8_resume_skips_work_whose_hold_is_open_and_reissues_the_restart_with_its_id():
    job = paused(at=1_000)
    before = job.state
    assert_absorbed(job, job.resume(at=1_500, live=[]), before)  # held: the release re-issues

    job.release(at=2_000)  # before the hold is answered
    before = job.state
    assert_absorbed(job, job.resume(at=3_000, live=[]), before)  # its hold is open

    r = answer_hold(job, 2, "held", at=4_000)
    assert r.commands == [cancel(cid(1), "held"), restart(3, 34_000)]

    before = job.state
    r = job.resume(at=5_000, live=[])
    assert r.disposition == "applied"
    assert r.commands == [restart(3, 34_000)]  # same id, same deadline, no attempt
    assert job.state.sequence == before.sequence == 3
    assert job.state.actions == before.actions

    assert_absorbed(job, job.resume(at=6_000, live=[cid(3)]), job.state)

    r = job.respond("tighten", "retightened", at=7_000, command_id=cid(3))
    assert r.commands == [plain("report", 4, 12_000)]


# ============================================================== rule 9: the state


def test_rule9_the_state_records_hold_status_id_deadline_and_restarted():
    def roundtrip(state: SfcState) -> SfcState:
        return msgspec.json.decode(msgspec.json.encode(state), type=SfcState)

    job = started()
    assert job.rec("tighten") == RUNNING

    job.hold(at=1_000)
    opened = replace(RUNNING, hold="open", hold_command_id=hid(2), hold_deadline=11_000)
    assert job.rec("tighten") == opened
    assert job.state.held_at == 1_000
    assert roundtrip(job.state) == job.state

    answer_hold(job, 2, "held", at=2_000)
    held = replace(RUNNING, deadline=None, hold="held", hold_command_id=hid(2))
    assert job.rec("tighten") == held
    assert roundtrip(job.state) == job.state

    job.release(at=4_000)
    rec = job.rec("tighten")
    assert replace(rec, hold_command_id=None) == replace(
        RUNNING,
        work="restart",
        type_id="t.tighten.restart",
        command_id=cid(3),
        deadline=34_000,
        restarted=True,
    )
    assert job.state.held_at is None
    assert roundtrip(job.state) == job.state
    wire = msgspec.json.encode(rec)
    assert b'"restarted":true' in wire and b'"holdDeadline":null' in wire

    r = job.respond("tighten", "retightened", at=5_000, command_id=cid(3))
    assert r.decisions[0].decision == "tighten answered retightened"
    assert "tighten" not in job.state.actions  # the step was left: no record of it stays


def test_rule9_the_restart_clears_the_hold_command_id():
    job = _restarted(released_at=5_000)
    assert job.rec("tighten").hold_command_id is None


def _short_hold_recipe(hold_s: int) -> dict:
    hold = {"TypeId": "t.hold", "TimeoutSeconds": hold_s}
    restart = {"TypeId": "t.restart", "TimeoutSeconds": 5}
    return recipe(
        ["s0", "s1"],
        transitions=[t("s0", "s1")],
        actions=[push("a", "s0", timeout=1, Hold=hold, Restart=restart), push("b", "s1")],
    )


def test_a_hold_that_expires_after_the_work_deadline_passed_issues_no_dead_command():
    """Found by the properties: the expiry re-dispatches; the old command is not re-issued first."""
    job = Job(_short_hold_recipe(3))
    job.start(at=0)
    job.hold(at=500)
    assert job.release(at=600).commands == []  # the hold's answer decides
    r = job.tick(3_500)
    assert summary(r) == [("cancel", "job-1:a#1", "redispatch"), ("push", "job-1:a#3")]


def test_a_late_held_for_the_hold_of_a_redispatched_attempt_is_absorbed():
    """The hold belonged to attempt 1; the equipment cannot hold attempt 2 with it."""
    job = Job(_short_hold_recipe(1))
    job.start(at=0)
    job.hold(at=100)
    job.tick(1_100)  # the hold expires unanswered: not held
    job.release(at=1_200)
    r = job.tick(2_100)
    assert summary(r) == [("cancel", "job-1:a#1", "redispatch"), ("push", "job-1:a#3")]
    late = job.respond("a", "held", command_id="job-1:a#2:hold", at=2_200)
    assert late.disposition == "absorbed"
    assert late.commands == []
    assert job.rec("a").command_id == "job-1:a#3"

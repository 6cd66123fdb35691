"""The run side of the IEC 61131-3 qualifiers (issue 34, QUALIFIERS.md): each row of the
table, gating, dwells, R, the job's end, and process timers against attempt deadlines."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from generated.command_v1_0 import StartWork
from generated.event_v1_0 import ActionCompleted, ActionFailed, Tick
from generated.step_result_v1_0 import Complete, FaultContinuation
from sfc.builder import RECIPE_V1_2_0, build
from sfc.codec import encode
from sfc.evolution import non_gating_outcomes, overdue_timers
from sfc.graph import Graph
from tests.corehelpers import Job, cancels, recipe, starts, summary, t


def graph_v12(doc: dict[str, Any]) -> Graph:
    result = build(msgspec.json.encode(doc), dataschema=RECIPE_V1_2_0)
    assert result.graph is not None, result.errors
    return result.graph


def q(
    name: str, step: str, qualifier: str, seconds: float | None = None, timeout: int = 60
) -> dict[str, Any]:
    """A push action block with a qualifier (and T for the timed ones)."""
    block: dict[str, Any] = {
        "Name": name,
        "Step": step,
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": f"t.{name}",
        "TimeoutSeconds": timeout,
    }
    if seconds is not None:
        block["DurationSeconds"] = seconds
    return block


def r(name: str, step: str) -> dict[str, Any]:
    return {"Name": name, "Step": step, "Qualifier": "R"}


def n(name: str, step: str, timeout: int = 60) -> dict[str, Any]:
    return q(name, step, "N", timeout=timeout)


def job(
    steps: list[str],
    actions: list[dict[str, Any]],
    transitions: list[dict[str, Any]] | None = None,
    min_seconds: dict[str, float] | None = None,
) -> Job:
    doc = recipe(
        steps,
        transitions=transitions
        if transitions is not None
        else [t(a, b) for a, b in pairwise(steps)],
        actions=actions,
    )
    for s in doc["Steps"]:
        if min_seconds and s["Name"] in min_seconds:
            s["MinSeconds"] = min_seconds[s["Name"]]
    return Job(graph_v12(doc))


def names(commands: list[Any]) -> list[tuple[str, ...]]:
    """summary() without the job prefix: ("push", "a#1"), ("cancel", "a#1", "reset")."""
    return [tuple(x.replace("job-1:", "") for x in c) for c in commands]


# ------------------------------------------------------------------ N and gating


def test_n_is_gating_and_its_startwork_says_no_qualifier() -> None:
    j = job(["A", "B"], [n("a", "A"), n("b", "B")])
    first = starts(j.start())
    assert first[0].qualifier is UNSET and first[0].stop_at is UNSET
    assert j.state.active_steps == ["A"]
    j.respond("a", at=5)
    assert j.state.active_steps == ["B"]


def test_a_step_with_only_non_gating_actions_is_passed_at_once_after_starting_them() -> None:
    j = job(["A", "B"], [q("p", "A", "P"), n("b", "B")])
    result = j.start()
    assert names(summary(result)) == [("push", "p#1"), ("push", "b#2")]
    assert starts(result)[0].qualifier == "P"
    assert j.state.active_steps == ["B"]


def test_a_timer_step_waits_for_its_min_seconds() -> None:
    j = job(["A", "B"], [n("b", "B")], min_seconds={"A": 5})
    j.start()
    assert j.state.active_steps == ["A"] and j.state.dwells == {"A": 5000}
    assert j.next_deadline == 5000
    assert j.tick(4999).disposition == "absorbed"
    result = j.tick(5000)
    assert "the dwell of A passed" in result.reason
    assert j.state.active_steps == ["B"] and j.state.dwells == {}


def test_a_dwell_holds_a_step_whose_gating_actions_are_done() -> None:
    j = job(["A", "B"], [n("a", "A"), n("b", "B")], min_seconds={"A": 10})
    j.start()
    j.respond("a", at=2000)
    assert j.state.active_steps == ["A"]
    j.tick(10_000)
    assert j.state.active_steps == ["B"]


def test_the_dwell_passes_before_the_gating_answer() -> None:
    j = job(["A", "B"], [n("a", "A"), n("b", "B")], min_seconds={"A": 1})
    j.start()
    j.tick(1000)
    assert j.state.active_steps == ["A"]  # still waits for a
    j.respond("a", at=3000)
    assert j.state.active_steps == ["B"]


# ------------------------------------------------------------------ P, P1, P0


@pytest.mark.parametrize("qualifier", ["P", "P1"])
def test_p_starts_once_at_entry_and_runs_to_its_end(qualifier: str) -> None:
    j = job(["A", "B"], [q("p", "A", qualifier), n("a", "A"), n("b", "B")])
    j.start()
    j.respond("a", at=5)  # A is left while p is open: p is not withdrawn
    assert j.state.active_steps == ["B"]
    assert all(c[0] != "cancel" for c in names(summary(j.results[-1])))
    assert j.state.actions["p"].status == "open"
    answered = j.respond("p", "ok", at=7)
    assert answered.disposition == "applied"
    assert "p answered ok (" + qualifier + ": recorded, not waited for)" in answered.reason
    assert "p" not in j.state.actions  # recorded, and dropped: its step is not active
    assert j.state.active_steps == ["B"]


def test_a_pulse_is_never_withdrawn_not_even_at_the_job_end() -> None:
    j = job(["A"], [q("p", "A", "P1"), n("a", "A")])
    j.start()
    done = j.respond("a", at=5)
    assert isinstance(done.continuation, Complete)
    assert cancels(done) == []
    assert j.state.actions == {}  # the state forgets it
    assert j.respond("p", at=6).disposition == "absorbed"


def test_p0_starts_at_exit_before_the_next_steps_entries() -> None:
    j = job(["A", "B"], [q("bye", "A", "P0"), n("a", "A"), n("b", "B")])
    first = j.start()
    assert names(summary(first)) == [("push", "a#1")]
    result = j.respond("a", at=5)
    assert names(summary(result)) == [("push", "bye#2"), ("push", "b#3")]
    assert starts(result)[0].qualifier == "P0"


def test_p0_of_the_final_step_starts_when_the_job_completes() -> None:
    j = job(["A"], [q("bye", "A", "P0"), n("a", "A")])
    j.start()
    result = j.respond("a", at=5)
    assert names(summary(result)) == [("push", "bye#2")]
    assert isinstance(result.continuation, Complete)


# ------------------------------------------------------------------ L and SL


def test_l_is_withdrawn_at_its_limit_with_outcome_done() -> None:
    j = job(["A", "B"], [q("blow", "A", "L", 2), n("a", "A"), n("b", "B")])
    start = starts(j.start())
    assert start[0].qualifier == "L" and start[0].stop_at == 2000
    assert j.next_deadline == 2000
    result = j.tick(2000)
    assert names(summary(result)) == [("cancel", "blow#1", "limit")]
    assert j.state.actions["blow"].outcome == "done"
    assert "blow (L 2 s) withdrawn at its limit" in result.reason
    j.respond("a", at=3000)  # leaving drops the done record, withdraws nothing more
    assert cancels(j.results[-1]) == [] and "blow" not in j.state.actions


def test_l_is_withdrawn_when_its_step_is_left_first() -> None:
    j = job(["A", "B"], [q("blow", "A", "L", 2), n("a", "A"), n("b", "B")])
    j.start()
    result = j.respond("a", at=1000)
    assert ("cancel", "blow#1", "deactivated") in names(summary(result))
    assert "blow" not in j.state.actions
    assert j.next_deadline == 61_000  # b's deadline only: the limit went with the work


def test_l_that_answers_before_its_limit_is_not_withdrawn() -> None:
    j = job(["A", "B"], [q("blow", "A", "L", 2), n("a", "A"), n("b", "B")])
    j.start()
    j.respond("blow", "ok", at=500)
    assert j.state.actions["blow"].outcome == "ok" and j.state.actions["blow"].timer is None
    assert j.tick(2000).disposition == "absorbed"


def test_sl_outlives_its_step_and_is_withdrawn_at_its_limit() -> None:
    j = job(["A", "B"], [q("vac", "A", "SL", 5), n("b", "B")])
    j.start()
    assert j.state.active_steps == ["B"] and j.state.actions["vac"].status == "open"
    result = j.tick(5000)
    assert names(summary(result)) == [("cancel", "vac#1", "limit")]
    assert "vac" not in j.state.actions  # done, and its step is not active


def test_sl_reset_before_its_limit() -> None:
    j = job(["A", "B", "C"], [q("vac", "A", "SL", 5), n("b", "B"), r("vac", "C"), n("c", "C")])
    j.start()
    result = j.respond("b", at=1000)
    assert ("cancel", "vac#1", "reset") in names(summary(result))
    assert "vac" not in j.state.actions
    assert j.tick(5000).disposition == "absorbed"


# ------------------------------------------------------------------ D, SD, DS


def test_d_starts_at_entry_plus_t_if_the_step_is_still_active() -> None:
    j = job(["A", "B"], [q("andon", "A", "D", 10), n("a", "A"), n("b", "B")])
    assert names(summary(j.start())) == [("push", "a#1")]
    assert j.state.actions["andon"].status == "pending"
    assert j.next_deadline == 10_000
    result = j.tick(10_000)
    assert names(summary(result)) == [("push", "andon#2")]
    assert starts(result)[0].qualifier == "D"
    left = j.respond("a", at=12_000)
    assert ("cancel", "andon#2", "deactivated") in names(summary(left))


def test_d_of_a_step_left_before_t_never_starts() -> None:
    j = job(["A", "B"], [q("andon", "A", "D", 10), n("a", "A"), n("b", "B")])
    j.start()
    j.respond("a", at=3000)
    assert "andon" not in j.state.actions
    assert any("andon (D 10 s) not started: A was left" in d for d in j.decisions)


def test_a_step_left_at_exactly_entry_plus_t_does_not_start_its_d() -> None:
    j = job(
        ["A", "B"], [q("andon", "A", "D", 10), q("hold", "A", "DS", 10), n("a", "A"), n("b", "B")]
    )
    j.start()
    result = j.respond("a", at=10_000)  # the answer at the timer's time comes first
    assert names(summary(result)) == [("push", "b#2")]
    assert j.tick(10_000).disposition == "absorbed"
    assert all("andon#" not in c.command_id for r_ in j.results for c in r_.commands)


def test_a_timeout_at_exactly_entry_plus_t_wins_over_the_d_in_one_tick() -> None:
    last = {**n("a", "A", timeout=10), "MaxAttempts": 1}
    j = job(["A", "B"], [q("andon", "A", "D", 10), last, n("b", "B")], [t("A", "B", "timeout")])
    j.start()
    # The deadline and the timer fall on 10 s: the deadline is handled first, A is left
    # on its timeout, so the D does not start.
    result = j.tick(10_000)
    assert names(summary(result)) == [("cancel", "a#1", "timeout"), ("push", "b#2")]


def test_a_redispatch_at_entry_plus_t_keeps_the_step_so_the_d_starts_after_it() -> None:
    j = job(["A", "B"], [q("andon", "A", "D", 10), n("a", "A", timeout=10), n("b", "B")])
    j.start()
    result = j.tick(10_000)
    assert names(summary(result)) == [
        ("cancel", "a#1", "redispatch"),
        ("push", "a#2"),
        ("push", "andon#3"),
    ]


def test_sd_starts_after_t_even_if_its_step_was_left() -> None:
    j = job(["A", "B"], [q("heat", "A", "SD", 10), n("a", "A"), n("b", "B")])
    j.start()
    j.respond("a", at=1000)
    assert j.state.actions["heat"].status == "pending"
    result = j.tick(10_000)
    assert names(summary(result)) == [("push", "heat#3")]
    assert j.state.actions["heat"].status == "open"


def test_sd_reset_before_t_never_starts() -> None:
    j = job(["A", "B"], [q("heat", "A", "SD", 10), n("a", "A"), r("heat", "B"), n("b", "B")])
    j.start()
    result = j.respond("a", at=1000)
    assert "heat" not in j.state.actions and cancels(result) == []
    assert any("the timer of heat (SD 10 s) dropped" in d for d in j.decisions)
    assert j.tick(10_000).disposition == "absorbed"


def test_ds_starts_only_if_active_then_is_stored() -> None:
    j = job(["A", "B", "C"], [q("mix", "A", "DS", 5), n("a", "A"), n("b", "B"), r("mix", "C")])
    j.start()
    j.tick(5000)
    assert j.state.actions["mix"].status == "open"
    j.respond("a", at=6000)  # A left: DS stays
    assert j.state.actions["mix"].status == "open"
    result = j.respond("b", at=7000)
    assert ("cancel", "mix#2", "reset") in names(summary(result))


def test_ds_of_a_step_left_before_t_never_starts() -> None:
    j = job(["A", "B"], [q("mix", "A", "DS", 5), n("a", "A"), n("b", "B")])
    j.start()
    j.respond("a", at=1000)
    assert "mix" not in j.state.actions
    assert j.tick(5000).disposition == "absorbed"


# ------------------------------------------------------------------ S and R


def test_s_runs_across_steps_until_an_r() -> None:
    j = job(["A", "B", "C"], [q("conv", "A", "S"), n("b", "B"), r("conv", "C"), n("c", "C")])
    j.start()
    assert j.state.active_steps == ["B"] and j.state.actions["conv"].status == "open"
    result = j.respond("b", at=1000)
    assert names(summary(result))[0] == ("cancel", "conv#1", "reset")
    assert "conv" not in j.state.actions


def test_r_of_an_action_not_running_says_so_and_sends_nothing() -> None:
    j = job(["A", "B", "C"], [q("conv", "A", "S"), n("b", "B"), r("conv", "C"), n("c", "C")])
    j.start()
    j.respond("conv", "ok", at=500)  # conv ended on its own
    assert "conv" not in j.state.actions
    result = j.respond("b", at=1000)
    assert names(summary(result)) == [("push", "c#3")]
    assert any("R conv: conv (S) is not running; nothing to reset" in d for d in j.decisions)


def test_a_stored_action_re_entered_while_open_is_not_started_again() -> None:
    j = job(
        ["A", "B"],
        [q("conv", "A", "S"), n("a", "A"), n("b", "B")],
        transitions=[t("A", "B"), t("B", "A", "again", 0), t("B", "A", "true", 1)],
    )
    j.start()
    j.respond("a", at=1)
    result = j.respond("b", "again", at=2)  # back into A, conv still open
    assert names(summary(result)) == [("push", "a#4")]
    assert any(
        "conv (S) not started again: its work is open since round 1" in d for d in j.decisions
    )
    assert len([k for k in j.state.actions if k == "conv"]) == 1
    # Once it has ended, the next entry starts it in the next round.
    j.respond("conv", at=3)
    j.respond("a", at=4)
    again = j.respond("b", "again", at=5)
    started = [c for c in starts(again) if c.action_key.endswith(":conv")]
    assert len(started) == 1 and started[0].round == 2


def test_s_open_at_the_job_end_is_withdrawn_ended() -> None:
    j = job(["A", "B"], [q("conv", "A", "S"), n("b", "B")])
    j.start()
    result = j.respond("b", at=5)
    assert isinstance(result.continuation, Complete)
    assert names(summary(result)) == [("cancel", "conv#1", "ended")]
    assert j.state.actions == {}


# ------------------------------------------------------------------ non-gating outcomes


@pytest.mark.parametrize("how", ["error", "timeout", "odd"])
def test_a_non_gating_outcome_never_routes_and_never_faults(how: str) -> None:
    j = job(
        ["A", "B"],
        [q("conv", "A", "S", timeout=5), n("a", "A"), n("b", "B")],
        transitions=[t("A", "B", "true")],
    )
    j.start()
    if how == "error":
        result = j.fail("conv", "motor overload", at=10)
    elif how == "timeout":
        for at in (5000, 10_000, 15_000):
            result = j.tick(at)
        assert j.state.actions["conv"].outcome == "timeout"
    else:
        result = j.respond("conv", "odd", at=10)
    assert result.continuation.__class__.__name__ == "Defer"
    assert j.state.active_steps == ["A"]
    j.respond("a", at=20_000)
    assert j.state.active_steps == ["B"]
    assert not isinstance(j.results[-1].continuation, FaultContinuation)


# ------------------------------------------------------------------ cancel and fault


def test_non_gating_work_open_at_a_cancel_is_withdrawn_with_its_reason_pulses_aside() -> None:
    j = job(
        ["A", "B"],
        [
            q("conv", "A", "S"),
            q("p", "A", "P"),
            q("bye", "A", "P0"),
            q("d", "A", "SD", 50),
            n("a", "A"),
        ],
    )
    j.start()
    result = j.cancel(10, "operator stop")
    assert sorted(names(summary(result))) == [
        ("cancel", "a#3", "operator stop"),
        ("cancel", "conv#1", "operator stop"),
    ]
    assert set(j.state.actions) == {"a", "conv"}  # pulses and the timer forgotten
    assert j.next_deadline is None


def test_non_gating_work_open_at_a_fault_is_withdrawn_teardown_and_p0_does_not_start() -> None:
    j = job(
        ["A", "B"],
        [q("conv", "A", "S"), q("bye", "A", "P0"), n("a", "A"), n("b", "B")],
        transitions=[t("A", "B", "ok")],
    )
    j.start()
    result = j.fail("a", at=10)
    assert isinstance(result.continuation, FaultContinuation)
    assert sorted(names(summary(result))) == [("cancel", "conv#1", "teardown")]


# ------------------------------------------------------------------ hold and outage


def test_a_hold_moves_a_d_timer_by_its_length() -> None:
    j = job(["A", "B"], [q("andon", "A", "D", 10), n("a", "A", timeout=600), n("b", "B")])
    j.start()
    j.hold(2000)
    assert j.tick(10_000).disposition == "absorbed"  # held: the timer waits
    j.release(7000)  # a 5 s hold
    assert j.state.actions["andon"].timer == 15_000
    assert j.tick(14_999).disposition == "absorbed"
    assert names(summary(j.tick(15_000))) == [("push", "andon#2")]


def test_a_hold_moves_the_stop_at_of_an_l_and_the_release_says_it() -> None:
    j = job(["A", "B"], [q("blow", "A", "L", 10), n("a", "A", timeout=600), n("b", "B")])
    j.start()
    j.hold(2000)
    result = j.release(5000)
    reissued = {c.command_id: c for c in starts(result)}
    assert reissued["job-1:blow#1"].stop_at == 13_000


def test_an_outage_moves_deadlines_not_timers() -> None:
    """L, D and a dwell across an outage: due at once when it ends; the deadline moves."""
    j = job(
        ["A", "B"],
        [q("blow", "A", "L", 2), q("andon", "A", "D", 3), n("a", "A", timeout=10), n("b", "B")],
        min_seconds={"A": 4},
    )
    j.start()
    result = j.tick(8000, outage_ms=7000)  # down from 1 s to 8 s
    assert names(summary(result)) == [("cancel", "blow#1", "limit"), ("push", "andon#3")]
    assert "the dwell of A passed" in result.reason
    assert j.state.actions["a"].deadline == 17_000  # the attempt's deadline moved
    assert j.state.dwells == {}
    left = j.respond("a", at=9000)
    assert ("cancel", "andon#3", "deactivated") in names(summary(left))


def test_a_tick_fires_due_timers_in_time_order_ties_in_recipe_order() -> None:
    j = job(
        ["A", "B"],
        [q("z", "A", "D", 2), q("y", "A", "D", 1), q("x", "A", "D", 2), n("a", "A"), n("b", "B")],
    )
    j.start()
    result = j.tick(5000)
    assert names(summary(result)) == [("push", "y#2"), ("push", "z#3"), ("push", "x#4")]


def test_timers_are_bounded_one_record_per_block_over_many_rounds() -> None:
    j = job(
        ["A", "B"],
        [q("conv", "A", "S"), q("p", "A", "P"), q("sd", "A", "SD", 100), n("a", "A"), n("b", "B")],
        transitions=[t("A", "B"), t("B", "A", "again", 0), t("B", "A", "true", 1)],
    )
    j.start()
    at = 0
    sizes = []
    for _ in range(30):
        at += 10
        j.respond("a", at=at)
        at += 10
        j.respond("b", "again", at=at)
        sizes.append(len(encode(j.state)))
        assert set(j.state.actions) <= {"conv", "p", "sd", "a", "b"}
    assert max(sizes[5:]) - min(sizes[5:]) < 40  # round and counter digits only


def test_startwork_of_a_timed_or_stored_block_carries_its_qualifier() -> None:
    j = job(["A"], [q("s", "A", "S"), q("sl", "A", "SL", 1), n("a", "A")])
    result = j.start()
    by = {c.action_key.rpartition(":")[2]: c for c in result.commands if isinstance(c, StartWork)}
    assert (by["s"].qualifier, by["s"].stop_at) == ("S", UNSET)
    assert (by["sl"].qualifier, by["sl"].stop_at) == ("SL", 1000)
    assert by["a"].qualifier is UNSET


def test_an_answer_after_a_timer_ran_out_without_its_tick_fires_the_timer_first() -> None:
    """The tick of a D at 10 s never came (a slow sweep, a worker that died): the answer at
    12 s fires it first, in plant time, then leaves the step."""
    j = job(
        ["A", "B"], [q("andon", "A", "D", 10), q("blow", "A", "L", 5), n("a", "A"), n("b", "B")]
    )
    j.start()
    result = j.respond("a", at=12_000)
    assert result.reason.startswith("time passed first: blow (L 5 s) withdrawn at its limit; ")
    assert names(summary(result)) == [
        ("cancel", "blow#1", "limit"),
        ("push", "andon#3"),
        ("cancel", "andon#3", "deactivated"),
        ("push", "b#4"),
    ]


def test_an_answer_absorbed_fires_no_timer() -> None:
    j = job(["A", "B"], [q("andon", "A", "D", 10), n("a", "A"), n("b", "B")])
    j.start()
    result = j.respond("nobody", at=12_000)
    assert result.disposition == "rejected" and result.commands == []
    assert j.state.actions["andon"].status == "pending"


def test_the_host_helpers_name_non_gating_outcomes_and_overdue_timers() -> None:
    """What the host's metrics count: sfc_non_gating_outcomes and sfc_timer_lateness."""
    j = job(["A", "B"], [q("blow", "A", "L", 2), q("p", "A", "P"), n("a", "A"), n("b", "B")])
    j.start()
    assert overdue_timers(j.state, 1999, inclusive=True) == []
    assert overdue_timers(j.state, 2000, inclusive=False) == []  # an answer at 2 s wins
    assert overdue_timers(j.state, 2050, inclusive=True) == [50]
    tick = Tick(at=2050)
    assert non_gating_outcomes(j.graph, tick, j.send(tick)) == [("L", "done")]
    answer = ActionCompleted(at=2100, action_key="job-1:p", outcome="printed")
    assert non_gating_outcomes(j.graph, answer, j.send(answer)) == [("P", "printed")]
    gating = ActionFailed(at=2200, action_key="job-1:a", error="jammed")
    assert non_gating_outcomes(j.graph, gating, j.send(gating)) == []

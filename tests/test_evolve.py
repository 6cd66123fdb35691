"""evolve, rule by rule (issue #4), and the Python engine behaviours that the Python engine had and this one keeps."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from generated.command_v1_0 import CancelWork, StartWork, WorkSelector
from generated.event_v1_0 import Start
from generated.snapshot_v1_0 import Snapshot
from generated.step_result_v1_0 import Cancelled, Complete, Defer, FaultContinuation
from sfc.codec import encode
from sfc.evolution import evolve, new_state
from tests.corehelpers import (
    Job,
    divergence,
    graph_of,
    pull,
    push,
    recipe,
    starts,
    summary,
    t,
)

LINEAR = recipe(
    ["s1", "s2", "s3"],
    transitions=[t("s1", "s2"), t("s2", "s3")],
    actions=[push("a1", "s1", Parameters={"k": "v"}), push("a2", "s2", timeout=20)],
)


def two_step(**a1: object) -> dict[str, object]:
    return recipe(["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a1", "s1", **a1)])


# ---------------------------------------------------------------- 1. start


def test_start_enters_the_initial_step_and_dispatches_its_push():
    job = Job(LINEAR)
    r = job.start(at=1_000)
    assert r.disposition == "applied"
    assert isinstance(r.continuation, Defer)
    assert r.commands == [
        StartWork(
            work="push",
            action_key="job-1:a1",
            command_id="job-1:a1#1",
            type_id="t.push",
            attempt=1,
            round=1,
            deadline=1_000 + 10_000,
            parameters={"k": "v"},
            selector=None,
        )
    ]
    assert job.state.status == "running"
    assert job.state.started_at == 1_000
    assert job.state.active_steps == ["s1"]


def test_a_second_start_is_absorbed_and_changes_nothing():
    job = Job(LINEAR)
    job.start()
    before = encode(job.state)
    r = job.start(at=5)
    assert r.disposition == "absorbed"
    assert r.commands == []
    assert encode(r.state) == before


def test_a_pull_action_awaits_with_its_selector_and_the_job_id_filled_in():
    doc = recipe(
        ["s1"],
        actions=[
            pull("w", "s1", "t.qa", Selector={"Subject": "cell/{jobId}", "CorrelationId": "x"})
        ],
    )
    r = Job(doc, job_id="J7").start(at=0)
    (cmd,) = starts(r)
    assert cmd.work == "await"
    assert cmd.selector == WorkSelector(subject="cell/J7", correlation_id="x")
    assert cmd.deadline == 10_000


def test_a_step_without_actions_is_passed_through_at_once():
    doc = recipe(["idle", "s2"], transitions=[t("idle", "s2")], actions=[push("a", "s2")])
    job = Job(doc)
    r = job.start()
    assert job.state.active_steps == ["s2"]
    assert summary(r) == [("push", "job-1:a#1")]


def test_the_action_free_cascade_completes_in_one_pass():
    """Python parity: completing step_2 moves through step_3 in the same pass and completes
    (with step_2's outcome, unlike the Python engine's empty list: the next test)."""
    doc = recipe(
        ["step_init", "step_2", "step_3"],
        transitions=[t("step_init", "step_2"), t("step_2", "step_3")],
        actions=[pull("action_pull", "step_2", "com.example.pull")],
    )
    job = Job(doc)
    job.start()
    r = job.event("com.example.pull", "passed", at=5)
    assert r.continuation == Complete(outcomes=["passed"])
    assert job.state.status == "completed"


def test_a_job_ending_in_a_step_without_actions_reports_the_outcomes_that_led_there():
    """The job's outcomes are those of the last node with actions on its way to the end
    (what decided how it ended: the MES reads them), through steps without actions."""
    doc = recipe(
        ["init", "check", "passed", "archived", "rework"],
        transitions=[
            t("init", "check"),
            t("check", "rework", "nok", 0),
            t("check", "passed", "true", 1),
            t("passed", "archived"),
        ],
        actions=[push("i", "init"), push("c", "check"), push("r", "rework")],
    )
    job = Job(doc)
    job.start()
    job.respond("i", "ok")
    r = job.respond("c", "torque_ok")
    assert r.continuation == Complete(outcomes=["torque_ok"])
    assert job.state.outcomes == ["torque_ok"]
    # the other way: a last step with actions reports its own
    job = Job(doc)
    job.start()
    job.respond("i", "ok")
    job.respond("c", "nok")
    assert job.respond("r", "reworked").continuation == Complete(outcomes=["reworked"])


def test_a_convergence_into_a_step_without_actions_reports_every_sequence_outcome():
    doc = recipe(
        ["init", "a1", "b1", "end"],
        transitions=[t("init", "par"), t("par", "end")],
        actions=[push("a", "a1"), push("b", "b1")],
        branches=[divergence("par", "simultaneous", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("b", "left")
    assert job.respond("a", "right").continuation == Complete(outcomes=["right", "left"])


def test_a_job_with_no_actions_at_all_completes_with_no_outcomes():
    job = Job(recipe(["a", "b"], transitions=[t("a", "b")]))
    assert job.start().continuation == Complete(outcomes=[])


def test_a_step_without_outgoing_transition_completes_with_its_outcomes():
    job = Job(recipe(["s1"], actions=[push("a", "s1"), push("b", "s1")]))
    job.start()
    assert isinstance(job.respond("a", "ok").continuation, Defer)
    r = job.respond("b", "fine")
    assert r.continuation == Complete(outcomes=["ok", "fine"])
    assert job.state.outcomes == ["ok", "fine"]
    assert job.state.active_steps == []


# ---------------------------------------------------------------- 2. outcomes and transitions


def decision() -> dict[str, object]:
    return recipe(
        ["s1", "good", "bad", "other"],
        transitions=[
            t("s1", "bad", "nok", 1),
            t("s1", "good", "ok", 2),
            t("s1", "other", "true", 3),
        ],
        actions=[push("a", "s1"), push("g", "good"), push("b", "bad"), push("o", "other")],
    )


@pytest.mark.parametrize(
    ("outcome", "target"), [("ok", "good"), ("nok", "bad"), ("maybe", "other")]
)
def test_the_first_transition_by_priority_whose_condition_is_an_outcome_fires(outcome, target):
    job = Job(decision())
    job.start()
    job.respond("a", outcome)
    assert job.state.active_steps == [target]


def test_priority_decides_between_two_matching_conditions():
    doc = recipe(
        ["s1", "x", "y"],
        transitions=[t("s1", "x", "b", 5), t("s1", "y", "a", 2), t("s1", "x", "true", 9)],
        actions=[push("p", "s1"), push("q", "s1"), push("px", "x"), push("py", "y")],
    )
    job = Job(doc)
    job.start()
    job.respond("p", "b")
    job.respond("q", "a")
    assert job.state.active_steps == ["y"]


def test_a_step_waits_until_every_action_has_an_outcome():
    doc = recipe(
        ["s1", "s2"],
        transitions=[t("s1", "s2")],
        actions=[push("a", "s1"), pull("w", "s1"), push("z", "s2")],
    )
    job = Job(doc)
    job.start()
    job.respond("a")
    assert job.state.active_steps == ["s1"]
    job.event("t.pull")
    assert job.state.active_steps == ["s2"]


@pytest.mark.parametrize("failure", ["timeout", "error"])
def test_true_does_not_match_after_a_failure_and_the_job_faults_with_its_code(failure):
    job = Job(
        recipe(["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a", "s1", MaxAttempts=1)])
    )
    job.start()
    r = job.fail("a", "jammed") if failure == "error" else job.tick(10_000)
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == failure
    assert job.state.status == "faulted"
    assert job.state.fault is not None and "a" in job.state.fault.message


def test_a_fault_for_an_error_quotes_what_the_equipment_reported():
    """The job response's fault message is what the MES reads: it says why."""
    job = Job(recipe(["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a", "s1")]))
    job.start()
    r = job.fail("a", "torque out of range")
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.message.startswith(
        "a in step s1 ended with error (the equipment reported 'torque out of range'), and "
    )
    # a long text is cut; a failure reported without a text quotes nothing
    job = Job(recipe(["s1"], actions=[push("a", "s1")]))
    job.start()
    r = job.fail("a", "x" * 5000)
    assert isinstance(r.continuation, FaultContinuation)
    assert "x ...'), and s1 has no transition" in r.continuation.message
    assert r.continuation.message.count("x") == 296
    job = Job(recipe(["s1"], actions=[push("a", "s1")]))
    job.start()
    r = job.fail("a", "")
    assert isinstance(r.continuation, FaultContinuation)
    assert (
        r.continuation.message
        == "a in step s1 ended with error, and s1 has no transition to route it"
    )


def test_a_fault_in_a_sequence_of_a_divergence_quotes_the_report_too():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    r = job.fail("b1_push", "sensor lost")
    assert isinstance(r.continuation, FaultContinuation)
    assert "b1_push in step b1 ended with error (the equipment reported 'sensor lost')" in (
        r.continuation.message
    )


def test_a_transition_that_names_the_failure_routes_it():
    doc = recipe(
        ["s1", "recover", "s2"],
        transitions=[t("s1", "recover", "error", 0), t("s1", "s2", "true", 1), t("recover", "s2")],
        actions=[push("a", "s1"), push("fix", "recover")],
    )
    job = Job(doc)
    job.start()
    r = job.fail("a", "motor stalled")
    assert job.state.active_steps == ["recover"]
    assert "a failed: motor stalled" in job.decisions
    assert "a" not in job.state.actions  # s1 was left: its record is dropped
    assert summary(r) == [("push", "job-1:fix#2")]


def test_no_matching_transition_faults_with_no_transition():
    job = Job(recipe(["s1", "s2"], transitions=[t("s1", "s2", "ok")], actions=[push("a", "s1")]))
    job.start()
    r = job.respond("a", "nok")
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "no_transition"
    assert "nok" in r.continuation.message


def test_a_failure_in_a_step_without_transitions_faults_instead_of_completing():
    job = Job(recipe(["s1"], actions=[push("a", "s1")]))
    job.start()
    r = job.fail("a")
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "error"


# ---------------------------------------------------------------- 3. selection divergence


def selection() -> dict[str, object]:
    """The Python project's SelectionBranch, converted (default entry and unique priorities)."""
    return recipe(
        ["init", "a1", "b1", "final"],
        transitions=[
            t("init", "sel"),
            t("sel", "a1", "cond_a", 0),
            t("sel", "b1", "true", 1),
            t("sel", "final", "true", 2),
        ],
        actions=[
            push("init_push", "init"),
            push("a1_push", "a1"),
            push("b1_push", "b1"),
            pull("final_pull", "final"),
        ],
        branches=[divergence("sel", "selection", ["a1"], ["b1"])],
    )


def test_selection_takes_the_sequence_whose_transition_the_entering_step_outcomes_clear():
    """Python parity (priority path): with cond_a the sequence of a1 is taken."""
    job = Job(selection())
    job.start()
    r = job.respond("init_push", "cond_a")
    assert job.state.active_steps == ["a1"]
    assert summary(r) == [("push", "job-1:a1_push#2")]
    assert [(d.name, d.sequences) for d in job.state.divergences] == [("sel", [0])]


def test_selection_falls_back_to_the_default_sequence():
    job = Job(selection())
    job.start()
    job.respond("init_push", "whatever")
    assert job.state.active_steps == ["b1"]


def test_selection_convergence_clears_the_exits_with_the_chosen_sequence_outcomes():
    doc = recipe(
        ["init", "a1", "b1", "good", "bad"],
        transitions=[
            t("init", "sel"),
            t("sel", "a1", "go_a", 0),
            t("sel", "b1", "true", 1),
            t("sel", "good", "pass", 2),
            t("sel", "bad", "true", 3),
        ],
        actions=[
            push("i", "init"),
            push("a", "a1"),
            push("b", "b1"),
            push("g", "good"),
            push("x", "bad"),
        ],
        branches=[divergence("sel", "selection", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("i", "go_a")
    job.respond("a", "pass")
    assert job.state.active_steps == ["good"]
    assert job.state.divergences == []


# ---------------------------------------------------------------- 4. simultaneous divergence


def simultaneous() -> dict[str, object]:
    """The Python project's SimultaneousBranch: init -> par[(a1, a2), (b1)] -> final."""
    return recipe(
        ["init", "a1", "a2", "b1", "final"],
        transitions=[t("init", "par"), t("par", "final")],
        actions=[
            push("init_push", "init"),
            push("a1_push", "a1"),
            push("a2_push", "a2"),
            push("b1_push", "b1"),
            pull("final_pull", "final"),
        ],
        branches=[divergence("par", "simultaneous", ["a1", "a2"], ["b1"])],
    )


def test_simultaneous_enters_every_sequence():
    job = Job(simultaneous())
    job.start()
    r = job.respond("init_push")
    assert job.state.active_steps == ["a1", "b1"]
    assert summary(r) == [("push", "job-1:a1_push#2"), ("push", "job-1:b1_push#3")]


def test_simultaneous_advances_inside_a_sequence():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    r = job.respond("a1_push")
    assert job.state.active_steps == ["b1", "a2"]
    assert summary(r) == [("push", "job-1:a2_push#4")]


def test_the_last_step_of_a_sequence_leaves_and_waits_at_the_convergence():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    r = job.respond("b1_push")
    assert job.state.active_steps == ["a1"]
    assert r.commands == []
    assert [(d.name, d.finished) for d in job.state.divergences] == [("par", [1])]


def test_simultaneous_converges_when_every_sequence_is_done():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    job.respond("b1_push")
    job.respond("a1_push")
    r = job.respond("a2_push")
    assert job.state.active_steps == ["final"]
    assert job.state.divergences == []
    assert summary(r) == [("await", "job-1:final_pull#5")]


def test_convergence_without_an_exit_completes_the_job_with_every_sequence_outcome():
    doc = recipe(
        ["init", "a1", "b1"],
        transitions=[t("init", "par")],
        actions=[push("a", "a1"), push("b", "b1")],
        branches=[divergence("par", "simultaneous", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("b", "left")
    r = job.respond("a", "right")
    assert r.continuation == Complete(outcomes=["right", "left"])


def test_the_exits_see_the_outcomes_of_every_action_of_every_sequence():
    doc = recipe(
        ["init", "a1", "b1", "rework", "done"],
        transitions=[t("init", "par"), t("par", "rework", "nok", 0), t("par", "done", "true", 1)],
        actions=[push("a", "a1"), push("b", "b1"), push("r", "rework"), push("d", "done")],
        branches=[divergence("par", "simultaneous", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("a", "ok")
    job.respond("b", "nok")
    assert job.state.active_steps == ["rework"]


def test_a_failure_inside_a_divergence_faults_and_tears_down_the_other_sequences():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    r = job.fail("b1_push", "sensor lost")
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "error"
    assert "b1_push" in r.continuation.message
    assert summary(r) == [("cancel", "job-1:a1_push#2", "teardown")]


def test_an_exit_may_lead_into_another_divergence():
    doc = recipe(
        ["init", "a1", "b1", "c1", "d1"],
        transitions=[t("init", "p1"), t("p1", "p2")],
        actions=[push("a", "a1"), push("b", "b1"), push("c", "c1"), push("d", "d1")],
        branches=[
            divergence("p1", "simultaneous", ["a1"], ["b1"]),
            divergence("p2", "simultaneous", ["c1"], ["d1"]),
        ],
    )
    job = Job(doc)
    job.start()
    job.respond("a")
    r = job.respond("b")
    assert job.state.active_steps == ["c1", "d1"]
    assert [d.name for d in job.state.divergences] == ["p2"]
    assert summary(r) == [("push", "job-1:c#3"), ("push", "job-1:d#4")]


# ---------------------------------------------------------------- 5. loops


def loop() -> dict[str, object]:
    return recipe(
        ["work", "end"],
        transitions=[t("work", "work", "again", 0), t("work", "end", "true", 1)],
        actions=[push("w", "work"), push("e", "end")],
    )


def test_a_step_entered_again_starts_fresh_records_in_a_new_round():
    job = Job(loop())
    job.start()
    r = job.respond("w", "again", at=5)
    rec = job.rec("w")
    assert (rec.status, rec.round, rec.attempt, rec.outcome) == ("open", 2, 1, None)
    (cmd,) = starts(r)
    assert (cmd.command_id, cmd.round, cmd.deadline) == ("job-1:w#2", 2, 10_005)


def test_a_response_from_an_older_round_is_absorbed():
    job = Job(loop())
    job.start()
    job.respond("w", "again", round=1)
    r = job.respond("w", "done", round=1)
    assert r.disposition == "absorbed"
    assert job.rec("w").status == "open"
    assert job.respond("w", "done", round=2).disposition == "applied"
    assert job.state.active_steps == ["end"]


# ---------------------------------------------------------------- 6. deadlines and attempts


def test_a_tick_at_the_deadline_redispatches_with_the_same_action_key():
    job = Job(two_step())
    job.start(at=0)
    r = job.tick(10_000)
    assert r.commands == [
        CancelWork(action_key="job-1:a1", command_id="job-1:a1#1", reason="redispatch"),
        StartWork(
            work="push",
            action_key="job-1:a1",
            command_id="job-1:a1#2",
            type_id="t.push",
            attempt=2,
            round=1,
            deadline=20_000,
            parameters={},
            selector=None,
        ),
    ]


def test_a_tick_before_the_deadline_is_absorbed():
    job = Job(two_step())
    job.start(at=0)
    r = job.tick(9_999)
    assert r.disposition == "absorbed"
    assert r.commands == []


def test_attempts_run_out_at_the_snapshots_default_of_three():
    job = Job(two_step())
    job.start(at=0)
    job.tick(10_000)
    job.tick(20_000)
    r = job.tick(30_000)
    assert summary(r) == [("cancel", "job-1:a1#3", "timeout")]
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "timeout"
    assert job.rec("a1").attempt == 3


def test_the_recipes_max_attempts_wins_over_the_snapshot():
    job = Job(two_step(MaxAttempts=1), snapshot=Snapshot(max_attempts=5))
    job.start(at=0)
    r = job.tick(10_000)
    assert summary(r) == [("cancel", "job-1:a1#1", "timeout")]


def test_the_snapshot_sets_the_default_max_attempts():
    job = Job(two_step(), snapshot=Snapshot(max_attempts=1))
    job.start(at=0)
    r = job.tick(10_000)
    assert job.rec("a1").outcome == "timeout"
    assert isinstance(r.continuation, FaultContinuation)


def test_a_pull_wait_times_out_at_once():
    job = Job(
        recipe(
            ["s1", "s2", "late"],
            transitions=[t("s1", "late", "timeout", 0), t("s1", "s2", "true", 1)],
            actions=[pull("w", "s1"), push("x", "late")],
        )
    )
    job.start(at=0)
    r = job.tick(10_000)
    assert summary(r) == [("cancel", "job-1:w#1", "timeout"), ("push", "job-1:x#2")]
    assert job.state.active_steps == ["late"]


def test_an_outage_moves_every_open_deadline_before_anything_expires():
    job = Job(two_step())
    job.start(at=0)
    r = job.tick(15_000, outage_ms=60_000)
    assert r.disposition == "applied"
    assert r.commands == []
    assert job.rec("a1").deadline == 70_000
    assert job.next_deadline == 70_000


def test_an_outage_shorter_than_the_overdue_time_still_expires():
    job = Job(two_step())
    job.start(at=0)
    r = job.tick(30_000, outage_ms=5_000)
    assert summary(r) == [("cancel", "job-1:a1#1", "redispatch"), ("push", "job-1:a1#2")]


# ---------------------------------------------------------------- 7. responses and events


def test_a_response_to_an_earlier_attempt_completes_the_open_action():
    job = Job(two_step())
    job.start(at=0)
    job.tick(10_000)
    r = job.respond("a1", "ok", command_id="job-1:a1#1", at=10_500)
    assert r.disposition == "applied"
    assert r.decisions[0].decision == "a1 answered ok"
    assert job.state.status == "completed"  # s2 has no actions and no transitions


def test_a_duplicate_response_is_absorbed():
    job = Job(
        recipe(
            ["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a", "s1"), push("b", "s1")]
        )
    )
    job.start()
    job.respond("a", "ok")
    before = encode(job.state)
    r = job.respond("a", "ok")
    assert r.disposition == "absorbed"
    assert encode(r.state) == before


def test_the_action_key_stays_stable_across_redispatch():
    job = Job(two_step())
    job.start(at=0)
    keys = {c.action_key for c in job.tick(10_000).commands}
    keys |= {c.action_key for c in job.tick(20_000).commands}
    assert keys == {"job-1:a1"}


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("job-2:a1", "another job"),
        ("job-1:nope", "no action nope"),
        ("job-1:w", "waits for an event"),
    ],
)
def test_responses_that_contradict_the_chart_are_rejected(key, why):
    job = Job(recipe(["s1"], actions=[push("a1", "s1"), pull("w", "s1")]))
    job.start()
    before = encode(job.state)
    from generated.event_v1_0 import ActionCompleted

    r = job.send(ActionCompleted(at=1, action_key=key, outcome="ok"))
    assert r.disposition == "rejected"
    assert why in r.reason
    assert encode(r.state) == before


def test_a_response_with_a_foreign_command_id_is_rejected():
    job = Job(two_step())
    job.start()
    r = job.respond("a1", command_id="job-1:other#1")
    assert r.disposition == "rejected"


def test_action_failed_gives_outcome_error_with_its_text():
    job = Job(
        recipe(
            ["s1", "fix"],
            transitions=[t("s1", "fix", "error")],
            actions=[push("a", "s1"), push("f", "fix")],
        )
    )
    job.start()
    job.fail("a", "torque out of range")
    assert "a failed: torque out of range" in job.decisions


def test_an_event_completes_the_wait_whose_selector_matches_exactly():
    doc = recipe(
        ["s1", "s2"],
        transitions=[t("s1", "s2", "ok")],
        actions=[pull("w", "s1", "t.qa", Selector={"Subject": "axle/{jobId}"}), push("n", "s2")],
    )
    job = Job(doc)
    job.start()
    assert job.event("t.qa", "ok", subject="axle/job-2").disposition == "absorbed"
    assert job.event("t.qa", "ok").disposition == "absorbed"
    r = job.event("t.qa", "ok", subject="axle/job-1")
    assert r.disposition == "applied"
    assert job.state.active_steps == ["s2"]


def test_a_pull_event_of_an_unknown_type_is_absorbed():
    job = Job(recipe(["s1"], actions=[pull("w", "s1", "t.qa")]))
    job.start()
    r = job.event("t.unknown")
    assert r.disposition == "absorbed"
    assert "t.unknown" in r.reason


def test_after_the_job_ended_every_event_is_absorbed():
    job = Job(recipe(["s1"], actions=[push("a", "s1")]))
    job.start()
    job.respond("a")
    final = encode(job.state)
    for r in (job.respond("a"), job.tick(10**9), job.cancel(5), job.hold(6), job.start(7)):
        assert r.disposition == "absorbed"
        assert r.continuation == Complete(outcomes=["done"])
        assert encode(r.state) == final


# ---------------------------------------------------------------- 8. resume


def test_resume_redispatches_open_push_work_the_host_does_not_know():
    job = Job(two_step())
    job.start(at=0)
    r = job.resume(at=100, live=[])
    assert summary(r) == [("cancel", "job-1:a1#1", "redispatch"), ("push", "job-1:a1#2")]
    assert job.rec("a1").attempt == 2


def test_resume_leaves_live_work_alone():
    job = Job(two_step())
    job.start(at=0)
    r = job.resume(at=100, live=["job-1:a1#1"])
    assert r.disposition == "absorbed"
    assert r.commands == []


def test_resume_without_attempts_left_times_the_action_out():
    job = Job(two_step(MaxAttempts=1))
    job.start(at=0)
    r = job.resume(at=100, live=[])
    assert summary(r) == [("cancel", "job-1:a1#1", "timeout")]
    assert job.rec("a1").outcome == "timeout"


def test_resume_announces_a_wait_again_with_its_command_id():
    job = Job(recipe(["s1"], actions=[pull("w", "s1")]))
    job.start(at=0)
    r = job.resume(at=100, live=[])
    assert summary(r) == [("await", "job-1:w#1")]
    assert starts(r)[0].deadline == 10_000


def test_resume_redispatches_every_active_step_of_a_divergence():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    r = job.resume(at=50, live=[])
    assert [c for c in summary(r) if c[0] == "push"] == [
        ("push", "job-1:a1_push#4"),
        ("push", "job-1:b1_push#5"),
    ]


# ---------------------------------------------------------------- 9. cancel


def test_cancel_withdraws_all_open_work_and_ends_the_job():
    job = Job(simultaneous())
    job.start()
    job.respond("init_push")
    r = job.cancel(at=9, reason="operator abort")
    assert summary(r) == [
        ("cancel", "job-1:a1_push#2", "operator abort"),
        ("cancel", "job-1:b1_push#3", "operator abort"),
    ]
    assert r.continuation == Cancelled(reason="operator abort")
    assert job.state.status == "cancelled"


# ---------------------------------------------------------------- 10. hold and release


def test_while_held_nothing_fires_and_nothing_is_dispatched():
    job = Job(LINEAR)
    job.start(at=0)
    assert job.hold(at=1_000).disposition == "applied"
    r = job.respond("a1", at=2_000)
    assert r.disposition == "applied"
    assert r.commands == []
    assert job.state.active_steps == ["s1"]
    assert job.next_deadline is None
    assert job.tick(50_000).disposition == "absorbed"
    assert job.resume(at=50_000, live=[]).disposition == "absorbed"


def test_release_moves_deadlines_by_the_hold_and_reissues_open_pushes_with_their_ids():
    job = Job(recipe(["s1"], actions=[push("a", "s1"), pull("w", "s1")]))
    job.start(at=0)
    job.hold(at=1_000)
    r = job.release(at=4_000)
    assert r.commands == [
        StartWork(
            work="push",
            action_key="job-1:a",
            command_id="job-1:a#1",
            type_id="t.push",
            attempt=1,
            round=1,
            deadline=13_000,
            parameters={},
            selector=None,
        )
    ]
    assert job.rec("w").deadline == 13_000
    assert job.next_deadline == 13_000


def test_release_lets_transitions_recorded_during_the_hold_fire():
    job = Job(LINEAR)
    job.start(at=0)
    job.hold(at=1)
    job.respond("a1", at=2)
    r = job.release(at=3)
    assert job.state.active_steps == ["s2"]
    assert summary(r) == [("push", "job-1:a2#2")]


def test_a_failure_recorded_during_the_hold_is_routed_on_release():
    job = Job(two_step())
    job.start(at=0)
    job.hold(at=1)
    assert isinstance(job.fail("a1", at=2).continuation, Defer)
    r = job.release(at=3)
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "error"


def test_a_second_hold_and_a_release_when_not_held_are_absorbed():
    job = Job(two_step())
    job.start(at=0)
    assert job.release(at=1).disposition == "absorbed"
    job.hold(at=2)
    assert job.hold(at=3).disposition == "absorbed"
    assert job.state.held_at == 2


def test_cancel_ends_a_held_job():
    job = Job(two_step())
    job.start(at=0)
    job.hold(at=1)
    r = job.cancel(at=2, reason="stop")
    assert summary(r) == [("cancel", "job-1:a1#1", "stop")]
    assert job.state.status == "cancelled"


# ---------------------------------------------------------------- 11. propagation limit


def test_more_than_ten_thousand_dispatches_in_one_evaluation_fault():
    n = 10_001
    steps = ["init"] + [f"p{i}" for i in range(n)]
    doc = recipe(
        steps,
        transitions=[t("init", "par")],
        actions=[push(f"a{i}", f"p{i}") for i in range(n)],
        branches=[divergence("par", "simultaneous", *[[f"p{i}"] for i in range(n)])],
    )
    job = Job(doc)
    r = job.start(at=0)
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "propagation_limit"
    assert r.commands == []
    assert job.state.status == "faulted"


# ---------------------------------------------------------------- 12. dispositions and decisions


def test_every_result_has_a_reason_and_its_own_decisions_and_the_state_does_not_grow():
    job = Job(loop())
    job.start(at=0)
    sizes = []
    for i in range(150):
        r = job.respond("w", "again", at=i + 1)
        assert r.reason
        assert [d.at for d in r.decisions] == [i + 1] * len(r.decisions)
        assert r.decisions[-1].decision.startswith("work -> work fired on again")
        sizes.append(len(encode(job.state)))
    assert job.state.actions["w"].round == 151
    # Only the counters' digits grow: round 10 -> 151, sequence 10 -> 151.
    assert sizes[-1] - sizes[9] <= 4


# ---------------------------------------------------------------- 13. pinning


def test_a_state_pinned_to_another_recipe_is_rejected():
    g1 = graph_of(two_step())
    g2 = dataclasses.replace(g1, recipe_hash="0" * 64)
    state = new_state(g1, "job-1", "x")
    r = evolve(g2, state, None, Start(at=0))
    assert r.disposition == "rejected"
    assert r.state is state


def test_replaying_the_same_events_gives_identical_bytes():
    def run() -> bytes:
        job = Job(simultaneous())
        job.start(at=0)
        job.respond("init_push", at=1)
        job.tick(20_000)
        job.hold(at=20_500)
        job.respond("b1_push", at=21_000)
        job.release(at=22_000)
        job.respond("a1_push", at=23_000)
        return b"".join(encode(r) for r in job.results)

    assert run() == run()


def test_a_state_round_trips_through_the_wire():
    job = Job(simultaneous())
    job.start(at=0)
    job.respond("init_push", at=1)
    data = encode(job.state)
    from generated.state_v1_5 import SfcState

    assert msgspec.json.decode(data, type=SfcState) == job.state


def test_a_response_with_a_command_id_never_issued_is_rejected():
    job = Job(two_step())
    job.start()
    r = job.respond("a1", command_id="job-1:a1#150")
    assert r.disposition == "rejected"
    assert "never issued" in r.reason
    assert job.rec("a1").status == "open"


def test_a_cancel_without_a_reason_reads_plainly():
    job = Job(two_step())
    job.start()
    r = job.cancel(at=1, reason="")
    assert r.reason == "job cancelled"
    assert summary(r) == [("cancel", "job-1:a1#1", "")]

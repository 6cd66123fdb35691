"""A review of evolve against docs/recipes.md (Semantics; Time, attempts and late responses;
Hold and release; Equipment hold): edge cases that tests/test_evolve.py,
tests/test_equipment_hold.py and the properties do not pin down.

The first group are findings of that review: each failed before evolve was fixed. The
others are regression tests for corners of loops, divergences and holds that no other test
covers.
"""

from __future__ import annotations

from msgspec import UNSET

from generated.event_v1_0 import ActionCompleted
from generated.step_result_v1_0 import Complete, Defer, FaultContinuation
from sfc.codec import encode, event_decoder
from tests.corehelpers import Job, divergence, pull, push, recipe, summary, t

# ============================================================== findings (fixed in evolve)


def test_after_a_failure_only_a_transition_that_names_the_failure_matches():
    """docs/recipes.md "Semantics", Failures: "true does not match when an action failed; only a
    transition that names timeout or error does. If nothing matches, the continuation is
    Fault." (issue #4 rule 2 says the same; _select's own docstring: "only a transition that
    names the failure routes it, so a recipe never silently goes on".)

    Step s1 runs a (answers ok) and b (fails). The transition on `ok` has the best priority,
    but it does not name a failure, so it must not match; the `error` route must fire.
    """
    doc = recipe(
        ["s1", "next", "recover", "other"],
        transitions=[
            t("s1", "next", "ok", 0),
            t("s1", "recover", "error", 1),
            t("s1", "other", "true", 2),
        ],
        actions=[
            push("a", "s1"),
            push("b", "s1"),
            push("n", "next"),
            push("r", "recover"),
            push("o", "other"),
        ],
    )
    job = Job(doc)
    job.start()
    job.respond("a", "ok")
    r = job.fail("b", "jammed")
    assert job.state.active_steps == ["recover"]
    assert summary(r) == [("push", "job-1:r#3")]


def test_an_outage_tick_while_held_without_hold_commands_is_absorbed():
    """docs/recipes.md "Hold and release": "Deadlines do not expire during a hold. NextDeadline is
    empty, so the host has no due-index entry for the job, and a tick or a resume is
    absorbed." docs/recipes.md "Equipment hold" narrows it only for hold commands: "a tick while held expires
    only those. An outage moves hold deadlines in both cases." Here no hold command is open,
    so nothing can move or expire and the tick must be absorbed with the state unchanged.
    """
    job = Job(recipe(["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a", "s1")]))
    job.start(at=0)
    job.hold(at=1_000)
    before = encode(job.state)
    r = job.tick(at=2_000, outage_ms=5_000)
    assert r.disposition == "absorbed", r.reason
    assert r.commands == []
    assert encode(job.state) == before


def test_a_response_that_names_no_outcome_has_the_outcome_done():
    """docs/recipes.md "Semantics": "the outcome names are declared on the factory,
    and done is the default" (sfc/graph.py DEFAULT_OUTCOME: "The outcome of a push response
    that names none"); docs/recipes.md "State": "replaying the same events on the same state gives
    byte-identical results". ActionCompleted types `outcome` as `str | UnsetType`; unset
    encodes as an absent field, which decodes as "done". The in-memory event and its wire
    form must evolve the job the same way.
    """
    doc = recipe(["s1", "s2"], transitions=[t("s1", "s2", "done")], actions=[push("a", "s1")])
    event = ActionCompleted(at=1, action_key="job-1:a", outcome=UNSET)
    via_wire = event_decoder.decode(encode(event))
    assert via_wire.outcome == "done"

    wired = Job(doc)
    wired.start()
    expected = wired.send(via_wire)
    assert expected.continuation == Complete(outcomes=["done"])  # s2 has no actions: s1's

    direct = Job(doc)
    direct.start()
    r = direct.send(event)
    assert r.decisions[0].decision == "a answered done"
    assert encode(r) == encode(expected)


def _hash_job() -> Job:
    hold = {"TypeId": "t.hold", "TimeoutSeconds": 10}
    restart = {"TypeId": "t.restart", "TimeoutSeconds": 10}
    doc = recipe(
        ["s1", "s2"],
        transitions=[t("s1", "s2")],
        actions=[push("a", "s1", Hold=hold, Restart=restart), push("b", "s2")],
    )
    job = Job(doc, job_id="order#7")
    assert summary(job.start(at=0)) == [("push", "order#7:a#1")]
    return job


def test_a_job_id_with_a_hash_still_accepts_answers_that_carry_their_command_id():
    """docs/recipes.md "Time, attempts and late responses": "A response from an earlier attempt completes the action while it is
    open"; State: "Command ids are {actionKey}#{sequence}". Nothing restricts the job id
    (schemas/state_v1_3.json: jobId is any string), and the action key is {jobId}:{action}.
    An answer that names the command id the core issued (order#7:a#1) must be matched.
    """
    job = _hash_job()
    r = job.respond("a", "done", command_id="order#7:a#1", at=1_000)
    assert r.disposition == "applied", r.reason
    assert job.state.active_steps == ["s2"]


def test_a_job_id_with_a_hash_still_matches_the_answer_held_to_its_hold_command():
    """docs/recipes.md "Equipment hold": "The equipment answers held: The attempt ends: its command is
    withdrawn (CancelWork reason held) ... On resume the restart command is sent." and
    "Responses are matched by the command id they answer (the causation id)".
    """
    job = _hash_job()
    assert summary(job.hold(at=1_000)) == [("hold", "order#7:a#2:hold")]
    r = job.respond("a", "held", command_id="order#7:a#2:hold", at=2_000)
    assert r.disposition == "applied", r.reason
    assert summary(r) == [("cancel", "order#7:a#1", "held")]
    assert summary(job.release(at=3_000)) == [("restart", "order#7:a#3")]


# ============================================================== regression tests (evolve is right)


def selection_loop() -> dict[str, object]:
    """s0 -> sel; sel takes a1 on `first`, else b1; exits: rework on `bad`, else done;
    rework -> s0, so the divergence is entered a second time."""
    return recipe(
        ["s0", "a1", "b1", "rework", "done"],
        transitions=[
            t("s0", "sel"),
            t("sel", "a1", "first", 0),
            t("sel", "b1", "true", 1),
            t("sel", "rework", "bad", 2),
            t("sel", "done", "true", 3),
            t("rework", "s0"),
        ],
        actions=[
            push("i", "s0"),
            push("pa", "a1"),
            push("pb", "b1"),
            push("rw", "rework"),
            push("d", "done"),
        ],
        branches=[divergence("sel", "selection", ["a1"], ["b1"])],
    )


def test_a_selection_divergence_entered_again_ignores_the_stale_records_of_the_sequence_not_taken():
    """docs/recipes.md "Semantics": "A step that is entered again starts with fresh action records";
    issue #4 rule 3: "When the chosen sequence ends, the exits are cleared with that
    sequence's outcomes." In the second pass the sequence of b1 is chosen; pa still holds
    `bad` from the first pass, which must not send the job to rework again.
    """
    job = Job(selection_loop())
    job.start()
    job.respond("i", "first")
    job.respond("pa", "bad")
    assert job.state.active_steps == ["rework"]
    job.respond("rw")
    job.respond("i", "second", round=2)
    assert job.state.active_steps == ["b1"]
    assert [(d.name, d.sequences, d.finished) for d in job.state.divergences] == [("sel", [1], [])]
    assert "pa" not in job.state.actions  # the earlier pass's record was dropped on leaving

    r = job.respond("pb", "ok")
    assert job.state.active_steps == ["done"]
    assert summary(r) == [("push", "job-1:d#6")]
    assert job.state.divergences == []
    # a late answer to the first pass's sequence is absorbed, not recorded
    assert job.respond("pa", "ok", round=1).disposition == "absorbed"


def test_a_selection_divergence_whose_exit_leads_back_into_itself_selects_on_its_own_outcomes():
    """Issue #4 rule 4: "An exit may lead into another divergence"; here the exit leads back
    into the same selection divergence, whose selection transitions then see the outcomes of
    the sequence that just ended (the node that led into it)."""
    doc = recipe(
        ["s0", "a1", "b1", "end"],
        transitions=[
            t("s0", "sel"),
            t("sel", "a1", "go_a", 0),
            t("sel", "b1", "true", 1),
            t("sel", "sel", "go_a", 2),
            t("sel", "end", "true", 3),
        ],
        actions=[push("i", "s0"), push("pa", "a1"), push("pb", "b1"), push("e", "end")],
        branches=[divergence("sel", "selection", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("i", "x")
    assert job.state.active_steps == ["b1"]
    r = job.respond("pb", "go_a")  # exit sel -> sel on go_a; selection takes a1 on go_a
    assert job.state.active_steps == ["a1"]
    assert summary(r) == [("push", "job-1:pa#3")]
    assert [(d.sequences, d.finished) for d in job.state.divergences] == [([0], [])]
    job.respond("pa", "fine")
    assert job.state.active_steps == ["end"]


def test_a_simultaneous_divergence_whose_exit_leads_back_into_itself_starts_afresh():
    """docs/recipes.md "Semantics": "The transition into the divergence activates the first step of
    every sequence" and "A step that is entered again starts with fresh action records". The
    second pass converges on its own outcomes, not on `again` from the first pass."""
    doc = recipe(
        ["s0", "a1", "a2", "b1", "end"],
        transitions=[t("s0", "par"), t("par", "par", "again", 0), t("par", "end", "true", 1)],
        actions=[
            push("i", "s0"),
            push("x1", "a1"),
            push("x2", "a2"),
            push("y", "b1"),
            push("e", "end"),
        ],
        branches=[divergence("par", "simultaneous", ["a1", "a2"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("i")
    job.respond("y", "again")
    job.respond("x1")
    r = job.respond("x2")
    assert summary(r) == [("push", "job-1:x1#5"), ("push", "job-1:y#6")]
    assert job.state.active_steps == ["a1", "b1"]
    assert [(d.sequences, d.finished) for d in job.state.divergences] == [([0, 1], [])]
    assert (job.rec("x1").round, job.rec("y").round) == (2, 2)
    assert "x2" not in job.state.actions  # a2 not entered yet in this pass
    assert job.state.rounds == {"x2": 1}  # on the cycle through par (s0 is not): count kept

    job.respond("y", "done", round=2)
    job.respond("x1", round=2)
    r = job.respond("x2", round=2)
    assert summary(r) == [("push", "job-1:e#8")]
    assert job.state.active_steps == ["end"]


def test_an_event_for_a_wait_whose_step_is_not_active_yet_is_dropped():
    """docs/recipes.md "Selectors": "An event that arrives before the wait exists is dropped, and the
    action ends with timeout if nothing else arrives." issue #4 rule 7: "Without a match the
    event is absorbed, not rejected." The early event must not complete the later wait."""
    doc = recipe(
        ["s1", "s2"],
        transitions=[t("s1", "s2")],
        actions=[push("a", "s1"), pull("w", "s2", "t.qa")],
    )
    job = Job(doc)
    job.start(at=0)
    r = job.event("t.qa", "ok", at=1)
    assert r.disposition == "absorbed"
    job.respond("a", at=2)
    assert job.rec("w").status == "open"
    r = job.tick(at=10_002)
    assert job.rec("w").outcome == "timeout"
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "timeout"


def test_an_event_during_a_hold_for_a_wait_begun_before_it_is_recorded_and_routed_on_release():
    """docs/recipes.md "Hold and release": "A response to a command that is out, or an event for a
    wait that began before the hold, is recorded on its action." and "On release ... Then
    the transitions that became possible fire." Also: the wait's deadline does not expire
    during the hold."""
    doc = recipe(
        ["s1", "s2"],
        transitions=[t("s1", "s2", "ok")],
        actions=[pull("w", "s1", "t.qa"), push("n", "s2")],
    )
    job = Job(doc)
    job.start(at=0)
    job.hold(at=1_000)
    assert job.tick(at=20_000).disposition == "absorbed"  # past the wait's 10 s deadline
    r = job.event("t.qa", "ok", at=21_000)
    assert r.disposition == "applied"
    assert r.commands == []
    assert job.rec("w").outcome == "ok"
    assert job.state.active_steps == ["s1"]
    r = job.release(at=22_000)
    assert summary(r) == [("push", "job-1:n#2")]
    assert job.state.active_steps == ["s2"]


def test_resume_in_a_divergence_with_a_finished_sequence_reissues_only_the_open_work():
    """docs/recipes.md "Time, attempts and late responses": "SfcResume re-emits open work that SfcSnapshot.LiveWork does not
    contain. A re-dispatch uses up an attempt." A sequence waiting at the convergence has no
    open work; its done action must not be sent again."""
    doc = recipe(
        ["s0", "a1", "a2", "b1", "end"],
        transitions=[t("s0", "par"), t("par", "end")],
        actions=[push("x1", "a1"), push("x2", "a2"), push("y", "b1"), pull("e", "end")],
        branches=[divergence("par", "simultaneous", ["a1", "a2"], ["b1"])],
    )
    job = Job(doc)
    job.start(at=0)
    job.respond("y", at=1)  # sequence 2 waits at the convergence
    job.respond("x1", at=2)  # sequence 1 moved to a2
    assert job.state.active_steps == ["a2"]
    r = job.resume(at=3, live=[])
    assert summary(r) == [("cancel", "job-1:x2#3", "redispatch"), ("push", "job-1:x2#4")]
    assert job.rec("y").status == "done"
    r = job.respond("x2", at=4)
    assert summary(r) == [("await", "job-1:e#5")]


def test_a_selection_divergence_without_exit_completes_with_the_chosen_sequence_outcomes():
    """docs/recipes.md "Semantics": "No exit transition completes the job"; issue #4 rule 1: "`complete`
    carries the outcomes of the last step" (for a divergence: of its chosen sequence)."""
    doc = recipe(
        ["s0", "a1", "b1"],
        transitions=[t("s0", "sel"), t("sel", "a1", "x", 0), t("sel", "b1", "true", 1)],
        actions=[push("i", "s0"), push("pa", "a1"), push("pb", "b1")],
        branches=[divergence("sel", "selection", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("i", "x")
    r = job.respond("pa", "fine")
    assert r.continuation == Complete(outcomes=["fine"])
    assert job.state.active_steps == []
    assert job.state.divergences == []


def test_a_failure_in_a_selection_sequence_faults():
    """docs/recipes.md "Semantics": "A failed action inside a divergence is a fault (a sequence has no
    transitions to route it)" - for a selection divergence too, even when its exits name
    the failure (the exits are cleared only at the convergence)."""
    doc = recipe(
        ["s0", "a1", "b1", "fix"],
        transitions=[
            t("s0", "sel"),
            t("sel", "a1", "x", 0),
            t("sel", "b1", "true", 1),
            t("sel", "fix", "error", 2),
        ],
        actions=[push("i", "s0"), push("pa", "a1"), push("pb", "b1"), push("f", "fix")],
        branches=[divergence("sel", "selection", ["a1"], ["b1"])],
    )
    job = Job(doc)
    job.start()
    job.respond("i", "x")
    r = job.fail("pa", "jammed")
    assert isinstance(r.continuation, FaultContinuation)
    assert r.continuation.code == "error"
    assert "pa" in r.continuation.message
    assert job.state.status == "faulted"


def test_a_hold_1_ms_before_the_deadline_leaves_1_ms_of_the_attempt_after_the_release():
    """docs/recipes.md "Hold and release": "On release, every open deadline moves by the length of the
    hold (as with an outage), so the hold costs no attempt. Every open push attempt is issued
    again with its command id and attempt number." A hold that lands 1 ms before the deadline
    leaves 1 ms of the attempt after the release."""
    job = Job(recipe(["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a", "s1")]))
    job.start(at=0)
    job.hold(at=9_999)
    r = job.release(at=15_000)
    assert summary(r) == [("push", "job-1:a#1")]
    assert job.next_deadline == 15_001
    assert job.tick(at=15_000).disposition == "absorbed"
    r = job.tick(at=15_001)
    assert summary(r) == [("cancel", "job-1:a#1", "redispatch"), ("push", "job-1:a#2")]
    assert isinstance(r.continuation, Defer)


def test_a_failure_routed_into_a_selection_divergence_is_handled_there():
    """The transition that names the failure has routed it: the selection divergence then
    takes a sequence by its own transitions, the default included (a recipe that routes
    `error` to a recovery divergence must not fault there)."""
    doc = recipe(
        ["s1", "wipe", "purge", "done"],
        transitions=[
            t("s1", "recovery", "error", 0),
            t("s1", "done", "true", 1),
            t("recovery", "purge", "error", 0),
            t("recovery", "wipe", "true", 1),
            t("recovery", "done", "true", 2),
        ],
        actions=[push("a", "s1"), push("w", "wipe"), push("p", "purge"), push("d", "done")],
        branches=[divergence("recovery", "selection", ["wipe"], ["purge"])],
    )
    job = Job(doc)
    job.start()
    r = job.fail("a", "nozzle clogged")
    assert job.state.status == "running"
    assert job.state.active_steps == ["purge"]
    assert summary(r) == [("push", "job-1:p#2")]

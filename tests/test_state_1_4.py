"""State 1.4: a durable state whose size does not grow as the job runs, and what follows.

- records only while they can matter, a round counter for actions on a cycle;
- answers to dropped records and to earlier rounds, with or without `round`;
- bounded texts (outcome 256, error 4096, cancel reason 1024 characters);
- `endedAt`; decisions in the step result instead of a log in the state.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from generated.event_v1_0 import ActionCompleted, EventReceived
from generated.step_result_v1_0 import Complete
from sfc.codec import encode
from sfc.evolution import ERROR_LIMIT, OUTCOME_LIMIT, REASON_LIMIT
from tests.corehelpers import Job, divergence, graph_of, pull, push, recipe, t


def loop() -> dict[str, object]:
    return recipe(
        ["work", "end"],
        transitions=[t("work", "work", "again", 0), t("work", "end", "true", 1)],
        actions=[push("w", "work"), push("e", "end")],
    )


def linear(n: int) -> dict[str, object]:
    steps = [f"s{i}" for i in range(n)]
    return recipe(
        steps,
        transitions=[t(a, b) for a, b in pairwise(steps)],
        actions=[push(f"a{i}", s) for i, s in enumerate(steps)],
    )


# ------------------------------------------------------------------ which records stay


def test_a_step_that_is_left_drops_its_records() -> None:
    job = Job(linear(3))
    job.start(at=0)
    job.respond("a0", at=1)
    assert list(job.state.actions) == ["a1"]
    assert job.state.rounds == {}  # nothing here is on a cycle


def test_a_linear_chart_keeps_one_record_however_far_it_ran() -> None:
    job = Job(linear(300))
    job.start(at=0)
    sizes = []
    for i in range(299):
        job.respond(f"a{i}", at=i + 1)
        sizes.append(len(encode(job.state)))
        assert len(job.state.actions) == 1
    # Only the digits of names and counters grow (a9 -> a298, #10 -> #299).
    assert sizes[-1] - sizes[8] <= 12


def test_an_action_on_a_cycle_keeps_its_round_once_its_step_is_left() -> None:
    g = graph_of(loop())
    assert g.cyclic == frozenset({"w"})
    job = Job(loop())
    job.start(at=0)
    job.respond("w", "again", at=1)
    job.respond("w", "again", at=2)
    assert job.rec("w").round == 3
    job.respond("w", "done", at=3)
    assert list(job.state.actions) == ["e"]
    assert job.state.rounds == {"w": 3}


def test_a_divergence_on_a_cycle_makes_its_sequences_cyclic() -> None:
    doc = recipe(
        ["s0", "a1", "b1", "end"],
        transitions=[t("s0", "par"), t("par", "s0", "again", 0), t("par", "end", "true", 1)],
        actions=[push("i", "s0"), push("x", "a1"), push("y", "b1"), push("e", "end")],
        branches=[divergence("par", "simultaneous", ["a1"], ["b1"])],
    )
    assert graph_of(doc).cyclic == frozenset({"i", "x", "y"})


def test_records_of_a_sequence_stay_until_the_divergence_converges() -> None:
    doc = recipe(
        ["s0", "a1", "a2", "b1", "end"],
        transitions=[t("s0", "par"), t("par", "end")],
        actions=[push("i", "s0"), push("x1", "a1"), push("x2", "a2"), push("y", "b1")],
        branches=[divergence("par", "simultaneous", ["a1", "a2"], ["b1"])],
    )
    job = Job(doc)
    job.start(at=0)
    job.respond("i", at=1)
    job.respond("x1", "ok", at=2)
    assert job.state.active_steps == ["b1", "a2"]
    assert job.state.actions["x1"].outcome == "ok"  # a1 was left, its outcome still counts
    job.respond("x2", "fine", at=3)
    r = job.respond("y", "ok", at=4)
    assert isinstance(r.continuation, Complete)
    # end has no actions: the convergence's outcomes, of every sequence, led there
    assert r.continuation.outcomes == ["ok", "fine"]
    assert job.state.actions == {}


# ------------------------------------------------------------------ answers


def test_an_answer_for_a_step_already_left_is_absorbed_naming_the_action_and_step() -> None:
    job = Job(linear(3))
    job.start(at=0)
    job.respond("a0", at=1)
    r = job.respond("a0", "ok", at=2, command_id="job-1:a0#1")
    assert r.disposition == "absorbed"
    assert "a0" in r.reason and "step s0 is not active" in r.reason


def test_a_late_answer_of_an_earlier_round_without_round_is_absorbed() -> None:
    """1.3 let a round-1 answer carrying only its command id complete round 2."""
    job = Job(loop())
    job.start(at=0)  # w#1
    job.respond("w", "again", at=1, command_id="job-1:w#1", round=1)  # w#2, round 2
    assert job.rec("w").round == 2 and job.rec("w").first_command == 2
    r = job.respond("w", "done", at=2, command_id="job-1:w#1")
    assert r.disposition == "absorbed"
    assert "earlier round" in r.reason
    assert job.rec("w").status == "open"


def test_an_answer_to_a_command_id_of_another_action_is_not_taken() -> None:
    """1.3 accepted `J:b#1` when #1 had been issued for `a`."""
    job = Job(linear(3))
    job.start(at=0)  # a0#1
    job.respond("a0", at=1)  # a1#2
    r = job.respond("a1", "ok", at=2, command_id="job-1:a1#1")
    assert r.disposition == "absorbed"
    assert job.rec("a1").status == "open"


def test_an_answer_to_any_attempt_of_the_open_round_completes_it() -> None:
    job = Job(linear(2))
    job.start(at=0)
    job.tick(10_000)  # a0#2, attempt 2
    assert job.rec("a0").first_command == 1
    r = job.respond("a0", "ok", at=10_001, command_id="job-1:a0#1")
    assert r.disposition == "applied"


def test_a_command_id_above_the_counter_is_rejected() -> None:
    job = Job(linear(2))
    job.start(at=0)
    r = job.respond("a0", "ok", at=1, command_id="job-1:a0#9")
    assert r.disposition == "rejected" and "never issued" in r.reason
    r = job.respond("a0", "ok", at=1, command_id="job-1:a0#" + "9" * 30)
    assert r.disposition == "rejected"


def test_a_command_id_whose_number_is_not_ascii_digits_is_rejected_not_raised() -> None:
    """`"²".isdigit()` is true and `int("²")` raises; other Unicode digits parse as numbers
    the host never wrote. Each is an id in another form."""
    job = Job(linear(2))
    job.start(at=0)
    for number in ("²", "١", "1²", "٣"):
        r = job.respond("a0", "ok", at=1, command_id=f"job-1:a0#{number}")
        assert r.disposition == "rejected", (number, r.reason)
    assert job.rec("a0").status == "open"


@settings(max_examples=300, deadline=None)
@given(
    number=st.text(max_size=25)
    | st.text(st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=25)
    | st.from_regex(r"[0-9]{1,30}", fullmatch=True),
    action=st.sampled_from(["a0", "a1", "a0:x", ""]),
    hold=st.booleans(),
)
def test_any_command_id_text_is_taken_or_refused_and_never_raises(
    number: str, action: str, hold: bool
) -> None:
    job = Job(linear(2))
    job.start(at=0)
    command_id = f"job-1:{action}#{number}" + (":hold" if hold else "")
    r = job.respond("a0", "ok", at=1, command_id=command_id)
    assert r.disposition in ("applied", "absorbed", "rejected") and r.reason


def test_an_answer_before_the_start_is_rejected() -> None:
    job = Job(linear(2))
    r = job.respond("a0", "ok", at=1)
    assert r.disposition == "rejected"


# ------------------------------------------------------------------ bounded texts


def test_an_outcome_over_256_characters_is_rejected() -> None:
    job = Job(linear(2))
    job.start(at=0)
    r = job.send(ActionCompleted(at=1, action_key="job-1:a0", outcome="x" * (OUTCOME_LIMIT + 1)))
    assert r.disposition == "rejected" and "257 characters" in r.reason
    r = job.send(ActionCompleted(at=1, action_key="job-1:a0", outcome="x" * OUTCOME_LIMIT))
    assert r.disposition == "applied"


def test_an_event_outcome_over_256_characters_is_rejected() -> None:
    doc = recipe(["s1"], actions=[pull("q", "s1", type_id="t.qa")])
    job = Job(doc)
    job.start(at=0)
    r = job.send(EventReceived(at=1, type_id="t.qa", outcome="y" * 300))
    assert r.disposition == "rejected"
    assert job.rec("q").status == "open"


def test_a_long_error_is_cut_with_a_mark() -> None:
    doc = recipe(
        ["s1", "fix"],
        transitions=[t("s1", "fix", "error")],
        actions=[push("a", "s1"), push("f", "fix")],
    )
    job = Job(doc)
    job.start(at=0)
    r = job.fail("a", "E" * 10_000, at=1)
    decided = r.decisions[0].decision
    assert decided.startswith("a failed: EEE") and "[cut: 10000 characters in all]" in decided
    assert len(decided) == len("a failed: ") + ERROR_LIMIT


def test_a_long_cancel_reason_is_cut_everywhere_it_goes() -> None:
    job = Job(linear(2))
    job.start(at=0)
    r = job.cancel(at=5, reason="R" * 5_000)
    assert job.state.cancel_reason is not None
    assert len(job.state.cancel_reason) == REASON_LIMIT
    assert job.state.cancel_reason.endswith("[cut: 5000 characters in all]")
    assert [c.reason for c in r.commands] == [job.state.cancel_reason]  # type: ignore[union-attr]


# ------------------------------------------------------------------ endedAt, decisions


def test_ended_at_is_when_the_job_completed_faulted_or_was_cancelled() -> None:
    job = Job(linear(2))
    job.start(at=0)
    assert job.state.ended_at is None
    job.respond("a0", at=3)
    job.respond("a1", at=7)
    assert (job.state.status, job.state.ended_at) == ("completed", 7)

    job = Job(linear(2))
    job.start(at=0)
    job.cancel(at=9)
    assert job.state.ended_at == 9

    job = Job(recipe(["s1", "s2"], transitions=[t("s1", "s2")], actions=[push("a", "s1")]))
    job.start(at=0)
    job.fail("a", at=4)
    assert (job.state.status, job.state.ended_at) == ("faulted", 4)


def test_an_absorbed_event_decides_nothing() -> None:
    job = Job(linear(2))
    job.start(at=0)
    r = job.tick(1)
    assert r.disposition == "absorbed" and r.decisions == []

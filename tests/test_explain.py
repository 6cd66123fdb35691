"""The explainer: recipes and job states in plain words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from sfc.builder import build
from sfc.evolution import new_state
from sfc.explain import duration, explain, explain_recipe, explain_state, when
from sfc.graph import Graph
from sfc.simulation import Simulation, load_script
from tests.corehelpers import graph_of, push, recipe, t

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = sorted(p.parent.name for p in EXAMPLES.glob("*/recipe.json"))


class TextSnapshot(SingleFileSnapshotExtension):
    file_extension = "txt"


def example(name: str) -> Graph:
    built = build((EXAMPLES / name / "recipe.json").read_bytes())
    assert built.graph is not None
    return built.graph


def mid_run(name: str, script: str, until_ms: int) -> tuple[Graph, Simulation]:
    graph = example(name)
    data = (EXAMPLES / name / f"{script}.script.json").read_bytes()
    sim = Simulation(graph, load_script(data, graph), time_limit_ms=until_ms)
    sim.run()
    return graph, sim


# --------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("name", NAMES)
def test_recipe_explanation(name: str, snapshot: SnapshotAssertion) -> None:
    assert explain(example(name)).encode() == snapshot(extension_class=TextSnapshot)


def test_a_simultaneous_divergence_is_explained_with_its_sequences_and_exits() -> None:
    text = explain_recipe(example("rear-axle-fitting"))
    assert "FitAndQa: simultaneous divergence, all 2 sequences run together" in text
    assert "    sequence 1: Positioning -> TightenBolts\n    sequence 2: QaCheck\n" in text
    assert "when every sequence is done, cleared with the outcomes of every sequence:" in text
    assert "priority 0: -> step RejectAxle on outcome qa_nok" in text
    assert "priority 1: -> step VerifyTorque on true (the default)" in text
    assert "Positioning, step 1 of 2 in sequence 1 of divergence FitAndQa" in text


def test_pull_actions_are_explained_with_their_selector() -> None:
    text = explain_recipe(example("rear-axle-fitting"))
    assert (
        "camera_qa: waits for event com.example.station.qa_result.v1 with subject "
        "line1/axle/{jobId}/qa, for 45 s; no event in time gives outcome timeout"
    ) in text
    assert (
        "verify: waits for event com.example.station.torque_result.v1 with correlationId {jobId}"
        in text
    )


def test_push_actions_are_explained_with_type_timeout_attempts_and_parameters() -> None:
    text = explain_recipe(example("rear-axle-fitting"))
    assert (
        "tighten: push command com.example.station.tighten.v1, 1 min per attempt, "
        "up to 3 attempts (the host default)"
    ) in text
    assert 'parameters {"torque_spec": "85Nm", "bolts": 6}' in text
    assert (
        "rework_task: push command com.example.station.worker_task.v1, 15 min, 1 attempt only; "
        "no answer in time gives outcome timeout" in text
    )


def test_the_host_default_of_attempts_can_be_given() -> None:
    text = explain_recipe(example("greetings-demo"), max_attempts_default=5)
    assert "up to 5 attempts (the host default)" in text


def test_hold_logic_is_explained() -> None:
    text = explain_recipe(example("tightening-hold"))
    assert (
        "hold logic: on a pause the equipment is told to hold the work "
        "(com.example.tightening.hold.v1, answer held within 10 s); on resume it is restarted "
        "(com.example.tightening.restart.v1, 2 min)"
    ) in text


def test_a_selection_divergence_is_explained_with_its_selection_transitions() -> None:
    text = explain_recipe(example("bottling-line"))
    assert "QualityGate: selection divergence, one of 2 sequences runs" in text
    assert "priority 0: sequence 1 (TopUp) on outcome fill_low" in text
    assert "priority 1: sequence 2 (Label) on true (the default)" in text
    assert "when the sequence taken is done, cleared with its outcomes:" in text
    assert "priority 2: -> step Inspect on outcome reworked" in text


def test_transitions_are_listed_with_condition_and_priority() -> None:
    text = explain_recipe(example("recovery-routing"))
    assert "  Dispense -> PurgeNozzle  condition error, priority 0\n" in text
    assert "  Dispense -> CallOperator  condition timeout, priority 1\n" in text
    assert "  Dispense -> Cure  condition true, priority 2\n" in text


def test_what_ends_the_job_names_the_final_steps() -> None:
    text = explain_recipe(example("recovery-routing"))
    assert (
        "completed: when step Cure or step Scrap is reached and all its action blocks succeed"
        in text
    )
    assert "    then: the job completes (no outgoing transition)" in text


def test_a_recipe_that_always_leads_on_never_completes_by_itself() -> None:
    graph = graph_of(
        recipe(
            ["s1", "s2"],
            actions=[push("a", "s1"), push("b", "s2")],
            transitions=[t("s1", "s2"), t("s2", "s1")],
        )
    )
    assert "completed: never by itself" in explain_recipe(graph)


def test_a_step_without_actions_is_passed_through() -> None:
    text = explain_recipe(example("rear-axle-fitting"))
    assert "  Init (initial step)\n    no action blocks: passed through at once\n" in text


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (30_000, "30 s"),
        (60_000, "1 min"),
        (90_000, "1 min 30 s"),
        (7_200_000, "2 h"),
        (1500, "1.5 s"),
        (0, "0 s"),
    ],
)
def test_durations(ms: int, text: str) -> None:
    assert duration(ms) == text


def test_times_on_the_virtual_clock_read_as_seconds_and_real_ones_as_utc() -> None:
    assert when(45_000) == "45.000s"
    assert when(1_764_680_000_123) == "2025-12-02T12:53:20.123+00:00"


# --------------------------------------------------------------------------- job states


def test_a_state_taken_mid_run_names_the_open_commands_and_the_next_deadline() -> None:
    graph, sim = mid_run("rear-axle-fitting", "retry", 30_000)
    text = explain_state(graph, sim.state)
    assert "The job is running, started at 0.000s." in text
    assert "  step TightenBolts, step 2 of 2 in sequence 1 of divergence FitAndQa\n" in text
    assert (
        "simultaneous divergence FitAndQa: sequences 1 and 2 taken; sequence 2 has reached "
        "the convergence, 1 is still running"
    ) in text
    assert (
        "tighten (step TightenBolts): push command tighten#3 (com.example.station.tighten.v1) "
        "is out, attempt 1 of 3, deadline 64.000s; if no answer by then, attempt 2 is sent"
    ) in text
    assert "Next deadline: 64.000s: tighten is sent again (attempt 2 of 3)" in text


def test_a_state_after_a_retry_shows_the_new_attempt() -> None:
    graph, sim = mid_run("rear-axle-fitting", "retry", 70_000)
    text = explain_state(graph, sim.state)
    assert (
        "push command tighten#4 (com.example.station.tighten.v1) is out, attempt 2 of 3, deadline 124.000s"
        in text
    )
    assert "tighten re-dispatched" not in text  # explain has no log: the history keeps it


def test_an_open_wait_is_named_with_its_selector_and_deadline() -> None:
    graph, sim = mid_run("rear-axle-fitting", "selectors", 5_000)
    text = explain_state(graph, sim.state)
    assert (
        "camera_qa (step QaCheck): waits for event com.example.station.qa_result.v1 with subject "
        "line1/axle/job-1/qa as camera_qa#2, deadline 45.000s; no event by then gives outcome timeout"
    ) in text
    assert "Next deadline: 45.000s: camera_qa ends with outcome timeout" in text


def test_the_last_attempt_says_what_its_expiry_does() -> None:
    graph, sim = mid_run("recovery-routing", "operator-absent", 60_000)
    text = explain_state(graph, sim.state)
    assert "attempt 2 of 2, deadline 90.000s; if no answer by then, the outcome is timeout" in text
    assert "Next deadline: 90.000s: dispense_bead ends with outcome timeout" in text


def test_a_held_job_with_held_equipment() -> None:
    graph, sim = mid_run("tightening-hold", "pause-resume", 100_000)
    text = explain_state(graph, sim.state)
    assert "The job is HELD since 10.000s (operator pause), started at 0.000s" in text
    assert "is running" not in text
    assert "the equipment held the work; the release sends the restart command" in text
    assert "Next deadline: none while the job is held (no hold command is open)" in text


def scripted(name: str, doc: dict[str, Any], until_ms: int) -> tuple[Graph, Simulation]:
    graph = example(name)
    sim = Simulation(graph, load_script(msgspec.json.encode(doc), graph), time_limit_ms=until_ms)
    sim.run()
    return graph, sim


def test_work_held_by_the_equipment_is_withdrawn_and_restarted_on_release() -> None:
    graph, sim = mid_run("tightening-hold", "pause-resume", 200_000)
    text = explain_state(graph, sim.state)
    assert (
        "tighten (step Tighten): push command tighten#2 (com.example.tightening.run.v1), "
        "attempt 1 of 2, was withdrawn: the equipment held the work; the release sends the "
        "restart command (com.example.tightening.restart.v1, 2 min to answer)\n"
    ) in text
    assert "is out" not in text
    assert "attempt 2 is sent" not in text


def test_an_open_hold_command_says_what_each_answer_does() -> None:
    graph, sim = mid_run("tightening-hold", "pause-resume", 10_100)
    text = explain_state(graph, sim.state)
    assert (
        "push command tighten#2 (com.example.tightening.run.v1) is out, attempt 1 of 2, deadline "
        "120.500s (moved by the length of the hold on release; 1 min 50.5 s was left when it "
        "began); it does not run until the hold is answered\n"
        "    hold command tighten#3:hold is out, deadline 20.000s: if the equipment answers held, "
        "the work is withdrawn and the release sends the restart command; any other answer, or "
        "none by then, and the work runs on to its deadline\n"
    ) in text
    assert "Next deadline: 20.000s: the hold of tighten counts as not held" in text


def test_a_hold_still_open_after_the_release_restarts_at_once_when_answered_held() -> None:
    doc = {
        "default": "ok@500",
        "replies": {"tighten": ["silent"], "tighten:hold": ["held@5000"]},
        "controls": [{"atMs": 10_000, "kind": "hold"}, {"atMs": 12_000, "kind": "release"}],
    }
    graph, sim = scripted("tightening-hold", doc, 13_000)
    text = explain_state(graph, sim.state)
    assert "HELD" not in text
    assert "the work is withdrawn and the restart command is sent at once" in text


def test_work_the_equipment_could_not_hold_runs_on() -> None:
    graph, sim = mid_run("tightening-hold", "hold-refused", 10_400)
    text = explain_state(graph, sim.state)
    assert (
        "push command tighten#2 (com.example.tightening.run.v1) is out, attempt 1 of 2, deadline "
        "120.500s (moved by the length of the hold on release; 1 min 50.5 s was left when it "
        "began); if no answer by then, attempt 2 is sent\n    the work was not held (the "
        "equipment answered the hold notHeld, or not in time); it runs on to its end\n"
    ) in text


@pytest.mark.parametrize("script", ["pause-resume", "hold-refused", "abort-while-held"])
def test_no_state_of_a_hold_promises_an_expiry_without_a_deadline(script: str) -> None:
    graph, sim = mid_run("tightening-hold", script, 0)
    sim = Simulation(graph, sim.script)
    while sim.step() is not None:  # every state the job passes through
        text = explain_state(graph, sim.state)
        assert "no deadline" not in text, sim.now


def test_an_open_restart_is_named() -> None:
    graph, sim = mid_run("tightening-hold", "pause-resume", 310_000)
    text = explain_state(graph, sim.state)
    assert "HELD" not in text
    assert (
        "tighten (step Tighten): restart command tighten#4 (com.example.tightening.restart.v1) is out, deadline 420.000s"
        in text
    )
    assert "Next deadline: 420.000s: tighten ends with outcome timeout" in text


def test_an_answer_recorded_during_a_hold_is_shown() -> None:
    graph, sim = mid_run("bottling-line", "pause-resume", 60_000)
    text = explain_state(graph, sim.state)
    assert "Already done in the active steps and open divergences\n  cap: outcome ok\n" in text
    assert "What it waits for\n  nothing is open\n" in text


def test_a_faulted_job_says_why() -> None:
    graph, sim = mid_run("bottling-line", "vision-timeout", 600_000)
    text = explain_state(graph, sim.state)
    assert text.splitlines()[1] == (
        "The job FAULTED, started at 0.000s, ended at 23.000s (timeout): vision in step Inspect ended with "
        "timeout, and no transition of Inspect names timeout (to QualityGate on true); "
        'the default "true" does not match after a failure.'
    )
    assert "Next deadline" not in text


def test_a_completed_job_names_its_outcomes() -> None:
    graph, sim = mid_run("greetings-demo", "happy", 600_000)
    text = explain_state(graph, sim.state)
    assert "The job completed, started at 0.000s, ended at 0.120s; its outcomes: ok." in text


def test_a_cancelled_job_names_the_reason() -> None:
    graph, sim = mid_run("greetings-demo", "cancel", 600_000)
    assert (
        "The job was cancelled, started at 0.000s, ended at 45.000s: operator stopped the demo."
        in explain_state(graph, sim.state)
    )


def test_work_open_when_the_job_was_cancelled_was_withdrawn() -> None:
    graph, sim = mid_run("tightening-hold", "abort-while-held", 20_000)
    text = explain_state(graph, sim.state)
    assert "Where the job stopped\n  step Tighten\n" in text
    assert "Where the job is" not in text
    assert (
        "Work that was open when the job ended\n"
        "  tighten (step Tighten): push command tighten#2 (com.example.tightening.run.v1), "
        "attempt 1 of 2, was withdrawn when the job was cancelled (order aborted by the MES)\n"
        "    and with it hold command tighten#3:hold\n"
    ) in text
    assert "is out" not in text


def test_work_open_when_the_job_faulted_was_withdrawn_by_the_teardown() -> None:
    doc = {"replies": {"camera_qa": ["silent"], "tighten": ["silent"]}}
    graph, sim = scripted("rear-axle-fitting", doc, 600_000)
    text = explain_state(graph, sim.state)
    assert sim.state.status == "faulted"
    assert (
        "  tighten (step TightenBolts): push command tighten#3 (com.example.station.tighten.v1), "
        "attempt 1 of 3, was withdrawn when the job faulted (teardown)\n"
    ) in text


def test_held_work_of_a_cancelled_job_gets_no_restart() -> None:
    doc = {
        "default": "ok@500",
        "replies": {"tighten": ["silent"]},
        "controls": [{"atMs": 10_000, "kind": "hold"}, {"atMs": 12_000, "kind": "cancel"}],
    }
    graph, sim = scripted("tightening-hold", doc, 600_000)
    text = explain_state(graph, sim.state)
    assert (
        "was withdrawn when the equipment held the work; no restart command was sent, as the "
        "job ended"
    ) in text


def test_a_job_that_has_not_started() -> None:
    graph = example("greetings-demo")
    text = explain_state(graph, new_state(graph, "job-9", "plant"))
    assert text.splitlines()[:2] == [
        f"Job job-9 (scope plant), recipe {graph.recipe_hash[:12]}",
        "The job has not started; a start enters step send_greeting.",
    ]


def test_a_state_has_no_log_and_explain_shows_none() -> None:
    """State 1.4 keeps no decision log (the step results carry the decisions)."""
    graph, sim = mid_run("bottling-line", "qa-loop", 600_000)
    text = explain_state(graph, sim.state)
    assert "Recent decisions" not in text
    last = sim.transcript[-1].decisions
    assert last and all(d.decision not in text for d in last if "->" in d.decision)


def test_a_state_of_another_recipe_is_explained_with_a_warning() -> None:
    _, sim = mid_run("rear-axle-fitting", "retry", 30_000)
    text = explain_state(example("greetings-demo"), sim.state)
    assert "WARNING: the state is pinned to recipe" in text

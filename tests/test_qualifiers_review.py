"""An independent review of the IEC 61131-3 qualifiers against QUALIFIERS.md and issue 34.

Each test drives one rule through the simulation (what `sfc dryrun` runs), evolve or build,
as a plant engineer would meet it. A rule the implementation breaks is marked xfail(strict)
with what is wrong, so that its fix turns the test green.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from generated.capabilities_v1_1 import Capabilities
from generated.command_v1_0 import StartWork
from generated.dryrun_result_v1_2 import DryRunResult
from generated.event_v1_0 import Tick
from sfc import RECIPE_V1_0_0, RECIPE_V1_1_0, RECIPE_V1_2_0, BuildResult, build
from sfc.codec import encode
from sfc.evolution import evolve, next_deadline
from sfc.explain import explain_state
from sfc.graph import Graph
from sfc.migrate import migrate
from sfc.simulation import Simulation, load_script
from sfc.transcript import to_json, to_text
from tests.corehelpers import Job

# ------------------------------------------------------------------ recipes and runs


def q(
    name: str, step: str, qualifier: str = "N", t: float | None = None, **kw: Any
) -> dict[str, Any]:
    """A push action block; `t` is its DurationSeconds."""
    block: dict[str, Any] = {
        "Name": name,
        "Step": step,
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": f"com.example.{name}.v1",
        "TimeoutSeconds": 60,
        **kw,
    }
    if t is not None:
        block["DurationSeconds"] = t
    return block


def r(name: str, step: str) -> dict[str, Any]:
    return {"Name": name, "Step": step, "Qualifier": "R"}


def tr(source: str, target: str, condition: str = "true", priority: int = 0) -> dict[str, Any]:
    return {"Source": source, "Target": target, "Condition": condition, "Priority": priority}


def chart(
    steps: list[str],
    actions: list[dict[str, Any]],
    transitions: list[dict[str, Any]] | None = None,
    min_seconds: dict[str, float] | None = None,
    branches: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Steps in a line (or `transitions`), the first initial."""
    doc: dict[str, Any] = {
        "Steps": [{"Name": s, "Initial": i == 0} for i, s in enumerate(steps)],
        "Transitions": [tr(a, b) for a, b in pairwise(steps)]
        if transitions is None
        else transitions,
        "Actions": actions,
    }
    for s in doc["Steps"]:
        if min_seconds and s["Name"] in min_seconds:
            s["MinSeconds"] = min_seconds[s["Name"]]
    if branches:
        doc["Branches"] = branches
    return doc


def built(doc: dict[str, Any], dataschema: str = RECIPE_V1_2_0, **kw: Any) -> BuildResult:
    return build(json.dumps(doc).encode(), dataschema=dataschema, **kw)


def graph(doc: dict[str, Any]) -> Graph:
    result = built(doc)
    assert result.graph is not None, result.errors
    return result.graph


def codes(doc: dict[str, Any], dataschema: str = RECIPE_V1_2_0, **kw: Any) -> list[tuple[str, str]]:
    return [(e.code, e.path) for e in built(doc, dataschema, **kw).errors]


class Run:
    """One dry run: the result, its text (with decisions) and every command, in order."""

    def __init__(self, doc: dict[str, Any], script: dict[str, Any] | None = None) -> None:
        self.graph = graph(doc)
        loaded = load_script(json.dumps(script or {}).encode(), self.graph)
        self.sim = Simulation(self.graph, loaded)
        self.result: DryRunResult = self.sim.run()
        self.text = to_text(self.result, decisions=True)
        self.plain = to_text(self.result)

    @property
    def commands(self) -> list[tuple[int, str, str, str]]:
        """(at, push|withdraw, action#n, qualifier or reason)."""
        out = []
        for e in self.result.transcript:
            for c in e.commands:
                short = c.command_id.removeprefix("job-1:")
                if isinstance(c, StartWork):
                    qual = "N" if c.qualifier is UNSET else str(c.qualifier)
                    out.append((e.at_ms, "push", short, qual))
                else:
                    out.append((e.at_ms, "withdraw", short, c.reason))
        return out

    def starts_of(self, action: str) -> list[int]:
        return [
            at
            for at, kind, cid, _ in self.commands
            if kind == "push" and cid.startswith(f"{action}#")
        ]

    def withdraws_of(self, action: str) -> list[tuple[int, str]]:
        return [
            (at, why)
            for at, kind, cid, why in self.commands
            if kind == "withdraw" and cid.startswith(f"{action}#")
        ]

    @property
    def decisions(self) -> list[str]:
        return [d.decision for e in self.result.transcript for d in (e.decisions or [])]


def replies(**by_action: list[str]) -> dict[str, Any]:
    return {"replies": by_action}


SILENT = ["silent"]

# ------------------------------------------------------------------ N and gating


def test_only_n_is_gating_a_step_of_non_gating_actions_passes_after_starting_them() -> None:
    run = Run(
        chart(["A", "B"], [q("lbl", "A", "P1"), q("conv", "A", "S"), q("b", "B")]),
        replies(lbl=SILENT, conv=SILENT, b=["ok@1000"]),
    )
    assert run.commands[:3] == [
        (0, "push", "lbl#1", "P1"),
        (0, "push", "conv#2", "S"),
        (0, "push", "b#3", "N"),
    ]
    assert run.result.end == "completed"


# ------------------------------------------------------------------ P, P1, P0


def test_p_and_p1_are_the_same_one_pulse_at_entry() -> None:
    for qual in ("P", "P1"):
        run = Run(
            chart(["A", "B"], [q("lbl", "A", qual), q("a", "A"), q("b", "B")]),
            replies(lbl=["ok@9000"], a=["ok@1000"], b=["ok@20000"]),
        )
        assert run.starts_of("lbl") == [0] and run.withdraws_of("lbl") == []
        assert f"lbl answered ok ({qual}: recorded, not waited for)" in run.plain


def test_p0_fires_at_exit_before_the_next_steps_entries() -> None:
    run = Run(
        chart(["A", "B"], [q("a", "A"), q("bye", "A", "P0"), q("b", "B")]), replies(a=["ok@2000"])
    )
    assert [c for c in run.commands if c[0] == 2000][:2] == [
        (2000, "push", "bye#2", "P0"),
        (2000, "push", "b#3", "N"),
    ]


def test_p0_fires_when_a_step_in_a_sequence_is_done_and_when_the_final_step_completes() -> None:
    doc = chart(
        ["I", "X1", "X2", "Y", "E"],
        [
            q("i", "I"),
            q("x1", "X1"),
            q("bye1", "X1", "P0"),
            q("x2", "X2"),
            q("bye2", "X2", "P0"),
            q("y", "Y"),
            q("e", "E"),
            q("end", "E", "P0"),
        ],
        transitions=[tr("I", "Par"), tr("Par", "E")],
        branches=[{"Name": "Par", "Type": "simultaneous", "Branches": [["X1", "X2"], ["Y"]]}],
    )
    run = Run(doc, replies(x1=["ok@1000"], x2=["ok@1000"], y=["ok@5000"], e=["ok@1000"]))
    assert run.starts_of("bye1") == [1000]  # inside the sequence, before X2
    assert run.commands.index((1000, "push", "bye1#4", "P0")) < run.commands.index(
        (1000, "push", "x2#5", "N")
    )
    assert run.starts_of("bye2") == [2000]  # last step of its sequence, before the convergence
    assert run.starts_of("end") == [6000]  # the final step, when the job completes
    assert run.result.end == "completed" and run.withdraws_of("end") == []


def test_p0_fires_on_a_transition_that_routes_a_failure() -> None:
    doc = chart(
        ["A", "B"],
        [q("a", "A", MaxAttempts=1, TimeoutSeconds=5), q("bye", "A", "P0"), q("b", "B")],
        transitions=[tr("A", "B", "timeout")],
    )
    run = Run(doc, replies(a=SILENT))
    assert run.starts_of("bye") == [5000]


@pytest.mark.parametrize("how", ["cancel", "fault"])
def test_p0_does_not_fire_on_cancel_or_fault_and_pulses_are_not_withdrawn(how: str) -> None:
    doc = chart(
        ["A", "B"],
        [q("a", "A"), q("lbl", "A", "P1"), q("bye", "A", "P0"), q("b", "B")],
        transitions=[tr("A", "B", "ok")],
    )
    script: dict[str, Any] = replies(
        a=["ok@9000"] if how == "cancel" else ["error:jam@2000"], lbl=SILENT
    )
    if how == "cancel":
        script["controls"] = [{"kind": "cancel", "atMs": 3000, "reason": "operator stop"}]
    run = Run(doc, script)
    assert run.result.end == ("cancelled" if how == "cancel" else "faulted")
    assert run.starts_of("bye") == []
    assert run.withdraws_of("lbl") == []


def test_pulses_are_never_withdrawn_not_even_at_the_job_end() -> None:
    run = Run(
        chart(["A"], [q("lbl", "A", "P"), q("bye", "A", "P0"), q("a", "A")]),
        replies(lbl=SILENT, bye=SILENT, a=["ok@1000"]),
    )
    assert run.result.end == "completed"
    assert run.withdraws_of("lbl") == [] and run.withdraws_of("bye") == []
    assert run.sim.state.actions == {}  # the state forgets them


# ------------------------------------------------------------------ L and SL


def test_l_is_withdrawn_at_entry_plus_t_limit_and_carries_stop_at() -> None:
    run = Run(
        chart(["A", "B"], [q("blow", "A", "L", 2), q("a", "A"), q("b", "B")]),
        replies(blow=SILENT, a=["ok@5000"]),
    )
    start = run.result.transcript[0].commands[0]
    assert isinstance(start, StartWork) and (start.qualifier, start.stop_at) == ("L", 2000)
    assert run.withdraws_of("blow") == [(2000, "limit")]
    assert "time passed: blow (L 2 s) withdrawn at its limit" in run.plain


def test_l_is_withdrawn_deactivated_when_its_step_is_left_first() -> None:
    run = Run(
        chart(["A", "B"], [q("blow", "A", "L", 10), q("a", "A"), q("b", "B")]),
        replies(blow=SILENT, a=["ok@3000"]),
    )
    assert run.withdraws_of("blow") == [(3000, "deactivated")]


def test_sl_limit_first_then_reset_does_nothing() -> None:
    doc = chart(
        ["A", "B", "C"],
        [q("vac", "A", "SL", 4), q("a", "A"), q("b", "B"), r("vac", "C"), q("c", "C")],
    )
    run = Run(doc, replies(vac=SILENT, a=["ok@1000"], b=["ok@9000"]))
    assert run.withdraws_of("vac") == [(4000, "limit")]
    assert any("R vac: vac (SL 4 s) is not running; nothing to reset" in d for d in run.decisions)


def test_sl_reset_first_then_its_limit_does_nothing() -> None:
    doc = chart(
        ["A", "B", "C"],
        [q("vac", "A", "SL", 40), q("a", "A"), q("b", "B"), r("vac", "C"), q("c", "C")],
    )
    run = Run(doc, replies(vac=SILENT, a=["ok@1000"], b=["ok@1000"], c=["ok@60000"]))
    assert run.withdraws_of("vac") == [(2000, "reset")]
    assert 40_000 not in [e.at_ms for e in run.result.transcript]  # no tick for a dropped limit


def test_startwork_carries_stop_at_only_for_l_and_sl() -> None:
    doc = chart(
        ["A", "B"],
        [
            q(x, "A", x, 5 if x in ("L", "SL", "D", "SD", "DS") else None)
            for x in ("P", "P1", "S", "L", "SL", "D", "SD", "DS")
        ]
        + [q("a", "A"), q("b", "B")],
    )
    run = Run(doc, {"default": "silent", "replies": {"a": ["ok@9000"]}})
    for e in run.result.transcript:
        for c in e.commands:
            if isinstance(c, StartWork):
                name = c.command_id.removeprefix("job-1:").partition("#")[0]
                assert (c.stop_at is not UNSET) == (name in ("L", "SL")), name


# ------------------------------------------------------------------ D, SD, DS


@pytest.mark.parametrize("qual", ["D", "DS"])
def test_a_step_left_at_exactly_entry_plus_t_does_not_start_its_d_or_ds(qual: str) -> None:
    run = Run(
        chart(["A", "B"], [q("late", "A", qual, 10), q("a", "A"), q("b", "B")]),
        replies(a=["ok@10000"], b=["ok@5000"]),
    )
    assert run.starts_of("late") == []
    assert any(
        f"late ({qual} 10 s) not started: A was left before its time" in d for d in run.decisions
    )


@pytest.mark.parametrize("qual", ["D", "DS"])
def test_d_and_ds_start_at_entry_plus_t_if_the_step_is_still_active(qual: str) -> None:
    run = Run(
        chart(["A", "B", "C"], [q("late", "A", qual, 10), q("a", "A"), q("b", "B"), q("c", "C")]),
        replies(late=SILENT, a=["ok@10001"], b=["ok@1000"], c=["ok@1000"]),
    )
    assert run.starts_of("late") == [10_000]
    withdrawn = run.withdraws_of("late")
    # D is withdrawn when A is left; DS is stored and runs on to the job's end.
    assert withdrawn == ([(10_001, "deactivated")] if qual == "D" else [(12_001, "ended")])


def test_sd_starts_at_entry_plus_t_even_if_its_step_was_left() -> None:
    run = Run(
        chart(["A", "B"], [q("heat", "A", "SD", 10), q("a", "A"), q("b", "B")]),
        replies(heat=SILENT, a=["ok@1000"], b=["ok@30000"]),
    )
    assert run.starts_of("heat") == [10_000]
    assert "time passed: heat (SD 10 s) started" in run.plain
    assert run.withdraws_of("heat") == [(31_000, "ended")]


def test_r_drops_a_pending_sd_timer_and_next_deadline_forgets_it() -> None:
    doc = chart(
        ["A", "B", "C"],
        [q("heat", "A", "SD", 10), q("a", "A"), r("heat", "B"), q("b", "B"), q("c", "C")],
    )
    j = Job(graph(doc))
    j.start()
    assert j.next_deadline == 10_000  # the SD timer: earlier than a's 60 s deadline
    j.respond("a", at=1000)
    assert "heat" not in j.state.actions and j.next_deadline == 61_000
    assert any("the timer of heat (SD 10 s) dropped; it never starts" in d for d in j.decisions)


def test_an_sd_pending_when_its_step_is_entered_again_keeps_its_first_timer() -> None:
    doc = chart(
        ["A", "B", "Z"],
        [q("heat", "A", "SD", 10), q("a", "A"), q("b", "B"), q("z", "Z")],
        transitions=[tr("A", "B"), tr("B", "A", "again"), tr("B", "Z", "true", 1)],
    )
    run = Run(doc, replies(heat=SILENT, b=["again@1000", "ok@20000"]))
    assert run.starts_of("heat") == [10_000]  # from the first entry; not restarted at 2 s
    assert any(
        "heat (SD 10 s) not started again: its timer runs since round 1" in d for d in run.decisions
    )


# ------------------------------------------------------------------ S and R


def test_s_survives_its_step_and_is_withdrawn_ended_at_completion() -> None:
    run = Run(
        chart(["A", "B", "C"], [q("conv", "A", "S"), q("b", "B"), q("c", "C")]),
        replies(conv=SILENT),
    )
    assert run.starts_of("conv") == [0]
    assert run.withdraws_of("conv") == [(0, "ended")]
    assert run.result.end == "completed" and run.sim.state.actions == {}


def test_r_of_an_action_that_never_ran_is_harmless() -> None:
    # conv is set only on the path through B; the job goes through C, whose R finds nothing.
    doc = chart(
        ["A", "B", "C", "D"],
        [q("a", "A"), q("conv", "B", "S"), q("b", "B"), r("conv", "C"), q("c", "C"), q("d", "D")],
        transitions=[tr("A", "B", "left"), tr("A", "C", "true", 1), tr("B", "D"), tr("C", "D")],
    )
    run = Run(doc)
    assert run.result.end == "completed"
    assert run.starts_of("conv") == [] and run.withdraws_of("conv") == []
    assert any("R conv: conv (S) is not running; nothing to reset" in d for d in run.decisions)


def test_a_stored_action_entered_again_while_open_is_not_started_again_and_the_transcript_says_why() -> (
    None
):
    doc = chart(
        ["A", "B", "Z"],
        [q("conv", "A", "S"), q("a", "A"), q("b", "B"), q("z", "Z")],
        transitions=[tr("A", "B"), tr("B", "A", "again"), tr("B", "Z", "true", 1)],
    )
    run = Run(doc, replies(conv=SILENT, b=["again@1000", "ok@1000"]))
    assert run.starts_of("conv") == [0]
    said = "conv (S) not started again: its work is open since round 1"
    assert said in run.text
    assert said.encode() in to_json(run.result)  # the JSON transcript says it too


def test_a_stored_action_that_ended_starts_again_with_the_next_round() -> None:
    doc = chart(
        ["A", "B", "Z"],
        [q("conv", "A", "S"), q("a", "A"), q("b", "B"), q("z", "Z")],
        transitions=[tr("A", "B"), tr("B", "A", "again"), tr("B", "Z", "true", 1)],
    )
    run = Run(doc, replies(conv=["ok@500", "silent"], b=["again@1000", "ok@1000"]))
    rounds = [
        c.round
        for e in run.result.transcript
        for c in e.commands
        if isinstance(c, StartWork) and c.action_key.endswith(":conv")
    ]
    assert rounds == [1, 2]


def test_r_withdraws_open_stored_work_before_its_step_starts_its_own() -> None:
    doc = chart(["A", "B"], [q("conv", "A", "S"), q("a", "A"), r("conv", "B"), q("b", "B")])
    run = Run(doc, replies(conv=SILENT, a=["ok@1000"]))
    at_1s = [c for c in run.commands if c[0] == 1000]
    assert at_1s[:2] == [(1000, "withdraw", "conv#1", "reset"), (1000, "push", "b#3", "N")]


# ------------------------------------------------------------------ non-gating outcomes


@pytest.mark.parametrize("reply", ["error:nozzle blocked@500", "nok@500", "silent"])
def test_a_non_gating_outcome_never_routes_and_never_faults(reply: str) -> None:
    # With a gating action, `error` would fault (no transition names it) and `nok` would
    # route to Reject. The L's outcome does neither.
    doc = chart(
        ["A", "B", "Reject"],
        [
            q("blow", "A", "L", 30, TimeoutSeconds=1, MaxAttempts=1),
            q("a", "A"),
            q("b", "B"),
            q("rej", "Reject"),
        ],
        transitions=[tr("A", "Reject", "nok"), tr("A", "B", "true", 1)],
    )
    run = Run(doc, replies(blow=[reply], a=["ok@5000"]))
    assert run.result.end == "completed"
    assert run.starts_of("b") == [5000] and run.starts_of("rej") == []


def test_a_non_gating_failure_inside_a_sequence_does_not_fault() -> None:
    doc = chart(
        ["I", "X", "Y", "E"],
        [q("i", "I"), q("x", "X"), q("conv", "X", "S"), q("y", "Y"), q("e", "E")],
        transitions=[tr("I", "Par"), tr("Par", "E")],
        branches=[{"Name": "Par", "Type": "simultaneous", "Branches": [["X"], ["Y"]]}],
    )
    run = Run(doc, replies(conv=["error:motor@100"], x=["ok@1000"], y=["ok@2000"]))
    assert run.result.end == "completed"
    assert "conv failed: motor (S: recorded, not waited for)" in run.plain


# ------------------------------------------------------------------ MinSeconds


def test_min_seconds_is_a_dwell_and_a_step_without_actions_is_a_timer_step() -> None:
    doc = chart(
        ["Press", "Cure", "Next"],
        [q("press", "Press"), q("next", "Next")],
        min_seconds={"Press": 3, "Cure": 4},
    )
    run = Run(doc, replies(press=["ok@1000"], next=["ok@1000"]))
    assert run.starts_of("next") == [7000]
    assert "the dwell of Press passed" in run.plain and "the dwell of Cure passed" in run.plain


def test_min_seconds_on_a_step_inside_a_sequence_holds_the_sequence() -> None:
    doc = chart(
        ["I", "X1", "X2", "Y", "E"],
        [q("i", "I"), q("x1", "X1"), q("x2", "X2"), q("y", "Y"), q("e", "E")],
        transitions=[tr("I", "Par"), tr("Par", "E")],
        min_seconds={"X1": 5},
        branches=[{"Name": "Par", "Type": "simultaneous", "Branches": [["X1", "X2"], ["Y"]]}],
    )
    run = Run(doc, replies(x1=["ok@1000"], y=["ok@1000"]))
    assert run.starts_of("x2") == [5000]


# ------------------------------------------------------------------ time: outage and hold


def test_an_outage_moves_only_attempt_deadlines() -> None:
    doc = chart(
        ["A", "B"],
        [
            q("blow", "A", "L", 2),
            q("andon", "A", "D", 3),
            q("a", "A", TimeoutSeconds=10),
            q("b", "B"),
        ],
        min_seconds={"A": 4},
    )
    run = Run(
        doc,
        {
            **replies(blow=SILENT, andon=SILENT, a=["ok@12000"]),
            "controls": [{"kind": "outage", "atMs": 1000, "ms": 7000}],
        },
    )
    # L's limit (2 s), D's time (3 s) and the dwell (4 s) passed during the outage: at once.
    assert run.withdraws_of("blow") == [(8000, "limit")]
    assert run.starts_of("andon") == [8000]
    assert "the dwell of A passed" in run.result.transcript[1].reason
    # a's attempt deadline moved from 10 s to 17 s: the answer at 12 s still counts.
    assert run.starts_of("a") == [0] and run.starts_of("b") == [12_000]


def test_a_hold_moves_process_timers_and_attempt_deadlines_by_its_length() -> None:
    doc = chart(
        ["A", "B"],
        [
            q("blow", "A", "L", 10),
            q("andon", "A", "D", 10),
            q("a", "A", TimeoutSeconds=30),
            q("b", "B"),
        ],
        min_seconds={"A": 12},
    )
    run = Run(
        doc,
        {
            **replies(blow=SILENT, andon=SILENT, a=["ok@1000"]),
            "controls": [{"kind": "hold", "atMs": 2000}, {"kind": "release", "atMs": 7000}],
        },
    )
    assert run.withdraws_of("blow") == [(15_000, "limit")]
    assert run.starts_of("andon") == [15_000]
    assert run.starts_of("b") == [17_000]  # the dwell moved from 12 s to 17 s
    reissued = [
        c
        for e in run.result.transcript
        if e.at_ms == 7000
        for c in e.commands
        if isinstance(c, StartWork)
    ]
    assert {
        c.command_id.removeprefix("job-1:"): c.stop_at for c in reissued if c.stop_at is not UNSET
    } == {"blow#1": 15_000}


def test_an_outage_while_held_moves_no_timer() -> None:
    doc = chart(
        ["A", "B"], [q("andon", "A", "D", 10), q("a", "A", TimeoutSeconds=600), q("b", "B")]
    )
    run = Run(
        doc,
        {
            **replies(andon=SILENT, a=["ok@40000"]),
            "controls": [
                {"kind": "hold", "atMs": 1000},
                {"kind": "outage", "atMs": 2000, "ms": 3000},
                {"kind": "release", "atMs": 6000},
            ],
        },
    )
    assert run.starts_of("andon") == [15_000]  # moved by the hold (5 s), not by the outage too


# ------------------------------------------------------------------ ticks and deadlines


def test_ties_in_one_tick_fire_in_the_recipe_order_of_action_blocks() -> None:
    doc = chart(
        ["A", "B"],
        [
            q("c", "A", "D", 5),
            q("blow", "A", "L", 5),
            q("a", "A", TimeoutSeconds=600),
            q("b", "B"),
            q("x", "A", "DS", 5),
        ],
    )
    j = Job(graph(doc))
    j.start()
    result = j.send(Tick(at=5000))
    order = [(type(c).__name__, c.command_id.removeprefix("job-1:")) for c in result.commands]
    assert order == [("StartWork", "c#3"), ("CancelWork", "blow#1"), ("StartWork", "x#4")]


def test_next_deadline_includes_every_process_timer() -> None:
    doc = chart(
        ["A", "B"],
        [
            q("a", "A", TimeoutSeconds=600),
            q("blow", "A", "L", 7),
            q("andon", "A", "D", 5),
            q("heat", "A", "SD", 300),
            q("b", "B", TimeoutSeconds=600),
        ],
        min_seconds={"A": 9, "B": 200},
    )
    j = Job(graph(doc))
    j.start()
    seen = []
    for _ in range(8):
        due = j.next_deadline
        if due is None:
            break
        seen.append(due)
        j.tick(due)
        if "a" in j.state.actions and j.state.actions["a"].status == "open" and due >= 9000:
            j.respond("a", at=due)
    # andon starts (5 s), blow's limit (7 s), A's dwell (9 s, a answers), B's dwell, heat's SD
    assert seen[:5] == [5000, 7000, 9000, 209_000, 300_000]


def test_at_most_one_record_per_action_block_over_many_loops() -> None:
    every = [
        q("s", "A", "S"),
        q("p", "A", "P"),
        q("p0", "A", "P0"),
        q("l", "A", "L", 1),
        q("d", "A", "D", 1),
        q("sd", "A", "SD", 3),
        q("ds", "A", "DS", 1),
        q("sl", "A", "SL", 2),
        q("a", "A"),
        q("b", "B"),
    ]
    doc = chart(["A", "B"], every, transitions=[tr("A", "B"), tr("B", "A")], min_seconds={"B": 1})
    j = Job(graph(doc))
    j.start()
    sizes = []
    at = 0
    for i in range(40):
        at += 1500
        j.tick(at)
        j.respond("a", at=at)
        if i % 3 == 0:  # some non-gating work answers, the rest stays silent
            for name in ("s", "p", "sl", "sd"):
                j.respond(name, at=at)
        at += 1500
        j.tick(at)
        assert len(j.state.actions) <= len(every)
        sizes.append(len(encode(j.state)))
    assert max(sizes[10:]) - min(sizes[10:]) < 200


def test_replays_are_byte_identical() -> None:
    doc = chart(
        ["A", "B", "C"],
        [
            q("s", "A", "S"),
            q("lbl", "A", "P1"),
            q("bye", "A", "P0"),
            q("l", "A", "L", 2),
            q("d", "A", "D", 3),
            q("sd", "A", "SD", 4),
            q("a", "A"),
            r("s", "C"),
            q("b", "B"),
            q("c", "C"),
        ],
        min_seconds={"B": 6},
    )
    script = {
        **replies(a=["ok@5000"], s=SILENT, l=SILENT, d=SILENT, sd=SILENT),
        "controls": [
            {"kind": "hold", "atMs": 1000},
            {"kind": "release", "atMs": 1500},
            {"kind": "outage", "atMs": 7000, "ms": 2000},
        ],
    }
    first, second = Run(doc, script), Run(doc, script)
    assert to_json(first.result) == to_json(second.result)
    # Evolve on the recorded events gives the same bytes again.
    g = first.graph
    from sfc.evolution import new_state

    state = new_state(g, "job-1", "sim")
    for entry in first.result.transcript:
        result = evolve(g, state, None, entry.event)
        assert result.commands == entry.commands
        state = result.state
    assert encode(state) == encode(first.sim.state)


# ------------------------------------------------------------------ build


def station(types: list[str], **features: bool) -> Capabilities:
    wire = {
        "types": [{"typeId": t, "kind": "push", "outcomes": ["ok", "nok"]} for t in types],
        "features": features,
    }
    return msgspec.json.decode(json.dumps(wire), type=Capabilities)


def test_sfc016_looks_only_at_gating_actions() -> None:
    doc = chart(
        ["A", "B", "C"],
        [q("a", "A"), q("blow", "A", "L", 1), q("b", "B"), q("c", "C")],
        transitions=[tr("A", "B", "blown"), tr("A", "C", "true", 1)],
    )
    wire = {
        "types": [
            {"typeId": "com.example.a.v1", "kind": "push", "outcomes": ["ok"]},
            {"typeId": "com.example.blow.v1", "kind": "push", "outcomes": ["blown"]},
            {"typeId": "com.example.b.v1", "kind": "push", "outcomes": ["ok"]},
            {"typeId": "com.example.c.v1", "kind": "push", "outcomes": ["ok"]},
        ]
    }
    caps = msgspec.json.decode(json.dumps(wire), type=Capabilities)
    assert codes(doc, capabilities=caps) == [("SFC016", "$.Transitions[0].Condition")]


def test_sfc013_counts_min_seconds_as_a_wait() -> None:
    loop = [tr("A", "B"), tr("B", "A")]
    only_pulses = chart(["A", "B"], [q("lbl", "A", "P1"), q("conv", "B", "S")], transitions=loop)
    assert [c for c, _ in codes(only_pulses)] == ["SFC013"]
    assert (
        codes(
            chart(
                ["A", "B"],
                [q("lbl", "A", "P1"), q("conv", "B", "S")],
                transitions=loop,
                min_seconds={"B": 1},
            )
        )
        == []
    )


@pytest.mark.parametrize(
    ("feature", "qualifier"),
    [
        ("pulseActions", "P"),
        ("pulseActions", "P1"),
        ("pulseActions", "P0"),
        ("timedActions", "L"),
        ("timedActions", "D"),
        ("storedActions", "S"),
        ("storedActions", "SD"),
        ("storedActions", "DS"),
        ("storedActions", "SL"),
    ],
)
def test_sfc015_each_qualifier_group_has_its_capability_flag(feature: str, qualifier: str) -> None:
    t = 2 if qualifier in ("L", "D", "SD", "DS", "SL") else None
    doc = chart(["A", "B"], [q("a", "A"), q("x", "A", qualifier, t), q("b", "B")])
    types = ["com.example.a.v1", "com.example.x.v1", "com.example.b.v1"]
    assert codes(doc, capabilities=station(types, **{feature: False})) == [
        ("SFC015", "$.Actions[1].Qualifier")
    ]
    assert codes(doc, capabilities=station(types)) == []


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([q("a", "A"), r("nope", "B"), q("b", "B")], [("SFC021", "$.Actions[1].Name")]),
        ([q("a", "A"), r("a", "B"), q("b", "B")], [("SFC021", "$.Actions[1].Name")]),
        (
            [q("l", "A", "L", 1), q("a", "A"), r("l", "B"), q("b", "B")],
            [("SFC021", "$.Actions[2].Name")],
        ),
        (
            [q("c", "A", "S"), r("c", "A"), q("a", "A"), q("b", "B")],
            [("SFC022", "$.Actions[1].Name")],
        ),
        (
            [q("c", "A", "SL", 1), r("c", "A"), q("a", "A"), q("b", "B")],
            [("SFC022", "$.Actions[1].Name")],
        ),
        (
            [q("c", "A", "S"), q("c", "B", "S"), q("a", "A"), q("b", "B")],
            [("SFC002", "$.Actions[1].Name")],
        ),
        ([q("c", "A", "L"), q("a", "A"), q("b", "B")], [("SFC023", "$.Actions[0].Qualifier")]),
        (
            [q("c", "A", "S", 3), q("a", "A"), q("b", "B")],
            [("SFC023", "$.Actions[0].DurationSeconds")],
        ),
        ([q("c", "A", "N", 3), q("b", "B")], [("SFC023", "$.Actions[0].DurationSeconds")]),
        (
            [{**q("w", "A", "S"), "Interaction": "pull_event"}, q("a", "A"), q("b", "B")],
            [("SFC024", "$.Actions[0].Qualifier")],
        ),
        (
            [
                q(
                    "c",
                    "A",
                    "L",
                    1,
                    Hold={"TypeId": "t.h", "TimeoutSeconds": 5},
                    Restart={"TypeId": "t.r", "TimeoutSeconds": 5},
                ),
                q("a", "A"),
                q("b", "B"),
            ],
            [("SFC025", "$.Actions[0].Hold")],
        ),
        (
            [q("c", "A", "S"), q("a", "A"), {**r("c", "B"), "TimeoutSeconds": 5}, q("b", "B")],
            [("SFC026", "$.Actions[2].TimeoutSeconds")],
        ),
        ([q("c", "A", "DL", 1), q("a", "A"), q("b", "B")], [("SFC010", "$.Actions[0].Qualifier")]),
        (
            [q("c", "A", "D", 0), q("a", "A"), q("b", "B")],
            [("SFC000", "$.Actions[0].DurationSeconds")],
        ),
        (
            [q("c", "A", "D", 604_801), q("a", "A"), q("b", "B")],
            [("SFC000", "$.Actions[0].DurationSeconds")],
        ),
    ],
    ids=[
        "R-unknown",
        "R-of-N",
        "R-of-L",
        "R-and-S-same-step",
        "R-and-SL-same-step",
        "second-definition",
        "T-missing",
        "T-on-S",
        "T-on-N",
        "non-N-pull",
        "Hold-on-L",
        "R-extra-field",
        "DL",
        "T-zero",
        "T-over-a-week",
    ],
)
def test_every_new_build_rule_has_its_error(
    actions: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    assert codes(chart(["A", "B"], actions)) == expected


def test_an_r_may_come_before_the_block_that_defines_its_name() -> None:
    assert codes(chart(["A", "B"], [r("c", "B"), q("c", "A", "S"), q("a", "A"), q("b", "B")])) == []


@pytest.mark.parametrize("dataschema", [RECIPE_V1_0_0, RECIPE_V1_1_0])
def test_older_formats_are_still_n_only(dataschema: str) -> None:
    assert codes(chart(["A", "B"], [q("a", "A"), q("b", "B")]), dataschema) == []
    assert codes(chart(["A", "B"], [q("a", "A"), q("c", "A", "P1"), q("b", "B")]), dataschema) == [
        ("SFC010", "$.Actions[1].Qualifier")
    ]


def test_a_1_4_state_migrates_to_1_5_and_runs_on() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    g = build(
        (root / "examples" / "greetings-demo" / "recipe.json").read_bytes(),
        dataschema=RECIPE_V1_1_0,
    ).graph
    assert g is not None
    documents = (
        (root / "tests" / "data" / "frozen_v1_4" / "greetings-demo.happy.states.jsonl")
        .read_bytes()
        .splitlines()
    )
    first = documents[0]
    assert json.loads(first)["format"] == "1.4"
    state = migrate(first, g)
    assert state.format == "1.5" and state.dwells == {}
    assert all(rec.timer is None for rec in state.actions.values())
    assert next_deadline(state) == min(
        rec.deadline for rec in state.actions.values() if rec.deadline is not None
    )


# ------------------------------------------------------------------ what a user sees


def test_the_transcript_names_every_withdraw_with_its_reason() -> None:
    doc = chart(
        ["A", "B", "C"],
        [
            q("s", "A", "S"),
            q("l", "A", "L", 1),
            q("d", "A", "D", 2),
            q("a", "A"),
            r("s", "C"),
            q("b", "B"),
            q("c", "C"),
            q("s2", "B", "S"),
        ],
    )
    run = Run(doc, replies(s=SILENT, l=SILENT, d=SILENT, s2=SILENT, a=["ok@3000"], b=["ok@1000"]))
    for text in (
        "withdraw l#2 (limit)",
        "withdraw d#",
        "(deactivated)",
        "withdraw s#1 (reset)",
        "(ended)",
    ):
        assert text in run.plain, text


def explained_at(doc: dict[str, Any], script: dict[str, Any], until_ms: int) -> str:
    g = graph(doc)
    sim = Simulation(g, load_script(json.dumps(script).encode(), g), time_limit_ms=until_ms)
    sim.run()
    return explain_state(g, sim.state)


def test_explain_state_says_the_dwell_the_timers_and_what_the_next_deadline_does() -> None:
    doc = chart(
        ["Load", "Settle", "Unload"],
        [
            q("vac", "Load", "S"),
            q("load", "Load"),
            q("andon", "Settle", "D", 20),
            r("vac", "Unload"),
            q("unload", "Unload"),
        ],
        min_seconds={"Settle": 5},
    )
    text = explained_at(doc, replies(vac=SILENT, load=["ok@1000"], andon=SILENT), 3000)
    assert "andon (D 20 s, step Settle): starts at 21.000s if step Settle is still active" in text
    assert "step Settle: not done before 6.000s (MinSeconds)" in text
    assert "Next deadline: 6.000s: the dwell of step Settle passes" in text


def test_explain_state_does_not_list_work_it_does_not_wait_for_as_waited_for() -> None:
    doc = chart(
        ["Load", "Settle", "Unload"],
        [q("vac", "Load", "S"), q("load", "Load"), r("vac", "Unload"), q("unload", "Unload")],
        min_seconds={"Settle": 5},
    )
    text = explained_at(doc, replies(vac=SILENT, load=["ok@1000"]), 3000)
    waits = text.split("What it waits for", 1)[1].split("\n\n", 1)[0]
    assert "not waited for" not in waits
    assert "vac" in text  # still shown, under a heading of its own


def test_an_r_in_another_sequence_drops_a_pending_ds_while_its_step_is_still_active() -> None:
    doc = chart(
        ["I", "X", "Y1", "Y2", "E"],
        [
            q("i", "I"),
            q("x", "X"),
            q("mix", "X", "DS", 10),
            q("y1", "Y1"),
            r("mix", "Y2"),
            q("y2", "Y2"),
            q("e", "E"),
        ],
        transitions=[tr("I", "Par"), tr("Par", "E")],
        branches=[{"Name": "Par", "Type": "simultaneous", "Branches": [["X"], ["Y1", "Y2"]]}],
    )
    run = Run(doc, replies(x=["ok@20000"], y1=["ok@1000"]))
    assert run.starts_of("mix") == []  # X is still active at 10 s, but the R came first
    assert any("the timer of mix (DS 10 s) dropped; it never starts" in d for d in run.decisions)


def test_an_r_of_an_sd_that_started_withdraws_it_reset() -> None:
    doc = chart(
        ["A", "B", "C"],
        [q("heat", "A", "SD", 2), q("a", "A"), q("b", "B"), r("heat", "C"), q("c", "C")],
    )
    run = Run(doc, replies(heat=SILENT, a=["ok@1000"], b=["ok@5000"]))
    assert run.starts_of("heat") == [2000]
    assert run.withdraws_of("heat") == [(6000, "reset")]


def test_a_resume_re_issues_open_non_gating_work_with_its_stop_at() -> None:
    doc = chart(
        ["A", "B"], [q("blow", "A", "L", 10), q("conv", "A", "S"), q("a", "A"), q("b", "B")]
    )
    j = Job(graph(doc))
    j.start()
    result = j.resume(3000, live=["job-1:a#3"])
    # Work the host does not know as live is sent again (a new attempt), with its qualifier
    # and the same stopAt: a resume is no hold, the limit does not move.
    again = {
        c.action_key.removeprefix("job-1:"): c for c in result.commands if isinstance(c, StartWork)
    }
    assert set(again) == {"blow", "conv"}
    assert (again["blow"].qualifier, again["blow"].stop_at, again["blow"].attempt) == (
        "L",
        10_000,
        2,
    )
    assert (again["conv"].qualifier, again["conv"].stop_at) == ("S", UNSET)


def test_a_cancel_while_held_withdraws_open_non_gating_work_and_forgets_timers() -> None:
    doc = chart(
        ["A", "B"],
        [
            q("blow", "A", "L", 10),
            q("andon", "A", "D", 5),
            q("lbl", "A", "P1"),
            q("a", "A"),
            q("b", "B"),
        ],
    )
    run = Run(
        doc,
        {
            **replies(blow=SILENT, lbl=SILENT, a=SILENT),
            "controls": [
                {"kind": "hold", "atMs": 1000},
                {"kind": "cancel", "atMs": 2000, "reason": "shift end"},
            ],
        },
    )
    assert run.result.end == "cancelled"
    assert run.withdraws_of("blow") == [(2000, "shift end")]
    assert run.withdraws_of("lbl") == [] and run.starts_of("andon") == []
    assert next_deadline(run.sim.state) is None


@pytest.mark.parametrize("condition", ["ok", "error", "timeout"])
def test_sfc016_refuses_any_outcome_on_a_step_without_gating_actions(condition: str) -> None:
    # conv (S) is not waited for, so step A ends with no outcome at all: not even a
    # failure, so only "true" can fire.
    doc = chart(
        ["A", "B", "C"],
        [q("conv", "A", "S"), q("b", "B"), q("c", "C")],
        transitions=[tr("A", "B", condition), tr("A", "C", "true", 1)],
    )
    types = ["com.example.conv.v1", "com.example.b.v1", "com.example.c.v1"]
    result = built(doc, capabilities=station(types))
    assert [(e.code, e.path) for e in result.errors] == [("SFC016", "$.Transitions[0].Condition")]
    assert "possible: none, only true can fire" in result.errors[0].message


def test_a_release_says_which_process_timers_it_moved() -> None:
    doc = chart(
        ["A", "B"], [q("andon", "A", "D", 10), q("a", "A", TimeoutSeconds=600), q("b", "B")]
    )
    run = Run(
        doc,
        {
            **replies(andon=SILENT, a=["ok@20000"]),
            "controls": [{"kind": "hold", "atMs": 2000}, {"kind": "release", "atMs": 7000}],
        },
    )
    release = next(
        line for line in run.text.split("\nend:")[0].split("\n") if "operator release" in line
    )
    assert run.starts_of("andon") == [15_000]
    assert "process timers moved: andon (D 10 s) to 15.000s" in release


def test_a_late_answer_to_reset_work_says_it_was_reset() -> None:
    doc = chart(
        ["A", "B", "C"],
        [q("conv", "A", "S"), q("a", "A"), q("b", "B"), r("conv", "C"), q("c", "C")],
    )
    run = Run(doc, replies(conv=["ok@5000"], a=["ok@1000"], b=["ok@1000"], c=["ok@9000"]))
    late = next(e for e in run.result.transcript if e.at_ms == 5000)
    assert late.disposition == "absorbed"
    assert late.reason == (
        "late answer to conv (S): none of its work is open (it ended, or was withdrawn: "
        "reset, limit or its step left)"
    )


def test_render_does_not_label_priorities_like_the_p0_and_p1_qualifiers() -> None:
    from sfc.render import render

    doc = chart(
        ["A", "B", "C"],
        [q("a", "A"), q("bye", "A", "P0"), q("lbl", "A", "P1"), q("b", "B"), q("c", "C")],
        transitions=[tr("A", "B", "ok"), tr("A", "C", "true", 1)],
    )
    text = render(graph(doc))
    assert "P0" in text and "P1" in text
    assert '"p0: ' not in text.lower() and '"p1: ' not in text.lower()


@pytest.mark.parametrize("how", ["answer", "dwell"])
def test_an_l_whose_limit_falls_on_its_steps_exit_is_withdrawn_deactivated(how: str) -> None:
    if how == "answer":
        doc = chart(["A", "B"], [q("blow", "A", "L", 4), q("a", "A"), q("b", "B")])
        script = replies(blow=SILENT, a=["ok@4000"])
    else:
        doc = chart(
            ["A", "B"], [q("blow", "A", "L", 4), q("a", "A"), q("b", "B")], min_seconds={"A": 4}
        )
        script = replies(blow=SILENT, a=["ok@1000"])
    assert Run(doc, script).withdraws_of("blow") == [(4000, "deactivated")]


def test_a_step_that_does_not_wait_starts_and_withdraws_its_l_at_once_and_never_its_d() -> None:
    run = Run(chart(["A", "B"], [q("blow", "A", "L", 2), q("andon", "A", "D", 2), q("b", "B")]))
    assert run.commands[:3] == [
        (0, "push", "blow#1", "L"),
        (0, "withdraw", "blow#1", "deactivated"),
        (0, "push", "b#2", "N"),
    ]
    assert run.starts_of("andon") == []


def test_a_failure_in_a_dwell_step_is_routed_when_the_dwell_has_passed() -> None:
    doc = chart(
        ["A", "B"],
        [q("a", "A"), q("b", "B")],
        transitions=[tr("A", "B", "error")],
        min_seconds={"A": 30},
    )
    run = Run(doc, replies(a=["error:jam@1000"]))
    assert run.starts_of("b") == [30_000]


def test_the_equipment_entry_of_an_l_carries_its_qualifier_and_stop_at() -> None:
    from host.outbox import outgoing

    g = graph(chart(["A", "B"], [q("blow", "A", "L", 2), q("a", "A"), q("b", "B")]))
    j = Job(g)
    result = j.start(at=1_000)
    items = outgoing(result.commands, loaded_sequence=0, job="job-1", at=1_000, grace=0, graph=g)
    pushed = {
        json.loads(msgspec.json.encode(data))["commandId"]: json.loads(msgspec.json.encode(data))
        for _, data in items
    }
    blow = pushed["job-1:blow#1"]
    assert (blow.get("qualifier"), blow.get("stopAt")) == ("L", 3_000)
    assert "qualifier" not in pushed["job-1:a#2"]  # N says nothing, as on StartWork

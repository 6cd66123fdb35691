"""sfc explain and sfc render of recipe v1.2.0: each qualifier in words, R blocks,
MinSeconds and timer steps; action blocks drawn IEC style, the non-gating ones marked."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from generated.event_v1_0 import ActionCompleted, Start, Tick
from generated.state_v1_5 import SfcState
from sfc import build
from sfc.evolution import evolve, new_state
from sfc.explain import explain_recipe, explain_state, qualifier_words
from sfc.graph import Graph
from sfc.render import iec_time, qualifier_field, render


def block(name: str, step: str, qualifier: str = "N", **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": f"com.example.{name}.v1",
        "TimeoutSeconds": 60,
        **extra,
    }


def line() -> Graph:
    """Load (S clamp, SD vac) -> Press (N, D, L; MinSeconds 2) -> Cool (timer step)
    -> Release (R clamp, P1, P0)."""
    doc = {
        "Steps": [
            {"Name": "Load", "Initial": True},
            {"Name": "Press", "MinSeconds": 2},
            {"Name": "Cool", "MinSeconds": 600},
            {"Name": "Release"},
        ],
        "Transitions": [
            {"Source": "Load", "Target": "Press", "Condition": "true"},
            {"Source": "Press", "Target": "Cool", "Condition": "true"},
            {"Source": "Cool", "Target": "Release", "Condition": "true"},
        ],
        "Actions": [
            block("clamp", "Load", "S"),
            block("vac", "Load", "SD", DurationSeconds=3),
            block("press", "Press"),
            block("andon", "Press", "D", DurationSeconds=10),
            block("blow", "Press", "L", DurationSeconds=1.5),
            block("beep", "Release", "P1"),
            block("log", "Release", "P0"),
            {"Name": "clamp", "Step": "Release", "Qualifier": "R"},
        ],
    }
    result = build(json.dumps(doc).encode())
    assert result.graph is not None, result.errors
    return result.graph


@pytest.fixture(scope="module")
def graph() -> Graph:
    return line()


def lines(text: str) -> list[str]:
    return [s.strip() for s in text.splitlines()]


def test_explain_says_each_qualifier_in_words(graph: Graph) -> None:
    said = lines(explain_recipe(graph))
    assert (
        "D 10 s: sent if the step is still active after 10 s; withdrawn when the step is left; "
        "not waited for"
    ) in said
    assert (
        "L 1.5 s: sent at entry; withdrawn after 1.5 s, or when the step is left if that is "
        "sooner; not waited for"
    ) in said
    assert (
        "S: sent at entry and stored: it runs on after the step is left, until an R resets it "
        "(in step Release) or the job ends; not waited for"
    ) in said
    assert (
        "SD 3 s: sent 3 s after entry, even if the step was left, unless an R resets it first; "
        "then stored until the job ends (no R block resets it); not waited for"
    ) in said
    assert "P1: sent once at entry (a pulse) and runs to its end; not waited for" in said
    assert (
        "P0: sent once when the step is left (a pulse) and runs to its end; not waited for" in said
    )


def test_explain_says_what_an_r_block_and_min_seconds_do(graph: Graph) -> None:
    text = explain_recipe(graph)
    said = lines(text)
    assert "4 steps, 3 transitions, 7 action blocks, 1 R block, 0 divergences." in text
    assert (
        "R clamp: at entry, resets clamp (S in step Load): withdraws its work if it is still open"
    ) in said
    assert "the step is not done before 2 s after entry (MinSeconds)" in said
    assert "no action blocks: a timer step, done 10 min after entry" in said
    # Load and Release have no N action: the chart passes through them at once.
    assert said.count("no N action: passed through at once, once its actions are started") == 2
    assert "every N block has an outcome and its MinSeconds have passed" in text
    assert "the outcome of any other qualifier never faults it" in text


def test_the_words_of_the_reset_name_its_pending_timer() -> None:
    doc = {
        "Steps": [{"Name": "A", "Initial": True}, {"Name": "B"}],
        "Transitions": [{"Source": "A", "Target": "B", "Condition": "true"}],
        "Actions": [
            block("a", "A"),
            block("heat", "A", "DS", DurationSeconds=5),
            block("b", "B"),
            {"Name": "heat", "Step": "B", "Qualifier": "R"},
        ],
    }
    graph = build(json.dumps(doc).encode()).graph
    assert graph is not None
    assert (
        "R heat: at entry, resets heat (DS in step A): withdraws its work if it is still open, "
        "or drops its timer if it has not started yet"
    ) in lines(explain_recipe(graph))


@pytest.mark.parametrize(
    ("qualifier", "start"),
    [
        ("P", "P: sent once at entry (a pulse, the same as P1 here)"),
        ("P1", "P1: sent once at entry"),
        ("P0", "P0: sent once when the step is left"),
        ("S", "S: sent at entry and stored"),
        ("L", "L 2 s: sent at entry; withdrawn after 2 s"),
        ("D", "D 2 s: sent if the step is still active after 2 s"),
        ("SD", "SD 2 s: sent 2 s after entry, even if the step was left"),
        ("DS", "DS 2 s: sent if the step is still active after 2 s, then stored"),
        ("SL", "SL 2 s: sent at entry and stored; withdrawn after 2 s"),
    ],
)
def test_every_qualifier_but_n_has_words(graph: Graph, qualifier: str, start: str) -> None:
    spec = replace(
        graph.actions["press"],
        qualifier=qualifier,
        gating=False,
        duration_ms=2000 if qualifier in ("L", "D", "SD", "DS", "SL") else None,
    )
    words = qualifier_words(spec)
    assert words is not None and words.startswith(start) and words.endswith("; not waited for")
    assert qualifier_words(graph.actions["press"]) is None  # N: the plain case


def test_an_n_only_recipe_is_explained_as_before() -> None:
    doc = {
        "Steps": [{"Name": "A", "Initial": True}],
        "Transitions": [],
        "Actions": [block("a", "A")],
    }
    graph = build(json.dumps(doc).encode()).graph
    assert graph is not None
    text = explain_recipe(graph)
    assert "the step is done when every one has an outcome." in text
    assert "not waited for" not in text and "R block" not in text and "N action" not in text


@pytest.mark.parametrize(
    ("ms", "literal"),
    [
        (10_000, "T#10s"),
        (1500, "T#1s500ms"),
        (90_000, "T#1m30s"),
        (604_800_000, "T#7d"),
        (1, "T#1ms"),
    ],
)
def test_iec_time_literals(ms: int, literal: str) -> None:
    assert iec_time(ms) == literal


def test_qualifier_fields_carry_the_time(graph: Graph) -> None:
    fields = {name: qualifier_field(spec) for name, spec in graph.actions.items()}
    assert fields == {
        "clamp": "S",
        "vac": "SD T#3s",
        "press": "N",
        "andon": "D T#10s",
        "blow": "L T#1s500ms",
        "beep": "P1",
        "log": "P0",
    }


def test_mermaid_labels_blocks_iec_style_and_marks_the_others(graph: Graph) -> None:
    chart = render(graph)
    assert "N press · push 1 min<br/>" in chart  # gating: no mark
    assert "D T#35;10s andon · push 1 min, not waited for" in chart
    assert "SD T#35;3s vac · push 1 min, not waited for" in chart
    assert 's3["Release<br/>R clamp · reset<br/>P1 beep' in chart
    assert 's1["Press<br/>min T#35;2s<br/>N press' in chart
    assert 's2["Cool<br/>min T#35;10m"]' in chart


def test_dot_labels_blocks_iec_style_and_marks_the_others(graph: Graph) -> None:
    chart = render(graph, fmt="dot")
    assert '<tr><td>D T#10s</td><td align="left">andon</td>' in chart
    assert '<td align="left">push 1 min, not waited for</td>' in chart
    assert '<tr><td>R</td><td align="left">clamp</td><td align="left">reset</td></tr>' in chart
    assert "<tr><td>Cool</td></tr><tr><td>min T#10m</td></tr>" in chart


# -- a job's state: non-gating work, pending timers, dwells


def started() -> tuple[Graph, SfcState]:
    """Load (N load; SD heater 5 s, D andon 50 s, L blow 50 s, P1 label; MinSeconds 30) ->
    Work, right after the start at 0."""
    doc = {
        "Steps": [{"Name": "Load", "Initial": True, "MinSeconds": 30}, {"Name": "Work"}],
        "Transitions": [{"Source": "Load", "Target": "Work", "Condition": "true"}],
        "Actions": [
            block("load", "Load"),
            block("heater", "Load", "SD", DurationSeconds=5),
            block("andon", "Load", "D", DurationSeconds=50),
            block("blow", "Load", "L", DurationSeconds=50),
            block("label", "Load", "P1"),
            block("work", "Work"),
        ],
    }
    graph = build(json.dumps(doc).encode()).graph
    assert graph is not None
    result = evolve(graph, new_state(graph, "job-1", "test"), None, Start(at=0))
    return graph, result.state


def test_explain_state_names_non_gating_work_pending_timers_and_dwells() -> None:
    graph, state = started()
    said = lines(explain_state(graph, state))
    blow = next(s for s in said if s.startswith("blow (step Load"))
    assert blow.startswith("blow (step Load, L 50 s, not waited for): push command blow#")
    assert "withdrawn at its limit at 50.000s (outcome done), unless it ends first" in said
    assert (
        "heater (SD 5 s, step Load): starts at 5.000s, even if its step was left, unless an R "
        "resets it first"
    ) in said
    assert "andon (D 50 s, step Load): starts at 50.000s if step Load is still active then" in said
    assert "step Load: not done before 30.000s (MinSeconds)" in said
    assert said[-1] == "Next deadline: 5.000s: heater (SD) starts"


def test_the_next_deadline_names_limits_dwells_and_delayed_starts() -> None:
    graph, state = started()
    answered = evolve(
        graph,
        state,
        None,
        ActionCompleted(at=1000, action_key="job-1:label", outcome="ok"),
    ).state
    text = explain_state(graph, answered)
    assert "label: outcome ok (P1: recorded, not waited for)" in lines(text)
    later = evolve(graph, answered, None, Tick(at=5000)).state  # heater starts
    assert lines(explain_state(graph, later))[-1] == (
        "Next deadline: 30.000s: the dwell of step Load passes"
    )
    later = evolve(
        graph, later, None, ActionCompleted(at=6000, action_key="job-1:load", outcome="ok")
    ).state
    later = evolve(graph, later, None, Tick(at=30_000)).state  # the dwell: on to Work
    assert "heater (step Load, SD 5 s, not waited for)" in explain_state(graph, later)
    assert "stored: it runs on until an R resets it or the job ends" in lines(
        explain_state(graph, later)
    )


def test_render_marks_pending_starts_and_limits() -> None:
    graph, state = started()
    chart = render(graph, state)
    assert "D T#35;50s andon · push 1 min, not waited for [starts at 50.000s]" in chart
    assert (
        "● L T#35;50s blow · push 1 min, not waited for [open, attempt 1, stop at 50.000s]" in chart
    )

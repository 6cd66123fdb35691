"""Rendering the chart: Mermaid and DOT snapshots, IEC elements, and Graphviz parsing the DOT."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from generated.state_v1_5 import SfcState
from sfc.builder import build
from sfc.graph import Graph
from sfc.render import render
from sfc.simulation import Simulation, load_script
from tests.aptkit import installed
from tests.corehelpers import divergence, graph_of, pull, push, recipe, t

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = sorted(p.parent.name for p in EXAMPLES.glob("*/recipe.json"))


class MermaidSnapshot(SingleFileSnapshotExtension):
    file_extension = "mmd"


class DotSnapshot(SingleFileSnapshotExtension):
    file_extension = "dot"


def example(name: str) -> Graph:
    built = build((EXAMPLES / name / "recipe.json").read_bytes())
    assert built.graph is not None
    return built.graph


def state_at(name: str, script: str, until_ms: int) -> SfcState:
    graph = example(name)
    data = (EXAMPLES / name / f"{script}.script.json").read_bytes()
    sim = Simulation(graph, load_script(data, graph), time_limit_ms=until_ms)
    sim.run()
    return sim.state


@pytest.fixture(scope="module")
def dot() -> str:
    """Graphviz's `dot`: never a skip, a test of the dot output that does not run proves
    nothing (tests/aptkit.py installs it as root)."""
    path = installed("dot", "graphviz")
    if path is None:
        pytest.fail(
            "Graphviz is missing and could not be installed (as root: apt-get install -y "
            "graphviz): the tests of the dot output need its `dot`"
        )
    return path


def graphviz(dot: str, source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [dot, "-Tsvg"], input=source, capture_output=True, text=True, timeout=60, check=False
    )


# --------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("name", NAMES)
def test_mermaid(name: str, snapshot: SnapshotAssertion) -> None:
    assert render(example(name), fmt="mermaid").encode() == snapshot(
        extension_class=MermaidSnapshot
    )


@pytest.mark.parametrize("name", NAMES)
def test_dot(name: str, snapshot: SnapshotAssertion) -> None:
    assert render(example(name), fmt="dot").encode() == snapshot(extension_class=DotSnapshot)


def test_mermaid_with_a_state(snapshot: SnapshotAssertion) -> None:
    state = state_at("rear-axle-fitting", "retry", 30_000)
    text = render(example("rear-axle-fitting"), state, "mermaid")
    assert text.encode() == snapshot(extension_class=MermaidSnapshot)


def test_dot_with_a_state(snapshot: SnapshotAssertion) -> None:
    state = state_at("tightening-hold", "pause-resume", 100_000)
    text = render(example("tightening-hold"), state, "dot")
    assert text.encode() == snapshot(extension_class=DotSnapshot)


# --------------------------------------------------------------------------- Graphviz


@pytest.mark.parametrize("name", NAMES)
def test_graphviz_parses_the_dot_output(dot: str, name: str) -> None:
    done = graphviz(dot, render(example(name), fmt="dot"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "<svg" in done.stdout


def test_graphviz_parses_the_dot_output_with_a_state(dot: str) -> None:
    state = state_at("rear-axle-fitting", "retry", 30_000)
    done = graphviz(dot, render(example("rear-axle-fitting"), state, "dot"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


# --------------------------------------------------------------------------- IEC elements


def test_the_initial_step_has_a_double_border() -> None:
    graph = example("rear-axle-fitting")
    mermaid = render(graph, fmt="mermaid")
    assert '  s0[["Init"]]\n' in mermaid
    assert '  s1["Positioning' in mermaid
    dot = render(graph, fmt="dot")
    initial = next(line for line in dot.splitlines() if line.startswith("  s0 "))
    assert initial.count('<table border="1"') == 2  # a box inside a box
    other = next(line for line in dot.splitlines() if line.startswith("  s5 "))
    assert other.count('<table border="1"') == 1


def test_action_blocks_sit_beside_their_step() -> None:
    mermaid = render(example("tightening-hold"), fmt="mermaid")
    assert '  s1["Tighten<br/>N tighten · push 2 min, hold/restart"]\n' in mermaid
    dot = render(example("rear-axle-fitting"), fmt="dot")
    assert '<td align="left">camera_qa</td><td align="left">await 45 s</td>' in dot


def test_simultaneous_divergences_are_double_bars_and_selections_single_bars() -> None:
    simultaneous = render(example("rear-axle-fitting"), fmt="dot")
    selection = render(example("bottling-line"), fmt="dot")
    bar = '<tr><td height="2" width="120" bgcolor="black"></td></tr>'
    assert simultaneous.count(bar) == 4  # divergence and convergence, two lines each
    assert selection.count(bar) == 2
    assert '  d0_div["═══ FitAndQa: simultaneous ═══"]' in render(example("rear-axle-fitting"))
    assert '  d0_div["─── QualityGate: selection ───"]' in render(example("bottling-line"))


def test_a_simultaneous_divergence_starts_every_sequence_and_converges() -> None:
    mermaid = render(example("rear-axle-fitting"))
    for edge in ("d0_div --> s1", "s1 --> s2", "s2 --> d0_conv", "d0_div --> s3", "s3 --> d0_conv"):
        assert f"  {edge}\n" in mermaid
    assert '  s0 -->|"true"| d0_div\n' in mermaid


def test_transitions_carry_conditions_and_priorities_where_a_source_has_several() -> None:
    mermaid = render(example("bottling-line"))
    assert '  s0 -->|"true"| s1\n' in mermaid
    assert '  d0_div -->|"prio 0: fill_low"| s3\n' in mermaid
    assert '  d0_div -->|"prio 1: true"| s5\n' in mermaid
    assert '  d0_conv -->|"prio 2: reworked"| s2\n' in mermaid
    assert '  d0_conv -->|"prio 3: true"| s6\n' in mermaid
    dot = render(example("bottling-line"), fmt="dot")
    assert 'xlabel="prio 2: reworked"];' in dot
    assert "  d0_conv -> t5 [arrowhead=none];\n  t5 -> s2:step:n;\n" in dot


def test_a_state_marks_active_steps_and_open_actions() -> None:
    graph = example("rear-axle-fitting")
    state = state_at("rear-axle-fitting", "retry", 30_000)
    mermaid = render(graph, state)
    assert "  %% job job-1: running\n" in mermaid
    assert "  class s2 active\n" in mermaid
    assert "● N tighten · push 1 min [open, attempt 1]" in mermaid
    assert "● N position_axle" not in mermaid  # answered; its step is no longer active
    dot = render(graph, state, "dot")
    assert 'bgcolor="#d7f5d7"' in dot
    assert '<td bgcolor="#ffe08a">N</td><td align="left" bgcolor="#ffe08a">tighten</td>' in dot
    assert dot.count('bgcolor="#ffe08a">N<') == 1
    assert render(graph) != mermaid


def test_a_held_state_is_named() -> None:
    state = state_at("tightening-hold", "pause-resume", 100_000)
    mermaid = render(example("tightening-hold"), state)
    assert "  %% job job-1: running, held since 10.000s\n" in mermaid
    assert "● N tighten · push 2 min, hold/restart [held by the equipment]" in mermaid


def test_work_of_a_cancelled_job_is_marked_withdrawn_not_open() -> None:
    state = state_at("tightening-hold", "abort-while-held", 20_000)
    graph = example("tightening-hold")
    mermaid = render(graph, state)
    assert "  %% job job-1: cancelled\n" in mermaid
    assert "N tighten · push 2 min, hold/restart [withdrawn, attempt 1]" in mermaid
    assert "●" not in mermaid
    dot = render(graph, state, "dot")
    assert "withdrawn, attempt 1" in dot
    assert "#ffe08a" not in dot


def test_work_of_a_faulted_job_is_marked_withdrawn_not_open() -> None:
    graph = example("rear-axle-fitting")
    doc = b'{"replies": {"camera_qa": ["silent"], "tighten": ["silent"]}}'
    sim = Simulation(graph, load_script(doc, graph))
    sim.run()
    mermaid = render(graph, sim.state)
    assert "  %% job job-1: faulted (timeout)\n" in mermaid
    assert "N tighten · push 1 min [withdrawn, attempt 1]" in mermaid
    assert "open," not in mermaid


def test_names_are_escaped(dot: str) -> None:
    graph = graph_of(
        recipe(
            ['Fill "A" <1>#2', "B & C", "D"],
            actions=[push('x"y', 'Fill "A" <1>#2'), pull("w", "B & C")],
            transitions=[t('Fill "A" <1>#2', "P"), t("P", "D")],
            branches=[divergence("P", "simultaneous", ["B & C"])],
        )
    )
    mermaid = render(graph)
    assert '  s0[["Fill #quot;A#quot; #lt;1#gt;#35;2<br/>N x#quot;y · push 10 s"]]\n' in mermaid
    text = render(graph, fmt="dot")
    assert "Fill &quot;A&quot; &lt;1&gt;#2" in text
    assert "B &amp; C" in text
    done = graphviz(dot, text)
    assert done.returncode == 0, done.stderr


def test_the_output_is_deterministic() -> None:
    graph = example("bottling-line")
    assert render(graph, fmt="dot") == render(example("bottling-line"), fmt="dot")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown format 'svg'"):
        render(example("greetings-demo"), fmt="svg")  # type: ignore[arg-type]

"""The SVG chart: snapshots of every example with and without a state, its data attributes,
its IEC elements, escaping, and a layout where no two boxes overlap."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given, settings
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from generated.state_v1_5 import SfcState
from sfc.builder import RECIPE_V1_2_0, build
from sfc.graph import Graph
from sfc.render import iec_time
from sfc.simulation import Simulation, load_script
from sfc.svg import render_svg
from tests.clikit import sfc
from tests.corehelpers import divergence, graph_of, pull, push, recipe, t
from tests.strategies import recipe_docs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = sorted(p.parent.name for p in EXAMPLES.glob("*/recipe.json"))
SVG = "{http://www.w3.org/2000/svg}"

STATES = {
    "bottling-line": ("vision-timeout", 60_000),
    "greetings-demo": ("cancel", 60_000),
    "press-fit-line": ("slow-press", 5_000),
    "rear-axle-fitting": ("qa-reject", 5_000),
    "recovery-routing": ("clogged-nozzle", 20_000),
    "tightening-hold": ("pause-resume", 20_000),
}
"""Per example, a script and the time to stop its dry run at: a job in the middle of a run."""


class SvgSnapshot(SingleFileSnapshotExtension):
    file_extension = "svg"


def example(name: str) -> Graph:
    built = build((EXAMPLES / name / "recipe.json").read_bytes())
    assert built.graph is not None
    return built.graph


def state_of(name: str) -> SfcState:
    script, until_ms = STATES[name]
    graph = example(name)
    data = (EXAMPLES / name / f"{script}.script.json").read_bytes()
    sim = Simulation(graph, load_script(data, graph), time_limit_ms=until_ms)
    sim.run()
    return sim.state


def parsed(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def steps_of(root: ET.Element) -> dict[str, ET.Element]:
    found = [e for e in root.iter(f"{SVG}g") if "data-step" in e.attrib]
    names = [e.attrib["data-step"] for e in found]
    assert len(names) == len(set(names))
    return {e.attrib["data-step"]: e for e in found}


def actions_of(root: ET.Element) -> dict[str, str]:
    found = [e for e in root.iter(f"{SVG}g") if "data-action" in e.attrib]
    return {e.attrib["data-action"]: e.attrib["data-status"] for e in found}


def boxes(root: ET.Element) -> list[tuple[int, int, int, int]]:
    """The inner box of every step, as (x, y, width, height)."""
    out = []
    for g in steps_of(root).values():
        rect = g.findall(f"{SVG}rect")[-1]
        out.append(tuple(int(rect.attrib[k]) for k in ("x", "y", "width", "height")))
    return out  # type: ignore[return-value]


# --------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("name", NAMES)
def test_svg(name: str, snapshot: SnapshotAssertion) -> None:
    assert render_svg(example(name)).encode() == snapshot(extension_class=SvgSnapshot)


@pytest.mark.parametrize("name", NAMES)
def test_svg_with_a_state(name: str, snapshot: SnapshotAssertion) -> None:
    svg = render_svg(example(name), state_of(name))
    assert svg.encode() == snapshot(extension_class=SvgSnapshot)


def test_every_example_has_a_state_here() -> None:
    assert sorted(STATES) == NAMES


# --------------------------------------------------------------------------- data attributes


@pytest.mark.parametrize("name", NAMES)
def test_every_step_and_action_block_carries_its_data(name: str) -> None:
    graph = example(name)
    root = parsed(render_svg(graph))
    steps = steps_of(root)
    assert sorted(steps) == sorted(graph.steps)
    assert {g.attrib["data-active"] for g in steps.values()} == {"false"}
    assert actions_of(root) == dict.fromkeys(graph.actions, "idle")


@pytest.mark.parametrize("name", NAMES)
def test_a_state_marks_exactly_its_active_steps(name: str) -> None:
    state = state_of(name)
    root = parsed(render_svg(example(name), state))
    active = {s for s, g in steps_of(root).items() if g.attrib["data-active"] == "true"}
    assert active == set(state.active_steps)
    assert active


def test_the_status_of_action_blocks() -> None:
    assert actions_of(
        parsed(render_svg(example("rear-axle-fitting"), state_of("rear-axle-fitting")))
    ) == {
        "position_axle": "done",
        "tighten": "open",
        "camera_qa": "open",
        "verify": "idle",
        "rework_task": "idle",
        "reject": "idle",
    }
    held = actions_of(parsed(render_svg(example("tightening-hold"), state_of("tightening-hold"))))
    assert held["tighten"] == "held"
    failed = actions_of(parsed(render_svg(example("bottling-line"), state_of("bottling-line"))))
    assert failed["vision"] == "failed"
    assert failed["fill"] == "idle"  # its step was left: no record, nothing to mark
    cancelled = actions_of(
        parsed(render_svg(example("greetings-demo"), state_of("greetings-demo")))
    )
    assert cancelled["send_bye"] == "withdrawn"


def test_a_state_names_the_job_and_its_marks() -> None:
    svg = render_svg(example("tightening-hold"), state_of("tightening-hold"))
    assert ">job job-1: running, held since 10.000s</text>" in svg
    assert ">held by the equipment</text>" in svg
    assert "job job-1" not in render_svg(example("tightening-hold"))


# --------------------------------------------------------------------------- IEC elements


def test_the_initial_step_is_framed_twice() -> None:
    graph = example("rear-axle-fitting")
    steps = steps_of(parsed(render_svg(graph)))
    for name, g in steps.items():
        assert len(g.findall(f"{SVG}rect")) == (2 if name == graph.initial else 1)


def test_divergences_are_double_lines_when_simultaneous_and_single_for_a_selection() -> None:
    simultaneous = render_svg(example("rear-axle-fitting"))
    selection = render_svg(example("bottling-line"))
    assert simultaneous.count('class="divergence simultaneous"') == 4
    assert selection.count('class="divergence selection"') == 2
    assert 'data-divergence="FitAndQa"' in simultaneous


def test_transitions_are_bars_with_condition_and_priority_where_a_source_has_several() -> None:
    root = parsed(render_svg(example("bottling-line")))
    labels = {}
    for g in root.iter(f"{SVG}g"):
        if "data-transition" in g.attrib:
            assert g.find(f"{SVG}line").attrib["class"] == "bar"  # type: ignore[union-attr]
            labels[int(g.attrib["data-transition"])] = g.find(f"{SVG}text").text  # type: ignore[union-attr]
    graph = example("bottling-line")
    assert sorted(labels) == [tr.index for tr in graph.transitions]
    assert labels[0] == "true"
    assert "prio 0: fill_low" in labels.values()
    assert "prio 2: reworked" in labels.values()


def test_a_transition_to_a_node_drawn_elsewhere_is_a_jump_naming_it() -> None:
    svg = render_svg(example("bottling-line"))
    assert '<text class="jump" x="' in svg
    assert re.search(r'class="jump" x="\d+" y="\d+">Inspect</text>', svg)


def test_action_blocks_show_qualifier_name_and_time() -> None:
    svg = render_svg(example("tightening-hold"))
    assert re.search(
        r'data-action="tighten" data-status="idle">.*>N</text>.*>tighten</text>.*'
        r">push 2 min, hold/restart</text>",
        svg,
    )


# --------------------------------------------------------------------------- text and bytes


def test_names_are_escaped() -> None:
    name = 'Fill "A" <1>&\'2'
    graph = graph_of(
        recipe(
            [name, "B & C", "D"],
            actions=[push('x"y<', name), pull("w&", "B & C")],
            transitions=[t(name, "P"), t("P", "D")],
            branches=[divergence("P", "simultaneous", ["B & C"])],
        )
    )
    svg = render_svg(graph)
    root = parsed(svg)
    assert sorted(steps_of(root)) == sorted([name, "B & C", "D"])
    assert sorted(actions_of(root)) == ["w&", 'x"y<']
    assert "&lt;1&gt;&amp;" in svg


def test_the_same_inputs_give_the_same_bytes_and_integer_coordinates() -> None:
    state = state_of("rear-axle-fitting")
    first = render_svg(example("rear-axle-fitting"), state)
    assert first == render_svg(example("rear-axle-fitting"), state)
    numbers = re.findall(r' (?:x|y|x1|y1|x2|y2|width|height)="([^"]*)"', first)
    assert numbers
    assert all(re.fullmatch(r"-?\d+", n) for n in numbers)


def test_the_cli_prints_the_svg(tmp_path: Path) -> None:
    path = EXAMPLES / "bottling-line" / "recipe.json"
    done = sfc("render", path, "--format", "svg", cwd=tmp_path)
    assert done.code == 0, done
    assert done.out == render_svg(example("bottling-line"))


# --------------------------------------------------------------------------- layout


def overlapping(root: ET.Element) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    def meet(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
        return (
            a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]
        )

    return [(a, b) for a, b in combinations(boxes(root), 2) if meet(a, b)]


@settings(max_examples=60, deadline=None)
@given(recipe_docs(max_nodes=8, max_actions=3))
def test_no_two_step_boxes_overlap(doc: dict[str, object]) -> None:
    graph = graph_of(doc)  # type: ignore[arg-type]
    root = parsed(render_svg(graph))
    assert sorted(steps_of(root)) == sorted(graph.steps)
    assert overlapping(root) == []


def test_a_chart_of_200_steps_stays_a_column() -> None:
    """Forty stations of a step, a three-way simultaneous divergence and a check: the width
    is that of the widest divergence, whatever the length."""
    steps: list[str] = []
    transitions = []
    branches = []
    actions = []
    previous = None
    for i in range(40):
        head, check = f"Load{i}", f"Check{i}"
        seqs = [[f"Work{i}_{k}"] for k in range(3)]
        steps += [head, *[s[0] for s in seqs], check]
        actions += [push(f"load{i}", head), pull(f"check{i}", check, type_id=f"t.c{i}")]
        branches.append(divergence(f"Do{i}", "simultaneous", *seqs))
        if previous is not None:
            transitions.append(t(previous, head))
        transitions += [t(head, f"Do{i}"), t(f"Do{i}", check)]
        previous = check
    graph = graph_of(recipe(steps, transitions=transitions, actions=actions, branches=branches))
    assert len(graph.steps) == 200
    root = parsed(render_svg(graph))
    assert overlapping(root) == []
    assert int(root.attrib["width"]) < 800
    assert int(root.attrib["height"]) > 30 * 200  # a box each, one under the other


def test_qualifiers_and_their_times_and_resets_are_drawn() -> None:
    doc = recipe(
        ["A", "B", "C"],
        actions=[
            push("lamp", "A", Qualifier="L", DurationSeconds=90),
            push("fan", "A", Qualifier="S"),
            push("work", "B"),
            {"Name": "fan", "Step": "C", "Qualifier": "R"},
        ],
        transitions=[t("A", "B"), t("B", "C")],
    )
    built = build(json.dumps(doc).encode(), None, RECIPE_V1_2_0)
    assert built.graph is not None, built.errors
    svg = render_svg(built.graph)
    assert re.search(r'data-action="lamp" data-status="idle">.*?>L T#1m30s</text>', svg)
    assert re.search(r'data-action="fan" data-status="idle">.*?>S</text>', svg)
    assert re.search(r'<g class="sfc-reset" data-reset="fan">.*?>R</text>', svg)
    assert sorted(actions_of(parsed(svg))) == ["fan", "lamp", "work"]


def test_iec_times() -> None:
    assert [iec_time(ms) for ms in (5000, 90_000, 2500, 0, 3_600_000)] == [
        "T#5s",
        "T#1m30s",
        "T#2s500ms",
        "T#0ms",
        "T#1h",
    ]


def test_a_body_kept_is_the_body_drawn() -> None:
    """Two jobs alike in their steps and marks share a drawn body; only the title differs."""
    from msgspec.structs import replace

    graph = example("rear-axle-fitting")
    one = state_of("rear-axle-fitting")
    other = replace(one, job_id="another-job-with-a-longer-id-than-the-chart-is-wide" * 3)
    drawn: dict[tuple[object, ...], tuple[str, int, int]] = {}
    assert render_svg(graph, one, drawn) == render_svg(graph, one)
    assert render_svg(graph, other, drawn) == render_svg(graph, other)
    assert len(drawn) == 1
    assert render_svg(graph, None, drawn) == render_svg(graph)
    assert render_svg(example("tightening-hold"), state_of("tightening-hold"), drawn) == (
        render_svg(example("tightening-hold"), state_of("tightening-hold"))
    )
    assert len(drawn) == 3

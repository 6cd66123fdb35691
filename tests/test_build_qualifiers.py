"""build() of recipe v1.2.0: the qualifiers, DurationSeconds, MinSeconds and R blocks
(docs/qualifiers.md), the graph they give, and their build errors SFC021 to SFC026."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sfc import RECIPE_V1_0_0, RECIPE_V1_1_0, RECIPE_V1_2_0, BuildResult, build
from sfc.graph import Graph

RECIPES = Path(__file__).parent / "data" / "python_recipes"
V1_2_0 = Path(__file__).parent / "data" / "recipe_v1_2_0" / "valid"


def block(name: str, step: str, qualifier: str = "N", **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": f"t.{name}",
        "TimeoutSeconds": 30,
        **extra,
    }


def reset(name: str, step: str) -> dict[str, Any]:
    return {"Name": name, "Step": step, "Qualifier": "R"}


def press(*actions: dict[str, Any], min_seconds: float | None = None) -> dict[str, Any]:
    """Load -> Press -> Release, a push N in each, plus `actions`."""
    steps: list[dict[str, Any]] = [
        {"Name": "Load", "Initial": True},
        {"Name": "Press"},
        {"Name": "Release"},
    ]
    if min_seconds is not None:
        steps[1]["MinSeconds"] = min_seconds
    return {
        "Steps": steps,
        "Transitions": [
            {"Source": "Load", "Target": "Press", "Condition": "true"},
            {"Source": "Press", "Target": "Release", "Condition": "true"},
        ],
        "Actions": [
            block("load", "Load"),
            block("press", "Press"),
            block("release", "Release"),
            *actions,
        ],
    }


def run(doc: dict[str, Any], dataschema: str = RECIPE_V1_2_0, **kw: Any) -> BuildResult:
    return build(json.dumps(doc).encode(), dataschema=dataschema, **kw)


def graph_of(doc: dict[str, Any]) -> Graph:
    result = run(doc)
    assert result.errors == ()
    assert result.graph is not None
    return result.graph


def found(result: BuildResult) -> list[tuple[str, str]]:
    return [(e.code, e.path) for e in result.errors]


# -- the graph


def test_a_qualified_recipe_gives_qualifier_duration_and_gating() -> None:
    graph = graph_of(
        press(
            block("clamp", "Load", "S"),
            block("blow", "Press", "L", DurationSeconds=2),
            block("andon", "Press", "D", DurationSeconds=0.25),
            block("beep", "Press", "P1"),
            reset("clamp", "Release"),
        )
    )
    clamp, blow, andon, beep = (graph.actions[n] for n in ("clamp", "blow", "andon", "beep"))
    assert (clamp.qualifier, clamp.duration_ms, clamp.gating) == ("S", None, False)
    assert (blow.qualifier, blow.duration_ms, blow.gating) == ("L", 2000, False)
    assert (andon.qualifier, andon.duration_ms, andon.gating) == ("D", 250, False)
    assert (beep.qualifier, beep.duration_ms, beep.gating) == ("P1", None, False)
    press_ = graph.actions["press"]
    assert (press_.qualifier, press_.duration_ms, press_.gating) == ("N", None, True)
    assert [a.name for a in graph.step_actions["Press"]] == ["press", "blow", "andon", "beep"]
    assert [a.name for a in graph.gating_actions("Press")] == ["press"]
    assert [a.name for a in graph.step_actions["Load"]] == ["load", "clamp"]


def test_r_blocks_are_resets_of_their_step_not_actions() -> None:
    graph = graph_of(
        press(
            block("clamp", "Load", "S"),
            block("vacuum", "Load", "SL", DurationSeconds=5),
            reset("vacuum", "Release"),
            reset("clamp", "Release"),
            reset("clamp", "Press"),
        )
    )
    assert graph.resets == {"Release": ("vacuum", "clamp"), "Press": ("clamp",)}
    assert graph.actions["clamp"].step == "Load"  # the defining block, not an R
    assert all(a.qualifier != "R" for acts in graph.step_actions.values() for a in acts)
    assert "R" not in {a.qualifier for a in graph.actions.values()}


def test_min_seconds_is_kept_in_ms_for_the_steps_that_have_it() -> None:
    graph = graph_of(press(min_seconds=1.5))
    assert graph.min_ms == {"Press": 1500}


def test_durations_are_whole_milliseconds_at_least_one() -> None:
    graph = graph_of(
        press(
            block("a", "Press", "L", DurationSeconds=0.0001),
            block("b", "Press", "D", DurationSeconds=0.0016),
            block("c", "Press", "SD", DurationSeconds=604800),
        ),
    )
    assert [graph.actions[n].duration_ms for n in "abc"] == [1, 2, 604_800_000]


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.json")), ids=lambda p: p.stem)
def test_an_older_recipe_builds_to_the_same_graph_under_every_format(path: Path) -> None:
    """A v1.0.0 or v1.1.0 recipe: every action N and gating, no resets, no min_ms, and the
    same graph (but the dataschema) and hash under v1.2.0."""
    data = path.read_bytes()
    old = build(data, dataschema=RECIPE_V1_1_0)
    if old.graph is None:
        return
    new = build(data, dataschema=RECIPE_V1_2_0)
    assert new.graph is not None
    assert new.graph.recipe_hash == old.graph.recipe_hash
    assert new.graph.actions == old.graph.actions
    assert new.graph.step_actions == old.graph.step_actions
    for graph in (old.graph, new.graph):
        assert all(a.qualifier == "N" and a.gating for a in graph.actions.values())
        assert all(a.duration_ms is None for a in graph.actions.values())
        assert graph.resets == {} and graph.min_ms == {}
    assert build(data, dataschema=RECIPE_V1_0_0).graph == old.graph.__class__(
        **{
            **{f: getattr(old.graph, f) for f in old.graph.__dataclass_fields__},
            "dataschema": RECIPE_V1_0_0,
        }
    )


@pytest.mark.parametrize("name", ["qualified", "timer_step", "minimal", "full"])
def test_the_v1_2_0_corpus_recipes_build(name: str) -> None:
    assert build((V1_2_0 / f"{name}.json").read_bytes(), dataschema=RECIPE_V1_2_0).errors == ()

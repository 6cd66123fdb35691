"""build() of recipe v1.2.0: the qualifiers, DurationSeconds, MinSeconds and R blocks
(docs/qualifiers.md), the graph they give, and their build errors SFC021 to SFC026."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from cli.main import app
from generated.capabilities_v1_1 import Capabilities
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


# -- the build rules of v1.2.0 beyond one code each (tests/test_build.py has a case per code)


def caps(outcomes: dict[str, list[str]], **features: bool) -> Capabilities:
    """A station declaring each push type of `outcomes`, with feature flags."""
    wire = {
        "types": [{"typeId": t, "kind": "push", "outcomes": o} for t, o in outcomes.items()],
        "features": features,
    }
    return msgspec.json.decode(json.dumps(wire), type=Capabilities)


def loop(*actions: dict[str, Any], min_seconds: float | None = None) -> dict[str, Any]:
    """a <-> b, `actions` in b; a has none."""
    steps: list[dict[str, Any]] = [{"Name": "a", "Initial": True}, {"Name": "b"}]
    if min_seconds is not None:
        steps[1]["MinSeconds"] = min_seconds
    return {
        "Steps": steps,
        "Transitions": [
            {"Source": "a", "Target": "b", "Condition": "true"},
            {"Source": "b", "Target": "a", "Condition": "true"},
        ],
        "Actions": list(actions),
    }


def test_sfc013_a_loop_of_non_gating_actions_has_nothing_to_wait_for() -> None:
    (error,) = run(
        loop(block("beep", "b", "P1"), block("andon", "b", "D", DurationSeconds=5))
    ).errors
    assert (error.code, error.path) == ("SFC013", "$.Transitions[0]")
    assert "an N action or MinSeconds" in error.message


def test_sfc013_a_step_with_min_seconds_waits() -> None:
    assert run(loop(min_seconds=1)).ok
    assert run(loop(block("beep", "b", "P1"), min_seconds=0.5)).ok
    assert run(loop(block("press", "b"))).ok


def test_sfc016_counts_the_outcomes_of_gating_actions_only() -> None:
    doc = press(block("blow", "Press", "L", DurationSeconds=2))
    doc["Transitions"][1]["Condition"] = "blown"
    doc["Transitions"].append(
        {"Source": "Press", "Target": "Load", "Condition": "true", "Priority": 1}
    )
    station = caps({"t.load": [], "t.press": ["pressed"], "t.release": [], "t.blow": ["blown"]})
    (error,) = run(doc, capabilities=station).errors
    assert (error.code, error.path) == ("SFC016", "$.Transitions[1].Condition")
    assert '"blown"' in error.message and "pressed" in error.message
    assert 'action "blow" (L) declares it, but it is not waited for' in error.message
    doc["Transitions"][1]["Condition"] = "pressed"
    assert run(doc, capabilities=station).ok


@pytest.mark.parametrize(
    ("feature", "qualifiers"),
    [
        ("pulseActions", ["P", "P1", "P0"]),
        ("timedActions", ["L", "D"]),
        ("storedActions", ["S", "SD", "DS", "SL"]),
    ],
)
def test_sfc015_refuses_each_block_of_a_feature_the_station_lacks(
    feature: str, qualifiers: list[str]
) -> None:
    types = {f"t.{n}": [] for n in ("load", "press", "release")}
    blocks = []
    for q in qualifiers:
        extra = {"DurationSeconds": 1} if q in ("L", "D", "SD", "DS", "SL") else {}
        blocks.append(block(f"a{q}", "Press", q, **extra))
        types[f"t.a{q}"] = []
    if feature == "storedActions":
        blocks.append(reset("aS", "Release"))
    doc = press(*blocks)
    refused = run(doc, capabilities=caps(types, **{feature: False}))
    expected = [("SFC015", f"$.Actions[{3 + i}].Qualifier") for i in range(len(blocks))]
    assert found(refused) == expected
    assert all(feature in e.message for e in refused.errors)
    assert run(doc, capabilities=caps(types)).ok
    others = {f: False for f in ("pulseActions", "timedActions", "storedActions") if f != feature}
    assert run(doc, capabilities=caps(types, **others)).ok


def test_a_block_other_than_r_needs_interaction_type_and_timeout() -> None:
    bare = {"Name": "clamp", "Step": "Load", "Qualifier": "S"}
    result = run(press(bare))
    assert found(result) == [
        ("SFC000", "$.Actions[3].Interaction"),
        ("SFC000", "$.Actions[3].TypeId"),
        ("SFC000", "$.Actions[3].TimeoutSeconds"),
    ]
    assert "the required field TypeId is missing" in result.errors[1].message


def test_an_r_block_may_repeat_a_name_and_a_defining_block_may_not() -> None:
    twice = press(block("clamp", "Load", "S"), reset("clamp", "Press"), reset("clamp", "Release"))
    assert run(twice).ok
    result = run(press(block("clamp", "Load", "S"), block("clamp", "Press", "S")))
    assert found(result) == [("SFC002", "$.Actions[4].Name")]
    result = run(
        press(block("clamp", "Load", "S"), reset("clamp", "Press"), reset("clamp", "Press"))
    )
    assert found(result) == [("SFC002", "$.Actions[5].Name")]
    assert "resets action" in result.errors[0].message


def test_an_r_of_a_misspelt_name_suggests_the_stored_action() -> None:
    (error,) = run(press(block("clamp", "Load", "S"), reset("clmap", "Release"))).errors
    assert error.code == "SFC021"
    assert 'did you mean "clamp"?' in error.message


def test_an_r_block_with_several_extra_fields_is_one_error_naming_them() -> None:
    r = {**reset("clamp", "Release"), "TypeId": "t", "TimeoutSeconds": 3, "Parameters": {}}
    (error,) = run(press(block("clamp", "Load", "S"), r)).errors
    assert (error.code, error.path) == ("SFC026", "$.Actions[4].TypeId")
    assert "TypeId, TimeoutSeconds, Parameters" in error.message


@pytest.mark.parametrize("qualifier", ["S", "L", "P0"])
def test_an_older_format_runs_n_only(qualifier: str) -> None:
    doc = press(block("x", "Press", qualifier))
    (error,) = run(doc, dataschema=RECIPE_V1_1_0).errors
    assert (error.code, error.path) == ("SFC010", "$.Actions[3].Qualifier")
    assert "v1.1.0" in error.message and RECIPE_V1_2_0 in error.message


@pytest.mark.parametrize("field", ["DurationSeconds", "MinSeconds"])
def test_an_older_format_names_the_dataschema_of_the_new_fields(field: str) -> None:
    if field == "MinSeconds":
        doc = press(min_seconds=1)
    else:
        doc = press(block("x", "Press", "D", DurationSeconds=1))
    (error,) = run(doc, dataschema=RECIPE_V1_1_0).errors
    assert error.code == "SFC000"
    assert f"{field} is not a field of the recipe format v1.1.0" in error.message
    assert RECIPE_V1_2_0 in error.message


@pytest.mark.parametrize("value", [0, -1, 604_800.5, 1e308])
def test_a_time_out_of_range_is_refused_naming_the_range(value: float) -> None:
    doc = press(block("x", "Press", "L", DurationSeconds=value))
    (error,) = build(json.dumps(doc).encode(), dataschema=RECIPE_V1_2_0).errors
    assert (error.code, error.path) == ("SFC000", "$.Actions[3].DurationSeconds")
    assert error.message == (
        "DurationSeconds must be a number above 0 and at most 604800 (one week)"
    )
    (error,) = run(press(min_seconds=0)).errors
    assert (error.code, error.path) == ("SFC000", "$.Steps[1].MinSeconds")


def test_a_qualifier_outside_the_eleven_is_sfc010() -> None:
    (error,) = run(press(block("x", "Press", "DL", DurationSeconds=1))).errors
    assert (error.code, error.path) == ("SFC010", "$.Actions[3].Qualifier")


@pytest.mark.parametrize(("value", "hint"), [("l", "L"), ("sd", "SD"), (" S", "S"), ("p1", "P1")])
def test_a_qualifier_in_the_wrong_case_gets_a_did_you_mean(value: str, hint: str) -> None:
    (error,) = run(press(block("x", "Press", value, DurationSeconds=1))).errors
    assert (error.code, error.path) == ("SFC010", "$.Actions[3].Qualifier")
    assert error.message.endswith(f'; did you mean "{hint}"?'), error.message


def test_a_qualifier_no_case_mends_gets_no_did_you_mean() -> None:
    (error,) = run(press(block("x", "Press", "DL", DurationSeconds=1))).errors
    assert "did you mean" not in error.message


# -- the command line


def test_sfc_validate_lists_every_range_and_qualifier_error_in_the_decoders_words(
    tmp_path: Path,
) -> None:
    doc = press(
        block("blow", "Press", "L", DurationSeconds=0),
        {"Name": "x", "Step": "Press", "Qualifier": "XX"},
        {"Name": "y", "Step": "Press", "Qualifier": "sl"},
        min_seconds=700_000,
    )
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 1
    assert done.stdout.splitlines() == [
        "SFC000 $.Steps[1].MinSeconds: MinSeconds must be a number above 0 and at most 604800 "
        "(one week)",
        "SFC000 $.Actions[3].DurationSeconds: DurationSeconds must be a number above 0 and at "
        "most 604800 (one week)",
        'SFC010 $.Actions[4].Qualifier: "XX" is not an allowed value',
        'SFC010 $.Actions[5].Qualifier: "sl" is not an allowed value; did you mean "SL"?',
    ]


def test_sfc_validate_reads_v1_2_0_by_default_and_counts_resets(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(press(block("clamp", "Load", "S"), reset("clamp", "Release"))))
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 0
    assert done.stdout == f"ok: {path} (3 steps, 4 actions, 1 reset)\n"
    older = CliRunner().invoke(app, ["validate", str(path), "--dataschema", RECIPE_V1_1_0])
    assert older.exit_code == 1
    assert older.stdout.splitlines()[0] == (
        "SFC000 $.Actions[4].Interaction: the required field Interaction is missing; an R block "
        f"of only Name, Step and Qualifier needs dataschema {RECIPE_V1_2_0}"
    )

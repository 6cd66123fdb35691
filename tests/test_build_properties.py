"""build() over random input: it never raises, and always returns a graph or errors.

Three sources of documents: random bytes and random JSON; documents shaped like a recipe
whose names come from a handful of letters (so references collide and resolve by chance),
with every qualifier, R blocks, DurationSeconds and MinSeconds; and valid recipes changed by
random mutations (renamed references, dropped fields, duplicated elements, extra
transitions, wrong types, other kinds, hold and selector edits, qualifiers and times).
Valid v1.2.0 recipes from `tests.strategies.qualified_recipe_docs()` always build, to the
graph their document says.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generated.capabilities_v1_1 import Capabilities
from sfc import RECIPE_V1_0_0, RECIPE_V1_1_0, BuildResult, build
from tests.strategies import BuiltRecipe, built_recipes, qualified_recipe_docs

RECIPES = Path(__file__).parent / "data" / "python_recipes"
VALID = [
    "EngineBasic",
    "SimultaneousBranch",
    "SelectionBranch",
    "MinimalRecipe",
    "RearAxleFitting",
    "ActionFreeCascade",
    "GreetingsDemo",
    "RecipeWithoutBranches",
    "SimultaneousNoExit",
]
BASES = [json.loads((RECIPES / f"{n}.json").read_text(encoding="utf-8")) for n in VALID]
CODE = re.compile(r"^SFC0(0\d|1\d|2[0-6])$")
SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]")

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check(data: bytes, capabilities: Capabilities | None = None) -> BuildResult:
    """Build and assert what holds for every input."""
    result = build(data, capabilities)
    assert (result.graph is None) == bool(result.errors)
    assert result.ok == (result.graph is not None)
    for error in result.errors:
        assert CODE.match(error.code), error
        assert error.path.startswith("$"), error
        assert isinstance(error.message, str) and error.message, error
    assert build(data, capabilities) == result  # deterministic, graph and errors alike
    return result


def parent_exists(doc: Any, path: str) -> bool:
    """Whether every segment of `path` but the last one names a part of `doc`, and the last
    one too when it is a list index."""
    segments = [(m[1], m[2]) for m in SEGMENT.finditer(path)]
    node = doc
    for n, (key, index) in enumerate(segments):
        last = n == len(segments) - 1
        if index is not None:
            if not isinstance(node, list) or int(index) >= len(node):
                return False
            node = node[int(index)]
        elif last:
            return isinstance(node, dict)
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return False
    return True


# -- random JSON and bytes

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    result = check(data)
    assert result.graph is None or data.strip().startswith(b"{")


@SETTINGS
@given(json_values)
def test_random_json_never_raises(value: Any) -> None:
    result = check(json.dumps(value).encode())
    if not isinstance(value, dict):
        assert [(e.code, e.path) for e in result.errors] == [("SFC000", "$")]


# -- documents shaped like a recipe, names from a few letters

names = st.sampled_from(["a", "b", "c", "d", "", "a:b"])
anything = json_values


@st.composite
def recipe_shaped(draw: st.DrawFn) -> dict[str, Any]:
    def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """Mostly the value, now and then anything at all (a wrong type)."""
        return st.integers(0, 29).flatmap(lambda n: anything if n == 29 else value)

    step = st.fixed_dictionaries(
        {"Name": maybe(names)},
        optional={"Initial": maybe(st.booleans()), "MinSeconds": maybe(st.sampled_from([1, 0]))},
    )
    transition = st.fixed_dictionaries(
        {
            "Source": maybe(names),
            "Target": maybe(names),
            "Condition": maybe(st.sampled_from(["true", "ok", "done", "timeout"])),
        },
        optional={"Priority": maybe(st.integers(-2, 2))},
    )
    command = st.fixed_dictionaries(
        {},
        optional={
            "TypeId": maybe(st.sampled_from(["t", "h", ""])),
            "TimeoutSeconds": maybe(st.integers(-1, 700_000)),
        },
    )
    qualifiers = st.sampled_from(["N", "N", "S", "P0", "R", "L", "D", "SD", "DS", "SL", "P"])
    seconds = st.sampled_from([0.5, 2, 604_800]) | st.floats(-1, 700_000, allow_nan=False)
    reset = st.fixed_dictionaries(
        {"Name": maybe(names), "Step": maybe(names), "Qualifier": st.just("R")}
    )
    action = st.fixed_dictionaries(
        {
            "Name": maybe(names),
            "Step": maybe(names),
            "Qualifier": maybe(qualifiers),
        },
        optional={
            "Interaction": maybe(st.sampled_from(["push_command", "pull_event", "poll"])),
            "TypeId": maybe(st.sampled_from(["t", "u"])),
            "TimeoutSeconds": maybe(st.integers(-1, 700_000)),
            "DurationSeconds": maybe(seconds),
            "MaxAttempts": maybe(st.integers(-1, 120)),
            "Selector": st.fixed_dictionaries(
                {},
                optional={
                    "Subject": st.sampled_from(["x", "", "{jobId}", "{job}", "y-{jobId}"]),
                    "CorrelationId": st.sampled_from(["x", "{jobId}"]),
                },
            ),
            "Hold": command,
            "Restart": command,
        },
    )
    divergence = st.fixed_dictionaries(
        {
            "Name": maybe(names),
            "Type": maybe(st.sampled_from(["simultaneous", "selection", "parallel"])),
            "Branches": maybe(st.lists(st.lists(names, max_size=3), max_size=3)),
        }
    )
    doc = {
        "Steps": draw(st.lists(step, max_size=6)),
        "Transitions": draw(st.lists(transition, max_size=8)),
        "Actions": draw(st.lists(action | reset, max_size=5)),
    }
    if draw(st.booleans()):
        doc["Branches"] = draw(st.lists(divergence, max_size=3))
    return doc


@st.composite
def capabilities(draw: st.DrawFn) -> Capabilities:
    wire = {
        "types": draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "typeId": st.sampled_from(["t", "u", "h", "com.example.push"]),
                        "kind": st.sampled_from(["push", "pull", "hold", "restart"]),
                    },
                    optional={"outcomes": st.lists(st.sampled_from(["ok", "done", "held"]))},
                ),
                max_size=6,
            )
        ),
        "features": draw(
            st.fixed_dictionaries(
                {},
                optional={
                    k: st.booleans()
                    for k in (
                        *("push", "pull", "simultaneous", "selection", "equipmentHold"),
                        *("pulseActions", "timedActions", "storedActions"),
                    )
                },
            )
        ),
    }
    return msgspec.json.decode(json.dumps(wire), type=Capabilities)


@SETTINGS
@given(recipe_shaped(), capabilities())
def test_recipe_shaped_documents_never_raise(doc: dict[str, Any], station: Capabilities) -> None:
    data = json.dumps(doc).encode()
    plain = check(data)
    with_station = check(data, station)
    # the station only adds its own checks
    assert set(plain.errors) <= set(with_station.errors)
    assert {e.code for e in set(with_station.errors) - set(plain.errors)} <= {
        "SFC014",
        "SFC015",
        "SFC016",
        "SFC020",
    }
    for error in plain.errors:
        if error.code != "SFC000":
            assert parent_exists(doc, error.path), error


# -- mutations of valid recipes


def slots(doc: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Every (container, key) of the document, for a mutation to pick from."""
    found: list[tuple[Any, Any]] = []
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            found.append((node, key))
            if isinstance(value, dict | list):
                stack.append(value)
    return found


def part(doc: Any, key: str) -> list[dict[str, Any]]:
    """The objects of a top-level list that earlier mutations left as objects."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def references(doc: dict[str, Any]) -> list[tuple[Any, Any]]:
    refs: list[tuple[Any, Any]] = [
        (t, k) for t in part(doc, "Transitions") for k in ("Source", "Target") if k in t
    ]
    refs += [(a, "Step") for a in part(doc, "Actions") if "Step" in a]
    for d in part(doc, "Branches"):
        sequences = d.get("Branches")
        if isinstance(sequences, list):
            refs += [(q, i) for q in sequences if isinstance(q, list) for i in range(len(q))]
    return refs


def all_names(doc: dict[str, Any]) -> list[str]:
    found = [e.get("Name") for k in ("Steps", "Branches") for e in part(doc, k)]
    return [n for n in found if isinstance(n, str)] + ["ghost"]


MUTATIONS = [
    "qualifier",
    "rename",
    "drop",
    "duplicate",
    "transition",
    "wrong_type",
    "kind",
    "initial",
    "hold",
    "selector",
    "priority",
]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(MUTATIONS))
        everything = slots(doc)
        if kind == "rename" and references(doc):
            node, key = draw(st.sampled_from(references(doc)))
            node[key] = draw(st.sampled_from(all_names(doc)))
        elif kind == "drop" and everything:
            node, key = draw(st.sampled_from(everything))
            del node[key]
        elif kind == "duplicate":
            lists = [k for k in ("Steps", "Transitions", "Actions", "Branches") if part(doc, k)]
            if lists:
                key = draw(st.sampled_from(lists))
                doc[key].append(copy.deepcopy(draw(st.sampled_from(part(doc, key)))))
        elif kind == "transition" and isinstance(doc.get("Transitions"), list):
            doc["Transitions"].append(
                {
                    "Source": draw(st.sampled_from(all_names(doc))),
                    "Target": draw(st.sampled_from(all_names(doc))),
                    "Condition": draw(st.sampled_from(["true", "ok", "done", "error"])),
                    "Priority": draw(st.integers(0, 3)),
                }
            )
        elif kind == "wrong_type" and everything:
            node, key = draw(st.sampled_from(everything))
            node[key] = draw(json_values)
        elif kind == "kind":
            targets = [(e, "Type") for e in part(doc, "Branches")]
            targets += [(a, k) for a in part(doc, "Actions") for k in ("Interaction", "Qualifier")]
            if targets:
                node, key = draw(st.sampled_from(targets))
                node[key] = draw(
                    st.sampled_from(
                        ["selection", "simultaneous", "pull_event", "push_command", "S", "x"]
                    )
                )
        elif kind == "initial" and part(doc, "Steps"):
            draw(st.sampled_from(part(doc, "Steps")))["Initial"] = draw(st.booleans())
        elif kind == "hold" and part(doc, "Actions"):
            action = draw(st.sampled_from(part(doc, "Actions")))
            for field in sorted(draw(st.sets(st.sampled_from(["Hold", "Restart"])))):
                action[field] = draw(
                    st.fixed_dictionaries(
                        {}, optional={"TypeId": st.just("h"), "TimeoutSeconds": st.integers(-1, 2)}
                    )
                )
        elif kind == "selector" and part(doc, "Actions"):
            action = draw(st.sampled_from(part(doc, "Actions")))
            action["Selector"] = {"Subject": draw(st.sampled_from(["{jobId}", "a", "", "{x}"]))}
        elif kind == "qualifier" and part(doc, "Actions"):
            action = draw(st.sampled_from(part(doc, "Actions")))
            action["Qualifier"] = draw(st.sampled_from(["P1", "L", "SD", "R", "DL"]))
            if draw(st.booleans()):
                action["DurationSeconds"] = draw(st.sampled_from([0, 1.5, 10]))
            if action["Qualifier"] == "R" and draw(st.booleans()):
                for field in ("Interaction", "TypeId", "TimeoutSeconds"):
                    action.pop(field, None)
            if draw(st.booleans()) and part(doc, "Steps"):
                draw(st.sampled_from(part(doc, "Steps")))["MinSeconds"] = 2
        elif kind == "priority" and part(doc, "Transitions"):
            draw(st.sampled_from(part(doc, "Transitions")))["Priority"] = draw(st.integers(0, 2))
    return doc


@SETTINGS
@given(mutated(), capabilities())
def test_mutated_valid_recipes_never_raise(doc: dict[str, Any], station: Capabilities) -> None:
    data = json.dumps(doc).encode()
    plain = check(data)
    with_station = check(data, station)
    assert set(plain.errors) <= set(with_station.errors)
    for error in plain.errors:
        if error.code != "SFC000":
            assert parent_exists(doc, error.path), error
    holds = any("Hold" in a or "Restart" in a for a in part(doc, "Actions"))
    v1_1_0 = build(data, dataschema=RECIPE_V1_1_0)
    if not holds:
        # v1.0.0 reads the same chart when it has no Hold or Restart
        older = build(data, dataschema=RECIPE_V1_0_0)
        assert [(e.code, e.path) for e in older.errors] == [(e.code, e.path) for e in v1_1_0.errors]
        assert (older.graph is None) == (v1_1_0.graph is None)
        if older.graph is not None and v1_1_0.graph is not None:
            assert older.graph.recipe_hash == v1_1_0.graph.recipe_hash
    if v1_1_0.graph is not None:
        # v1.2.0 builds every v1.1.0 recipe, to the same graph and hash
        assert plain.graph is not None
        assert plain.graph.recipe_hash == v1_1_0.graph.recipe_hash
        assert plain.graph.actions == v1_1_0.graph.actions


@SETTINGS
@given(st.sampled_from(BASES), st.integers(0, 10))
def test_whitespace_and_key_order_do_not_change_the_hash(doc: dict[str, Any], indent: int) -> None:
    plain = build(json.dumps(doc).encode()).graph
    spaced = build(json.dumps(doc, indent=indent, sort_keys=True).encode()).graph
    assert plain is not None and spaced is not None
    assert plain.recipe_hash == spaced.recipe_hash


# -- valid v1.2.0 recipes


@SETTINGS
@given(built_recipes(qualified_recipe_docs()))
def test_qualified_recipes_build_to_the_graph_their_document_says(built: BuiltRecipe) -> None:
    """built_recipes() asserts that build() accepts every one; here the graph is checked."""
    graph, doc = built.graph, built.doc
    blocks = [a for a in doc["Actions"] if a["Qualifier"] != "R"]
    assert list(graph.actions) == [a["Name"] for a in blocks]
    for a in blocks:
        spec = graph.actions[a["Name"]]
        assert spec.qualifier == a["Qualifier"]
        assert spec.gating == (a["Qualifier"] == "N")
        seconds = a.get("DurationSeconds")
        assert spec.duration_ms == (None if seconds is None else round(seconds * 1000))
    resets: dict[str, list[str]] = {}
    for a in doc["Actions"]:
        if a["Qualifier"] == "R":
            resets.setdefault(a["Step"], []).append(a["Name"])
            assert graph.actions[a["Name"]].qualifier in ("S", "SD", "DS", "SL")
            assert graph.actions[a["Name"]].step != a["Step"]
    assert graph.resets == {step: tuple(names) for step, names in resets.items()}
    assert graph.min_ms == {
        s["Name"]: round(s["MinSeconds"] * 1000) for s in doc["Steps"] if "MinSeconds" in s
    }
    for step, specs in graph.step_actions.items():
        assert [a.name for a in specs] == [b["Name"] for b in blocks if b["Step"] == step]
        assert graph.gating_actions(step) == tuple(a for a in specs if a.gating)
    assert check(built.data).graph == graph


@SETTINGS
@given(qualified_recipe_docs(), capabilities())
def test_a_station_refuses_a_qualified_recipe_only_for_its_own_reasons(
    doc: dict[str, Any], station: Capabilities
) -> None:
    result = check(json.dumps(doc).encode(), station)
    assert {e.code for e in result.errors} <= {"SFC014", "SFC015", "SFC016", "SFC020"}

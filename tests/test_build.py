"""build(): every code SFC000 to SFC026 with its path, a valid counterpart for each, the
Python project's recipes, errors reported together and once, the recipe hash, dataschemas."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from generated.capabilities_v1_1 import Capabilities
from sfc import RECIPE_V1_0_0, RECIPE_V1_1_0, RECIPE_V1_2_0, BuildError, BuildResult, build
from sfc.builder import MAX_DOCUMENT_BYTES, MAX_ELEMENTS
from sfc.interpreter import SfcInterpreter, interpreter_for, known_dataschemas

RECIPES = Path(__file__).parent / "data" / "python_recipes"

# -- builders


def step(name: str, initial: bool = False) -> dict[str, Any]:
    return {"Name": name, "Initial": initial}


def push(name: str, step: str, type_id: str = "t.push", **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": "push_command",
        "TypeId": type_id,
        "TimeoutSeconds": 30,
        **extra,
    }


def pull(name: str, step: str, type_id: str = "t.pull", **extra: Any) -> dict[str, Any]:
    return {**push(name, step, type_id, **extra), "Interaction": "pull_event"}


def tr(source: str, target: str, condition: str = "true", priority: int = 0) -> dict[str, Any]:
    return {"Source": source, "Target": target, "Condition": condition, "Priority": priority}


def div(name: str, kind: str, *sequences: list[str]) -> dict[str, Any]:
    return {"Name": name, "Type": kind, "Branches": [list(s) for s in sequences]}


def recipe(
    steps: list[dict[str, Any]],
    transitions: list[dict[str, Any]],
    actions: list[dict[str, Any]],
    branches: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"Steps": steps, "Transitions": transitions, "Actions": actions}
    if branches is not None:
        doc["Branches"] = branches
    return doc


def chain() -> dict[str, Any]:
    """init (push) -> work (push) -> done (pull)."""
    return recipe(
        [step("init", True), step("work"), step("done")],
        [tr("init", "work"), tr("work", "done")],
        [push("a_init", "init"), push("a_work", "work"), pull("a_done", "done")],
    )


def simultaneous() -> dict[str, Any]:
    """init -> par(a1, a2 | b1) -> final."""
    return recipe(
        [step("init", True), step("a1"), step("a2"), step("b1"), step("final")],
        [tr("init", "par"), tr("par", "final")],
        [push("pa1", "a1"), push("pa2", "a2"), push("pb1", "b1"), push("pf", "final")],
        [div("par", "simultaneous", ["a1", "a2"], ["b1"])],
    )


def selection() -> dict[str, Any]:
    """init -> sel(a1 on ok | b1 by default) -> final."""
    return recipe(
        [step("init", True), step("a1"), step("b1"), step("final")],
        [
            tr("init", "sel"),
            tr("sel", "a1", "ok", 0),
            tr("sel", "b1", "true", 1),
            tr("sel", "final", "true", 2),
        ],
        [push("pi", "init"), push("pa", "a1"), push("pb", "b1"), push("pf", "final")],
        [div("sel", "selection", ["a1"], ["b1"])],
    )


def held(**hold: Any) -> dict[str, Any]:
    """One push action with equipment hold."""
    spec = {
        "Hold": {"TypeId": "t.hold", "TimeoutSeconds": 10},
        "Restart": {"TypeId": "t.restart", "TimeoutSeconds": 60},
    }
    spec.update(hold)
    spec = {k: v for k, v in spec.items() if v is not None}
    return recipe([step("s", True)], [], [push("tighten", "s", "t.tighten", **spec)])


def reset(name: str, step: str) -> dict[str, Any]:
    """An R block: it resets the stored action `name` at the entry of `step`."""
    return {"Name": name, "Step": step, "Qualifier": "R"}


def stored() -> dict[str, Any]:
    """chain() with a stored action clamp (S) started in init and reset in done."""
    return mutate(
        chain(),
        ("Actions.3", push("clamp", "init", "t.clamp", Qualifier="S")),
        ("Actions.4", reset("clamp", "done")),
    )


def enc(doc: dict[str, Any] | bytes) -> bytes:
    return doc if isinstance(doc, bytes) else json.dumps(doc).encode()


def run(doc: dict[str, Any] | bytes, caps: Capabilities | None = None, **kw: Any) -> BuildResult:
    return build(enc(doc), caps, **kw)


def found(result: BuildResult) -> list[tuple[str, str]]:
    return [(e.code, e.path) for e in result.errors]


def caps(*types: tuple[str, str, list[str]], **features: bool) -> Capabilities:
    """Capabilities from their wire form: (typeId, kind, outcomes) and feature flags."""
    wire = {
        "types": [{"typeId": t, "kind": k, "outcomes": o} for t, k, o in types],
        "features": features,
    }
    return msgspec.json.decode(json.dumps(wire), type=Capabilities)


TYPES = [
    ("t.push", "push", ["ok", "nok"]),
    ("t.pull", "pull", ["seen"]),
    ("t.tighten", "push", ["torque_ok"]),
    ("t.hold", "hold", ["held"]),
    ("t.restart", "restart", ["resumed"]),
]


def station(*types: tuple[str, str, list[str]], **features: bool) -> Capabilities:
    return caps(*(types or TYPES), **features)


STATION = station()


DROP = object()


def mutate(base: dict[str, Any], *edits: tuple[str, Any]) -> dict[str, Any]:
    """Copy `base` and set each dotted path (list indexes as numbers; one past the end
    appends) to a value, or delete it with DROP."""
    doc = copy.deepcopy(base)
    for path, value in edits:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        key: Any = int(last) if last.isdigit() else last
        if value is DROP:
            del node[key]
        elif isinstance(node, list) and key == len(node):
            node.append(value)
        else:
            node[key] = value
    return doc


class Case:
    def __init__(
        self,
        code: str,
        path: str,
        bad: dict[str, Any] | bytes,
        good: dict[str, Any] | None = None,
        capabilities: Capabilities | None = None,
        also: tuple[tuple[str, str], ...] = (),
        good_capabilities: Capabilities | str | None = "same",
    ) -> None:
        self.code, self.path, self.bad, self.capabilities = code, path, bad, capabilities
        self.good = chain() if good is None else good
        self.good_capabilities = (
            capabilities if isinstance(good_capabilities, str) else good_capabilities
        )
        self.expected = sorted([(code, path), *also])

    def __repr__(self) -> str:
        return f"{self.code}@{self.path}"


def sel_loop() -> dict[str, Any]:
    """selection() with a loop back from final to the divergence: valid, every node waits."""
    return mutate(selection(), ("Transitions.4", tr("final", "sel", "true")))


# Each case: the code and path a small recipe gives, the only errors it gives (`also` adds
# the ones that are independent of it), and a valid counterpart.
CASES = [
    Case("SFC000", "$", b"{not json"),
    Case("SFC000", "$", b"[1, 2]"),
    Case("SFC000", "$", b'{"Steps": "\xff"}'),  # invalid UTF-8: no JSON, whatever the shape
    Case("SFC000", "$", b"\xff\xfe{}"),
    Case("SFC000", "$", b""),
    Case("SFC000", "$.Steps[0].Name", mutate(chain(), ("Steps.0.Name", 7))),
    Case("SFC000", "$.Transitions", mutate(chain(), ("Transitions", DROP))),
    Case("SFC000", "$.Actions[1].Colour", mutate(chain(), ("Actions.1.Colour", "red"))),
    Case("SFC010", "$.Actions[0].Qualifier", mutate(chain(), ("Actions.0.Qualifier", "X"))),
    Case(
        "SFC000", "$.Actions[0].TimeoutSeconds", mutate(chain(), ("Actions.0.TimeoutSeconds", 1.5))
    ),
    Case("SFC001", "$.Steps", mutate(chain(), ("Steps.0.Initial", False))),
    Case("SFC001", "$.Steps[2].Initial", mutate(chain(), ("Steps.2.Initial", True))),
    Case("SFC002", "$.Steps[3].Name", mutate(chain(), ("Steps.3", step("work")))),
    Case("SFC002", "$.Actions[1].Name", mutate(chain(), ("Actions.1.Name", "a_init"))),
    Case(
        "SFC002",
        "$.Branches[0].Name",
        mutate(simultaneous(), ("Steps.5", step("par"))),
        simultaneous(),
    ),
    Case(
        "SFC002",
        "$.Branches[1].Name",
        mutate(
            simultaneous(),
            ("Steps.5", step("c1")),
            ("Actions.4", push("pc1", "c1")),
            ("Branches.1", div("par", "selection", ["c1"])),
        ),
        simultaneous(),
    ),
    Case("SFC003", "$.Transitions[1].Target", mutate(chain(), ("Transitions.1.Target", "dnoe"))),
    Case("SFC003", "$.Transitions[1].Source", mutate(chain(), ("Transitions.1.Source", "wrok"))),
    Case("SFC003", "$.Actions[2].Step", mutate(chain(), ("Actions.2.Step", "nowhere"))),
    Case(
        "SFC003",
        "$.Actions[0].Step",
        mutate(simultaneous(), ("Actions.0.Step", "par")),
        simultaneous(),
    ),
    Case(
        "SFC003",
        "$.Branches[0].Branches[1][0]",
        mutate(simultaneous(), ("Branches.0.Branches.1.0", "b9")),
        simultaneous(),
        also=(("SFC012", "$.Steps[3]"),),  # b1 is in no sequence now, and nothing leads to it
    ),
    Case(
        "SFC004",
        "$.Branches[0].Type",
        mutate(simultaneous(), ("Branches.0.Type", "parallel")),
        simultaneous(),
    ),
    Case(
        "SFC004",
        "$.Branches[0].Branches",
        mutate(
            simultaneous(),
            ("Branches.0.Branches", []),
            ("Steps", [step("init", True), step("final")]),
            ("Actions", [push("pi", "init")]),
        ),
        simultaneous(),
    ),
    Case(
        "SFC004",
        "$.Branches[0].Branches[2]",
        mutate(simultaneous(), ("Branches.0.Branches.2", [])),
        simultaneous(),
    ),
    Case(
        "SFC005",
        "$.Branches[0].Branches[1][1]",
        mutate(simultaneous(), ("Branches.0.Branches.1", ["b1", "a2"])),
        simultaneous(),
    ),
    Case(
        "SFC005",
        "$.Branches[1].Branches[0][0]",
        mutate(selection(), ("Branches.1", div("par", "simultaneous", ["a1"]))),
        selection(),
        also=(("SFC012", "$.Branches[1]"),),
    ),
    Case(
        "SFC006",
        "$.Transitions[1].Source",
        mutate(simultaneous(), ("Transitions.1.Source", "a2")),
        simultaneous(),
    ),
    Case(
        "SFC006",
        "$.Transitions[2].Target",
        mutate(simultaneous(), ("Transitions.2", tr("final", "a2", "true"))),
        simultaneous(),
    ),
    Case(
        "SFC006",
        "$.Transitions[2].Target",
        mutate(simultaneous(), ("Transitions.2", tr("final", "b1", "true"))),
        simultaneous(),
    ),
    Case(
        "SFC006",
        "$.Transitions[2].Target",
        mutate(simultaneous(), ("Transitions.2", tr("par", "a1", "true", 1))),
        simultaneous(),
    ),
    Case(
        "SFC006",
        "$.Transitions[4].Target",
        mutate(selection(), ("Transitions.4", tr("final", "b1"))),
        selection(),
    ),
    Case(
        "SFC006",
        "$.Steps[1].Initial",
        mutate(simultaneous(), ("Steps.0.Initial", False), ("Steps.1.Initial", True)),
        simultaneous(),
        also=(("SFC012", "$.Steps[0]"),),
    ),
    Case(
        "SFC007",
        "$.Steps[0]",
        mutate(
            chain(),
            ("Transitions.0.Condition", "ok"),
            ("Transitions.2", tr("init", "done", "nok", 1)),
        ),
        mutate(
            chain(),
            ("Transitions.0.Condition", "ok"),
            ("Transitions.2", tr("init", "done", "true", 1)),
        ),
    ),
    Case(
        "SFC007",
        "$.Branches[0]",
        mutate(selection(), ("Transitions.2.Condition", "nok")),
        selection(),
    ),
    Case(
        "SFC007",
        "$.Branches[0].Branches[1]",
        mutate(selection(), ("Transitions.2", tr("sel", "a1", "true", 1))),
        selection(),
    ),
    Case(
        "SFC007",
        "$.Branches[0]",
        mutate(
            simultaneous(),
            ("Transitions.1.Condition", "ok"),
            ("Transitions.2", tr("par", "init", "nok", 1)),
        ),
        mutate(simultaneous(), ("Transitions.2", tr("par", "init", "nok", 1))),
    ),
    Case(
        "SFC007",
        "$.Branches[0]",
        mutate(selection(), ("Transitions", [tr("init", "sel"), tr("sel", "final")])),
        selection(),
    ),
    Case(
        "SFC008",
        "$.Transitions[3].Priority",
        mutate(selection(), ("Transitions.3.Priority", 0)),
        selection(),
    ),
    Case(
        "SFC008",
        "$.Transitions[2].Priority",
        mutate(chain(), ("Transitions.2", tr("work", "init", "nok"))),
        mutate(chain(), ("Transitions.2", tr("work", "init", "nok", 1))),
    ),
    Case("SFC009", "$.Actions[0].Interaction", mutate(chain(), ("Actions.0.Interaction", "push"))),
    Case("SFC009", "$.Actions[0].TimeoutSeconds", mutate(chain(), ("Actions.0.TimeoutSeconds", 0))),
    Case(
        "SFC009",
        "$.Actions[0].TimeoutSeconds",
        mutate(chain(), ("Actions.0.TimeoutSeconds", 604_801)),
        mutate(chain(), ("Actions.0.TimeoutSeconds", 604_800)),
    ),
    Case(
        "SFC009",
        "$.Actions[0].MaxAttempts",
        mutate(chain(), ("Actions.0.MaxAttempts", 0)),
        mutate(chain(), ("Actions.0.MaxAttempts", 1)),
    ),
    Case(
        "SFC009",
        "$.Actions[0].MaxAttempts",
        mutate(chain(), ("Actions.0.MaxAttempts", 101)),
        mutate(chain(), ("Actions.0.MaxAttempts", 100)),
    ),
    Case(
        "SFC009",
        "$.Actions[0].Selector",
        mutate(chain(), ("Actions.0.Selector", {"Subject": "x"})),
        mutate(chain(), ("Actions.2.Selector", {"Subject": "x"})),
    ),
    Case(
        "SFC009",
        "$.Actions[2].Selector.Subject",
        mutate(chain(), ("Actions.2.Selector", {"Subject": ""})),
        mutate(chain(), ("Actions.2.Selector", {})),
    ),
    Case(
        "SFC009",
        "$.Actions[2].Selector.CorrelationId",
        mutate(chain(), ("Actions.2.Selector", {"CorrelationId": "{jobId}-{orderId}"})),
        mutate(chain(), ("Actions.2.Selector", {"CorrelationId": "{jobId}-order"})),
    ),
    Case(
        "SFC009",
        "$.Actions[0].Hold.TimeoutSeconds",
        held(Hold={"TypeId": "t.hold", "TimeoutSeconds": 604_801}),
        held(),
    ),
    Case(
        "SFC010",
        "$.Actions[1].Qualifier",
        mutate(chain(), ("Actions.1.Qualifier", "DL")),
    ),
    Case(
        "SFC011",
        "$.Actions[3].Selector",
        mutate(chain(), ("Actions.3", pull("a_also", "done"))),
        mutate(chain(), ("Actions.3", pull("a_also", "done", "t.other"))),
    ),
    Case(
        "SFC011",
        "$.Actions[2].Selector",
        mutate(
            simultaneous(),
            ("Actions.1", pull("pa2", "a2", Selector={"Subject": "left"})),
            ("Actions.2", pull("pb1", "b1", Selector={"Subject": "{jobId}"})),
        ),
        mutate(
            simultaneous(),
            ("Actions.1", pull("pa2", "a2", Selector={"Subject": "left"})),
            ("Actions.2", pull("pb1", "b1", Selector={"Subject": "right"})),
        ),
    ),
    Case(
        "SFC011",
        "$.Actions[3].Selector",
        mutate(
            chain(),
            ("Actions.2.Selector", {"Subject": "{jobId}", "CorrelationId": "{jobId}"}),
            ("Actions.3", pull("a2", "done", Selector={"Subject": "a", "CorrelationId": "c"})),
        ),
        mutate(
            chain(),
            ("Actions.2.Selector", {"Subject": "b", "CorrelationId": "{jobId}"}),
            ("Actions.3", pull("a2", "done", Selector={"Subject": "a", "CorrelationId": "c"})),
        ),
    ),
    Case(
        "SFC012",
        "$.Steps[3]",
        mutate(chain(), ("Steps.3", step("orphan"))),
        mutate(chain(), ("Steps.3", step("orphan")), ("Transitions.2", tr("done", "orphan"))),
    ),
    Case(
        "SFC012",
        "$.Branches[0]",
        mutate(simultaneous(), ("Transitions.0.Target", "final")),
        simultaneous(),
    ),
    Case(
        "SFC013",
        "$.Transitions[0]",
        recipe([step("a", True), step("b")], [tr("a", "b"), tr("b", "a")], []),
        recipe([step("a", True), step("b")], [tr("a", "b"), tr("b", "a")], [pull("w", "b")]),
    ),
    Case(
        "SFC013",
        "$.Transitions[0]",
        recipe([step("a", True)], [tr("a", "a")], []),
        recipe([step("a", True)], [tr("a", "a")], [push("w", "a")]),
    ),
    Case(
        "SFC013",
        "$.Transitions[3]",
        mutate(sel_loop(), ("Actions", [push("pa", "a1")])),
        sel_loop(),
    ),
    Case(
        "SFC014",
        "$.Actions[0].TypeId",
        mutate(chain(), ("Actions.0.TypeId", "t.unknown")),
        chain(),
        STATION,
    ),
    Case(
        "SFC014",
        "$.Actions[0].TypeId",
        mutate(chain(), ("Actions.0.TypeId", "t.pull")),
        chain(),
        STATION,
    ),
    Case(
        "SFC014",
        "$.Actions[0].Hold.TypeId",
        held(Hold={"TypeId": "t.nohold", "TimeoutSeconds": 5}),
        held(),
        STATION,
    ),
    Case(
        "SFC014",
        "$.Actions[0].Restart.TypeId",
        held(Restart={"TypeId": "t.hold", "TimeoutSeconds": 5}),
        held(),
        STATION,
    ),
    Case(
        "SFC015",
        "$.Actions[0].Interaction",
        chain(),
        chain(),
        station(push=False),
        also=(("SFC015", "$.Actions[1].Interaction"),),
        good_capabilities=STATION,
    ),
    Case(
        "SFC015",
        "$.Actions[2].Interaction",
        chain(),
        chain(),
        station(pull=False),
        good_capabilities=STATION,
    ),
    Case(
        "SFC015",
        "$.Branches[0].Type",
        simultaneous(),
        simultaneous(),
        station(simultaneous=False),
        good_capabilities=STATION,
    ),
    Case(
        "SFC015",
        "$.Branches[0].Type",
        selection(),
        selection(),
        station(selection=False),
        good_capabilities=STATION,
    ),
    Case(
        "SFC015",
        "$.Actions[0].Hold",
        held(),
        held(),
        station(equipmentHold=False),
        good_capabilities=STATION,
    ),
    Case(
        "SFC016",
        "$.Transitions[0].Condition",
        mutate(chain(), ("Transitions.0.Condition", "okay")),
        mutate(chain(), ("Transitions.0.Condition", "ok")),
        STATION,
    ),
    Case(
        "SFC016",
        "$.Transitions[1].Condition",
        mutate(chain(), ("Transitions.1.Condition", "seen")),
        mutate(chain(), ("Transitions.1.Condition", "timeout")),
        STATION,
    ),
    Case(
        "SFC016",
        "$.Transitions[1].Condition",
        mutate(selection(), ("Actions.0.TypeId", "t.tighten")),
        selection(),
        STATION,
    ),
    Case(
        "SFC016",
        "$.Transitions[0].Condition",
        mutate(held(), ("Transitions", [tr("s", "s", "ok")])),
        mutate(held(), ("Transitions", [tr("s", "s", "resumed")])),
        STATION,
    ),
    Case(
        "SFC017",
        "$.Steps[2].Name",
        mutate(chain(), ("Steps.2.Name", ""), ("Transitions.1.Target", ""), ("Actions.2.Step", "")),
    ),
    Case("SFC017", "$.Actions[0].Name", mutate(chain(), ("Actions.0.Name", "station:a"))),
    Case("SFC017", "$.Actions[0].Name", mutate(chain(), ("Actions.0.Name", ""))),
    Case(
        "SFC017",
        "$.Branches[0].Name",
        mutate(
            simultaneous(),
            ("Branches.0.Name", ""),
            ("Transitions.0.Target", ""),
            ("Transitions.1.Source", ""),
        ),
        simultaneous(),
    ),
    Case(
        "SFC019",
        "$.Actions[0].Hold",
        mutate(held(), ("Actions.0.Interaction", "pull_event")),
        held(),
        also=(("SFC019", "$.Actions[0].Restart"),),
    ),
    Case("SFC019", "$.Actions[0].Restart", held(Restart=None), held()),
    Case("SFC019", "$.Actions[0].Hold", held(Hold=None), held()),
    Case("SFC019", "$.Actions[0].Hold.TypeId", held(Hold={"TimeoutSeconds": 10}), held()),
    Case(
        "SFC019",
        "$.Actions[0].Restart.TimeoutSeconds",
        held(Restart={"TypeId": "t.restart", "TimeoutSeconds": 0}),
        held(),
    ),
    Case(
        "SFC019",
        "$.Actions[0].Restart.TimeoutSeconds",
        held(Restart={"TypeId": "t.restart"}),
        held(),
    ),
    Case(
        "SFC020",
        "$.Actions[0].Hold.TypeId",
        held(),
        held(),
        station(
            ("t.tighten", "push", []), ("t.hold", "hold", ["busy"]), ("t.restart", "restart", [])
        ),
        good_capabilities=STATION,
    ),
    # -- recipe v1.2.0: the qualifiers (docs/qualifiers.md)
    Case(
        "SFC021",
        "$.Actions[3].Name",
        mutate(chain(), ("Actions.3", reset("clamp", "done"))),
        stored(),
    ),
    Case(
        "SFC021",
        "$.Actions[3].Name",
        mutate(chain(), ("Actions.3", reset("a_init", "done"))),
        stored(),
    ),
    Case(
        "SFC022",
        "$.Actions[4].Name",
        mutate(stored(), ("Actions.4.Step", "init")),
        stored(),
    ),
    Case(
        "SFC023",
        "$.Actions[1].Qualifier",
        mutate(chain(), ("Actions.1.Qualifier", "L")),
        mutate(chain(), ("Actions.1.Qualifier", "L"), ("Actions.1.DurationSeconds", 2)),
    ),
    Case(
        "SFC023",
        "$.Actions[1].DurationSeconds",
        mutate(chain(), ("Actions.1.DurationSeconds", 2)),
        mutate(chain(), ("Actions.1.Qualifier", "D"), ("Actions.1.DurationSeconds", 2)),
    ),
    Case(
        "SFC024",
        "$.Actions[2].Qualifier",
        mutate(chain(), ("Actions.2.Qualifier", "P1")),
        mutate(chain(), ("Actions.1.Qualifier", "P1")),
    ),
    Case(
        "SFC025",
        "$.Actions[0].Hold",
        mutate(held(), ("Actions.0.Qualifier", "S")),
        held(),
    ),
    Case(
        "SFC026",
        "$.Actions[4].TypeId",
        mutate(stored(), ("Actions.4.TypeId", "t.clamp")),
        stored(),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_small_recipe_gives_the_code_at_its_path_and_nothing_else(case: Case) -> None:
    result = run(case.bad, case.capabilities)
    assert result.graph is None
    assert not result.ok
    assert sorted(found(result)) == case.expected


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_the_counterpart_of_each_case_builds(case: Case) -> None:
    result = run(case.good, case.good_capabilities)
    assert result.errors == ()
    assert result.ok and result.graph is not None


def test_every_code_of_the_table_has_a_case() -> None:
    covered = {c.code for c in CASES} | {"SFC018"}  # SFC018: test_sfc018_*
    assert covered == {f"SFC{n:03d}" for n in range(27)}


# -- limits (SFC018, SFC000 size and depth)


def long_chain(steps: int, transitions: int | None = None) -> dict[str, Any]:
    names = [f"s{i}" for i in range(steps)]
    links = [tr(a, b) for a, b in itertools.pairwise(names)]
    if transitions is not None:
        links += [tr(names[-1], names[0], f"again{i}", i) for i in range(transitions - len(links))]
    return recipe(
        [step(n, i == 0) for i, n in enumerate(names)],
        links,
        [push(f"a{i}", n) for i, n in enumerate(names[:10])],
    )


def test_sfc018_above_20000_steps_is_refused_alone() -> None:
    result = run(long_chain(MAX_ELEMENTS + 1))
    assert found(result) == [("SFC018", "$.Steps")]
    assert "20,001 steps" in result.errors[0].message
    assert "20,000" in result.errors[0].message


def test_sfc018_above_20000_transitions_is_refused() -> None:
    result = run(long_chain(10, transitions=MAX_ELEMENTS + 1))
    assert found(result) == [("SFC018", "$.Transitions")]


def test_sfc018_counterpart_exactly_20000_steps_builds() -> None:
    result = run(long_chain(MAX_ELEMENTS))
    assert result.graph is not None
    assert len(result.graph.steps) == MAX_ELEMENTS


def padded(doc: dict[str, Any], size: int) -> bytes:
    data = enc(doc)
    return data + b" " * (size - len(data))


def test_a_document_above_16_mib_is_refused_before_decoding() -> None:
    result = run(padded(chain(), MAX_DOCUMENT_BYTES + 1))
    assert found(result) == [("SFC000", "$")]
    assert "16 MiB" in result.errors[0].message
    assert "16,777,217 bytes" in result.errors[0].message


def test_a_document_of_exactly_16_mib_is_decoded() -> None:
    assert run(padded(chain(), MAX_DOCUMENT_BYTES)).ok


@pytest.mark.parametrize("depth", [100_000, 3_000])
def test_deeply_nested_parameters_are_sfc000_not_a_recursion_error(depth: int) -> None:
    nested = "[" * depth + "]" * depth
    data = enc(chain()).replace(
        b'"a_init",', b'"a_init", "Parameters": {"x": ' + nested.encode() + b"},", 1
    )
    result = run(data)
    assert [e.code for e in result.errors] == ["SFC000"]


# -- messages


def test_messages_name_the_elements_for_a_plant_engineer() -> None:
    doc = recipe(
        [step("Init", True), step("Packing")],
        [tr("Init", "Packing"), tr("Init", "Pack", "rejected", 1)],
        [push("wrap", "Packing")],
    )
    (error,) = run(doc).errors
    assert error == BuildError(
        "SFC003",
        "$.Transitions[1].Target",
        'transition "Init -> Pack" targets "Pack", which is neither a step nor a divergence',
    )
    assert str(error) == (
        'SFC003 $.Transitions[1].Target: transition "Init -> Pack" targets "Pack", '
        "which is neither a step nor a divergence"
    )


@pytest.mark.parametrize(
    ("case", "words"),
    [
        (mutate(chain(), ("Actions.1.Qualifier", "DL")), ["'DL'", "qualifiers: N, R, S"]),
        (mutate(chain(), ("Actions.0.TimeoutSeconds", 0)), ['"a_init"', "1 to 604800"]),
        (
            mutate(selection(), ("Transitions.3.Priority", 0)),
            ['"sel -> final"', '"sel -> a1"', "priority 0"],
        ),
        (mutate(chain(), ("Steps.3", step("orphan"))), ['step "orphan"', 'initial step "init"']),
        (
            mutate(chain(), ("Actions.3", pull("a_also", "done"))),
            ['"a_done"', '"a_also"', '"t.pull"', "{jobId}"],
        ),
        (held(Restart=None), ['"tighten"', "Hold", "no Restart"]),
        (
            mutate(simultaneous(), ("Branches.0.Branches.1", ["b1", "a2"])),
            ['step "a2"', 'divergence "par"'],
        ),
    ],
)
def test_a_message_names_what_is_wrong(case: dict[str, Any], words: list[str]) -> None:
    (error,) = run(case).errors
    for word in words:
        assert word in error.message


def test_a_decoder_error_is_readable() -> None:
    (error,) = run(mutate(chain(), ("Steps.0.Name", 7))).errors
    assert error.message == "expected a string, got a whole number"
    (error,) = run(b"[]").errors
    assert "JSON object" in error.message and "a list" in error.message
    (error,) = run(mutate(chain(), ("Transitions", DROP))).errors
    assert error.message == "the required field Transitions is missing"
    (error,) = run(mutate(chain(), ("Actions.0.Qualifier", "X"))).errors
    assert "'X'" in error.message and "N, R, S" in error.message


# -- errors are reported together, and once


def test_three_independent_problems_give_three_errors() -> None:
    doc = mutate(
        chain(),
        ("Actions.0.Qualifier", "L"),
        ("Actions.2.TimeoutSeconds", 0),
        ("Transitions.2", tr("work", "init", "nok")),
    )
    assert sorted(found(run(doc))) == [
        ("SFC008", "$.Transitions[2].Priority"),
        ("SFC009", "$.Actions[2].TimeoutSeconds"),
        ("SFC023", "$.Actions[0].Qualifier"),
    ]


def test_a_typo_in_a_target_does_not_make_the_meant_step_unreachable() -> None:
    doc = mutate(chain(), ("Transitions.1.Target", "dnoe"))
    assert found(run(doc)) == [("SFC003", "$.Transitions[1].Target")]


def test_a_typo_in_a_source_does_not_make_its_target_unreachable() -> None:
    doc = mutate(chain(), ("Transitions.1.Source", "wrok"))
    assert found(run(doc)) == [("SFC003", "$.Transitions[1].Source")]


def test_an_unreachable_divergence_is_reported_once_not_per_step() -> None:
    doc = mutate(simultaneous(), ("Transitions.0.Target", "final"))
    (error,) = run(doc).errors
    assert (error.code, error.path) == ("SFC012", "$.Branches[0]")
    assert '"a1", "a2", "b1"' in error.message


def test_no_initial_step_gives_sfc001_and_no_reachability_errors() -> None:
    doc = mutate(chain(), ("Steps.0.Initial", False))
    assert found(run(doc)) == [("SFC001", "$.Steps")]


def test_a_divergence_of_unknown_type_gives_no_errors_for_its_transitions() -> None:
    doc = mutate(selection(), ("Branches.0.Type", "choice"))
    assert found(run(doc)) == [("SFC004", "$.Branches[0].Type")]


def test_an_undeclared_type_gives_sfc014_but_no_sfc016_for_its_step() -> None:
    doc = mutate(chain(), ("Actions.0.TypeId", "t.unknown"), ("Transitions.0.Condition", "okay"))
    assert found(run(doc, STATION)) == [("SFC014", "$.Actions[0].TypeId")]


def test_a_feature_that_is_off_gives_sfc015_but_no_sfc014() -> None:
    doc = mutate(chain(), ("Actions.0.TypeId", "t.unknown"))
    result = run(doc, station(push=False))
    assert found(result) == [
        ("SFC015", "$.Actions[0].Interaction"),
        ("SFC015", "$.Actions[1].Interaction"),
    ]


def test_each_wait_that_is_not_told_apart_is_reported_once() -> None:
    doc = mutate(
        chain(),
        ("Actions.3", pull("second", "done")),
        ("Actions.4", pull("third", "done")),
    )
    assert found(run(doc)) == [
        ("SFC011", "$.Actions[3].Selector"),
        ("SFC011", "$.Actions[4].Selector"),
    ]


def test_building_twice_gives_the_same_errors() -> None:
    doc = enc(mutate(selection(), ("Transitions.3.Priority", 0), ("Actions.0.Qualifier", "L")))
    assert build(doc).errors == build(doc).errors


# -- the Python project's recipes


@pytest.mark.parametrize(
    "name",
    [
        "EngineBasic",
        "SimultaneousBranch",
        "SelectionBranch",
        "MinimalRecipe",
        "RearAxleFitting",
        "ActionFreeCascade",
        "GreetingsDemo",
        "RecipeWithoutBranches",
        "SimultaneousNoExit",
    ],
)
def test_the_converted_python_recipes_are_valid(name: str) -> None:
    data = (RECIPES / f"{name}.json").read_bytes()
    result = build(data)
    assert result.errors == ()
    assert result.graph is not None
    assert set(result.graph.steps) == {s["Name"] for s in json.loads(data)["Steps"]}
    assert build(data, dataschema=RECIPE_V1_0_0).ok


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NoInitialStep", [("SFC001", "$.Steps")]),
        # No SFC012: without an initial step nothing can be called unreachable.
        ("SelectionNoEntryTransitions", [("SFC001", "$.Steps"), ("SFC007", "$.Branches[0]")]),
        ("MsgpackRoundtrip", [("SFC003", "$.Transitions[0].Target")]),
        ("WorkMasterStub", [("SFC000", "$.Transitions")]),
        # Its actions are all P; v1.2.0 runs P, but not on a pull event.
        ("SimultaneousBranch.orig", [("SFC024", "$.Actions[4].Qualifier")]),
    ],
)
def test_the_python_recipes_that_are_refused(name: str, expected: list[tuple[str, str]]) -> None:
    assert found(build((RECIPES / f"{name}.json").read_bytes())) == expected


def test_a_v1_1_0_recipe_with_p_actions_is_refused_for_each() -> None:
    data = (RECIPES / "SimultaneousBranch.orig.json").read_bytes()
    expected = [("SFC010", f"$.Actions[{i}].Qualifier") for i in range(5)]
    assert found(build(data, dataschema=RECIPE_V1_1_0)) == expected


def test_msgpack_roundtrip_also_needs_a_declared_done_with_capabilities() -> None:
    data = (RECIPES / "MsgpackRoundtrip.json").read_bytes()
    result = build(data, caps(("com.example.evt.v1", "pull", [])))
    assert found(result) == [
        ("SFC003", "$.Transitions[0].Target"),
        ("SFC016", "$.Transitions[0].Condition"),
    ]
    assert build(data, caps(("com.example.evt.v1", "pull", ["done"]))).errors[1:] == ()


REAR_AXLE_STATION = caps(
    ("com.example.station.position.v1", "push", []),
    ("com.example.station.tighten.v1", "push", ["torque_ok", "torque_nok"]),
    ("com.example.station.qa_result.v1", "pull", ["ok", "nok"]),
    ("com.example.station.torque_result.v1", "pull", ["torque_ok"]),
)


def test_rear_axle_fitting_builds_for_a_station_that_declares_torque_ok() -> None:
    data = (RECIPES / "RearAxleFitting.json").read_bytes()
    assert build(data, REAR_AXLE_STATION).ok


def test_rear_axle_fitting_needs_torque_ok_declared_by_the_torque_result_type() -> None:
    data = (RECIPES / "RearAxleFitting.json").read_bytes()
    station = caps(
        ("com.example.station.position.v1", "push", []),
        ("com.example.station.tighten.v1", "push", ["torque_ok"]),
        ("com.example.station.qa_result.v1", "pull", ["ok"]),
        ("com.example.station.torque_result.v1", "pull", ["in_spec"]),
    )
    (error,) = build(data, station).errors
    assert (error.code, error.path) == ("SFC016", "$.Transitions[2].Condition")
    assert '"torque_ok"' in error.message and 'step "VerifyTorque"' in error.message


# -- capabilities


def test_without_capabilities_any_type_and_any_outcome_is_accepted() -> None:
    doc = mutate(
        chain(),
        ("Actions.0.TypeId", "anything.at.all"),
        ("Transitions.1.Condition", "whatever_the_recipe_says"),
        ("Actions.0.Hold", {"TypeId": "h", "TimeoutSeconds": 1}),
        ("Actions.0.Restart", {"TypeId": "r", "TimeoutSeconds": 1}),
    )
    assert run(doc).ok


@pytest.mark.parametrize("outcome", ["timeout", "error"])
def test_reserved_outcomes_are_always_allowed(outcome: str) -> None:
    doc = mutate(chain(), ("Transitions.1.Condition", outcome))
    assert run(doc, station(("t.push", "push", []), ("t.pull", "pull", []))).ok


@pytest.mark.parametrize(
    ("condition", "meant"),
    [
        ("Error", "error"),
        ("ERROR", "error"),
        ("Timeout", "timeout"),
        ("TimeOut", "timeout"),
        ("timed_out", "timeout"),
        ("time-out", "timeout"),
        ("TIMED_OUT", "timeout"),
    ],
)
def test_a_reserved_outcome_spelled_otherwise_is_refused_with_or_without_capabilities(
    condition: str, meant: str
) -> None:
    """The core's own outcomes are compared exactly: `"Error"` would never match, and the
    job would fault where the recipe meant to route (as `"TRUE"`, SFC009)."""
    doc = mutate(chain(), ("Transitions.1.Condition", condition))
    for capabilities in (None, station(("t.push", "push", []), ("t.pull", "pull", []))):
        errors = [e for e in run(doc, capabilities).errors if e.code == "SFC009"]
        assert [e.path for e in errors] == ["$.Transitions[1].Condition"]
        assert f'the condition "{condition}"; did you mean "{meant}"?' in errors[0].message
    assert run(mutate(chain(), ("Transitions.1.Condition", meant))).ok


def test_done_is_allowed_for_a_push_command_but_not_for_a_pull_event() -> None:
    station_ = station(("t.push", "push", []), ("t.pull", "pull", []))
    assert run(mutate(chain(), ("Transitions.0.Condition", "done")), station_).ok
    done_after_pull = mutate(chain(), ("Transitions.2", tr("done", "init", "done")))
    assert found(run(done_after_pull, station_)) == [("SFC016", "$.Transitions[2].Condition")]


def test_an_exit_sees_the_outcomes_of_every_sequence() -> None:
    doc = mutate(
        simultaneous(),
        ("Actions.2", pull("pb1", "b1")),
        ("Transitions.1.Condition", "seen"),
        ("Transitions.2", tr("par", "init", "true", 1)),
    )
    assert run(doc, STATION).ok
    doc = mutate(doc, ("Transitions.1.Condition", "torque_ok"))
    assert found(run(doc, STATION)) == [("SFC016", "$.Transitions[1].Condition")]


def test_a_selection_transition_sees_the_outcomes_of_the_step_before_the_divergence() -> None:
    assert run(selection(), STATION).ok  # "ok" is an outcome of init's t.push
    doc = mutate(selection(), ("Actions.0", pull("pi", "init")))
    assert found(run(doc, STATION)) == [("SFC016", "$.Transitions[1].Condition")]


def test_capabilities_declaring_a_type_under_another_kind_say_so() -> None:
    (error,) = run(mutate(chain(), ("Actions.0.TypeId", "t.pull")), STATION).errors
    assert "push" in error.message and "has it as pull" in error.message


# -- selector rule and loops, more shapes


def test_waits_in_sequences_of_a_selection_divergence_never_wait_together() -> None:
    doc = mutate(selection(), ("Actions.1", pull("pa", "a1")), ("Actions.2", pull("pb", "b1")))
    assert run(doc).ok


def test_waits_in_one_sequence_follow_each_other() -> None:
    doc = mutate(simultaneous(), ("Actions.0", pull("pa1", "a1")), ("Actions.1", pull("pa2", "a2")))
    assert run(doc).ok


def test_a_selector_with_jobid_in_both_fields_separates_nothing() -> None:
    sel = {"Subject": "{jobId}", "CorrelationId": "order-{jobId}"}
    doc = mutate(
        chain(), ("Actions.2.Selector", sel), ("Actions.3", pull("b", "done", Selector=sel))
    )
    assert found(run(doc)) == [("SFC011", "$.Actions[3].Selector")]


def test_a_literal_in_one_field_does_not_separate_a_wait_that_leaves_it_open() -> None:
    doc = mutate(
        chain(),
        ("Actions.2.Selector", {"Subject": "left"}),
        ("Actions.3", pull("b", "done", Selector={"CorrelationId": "c"})),
    )
    assert found(run(doc)) == [("SFC011", "$.Actions[3].Selector")]


def test_a_simultaneous_divergence_waits_when_one_sequence_has_an_action() -> None:
    doc = mutate(
        simultaneous(),
        ("Actions", [push("pb1", "b1")]),
        ("Transitions.2", tr("par", "init", "true", 1)),
    )
    assert run(doc).ok


def test_a_simultaneous_divergence_of_action_free_sequences_loops_without_a_wait() -> None:
    doc = mutate(simultaneous(), ("Actions", []), ("Transitions.2", tr("par", "init", "true", 1)))
    (error,) = run(doc).errors
    assert (error.code, error.path) == ("SFC013", "$.Transitions[0]")
    assert '"init", "par"' in error.message


def test_an_action_free_step_outside_a_loop_is_fine() -> None:
    assert run(mutate(chain(), ("Actions", [push("a", "work")]))).ok


# -- the graph, the hash, the dataschema


def test_the_graph_holds_the_indexes() -> None:
    graph = run(selection()).graph
    assert graph is not None
    assert graph.initial == "init"
    assert graph.dataschema == RECIPE_V1_2_0
    spec = graph.divergences["sel"]
    assert [t.target for t in spec.entries] == ["a1", "b1"]
    assert [t.target for t in spec.exits] == ["final"]
    assert graph.position["b1"].sequence == 1


def test_the_hash_ignores_whitespace_key_order_and_written_defaults() -> None:
    doc = mutate(chain(), ("Actions.0.Parameters", {"b": 1, "a": [1, {"y": 2, "x": 3}]}))
    plain = run(doc).graph
    assert plain is not None
    assert len(plain.recipe_hash) == 64
    int(plain.recipe_hash, 16)
    reordered = json.dumps({k: doc[k] for k in reversed(doc)}, indent=4, sort_keys=True).encode()
    assert run(reordered).graph.recipe_hash == plain.recipe_hash  # type: ignore[union-attr]
    without_defaults = mutate(doc, ("Steps.1.Initial", DROP), ("Transitions.0.Priority", DROP))
    assert run(without_defaults).graph.recipe_hash == plain.recipe_hash  # type: ignore[union-attr]
    v1_0_0 = run(doc, dataschema=RECIPE_V1_0_0).graph
    assert v1_0_0 is not None and v1_0_0.recipe_hash == plain.recipe_hash


def test_the_hash_changes_with_the_recipe() -> None:
    a = run(chain()).graph
    b = run(mutate(chain(), ("Actions.0.TimeoutSeconds", 31))).graph
    assert a is not None and b is not None and a.recipe_hash != b.recipe_hash


def test_a_v1_0_0_recipe_with_hold_is_refused_naming_the_field() -> None:
    result = run(held(), dataschema=RECIPE_V1_0_0)
    (error,) = result.errors
    assert (error.code, error.path) == ("SFC000", "$.Actions[0].Hold")
    assert "Hold" in error.message and "v1.1.0" in error.message
    assert run(held(), dataschema=RECIPE_V1_1_0).ok


def test_a_v1_0_0_recipe_builds_a_graph_of_its_dataschema() -> None:
    graph = run(simultaneous(), dataschema=RECIPE_V1_0_0).graph
    assert graph is not None and graph.dataschema == RECIPE_V1_0_0


def test_an_unknown_dataschema_is_sfc000_naming_it() -> None:
    (error,) = run(chain(), dataschema="https://example.com/recipe/v9/").errors
    assert (error.code, error.path) == ("SFC000", "$")
    assert "https://example.com/recipe/v9/" in error.message
    assert RECIPE_V1_1_0 in error.message


def test_the_dataschema_picks_the_interpreter() -> None:
    assert known_dataschemas() == (RECIPE_V1_0_0, RECIPE_V1_1_0, RECIPE_V1_2_0)
    for uri in (RECIPE_V1_0_0, RECIPE_V1_1_0, RECIPE_V1_2_0):
        interpreter = interpreter_for(uri)
        assert isinstance(interpreter, SfcInterpreter)
        assert interpreter.dataschemas == (uri,)
        assert uri.endswith("/")
    assert interpreter_for(RECIPE_V1_1_0.rstrip("/")) is None
    result = interpreter_for(RECIPE_V1_0_0).build(enc(held()))  # type: ignore[union-attr]
    assert [e.code for e in result.errors] == ["SFC000"]


def test_build_accepts_any_bytes_like_input() -> None:
    data = enc(chain())
    assert build(bytearray(data)).ok
    assert build(memoryview(data)).ok  # type: ignore[arg-type]


def test_a_misspelt_reference_gets_a_suggestion_and_a_far_one_does_not():
    doc = {
        "Steps": [{"Name": "Init", "Initial": True}, {"Name": "Fill"}],
        "Transitions": [
            {"Source": "Init", "Target": "Fil", "Condition": "true"},
            {"Source": "Fill", "Target": "Xyzzy", "Condition": "true"},
        ],
        "Actions": [],
    }
    errors = build(msgspec.json.encode(doc)).errors
    messages = {e.path: e.message for e in errors if e.code == "SFC003"}
    assert messages["$.Transitions[0].Target"].endswith('; did you mean "Fill"?')
    assert "did you mean" not in messages["$.Transitions[1].Target"]

"""Properties of the simulation and what reads its results, over random valid recipes
(tests/strategies.py) and random simulation scripts.

A script is drawn as a wire document (a dict): a `default` reply, `replies` for some of the
recipe's actions (and NAME:hold / NAME:restart for actions with hold logic) in the grammar
`silent | error[:text][@delayMs] | outcome[@delayMs]` with outcomes from the recipe's
conditions, `events` of the recipe's awaited types that do or do not match a selector, and
`controls`: operator hold, release and cancel at random times and outages that may touch but
never overlap. It is encoded and loaded with `load_script(bytes, graph)`, as the command line
does.

0. load_script refuses a script exactly when it was drawn with a flaw, and only with
   ScriptError (the documented refusal);
1. Simulation.run() never raises and ends completed, faulted, cancelled, time_limit or
   evaluation_limit, within its limits;
2. the JSON result validates against schemas/dryrun_result_v1_2.json and decodes back with
   from_json to an equal DryRunResult;
3. to_text never raises and has one line per transcript entry, then the end line;
4. explain of the recipe names every step; explain of the job's state before the run,
   after every evaluation (Simulation.step) and at the end never raises and names every
   active step of that state;
5. render of the recipe and of each of those states, as Mermaid and as DOT, never raises
   and names every step;
6. the same recipe and script give byte-identical JSON, also when the first k evaluations
   were taken one step at a time with a look at the state in between.

Step and divergence names are renamed from the generator's `s3` and `d1` to `step_03` and
`div_01`: the renderers use `s3` and `d1` as node ids, so "the name appears in the output"
would hold for the old names whatever the labels said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from generated.dryrun_result_v1_2 import DryRunResult
from generated.simulation_script_v1_0 import SimulationScript
from generated.state_v1_5 import SfcState
from sfc.explain import explain
from sfc.graph import RESERVED_OUTCOMES, Graph
from sfc.render import FORMATS, render
from sfc.simulation import ScriptError, Simulation, load_script
from sfc.transcript import from_json, lines, to_json, to_text
from tests.strategies import BuiltRecipe, built_recipes, recipe_docs
from tests.wire import validator

TIME_LIMIT_MS = 10 * 60 * 1000
"""Ten minutes of virtual time: long enough for loops, retries, holds and outages."""
EVALUATION_LIMIT = 500
"""Enough for loops to hit it; jsonschema takes about 1.5 ms per transcript entry."""
ENDS = ("completed", "faulted", "cancelled", "time_limit", "evaluation_limit")
JOB_IDS = ("job-1", "line:4#7", "Jöb-😀")
"""Job ids may contain ':' and '#' (keys are split at the last one) and any printable text."""

PROPERTY = settings(max_examples=60, deadline=None)

# ------------------------------------------------------------------------------ recipes

_STEP = re.compile(r"s(\d+)")
_DIVERGENCE = re.compile(r"d(\d+)")


def _rename(doc: dict[str, Any]) -> dict[str, Any]:
    """`s3` -> `step_03`, `d1` -> `div_01` everywhere a node is named (see the docstring)."""

    def node(name: str) -> str:
        if m := _STEP.fullmatch(name):
            return f"step_{int(m[1]):02d}"
        if m := _DIVERGENCE.fullmatch(name):
            return f"div_{int(m[1]):02d}"
        raise AssertionError(f"unexpected node name {name!r}")

    out: dict[str, Any] = {
        "Steps": [{**s, "Name": node(s["Name"])} for s in doc["Steps"]],
        "Transitions": [
            {**t, "Source": node(t["Source"]), "Target": node(t["Target"])}
            for t in doc["Transitions"]
        ],
        "Actions": [{**a, "Step": node(a["Step"])} for a in doc["Actions"]],
    }
    if "Branches" in doc:
        out["Branches"] = [
            {
                **b,
                "Name": node(b["Name"]),
                "Branches": [[node(s) for s in q] for q in b["Branches"]],
            }
            for b in doc["Branches"]
        ]
    return out


RECIPES = built_recipes(recipe_docs().map(_rename))

# ------------------------------------------------------------------------------ scripts

DEFAULTS = (
    "ok@1000",
    "ok",
    "ok@4000",
    "silent",
    "error",
    "error:x@5",
    "nok@100",
    "held",
    "done@2500",
    "retry@7000",
)
"""The script's default reply, when it has one (else `ok`)."""
HOLD_OUTCOMES = ("held", "held", "busy")
ERROR_TEXTS = ("", "jammed", "x y", "a:b")
DELAYS = (0, 0, 1, 500, 999, 1000, 3000, 6000, 61_000)


def _time(draw: st.DrawFn) -> int:
    """A moment of the run: mostly early, where most jobs are; sometimes past the limit."""
    return draw(
        st.one_of(
            st.sampled_from((1, 0, 500, 999, 1000, 2500, 5000, 30_000)),
            st.integers(0, 10_000),
            st.integers(0, 120_000),
            st.integers(0, TIME_LIMIT_MS + 60_000),
        )
    )


def _outcomes(graph: Graph) -> list[str]:
    """The recipe's condition alphabet without the reserved outcomes, plus `done`."""
    conditions = {t.condition for t in graph.transitions} - set(RESERVED_OUTCOMES)
    return sorted(conditions | {"done"})


def _reply(draw: st.DrawFn, outcomes: list[str]) -> str:
    kind = draw(st.sampled_from(("outcome", "outcome", "outcome", "silent", "error")))
    if kind == "silent":
        return "silent"
    delay = draw(st.sampled_from(DELAYS))
    at = f"@{delay}" if delay or draw(st.booleans()) else ""
    if kind == "error":
        text = draw(st.sampled_from((None, *ERROR_TEXTS)))
        return ("error" if text is None else f"error:{text}") + at
    return draw(st.sampled_from(outcomes)) + at


def _hold_reply(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(("outcome", "outcome", "silent", "error")))
    if kind == "silent":
        return "silent"
    delay = draw(st.sampled_from(DELAYS))
    at = f"@{delay}" if delay else ""
    if kind == "error":
        return "error:cannot hold" + at
    return draw(st.sampled_from(HOLD_OUTCOMES)) + at


def _selector_value(draw: st.DrawFn, selector: str | None, job_id: str) -> str | None:
    """A value for a selector field: the one that matches, another one, or none."""
    options: list[str | None] = [None, "left", "nobody", job_id]
    if selector is not None:
        options += [selector.replace("{jobId}", job_id)] * 3
    return draw(st.sampled_from(options))


FLAWS = (
    "unknown action",
    "hold key without hold logic",
    "unknown suffix",
    "reserved outcome",
    "malformed reply",
    "malformed default",
    "overlapping outages",
    "negative time",
    "empty outage",
    "unknown key",
)


@dataclass(frozen=True)
class Case:
    recipe: BuiltRecipe
    job_id: str
    script: dict[str, Any]
    flaw: str | None
    """Why the script must be refused; None for a valid script."""

    @property
    def graph(self) -> Graph:
        return self.recipe.graph

    @property
    def data(self) -> bytes:
        return msgspec.json.encode(self.script)

    def __repr__(self) -> str:
        """The recipe and the script as wire JSON, to rerun a failing example with `sfc dryrun`."""
        return (
            f"Case(job_id={self.job_id!r}, flaw={self.flaw!r})\n"
            f"recipe:\n{self.recipe.data.decode()}\nscript:\n{self.data.decode()}"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@st.composite
def script_docs(draw: st.DrawFn, graph: Graph, job_id: str) -> dict[str, Any]:
    """A valid script for `graph` and a job `job_id` (see the module docstring)."""
    outcomes = _outcomes(graph)
    doc: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        doc["default"] = draw(st.sampled_from(DEFAULTS))

    replies: dict[str, list[str]] = {}
    for name, spec in graph.actions.items():
        if draw(st.booleans()):
            replies[name] = [_reply(draw, outcomes) for _ in range(draw(st.integers(0, 3)))]
        if spec.hold is not None:
            for suffix in ("hold", "restart"):
                if draw(st.booleans()):
                    replies[f"{name}:{suffix}"] = [
                        _hold_reply(draw) if suffix == "hold" else _reply(draw, outcomes)
                        for _ in range(draw(st.integers(0, 3)))
                    ]
    empty_replies = draw(st.booleans())
    if replies or empty_replies:
        doc["replies"] = replies

    waits = [s for specs in graph.waits_by_type.values() for s in specs]
    with_events = draw(st.booleans())
    if waits and with_events:
        events: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(0, 4))):
            spec = draw(st.sampled_from(waits))
            ev: dict[str, Any] = {
                "atMs": _time(draw),
                "typeId": draw(st.sampled_from((spec.type_id, spec.type_id, "e.unknown"))),
            }
            outcome = draw(st.sampled_from((None, *outcomes, "error", "timeout")))
            if outcome is not None:
                ev["outcome"] = outcome
            subject = _selector_value(draw, spec.subject, job_id)
            if subject is not None:
                ev["subject"] = subject
            correlation = _selector_value(draw, spec.correlation_id, job_id)
            if correlation is not None:
                ev["correlationId"] = correlation
            if draw(st.booleans()):
                ev["id"] = f"ev-{len(events)}"
            events.append(ev)
        doc["events"] = events

    if draw(st.booleans()):
        controls: list[dict[str, Any]] = []
        # Holds, mostly released a little later (a release after a `held` answer restarts).
        for _ in range(draw(st.integers(0, 3))):
            at = _time(draw)
            controls.append({"kind": "hold", "atMs": at})
            gap = draw(st.sampled_from((None, 0, 1, 1000, 3000, 20_000)))
            if gap is not None:
                controls.append({"kind": "release", "atMs": at + gap})
        # Controls at any time, in any order: a release that holds nothing, a cancel.
        for _ in range(draw(st.integers(0, 2))):
            kind = draw(st.sampled_from(("hold", "release", "cancel")))
            control: dict[str, Any] = {"kind": kind, "atMs": _time(draw)}
            if kind == "cancel" and draw(st.booleans()):
                control["reason"] = draw(st.sampled_from(("", "stopped", "operator: abort")))
            controls.append(control)
        # Outages: each starts where the last one ended or later (touching is allowed).
        at = 0
        for _ in range(draw(st.integers(0, 3))):
            at += draw(st.sampled_from((0, 1, 1000, 7000, 40_000)))
            ms = draw(st.sampled_from((1, 500, 1000, 4000, 30_000, 90_000)))
            controls.append({"kind": "outage", "atMs": at, "ms": ms})
            at += ms
        doc["controls"] = draw(st.permutations(controls))
    return doc


def _flawed(draw: st.DrawFn, graph: Graph, doc: dict[str, Any]) -> str:
    """Give `doc` one flaw that load_script must refuse, and name it."""
    names = sorted(graph.actions)
    no_hold = [n for n, spec in graph.actions.items() if spec.hold is None]
    applicable = [
        f
        for f in FLAWS
        if (f != "hold key without hold logic" or no_hold)
        and (f not in ("unknown suffix", "reserved outcome", "malformed reply") or names)
    ]
    flaw = draw(st.sampled_from(applicable))
    replies = doc.setdefault("replies", {})
    if flaw == "unknown action":
        replies["nope"] = ["ok"]
    elif flaw == "hold key without hold logic":
        suffix = draw(st.sampled_from(("hold", "restart")))
        replies[f"{draw(st.sampled_from(no_hold))}:{suffix}"] = []
    elif flaw == "unknown suffix":
        replies[f"{draw(st.sampled_from(names))}:{draw(st.sampled_from(('', 'pause')))}"] = []
    elif flaw in ("reserved outcome", "malformed reply"):
        bad = (
            "timeout" + draw(st.sampled_from(("", "@5")))  # `error` is an error reply
            if flaw == "reserved outcome"
            else draw(st.sampled_from(("ok ok", "silent@5", "a:b", "@5", "", "ok@x")))
        )
        name = draw(st.sampled_from(names))
        items = replies.setdefault(name, [])
        items.insert(draw(st.integers(0, len(items))), bad)
    elif flaw == "malformed default":
        doc["default"] = draw(st.sampled_from(("ok ok", "timeout", "@1", "")))
    elif flaw == "overlapping outages":
        at = draw(st.integers(0, 10_000))
        ms = draw(st.integers(2, 10_000))
        second = {"kind": "outage", "atMs": at + draw(st.integers(0, ms - 1)), "ms": 1}
        doc["controls"] = [*doc.get("controls", []), {"kind": "outage", "atMs": at, "ms": ms}]
        doc["controls"].insert(draw(st.integers(0, len(doc["controls"]))), second)
    elif flaw == "negative time":
        doc["controls"] = [*doc.get("controls", []), {"kind": "hold", "atMs": -1}]
    elif flaw == "empty outage":
        doc["controls"] = [*doc.get("controls", []), {"kind": "outage", "atMs": 5, "ms": 0}]
    else:
        doc["bogus"] = True
    return flaw


@st.composite
def cases(draw: st.DrawFn, flaws: bool = False) -> Case:
    """A recipe and a script for it; with `flaws`, sometimes a script with one flaw."""
    recipe = draw(RECIPES)
    job_id = draw(st.sampled_from(JOB_IDS))
    doc = draw(script_docs(recipe.graph, job_id))
    flaw = None
    if flaws and draw(st.booleans()):
        flaw = _flawed(draw, recipe.graph, doc)
    return Case(recipe, job_id, doc, flaw)


def loaded(case: Case) -> SimulationScript:
    assert case.flaw is None
    return load_script(case.data, case.graph)


def simulation(case: Case) -> Simulation:
    return Simulation(
        case.graph,
        loaded(case),
        job_id=case.job_id,
        time_limit_ms=TIME_LIMIT_MS,
        evaluation_limit=EVALUATION_LIMIT,
    )


def ran(case: Case) -> tuple[Simulation, DryRunResult]:
    sim = simulation(case)
    return sim, sim.run()


# ------------------------------------------------------------------------------ properties


@settings(PROPERTY, max_examples=200)  # no run: cheap, and ten kinds of flaw to reach
@given(cases(flaws=True))
def test_0_a_script_is_refused_exactly_when_it_has_a_flaw_and_only_with_script_error(
    case: Case,
) -> None:
    try:
        load_script(case.data, case.graph)
    except ScriptError as e:
        assert case.flaw is not None, f"a valid script was refused: {e}"
        assert e.path.startswith("$")
    else:
        assert case.flaw is None, f"a script with a flaw ({case.flaw}) was accepted"


@PROPERTY
@given(cases())
def test_1_a_run_never_raises_and_ends_in_a_documented_way(case: Case) -> None:
    sim, result = ran(case)
    assert result.end in ENDS
    assert result.end == sim.end
    assert len(result.transcript) <= EVALUATION_LIMIT
    assert result.at_ms <= TIME_LIMIT_MS
    assert (result.fault is not None) == (result.end == "faulted")
    if result.end == "evaluation_limit":
        assert len(result.transcript) == EVALUATION_LIMIT
    times = [e.at_ms for e in result.transcript]
    assert times == sorted(times), "the virtual clock went backwards"


@PROPERTY
@given(cases())
def test_2_the_json_result_validates_and_decodes_to_an_equal_result(case: Case) -> None:
    _, result = ran(case)
    data = to_json(result)
    errors = sorted(validator("dryrun_result_v1_2").iter_errors(msgspec.json.decode(data)), key=str)
    assert not errors, f"{errors[0].message} at {errors[0].json_path}"
    assert from_json(data) == result


@PROPERTY
@given(cases())
def test_3_the_text_has_one_line_per_evaluation_and_the_end_line(case: Case) -> None:
    sim, result = ran(case)
    text = to_text(result, stalled=sim.stalled)
    assert text.endswith("\n")
    rows = text[:-1].split("\n")
    notes = [] if isinstance(result.notes, msgspec.UnsetType) else result.notes
    assert len(rows) == len(result.transcript) + len(notes) + 1
    # an evaluation reads `->`, a script item that was none (docs/cli.md) reads `--`
    assert sum(1 for row in rows if "  -> " not in row and "  -- " in row) == len(notes)
    assert rows == [line.text for line in lines(result, stalled=sim.stalled)]
    assert rows[-1].startswith("end: ")
    assert all(not row.startswith("end: ") for row in rows[:-1])


def states(case: Case) -> list[SfcState]:
    """The job's state before the run, after each of its evaluations, and at the end."""
    sim = simulation(case)
    out = [sim.state]
    while sim.step() is not None:
        out.append(sim.state)
    return out


@PROPERTY
@given(cases())
def test_4_explain_mentions_every_active_step_at_every_point_of_the_run(case: Case) -> None:
    recipe_text = explain(case.graph)
    missing = [s for s in case.graph.steps if s not in recipe_text]
    assert not missing, f"the recipe's explanation lacks steps {missing}"
    for state in states(case):
        text = explain(case.graph, state)
        for step in state.active_steps:
            assert f"step {step}" in text, f"the explanation does not mention active step {step}"


@PROPERTY
@given(cases())
def test_5_render_names_every_step_at_every_point_of_the_run(case: Case) -> None:
    for state in [None, *states(case)]:
        for fmt in FORMATS:
            text = render(case.graph, state, fmt)
            missing = [s for s in case.graph.steps if s not in text]
            assert not missing, f"{fmt} output lacks steps {missing}"


@PROPERTY
@given(cases(), st.integers(0, 40))
def test_6_the_same_recipe_and_script_give_byte_identical_json(case: Case, k: int) -> None:
    _, first = ran(case)
    _, second = ran(case)
    assert to_json(first) == to_json(second)
    # Taken a step at a time, with a look at the state between steps, the run is the same.
    sim = simulation(case)
    for _ in range(k):
        if sim.step() is None:
            break
        explain(case.graph, sim.state)
    assert to_json(sim.run()) == to_json(first)

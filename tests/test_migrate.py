"""sfc.migrate: every state format ever written is read into 1.5 (SpiffWorkflow's habit).

The fixtures in tests/data/frozen_v1_3/ were written by the 1.3 core before 1.4 existed:
each example's transcript, and the 1.3 state after each of its evaluations. Every one of
those states is migrated, and the rest of the transcript is replayed on the migrated state
by the current core: the dispositions, continuations and commands must be the frozen ones.
The fixtures in tests/data/frozen_v1_4/ were written by the 1.4 core before 1.5 existed, in
the same way; a migrated 1.4 state is byte for byte the state the 1.5 core writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from msgspec.structs import replace
from syrupy.assertion import SnapshotAssertion
from typer.testing import CliRunner

from cli.main import app
from generated.state_v1_5 import SfcState
from sfc import MigrationError, build, evolve, migrate, new_state
from sfc.codec import encode, state_decoder
from sfc.evolution import STATE_FORMAT
from sfc.migrate import state_format
from sfc.transcript import from_json
from tests.corehelpers import continuation_now
from tests.test_examples import dataschema_of
from tests.test_wire_snapshots import WireBytes

ROOT = Path(__file__).resolve().parent.parent
FROZEN = ROOT / "tests" / "data" / "frozen_v1_3"
FROZEN_1_4 = ROOT / "tests" / "data" / "frozen_v1_4"
CASES = sorted(p.name.removesuffix(".transcript.json") for p in FROZEN.glob("*.transcript.json"))


def _frozen(case: str, where: Path = FROZEN):  # type: ignore[no-untyped-def]
    example = case.split(".")[0]
    graph = build(
        (ROOT / "examples" / example / "recipe.json").read_bytes(),
        dataschema=dataschema_of(example),
    ).graph
    assert graph is not None
    run = from_json((where / f"{case}.transcript.json").read_bytes())
    states = (where / f"{case}.states.jsonl").read_bytes().splitlines()
    assert len(states) == len(run.transcript)
    return graph, run.transcript, states


def test_there_is_a_frozen_fixture_for_every_example_script_of_1_3() -> None:
    scripts = sorted(
        f"{p.parent.name}.{p.name.removesuffix('.script.json')}"
        for p in (ROOT / "examples").glob("*/*.script.json")
    )
    assert set(CASES) <= set(scripts)  # a later example has no 1.3 state to migrate


@pytest.mark.parametrize("case", CASES)
def test_every_frozen_state_migrates_and_the_rest_replays_as_before(case: str) -> None:
    graph, transcript, states = _frozen(case)
    for i, document in enumerate(states):
        assert state_format(document) == "1.3"
        state = migrate(document, graph)
        assert state.format == STATE_FORMAT
        assert state_decoder.decode(encode(state)) == state  # a valid current document
        for j in range(i + 1, len(transcript)):
            entry = transcript[j]
            result = evolve(graph, state, None, entry.event)
            where = f"state {i}, then entry {j}"
            assert result.disposition == entry.disposition, (where, result.reason)
            assert result.commands == entry.commands, where
            assert result.continuation == continuation_now(entry), where
            state = result.state


CASES_1_4 = sorted(
    p.name.removesuffix(".transcript.json") for p in FROZEN_1_4.glob("*.transcript.json")
)


def test_there_is_a_frozen_1_4_fixture_for_every_example_of_1_4() -> None:
    assert set(CASES) <= set(CASES_1_4)


@pytest.mark.parametrize("case", CASES_1_4)
def test_every_frozen_1_4_state_migrates_to_what_the_current_core_writes(case: str) -> None:
    """A 1.4 state, migrated, is byte for byte the state the current core reaches by the
    same events; the rest of the transcript replays on it as frozen."""
    graph, transcript, states = _frozen(case, FROZEN_1_4)
    fresh = new_state(graph, "job-1", "sim")
    for i, document in enumerate(states):
        assert state_format(document) == "1.4"
        fresh = evolve(graph, fresh, None, transcript[i].event).state
        state = migrate(document, graph)
        if fresh.status == "completed" and state.outcomes == []:
            # frozen before a job that ends in a step without actions reported the outcomes
            # that led there (continuation_now); an ended job's state is not evolved again
            assert fresh.outcomes, i
            fresh = replace(fresh, outcomes=[])
        assert encode(state) == encode(fresh), i
        for j in range(i + 1, len(transcript)):
            entry = transcript[j]
            result = evolve(graph, state, None, entry.event)
            where = f"state {i}, then entry {j}"
            assert (result.disposition, result.reason) == (entry.disposition, entry.reason), where
            assert result.commands == entry.commands, where
            assert result.continuation == continuation_now(entry), where
            state = result.state


@pytest.mark.parametrize("case", CASES)
def test_the_migrated_bytes_are_pinned(case: str, snapshot: SnapshotAssertion) -> None:
    graph, _, states = _frozen(case)
    migrated = b"\n".join(encode(migrate(document, graph)) for document in states) + b"\n"
    assert migrated == snapshot.use_extension(WireBytes)


def test_a_migrated_state_is_smaller_and_keeps_only_what_can_matter() -> None:
    graph, _, states = _frozen("bottling-line.qa-loop")
    old = json.loads(states[-2])
    new = json.loads(encode(migrate(states[-2], graph)))
    assert "log" not in new and len(encode(migrate(states[-2], graph))) < len(states[-2])
    active = {a.name for s in old["activeSteps"] for a in graph.step_actions[s]}
    assert set(new["actions"]) == set(old["actions"]) & active
    # A dropped record of an action on a cycle leaves its round.
    for name in set(old["actions"]) - active:
        if name in graph.cyclic:
            assert new["rounds"][name] == old["actions"][name]["round"]
        else:
            assert name not in new["rounds"]


def test_an_ended_job_takes_its_end_time_from_the_last_log_entry() -> None:
    graph, transcript, states = _frozen("greetings-demo.cancel")
    old = json.loads(states[-1])
    assert old["status"] == "cancelled"
    state = migrate(states[-1], graph)
    assert state.ended_at == old["log"][-1]["at"] == transcript[-1].at_ms


def test_first_command_is_exact_for_a_first_attempt_and_1_otherwise() -> None:
    graph, _, states = _frozen("greetings-demo.retry")
    for document in states:
        old = json.loads(document)
        new = migrate(document, graph)
        for name, rec in new.actions.items():
            was = old["actions"][name]
            if was["attempt"] == 1 and not was["restarted"]:
                assert rec.first_command == int(was["commandId"].rpartition("#")[2])
            else:
                assert rec.first_command == 1


def test_a_current_state_is_read_as_it_is() -> None:
    graph, _, states = _frozen("tightening-hold.pause-resume")
    state = migrate(states[3], graph)
    assert migrate(encode(state), graph) == state


@pytest.mark.parametrize(
    ("document", "said"),
    [
        (b'{"format": "2.0", "jobId": "j"}', "format '2.0'"),
        (b'{"format": "1.2"}', "format '1.2'"),
        (b'{"format": 1.3}', "no format"),
        (b'{"jobId": "j"}', "no format"),
        (b"[1, 2]", "no format"),
        (b"not json", "no format"),
    ],
)
def test_a_document_of_an_unknown_format_is_refused_naming_it(document: bytes, said: str) -> None:
    graph, _, _ = _frozen("greetings-demo.happy")
    with pytest.raises(MigrationError) as caught:
        migrate(document, graph)
    assert said in str(caught.value)
    assert "1.3, 1.4, 1.5" in str(caught.value)


def test_an_old_state_of_another_recipe_is_refused() -> None:
    graph, _, _ = _frozen("greetings-demo.happy")
    _, _, states = _frozen("tightening-hold.pause-resume")
    with pytest.raises(MigrationError, match="pinned to recipe"):
        migrate(states[0], graph)


def test_an_invalid_old_document_is_a_decode_error() -> None:
    graph, _, states = _frozen("greetings-demo.happy")
    doc = json.loads(states[0])
    doc["sequence"] = "many"
    with pytest.raises(msgspec.ValidationError):
        migrate(json.dumps(doc).encode(), graph)


def test_evolve_refuses_a_state_that_was_not_migrated() -> None:
    from generated.event_v1_0 import Start
    from generated.state_v1_3 import SfcState as SfcStateV13

    graph, _, states = _frozen("greetings-demo.happy")
    old = msgspec.json.decode(states[0], type=SfcStateV13)
    result = evolve(graph, old, None, Start(at=0))  # type: ignore[arg-type]
    assert result.disposition == "rejected"
    assert "sfc.migrate" in result.reason


def test_the_cli_migrates_an_old_state_and_says_so_on_stderr(tmp_path: Path) -> None:
    _, _, states = _frozen("tightening-hold.pause-resume")
    path = tmp_path / "old.json"
    path.write_bytes(states[3])
    recipe = ROOT / "examples" / "tightening-hold" / "recipe.json"
    for command in ("explain", "render"):
        done = CliRunner().invoke(app, [command, str(recipe), "--state", str(path)])
        assert done.exit_code == 0, done.output
        assert f"state {path}: format 1.3 migrated to 1.5" in done.stderr
        assert "migrated" not in done.stdout


def test_the_cli_refuses_an_unknown_format_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    path.write_text('{"format": "9.1"}', encoding="utf-8")
    recipe = ROOT / "examples" / "tightening-hold" / "recipe.json"
    done = CliRunner().invoke(app, ["explain", str(recipe), "--state", str(path)])
    assert done.exit_code == 1
    assert "format '9.1'" in done.stderr and str(path) in done.stderr


def test_migrated_states_explain_like_the_states_the_current_core_writes() -> None:
    """The same run, written by 1.3 and migrated, or written by the current core, is the same job."""
    from sfc.simulation import Simulation, load_script

    graph, _, states = _frozen("rear-axle-fitting.retry")
    script = (ROOT / "examples" / "rear-axle-fitting" / "retry.script.json").read_bytes()
    sim = Simulation(graph, load_script(script, graph))
    fresh: list[SfcState] = []
    while sim.step() is not None:
        fresh.append(sim.state)
    for document, state in zip(states, fresh, strict=True):
        migrated = migrate(document, graph)
        # firstCommand of a later attempt is 1 after migration (1.3 did not keep it).
        assert migrated.active_steps == state.active_steps
        assert migrated.actions.keys() == state.actions.keys()
        assert migrated.rounds == state.rounds
        assert migrated.ended_at == state.ended_at

"""Frozen transcripts replayed through the core (the habit of SpiffWorkflow's migration fixtures).

Every example script's JSON transcript was frozen once into tests/data/frozen_transcripts/
(a copy of its snapshot, tests/__snapshots__/test_examples/, at the time). Here the core alone
replays the events of those frozen documents from a new state, without the simulation, and
must give the same disposition, commands and continuation for each one (but for the
outcomes of a job that ends in a step without actions: `continuation_now`), and the same final
state bytes as the frozen final state. The inputs are plain files, not snapshots, so
`--snapshot-update` cannot rewrite them together with what they are compared with.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from sfc import build, evolve, new_state
from sfc.codec import encode
from sfc.transcript import from_json
from tests.corehelpers import continuation_now
from tests.test_examples import dataschema_of
from tests.test_wire_snapshots import WireBytes

ROOT = Path(__file__).resolve().parent.parent
FROZEN = sorted((ROOT / "tests/data/frozen_transcripts").glob("*.json"))


def _example(path: Path) -> tuple[str, str]:
    match = re.fullmatch(r"([^.]+)\.([^.]+)\.json", path.name)
    assert match is not None, path.name
    return match.group(1), match.group(2)


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda p: "{}.{}".format(*_example(p)))
def test_the_core_replays_a_frozen_transcript(frozen: Path, snapshot: SnapshotAssertion) -> None:
    example, _ = _example(frozen)
    graph = build(
        (ROOT / "examples" / example / "recipe.json").read_bytes(),
        dataschema=dataschema_of(example),
    ).graph
    assert graph is not None
    run = from_json(frozen.read_bytes())
    assert run.transcript, "a frozen transcript has at least the start"

    state = new_state(graph, "job-1", "sim")
    for i, entry in enumerate(run.transcript):
        result = evolve(graph, state, None, entry.event)
        assert (result.disposition, result.reason) == (entry.disposition, entry.reason), i
        assert result.commands == entry.commands, i
        assert result.continuation == continuation_now(entry), i
        state = result.state
    assert encode(state) == snapshot.use_extension(WireBytes)


def test_every_example_script_has_a_frozen_transcript() -> None:
    scripts = sorted(
        (p.parent.name, p.name.removesuffix(".script.json"))
        for p in (ROOT / "examples").glob("*/*.script.json")
    )
    missing = sorted(set(scripts) - {_example(p) for p in FROZEN})
    # freeze a new script once: copy its transcript snapshot,
    # tests/__snapshots__/test_examples/test_json_transcript[EXAMPLE.SCRIPT].json, to
    # tests/data/frozen_transcripts/EXAMPLE.SCRIPT.json
    assert not missing, f"scripts with no frozen transcript in tests/data: {missing}"

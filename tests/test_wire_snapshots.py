"""The exact bytes msgspec writes for one full example of each wire document type.

Each example is a `full*.json` document of tests/data/NAME/valid/ (one per union member for
the event and command unions), decoded with the generated type and encoded again. The
snapshots pin field names, field order and which defaults are left out, so a schema or
generator change that alters the wire shows up as a diff of tests/__snapshots__/. syrupy's
JSON extension sorts keys, so the bytes are stored as they are (single file, binary).

After an intended change: `uv run pytest tests/test_wire_snapshots.py --snapshot-update`,
then review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from tests import wire


class WireBytes(SingleFileSnapshotExtension):
    _write_mode = WriteMode.BINARY
    file_extension = "json"


FULL_EXAMPLES = [
    (name, path)
    for name in wire.SCHEMA_NAMES
    for path in wire.corpus(name, "valid")
    if path.stem == "full" or path.stem.startswith("full_")
]


@pytest.fixture
def snapshot_bytes(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(WireBytes)


def test_every_schema_has_a_full_example() -> None:
    assert sorted({name for name, _ in FULL_EXAMPLES}) == wire.SCHEMA_NAMES


@pytest.mark.parametrize(
    ("name", "tags"),
    [
        ("command_v1_0", ["cancelWork", "startWork"]),
        (
            "event_v1_0",
            sorted(
                {"start", "tick", "actionCompleted", "actionFailed", "eventReceived"}
                | {"resume", "cancel", "hold", "release"}
            ),
        ),
    ],
)
def test_every_union_member_has_a_full_example(name: str, tags: list[str]) -> None:
    found = {json.loads(path.read_bytes())["kind"] for n, path in FULL_EXAMPLES if n == name}
    assert sorted(found) == tags


@pytest.mark.parametrize(
    ("name", "path"), [pytest.param(n, p, id=f"{n}.{p.stem}") for n, p in FULL_EXAMPLES]
)
def test_encoded_bytes(name: str, path: Path, snapshot_bytes: SnapshotAssertion) -> None:
    value = wire.decoder(name).decode(path.read_bytes())
    assert msgspec.json.encode(value) == snapshot_bytes

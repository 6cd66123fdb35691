"""Stream entries of host/entries.py, encoded and decoded (pure; docs/host.md "Entries").

The fixtures are the schema corpus (tests/data/work_entry_v1_0 and equipment_entry_v1_0):
each document is split into the stream fields v, kind and data as a producer writes them.
Decoding must give the entry back, or EntryError naming what is wrong, and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from generated.equipment_entry_v1_0 import AwaitData, CommandData, WithdrawData
from generated.history_entry_v1_0 import HistoryEntry
from generated.work_entry_v1_0 import AnswerData, EventData, ResumeData, StartData, TickData
from host import entries
from host.entries import ENTRY_LIMIT, Entry, EntryError

DATA = Path(__file__).parent / "data"
ENTRY_ID = "1700000000123-4"
Decode = Callable[[str, Mapping[bytes, bytes]], Entry]
DECODERS: dict[str, Decode] = {
    "work": entries.decode_work,
    "equipment": entries.decode_equipment,
}
UNIONS = {"work": entries.work_entry_decoder, "equipment": entries.equipment_entry_decoder}
SCHEMA = {"work": "work_entry_v1_0", "equipment": "equipment_entry_v1_0"}


class WireBytes(SingleFileSnapshotExtension):
    _write_mode = WriteMode.BINARY
    file_extension = "txt"


@pytest.fixture
def snapshot_bytes(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(WireBytes)


def corpus(stream: str, which: str) -> list[Path]:
    return sorted((DATA / SCHEMA[stream] / which).glob("*.json"))


def stream_fields(document: dict[str, Any]) -> dict[bytes, bytes]:
    """A whole-entry document as the stream holds it: three fields, data as JSON text."""
    return {
        b"v": str(document["v"]).encode(),
        b"kind": str(document["kind"]).encode(),
        b"data": json.dumps(document["data"]).encode(),
    }


def as_stream(encoded: Mapping[str, bytes]) -> dict[bytes, bytes]:
    """`entries.fields` as redis-py gives them back to a reader (bytes keys)."""
    return {k.encode(): v for k, v in encoded.items()}


VALID = [
    pytest.param(stream, path, id=f"{stream}.{path.stem}")
    for stream in DECODERS
    for path in corpus(stream, "valid")
]
INVALID = [
    pytest.param(stream, path, id=f"{stream}.{path.stem}")
    for stream in DECODERS
    for path in corpus(stream, "invalid")
]
ONE_PER_KIND = {
    "work": {
        "start": StartData(job="job-7"),
        "answer": AnswerData(
            job="job-7", action_key="job-7:clamp", command_id="job-7:clamp#1", outcome="ok", round=1
        ),
        "event": EventData(
            type_id="com.example.qa.v1",
            subject="line1/job-7/qa",
            correlation_id="c-1",
            outcome="ok",
            source="camera-1",
            id="e-1",
        ),
        "tick": TickData(job="job-7", outage_ms=60_000),
        "resume": ResumeData(job="job-7", action="clamp"),
    },
    "equipment": {
        "push": CommandData(
            command_id="job-7:tighten#2",
            action_key="job-7:tighten",
            job="job-7",
            type_id="com.example.tightening.run.v1",
            attempt=1,
            round=1,
            deadline=1_700_000_120_500,
            expires_at=1_700_000_118_500,
            parameters={"program": 7, "torque_nm": 85},
        ),
        "hold": CommandData(
            command_id="job-7:tighten#3:hold",
            action_key="job-7:tighten",
            job="job-7",
            type_id="com.example.tightening.hold.v1",
            attempt=1,
            round=1,
            deadline=1_700_000_010_500,
            expires_at=1_700_000_008_500,
            parameters={},
        ),
        "restart": CommandData(
            command_id="job-7:tighten#4",
            action_key="job-7:tighten",
            job="job-7",
            type_id="com.example.tightening.restart.v1",
            attempt=1,
            round=2,
            deadline=1_700_000_120_500,
            expires_at=1_700_000_118_500,
            parameters={"program": 7, "resume_from": "last_bolt"},
        ),
        "await": AwaitData(
            command_id="job-7:qa#5",
            action_key="job-7:qa",
            job="job-7",
            type_id="com.example.qa.v1",
            attempt=1,
            round=1,
            deadline=1_700_000_120_500,
            expires_at=1_700_000_118_500,
            parameters={},
            selector=entries.AwaitSelector(subject="line1/job-7/qa", correlation_id=None),
        ),
        "withdraw": WithdrawData(
            command_id="job-7:tighten#2",
            action_key="job-7:tighten",
            job="job-7",
            type_id="com.example.tightening.run.v1",
            reason="held",
        ),
    },
}
EVERY_KIND = [
    pytest.param(stream, kind, id=f"{stream}.{kind}")
    for stream, kinds in ONE_PER_KIND.items()
    for kind in kinds
]


def refused(stream: str, raw: Mapping[bytes, bytes]) -> str:
    with pytest.raises(EntryError) as caught:
        DECODERS[stream](ENTRY_ID, raw)
    return str(caught.value)


# -- round trips


def test_one_example_per_kind() -> None:
    assert set(ONE_PER_KIND["work"]) == set(entries.WORK_KINDS)
    assert set(ONE_PER_KIND["equipment"]) == set(entries.EQUIPMENT_KINDS)


@pytest.mark.parametrize(("stream", "kind"), EVERY_KIND)
def test_encode_then_decode(stream: str, kind: str) -> None:
    data = ONE_PER_KIND[stream][kind]
    encoded = entries.fields(kind, data)
    assert encoded["v"] == b"1" and encoded["kind"] == kind.encode()
    entry = DECODERS[stream](ENTRY_ID, as_stream(encoded))
    assert entry == Entry(ENTRY_ID, kind, data)
    assert entry.ms == 1_700_000_000_123
    # The whole-entry union of the schema reads the same document.
    whole = UNIONS[stream].decode(
        b'{"v":"1","kind":"%s","data":%s}' % (kind.encode(), encoded["data"])
    )
    assert whole.data == data


@pytest.mark.parametrize(("stream", "kind"), EVERY_KIND)
def test_encoded_entry_bytes(stream: str, kind: str, snapshot_bytes: SnapshotAssertion) -> None:
    encoded = entries.fields(kind, ONE_PER_KIND[stream][kind])
    assert b"\n".join(b"%s=%s" % (k.encode(), v) for k, v in encoded.items()) == snapshot_bytes


@pytest.mark.parametrize(("stream", "kind"), EVERY_KIND)
def test_an_entry_of_one_stream_is_no_entry_of_the_other(stream: str, kind: str) -> None:
    other = "equipment" if stream == "work" else "work"
    message = refused(other, as_stream(entries.fields(kind, ONE_PER_KIND[stream][kind])))
    assert message.startswith(f"kind {kind!r} is not a {other} entry kind (")


@pytest.mark.parametrize(("stream", "path"), VALID)
def test_every_valid_corpus_document_decodes(stream: str, path: Path) -> None:
    document = json.loads(path.read_bytes())
    entry = DECODERS[stream](ENTRY_ID, stream_fields(document))
    assert entry.kind == document["kind"]
    assert entry.data == UNIONS[stream].decode(path.read_bytes()).data
    assert json.loads(entries.encode(entry.data)) == document["data"]


@pytest.mark.parametrize(("stream", "path"), INVALID)
def test_every_invalid_corpus_document_is_refused(stream: str, path: Path) -> None:
    assert refused(stream, stream_fields(json.loads(path.read_bytes())))


def test_job_of() -> None:
    work = ONE_PER_KIND["work"]
    for kind in ("start", "answer", "tick", "resume"):
        assert entries.job_of(Entry(ENTRY_ID, kind, work[kind])) == "job-7"
    assert entries.job_of(Entry(ENTRY_ID, "event", work["event"])) is None


def test_an_answer_may_carry_an_error_or_nothing() -> None:
    error = AnswerData(job="j", action_key="j:a", error="jammed")
    bare = AnswerData(job="j", action_key="j:a")
    for data in (error, bare):
        assert entries.decode_work(ENTRY_ID, as_stream(entries.fields("answer", data))).data == (
            data
        )


def test_history_round_trip() -> None:
    item = HistoryEntry(
        at=1_700_000_000_000,
        event="answer",
        disposition="applied",
        reason="clamp answered ok",
        order="Running",
        entry=ENTRY_ID,
        detail="job-7:clamp job-7:clamp#1: 'ok'",
        decisions=["Clamp -> Tighten fired on true"],
        sent=["push job-7:tighten#2"],
    )
    raw = as_stream(entries.fields("evaluation", item))
    assert entries.decode_history(raw) == item


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({}, "history data does not fit its schema"),
        ({b"data": b"not json"}, "history data does not fit its schema"),
        ({b"data": b'{"at": 1}'}, "missing required field `event`"),
        ({b"data": b"[" * 10_000 + b"]" * 10_000}, "history data does not fit its schema"),
    ],
)
def test_malformed_history(raw: dict[bytes, bytes], words: str) -> None:
    with pytest.raises(EntryError, match=words):
        entries.decode_history(raw)


# -- malformed entries: EntryError naming the problem

START = {b"v": b"1", b"kind": b"start", b"data": b'{"job":"job-7"}'}


def without(name: bytes) -> dict[bytes, bytes]:
    return {k: v for k, v in START.items() if k != name}


def with_(**changes: bytes) -> dict[bytes, bytes]:
    return {**START, **{k.encode(): v for k, v in changes.items()}}


PUSH_HEAD = (
    b'{"commandId":"a#1","actionKey":"j:a","job":"j","typeId":"t","attempt":1,"round":1,'
    b'"deadline":1,"expiresAt":1,"parameters":'
)


@pytest.mark.parametrize(
    ("stream", "raw", "words"),
    [
        ("work", without(b"v"), "the entry has no field 'v'"),
        ("work", without(b"kind"), "the entry has no field 'kind'"),
        ("work", without(b"data"), "the entry has no field 'data'"),
        ("work", with_(v=b"2"), "entry format v='2' is unknown; this host reads v=1"),
        ("work", with_(v=b""), "entry format v='' is unknown"),
        ("work", with_(v=b"x" * 1000), "entry format v='" + "x" * 40 + "' is unknown"),
        ("work", with_(kind=b"bogus"), "kind 'bogus' is not a work entry kind"),
        ("work", with_(kind=b"Start"), "kind 'Start' is not a work entry kind"),
        ("work", with_(kind=b"push"), "kind 'push' is not a work entry kind"),
        ("equipment", {**START, b"kind": b"answer"}, "kind 'answer' is not a equipment"),
        ("work", with_(v=b"\xff"), "the field 'v' is not UTF-8"),
        ("work", with_(kind=b"st\xc3art"), "the field 'kind' is not UTF-8"),
        ("work", with_(data=b'{"job":"j\xff"}'), "start data is not JSON"),
        ("work", with_(data=b"{job: 7}"), "start data is not JSON"),
        ("work", with_(data=b""), "start data is not JSON"),
        ("work", with_(data=b'{"job":"job-7"} trailing'), "start data is not JSON"),
        ("work", with_(data=b"null"), "start data does not fit its schema: Expected `object`"),
        ("work", with_(data=b"{}"), "missing required field `job`"),
        ("work", with_(data=b'{"job":"a{b}"}'), "start data does not fit its schema"),
        ("work", with_(data=b'{"job":""}'), "start data does not fit its schema"),
        ("work", with_(data=b'{"job":"j","x":1}'), "unknown field `x`"),
        (
            "work",
            with_(kind=b"tick", data=b'{"job":"j","outageMs":-1}'),
            "tick data does not fit its schema",
        ),
        (
            "work",
            with_(kind=b"answer", data=b'{"job":"j","actionKey":"j:a","round":0}'),
            "answer data does not fit its schema",
        ),
        (
            "work",
            with_(kind=b"answer", data=b'{"job":"j","actionKey":"j:a","outcome":"ok","error":"x"}'),
            "an answer has an outcome or an error, not both",
        ),
        ("work", with_(data=b"[" * 10_000 + b"]" * 10_000), "start data does not fit its schema"),
        (
            "equipment",
            {
                b"v": b"1",
                b"kind": b"push",
                b"data": PUSH_HEAD + b'{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}}",
            },
            "push data is nested too deeply",
        ),
        (
            "work",
            with_(data=b'{"job":"' + b"j" * ENTRY_LIMIT + b'"}'),
            f"its data has {ENTRY_LIMIT + 10} bytes; at most {ENTRY_LIMIT} are allowed",
        ),
    ],
)
def test_malformed_entry(stream: str, raw: dict[bytes, bytes], words: str) -> None:
    assert words in refused(stream, raw)


def test_data_at_the_limit_is_read() -> None:
    # every field has a limit of its own far below the entry's; white space fills it up
    event = b'{"typeId":"t","subject":"s"' + b" " * (ENTRY_LIMIT - 28) + b"}"
    assert len(event) == ENTRY_LIMIT
    entry = entries.decode_work(ENTRY_ID, with_(kind=b"event", data=event))
    assert isinstance(entry.data, EventData)


def test_fields_that_are_not_the_entry_are_ignored() -> None:
    entry = entries.decode_work(ENTRY_ID, {**START, b"extra": b"\xff\x00", b"V": b"9"})
    assert entry.data == StartData(job="job-7")


# -- anything at all


FIELD_NAMES = st.sampled_from([b"v", b"kind", b"data", b"extra", b""])
GOOD = {
    "work": [as_stream(entries.fields(k, d)) for k, d in ONE_PER_KIND["work"].items()],
    "equipment": [as_stream(entries.fields(k, d)) for k, d in ONE_PER_KIND["equipment"].items()],
}
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def outcome_of(stream: str, raw: Mapping[bytes, bytes]) -> Entry | EntryError:
    try:
        entry = DECODERS[stream](ENTRY_ID, raw)
    except EntryError as e:
        assert str(e)
        return e
    kinds = entries.WORK_KINDS if stream == "work" else entries.EQUIPMENT_KINDS
    assert entry.kind == raw[b"kind"].decode()
    assert isinstance(entry.data, kinds[entry.kind])
    return entry


@settings(max_examples=400, deadline=None)
@given(
    stream=st.sampled_from(list(DECODERS)),
    base=st.integers(0, 4),
    changes=st.dictionaries(FIELD_NAMES, st.binary(max_size=64), max_size=4),
    dropped=st.sets(FIELD_NAMES, max_size=2),
)
def test_arbitrary_bytes_in_any_field(
    stream: str, base: int, changes: dict[bytes, bytes], dropped: set[bytes]
) -> None:
    raw = {**GOOD[stream][base], **changes}
    for name in dropped:
        raw.pop(name, None)
    outcome_of(stream, raw)


@settings(max_examples=300, deadline=None)
@given(
    stream=st.sampled_from(list(DECODERS)),
    kind=st.sampled_from([*entries.WORK_KINDS, *entries.EQUIPMENT_KINDS]),
    data=JSONISH,
)
def test_any_json_as_data(stream: str, kind: str, data: Any) -> None:
    raw = {b"v": b"1", b"kind": kind.encode(), b"data": msgspec.json.encode(data)}
    outcome_of(stream, raw)


@settings(max_examples=300, deadline=None)
@given(
    stream=st.sampled_from(list(DECODERS)),
    base=st.integers(0, 4),
    field=st.text(min_size=1, max_size=12),
    value=JSONISH,
)
def test_a_valid_entry_with_one_field_changed(
    stream: str, base: int, field: str, value: Any
) -> None:
    raw = GOOD[stream][base]
    data = {**json.loads(raw[b"data"]), field: value}
    outcome = outcome_of(stream, {**raw, b"data": json.dumps(data).encode()})
    if isinstance(outcome, Entry):
        assert json.loads(entries.encode(outcome.data)) == data

"""Stream entries, encoded and decoded (pure; docs/host.md, "Entries").

Every entry of the work, equipment, dead and history streams has the fields `v` (the entry
format, "1"), `kind`, and `data`: one JSON document, the kind's branch of its schema
(schemas/work_entry_v1_0.json, schemas/equipment_entry_v1_0.json). Decoding never raises
anything but `EntryError`, whose message says what is wrong, so a worker can bury the entry
with that reason and go on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from generated.equipment_entry_v1_0 import (
    AwaitData,
    AwaitSelector,
    CommandData,
    EquipmentEntry,
    WithdrawData,
)
from generated.history_entry_v1_0 import HistoryEntry
from generated.work_entry_v1_0 import (
    AnswerData,
    EventData,
    ResumeData,
    StartData,
    TickData,
    WorkEntry,
)
from host.keys import ENTRY_FORMAT, check_job

WorkData = StartData | AnswerData | EventData | TickData | ResumeData
EquipmentData = CommandData | AwaitData | WithdrawData

WORK_KINDS: dict[str, type[Any]] = {
    "start": StartData,
    "answer": AnswerData,
    "event": EventData,
    "tick": TickData,
    "resume": ResumeData,
}
EQUIPMENT_KINDS: dict[str, type[Any]] = {
    "push": CommandData,
    "hold": CommandData,
    "restart": CommandData,
    "await": AwaitData,
    "withdraw": WithdrawData,
}
ENTRY_LIMIT = 1 << 20
"""Most bytes of an entry's data; a larger one is refused (it would not fit a state)."""

_encoder = msgspec.json.Encoder()
_work_decoders = {k: msgspec.json.Decoder(t) for k, t in WORK_KINDS.items()}
_equipment_decoders = {k: msgspec.json.Decoder(t) for k, t in EQUIPMENT_KINDS.items()}
_history_decoder = msgspec.json.Decoder(HistoryEntry)
# The whole-entry unions, for tools that hold an entry as one document.
work_entry_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(WorkEntry)
equipment_entry_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(EquipmentEntry)


class EntryError(ValueError):
    """An entry that cannot be used; the message is the reason the dead stream keeps."""


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded stream entry: its id, kind and data."""

    id: str
    kind: str
    data: Any

    @property
    def ms(self) -> int:
        """The millisecond part of the entry id: the server time it was written."""
        return entry_ms(self.id)


def entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


def fields(kind: str, data: msgspec.Struct) -> dict[str, bytes]:
    """The fields of an entry of `kind` with `data`."""
    return {"v": ENTRY_FORMAT.encode(), "kind": kind.encode(), "data": _encoder.encode(data)}


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def _text(raw: Mapping[bytes, bytes], name: str) -> str:
    value = raw.get(name.encode())
    if value is None:
        raise EntryError(f"the entry has no field {name!r}")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise EntryError(f"the field {name!r} is not UTF-8") from None


def _decode(
    entry_id: str,
    raw: Mapping[bytes, bytes],
    decoders: Mapping[str, msgspec.json.Decoder[Any]],
    stream: str,
) -> Entry:
    version = _text(raw, "v")
    if version != ENTRY_FORMAT:
        raise EntryError(f"entry format v={version[:40]!r} is unknown; this host reads v=1")
    kind = _text(raw, "kind")
    decoder = decoders.get(kind)
    if decoder is None:
        known = ", ".join(decoders)
        raise EntryError(f"kind {kind[:40]!r} is not a {stream} entry kind ({known})")
    data = raw.get(b"data")
    if data is None:
        raise EntryError("the entry has no field 'data'")
    if len(data) > ENTRY_LIMIT:
        raise EntryError(f"its data has {len(data)} bytes; at most {ENTRY_LIMIT} are allowed")
    try:
        value = decoder.decode(data)
    except msgspec.ValidationError as e:
        raise EntryError(f"{kind} data does not fit its schema: {e}") from None
    except msgspec.DecodeError as e:
        raise EntryError(f"{kind} data is not JSON: {e}") from None
    except RecursionError:
        raise EntryError(f"{kind} data is nested too deeply") from None
    if (
        isinstance(value, AnswerData)
        and value.outcome is not msgspec.UNSET
        and value.error is not msgspec.UNSET
    ):
        raise EntryError("an answer has an outcome or an error, not both")
    return Entry(entry_id, kind, value)


def checked(kind: str, data: msgspec.Struct) -> msgspec.Struct:
    """`data`, if a worker would read it as a `kind` work entry; else EntryError with the
    reason. The entry points (respond, publish_event) refuse what a worker would bury."""
    raw = _encoder.encode(data)
    if len(raw) > ENTRY_LIMIT:
        raise EntryError(f"its data has {len(raw)} bytes; at most {ENTRY_LIMIT} are allowed")
    try:
        _work_decoders[kind].decode(raw)
    except msgspec.ValidationError as e:
        raise EntryError(f"{kind} data does not fit its schema: {e}") from None
    return data


def decode_work(entry_id: str, raw: Mapping[bytes, bytes]) -> Entry:
    """A work entry from its stream fields, or EntryError."""
    return _decode(entry_id, raw, _work_decoders, "work")


def decode_equipment(entry_id: str, raw: Mapping[bytes, bytes]) -> Entry:
    """An equipment entry from its stream fields, or EntryError."""
    return _decode(entry_id, raw, _equipment_decoders, "equipment")


def decode_history(raw: Mapping[bytes, bytes]) -> HistoryEntry:
    try:
        return _history_decoder.decode(raw.get(b"data", b""))
    except msgspec.DecodeError as e:
        raise EntryError(f"history data does not fit its schema: {e}") from None


def job_of(entry: Entry) -> str | None:
    """The job an entry is for; None for an event, which is for whichever wait takes it."""
    return None if isinstance(entry.data, EventData) else entry.data.job


def job_named(entry_id: str, raw: Mapping[bytes, bytes]) -> str | None:
    """The job of a work entry's stream fields; None for an event or a malformed entry."""
    try:
        return job_of(decode_work(entry_id, raw))
    except EntryError:
        return None


def job_mentioned(raw: Mapping[bytes, bytes]) -> str | None:
    """The valid job id a malformed work entry's data names, for readers only (it is
    buried without a job); None when it names none."""
    try:
        data = msgspec.json.decode(raw.get(b"data", b""))
    except (msgspec.DecodeError, RecursionError):
        return None
    job = data.get("job") if isinstance(data, dict) else None
    if not isinstance(job, str):
        return None
    try:
        return check_job(job)
    except ValueError:
        return None


def dead_job(entry_id: str, raw: Mapping[bytes, bytes]) -> str | None:
    """The job a dead entry names: its work entry's job, else the `job` it was buried with
    (for an event), else the job its malformed data names; None when none."""
    return job_named(entry_id, raw) or _buried_with(raw) or job_mentioned(raw)


def _buried_with(raw: Mapping[bytes, bytes]) -> str | None:
    """A dead entry's `job` field, if it is a valid job id."""
    try:
        return check_job(raw.get(b"job", b"").decode())
    except (ValueError, UnicodeDecodeError):
        return None


__all__ = [
    "EQUIPMENT_KINDS",
    "WORK_KINDS",
    "AwaitSelector",
    "Entry",
    "EntryError",
    "EquipmentData",
    "WorkData",
    "checked",
    "dead_job",
    "decode_equipment",
    "decode_history",
    "decode_work",
    "encode",
    "entry_ms",
    "fields",
    "job_mentioned",
    "job_named",
    "job_of",
]

"""The work stream's read model (host/readmodel.py's other half): the entries read and
not committed, the dead entries, the consumer groups of the work and equipment streams, and
the commands out at the equipment, as typed documents that encode to JSON as they are.

- `work_pending` -> `PendingView` (`sfc work pending`, `GET /api/v1/work`),
- `work_dead` -> `DeadView` (`sfc work dead`),
- `work_groups` -> `GroupsView` (`sfc work groups`).

Every function only reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from host import keys
from host.entries import EntryError, dead_job, decode_work
from host.readmodel import Model
from host.store import Store
from host.store.equipment import stale_group


class PendingEntry(Model, frozen=True):
    """A work entry of the scope read by a worker and not committed yet: `entry` in words,
    its `kind`, and the job its data names (None for an event)."""

    id: str
    consumer: str
    idle_ms: int
    deliveries: int
    entry: str
    kind: str
    job: str | None


class OutAtEquipment(Model, frozen=True):
    """A command delivered to an adapter (consumer `consumer` of group `group`) and not
    acknowledged: out at the equipment since `idle_ms` ago."""

    group: str
    entry: str
    command_id: str | None
    """None when the entry was trimmed since, or holds no command id."""
    job: str | None
    consumer: str
    idle_ms: int
    deliveries: int


class PendingView(Model, frozen=True):
    """The scope's work entries read and not committed (oldest first), how many are unread,
    the workers and since when they last read, and the commands out at the equipment."""

    scope: str
    pending: list[PendingEntry]
    unread: int
    workers: int
    workers_idle_ms: int | None
    out_at_equipment: list[OutAtEquipment]


class ConsumerRow(Model, frozen=True):
    """A consumer of a group: entries it holds unacknowledged, since it last read or tried
    (`idle_ms`), and since its last read that delivered (`inactive_ms`; None where the
    server does not keep it, -1 for none)."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: int | None


class GroupRow(Model, frozen=True):
    """A consumer group of the scope's `work` or `equipment` stream: its lag (None: the
    server cannot tell), pending, last delivery, `idle_ms`, and whether it is stale."""

    stream: str
    name: str
    role: str
    """`workers` (the workers' group), `adapter` (a group of the equipment stream), or
    `other` (a group made by hand on the work stream)."""
    lag: int | None
    pending: int
    last_delivered: str
    last_delivered_at: int | None
    idle_ms: int | None
    stale: bool
    length: int
    """The entries of its stream."""
    consumers: list[ConsumerRow]


class GroupsView(Model, frozen=True):
    """The consumer groups of a scope's streams, at the server's `now`, judged stale by
    `retention_ms` (SFC_EQUIPMENT_RETENTION)."""

    scope: str
    now: int
    retention_ms: int
    groups: list[GroupRow]


class DeadEntryRow(Model, frozen=True):
    """A dead entry of the scope: its id on the dead stream and on the work stream
    (`entry`), why it died, the deliveries it had, its kind, data and job."""

    id: str
    entry: str
    reason: str
    deliveries: int
    kind: str
    data: str
    job: str | None


class DeadView(Model, frozen=True):
    """The scope's dead entries, oldest first."""

    scope: str
    dead: list[DeadEntryRow]


def pending_entry(p: dict[str, Any]) -> PendingEntry:
    """A pending work entry (`Store.pending_entries`) as a row."""
    f = p["fields"]
    return PendingEntry(
        id=p["id"],
        consumer=p["consumer"],
        idle_ms=p["idleMs"],
        deliveries=p["deliveries"],
        entry=_describe(p["id"], f),
        kind=f.get(b"kind", b"").decode(errors="replace"),
        job=dead_job(p["id"], f),
    )


def _describe(entry_id: str, f: dict[bytes, bytes]) -> str:
    try:
        e = decode_work(entry_id, f)
    except EntryError as x:
        return f"malformed ({x})"
    job = getattr(e.data, "job", None)
    return f"{e.kind}" + (f" for job {job}" if job else "")


PENDING_LIMIT = 1_000
"""The most pending entries `work_pending` reads, oldest first."""
DEAD_LIMIT = 1_000
"""The most dead entries `work_dead` reads, oldest first."""


OUT_LIMIT = 100
"""The most commands out at the equipment `work_pending` reads of each adapter's group."""


def work_pending(store: Store, scope: str, limit: int = PENDING_LIMIT) -> PendingView:
    """The scope's work entries read by a worker and not committed, oldest first, how many
    no worker has read yet, the workers that read the scope, and the commands out at the
    equipment."""
    keys.check_scope(scope)
    rows = store.pending_entries(scope, limit)
    streams = store.stream_groups(scope)
    workers = [g for g in streams["work"] if g["raw"] == keys.GROUP.encode()]
    readers = [c for g in workers for c in g["consumers"]]
    adapters = streams["equipment"]
    held = store.equipment_out(scope, [g["raw"] for g in adapters], OUT_LIMIT)
    out = [
        OutAtEquipment(
            group=g["name"],
            entry=p["id"],
            command_id=_data_text(f, "commandId"),
            job=_data_text(f, "job"),
            consumer=p["consumer"],
            idle_ms=p["idleMs"],
            deliveries=p["deliveries"],
        )
        for g, rows_of in zip(adapters, held, strict=True)
        for p, f in rows_of
    ]
    return PendingView(
        scope=scope,
        pending=[pending_entry(p) for p in rows],
        unread=store.unread(scope),
        workers=len(readers),
        workers_idle_ms=min((c["idleMs"] for c in readers), default=None),
        out_at_equipment=sorted(out, key=lambda o: keys_of(o.entry)),
    )


def keys_of(entry_id: str) -> tuple[int, int]:
    """A stream entry id as numbers, to sort by."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _data_text(f: Mapping[bytes, bytes] | None, name: str) -> str | None:
    """A text field of an equipment entry's data (`commandId`, `job`), or None."""
    try:
        data = msgspec.json.decode(b"{}" if f is None else f.get(b"data", b"{}"))
    except (msgspec.DecodeError, RecursionError):
        return None
    c = data.get(name) if isinstance(data, dict) else None
    return c if isinstance(c, str) else None


def work_groups(store: Store, scope: str, retention_ms: int) -> GroupsView:
    """The consumer groups of the scope's work and equipment streams, each judged stale by
    `retention_ms` as the trim judges it."""
    keys.check_scope(scope)
    now = store.time_ms()
    rows = []
    for stream, groups in store.stream_groups(scope).items():
        for g in groups:
            idle = [c["idleMs"] for c in g["consumers"]]
            last = g["lastDelivered"]
            at = keys_of(last)[0]
            role = "adapter" if stream == "equipment" else "other"
            if stream == "work" and g["raw"] == keys.GROUP.encode():
                role = "workers"
            rows.append(
                GroupRow(
                    stream=stream,
                    name=g["name"],
                    role=role,
                    lag=g["lag"],
                    pending=g["pending"],
                    last_delivered=last,
                    last_delivered_at=at or None,
                    idle_ms=min(idle, default=None),
                    stale=stream == "equipment" and stale_group(last, idle, now, retention_ms),
                    length=g["length"],
                    consumers=[
                        ConsumerRow(
                            name=c["name"],
                            pending=c["pending"],
                            idle_ms=c["idleMs"],
                            inactive_ms=c["inactiveMs"],
                        )
                        for c in g["consumers"]
                    ],
                )
            )
    return GroupsView(scope=scope, now=now, retention_ms=retention_ms, groups=rows)


def dead_entry_row(entry_id: str, f: Mapping[bytes, bytes]) -> DeadEntryRow:
    """A dead entry (its fields as stored) as a row."""
    text = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in f.items()}
    return DeadEntryRow(
        id=entry_id,
        entry=text.get("entry", ""),
        reason=text.get("reason", ""),
        deliveries=int(text.get("deliveries", "0") or 0),
        kind=text.get("kind", ""),
        data=text.get("data", ""),
        job=dead_job(entry_id, f),
    )


def work_dead(store: Store, scope: str, limit: int = DEAD_LIMIT) -> DeadView:
    """The scope's dead entries, oldest first, at most `limit`."""
    keys.check_scope(scope)
    return DeadView(scope=scope, dead=[dead_entry_row(i, f) for i, f in store.dead(scope, limit)])

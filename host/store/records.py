"""What the store reads and writes, as values: a job's hash, a commit, a work entry as
read, and the views `sfc job show` and the metrics read in one round trip."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from host.store.wire import Entry, Fields

JOB_FIELDS = ("version", "state", "order", "due")
"""The fields of a job hash a load reads (HMGET), in this order."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """The fields of one job hash, as stored."""

    version: str
    state: bytes
    order: bytes
    due: str


@dataclass(slots=True)
class Commit:
    """One call of `sfc1_commit`: everything one job's evaluations write, atomically."""

    scope: str
    job: str
    version: str
    state: bytes
    order: bytes
    due: int | None
    active: bool
    acks: list[str] = field(default_factory=list)
    equipment: list[tuple[str, bytes]] = field(default_factory=list)
    history: list[tuple[str, bytes]] = field(default_factory=list)
    seen: str | None = None
    waits: list[tuple[str, str, str, int]] = field(default_factory=list)
    """(type id, 'add' | 'nx' | 'rem', member, score): changes of the waits index."""
    work: list[tuple[str, bytes]] = field(default_factory=list)
    """Work entries to queue in the same commit (kind, data)."""
    counter: str = ""
    """A counter of the scope's hash to count in the same commit (a job-control method's:
    `methodsApplied:Pause`); "" none."""


Row = tuple[str, str, Fields]
"""A work entry as read: (scope, entry id, fields)."""
Loaded = tuple[int, dict[str, JobRecord | None], dict[str, str]]
"""What applying a batch of one scope reads: the server's TIME (ms), the hashes of its jobs
(None for a job not stored) and the scope's settings (Store.load_batch)."""

JobView = Callable[[Row], str | None]
"""A work entry's job (None: no job to load: an event, a malformed entry)."""


class EquipmentGroup(TypedDict):
    """An equipment stream's consumer group, as `sfc job show` shows it."""

    name: str
    consumers: int
    pending: int
    lastDelivered: str
    lag: int | None
    """None when the server cannot tell it."""


class XPendingRow(TypedDict):
    """A row of XPENDING's extended form, as redis-py gives it."""

    message_id: bytes
    consumer: bytes
    time_since_delivered: int
    times_delivered: int


class EquipmentHolder(TypedDict):
    """Who of a group holds an equipment entry unacknowledged (`Store.equipment_pending`)."""

    consumer: str
    idleMs: int
    deliveries: int
    consumerIdleMs: int | None
    """How long ago the consumer last read the stream (XINFO CONSUMERS' idle)."""


@dataclass(frozen=True)
class ShowReads:
    """What `Store.show_reads` read for `sfc job show`, in one round trip."""

    now: int
    """The server's TIME, ms."""
    record: JobRecord | None
    history: list[Entry]
    """The job's last history entries, oldest first."""
    due: int | None
    active: bool
    settings: dict[str, str]
    unread: int
    equipment_groups: list[dict[str, Any]]
    """The equipment stream's consumer groups: name, consumers, pending, lastDelivered, lag
    (None when the server cannot tell it)."""
    group_names: list[bytes]
    """The groups' names as the server holds them (for the next calls), in the same order:
    a name shown is decoded with replacement."""
    dead: list[Entry]
    """The scope's last dead entries, newest first."""
    pending: list[XPendingRow]
    """The oldest work entries pending (XPENDING's rows), for `Store.pending_entries`."""


@dataclass(frozen=True, slots=True)
class ScopeGauges:
    """What a metrics scrape reads of a scope (Store.scope_gauges)."""

    values: dict[str, int]
    """The stream lengths, the pending and unread work entries, the job counts, and the
    counters of `sfc:scope:{S}`, by name."""
    equipment_unread: dict[str, int]
    """The equipment entries each adapter's group has not read yet, by group."""


def id_tuple(entry_id: str) -> tuple[int, int]:
    """A stream entry id as (ms, sequence), for comparing ids."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)

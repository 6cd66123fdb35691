"""The equipment stream's commands: what an adapter (host/equipment.py, host/scripted.py,
host/mqtt.py) reads, acknowledges and answers, and its trimming."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import msgspec
import redis

from host import keys
from host.store import wire
from host.store.client import FunctionCall, StoreClient
from host.store.errors import missing_function
from host.store.records import id_tuple
from host.store.wire import Entry


class EquipmentCommands(StoreClient):
    """The equipment stream of a scope, as its adapters use it."""

    def equipment_group(self, scope: str, group: str) -> None:
        try:
            self.client(scope).xgroup_create(keys.equipment(scope), group, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def read_equipment(
        self,
        scope: str,
        group: str,
        consumer: str,
        count: int,
        block_ms: int | None,
        own: bool = False,
    ) -> list[Entry]:
        """New equipment entries for `consumer`; with `own`, those it read before and has not
        acknowledged (an adapter that died before it acted on them: without blocking)."""
        read = wire.xreadgroup(
            group, consumer, count, None if own else block_ms, [keys.equipment(scope)],
            "0" if own else ">",
        )  # fmt: skip
        (reply,) = wire.raised(self._round_trip(scope, [read]))
        return [(i, f) for _, i, f in wire.entries(reply)]

    def ack_equipment(self, scope: str, group: str, ids: Sequence[str]) -> None:
        if ids:
            self.client(scope).xack(keys.equipment(scope), group, *ids)

    def equipment_entries(self, scope: str) -> list[Entry]:
        rows = cast(wire.Stored, self.client(scope).xrange(keys.equipment(scope)))
        return [(wire.text(i), f) for i, f in rows]

    def reply_equipment(
        self,
        scope: str,
        group: str,
        consumer: str,
        answers: Sequence[Mapping[str, bytes]],
        done: Sequence[str],
        count: int,
        block_ms: int | None = None,
    ) -> list[Entry]:
        """An adapter's round trip: add `answers` to the work stream, ack `done`, then read
        the next equipment entries, blocking up to `block_ms`. An error reply raises."""
        work, equipment = keys.work(scope), keys.equipment(scope)
        commands: list[wire.Command] = [
            ("XADD", work, "*", *[x for kv in fields.items() for x in kv]) for fields in answers
        ]
        if done:
            commands.append(("XACK", equipment, group, *done))
        commands.append(wire.xreadgroup(group, consumer, count, block_ms, [equipment]))
        out = wire.raised(self._round_trip(scope, commands))
        return [(i, f) for _, i, f in wire.entries(out[-1])]

    def trim_equipment(self, scope: str, retention_ms: int, now: int | None = None) -> int:
        """Remove the equipment entries below the oldest that a group (not stale) has not
        acknowledged, none that expired less than `retention_ms` ago. Returns how many."""
        key = keys.equipment(scope)
        now = self.time_ms() if now is None else now
        bound: tuple[int, int] | None = None  # the first entry some group still needs
        groups: Any = self.client(scope).xinfo_groups(key) if self.client(scope).exists(key) else []
        for g in groups:
            name = g["name"]
            consumers: Any = self.client(scope).xinfo_consumers(key, name)
            idle = [int(c["idle"]) for c in consumers]
            if stale_group(wire.text(g["last-delivered-id"]), idle, now, retention_ms):
                continue
            first = _first_unacked(self.client(scope), key, name, wire.text(g["last-delivered-id"]))
            if first is not None and (bound is None or first < bound):
                bound = first
        removed = 0
        cut: str | None = None
        start = "-"
        while True:
            rows = cast(wire.Stored, self.client(scope).xrange(key, min=start, count=100))
            if not rows:
                break
            stop = False
            for entry_id, fields in rows:
                eid = id_tuple(wire.text(entry_id))
                if bound is not None and eid >= bound:
                    stop = True
                    break
                if _expires_at(fields, eid[0]) + retention_ms > now:
                    stop = True
                    break
                cut = wire.text(entry_id)
                removed += 1
            if stop or len(rows) < 100:
                break
            last = id_tuple(wire.text(rows[-1][0]))
            start = f"{last[0]}-{last[1] + 1}"
        if cut is None:
            return 0
        last = id_tuple(cut)
        self.client(scope).xtrim(key, minid=f"{last[0]}-{last[1] + 1}", approximate=False)
        return removed

    def send_replies(
        self,
        scope: str,
        answers: Sequence[Mapping[str, bytes]],
        events: Sequence[tuple[str, bytes]],
        counter: str,
    ) -> tuple[list[str], list[str | None]]:
        """Add answers and publish events (`(typeId, data)`) in one pipeline; their entry
        ids (None for an event dropped: no job waits for its type)."""
        pipe = self.client(scope).pipeline(transaction=False)
        for fields in answers:
            pipe.xadd(keys.work(scope), dict(fields))  # type: ignore[arg-type]
        calls: list[FunctionCall] = [
            (
                "sfc1_publish",
                [keys.waits(scope, t), keys.work(scope), keys.settings(scope)],
                [d, counter],
            )
            for t, d in events
        ]
        for name, keys_, args in calls:
            pipe.fcall(name, len(keys_), *keys_, *args)
        results: list[Any] = pipe.execute(raise_on_error=False)
        for x in results[: len(answers)]:
            if isinstance(x, Exception):
                raise x
        published: list[str | None] = []
        for (name, keys_, args), x in zip(calls, results[len(answers) :], strict=True):
            if isinstance(x, redis.ResponseError) and missing_function(x):
                x = self._fcall(name, keys_, args)  # the library was not loaded yet
            elif isinstance(x, Exception):
                raise x
            text = wire.text(x)
            published.append(None if text == "dropped" else text)
        return [wire.text(i) for i in results[: len(answers)]], published

    def autoclaim_equipment(
        self, scope: str, group: str, consumer: str, idle_ms: int, count: int, start: str = "0-0"
    ) -> tuple[str, list[Entry]]:
        """XAUTOCLAIM on the equipment stream for an adapter's group: (next start, the
        entries pending longer than `idle_ms` with another consumer, now this one's)."""
        reply: Any = self.client(scope).xautoclaim(
            keys.equipment(scope),
            group,
            consumer,
            min_idle_time=idle_ms,
            start_id=start,
            count=count,
        )
        entries = [(wire.text(i), f or {}) for i, f in reply[1] if i is not None]
        return wire.text(reply[0]), entries


def _expires_at(fields: Mapping[bytes, bytes], entry_ms: int) -> int:
    """An equipment entry's `expiresAt`; its own time when it has none (a notice)."""
    try:
        data = msgspec.json.decode(fields.get(b"data", b"{}"))
        value = data.get("expiresAt") if isinstance(data, dict) else None
    except (msgspec.DecodeError, RecursionError):
        value = None
    return value if isinstance(value, int) else entry_ms


def stale_group(
    last_delivered: str, consumers_idle_ms: Sequence[int], now: int, retention_ms: int
) -> bool:
    """Whether an equipment group's adapter is gone: none of its consumers has read, nor
    was anything delivered to it, for `retention_ms`."""
    if any(idle <= retention_ms for idle in consumers_idle_ms):
        return False
    return now - id_tuple(last_delivered)[0] > retention_ms


def _first_unacked(r: redis.Redis, key: str, group: Any, last_delivered: str) -> tuple[int, int]:
    """The id of the first entry `group` has not acknowledged: its oldest pending entry, or
    the entry after the last one delivered to it."""
    summary: Any = r.xpending(key, group)
    if summary and summary.get("pending"):
        return id_tuple(wire.text(summary["min"]))
    last = id_tuple(last_delivered)
    return last[0], last[1] + 1

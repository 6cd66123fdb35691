"""The read views: what `sfc job show`, `sfc work`, the metrics and the job listing read,
each in as few round trips as it can. Nothing here writes."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, cast

import redis

from host import keys
from host.store import wire
from host.store.client import StoreClient
from host.store.commit import records
from host.store.records import (
    JOB_FIELDS,
    EquipmentHolder,
    ScopeGauges,
    ShowReads,
    XPendingRow,
)
from host.store.wire import Entry

STORED_CHUNK = 5_000
"""The EXISTS of one round trip of `Store.stored_jobs`."""


def _name(value: object) -> str:
    """A name the server holds (a group's, a consumer's) as shown: each byte that is not
    UTF-8 escaped (`bad\\xffname`), so that no name fails a view and two stay apart."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else str(value)


def work_unread(group: Mapping[str, Any], length: int) -> int:
    """The work entries no worker has read yet: `group`'s lag, else `length` less the
    entries pending (exact: an acknowledged entry is deleted)."""
    lag = group.get("lag")
    return int(lag) if lag is not None else max(0, length - int(group["pending"]))


def _work_group(groups: Any) -> Mapping[str, Any] | None:
    """The workers' group among a reply of XINFO GROUPS (an error: no stream yet), or None."""
    if isinstance(groups, Exception):
        return None
    for g in groups:
        if g["name"] in (keys.GROUP, keys.GROUP.encode()):
            return dict(g)
    return None


def _raw(value: object) -> bytes:
    """A name as the server holds it."""
    return value if isinstance(value, bytes) else str(value).encode()


class ReadViews(StoreClient):
    """The reads of the views; none of them writes."""

    def scopes(self) -> list[str]:
        return sorted(wire.text(s) for s in self.r.smembers(keys.SCOPES))

    def stored_jobs(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (scope, job) pairs are stored: their EXISTS in one pipeline per node,
        STORED_CHUNK a round trip."""
        by_node: dict[int, tuple[redis.Redis, list[tuple[str, str]]]] = {}
        for scope, job in pairs:
            client = self.client(scope)
            by_node.setdefault(id(client), (client, []))[1].append((scope, job))
        found: set[tuple[str, str]] = set()
        for client, part in by_node.values():
            for i in range(0, len(part), STORED_CHUNK):
                chunk = part[i : i + STORED_CHUNK]
                pipe = client.pipeline(transaction=False)
                for scope, job in chunk:
                    pipe.exists(keys.job(scope, job))
                exists = cast(list[int], pipe.execute())
                found.update(pair for pair, n in zip(chunk, exists, strict=True) if n)
        return found

    def order_ids(self, scope: str) -> list[str]:
        """Every stored job id of the scope, oldest order first."""
        return [wire.text(j) for j in self.client(scope).zrange(keys.orders(scope), 0, -1)]

    def history_changes(
        self, scope: str, after: Mapping[str, str], block_ms: int, dead_after: str | None = None
    ) -> tuple[dict[str, str], str | None]:
        """The jobs of `after` (job -> history entry id) with a newer history entry, its id,
        and the dead stream's first entry past `dead_after` (None: none); one XREAD COUNT 1
        blocking up to `block_ms`."""
        streams = {keys.history(scope, job): last for job, last in after.items()}
        if dead_after is not None:
            streams[keys.dead(scope)] = dead_after
        if not streams:
            return {}, None
        prefix = len(keys.history(scope, ""))
        dead = keys.dead(scope)
        rows: Any = self.client(scope).xread(streams, count=1, block=block_ms)  # type: ignore[arg-type]
        moved = {
            wire.text(key): wire.text(entries[-1][0]) for key, entries in rows or [] if entries
        }
        dead_moved = moved.pop(dead, None)
        return {key[prefix:]: last for key, last in moved.items()}, dead_moved

    def work_signature(self, scope: str) -> tuple[Any, ...]:
        """What moves when a work entry is added, read, claimed by another worker or
        committed, or a command is read or acknowledged at the equipment: the work stream's
        length, the groups' counters and the workers' pending counts; one round trip."""
        work, equipment = keys.work(scope), keys.equipment(scope)
        pipe = self.client(scope).pipeline(transaction=True)  # one moment: no half change
        pipe.xlen(work)
        pipe.xinfo_groups(work)
        pipe.xpending(work, keys.GROUP)
        pipe.xinfo_groups(equipment)
        length, groups, summary, adapters = pipe.execute(raise_on_error=False)
        if isinstance(length, Exception):
            raise length

        def counters(reply: Any) -> Any:
            if isinstance(reply, Exception):  # no stream or group yet
                return None
            return tuple(
                (g["name"], g["pending"], g["last-delivered-id"], g.get("entries-read"))
                for g in reply
            )

        readers = (
            None
            if isinstance(summary, Exception)
            else tuple((c["name"], c["pending"]) for c in summary["consumers"])
        )
        return (length, counters(groups), readers, counters(adapters))

    def active_jobs(self, scope: str) -> list[str]:
        return sorted(wire.text(j) for j in self.client(scope).smembers(keys.active(scope)))

    def history(self, scope: str, job: str, count: int = 20) -> list[Entry]:
        """The last `count` history entries, oldest first (none for 0)."""
        if count <= 0:
            return []
        rows = cast(
            wire.Stored, self.client(scope).xrevrange(keys.history(scope, job), count=count)
        )
        return [(wire.text(i), f) for i, f in reversed(rows)]

    def unread(self, scope: str) -> int:
        """Work entries no worker has read yet (`work_unread`), 0 for a scope without a
        group; one round trip."""
        pipe = self.client(scope).pipeline(transaction=False)
        pipe.xinfo_groups(keys.work(scope))
        pipe.xlen(keys.work(scope))
        groups, length = pipe.execute(raise_on_error=False)
        if isinstance(length, Exception):
            raise length
        group = _work_group(groups)
        return 0 if group is None else work_unread(group, int(length))

    def stream_groups(self, scope: str) -> dict[str, list[dict[str, Any]]]:
        """The consumer groups of the scope's `work` and `equipment` streams, with their
        stream's length and their consumers (XINFO GROUPS, XLEN, XINFO CONSUMERS); None
        where the server cannot tell. Two round trips."""
        out: dict[str, list[dict[str, Any]]] = {}
        streams = {"work": keys.work(scope), "equipment": keys.equipment(scope)}
        pipe = self.client(scope).pipeline(transaction=False)
        for key in streams.values():
            pipe.xinfo_groups(key)
            pipe.xlen(key)
        replies = pipe.execute(raise_on_error=False)
        asked: list[tuple[str, Any]] = []
        for (stream, key), groups, length in zip(
            streams.items(), replies[::2], replies[1::2], strict=True
        ):
            if isinstance(length, Exception):
                raise length
            out[stream] = []
            if isinstance(groups, Exception):  # no such stream yet
                continue
            for g in groups:
                raw = _raw(g["name"])
                lag = g.get("lag")
                out[stream].append(
                    {
                        "name": _name(g["name"]),
                        "raw": raw,
                        "pending": int(g["pending"]),
                        "lag": None if lag is None else int(lag),
                        "lastDelivered": wire.text(g["last-delivered-id"]),
                        "length": int(length),
                        "consumers": [],
                    }
                )
                asked.append((key, raw))
        if not asked:
            return out
        pipe = self.client(scope).pipeline(transaction=False)
        for key, raw in asked:
            pipe.xinfo_consumers(key, raw)
        every = [g for stream in streams for g in out[stream]]
        for g, consumers in zip(every, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(consumers, Exception):  # dropped meanwhile
                continue
            g["consumers"] = [
                {
                    "name": _name(c["name"]),
                    "pending": int(c["pending"]),
                    "idleMs": int(c["idle"]),
                    "inactiveMs": None if c.get("inactive") is None else int(c["inactive"]),
                }
                for c in consumers
            ]
        return out

    def equipment_out(
        self, scope: str, groups: Sequence[bytes], limit: int
    ) -> list[list[tuple[dict[str, Any], Mapping[bytes, bytes] | None]]]:
        """Each equipment group's oldest `limit` entries not acknowledged, with their
        fields (None: trimmed since); two round trips."""
        if not groups:
            return []
        key = keys.equipment(scope)
        pipe = self.client(scope).pipeline(transaction=False)
        for group in groups:
            pipe.xpending_range(key, group, "-", "+", limit)
        pending: Any = pipe.execute(raise_on_error=False)
        rows = [[] if isinstance(p, Exception) else list(p) for p in pending]
        pipe = self.client(scope).pipeline(transaction=False)
        for row in rows:
            for p in row:
                pipe.xrange(key, min=p["message_id"], max=p["message_id"], count=1)
        found: Any = iter(pipe.execute())
        out = []
        for row in rows:
            held = []
            for p in row:
                entry = next(found)
                held.append(
                    (
                        {
                            "id": wire.text(p["message_id"]),
                            "consumer": _name(p["consumer"]),
                            "idleMs": int(p["time_since_delivered"]),
                            "deliveries": int(p["times_delivered"]),
                        },
                        entry[0][1] if entry else None,
                    )
                )
            out.append(held)
        return out

    def drop_group(self, scope: str, stream: str, raw: bytes) -> bool:
        """Remove a consumer group of the scope's `work` or `equipment` stream (XGROUP
        DESTROY): whether there was one."""
        key = keys.work(scope) if stream == "work" else keys.equipment(scope)
        return bool(self.client(scope).xgroup_destroy(key, raw))

    def show_reads(
        self, scope: str, job: str, history: int, dead_tail: int, pending: int
    ) -> ShowReads:
        """What `sfc job show` reads first, in one round trip (one slot): TIME, the job's
        hash, history, indexes, the scope's settings, the streams' groups, the last
        `dead_tail` dead entries and the oldest `pending` work entries."""
        pipe = self.client(scope).pipeline(transaction=False)
        pipe.time()
        pipe.hmget(keys.job(scope, job), list(JOB_FIELDS))
        pipe.xrevrange(keys.history(scope, job), count=max(1, history))
        pipe.zscore(keys.due(scope), job)
        pipe.sismember(keys.active(scope), job)
        pipe.hgetall(keys.settings(scope))
        pipe.xinfo_groups(keys.work(scope))
        pipe.xlen(keys.work(scope))
        pipe.xinfo_groups(keys.equipment(scope))
        pipe.xrevrange(keys.dead(scope), count=dead_tail)
        pipe.xpending_range(keys.work(scope), keys.GROUP, "-", "+", pending)
        reply: Any = pipe.execute(raise_on_error=False)
        (now, fields, rows, due, active, settings, work_groups, length, equipment_groups, dead,
         held) = reply  # fmt: skip
        for x in [now, fields, rows, due, active, settings, length, dead]:
            if isinstance(x, Exception):
                raise x
        if isinstance(held, Exception):
            if not str(held).startswith("NOGROUP"):
                raise held
            held = []  # no work stream or group yet
        work_group = _work_group(work_groups)  # none: no work stream or group yet
        groups = []
        names: list[bytes] = []
        if not isinstance(equipment_groups, Exception):  # no equipment stream yet
            names = [_raw(g["name"]) for g in equipment_groups]
            groups = [
                {
                    "name": _name(g["name"]),
                    "consumers": int(g["consumers"]),
                    "pending": int(g["pending"]),
                    "lastDelivered": wire.text(g["last-delivered-id"]),
                    "lag": None if g.get("lag") is None else int(g["lag"]),
                }
                for g in equipment_groups
            ]
        return ShowReads(
            now=now[0] * 1000 + now[1] // 1000,
            record=records([fields], [job])[job],
            history=[(wire.text(i), f) for i, f in reversed(rows)] if history > 0 else [],
            due=None if due is None else int(due),
            active=bool(active),
            settings={wire.text(k): wire.text(v) for k, v in settings.items()},
            unread=0 if work_group is None else work_unread(work_group, int(length)),
            equipment_groups=groups,
            group_names=names,
            dead=[(wire.text(i), f) for i, f in dead],
            pending=list(held),
        )

    def equipment_from(self, scope: str, times: Sequence[int], count: int) -> list[list[Entry]]:
        """For each time in `times`, the first `count` equipment entries from that
        millisecond on (a commit's commands are among them), in one pipeline."""
        if not times:
            return []
        pipe = self.client(scope).pipeline(transaction=False)
        for ms in times:
            pipe.xrange(keys.equipment(scope), str(ms), "+", count=count)
        replies = cast(list[wire.Stored], pipe.execute())
        return [[(wire.text(i), f) for i, f in rows] for rows in replies]

    def equipment_after(
        self, scope: str, reads: Sequence[tuple[str, int]], count: int
    ) -> list[list[Entry]]:
        """For each (entry id, ms) of `reads`, up to `count` equipment entries after that id
        within that millisecond, in one pipeline."""
        if not reads:
            return []
        pipe = self.client(scope).pipeline(transaction=False)
        for after, ms in reads:
            pipe.xrange(keys.equipment(scope), "(" + after, str(ms), count=count)
        replies = cast(list[wire.Stored], pipe.execute())
        return [[(wire.text(i), f) for i, f in rows] for rows in replies]

    def equipment_pending(
        self, scope: str, wanted: Sequence[tuple[str | bytes, str]]
    ) -> list[EquipmentHolder | None]:
        """For each (group, entry id), who holds the equipment entry unacknowledged (with
        idle ms, deliveries, `consumerIdleMs`), or None if acknowledged; one pipeline."""
        if not wanted:
            return []
        groups = list(dict.fromkeys(g for g, _ in wanted))
        pipe = self.client(scope).pipeline(transaction=False)
        for group, entry_id in wanted:
            pipe.xpending_range(keys.equipment(scope), group, entry_id, entry_id, 1)
        for group in groups:
            pipe.xinfo_consumers(keys.equipment(scope), group)
        replies: Any = pipe.execute()
        idle = {
            (group, _raw(c["name"])): int(c["idle"])
            for group, consumers in zip(groups, replies[len(wanted) :], strict=True)
            for c in consumers
        }
        out: list[EquipmentHolder | None] = []
        for (group, _), rows in zip(wanted, replies[: len(wanted)], strict=True):
            out.append(
                {
                    "consumer": _name(rows[0]["consumer"]),
                    "idleMs": int(rows[0]["time_since_delivered"]),
                    "deliveries": int(rows[0]["times_delivered"]),
                    "consumerIdleMs": idle.get((group, _raw(rows[0]["consumer"]))),
                }
                if rows
                else None
            )
        return out

    def pending_summary(self, scope: str) -> dict[str, Any]:
        return dict(self.client(scope).xpending(keys.work(scope), keys.GROUP))

    def scope_gauges(self, scope: str) -> ScopeGauges:
        """What a metrics scrape reads of a scope (streams' lengths, pending, job counts,
        the scope's counters, the streams' groups), in one pipeline of cheap calls."""
        pipe = self.client(scope).pipeline(transaction=False)
        pipe.xlen(keys.work(scope))
        pipe.xlen(keys.dead(scope))
        pipe.xlen(keys.equipment(scope))
        pipe.scard(keys.active(scope))
        pipe.zcard(keys.due(scope))
        pipe.zcard(keys.orders(scope))
        pipe.hgetall(keys.settings(scope))
        pipe.xpending(keys.work(scope), keys.GROUP)
        pipe.xinfo_groups(keys.work(scope))
        pipe.xinfo_groups(keys.equipment(scope))
        reply: Any = pipe.execute(raise_on_error=False)
        work, dead, equipment, active, due, orders, settings, pending, groups, adapters = reply
        out = {
            "work": int(work),
            "dead": int(dead),
            "equipment": int(equipment),
            "active": int(active),
            "due": int(due),
            "orders": int(orders),
            # no group yet (NOGROUP): nothing pending
            "pending": 0 if isinstance(pending, Exception) else int(pending["pending"]),
            "unread": 0,
        }
        work_group = _work_group(groups)  # none: no stream or group yet
        if work_group is not None:
            out["unread"] = work_unread(work_group, out["work"])
        for k, v in settings.items():
            with contextlib.suppress(ValueError):
                out[wire.text(k)] = int(v)
        unread = self.unread_of(scope, [] if isinstance(adapters, Exception) else adapters)
        return ScopeGauges(out, unread)

    def unread_of(self, scope: str, groups: Sequence[Any], limit: int = 1000) -> dict[str, int]:
        """The equipment entries each group has not read, by group: its lag, else (an entry
        deleted by hand) those after its last-delivered-id, up to `limit`."""
        out: dict[str, int] = {}
        counted: list[str] = []
        pipe = self.client(scope).pipeline(transaction=False)
        for g in groups:
            name = _name(g["name"])
            if g.get("lag") is not None:
                out[name] = int(g["lag"])
            else:
                counted.append(name)
                after = "(" + wire.text(g["last-delivered-id"])
                pipe.xrange(keys.equipment(scope), after, "+", count=limit)
        if counted:
            rows = cast(list[wire.Stored], pipe.execute())
            out.update((name, len(r)) for name, r in zip(counted, rows, strict=True))
        return out

    def pending_entries(
        self, scope: str, count: int = 100, rows: list[XPendingRow] | None = None
    ) -> list[dict[str, Any]]:
        """The oldest pending work entries of `rows` (their XPENDING reply): id, consumer,
        idle ms, deliveries, fields."""
        if rows is None:
            try:
                rows = self.client(scope).xpending_range(  # type: ignore[assignment]
                    keys.work(scope), keys.GROUP, "-", "+", count
                )
            except redis.ResponseError as e:
                if str(e).startswith("NOGROUP"):
                    return []
                raise
        if not rows:
            return []
        pipe = self.client(scope).pipeline(transaction=False)
        for row in rows:
            entry_id = wire.text(row["message_id"])
            pipe.xrange(keys.work(scope), entry_id, entry_id)
        found = cast(list[wire.Stored], pipe.execute())
        pairs = list(zip(rows, found, strict=True))
        gone = [wire.text(r["message_id"]) for r, got in pairs if not got]
        if gone:
            # no fields: committed (acked and deleted) since the XPENDING above, or deleted
            # while still pending; only the second is pending still, and shown
            again = self.client(scope).pipeline(transaction=False)
            for entry_id in gone:
                again.xpending_range(keys.work(scope), keys.GROUP, entry_id, entry_id, 1)
            done = {i for i, x in zip(gone, again.execute(), strict=True) if not x}
            pairs = [(r, got) for r, got in pairs if wire.text(r["message_id"]) not in done]
        out: list[dict[str, Any]] = []
        for row, got in pairs:
            out.append(
                {
                    "id": wire.text(row["message_id"]),
                    "consumer": _name(row["consumer"]),
                    "idleMs": int(row["time_since_delivered"]),
                    "deliveries": int(row["times_delivered"]),
                    "fields": got[0][1] if got else {},
                }
            )
        return out

    def dead(self, scope: str, count: int = 100) -> list[Entry]:
        rows = cast(wire.Stored, self.client(scope).xrange(keys.dead(scope), count=count))
        return [(wire.text(i), f) for i, f in rows]

    def heartbeat(self, scope: str) -> dict[str, str]:
        return {
            wire.text(k): wire.text(v)
            for k, v in self.client(scope).hgetall(keys.heartbeat(scope)).items()
        }

    def due(self, scope: str) -> dict[str, int]:
        rows = cast(wire.Scored, self.client(scope).zrange(keys.due(scope), 0, -1, withscores=True))
        return {wire.text(j): int(s) for j, s in rows}

    def equipment_entries(self, scope: str) -> list[Entry]:
        rows = cast(wire.Stored, self.client(scope).xrange(keys.equipment(scope)))
        return [(wire.text(i), f) for i, f in rows]

"""The commands: scopes, recipes, jobs, the work stream, dead entries and the sweep, each
one call (or one pipeline) of the server, most of them a function of the library `sfc_1`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import redis
from redis.typing import EncodableT

from host import keys
from host.store import wire
from host.store.client import FunctionCall, StoreClient
from host.store.commit import raw_rows, wait_args
from host.store.wire import Entry, Fields

CLUSTER_BLOCK_MS = 10
"""On a cluster, how long a read of several scopes blocks on one of them."""
RETIRED_TTL_MS = 30 * 86_400_000
"""How long `sfc:retired` remembers the last sequence of a cleared job id (30 days)."""
DEAD_FIELDS = (b"reason", b"entry", b"deliveries", b"job")
"""The fields a dead entry adds to the entry's own (`bury`; `requeue` removes them)."""
KEPT = b"original-"
"""The prefix a dead entry keeps an entry's own field under when its name is one of
DEAD_FIELDS, or starts with the prefix itself (`_dead_name`)."""


def _dead_name(name: bytes) -> bytes:
    """An entry's field name in its dead entry: `original-NAME` for one of DEAD_FIELDS or
    one that starts with `original-`, else as it is (`_own_name` undoes it)."""
    return KEPT + name if name in DEAD_FIELDS or name.startswith(KEPT) else name


def _own_name(name: bytes) -> bytes:
    """The name a dead entry's field had in the entry (`_dead_name` undone)."""
    return name.removeprefix(KEPT)


def scope_keys(scope: str) -> list[str]:
    """The fixed keys of `scope`, and one never written (`keys.probe`): a call of them all
    answers a move while its slot is being moved (Store.probe)."""
    return [
        keys.work(scope),
        keys.due(scope),
        keys.active(scope),
        keys.orders(scope),
        keys.heartbeat(scope),
        keys.outage(scope),
        keys.settings(scope),
        keys.dead(scope),
        keys.equipment(scope),
        keys.probe(scope),
    ]


class Commands(StoreClient):
    """The commands of scopes, recipes, jobs, the work stream and the sweep."""

    # -- scopes and settings

    def register_scope(self, scope: str) -> None:
        self.r.sadd(keys.SCOPES, scope)

    def create_group(self, scope: str) -> None:
        try:
            self.client(scope).xgroup_create(keys.work(scope), keys.GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def scope_settings(self, scope: str) -> dict[str, str]:
        return {
            wire.text(k): wire.text(v)
            for k, v in self.client(scope).hgetall(keys.settings(scope)).items()
        }

    def put_scope_settings(self, scope: str, values: Mapping[str, str]) -> None:
        if values:
            mapping: dict[EncodableT, EncodableT] = {k: v for k, v in values.items()}
            self.client(scope).hset(keys.settings(scope), mapping=mapping)

    # -- recipes

    def recipe_text(self, recipe_hash: str) -> bytes | None:
        value = cast("bytes | None", self.r.get(keys.recipe(recipe_hash)))
        return None if value is None else bytes(value)

    def put_recipe(self, recipe_hash: str, text: bytes) -> None:
        self.r.set(keys.recipe(recipe_hash), text, nx=True)

    # -- jobs

    def clear(
        self,
        scope: str,
        job: str,
        version: str,
        sequence: int,
        waits: Sequence[tuple[str, str]] = (),
        retired_ttl_ms: int = RETIRED_TTL_MS,
    ) -> str:
        """`sfc1_clear`: ok, missing or conflict. `waits` are (type id, member) to leave."""
        ks = [
            keys.job(scope, job),
            keys.history(scope, job),
            keys.orders(scope),
            keys.active(scope),
            keys.due(scope),
            keys.retired(scope),
            *(keys.waits(scope, t) for t, _ in waits),
        ]
        args: list[wire.Arg] = [job, version, sequence, retired_ttl_ms, *(m for _, m in waits)]
        return wire.text(self._fcall("sfc1_clear", ks, args))

    def waits_of(self, scope: str, job: str) -> list[tuple[str, str]]:
        """Every (type id, member) of the scope's waits keys that names `job` (a scan of
        the scope's keys: for removing a job whose state cannot say what it waits for)."""
        client = self.client(scope)
        prefix = keys.waits(scope, "")
        out: list[tuple[str, str]] = []
        pattern = "".join("\\" + c if c in "\\*?[]" else c for c in prefix) + "*"
        for key in client.scan_iter(match=pattern):
            name = wire.text(key)
            for member in client.zrange(name, 0, -1):
                text = wire.text(member)
                try:
                    named = json.loads(text)[0]
                except (ValueError, IndexError, KeyError, TypeError):
                    continue
                if named == job:
                    out.append((name.removeprefix(prefix), text))
        return out

    def lease(self, key: str, holder: str, ttl_ms: int) -> str | None:
        """`sfc1_lease`: hold `key` for `ttl_ms` as `holder` (again: renewed; 0: given up).
        None when it is ours now; else the other holder."""
        result = wire.text(self._fcall("sfc1_lease", [key], [holder, ttl_ms]))
        return None if result == "ok" else result

    def retired_sequence(self, scope: str, job: str) -> str:
        value = self.client(scope).hget(keys.retired(scope), job)
        return "" if value is None else wire.text(value)

    def store_order(
        self,
        scope: str,
        job: str,
        *,
        order: bytes,
        state: bytes,
        retired: str,
        at: int,
        start: bool,
        start_data: bytes,
    ) -> str:
        """`sfc1_store`: ok, exists or conflict."""
        result = self._fcall(
            "sfc1_store",
            [keys.job(scope, job), keys.orders(scope), keys.work(scope), keys.retired(scope)],
            [job, order, state, retired, at, "1" if start else "0", keys.GROUP, start_data],
        )
        return wire.text(result)

    def ack(
        self, scope: str, ids: Sequence[str], counter: str = "", consumer: str | None = None
    ) -> str:
        """`sfc1_ack`: ack and delete entries that change no job, counting them in the
        scope's settings hash under `counter`; ok or gone."""
        who = self.consumer if consumer is None else consumer
        return wire.text(
            self._fcall(
                "sfc1_ack",
                [keys.work(scope), keys.settings(scope)],
                [keys.GROUP, who, counter, *ids],
            )
        )

    def acks(
        self, scope: str, groups: Sequence[tuple[Sequence[str], str]]
    ) -> list[str | Exception]:
        """`ack` for each (ids, counter) group in one pipeline: ok, gone (nothing written)
        or the error reply, for each."""
        who = self.consumer
        calls: list[FunctionCall] = [
            ("sfc1_ack", [keys.work(scope), keys.settings(scope)], [keys.GROUP, who, c, *ids])
            for ids, c in groups
        ]
        return [wire.text_or_error(x) for x in self._fcalls(calls, each=True)]

    def count(self, scope: str, counter: str) -> None:
        """Count one in the scope's hash `sfc:scope:{S}`, where any process reads it (a
        job-control method refused: `methodsRefused:Pause`)."""
        self.client(scope).hincrby(keys.settings(scope), counter, 1)

    def repair(
        self,
        scope: str,
        job: str,
        version: str,
        active: bool | None,
        waits: Sequence[tuple[str, str, str, int]] = (),
    ) -> str:
        """`sfc1_repair`: set the job's indexes from its hash if its version is `version`
        (ok, conflict or missing). `active` None changes the waits only."""
        ks = [keys.job(scope, job), keys.due(scope), keys.active(scope)]
        flag = "-" if active is None else "1" if active else "0"
        args: list[wire.Arg] = [job, version, flag, len(waits)]
        args += wait_args(scope, waits, ks)
        return wire.text(self._fcall("sfc1_repair", ks, args))

    def waiting(
        self, scope: str, type_id: str, until: int, seen_field: str | None
    ) -> tuple[list[tuple[bytes, int]], bool]:
        """The members of the type's waits that began by `until`, oldest first, and whether
        `seen_field` (an event's source/id) was taken already; one round trip."""
        pipe = self.client(scope).pipeline(transaction=False)
        pipe.zrange(keys.waits(scope, type_id), "-inf", until, byscore=True, withscores=True)
        if seen_field is not None:
            pipe.hexists(keys.seen(scope), seen_field)
        out: Any = pipe.execute()
        members = [(bytes(m), int(score)) for m, score in out[0]]
        return members, bool(out[1]) if seen_field is not None else False

    def waiting_many(
        self, scope: str, until: Mapping[str, int], seen_fields: Sequence[str]
    ) -> tuple[dict[str, list[tuple[bytes, int]]], set[str]]:
        """`waiting` for a batch of events in one round trip: each type's waits begun by its
        `until`, oldest first, and which of `seen_fields` are taken."""
        pipe = self.client(scope).pipeline(transaction=False)
        types = list(until)
        for type_id in types:
            pipe.zrange(
                keys.waits(scope, type_id), "-inf", until[type_id], byscore=True, withscores=True
            )
        if seen_fields:
            pipe.hmget(keys.seen(scope), list(seen_fields))
        out: Any = pipe.execute()
        members = {t: [(bytes(m), int(score)) for m, score in out[i]] for i, t in enumerate(types)}
        taken = (
            {f for f, v in zip(seen_fields, out[-1], strict=True) if v is not None}
            if seen_fields
            else set()
        )
        return members, taken

    def publish(self, scope: str, type_id: str, data: bytes, counter: str) -> str | None:
        """`sfc1_publish`: the entry id, or None when no job waits for the type."""
        result = wire.text(
            self._fcall(
                "sfc1_publish",
                [keys.waits(scope, type_id), keys.work(scope), keys.settings(scope)],
                [data, counter],
            )
        )
        return None if result == "dropped" else result

    # -- the work stream

    def add_work(self, scope: str, fields: Mapping[str, bytes]) -> str:
        return wire.text(self.client(scope).xadd(keys.work(scope), dict(fields)))  # type: ignore[arg-type]

    def read(
        self,
        scopes: Sequence[str],
        count: int,
        block_ms: int | None,
        consumer: str | None = None,
        after: str | None = None,
    ) -> list[tuple[str, str, Fields]]:
        """New work entries of `scopes` for this consumer: (scope, id, fields). With `after`
        (an id, "0" for all), its own pending entries after it instead, without blocking."""
        if not scopes:
            return []
        who = self.consumer if consumer is None else consumer
        if self.cluster is not None and len(scopes) > 1:
            # each scope's stream is in a slot of its own (a multi-stream read would be
            # CROSSSLOT): read each without blocking; when none had any, block briefly on
            # one of them in turn, so that no scope waits long for another
            each: list[tuple[str, str, Fields]] = []
            for s in scopes:
                each += self.read([s], count, None, consumer, after)
            if not each and block_ms and after is None:
                turn = self.next_turn(scopes)
                each = self.read([turn], count, self.cluster_block(block_ms), consumer)
            return each
        if after is not None:
            block_ms = None
        streams = [keys.work(s) for s in scopes]
        read = wire.xreadgroup(keys.GROUP, who, count, block_ms, streams, after or ">")
        (reply,) = wire.raised(self._round_trip(scopes[0], [read]))
        return raw_rows(reply, scopes)

    def next_turn(self, scopes: Sequence[str]) -> str:
        """The scope whose turn it is to block a read of several scopes on a cluster."""
        shared = self._shared
        shared.turn = (shared.turn + 1) % len(scopes)
        return scopes[shared.turn]

    @staticmethod
    def cluster_block(block_ms: int) -> int:
        """How long a read of several scopes on a cluster blocks on the one in turn."""
        return min(block_ms, CLUSTER_BLOCK_MS)

    def can_read_ahead(self, scopes: Sequence[str]) -> bool:
        """Whether a commit stream may read the next entries of `scopes`: one server
        holds them all (on a cluster, only a worker of one scope reads ahead)."""
        return self.cluster is None or len(scopes) == 1

    def autoclaim(
        self, scope: str, idle_ms: int, count: int, start: str = "0-0", consumer: str | None = None
    ) -> tuple[str, list[Entry], list[str]]:
        """XAUTOCLAIM: (next start, claimed entries, ids that were deleted meanwhile)."""
        who = self.consumer if consumer is None else consumer
        reply: Any = self.client(scope).xautoclaim(
            keys.work(scope), keys.GROUP, who, min_idle_time=idle_ms, start_id=start, count=count
        )
        next_start, claimed = wire.text(reply[0]), reply[1]
        deleted = [wire.text(i) for i in reply[2]] if len(reply) > 2 else []
        entries = [(wire.text(i), f or {}) for i, f in claimed if i is not None]
        return next_start, entries, deleted

    def probe(self, scope: str) -> None:
        """On a cluster, raise ASK or TRYAGAIN while the slot of `scope` is being moved;
        nothing else. (A key never written fails so for as long as the move lasts.)"""
        if self.cluster is None:
            return
        self.client(scope).exists(*scope_keys(scope))

    def deliveries(self, scope: str, entry_id: str) -> int:
        """How often the entry was delivered; 0 when it is not pending."""
        rows = self.client(scope).xpending_range(
            keys.work(scope), keys.GROUP, entry_id, entry_id, 1
        )
        return int(rows[0]["times_delivered"]) if rows else 0

    def own_deliveries(self, scope: str, first: str, last: str, count: int) -> dict[str, int]:
        """How often each of this consumer's pending entries from `first` to `last` (up to
        `count` of them) was delivered, by entry id."""
        rows = self.client(scope).xpending_range(
            keys.work(scope), keys.GROUP, first, last, count, consumername=self.consumer
        )
        return {wire.text(row["message_id"]): int(row["times_delivered"]) for row in rows}

    def add_work_many(self, scope: str, entries: Sequence[Mapping[str, bytes]]) -> list[str]:
        pipe = self.client(scope).pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(keys.work(scope), dict(fields))  # type: ignore[arg-type]
        return [wire.text(i) for i in pipe.execute()]

    # -- dead entries

    def bury(
        self,
        scope: str,
        entry_id: str,
        reason: str,
        job: str | None,
        deliveries: int,
        fields: Mapping[bytes, bytes],
        offered_to: str | None = None,
    ) -> str:
        """Move an entry to the dead stream with `job` (or `offered_to`), `reason`, `entry`
        and `deliveries` (`_dead_name`); only its own `job` goes back on the due index.
        Returns ok, or gone when the entry is no longer pending."""
        flat: list[wire.Arg] = []
        for k, v in fields.items():
            flat += [_dead_name(k), v]
        named = job or offered_to
        if named:
            flat += [b"job", named]
        job_key = keys.job(scope, job) if job else keys.settings(scope)
        return wire.text(
            self._fcall(
                "sfc1_bury",
                [keys.work(scope), keys.dead(scope), keys.due(scope), job_key],
                [keys.GROUP, entry_id, reason, job or "", deliveries, *flat],
            )
        )

    def requeue(self, scope: str, entry_id: str) -> str | None:
        """Move a dead entry back to the work stream with its original fields; the new entry
        id, or None when there is no such dead entry."""
        rows = cast(wire.Stored, self.client(scope).xrange(keys.dead(scope), entry_id, entry_id))
        if not rows:
            return None
        fields: dict[EncodableT, EncodableT] = {
            _own_name(k): v for k, v in rows[0][1].items() if k not in DEAD_FIELDS
        }
        pipe = self.client(scope).pipeline(transaction=True)  # both keys carry {scope}: one slot
        pipe.xadd(keys.work(scope), fields)
        pipe.xdel(keys.dead(scope), entry_id)
        added, _ = pipe.execute()
        return wire.text(added)

    def drop_dead(self, scope: str, entry_id: str) -> bool:
        """Remove a dead entry for good (handled by other means); False when there is none."""
        return bool(self.client(scope).xdel(keys.dead(scope), entry_id))

    # -- the sweep

    def sweep(self, scope: str, threshold_ms: int, limit: int) -> tuple[str, int]:
        """`sfc1_sweep`: ('ok', ticks queued) or ('outage', gap ms). Like `probe`, it fails
        for as long as the slot is being moved, so one that goes through ends a move."""
        kind, n = self._fcall(
            "sfc1_sweep",
            [
                keys.due(scope),
                keys.work(scope),
                keys.heartbeat(scope),
                keys.active(scope),
                keys.outage(scope),
                keys.probe(scope),  # never written: a slot being moved answers a move
            ],
            [threshold_ms, limit],
        )
        return wire.text(kind), int(n)

    def outage_chunk(self, scope: str, limit: int) -> tuple[str, int]:
        """`sfc1_outage`: ('more' | 'done', ticks queued)."""
        kind, n = self._fcall(
            "sfc1_outage",
            [keys.heartbeat(scope), keys.outage(scope), keys.work(scope), keys.due(scope)],
            [limit],
        )
        return wire.text(kind), int(n)

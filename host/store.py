"""The one module that talks to the server (docs/host.md).

Everything here is a round trip, or one pipeline of them; what to write is decided by the
pure modules. The client is redis-py's sync client, with hiredis when installed (measured
1.5x to 2x faster than asyncio here). Function calls load the library `sfc_1` when the server
says it is missing, and retry.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import hiredis
import msgspec
import redis
import redis.cluster
import redis.crc
from redis.backoff import NoBackoff
from redis.retry import Retry

from host import keys

_HIREDIS_PARSER: Any = None
"""redis-py's hiredis parser, whose reader `_replies` takes the replies it holds from."""
_NOT_ENOUGH_DATA: Any = object()
"""What that reader returns while a reply is incomplete."""
try:
    from redis._parsers import hiredis as _parsers

    _HIREDIS_PARSER, _NOT_ENOUGH_DATA = _parsers._HiredisParser, _parsers.NOT_ENOUGH_DATA
except (ImportError, AttributeError):  # pragma: no cover - another redis-py: read_response
    pass

log = logging.getLogger("sfc.host.store")

_LIBRARY_SOURCE: str | None = None
CLUSTER_BLOCK_MS = 10
"""On a cluster, how long a read of several scopes blocks on one of them."""
SOCKET_TIMEOUT_S = 5.0
"""How long a call may wait for the server's reply before it counts as unreachable (the
worker logs it and reconnects with backoff): well above the longest blocking read (1 s), so
only a server that stopped answering (frozen, or a network that drops packets without a
reset) reaches it, instead of a worker waiting for ever. redis-py 8's default is the same;
it is set here because older versions had none."""
PROBE_TIMEOUT_S = 0.5
"""How long a probe of a node that could not be reached waits for its PING (Store.answers)."""
RETIRED_TTL_MS = 30 * 86_400_000
"""How long `sfc:retired` remembers the last sequence of a cleared job id (30 days)."""


def library_source() -> str:
    global _LIBRARY_SOURCE
    if _LIBRARY_SOURCE is None:
        _LIBRARY_SOURCE = resources.files("host").joinpath("functions.lua").read_text("utf-8")
    return _LIBRARY_SOURCE


def _missing_function(error: BaseException) -> bool:
    text = str(error).lower()
    return "function not found" in text or "no such function" in text


def _text_or_error(x: Any) -> str | Exception:
    return x if isinstance(x, Exception) else _text(x)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _name(value: Any) -> str:
    """A name the server holds that is shown (a consumer group's, a consumer's; `sfc job
    show`, `sfc work pending`, the metrics' `group` label): one that is not UTF-8 (made by
    hand, `XGROUP CREATE ... "bad\\xffname"`) with each byte that is not UTF-8 escaped
    (`bad\\xffname`), not an error that fails the whole view; and two names that differ
    only in such bytes are shown apart (a replacement character made them one)."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else str(value)


def work_unread(group: Mapping[str, Any], length: int) -> int:
    """The work stream's entries no worker has read yet, of its group `group` (XINFO
    GROUPS) and the stream's `length` (XLEN): the group's lag; where the server cannot tell
    it (entries were deleted), the length less the entries pending, which is exact, since
    every entry a worker acknowledges it deletes in the same call (commit, ack, bury): the
    stream holds the pending entries and the unread ones. The one count `sfc job show`,
    `sfc work pending` and the metric `sfc_work_unread` give."""
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


_READS = frozenset({"TIME", "HGETALL", "HMGET"})
"""The commands of a round trip that may be sent again after a broken connection."""
JOB_FIELDS = ("version", "state", "order", "due")
"""The fields of a job hash a load reads (HMGET), in this order."""
HELD_CHUNK = 5_000
"""The EXISTS of one round trip of `Store.held`."""
DEAD_FIELDS = (b"reason", b"entry", b"deliveries", b"job")
"""The fields a dead entry adds to the entry's own (`bury`; `requeue` removes them)."""
KEPT = b"original-"
"""The prefix a dead entry keeps an entry's own field under when its name is one of
DEAD_FIELDS, or starts with the prefix itself (`_dead_name`)."""


def _dead_name(name: bytes) -> bytes:
    """The name an entry's own field has in its dead entry: `original-NAME` for a name the
    dead entry adds itself (DEAD_FIELDS) or one that starts with `original-` (so that an
    entry's own `original-job` is not taken for a kept `job`), else the name as it is; one
    prefix more, so `requeue` gives back every name exactly by taking one off (`_own_name`),
    and a dead entry of the common case looks as it always did."""
    return KEPT + name if name in DEAD_FIELDS or name.startswith(KEPT) else name


def _own_name(name: bytes) -> bytes:
    """The name a dead entry's field had in the entry (`_dead_name` undone)."""
    return name.removeprefix(KEPT)


@dataclass(frozen=True)
class ShowReads:
    """What `Store.show_reads` read for `sfc job show`, in one round trip."""

    now: int
    """The server's TIME, ms."""
    record: JobRecord | None
    history: list[tuple[str, dict[bytes, bytes]]]
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
    dead: list[tuple[str, dict[bytes, bytes]]]
    """The scope's last dead entries, newest first."""
    pending: list[Any]
    """The oldest work entries pending (XPENDING's rows), for `Store.pending_entries`."""


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


Row = tuple[str, str, dict[bytes, bytes]]
"""A work entry as read: (scope, entry id, fields)."""
Loaded = tuple[int, dict[str, JobRecord | None], dict[str, str]]
"""What applying a batch of one scope reads: the server's TIME (ms), the hashes of its jobs
(None for a job not stored) and the scope's settings (Store.load_batch)."""


@dataclass(slots=True)
class ReadAhead:
    """A worker's read ahead, carried by round trips it makes anyway, after their own
    commands, so that under load a batch costs one round trip instead of three (read, load,
    commit):

    - a batch's commit stream loads the rows read ahead already (`rows`), after the batch's
      commits: they move to `ready`, with their load in `loaded`, and make the next batch;
    - a batch's commit stream, or its own load, reads up to `count` new entries per stream
      (XREADGROUP `>`, not blocking; none when `count` is 0) into `rows`.

    `rows` is the worker's list, changed in place: rows go into it as soon as they are read,
    and leave it only once loaded, so that a batch that raises afterwards does not orphan
    them (they are pending for this consumer already). `job_of` names a row's job (None: no
    job to load, an event or a malformed entry); without it, nothing is loaded."""

    scopes: tuple[str, ...]
    count: int
    rows: list[Row]
    job_of: Callable[[Row], str | None] | None = None
    ready: list[Row] = field(default_factory=list)
    """The rows loaded by the last round trip, in the order read: the next batch."""
    loaded: dict[str, Loaded] = field(default_factory=dict)
    """Their loads, by scope."""
    _plan: tuple[int, list[tuple[str, list[str]]], bool] = (0, [], False)

    def commands(self, consumer: str, load: bool) -> list[tuple[Any, ...]]:
        """The commands to send after a round trip's own: with `load`, the load of the rows
        held now (TIME, then each scope's settings and job hashes); then the read."""
        jobs: dict[str, dict[str, None]] = {}
        job_of = self.job_of if load else None
        held = 0 if job_of is None else len(self.rows)
        for row in self.rows[:held]:
            job = job_of(row) if job_of is not None else None
            if job is not None:
                jobs.setdefault(row[0], {})[job] = None
        plan = [(scope, list(js)) for scope, js in jobs.items()]
        out: list[tuple[Any, ...]] = []
        if plan:
            out.append(("TIME",))
            for scope, js in plan:
                out += _load_commands(scope, js)
        else:
            held = 0  # no job to load (events only): they are applied as read
        # a batch's own load reads ahead only for a worker that loads ahead: it is that
        # batch's commit stream that loads the rows (one that does not reads in the stream)
        read = self.count > 0 and (load or self.job_of is not None)
        if read:
            streams = [keys.work(s) for s in self.scopes]
            out.append(_xreadgroup(keys.GROUP, consumer, self.count, None, streams))
        self._plan = (held, plan, read)
        return out

    def take(self, replies: Sequence[Any]) -> None:
        """Take the replies of `commands` (raw; an error reply as its exception). A load
        with an error reply loads nothing: its rows stay held and load with their batch. An
        error reply to the read (NOGROUP of a scope just cleared) reads nothing: the next
        read says."""
        held, plan, read = self._plan
        self._plan = (0, [], False)
        at = 0
        if plan:
            n = 1 + sum(1 + len(js) for _, js in plan)
            part, at = replies[:n], n
            if not any(isinstance(x, Exception) for x in part):
                now = _ms(part[0])
                i = 1
                for scope, js in plan:
                    self.loaded[scope] = (now, *_load_result(part[i : i + 1 + len(js)], js))
                    i += 1 + len(js)
                self.ready += self.rows[:held]
                del self.rows[:held]
        if read and not isinstance(replies[at], Exception):
            self.rows += _raw_rows(replies[at], self.scopes)


def _pack(commands: Sequence[tuple[Any, ...]]) -> bytes:
    """Commands in the wire protocol, packed by hiredis directly (every argument is bytes,
    str or int): redis-py's packer looks at each argument in Python first, which was a third
    of a commit's cost on the hot path (the load and the commit stream)."""
    return b"".join([hiredis.pack_command(c) for c in commands])


def _xreadgroup(
    group: str,
    consumer: str,
    count: int,
    block_ms: int | None,
    streams: Sequence[str],
    start: str = ">",
) -> tuple[Any, ...]:
    """XREADGROUP of new entries (`>`) of `streams`, or with `start` "0" of the consumer's
    own pending ones; blocking only when `block_ms` is set."""
    block = () if block_ms is None else ("BLOCK", block_ms)
    return (
        "XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block,
        "STREAMS", *streams, *[start] * len(streams),
    )  # fmt: skip


def _raw_entries(reply: Any) -> list[tuple[str, str, dict[bytes, bytes]]]:
    """(stream, entry id, fields) of a raw XREAD/XREADGROUP reply (no redis-py callbacks): a
    list of [stream, entries] in RESP2, a map in RESP3. An entry deleted while pending has
    no fields."""
    if not reply:
        return []
    out: list[tuple[str, str, dict[bytes, bytes]]] = []
    for stream, entries in reply.items() if isinstance(reply, dict) else reply:
        name = _text(stream)
        for entry_id, flat in entries:
            if isinstance(flat, dict):
                values = flat
            else:
                values = dict(zip(flat[::2], flat[1::2], strict=True)) if flat else {}
            out.append((name, _text(entry_id), values))
    return out


def _raw_rows(reply: Any, scopes: Sequence[str]) -> list[Row]:
    """(scope, entry id, fields) of a raw XREADGROUP reply over the work streams of
    `scopes`."""
    by_key = {keys.work(s): s for s in scopes}
    return [(by_key[stream], i, f) for stream, i, f in _raw_entries(reply)]


def _replies(conn: Any, n: int) -> list[Any]:
    """The next `n` raw replies on `conn` (no redis-py callbacks); an error reply as its
    exception, so that the replies after it are still read.

    A reply hiredis holds already is taken from its reader here, as redis-py's
    read_response would take it (~0.5 µs a reply less, two replies an applied event); a
    reply still to be received is read by read_response, which reads the socket and
    handles its errors."""
    out: list[Any] = []
    parser = conn._parser
    gets = None
    # (a reply that can_read peeked at is held by the parser: read_response returns it)
    if type(parser) is _HIREDIS_PARSER and (
        getattr(parser, "_next_response", _NOT_ENOUGH_DATA) is _NOT_ENOUGH_DATA
    ):
        reader = getattr(parser, "_reader", None)  # None: not connected
        gets = None if reader is None else reader.gets
    taken = False
    lost = redis.ConnectionError
    try:
        for _ in range(n):
            while True:
                reply = _NOT_ENOUGH_DATA if gets is None else gets()
                if reply is _NOT_ENOUGH_DATA:
                    try:
                        reply = conn.read_response()
                    except redis.ResponseError as e:
                        reply = e
                    break
                taken = True
                if type(reply) is list:  # a plain list (a push message is a list's subclass)
                    if reply and isinstance(reply[0], lost):
                        raise reply[0]
                elif isinstance(reply, _SPECIAL) and _pushed(parser, reply):
                    continue
                break
            out.append(reply)
    except BaseException:
        conn.disconnect()  # as read_response does
        raise
    if taken and conn.health_check_interval:
        conn.next_health_check = time.monotonic() + conn.health_check_interval
    return out


_SPECIAL = (Exception, list)
"""The replies `_pushed` looks at."""


def _pushed(parser: Any, reply: Any) -> bool:
    """What redis-py's read_response does with a reply taken from hiredis's reader before
    it returns it (but a plain list's check, made by `_replies`): a connection's error
    reply raises (an error reply is the reply); a push message is handled, and is no reply
    (True)."""
    if isinstance(reply, redis.ConnectionError):
        raise reply
    if isinstance(reply, list) and reply and isinstance(reply[0], redis.ConnectionError):
        raise reply[0]
    push = getattr(parser, "_hiredis_PushNotificationType", None)
    if push is not None and isinstance(reply, push):
        parser.handle_push_response(reply)
        return True
    return False


def _raised(replies: list[Any]) -> list[Any]:
    """`replies`, when none is an error reply; else the first error raises."""
    for x in replies:
        if isinstance(x, Exception):
            raise x
    return replies


def _ms(reply: Any) -> int:
    """Epoch milliseconds of a TIME reply."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def _load_commands(scope: str, jobs: Sequence[str]) -> list[tuple[Any, ...]]:
    """The settings of `scope` and the hashes of `jobs` (after a TIME): a batch's load."""
    return [
        ("HGETALL", keys.settings(scope)),
        *[("HMGET", keys.job(scope, job), *JOB_FIELDS) for job in jobs],
    ]


def _load_result(
    replies: Sequence[Any], jobs: Sequence[str]
) -> tuple[dict[str, JobRecord | None], dict[str, str]]:
    """The records and settings of `_load_commands`' raw replies."""
    raw = replies[0]  # a map in RESP3, a flat list in RESP2
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    values = {_text(k): _text(v) for k, v in pairs}
    return _records(replies[1:], jobs), values


def _records(replies: Sequence[Any], jobs: Sequence[str]) -> dict[str, JobRecord | None]:
    records: dict[str, JobRecord | None] = {}
    for job, (version, state, order, due) in zip(jobs, replies, strict=True):
        records[job] = (
            None
            if version is None
            else JobRecord(_text(version), state or b"", order or b"", _text(due or b""))
        )
    return records


SCOPE_KEYS_KEPT = 1024
"""How many scopes' commit keys a store keeps (Store._commit_call); past it, it starts over."""
KEEP_MIN_POOL = 4
"""The smallest connection pool a store keeps a connection of between round trips."""

_pid = os.getpid()
"""This process's id, kept current across forks: asking the kernel (os.getpid) twice a round
trip was some 3% of a one-entry batch's CPU."""


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


class CommitStream:
    """One batch's commits, sent in chunks on one connection while the caller evaluates the
    next jobs, so that the server runs a chunk while the worker works on the next one. The
    last chunk is held (`send(..., hold=True)`) and written by `finish` with the read ahead
    that follows it, in one write. The replies are read by `finish` (Store.commit_stream)."""

    def __init__(self, store: Store, client: Any, consumer: str, ahead: ReadAhead | None):
        self.store = store
        self.client = client
        self.consumer = consumer
        self.ahead = ahead
        self.calls: list[tuple[str, list[str], list[Any]]] = []
        self.written = 0
        """How many of `calls` went out: their replies are owed."""
        self._held: list[tuple[Any, ...]] = []
        self._extra: list[tuple[Any, ...]] = []
        """The read ahead's commands, written by `flush` after the calls."""
        self._flushed = False
        self._extra_written = False
        self._conn: Any = None

    def send(self, commits: Sequence[Commit], hold: bool = False) -> None:
        """Write these commits' calls to the server; their replies wait for `finish`. With
        `hold`, they are written by `finish`, with what it sends (one write for both)."""
        if not commits:
            return
        calls = [self.store._commit_call(c, self.consumer) for c in commits]
        self.calls += calls
        self._held += [("FCALL", name, len(ks), *ks, *args) for name, ks, args in calls]
        if not hold:
            self._write([])

    def _write(self, extra: list[tuple[Any, ...]]) -> None:
        """Write the held calls, then `extra`."""
        commands, self._held = self._held + extra, []
        if not commands:
            return
        if self._conn is None:
            self._conn = self.store._lease(self.client.connection_pool)
        try:
            # only a write with no reply outstanding may check the connection's health: a
            # PING after unread replies would read a commit's reply as its own
            self._conn.send_packed_command([_pack(commands)], check_health=not self.written)
        except BaseException:
            self._drop()
            raise
        self.written = len(self.calls)
        if extra:
            self._extra_written = True

    def finish(self) -> list[str | Exception]:
        """Write what is held with the read ahead (`flush`), then read every reply
        (`collect`)."""
        self.flush()
        return self.collect()

    def flush(self) -> None:
        """Write the held calls, then the read ahead's commands (`ahead`: the load of its
        rows and the read of more), in one write; their replies are owed to `collect`."""
        if self._flushed:
            return
        self._flushed = True
        self._extra = [] if self.ahead is None else self.ahead.commands(self.consumer, load=True)
        if self.calls or self._extra:
            self._write(self._extra)

    def collect(self) -> list[str | Exception]:
        """Read every reply (after `flush`): each commit's result, then the read ahead's. A
        commit that found the library missing is sent again once it is loaded (the read
        ahead is not). A commit's error reply (out of memory, a key of the wrong type) is its
        result: the other commits landed."""
        self.flush()
        extra = self._extra
        if not self.calls and not extra:
            return []
        try:
            replies = _replies(self._conn, len(self.calls))
            if self.ahead is not None:
                self.ahead.take(_replies(self._conn, len(extra)))
        except BaseException:
            self._drop()
            raise
        self.store._give_back(self.client.connection_pool, self._conn)
        self._conn = None
        missing = [
            i
            for i, x in enumerate(replies)
            if isinstance(x, redis.ResponseError) and _missing_function(x)
        ]
        if missing:
            self.store.load_library(self.calls[missing[0]][1][0])  # one scope's: one node
            again = self.store._fcalls([self.calls[i] for i in missing])
            for i, x in zip(missing, again, strict=True):
                replies[i] = x
        for x in replies:
            if isinstance(x, Exception) and unreachable(x):
                raise x  # the server is loading: nothing landed
        return [x if isinstance(x, Exception) else _text(x) for x in replies]

    def _drop(self) -> None:
        """A connection whose replies were not all read goes: it cannot be used again."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.disconnect()
            self.client.connection_pool.release(self._conn)
            self._conn = None

    def close(self) -> None:
        """After the caller raised: read the replies of what was written (those commits
        land, each whole, as any sent call does; the rows a written read ahead read are
        kept in its `rows`) and give the connection back; when even that fails, drop it.
        Held calls are not written. The caller's entries that were not committed stay
        pending."""
        self._held = []
        if self._conn is None:
            return
        try:
            _replies(self._conn, self.written)
            if self._extra_written and self.ahead is not None:
                # the rows it read are pending for this consumer: they are kept (ReadAhead)
                self.ahead.take(_replies(self._conn, len(self._extra)))
        except Exception:  # the caller's error is the one to raise
            self._drop()
            return
        except BaseException:
            self._drop()
            raise
        self.store._give_back(self.client.connection_pool, self._conn)
        self._conn = None


_PASSING = ("CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "MOVED ", "ASK ")
"""Error replies of a server that is there but cannot serve now: a cluster with a node
down or slots moving (or moved: the routes are read again), a replica without its primary,
a server loading its data."""


def unreachable(error: BaseException) -> bool:
    """Whether `error` says the server cannot be reached or cannot serve for now (gone,
    restarting, loading; a cluster with a node down): wait it out, with backoff."""
    if isinstance(
        error,
        redis.ConnectionError
        | redis.TimeoutError
        | redis.BusyLoadingError
        | redis.exceptions.ClusterDownError
        | redis.exceptions.TryAgainError
        | redis.exceptions.AskError  # MovedError too: a slot that moved (Store.refresh_routes)
        | OSError,
    ):
        return True
    if isinstance(error, redis.ResponseError):  # read raw, an error reply keeps its text only
        return str(error).startswith(_PASSING)
    if isinstance(error, redis.exceptions.RedisClusterException):  # no RedisError
        return "cannot be connected" in str(error)  # no node of the cluster answers
    return False


def slot_moved(error: BaseException) -> bool:
    """Whether `error` is a MOVED (or an ASK): the node answered, and another node serves
    the slot now (a failover, a manual one too, or a reshard). That is routine, not an
    outage: the caller reads the slots again and goes on, and logs it at info."""
    return isinstance(error, redis.exceptions.AskError)  # MovedError is one


def slot_rehashing(error: BaseException) -> bool:
    """Whether `error` is a TRYAGAIN: a call of several keys of one slot that a reshard is
    moving, some of them moved and some not yet (the slot left migrating on one node and
    importing on another). The node answered: that is a move under way, not an outage, and
    it lasts until the reshard moves the rest or is undone."""
    if isinstance(error, redis.exceptions.TryAgainError):
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith("TRYAGAIN")


@dataclass(frozen=True, slots=True)
class Moved:
    """Where a MOVED (or an ASK) points: the slot, the node that answers for it, and which
    of the two it was (`moved_to`)."""

    slot: int
    node: str
    """host:port"""
    answer: str
    """MOVED, or ASK (a reshard under way)"""


def moved_to(error: BaseException) -> Moved | None:
    """The slot and node of a MOVED (or an ASK) `error`, else None."""
    if not isinstance(error, redis.exceptions.AskError):  # MovedError is one
        return None
    answer = "MOVED" if isinstance(error, redis.exceptions.MovedError) else "ASK"
    return Moved(error.slot_id, f"{error.host}:{error.port}", answer)


def slot_of(scope: str) -> int:
    """The cluster slot of the keys of `scope` (they share it: `{scope}`)."""
    return int(redis.crc.key_slot(keys.work(scope).encode()))


def unreachable_reason(error: BaseException, slot: int | None = None) -> str:
    """What the log says of an error that `unreachable` waits out: a MOVED (or ASK) says
    that its slot moved, and where to (its own text is a bare 'SLOT HOST:PORT', which said
    nothing to whoever read the log of a failover); a TRYAGAIN that its slot is being moved
    (`slot`, the slot of the call, when the caller knows it: the reply names none); any
    other error its text."""
    if isinstance(error, redis.exceptions.AskError):  # MovedError is one
        moved = "moved" if isinstance(error, redis.exceptions.MovedError) else "is moving"
        return (
            f"slot {error.slot_id} {moved} to {error.host}:{error.port} (a failover or a reshard)"
        )
    if slot_rehashing(error):
        which = "a slot" if slot is None else f"slot {slot}"
        return f"{which} is being moved (TRYAGAIN: a reshard under way, its keys on two nodes)"
    return str(error)


def a_move(error: BaseException) -> bool:
    """Whether `error` says that the slot of the call is moving or moved: a MOVED or an ASK
    (a failover, a reshard), or a TRYAGAIN (a reshard under way: the call's keys on two
    nodes). The node answered: routine, said at info; a worker says one that lasts
    SFC_OUTAGE_THRESHOLD at warning (host.worker.stuck_move)."""
    return slot_moved(error) or slot_rehashing(error)


def moving_reason(error: BaseException, slot: int | None) -> str:
    """The info line's words for a move (`a_move`) of `slot`, a worker's and `sfc
    equipment`'s alike: a MOVED or ASK reads the slots again, which show where it went; a
    TRYAGAIN is tried again until the reshard is over."""
    then = "reading the slots again" if slot_moved(error) else "trying it again with backoff"
    return f"{unreachable_reason(error, slot)}; {then}"


@dataclass(frozen=True, slots=True)
class ScopeGauges:
    """What a metrics scrape reads of a scope (Store.scope_gauges)."""

    values: dict[str, int]
    """The stream lengths, the pending and unread work entries, the job counts, and the
    counters of `sfc:scope:{S}`, by name."""
    equipment_unread: dict[str, int]
    """The equipment entries each adapter's group has not read yet, by group."""


class StoreError(RuntimeError):
    """The server cannot be reached or refused the login; the message says which and where."""


@contextlib.contextmanager
def _no_permission() -> Iterator[None]:
    """A FUNCTION LOAD that this user may not run: a StoreError that says to run `sfc
    setup` as an admin user."""
    try:
        yield
    except redis.ResponseError as e:
        if isinstance(e, redis.exceptions.NoPermissionError) or "NOPERM" in str(e):
            raise StoreError(
                f"the function library {keys.LIBRARY} is not loaded, or not this version, "
                f"and this user may not load it ({e}); run `sfc setup` as an admin user"
            ) from None
        raise


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    auth, _, host = rest.rpartition("@")
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user + ':***' if ':' in auth else user}@{host}"


class Store:
    """A connection to the server, with one method per operation the host needs."""

    def __init__(
        self,
        client: Any,
        *,
        consumer: str = "",
        history_limit: int = 1000,
        dedupe_ttl_ms: int = 86_400_000,
        cluster: Any = None,
    ) -> None:
        self.r: Any = client
        """The client: a redis.Redis, or on a cluster the RedisCluster (for the keys that
        live in slots of their own, sfc:scopes and sfc:recipe:*)."""
        self.cluster = cluster
        self._turn = 0
        self.consumer = consumer
        self.history_limit = history_limit
        self.dedupe_ttl_ms = dedupe_ttl_ms
        self._kept: dict[Any, tuple[int, Any]] = {}
        """A connection of each pool kept between round trips, with its process (`_lease`)."""
        self._scope_keys: dict[str, tuple[str, ...]] = {}
        """The keys of each scope that every commit names (`_commit_call`): formatting them
        was a third of building a commit's call."""
        self._routes_at = 0.0
        self._moved = False
        """A read of the slots found one served by another node, and no wait has ended on
        it yet (`wait_out` does not wait then)."""
        self.moves = 0
        """How many reads of the slots found one served by another node: a caller that
        keeps the count it saw learns of a move whoever's read found it."""
        """When the cluster's slots were last read again (`refresh_routes`)."""

    url: str = ""

    def _lease(self, pool: Any) -> Any:
        """A connection of `pool` for one round trip or commit stream: the one given back
        last (`_give_back`), else one from the pool. Taking one from redis-py's pool and
        releasing it cost some 8 µs a round trip here, against 2.4 µs for the kept one.

        Any thread may take the kept connection: taking it (one dict pop) and giving it
        back are atomic, so two threads never hold it at once, and nothing is tied to a
        thread that ends. One made in another process (before a fork) is not used; one
        with something to read (the server closed it: a restart, an idle timeout, CLIENT
        KILL) is connected again, as the pool does with its own."""
        got = self._kept.pop(pool, None)
        if got is None or got[0] != _pid:
            return pool.get_connection()
        conn = got[1]
        if getattr(conn, "_sock", None) is None:
            return conn  # disconnected (Store.close): the next write connects
        try:
            if conn.should_reconnect() or conn.can_read():
                raise redis.ConnectionError("the connection has data")
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            conn.disconnect()  # the next write connects again
        except BaseException:
            pool.release(conn)
            raise
        return conn

    def _give_back(self, pool: Any, conn: Any) -> None:
        """Keep a connection whose replies were all read for the next `_lease` (one per
        pool; the pool counts it as in use, and disconnects it when closed); when one is
        kept already, or the pool is limited to fewer than KEEP_MIN_POOL connections
        (`?max_connections=` in the URL: the store's other commands need theirs), this one
        goes back to the pool."""
        limit = getattr(pool, "max_connections", None)
        if limit is not None and limit < KEEP_MIN_POOL:
            pool.release(conn)
            return
        kept = (_pid, conn)
        if self._kept.setdefault(pool, kept) is not kept:
            pool.release(conn)

    def client(self, scope: str) -> redis.Redis:
        """The client for the keys of `scope`: on a cluster, a connection to the node that
        owns the slot of `{scope}`, so every call and pipeline goes there directly."""
        return self._for_key(keys.work(scope))

    def refresh_routes(self, away: str | None = None) -> bool:
        """On a cluster, read which node owns which slot again (CLUSTER SLOTS), at most once
        a second, asking node `away` (host:port, one that does not answer) last. True when
        a slot is served by another node now."""
        if self.cluster is None:
            return False
        now = time.monotonic()
        if now - self._routes_at < 1.0:
            return False
        self._routes_at = now
        before = self._routes()
        try:
            # redis-py asks the nodes in a random order: a frozen one first cost the whole
            # socket timeout, and stalled a worker that serves the other nodes' scopes
            self.cluster.nodes_manager.initialize(last_failed_node_name=away)
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
            # every node away ("Redis Cluster cannot be connected", which is no RedisError):
            # the next call says so. It escaped, from the worker's wait-it-out branch, and
            # a cluster that was down as a whole killed every worker, and serve with them
            log.debug("the cluster's slots could not be read again: %s", e)
            return False
        moved = self._routes() != before
        self._moved = self._moved or moved
        self.moves += moved
        return moved

    def _routes(self) -> list[str]:
        """The primary of every slot, by name (host:port)."""
        slots = self.cluster.nodes_manager.slots_cache
        return [slots[i][0].name if slots.get(i) else "" for i in range(16384)]

    def wait_out(self, stop: threading.Event, seconds: float) -> None:
        """Wait `seconds` between tries at a server that cannot be reached, or until `stop`
        is set. On a cluster, the slots are read again every second meanwhile, and the wait
        ends as soon as another node serves a slot: a replica that took over from a primary
        that died is used at once. Without it, a worker and the equipment went on only at
        the end of a backoff that had grown to seconds while the primary was away, and the
        commands' deadlines ran out meanwhile. A move that a read before the wait found
        (the caller's own `refresh_routes`, or another thread's) ends it at once: the read
        that sees a failover first is often the caller's."""
        if self.cluster is None:
            stop.wait(seconds)
            return
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            if self._moved or self.refresh_routes():
                self._moved = False
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            stop.wait(min(left, 1.0))

    def node_name(self, scope: str) -> str:
        """The node that holds `scope` ("host:port"; the server's URL off a cluster)."""
        kwargs = self._for_key(keys.work(scope)).connection_pool.connection_kwargs
        return f"{kwargs.get('host', kwargs.get('path', ''))}:{kwargs.get('port', '')}"

    def answers(self, scope: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
        """Whether the node of `scope` answers a PING within `timeout`, on a connection of
        its own without retries: a node that stopped answering (frozen, or packets dropped)
        costs a call SOCKET_TIMEOUT_S and the client's retry, some 10 s, and a probe this."""
        pool = self._for_key(keys.work(scope)).connection_pool
        kwargs = dict(pool.connection_kwargs)
        kwargs.update(
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        probe = redis.Redis(connection_pool=type(pool)(pool.connection_class, **kwargs))
        try:
            return bool(probe.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            probe.close()
            probe.connection_pool.disconnect()

    def _for_key(self, key: str) -> redis.Redis:
        if self.cluster is None:
            return self.r  # type: ignore[no-any-return]
        node = self.cluster.get_node_from_key(key)
        return self.cluster.get_redis_connection(node)  # type: ignore[no-any-return]

    @classmethod
    def from_url(cls, url: str, *, cluster: bool | None = None, **kwargs: Any) -> Store:
        """A store on `url` (redis://, rediss://, unix://, with user and password). A Valkey
        Cluster is detected from the server (`cluster_enabled`), or set with `cluster`."""
        tls: dict[str, Any] = {}
        ca = os.environ.get("SFC_TLS_CA")
        if url.startswith("rediss://") and ca and "ssl_ca_certs=" not in url:
            tls["ssl_ca_certs"] = ca  # the CA that signed the server's certificate
        try:
            client = redis.Redis.from_url(
                url,
                decode_responses=False,
                health_check_interval=30,
                socket_connect_timeout=5,
                socket_timeout=SOCKET_TIMEOUT_S,
                **tls,
            )
        except ValueError as e:
            raise StoreError(f"unusable server URL {redacted(url)}: {e}") from None
        if cluster is None:
            try:
                cluster = bool(client.info("cluster").get("cluster_enabled"))
            except (redis.RedisError, OSError):
                cluster = False  # unreachable now: ping() says so; a cluster needs --cluster
            except TypeError as e:  # a query parameter no connection takes: `?foo=bar`
                client.close()
                said = str(e).rpartition("unexpected keyword argument ")[2] or str(e)
                raise StoreError(
                    f"unusable server URL {redacted(url)}: unknown parameter {said}"
                ) from None
        if not cluster:
            store = cls(client, **kwargs)
        else:
            client.close()
            try:
                rc = redis.cluster.RedisCluster.from_url(
                    url,
                    decode_responses=False,
                    socket_connect_timeout=5,
                    socket_timeout=SOCKET_TIMEOUT_S,
                    **tls,
                )
            except (redis.RedisError, OSError) as e:
                raise StoreError(f"cannot reach the cluster at {redacted(url)}: {e}") from None
            except TypeError as e:
                said = str(e).rpartition("unexpected keyword argument ")[2] or str(e)
                raise StoreError(
                    f"unusable server URL {redacted(url)}: unknown parameter {said}"
                ) from None
            store = cls(rc, cluster=rc, **kwargs)
        store.url = url
        return store

    def ping(self) -> None:
        """One PING; a StoreError that says what went wrong when it fails."""
        where = redacted(self.url) if self.url else "the server"
        try:
            self.r.ping()
        except redis.AuthenticationError as e:
            raise StoreError(f"{where} refused the login: {e}") from None
        except redis.ResponseError as e:
            if "NOAUTH" in str(e) or "WRONGPASS" in str(e) or "NOPERM" in str(e):
                raise StoreError(f"{where} refused the login: {e}") from None
            raise StoreError(f"{where} answered PING with an error: {e}") from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise StoreError(f"cannot reach {where}: {e}") from None

    def close(self) -> None:
        """Close the client's connections, and the kept ones (on a cluster, a node that
        left the cluster's view keeps its pool, which the cluster's close does not reach)."""
        kept, self._kept = self._kept, {}
        for pool, (pid, conn) in kept.items():
            if pid == _pid:
                with contextlib.suppress(Exception):
                    conn.disconnect()
                    pool.release(conn)
        with contextlib.suppress(redis.RedisError):
            self.r.close()

    # -- the function library

    def load_library(self, key: str | None = None) -> None:
        """FUNCTION LOAD REPLACE of `sfc_1`; a StoreError when this user may not load it.

        On a cluster it goes to every primary (each holds slots of some scopes), or, with
        `key`, to the node of its slot alone: a call that found the library missing loads
        it where it goes. Loaded on every primary, a node that was away failed the load,
        and the call of a scope whose node answered with it (parked or waited out for the
        wrong node); the other nodes load it at their own first call that misses it. A
        primary that cannot be reached fails the load on every primary with a StoreError
        that names it (`sfc setup`, an admin step, is strict: `ensure_library` is not)."""
        if self.cluster is not None and key is None:
            away = self._load_on_primaries()
            if away:
                nodes = ", ".join(f"{node} ({error})" for node, error in away)
                raise StoreError(
                    f"the function library {keys.LIBRARY} cannot be loaded on every primary: "
                    f"{'node' if len(away) == 1 else 'nodes'} {nodes} cannot be reached; "
                    "run this again once the cluster is whole"
                )
            return
        with _no_permission():
            if self.cluster is None:
                self.r.function_load(library_source(), replace=True)
            else:
                self._for_key(key or "").function_load(library_source(), replace=True)

    def _load_on_primaries(self) -> list[tuple[str, BaseException]]:
        """Load the library on every primary of the cluster; those that cannot be reached
        (host:port) with their error, the others loaded. A StoreError when this user may
        not load it."""
        assert self.cluster is not None
        away: list[tuple[str, BaseException]] = []
        for node in self.cluster.get_primaries():
            try:
                with _no_permission():
                    self.cluster.get_redis_connection(node).function_load(
                        library_source(), replace=True
                    )
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                away.append((f"{node.host}:{node.port}", e))
        return away

    def ensure_library(self) -> bool:
        """Load the library if this user may; True when loaded now. A user without FUNCTION
        LOAD (an ACL user set up by an admin) relies on `sfc setup` having loaded it.

        On a cluster, a primary that cannot be reached is passed over, said once at warning:
        a host restarted while a node without a replica is down serves the other nodes'
        scopes ("A node away"), and that node loads the library at the first call that
        misses it there (`load_library(key)`)."""
        try:
            if self.cluster is None:
                self.load_library()
                return True
            away = self._load_on_primaries()
        except StoreError:
            return False
        for node, error in away:
            log.warning(
                "the function library %s is not loaded on node %s, which cannot be reached "
                "(%s); passed over: its first call that misses the library loads it there",
                keys.LIBRARY,
                node,
                error,
                extra={"reason": f"{type(error).__name__}: {error}"},
            )
        return True

    def _fcall(self, name: str, keys_: Sequence[str], args: Sequence[Any]) -> Any:
        """FCALL, sent to the node of its keys (all in the slot of one `{scope}`)."""
        r = self._for_key(keys_[0])
        try:
            return r.fcall(name, len(keys_), *keys_, *args)
        except redis.ResponseError as e:
            if not _missing_function(e):
                raise
        self.load_library(keys_[0])
        return r.fcall(name, len(keys_), *keys_, *args)

    def _fcalls(
        self, calls: Sequence[tuple[str, Sequence[str], Sequence[Any]]], each: bool = False
    ) -> list[Any]:
        """Function calls in one pipeline; the results in order (an error reply raises, or,
        with `each`, is that call's result: the others' results are not lost)."""
        if not calls:
            return []
        r = self._for_key(calls[0][1][0])  # one scope's calls: one node
        for attempt in (1, 2):
            pipe = r.pipeline(transaction=False)
            for name, keys_, args in calls:
                pipe.fcall(name, len(keys_), *keys_, *args)
            results = pipe.execute(raise_on_error=False)
            if attempt == 1 and any(
                isinstance(x, redis.ResponseError) and _missing_function(x) for x in results
            ):
                self.load_library(calls[0][1][0])
                continue
            for x in results:
                if isinstance(x, Exception) and not (each and isinstance(x, redis.ResponseError)):
                    raise x
            return results
        raise AssertionError("unreachable")  # pragma: no cover

    # -- time, scopes and settings

    def time_ms(self) -> int:
        reply: Any = self.r.time()
        seconds, micros = reply
        return int(seconds) * 1000 + int(micros) // 1000

    def register_scope(self, scope: str) -> None:
        self.r.sadd(keys.SCOPES, scope)

    def scopes(self) -> list[str]:
        return sorted(_text(s) for s in self.r.smembers(keys.SCOPES))

    def held(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which (scope, job) pairs are stored: their EXISTS in one pipeline per node (one
        in all off a cluster), HELD_CHUNK a round trip. A job not found looks in every
        registered scope (`host.jobs.elsewhere_many`): one EXISTS a round trip cost a call per
        scope, 2,000 round trips with 2,000 scopes."""
        by_node: dict[int, tuple[redis.Redis, list[tuple[str, str]]]] = {}
        for scope, job in pairs:
            client = self.client(scope)
            by_node.setdefault(id(client), (client, []))[1].append((scope, job))
        found: set[tuple[str, str]] = set()
        for client, part in by_node.values():
            for i in range(0, len(part), HELD_CHUNK):
                chunk = part[i : i + HELD_CHUNK]
                pipe = client.pipeline(transaction=False)
                for scope, job in chunk:
                    pipe.exists(keys.job(scope, job))
                out: Any = pipe.execute()
                found.update(pair for pair, n in zip(chunk, out, strict=True) if n)
        return found

    def create_group(self, scope: str) -> None:
        try:
            self.client(scope).xgroup_create(keys.work(scope), keys.GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def scope_settings(self, scope: str) -> dict[str, str]:
        return {
            _text(k): _text(v) for k, v in self.client(scope).hgetall(keys.settings(scope)).items()
        }

    def put_scope_settings(self, scope: str, values: Mapping[str, str]) -> None:
        if values:
            mapping: Any = dict(values)
            self.client(scope).hset(keys.settings(scope), mapping=mapping)

    # -- recipes

    def recipe_text(self, recipe_hash: str) -> bytes | None:
        value: Any = self.r.get(keys.recipe(recipe_hash))
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
        args = [job, version, sequence, retired_ttl_ms, *(m for _, m in waits)]
        return _text(self._fcall("sfc1_clear", ks, args))

    def waits_of(self, scope: str, job: str) -> list[tuple[str, str]]:
        """Every (type id, member) of the scope's waits keys that names `job` (a scan of
        the scope's keys: for removing a job whose state cannot say what it waits for)."""
        client = self.client(scope)
        prefix = keys.waits(scope, "")
        out: list[tuple[str, str]] = []
        pattern = "".join("\\" + c if c in "\\*?[]" else c for c in prefix) + "*"
        for key in client.scan_iter(match=pattern):
            name = _text(key)
            for member in client.zrange(name, 0, -1):
                text = _text(member)
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
        result = _text(self._fcall("sfc1_lease", [key], [holder, ttl_ms]))
        return None if result == "ok" else result

    def retired_sequence(self, scope: str, job: str) -> str:
        value = self.client(scope).hget(keys.retired(scope), job)
        return "" if value is None else _text(value)

    def load(self, scope: str, jobs: Sequence[str]) -> tuple[int, dict[str, JobRecord | None]]:
        """The server's TIME and the hashes of `jobs`, in one round trip."""
        commands = [("TIME",), *[("HMGET", keys.job(scope, job), *JOB_FIELDS) for job in jobs]]
        out = _raised(self._round_trip(scope, commands))
        return _ms(out[0]), _records(out[1:], jobs)

    def load_batch(self, scope: str, jobs: Sequence[str], ahead: ReadAhead | None = None) -> Loaded:
        """The server's TIME, the hashes of `jobs` and the scope's settings, in one round
        trip: what applying a batch reads. With `ahead`, the round trip also reads ahead
        (ReadAhead; it loads nothing: its rows load after this batch's commits)."""
        commands = [("TIME",), *_load_commands(scope, jobs)]
        extra = [] if ahead is None else ahead.commands(self.consumer, load=False)
        out = self._round_trip(scope, commands + extra)
        if ahead is not None:
            ahead.take(out[len(commands) :])
        out = _raised(out[: len(commands)])
        return (_ms(out[0]), *_load_result(out[1:], jobs))

    def _round_trip(self, scope: str, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Commands in one round trip on `scope`'s node, packed by hiredis and read raw (no
        redis-py reply callbacks); an error reply comes back as its exception. Commands that
        change nothing (a load) are sent again once on a broken connection, as redis-py's
        pipeline would; others are not (entries a lost read took stay pending: they are
        claimed; a lost XADD's caller is told)."""
        pool = self.client(scope).connection_pool
        packed = _pack(commands)
        again = all(c[0] in _READS for c in commands)
        for attempt in (1, 2):
            conn: Any = self._lease(pool)
            try:
                conn.send_packed_command([packed])
                out = _replies(conn, len(commands))
            except (redis.ConnectionError, redis.TimeoutError) as e:
                conn.disconnect()
                pool.release(conn)
                if attempt == 2 or not again or isinstance(e, redis.BusyLoadingError):
                    raise
                continue
            except BaseException:
                conn.disconnect()
                pool.release(conn)
                raise
            self._give_back(pool, conn)
            return out
        raise AssertionError("unreachable")  # pragma: no cover

    def job(self, scope: str, job: str) -> JobRecord | None:
        return self.load(scope, [job])[1][job]

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
        return _text(result)

    def commits(self, commits: Sequence[Commit], consumer: str | None = None) -> list[str]:
        """`sfc1_commit` for each, in one pipeline: ok, conflict, gone, missing or duplicate."""
        who = self.consumer if consumer is None else consumer
        return [_text(x) for x in self._fcalls([self._commit_call(c, who) for c in commits])]

    def commits_each(self, commits: Sequence[Commit]) -> list[str | Exception]:
        """`commits`, with an error reply as that commit's result (the others' are kept)."""
        calls = [self._commit_call(c, self.consumer) for c in commits]
        return [_text_or_error(x) for x in self._fcalls(calls, each=True)]

    def commit_stream(
        self, scope: str, ahead: ReadAhead | None = None, consumer: str | None = None
    ) -> CommitStream:
        """A batch's commits on `scope`'s node, sent in chunks (CommitStream); with `ahead`,
        the next work entries are read after them, without blocking: a worker under load
        reads its next batch without a round trip of its own."""
        who = self.consumer if consumer is None else consumer
        return CommitStream(self, self.client(scope), who, ahead)

    def _commit_call(self, c: Commit, consumer: str) -> tuple[str, list[str], list[Any]]:
        s = c.scope
        scoped = self._scope_keys.get(s)
        if scoped is None:
            if len(self._scope_keys) >= SCOPE_KEYS_KEPT:
                self._scope_keys.clear()
            scoped = self._scope_keys[s] = (
                keys.due(s),
                keys.active(s),
                keys.work(s),
                keys.equipment(s),
                keys.seen(s),
            )
        ks = [keys.job(s, c.job), keys.history(s, c.job), *scoped]
        wait_args = self._wait_args(s, c.waits, ks) if c.waits else []
        args: list[Any] = [
            c.version,
            c.state,
            c.order,
            "" if c.due is None else c.due,
            "1" if c.active else "0",
            keys.GROUP,
            consumer,
            c.job,
            self.history_limit,
            len(c.acks),
            *c.acks,
            len(c.equipment),
        ]
        for kind, data in c.equipment:
            args += [kind, data]
        args.append(len(c.history))
        for kind, data in c.history:
            args += [kind, data]
        args += ["" if c.seen is None else c.seen, self.dedupe_ttl_ms, len(c.waits), *wait_args]
        args.append(len(c.work))
        for kind, data in c.work:
            args += [kind, data]
        if c.counter:
            ks.append(keys.settings(s))  # the last KEY
            args.append(c.counter)
        return "sfc1_commit", ks, args

    def ack(
        self, scope: str, ids: Sequence[str], counter: str = "", consumer: str | None = None
    ) -> str:
        """`sfc1_ack`: ack and delete entries that change no job, counting them in the
        scope's settings hash under `counter`; ok or gone."""
        who = self.consumer if consumer is None else consumer
        return _text(
            self._fcall(
                "sfc1_ack",
                [keys.work(scope), keys.settings(scope)],
                [keys.GROUP, who, counter, *ids],
            )
        )

    def acks(
        self, scope: str, groups: Sequence[tuple[Sequence[str], str]]
    ) -> list[str | Exception]:
        """`ack` for each (ids, counter) group, in one pipeline: ok or gone for each (a group
        with an entry no longer pending for this consumer writes nothing), or the error
        reply of that group's call."""
        who = self.consumer
        calls = [
            ("sfc1_ack", [keys.work(scope), keys.settings(scope)], [keys.GROUP, who, c, *ids])
            for ids, c in groups
        ]
        return [_text_or_error(x) for x in self._fcalls(calls, each=True)]

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
        args: list[Any] = [job, version, flag, len(waits)]
        args += self._wait_args(scope, waits, ks)
        return _text(self._fcall("sfc1_repair", ks, args))

    @staticmethod
    def _wait_args(
        scope: str, waits: Sequence[tuple[str, str, str, int]], ks: list[str]
    ) -> list[Any]:
        """The (key index, op, member, score) arguments of `waits`, adding their keys to ks."""
        index: dict[str, int] = {}
        args: list[Any] = []
        for type_id, op, m, score in waits:
            if type_id not in index:
                ks.append(keys.waits(scope, type_id))
                index[type_id] = len(ks)
            args += [index[type_id], op, m, score]
        return args

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
        """`waiting` for a batch of events, in one round trip: the members of each type's
        waits that began by its `until`, oldest first, and which of `seen_fields` were
        taken already."""
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
        result = _text(
            self._fcall(
                "sfc1_publish",
                [keys.waits(scope, type_id), keys.work(scope), keys.settings(scope)],
                [data, counter],
            )
        )
        return None if result == "dropped" else result

    def order_ids(self, scope: str) -> list[str]:
        """Every stored job id of the scope, oldest order first."""
        return [_text(j) for j in self.client(scope).zrange(keys.orders(scope), 0, -1)]

    def active_jobs(self, scope: str) -> list[str]:
        return sorted(_text(j) for j in self.client(scope).smembers(keys.active(scope)))

    def history(
        self, scope: str, job: str, count: int = 20
    ) -> list[tuple[str, dict[bytes, bytes]]]:
        """The last `count` history entries, oldest first (none for 0)."""
        if count <= 0:
            return []
        rows: Any = self.client(scope).xrevrange(keys.history(scope, job), count=count)
        return [(_text(i), f) for i, f in reversed(rows)]

    # -- the work stream

    def add_work(self, scope: str, fields: Mapping[str, bytes]) -> str:
        return _text(self.client(scope).xadd(keys.work(scope), dict(fields)))  # type: ignore[arg-type]

    def read(
        self,
        scopes: Sequence[str],
        count: int,
        block_ms: int | None,
        consumer: str | None = None,
        after: str | None = None,
    ) -> list[tuple[str, str, dict[bytes, bytes]]]:
        """New work entries of `scopes` for this consumer: (scope, id, fields). With `after`
        (an entry id, "0" for all), the consumer's own pending entries after it instead,
        without blocking: those it read before and has not committed."""
        if not scopes:
            return []
        who = self.consumer if consumer is None else consumer
        if self.cluster is not None and len(scopes) > 1:
            # each scope's stream is in a slot of its own (a multi-stream read would be
            # CROSSSLOT): read each without blocking; when none had any, block briefly on
            # one of them in turn, so that no scope waits long for another
            each: list[tuple[str, str, dict[bytes, bytes]]] = []
            for s in scopes:
                each += self.read([s], count, None, consumer, after)
            if not each and block_ms and after is None:
                turn = self.next_turn(scopes)
                each = self.read([turn], count, self.cluster_block(block_ms), consumer)
            return each
        if after is not None:
            block_ms = None
        streams = [keys.work(s) for s in scopes]
        read = _xreadgroup(keys.GROUP, who, count, block_ms, streams, after or ">")
        (reply,) = _raised(self._round_trip(scopes[0], [read]))
        return _raw_rows(reply, scopes)

    def next_turn(self, scopes: Sequence[str]) -> str:
        """The scope whose turn it is to block a read of several scopes on a cluster."""
        self._turn = (self._turn + 1) % len(scopes)
        return scopes[self._turn]

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
    ) -> tuple[str, list[tuple[str, dict[bytes, bytes]]], list[str]]:
        """XAUTOCLAIM: (next start, claimed entries, ids that were deleted meanwhile)."""
        who = self.consumer if consumer is None else consumer
        reply: Any = self.client(scope).xautoclaim(
            keys.work(scope), keys.GROUP, who, min_idle_time=idle_ms, start_id=start, count=count
        )
        next_start, claimed = _text(reply[0]), reply[1]
        deleted = [_text(i) for i in reply[2]] if len(reply) > 2 else []
        entries = [(_text(i), f or {}) for i, f in claimed if i is not None]
        return next_start, entries, deleted

    def probe(self, scope: str) -> None:
        """On a cluster, raise the move (ASK or TRYAGAIN: `a_move`) of a slot of `scope` being
        moved; nothing else. EXISTS of the scope's fixed keys and of one never written
        (`keys.probe`): a node whose slot is migrating answers a call of several keys, some
        of them missing, with TRYAGAIN when it holds some of them and with ASK when it holds
        none (the node importing it answers TRYAGAIN to such a call after an ASKING), so
        that it fails for as long as the move lasts, wherever the keys are; a call of one
        key goes through there (a claim, a read: each a delivery of the entries it takes)."""
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
        return {_text(row["message_id"]): int(row["times_delivered"]) for row in rows}

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

    def show_reads(
        self, scope: str, job: str, history: int, dead_tail: int, pending: int
    ) -> ShowReads:
        """What `sfc job show` reads first, in one pipeline (one round trip, one slot): the
        server's TIME, the job's hash, its last `history` entries, its due and active index
        entries, the scope's settings, the work stream's unread entries (`work_unread`),
        the equipment stream's consumer groups (XINFO GROUPS), and the last `dead_tail`
        dead entries, and the oldest `pending` work entries pending (XPENDING: their fields
        are read by `pending_entries`)."""
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
                    "lastDelivered": _text(g["last-delivered-id"]),
                    "lag": None if g.get("lag") is None else int(g["lag"]),
                }
                for g in equipment_groups
            ]
        return ShowReads(
            now=now[0] * 1000 + now[1] // 1000,
            record=_records([fields], [job])[job],
            history=[(_text(i), f) for i, f in reversed(rows)] if history > 0 else [],
            due=None if due is None else int(due),
            active=bool(active),
            settings={_text(k): _text(v) for k, v in settings.items()},
            unread=0 if work_group is None else work_unread(work_group, int(length)),
            equipment_groups=groups,
            group_names=names,
            dead=[(_text(i), f) for i, f in dead],
            pending=list(held),
        )

    def equipment_from(
        self, scope: str, times: Sequence[int], count: int
    ) -> list[list[tuple[str, dict[bytes, bytes]]]]:
        """For each time in `times`, the first `count` equipment entries from that
        millisecond on (a commit's commands are among them), in one pipeline."""
        if not times:
            return []
        pipe = self.client(scope).pipeline(transaction=False)
        for ms in times:
            pipe.xrange(keys.equipment(scope), str(ms), "+", count=count)
        replies: Any = pipe.execute()
        return [[(_text(i), f) for i, f in rows] for rows in replies]

    def equipment_after(
        self, scope: str, reads: Sequence[tuple[str, int]], count: int
    ) -> list[list[tuple[str, dict[bytes, bytes]]]]:
        """For each (entry id, ms) of `reads`, up to `count` equipment entries after that id
        and of that millisecond (`ms` ends the range: its last sequence), in one pipeline:
        the rest of a millisecond that `streams_of_show` read the first entries of."""
        if not reads:
            return []
        pipe = self.client(scope).pipeline(transaction=False)
        for after, ms in reads:
            pipe.xrange(keys.equipment(scope), "(" + after, str(ms), count=count)
        replies: Any = pipe.execute()
        return [[(_text(i), f) for i, f in rows] for rows in replies]

    def equipment_pending(
        self, scope: str, wanted: Sequence[tuple[str | bytes, str]]
    ) -> list[dict[str, Any] | None]:
        """For each (group, entry id) of the equipment stream, who of the group holds the
        entry unacknowledged (consumer, idle ms, deliveries, and how long ago the consumer
        last read the stream: `consumerIdleMs`, XINFO CONSUMERS' idle), or None when the
        group has acknowledged it; one pipeline."""
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
        out: list[dict[str, Any] | None] = []
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
        """What a metrics scrape reads of a scope, in one pipeline of cheap calls: the
        lengths of the work, dead and equipment streams, the work entries pending (XPENDING
        summary), the active, due and stored jobs, the counters of `sfc:scope:{S}`, and the
        groups of the work and equipment streams (XINFO GROUPS), for the entries no consumer
        of each group has read (`unread_of`)."""
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
                out[_text(k)] = int(v)
        unread = self.unread_of(scope, [] if isinstance(adapters, Exception) else adapters)
        return ScopeGauges(out, unread)

    def unread_of(self, scope: str, groups: Sequence[Any], limit: int = 1000) -> dict[str, int]:
        """The equipment entries each adapter's group has not read (XINFO GROUPS' lag), by
        group. The equipment stream is trimmed, not deleted from, so the server knows the
        lag; where it cannot (an entry deleted by hand), the entries after the group's
        last-delivered-id are counted, up to `limit`, in one more round trip."""
        out: dict[str, int] = {}
        counted: list[str] = []
        pipe = self.client(scope).pipeline(transaction=False)
        for g in groups:
            name = _name(g["name"])
            if g.get("lag") is not None:
                out[name] = int(g["lag"])
            else:
                counted.append(name)
                after = "(" + _text(g["last-delivered-id"])
                pipe.xrange(keys.equipment(scope), after, "+", count=limit)
        if counted:
            rows: Any = pipe.execute()
            out.update((name, len(r)) for name, r in zip(counted, rows, strict=True))
        return out

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
        """`sfc1_bury`: ok, or gone when the entry is no longer pending. The dead entry has
        the entry's fields, then `reason`, `entry` and `deliveries` (and before them `job`,
        when there is one: the entry's `job`, or for an event `offered_to`, the job of the
        wait it was offered to); an entry's own field of such a name, or of one that starts
        with `original-`, is kept as `original-NAME` (`_dead_name`). Only the entry's own
        `job` goes back on the due index (an event's burial leaves the index of the job it
        was offered to as it is)."""
        flat: list[Any] = []
        for k, v in fields.items():
            flat += [_dead_name(k), v]
        named = job or offered_to
        if named:
            flat += [b"job", named]
        job_key = keys.job(scope, job) if job else keys.settings(scope)
        return _text(
            self._fcall(
                "sfc1_bury",
                [keys.work(scope), keys.dead(scope), keys.due(scope), job_key],
                [keys.GROUP, entry_id, reason, job or "", deliveries, *flat],
            )
        )

    def pending_entries(
        self, scope: str, count: int = 100, rows: Any = None
    ) -> list[dict[str, Any]]:
        """The oldest pending work entries: id, consumer, idle ms, deliveries, fields (none
        for a scope without a work stream or group yet). `rows`: their XPENDING reply, read
        already (`ShowReads.pending`)."""
        if rows is None:
            try:
                rows = self.client(scope).xpending_range(
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
            entry_id = _text(row["message_id"])
            pipe.xrange(keys.work(scope), entry_id, entry_id)
        found: Any = pipe.execute()
        pairs = list(zip(rows, found, strict=True))
        gone = [_text(r["message_id"]) for r, got in pairs if not got]
        if gone:
            # no fields: committed (acked and deleted) since the XPENDING above, or deleted
            # while still pending; only the second is pending still, and shown
            again = self.client(scope).pipeline(transaction=False)
            for entry_id in gone:
                again.xpending_range(keys.work(scope), keys.GROUP, entry_id, entry_id, 1)
            done = {i for i, x in zip(gone, again.execute(), strict=True) if not x}
            pairs = [(r, got) for r, got in pairs if _text(r["message_id"]) not in done]
        out = []
        for row, got in pairs:
            out.append(
                {
                    "id": _text(row["message_id"]),
                    "consumer": _name(row["consumer"]),
                    "idleMs": int(row["time_since_delivered"]),
                    "deliveries": int(row["times_delivered"]),
                    "fields": got[0][1] if got else {},
                }
            )
        return out

    def requeue(self, scope: str, entry_id: str) -> str | None:
        """Move a dead entry back to the work stream, with its original fields (the names
        `bury` kept as `original-NAME` given back: `_own_name`); the new entry id, or None
        when there is no such dead entry."""
        rows: Any = self.client(scope).xrange(keys.dead(scope), entry_id, entry_id)
        if not rows:
            return None
        fields: dict[Any, Any] = {
            _own_name(k): v for k, v in rows[0][1].items() if k not in DEAD_FIELDS
        }
        pipe = self.client(scope).pipeline(transaction=True)  # both keys carry {scope}: one slot
        pipe.xadd(keys.work(scope), fields)
        pipe.xdel(keys.dead(scope), entry_id)
        out: Any = pipe.execute()
        return _text(out[0])

    def drop_dead(self, scope: str, entry_id: str) -> bool:
        """Remove a dead entry for good (handled by other means); False when there is none."""
        return bool(self.client(scope).xdel(keys.dead(scope), entry_id))

    def dead(self, scope: str, count: int = 100) -> list[tuple[str, dict[bytes, bytes]]]:
        rows: Any = self.client(scope).xrange(keys.dead(scope), count=count)
        return [(_text(i), f) for i, f in rows]

    # -- the sweep

    def sweep(self, scope: str, threshold_ms: int, limit: int) -> tuple[str, int]:
        """`sfc1_sweep`: ('ok', ticks queued) or ('outage', gap ms). It names a key never
        written (`keys.probe`), which the function does not read: so it answers a move (ASK
        or TRYAGAIN) for as long as the scope's slot is being moved, wherever its keys are,
        and a sweep that goes through says that a move is over (Store.probe). Without it,
        it went through once its keys were on one node (an outage pass: `sfc:outage:{S}`
        exists), while a commit of a job whose hash had moved answered TRYAGAIN."""
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
        return _text(kind), int(n)

    def outage_chunk(self, scope: str, limit: int) -> tuple[str, int]:
        """`sfc1_outage`: ('more' | 'done', ticks queued)."""
        kind, n = self._fcall(
            "sfc1_outage",
            [keys.heartbeat(scope), keys.outage(scope), keys.work(scope), keys.due(scope)],
            [limit],
        )
        return _text(kind), int(n)

    def heartbeat(self, scope: str) -> dict[str, str]:
        return {
            _text(k): _text(v) for k, v in self.client(scope).hgetall(keys.heartbeat(scope)).items()
        }

    def due(self, scope: str) -> dict[str, int]:
        rows: Any = self.client(scope).zrange(keys.due(scope), 0, -1, withscores=True)
        return {_text(j): int(s) for j, s in rows}

    # -- the equipment stream

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
    ) -> list[tuple[str, dict[bytes, bytes]]]:
        """New equipment entries for `consumer`; with `own`, those it read before and has not
        acknowledged (an adapter that died before it acted on them: without blocking)."""
        read = _xreadgroup(
            group, consumer, count, None if own else block_ms, [keys.equipment(scope)],
            "0" if own else ">",
        )  # fmt: skip
        (reply,) = _raised(self._round_trip(scope, [read]))
        return [(i, f) for _, i, f in _raw_entries(reply)]

    def ack_equipment(self, scope: str, group: str, ids: Sequence[str]) -> None:
        if ids:
            self.client(scope).xack(keys.equipment(scope), group, *ids)

    def equipment_entries(self, scope: str) -> list[tuple[str, dict[bytes, bytes]]]:
        rows: Any = self.client(scope).xrange(keys.equipment(scope))
        return [(_text(i), f) for i, f in rows]

    def reply_equipment(
        self,
        scope: str,
        group: str,
        consumer: str,
        answers: Sequence[Mapping[str, bytes]],
        done: Sequence[str],
        count: int,
        block_ms: int | None = None,
    ) -> list[tuple[str, dict[bytes, bytes]]]:
        """An adapter's round, in one round trip: XADD `answers` to the work stream, XACK
        the equipment entries `done`, and read the next equipment entries, blocking up to
        `block_ms` (the answers and acks are written before the read waits). Packed by
        hiredis and read raw, as the worker's hot path is; an error reply raises."""
        work, equipment = keys.work(scope), keys.equipment(scope)
        commands: list[tuple[Any, ...]] = [
            ("XADD", work, "*", *[x for kv in fields.items() for x in kv]) for fields in answers
        ]
        if done:
            commands.append(("XACK", equipment, group, *done))
        commands.append(_xreadgroup(group, consumer, count, block_ms, [equipment]))
        out = _raised(self._round_trip(scope, commands))
        return [(i, f) for _, i, f in _raw_entries(out[-1])]

    def add_work_many(self, scope: str, entries: Sequence[Mapping[str, bytes]]) -> list[str]:
        pipe = self.client(scope).pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(keys.work(scope), dict(fields))  # type: ignore[arg-type]
        return [_text(i) for i in pipe.execute()]

    def trim_equipment(self, scope: str, retention_ms: int, now: int | None = None) -> int:
        """Trim the equipment stream: remove the entries below the oldest one that some group
        has not acknowledged, but never one whose `expiresAt` (its own time, for a notice
        without one) is less than `retention_ms` ago. Returns the entries removed."""
        key = keys.equipment(scope)
        now = self.time_ms() if now is None else now
        bound: tuple[int, int] | None = None  # the first entry some group still needs
        groups: Any = self.client(scope).xinfo_groups(key) if self.client(scope).exists(key) else []
        for g in groups:
            name = g["name"]
            first = _first_unacked(self.client(scope), key, name, _text(g["last-delivered-id"]))
            if first is not None and (bound is None or first < bound):
                bound = first
        removed = 0
        cut: str | None = None
        start = "-"
        while True:
            rows: Any = self.client(scope).xrange(key, min=start, count=100)
            if not rows:
                break
            stop = False
            for entry_id, fields in rows:
                eid = id_tuple(_text(entry_id))
                if bound is not None and eid >= bound:
                    stop = True
                    break
                if _expires_at(fields, eid[0]) + retention_ms > now:
                    stop = True
                    break
                cut = _text(entry_id)
                removed += 1
            if stop or len(rows) < 100:
                break
            last = id_tuple(_text(rows[-1][0]))
            start = f"{last[0]}-{last[1] + 1}"
        if cut is None:
            return 0
        last = id_tuple(cut)
        self.client(scope).xtrim(key, minid=f"{last[0]}-{last[1] + 1}", approximate=False)
        return removed

    # -- the scripted equipment (host/scripted.py)

    def send_replies(
        self,
        scope: str,
        answers: Sequence[Mapping[str, bytes]],
        events: Sequence[tuple[str, bytes]],
        counter: str,
    ) -> tuple[list[str], list[str | None]]:
        """Answers (work entries) and events (`(typeId, data)`, published as `publish` does)
        in one pipeline; the answers' entry ids, and each event's entry id or None (dropped:
        no job waits for its type)."""
        pipe = self.client(scope).pipeline(transaction=False)
        for fields in answers:
            pipe.xadd(keys.work(scope), dict(fields))  # type: ignore[arg-type]
        calls = [
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
            if isinstance(x, redis.ResponseError) and _missing_function(x):
                x = self._fcall(name, keys_, args)  # the library was not loaded yet
            elif isinstance(x, Exception):
                raise x
            text = _text(x)
            published.append(None if text == "dropped" else text)
        return [_text(i) for i in results[: len(answers)]], published

    # -- adapters of the equipment stream (host/mqtt.py)

    def autoclaim_equipment(
        self, scope: str, group: str, consumer: str, idle_ms: int, count: int, start: str = "0-0"
    ) -> tuple[str, list[tuple[str, dict[bytes, bytes]]]]:
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
        entries = [(_text(i), f or {}) for i, f in reply[1] if i is not None]
        return _text(reply[0]), entries


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


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def id_tuple(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _expires_at(fields: Mapping[bytes, bytes], entry_ms: int) -> int:
    """An equipment entry's `expiresAt`; its own time when it has none (a notice)."""
    try:
        data = msgspec.json.decode(fields.get(b"data", b"{}"))
        value = data.get("expiresAt") if isinstance(data, dict) else None
    except (msgspec.DecodeError, RecursionError):
        value = None
    return value if isinstance(value, int) else entry_ms


def _first_unacked(r: redis.Redis, key: str, group: Any, last_delivered: str) -> tuple[int, int]:
    """The id of the first entry `group` has not acknowledged: its oldest pending entry, or
    the entry after the last one delivered to it."""
    summary: Any = r.xpending(key, group)
    if summary and summary.get("pending"):
        return id_tuple(_text(summary["min"]))
    last = id_tuple(last_delivered)
    return last[0], last[1] + 1

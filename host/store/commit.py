"""The commit stream: a batch's load, and its commits sent in chunks on one connection
while the worker evaluates the next jobs, with the read ahead of the next batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from host import keys
from host.store import wire
from host.store.client import FunctionCall, StoreClient
from host.store.errors import missing_function, unreachable
from host.store.records import JOB_FIELDS, Commit, JobRecord, JobView, Loaded, Row

SCOPE_KEYS_KEPT = 1024
"""How many scopes' commit keys a store keeps (`Store._commit_call`); past it, it starts over."""


@dataclass(slots=True)
class ReadAhead:
    """A read ahead carried by a batch's own round trips: it loads `rows` (into `ready` and
    `loaded`) and reads up to `count` new entries per stream into `rows`, which rows leave
    only once loaded. `job_of` names a row's job to load; without it nothing loads."""

    scopes: tuple[str, ...]
    count: int
    rows: list[Row]
    job_of: JobView | None = None
    ready: list[Row] = field(default_factory=list)
    """The rows loaded by the last round trip, in the order read: the next batch."""
    loaded: dict[str, Loaded] = field(default_factory=dict)
    """Their loads, by scope."""
    _plan: tuple[int, list[tuple[str, list[str]]], bool] = (0, [], False)

    def commands(self, consumer: str, load: bool) -> list[wire.Command]:
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
        out: list[wire.Command] = []
        if plan:
            out.append(("TIME",))
            for scope, js in plan:
                out += load_commands(scope, js)
        else:
            held = 0  # no job to load (events only): they are applied as read
        # a batch's own load reads ahead only for a worker that loads ahead: it is that
        # batch's commit stream that loads the rows (one that does not reads in the stream)
        read = self.count > 0 and (load or self.job_of is not None)
        if read:
            streams = [keys.work(s) for s in self.scopes]
            out.append(wire.xreadgroup(keys.GROUP, consumer, self.count, None, streams))
        self._plan = (held, plan, read)
        return out

    def take(self, replies: Sequence[Any]) -> None:
        """Take the raw replies of `commands`; a load or read whose reply is an error loads
        or reads nothing (its rows stay in `rows`)."""
        held, plan, read = self._plan
        self._plan = (0, [], False)
        at = 0
        if plan:
            n = 1 + sum(1 + len(js) for _, js in plan)
            part, at = replies[:n], n
            if not any(isinstance(x, Exception) for x in part):
                now = wire.ms(part[0])
                i = 1
                for scope, js in plan:
                    self.loaded[scope] = (now, *load_result(part[i : i + 1 + len(js)], js))
                    i += 1 + len(js)
                self.ready += self.rows[:held]
                del self.rows[:held]
        if read and not isinstance(replies[at], Exception):
            self.rows += raw_rows(replies[at], self.scopes)


def raw_rows(reply: Any, scopes: Sequence[str]) -> list[Row]:
    """(scope, entry id, fields) of a raw XREADGROUP reply over the work streams of `scopes`."""
    by_key = {keys.work(s): s for s in scopes}
    return [(by_key[stream], i, f) for stream, i, f in wire.entries(reply)]


def load_commands(scope: str, jobs: Sequence[str]) -> list[wire.Command]:
    """The settings of `scope` and the hashes of `jobs` (after a TIME): a batch's load."""
    return [
        ("HGETALL", keys.settings(scope)),
        *[("HMGET", keys.job(scope, job), *JOB_FIELDS) for job in jobs],
    ]


def load_result(
    replies: Sequence[Any], jobs: Sequence[str]
) -> tuple[dict[str, JobRecord | None], dict[str, str]]:
    """The records and settings of `load_commands`' raw replies."""
    return records(replies[1:], jobs), wire.pairs(replies[0])


def records(replies: Sequence[Any], jobs: Sequence[str]) -> dict[str, JobRecord | None]:
    records: dict[str, JobRecord | None] = {}
    for job, (version, state, order, due) in zip(jobs, replies, strict=True):
        records[job] = (
            None
            if version is None
            else JobRecord(wire.text(version), state or b"", order or b"", wire.text(due or b""))
        )
    return records


class CommitStream:
    """One batch's commits, sent in chunks on one connection as the caller evaluates; the
    last chunk is held and written with the read ahead by `finish`, which reads the replies."""

    def __init__(
        self, store: CommitCommands, client: redis.Redis, consumer: str, ahead: ReadAhead | None
    ) -> None:
        self.store = store
        self.client = client
        self.consumer = consumer
        self.ahead = ahead
        self.calls: list[FunctionCall] = []
        self.written = 0
        """How many of `calls` went out: their replies are owed."""
        self._held: list[wire.Command] = []
        self._extra: list[wire.Command] = []
        """The read ahead's commands, written by `flush` after the calls."""
        self._flushed = False
        self._extra_written = False
        self._conn: wire.Connection = None

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

    def _write(self, extra: list[wire.Command]) -> None:
        """Write the held calls, then `extra`."""
        commands, self._held = self._held + extra, []
        if not commands:
            return
        if self._conn is None:
            self._conn = self.store._shared.kept.take(self.client.connection_pool)
        try:
            wire.send(self._conn, commands, check_health=not self.written)
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
        """Read every reply (after `flush`): each commit's result (an error reply too), then
        the read ahead's. A commit that found the library missing is loaded and sent again."""
        self.flush()
        extra = self._extra
        if not self.calls and not extra:
            return []
        try:
            replies = wire.replies(self._conn, len(self.calls))
            if self.ahead is not None:
                self.ahead.take(wire.replies(self._conn, len(extra)))
        except BaseException:
            self._drop()
            raise
        self.store._shared.kept.give_back(self.client.connection_pool, self._conn)
        self._conn = None
        missing = [
            i
            for i, x in enumerate(replies)
            if isinstance(x, redis.ResponseError) and missing_function(x)
        ]
        if missing:
            self.store.load_library(self.calls[missing[0]][1][0])  # one scope's: one node
            again = self.store._fcalls([self.calls[i] for i in missing])
            for i, x in zip(missing, again, strict=True):
                replies[i] = x
        for x in replies:
            if isinstance(x, Exception) and unreachable(x):
                raise x  # the server is loading: nothing landed
        return [wire.text_or_error(x) for x in replies]

    def _drop(self) -> None:
        """A connection whose replies were not all read goes: it cannot be used again."""
        if self._conn is not None:
            self.store._shared.kept.drop(self.client.connection_pool, self._conn)
            self._conn = None

    def close(self) -> None:
        """After the caller raised: read the replies of what was written (held calls are
        not) and give the connection back, or drop it when that fails too."""
        self._held = []
        if self._conn is None:
            return
        try:
            wire.replies(self._conn, self.written)
            if self._extra_written and self.ahead is not None:
                # the rows it read are pending for this consumer: they are kept (ReadAhead)
                self.ahead.take(wire.replies(self._conn, len(self._extra)))
        except Exception:  # the caller's error is the one to raise
            self._drop()
            return
        except BaseException:
            self._drop()
            raise
        self.store._shared.kept.give_back(self.client.connection_pool, self._conn)
        self._conn = None


def wait_args(
    scope: str, waits: Sequence[tuple[str, str, str, int]], ks: list[str]
) -> list[wire.Arg]:
    """The (key index, op, member, score) arguments of `waits`, adding their keys to `ks`."""
    index: dict[str, int] = {}
    args: list[wire.Arg] = []
    for type_id, op, m, score in waits:
        if type_id not in index:
            ks.append(keys.waits(scope, type_id))
            index[type_id] = len(ks)
        args += [index[type_id], op, m, score]
    return args


class CommitCommands(StoreClient):
    """The load and the commits of a batch (`sfc1_commit`)."""

    def load(self, scope: str, jobs: Sequence[str]) -> tuple[int, dict[str, JobRecord | None]]:
        """The server's TIME and the hashes of `jobs`, in one round trip."""
        commands = [("TIME",), *[("HMGET", keys.job(scope, job), *JOB_FIELDS) for job in jobs]]
        out = wire.raised(self._round_trip(scope, commands))
        return wire.ms(out[0]), records(out[1:], jobs)

    def load_batch(self, scope: str, jobs: Sequence[str], ahead: ReadAhead | None = None) -> Loaded:
        """The server's TIME, the hashes of `jobs` and the scope's settings, in one round
        trip; with `ahead`, it also reads new entries ahead (and loads none)."""
        commands = [("TIME",), *load_commands(scope, jobs)]
        extra = [] if ahead is None else ahead.commands(self.consumer, load=False)
        out = self._round_trip(scope, commands + extra)
        if ahead is not None:
            ahead.take(out[len(commands) :])
        out = wire.raised(out[: len(commands)])
        return (wire.ms(out[0]), *load_result(out[1:], jobs))

    def job(self, scope: str, job: str) -> JobRecord | None:
        return self.load(scope, [job])[1][job]

    def commits(self, commits: Sequence[Commit], consumer: str | None = None) -> list[str]:
        """`sfc1_commit` for each, in one pipeline: ok, conflict, gone, missing or duplicate."""
        who = self.consumer if consumer is None else consumer
        return [wire.text(x) for x in self._fcalls([self._commit_call(c, who) for c in commits])]

    def commits_each(self, commits: Sequence[Commit]) -> list[str | Exception]:
        """`commits`, with an error reply as that commit's result (the others' are kept)."""
        calls = [self._commit_call(c, self.consumer) for c in commits]
        return [wire.text_or_error(x) for x in self._fcalls(calls, each=True)]

    def commit_stream(
        self, scope: str, ahead: ReadAhead | None = None, consumer: str | None = None
    ) -> CommitStream:
        """A CommitStream for a batch's commits on `scope`'s node; with `ahead`, the next
        work entries are read after them, without blocking."""
        who = self.consumer if consumer is None else consumer
        return CommitStream(self, self.client(scope), who, ahead)

    def _commit_call(self, c: Commit, consumer: str) -> FunctionCall:
        s = c.scope
        scoped = self._shared.scope_keys.get(s)
        if scoped is None:
            if len(self._shared.scope_keys) >= SCOPE_KEYS_KEPT:
                self._shared.scope_keys.clear()
            scoped = self._shared.scope_keys[s] = (
                keys.due(s),
                keys.active(s),
                keys.work(s),
                keys.equipment(s),
                keys.seen(s),
            )
        ks = [keys.job(s, c.job), keys.history(s, c.job), *scoped]
        waited = wait_args(s, c.waits, ks) if c.waits else []
        args: list[wire.Arg] = [
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
        args += ["" if c.seen is None else c.seen, self.dedupe_ttl_ms, len(c.waits), *waited]
        args.append(len(c.work))
        for kind, data in c.work:
            args += [kind, data]
        if c.counter:
            ks.append(keys.settings(s))  # the last KEY
            args.append(c.counter)
        return "sfc1_commit", ks, args

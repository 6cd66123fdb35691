"""Applying work entries: load, evolve, commit (docs/host.md, "Applying an event").

    load the hashes (pipelined, with TIME) -> graph for the order's recipe (cached by hash)
    -> evolve each entry of the job in order, in memory -> the new order -> one commit per
    job (expected version, state, order, due, commands, history, entry ids to ack)
    -> ok | conflict | gone | missing

The one apply path. A conflict loads and evolves again here (no delivery counted); `gone`
drops the result: the consumer that took the entries over applies them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET

from generated.work_entry_v1_0 import EventData
from host import joborder, waits
from host.entries import Entry, job_of
from host.evaluate import (
    Decoded,
    Evaluator,
    GraphCache,
    MethodCall,
    MethodRefused,
    ScopeConfig,
    decode_order,
    open_command_ids,
    unreadable,
    way_out,
)
from host.keys import (
    ANSWERS_DROPPED,
    ENTRIES_DROPPED,
    EVENTS_DUPLICATE,
    EVENTS_UNMATCHED,
    METHODS_APPLIED,
    METHODS_REFUSED,
)
from host.outcome import FAILURES_KEPT, JobEnd, Outcome, Unreadable, UnreadableJob
from host.settings import Settings
from host.store import Commit, CommitStream, JobRecord, Loaded, ReadAhead, Store, unreachable
from sfc.migrate import read_state

__all__ = [
    "COMMIT_CHUNK",
    "FAILURES_KEPT",
    "Applier",
    "Decoded",
    "JobEnd",
    "MethodCall",
    "Outcome",
    "Round",
    "ScopeConfig",
    "Unreadable",
    "decode_order",
    "open_command_ids",
    "unreadable",
    "way_out",
]
"""What other modules take from the apply path (some of it defined in host.evaluate and
host.outcome)."""

log = logging.getLogger("sfc.host")
CONFLICT_RETRIES = 50
COMMIT_CHUNK = 20
"""A batch's commits are sent in chunks of this many: the server runs one chunk while the
worker evaluates the next jobs (Store.commit_stream)."""


UNREADABLE_SCAN = 100
"""The matching waits' jobs read to find the one an event that goes dead was offered to
(`Applier.unreadable_wait`)."""


def _leave_pending(
    scope: str, job: str, record: JobRecord, entries: Sequence[Entry], e: Exception, tally: Outcome
) -> None:
    """Leave the entries of `job`, whose evaluation raised `e`, pending: an unreadable job
    goes to `Outcome.unreadable`, a node that cannot be reached (the recipe's, on a cluster)
    to the line of each entry, anything else is logged with its traceback."""
    if unreachable(e):
        tally.failed += [(x.id, f"{type(e).__name__}: {e}") for x in entries]
        return
    why = unreadable(record) if isinstance(e, msgspec.DecodeError) else None
    if why is not None:
        ids = tuple(x.id for x in entries)
        tally.unreadable.append(Unreadable(job, ids, entries[0].kind, why))
        tally.failed += [(i, f"job {job}: its stored order or state cannot be read") for i in ids]
        return
    log.exception(
        "job %s in scope %s: applying %d entries raised",
        job,
        scope,
        len(entries),
        extra={
            "scope": scope,
            "job": job,
            "entry": entries[0].id,
            "kind": entries[0].kind,
            "reason": f"{type(e).__name__}: {e}",
        },
    )
    tally.failed += [(x.id, f"{type(e).__name__}: {e}") for x in entries]


def _log_unreadable_at_start(scope: str, job: str, why: str) -> None:
    """Log a job found unreadable when its scope is taken up, in the words of
    `WorkLog.applied`."""
    log.error(
        "scope %s: job %s cannot be evaluated: its stored order or state cannot be read (%s); "
        "its indexes are left as they are; %s",
        scope,
        job,
        why,
        way_out(job),
        extra={
            "scope": scope,
            "job": job,
            "reason": f"its stored order or state cannot be read: {why}",
        },
    )


class Applier:
    """Applies batches of decoded work entries of one scope: the one apply path."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        graphs: GraphCache | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.settings = settings
        self.graphs = graphs or GraphCache(store)
        self.evaluator = Evaluator(self.graphs, settings)
        self.sleep = sleep
        self.conflicts = 0
        """Commit conflicts of job-control methods (each was loaded and applied again)."""
        self.before_commit: Callable[[list[Commit]], None] | None = None
        """A hook for tests: called with the commits of a batch (of each chunk of
        COMMIT_CHUNK, in a large batch) just before they are sent."""

    def method(self, scope: str, job: str, call: MethodCall) -> tuple[joborder.ReturnStatus, str]:
        """Apply a job-control method as one commit at the server's time; returns the
        ReturnStatus and the new state path (or why not). Applied or refused, it is counted
        in the scope's hash; a bad id or unknown job writes nothing."""
        for attempt in range(CONFLICT_RETRIES):
            if attempt:
                self.conflicts += 1
                self.sleep(min(0.05, 0.001 * 2**attempt))
            now, records, values = self.store.load_batch(scope, [job])
            record = records[job]
            if record is None:
                return joborder.ReturnStatus.UNKNOWN_JOB_ORDER_ID, "no such job order"
            config = ScopeConfig.of(values, self.settings)
            entry = Entry("", call.method, call)
            try:
                commit = self.evaluator.evaluate(
                    scope, job, record, [entry], now, config, Outcome()
                )
            except MethodRefused as e:
                if e.status == joborder.ReturnStatus.INVALID_JOB_ORDER_STATUS:
                    self.store.count(scope, METHODS_REFUSED + call.method)
                return e.status, e.message
            commit.counter = METHODS_APPLIED + call.method
            result = self.store.commits([commit])[0]
            if result == "ok":
                return joborder.ReturnStatus.OK, joborder.path_text(decode_order(commit.order))
            if result == "missing":
                return joborder.ReturnStatus.UNKNOWN_JOB_ORDER_ID, "no such job order"
        return joborder.ReturnStatus.UNABLE_TO_ACCEPT, "the job kept changing; try again"

    def repair_all(self, scope: str, chunk: int = 200) -> int:
        """Set the due, active and waits indexes of every active job of `scope` from its
        hash; a job that moved meanwhile is left as it is. Returns the jobs repaired."""
        jobs = self.store.active_jobs(scope)
        repaired = 0
        for i in range(0, len(jobs), chunk):
            part = jobs[i : i + chunk]
            _, records = self.store.load(scope, part)
            for job in part:
                record = records[job]
                if record is None:
                    self.store.repair(scope, job, "", False)
                    continue
                try:
                    state = read_state(record.state)
                    order = decode_order(record.order)
                except (msgspec.DecodeError, RecursionError) as e:
                    _log_unreadable_at_start(scope, job, str(e))
                    continue
                running = state.status == "running" and not joborder.ended(order)
                graph = self.graphs.get(order.recipe_hash, order.dataschema)
                ops = [] if isinstance(graph, str) else waits.rebuild(state, graph)
                if self.store.repair(scope, job, record.version, running, ops) == "ok":
                    repaired += 1
        return repaired

    def apply(
        self,
        scope: str,
        entries: Sequence[Entry],
        ahead: ReadAhead | None = None,
        loaded: Loaded | None = None,
    ) -> Outcome:
        """Apply and commit `entries` (of `scope`, in stream order). The first round reads
        `ahead` too, and loads nothing that `loaded` holds."""
        tally = Outcome()
        jobs, events = _by_job(entries)
        pending = self._round(scope, jobs, tally, ahead, loaded) if jobs else {}
        self._finish(scope, pending, events, tally)
        return tally

    def prepare(self, scope: str, entries: Sequence[Entry], loaded: Loaded | None) -> Round:
        """The first round of `apply`, evaluated and not sent (then `send`, `land`); jobs
        that `loaded` lacks are loaded now."""
        jobs, events = _by_job(entries)
        tally = Outcome()
        if not jobs:
            return Round(scope, jobs, events, tally)
        if loaded is None or not all(job in loaded[1] for job in jobs):
            loaded = self.store.load_batch(scope, list(jobs))
        commits, counts, missing = self._evaluate(scope, jobs, loaded, tally, None)
        return Round(scope, jobs, events, tally, commits, counts, missing)

    def send(self, r: Round, ahead: ReadAhead | None = None) -> None:
        """Write the commits of a prepared round, and then `ahead`'s commands, in one
        write; their replies are read by `land`."""
        stream = r.stream = self.store.commit_stream(r.scope, ahead)
        try:
            self._send(stream, r.commits, hold=True)
            stream.flush()
        except BaseException:
            stream.close()
            raise

    def land(self, r: Round) -> Outcome:
        """The rest of `apply` for a round `send` wrote: its results, the retries of its
        conflicts, its dropped entries and its events."""
        tally = r.tally
        results: list[str | Exception] = []
        try:
            self._drop_missing(r.scope, r.missing, tally)
            if r.stream is not None:
                results = r.stream.collect()
        except BaseException:
            if r.stream is not None:
                r.stream.close()
            raise
        pending = self._results(r.jobs, r.commits, r.counts, results, tally)
        self._finish(r.scope, pending, r.events, tally)
        return tally

    def _finish(
        self, scope: str, pending: dict[str, list[Entry]], events: list[Entry], tally: Outcome
    ) -> None:
        """After a batch's first round: retry its conflicts, then offer its events."""
        for attempt in range(1, CONFLICT_RETRIES):
            if not pending:
                break
            self.sleep(min(0.05, 0.001 * 2**attempt))
            pending = self._round(scope, pending, tally)
        else:
            for job, es in pending.items():
                tally.failed += [(e.id, f"job {job}: {CONFLICT_RETRIES} conflicts") for e in es]
        # after the jobs' entries: an answer of the batch may open a wait
        alone = events
        if len(events) > 1:
            done: set[str] = set()
            try:
                alone = self._offer_together(scope, events, tally, done)
            except Exception as x:
                alone = [e for e in events if e.id not in done]
                if not unreachable(x):
                    log.warning(
                        "scope %s: offering %d events together raised; offering the %d left "
                        "one at a time",
                        scope,
                        len(events),
                        len(alone),
                        exc_info=True,
                        extra={"scope": scope, "reason": f"{type(x).__name__}: {x}"},
                    )
        for e in alone:
            try:
                self.offer(scope, e, tally)
            except UnreadableJob as x:  # the job its wait matched first: the event waits
                tally.unreadable.append(Unreadable(x.job, (e.id,), e.kind, x.why))
                tally.failed.append(
                    (e.id, f"job {x.job}: its stored order or state cannot be read")
                )
            except Exception as x:  # a bug: the event stays pending
                log.exception("scope %s: offering event %s raised", scope, e.id)
                tally.failed.append((e.id, f"{type(x).__name__}: {x}"))

    def _offer_together(
        self, scope: str, events: list[Entry], tally: Outcome, done: set[str]
    ) -> list[Entry]:
        """Offer a batch's events together in at most four round trips; returns those left for
        `offer`, in order. One goes together only if no earlier event claimed its first choice's
        job or its source/id, so `offer` decides each left one as it would have alone."""
        seen_of = {e.id: _seen_field(e) for e in events}
        until: dict[str, int] = {}
        for e in events:
            type_id = _event(e).type_id
            until[type_id] = max(until.get(type_id, 0), e.ms)
        fields = [f for f in dict.fromkeys(seen_of.values()) if f is not None]
        found, taken = self.store.waiting_many(scope, until, fields)
        members = {t: _parsed_members(found[t]) for t in found}
        claimed: set[str] = set()
        claimed_seen: set[str] = set()
        first: list[tuple[Entry, str, str]] = []  # (event, job, member) of the batch
        alone: list[Entry] = []
        acks: dict[str, list[Entry]] = {EVENTS_DUPLICATE: [], EVENTS_UNMATCHED: []}
        for e in events:
            data = _event(e)
            seen = seen_of[e.id]
            candidates = _candidates(members[data.type_id], e.ms, data)
            if seen is not None and seen in taken:
                acks[EVENTS_DUPLICATE].append(e)  # taken before the batch: it applies nowhere
                continue
            if not candidates and (seen is None or seen not in claimed_seen):
                acks[EVENTS_UNMATCHED].append(e)  # (a copy of a claimed one may be its duplicate)
                continue
            free = (
                candidates
                and candidates[0][0] not in claimed
                and (seen is None or seen not in claimed_seen)
            )
            if free:
                first.append((e, *candidates[0]))
            else:
                alone.append(e)
            claimed.update(job for job, _ in candidates)
            if seen is not None:
                claimed_seen.add(seen)
        groups = [(counter, es) for counter, es in acks.items() if es]
        if groups:
            results = self.store.acks(scope, [([e.id for e in es], c) for c, es in groups])
            for (counter, es), result in zip(groups, results, strict=True):
                if result == "ok":
                    done.update(e.id for e in es)
                    self._acked(counter, len(es), tally)
                else:  # one of them is no longer ours (or the call failed): `offer` finds which
                    alone += es
        if not first:
            return _in_order(alone, events)
        now, records, values = self.store.load_batch(scope, [job for _, job, _ in first])
        tally.loads += len(first)
        config = ScopeConfig.of(values, self.settings)
        going: list[tuple[Entry, Commit, Outcome]] = []
        for e, job, _ in first:
            record = records[job]
            local = Outcome()
            if record is None:
                alone.append(e)  # `offer` drops the member of the cleared job
                continue
            try:
                commit = self.evaluator.evaluate(scope, job, record, [e], now, config, local)
            except Exception:
                alone.append(e)  # `offer` reports it
                continue
            if local.applied != 1:
                alone.append(e)  # `offer` drops a stale member and tries the next wait
                continue
            commit.seen = seen_of[e.id]
            going.append((e, commit, local))
        if going:
            commits = [c for _, c, _ in going]
            if self.before_commit is not None:
                self.before_commit(commits)
            # each commit's own result: one that failed does not hide those that landed
            results = self.store.commits_each(commits)
            for (e, commit, local), result in zip(going, results, strict=True):
                if result == "ok":
                    tally.add(local)
                    done.add(e.id)
                elif result == "duplicate":
                    done.add(e.id)
                    self._ack_event(scope, e, tally, EVENTS_DUPLICATE)
                elif result == "gone":
                    done.add(e.id)
                    tally.gone += 1
                    tally.given_up.append((commit.job, (e.id,)))
                else:  # conflict or missing (the job moved), or an error: `offer` again
                    tally.conflicts += result == "conflict"
                    alone.append(e)
        return _in_order(alone, events)

    def unreadable_wait(self, scope: str, entry: Entry) -> tuple[str, str] | None:
        """(job, why) of the first wait the event matches, oldest first, whose job cannot be
        read (what makes `offer` raise UnreadableJob), or None. Reads the first
        UNREADABLE_SCAN matching jobs in one round trip."""
        data = _event(entry)
        members, taken = self.store.waiting(scope, data.type_id, entry.ms, _seen_field(entry))
        if taken:
            return None
        jobs = list(
            dict.fromkeys(job for job, _ in _candidates(_parsed_members(members), entry.ms, data))
        )
        jobs = jobs[:UNREADABLE_SCAN]
        if not jobs:
            return None
        _, records = self.store.load(scope, jobs)
        for job in jobs:
            record = records[job]
            why = None if record is None else unreadable(record)
            if why is not None:
                return job, why
        return None

    def offer(self, scope: str, entry: Entry, tally: Outcome) -> str:
        """Offer an event to the waits that match it (type, selector, begun no later),
        oldest first, until one takes it; acks it and takes its source/id either way.
        Returns applied, duplicate, unmatched or gone."""
        data = _event(entry)
        seen = _seen_field(entry)
        members, taken = self.store.waiting(scope, data.type_id, entry.ms, seen)
        if taken:
            return self._ack_event(scope, entry, tally, EVENTS_DUPLICATE)
        candidates = _candidates(_parsed_members(members), entry.ms, data)
        config: ScopeConfig | None = None
        for job, member in candidates:
            for _ in range(CONFLICT_RETRIES):
                now, records, values = self.store.load_batch(scope, [job])
                tally.loads += 1
                record = records[job]
                if record is None:  # cleared: its member is stale
                    self.store.repair(scope, job, "", None, [(data.type_id, "rem", member, 0)])
                    break
                if config is None:
                    config = ScopeConfig.of(values, self.settings)
                local = Outcome()
                try:
                    commit = self.evaluator.evaluate(
                        scope, job, record, [entry], now, config, local
                    )
                except msgspec.DecodeError as e:
                    why = unreadable(record)
                    if why is None:
                        raise
                    raise UnreadableJob(job, why) from e
                if local.applied != 1:
                    self._drop_stale(scope, job, record, data.type_id, member)
                    break  # not this wait: the offer writes nothing
                commit.seen = seen
                if self.before_commit is not None:
                    self.before_commit([commit])
                result = self.store.commits([commit])[0]
                if result == "ok":
                    tally.add(local)
                    return "applied"
                if result == "duplicate":
                    return self._ack_event(scope, entry, tally, EVENTS_DUPLICATE)
                if result == "gone":
                    tally.gone += 1
                    tally.given_up.append((job, (entry.id,)))
                    return "gone"
                if result == "missing":
                    break
                tally.conflicts += 1  # the job moved: load it again and offer again
        return self._ack_event(scope, entry, tally, EVENTS_UNMATCHED)

    def _ack_event(self, scope: str, entry: Entry, tally: Outcome, counter: str) -> str:
        if self.store.ack(scope, [entry.id], counter) == "gone":
            tally.gone += 1
            tally.given_up.append(("", (entry.id,)))
            return "gone"
        return self._acked(counter, 1, tally)

    @staticmethod
    def _acked(counter: str, n: int, tally: Outcome) -> str:
        """Count `n` events acked as duplicates or unmatched; what became of them."""
        what = "duplicate" if counter == EVENTS_DUPLICATE else "unmatched"
        if what == "duplicate":
            tally.duplicates += n
        else:
            tally.unmatched += n
        tally.kinds["event", what] = tally.kinds.get(("event", what), 0) + n
        return what

    def _drop_stale(
        self, scope: str, job: str, record: JobRecord, type_id: str, member: str
    ) -> None:
        """Remove a stale member (its job has no such open wait) from the type's waits key."""
        state = read_state(record.state)
        order = decode_order(record.order)
        graph = self.graphs.get(order.recipe_hash, order.dataschema)
        if isinstance(graph, str) or (type_id, member) in waits.open_waits(state, graph):
            return
        self.store.repair(scope, job, record.version, None, [(type_id, "rem", member, 0)])

    def _send(self, stream: CommitStream, commits: list[Commit], hold: bool = False) -> None:
        if commits and self.before_commit is not None:
            self.before_commit(commits)
        stream.send(commits, hold)

    def _round(
        self,
        scope: str,
        jobs: dict[str, list[Entry]],
        tally: Outcome,
        ahead: ReadAhead | None = None,
        loaded: Loaded | None = None,
    ) -> dict[str, list[Entry]]:
        """Load (unless `loaded` has every job), evaluate, commit; the jobs to try again."""
        if loaded is None or not all(job in loaded[1] for job in jobs):
            loaded = self.store.load_batch(scope, list(jobs), ahead)
        stream = self.store.commit_stream(scope, ahead)
        try:
            commits, counts, missing = self._evaluate(scope, jobs, loaded, tally, stream)
            self._drop_missing(scope, missing, tally)
            results = stream.finish()
        except BaseException:
            stream.close()
            raise
        return self._results(jobs, commits, counts, results, tally)

    def _evaluate(
        self,
        scope: str,
        jobs: dict[str, list[Entry]],
        loaded: Loaded,
        tally: Outcome,
        stream: CommitStream | None,
    ) -> tuple[list[Commit], list[Outcome], list[Entry]]:
        """Evaluate each job's entries: (commits, their tallies, entries of missing jobs).
        With `stream`, send the commits in chunks of COMMIT_CHUNK as they are made."""
        now, records, values = loaded
        config = ScopeConfig.of(values, self.settings)
        commits: list[Commit] = []
        counts: list[Outcome] = []
        missing: list[Entry] = []
        sent = 0
        left = len(jobs)
        for job, es in jobs.items():
            left -= 1
            record = records[job]
            if record is None:
                missing += es
                continue
            try:
                local = Outcome()
                commits.append(self.evaluator.evaluate(scope, job, record, es, now, config, local))
                counts.append(local)
            except Exception as e:  # the entries stay pending, and are claimed later
                _leave_pending(scope, job, record, es, e, tally)
            waiting = len(commits) - sent
            if stream is not None and (waiting >= COMMIT_CHUNK or (sent and 0 < left < waiting)):
                # the server runs these while the next jobs are evaluated; after the first
                # chunk, the chunks halve towards the end, so that the server has little
                # left to run when the last is written
                self._send(stream, commits[sent:])
                sent = len(commits)
        if stream is not None:
            # the last chunk goes out with the stream's read ahead, in one write
            self._send(stream, commits[sent:], hold=True)
        return commits, counts, missing

    def _drop_missing(self, scope: str, missing: list[Entry], tally: Outcome) -> None:
        """Ack the entries of jobs not stored (cleared) as dropped; one another consumer
        took over is counted gone."""
        if not missing:
            return
        answers = [e.id for e in missing if e.kind == "answer"]
        others = [e.id for e in missing if e.kind != "answer"]
        taken: set[str] = set()
        for ids, counter in ((answers, ANSWERS_DROPPED), (others, ENTRIES_DROPPED)):
            if ids and self.store.ack(scope, ids, counter) == "gone":
                # sfc1_ack wrote nothing: each goes on its own, so that only what was
                # taken over stays pending (a rare path: a claim raced this batch)
                if len(ids) > 1:
                    ids = [i for i in ids if self.store.ack(scope, [i], counter) == "gone"]
                taken.update(ids)
        tally.gone += len(taken)
        by_job: dict[str, list[str]] = {}
        for e in missing:
            if e.id in taken:
                by_job.setdefault(job_of(e) or "", []).append(e.id)
        tally.given_up += [(job, tuple(ids)) for job, ids in by_job.items()]
        for e in missing:
            if e.id not in taken:
                tally.dropped += 1
                tally.kinds[e.kind, "dropped"] = tally.kinds.get((e.kind, "dropped"), 0) + 1

    @staticmethod
    def _results(
        jobs: dict[str, list[Entry]],
        commits: list[Commit],
        counts: list[Outcome],
        results: list[str | Exception],
        tally: Outcome,
    ) -> dict[str, list[Entry]]:
        """Count what landed; the jobs to try again (a conflict, or a job that went)."""
        again: dict[str, list[Entry]] = {}
        for c, local, result in zip(commits, counts, results, strict=True):
            if result == "ok":
                tally.add(local)
            elif result == "conflict":
                tally.conflicts += 1
                again[c.job] = jobs[c.job]
            elif result == "gone":
                tally.gone += len(c.acks)
                tally.given_up.append((c.job, tuple(c.acks)))
            elif result == "missing":
                again[c.job] = jobs[c.job]
            elif isinstance(result, Exception):  # not acked: the entries stay pending
                why = f"the commit failed: {type(result).__name__}: {result}"
                tally.failed += [(e.id, why) for e in jobs[c.job]]
        return again


def _in_order(some: list[Entry], events: list[Entry]) -> list[Entry]:
    """`some` of `events`, in the order of `events` (the batch's)."""
    order = {e.id: i for i, e in enumerate(events)}
    return sorted(some, key=lambda e: order[e.id])


def _event(entry: Entry) -> EventData:
    data = entry.data
    assert isinstance(data, EventData)
    return data


def _seen_field(entry: Entry) -> str | None:
    """The field an event takes in the seen hash (source/id); None without both."""
    data = _event(entry)
    if data.source is UNSET or data.id is UNSET:
        return None
    return f"{data.source}/{data.id}"


Member = tuple[int, tuple[str, str | None, str | None], str]
"""A waits member as read: (wait start, (job, subject, correlationId), the member)."""


def _parsed_members(found: Sequence[tuple[bytes, int]]) -> list[Member]:
    """The members this host wrote, oldest wait first (as read); others are skipped."""
    out: list[Member] = []
    for raw, score in found:
        parsed = waits.parse_member(raw)
        if parsed is not None:
            out.append((score, parsed, raw.decode()))
    return out


def _candidates(members: Sequence[Member], ms: int, data: EventData) -> list[tuple[str, str]]:
    """(job, member) of the waits an event matches, oldest first: begun by the event
    (`ms`, its entry's time) and matching its selector."""
    subject = None if data.subject is UNSET else data.subject
    correlation = None if data.correlation_id is UNSET else data.correlation_id
    return [
        (parsed[0], raw)
        for score, parsed, raw in members
        if score <= ms and waits.matches(parsed, subject, correlation)
    ]


def _by_job(entries: Sequence[Entry]) -> tuple[dict[str, list[Entry]], list[Entry]]:
    """A batch's entries by job, in stream order, and its events (no job of their own)."""
    by_job: dict[str, list[Entry]] = {}
    events: list[Entry] = []
    for e in entries:
        if isinstance(e.data, EventData):
            events.append(e)
        else:
            by_job.setdefault(e.data.job, []).append(e)
    return by_job, events


@dataclass(slots=True)
class Round:
    """A scope's batch evaluated by `Applier.prepare`, to `send` and then `land`."""

    scope: str
    jobs: dict[str, list[Entry]]
    events: list[Entry]
    tally: Outcome
    commits: list[Commit] = field(default_factory=list)
    counts: list[Outcome] = field(default_factory=list)
    missing: list[Entry] = field(default_factory=list)
    stream: CommitStream | None = None

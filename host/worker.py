"""The worker: one consumer of group `sfc-engine` on the work stream of each scope it serves.

It keeps no state of its own (the server and the core decide), so workers run side by side
and a killed one loses nothing. `run` loops; tests step it (`read_once`, `claim_once`, ...).
"""

from __future__ import annotations

import gc
import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from host.apply import Applier, Outcome, unreadable, way_out
from host.batches import Batches, Entries
from host.cluster import Moving, Routes
from host.entries import Entry, EntryError, decode_work, job_mentioned, job_named, job_of
from host.reconnect import Reconnect
from host.settings import Settings
from host.store import Loaded, ReadAhead, Row, Store, slot_moving, unreachable, unreachable_reason
from host.worklog import WorkLog

T = TypeVar("T")

if TYPE_CHECKING:
    from host.metrics import WorkerMetrics

log = logging.getLogger("sfc.host.worker")
TRIM_INTERVAL_MS = 60_000
"""How often a worker trims the equipment stream of each scope it serves."""
COLLECT_YOUNG_AFTER = 50_000
"""A worker process's garbage collector looks at its young objects after this many
allocations, not Python's 700 (tune_collector)."""


def tune_collector() -> None:
    """Freeze what start-up made and collect young objects every COLLECT_YOUNG_AFTER
    allocations; call after the imports (docs/host.md, "The worker's garbage collector")."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(COLLECT_YOUNG_AFTER, older, oldest)


def consumer_name() -> str:
    """A consumer name unique to this process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(slots=True)
class Counters:
    """What a worker did since it started (for tests and benchmarks; the Prometheus metrics
    are counted in host/metrics.py)."""

    batches: int = 0
    outcome: Outcome = field(default_factory=Outcome)
    buried: int = 0
    claimed: int = 0
    deleted_on_claim: int = 0
    ticks: int = 0
    outages: int = 0
    repaired: int = 0
    trimmed: int = 0


@dataclass(slots=True)
class Timetable:
    """When each step of the worker's loop is due next (the worker's clock)."""

    refresh: float
    sweep: float
    claim: float
    trim: float

    def next(self) -> float:
        return min(self.refresh, self.sweep, self.claim, self.trim)


class Worker:
    """One consumer of the work streams of `scopes` (every registered scope when None)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        scopes: Sequence[str] | None = None,
        *,
        consumer: str | None = None,
        applier: Applier | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: WorkerMetrics | None = None,
        overlap: bool = False,
        isolate: bool | None = None,
    ) -> None:
        """`isolate` parks scopes one by one as on a cluster (None: only on a cluster); it
        exists so that the park path can be tested on one server."""
        self.consumer = consumer or consumer_name()
        self.store = store = store.with_options(
            consumer=self.consumer,
            history_limit=settings.history_limit,
            dedupe_ttl_ms=settings.event_dedupe_ttl,
        )
        self.settings = settings
        self.fixed_scopes = None if scopes is None else list(dict.fromkeys(scopes))
        self.applier = applier or Applier(store, settings)
        self.clock = clock
        self.scopes: list[str] = []
        """The scopes this worker has taken up (group created, jobs repaired)."""
        self.counters = Counters()
        self.metrics = metrics
        """Prometheus metrics (host/metrics.py), when the process serves them."""
        self._claim_start: dict[str, str] = {}
        self._delivered: dict[tuple[str, str], int] = {}
        """The server's delivery count of own pending entries read again after a park, by
        (scope, entry id), until they are decoded (a burial records it)."""
        self.batches = Batches(store, settings, self.applier, self.scopes, overlap)
        """The entries read ahead, and the batch in flight (`sfc serve` overlaps batches; a
        worker stepped by a test does not, unless it says so)."""
        self.routes = Routes(
            store, settings.outage_threshold, self.consumer, clock, metrics, isolate
        )
        """Which scopes to serve now on a cluster, and what a failed call means for them."""
        self.routes.scopes = self.scopes
        self.parked = self.routes.parked
        """Scopes set aside while their node cannot be reached or their slot moves."""
        self.worklog = WorkLog(settings, metrics)
        """The log lines of its work, and the entries it left pending."""

    # -- scopes and recovery

    def refresh_scopes(self) -> list[str]:
        """Take up new scopes (create the group, repair every active job); return them.

        The scopes are the ones given, else the registry `sfc:scopes`."""
        routes = self.routes
        if self.fixed_scopes is not None:
            wanted = self.fixed_scopes
        else:
            try:
                wanted = self.store.scopes()
            except Exception as e:
                if not (routes.isolating() and unreachable(e)):
                    raise
                # the registry's node is away: the scopes served go on, new ones wait
                log.debug("the scope registry cannot be read now: %s", unreachable_reason(e))
                return []
        routes.policy.forget(wanted, self.scopes)
        new = [s for s in wanted if s not in self.scopes]
        several = routes.isolating(wanted)
        taken: list[str] = []
        away: Exception | None = None
        for scope in new:
            try:
                self.store.create_group(scope)
                self.counters.repaired += self.recover(scope)
            except Exception as e:
                if not (several and unreachable(e)):
                    raise
                away = e  # its node is away: the others are taken up, it at the next refresh
                routes.taking_up(scope, e)
                continue
            routes.taking_up(scope, None)
            self.scopes.append(scope)
            taken.append(scope)
            log.info("serving scope %s (consumer %s)", scope, self.consumer)
        if away is not None and not self.scopes:
            raise away  # none can be reached: the loop's backoff (a move: said for each)
        return taken

    def recover(self, scope: str) -> int:
        """Set the indexes of every active job of `scope` from its hash; resend nothing (the
        sweep owns every deadline). Returns the jobs repaired."""
        return self.applier.repair_all(scope)

    # -- reading and applying

    def read_once(self, block_ms: int | None = None) -> Outcome:
        """Apply one batch: the entries read ahead, else new entries of every scope (up to
        SFC_READ_COUNT each, blocking up to `block_ms`)."""
        batches = self.batches
        if batches.flight is not None and batches.lands_first():
            return batches.land_flight(self)
        total = Outcome()
        if not self.scopes:
            return total
        rows, loaded, from_ready = batches.take()
        if not rows:
            rows = self._read(block_ms)
        by_scope: Entries = {}
        for scope, entry_id, fields in rows:
            by_scope.setdefault(scope, []).append((entry_id, fields))
        # a full read (COUNT is per stream): more entries wait, most likely, so this batch
        # reads ahead (after a short one, the next read waits for more instead, so that
        # batches do not shrink); the rows read ahead already load after its commits
        full = any(len(e) >= self.settings.read_count for e in by_scope.values())
        if from_ready and batches.overlapping():
            return batches.send_overlapped(self, rows, by_scope, loaded, full)
        ahead = batches.ahead_of(full)
        last = next(reversed(by_scope), None)
        routes = self.routes
        try:
            for scope, entries in by_scope.items():
                # the last scope's round trips read ahead (for every scope), after its own
                try:
                    total.add(
                        self._apply(
                            scope, entries, 1, ahead if scope == last else None, loaded.get(scope)
                        )
                    )
                    if routes.parked or routes.moving:
                        routes.went_through(scope, whole=True)  # its batch is committed
                        routes.round_trip(scope)
                except Exception as e:
                    if not routes.park(scope, e):
                        if routes.isolating() and unreachable(e):
                            # the loop backs off: every scope's entries of this batch that
                            # are not committed are read first when it is served again
                            routes.reread.update(dict.fromkeys(by_scope, "0"))
                        raise
        finally:
            batches.keep(ahead)
            if self._delivered:
                self._forget_deliveries(rows)  # those not decoded were not applied
        return total

    def _forget_deliveries(self, rows: list[Row]) -> None:
        for row in rows:
            self._delivered.pop((row[0], row[1]), None)

    def _read(self, block_ms: int | None) -> list[Row]:
        """New entries of the scopes served; when isolating, each scope on its own (one that
        fails is parked) and its own pending entries (Routes.reread) first."""
        count = self.settings.read_count
        routes = self.routes
        if not routes.isolating():
            return self.store.read(self.scopes, count, block_ms)
        rows: list[Row] = []
        was_parked = set(routes.parked)
        for scope in routes.serving():
            if scope in routes.parked and scope not in was_parked:
                continue  # parked with its node by another of its scopes' call just now
            try:
                got = self._read_scope(scope, count)
            except Exception as e:
                if not routes.park(scope, e):
                    # not returned, so not applied: read again first (they are pending for
                    # this worker, and come before the scope's new entries)
                    routes.reread.update(dict.fromkeys({row[0] for row in rows}, "0"))
                    self._forget_deliveries(rows)
                    raise
                continue
            routes.went_through(scope)
            if not got and routes.moving and scope not in routes.reread:
                routes.round_trip(scope)  # nothing to apply: its round trip went through
            rows += got
        # not a scope with own entries left: its new ones would come before them
        here = [s for s in self.scopes if s not in self.parked and s not in routes.reread]
        if not rows and block_ms and here:
            scope = self.store.next_turn(here)
            try:
                rows = self.store.read([scope], count, self.store.cluster_block(block_ms))
            except Exception as e:
                if not routes.park(scope, e):
                    raise
        return rows

    def _read_scope(self, scope: str, count: int) -> list[Row]:
        """A batch of `scope`: its own pending entries while it has any, then new ones
        (without blocking)."""
        reread = self.routes.reread
        after = reread.get(scope)
        while after is not None:
            rows = self.store.read([scope], count, None, after=after)
            if not rows:
                del reread[scope]
                break
            after = reread[scope] = rows[-1][1]
            live = self._without_spent(scope, [row for row in rows if row[2]])
            if live:
                return live
            # a batch of entries deleted (or buried) meanwhile: read on, so that no new
            # entry of the scope comes before its own pending ones
        return self.store.read([scope], count, None)

    def _without_spent(self, scope: str, rows: list[Row]) -> list[Row]:
        """`rows` (own pending entries read again) less those `_bury_if_spent` buries."""
        if not rows:
            return rows
        counts = self.store.own_deliveries(scope, rows[0][1], rows[-1][1], len(rows))
        live: list[Row] = []
        for row in rows:
            n = counts.get(row[1], 0)
            if not self._bury_if_spent(scope, row[1], row[2], n):
                live.append(row)
                if n:
                    self._delivered[scope, row[1]] = n
        return live

    def drain(self) -> Outcome:
        """Apply the entries read ahead, reading nothing more (before the worker stops)."""
        total = Outcome()
        batches = self.batches
        while batches.holds():
            read_ahead, batches.read_ahead = batches.read_ahead, False
            try:
                total.add(self.read_once())
            finally:
                batches.read_ahead = read_ahead
        return total

    def decode(
        self, scope: str, entries: Sequence[tuple[str, dict[bytes, bytes]]], deliveries: int
    ) -> list[Entry]:
        """The entries that decode; bury the others."""
        good: list[Entry] = []
        decoded = self.batches.decoded
        for entry_id, fields in entries:
            entry = decoded.pop((scope, entry_id), None)
            delivered = (
                self._delivered.pop((scope, entry_id), deliveries)
                if self._delivered
                else deliveries
            )
            try:
                if entry is None:
                    entry = decode_work(entry_id, fields)
                elif isinstance(entry, EntryError):
                    raise entry
            except EntryError as e:
                self._bury(scope, entry_id, f"malformed: {e}", None, delivered, fields)
                continue
            good.append(entry)
        return good

    def _apply(
        self,
        scope: str,
        entries: Sequence[tuple[str, dict[bytes, bytes]]],
        deliveries: int,
        ahead: ReadAhead | None = None,
        loaded: Loaded | None = None,
    ) -> Outcome:
        started = time.perf_counter()
        good = self.decode(scope, entries, deliveries)
        if not good:
            return Outcome()
        return self.apply_counted(
            scope, good, started, self.applier.apply, scope, good, ahead, loaded
        )

    def apply_counted(
        self,
        scope: str,
        good: list[Entry],
        started: float,
        step: Callable[..., Outcome],
        *args: object,
    ) -> Outcome:
        """Run `step(*args)`, which applies `good`, and count and log it. If it raises (but
        for an unreachable server) log it and leave the entries pending."""
        try:
            outcome = step(*args)
        except Exception as e:
            if unreachable(e):
                raise  # the loop reconnects; the entries stay pending
            return self.leave_batch_pending(scope, good, e)
        self.counters.batches += 1
        self.counters.outcome.add(outcome, lists=False)  # counts: a long run's lists grow
        self.worklog.applied(scope, outcome, time.perf_counter() - started, len(good))
        return outcome

    def leave_batch_pending(self, scope: str, good: list[Entry], e: Exception) -> Outcome:
        """Log a batch that raised; its entries stay pending."""
        self.worklog.batch_raised(scope, [x.id for x in good], e)
        return Outcome(failed=[(x.id, "the batch raised") for x in good])

    def _bury(
        self,
        scope: str,
        entry_id: str,
        reason: str,
        job: str | None,
        deliveries: int,
        fields: dict[bytes, bytes],
        offered_to: str | None = None,
    ) -> None:
        result = self.store.bury(scope, entry_id, reason, job, deliveries, fields, offered_to)
        if result == "ok":
            self.counters.buried += 1
            # a malformed entry is buried without its job; the line names the job its data
            # names, for the person who reads it
            named = job or offered_to or job_mentioned(fields)
            self.worklog.buried(scope, entry_id, named, fields, reason)

    # -- claiming entries that another consumer left

    def claim_once(self) -> Outcome:
        """Take over the entries idle for SFC_AUTOCLAIM_IDLE and apply them one at a time;
        bury one delivered more than SFC_MAX_DELIVERIES times."""
        total = Outcome()
        for outcome in self._each_scope(self._claim_scope):
            total.add(outcome)
        return total

    def _each_scope(self, step: Callable[[str], T], whole: bool = False) -> list[T]:
        """`step` of each scope served now; one whose call fails so is parked (Routes.park)."""
        routes = self.routes
        out: list[T] = []
        was_parked = set(routes.parked)
        for scope in routes.serving(whole):
            if scope in routes.parked and scope not in was_parked:
                continue  # parked with its node by another of its scopes' call just now
            try:
                out.append(step(scope))
            except Exception as e:
                if not routes.park(scope, e):
                    raise
                continue
            routes.went_through(scope, whole)
        return out

    def _claim_scope(self, scope: str) -> Outcome:
        total = Outcome()
        self.store.probe(scope)  # first: nothing is claimed while its slot is being moved
        start = self._claim_start.get(scope, "0-0")
        next_start, claimed, deleted = self.store.autoclaim(
            scope, self.settings.autoclaim_idle, self.settings.read_count, start
        )
        self._claim_start[scope] = next_start
        self.counters.deleted_on_claim += len(deleted)
        self.worklog.claimed(scope, [i for i, _ in claimed], deleted)
        for entry_id, fields in claimed:
            self.counters.claimed += 1
            deliveries = self.store.deliveries(scope, entry_id)
            if deliveries == 0:
                continue  # acked meanwhile by the consumer that had it
            if self._bury_if_spent(scope, entry_id, fields, deliveries):
                continue
            total.add(self._apply(scope, [(entry_id, fields)], deliveries))
        return total

    def _bury_if_spent(
        self, scope: str, entry_id: str, fields: dict[bytes, bytes], deliveries: int
    ) -> bool:
        """Bury the entry if it was delivered more than SFC_MAX_DELIVERIES times (this one
        counted); whether it was."""
        if deliveries <= self.settings.max_deliveries:
            return False
        job = job_named(entry_id, fields)
        reason = (
            f"failed {deliveries - 1} deliveries (SFC_MAX_DELIVERIES is "
            f"{self.settings.max_deliveries})"
        )
        problem = None if job is None else self._unreadable(scope, job)
        if job is not None and problem is not None:
            # the likely cause, which the worker that raised only logged: every entry of
            # the job will fail so until the job is mended or cleared
            reason += (
                f"; the job's stored order or state cannot be read: {problem} ({way_out(job)})"
            )
        offered_to = None
        if problem is None and job is None:
            offered = self._offered_to(scope, entry_id, fields)
            if offered is not None:
                # an event: the job of the wait it was offered to, buried with it (the dead
                # entry's `job`, which `sfc work dead` and `sfc job show` read), whose due
                # index is left as it is
                offered_to, problem = offered
                reason += (
                    f"; it was offered to a wait of job {offered_to}, whose stored order or "
                    f"state cannot be read: {problem} ({way_out(offered_to)})"
                )
        self._bury(scope, entry_id, reason, job, deliveries, fields, offered_to)
        return True

    def _offered_to(
        self, scope: str, entry_id: str, fields: dict[bytes, bytes]
    ) -> tuple[str, str] | None:
        """For an event: (job, why) of the first wait it matches whose job cannot be read;
        else None, also when the look itself raises."""
        try:
            entry = decode_work(entry_id, fields)
        except EntryError:
            return None
        if job_of(entry) is not None:
            return None
        try:
            return self.applier.unreadable_wait(scope, entry)
        except Exception as e:
            if unreachable(e):
                raise  # the loop reconnects; the entry stays pending
            log.debug(
                "scope %s: the waits of event %s could not be read", scope, entry_id, exc_info=True
            )
            return None

    def _unreadable(self, scope: str, job: str) -> str | None:
        record = self.store.job(scope, job)
        return None if record is None else unreadable(record)

    # -- the sweep

    def sweep_once(self) -> int:
        """Sweep every scope: the heartbeat, ticks of the due jobs, an outage pass after a
        gap. Returns the ticks queued."""
        return sum(self._each_scope(self._sweep_scope, whole=True))

    def _sweep_scope(self, scope: str) -> int:
        kind, n = self.store.sweep(scope, self.settings.outage_threshold, self.settings.sweep_limit)
        if kind == "outage":
            self.counters.outages += 1
            self.worklog.outage(scope, n)
            n = self._outage_pass(scope)
        self.counters.ticks += n
        self.worklog.swept(scope, n, kind == "outage")
        return n

    def _outage_pass(self, scope: str) -> int:
        ticks = 0
        while True:
            kind, n = self.store.outage_chunk(scope, self.settings.sweep_limit)
            ticks += n
            if kind == "done":
                return ticks

    # -- trimming the equipment stream

    def trim_once(self) -> int:
        """Trim the equipment stream of every scope (docs/host.md, "The equipment stream")."""
        return sum(self._each_scope(self._trim_scope))

    def _trim_scope(self, scope: str) -> int:
        n = self.store.trim_equipment(scope, self.settings.equipment_retention)
        self.counters.trimmed += n
        return n

    # -- the loop

    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set: refresh, sweep, claim and trim as they come due, and
        read and apply between them."""
        now = self.clock()
        autoclaim_s = self.settings.autoclaim_idle / 1000
        trim_s = random.uniform(0.5, 1.0) * TRIM_INTERVAL_MS / 1000
        due = Timetable(refresh=now, sweep=now, claim=now + autoclaim_s, trim=now + trim_s)
        reconnect = Reconnect(f"worker {self.consumer}", log, self.clock, self._reconnected)
        moving: Moving | None = None  # a slot moving or moved, said at info; nothing failed
        while not stop.is_set():
            try:
                swept = self._round(due, stop)
            except Exception as e:
                # Nothing is lost either way: what was not committed stays pending.
                if not unreachable(e):
                    log.exception("worker %s: a round failed; retrying", self.consumer)
                    stop.wait(0.5)
                    continue
                moving = self._say_unreachable(e, reconnect, moving, due)
                self.store.wait_out(stop, reconnect.wait())  # a cluster's failover ends it
                continue
            reconnect.went_through()
            if moving is not None and swept:
                # over once a sweep went through: it answers a move for as long as the slot
                # is being moved (a read alone goes through in a reshard under way)
                self.routes.loop_move_over(moving)
                moving = None
        self._drain_on_stop()

    def _round(self, due: Timetable, stop: threading.Event) -> bool:
        """Run each step that is due, then read and apply a batch (blocking until the next
        step is due). Whether it swept."""
        s = self.settings
        now = self.clock()
        swept = False
        if now >= due.refresh:
            self.refresh_scopes()
            due.refresh = now + s.scope_refresh_interval / 1000
        if now >= due.sweep:
            self.sweep_once()
            swept = True
            due.sweep = now + random.uniform(0.8, 1.2) * s.sweep_interval / 1000
        if now >= due.claim:
            self.claim_once()
            due.claim = now + max(0.05, s.autoclaim_idle / 4000)
        if now >= due.trim:
            self.trim_once()
            due.trim = now + TRIM_INTERVAL_MS / 1000
        block = max(1, min(1000, int((due.next() - self.clock()) * 1000)))
        if self.scopes:
            self.read_once(block)
        else:
            stop.wait(block / 1000)
        return swept

    def _say_unreachable(
        self, error: Exception, reconnect: Reconnect, moving: Moving | None, due: Timetable
    ) -> Moving | None:
        """Say an unreachable `error` of a round: a move (Routes.loop_move) or an outage.
        Returns the loop's move, if any."""
        self.store.refresh_routes()  # a cluster's slot may have moved
        if not slot_moving(error):
            if not reconnect.down:
                moving = None  # a move after the outage is timed from then
            reconnect.unreachable(error)
            return moving
        reconnect.answered()
        # its sweep tries it next, before a claim or a read: a read counts a delivery of
        # each entry added meanwhile, whose commit answers the move in turn; the sweep
        # counts none, and answers a move for as long as the slot is being moved
        due.sweep = min(due.sweep, self.clock())
        return self.routes.loop_move(error, moving)

    def _reconnected(self) -> None:
        if self.metrics is not None:
            self.metrics.reconnect()

    def _drain_on_stop(self) -> None:
        waiting = self.batches.waiting()
        try:
            self.drain()
        except Exception as e:  # they stay pending: another worker claims them
            log.warning(
                "worker %s: %d entries read ahead stay pending: %s",
                self.consumer,
                waiting,
                e,
                extra={"reason": f"{type(e).__name__}: {e}"},
            )

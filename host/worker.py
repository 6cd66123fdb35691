"""The worker: read, claim, bury, sweep, outages, recovery, the scope registry and trimming.

One `Worker` is one consumer of the group `sfc-engine` on the work stream of every scope it
serves (docs/host.md, "The sweep, outages and recovery"). It owns no state of its own: every
decision is the server's (the functions of `sfc_1`) or the core's (through `Applier`), so any
number of workers on any number of machines can run side by side, and a killed one loses
nothing: what it had not committed stays pending and another worker claims it.

`run(stop)` loops until `stop` is set; tests call the parts (`read_once`, `claim_once`,
`sweep_once`, `refresh_scopes`, `trim_once`) one at a time to step a worker.
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
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from host.apply import Applier, Outcome, Round, Unreadable, unreadable, way_out
from host.entries import Entry, EntryError, decode_work, job_mentioned, job_named, job_of
from host.settings import Settings
from host.store import (
    Loaded,
    ReadAhead,
    Row,
    Store,
    a_move,
    moved_to,
    moving_reason,
    slot_of,
    unreachable,
    unreachable_reason,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from host.metrics import WorkerMetrics

log = logging.getLogger("sfc.host.worker")
LOAD_AHEAD_MAX = 20
"""The largest SFC_READ_COUNT whose batches are loaded ahead (ReadAhead): a small batch takes
well under a millisecond, so holding one more loaded batch costs little latency and saves
half its round trips; a large batch saves a small share of its time (no throughput gain was
measurable at 100), and an entry read ahead would wait up to a whole batch longer."""
TRIM_INTERVAL_MS = 60_000
"""How often a worker trims the equipment stream of each scope it serves."""
PARK_FIRST_S = 0.5
"""How long a worker of several scopes on a cluster first sets a scope aside whose node
cannot be reached (Worker.parked); each try that fails doubles it, up to PARK_MAX_S."""
PARK_MAX_S = 5.0
LEFT_KEPT = 10_000
"""Most entries a worker remembers it left pending (their processing raised), to tell its
own from another consumer's when it takes them over (Worker._left)."""
COLLECT_YOUNG_AFTER = 50_000
"""A worker process's garbage collector looks at its young objects after this many
allocations, not Python's 700 (tune_collector)."""


def tune_collector() -> None:
    """Set up the garbage collector of a process that runs a worker (after its imports).

    At Python's default (700) a pass ran every ~30 applied entries, while the batch's
    entries, records and commits were still alive: each pass walked them and moved them on
    to an older generation, whose passes walked them again. That cost some 7 µs of CPU per
    applied entry (docs/host.md, "The worker's garbage collector"). After 50,000 allocations
    most of a batch's objects have been freed by their reference counts, which free all but
    cycles at once, so waiting longer costs a few MB at most. What was made at start-up
    (modules, classes, settings) lives as long as the process: it is frozen out of every
    pass."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(COLLECT_YOUNG_AFTER, older, oldest)


def stuck_move(since: float, now: float, threshold_ms: int) -> bool:
    """Whether a slot that has answered MOVED (or ASK) since `since` has done so too long to
    be routine: for SFC_OUTAGE_THRESHOLD (`threshold_ms`, 30 s by default). A failover or a
    reshard moves a slot in a second or two (the slots read again show where it went);
    one that still points elsewhere after as long as counts as an outage (the scope's next
    sweep moves every open deadline) is stuck: a reshard left half way, or a cluster whose
    nodes disagree about the slot."""
    return (now - since) * 1000 >= threshold_ms


WAITS = "the scope's jobs wait meanwhile (nothing is applied for them)"
"""What a stuck move's warning says waits (`Worker._said_stuck`)."""


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
class Parked:
    """A scope set aside while its node cannot be reached (Worker.parked)."""

    since: float
    retry: float
    """When the worker tries it again (its clock: monotonic)."""
    backoff: float
    reason: str
    moved: bool = False
    """Set aside because its slot moved (a MOVED: routine, said at info), not because its
    node could not be reached."""
    probe: bool = False
    """Set aside for an ASK or a TRYAGAIN (a slot being moved): only its sweep tries it,
    which answers a move for as long as the move lasts (a read or a claim goes through in
    it, and counts a delivery). After a MOVED the slots, read again, show where it went:
    a read tries it too."""


@dataclass(slots=True)
class Moving:
    """A scope whose slot answers MOVED, ASK or TRYAGAIN (`a_move`), since when (the
    worker's clock), and whether that was said at warning for lasting too long
    (`stuck_move`). It lasts until a batch round trip of the scope goes through
    (`Worker._moved_over`), across the parks it takes."""

    since: float
    stuck: bool = False
    backoff: float = 0.0
    """The backoff of its last park: the next one goes on from it."""


@dataclass(slots=True)
class Flight:
    """A batch whose commits are written and whose replies are not read yet (Worker.overlap):
    each scope's round with its entries, the read ahead its write carried, and its jobs."""

    rounds: list[tuple[Round, list[Entry]]]
    ahead: ReadAhead | None
    jobs: set[tuple[str, str]]
    started: float


def _merged(
    ready: tuple[list[Row], dict[str, Loaded]] | None,
    rows: list[Row],
    loaded: dict[str, Loaded],
    job_of: Callable[[Row], str | None],
    stale: Set[tuple[str, str]] = frozenset(),
    stale_new: Set[tuple[str, str]] = frozenset(),
) -> tuple[list[Row], dict[str, Loaded]] | None:
    """Rows loaded ahead, then more rows with their newer load (None when there are no
    rows). Of the older load only the records of jobs with rows waiting are kept, and none
    of `stale` (jobs committed since: they load again); of the newer load none of
    `stale_new`. A job's newer record wins."""
    old_rows, old_loaded = ready if ready is not None else ([], {})
    if not old_rows and not rows:
        return None
    keep: dict[str, set[str]] = {}
    for row in old_rows:
        job = job_of(row)
        if job is not None and (row[0], job) not in stale:
            keep.setdefault(row[0], set()).add(job)
    merged: dict[str, Loaded] = {}
    for scope, (now, records, values) in old_loaded.items():
        jobs = keep.get(scope)
        if jobs:
            merged[scope] = (now, {j: r for j, r in records.items() if j in jobs}, values)
    for scope, (now, records, values) in loaded.items():
        if stale_new:
            records = {j: r for j, r in records.items() if (scope, j) not in stale_new}
        old = merged.get(scope)
        if old is not None:
            records = {**old[1], **records}
        merged[scope] = (now, records, values)
    return old_rows + rows, merged


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
    ) -> None:
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
        self.read_ahead = True
        """Whether the round trips of a batch read ahead (Store.ReadAhead)."""
        self._ahead: list[Row] = []
        """Entries read ahead and not loaded yet, pending for this consumer."""
        self._ready: tuple[list[Row], dict[str, Loaded]] | None = None
        """Entries read ahead and loaded (by scope), pending for this consumer: the next
        batch, read before the rows of `_ahead`."""
        self._decoded: dict[tuple[str, str], Entry | EntryError] = {}
        """Rows read ahead that were decoded to load their jobs, by (scope, entry id)."""
        self._delivered: dict[tuple[str, str], int] = {}
        """How often the server delivered the own pending entries read again after a park
        (`_unspent`), by (scope, entry id), until they are decoded (`_decode`): one buried
        then records the server's count, not 1."""
        self.overlap = overlap
        """Whether a batch loaded ahead is evaluated while the batch before it is in flight
        (its commits written, their replies not read yet): `read_once` then returns what
        landed, the batch before. `sfc serve` overlaps; a worker stepped by a test does not,
        unless it says so."""
        self._flight: Flight | None = None
        """The batch in flight, when overlapping."""
        self.parked: dict[str, Parked] = {}
        """Scopes whose node cannot be reached, set aside until their next try, while the
        worker serves its other scopes (on a cluster, a worker of several scopes only: a
        single server is one failure domain, and the loop's backoff waits it out)."""
        self._own: dict[str, str] = {}
        """Scopes whose own pending entries are read before new ones, by the id to read
        after: a scope that was parked may have entries this worker read and did not
        commit, which must be applied before the entries after them, and soon (not after
        SFC_AUTOCLAIM_IDLE)."""
        self._moves = store.moves
        """Store.moves when the parks last ended on a slot move."""
        self._not_taken: set[str] = set()
        """Scopes not taken up because their node could not be reached (logged once)."""
        self._moving: dict[str, Moving] = {}
        """Scopes whose slot answered MOVED, ASK or TRYAGAIN, parked or not taken up yet,
        until a batch round trip of the scope goes through (`_moved_over`) or it is taken
        up (`_said_moved`)."""
        self._said: BaseException | None = None
        """The move that `refresh_scopes` raised, said for each scope already."""
        self._raised_move: tuple[BaseException, str] | None = None
        """The move that `_parks` left to the loop (no other scope left to serve), and the
        scope whose call answered it: a TRYAGAIN names no slot (`_moved_scope`)."""
        self._left: dict[tuple[str, str], None] = {}
        """Entries this worker left pending because their processing raised, by (scope,
        entry id), the oldest first (at most LEFT_KEPT): when it takes them over, they are
        its own, not another consumer's."""

    # -- scopes and recovery

    def refresh_scopes(self) -> list[str]:
        """Take up scopes not seen before: create the group and repair every active job.

        Returns the scopes taken up now. The registry `sfc:scopes` is read when no scopes
        were given.
        """
        if self.fixed_scopes is not None:
            wanted = self.fixed_scopes
        else:
            try:
                wanted = self.store.scopes()
            except Exception as e:
                if not (self._isolating() and unreachable(e)):
                    raise
                # the registry's node is away: the scopes served go on, new ones wait
                log.debug("the scope registry cannot be read now: %s", unreachable_reason(e))
                return []
        for gone in [s for s in self._moving if s not in wanted and s not in self.scopes]:
            del self._moving[gone]  # left the registry before it was taken up
        self._not_taken.intersection_update(wanted)
        new = [s for s in wanted if s not in self.scopes]
        several = self.store.cluster is not None and len(wanted) > 1
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
                if a_move(e):
                    # routine: the node answered; the next refresh goes where it went
                    self.store.refresh_routes()
                    self._said_moved(scope, e)
                    continue
                self._moving.pop(scope, None)  # a move's timer does not count the outage
                if scope not in self._not_taken:
                    self._not_taken.add(scope)
                    log.warning(
                        "scope %s: not taken up now: its node cannot be reached (%s); "
                        "tried again at the next refresh",
                        scope,
                        unreachable_reason(e),
                        extra={"scope": scope, "reason": f"{type(e).__name__}: {e}"},
                    )
                continue
            self._not_taken.discard(scope)
            self._moving.pop(scope, None)
            self.scopes.append(scope)
            taken.append(scope)
            log.info("serving scope %s (consumer %s)", scope, self.consumer)
        if away is not None and not self.scopes:
            if a_move(away):
                self._said = away  # said for each scope: the loop does not say it again
            raise away  # none can be reached: the loop's backoff
        return taken

    # -- scopes whose node cannot be reached

    def _isolating(self) -> bool:
        """Whether a scope whose node cannot be reached is parked, the others served on: on
        a cluster, with several scopes (each may live on a node of its own)."""
        return self.store.cluster is not None and len(self.scopes) > 1

    def _serving(self, whole: bool = False) -> list[str]:
        """The scopes to serve now: all but the parked ones whose next try has not come, and
        those set aside for a slot being moved (ASK, TRYAGAIN: `Parked.probe`; one set
        aside for a MOVED is tried by a read too), but for a `whole` step (the sweep: it
        names a key never written, so it answers a move for as long as the slot is being
        moved (Store.sweep), and counts no delivery, where a read or a claim of its entries
        counts one each time, and SFC_MAX_DELIVERIES of them in a reshard under way buried
        them). A
        slot that another node serves now (a failover: Store.moves, whoever's read of the
        slots found it) ends every park at once, as it ends the loop's backoff
        (Store.wait_out). A parked node whose try has come is probed first (Store.answers,
        a PING with a short timeout): one that stopped answering costs a real call some
        10 s (the socket timeout and the client's retry), for each of its scopes, and the
        worker would serve nothing else meanwhile; it stays parked instead. (A scope set
        aside for a move is tried with its sweep, a real call: its node answered.)"""
        if not self.parked:
            return self.scopes
        now = self.clock()
        away = next((self.store.node_name(s) for s, p in self.parked.items() if not p.moved), None)
        self.store.refresh_routes(away)
        if self.store.moves != self._moves:
            self._moves = self.store.moves
            for p in self.parked.values():
                p.retry = now
        due = {s for s, p in self.parked.items() if p.retry <= now}
        nodes: dict[str, list[str]] = {}
        for scope in due:
            nodes.setdefault(self.store.node_name(scope), []).append(scope)
        for group in nodes.values():
            if all(self.parked[s].moved for s in group):
                # set aside for a slot that moved, by a node that answered: a real call
                # tries it, and says so at warning if its node is away now (`_parks`)
                continue
            if not self.store.answers(group[0]):
                for scope in group:
                    self._back_off(self.parked[scope], now)
                due -= set(group)
        if not whole:
            due = {s for s in due if not self.parked[s].probe}
        return [s for s in self.scopes if s not in self.parked or s in due]

    @staticmethod
    def _back_off(parked: Parked, now: float) -> None:
        parked.backoff = min(PARK_MAX_S, parked.backoff * 2)
        parked.retry = now + parked.backoff

    def _parks(self, scope: str, error: Exception) -> bool:
        """Park `scope`, whose call raised `error`, with every scope of its node, and say
        True; False when the caller raises it instead: not an unreachable server, or a
        worker that does not isolate its scopes, or no scope of another node left to serve
        (then the loop backs off, as for a single server). What a scope's batch read and
        did not commit stays pending for this worker, and is read again first when the
        scope is served again.

        A slot that moved or is moving (MOVED, ASK: a failover, a reshard; TRYAGAIN: a
        reshard under way) parks its scope alone, until its sweep goes through (`_served`:
        it answers a move for as long as the slot is being moved; after a MOVED, until a
        read goes through): its node answered, and the other scopes there find out for
        themselves. That is routine, said at info and not counted as a park; the scope's
        node away later is said at warning, and a scope parked for an outage whose node
        answers a move is parked for the move from then on."""
        if not (unreachable(error) and self._isolating()):
            return False
        moved = a_move(error)
        where = moved_to(error)
        probe = moved and (where is None or where.answer == "ASK")  # a slot being moved
        if moved:
            self.store.refresh_routes()  # a move it shows ends the park at once (_serving)
            group = [scope]
        else:
            node = self.store.node_name(scope)
            group = [s for s in self.scopes if s == scope or self.store.node_name(s) == node]
        for s in group:
            # what each read before may be pending: it is read first once served again,
            # also when the loop backs off instead
            self._own[s] = "0"
        if all(s in self.parked or s in group for s in self.scopes):
            if moved:
                self._raised_move = (error, scope)  # the loop says whose it is
            return False
        now = self.clock()
        reason = unreachable_reason(error, slot_of(scope))
        for s in group:
            parked = self.parked.get(s)
            if parked is None:
                first = PARK_FIRST_S
                if moved and s in self._moving:  # the same move: its backoff goes on
                    first = min(PARK_MAX_S, max(PARK_FIRST_S, self._moving[s].backoff * 2))
                self.parked[s] = Parked(now, now + first, first, reason, moved, probe)
            else:
                self._back_off(parked, now)
                parked.probe = probe
                if parked.moved == moved:
                    if not moved:
                        continue  # away, said already
                else:  # it moved and is away now, or was away and its node answers a move
                    parked.moved, parked.reason = moved, reason
            if moved:
                self._said_moved(s, error)
            else:
                self._moving.pop(s, None)
                self._said_parked(s, error, reason)
        return True

    def _said_moved(self, scope: str, error: Exception) -> None:
        """A call of `scope` answered MOVED, ASK or TRYAGAIN: routine, said once at info, by
        a parked scope and by one not taken up yet alike; said once at warning when it has
        lasted SFC_OUTAGE_THRESHOLD (`stuck_move`)."""
        now = self.clock()
        moving = self._moving.get(scope)
        extra = {"scope": scope, "reason": f"{type(error).__name__}: {error}"}
        if moving is None:
            self._moving[scope] = Moving(now)
            log.info("scope %s: %s", scope, moving_reason(error, slot_of(scope)), extra=extra)
        elif not moving.stuck and stuck_move(moving.since, now, self.settings.outage_threshold):
            moving.stuck = True
            lasted = now - moving.since
            self._said_stuck(f"scope {scope}", error, slot_of(scope), lasted, WAITS, scope)

    def _said_stuck(
        self,
        who: str,
        error: Exception,
        slot: int | None,
        lasted: float,
        waits: str,
        scope: str | None = None,
    ) -> None:
        """The warning of a slot that has answered MOVED, ASK or TRYAGAIN too long
        (`stuck_move`), with the likely cause of each, and what waits meanwhile."""
        where = moved_to(error)
        if where is not None:
            slot = where.slot
            answered = f"{where.answer} (to {where.node})"
        else:
            answered = "TRYAGAIN"
        if where is None or where.answer == "ASK":
            cause = (
                "a reshard stuck half way (the slot left migrating on one node and importing on "
                "another), or a misconfigured cluster, most likely"
            )
        else:
            cause = (
                "its nodes disagree about who serves it (a failover or a reshard not finished, "
                "or a misconfigured cluster), most likely"
            )
        since = datetime.fromtimestamp(time.time() - lasted, UTC)
        log.warning(
            "%s: %s has answered %s for %.0f s, since %s: %s (`CLUSTER SLOTS` and "
            "`CLUSTER NODES` on its nodes show who serves it); %s; tried again with backoff",
            who,
            "a slot" if slot is None else f"slot {slot}",
            answered,
            lasted,
            since.strftime("%Y-%m-%d %H:%M:%S UTC"),
            cause,
            waits,
            extra={"scope": scope, "reason": f"{type(error).__name__}: {error}"},
        )

    def _moved_scope(self, error: Exception) -> tuple[str, str | None, int | None]:
        """Who says that the slot of a move that escaped to the loop is stuck: the worker,
        and the scope it serves in that slot, if any (else None: sfc:scopes), and the slot
        (None when unknown: a TRYAGAIN names none; a worker of several scopes knows whose
        call it was when its last scope served answered it, `_raised_move`)."""
        where = moved_to(error)
        raised = self._raised_move
        if where is not None:
            slot: int | None = where.slot
            scope = next((x for x in self.scopes if slot_of(x) == slot), None)
        elif len(self.scopes) == 1:  # a TRYAGAIN: a call of several keys of a scope
            scope = self.scopes[0]
            slot = slot_of(scope)
        elif raised is not None and raised[0] is error:
            scope = raised[1]
            slot = slot_of(scope)
        else:
            scope = slot = None
        who = f"worker {self.consumer}"
        return (who if scope is None else f"{who}, scope {scope}"), scope, slot

    def _said_parked(self, scope: str, error: Exception, reason: str) -> None:
        extra = {"scope": scope, "reason": f"{type(error).__name__}: {error}"}
        log.warning(
            "scope %s: its node cannot be reached (%s); serving the other scopes, and trying "
            "it again with backoff",
            scope,
            reason,
            extra=extra,
        )
        if self.metrics is not None:
            self.metrics.parked(scope)

    def _served(self, scope: str, whole: bool = False) -> None:
        """A call for `scope` went through: if it was parked, it is served again. One set
        aside for a slot being moved (ASK, TRYAGAIN: `Parked.probe`) only by a `whole` call
        (its sweep, which names a key never written and so answers a move for as long as
        the slot is being moved, or a batch's commit): in a reshard under way a read of its
        work stream alone goes through, and the commit after it answered TRYAGAIN, so
        ending the park at the read parked the scope again at every batch, each said twice
        (and the move's timer, started again each time, never came to its warning)."""
        parked = self.parked.get(scope)
        if parked is None or (parked.probe and not whole):
            return
        del self.parked[scope]
        if parked.moved:
            # its entries are read again; the move is over once a batch round trip of the
            # scope goes through (`_moved_over`), else the next park goes on from here
            moving = self._moving.get(scope)
            if moving is not None:
                moving.backoff = parked.backoff
            return
        self._moving.pop(scope, None)
        away = self.clock() - parked.since
        log.warning(
            "scope %s: served again after %.1f s",
            scope,
            away,
            extra={"scope": scope, "reason": f"its node could not be reached for {away:.1f} s"},
        )

    def _moved_over(self, scope: str) -> None:
        """A batch round trip of `scope` went through (a read with nothing to apply, or a
        commit): a move of its slot is over, said at info. Not at its sweep alone, which
        ends its park: in a reshard under way a job's hash may be on one node and the
        indexes on the other, and the commit after the sweep answered TRYAGAIN."""
        moving = self._moving.pop(scope, None)
        if moving is None:
            return
        lasted = self.clock() - moving.since
        log.info(
            "scope %s: served again after %.1f s",
            scope,
            lasted,
            extra={"scope": scope, "reason": f"its slot moved {lasted:.1f} s ago"},
        )

    def recover(self, scope: str) -> int:
        """Set the indexes of every active job of `scope` from its hash (`repair`).

        It resends nothing: the sweep owns every deadline. Returns the jobs repaired.
        """
        return self.applier.repair_all(scope)

    # -- reading and applying

    def read_once(self, block_ms: int | None = None) -> Outcome:
        """Apply one batch: the entries read ahead, else new entries of every scope (one
        batch each, blocking up to `block_ms`).

        Under load a batch costs one round trip: its commit stream loads the rows read
        ahead by the previous one, and reads the batch after them (ReadAhead)."""
        if self._flight is not None:
            shared = self._shared(self._flight)
            if shared is None or shared:
                # nothing to evaluate meanwhile, or a job of the next batch is in flight:
                # the batch in flight lands first (and its jobs load again)
                return self._land()
        total = Outcome()
        if not self.scopes:
            return total
        loaded: dict[str, Loaded] = {}
        from_ready = self._ready is not None
        if self._ready is not None:
            (rows, loaded), self._ready = self._ready, None
            if self._overlapping():
                # loaded ahead by two round trips at once: one batch now, the rest next
                rows, rest = self._split(rows)
                if rest:
                    self._ready = (rest, loaded)
        elif self._overlapping():  # it may have read two batches ahead: one now
            rows, self._ahead = self._split(self._ahead)
        else:
            rows, self._ahead = self._ahead, []
        if not rows:
            rows = self._read(block_ms)
        by_scope: dict[str, list[tuple[str, dict[bytes, bytes]]]] = {}
        for scope, entry_id, fields in rows:
            by_scope.setdefault(scope, []).append((entry_id, fields))
        # a full read (COUNT is per stream): more entries wait, most likely, so this batch
        # reads ahead (after a short one, the next read waits for more instead, so that
        # batches do not shrink); the rows read ahead already load after its commits
        full = any(len(e) >= self.settings.read_count for e in by_scope.values())
        if from_ready and self._overlapping():
            return self._fly(rows, by_scope, loaded, full)
        ahead = None
        if self.read_ahead and (full or self._ahead) and self.store.can_read_ahead(self.scopes):
            count = self._ahead_count() if full else 0
            loads = self.settings.read_count <= LOAD_AHEAD_MAX
            job_of = self._row_job if loads else None
            ahead = ReadAhead(tuple(self.scopes), count, self._ahead, job_of)
        last = next(reversed(by_scope), None)
        try:
            for scope, entries in by_scope.items():
                # the last scope's round trips read ahead (for every scope), after its own
                try:
                    total.add(
                        self._apply(
                            scope, entries, 1, ahead if scope == last else None, loaded.get(scope)
                        )
                    )
                    self._served(scope, whole=True)  # its batch is committed
                    if self._moving:
                        self._moved_over(scope)
                except Exception as e:
                    if not self._parks(scope, e):
                        if self._isolating() and unreachable(e):
                            # the loop backs off: every scope's entries of this batch that
                            # are not committed are read first when it is served again
                            self._own.update(dict.fromkeys(by_scope, "0"))
                        raise
        finally:
            if ahead is not None and ahead.ready:
                self._ready = (ahead.ready, ahead.loaded)
            if self._delivered:
                self._forget_deliveries(rows)  # those not decoded were not applied
        return total

    def _forget_deliveries(self, rows: list[Row]) -> None:
        """Drop the delivery counts (`_delivered`) of `rows`, read and not applied (a later
        scope raised, or theirs was parked): they are read again (`_own`), with new counts,
        or claimed, whose count then is the server's; a count kept would be used for that
        later delivery, and the dead entry said fewer deliveries than it had."""
        for row in rows:
            self._delivered.pop((row[0], row[1]), None)

    def _read(self, block_ms: int | None) -> list[Row]:
        """New entries of the scopes served. On a cluster, a worker of several scopes reads
        each on its own (Store.read does so too, in one call), so that a scope whose node
        cannot be reached is parked and the others are read; a scope's own pending entries
        (`_own`) are read before its new ones."""
        count = self.settings.read_count
        if not self._isolating():
            return self.store.read(self.scopes, count, block_ms)
        rows: list[Row] = []
        for scope in self._serving():
            try:
                got = self._read_scope(scope, count)
            except Exception as e:
                if not self._parks(scope, e):
                    # not returned, so not applied: read again first (they are pending for
                    # this worker, and come before the scope's new entries)
                    self._own.update(dict.fromkeys({row[0] for row in rows}, "0"))
                    self._forget_deliveries(rows)
                    raise
                continue
            self._served(scope)
            if not got and self._moving and scope not in self._own:
                self._moved_over(scope)  # nothing to apply: its round trip went through
            rows += got
        # not a scope with own entries left: its new ones would come before them
        here = [s for s in self.scopes if s not in self.parked and s not in self._own]
        if not rows and block_ms and here:
            scope = self.store.next_turn(here)
            try:
                rows = self.store.read([scope], count, self.store.cluster_block(block_ms))
            except Exception as e:
                if not self._parks(scope, e):
                    raise
        return rows

    def _read_scope(self, scope: str, count: int) -> list[Row]:
        """A batch of `scope`: its own pending entries first, while it has any, then new
        ones (without blocking). An own entry deleted meanwhile (no fields) is left to the
        claim, which reports it; one delivered more than SFC_MAX_DELIVERIES times is
        buried, as the claim buries it (`_spent`)."""
        after = self._own.get(scope)
        while after is not None:
            rows = self.store.read([scope], count, None, after=after)
            if not rows:
                del self._own[scope]
                break
            after = self._own[scope] = rows[-1][1]
            live = self._unspent(scope, [row for row in rows if row[2]])
            if live:
                return live
            # a batch of entries deleted (or buried) meanwhile: read on, so that no new
            # entry of the scope comes before its own pending ones
        return self.store.read([scope], count, None)

    def _unspent(self, scope: str, rows: list[Row]) -> list[Row]:
        """`rows`, own pending entries read again, but for those `_spent` buries; the others'
        delivery counts are kept for their decoding (`_delivered`)."""
        if not rows:
            return rows
        counts = self.store.own_deliveries(scope, rows[0][1], rows[-1][1], len(rows))
        live: list[Row] = []
        for row in rows:
            n = counts.get(row[1], 0)
            if not self._spent(scope, row[1], row[2], n):
                live.append(row)
                if n:
                    self._delivered[scope, row[1]] = n
        return live

    def _overlapping(self) -> bool:
        """Whether batches overlap now (`overlap`): small ones, read and loaded ahead. A
        large batch's commits go out in chunks as it is evaluated already (Applier), and
        overlapping batches of 100 gained nothing, or lost (docs/host.md)."""
        return (
            self.overlap
            and self.read_ahead
            and self.settings.read_count <= LOAD_AHEAD_MAX
            and self.store.can_read_ahead(self.scopes)
        )

    def _split(self, rows: list[Row]) -> tuple[list[Row], list[Row]]:
        """One batch of `rows` (up to SFC_READ_COUNT of each scope, in order) and the rest."""
        per: dict[str, int] = {}
        limit = self.settings.read_count
        batch: list[Row] = []
        rest: list[Row] = []
        for row in rows:
            n = per[row[0]] = per.get(row[0], 0) + 1
            (batch if n <= limit else rest).append(row)
        return batch, rest

    def _ahead_count(self) -> int:
        """How many entries a round trip reads ahead per stream: one batch, or, for a worker
        that overlaps, two while fewer than two batches wait read or loaded (so that the
        batch after the one in flight is loaded when the one in flight is written)."""
        count = self.settings.read_count
        if not self._overlapping():
            return count
        waiting = len(self._ahead) + (0 if self._ready is None else len(self._ready[0]))
        return count if waiting >= 2 * count * len(self.scopes) else 2 * count

    def _shared(self, flight: Flight) -> set[tuple[str, str]] | None:
        """The jobs of the next batch loaded ahead that are in flight (loaded before the
        flight's commits: stale); None when there is no such batch to evaluate meanwhile."""
        if self._ready is None or not self._overlapping():
            return None
        shared: set[tuple[str, str]] = set()
        for row in self._split(self._ready[0])[0]:
            job = self._job_read(row)
            if job is not None and (row[0], job) in flight.jobs:
                shared.add((row[0], job))
        return shared

    def _job_read(self, row: Row) -> str | None:
        """The job of a row read ahead and decoded (`_row_job`); None for an event."""
        entry = self._decoded.get((row[0], row[1]))
        return job_of(entry) if isinstance(entry, Entry) else None

    def _fly(
        self,
        rows: list[Row],
        by_scope: dict[str, list[tuple[str, dict[bytes, bytes]]]],
        loaded: dict[str, Loaded],
        full: bool,
    ) -> Outcome:
        """Evaluate a batch loaded ahead while the one before is in flight, then land that
        one (its replies carry the next batch and the rows after it), then write this one's
        commits with the read ahead that follows, and leave them in flight."""
        started = time.perf_counter()
        prepared: list[tuple[Round, list[Entry]]] = []
        total = Outcome()
        for scope, entries in by_scope.items():
            good = self._decode(scope, entries, 1)
            if not good:
                continue
            try:
                prepared.append((self.applier.prepare(scope, good, loaded.get(scope)), good))
            except Exception as e:
                if unreachable(e):
                    raise  # the loop reconnects; the entries stay pending
                total.add(self._raised(scope, good, e))
        try:
            total.add(self._land())
        except BaseException:
            # this batch goes back before the rows after it, to be evaluated again (its
            # jobs load again): the server's outage must not reorder a job's entries
            for r, good in prepared:
                for x in good:
                    self._decoded[r.scope, x.id] = x
            back = {(r.scope, job) for r, _ in prepared for job in r.jobs}
            mine = [row for row in rows if (row[0], row[1]) in self._decoded]
            after, loads = self._ready if self._ready is not None else ([], {})
            self._ready = _merged((mine, {}), after, loads, self._job_read, set(), back)
            raise
        if not prepared:
            return total
        ahead = None
        if full or self._ahead:
            count = self._ahead_count() if full else 0
            ahead = ReadAhead(tuple(self.scopes), count, self._ahead, self._row_job)
        flight = self._flight = Flight([], ahead, set(), started)
        last = len(prepared) - 1
        for i, (r, good) in enumerate(prepared):
            # the last round's write reads ahead (for every scope), after its commits
            try:
                self.applier.send(r, ahead if i == last else None)
            except Exception as e:
                if unreachable(e):
                    raise  # the loop reconnects; the entries stay pending
                total.add(self._raised(r.scope, good, e))
                continue
            flight.rounds.append((r, good))
            flight.jobs.update((r.scope, job) for job in r.jobs)
        if not flight.rounds:
            self._flight = None
        return total

    def _land(self) -> Outcome:
        """Read the replies of the batch in flight, and finish it (Applier.land); the rows
        its read ahead loaded make the next batch."""
        flight, self._flight = self._flight, None
        total = Outcome()
        if flight is None:
            return total
        try:
            for i, (r, good) in enumerate(flight.rounds):
                try:
                    total.add(self._guarded(r.scope, good, flight.started, self.applier.land, r))
                except BaseException:
                    for later, _ in flight.rounds[i + 1 :]:
                        if later.stream is not None:
                            later.stream.close()  # their commits land; their replies go
                    raise
        finally:
            # loads taken before the flight's commits are stale for its jobs, and so are,
            # for the jobs of its other scopes, the read ahead's (another connection)
            ahead = flight.ahead
            fresh = flight.rounds[-1][0].scope if flight.rounds else None
            rows, loads = (ahead.ready, ahead.loaded) if ahead is not None else ([], {})
            others = {(s, j) for s, j in flight.jobs if s != fresh}
            self._ready = _merged(self._ready, rows, loads, self._job_read, flight.jobs, others)
        return total

    def drain(self) -> Outcome:
        """Apply the entries read ahead, reading nothing more: before the worker stops, so
        that they do not wait for another worker to claim them."""
        total = Outcome()
        while self._ready is not None or self._ahead or self._flight is not None:
            read_ahead, self.read_ahead = self.read_ahead, False
            try:
                total.add(self.read_once())
            finally:
                self.read_ahead = read_ahead
        return total

    def _row_job(self, row: Row) -> str | None:
        """The job of a row read ahead, to load it (ReadAhead.job_of); its decoding is kept
        for when it is applied."""
        scope, entry_id, fields = row
        try:
            entry: Entry | EntryError = decode_work(entry_id, fields)
        except EntryError as e:
            entry = e
        self._decoded[scope, entry_id] = entry
        return None if isinstance(entry, EntryError) else job_of(entry)

    def _decode(
        self, scope: str, entries: Sequence[tuple[str, dict[bytes, bytes]]], deliveries: int
    ) -> list[Entry]:
        """The entries that decode; one that does not is buried, with `deliveries` (or the
        server's count of an own entry read again after a park: `_delivered`)."""
        good: list[Entry] = []
        for entry_id, fields in entries:
            entry = self._decoded.pop((scope, entry_id), None)
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
        good = self._decode(scope, entries, deliveries)
        if not good:
            return Outcome()
        return self._guarded(scope, good, started, self.applier.apply, scope, good, ahead, loaded)

    def _guarded(
        self,
        scope: str,
        good: list[Entry],
        started: float,
        step: Callable[..., Outcome],
        *args: object,
    ) -> Outcome:
        """`step(*args)`, which applies `good`, counted and reported; one that raises (but
        for an unreachable server) is logged, and its entries stay pending."""
        try:
            outcome = step(*args)
        except Exception as e:
            if unreachable(e):
                raise  # the loop reconnects; the entries stay pending
            return self._raised(scope, good, e)
        self.counters.batches += 1
        self.counters.outcome.add(outcome, lists=False)  # counts: a long run's lists grow
        self._report(scope, outcome, time.perf_counter() - started, len(good))
        return outcome

    def _raised(self, scope: str, good: list[Entry], e: Exception) -> Outcome:
        # A bug, or a stored state that does not decode: nothing was committed that the
        # commit did not ack, so the entries stay pending and are claimed later. (Commits
        # that had gone out in an earlier chunk landed, and acked theirs.)
        log.exception(
            "scope %s: a batch of %d entries raised; those it had not committed stay pending",
            scope,
            len(good),
            extra={"scope": scope, "reason": f"{type(e).__name__}: {e}"},
        )
        if self.metrics is not None:
            self.metrics.failed(scope, len(good))
        self._leave(scope, [x.id for x in good])
        return Outcome(failed=[(x.id, "the batch raised") for x in good])

    def _leave(self, scope: str, ids: Sequence[str]) -> None:
        """Remember entries left pending (`_left`)."""
        left = self._left
        for i in ids:
            left[scope, i] = None
        while len(left) > LEFT_KEPT:
            del left[next(iter(left))]

    def _report(self, scope: str, outcome: Outcome, seconds: float, entries: int) -> None:
        """The logs and metrics of an applied batch: a job whose stored order or state
        cannot be read at error (one line, with the way out), other entries that stay
        pending and faults at warning, every other job end at debug."""
        said: set[str] = set()
        for u in outcome.unreadable:
            self._cannot_read(scope, u)
            said.update(u.entries)
        if outcome.failed:
            self._leave(scope, [i for i, _ in outcome.failed])
        for entry_id, why in outcome.failed:
            if entry_id in said:
                continue
            log.warning(
                "scope %s: entry %s stays pending: %s",
                scope,
                entry_id,
                why,
                extra={"scope": scope, "entry": entry_id, "reason": why},
            )
        if outcome.given_up:
            self._given_up(scope, outcome.given_up)
        for end in outcome.ends:
            level = logging.DEBUG if end.ended_by == "completed" else logging.WARNING
            log.log(
                level,
                "scope %s: job %s ended (%s) at entry %s (%s): %s",
                scope,
                end.job,
                end.ended_by,
                end.entry,
                end.kind,
                end.reason,
                extra={
                    "scope": scope,
                    "job": end.job,
                    "entry": end.entry,
                    "kind": end.kind,
                    "disposition": end.disposition,
                    "ended_by": end.ended_by,
                    "reason": end.reason,
                },
            )
        if self.metrics is not None:
            self.metrics.batch(scope, outcome, seconds, entries)

    def _cannot_read(self, scope: str, u: Unreadable) -> None:
        """One line, with no traceback, at each delivery of the entries of a job whose
        stored order or state cannot be read: not a bug of the engine, but a job no worker
        can evaluate until a person mends or clears it; the line says so from the first
        delivery (the dead entry, some SFC_MAX_DELIVERIES claims later, says it again)."""
        n = len(u.entries)
        ids = ", ".join(u.entries[:10]) + (f" and {n - 10} more" if n > 10 else "")
        log.error(
            "scope %s: job %s cannot be evaluated: its stored order or state cannot be read "
            "(%s); its %s %s %s pending and %s to the dead stream after SFC_MAX_DELIVERIES "
            "(%d) deliveries; %s",
            scope,
            u.job,
            u.why,
            "entry" if n == 1 else f"{n} entries",
            ids,
            "stays" if n == 1 else "stay",
            "goes" if n == 1 else "go",
            self.settings.max_deliveries,
            way_out(u.job),
            extra={
                "scope": scope,
                "job": u.job,
                "entry": u.entries[0],
                "kind": u.kind,
                "reason": f"its stored order or state cannot be read: {u.why}",
            },
        )

    def _given_up(self, scope: str, given_up: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        """One line for a batch's commits (and acks) that returned gone: which entries of
        which jobs this worker gave up, and why (the 3 a.m. question: its work was done
        twice, or not at all? Neither: the consumer that took them applies them, or buries
        them at their last delivery)."""
        by_job: dict[str, list[str]] = {}
        for job, ids in given_up:
            by_job.setdefault(job, []).extend(ids)
        said = [
            f"{f'job {job}' if job else 'events no job took'}: {', '.join(ids[:10])}"
            + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
            for job, ids in list(by_job.items())[:10]
        ]
        if len(by_job) > 10:
            said.append(f"and {len(by_job) - 10} more jobs")
        entries = sum(len(ids) for ids in by_job.values())
        first_job, first_ids = next(iter(by_job.items()))
        log.warning(
            "scope %s: gave up %d %s that another consumer took over (this worker held them "
            "past SFC_AUTOCLAIM_IDLE, %d ms: slow or stalled); that consumer applies them "
            "(or, at their last delivery, moves them to the dead stream: `sfc work dead`), "
            "and this worker's result was dropped: %s",
            scope,
            entries,
            "entry" if entries == 1 else "entries",
            self.settings.autoclaim_idle,
            "; ".join(said),
            extra={
                "scope": scope,
                "job": first_job or None,
                "entry": first_ids[0],
                "disposition": "gone",
                "reason": "taken over by another consumer",
            },
        )

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
            kind = fields.get(b"kind", b"").decode(errors="replace")[:64]
            # a malformed entry is buried without its job; the line names the job its data
            # names, for the person who reads it
            named = job or offered_to or job_mentioned(fields)
            log.warning(
                "scope %s: entry %s%s is dead: %s",
                scope,
                entry_id,
                "" if named is None else f" of job {named}",
                reason,
                extra={
                    "scope": scope,
                    "entry": entry_id,
                    "job": named,
                    "kind": kind,
                    "disposition": "dead",
                    "reason": reason,
                },
            )
            if self.metrics is not None:
                self.metrics.dead(scope, reason)

    # -- claiming entries that another consumer left

    def claim_once(self) -> Outcome:
        """XAUTOCLAIM entries idle for `autoclaim_idle` in every scope, and process them one
        at a time, so that an entry that crashes its process does not bury a batch. An entry
        delivered more than `max_deliveries` times is buried instead."""
        total = Outcome()
        for outcome in self._each_scope(self._claim_scope):
            total.add(outcome)
        return total

    def _each_scope(self, step: Callable[[str], T], whole: bool = False) -> list[T]:
        """`step` of each scope served now: a scope whose node cannot be reached is parked
        (`_parks`) and the others go on; one that answers is served again (`_served`; one
        set aside for a move when the step is `whole`: the sweep, which answers a move for
        as long as the slot is being moved, Store.sweep)."""
        out: list[T] = []
        for scope in self._serving(whole):
            try:
                out.append(step(scope))
            except Exception as e:
                if not self._parks(scope, e):
                    raise
                continue
            self._served(scope, whole)
        return out

    def _claim_scope(self, scope: str) -> Outcome:
        """The claim of one scope (claim_once). On a cluster it tries the scope first with a
        call of all its keys (Store.probe), which counts no delivery, and claims nothing
        while its slot is being moved: XAUTOCLAIM, one key, goes through there, and each
        worker of the scope took the entries another had set aside, its commit answered
        TRYAGAIN, and the first delivery after the move buried them (SFC_MAX_DELIVERIES).
        (Whether each commit that answers a move gives its delivery back, XCLAIM with
        RETRYCOUNT, was not true of a worker killed before it did.)"""
        total = Outcome()
        self.store.probe(scope)
        start = self._claim_start.get(scope, "0-0")
        next_start, claimed, deleted = self.store.autoclaim(
            scope, self.settings.autoclaim_idle, self.settings.read_count, start
        )
        self._claim_start[scope] = next_start
        if deleted:
            self.counters.deleted_on_claim += len(deleted)
            log.warning(
                "scope %s: XAUTOCLAIM reported deleted entries %s",
                scope,
                deleted,
                extra={"scope": scope, "reason": "deleted"},
            )
        if self.metrics is not None:
            self.metrics.claimed(scope, len(claimed), len(deleted))
        if claimed:
            self._took_over(scope, [i for i, _ in claimed])
        for entry_id, fields in claimed:
            self.counters.claimed += 1
            deliveries = self.store.deliveries(scope, entry_id)
            if deliveries == 0:
                continue  # acked meanwhile by the consumer that had it
            if self._spent(scope, entry_id, fields, deliveries):
                continue
            total.add(self._apply(scope, [(entry_id, fields)], deliveries))
        return total

    def _spent(
        self, scope: str, entry_id: str, fields: dict[bytes, bytes], deliveries: int
    ) -> bool:
        """Whether the entry was delivered more than SFC_MAX_DELIVERIES times (this delivery
        counted): then it is buried, with why, so that an entry that makes the worker fail
        each time cannot block its job for ever. The claim asks, and so does the re-read of
        a worker's own pending entries after a park (`_read_scope`): each such read counts
        a delivery on the server, as a claim does."""
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
        """For an event: (job, why) of the first wait it matches whose job cannot be read
        (`Applier.unreadable_wait`), which failed it at every delivery; else None. The
        burial does not hang on it: a look that raises (the offer's own bug, which failed
        the event each time) buries the event without it."""
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

    def _took_over(self, scope: str, ids: Sequence[str]) -> None:
        """The line of entries taken over with XAUTOCLAIM: another consumer left them (it
        died, or hangs: the 3 a.m. question), or this worker did, whose processing raised
        (`_left`: a worker that is a scope's only consumer takes its own over)."""
        own = [i for i in ids if (scope, i) in self._left]
        for i in own:
            del self._left[scope, i]
        others = len(ids) - len(own)
        mine = "its own entries delivered before (their processing raised)"
        theirs = "another consumer (stopped, killed or stalled)"
        if not own:
            whose = f" by {theirs}"
        elif not others:
            whose = f", {mine}"
        else:
            whose = f", {others} by {theirs} and {len(own)} of {mine}"
        log.warning(
            "scope %s: took over %d %s left pending for over %d ms%s: %s",
            scope,
            len(ids),
            "entry" if len(ids) == 1 else "entries",
            self.settings.autoclaim_idle,
            whose,
            ", ".join(ids[:10]) + (" ..." if len(ids) > 10 else ""),
            extra={"scope": scope, "reason": "autoclaim", "entry": ids[0]},
        )

    def _unreadable(self, scope: str, job: str) -> str | None:
        """Why the stored order or state of `job` cannot be read, or None."""
        record = self.store.job(scope, job)
        return None if record is None else unreadable(record)

    # -- the sweep

    def sweep_once(self) -> int:
        """The sweep of every scope: the heartbeat, then ticks of the due jobs; an outage
        pass when the heartbeat shows a gap. Returns the ticks queued."""
        return sum(self._each_scope(self._sweep_scope, whole=True))

    def _sweep_scope(self, scope: str) -> int:
        """The sweep of one scope (sweep_once)."""
        kind, n = self.store.sweep(scope, self.settings.outage_threshold, self.settings.sweep_limit)
        if kind == "outage":
            self.counters.outages += 1
            log.warning(
                "scope %s: outage of %d ms; moving every open deadline",
                scope,
                n,
                extra={"scope": scope, "reason": f"outage of {n} ms"},
            )
            n = self._outage_pass(scope)
        self.counters.ticks += n
        if self.metrics is not None:
            self.metrics.sweep(scope, n, kind == "outage")
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
        """The trim of one scope (trim_once)."""
        n = self.store.trim_equipment(scope, self.settings.equipment_retention)
        self.counters.trimmed += n
        return n

    # -- the loop

    def _waits_move(self, error: Exception, moving: Moving | None) -> Moving:
        """The loop's move (`a_move`): said at info when it starts, once at warning when it
        has lasted SFC_OUTAGE_THRESHOLD (`stuck_move`). A move that `refresh_scopes` said for
        each scope it could not take up is not said again (`_said`)."""
        said, self._said = self._said is error, None
        now, threshold = self.clock(), self.settings.outage_threshold
        if moving is None:
            moving = Moving(now)
            if not said:  # (nor its end: each scope says `serving scope S` when taken up)
                _, scope, slot = self._moved_scope(error)
                log.info(
                    "worker %s: %s",
                    self.consumer,
                    moving_reason(error, slot),
                    extra={"scope": scope, "reason": f"{type(error).__name__}: {error}"},
                )
        elif not said and not moving.stuck and stuck_move(moving.since, now, threshold):
            moving.stuck = True
            who, scope, slot = self._moved_scope(error)
            waits = WAITS if scope is not None else "new scopes wait meanwhile"
            self._said_stuck(who, error, slot, now - moving.since, waits, scope)
        self._raised_move = None
        return moving

    def _reconnected(self, down_since: float) -> None:
        """The end of the loop's outage, at warning as its start."""
        down = self.clock() - down_since
        log.warning(
            "worker %s: reconnected after %.1f s",
            self.consumer,
            down,
            extra={"reason": f"the server was unreachable for {down:.1f} s"},
        )
        if self.metrics is not None:
            self.metrics.reconnect()

    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set. What was read and not committed stays pending."""
        s = self.settings
        now = self.clock()
        next_refresh = now
        next_sweep = now
        next_claim = now + s.autoclaim_idle / 1000
        next_trim = now + random.uniform(0.5, 1.0) * TRIM_INTERVAL_MS / 1000
        down_since: float | None = None
        moving: Moving | None = None  # a slot moving or moved, said at info; nothing failed
        backoff = 0.0
        while not stop.is_set():
            now = self.clock()
            swept = False
            try:
                if now >= next_refresh:
                    self.refresh_scopes()
                    next_refresh = now + s.scope_refresh_interval / 1000
                if now >= next_sweep:
                    self.sweep_once()
                    swept = True
                    jitter = random.uniform(0.8, 1.2)
                    next_sweep = now + jitter * s.sweep_interval / 1000
                if now >= next_claim:
                    self.claim_once()
                    next_claim = now + max(0.05, s.autoclaim_idle / 4000)
                if now >= next_trim:
                    self.trim_once()
                    next_trim = now + TRIM_INTERVAL_MS / 1000
                until = min(next_refresh, next_sweep, next_claim, next_trim) - self.clock()
                block = max(1, min(1000, int(until * 1000)))
                if self.scopes:
                    self.read_once(block)
                else:
                    stop.wait(block / 1000)
            except Exception as e:
                # Nothing is lost either way: what was not committed stays pending.
                if not unreachable(e):
                    log.exception("worker %s: a round failed; retrying", self.consumer)
                    stop.wait(0.5)
                    continue
                self.store.refresh_routes()  # a cluster's slot may have moved
                if a_move(e):
                    if down_since is not None:  # the node answers: the outage is over
                        self._reconnected(down_since)
                        down_since = None
                    moving = self._waits_move(e, moving)
                    # its sweep tries it next, before a claim or a read: a read counts a
                    # delivery of each entry added meanwhile, whose commit answers the move
                    # in turn; the sweep counts none, and it answers a move for as long as
                    # the slot is being moved (it names a key never written: Store.sweep)
                    next_sweep = min(next_sweep, now)
                elif down_since is None:
                    down_since = self.clock()
                    moving = None  # a move after the outage is timed from then
                    log.warning(
                        "worker %s: the server is unreachable (%s); reconnecting with backoff",
                        self.consumer,
                        unreachable_reason(e),
                        extra={"reason": f"{type(e).__name__}: {e}"},
                    )
                backoff = min(5.0, max(0.1, backoff * 2))
                self.store.wait_out(stop, backoff)  # a cluster's failover ends it
                continue
            if down_since is not None:
                self._reconnected(down_since)
            if moving is not None and swept:
                # over once a sweep went through: it answers a move for as long as the slot
                # is being moved (Store.sweep; a read alone goes through in a reshard under
                # way, and the commit answers TRYAGAIN)
                if moving.stuck:
                    lasted = self.clock() - moving.since
                    log.info(
                        "worker %s: served again after %.1f s",
                        self.consumer,
                        lasted,
                        extra={"reason": f"its slot moved {lasted:.1f} s ago"},
                    )
                moving = None
            down_since, backoff = None, 0.0
        waiting = len(self._ahead) + (0 if self._ready is None else len(self._ready[0]))
        if self._flight is not None:
            waiting += sum(len(good) for _, good in self._flight.rounds)
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

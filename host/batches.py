"""A worker's batches: the entries read ahead with their jobs' loads, and the batch in flight.

A batch's round trips read the next batch ahead (ReadAhead). A worker that overlaps (`sfc
serve`) evaluates the next batch while the one before is in flight (`send_overlapped`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from typing import Protocol

from host.apply import Applier, Outcome, Round
from host.entries import Entry, EntryError, decode_work, job_of
from host.settings import Settings
from host.store import Loaded, ReadAhead, Row, Store, unreachable

LOAD_AHEAD_MAX = 20
"""The largest SFC_READ_COUNT whose batches are loaded ahead: a larger batch gains little
from it, and an entry read ahead would wait up to a whole batch longer."""

Entries = dict[str, list[tuple[str, dict[bytes, bytes]]]]
"""A batch's entries by scope: (entry id, fields)."""


@dataclass(slots=True)
class Flight:
    """A batch whose commits are written and whose replies are not read yet: each scope's
    round with its entries, the read ahead its write carried, and its jobs."""

    rounds: list[tuple[Round, list[Entry]]]
    ahead: ReadAhead | None
    jobs: set[tuple[str, str]]
    started: float


class Applies(Protocol):
    """What the batch in flight needs of its worker: decoding, and applying with reports."""

    def decode(
        self, scope: str, entries: Sequence[tuple[str, dict[bytes, bytes]]], deliveries: int
    ) -> list[Entry]: ...

    def apply_counted(
        self,
        scope: str,
        good: list[Entry],
        started: float,
        step: Callable[..., Outcome],
        *args: object,
    ) -> Outcome: ...

    def leave_batch_pending(self, scope: str, good: list[Entry], e: Exception) -> Outcome: ...


def merged(
    ready: tuple[list[Row], dict[str, Loaded]] | None,
    rows: list[Row],
    loaded: dict[str, Loaded],
    job_of: Callable[[Row], str | None],
    stale: Set[tuple[str, str]] = frozenset(),
    stale_new: Set[tuple[str, str]] = frozenset(),
) -> tuple[list[Row], dict[str, Loaded]] | None:
    """`ready`'s rows then `rows`, with their loads (None when there are no rows). Keeps no
    record of `stale` (old) or `stale_new` (new) jobs, nor an old one with no row waiting;
    a job's newer record wins."""
    old_rows, old_loaded = ready if ready is not None else ([], {})
    if not old_rows and not rows:
        return None
    keep: dict[str, set[str]] = {}
    for row in old_rows:
        job = job_of(row)
        if job is not None and (row[0], job) not in stale:
            keep.setdefault(row[0], set()).add(job)
    out: dict[str, Loaded] = {}
    for scope, (now, records, values) in old_loaded.items():
        jobs = keep.get(scope)
        if jobs:
            out[scope] = (now, {j: r for j, r in records.items() if j in jobs}, values)
    for scope, (now, records, values) in loaded.items():
        if stale_new:
            records = {j: r for j, r in records.items() if (scope, j) not in stale_new}
        old = out.get(scope)
        if old is not None:
            records = {**old[1], **records}
        out[scope] = (now, records, values)
    return old_rows + rows, out


class Batches:
    """The entries a worker read ahead, and its batch in flight."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        applier: Applier,
        scopes: list[str],
        overlap: bool,
    ) -> None:
        self.store = store
        self.settings = settings
        self.applier = applier
        self.scopes = scopes
        """The worker's scopes taken up (its own list)."""
        self.read_ahead = True
        """Whether the round trips of a batch read ahead (Store.ReadAhead)."""
        self.overlap = overlap
        """Whether a batch loaded ahead is evaluated while the one before is in flight."""
        self.ahead: list[Row] = []
        """Entries read ahead and not loaded yet, pending for this consumer."""
        self.ready: tuple[list[Row], dict[str, Loaded]] | None = None
        """Entries read ahead and loaded (by scope): the next batch, before `ahead`."""
        self.decoded: dict[tuple[str, str], Entry | EntryError] = {}
        """Rows read ahead that were decoded to load their jobs, by (scope, entry id)."""
        self.flight: Flight | None = None
        """The batch in flight, when overlapping."""

    def holds(self) -> bool:
        """Whether entries read ahead, or a batch in flight, wait to be applied."""
        return self.ready is not None or bool(self.ahead) or self.flight is not None

    def waiting(self) -> int:
        """How many entries read ahead or in flight wait to be applied."""
        n = len(self.ahead) + (0 if self.ready is None else len(self.ready[0]))
        if self.flight is not None:
            n += sum(len(good) for _, good in self.flight.rounds)
        return n

    def overlapping(self) -> bool:
        """Whether batches overlap now: small ones, read and loaded ahead (a large batch's
        commits go out in chunks as it is evaluated already)."""
        return (
            self.overlap
            and self.read_ahead
            and self.settings.read_count <= LOAD_AHEAD_MAX
            and self.store.can_read_ahead(self.scopes)
        )

    def lands_first(self) -> bool:
        """Whether the batch in flight lands before the next is evaluated: there is none to
        evaluate meanwhile, or a job of it is in flight (its load is stale)."""
        flight = self.flight
        if flight is None:
            return False
        if self.ready is None or not self.overlapping():
            return True
        for row in self.split(self.ready[0])[0]:
            job = self.job_read(row)
            if job is not None and (row[0], job) in flight.jobs:
                return True
        return False

    def take(self) -> tuple[list[Row], dict[str, Loaded], bool]:
        """The next batch read ahead: its rows, their loads, and whether they were loaded
        (empty: read new entries)."""
        loaded: dict[str, Loaded] = {}
        ready = self.ready
        if ready is not None:
            (rows, loaded), self.ready = ready, None
            if self.overlapping():
                # loaded ahead by two round trips at once: one batch now, the rest next
                rows, rest = self.split(rows)
                if rest:
                    self.ready = (rest, loaded)
            return rows, loaded, True
        if self.overlapping():  # it may have read two batches ahead: one now
            rows, self.ahead = self.split(self.ahead)
        else:
            rows, self.ahead = self.ahead, []
        return rows, loaded, False

    def ahead_of(self, full: bool) -> ReadAhead | None:
        """The read ahead of a batch's round trips (after a `full` read, or to load the rows
        read ahead); None when it reads none."""
        if not (self.read_ahead and (full or self.ahead)):
            return None
        if not self.store.can_read_ahead(self.scopes):
            return None
        count = self.ahead_count() if full else 0
        loads = self.settings.read_count <= LOAD_AHEAD_MAX
        return ReadAhead(tuple(self.scopes), count, self.ahead, self.row_job if loads else None)

    def keep(self, ahead: ReadAhead | None) -> None:
        """Keep what a batch's read ahead loaded: the next batch."""
        if ahead is not None and ahead.ready:
            self.ready = (ahead.ready, ahead.loaded)

    def split(self, rows: list[Row]) -> tuple[list[Row], list[Row]]:
        """One batch of `rows` (up to SFC_READ_COUNT of each scope, in order) and the rest."""
        per: dict[str, int] = {}
        limit = self.settings.read_count
        batch: list[Row] = []
        rest: list[Row] = []
        for row in rows:
            n = per[row[0]] = per.get(row[0], 0) + 1
            (batch if n <= limit else rest).append(row)
        return batch, rest

    def ahead_count(self) -> int:
        """How many entries a round trip reads ahead per stream: one batch, or two while
        fewer than two wait for a worker that overlaps (the next is loaded in flight)."""
        count = self.settings.read_count
        if not self.overlapping():
            return count
        waiting = len(self.ahead) + (0 if self.ready is None else len(self.ready[0]))
        return count if waiting >= 2 * count * len(self.scopes) else 2 * count

    def job_read(self, row: Row) -> str | None:
        """The job of a row read ahead and decoded (`row_job`); None for an event."""
        entry = self.decoded.get((row[0], row[1]))
        return job_of(entry) if isinstance(entry, Entry) else None

    def row_job(self, row: Row) -> str | None:
        """The job of a row read ahead, to load it (ReadAhead.job_of); its decoding is kept
        for when it is applied."""
        scope, entry_id, fields = row
        try:
            entry: Entry | EntryError = decode_work(entry_id, fields)
        except EntryError as e:
            entry = e
        self.decoded[scope, entry_id] = entry
        return None if isinstance(entry, EntryError) else job_of(entry)

    def send_overlapped(
        self,
        worker: Applies,
        rows: list[Row],
        by_scope: Entries,
        loaded: dict[str, Loaded],
        full: bool,
    ) -> Outcome:
        """Evaluate a batch loaded ahead, land the one in flight, then send this one's
        commits (with the next read ahead) and leave them in flight."""
        started = time.perf_counter()
        prepared: list[tuple[Round, list[Entry]]] = []
        total = Outcome()
        for scope, entries in by_scope.items():
            good = worker.decode(scope, entries, 1)
            if not good:
                continue
            try:
                prepared.append((self.applier.prepare(scope, good, loaded.get(scope)), good))
            except Exception as e:
                if unreachable(e):
                    raise  # the loop reconnects; the entries stay pending
                total.add(worker.leave_batch_pending(scope, good, e))
        try:
            total.add(self.land_flight(worker))
        except BaseException:
            # this batch goes back before the rows after it, to be evaluated again (its
            # jobs load again): the server's outage must not reorder a job's entries
            for r, good in prepared:
                for x in good:
                    self.decoded[r.scope, x.id] = x
            back = {(r.scope, job) for r, _ in prepared for job in r.jobs}
            mine = [row for row in rows if (row[0], row[1]) in self.decoded]
            after, loads = self.ready if self.ready is not None else ([], {})
            self.ready = merged((mine, {}), after, loads, self.job_read, set(), back)
            raise
        if not prepared:
            return total
        ahead = None
        if full or self.ahead:
            count = self.ahead_count() if full else 0
            ahead = ReadAhead(tuple(self.scopes), count, self.ahead, self.row_job)
        flight = self.flight = Flight([], ahead, set(), started)
        last = len(prepared) - 1
        for i, (r, good) in enumerate(prepared):
            # the last round's write reads ahead (for every scope), after its commits
            try:
                self.applier.send(r, ahead if i == last else None)
            except Exception as e:
                if unreachable(e):
                    raise  # the loop reconnects; the entries stay pending
                total.add(worker.leave_batch_pending(r.scope, good, e))
                continue
            flight.rounds.append((r, good))
            flight.jobs.update((r.scope, job) for job in r.jobs)
        if not flight.rounds:
            self.flight = None
        return total

    def land_flight(self, worker: Applies) -> Outcome:
        """Read the replies of the batch in flight and finish it; the rows its read ahead
        loaded make the next batch."""
        flight, self.flight = self.flight, None
        total = Outcome()
        if flight is None:
            return total
        try:
            for i, (r, good) in enumerate(flight.rounds):
                try:
                    total.add(
                        worker.apply_counted(r.scope, good, flight.started, self.applier.land, r)
                    )
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
            self.ready = merged(self.ready, rows, loads, self.job_read, flight.jobs, others)
        return total

"""What applying a batch did: counts for the worker's lines and the metrics, the jobs that
ended, the entries given up, the jobs that cannot be read."""

from __future__ import annotations

from dataclasses import dataclass, field

FAILURES_KEPT = 100
"""How many of its last failures a worker's lifetime counters keep (Outcome.add)."""


@dataclass(slots=True)
class Outcome:
    """What one batch did, for the worker's counters and the tests."""

    applied: int = 0
    absorbed: int = 0
    rejected: int = 0
    conflicts: int = 0
    gone: int = 0
    dropped: int = 0
    duplicates: int = 0
    """Events whose source/id had completed a wait already."""
    unmatched: int = 0
    """Events that no wait took."""
    loads: int = 0
    """Job hashes loaded to offer events (the waits index keeps this at the matching jobs)."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(entry id, error) of entries whose processing raised; they stay pending."""
    # -- for the metrics and the logs (host/metrics.py): counted when the commit lands
    kinds: dict[tuple[str, str], int] = field(default_factory=dict)
    """(entry kind, disposition) -> entries: applied, absorbed, rejected, dropped,
    duplicate, unmatched."""
    sent: dict[str, int] = field(default_factory=dict)
    """Equipment entries appended, by kind (push, hold, restart, await, withdraw)."""
    non_gating: dict[tuple[str, str], int] = field(default_factory=dict)
    """(qualifier, outcome) -> non-gating action blocks that ended (recipe v1.2.0)."""
    timer_late: list[int] = field(default_factory=list)
    """For each process timer or dwell an applied entry fired: ms past its due time."""
    answer_waits: list[int] = field(default_factory=list)
    """For each answer whose commit appended commands: ms from the answer's entry id to the
    batch's load (both the server's clock)."""
    ends: list[JobEnd] = field(default_factory=list)
    """Jobs whose order ended in this batch (the recipe completed or faulted)."""
    given_up: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    """(job, entry ids) of each commit or ack that returned gone: the entries another
    consumer took over, whose result was dropped (the job is "" for an event no job took)."""
    unreadable: list[Unreadable] = field(default_factory=list)
    """Jobs whose stored order or state cannot be read, with their entries (also in
    `failed`: they stay pending); the worker says so in one line, without a traceback."""

    def add(self, other: Outcome, lists: bool = True) -> None:
        """Add `other`'s counts and failures, and with `lists` its per-entry lists (long-lived
        counters pass False, or they grow for ever)."""
        self.applied += other.applied
        self.absorbed += other.absorbed
        self.rejected += other.rejected
        self.conflicts += other.conflicts
        self.gone += other.gone
        self.dropped += other.dropped
        self.duplicates += other.duplicates
        self.unmatched += other.unmatched
        self.loads += other.loads
        # the lists and counts are mostly empty (plain dicts: a Counter costs some µs to
        # make, and a few are made per job)
        kinds = self.kinds
        for key, n in other.kinds.items():
            kinds[key] = kinds.get(key, 0) + n
        sent = self.sent
        for kind, n in other.sent.items():
            sent[kind] = sent.get(kind, 0) + n
        for key, n in other.non_gating.items():
            self.non_gating[key] = self.non_gating.get(key, 0) + n
        if other.failed:
            self.failed += other.failed
        if not lists:
            # a bug that makes every entry raise would grow it with every entry: the last few
            del self.failed[:-FAILURES_KEPT]
            return
        if other.answer_waits:
            self.answer_waits += other.answer_waits
        if other.timer_late:
            self.timer_late += other.timer_late
        if other.ends:
            self.ends += other.ends
        if other.given_up:
            self.given_up += other.given_up
        if other.unreadable:
            self.unreadable += other.unreadable


class UnreadableJob(Exception):
    """The job of a wait an event matched cannot be read; the event stays pending."""

    def __init__(self, job: str, why: str) -> None:
        super().__init__(f"job {job}: its stored order or state cannot be read: {why}")
        self.job = job
        self.why = why


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A job whose stored order or state does not decode: its entries fail at every
    delivery until it is mended or cleared."""

    job: str
    entries: tuple[str, ...]
    kind: str
    """The kind of its first entry."""
    why: str


@dataclass(frozen=True, slots=True)
class JobEnd:
    """A job whose order ended in an evaluation of a work entry."""

    job: str
    entry: str
    kind: str
    disposition: str
    ended_by: str
    """The job response's endedBy: completed, faulted, stopped, aborted..."""
    reason: str
    """The fault, or the evaluation's reason."""

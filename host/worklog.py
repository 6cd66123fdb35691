"""The log lines (and metrics) of a worker's batches, claims, burials and sweeps.

Each says what happened to which entry of which job, and what happens next, with `scope`
and, where known, `job`, `entry`, `kind`, `disposition`, `reason` as fields (host/logs.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from host.apply import Outcome, Unreadable, way_out
from host.settings import Settings

if TYPE_CHECKING:
    from host.metrics import WorkerMetrics

log = logging.getLogger("sfc.host.worker")

LEFT_KEPT = 10_000
"""Most entries a worker remembers it left pending, to tell its own from another
consumer's when it takes them over (`WorkLog.took_over`)."""


def listed(ids: Sequence[str], most: int = 10) -> str:
    """The first `most` of `ids`, and how many more."""
    more = len(ids) - most
    return ", ".join(ids[:most]) + (f" and {more} more" if more > 0 else "")


class WorkLog:
    """What a worker says of its work, and the entries it left pending (`left`)."""

    def __init__(self, settings: Settings, metrics: WorkerMetrics | None) -> None:
        self.settings = settings
        self.metrics = metrics
        """Prometheus metrics (host/metrics.py), when the process serves them."""
        self.left: dict[tuple[str, str], None] = {}
        """Entries this worker left pending because their processing raised, by (scope,
        entry id), the oldest first (at most LEFT_KEPT)."""

    def leave(self, scope: str, ids: Sequence[str]) -> None:
        """Remember entries left pending (`left`)."""
        left = self.left
        for i in ids:
            left[scope, i] = None
        while len(left) > LEFT_KEPT:
            del left[next(iter(left))]

    def applied(self, scope: str, outcome: Outcome, seconds: float, entries: int) -> None:
        """An applied batch: a job that cannot be read at error, entries that stay pending
        at warning, job ends at debug (completed) or warning (any other end)."""
        said: set[str] = set()
        for u in outcome.unreadable:
            self._log_unreadable(scope, u)
            said.update(u.entries)
        if outcome.failed:
            self.leave(scope, [i for i, _ in outcome.failed])
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
            self._log_given_up(scope, outcome.given_up)
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

    def batch_raised(self, scope: str, ids: Sequence[str], e: Exception) -> None:
        """A batch whose processing raised (a bug, a stored state that does not decode): its
        entries not committed stay pending, and are claimed later."""
        log.exception(
            "scope %s: a batch of %d entries raised; those it had not committed stay pending",
            scope,
            len(ids),
            extra={"scope": scope, "reason": f"{type(e).__name__}: {e}"},
        )
        if self.metrics is not None:
            self.metrics.failed(scope, len(ids))
        self.leave(scope, ids)

    def _log_unreadable(self, scope: str, u: Unreadable) -> None:
        """Log, without a traceback, the entries of a job that cannot be read (at each
        delivery)."""
        n = len(u.entries)
        log.error(
            "scope %s: job %s cannot be evaluated: its stored order or state cannot be read "
            "(%s); its %s %s %s pending and %s to the dead stream after SFC_MAX_DELIVERIES "
            "(%d) deliveries; %s",
            scope,
            u.job,
            u.why,
            "entry" if n == 1 else f"{n} entries",
            listed(u.entries),
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

    def _log_given_up(self, scope: str, given_up: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        """Log in one line the entries, by job, that a batch gave up to the consumer that took
        them over."""
        by_job: dict[str, list[str]] = {}
        for job, ids in given_up:
            by_job.setdefault(job, []).extend(ids)
        said = [
            f"{f'job {job}' if job else 'events no job took'}: {listed(ids)}"
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

    def buried(
        self, scope: str, entry_id: str, job: str | None, fields: dict[bytes, bytes], reason: str
    ) -> None:
        """An entry moved to the dead stream; `job` is the one its data names, if any."""
        kind = fields.get(b"kind", b"").decode(errors="replace")[:64]
        log.warning(
            "scope %s: entry %s%s is dead: %s",
            scope,
            entry_id,
            "" if job is None else f" of job {job}",
            reason,
            extra={
                "scope": scope,
                "entry": entry_id,
                "job": job,
                "kind": kind,
                "disposition": "dead",
                "reason": reason,
            },
        )
        if self.metrics is not None:
            self.metrics.dead(scope, reason)

    def claimed(self, scope: str, ids: Sequence[str], deleted: Sequence[str]) -> None:
        """A claim's entries taken over (who left them: another consumer, or this worker's
        processing that raised) and those deleted meanwhile."""
        if deleted:
            log.warning(
                "scope %s: XAUTOCLAIM reported deleted entries %s",
                scope,
                list(deleted),
                extra={"scope": scope, "reason": "deleted"},
            )
        if self.metrics is not None:
            self.metrics.claimed(scope, len(ids), len(deleted))
        if not ids:
            return
        own = [i for i in ids if (scope, i) in self.left]
        for i in own:
            del self.left[scope, i]
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

    def outage(self, scope: str, ms: int) -> None:
        """The sweep found a gap in the scope's heartbeat: every open deadline moves."""
        log.warning(
            "scope %s: outage of %d ms; moving every open deadline",
            scope,
            ms,
            extra={"scope": scope, "reason": f"outage of {ms} ms"},
        )

    def swept(self, scope: str, ticks: int, outage: bool) -> None:
        if self.metrics is not None:
            self.metrics.sweep(scope, ticks, outage)

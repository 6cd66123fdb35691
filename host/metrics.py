"""Prometheus metrics of the host (docs/metrics.md): what workers count, what a scrape reads
from the server, and the endpoint `sfc serve --metrics-port` runs.

- `WorkerMetrics` is what a worker calls (host/worker.py), once per batch, dead entry,
  XAUTOCLAIM, sweep, reconnect and parked scope. Its counters and histograms live in this
  process; under `sfc serve` the client's multiprocess mode keeps them in files of
  `PROMETHEUS_MULTIPROC_DIR` (a temporary directory serve makes and sets before its workers
  start), so one endpoint sums every worker, also workers that have exited.
- `ScopeCollector` reads, at scrape time, what the server knows whoever wrote it: the stream
  lengths, the entries pending, the entries no consumer has read yet (the work stream's
  group, and each adapter's group on the equipment stream), the active and due jobs, and
  the counters that whoever drops something, or applies a job-control method, keeps in
  `sfc:scope:{S}` (`eventsUnmatched`, `methodsApplied:Pause` ...), one pipeline per scope.
- `MetricsServer` serves `/metrics` from the serving process (not a worker).

Every metric carries the scope as a label, except the histograms and the reconnects.
"""

from __future__ import annotations

import bisect
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from host.keys import METHODS_APPLIED, METHODS_REFUSED
from host.outcome import Outcome
from host.store import ScopeGauges, Store, unreachable

log = logging.getLogger("sfc.host.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

ENTRY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60)
OUTCOME_LABEL_LIMIT = 64
"""Most characters of an outcome as a label value (outcomes are the recipe's words)."""


def reason_class(reason: str) -> str:
    """The class of a dead entry's reason, a label of few values: `malformed` (the entry
    does not decode) or `deliveries` (it failed SFC_MAX_DELIVERIES times), else `other`."""
    if reason.startswith("malformed"):
        return "malformed"
    if reason.startswith("failed ") and "deliveries" in reason:
        return "deliveries"
    return "other"


@dataclass(frozen=True, slots=True)
class _Instruments:
    events: Counter
    batches: Counter
    conflicts: Counter
    gone: Counter
    failed: Counter
    dead: Counter
    claimed: Counter
    deleted: Counter
    ticks: Counter
    outages: Counter
    commands: Counter
    ended: Counter
    reconnects: Counter
    parked: Counter
    non_gating: Counter
    entry_seconds: Histogram
    batch_seconds: Histogram
    answer_seconds: Histogram
    timer_lateness: Histogram


@functools.cache
def _instruments() -> _Instruments:
    """The worker's metrics, registered once per process in the default registry."""
    s = ("scope",)
    return _Instruments(
        events=Counter(
            "sfc_events",
            "Work entries evaluated, by kind and disposition (applied, absorbed, rejected, "
            "dropped, duplicate, unmatched), counted when their commit landed.",
            ("scope", "kind", "disposition"),
        ),
        batches=Counter("sfc_batches", "Batches of work entries applied.", s),
        conflicts=Counter(
            "sfc_commit_conflicts", "Commits that lost a race (loaded and evolved again).", s
        ),
        gone=Counter(
            "sfc_commit_gone", "Entries whose commit or ack returned gone (taken over).", s
        ),
        failed=Counter(
            "sfc_entries_failed", "Entries whose processing raised; they stay pending.", s
        ),
        dead=Counter(
            "sfc_dead_entries", "Entries moved to the dead stream, by reason class.", (*s, "reason")
        ),
        claimed=Counter("sfc_autoclaim_claimed", "Entries taken over with XAUTOCLAIM.", s),
        deleted=Counter(
            "sfc_autoclaim_deleted", "Ids XAUTOCLAIM reported as deleted from the stream.", s
        ),
        ticks=Counter("sfc_ticks", "Tick entries queued by the sweep (outage ticks too).", s),
        outages=Counter("sfc_outages", "Outages detected by the sweep.", s),
        commands=Counter(
            "sfc_commands",
            "Equipment entries appended by a worker's commits, by kind (push, hold, restart, "
            "await, withdraw).",
            (*s, "kind"),
        ),
        ended=Counter(
            "sfc_jobs_ended",
            "Jobs whose order a worker ended, by the job response's endedBy.",
            (*s, "ended_by"),
        ),
        reconnects=Counter(
            "sfc_worker_reconnects", "Times a worker reconnected after the server was gone."
        ),
        parked=Counter(
            "sfc_worker_scopes_parked",
            "Times a worker of several scopes on a cluster set a scope aside while its node "
            "could not be reached, serving the others meanwhile.",
            s,
        ),
        non_gating=Counter(
            "sfc_non_gating_outcomes",
            "Non-gating action blocks (every qualifier but N) that ended, by qualifier and "
            "outcome (an answer, error, timeout after the last attempt, done at an L/SL limit).",
            (*s, "qualifier", "outcome"),
        ),
        entry_seconds=Histogram(
            "sfc_apply_entry_seconds",
            "Apply time per entry: a batch's time, shared by its entries.",
            buckets=ENTRY_BUCKETS,
        ),
        batch_seconds=Histogram(
            "sfc_apply_batch_seconds",
            "Apply time per batch: decode, load, evolve, commit.",
            buckets=BATCH_BUCKETS,
        ),
        answer_seconds=Histogram(
            "sfc_answer_to_command_seconds",
            "From an answer's entry id to the end of the batch whose commit appended the "
            "commands it caused (at most that much; the server's clock, plus the batch time).",
            buckets=LATENCY_BUCKETS,
        ),
        timer_lateness=Histogram(
            "sfc_timer_lateness_seconds",
            "How late a process timer or dwell fired (the T of L, D, SD, DS, SL; MinSeconds): "
            "the time of the entry that fired it less its due time.",
            buckets=LATENESS_BUCKETS,
        ),
    )


def _observe_all(histogram: Histogram, amounts: Sequence[float]) -> None:
    """Observe each of `amounts` as `observe` would, with one write of the sum and one per
    bucket hit (through the Histogram's internals; one by one where a client has none)."""
    total = getattr(histogram, "_sum", None)
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    if total is None or bounds is None or buckets is None:
        for amount in amounts:
            histogram.observe(amount)
        return
    counts: dict[int, int] = {}
    for amount in amounts:
        # the first bucket whose upper bound is at least the amount (the last is +Inf)
        i = bisect.bisect_left(bounds, amount)
        counts[i] = counts.get(i, 0) + 1
    total.inc(sum(amounts))
    for i, n in counts.items():
        buckets[i].inc(n)


class WorkerMetrics:
    """What a worker reports; every call is a few counter increments."""

    def __init__(self) -> None:
        self.m = _instruments()

    def batch(self, scope: str, outcome: Outcome, seconds: float, entries: int) -> None:
        """A batch (or one reclaimed entry) applied in `seconds`."""
        m = self.m
        m.batches.labels(scope).inc()
        for (kind, disposition), n in outcome.kinds.items():
            m.events.labels(scope, kind, disposition).inc(n)
        for kind, n in outcome.sent.items():
            m.commands.labels(scope, kind).inc(n)
        for end in outcome.ends:
            m.ended.labels(scope, end.ended_by).inc()
        if outcome.conflicts:
            m.conflicts.labels(scope).inc(outcome.conflicts)
        if outcome.gone:
            m.gone.labels(scope).inc(outcome.gone)
        if outcome.failed:
            m.failed.labels(scope).inc(len(outcome.failed))
        m.batch_seconds.observe(seconds)
        if entries:
            _observe_all(m.entry_seconds, [seconds / entries] * entries)
        if outcome.answer_waits:
            _observe_all(m.answer_seconds, [ms / 1000 + seconds for ms in outcome.answer_waits])
        for (qualifier, ended), n in outcome.non_gating.items():
            m.non_gating.labels(scope, qualifier, ended[:OUTCOME_LABEL_LIMIT]).inc(n)
        if outcome.timer_late:
            _observe_all(m.timer_lateness, [ms / 1000 for ms in outcome.timer_late])

    def failed(self, scope: str, entries: int) -> None:
        """A batch that raised: its entries stay pending."""
        self.m.failed.labels(scope).inc(entries)

    def dead(self, scope: str, reason: str) -> None:
        self.m.dead.labels(scope, reason_class(reason)).inc()

    def claimed(self, scope: str, claimed: int, deleted: int) -> None:
        if claimed:
            self.m.claimed.labels(scope).inc(claimed)
        if deleted:
            self.m.deleted.labels(scope).inc(deleted)

    def sweep(self, scope: str, ticks: int, outage: bool) -> None:
        if ticks:
            self.m.ticks.labels(scope).inc(ticks)
        if outage:
            self.m.outages.labels(scope).inc()

    def reconnect(self) -> None:
        self.m.reconnects.inc()

    def parked(self, scope: str) -> None:
        self.m.parked.labels(scope).inc()


# -- scrape time


SCOPE_GAUGES = {
    "work": ("sfc_work_entries", "Entries in the work stream (XLEN)."),
    "pending": ("sfc_work_pending", "Work entries read and not yet acknowledged (XPENDING)."),
    "unread": (
        "sfc_work_unread",
        "Work entries no worker has read yet (the group's lag, XINFO GROUPS).",
    ),
    "dead": ("sfc_dead_stream_entries", "Entries in the dead stream (XLEN)."),
    "equipment": ("sfc_equipment_entries", "Entries in the equipment stream (XLEN)."),
    "active": ("sfc_active_jobs", "Jobs whose recipe is running (SCARD sfc:active)."),
    "due": ("sfc_due_jobs", "Jobs with a deadline on the due index (ZCARD sfc:due)."),
    "orders": ("sfc_job_orders", "Stored job orders (ZCARD sfc:orders)."),
}
SCOPE_COUNTERS = {
    "eventsUnmatched": (
        "sfc_scope_events_unmatched",
        "Events no job waited for, dropped at publish or acked by a worker (sfc:scope).",
    ),
    "eventsDuplicate": (
        "sfc_scope_events_duplicate",
        "Events whose source/id had completed a wait already (sfc:scope).",
    ),
    "answersDropped": (
        "sfc_scope_answers_dropped",
        "Answers for a job that does not exist (sfc:scope).",
    ),
    "entriesDropped": (
        "sfc_scope_entries_dropped",
        "Other work entries for a job that does not exist (sfc:scope).",
    ),
}


class ScopeCollector(Collector):
    """Gauges and counters read from the server at scrape time, per scope (the given ones,
    or every registered scope). A server that does not answer gives `sfc_server_up 0`."""

    def __init__(
        self,
        store: Store,
        scopes: Sequence[str] | None = None,
        workers: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.failed: set[str] = set()
        self.scopes = None if scopes is None else list(scopes)
        self.workers = workers

    def _failed(self, scope: str, error: Exception) -> None:
        """A scope whose gauges cannot be read (a key of another type, made by hand) has no
        samples; the scrape serves the others. Logged once a scope and error, not at every
        scrape."""
        said = f"{scope}: {type(error).__name__}: {error}"
        if said in self.failed:
            return
        self.failed.add(said)
        log.warning(
            "metrics: scope %s cannot be read, and has no samples: %s",
            scope,
            error,
            extra={"scope": scope, "reason": str(error)},
        )

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("sfc_server_up", "1 when the scrape could read the server.")
        if self.workers is not None:
            alive = GaugeMetricFamily("sfc_workers_alive", "Worker processes of this serve.")
            alive.add_metric([], self.workers())
            yield alive
        try:
            scopes = self.scopes if self.scopes is not None else self.store.scopes()
            read = {}
            for s in scopes:
                try:
                    read[s] = self.store.scope_gauges(s)
                except Exception as e:
                    if unreachable(e):
                        raise
                    self._failed(s, e)  # the others are read and served
        except Exception as e:  # the server is gone: say so, and serve the rest
            log.warning("metrics: cannot read the server: %s", e, extra={"reason": str(e)})
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        values = {s: r.values for s, r in read.items()}
        for key, (name, doc) in SCOPE_GAUGES.items():
            g = GaugeMetricFamily(name, doc, labels=["scope"])
            for s, v in values.items():
                g.add_metric([s], v.get(key, 0))
            yield g
        for key, (name, doc) in SCOPE_COUNTERS.items():
            c = CounterMetricFamily(name, doc, labels=["scope"])
            for s, v in values.items():
                c.add_metric([s], v.get(key, 0))
            yield c
        yield _methods(values)
        yield _equipment_unread(read)


def _equipment_unread(read: dict[str, ScopeGauges]) -> Metric:
    """The equipment entries each adapter's consumer group has not read: a scope whose
    adapter is down (or stalled) grows it. A scope where no adapter ever read has no group,
    and no sample."""
    g = GaugeMetricFamily(
        "sfc_equipment_unread",
        "Equipment entries an adapter's consumer group has not read yet (XINFO GROUPS lag).",
        labels=["scope", "group"],
    )
    for s, r in read.items():
        for group, n in sorted(r.equipment_unread.items()):
            g.add_metric([s, group], n)
    return g


def _methods(values: dict[str, dict[str, int]]) -> Metric:
    """The job-control methods counted in each scope's hash (`methodsApplied:Pause`), by
    name and result, whichever process applied them (`sfc job`, `sfc mcp`, a program)."""
    c = CounterMetricFamily(
        "sfc_scope_methods",
        "Job-control methods by name: applied, or refused because the order's state does "
        "not allow them (sfc:scope).",
        labels=["scope", "method", "result"],
    )
    for s, v in values.items():
        for key, n in sorted(v.items()):
            for prefix, result in ((METHODS_APPLIED, "applied"), (METHODS_REFUSED, "refused")):
                if key.startswith(prefix):
                    c.add_metric([s, key.removeprefix(prefix), result], n)
    return c


class MetricsServer:
    """`/metrics` over HTTP: the workers' metrics (multiprocess files of `directory`) and
    the scope collector. Runs in a daemon thread of the serving process until `close()`."""

    def __init__(
        self,
        addr: str,
        port: int,
        directory: str,
        store: Store,
        scopes: Sequence[str] | None = None,
        workers: Callable[[], int] | None = None,
    ) -> None:
        self.directory = directory
        self.store = store
        self.registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(self.registry, path=directory)  # type: ignore[no-untyped-call]
        self.registry.register(ScopeCollector(store, scopes, workers))
        self.httpd, self.thread = start_http_server(port, addr, registry=self.registry)
        self.port = int(self.httpd.server_address[1])

    def mark_dead(self, pid: int) -> None:
        """A worker exited: drop its live gauges (its counters stay in the sums)."""
        multiprocess.mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
        self.store.close()

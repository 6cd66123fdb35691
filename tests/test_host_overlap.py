"""Overlapping batches (Worker(overlap=True), as `sfc serve` runs its workers): a small batch loaded
ahead is evaluated while the batch before it is in flight, its commits written and their
replies not read yet. Nothing is applied twice or out of order, a job in flight is loaded
again before its next entry is evaluated, a conflict found on landing is retried, and what
is in flight lands before the worker stops."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from generated.work_entry_v1_0 import ResumeData
from host import keys
from host.batches import LOAD_AHEAD_MAX, merged
from host.entries import decode_history, fields
from host.store import JobRecord, Loaded, Row
from tests.faultkit import wait_until
from tests.hostkit import FAST, Host, linear_recipe, pending_of, started, worker_and_loads

ONE = replace(FAST, read_count=1)


def events_of(host: Host, scope: str, job: str) -> list[str]:
    return [decode_history(f).event for _, f in host.store().history(scope, job, 20)]


def test_a_batch_is_evaluated_while_the_one_before_is_in_flight(host: Host) -> None:
    scope = host.scope("overlap")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(6)]
    w, loads = worker_and_loads(host, [scope], ONE, overlap=True)
    r = host.client()

    # the first batch is applied as read; its round trips read and load two batches ahead
    assert w.read_once(block_ms=100).applied == 1 and started(host, scope, "j0")
    assert w.batches.flight is None and w.batches.ready is not None
    # the next one goes in flight: written, not landed, while j2 waits loaded
    assert w.read_once(block_ms=100).applied == 0
    assert w.batches.flight is not None and [j for _, j in w.batches.flight.jobs] == ["j1"]
    wait_until(lambda: started(host, scope, "j1"), timeout=10, what="j1 to start on the server")
    assert w.counters.outcome.applied == 1  # counted when it lands
    # from now on each call evaluates one batch and lands the one before
    for n in range(2, 6):
        out = w.read_once(block_ms=100)
        assert out.applied == 1, n
        assert w.batches.flight is not None and [j for _, j in w.batches.flight.jobs] == [f"j{n}"]
        assert w.counters.outcome.applied == n
    assert w.drain().applied == 1
    assert (
        w.batches.flight is None
        and w.batches.ready is None
        and w.batches.ahead == []
        and w.batches.decoded == {}
    )
    assert w.counters.outcome.applied == 6 and w.counters.outcome.conflicts == 0
    assert all(started(host, scope, j) for j in jobs)
    assert loads == [["j0"]]  # every later batch was loaded ahead
    assert pending_of(r, scope) == [] and r.xlen(keys.work(scope)) == 0
    for job in jobs:
        assert events_of(host, scope, job) == ["start"]


def test_a_job_in_flight_lands_before_its_next_entry_is_evaluated(host: Host) -> None:
    """j's start and a resume for j, one batch apart: the resume was loaded before the start
    was committed, so the start lands first and j is loaded again (no conflict)."""
    scope = host.scope("same")
    store = host.store()
    for name in ("a", "b", "c"):
        host.submit(scope, linear_recipe(1), job_id=name)
    host.submit(scope, linear_recipe(2), job_id="j")
    store.add_work(scope, fields("resume", ResumeData(job="j")))
    host.submit(scope, linear_recipe(1), job_id="d")
    w, loads = worker_and_loads(host, [scope], ONE, overlap=True)
    landed_first = False
    for _ in range(20):
        flight = w.batches.flight
        w.read_once(block_ms=50)
        if flight is not None and (scope, "j") in flight.jobs and w.batches.flight is None:
            landed_first = True  # j was in flight and its next entry was next: it landed
    w.drain()
    assert landed_first
    assert w.counters.outcome.conflicts == 0
    assert loads.count(["j"]) == 1, loads  # loaded again after its start landed
    assert events_of(host, scope, "j") == ["start", "resume"]
    assert all(started(host, scope, job) for job in ("a", "b", "c", "d", "j"))
    assert pending_of(host.client(), scope) == []


def test_a_conflict_found_when_a_batch_lands_is_applied_again(host: Host) -> None:
    """Another worker moves a job after this one loaded it ahead: the commit in flight
    conflicts, and landing loads the job again and applies the entry on the new state."""
    scope = host.scope("moved")
    for i in range(4):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], ONE, overlap=True)
    assert w.read_once(block_ms=100).applied == 1
    assert w.batches.ready is not None and [i for _, i, _ in w.batches.ready[0]]
    ready_jobs = list(w.batches.ready[1][scope][1])
    assert "j1" in ready_jobs
    # another worker applies a resume for j1 after j1 was loaded here
    host.store().add_work(scope, fields("resume", ResumeData(job="j1")))
    other = host.worker([scope], ONE)
    other.batches.read_ahead = False
    assert other.read_once(block_ms=100).absorbed == 1
    w.read_once(block_ms=100)  # j1's start goes in flight, on its stale load
    for _ in range(20):
        if w.batches.flight is None and w.batches.ready is None and not w.batches.ahead:
            break
        w.read_once(block_ms=50)
    assert w.counters.outcome.conflicts == 1
    assert w.counters.outcome.applied == 4
    assert events_of(host, scope, "j1") == ["resume", "start"]
    assert all(started(host, scope, f"j{i}") for i in range(4))
    assert pending_of(host.client(), scope) == []


def test_entries_of_jobs_run_to_their_end_once_and_in_order_with_overlap(host: Host) -> None:
    """Jobs of three steps in two scopes, the equipment answering at once: every job
    completes, each entry is applied once, in the order of its job's history."""
    scopes = [host.scope("run-a"), host.scope("run-b")]
    for scope in scopes:
        for i in range(12):
            host.submit(scope, linear_recipe(3), job_id=f"j{i}")
    w = host.worker(scopes, ONE, overlap=True)
    responders = [host.responder(scope) for scope in scopes]
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            for responder in responders:
                responder.pump(block_ms=5)

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    flights = 0
    most = 0  # records held in loads ahead: only those of rows waiting, and the batch taken
    try:
        for _ in range(2000):
            w.read_once(block_ms=20)
            flights += w.batches.flight is not None
            if w.batches.ready is not None:
                most = max(most, sum(len(load[1]) for load in w.batches.ready[1].values()))
            if all(
                host.order_path(s, f"j{i}") == "Ended/Completed" for s in scopes for i in range(12)
            ):
                break
        w.drain()
    finally:
        stop.set()
        t.join(timeout=10)
    assert flights > 0
    assert most <= 6 * len(scopes), most  # without pruning: every job (24)
    for scope in scopes:
        for i in range(12):
            assert host.order_path(scope, f"j{i}") == "Ended/Completed"
            assert events_of(host, scope, f"j{i}") == ["start", "answer", "answer", "answer"]
        assert pending_of(host.client(), scope) == []
    assert w.counters.outcome.applied == 2 * 12 * 4


def test_a_stopping_worker_lands_its_batch_in_flight(host: Host) -> None:
    scope = host.scope("stop")
    for i in range(5):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], ONE, overlap=True)
    stop = threading.Event()
    stopped_with_flight = threading.Event()
    inner = w.read_once

    def read_once(block_ms: int | None = None) -> Any:
        out = inner(block_ms)
        if w.batches.flight is not None:
            stopped_with_flight.set()
            stop.set()  # stop with a batch in flight
        return out

    w.read_once = read_once  # type: ignore[method-assign]
    w.run(stop)
    assert stopped_with_flight.is_set()
    assert w.batches.flight is None and w.batches.ready is None and w.batches.ahead == []
    assert all(started(host, scope, f"j{i}") for i in range(5))
    assert w.counters.outcome.applied == 5
    assert pending_of(host.client(), scope) == []


def test_large_batches_do_not_overlap(host: Host) -> None:
    """Above LOAD_AHEAD_MAX a batch's commits go out in chunks as it is evaluated; it is
    applied as before, and nothing is left in flight."""
    scope = host.scope("large")
    n = LOAD_AHEAD_MAX + 1
    for i in range(3 * n):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], replace(FAST, read_count=n), overlap=True)
    for _ in range(3):
        assert w.read_once(block_ms=100).applied == n
        assert w.batches.flight is None
    assert all(started(host, scope, f"j{i}") for i in range(3 * n))


@given(
    old=st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4),
    waiting=st.lists(st.sampled_from(["a", "b", "c", "d", None]), max_size=4),
    new=st.lists(st.sampled_from(["b", "c", "e"]), max_size=3),
    stale=st.sets(st.sampled_from(["a", "b", "c", "d", "e"])),
    stale_new=st.sets(st.sampled_from(["b", "c", "e"])),
)
def test_merged_loads_keep_fresh_records_of_jobs_with_rows_waiting(
    old: list[str],
    waiting: list[str | None],
    new: list[str],
    stale: set[str],
    stale_new: set[str],
) -> None:
    """Pure: `merged` keeps, of the older load, the jobs of rows still waiting and not
    stale; of the newer load, the jobs not stale there; the newer record wins; the rows keep
    their order; no rows at all is None."""
    rec = lambda job, v: JobRecord(v, job.encode(), b"", "")  # noqa: E731
    ready_rows: list[Row] = [("s", f"w{i}", {}) for i, _ in enumerate(waiting)]
    jobs_of = {f"w{i}": j for i, j in enumerate(waiting)}
    new_rows: list[Row] = [("s", f"n{i}", {}) for i, _ in enumerate(new)]
    jobs_of |= {f"n{i}": j for i, j in enumerate(new)}
    ready = (ready_rows, {"s": (1, {j: rec(j, "1") for j in old}, {})})
    loaded: dict[str, Loaded] = {"s": (2, {j: rec(j, "2") for j in new}, {"x": "y"})}
    out = merged(
        ready,
        new_rows,
        loaded,
        lambda row: jobs_of[row[1]],
        {("s", j) for j in stale},
        {("s", j) for j in stale_new},
    )
    if not ready_rows and not new_rows:
        assert out is None
        return
    assert out is not None
    rows, loads = out
    assert rows == ready_rows + new_rows
    now, records, values = loads["s"]
    assert now == 2 and values == {"x": "y"}
    expected = {j: "1" for j in old if j in waiting and j not in stale}
    expected |= {j: "2" for j in new if j not in stale_new}
    assert {j: r.version for j, r in records.items()} == expected


def test_a_job_two_batches_after_its_flight_is_loaded_again_when_it_lands(host: Host) -> None:
    """a0 a1 j:start y0 j:resume z0..z3, one a batch: j's resume was loaded (with y0) before
    j's start was committed; when the start lands, that load of j is dropped, and j loads
    again: the resume is applied on the start's state, without a conflict."""
    scope = host.scope("stale")
    store = host.store()
    for i in range(2):
        host.submit(scope, linear_recipe(1), job_id=f"a{i}")
    host.submit(scope, linear_recipe(2), job_id="j")
    host.submit(scope, linear_recipe(1), job_id="y0")
    store.add_work(scope, fields("resume", ResumeData(job="j")))
    for i in range(4):
        host.submit(scope, linear_recipe(1), job_id=f"z{i}")
    w = host.worker([scope], ONE, overlap=True)
    for _ in range(20):
        w.read_once(block_ms=20)
    w.drain()
    assert events_of(host, scope, "j") == ["start", "resume"]
    assert pending_of(host.client(), scope) == []
    assert w.counters.outcome.conflicts == 0


def test_a_batch_whose_send_raises_is_reported_and_stays_pending(host: Host) -> None:
    """A bug while a batch's commits are written (not an outage): the batch is logged and
    counted failed, as without overlap; its entry stays pending, and is claimed later."""
    scope = host.scope("send-raises")
    for i in range(4):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], ONE, overlap=True)
    calls: list[int] = []

    def third_fails(commits: Any) -> None:
        calls.append(len(commits))
        if len(calls) == 3:
            raise RuntimeError("a bug while sending")

    w.applier.before_commit = third_fails
    outcomes = [w.read_once(block_ms=20) for _ in range(6)]
    w.drain()
    failed = [f for o in outcomes for f in o.failed]
    assert len(failed) == 1 and failed[0][1] == "the batch raised"
    assert sum(started(host, scope, f"j{i}") for i in range(4)) == 3
    assert len(pending_of(host.client(), scope)) == 1
    w.applier.before_commit = None
    host.run([w], [], lambda: all(started(host, scope, f"j{i}") for i in range(4)), sweep=False)
    assert pending_of(host.client(), scope) == []


def test_several_scopes_take_a_batch_of_each_and_hold_few_rows_ahead(host: Host) -> None:
    """Four scopes with a backlog, one entry a batch: each batch takes one entry of every
    scope (not only of the first), so rows read ahead do not pile up."""
    scopes = [host.scope(f"b{i}") for i in range(4)]
    for s in scopes:
        for i in range(30):
            host.submit(s, linear_recipe(1), job_id=f"j{i}")
    held: dict[bool, int] = {}
    for overlap in (False, True):
        w = host.worker(scopes, ONE, overlap=overlap)
        most = 0
        for _ in range(12):
            w.read_once(block_ms=20)
            most = max(
                most,
                len(w.batches.ahead) + (0 if w.batches.ready is None else len(w.batches.ready[0])),
            )
        w.drain()
        held[overlap] = most
    # without overlap: a batch and the one after; with it, up to two more of each scope
    assert held[True] <= held[False] + 2 * len(scopes), held
    for s in scopes:
        assert pending_of(host.client(), s) == []


def test_an_outage_while_a_batch_lands_keeps_the_batch_evaluated_meanwhile_first(
    own_host: Host,
) -> None:
    """The server drops the worker's connections while a batch is in flight: landing it
    raises, and the batch evaluated meanwhile goes back before the rows after it, so that
    no job's entries are applied out of order; nothing is lost or applied twice. (It pauses
    and kills every client: a server of its own.)"""
    host = own_host
    scope = host.scope("outage")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(6)]
    w = host.worker([scope], ONE, overlap=True)
    w.read_once(block_ms=100)
    r = host.client()
    r.client_pause(5000, all=False)  # writes wait: the next batch's commit stays unrun
    try:
        w.read_once(block_ms=100)
        assert w.batches.flight is not None and w.batches.ready is not None
        first = w.batches.ready[0][0][1]
        after = [i for _, i, _ in w.batches.ready[0][1:]] + [i for _, i, _ in w.batches.ahead]
        r.client_kill_filter(_type="normal", skipme=True)
    finally:
        r.client_unpause()
    with pytest.raises(redis.ConnectionError):
        w.read_once(block_ms=100)
    assert w.batches.flight is None and w.batches.ready is not None
    ids = [i for _, i, _ in w.batches.ready[0]] + [i for _, i, _ in w.batches.ahead]
    assert ids[0] == first and ids[1 : 1 + len(after)] == after
    assert not started(host, scope, "j1")  # its commit never ran: its entry is claimed
    host.run([w], [], lambda: all(started(host, scope, j) for j in jobs), sweep=False)
    w.drain()
    for job in jobs:
        assert events_of(host, scope, job) == ["start"]
    assert pending_of(r, scope) == []

"""A worker's park path on one real server (`Worker(..., isolate=True)`): what it reads of a
scope served again after a park (its own pending entries first), and what it buries.

On one server every scope has the same node, so a test that parks one scope alone steps
`worker.routes` as a failed call of that scope does (`park_alone`); a killed server is every
scope away. The cluster's own answers (a real kill, MOVED, ASK) making `Routes.park` run are
checked end to end in tests/test_host_cluster_isolation.py."""

from __future__ import annotations

import redis

from host.store import slot_of
from host.worker import Worker
from tests.hostkit import FAST, Host, linear_recipe

MOVED_TO = "127.0.0.1:7001"


def stream_order(entry_id: str) -> tuple[int, ...]:
    """An entry id as the stream orders it."""
    return tuple(map(int, entry_id.split("-")))


def park_alone(worker: Worker, scope: str) -> None:
    """Park `scope` alone, as its call answering MOVED (its slot moved to another node) does
    on a cluster: its own pending entries are read first when it is served again."""
    moved = redis.exceptions.MovedError(f"{slot_of(scope)} {MOVED_TO}")
    assert worker.routes.park(scope, moved)
    assert scope in worker.parked and scope in worker.routes.reread


def test_a_worker_told_to_isolate_reads_each_scope_and_its_own_pending_entries_first(
    host: Host,
) -> None:
    """`isolate=True` gives a worker of several scopes on one server the park path of a
    cluster: a scope parked is not read until its try comes, then its own pending entries
    come before its new ones. Without it (None), one server never isolates."""
    a, b = host.scope("iso-a"), host.scope("iso-b")
    now = [100.0]
    worker = Worker(host.store(), FAST, [a, b], clock=lambda: now[0], isolate=True)
    worker.refresh_scopes()
    assert worker.routes.isolating()
    plain = Worker(host.store(), FAST, [a, b])
    plain.refresh_scopes()
    assert not plain.routes.isolating()
    alone = Worker(host.store(), FAST, [a], isolate=True)
    alone.refresh_scopes()
    assert not alone.routes.isolating()  # one scope: nothing else to serve
    for i in range(2):
        host.submit(a, linear_recipe(1), job_id=f"j{i}")
    pending = [row[1] for row in worker.store.read([a], 100, None)]  # as the worker reads
    assert len(pending) == 2
    park_alone(worker, a)
    host.submit(a, linear_recipe(1), job_id="late")
    host.submit(b, linear_recipe(1), job_id="other")
    assert [row[0] for row in worker._read(None)] == [b]  # a waits for its try
    now[0] += 1.0  # past its first backoff
    own = worker._read(None)
    assert [(row[0], row[1]) for row in own] == [(a, i) for i in pending]
    assert a not in worker.parked  # its read went through
    (late,) = worker._read(None)
    assert late[0] == a and stream_order(late[1]) > stream_order(pending[-1])
    assert a not in worker.routes.reread

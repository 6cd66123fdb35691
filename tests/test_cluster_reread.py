"""A worker's park path on one real server (`Worker(..., isolate=True)`): what it reads of a
scope served again after a park (its own pending entries first), and what it buries.

On one server every scope has the same node, so a test that parks one scope alone steps
`worker.routes` as a failed call of that scope does (`park_alone`, `park_away`); a killed
server is every scope away. A whole cluster down is one server in cluster mode killed
(`one_node_cluster`). The cluster's own answers (a real kill, MOVED, ASK) making
`Routes.park` run are checked end to end in tests/test_host_cluster_isolation.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
import redis

from host import keys
from host.cluster import PARK_MAX_S, Happened
from host.entries import decode_history
from host.equipment import always
from host.server import EmbeddedServer, free_cluster_port
from host.store import Store, slot_of, unreachable
from host.worker import Worker
from tests.faultkit import COMPLETED, check, wide_recipe
from tests.hostkit import FAST, Host, linear_recipe, messages, pump_until, wait_for

LOGGER = "sfc.host.worker"
MOVED_TO = "127.0.0.1:7001"
SLOW_CLAIM = replace(FAST, autoclaim_idle=60_000)
"""No claim within the test: what a worker applies of its own pending entries it read
again itself, not after SFC_AUTOCLAIM_IDLE (a minute)."""
BOGUS = {"v": "1", "kind": "bogus", "data": "{}"}
"""A work entry that does not decode (malformed)."""


def stream_order(entry_id: str) -> tuple[int, ...]:
    """An entry id as the stream orders it."""
    return tuple(map(int, entry_id.split("-")))


def park_alone(worker: Worker, scope: str) -> None:
    """Park `scope` alone, as its call answering MOVED (its slot moved to another node) does
    on a cluster: its own pending entries are read first when it is served again."""
    moved = redis.exceptions.MovedError(f"{slot_of(scope)} {MOVED_TO}")
    assert worker.routes.park(scope, moved)
    assert scope in worker.parked and scope in worker.routes.reread


def park_away(worker: Worker, scope: str) -> None:
    """Park `scope` as its call does on a cluster when its node, holding no other scope of
    the worker, is killed (Routes.park on a ConnectionError): parked AWAY, said at warning,
    its own pending entries read first when it is served again. Its node is back once its
    try comes: the probe's PING (Store.answers) finds the one server answering."""
    routes = worker.routes
    node = routes.store.node_name(scope)
    away = redis.ConnectionError(f"Error 111 connecting to {node}. Connection refused.")
    assert routes.isolating()
    routes.stalls[node] += 1
    routes.reread[scope] = "0"
    routes.say(scope, routes.policy.step(scope, Happened.AWAY, routes.clock()), away)
    assert scope in worker.parked and not worker.parked[scope].moved


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of the test's own, to kill and start again on its directory and port (it
    keeps its data, as a cluster's node does). Every write is on disk before its reply
    (`appendfsync always`): what a test read before the kill is pending once it is back."""
    s = EmbeddedServer(tmp_path / "valkey", fsync="always").start()
    try:
        yield s
    finally:
        s.stop()


def cluster_ok(node: EmbeddedServer) -> bool:
    """The one node answers and says `cluster_state:ok` (it serves every slot)."""
    try:
        with Store.from_url(node.url, cluster=False).r as r:
            info = r.execute_command("CLUSTER", "INFO")
    except Exception as e:
        if unreachable(e):
            return False
        raise
    return "cluster_state:ok" in (info.decode() if isinstance(info, bytes) else str(info))


@pytest.fixture
def one_node_cluster(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """One server in cluster mode serving every slot: a Store on it is a cluster's (its
    client reads the slots), and killing it is every node away. It keeps its slots
    (nodes.conf) when started again on its directory and port."""
    node = EmbeddedServer(
        tmp_path / "node",
        port=free_cluster_port(),
        extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
    ).start()
    try:
        with Store.from_url(node.url, cluster=False).r as r:
            r.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for(lambda: cluster_ok(node), what="the one-node cluster to be ok")
        yield node
    finally:
        node.stop()


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


def test_an_own_pending_entry_delivered_too_often_is_buried_when_read_again_after_a_park(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim buries an entry delivered more than SFC_MAX_DELIVERIES times, so that one
    that makes the worker fail each time cannot block its job for ever. The re-read of a
    worker's own pending entries once their scope is served again counts a delivery each
    time too, and applied them without that check: it buries them the same way."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    served, away = host.scope("spent-a"), host.scope("spent-b")
    poisoned = host.submit(away, linear_recipe(1), job_id="poisoned").job
    fine = host.submit(away, linear_recipe(1), job_id="fine").job
    now = [100.0]
    worker = Worker(host.store(), SLOW_CLAIM, [served, away], clock=lambda: now[0], isolate=True)
    worker.refresh_scopes()
    # the poisoned job's start, read as the worker reads it, then its node dies
    ((_, entry, _),) = worker.store.read([away], 1, None)
    park_away(worker, away)
    worker.read_once(block_ms=5)
    assert away in worker.parked  # not tried before its backoff
    # delivered again and not acked up to SFC_MAX_DELIVERIES: as by a worker that read
    # it and failed each time (the server counts every read of it)
    assert worker.store.deliveries(away, entry) >= 1
    while worker.store.deliveries(away, entry) < FAST.max_deliveries:
        worker.store.read([away], 1, None, after="0")
    now[0] += PARK_MAX_S  # its node is back, and its try has come

    def commanded(job: str) -> bool:
        return any(data.job == job for _, _, data in host.equipment(away))

    wait_for(
        lambda: commanded(fine),
        timeout=20,
        step=lambda: worker.read_once(block_ms=5),
        what="the job after the poisoned one",
    )
    assert away not in worker.parked
    assert not commanded(poisoned)  # its start was not applied
    ((_, dead),) = worker.store.dead(away)
    assert dead[b"entry"].decode() == entry
    reason = (
        f"failed {FAST.max_deliveries} deliveries (SFC_MAX_DELIVERIES is {FAST.max_deliveries})"
    )
    assert dead[b"reason"].decode() == reason
    assert int(dead[b"deliveries"]) == FAST.max_deliveries + 1
    said = f"scope {away}: entry {entry} of job poisoned is dead: {reason}"
    assert said in messages(caplog, away)
    assert worker.store.deliveries(away, entry) == 0  # no longer pending


def test_an_own_pending_entry_buried_when_read_again_after_a_park_records_its_deliveries(
    host: Host,
) -> None:
    """An own pending entry read again after a park, under SFC_MAX_DELIVERIES, and buried
    for another reason (malformed) records the server's delivery count in its dead entry:
    it was applied as delivered once, and its dead entry said 1."""
    served, away = host.scope("count-a"), host.scope("count-b")
    now = [100.0]
    worker = Worker(host.store(), SLOW_CLAIM, [served, away], clock=lambda: now[0], isolate=True)
    worker.refresh_scopes()
    entry = worker.store.add_work(away, {k: v.encode() for k, v in BOGUS.items()})
    ((_, read, _),) = worker.store.read([away], 1, None)  # as the worker reads it
    assert read == entry
    park_away(worker, away)
    worker.read_once(block_ms=5)
    assert away in worker.parked
    # read again once more, as by a worker that failed: the re-read after the park is
    # its third delivery, within SFC_MAX_DELIVERIES (3)
    worker.store.read([away], 1, None, after="0")
    assert worker.store.deliveries(away, entry) == FAST.max_deliveries - 1
    now[0] += PARK_MAX_S  # its node is back, and its try has come
    wait_for(
        lambda: bool(worker.store.dead(away)),
        timeout=20,
        step=lambda: worker.read_once(block_ms=5),
        what="the malformed entry buried",
    )
    ((_, dead),) = worker.store.dead(away)
    assert dead[b"entry"].decode() == entry
    assert dead[b"reason"].startswith(b"malformed: "), dead
    assert int(dead[b"deliveries"]) == FAST.max_deliveries, dead
    assert worker.store.deliveries(away, entry) == 0  # no longer pending
    assert not worker._delivered


def test_own_entries_read_again_and_not_applied_are_read_again_with_the_servers_count(
    host: Host,
) -> None:
    """A scope's own pending entries, read again as it is served after a park, then a later
    scope's read raises (its group is gone here: NOGROUP) and the batch is not applied. The
    worker kept their delivery counts, which a later delivery used (its dead entry said
    fewer deliveries than it had), and had moved past them: they waited for
    SFC_AUTOCLAIM_IDLE, behind the scope's new entries. They are read again first, and
    counted as the server counts them."""
    away, served = host.scope("lost-a"), host.scope("lost-b")
    now = [100.0]
    worker = Worker(host.store(), SLOW_CLAIM, [away, served], clock=lambda: now[0], isolate=True)
    worker.refresh_scopes()
    entry = worker.store.add_work(away, {k: v.encode() for k, v in BOGUS.items()})
    worker.store.read([away], 1, None)  # as the worker reads it: delivered once
    park_away(worker, away)
    worker.read_once(block_ms=5)
    assert away in worker.parked
    now[0] += PARK_MAX_S  # its node is back, and its try has come
    worker.store.client(served).xgroup_destroy(keys.work(served), keys.GROUP)
    raised: list[Exception] = []

    def step() -> None:
        try:
            worker.read_once(block_ms=5)
        except redis.ResponseError as e:  # the served scope's group is gone
            assert "NOGROUP" in str(e), e
            raised.append(e)

    wait_for(
        lambda: worker.store.deliveries(away, entry) == 2,
        timeout=20,
        step=step,
        what="its entry read again",
    )
    assert raised and away not in worker.parked
    assert not worker._delivered
    worker.store.create_group(served)
    wait_for(
        lambda: bool(worker.store.dead(away)),
        timeout=20,
        step=lambda: worker.read_once(block_ms=5),
        what="the malformed entry buried",
    )
    ((_, dead),) = worker.store.dead(away)
    assert dead[b"entry"].decode() == entry
    assert int(dead[b"deliveries"]) == 3, dead  # the server's count: read three times


def test_a_jobs_entries_across_a_park_are_applied_in_their_order_and_once(host: Host) -> None:
    """A job whose answers straddle a park of its scope: two the worker had read when the
    node went away (pending for it), two queued before and not read yet, and those that come
    once it is back. They are applied in the order of the stream, each once, and not after
    SFC_AUTOCLAIM_IDLE (a minute here)."""
    served, away = host.scope("order-a"), host.scope("order-b")
    job = host.submit(away, wide_recipe(4, 2), job_id="wide").job
    other = host.submit(served, linear_recipe(1), job_id="other").job
    now = [100.0]
    worker = Worker(host.store(), SLOW_CLAIM, [served, away], clock=lambda: now[0], isolate=True)
    worker.refresh_scopes()
    responders = {served: host.responder(served), away: host.responder(away)}
    wait_for(
        lambda: len(host.equipment(away)) == 4,
        step=lambda: worker.read_once(block_ms=5),
        what="the first step's four commands",
    )
    wait_for(
        lambda: worker.store.unread(away) == 4,
        step=responders[away].pump,
        what="their four answers",
    )
    read = [row[1] for row in worker.store.read([away], 2, None)]  # as the worker reads
    assert len(read) == 2
    park_away(worker, away)

    def step() -> None:
        worker.read_once(block_ms=5)
        for scope, r in responders.items():
            if scope not in worker.parked:  # the node away: its commands wait
                r.pump()

    wait_for(host.ended(served, [other]), timeout=20, step=step, what="the other scope's job")
    assert away in worker.parked
    now[0] += PARK_MAX_S  # its node is back, and its try has come
    wait_for(host.ended(away, [job]), timeout=20, step=step, what="the job across the park")
    history = [decode_history(f) for _, f in worker.store.history(away, job, count=100)]
    applied = [h.entry for h in history if h.entry is not msgspec.UNSET]
    assert len(applied) == 1 + 4 + 4, history  # its start, then four answers a step
    assert applied == sorted(applied, key=lambda i: tuple(map(int, i.split("-")))), history
    assert applied[1:3] == read, (applied, read)
    for s, j in ((served, other), (away, job)):
        check(worker.store, s, {j: COMPLETED})


def test_own_pending_entries_come_before_new_ones_even_past_deleted_ones(host: Host) -> None:
    """A scope served again reads its own pending entries first. When a whole batch of them
    had been deleted meanwhile, the read found nothing to apply, and the blocking read took
    the scope's new entries before the own ones after that batch."""
    a, b = host.scope("own-a"), host.scope("own-b")
    for i in range(4):
        host.submit(a, linear_recipe(1), job_id=f"j{i}", start=True)
    worker = Worker(host.store(), replace(SLOW_CLAIM, read_count=2), [a, b], isolate=True)
    worker.refresh_scopes()
    pending = [row[1] for row in worker.store.read([a], 100, None)]
    assert len(pending) == 4
    worker.store.client(a).xdel(keys.work(a), pending[0], pending[1])  # by hand
    worker.routes.reread[a] = "0"  # as a park leaves it
    host.submit(a, linear_recipe(1), job_id="late")
    while worker.store.next_turn([a, b]) != b:
        pass  # the next blocking read is a's
    got: list[str] = []
    wait_for(
        lambda: len(got) >= 3,
        step=lambda: got.extend(row[1] for row in worker._read(50) if row[0] == a),
        what="its two own entries left and the new one",
    )
    assert got[:2] == pending[2:], (got, pending)  # the own ones first, in order
    assert a not in worker.routes.reread


def test_every_scope_away_falls_back_to_the_loops_backoff(
    server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Two scopes on one node, which dies: no scope of another node is left to serve, so
    none is parked, and the loop waits the node out as on one server. What the worker had
    read of both is applied once the node is back, before SFC_AUTOCLAIM_IDLE (a minute
    here)."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    host = Host(server.url)
    scopes = [host.scope("all-a"), host.scope("all-b")]
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        jobs = {
            s: [host.submit(s, linear_recipe(1), job_id=f"j{i}").job for i in range(3)]
            for s in scopes
        }
        responders = [host.responder(s, always("ok")) for s in scopes]
        worker = Worker(host.store(), SLOW_CLAIM, scopes, isolate=True)
        worker.refresh_scopes()
        assert len(worker.store.read(scopes, 100, None)) == 6  # read, as the worker reads
        server.kill()  # the node of every scope: the whole store
        threads.append(threading.Thread(target=worker.run, args=(stop,), daemon=True))
        threads += [threading.Thread(target=pump_until, args=(r, stop)) for r in responders]
        for t in threads:
            t.start()
        wait_for(
            lambda: any("the server is unreachable" in r.getMessage() for r in caplog.records),
            timeout=20,
            what="the worker to wait the node out",
        )
        server.start()
        for s in scopes:
            wait_for(host.ended(s, jobs[s]), timeout=20, what=f"the jobs of {s}")
        stop.set()
        for t in threads:
            t.join(10)
        said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert sum("its node cannot be reached" in m for m in said) == 0, said
        assert sum("the server is unreachable" in m for m in said) == 1, said
        assert sum("reconnected after" in m for m in said) == 1, said
        assert sum("served again after" in m for m in said) == 0, said
        (down,) = [r for r in caplog.records if "the server is unreachable" in r.getMessage()]
        assert down.levelno == logging.WARNING  # an outage, not a slot that moved
        assert down.getMessage().startswith(
            f"worker {worker.consumer}: the server is unreachable ("
        )
        assert down.getMessage().endswith("); reconnecting with backoff")
        assert "moved to" not in down.getMessage()
        assert not worker.parked
        for s in scopes:
            check(host.store(), s, dict.fromkeys(jobs[s], COMPLETED))
        host.check_exactly_once()
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        host.close()


def test_a_worker_waits_out_a_cluster_down_as_a_whole(
    one_node_cluster: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Every node away: the worker's wait-it-out branch reads the slots again, and redis-py
    raised "Redis Cluster cannot be connected" (no RedisError), which escaped and ended the
    worker (under serve: every worker, a crash loop, and serve). It waits, and goes on
    once the nodes are back."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    node = one_node_cluster
    host = Host(node.url)
    scopes = [host.scope("whole-a"), host.scope("whole-b")]
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        worker = Worker(host.store(), FAST, scopes)
        assert worker.store.cluster is not None  # a cluster's client, which reads the slots
        threads.append(threading.Thread(target=worker.run, args=(stop,), daemon=True))
        threads += [
            threading.Thread(
                target=pump_until, args=(host.responder(s, always("ok")), stop), daemon=True
            )
            for s in scopes
        ]
        for t in threads:
            t.start()
        for s in scopes:
            job = host.submit(s, linear_recipe(1), job_id="before").job
            wait_for(host.ended(s, [job]), timeout=20, what=f"a job of {s}")
        assert worker.routes.isolating()
        node.kill()  # every node of the cluster
        wait_for(
            lambda: any("the server is unreachable" in r.getMessage() for r in caplog.records),
            timeout=20,
            what="the worker to wait the cluster out",
        )
        mark = worker.store.routes_read_at  # the worker reads the slots again while all are away
        wait_for(lambda: worker.store.routes_read_at > mark, timeout=20, what="a read of the slots")
        wait_for(lambda: worker.store.routes_read_at > mark + 1, timeout=20, what="another read")
        node.start()
        wait_for(lambda: cluster_ok(node), timeout=30, what="the cluster to come back")
        assert threads[0].is_alive()
        for s in scopes:
            job = host.submit(s, linear_recipe(1), job_id="after").job
            wait_for(host.ended(s, [job]), timeout=30, what=f"a job of {s} after")
        assert threads[0].is_alive()
        host.check_exactly_once()
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        host.close()

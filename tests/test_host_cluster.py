"""The host on a local 3-node Valkey Cluster: the end-to-end set, with the assertions it has on
one server, over scopes spread so that every node holds some.

Every function call stays in one slot through `{scope}` and goes straight to the node of that
slot; `sfc:scopes` and `sfc:recipe:*` live in slots of their own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from host import jobs, keys
from host.equipment import Answer, publish_event
from host.store import Store
from host.worker import Worker
from tests.clusterkit import LocalCluster, move_slot
from tests.hostkit import FAST, Host, linear_recipe, new_scope, wait_for

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parent.parent
TIGHTENING = (ROOT / "examples/tightening-hold/recipe.json").read_bytes()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def chost(cluster: LocalCluster) -> Iterator[Host]:
    h = Host(cluster.url)
    try:
        yield h
        h.check_exactly_once()
    finally:
        h.close()


def spread_scopes(url: str, hint: str) -> list[str]:
    """One scope on each node of the cluster."""
    rc = RedisCluster.from_url(url)
    try:
        by_node: dict[str, str] = {}
        while len(by_node) < 3:
            scope = new_scope(hint)
            node = rc.get_node_from_key(keys.work(scope)).name
            by_node.setdefault(node, scope)
        return list(by_node.values())
    finally:
        rc.close()


def test_a_cluster_that_does_not_come_up_stops_the_nodes_it_started(tmp_path: Path) -> None:
    """A failed start left its three valkey-servers running, for ever after the test."""
    failed = LocalCluster(tmp_path)
    with pytest.raises(RuntimeError, match="the cluster did not come up"):
        failed.start(timeout=0)  # no cluster joins in no time
    assert [s.process is not None and s.process.poll() is not None for s in failed.servers] == [
        True
    ] * 3


def test_a_cluster_is_detected_and_the_library_is_on_every_primary(cluster: LocalCluster) -> None:
    store = Store.from_url(cluster.url)
    try:
        assert store.cluster is not None
        store.load_library()
        for url in cluster.urls:
            node = Store.from_url(url, cluster=False)
            names = [
                lib[b"library_name"] if isinstance(lib, dict) else lib[1]
                for lib in node.r.function_list()
            ]
            assert b"sfc_1" in names
            node.close()
    finally:
        store.close()


def test_jobs_in_scopes_on_every_node_complete_through_two_workers(
    cluster: LocalCluster, chost: Host
) -> None:
    scopes = spread_scopes(cluster.url, "spread")
    chost.scopes += scopes
    submitted = {
        s: [chost.submit(s, linear_recipe(3), job_id=f"j{i}").job for i in range(4)] for s in scopes
    }
    a, b = chost.worker(scopes), chost.worker(scopes)
    responders = [chost.responder(s) for s in scopes]
    done = lambda: all(chost.ended(s, js)() for s, js in submitted.items())  # noqa: E731
    chost.run([a, b], responders, done)
    for s, js in submitted.items():
        assert all(chost.order_path(s, j) == "Ended/Completed" for j in js)
    assert a.counters.outcome.applied > 0 and b.counters.outcome.applied > 0


def test_a_worker_of_every_registered_scope_reads_each_scope_on_its_own(
    cluster: LocalCluster, chost: Host
) -> None:
    scopes = spread_scopes(cluster.url, "registry")
    chost.scopes += scopes
    for s in scopes:
        chost.submit(s, linear_recipe(1), job_id="j")
    worker = Worker(chost.store(), FAST, None)
    worker.refresh_scopes()
    assert set(scopes) <= set(worker.scopes)
    chost.run(
        [worker],
        [chost.responder(s) for s in scopes],
        lambda: all(chost.ended(s, ["j"])() for s in scopes),
    )


def test_a_job_not_found_is_looked_for_on_every_node_in_one_pipeline_each(
    cluster: LocalCluster, chost: Host
) -> None:
    """`host.jobs.elsewhere_many` (a job not found: which other scopes hold it) asks each
    node for its own scopes' jobs (a pipeline a node): each one's EXISTS went to its node."""
    scopes = spread_scopes(cluster.url, "where")
    chost.scopes += scopes
    home, *others = scopes
    for s in others:
        chost.submit(s, linear_recipe(1), job_id="here", start=False)
    chost.submit(others[0], linear_recipe(1), job_id="once", start=False)
    store = chost.store()

    def exists() -> dict[str, int]:
        out = {}
        for url in cluster.urls:
            node = redis.Redis.from_url(url)
            stats: Any = node.info("commandstats")
            node.close()
            out[url] = int(stats.get("cmdstat_exists", {}).get("calls", 0))
        return out

    before = exists()
    found = jobs.elsewhere_many(store, home, ["here", "once", "nowhere"], scopes)
    assert found == {"here": others, "once": [others[0]], "nowhere": []}
    after = exists()
    assert sorted(after[u] - before[u] for u in after) == [0, 3, 3], (before, after)


def test_timeouts_and_redispatch_on_the_cluster(cluster: LocalCluster, chost: Host) -> None:
    scope = spread_scopes(cluster.url, "deadline")[2]
    chost.scopes.append(scope)
    job = chost.submit(scope, linear_recipe(1, timeout_s=1, max_attempts=2), job_id="j").job
    worker = chost.worker([scope])
    chost.run(
        [worker],
        [chost.responder(scope, lambda k, d: None)],
        chost.ended(scope, [job], "Aborted"),
        timeout=15,
    )
    assert chost.order(scope, job).result.fault_code == "timeout"
    assert [d.attempt for _, k, d in chost.equipment(scope) if k == "push"] == [1, 2]


def test_pull_events_with_duplicates_on_the_cluster(cluster: LocalCluster, chost: Host) -> None:
    from tests.test_host_events import QA, wait_recipe

    scope = spread_scopes(cluster.url, "events")[1]
    chost.scopes.append(scope)
    store = chost.store()
    for j in ("j1", "j2"):
        chost.submit(scope, wait_recipe({"Subject": "{jobId}"}), job_id=j)
    worker = chost.worker([scope])
    chost.run(
        [worker],
        [chost.responder(scope)],
        lambda: store.client(scope).zcard(keys.waits(scope, QA)) == 2,
    )
    for _ in range(2):  # the same event twice
        assert publish_event(store, scope, QA, subject="j2", outcome="ok", source="s", id="1")
    chost.run([worker], [], chost.ended(scope, ["j2"]))
    wait_for(
        lambda: store.client(scope).xlen(keys.work(scope)) == 0,
        step=lambda: worker.read_once(block_ms=5),
    )
    assert chost.order_path(scope, "j1") == "Running"
    assert worker.counters.outcome.duplicates == 1


def test_pause_and_resume_with_equipment_hold_on_the_cluster(
    cluster: LocalCluster, chost: Host
) -> None:
    scope = spread_scopes(cluster.url, "hold")[0]
    chost.scopes.append(scope)
    store = chost.store()
    job = chost.submit(scope, TIGHTENING, job_id="t").job
    worker = chost.worker([scope])

    def reply(kind: str, data: Any) -> Answer | None:
        if kind == "hold":
            return Answer(outcome="held")
        return None if data.command_id == "t:tighten#2" else Answer(outcome="ok")

    responder = chost.responder(scope, reply)
    sent = lambda: [(k, d.command_id) for _, k, d in chost.equipment(scope)]  # noqa: E731
    chost.run([worker], [responder], lambda: ("push", "t:tighten#2") in sent())
    assert jobs.pause(store, scope, job).ok
    chost.run([worker], [responder], lambda: ("withdraw", "t:tighten#2") in sent())
    assert jobs.resume(store, scope, job).ok
    chost.run([worker], [responder], chost.ended(scope, [job]))
    assert [c for k, c in sent() if k in ("push", "hold", "restart")] == [
        "t:clamp#1",
        "t:tighten#2",
        "t:tighten#3:hold",
        "t:tighten#4",
        "t:unclamp#5",
    ]


def test_a_killed_instance_is_taken_over_on_the_cluster(
    cluster: LocalCluster, chost: Host, tmp_path: Path
) -> None:
    scope = spread_scopes(cluster.url, "killed")[1]
    chost.scopes.append(scope)
    jobs_ = [chost.submit(scope, linear_recipe(2), job_id=f"j{i}").job for i in range(4)]
    marker = tmp_path / "stalled"
    env = {**os.environ, "SFC_AUTOCLAIM_IDLE": "300ms", "SFC_SWEEP_INTERVAL": "50ms"}
    a = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.host_runner",
            cluster.url,
            scope,
            "--stall-file",
            str(marker),
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        wait_for(marker.exists, timeout=20, what="instance A to hold entries")
        a.send_signal(signal.SIGKILL)
        a.wait(10)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    b = chost.worker([scope])
    chost.run([b], [chost.responder(scope)], chost.ended(scope, jobs_), timeout=20)
    assert b.counters.claimed == 4
    store = chost.store()
    assert store.client(scope).xpending(keys.work(scope), keys.GROUP)["pending"] == 0
    assert json.dumps(sorted(chost.order_path(scope, j) for j in jobs_)).count("Completed") == 4


def test_scripted_equipment_waits_out_a_cluster_that_is_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A node gone makes the others answer CLUSTERDOWN: `sfc equipment` (and the MQTT
    bridge) took that for a refused command and exited, while the workers waited it out."""
    from host.scripted import ScriptedEquipment, load_host_script

    own = LocalCluster(tmp_path).start()
    stop = threading.Event()
    thread: threading.Thread | None = None
    h = Host(own.url)
    try:
        scope = spread_scopes(own.url, "down")[0]
        h.scopes.append(scope)
        store = h.store()
        store.load_library()
        rc = RedisCluster.from_url(own.url)
        holder = rc.get_node_from_key(keys.work(scope)).port
        rc.close()
        other = next(s for s in own.servers if s.port != holder)
        equipment = ScriptedEquipment(Store.from_url(own.url), scope, load_host_script(b"{}"))
        thread = threading.Thread(target=equipment.run, args=(stop,), kwargs={"block_ms": 20})
        thread.start()
        assert other.process is not None
        other.process.kill()
        other.process.wait(10)
        wait_for(
            lambda: "the server is unreachable" in caplog.text,
            timeout=20,
            what="the equipment to see the cluster down",
        )
        (down,) = [r for r in caplog.records if "the server is unreachable" in r.getMessage()]
        assert down.levelno == logging.WARNING  # an outage, not a slot that moved
        assert down.getMessage() == (
            f"equipment of scope {scope}: the server is unreachable (The cluster is down); "
            "reconnecting with backoff"
        )
        other.start()
        wait_for(lambda: _cluster_ok(own), timeout=30, what="the cluster back")
        assert thread.is_alive()
        job = h.submit(scope, linear_recipe(2), job_id="d").job
        h.run([h.worker([scope])], [], h.ended(scope, [job]), timeout=20)
        assert h.order_path(scope, job) == "Ended/Completed"
    finally:
        stop.set()
        if thread is not None:
            thread.join(10)
        h.close()
        own.stop()


def _cluster_ok(c: LocalCluster) -> bool:
    import redis

    for s in c.servers:
        client = redis.Redis(host="127.0.0.1", port=s.port)
        try:
            if "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO").decode():
                return False
        except redis.ConnectionError:
            return False
        finally:
            client.close()
    return True


def test_a_wait_after_a_read_that_found_a_slot_moved_does_not_wait(tmp_path: Path) -> None:
    """A loop that cannot reach a node reads the slots (refresh_routes), then waits out its
    backoff (wait_out), which ended early only when one of its own reads found the move:
    when the loop's read was the first to see a failover, it waited the whole backoff, up
    to 5 s, with a replica serving already."""
    own = LocalCluster(tmp_path).start()
    store = Store.from_url(own.url)

    class Waits(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[float | None] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.asked.append(timeout)
            if self.stop_when_asked:
                self.set()  # the loop's stop comes while it waits: the test waits no longer
            return super().wait(timeout)

        stop_when_asked = False

    try:
        scope = "moves"
        store.client(scope).ping()  # the slot map is read
        move_slot(own, keys.work(scope))
        assert store.refresh_routes(now=True)  # the loop's own read sees the move
        stop = Waits()
        store.wait_out(stop, 2)
        assert stop.asked == []  # it went on at once
        stop.stop_when_asked = True
        store.wait_out(stop, 60)  # nothing moved since: the backoff is waited out
        assert len(stop.asked) == 1, stop.asked
        assert 0 < (stop.asked[0] or 0) <= 60, stop.asked
    finally:
        store.close()
        own.stop()


def test_a_scope_whose_slot_moves_to_another_node_is_served_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reshard (adding a node) moves slots: the worker and the equipment, which call the
    node of their scope's slot by a map read at their start, got MOVED for ever.

    The MOVED is routine (the node answered; a manual failover answers the same): each
    says at info that the slot moved, where to, and that it reads the slots again. They
    said at warning that the server was unreachable, and then that they had reconnected;
    a worker of several scopes, that the scope's node could not be reached."""
    from prometheus_client import REGISTRY

    from host.metrics import WorkerMetrics
    from host.scripted import ScriptedEquipment, load_host_script

    caplog.set_level(logging.INFO, logger="sfc.host")
    own = LocalCluster(tmp_path).start()
    stop = threading.Event()
    h = Host(own.url)
    threads: list[threading.Thread] = []
    try:
        scope, other, _ = spread_scopes(own.url, "moved")
        h.scopes += [scope, other]
        h.store().load_library()
        worker = Worker(Store.from_url(own.url), FAST, [scope])
        several = Worker(Store.from_url(own.url), FAST, [scope, other], metrics=WorkerMetrics())
        equipment = ScriptedEquipment(Store.from_url(own.url), scope, load_host_script(b"{}"))
        for target in (worker.run, several.run, equipment.run):
            threads.append(threading.Thread(target=target, args=(stop,), daemon=True))
            threads[-1].start()
        first = h.submit(scope, linear_recipe(2), job_id="m1").job
        wait_for(h.ended(scope, [first]), timeout=20, what="the first job")
        slot, port = move_slot(own, keys.work(scope))
        fresh = Host(own.url)  # a new process (`sfc job submit`) reads the new map
        try:
            second = fresh.submit(scope, linear_recipe(2), job_id="m2").job
            wait_for(fresh.ended(scope, [second]), timeout=30, what="the job after the move")
            assert fresh.order_path(scope, second) == "Ended/Completed"
        finally:
            fresh.close()
        # the first call after the move may come while its keys move (ASK, or TRYAGAIN for
        # a call of keys moved and not yet), or after (MOVED)
        lines = [
            re.compile(
                rf"{re.escape(who)}: slot {slot} ((moved|is moving) to 127\.0\.0\.1:{port} "
                r"\(a failover or a reshard\); reading the slots again|is being moved "
                r"\(TRYAGAIN: a reshard under way, its keys on two nodes\); trying it again "
                r"with backoff)"
            )
            for who in (
                f"worker {worker.consumer}",
                f"scope {scope}",
                f"equipment of scope {scope}",
            )
        ]

        def said_once(line: re.Pattern[str]) -> bool:
            found = [r for r in caplog.records if line.fullmatch(r.getMessage())]
            assert len(found) <= 1 and all(r.levelno == logging.INFO for r in found), found
            return bool(found)

        wait_for(lambda: all(map(said_once, lines)), timeout=10, what="each to see the move")
        said = [(r.levelno, r.getMessage()) for r in caplog.records]
        for level, text in said:
            assert "unreachable" not in text and "cannot be reached" not in text, said
            assert "reconnected after" not in text, said
            assert level < logging.WARNING, said
        assert not REGISTRY.get_sample_value("sfc_worker_scopes_parked_total", {"scope": scope})
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        h.close()
        own.stop()


def test_an_mqtt_bridges_hold_on_its_client_id_follows_its_slot(tmp_path: Path) -> None:
    """The hold's key lives in a slot of its own; when a reshard moved it, every renewal got
    MOVED, and the bridge was cut off from its broker for good."""
    from host.mqtt import ClientLease

    own = LocalCluster(tmp_path).start()
    store = Store.from_url(own.url)
    lease = ClientLease(store, "moving-client", "b-1", ttl_ms=1500)
    said: list[str] = []
    try:
        store.load_library()
        lease.take()
        lease.keep(lambda: said.append("fence"), lambda: said.append("unfence"))
        wait_for(lambda: lease.renewed >= 1, timeout=10, what="a renewal")
        move_slot(own, lease.key)
        before = lease.renewed
        wait_for(lambda: lease.renewed >= before + 3, timeout=15, what="renewals after the move")
        assert "fence" not in said, said
    finally:
        lease.release()
        store.close()
        own.stop()

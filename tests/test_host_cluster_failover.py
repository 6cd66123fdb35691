"""The host on a Valkey Cluster with replicas, through a failover: a primary SIGKILLed mid-run
(its replica is elected in its place), and a manual failover (CLUSTER FAILOVER on a replica).

Real processes: a 3+3 node cluster (tests/clusterkit.py), one `sfc serve --redis` with two
workers serving a scope on each primary, and one `sfc equipment` per scope. Every job ends
as its script says, none lost, no entry applied twice and no command appended twice
(tests/faultkit.py `check`).

Replication is asynchronous: a write the old primary acknowledged just before it died may be
missing on the replica. The jobs are submitted, and the test waits until the replicas hold
them, before the kill; what is in flight then (commits, answers, acknowledgements, ticks) is
the workers' and the equipment's, and the host's design covers its loss: a commit that is
gone leaves its entries pending (read again or claimed), a command appended again keeps its
id (the equipment knows it), and an answer that is gone is waited for until its deadline,
which the sweep fires, and the action is sent again (a new attempt). The recipes have short
deadlines and three attempts for that.

The short forms run by default; the long forms are marked `faults_long` (CI runs them; a
developer with `-m faults_long` or SFC_FAULTS_LONG=1).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import redis

from host import keys
from host.entries import decode_equipment
from host.store import Store, unreachable, unreachable_reason
from tests.clusterkit import Node, ReplicatedCluster, sockets_to
from tests.faultkit import (
    COMPLETED,
    FAST_ENV,
    ROOT,
    SFC,
    End,
    chain_recipe,
    check,
    ended_count,
    print_figures,
    settled,
    submit_jobs,
    wait_until,
)
from tests.hostkit import new_scope

pytestmark = pytest.mark.cluster

RECIPE = chain_recipe(["a1", "a2", "a3", "a4"], timeout_s=4, max_attempts=3)
"""Short deadlines, three attempts: an answer lost with the old primary is sent again."""


@pytest.fixture
def rcluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    c = ReplicatedCluster(tmp_path / "cluster").start()
    try:
        yield c
    finally:
        c.stop()


class Plant:
    """`sfc serve --redis URL --scope ... --workers 2` and one `sfc equipment` per scope,
    each in a process group of its own, their stderr in files under `tmp`."""

    def __init__(self, url: str, scopes: list[str], tmp: Path) -> None:
        self.url = url
        self.scopes = scopes
        self.tmp = tmp
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        script = tmp / "script.json"
        script.write_text(json.dumps({"default": "ok@300"}))
        self.env = {**os.environ, **FAST_ENV}
        serve = [SFC, "serve", "--redis", url, "--workers", "2"]
        for s in scopes:
            serve += ["--scope", s]
        self._start("serve", serve)
        for i, s in enumerate(scopes):
            self._start(
                f"equipment{i}",
                [SFC, "equipment", "--redis", url, "--scope", s, "--script", str(script)],
            )

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        self.processes[name] = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )

    def log(self, name: str) -> str:
        try:
            return (self.tmp / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def check_alive(self) -> None:
        for name, p in self.processes.items():
            if p.poll() is not None:
                raise AssertionError(f"{name} exited with {p.returncode}: {self.log(name)}")

    def wait_serving(self) -> None:
        """Until both workers serve every scope (each logs 'serving scope S')."""

        def serving() -> bool:
            self.check_alive()
            text = self.log("serve")
            return all(text.count(f"serving scope {s} ") >= 2 for s in self.scopes)

        wait_until(serving, timeout=30, what="the workers to serve every scope")

    def close(self) -> None:
        for p in self.processes.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in self.processes.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in self._logs:
            log.close()


def scopes_on_every_primary(c: ReplicatedCluster, hint: str) -> dict[str, Node]:
    """One scope on each primary: scope -> its primary."""
    by_node: dict[int, str] = {}
    nodes: dict[str, Node] = {}
    while len(by_node) < len(c.primaries()):
        scope = new_scope(hint)
        node = c.node_of(keys.work(scope))
        if node.port not in by_node:
            by_node[node.port] = scope
            nodes[scope] = node
    return nodes


def resent(store: Store, scope: str) -> int:
    """The commands of the scope sent again after a deadline (attempt 2 or more)."""
    rows = [decode_equipment(i, f) for i, f in store.equipment_entries(scope)]
    return sum(1 for e in rows if e.kind == "push" and e.data.attempt > 1)


def added(node: Node, key: str) -> int:
    """How many entries the stream `key` has had appended on `node` (XINFO STREAM
    entries-added, which trimming does not lower)."""
    with node.client() as r:
        info: dict[str, object] = r.xinfo_stream(key)
    return int(str(info["entries-added"]))


def failover_run(
    c: ReplicatedCluster,
    tmp: Path,
    *,
    how: str,
    jobs: int,
    rounds: int = 1,
    every_shard: bool = False,
    seed_node: bool = False,
) -> None:
    """`jobs` jobs a scope, submitted in `rounds` + 1 waves. In each round, once the
    victim's scope has commands out, its primary is handed over to its replica: `how` is
    "kill" (SIGKILL, an automatic failover), "lost" (the replica is cut off first and the
    primary writes on without it, then killed: its last writes are lost) or "manual"
    (CLUSTER FAILOVER). The next wave is submitted once the replica serves. A killed node is
    started again, and comes back as a replica. The victim is a primary the processes were
    not given as their URL, or with `every_shard` each shard's in turn, that one too, or with
    `seed_node` the one they were given. Every job completes, none twice."""
    t0 = time.monotonic()
    where = scopes_on_every_primary(c, how)
    scopes = list(where)
    store = Store.from_url(c.url)
    plant: Plant | None = None
    expected: dict[str, dict[str, End]] = {s: {} for s in scopes}
    handovers: list[str] = []
    lost: list[int] = []
    try:
        store.load_library()
        plant = Plant(c.url, scopes, tmp)
        plant.wait_serving()
        per_wave = max(1, jobs // (rounds + 1))
        others = [s for s in scopes if (where[s].port == c.nodes[0].port) == seed_node]
        for w in range(rounds + 1):
            fresh = Store.from_url(c.url)  # `sfc job submit` is a process of its own
            try:
                for s in scopes:
                    for j in submit_jobs(fresh, s, RECIPE, f"w{w}", per_wave):
                        expected[s][j] = COMPLETED
            finally:
                fresh.close()
            if w == rounds:
                break
            c.wait_replicated()  # the orders are on both: what is in flight is the host's
            victim = scopes[w % len(scopes)] if every_shard else others[w % len(others)]
            handovers.append(handover(c, store, plant, victim, expected[victim], how, lost))
        for s in scopes:
            wait_until(
                lambda s=s: plant.check_alive() or settled(store, s, expected[s])(),  # type: ignore[union-attr]
                timeout=120,
                what=f"every job of {s} to end",
            )
        figures = [check(store, s, expected[s]) for s in scopes]
        plant.check_alive()
        serve = plant.log("serve")
        if how == "manual":
            # nothing failed: the old primary answered MOVED, which is routine, said at info
            assert "(a failover or a reshard); reading the slots again" in serve, serve
            assert "the server is unreachable" not in serve, serve
            assert "cannot be reached" not in serve, serve
        else:
            # what a plant engineer sees: the workers lose the node, and come back
            assert "the server is unreachable" in serve, serve
            assert "reconnected after" in serve, serve
        for name in plant.processes:
            assert "Traceback" not in plant.log(name), plant.log(name)
        print_figures(
            f"cluster failover ({how})",
            jobs=sum(len(x) for x in expected.values()),
            handovers=handovers,
            equipment_entries_lost=lost,
            commands=sum(f.commands for f in figures),
            sent_again=sum(resent(store, s) for s in scopes),
            seconds=f"{time.monotonic() - t0:.1f}",
        )
        plant.close()  # SIGTERM to each process group, as a service manager's stop
        assert "did not stop" not in plant.log("serve"), plant.log("serve")
    finally:
        if plant is not None:
            plant.close()
        store.close()


def handover(
    c: ReplicatedCluster,
    store: Store,
    plant: Plant,
    scope: str,
    jobs: dict[str, End],
    how: str,
    lost: list[int],
) -> str:
    """Hand the primary of `scope` over to its replica mid-run (see `failover_run`); with
    "lost", add to `lost` how many equipment entries the primary had that the replica has
    not. Returns "old->new"."""
    primary = c.node_of(keys.work(scope))
    replica = c.replica_of(primary)
    key = keys.equipment(scope)

    def busy() -> bool:
        plant.check_alive()
        return len(store.equipment_entries(scope)) >= len(jobs)  # the wave's first commands

    wait_until(busy, timeout=30, what=f"commands out in {scope}")
    assert ended_count(store, scope, jobs) < len(jobs), "nothing in flight at the failover"
    if how == "manual":
        c.failover(replica)
        moved_words(primary, replica, keys.work(scope))
    else:
        if how == "lost":
            c.cut_off(replica)
            at_cut = added(primary, key)
            wait_until(
                lambda: added(primary, key) >= at_cut + 2,
                timeout=30,
                what="the primary to write on without its replica",
            )
            before = added(primary, key)
        c.kill(primary)
        c.wait_promoted(replica)
        if how == "lost":
            lost.append(before - added(replica, key))
            assert lost[-1] > 0, "the replica had every write: nothing was lost"
        c.restart(primary, replica)
    store.refresh_routes()
    return f"{primary.name}->{replica.name}"


def moved_words(old: Node, new: Node, key: str) -> None:
    """A call to the old primary of `key` answers MOVED; the log of a worker or adapter says
    that the slot moved, and where to (Store.unreachable_reason), not a bare 'SLOT
    HOST:PORT'."""
    slot = int(new.call("CLUSTER", "KEYSLOT", key))
    with old.client() as r, pytest.raises(redis.exceptions.MovedError) as moved:
        r.xlen(key)
    assert unreachable(moved.value)
    assert unreachable_reason(moved.value) == (
        f"slot {slot} moved to 127.0.0.1:{new.port} (a failover or a reshard)"
    )


def test_a_primary_killed_mid_run_with_writes_its_replica_lacks_loses_no_job(
    rcluster: ReplicatedCluster, tmp_path: Path
) -> None:
    """The replica is cut off before the kill, so the failover loses the primary's last
    writes (commits, answers, acknowledgements): the jobs still end, each once."""
    failover_run(rcluster, tmp_path, how="lost", jobs=8)


def test_the_seed_nodes_primary_killed_mid_run_loses_no_job(
    rcluster: ReplicatedCluster, tmp_path: Path
) -> None:
    """The primary every process was given as its URL is SIGKILLed: the clients learn the
    slots from the other nodes, and the jobs end, each once."""
    failover_run(rcluster, tmp_path, how="kill", jobs=8, seed_node=True)


def test_a_manual_failover_mid_run_loses_nothing(
    rcluster: ReplicatedCluster, tmp_path: Path
) -> None:
    failover_run(rcluster, tmp_path, how="manual", jobs=8)


def test_a_wait_for_an_unreachable_node_ends_once_its_replica_took_over(
    rcluster: ReplicatedCluster,
) -> None:
    """The worker, the equipment and the MQTT bridge wait out a node they cannot reach with
    a backoff that grows to 5 s (Store.wait_out). A failover here takes a second or two, but
    they went on only at the end of the backoff they were in: 'reconnected after 6.3 s', and
    commands expired at the equipment meanwhile. The wait ends once the slots moved."""
    store = Store.from_url(rcluster.url)
    stop = threading.Event()
    ended = threading.Event()
    thread = threading.Thread(target=lambda: (store.wait_out(stop, 600), ended.set()))
    try:
        scope = next(
            s for s, n in scopes_on_every_primary(rcluster, "wait").items() if n.name == "p1"
        )
        primary = rcluster.node_of(keys.work(scope))
        replica = rcluster.replica_of(primary)
        rcluster.kill(primary)
        thread.start()
        rcluster.wait_promoted(replica)
        wait_until(ended.is_set, timeout=30, what="the wait to end after the failover")
        assert store.client(scope).connection_pool.connection_kwargs["port"] == replica.port
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(10)
        store.close()


def test_a_store_closes_its_sockets_to_a_node_that_left_and_all_at_close(
    rcluster: ReplicatedCluster,
) -> None:
    """The seed node's primary is killed: once the slots are read again (by redis-py itself
    on a failed call, as here, or by the store), its connections are closed, the kept one
    too; and close closes every other. RedisCluster.close closed none of a node's
    connections, and none of a node that had left the cluster's view: the garbage collector
    did, or warned of an unclosed socket."""
    c = rcluster
    seed = c.nodes[0]
    scope = next(s for s, n in scopes_on_every_primary(c, "gone").items() if n is seed)
    store = Store.from_url(c.url)
    try:
        store.load(scope, ["a"])  # a round trip: its connection is kept
        store.client(scope).xlen(keys.work(scope))  # another, idle in the node's pool
        assert sockets_to([seed.port]) == 2
        replica = c.replica_of(seed)
        c.kill(seed)
        c.wait_promoted(replica)
        assert sockets_to([seed.port]) == 2  # the peer is gone: they wait in CLOSE_WAIT
        assert store.cluster is not None
        store.cluster.nodes_manager.initialize()  # what redis-py does on a failed call
        assert store.client(scope).connection_pool.connection_kwargs["port"] == replica.port
        assert sockets_to([seed.port]) == 0
        c.restart(seed, replica)  # back as a replica: a node of the view again
        store.refresh_routes(now=True)
        store.load(scope, ["a"])
        assert sockets_to([n.port for n in c.nodes]) > 0
    finally:
        store.close()
    assert sockets_to([n.port for n in c.nodes]) == 0


@pytest.mark.faults_long
def test_long_every_primary_killed_in_turn(rcluster: ReplicatedCluster, tmp_path: Path) -> None:
    failover_run(rcluster, tmp_path, how="kill", jobs=40, rounds=3, every_shard=True)


@pytest.mark.faults_long
def test_long_primaries_killed_with_writes_their_replicas_lack(
    rcluster: ReplicatedCluster, tmp_path: Path
) -> None:
    failover_run(rcluster, tmp_path, how="lost", jobs=40, rounds=3, every_shard=True)


@pytest.mark.faults_long
def test_long_manual_failovers_mid_run(rcluster: ReplicatedCluster, tmp_path: Path) -> None:
    failover_run(rcluster, tmp_path, how="manual", jobs=40, rounds=3, every_shard=True)


STOPPED_BY_TWO_SIGNALS = """
import os, signal, sys, threading
from host.serve import stop_on_signals
stop = threading.Event()
stop_on_signals(stop)
with stop._cond:  # this thread holds the event's lock, as inside stop.wait() or stop.set()
    os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C
    os.kill(os.getpid(), signal.SIGTERM)  # serve passing the stop on
sys.exit(0 if stop.wait(10) else 3)
"""


def test_a_worker_stops_on_two_signals_that_come_together() -> None:
    """A worker's SIGTERM and SIGINT handlers set its stop event themselves, in the main
    thread, between two bytecodes; when that thread held the event's lock (in `stop.wait`,
    or in the `set` of a first signal), the handler waited for it for ever. A worker gets
    two at once when the whole process group is signalled (Ctrl-C, a service manager's
    stop) and serve passes the stop on: this test's teardown saw a worker hang until serve
    killed it 15 s later."""
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_BY_TWO_SIGNALS], cwd=ROOT, timeout=30, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()

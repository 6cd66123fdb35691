"""A worker of several scopes on a Valkey Cluster, one of whose nodes goes away: it parks the
scope of that node and serves the others (docs/host.md, "A node away").

A local 3-node cluster without replicas (tests/clusterkit.py), with
`cluster-require-full-coverage no`, so that the two nodes left serve their slots while the
third is down. One worker (`Worker.run` on a thread) serves three scopes, one on each node;
a node is SIGKILLed mid-run, and started again on its directory and port, which keeps its
data. Before the fix, the worker's round stopped at the node away for every scope.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY
from redis.crc import key_slot

from host import keys
from host.equipment import always, respond
from host.metrics import WorkerMetrics
from host.scripted import ScriptedEquipment, load_host_script
from host.server import RANGES, EmbeddedServer
from host.store import Store, unreachable
from host.worker import Worker
from tests.clikit import processes, sfc
from tests.clusterkit import LocalCluster, end_move, move_slot
from tests.faultkit import COMPLETED, check
from tests.hostkit import FAST, Host, linear_recipe, messages, new_scope, pump_until, wait_for
from tests.test_host_scripted import wait_recipe

pytestmark = pytest.mark.cluster

LOGGER = "sfc.host.worker"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster").start()
    try:
        partial(c.servers)
        yield c
    finally:
        c.stop()


def partial(servers: list[EmbeddedServer]) -> None:
    """Let every node serve its slots while another is down (the default stops the whole
    cluster once a node is marked failing, after `cluster-node-timeout`)."""
    for s in servers:
        with Store.from_url(s.url, cluster=False).r as r:
            r.config_set("cluster-require-full-coverage", "no")


def rejoin(cluster: LocalCluster, node: EmbeddedServer) -> None:
    """Start a killed `node` again (its directory and port: it keeps its data and rejoins),
    let it serve while another is down (`partial`), and wait until the cluster is ok."""
    node.start()
    partial([node])
    index = cluster.servers.index(node)
    wait_for(lambda: cluster_ok(cluster), timeout=20, what=f"node {index} to rejoin")


def scope_on(node: int, hint: str) -> str:
    """A new scope whose slot (of `{scope}`) is in the range of node `node` (RANGES)."""
    low, high = RANGES[node]
    while True:
        scope = new_scope(hint)
        if low <= key_slot(keys.work(scope).encode()) <= high:
            return scope


def cluster_ok(cluster: LocalCluster) -> bool:
    """Every node answers, knows the three, and says `cluster_state:ok`."""
    for s in cluster.servers:
        try:
            with Store.from_url(s.url, cluster=False).r as r:
                info = r.execute_command("CLUSTER", "INFO")
        except Exception as e:
            if unreachable(e):
                return False
            raise
        text = info.decode() if isinstance(info, bytes) else str(info)
        if "cluster_state:ok" not in text or "cluster_known_nodes:3" not in text:
            return False
    return True


def test_a_node_away_parks_its_scope_and_the_others_run_to_the_end(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    scopes = [scope_on(i, f"iso{i}") for i in range(3)]
    away, node = scopes[1], cluster.servers[1]
    host = Host(cluster.url)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        host.scopes += scopes
        jobs = {
            s: [host.submit(s, linear_recipe(3), job_id=f"j{i}").job for i in range(4)]
            for s in scopes
        }
        worker = Worker(host.store(), FAST, scopes)
        responders = {s: host.responder(s, always("ok")) for s in scopes}
        threads.append(threading.Thread(target=worker.run, args=(stop,), daemon=True))
        threads[-1].start()
        # every job started (its first command pushed), none can end: nobody answers yet
        wait_for(
            lambda: all(len(host.equipment(s)) >= len(jobs[s]) for s in scopes),
            timeout=20,
            what="every job's first command",
        )
        node.kill()
        for s in scopes:
            threads.append(threading.Thread(target=pump_until, args=(responders[s], stop)))
            threads[-1].start()
        for s in (scopes[0], scopes[2]):
            wait_for(host.ended(s, jobs[s]), timeout=20, what=f"the jobs of {s}, node 1 away")
        assert node.process is not None and node.process.poll() is not None, "node 1 came back"
        said = messages(caplog, away)
        assert any("its node cannot be reached" in m for m in said), said
        rejoin(cluster, node)
        wait_for(host.ended(away, jobs[away]), timeout=20, what=f"the jobs of {away}")
        said = messages(caplog, away)
        assert sum("its node cannot be reached" in m for m in said) == 1, said
        assert sum("served again after" in m for m in said) == 1, said
        for r in caplog.records:  # an outage, not a slot that moved: said at warning
            if getattr(r, "scope", None) == away and "again" in r.getMessage():
                assert r.levelno == logging.WARNING, r.getMessage()
                assert "moved to" not in r.getMessage()
        stop.set()
        for t in threads:
            t.join(10)
        assert worker.parked == {}
        for s in scopes:
            check(host.store(), s, dict.fromkeys(jobs[s], COMPLETED))
        host.check_exactly_once()
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        host.close()


def test_entries_read_before_the_node_went_away_are_applied_when_it_is_back(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Entries a batch had read, and not committed, when their node went away stay pending
    for the worker; they are applied as soon as their scope is served again, not after
    SFC_AUTOCLAIM_IDLE (a minute here, longer than the test waits)."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scopes = [scope_on(i, f"own{i}") for i in range(3)]
    away, node = scopes[2], cluster.servers[2]
    host = Host(cluster.url)
    try:
        host.scopes += scopes
        slow_claim = replace(FAST, autoclaim_idle=60_000)
        jobs = {
            s: [host.submit(s, linear_recipe(1), job_id=f"j{i}").job for i in range(3)]
            for s in scopes
        }
        worker = Worker(host.store(), slow_claim, scopes, metrics=WorkerMetrics())
        worker.refresh_scopes()
        # a batch of the scope read by the worker, as its read does, then its node dies
        read = worker.store.read([away], 100, None)
        assert len(read) == len(jobs[away])
        node.kill()
        responders = [host.responder(s, always("ok")) for s in scopes if s != away]

        def step() -> None:
            worker.sweep_once()
            worker.read_once(block_ms=5)
            for r in responders:
                r.pump()

        for s in scopes[:2]:
            wait_for(host.ended(s, jobs[s]), timeout=20, step=step, what=f"the jobs of {s}")
        assert away in worker.parked
        # the park is counted, once, however often the node was tried meanwhile
        assert parks(away) == 1
        assert parks(scopes[0]) == parks(scopes[1]) == 0
        node.start()
        partial([node])
        wait_for(lambda: cluster_ok(cluster), timeout=20, what="node 2 to rejoin")
        responders.append(host.responder(away, always("ok")))
        wait_for(host.ended(away, jobs[away]), timeout=20, step=step, what=f"the jobs of {away}")
        assert away not in worker.parked
        for s in scopes:
            check(host.store(), s, dict.fromkeys(jobs[s], COMPLETED))
        said = messages(caplog, away)
        assert sum("served again after" in m for m in said) == 1, said
        assert parks(away) == 1
    finally:
        host.close()


def parks(scope: str) -> float:
    """`sfc_worker_scopes_parked_total` of `scope` in this process (WorkerMetrics)."""
    return REGISTRY.get_sample_value("sfc_worker_scopes_parked_total", {"scope": scope}) or 0.0


def test_a_scope_whose_node_is_away_is_taken_up_at_a_later_refresh(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A refresh finds one scope's node away and another's slot moved (its map of the slots
    read before: MOVED). It takes up the others and goes on; the one away is said once, at
    warning, and taken up once its node is back; the moved one is said at info, and taken
    up at the next refresh, where the slots read again show it. A worker of the registry
    whose node (of `sfc:scopes`) is away keeps the scopes it has. (The words, and the
    registry's worker serving on, with no cluster: tests/test_cluster_routes.py.)"""
    caplog.set_level(logging.INFO, logger=LOGGER)
    on = next(i for i, (low, high) in enumerate(RANGES) if low <= key_slot(b"sfc:scopes") <= high)
    scopes = [scope_on(i, f"late{i}") for i in range(3) if i != on]
    away, node = scope_on(on, "late-away"), cluster.servers[on]
    moved = scope_on((on + 1) % 3, "late-moved")  # moves to the next node, which stays
    host = Host(cluster.url)
    try:
        store = host.store()  # its map of the slots is read while every node is up
        slot, port = move_slot(cluster, keys.work(moved))
        for scope in scopes:
            store.register_scope(scope)
        registry = Worker(host.store(), FAST, None)  # (its client reads the map again)
        assert registry.refresh_scopes() == sorted(scopes)
        node.kill()
        assert registry.refresh_scopes() == []  # the registry's node away: it goes on
        assert registry.scopes == sorted(scopes)
        worker = Worker(store, FAST, [*scopes, away, moved])
        assert worker.refresh_scopes() == scopes
        assert worker.refresh_scopes() == [moved]
        assert store.node_name(moved) == f"127.0.0.1:{port}"
        said = messages(caplog, away)
        assert sum("not taken up now: its node cannot be reached" in m for m in said) == 1, said
        (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert "not taken up now" in line.getMessage() and line.scope == away  # type: ignore[attr-defined]
        assert "moved to" not in line.getMessage()
        (moving,) = [r for r in caplog.records if "moved to" in r.getMessage()]
        assert moving.levelno == logging.INFO
        assert moving.getMessage().startswith(f"scope {moved}: slot {slot} moved to "), moving
        node.start()
        partial([node])
        wait_for(lambda: cluster_ok(cluster), timeout=20, what=f"node {on} to rejoin")
        assert worker.refresh_scopes() == [away]
        assert worker.scopes == [*scopes, moved, away]
    finally:
        host.close()


def test_a_reshard_stuck_with_a_scopes_keys_on_two_nodes_is_a_move_not_an_outage(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A reshard stopped mid-migration: some of a scope's keys moved (its indexes), some not
    (its work stream), the slot left migrating and importing. A read of the work stream goes
    through; a commit or a sweep, of keys on both nodes, answers TRYAGAIN. That was taken
    for an outage: the read ended the park, the commit parked it again, two warnings a
    round for ever, each counted as a park, and never the stuck warning. It is a move: said
    once at info, once at warning after SFC_OUTAGE_THRESHOLD, and its end at info once the
    reshard is over. (The worker's clock is stepped.)"""
    caplog.set_level(logging.INFO, logger=LOGGER)
    moving, other = scope_on(1, "rehash"), scope_on(0, "rehash-other")
    host = Host(cluster.url)
    now = [1000.0]
    try:
        host.scopes += [moving, other]
        settings = replace(FAST, outage_threshold=2000)
        worker = Worker(
            host.store(), settings, [moving, other], clock=lambda: now[0], metrics=WorkerMetrics()
        )
        worker.refresh_scopes()
        first = host.submit(moving, linear_recipe(3), job_id="first").job
        wait_for(
            lambda: worker.store.unread(moving) == 0,
            step=lambda: worker.read_once(block_ms=5),
            what="the first job started (its indexes written)",
        )
        later_jobs = [host.submit(moving, linear_recipe(3), job_id=f"j{i}").job for i in range(2)]
        slot, port = move_slot(
            cluster, keys.work(moving), only=[keys.active(moving), keys.due(moving)]
        )

        rounds = [0]

        def later() -> None:  # a round of the loop, with a sweep at every fourth, the first
            now[0] += 0.5
            rounds[0] += 1
            if rounds[0] % 4 == 1:
                worker.sweep_once()
            worker.read_once(block_ms=5)
            worker.claim_once()

        def said(level: int, text: str) -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if r.name == LOGGER and r.levelno == level and text in r.getMessage()
            ]

        for _ in range(40):  # 20 s of the worker's clock, ten times the threshold
            later()
        assert moving in worker.parked and worker.parked[moving].moved
        line = (
            f"scope {moving}: slot {slot} is being moved (TRYAGAIN: a reshard under way, its "
            "keys on two nodes); trying it again with backoff"
        )
        assert said(logging.INFO, "is being moved") == [line]
        (stuck,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        text = stuck.getMessage()
        # TRYAGAIN, or ASK: a call of the moved keys alone (the last answer is said)
        assert text.startswith(f"scope {moving}: slot {slot} has answered "), text
        assert "a reshard stuck half way" in text, text
        assert "the scope's jobs wait meanwhile (nothing is applied for them)" in text, text
        assert stuck.scope == moving  # type: ignore[attr-defined]
        assert not said(logging.INFO, "served again")
        assert parks(moving) == 0
        end_move(cluster, slot, port)

        def started(job: str) -> bool:
            return any(data.job == job for _, _, data in host.equipment(moving))

        wait_for(
            lambda: moving not in worker.parked and all(started(j) for j in later_jobs),
            timeout=20,
            step=later,
            what="the scope served again and its jobs started",
        )
        (back,) = said(logging.INFO, "served again after")
        assert back.startswith(f"scope {moving}: served again after "), back
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1
        assert started(first) and not worker.routes.moving
    finally:
        host.close()


def test_a_worker_of_one_scope_waits_out_a_reshard_stuck_with_its_keys_on_two_nodes(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of one scope whose slot's keys are partly moved (TRYAGAIN for a call of
    keys on both nodes): it said once, at warning, that the server was unreachable, and
    never that the move was stuck. It is a move: said at info, once at warning after
    SFC_OUTAGE_THRESHOLD, and its end at info; its jobs go on once the reshard is over."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scope = scope_on(1, "rehash-one")
    host = Host(cluster.url)
    stop = threading.Event()
    try:
        host.scopes.append(scope)
        worker = Worker(host.store(), replace(FAST, outage_threshold=1000), [scope])
        worker.refresh_scopes()
        first = host.submit(scope, linear_recipe(3), job_id="first").job
        wait_for(
            lambda: worker.store.unread(scope) == 0,
            step=lambda: worker.read_once(block_ms=5),
            what="the first job started (its indexes written)",
        )
        later_jobs = [host.submit(scope, linear_recipe(3), job_id=f"j{i}").job for i in range(2)]
        slot, port = move_slot(
            cluster, keys.work(scope), only=[keys.active(scope), keys.due(scope)]
        )
        thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        thread.start()

        def warned() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.levelno >= logging.WARNING]

        wait_for(lambda: bool(warned()), timeout=20, what="the warning")
        (stuck,) = warned()
        text = stuck.getMessage()
        assert text.startswith(f"worker {worker.consumer}, scope {scope}: slot {slot} "), text
        assert "a reshard stuck half way" in text, text
        assert "the scope's jobs wait meanwhile" in text, text
        said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        moves = [m for m in said if m.startswith(f"worker {worker.consumer}: slot {slot} ")]
        assert len(moves) == 1, said
        end_move(cluster, slot, port)

        def started(job: str) -> bool:
            return any(data.job == job for _, _, data in host.equipment(scope))

        wait_for(lambda: all(started(j) for j in later_jobs), timeout=20, what="its jobs")
        wait_for(
            lambda: any("served again after" in r.getMessage() for r in caplog.records),
            timeout=20,
            what="the scope served again",
        )
        stop.set()
        thread.join(10)
        (back,) = [r for r in caplog.records if "served again after" in r.getMessage()]
        assert back.levelno == logging.INFO
        assert len(warned()) == 1, warned()
        said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert len([m for m in said if f"slot {slot} " in m]) == 2, said  # info, warning
        assert started(first)
    finally:
        stop.set()
        host.close()


def test_a_worker_of_one_scope_reads_nothing_while_its_slot_is_moving(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of one scope whose commit answers TRYAGAIN (a reshard stuck half way) while
    its next sweep and claim are not due: it read at every round of its loop until then, a
    delivery for each entry added meanwhile, whose commit answered TRYAGAIN in turn. Its
    sweep tries the scope next, before a claim or a read (it counts no delivery, and answers
    TRYAGAIN for as long as the move lasts): an answer added during the move stays unread
    until the move is over, and is applied then. (Long sweep and claim intervals keep them
    from coming due on their own.)"""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scope = scope_on(1, "rehash-claims")
    host = Host(cluster.url)
    stop = threading.Event()
    try:
        host.scopes.append(scope)
        settings = replace(
            FAST, sweep_interval=60_000, autoclaim_idle=120_000, outage_threshold=120_000
        )
        rounds = [0]  # rounds of the loop that failed, each followed by its backoff

        class Counted(Store):
            def wait_out(self, stop: threading.Event, seconds: float) -> None:
                rounds[0] += 1
                super().wait_out(stop, seconds)

        store = Counted.from_url(cluster.url)
        host.stores.append(store)
        worker = Worker(store, settings, [scope])
        worker.refresh_scopes()
        for job in ("first", "second"):
            host.submit(scope, linear_recipe(3), job_id=job)
        wait_for(
            lambda: worker.store.unread(scope) == 0,
            step=lambda: worker.read_once(block_ms=5),
            what="both jobs started (their indexes written)",
        )
        rounds[0] = 0  # the loop's rounds only
        thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        thread.start()
        wait_for(lambda: bool(worker.store.heartbeat(scope)), what="the loop's first sweep")
        slot, port = move_slot(
            cluster, keys.work(scope), only=[keys.active(scope), keys.due(scope)]
        )
        # an answer is one key's XADD, which goes through; its commit answers TRYAGAIN
        entry = respond(host.store(), scope, "first", "a1", outcome="ok")
        wait_for(lambda: rounds[0] >= 1, timeout=30, what="the commit's TRYAGAIN")
        looker = host.store()  # the worker's store is the worker thread's
        later = respond(looker, scope, "second", "a1", outcome="ok")
        seen = rounds[0]
        wait_for(
            lambda: (
                rounds[0] > seen + settings.max_deliveries + 2
                or worker.counters.buried > 0
                or looker.deliveries(scope, later) > 0
            ),
            timeout=30,
            what="more rounds of the loop than SFC_MAX_DELIVERIES, or the answer read",
        )
        assert worker.counters.buried == 0
        assert worker.store.deliveries(scope, entry) == 1
        assert looker.deliveries(scope, later) == 0 and looker.unread(scope) == 1
        end_move(cluster, slot, port)

        def applied(job: str) -> Callable[[], bool]:  # the answer moved the job on
            return lambda: [d.job for _, _, d in host.equipment(scope)].count(job) == 2

        wait_for(applied("second"), timeout=20, what="the answer added during the move")
        stop.set()
        thread.join(10)
        # the answer whose commit failed is claimed once idle (SFC_AUTOCLAIM_IDLE)
        claimer = Worker(host.store(), FAST, [scope])
        claimer.refresh_scopes()
        wait_for(applied("first"), step=claimer.claim_once, what="the first answer")
        assert worker.counters.buried == 0 and claimer.counters.buried == 0
        assert not host.store().dead(scope)
    finally:
        stop.set()
        host.close()


def test_sfc_equipment_says_a_reshard_stuck_half_way_once_at_info(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """`sfc equipment` whose event answers TRYAGAIN (a reshard stuck with its scope's keys on
    two nodes) said at warning that the server was unreachable: it is a move, said as a
    worker says it, at info, once until a pump goes through; the event is sent once the
    reshard is over."""
    caplog.set_level(logging.INFO, logger="sfc.host")
    scope = scope_on(1, "rehash-equipment")
    host = Host(cluster.url)
    stop = threading.Event()
    thread: threading.Thread | None = None
    try:
        host.scopes.append(scope)
        host.submit(scope, wait_recipe(), job_id="w1")
        worker = host.worker([scope])
        wait_for(
            lambda: bool(host.equipment(scope)),
            step=lambda: worker.read_once(block_ms=5),
            what="the job's wait on the equipment stream",
        )
        script = load_host_script(json.dumps({"replies": {"result": ["passed"]}}).encode())
        rounds = [0]  # pumps that failed, each followed by its backoff

        class Counted(Store):
            def wait_out(self, stop: threading.Event, seconds: float) -> None:
                rounds[0] += 1
                super().wait_out(stop, seconds)

        equipment = ScriptedEquipment(Counted.from_url(cluster.url), scope, script)
        slot, port = move_slot(
            cluster, keys.work(scope), only=[keys.active(scope), keys.due(scope)]
        )
        thread = threading.Thread(target=equipment.run, args=(stop,), kwargs={"block_ms": 20})
        thread.start()
        wait_for(lambda: rounds[0] >= 4, timeout=20, what="pumps that answer TRYAGAIN")
        said = [r for r in caplog.records if r.name == "sfc.host.scripted"]
        assert [(r.levelno, r.getMessage()) for r in said] == [
            (
                logging.INFO,
                f"equipment of scope {scope}: slot {slot} is being moved (TRYAGAIN: a reshard "
                "under way, its keys on two nodes); trying it again with backoff",
            )
        ]
        end_move(cluster, slot, port)
        wait_for(lambda: equipment.counters.events_published == 1, timeout=20, what="the event")
        assert len([r for r in caplog.records if r.name == "sfc.host.scripted"]) == 1
    finally:
        stop.set()
        if thread is not None:
            thread.join(10)
        host.close()


def test_a_library_missing_on_a_node_is_loaded_there_while_another_node_is_away(
    cluster: LocalCluster,
) -> None:
    """A call that finds the function library missing on its node (FUNCTION FLUSH, a node
    that lost its data) loads it and calls again. It loaded it on every primary: one away
    failed the load (connection refused), and the call of a scope whose node answered
    with it. It loads it on the node of the call alone: the worker's commits, the sweep, the
    equipment's events and the calls sent in one pipeline of a scope there go through."""
    here, away = cluster.servers[0], cluster.servers[1]
    scope = scope_on(0, "reload")
    host = Host(cluster.url)
    try:
        host.scopes.append(scope)
        host.submit(scope, wait_recipe(), job_id="w1")
        worker = host.worker([scope])
        with Store.from_url(here.url, cluster=False).r as r:
            r.function_flush()
        away.kill()
        wait_for(
            lambda: bool(host.equipment(scope)),
            step=lambda: worker.read_once(block_ms=5),
            timeout=20,
            what="the job's wait on the equipment stream (its commit loads the library)",
        )
        with Store.from_url(here.url, cluster=False).r as r:
            r.function_flush()
        assert worker.store.sweep(scope, FAST.outage_threshold, FAST.sweep_limit)[0] == "ok"
        with Store.from_url(here.url, cluster=False).r as r:
            r.function_flush()
        # the wait's event: the job waits for its type, so it is queued
        assert worker.store.publish(scope, "com.example.result.v1", b"{}", "n") is not None
        with Store.from_url(here.url, cluster=False).r as r:
            r.function_flush()
        # calls in one pipeline (Store._fcalls): an ack of an entry not pending writes nothing
        assert worker.store.acks(scope, [(["1-1"], "acked")]) == ["gone"]
    finally:
        host.close()


def test_a_host_starts_while_a_primary_is_down(
    cluster: LocalCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A host (re)started while a primary without a replica is down: loading the function
    library on every primary failed at that node (connection refused), and `sfc serve` exited
    2, "the server went away", though its workers would serve the other nodes' scopes.
    `ensure_library` passes over the node, says which once at warning, and serve starts and
    serves a scope of a live node; `sfc setup`, an admin step, stays strict and names it."""
    caplog.set_level(logging.INFO, logger="sfc.host.store")
    node = cluster.servers[1]  # not the node of `sfc:scopes`, which serve registers its scope in
    assert not RANGES[1][0] <= key_slot(keys.SCOPES.encode()) <= RANGES[1][1]
    node.kill()
    gone = f"node 127.0.0.1:{node.port}"
    store = Store.from_url(cluster.url)
    try:
        assert store.ensure_library()
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if r.name == "sfc.host.store"]
    assert len(said) == 1 and gone in said[0] and "passed over" in said[0], said
    scope = scope_on(0, "down-start")
    setup = sfc("setup", "--redis", cluster.url, "--scope", scope, cwd=tmp_path)
    assert setup.code == 2 and gone in setup.err and "Traceback" not in setup.err, setup
    host = Host(cluster.url)
    try:
        with processes(tmp_path / "logs") as started:
            serve = started.start(
                "serve", "serve", "--redis", cluster.url, "--scope", scope, "--workers", "1",
                cwd=tmp_path,
            )  # fmt: skip
            serve.wait_for_stderr(f"serving scope {scope}")
            assert serve.stderr().count(gone) == 1, serve.stderr()
            job = host.submit(scope, linear_recipe(1), job_id="j").job
            responder = host.responder(scope)
            wait_for(host.ended(scope, [job]), step=responder.pump, what="the job, served by serve")
            assert host.order_path(scope, job).startswith("Ended"), host.order_path(scope, job)
    finally:
        host.close()


def test_a_node_away_costs_one_call_in_a_round_not_one_for_each_of_its_scopes(
    cluster: LocalCluster,
) -> None:
    """A round's steps (a read, a claim, a sweep) call each scope served in turn. A call of
    a node away parks its other scopes too, and the same step calls none of them after it:
    one real call of the node a round, not one for each of its scopes (a frozen node costs
    some 10 s a call)."""
    served = scope_on(0, "one-call")
    away = [scope_on(1, f"one-call{i}") for i in range(2)]
    node = cluster.servers[1]
    host = Host(cluster.url)
    try:
        host.scopes += [served, *away]
        worker = Worker(host.store(), FAST, [served, *away])
        worker.refresh_scopes()
        node.kill()
        for step in (worker.claim_once, worker.sweep_once, lambda: worker.read_once(block_ms=5)):
            step()
            assert set(away) <= set(worker.parked), worker.parked
            assert worker.routes.stalls == {f"127.0.0.1:{node.port}": 1}, worker.routes.stalls
    finally:
        host.close()


def test_a_node_that_stops_answering_stalls_the_others_once_not_for_each_of_its_scopes(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A node that stops answering without closing its connections (frozen; a network
    that drops packets) costs a call some 10 s: the socket timeout and the client's retry.
    Each of its scopes was parked and tried on its own, each try a real call, so with
    three scopes there the worker served the others some 30 s late, and again at every
    try. Now a scope's park sets its node's other scopes aside too, and a parked node is
    probed with a short PING before a real call (Store.answers)."""
    import os
    import signal

    caplog.set_level(logging.INFO, logger=LOGGER)
    served = scope_on(0, "live")
    frozen = [scope_on(1, f"frozen{i}") for i in range(3)]
    node = cluster.servers[1]
    host = Host(cluster.url)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    assert node.process is not None
    try:
        host.scopes += [served, *frozen]
        for s in (served, *frozen):
            host.submit(s, linear_recipe(1), job_id="warm")
        worker = Worker(host.store(), FAST, [served, *frozen])
        threads.append(threading.Thread(target=worker.run, args=(stop,), daemon=True))
        threads.append(
            threading.Thread(
                target=pump_until, args=(host.responder(served, always("ok")), stop), daemon=True
            )
        )
        for t in threads:
            t.start()
        wait_for(host.ended(served, ["warm"]), timeout=20, what="the first job")
        os.kill(node.process.pid, signal.SIGSTOP)
        try:
            # one job after another: each needs the worker to serve its scope again. A real
            # call of the frozen node waits some 10 s (the count, not the time, is checked:
            # the deadline only guards a hang); before, one such call came for each of its
            # scopes, and again at each try of each
            frozen_node = f"127.0.0.1:{node.port}"
            for i in range(4):
                job = host.submit(served, linear_recipe(1), job_id=f"then{i}").job
                wait_for(host.ended(served, [job]), timeout=120, what=f"job {i}, node 1 frozen")
                stalls = worker.routes.stalls
                assert stalls == {frozen_node: 1}, (i, stalls)
            assert set(frozen) <= set(worker.parked), worker.parked
            for s in frozen:
                said = messages(caplog, s)
                assert sum("its node cannot be reached" in m for m in said) == 1, said
        finally:
            os.kill(node.process.pid, signal.SIGCONT)
        wait_for(lambda: not worker.parked, timeout=30, what="the frozen scopes served again")
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        host.close()


def test_workers_of_a_scope_in_a_stuck_reshard_do_not_bury_its_entries(
    cluster: LocalCluster,
) -> None:
    """Four workers of two scopes, one of which a reshard leaves with its keys on two nodes.
    The worker whose commit answered TRYAGAIN set the scope aside; every other worker still
    claimed its entry (XAUTOCLAIM, one key, goes through in a slot being moved: a delivery
    each) before its own commit answered, and the first delivery after the move buried the
    entry of a healthy job ("failed 4 deliveries (SFC_MAX_DELIVERIES is 3)"). A claim tries
    the scope first with a call of its keys and of one that never exists (Store.probe),
    which answers a move as long as the slot is moving: no worker claims it meanwhile."""
    moving, other = scope_on(1, "stuck-many"), scope_on(0, "stuck-many-other")
    host = Host(cluster.url)
    try:
        host.scopes += [moving, other]
        settings = replace(FAST, max_deliveries=3, autoclaim_idle=300)
        workers = [Worker(host.store(), settings, [moving, other]) for _ in range(4)]
        for w in workers:
            w.refresh_scopes()
        first = workers[0]
        host.submit(moving, linear_recipe(3), job_id="first")
        wait_for(
            lambda: first.store.unread(moving) == 0,
            step=lambda: first.read_once(block_ms=5),
            what="the first job started (its indexes written)",
        )
        host.submit(moving, linear_recipe(3), job_id="later")
        slot, port = move_slot(
            cluster, keys.work(moving), only=[keys.active(moving), keys.due(moving)]
        )
        first.read_once(block_ms=5)  # reads the start of `later`; its commit answers TRYAGAIN
        assert moving in first.parked
        (row,) = first.store.client(moving).xpending_range(
            keys.work(moving), keys.GROUP, "-", "+", 10
        )
        entry = row["message_id"].decode()
        for w in workers[1:]:
            wait_for(
                lambda w=w: moving in w.parked,
                timeout=20,
                step=lambda w=w: (w.claim_once(), w.read_once(block_ms=5)),
                what="the scope set aside",
            )
        for _ in range(5):  # more rounds of every worker while the reshard is stuck
            for w in workers:
                w.sweep_once()
                w.claim_once()
                w.read_once(block_ms=5)
        assert first.store.deliveries(moving, entry) == 1
        end_move(cluster, slot, port)

        def step() -> None:
            for w in workers:
                w.sweep_once()
                w.claim_once()
                w.read_once(block_ms=5)

        routed = redis.RedisCluster.from_url(cluster.url)  # follows the slot that moved
        wait_for(
            lambda: not routed.xpending_range(keys.work(moving), keys.GROUP, entry, entry, 1),
            timeout=30,
            step=step,
            what="the entry acked",
        )
        routed.close()
        assert not host.store().dead(moving)
        assert sum(w.counters.buried for w in workers) == 0
    finally:
        host.close()


def test_a_scope_set_aside_for_a_moved_is_read_again_before_its_sweep(
    cluster: LocalCluster,
) -> None:
    """A slot whose move is over (a failover, the end of a reshard) answers MOVED to a
    worker that had not read the slots again: the scope was set aside until its next sweep
    (up to 1.2 x SFC_SWEEP_INTERVAL), where before the next read served it. After a MOVED
    the slots, read again, show where it went: a read tries it, and serves it; only a slot
    being moved (ASK, TRYAGAIN) waits for its sweep. (A long sweep interval: no sweep
    comes meanwhile.)"""
    moved, other = scope_on(1, "moved-read"), scope_on(0, "moved-read-other")
    host = Host(cluster.url)
    try:
        host.scopes += [moved, other]
        worker = Worker(
            host.store(),
            replace(FAST, sweep_interval=60_000, outage_threshold=120_000),
            [moved, other],
        )
        worker.refresh_scopes()
        move_slot(cluster, keys.work(moved))  # a whole reshard: the old node answers MOVED
        worker.read_once(block_ms=5)
        assert moved in worker.parked
        host.submit(moved, linear_recipe(3), job_id="after")
        wait_for(
            lambda: moved not in worker.parked and worker.store.unread(moved) == 0,
            timeout=10,
            step=lambda: worker.read_once(block_ms=5),
            what="the scope read again, and its job started",
        )
        assert not host.store().dead(moved)
    finally:
        host.close()

"""The park-and-move policy as the worker applies it (`Worker`, `Routes`), with no cluster:
a Worker on one real server (`isolate=True` runs its park path there), its Routes stepped
with the client's own exceptions for the answers a node gives (MOVED, ASK, TRYAGAIN, a
connection refused) where a cluster's answer is the input.

The cluster's answers themselves (a real MOVED, ASK, TRYAGAIN, a node away) are checked end
to end in tests/test_host_cluster_isolation.py; the policy's table in
tests/test_cluster_policy.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY

from host import keys
from host.cluster import PARK_MAX_S, Happened, Moving, Routes, Status
from host.metrics import WorkerMetrics
from host.reconnect import Reconnect
from host.server import EmbeddedServer
from host.store import Store, slot_of
from host.worker import Timetable, Worker
from tests.hostkit import FAST, Host, linear_recipe, new_scope, wait_for

LOGGER = "sfc.host.worker"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of the test's own: a worker of the registry takes up every scope registered,
    and a test may stop it (its one node away) and start it again on its data."""
    s = EmbeddedServer(tmp_path / "valkey").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def store(server: EmbeddedServer) -> Iterator[Store]:
    s = Store.from_url(server.url)
    try:
        yield s
    finally:
        s.close()


def test_a_scope_not_taken_up_that_left_the_registry_is_forgotten(store: Store) -> None:
    """A registered scope not taken up because its slot moved, or because its node is away,
    then dropped from `sfc:scopes`: the worker kept its move, or its name, for as long as it
    ran. It forgets them at the refresh that no longer lists it; a scope it serves keeps its
    move."""
    kept, moved, away = new_scope("left-kept"), new_scope("left-moved"), new_scope("left-away")
    for scope in (kept, moved, away):
        store.register_scope(scope)
    worker = Worker(store, FAST)
    policy = worker.routes.policy
    # what the refresh's calls of them said on a cluster (Routes.taking_up)
    assert policy.step(moved, Happened.MOVED, 1.0, taken=False).say.name == "MOVE_STARTED"
    assert policy.step(away, Happened.AWAY, 1.0, taken=False).say.name == "NOT_TAKEN"
    assert moved in policy.moving and away in policy.not_taken
    store.r.srem(keys.SCOPES, moved, away)
    taken = worker.refresh_scopes()
    assert taken == [kept], taken
    assert moved not in policy.moving
    assert away not in policy.not_taken
    # a scope served whose slot moves keeps its move across the refresh
    policy.step(kept, Happened.MOVED, 2.0)
    assert kept not in worker.refresh_scopes()
    assert kept in policy.moving


def parks(scope: str) -> float:
    """`sfc_worker_scopes_parked_total` of `scope` in this process (WorkerMetrics)."""
    return REGISTRY.get_sample_value("sfc_worker_scopes_parked_total", {"scope": scope}) or 0.0


def test_a_scope_set_aside_for_a_slot_that_moved_whose_new_node_is_away_says_so(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A slot that moved (MOVED) sets its scope aside alone, at info and not counted: the
    node answered. When the node it moved to cannot be reached as the scope is tried again,
    that is an outage: said at warning and counted, as any park, and so is its end."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scope = new_scope("moved-away")
    slot, to = 1234, "127.0.0.1:7001"
    moved = redis.exceptions.MovedError(f"{slot} {to}")
    away = redis.ConnectionError(f"Error 111 connecting to {to}. Connection refused.")
    store = Store.from_url(valkey_url)
    try:
        routes = Routes(store, 120_000, "c1", lambda: 0.0, metrics=WorkerMetrics())
        policy = routes.policy

        def step(happened: Happened, now: float, error: Exception | None = None) -> None:
            routes.say(scope, policy.step(scope, happened, now), error)

        step(Happened.MOVED, 100.0, moved)
        assert policy.parked[scope].moved
        said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
        line = f"scope {scope}: slot {slot} moved to {to} (a failover or a reshard)"
        assert said == [(logging.INFO, f"{line}; reading the slots again")], said
        assert parks(scope) == 0
        step(Happened.MOVED, 100.5, moved)  # a try of it that answers MOVED again
        step(Happened.AWAY, 101.0, away)  # a try of it at the node it moved to
        (line_away,) = [r for r in caplog.records if "its node cannot be reached" in r.getMessage()]
        assert line_away.levelno == logging.WARNING
        assert to in line_away.getMessage()
        assert not policy.parked[scope].moved
        assert parks(scope) == 1
        step(Happened.CALL_OK, 104.0)
        assert scope not in policy.parked
        (back,) = [r for r in caplog.records if "served again after" in r.getMessage()]
        assert back.levelno == logging.WARNING
        said_of = [r.getMessage() for r in caplog.records if getattr(r, "scope", None) == scope]
        assert sum("reading the slots again" in m for m in said_of) == 1, said_of
    finally:
        store.close()


def test_a_slot_stuck_moving_is_said_once_at_warning_then_served_again_at_info(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reshard stuck half way: the slot's owner answers ASK for the scope's keys for as long
    as it stays so. The scope is set aside at info as a slot that moved; once that has lasted
    SFC_OUTAGE_THRESHOLD, one warning names the scope, the slot, the node it points to, since
    when, and the likely cause; once the reshard ends (a sweep goes through, then a batch),
    it is served again, at info."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scope = new_scope("stuck")
    slot, to = 1234, "127.0.0.1:7002"
    ask = redis.exceptions.AskError(f"{slot} {to}")
    store = Store.from_url(valkey_url)
    now = [1000.0]
    try:
        routes = Routes(store, 2000, "c1", lambda: now[0])
        policy = routes.policy

        def step(happened: Happened, error: Exception | None = None) -> None:
            routes.say(scope, policy.step(scope, happened, now[0]), error)

        def warned() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.levelno >= logging.WARNING]

        def later() -> None:  # a round of the loop: the read's try answers ASK again
            now[0] += 0.5
            step(Happened.MOVING, ask)

        step(Happened.MOVING, ask)  # the read's call
        assert policy.parked[scope].moved
        line = f"scope {scope}: slot {slot} is moving to {to} (a failover or a reshard)"
        said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
        assert said[-1] == (logging.INFO, f"{line}; reading the slots again"), said
        assert not warned()
        while not warned():
            later()
        (stuck,) = warned()
        text = stuck.getMessage()
        assert text.startswith(f"scope {scope}: slot {slot} has answered ASK (to {to}) for "), text
        assert now[0] - policy.parked[scope].since >= 2.0
        assert " since 20" in text and " UTC: a reshard stuck half way" in text, text
        assert "`CLUSTER SLOTS` and `CLUSTER NODES`" in text, text
        assert stuck.scope == scope  # type: ignore[attr-defined]
        for _ in range(20):  # once, not at every try
            later()
        assert len(warned()) == 1, warned()
        assert scope in policy.parked
        now[0] += 0.5
        routes.went_through(scope)  # a read goes through: not the move's end
        assert scope in policy.parked
        routes.went_through(scope, whole=True)  # the sweep, once the reshard ends
        assert scope not in policy.parked
        routes.round_trip(scope)  # a batch of it
        (back,) = [r for r in caplog.records if "served again after" in r.getMessage()]
        assert back.levelno == logging.INFO and back.scope == scope  # type: ignore[attr-defined]
        assert len(warned()) == 1, warned()
        assert not policy.moving
    finally:
        store.close()


def test_a_worker_of_one_scope_says_a_slot_stuck_moving_once_at_warning(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of one scope waits out a MOVED (or ASK) in its loop (Routes.loop_move), said
    at info; one that lasts SFC_OUTAGE_THRESHOLD (a reshard stuck half way) is said once at
    warning, naming the scope, and its end at info (Routes.loop_move_over)."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scope = new_scope("stuck-one")
    slot, to = slot_of(scope), "127.0.0.1:7002"  # the ASK of its slot
    ask = redis.exceptions.AskError(f"{slot} {to}")
    store = Store.from_url(valkey_url)
    now = [1000.0]
    try:
        routes = Routes(store, 1000, "c1", lambda: now[0])
        routes.scopes = [scope]

        def warned() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.levelno >= logging.WARNING]

        moving = routes.loop_move(ask, None)  # the loop's first round that answers ASK
        while not warned():  # its next rounds, each after its backoff
            now[0] += 0.5
            moving = routes.loop_move(ask, moving)
        for _ in range(20):
            now[0] += 0.5
            moving = routes.loop_move(ask, moving)
        (stuck,) = warned()
        text = stuck.getMessage()
        assert text.startswith(
            f"worker c1, scope {scope}: slot {slot} has answered ASK (to {to}) for "
        ), text
        assert stuck.scope == scope  # type: ignore[attr-defined]
        said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert sum("reading the slots again" in m for m in said) == 1, said
        routes.loop_move_over(moving)  # a sweep went through
        (back,) = [r for r in caplog.records if "served again after" in r.getMessage()]
        assert back.levelno == logging.INFO
        assert len(warned()) == 1, warned()
    finally:
        store.close()


def tryagain() -> redis.exceptions.TryAgainError:
    """What a node answers a call of several keys of a slot a reshard left with its keys on
    two nodes, as the client raises it (its parser strips the code)."""
    return redis.exceptions.TryAgainError(
        "Multiple keys request during rehashing", status_code="TRYAGAIN"
    )


def test_a_worker_of_several_scopes_names_the_scope_of_a_move_its_loop_waits_out(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of two scopes whose slots a reshard has both left migrating, with their keys
    on the old node: the first scope's sweep answers TRYAGAIN and is set aside, the last
    one's goes to the loop. The loop said `worker C: a slot is being moved`, and at
    SFC_OUTAGE_THRESHOLD `worker C: a slot has answered TRYAGAIN ...; new scopes wait
    meanwhile`, with no scope, though it knew whose call it was and that scope's jobs
    wait. It names the slot, and the scope (the line's `scope` field, and the warning)."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    first, last = new_scope("loop-move-a"), new_scope("loop-move-b")
    now = [1000.0]
    store = Store.from_url(valkey_url)
    try:
        settings = replace(FAST, outage_threshold=1000)
        worker = Worker(store, settings, [first, last], clock=lambda: now[0], isolate=True)
        assert worker.refresh_scopes() == [first, last]
        routes = worker.routes
        who = f"worker {worker.consumer}"
        moving: Moving | None = None

        def loop_said(level: int) -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.name == LOGGER and r.levelno == level and r.getMessage().startswith(who)
            ]

        def loop_round() -> None:
            """A round of the loop whose sweep (Worker._each_scope) answers TRYAGAIN for each
            scope it calls: the call Routes.park does not set aside goes to the loop, which
            waits the move out (Worker._say_unreachable -> Routes.loop_move)."""
            nonlocal moving
            now[0] += 0.5
            for scope in routes.serving(whole=True):
                error = tryagain()
                if not routes.park(scope, error):
                    assert routes.move_left_to_loop == (error, scope)
                    moving = routes.loop_move(error, moving)
                    return
            raise AssertionError(f"no call went to the loop: {routes.serving(whole=True)}")

        loop_round()
        assert first in worker.parked and last not in worker.parked
        while not loop_said(logging.WARNING):
            loop_round()
        for _ in range(10):  # once, not at every round
            loop_round()
        slot = slot_of(last)
        (info,) = loop_said(logging.INFO)
        assert info.getMessage().startswith(f"{who}: slot {slot} is being moved (TRYAGAIN"), (
            info.getMessage()
        )
        assert getattr(info, "scope", None) == last
        (stuck,) = loop_said(logging.WARNING)
        text = stuck.getMessage()
        assert text.startswith(f"{who}, scope {last}: slot {slot} has answered TRYAGAIN"), text
        assert "the scope's jobs wait meanwhile" in text, text
        assert getattr(stuck, "scope", None) == last
    finally:
        store.close()


class Loop:
    """The loop of `Worker.run`, stepped on a clock of the test's (`now`): a round that
    raised goes to Worker._say_unreachable with a Reconnect built as run builds it (a move
    to Routes.loop_move, an outage to the Reconnect); the next round comes after 0.5 s."""

    def __init__(self, worker: Worker, now: list[float]) -> None:
        self.worker = worker
        self.now = now
        self.reconnect = Reconnect(
            f"worker {worker.consumer}", logging.getLogger(LOGGER), worker.clock,
            worker._reconnected,
        )  # fmt: skip
        self.due = Timetable(refresh=now[0], sweep=now[0], claim=now[0], trim=now[0])
        self.moving: Moving | None = None

    def failed(self, error: Exception) -> None:
        """A round raised `error`."""
        self.moving = self.worker._say_unreachable(error, self.reconnect, self.moving, self.due)
        self.now[0] += 0.5

    def swept(self) -> None:
        """A round whose sweep went through: a move the loop waited out is over."""
        self.reconnect.went_through()
        if self.moving is not None:
            self.worker.routes.loop_move_over(self.moving)
            self.moving = None


def ask(scope: str, to: str) -> redis.exceptions.AskError:
    """What a node answers for a key of the slot of `scope`, stuck half way to `to`."""
    return redis.exceptions.AskError(f"{slot_of(scope)} {to}")


def test_a_worker_of_one_scope_says_a_move_after_an_outage(
    server: EmbeddedServer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of one scope whose node goes away while its slot is stuck half way: once the
    node is back it answers ASK again. Every MOVED or ASK after an outage had started
    counted as part of it: the end of the outage was never said, nor the move stuck after
    it. The node's answer ends the outage, and the move is timed from then."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scope = new_scope("down-moved")
    now = [1000.0]
    worker = Worker(store, replace(FAST, outage_threshold=3000), [scope], clock=lambda: now[0])
    assert worker.refresh_scopes() == [scope]
    slot, to = slot_of(scope), "127.0.0.1:7002"
    loop = Loop(worker, now)

    def said(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == LOGGER and text in r.getMessage()]

    move = f"worker {worker.consumer}: slot {slot} is moving to {to} "
    loop.failed(ask(scope, to))
    assert len(said(move)) == 1
    server.stop()  # its node goes away
    with pytest.raises(redis.ConnectionError) as down:
        worker.sweep_once()
    for _ in range(8):  # longer than SFC_OUTAGE_THRESHOLD since the first ASK
        loop.failed(down.value)
    (away,) = said("the server is unreachable")
    assert away.levelno == logging.WARNING
    server.start()  # back, on its data: still migrating the slot
    loop.failed(ask(scope, to))
    (back,) = said("reconnected after")
    assert back.levelno == logging.INFO
    assert not said("has answered ASK")  # the move is timed from the node's answer
    assert len(said(move)) == 2  # before the outage, and after it
    while not said("has answered ASK"):
        loop.failed(ask(scope, to))
    (stuck,) = said("has answered ASK")
    text = stuck.getMessage()
    assert text.startswith(f"worker {worker.consumer}, scope {scope}: slot {slot} "), text
    assert stuck.levelno == logging.WARNING
    for _ in range(10):
        loop.failed(ask(scope, to))
    assert worker.sweep_once() == 0  # the move is over: the sweep goes through
    loop.swept()
    (over,) = said("served again after")
    assert over.levelno == logging.INFO
    assert len(said("has answered")) == 1
    assert len(said("the server is unreachable")) == 1


def test_a_move_of_every_scope_at_start_up_is_said_once_for_each(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every scope a worker serves is in one slot, stuck half way when it starts: none can
    be taken up. Each scope says the move at info, and at warning once it lasted
    SFC_OUTAGE_THRESHOLD; the loop, to which the refresh raised, said it a third time."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    a = new_scope("start-a")
    b = next(f"{a}-{i}" for i in range(1_000_000) if slot_of(f"{a}-{i}") == slot_of(a))
    to = "127.0.0.1:7002"
    now = [1000.0]
    store = Store.from_url(valkey_url)
    try:
        settings = replace(FAST, outage_threshold=1000)
        worker = Worker(store, settings, [a, b], clock=lambda: now[0])
        loop = Loop(worker, now)

        def said(text: str) -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == LOGGER and text in r.getMessage()]

        def start_up() -> None:
            """A round whose refresh finds each scope's slot stuck half way: the node
            answers each scope's call ASK (Routes.taking_up), none is taken up, and the
            refresh raises the last answer to the loop."""
            error = None
            for scope in (a, b):
                error = ask(scope, to)
                worker.routes.taking_up(scope, error)
            assert error is not None and not worker.scopes
            loop.failed(error)

        while len(said("has answered ASK")) < 2:
            start_up()
        for _ in range(10):
            start_up()
        assert worker.refresh_scopes() == [a, b]  # the move is over
        assert len(said("serving scope")) == 2
        assert worker.sweep_once() == 0
        loop.swept()
        for text in ("is moving to", "has answered ASK"):
            lines = said(text)
            assert sorted(getattr(r, "scope", "") for r in lines) == sorted([a, b]), lines
        assert not said(f"worker {worker.consumer}")
    finally:
        store.close()


def test_a_refresh_that_takes_up_no_scope_raises_its_last_failure_to_the_loop(
    server: EmbeddedServer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of several scopes whose refresh finds every scope's node away (here its one
    server): each scope is said not taken up, once, at warning, and the refresh raises its
    last failure to the loop (its backoff; an outage, so the loop says it, not a move said
    for each scope). Once the node is back, a refresh takes them all up."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    scopes = [new_scope("none-a"), new_scope("none-b")]
    worker = Worker(store, FAST, scopes, isolate=True)
    server.stop()
    for _ in range(2):  # the loop's rounds
        with pytest.raises(redis.ConnectionError):
            worker.refresh_scopes()
        assert worker.scopes == []
        assert worker.routes.move_said_per_scope is None
    lines = [r for r in caplog.records if "not taken up now" in r.getMessage()]
    assert sorted(getattr(r, "scope", "") for r in lines) == sorted(scopes), lines
    for line in lines:
        assert line.levelno == logging.WARNING
        assert "its node cannot be reached" in line.getMessage()
        assert "moved to" not in line.getMessage()
    server.start()
    assert worker.refresh_scopes() == scopes
    assert not worker.routes.policy.not_taken


def test_a_scope_not_taken_up_for_a_slot_that_moved_says_so_at_info(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A scope whose slot moved before the worker took it up (its map of the slots read
    before): the node answered MOVED. It was said at warning as a node that cannot be
    reached; it is said as what it is, in the words of a parked scope's MOVED, at info, and
    the scope is taken up at the next refresh, where the slots read again show it."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    moving, other = new_scope("late-moved"), new_scope("late-stays")
    slot, to = slot_of(moving), "127.0.0.1:7001"
    store = Store.from_url(valkey_url)
    try:
        worker = Worker(store, FAST, [moving, other], isolate=True)
        # the refresh's call of it, which its node answered MOVED (Routes.taking_up)
        worker.routes.taking_up(moving, redis.exceptions.MovedError(f"{slot} {to}"))
        line = f"scope {moving}: slot {slot} moved to {to} (a failover or a reshard)"
        said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
        assert said == [(logging.INFO, f"{line}; reading the slots again")], said
        assert moving in worker.routes.moving and not worker.routes.policy.not_taken
        assert worker.refresh_scopes() == [moving, other]  # the next refresh
        assert moving not in worker.routes.moving
        said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
        assert (logging.INFO, f"serving scope {moving} (consumer {worker.consumer})") in said
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], said
    finally:
        store.close()


def test_a_registry_whose_node_is_away_leaves_the_scopes_served(
    server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker of every registered scope reads `sfc:scopes` at each refresh: while its node
    is away, the worker serves the scopes it has."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    host = Host(server.url)
    try:
        scopes = [host.scope("reg0"), host.scope("reg1")]
        jobs = {s: host.submit(s, linear_recipe(1), job_id="j").job for s in scopes}
        responders = [host.responder(s) for s in scopes]
        worker = Worker(host.store(), FAST, None, isolate=True)
        assert worker.refresh_scopes() == sorted(scopes)  # the submits registered them
        lone = Worker(host.store(), FAST, None)  # one server's: its loop waits an outage out
        assert lone.refresh_scopes() == sorted(scopes)
        server.stop()  # the registry's node goes away
        assert worker.refresh_scopes() == []
        assert worker.scopes == sorted(scopes)
        (line,) = [r for r in caplog.records if "registry cannot be read" in r.getMessage()]
        assert line.levelno == logging.DEBUG
        with pytest.raises(redis.ConnectionError):
            lone.refresh_scopes()
        server.start()  # on its data
        host.run(
            [worker],
            responders,
            lambda: all(host.ended(s, [j])() for s, j in jobs.items()),
            sweep=False,
        )
        assert worker.scopes == sorted(scopes)
    finally:
        host.close()


def test_a_sweep_through_an_outage_pass_does_not_end_a_move_under_way(
    host: Host, valkey_url: str
) -> None:
    """A reshard stuck with one job's hash moved and every key of the sweep on the old node,
    `sfc:outage:{S}` among them (an outage pass under way): the sweep went through, which
    ended the scope's set-aside while every commit of the job answered TRYAGAIN, and its
    entries were read again (a delivery each) at every sweep until they were buried. The
    sweep names a key never written (`keys.probe`): it answers a move for as long as the
    slot is being moved, and the scope stays set aside until the move is over."""
    moving, other = host.scope("stuck-outage"), host.scope("stuck-outage-other")
    now = [1000.0]
    worker = Worker(host.store(), FAST, [moving, other], clock=lambda: now[0], isolate=True)
    worker.refresh_scopes()
    host.submit(moving, linear_recipe(3), job_id="first")
    wait_for(
        lambda: worker.store.unread(moving) == 0,
        step=lambda: worker.read_once(block_ms=5),
        what="the first job started",
    )
    worker.sweep_once()  # its heartbeat
    r = worker.store.client(moving)
    r.zadd(keys.due(moving), {"first": 2**50})
    r.sadd(keys.outage(moving), "first")  # an outage pass under way
    routes = worker.routes
    assert routes.park(moving, tryagain())  # the claim's Store.probe: TRYAGAIN
    assert worker.parked[moving].status is Status.MOVING
    # the sweep's call names, with its keys, the one Store.probe names that is never
    # written: a node answers it with a move while the slot is being moved
    with (
        redis.Redis.from_url(valkey_url, socket_timeout=10) as watcher,
        watcher.monitor() as seen,
    ):
        worker.store.sweep(moving, FAST.outage_threshold, FAST.sweep_limit)
        call: list[str] = []
        while call[:2] != ["FCALL", "sfc1_sweep"]:  # (the server's calls in order)
            call = seen.next_command()["command"].split()
    named = call[3 : 3 + int(call[2])]
    assert keys.probe(moving) in named and keys.outage(moving) in named, call
    assert not r.exists(keys.probe(moving))
    now[0] += PARK_MAX_S  # its next try has come
    assert moving not in routes.serving()  # not a read's: it waits for a whole call
    assert moving in routes.serving(whole=True)
    assert routes.park(moving, tryagain())  # the sweep's call, while the slot is moving
    routes.went_through(moving)  # a read of it goes through meanwhile
    assert moving in worker.parked  # the move is not over
    now[0] += PARK_MAX_S
    worker.sweep_once()  # the move is over: the sweep goes through
    assert moving not in worker.parked

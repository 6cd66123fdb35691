"""Fault tests (issue #13): kill, starve and poison the host, and lose nothing.

Real processes on a real server (tests/faultkit.py): `sfc serve` instances as subprocesses,
valkey-server started by the test so that it can be killed on its own, scripted equipment,
and a checker of the invariants. Each test prints its figures (run with -s). The long forms
are marked `faults_long`: CI runs them (CI=true), a developer with `-m faults_long` or
SFC_FAULTS_LONG=1; a short form of each runs by default.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from generated.work_entry_v1_0 import TickData
from host import keys
from host.apply import decode_order
from host.entries import decode_equipment, decode_history, fields
from host.equipment import respond
from host.joborder import ended, path_text
from host.jobs import start as start_job
from host.jobs import submit
from host.server import Fsync
from host.store import Store
from tests.faultkit import (
    COMPLETED,
    SFC,
    End,
    Fleet,
    Instance,
    chain_recipe,
    check,
    ended_count,
    print_figures,
    seeded,
    settled,
    submit_jobs,
    wait_until,
    wide_recipe,
)
from tests.hostkit import counts


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.close()


# -- 1. workers killed mid-flight


def caught_holding(
    store: Store, scope: str, instances: list[Instance]
) -> list[tuple[Instance, int]]:
    """The instances whose worker holds entries it has not committed, with how many; polled
    for up to 5 s (an empty list when none was caught)."""
    names = {i.consumer(): i for i in instances}
    holding: list[tuple[Instance, int]] = []

    def caught() -> bool:
        for c in store.pending_summary(scope).get("consumers") or []:
            i = names.get(c["name"].decode())
            if i is not None and int(c["pending"]) > 0:
                holding.append((i, int(c["pending"])))
        return bool(holding)

    with contextlib.suppress(AssertionError):
        wait_until(caught, timeout=5, what="an instance holding entries", every=0.001)
    return holding


MAX_TOP_UPS = 5
"""How many times a wave that ended before a kill could land gets more jobs."""


def workers_killed(
    fleet: Fleet, jobs: int, kills: int, instances: int = 3, env: dict[str, str] | None = None
) -> None:
    t0 = time.monotonic()
    _, rnd = seeded("fault 1 (workers killed)")
    server = fleet.server()
    scope = fleet.scope(server.url, "killed")
    store = fleet.store(server.url)
    equipment = fleet.scripted(
        server.url, scope, {"replies": {"jam": ["error:jammed"]}, "default": "ok@20"}
    )
    fleet_of = [fleet.instance(server.url, scope, env) for _ in range(instances)]
    for i in fleet_of:
        i.wait_serving()
    good = chain_recipe(["a1", "a2", "a3"])
    bad = chain_recipe(["a1", "jam"], max_attempts=1)
    # the jobs come in waves, one before each kill and one after the last, so that work
    # is in flight at every kill; each kill lands after a random number of the wave's
    # commands, on an instance caught holding entries it has not committed
    waves = kills + 1
    expected: dict[str, End] = {}
    moments: list[int] = []
    held: list[int] = []
    for w in range(waves):
        size = jobs // waves + (1 if w < jobs % waves else 0)
        n_bad = max(1, size // 10)
        asked = int(equipment.counters.asked)
        expected |= dict.fromkeys(
            submit_jobs(store, scope, good, f"ok{w}", size - n_bad), COMPLETED
        )
        expected |= dict.fromkeys(
            submit_jobs(store, scope, bad, f"jam{w}", n_bad), End("Aborted", fault="error")
        )
        if w == kills:
            break
        at = rnd.randrange(0, max(1, size))  # up to a third of the wave's commands
        moments.append(at)

        def enough(at: int = at, asked: int = asked) -> bool:
            return int(equipment.counters.asked) >= asked + at

        wait_until(enough, timeout=120, what=f"{at} commands of wave {w}")
        holding = caught_holding(store, scope, fleet_of)
        top_ups = 0
        while not holding:
            # the kill must land on entries in flight: look again while the wave still runs;
            # a wave that ended first (a loaded machine polls seldom) gets more of its jobs
            if ended_count(store, scope, expected) == len(expected):
                assert top_ups < MAX_TOP_UPS, (
                    f"wave {w} and {top_ups} more of its jobs ended before any instance was "
                    "caught holding entries: no kill in flight"
                )
                top_ups += 1
                more = submit_jobs(store, scope, good, f"ok{w}more{top_ups}", size)
                expected |= dict.fromkeys(more, COMPLETED)
            holding = caught_holding(store, scope, fleet_of)
        victim, n = rnd.choice(holding)
        held.append(n)
        victim.kill()
        victim.start().wait_serving()
    wait_until(settled(store, scope, expected), timeout=180, what="every job to end")
    assert len(held) == kills and all(n > 0 for n in held), held  # every kill hit entries
    figures = check(store, scope, expected, answers=fleet.answers())
    assert equipment.error is None
    print_figures(
        "1 workers killed",
        env=env or {},
        jobs=len(expected),
        instances=instances,
        kills=kills,
        waves=waves,
        kill_moments=f"after {moments} commands of each wave",
        entries_held_by_the_killed=held,
        ended=figures.ended,
        commands=figures.commands,
        conflicts="n/a (sfc serve reports none)",
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_1_workers_killed_mid_flight(fleet: Fleet) -> None:
    workers_killed(fleet, jobs=30, kills=2)


def test_1_workers_killed_with_a_batch_in_flight(fleet: Fleet) -> None:
    """One entry a batch: each worker evaluates its next batch while the one before is in
    flight (Worker(overlap=True)), so a kill finds commits written whose replies were not read."""
    workers_killed(fleet, jobs=30, kills=2, env={"SFC_READ_COUNT": "1"})


@pytest.mark.faults_long
def test_1_workers_killed_mid_flight_long(fleet: Fleet) -> None:
    workers_killed(fleet, jobs=300, kills=6)


@pytest.mark.faults_long
def test_1_workers_killed_with_a_batch_in_flight_long(fleet: Fleet) -> None:
    workers_killed(fleet, jobs=300, kills=6, env={"SFC_READ_COUNT": "1"})


# -- 3. the server dies


def acknowledged(store: Store, scope: str, jobs: Iterable[str]) -> dict[str, Any]:
    """What the server has acknowledged so far: the ended jobs, the equipment entry ids, the
    history lengths."""
    r = store.r
    pipe = r.pipeline(transaction=False)
    jobs = list(jobs)
    for j in jobs:
        pipe.hget(keys.job(scope, j), "order")
        pipe.xlen(keys.history(scope, j))
    rows = pipe.execute()
    ended_jobs = {
        j: path_text(decode_order(o))
        for j, o in zip(jobs, rows[0::2], strict=True)
        if o is not None and ended(decode_order(o))
    }
    history = dict(zip(jobs, rows[1::2], strict=True))
    equipment = [i for i, _ in store.equipment_entries(scope)]
    return {"ended": ended_jobs, "history": history, "equipment": equipment}


def lost(store: Store, scope: str, before: dict[str, Any], read: list[str]) -> dict[str, Any]:
    """What the server acknowledged before the fault and no longer has."""
    after = acknowledged(store, scope, before["history"])
    present = set(after["equipment"])
    return {
        "ended jobs": {j: p for j, p in before["ended"].items() if after["ended"].get(j) != p},
        "history": {j: n for j, n in before["history"].items() if after["history"][j] < n},
        "equipment entries": [i for i in [*before["equipment"], *read] if i not in present],
    }


def server_dies(
    fleet: Fleet, jobs: int, fsync: Fsync, crash: bool, instances: int = 2, lossless: bool = True
) -> None:
    """The server dies mid-run and comes back on the same data directory and port. With
    `lossless`, nothing it acknowledged may be lost; without (appendfsync everysec and a
    SIGKILL), what was lost is counted, and every job still completes (retries allowed)."""
    t0 = time.monotonic()
    server = fleet.server(fsync)
    scope = fleet.scope(server.url, f"server-{fsync}")
    store = fleet.store(server.url)
    equipment = fleet.scripted(server.url, scope, {"default": "ok@50"})
    serving = [fleet.instance(server.url, scope) for _ in range(instances)]
    for i in serving:
        i.wait_serving()
    recipe = (
        chain_recipe(["a1", "a2", "a3"], timeout_s=30)
        if lossless
        else chain_recipe(["a1", "a2", "a3"], timeout_s=3, max_attempts=5)
    )
    # half the jobs end before the fault; the other half are a third through
    done = submit_jobs(store, scope, recipe, "done", jobs // 2)
    wait_until(lambda: ended_count(store, scope, done) == len(done), timeout=60, what="half")
    running = submit_jobs(store, scope, recipe, "running", jobs - len(done))
    expected = dict.fromkeys([*done, *running], COMPLETED)
    wait_until(
        lambda: equipment.counters.asked >= 3 * len(done) + len(running),
        timeout=60,
        what="a third of the running jobs' commands",
    )
    before = acknowledged(store, scope, expected)
    if crash:
        server.kill()
    else:
        server.stop()
    read_before = list(equipment.read_ids)
    down = time.monotonic()
    for i in serving:
        wait_until(i.logged("the server is unreachable"), timeout=30, what="unreachable")
    time.sleep(1.0)  # the fault itself: the server stays down a second longer
    server.start()
    restart = time.monotonic() - down
    for i in serving:
        wait_until(i.logged("reconnected after"), timeout=30, what="a reconnection")
    reconnected = [
        float(line.split("reconnected after ")[1].split()[0])
        for i in serving
        for line in i.log().splitlines()
        if "reconnected after " in line
    ]
    store = fleet.store(server.url)
    missing = lost(store, scope, before, read_before)
    if lossless:
        assert not any(missing.values()), f"acknowledged and lost: {missing}"
    expected |= dict.fromkeys(submit_jobs(store, scope, recipe, "after", jobs // 5), COMPLETED)
    wait_until(settled(store, scope, expected), timeout=120, what="every job to end")
    figures = check(store, scope, expected, answers=fleet.answers())
    assert all(i.alive() for i in serving)
    assert equipment.error is None
    print_figures(
        f"3 server {'SIGKILL' if crash else 'SHUTDOWN'} (appendfsync {fsync})",
        jobs=len(expected),
        instances=instances,
        kills=f"server {'SIGKILL' if crash else 'SIGTERM'} x1",
        ended_before=len(before["ended"]),
        down_seconds=f"{restart:.1f}",
        reconnected_after_s=reconnected,
        lost={k: len(v) for k, v in missing.items()},
        equipment_reconnects=equipment.outages,
        ended=figures.ended,
        conflicts="n/a (sfc serve reports none)",
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_3_the_server_is_killed_with_fsync_always_and_nothing_is_lost(fleet: Fleet) -> None:
    server_dies(fleet, jobs=30, fsync="always", crash=True)


def test_3_the_server_shuts_down_with_everysec_and_nothing_is_lost(fleet: Fleet) -> None:
    server_dies(fleet, jobs=30, fsync="everysec", crash=False)


def test_3_the_server_is_killed_with_everysec_and_every_job_completes(fleet: Fleet) -> None:
    # a SIGKILL of the server alone: each write reached the kernel before it was
    # acknowledged, so normally nothing is lost (a machine crash can lose up to a second)
    server_dies(fleet, jobs=30, fsync="everysec", crash=True, lossless=False)


@pytest.mark.faults_long
def test_3_the_server_dies_long(fleet: Fleet) -> None:
    server_dies(fleet, jobs=300, fsync="always", crash=True, instances=3)


# -- 2. everything down past the deadlines


def everything_down(fleet: Fleet, jobs: int, threshold_s: float, instances: int = 2) -> None:
    t0 = time.monotonic()
    server = fleet.server()
    scope = fleet.scope(server.url, "outage")
    store = fleet.store(server.url)
    env = {"SFC_OUTAGE_THRESHOLD": f"{int(threshold_s * 1000)}ms"}
    timeout_s = int(4 * threshold_s)
    # every answer comes 1.5 s after its command; the outage holds them back past the
    # deadline, and one attempt only: a job that timed out would be Aborted
    equipment = fleet.scripted(server.url, scope, {"default": f"ok@{int(timeout_s * 375)}"})
    serving = [fleet.instance(server.url, scope, env) for _ in range(instances)]
    for i in serving:
        i.wait_serving()
    recipe = chain_recipe(["a1", "a2"], timeout_s=timeout_s, max_attempts=1)
    expected = dict.fromkeys(submit_jobs(store, scope, recipe, "o", jobs), COMPLETED)
    wait_until(lambda: equipment.counters.asked >= jobs, timeout=60, what="every a1 asked")
    equipment.pause()
    for i in serving:
        i.kill()
    # some jobs were popped by a sweep just before the outage: a tick pending, no due entry
    due = store.due(scope)
    popped = sorted(due)[: max(1, len(due) // 5)]
    for j in popped:
        store.r.zrem(keys.due(scope), j)
        store.add_work(scope, fields("tick", TickData(job=j)))
    running = [j for j in expected if store.r.sismember(keys.active(scope), j)]
    last_beat = int(store.heartbeat(scope)["at"])
    # the fault: stay down for 3x the threshold, and until every deadline has passed, on
    # the server's clock
    until = max(last_beat + 3 * threshold_s * 1000, max(due.values()) + 100)
    wait_until(
        lambda: server.time_ms() >= until, timeout=30, what="3x the threshold and the deadlines"
    )
    deadlines_passed = sum(1 for j, at in due.items() if at < server.time_ms())
    for i in serving:
        i.start()
    wait_until(
        lambda: any("outage of" in i.log() for i in serving), timeout=30, what="the outage pass"
    )
    equipment.resume()
    wait_until(settled(store, scope, expected), timeout=120, what="every job to end")
    figures = check(store, scope, expected, answers=fleet.answers())
    pushes = [decode_equipment(i, f).data for i, f in store.equipment_entries(scope)]
    assert all(d.attempt == 1 for d in pushes if hasattr(d, "attempt")), "a timeout re-sent"
    for j in running:
        details = [decode_history(f).detail for _, f in store.history(scope, j, count=1000)]
        assert any(str(d).startswith("outage of") for d in details), f"{j}: no outage tick"
    gap = max(
        int(str(d).split()[2])
        for j in running
        for d in (decode_history(f).detail for _, f in store.history(scope, j, count=1000))
        if str(d).startswith("outage of")
    )
    print_figures(
        "2 everything down",
        jobs=jobs,
        instances=instances,
        kills=f"{instances} instances SIGKILLed, equipment paused",
        running_at_outage=len(running),
        popped_ticks=len(popped),
        deadlines_passed_while_down=deadlines_passed,
        outage_ms=gap,
        threshold_ms=int(threshold_s * 1000),
        ended=figures.ended,
        conflicts="n/a (sfc serve reports none)",
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_2_everything_down_past_the_deadlines(fleet: Fleet) -> None:
    everything_down(fleet, jobs=30, threshold_s=1.0)


@pytest.mark.faults_long
def test_2_everything_down_past_the_deadlines_long(fleet: Fleet) -> None:
    everything_down(fleet, jobs=300, threshold_s=2.0, instances=3)


# -- 4. poison


def poison(fleet: Fleet, jobs: int) -> None:
    t0 = time.monotonic()
    server = fleet.server()
    scope = fleet.scope(server.url, "poison")
    store = fleet.store(server.url)
    r = store.r
    max_deliveries = 2
    env = {"SFC_AUTOCLAIM_IDLE": "300ms", "SFC_MAX_DELIVERIES": str(max_deliveries)}
    fleet.scripted(server.url, scope, {"replies": {"hang": ["silent"]}, "default": "ok@20"})
    instance = fleet.instance(server.url, scope, env)
    instance.wait_serving()
    # a job whose equipment never answers: its stored state is the fault injected below
    (hang,) = submit_jobs(store, scope, chain_recipe(["hang"], timeout_s=600), "hang", 1)
    expected: dict[str, End] = {hang: COMPLETED}

    def hang_command() -> Any:
        for i, f in store.equipment_entries(scope):
            e = decode_equipment(i, f)
            if e.kind == "push" and e.data.job == hang:
                return e.data
        return None

    wait_until(lambda: hang_command() is not None, timeout=30, what="the hang job's command")
    command = hang_command()
    # malformed entries: missing fields, an unknown kind, invalid JSON, a 5 MB field
    huge = json.dumps({"job": "p-1", "actionKey": "a1", "outcome": "x" * (5 << 20)})
    malformed: list[dict[str, str]] = [
        {"v": "1", "kind": "answer"},
        {"v": "1", "kind": "bogus", "data": "{}"},
        {"v": "1", "kind": "answer", "data": "{not json"},
        {"v": "1", "kind": "answer", "data": huge},
    ]
    bad = [store.add_work(scope, {k: v.encode() for k, v in m.items()}) for m in malformed]
    # an answer for a job that does not exist: dropped and counted, not dead
    respond(store, scope, "ghost", "a1", outcome="ok", command_id="ghost:a1#1", round=1)
    # a start whose recipe key was deleted
    lost = submit(store, scope, chain_recipe(["lost"], timeout_s=7), job_id="lost", start=False)
    assert lost.ok, lost.words()
    record = store.job(scope, "lost")
    assert record is not None
    r.delete(keys.recipe(decode_order(record.order).recipe_hash))
    assert start_job(store, scope, "lost").ok
    expected["lost"] = End("Aborted", fault="recipe")
    # an entry that raises every time: a tick of a job whose stored state does not decode,
    # popped by the sweep (no due entry)
    state = r.hget(keys.job(scope, hang), "state")
    due = r.zscore(keys.due(scope), hang)
    assert due is not None and state is not None
    r.zrem(keys.due(scope), hang)
    r.hset(keys.job(scope, hang), "state", b'{"broken": ')
    raising = store.add_work(scope, fields("tick", TickData(job=hang)))
    # every other job goes on
    expected |= dict.fromkeys(
        submit_jobs(store, scope, chain_recipe(["a1", "a2"]), "p", jobs), COMPLETED
    )

    def dead_of(entry_id: str) -> tuple[str, dict[bytes, bytes]] | None:
        return next((d for d in store.dead(scope) if d[1][b"entry"] == entry_id.encode()), None)

    wait_until(lambda: dead_of(raising) is not None, timeout=30, what="the raising entry dead")
    dead_id, dead_fields = dead_of(raising) or ("", {})
    assert f"SFC_MAX_DELIVERIES is {max_deliveries}".encode() in dead_fields[b"reason"]
    assert int(dead_fields[b"deliveries"]) == max_deliveries + 1
    assert r.zscore(keys.due(scope), hang) == due, "the job is not back on the due index"
    # repair the fault, requeue the entry with the command line, and the job goes on
    r.hset(keys.job(scope, hang), "state", state)
    done = subprocess.run(
        [SFC, "work", "requeue", dead_id, "--scope", scope, "--redis", server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    requeued = done.stdout.split()[-1]
    wait_until(
        lambda: any(
            decode_history(f).entry == requeued for _, f in store.history(scope, hang, count=50)
        ),
        timeout=30,
        what="the requeued tick applied",
    )
    respond(
        store,
        scope,
        hang,
        command.action_key,
        outcome="ok",
        command_id=command.command_id,
        round=command.round,
    )
    wait_until(settled(store, scope, expected), timeout=60, what="every job to end")
    figures = check(store, scope, expected, dead=bad, answers=fleet.answers())
    reasons = {f[b"entry"].decode(): f[b"reason"].decode() for _, f in store.dead(scope)}
    assert "no field 'data'" in reasons[bad[0]], reasons[bad[0]]
    assert "'bogus' is not a work entry kind" in reasons[bad[1]], reasons[bad[1]]
    assert "not JSON" in reasons[bad[2]], reasons[bad[2]]
    assert "5242928 bytes; at most" in reasons[bad[3]], reasons[bad[3]][:200]
    dropped = counts(r, scope)
    assert dropped.get("answersDropped") == 1, dropped
    lost_order = decode_order((store.job(scope, "lost") or record).order)
    assert lost_order.result is not msgspec.UNSET
    assert "is not stored" in str(lost_order.result.fault_message)
    print_figures(
        "4 poison",
        jobs=len(expected),
        kills=0,
        malformed_dead=len(bad),
        raising_dead_then_requeued=1,
        answers_dropped=dropped["answersDropped"],
        recipe_missing_aborted=1,
        ended=figures.ended,
        conflicts="n/a (sfc serve reports none)",
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_4_poison(fleet: Fleet) -> None:
    poison(fleet, jobs=20)


@pytest.mark.faults_long
def test_4_poison_long(fleet: Fleet) -> None:
    poison(fleet, jobs=300)


# -- 5. races


def races(fleet: Fleet, jobs: int, instances: int = 4) -> None:
    t0 = time.monotonic()
    server = fleet.server()
    scope = fleet.scope(server.url, "races")
    store = fleet.store(server.url)
    fleet.scripted(server.url, scope, {"replies": {"late": ["silent"]}, "default": "ok"})
    serving = [fleet.instance(server.url, scope, runner=True) for _ in range(instances)]
    for i in serving:
        i.wait_serving()
    n_due = max(4, jobs // 5)
    # jobs whose every step answers four at once, and jobs that time out once each
    expected = dict.fromkeys(submit_jobs(store, scope, wide_recipe(4, 2), "w", jobs), COMPLETED)
    timing_out = submit_jobs(
        store, scope, chain_recipe(["late", "a2"], timeout_s=1, max_attempts=1), "t", n_due
    )
    expected |= dict.fromkeys(timing_out, End("Aborted", fault="timeout"))
    wait_until(settled(store, scope, expected), timeout=180, what="every job to end")
    figures = check(store, scope, expected, answers=fleet.answers())
    # four instances sweeping at once: one tick per due job
    for j in timing_out:
        ticks = [
            h
            for h in map(decode_history, (f for _, f in store.history(scope, j)))
            if h.event == "tick"
        ]
        assert len(ticks) == 1, f"{j}: {len(ticks)} ticks"
    for i in serving:
        i.stop()
    reports = [i.report() for i in serving]
    conflicts = sum(r.get("conflicts", 0) for r in reports)
    applied = [r.get("applied", 0) for r in reports]
    assert all(a > 0 for a in applied), f"an instance applied nothing: {applied}"
    print_figures(
        "5 races",
        jobs=len(expected),
        instances=instances,
        kills=0,
        conflicts=conflicts,
        applied_per_instance=applied,
        sweeps_ticks=sum(r.get("ticks", 0) for r in reports),
        due_jobs=n_due,
        ended=figures.ended,
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_5_races(fleet: Fleet) -> None:
    races(fleet, jobs=60)


@pytest.mark.faults_long
def test_5_races_long(fleet: Fleet) -> None:
    races(fleet, jobs=500)


# -- 6. a stalled worker


def stalled_worker(fleet: Fleet, jobs: int) -> None:
    t0 = time.monotonic()
    server = fleet.server()
    scope = fleet.scope(server.url, "stalled")
    store = fleet.store(server.url)
    fleet.scripted(server.url, scope, {"default": "ok@20"})
    expected = dict.fromkeys(
        submit_jobs(store, scope, chain_recipe(["a1", "a2"]), "s", jobs), COMPLETED
    )
    held = fleet.tmp / "held"
    a = fleet.instance(server.url, scope, runner=True, hold_file=held)
    wait_until(held.exists, timeout=30, what="instance A to hold entries")
    a.freeze()
    holding = int(held.read_text())
    pending = store.pending_summary(scope)["pending"]
    assert pending >= holding > 0
    b = fleet.instance(server.url, scope, runner=True)
    # B claims A's entries once they are idle for SFC_AUTOCLAIM_IDLE, and every job ends
    wait_until(lambda: ended_count(store, scope, expected) == jobs, timeout=60, what="B to finish")
    held.unlink()
    a.thaw()
    wait_until(lambda: a.report().get("gone", 0) > 0, timeout=30, what="A's stale commits gone")
    wait_until(settled(store, scope, expected), timeout=60, what="every job to end")
    figures = check(store, scope, expected, answers=fleet.answers())
    a.stop()
    b.stop()
    ra, rb = a.report(), b.report()
    assert ra.get("applied", 0) == 0, ra
    print_figures(
        "6 stalled worker",
        jobs=jobs,
        instances=2,
        kills="A SIGSTOPped holding its first batch, SIGCONT after B took over",
        held_commits=holding,
        gone=ra.get("gone", 0),
        claimed_by_b=rb.get("claimed", 0),
        conflicts=ra.get("conflicts", 0) + rb.get("conflicts", 0),
        ended=figures.ended,
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_6_a_stalled_worker(fleet: Fleet) -> None:
    stalled_worker(fleet, jobs=10)


@pytest.mark.faults_long
def test_6_a_stalled_worker_long(fleet: Fleet) -> None:
    stalled_worker(fleet, jobs=100)


# -- 7. slow and lost equipment


def loop_recipe() -> bytes:
    """S0 (action `man3`) is entered again on the outcome `again`: its command of the second
    round carries round 2."""
    action = {"Qualifier": "N", "Interaction": "push_command", "TimeoutSeconds": 30}
    return json.dumps(
        {
            "Steps": [{"Name": "S0", "Initial": True}, {"Name": "S1"}],
            "Transitions": [
                {"Source": "S0", "Target": "S0", "Condition": "again", "Priority": 0},
                {"Source": "S0", "Target": "S1", "Condition": "true", "Priority": 1},
            ],
            "Actions": [
                {**action, "Name": "man3", "Step": "S0", "TypeId": "com.example.man3.v1"},
                {**action, "Name": "a2", "Step": "S1", "TypeId": "com.example.a2.v1"},
            ],
        }
    ).encode()


def answers_of(store: Store, scope: str, job: str) -> list[tuple[str, str]]:
    """(detail, disposition) of every answer the job's history holds, in order."""
    out: list[tuple[str, str]] = []
    for _, f in store.history(scope, job, count=1000):
        h = decode_history(f)
        if h.event == "answer":
            out.append((str(h.detail), h.disposition))
    return out


def slow_and_lost(fleet: Fleet, each: int) -> None:
    t0 = time.monotonic()
    server = fleet.server()
    scope = fleet.scope(server.url, "slowlost")
    store = fleet.store(server.url)
    script = {
        "replies": {
            "slow": ["ok@2500", "ok@100"],
            "slower": ["ok@2500", "ok@2500"],
            "a2": ["ok"],
        },
        "default": "silent",  # the test answers `man`, `man2` and `man3` itself
    }
    fleet.scripted(server.url, scope, script)
    instance = fleet.instance(server.url, scope)
    instance.wait_serving()
    late = submit_jobs(
        store, scope, chain_recipe(["slow", "a2"], timeout_s=1, max_attempts=2), "late", each
    )
    lost = submit_jobs(
        store, scope, chain_recipe(["slower", "a2"], timeout_s=1, max_attempts=2), "lost", each
    )
    dup = submit_jobs(store, scope, chain_recipe(["man", "a2"]), "dup", each)
    early = submit_jobs(
        store, scope, chain_recipe(["man2", "a2"], timeout_s=1, max_attempts=3), "early", each
    )
    rounds = submit_jobs(store, scope, loop_recipe(), "round", each)
    expected = dict.fromkeys([*late, *dup, *early, *rounds], COMPLETED)
    expected |= dict.fromkeys(lost, End("Aborted", fault="timeout"))
    first: dict[str, Any] = {}
    last = "0-0"

    def answer(data: Any, outcome: str = "ok", *, twice: bool = False) -> None:
        for _ in range(2 if twice else 1):
            respond(
                store,
                scope,
                data.job,
                data.action_key,
                outcome=outcome,
                command_id=data.command_id,
                round=data.round,
            )

    def pump() -> bool:
        nonlocal last
        rows: Any = store.r.xrange(keys.equipment(scope), f"({last}", "+")
        for entry_id, raw in rows:
            last = entry_id.decode()
            e = decode_equipment(last, raw)
            if e.kind != "push":
                continue
            d = e.data
            action = d.action_key.split(":")[-1]
            if action == "man":  # duplicated
                answer(d, twice=True)
            elif action == "man2" and d.attempt == 1:
                first[d.job] = d  # lost: it times out
            elif action == "man2":  # the new attempt's answer, then the old one's (reordered)
                answer(d)
                answer(first[d.job])
            elif action == "man3" and d.round == 1:
                answer(d, "again")
                first[d.job] = d
            elif action == "man3":  # an answer of the earlier round, then this round's
                answer(first[d.job], "ok")
                answer(d)
        return settled(store, scope, expected)() and all(
            len(answers_of(store, scope, j)) >= n
            for jobs, n in ((late, 3), (lost, 2))
            for j in jobs
        )

    try:
        wait_until(pump, timeout=60, what="every job to end and every late answer")
    except AssertionError:
        for j in expected:
            record = store.job(scope, j)
            path = "?" if record is None else path_text(decode_order(record.order))
            print(j, path, answers_of(store, scope, j))
        raise
    figures = check(store, scope, expected, answers=fleet.answers())
    stale = 0
    for j in late:  # attempt 2 answered in time, attempt 1 late: absorbed
        got = answers_of(store, scope, j)
        assert [d for _, d in got] == ["applied", "applied", "absorbed"], got
        assert "slow#" in got[0][0]
        stale += 1
    for j in lost:  # both answers after their deadlines: the job timed out
        got = answers_of(store, scope, j)
        assert [d for _, d in got] == ["absorbed", "absorbed"], got
        stale += 2
    for j in dup:
        got = answers_of(store, scope, j)
        assert [d for _, d in got] == ["applied", "absorbed", "applied"], got
        assert got[0][0] == got[1][0]
        stale += 1
    for j in early:  # attempt 2 answered, then attempt 1 (timed out): absorbed
        got = answers_of(store, scope, j)
        assert [x for x in got if x[1] == "absorbed"] == [("man2#1 'ok'", "absorbed")], got
        assert got[0] == ("man2#2 'ok'", "applied") and len(got) == 3, got
        stale += 1
    for j in rounds:  # round 2's command out, then an answer of round 1: absorbed
        got = answers_of(store, scope, j)
        assert [x for x in got if x[1] == "absorbed"] == [("man3#1 'ok'", "absorbed")], got
        assert got[0] == ("man3#1 'again'", "applied") and len(got) == 4, got
        stale += 1
    print_figures(
        "7 slow and lost equipment",
        jobs=len(expected),
        kills=0,
        cases="late, all late, duplicated, earlier attempt after the new one, earlier round",
        stale_answers_absorbed=stale,
        ended=figures.ended,
        conflicts="n/a (sfc serve reports none)",
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_7_slow_and_lost_equipment(fleet: Fleet) -> None:
    slow_and_lost(fleet, each=3)


@pytest.mark.faults_long
def test_7_slow_and_lost_equipment_long(fleet: Fleet) -> None:
    slow_and_lost(fleet, each=30)

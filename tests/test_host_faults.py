"""Fault tests (issue #13): kill, starve and poison the host, and lose nothing.

Real processes on a real server (tests/faultkit.py): `sfc serve` instances as subprocesses,
valkey-server started by the test so that it can be killed on its own, scripted equipment,
and a checker of the invariants. Each test prints its figures (run with -s). The long forms
are marked `faults_long` and run with `-m faults_long` or SFC_FAULTS_LONG=1; a short form of
each runs by default.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faultkit import (
    COMPLETED,
    End,
    Fleet,
    chain_recipe,
    check,
    ended_count,
    print_figures,
    seeded,
    settled,
    submit_jobs,
    wait_until,
)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.close()


# -- 1. workers killed mid-flight


def workers_killed(fleet: Fleet, jobs: int, kills: int, instances: int = 3) -> None:
    t0 = time.monotonic()
    _, rnd = seeded("fault 1 (workers killed)")
    server = fleet.server()
    scope = fleet.scope(server.url, "killed")
    store = fleet.store(server.url)
    equipment = fleet.scripted(
        server.url, scope, {"replies": {"jam": ["error:jammed"]}, "default": "ok@20"}
    )
    fleet_of = [fleet.instance(server.url, scope) for _ in range(instances)]
    for i in fleet_of:
        i.wait_serving()
    good = chain_recipe(["a1", "a2", "a3"])
    bad = chain_recipe(["a1", "jam"], max_attempts=1)
    n_bad = max(1, jobs // 10)
    expected = dict.fromkeys(submit_jobs(store, scope, good, "ok", jobs - n_bad), COMPLETED)
    expected |= dict.fromkeys(
        submit_jobs(store, scope, bad, "jam", n_bad), End("Aborted", fault="error")
    )
    moments = sorted(rnd.sample(range(1, int(jobs * 0.8)), kills))
    for at in moments:

        def enough(at: int = at) -> bool:
            return ended_count(store, scope, expected) >= at

        wait_until(enough, timeout=120, what=f"{at} jobs to end")
        victim = rnd.choice(fleet_of)
        victim.kill()
        victim.start()
    wait_until(settled(store, scope, expected), timeout=180, what="every job to end")
    figures = check(store, scope, expected)
    assert equipment.error is None
    print_figures(
        "1 workers killed",
        jobs=jobs,
        instances=instances,
        kills=kills,
        kill_moments=f"after {moments} jobs ended",
        ended=figures.ended,
        commands=figures.commands,
        conflicts="n/a (sfc serve reports none)",
        dead=figures.dead,
        seconds=f"{time.monotonic() - t0:.1f}",
    )


def test_1_workers_killed_mid_flight(fleet: Fleet) -> None:
    workers_killed(fleet, jobs=30, kills=2)


@pytest.mark.faults_long
def test_1_workers_killed_mid_flight_long(fleet: Fleet) -> None:
    workers_killed(fleet, jobs=300, kills=6)

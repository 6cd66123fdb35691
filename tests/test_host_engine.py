"""The host on a real server: jobs run to the end through workers and the equipment stream."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from generated.state_v1_5 import SfcState
from generated.work_entry_v1_0 import TickData
from host import keys
from host.entries import decode_history, fields
from host.equipment import publish_event
from host.joborder import job_response, path_text
from host.jobs import clear
from host.settings import Settings
from host.store import Commit
from host.worker import Worker
from sfc.codec import state_decoder
from tests.hostkit import FAST, Host, linear_recipe, wait_for

AXLE = (
    Path(__file__).resolve().parent.parent / "examples/rear-axle-fitting/recipe.json"
).read_bytes()


def test_push_recipe_runs_to_completed_through_two_instances(host: Host) -> None:
    scope = host.scope("two")
    jobs = [host.submit(scope, linear_recipe(3), job_id=f"j{i}").job for i in range(6)]
    a, b = host.worker([scope]), host.worker([scope])
    responder = host.responder(scope)
    host.run([a, b], [responder], host.ended(scope, jobs))
    for job in jobs:
        order = host.order(scope, job)
        assert path_text(order) == "Ended/Completed"
        response = job_response(order)
        data = {p.id: p.value for p in response.job_response_data}
        assert data["endedBy"] == "completed"
        assert data["outcomes"] == ["ok"]
        assert response.start_time is not None and response.end_time is not None
    # both instances applied some of the work
    assert a.counters.outcome.applied > 0 and b.counters.outcome.applied > 0
    pushes = [d for _, kind, d in host.equipment(scope) if kind == "push"]
    assert len(pushes) == 3 * len(jobs)


def test_the_shipped_axle_recipe_responds_with_the_outcome_that_ended_it(host: Host) -> None:
    """The rear-axle recipe ends in a step without actions (Complete): its job response
    carries the outcome that led there, the torque check's, not an empty list."""
    scope = host.scope("axle")
    store = host.store()
    job = host.submit(scope, AXLE, job_id="axle").job
    responder = host.responder(scope)
    responder.on_await = lambda d: publish_event(
        store,
        scope,
        d.type_id,
        subject=None if d.selector is None else d.selector.subject,
        correlation_id=None if d.selector is None else d.selector.correlation_id,
        outcome="qa_ok" if "qa" in d.type_id else "torque_ok",
        source="s",
        id=d.command_id,
    )
    host.run([host.worker([scope])], [responder], host.ended(scope, [job]))
    response = job_response(host.order(scope, job))
    data = {p.id: p.value for p in response.job_response_data}
    assert (data["endedBy"], data["outcomes"]) == ("completed", ["torque_ok"])


def test_a_workers_lifetime_counters_keep_counts_not_a_list_of_every_entry(host: Host) -> None:
    """A worker added each batch's lists (answer waits, ended jobs) to its lifetime
    counters: some 36 bytes an answer and 430 a job, for as long as `sfc serve` ran."""
    scope = host.scope("counters")
    jobs = [host.submit(scope, linear_recipe(3), job_id=f"j{i}").job for i in range(5)]
    worker = host.worker([scope])
    ends: list[str] = []
    inner = worker.worklog.applied

    def report(scope: str, outcome: Any, seconds: float, entries: int) -> None:
        ends.extend(e.job for e in outcome.ends)  # each batch still has its own
        inner(scope, outcome, seconds, entries)

    worker.worklog.applied = report  # type: ignore[method-assign]
    host.run([worker], [host.responder(scope)], host.ended(scope, jobs))
    counted = worker.counters.outcome
    assert counted.applied == 5 * 4 and sorted(ends) == sorted(jobs)
    assert counted.kinds[("answer", "applied")] == 15
    assert (counted.answer_waits, counted.ends, counted.given_up) == ([], [], [])
    # and of failures the last FAILURES_KEPT: a bug that makes every entry raise
    from host.apply import FAILURES_KEPT, Outcome

    lifetime = Outcome()
    for i in range(FAILURES_KEPT + 5):
        lifetime.add(Outcome(failed=[(f"{i}-0", "boom")]), lists=False)
    assert [f[0] for f in lifetime.failed] == [f"{i}-0" for i in range(5, FAILURES_KEPT + 5)]


def test_silent_equipment_is_sent_again_then_the_job_aborts_with_timeout(host: Host) -> None:
    scope = host.scope("deadline")
    job = host.submit(scope, linear_recipe(1, timeout_s=1, max_attempts=2), job_id="j").job
    worker = host.worker([scope])
    silent = host.responder(scope, lambda kind, data: None)
    host.run([worker], [silent], host.ended(scope, [job], "Aborted"), timeout=15)
    order = host.order(scope, job)
    assert path_text(order) == "Aborted"
    assert order.result.fault_code == "timeout"
    stream = [
        (kind, d.command_id, getattr(d, "attempt", None)) for _, kind, d in host.equipment(scope)
    ]
    pushes = [(cid, attempt) for kind, cid, attempt in stream if kind == "push"]
    assert pushes == [("j:a1#1", 1), ("j:a1#2", 2)]
    withdrawn = [cid for kind, cid, _ in stream if kind == "withdraw"]
    assert sorted(withdrawn) == ["j:a1#1", "j:a1#2"]
    # the second attempt went out 1 s after the first: its deadline moved by the timeout
    deadlines = [d.deadline for _, kind, d in host.equipment(scope) if kind == "push"]
    assert deadlines[1] - deadlines[0] >= 1000


def _after_outage(host: Host, scope: str, settings: Settings, down_ms: int, past: int) -> Worker:
    """Wait, on the server's clock, `down_ms` from now and past `past` (no worker sweeps
    meanwhile: an outage); then a new worker's first sweep finds the gap."""
    stopped_at = _server_ms(host)
    wait_for(
        lambda: _server_ms(host) > max(stopped_at + down_ms, past),
        timeout=10,
        what="an outage past the threshold and the deadlines",
    )
    worker = host.worker([scope], settings)
    worker.sweep_once()
    assert worker.counters.outages == 1
    return worker


def _server_ms(host: Host) -> int:
    return host.store().time_ms()


def _state(host: Host, scope: str, job: str) -> SfcState:
    record = host.store().job(scope, job)
    assert record is not None
    return state_decoder.decode(record.state)


def test_an_outage_moves_every_open_deadline_and_no_job_times_out(host: Host) -> None:
    scope = host.scope("outage")
    settings = replace(FAST, outage_threshold=2000)
    quick = host.submit(scope, linear_recipe(2, timeout_s=1, max_attempts=2), job_id="popped").job
    slow = [
        host.submit(scope, linear_recipe(2, timeout_s=2, max_attempts=1), job_id=f"j{i}").job
        for i in range(3)
    ]
    a = host.worker([scope], settings)
    host.run(
        [a], [], lambda: all(_state(host, scope, j).status == "running" for j in [quick, *slow])
    )
    before = {j: _state(host, scope, j).actions["a1"].deadline for j in slow}
    # the quick job's deadline passes: one sweep pops its tick, and every instance stops
    # before the tick is applied
    quick_deadline = _state(host, scope, quick).actions["a1"].deadline
    assert quick_deadline is not None
    wait_for(lambda: _server_ms(host) > quick_deadline, what="the quick job's deadline")
    assert a.sweep_once() == 1
    assert host.client().zscore(keys.due(scope), quick) is None  # popped: no due entry
    latest = max(d for d in before.values() if d is not None)
    # one instance starts again: its first sweep finds the gap and ticks every active job
    b = _after_outage(host, scope, settings, 2500, latest + 500)
    host.run([b], [], lambda: all(_moved(host, scope, j, before[j]) for j in slow), sweep=False)
    for job in slow:
        assert _state(host, scope, job).status == "running"
    responder = host.responder(scope)
    host.run([b], [responder], host.ended(scope, [quick, *slow]))
    for job in [quick, *slow]:
        assert host.order_path(scope, job) == "Ended/Completed", job
    # the popped job's expired tick sent attempt 2 (its deadline had passed before the stop);
    # every other job kept attempt 1
    pushes = {(d.job, d.command_id, d.attempt) for _, k, d in host.equipment(scope) if k == "push"}
    assert ("popped", "popped:a1#2", 2) in pushes
    assert all(attempt == 1 for job, _, attempt in pushes if job != "popped")


def _moved(host: Host, scope: str, job: str, before: int | None) -> bool:
    deadline = _state(host, scope, job).actions["a1"].deadline
    return before is not None and deadline is not None and deadline >= before + 2000


def test_a_stalled_worker_whose_entry_was_claimed_gets_gone_and_the_effect_happens_once(
    host: Host,
) -> None:
    scope = host.scope("claimed")
    job = host.submit(scope, linear_recipe(1, timeout_s=60), job_id="j").job
    a, b = host.worker([scope]), host.worker([scope])
    host.run([a], [], lambda: _state(host, scope, job).status == "running", sweep=False)
    deadline = _state(host, scope, job).actions["a1"].deadline
    assert deadline is not None
    tick = host.store().add_work(scope, fields("tick", TickData(job=job, outage_ms=5000)))

    def stall(commits: list[Commit]) -> None:
        # A has loaded and evolved the tick; it stalls past the autoclaim idle, B claims it
        a.applier.before_commit = None
        r = host.client()
        wait_for(
            lambda: (
                r.xpending_range(keys.work(scope), keys.GROUP, tick, tick, 1)[0][
                    "time_since_delivered"
                ]
                > FAST.autoclaim_idle
            ),
            what="the entry to be idle",
        )
        b.claim_once()

    a.applier.before_commit = stall
    outcome = a.read_once(block_ms=100)
    assert outcome.gone == 1 and outcome.applied == 0
    assert b.counters.claimed == 1 and b.counters.outcome.applied == 1
    assert _state(host, scope, job).actions["a1"].deadline == deadline + 5000
    history = host.store().history(scope, job)
    assert [decode_history(f).detail for _, f in history].count("outage of 5000 ms") == 1


def test_a_batch_whose_commits_were_taken_over_says_which_entries_of_which_jobs_once(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit that returns gone drops this worker's result: the log says which entries of
    which jobs, and why, in one line for the batch (it was a counter only)."""
    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("gonelog")
    jobs = [host.submit(scope, linear_recipe(1, timeout_s=60), job_id=j).job for j in "pq"]
    a, b = host.worker([scope]), host.worker([scope])
    host.run(
        [a], [], lambda: all(_state(host, scope, j).status == "running" for j in jobs), sweep=False
    )
    ticks = {j: host.store().add_work(scope, fields("tick", TickData(job=j))) for j in jobs}
    last = max(ticks.values())

    def stall(commits: list[Commit]) -> None:
        a.applier.before_commit = None
        r = host.client()
        wait_for(
            lambda: (
                r.xpending_range(keys.work(scope), keys.GROUP, last, last, 1)[0][
                    "time_since_delivered"
                ]
                > FAST.autoclaim_idle
            ),
            what="the entries to be idle",
        )
        b.claim_once()

    a.applier.before_commit = stall
    outcome = a.read_once(block_ms=100)
    assert outcome.gone == 2 and outcome.applied == 0
    said = [x for x in caplog.records if "gave up" in x.getMessage()]
    assert len(said) == 1, caplog.text
    assert (
        said[0]
        .getMessage()
        .startswith(f"scope {scope}: gave up 2 entries that another consumer took over")
    )
    assert said[0].getMessage().endswith(f": job p: {ticks['p']}; job q: {ticks['q']}")


def test_a_job_id_stored_again_after_clear_never_reuses_a_command_id(host: Host) -> None:
    scope = host.scope("reuse")
    worker, responder = host.worker([scope]), host.responder(scope)
    first: set[str] = set()
    for run in range(3):
        host.submit(scope, linear_recipe(3), job_id="same")
        host.run([worker], [responder], host.ended(scope, ["same"]))
        assert host.order_path(scope, "same") == "Ended/Completed"
        ids = {d.command_id for _, k, d in host.equipment(scope) if k == "push"} - first
        assert len(ids) == 3, f"run {run}: {ids}"
        first |= ids
        result = clear(host.store(), scope, "same")
        assert result.ok, result.words()
        assert host.store().job(scope, "same") is None
        assert host.store().history(scope, "same") == []
    assert len(first) == 9


def test_the_equipment_stream_is_trimmed_below_what_every_group_acknowledged_and_kept_for_its_retention(
    host: Host,
) -> None:
    scope = host.scope("trim")
    jobs = [host.submit(scope, linear_recipe(2), job_id=f"j{i}").job for i in range(3)]
    worker, responder = host.worker([scope]), host.responder(scope)
    host.run([worker], [responder], host.ended(scope, jobs))
    store, r = host.store(), host.client()
    total = r.xlen(keys.equipment(scope))
    assert total >= 6
    later = _server_ms(host) + 10 * 86_400_000
    store.equipment_group(scope, "late")  # an adapter that has read nothing yet
    # a group that ten days on has still read nothing is stale, its adapter gone
    # (docs/host.md "Trimming"): "gone" holds back nothing at `later` (else the trims at
    # `later` below removed nothing), while "late", whose adapter reads, does
    store.equipment_group(scope, "gone")
    rows = store.read_equipment(scope, "late", "c1", 4, None)
    store.ack_equipment(scope, "late", [i for i, _ in rows[:2]])  # two acked, two pending
    # retention keeps everything younger than 24 h past its expiresAt, whatever the groups did
    assert store.trim_equipment(scope, 86_400_000) == 0
    assert store.trim_equipment(scope, 86_400_000, now=later) == 2
    assert r.xlen(keys.equipment(scope)) == total - 2
    store.ack_equipment(scope, "late", [i for i, _ in rows[2:]])
    rest = store.read_equipment(scope, "late", "c1", 1000, None)
    store.ack_equipment(scope, "late", [i for i, _ in rest])
    assert store.trim_equipment(scope, 86_400_000, now=later) == total - 2
    assert r.xlen(keys.equipment(scope)) == 0


def test_an_instance_taking_the_scope_up_during_an_outage_pass_times_no_job_out(
    host: Host,
) -> None:
    """A late instance's recovery (`repair`) runs after another instance's outage pass took
    a job off the due index, and before that job's outage tick is applied: it puts the job's
    deadline from before the outage back on the due index. No sweep may pop it until the
    outage tick is applied: a tick applied first (by another instance) timed the job out
    (tests/test_host_faults.py::test_2_everything_down_past_the_deadlines, rarely)."""
    scope = host.scope("outage-repair")
    settings = replace(FAST, outage_threshold=1000)
    job = host.submit(scope, linear_recipe(2, timeout_s=1, max_attempts=1), job_id="j").job
    a = host.worker([scope], settings)
    host.run([a], [], lambda: _state(host, scope, job).status == "running", sweep=False)
    a.sweep_once()  # the heartbeat
    deadline = _state(host, scope, job).actions["a1"].deadline
    assert deadline is not None
    # every instance was down; b comes back: its first sweep runs the whole outage pass
    b = _after_outage(host, scope, settings, 1500, deadline + 200)
    r = host.client()
    assert r.zscore(keys.due(scope), job) is None  # left off until its outage tick is applied
    # c takes the scope up before b has applied the outage tick: its recovery puts the job's
    # deadline back on the due index from the hash, which the outage has not moved yet
    c = host.worker([scope], settings)
    assert r.zscore(keys.due(scope), job) == deadline
    swept: list[int] = []

    def race(commits: list[Commit]) -> None:
        # b has loaded and evolved the outage tick; before it commits, c sweeps and applies
        b.applier.before_commit = None
        swept.append(c.sweep_once())
        c.read_once(block_ms=50)

    b.applier.before_commit = race
    b.read_once(block_ms=100)
    assert swept == [0], "a sweep ticked the job before its outage tick was applied"
    assert _state(host, scope, job).status == "running", host.order_path(scope, job)
    moved = _state(host, scope, job).actions["a1"].deadline
    assert moved is not None and moved >= deadline + 1000
    assert r.zscore(keys.due(scope), job) == moved
    host.run([b, c], [host.responder(scope)], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"

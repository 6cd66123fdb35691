"""Recovery on a real server: lost indexes, late instances, killed instances, bad entries."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generated.work_entry_v1_0 import TickData
from host import jobview, keys
from host.entries import fields
from host.store import DEAD_FIELDS
from host.worker import Worker
from sfc.codec import state_decoder
from tests.hostkit import FAST, Host, counts, linear_recipe, wait_for

ROOT = Path(__file__).resolve().parent.parent


def _status(host: Host, scope: str, job: str) -> str:
    record = host.store().job(scope, job)
    assert record is not None
    return state_decoder.decode(record.state).status


def test_a_lost_due_index_is_repaired_by_a_new_instance_and_the_deadlines_fire(host: Host) -> None:
    scope = host.scope("due")
    job = host.submit(scope, linear_recipe(1, timeout_s=1, max_attempts=2), job_id="j").job
    a = host.worker([scope])
    host.run([a], [], lambda: _status(host, scope, job) == "running", sweep=False)
    r = host.client()
    assert r.zscore(keys.due(scope), job) is not None
    r.delete(keys.due(scope))
    b = host.worker([scope])  # takes the scope up: repair
    assert b.counters.repaired == 1
    assert r.zscore(keys.due(scope), job) is not None
    host.run([b], [], host.ended(scope, [job], "Aborted"), timeout=10)
    pushes = [d.attempt for _, k, d in host.equipment(scope) if k == "push"]
    assert pushes == [1, 2]
    assert host.order(scope, job).result.fault_code == "timeout"


def test_a_scope_first_used_through_one_instance_is_picked_up_by_a_later_one(
    own_valkey_url: str,
) -> None:
    # the registry is server-wide: this test has a server of its own, empty at the start
    host = Host(own_valkey_url)
    try:
        a = Worker(host.store(), FAST, None)
        assert a.refresh_scopes() == []
        scope = host.scope("late")
        job = host.submit(scope, linear_recipe(2), job_id="j").job
        assert a.refresh_scopes() == [scope]
        b = Worker(host.store(), FAST, None)
        assert b.refresh_scopes() == [scope]
        host.run([b], [host.responder(scope)], host.ended(scope, [job]))
        assert host.order_path(scope, job) == "Ended/Completed"
        assert b.counters.outcome.applied == 3 and a.counters.outcome.applied == 0
        host.check_exactly_once()
    finally:
        host.close()


def test_a_start_written_before_any_instance_existed_is_read(host: Host) -> None:
    scope = host.scope("early")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(3)]
    assert host.client().xlen(keys.work(scope)) == 3
    worker = host.worker([scope])
    host.run([worker], [host.responder(scope)], host.ended(scope, jobs))
    assert all(host.order_path(scope, j) == "Ended/Completed" for j in jobs)


def test_a_killed_instance_leaves_its_entries_pending_and_another_takes_them_over(
    host: Host, valkey_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("killed")
    jobs = [host.submit(scope, linear_recipe(2), job_id=f"j{i}").job for i in range(5)]
    marker = tmp_path / "stalled"
    env = {**os.environ, "SFC_AUTOCLAIM_IDLE": "300ms", "SFC_SWEEP_INTERVAL": "50ms"}
    a = subprocess.Popen(
        [sys.executable, "-m", "tests.host_runner", valkey_url, scope, "--stall-file", str(marker)],
        cwd=ROOT,
        env=env,
    )
    try:
        wait_for(marker.exists, timeout=20, what="instance A to hold entries")
        pending = host.client().xpending(keys.work(scope), keys.GROUP)
        assert pending["pending"] == 5
        a.send_signal(signal.SIGKILL)
        a.wait(10)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    b = host.worker([scope])
    host.run([b], [host.responder(scope)], host.ended(scope, jobs), timeout=20)
    assert all(host.order_path(scope, j) == "Ended/Completed" for j in jobs)
    assert b.counters.claimed == 5
    assert host.client().xpending(keys.work(scope), keys.GROUP)["pending"] == 0
    # the takeover is logged (it was a counter only): which scope, how many, which entries
    took = [x.getMessage() for x in caplog.records if "took over" in x.getMessage()]
    assert took and took[0].startswith(
        f"scope {scope}: took over 5 entries left pending for over 300 ms"
    ), took


def test_a_malformed_entry_goes_dead_with_its_reason_and_the_worker_goes_on(host: Host) -> None:
    scope = host.scope("malformed")
    worker = host.worker([scope])
    r = host.client()
    bad = [
        {"v": "1", "kind": "bogus", "data": "{}"},
        {"v": "2", "kind": "tick", "data": '{"job": "x"}'},
        {"v": "1", "kind": "answer", "data": "not json"},
        {"v": "1", "kind": "tick", "data": '{"job": "x", "outageMs": -5}'},
        {"kind": "tick"},
    ]
    ids = [r.xadd(keys.work(scope), e).decode() for e in bad]  # type: ignore[arg-type]
    job = host.submit(scope, linear_recipe(1), job_id="j").job
    host.run([worker], [host.responder(scope)], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"
    dead = host.store().dead(scope)
    assert [f[b"entry"].decode() for _, f in dead] == ids
    reasons = [f[b"reason"].decode() for _, f in dead]
    assert "kind 'bogus' is not a work entry kind" in reasons[0]
    assert "entry format v='2' is unknown" in reasons[1]
    assert "answer data is not JSON" in reasons[2]
    assert "tick data does not fit its schema" in reasons[3] and "outageMs" in reasons[3]
    assert "no field 'v'" in reasons[4]
    assert dead[0][1][b"kind"] == b"bogus"  # the entry's own fields are kept
    assert r.xpending(keys.work(scope), keys.GROUP)["pending"] == 0


def test_the_line_of_a_dead_entry_names_the_job_it_names(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/metrics.md promises a dead entry's line a `job` field when the entry names one:
    a malformed entry whose data named j1 had none (it is buried without its job). Now the
    line names it, in its text and as the JSON field; one that names no job has neither."""
    from host.logs import JsonFormatter

    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("deadjob")
    worker = host.worker([scope])
    r = host.client()
    bad = [
        {"v": "1", "kind": "answer", "data": '{"job": "j1"}'},  # no action, no command id
        {"v": "1", "kind": "bogus", "data": '{"job": "j2", "x": 1}'},
        {"v": "1", "kind": "tick", "data": '{"job": "a{b}"}'},  # no job id: named nowhere
        {"v": "1", "kind": "bogus", "data": "{}"},
    ]
    ids = [r.xadd(keys.work(scope), e).decode() for e in bad]  # type: ignore[arg-type]
    worker.read_once(block_ms=100)
    lines = [x for x in caplog.records if "is dead" in x.getMessage()]
    docs = [json.loads(JsonFormatter().format(x)) for x in lines]
    assert [d["entry"] for d in docs] == ids
    assert [d.get("job") for d in docs] == ["j1", "j2", None, None]
    assert docs[0]["message"].startswith(f"scope {scope}: entry {ids[0]} of job j1 is dead: ")
    assert docs[3]["message"].startswith(f"scope {scope}: entry {ids[3]} is dead: malformed")
    assert all(d["disposition"] == "dead" and d["reason"].startswith("malformed") for d in docs)
    assert r.xlen(keys.dead(scope)) == 4


def test_an_entry_that_raises_every_time_goes_dead_and_its_job_is_back_on_the_due_index(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("poison")
    job = host.submit(scope, linear_recipe(1, timeout_s=600), job_id="j").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _status(host, scope, job) == "running", sweep=False)
    r = host.client()
    due = r.zscore(keys.due(scope), job)
    assert due is not None
    # the sweep popped the job, and its state no longer decodes: the tick raises every time
    r.zrem(keys.due(scope), job)
    r.hset(keys.job(scope, job), "state", b'{"broken": ')
    host.store().add_work(scope, fields("tick", TickData(job=job)))

    def dead() -> bool:
        return r.xlen(keys.dead(scope)) == 1

    def step() -> None:
        worker.read_once(block_ms=5)
        worker.claim_once()

    wait_for(dead, step=step, timeout=15, what="the entry to go dead")
    ((_, entry),) = host.store().dead(scope)
    assert b"SFC_MAX_DELIVERIES is 3" in entry[b"reason"]
    # why, which only the log of the worker that raised said before
    assert b"; the job's stored order or state cannot be read: " in entry[b"reason"]
    # by its name, in the words of the worker's lines (way_out)
    assert entry[b"reason"].endswith(
        b"(unless a newer sfc wrote it, `sfc job clear j --unreadable` removes the job)"
    )
    assert int(entry[b"deliveries"]) == FAST.max_deliveries + 1
    assert worker.counters.outcome.failed  # it was tried, and raised, before
    assert r.zscore(keys.due(scope), job) == due
    assert r.xpending(keys.work(scope), keys.GROUP)["pending"] == 0
    # each time it failed, the error names the scope, the job and the entry as log fields
    # (the JSON log's `scope`, `job`, `entry`), not only in its text
    raised = [x for x in caplog.records if "cannot be evaluated" in x.getMessage()]
    assert raised, caplog.text
    for x in raised:
        assert (x.scope, x.job, x.kind) == (scope, job, "tick"), x.__dict__  # type: ignore[attr-defined]
        assert x.entry == entry[b"entry"].decode()  # type: ignore[attr-defined]
    # and the dead entry's line names its job (a JSON field of its own)
    (buried,) = [x for x in caplog.records if "is dead" in x.getMessage()]
    assert buried.job == job and buried.disposition == "dead", buried.__dict__  # type: ignore[attr-defined]


def test_a_job_whose_state_cannot_be_read_is_one_line_a_delivery_with_the_way_out(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """The 3 a.m. trial: a job's stored state with `activeSteps` renamed, the worker the
    scope's only consumer. Each delivery logged `applying 1 entries raised` with a whole
    traceback, then `stays pending: ValidationError...`, and the take-over called the
    worker itself "another consumer"; the way out (`sfc job clear JOB --unreadable`) came
    only with the dead entry, minutes later. Now: one error line a delivery, without a
    traceback, naming the job, why and the way out, and a take-over of its own entries."""
    from host.logs import JsonFormatter

    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("unreadable")
    job = host.submit(scope, linear_recipe(1, timeout_s=600), job_id="p1").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _status(host, scope, job) == "running", sweep=False)
    r = host.client()
    state = r.hget(keys.job(scope, job), "state")
    assert state is not None and b'"activeSteps"' in state
    r.hset(keys.job(scope, job), "state", state.replace(b'"activeSteps"', b'"activeStepz"'))
    caplog.clear()
    entry = host.store().add_work(scope, fields("tick", TickData(job=job)))
    worker.read_once(block_ms=100)

    def said(text: str) -> list[logging.LogRecord]:
        return [x for x in caplog.records if text in x.getMessage()]

    (line,) = caplog.records  # one line, and no "stays pending" after it
    assert line.levelno == logging.ERROR and line.exc_info is None, caplog.text
    text = line.getMessage()
    assert text.startswith(
        f"scope {scope}: job p1 cannot be evaluated: its stored order or state cannot be read ("
    ), text
    assert "`activeStepz`" in text and f"its entry {entry} stays pending" in text, text
    assert text.endswith("`sfc job clear p1 --unreadable` removes the job"), text
    doc = json.loads(JsonFormatter().format(line))
    assert (doc["scope"], doc["job"], doc["entry"], doc["kind"]) == (scope, job, entry, "tick")
    assert (
        doc["reason"].startswith("its stored order or state cannot be read: ") and "exc" not in doc
    )
    # delivered again to the same worker: its own entry, not another consumer's
    wait_for(lambda: bool(said("took over")), step=worker.claim_once, timeout=10, what="the claim")
    (took,) = said("took over")
    assert took.getMessage() == (
        f"scope {scope}: took over 1 entry left pending for over 300 ms, its own entries "
        f"delivered before (their processing raised): {entry}"
    ), took.getMessage()
    assert len(said("cannot be evaluated")) == 2  # one a delivery
    assert not said("stays pending:") and not said("raised;") and not said("entries raised")
    assert all(x.exc_info is None for x in caplog.records), caplog.text


def test_a_node_that_cannot_be_reached_mid_evaluation_is_no_bug_and_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On a cluster, a job's evaluation reads its recipe from the node of the recipe's key.
    A worker that did so while that node was down (the seed node's primary killed) logged
    `applying 1 entries raised` with a whole traceback, as a bug; the entries stay pending,
    and each one's line says why. Another error is still a bug, with its traceback."""
    from host.apply import _leave_pending
    from host.entries import Entry
    from host.outcome import Outcome
    from host.server import free_port
    from host.store import JobRecord

    caplog.set_level(logging.DEBUG, logger="sfc.host")
    record = JobRecord("1", b"{}", b"{}", "")
    entries = [Entry("1-0", "tick", None), Entry("1-1", "answer", None)]
    tally = Outcome()
    gone = redis.Redis(port=free_port(), socket_connect_timeout=2)
    try:
        gone.get("sfc:recipe:x")  # nothing listens on the port
    except redis.ConnectionError as down:
        _leave_pending("s", "j", record, entries, down, tally)
        why = f"ConnectionError: {down}"
    finally:
        gone.close()
    assert not caplog.records, caplog.text
    assert tally.failed == [("1-0", why), ("1-1", why)]
    try:
        raise ValueError("a bug")
    except ValueError as bug:
        _leave_pending("s", "j", record, entries, bug, tally)
    (line,) = caplog.records
    assert line.getMessage() == "job j in scope s: applying 2 entries raised"
    assert line.levelno == logging.ERROR and line.exc_info and line.exc_info[0] is ValueError


def test_a_worker_that_takes_up_a_scope_says_why_a_job_cannot_be_read_and_the_way_out(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """Review r3: the repair at a worker's start logged `job J has a state or order that
    does not decode; left as it is`, with no reason and no way out, in words found nowhere
    in docs/metrics.md. Now the words of the line of each delivery, with why."""
    from host.logs import JsonFormatter

    scope = host.scope("unreadable-start")
    job = host.submit(scope, linear_recipe(1, timeout_s=600), job_id="ax1").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _status(host, scope, job) == "running", sweep=False)
    r = host.client()
    state = r.hget(keys.job(scope, job), "state")
    assert state is not None and b'"activeSteps"' in state
    r.hset(keys.job(scope, job), "state", state.replace(b'"activeSteps"', b'"activeStepz"'))
    caplog.set_level(logging.WARNING, logger="sfc.host")
    caplog.clear()
    assert host.worker([scope]).counters.repaired == 0
    (line,) = [x for x in caplog.records if "ax1" in x.getMessage()]
    assert line.levelno == logging.ERROR and line.exc_info is None, caplog.text
    text = line.getMessage()
    assert text.startswith(
        f"scope {scope}: job ax1 cannot be evaluated: its stored order or state cannot be read ("
    ), text
    assert "`activeStepz`" in text, text
    assert text.endswith(
        "; its indexes are left as they are; unless a newer sfc wrote it, "
        "`sfc job clear ax1 --unreadable` removes the job"
    ), text
    doc = json.loads(JsonFormatter().format(line))
    assert (doc["scope"], doc["job"]) == (scope, job)
    assert doc["reason"].startswith("its stored order or state cannot be read: "), doc


def test_an_event_whose_waiting_job_cannot_be_read_is_one_line_too(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """An event offered to a waiting job whose stored state cannot be read: the event stays
    pending, said in the same one line with the way out, not with a traceback."""
    from host.equipment import publish_event
    from tests.test_host_events import QA, _start_waiting, wait_recipe

    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("unreadable-wait")
    worker = _start_waiting(host, scope, ["w1"], wait_recipe(None))
    r = host.client()
    state = r.hget(keys.job(scope, "w1"), "state")
    assert state is not None
    r.hset(keys.job(scope, "w1"), "state", state.replace(b'"activeSteps"', b'"activeStepz"'))
    caplog.clear()
    entry = publish_event(host.store(), scope, QA, outcome="good")
    assert entry is not None
    worker.read_once(block_ms=100)
    (line,) = caplog.records
    assert line.levelno == logging.ERROR and line.exc_info is None, caplog.text
    assert line.getMessage().startswith(f"scope {scope}: job w1 cannot be evaluated: "), line
    assert f"its entry {entry} stays pending" in line.getMessage(), line.getMessage()
    assert (line.job, line.entry, line.kind) == ("w1", entry, "event")  # type: ignore[attr-defined]
    assert r.xpending(keys.work(scope), keys.GROUP)["pending"] == 1


def test_an_event_buried_for_a_waiting_job_that_cannot_be_read_says_which_and_why(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """Review r3: an event whose matching wait is a job whose stored state cannot be read
    was buried as `failed N deliveries`, with no job, no reason and no way out (the job's
    own tick got all three), and `sfc job show` did not count it. Now its reason names the
    job its wait was offered to, why, and the way out; the dead entry records that job."""
    from host.entries import dead_job
    from host.equipment import publish_event
    from tests.test_host_events import QA, _start_waiting, wait_recipe

    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("unreadable-dead")
    recipe = wait_recipe({"Subject": "line1/{jobId}/qa"})
    worker = _start_waiting(host, scope, ["w0", "w1"], recipe)
    r = host.client()
    state = r.hget(keys.job(scope, "w1"), "state")
    assert state is not None
    r.hset(keys.job(scope, "w1"), "state", state.replace(b'"activeSteps"', b'"activeStepz"'))
    # off the due index, as the sweep leaves a job whose tick is queued: burying the event
    # must not put it back (only an entry's own job goes back; review r4)
    r.zrem(keys.due(scope), "w1")
    entry = publish_event(host.store(), scope, QA, subject="line1/w1/qa", outcome="good")
    assert entry is not None

    def step() -> None:
        worker.read_once(block_ms=5)
        worker.claim_once()

    wait_for(
        lambda: r.xlen(keys.dead(scope)) == 1, step=step, timeout=15, what="the event to go dead"
    )
    ((dead_id, dead),) = host.store().dead(scope)
    reason = dead[b"reason"].decode()
    assert reason.startswith("failed 3 deliveries (SFC_MAX_DELIVERIES is 3); "), reason
    assert (
        "; it was offered to a wait of job w1, whose stored order or state cannot be read: "
        in reason
    )
    assert "`activeStepz`" in reason, reason
    assert reason.endswith(
        "(unless a newer sfc wrote it, `sfc job clear w1 --unreadable` removes the job)"
    ), reason
    assert dead[b"job"] == b"w1" and dead[b"kind"] == b"event"
    assert dead_job(dead_id, dead) == "w1"
    assert r.zscore(keys.due(scope), "w1") is None
    (buried,) = [x for x in caplog.records if "is dead" in x.getMessage()]
    assert buried.getMessage().startswith(f"scope {scope}: entry {entry} of job w1 is dead: ")
    assert buried.job == "w1", buried.__dict__  # type: ignore[attr-defined]
    # `sfc job show w1` counts it; w0's does not
    shown = jobview.view(host.store(), scope, "w1")
    assert shown is not None and [d.id for d in shown.dead] == [dead_id], shown.dead
    other = jobview.view(host.store(), scope, "w0")
    assert other is not None and not other.dead
    # requeued, it is the event again (without the fields the dead stream added)
    new = host.store().requeue(scope, dead_id)
    assert new is not None
    ((_, again),) = r.xrange(keys.work(scope), new, new)
    assert sorted(again) == sorted(
        k for k in dead if k not in (b"reason", b"entry", b"deliveries", b"job")
    )


NAMES = st.one_of(
    st.sampled_from([b"job", b"reason", b"entry", b"deliveries", b"kind", b"data", b"original-"]),
    st.builds(
        lambda n, k: b"original-" * n + k,
        st.integers(1, 3),
        st.sampled_from([b"job", b"reason", b"x", b""]),
    ),
    st.binary(max_size=12),
)
"""Field names: the dead entry's own, ones that start with its prefix (once or more), any."""


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    entry=st.dictionaries(NAMES, st.binary(max_size=6), min_size=1, max_size=6),
    job=st.sampled_from([None, "j"]),
    offered_to=st.sampled_from([None, "w"]),
)
def test_bury_then_requeue_gives_back_the_entry_whatever_its_field_names(
    host: Host, entry: dict[bytes, bytes], job: str | None, offered_to: str | None
) -> None:
    """Review: `requeue` took the prefix `original-` off every field, so an entry's own
    `original-x` came back as `x`, and an entry with both `job` and `original-job` lost one
    at the burial. A buried entry comes back with exactly its fields, and one of the common
    case is buried as ever (its own `job` kept as `original-job`)."""
    scope = host.scope("roundtrip")
    store = host.store()
    store.create_group(scope)
    r = host.client()
    entry_id = r.xadd(keys.work(scope), entry).decode()  # type: ignore[arg-type]
    r.xreadgroup(keys.GROUP, "c", {keys.work(scope): ">"})
    assert store.bury(scope, entry_id, "bad", job, 3, entry, offered_to) == "ok"
    ((dead_id, dead),) = store.dead(scope)
    if not any(k.startswith(b"original-") for k in entry):  # the common case, as ever
        own = {b"original-" + k if k in DEAD_FIELDS else k for k in entry}
        added = {b"reason", b"entry", b"deliveries"} | ({b"job"} if job or offered_to else set())
        assert set(dead) == own | added, dead
    new = store.requeue(scope, dead_id)
    assert new is not None
    ((_, again),) = r.xrange(keys.work(scope), new, new)
    assert again == entry


def test_an_event_whose_waiting_job_cannot_be_loaded_at_all_is_still_buried(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """The look at the waits of an event that goes dead (which job could not be read) must
    not keep it from the dead stream: here the waiting job's key is no hash (WRONGTYPE on
    every load), which failed each offer and fails the look too. The event is buried, with
    the plain reason, and the claim goes on."""
    from host.equipment import publish_event
    from tests.test_host_events import QA, _start_waiting, wait_recipe

    caplog.set_level(logging.WARNING, logger="sfc.host")
    scope = host.scope("wrongtype-dead")
    worker = _start_waiting(host, scope, ["w1"], wait_recipe(None))
    r = host.client()
    r.delete(keys.job(scope, "w1"))
    r.set(keys.job(scope, "w1"), b"not a hash")
    entry = publish_event(host.store(), scope, QA, outcome="good")
    assert entry is not None

    def step() -> None:
        worker.read_once(block_ms=5)
        worker.claim_once()

    wait_for(
        lambda: r.xlen(keys.dead(scope)) == 1, step=step, timeout=15, what="the event to go dead"
    )
    ((_, dead),) = host.store().dead(scope)
    assert dead[b"reason"] == b"failed 3 deliveries (SFC_MAX_DELIVERIES is 3)", dead
    assert b"job" not in dead and dead[b"entry"].decode() == entry
    assert r.xpending(keys.work(scope), keys.GROUP)["pending"] == 0
    r.delete(keys.job(scope, "w1"))  # for the fixture's check at the end


def test_an_answer_for_a_job_that_does_not_exist_is_dropped_and_counted(host: Host) -> None:
    from host.equipment import respond

    scope = host.scope("noone")
    host.store().create_group(scope)
    worker = host.worker([scope])
    respond(host.store(), scope, "ghost", "a1", outcome="ok", command_id="ghost:a1#1")
    outcome = worker.read_once(block_ms=100)
    assert outcome.dropped == 1
    assert counts(host.client(), scope)["answersDropped"] == 1
    assert host.client().xlen(keys.dead(scope)) == 0
    assert host.client().xlen(keys.work(scope)) == 0


def test_entries_of_missing_jobs_are_dropped_when_another_consumer_took_one_over(
    host: Host,
) -> None:
    """sfc1_ack writes nothing when one id is no longer this consumer's: the others are
    dropped one by one, and only the one taken over stays pending, with its new owner."""
    from host.entries import decode_work
    from host.equipment import respond

    scope = host.scope("noone")
    host.store().create_group(scope)
    worker = host.worker([scope])
    for job in ("ghost1", "ghost2", "ghost3"):
        respond(host.store(), scope, job, "a1", outcome="ok", command_id=f"{job}:a1#1")
    entries = [decode_work(i, f) for _, i, f in worker.store.read([scope], 10, None)]
    assert len(entries) == 3
    r = host.client()
    r.xclaim(keys.work(scope), keys.GROUP, "another", 0, [entries[1].id])
    outcome = worker.applier.apply(scope, entries)
    assert (outcome.dropped, outcome.gone) == (2, 1)
    assert outcome.kinds == {("answer", "dropped"): 2}
    assert counts(r, scope)["answersDropped"] == 2
    pending = r.xpending_range(keys.work(scope), keys.GROUP, "-", "+", 10)
    assert [(p["message_id"].decode(), p["consumer"].decode()) for p in pending] == [
        (entries[1].id, "another")
    ]
    assert r.xlen(keys.work(scope)) == 1


def test_a_job_stored_under_state_1_4_runs_on_after_the_upgrade(host: Host) -> None:
    """A job a 1.4 engine stored and left waiting: this engine reads its state (format 1.4
    brought to 1.5), applies the answer, and completes it; `sfc job show` reads it too."""
    scope = host.scope("upgrade")
    job = host.submit(scope, linear_recipe(2), job_id="j").job
    worker = host.worker([scope])
    responder = host.responder(scope)
    host.run([worker], [], lambda: len(host.equipment(scope)) == 1, sweep=False)
    r = host.client()
    doc = json.loads(r.hget(keys.job(scope, job), "state"))
    assert doc["format"] == "1.5"
    doc["format"] = "1.4"  # as the engine before the qualifiers wrote it
    del doc["dwells"]
    for record in doc["actions"].values():
        del record["timer"]
    r.hset(keys.job(scope, job), "state", json.dumps(doc, separators=(",", ":")))
    assert jobview.view(host.store(), scope, job).state is not None  # type: ignore[union-attr]
    host.run([worker], [responder], host.ended(scope, [job]))
    assert host.order(scope, job).result.outcomes == ["ok"]
    stored = state_decoder.decode(r.hget(keys.job(scope, job), "state"))
    assert stored.format == "1.5"  # written back in the current format

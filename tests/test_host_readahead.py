"""Reading ahead: a full batch's commit stream reads the worker's next batch, and an
adapter's answers, acks and next read go in one pipeline. Nothing read ahead is lost or
applied twice: it is pending for the reader, applied next, and applied before a worker stops.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from generated.work_entry_v1_0 import ResumeData
from host import keys
from host.entries import decode_history, fields
from host.equipment import Responder, always
from host.store import ReadAhead
from tests.hostkit import FAST, Host, linear_recipe, pending_of, started, worker_and_loads

ONE = replace(FAST, read_count=1)


def test_under_load_a_batch_is_loaded_and_read_by_the_round_trips_before_it(host: Host) -> None:
    scope = host.scope("ahead")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(4)]
    r = host.client()
    starts = [i.decode() for i, _ in r.xrange(keys.work(scope))]  # type: ignore[union-attr]
    assert len(starts) == 4
    w, loads = worker_and_loads(host, [scope], ONE)

    out = w.read_once(block_ms=100)
    assert out.applied == 1 and started(host, scope, "j0")
    # its own load read the next start ahead; its commit stream loaded that one (after the
    # commit) and read the third: both pending for this worker, delivered once
    assert loads == [["j0"]]
    assert pending_of(r, scope) == [(starts[1], w.consumer, 1), (starts[2], w.consumer, 1)]
    assert w.batches.ready is not None
    assert [i for _, i, _ in w.batches.ready[0]] == [starts[1]]
    assert list(w.batches.ready[1][scope][1]) == ["j1"]
    assert [i for _, i, _ in w.batches.ahead] == [starts[2]]
    assert not started(host, scope, "j1")

    # the next batches need no load of their own: one round trip each
    assert w.read_once(block_ms=100).applied == 1
    assert started(host, scope, "j1") and loads == [["j0"]]
    assert pending_of(r, scope) == [(starts[2], w.consumer, 1), (starts[3], w.consumer, 1)]
    assert w.read_once(block_ms=100).applied == 1
    assert w.read_once(block_ms=100).applied == 1
    assert all(started(host, scope, j) for j in jobs) and loads == [["j0"]]
    assert pending_of(r, scope) == []
    assert w.batches.ready is None and w.batches.ahead == [] and w.batches.decoded == {}
    assert r.xlen(keys.work(scope)) == 0
    # each start was applied once: one evaluation each in the history
    for job in jobs:
        seen = [decode_history(f) for _, f in host.store().history(scope, job, 10)]
        assert [h.event for h in seen] == ["start"], seen


def test_a_job_read_ahead_is_loaded_after_the_commit_before_it(host: Host) -> None:
    """A job with entries in two batches in a row: its load for the second batch runs
    after the first batch's commit on the server, so it sees that commit (no conflict)."""
    scope = host.scope("same")
    store = host.store()
    # j's start, a resume for j, then k's start: j is in the first batch and in the
    # second, whose load the first batch's commit stream carries
    host.submit(scope, linear_recipe(2), job_id="j")
    store.add_work(scope, fields("resume", ResumeData(job="j")))
    host.submit(scope, linear_recipe(1), job_id="k")
    w, loads = worker_and_loads(host, [scope], ONE)
    for _ in range(3):
        assert w.read_once(block_ms=100).applied + w.counters.outcome.absorbed >= 1
    assert loads == [["j"]] and w.counters.outcome.conflicts == 0
    assert started(host, scope, "j") and started(host, scope, "k")
    events = [decode_history(f).event for _, f in store.history(scope, "j", 10)]
    assert events == ["start", "resume"], events
    assert pending_of(host.client(), scope) == []


def test_a_short_batch_reads_nothing_ahead(host: Host) -> None:
    scope = host.scope("short")
    for i in range(3):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], replace(FAST, read_count=10))
    r = host.client()
    assert w.read_once(block_ms=100).applied == 3
    host.submit(scope, linear_recipe(1), job_id="later")
    # a batch of 3 of 10: the queue was drained, so the next read waits for new entries
    assert pending_of(r, scope) == []
    assert w.read_once(block_ms=100).applied == 1
    assert started(host, scope, "later")


def test_a_stopping_worker_applies_what_it_read_ahead(host: Host) -> None:
    scope = host.scope("drain")
    for i in range(2):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], ONE)
    r = host.client()
    assert w.read_once(block_ms=100).applied == 1
    assert len(pending_of(r, scope)) == 1  # j1's start, read ahead
    stop = threading.Event()
    stop.set()
    w.run(stop)  # stopped at once: it reads nothing, but applies what it holds
    assert started(host, scope, "j1")
    assert pending_of(r, scope) == []
    assert r.xlen(keys.work(scope)) == 0


def test_a_missing_library_sends_the_commits_again_but_not_the_read(own_host: Host) -> None:
    host = own_host  # it deletes the library: a server of its own
    scope = host.scope("nolib")
    for i in range(2):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], ONE)
    r = host.client()
    r.function_delete(keys.LIBRARY)
    try:
        assert w.read_once(block_ms=100).applied == 1
    finally:
        host.store().load_library()
    assert started(host, scope, "j0")
    # read once, in the first pipeline; the second sent the commit alone
    ((_, consumer, deliveries),) = pending_of(r, scope)
    assert (consumer, deliveries) == (w.consumer, 1)
    assert w.read_once(block_ms=100).applied == 1
    assert started(host, scope, "j1") and pending_of(r, scope) == []


def test_read_ahead_returns_only_entries_after_the_commits(host: Host) -> None:
    """The read runs after the commits on the server: a commit's own work entries (a
    job-control Start queues `start`) are among what it reads."""
    from host.store import Commit

    scope = host.scope("order")
    host.submit(scope, linear_recipe(1), job_id="j", start=False)
    store = host.store("reader")
    store.create_group(scope)
    record = store.job(scope, "j")
    assert record is not None
    commit = Commit(
        scope=scope,
        job="j",
        version=record.version,
        state=record.state,
        order=record.order,
        due=None,
        active=False,
        work=[("tick", b'{"job":"j"}')],
    )
    read: list[tuple[str, str, dict[bytes, bytes]]] = []
    stream = store.commit_stream(scope, ReadAhead((scope,), 10, read))
    stream.send([commit])
    assert stream.finish() == ["ok"]
    assert [(s, f[b"kind"]) for s, _, f in read] == [(scope, b"tick")]


def test_a_responder_answers_acks_and_reads_ahead_in_one_pipeline(host: Host) -> None:
    scope = host.scope("responder")
    jobs = [host.submit(scope, linear_recipe(2), job_id=f"j{i}").job for i in range(4)]
    w = host.worker([scope], replace(FAST, read_count=100))
    responder = Responder(host.store(), scope, always("ok"))
    r = host.client()
    assert w.read_once(block_ms=100).applied == 4  # four pushes of a1
    assert responder.pump(block_ms=100) == 4
    assert responder.answered == 4
    # the answers are in the work stream; the pushes acked for the responder's group
    assert r.xlen(keys.work(scope)) == 4
    groups: Any = r.xinfo_groups(keys.equipment(scope))
    mine = [g for g in groups if g["name"].decode() == responder.group]
    assert mine and mine[0]["pending"] == 0
    host.run([w], [responder], host.ended(scope, jobs))
    assert responder.answered == 8


def test_a_lingering_responder_answers_what_came_while_it_waited_in_the_same_round(
    host: Host,
) -> None:
    """Responder.linger: a short read waits, then reads again, and answers both reads in one
    round; a full read does not wait."""
    scope = host.scope("linger")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(3)]
    w = host.worker([scope], replace(FAST, read_count=1))
    assert w.read_once(block_ms=100).applied == 1  # one push

    waited: list[float] = []

    def meanwhile(seconds: float) -> None:
        waited.append(seconds)
        assert w.read_once(block_ms=100).applied == 1  # a second push comes while it waits

    responder = Responder(host.store(), scope, always("ok"), linger=0.25, sleep=meanwhile)
    assert responder.pump(block_ms=100) == 2
    assert responder.answered == 2
    assert waited == [0.25]
    assert w.read_once(block_ms=100).applied == 1  # the third push
    assert responder.pump(block_ms=100, count=1) == 1  # a full read: no wait
    assert waited == [0.25]
    host.run([w], [responder], host.ended(scope, jobs))


def test_a_large_batch_commits_in_chunks_sent_while_the_next_jobs_are_evaluated(
    host: Host,
) -> None:
    from host.apply import COMMIT_CHUNK

    scope = host.scope("chunks")
    n = 2 * COMMIT_CHUNK + 5
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(n)]
    w = host.worker([scope], replace(FAST, read_count=100))
    chunks: list[int] = []
    w.applier.before_commit = lambda commits: chunks.append(len(commits))
    assert w.read_once(block_ms=100).applied == n
    # full chunks, then, towards the end, a chunk whenever more wait than are left to
    # evaluate: the last, written with the read ahead, is small
    assert chunks == [COMMIT_CHUNK, 13, 7, 3, 2]
    assert all(started(host, scope, j) for j in jobs)
    assert pending_of(host.client(), scope) == []


def test_a_batch_that_raises_after_a_chunk_went_out_loses_nothing(host: Host) -> None:
    """The first chunk's commits land (their replies are read before the connection goes
    back); the rest of the batch stays pending and is claimed."""
    from host.apply import COMMIT_CHUNK

    scope = host.scope("raise")
    n = COMMIT_CHUNK + 3
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(n)]
    w = host.worker([scope], replace(FAST, read_count=100))
    calls: list[int] = []

    def second_chunk_fails(commits: list[Any]) -> None:
        calls.append(len(commits))
        if len(calls) == 2:
            raise RuntimeError("a bug after the first chunk went out")

    w.applier.before_commit = second_chunk_fails
    outcome = w.read_once(block_ms=100)
    assert calls == [COMMIT_CHUNK, 2]  # the second: 2 wait, 1 is left
    assert outcome.applied == 0 and len(outcome.failed) == n  # the batch raised
    r = host.client()
    assert sum(started(host, scope, j) for j in jobs) == COMMIT_CHUNK
    assert len(pending_of(r, scope)) == 3
    w.applier.before_commit = None
    # the same worker's store still answers in order; the 3 are claimed once idle
    host.run([w], [], lambda: all(started(host, scope, j) for j in jobs), sweep=False)
    assert pending_of(r, scope) == []
    for job in jobs:
        history = [decode_history(f) for _, f in host.store().history(scope, job, 10)]
        assert [h.event for h in history] == ["start"], (job, history)


def test_a_large_batch_reads_ahead_in_its_commit_stream_only_and_loads_nothing_ahead(
    host: Host,
) -> None:
    """Above LOAD_AHEAD_MAX a held batch would make an entry wait a whole batch longer, for
    a round trip that is a small share of the batch: the read ahead is the next batch, which
    loads itself."""
    from host.batches import LOAD_AHEAD_MAX

    n = LOAD_AHEAD_MAX + 1
    scope = host.scope("large")
    for i in range(3 * n):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w, loads = worker_and_loads(host, [scope], replace(FAST, read_count=n))
    assert w.read_once(block_ms=100).applied == n
    # one batch read ahead, in the commit stream (the load read nothing): not loaded
    assert w.batches.ready is None and len(w.batches.ahead) == n and w.batches.decoded == {}
    assert len(pending_of(host.client(), scope)) == n
    assert w.read_once(block_ms=100).applied == n
    assert w.read_once(block_ms=100).applied == n
    assert len(loads) == 3 and [len(x) for x in loads] == [n, n, n]
    assert pending_of(host.client(), scope) == []


def test_a_commit_with_an_error_reply_fails_alone(host: Host) -> None:
    """One job's commit gets an error reply (here its hash turned into a string between
    the load and the commit): its entry stays pending with the server's error; the other
    commits of the batch landed and are counted."""
    scope = host.scope("error-reply")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(5)]
    r = host.client()
    starts = {job: i.decode() for job, (i, _) in zip(jobs, r.xrange(keys.work(scope)), strict=True)}  # type: ignore[union-attr]
    w = host.worker([scope], replace(FAST, read_count=100))

    def break_j2(commits: list[Any]) -> None:
        r.delete(keys.job(scope, "j2"))
        r.set(keys.job(scope, "j2"), "not a hash")

    w.applier.before_commit = break_j2
    outcome = w.read_once(block_ms=100)
    assert outcome.applied == 4 and w.counters.batches == 1
    ((entry, why),) = outcome.failed
    assert entry == starts["j2"] and why.startswith("the commit failed: ") and "WRONGTYPE" in why
    assert [i for i, _, _ in pending_of(r, scope)] == [starts["j2"]]
    assert all(started(host, scope, j) for j in jobs if j != "j2")

"""The commit stream and read ahead under faults (CommitStream, ReadAhead, Worker._ahead).

- a stream that outlasts the client's health-check interval: no PING is sent while commit
  replies are unread (it would read a commit's reply as its own);
- rows read ahead are kept when a later round of the batch raises (they are pending for the
  worker already, and a `>` read never returns them again);
- an entry read ahead and then claimed by another worker is `gone` for the reader, and
  claim_once never reads ahead.

Written by a review of the change; the first three failed before its fixes.

Then the connection a store keeps between round trips (a server that closed it, threads,
fork, a small pool, close), a batch's held last chunk, and the embedded server's Unix
socket (odd paths, one that cannot be opened).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from host import keys
from host.apply import COMMIT_CHUNK
from host.entries import decode_history
from host.store import Store
from host.worker import Worker
from tests.hostkit import FAST, Host, linear_recipe, pending_of, started, wait_for

ONE = replace(FAST, read_count=1)


def starts_in_history(host: Host, scope: str, job: str) -> int:
    history = [decode_history(f) for _, f in host.store().history(scope, job, 20)]
    return [h.event for h in history].count("start")


def _worker_on(host: Host, client: redis.Redis, scope: str, read_count: int = 100) -> Worker:
    store = Store(client)
    host.stores.append(store)
    w = Worker(store, replace(FAST, read_count=read_count), [scope])
    w.refresh_scopes()
    return w


def _stall_before_second_chunk(w: Worker, seconds: float) -> list[int]:
    calls: list[int] = []

    def hook(commits: list[Any]) -> None:
        calls.append(len(commits))
        if len(calls) == 2:
            time.sleep(seconds)  # a GC pause, a slow evaluation, a stopped VM ...

    w.applier.before_commit = hook
    return calls


# -- faults the review found (each failed before its fix)


def test_a_stream_that_outlasts_the_health_check_interval_commits_every_chunk(
    host: Host,
) -> None:
    """Store.from_url sets health_check_interval=30. The stream's later chunks go through
    send_packed_command(check_health=True): once the interval has passed since the
    connection's last read, redis-py sends PING on a connection whose FCALL replies are in
    flight and reads the first FCALL's reply as the PING's -> "Bad response from PING
    health check", the connection is dropped and the batch raises as if the server were
    unreachable; what was not in the first chunk waits for XAUTOCLAIM. (0.2 s here stands
    in for 30 s.)"""
    scope = host.scope("hc")
    n = COMMIT_CHUNK + 3
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(n)]
    client = redis.Redis.from_url(host.url, health_check_interval=0.2)
    w = _worker_on(host, client, scope)
    calls = _stall_before_second_chunk(w, 0.3)
    outcome = w.read_once(block_ms=100)  # raised redis.ConnectionError before the fix
    assert calls == [COMMIT_CHUNK, 2, 1]  # the second is written mid-stream
    assert outcome.applied == n
    assert all(started(host, scope, j) for j in jobs)


def test_a_health_check_mid_stream_with_a_retrying_client_does_not_misread_replies(
    host: Host,
) -> None:
    """The same with a client that retries (redis.Redis(host=...) defaults to 3 retries;
    here 1): the failed PING disconnects, the retry PINGs on a NEW socket and the second
    chunk goes there. The first chunk's commits landed but their replies are gone with the
    old socket; finish() reads len(calls) replies from the new one, takes the second
    chunk's 3 replies for the first chunk's commits and then waits for replies that never
    come: forever without socket_timeout (Store.from_url sets none), 2 s here."""
    scope = host.scope("hcretry")
    n = COMMIT_CHUNK + 3
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(n)]
    client = redis.Redis.from_url(
        host.url, health_check_interval=0.2, retry=Retry(NoBackoff(), 1), socket_timeout=2
    )
    w = _worker_on(host, client, scope)
    calls = _stall_before_second_chunk(w, 0.3)
    outcome = w.read_once(block_ms=100)  # TimeoutError after 2 s before the fix
    assert calls == [COMMIT_CHUNK, 2, 1]  # the second is written mid-stream
    assert outcome.applied == n
    assert all(started(host, scope, j) for j in jobs)


def test_rows_read_ahead_are_kept_when_a_later_round_of_the_batch_raises(host: Host) -> None:
    """The read ahead is done in the first round's commit stream. When a conflict retry
    round of the same batch raises (a load that fails on a connection error, a bug), the
    rows must not go with the batch's Outcome: they are pending for this worker, a `>` read
    never returns them again, and they would wait for XAUTOCLAIM (SFC_AUTOCLAIM_IDLE, 30 s
    by default). They go into the worker's list as soon as they are read."""
    scope = host.scope("orphan")
    for i in range(2):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    w = host.worker([scope], ONE)
    r = host.client()
    calls: list[int] = []

    def hook(commits: list[Any]) -> None:
        calls.append(len(commits))
        if len(calls) == 1:  # another writer moved j0: the first round conflicts
            r.hincrby(keys.job(scope, "j0"), "version", 1)
        else:  # the retry round fails
            raise RuntimeError("the conflict retry round failed")

    w.applier.before_commit = hook
    first = w.read_once(block_ms=100)
    assert len(first.failed) == 1 and calls == [1, 1]
    # j0's start (the batch that raised) and j1's (read ahead) are pending for w
    assert [c for _, c, _ in pending_of(r, scope)] == [w.consumer, w.consumer]
    w.applier.before_commit = None
    # the next round applies what was read ahead (j1), without waiting for XAUTOCLAIM
    second = w.read_once(block_ms=100)
    assert started(host, scope, "j1"), (second, w.batches.ahead, pending_of(r, scope))


# -- guarantees checked (pass)


def test_an_entry_read_ahead_then_claimed_by_another_worker_is_gone_for_the_reader(
    host: Host,
) -> None:
    scope = host.scope("aheadclaim")
    for i in range(2):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    a = host.worker([scope], ONE)
    b = host.worker([scope], ONE)
    r = host.client()
    assert a.read_once(block_ms=100).applied == 1
    ((entry, owner, _),) = pending_of(r, scope)
    # read ahead by a's load, and loaded by its commit stream: a's next batch
    assert owner == a.consumer and a.batches.ready is not None
    assert [i for _, i, _ in a.batches.ready[0]] == [entry] and a.batches.ahead == []
    # a stalls (an outage, a stopped process) past the autoclaim idle; b claims and applies
    wait_for(
        lambda: (
            r.xpending_range(keys.work(scope), keys.GROUP, entry, entry, 1)[0][
                "time_since_delivered"
            ]
            > FAST.autoclaim_idle
        ),
        what="the entry read ahead to be idle",
    )
    assert b.claim_once().applied == 1
    late = a.read_once(block_ms=100)
    assert late.gone == 1 and late.applied == 0
    assert starts_in_history(host, scope, "j1") == 1
    assert pending_of(r, scope) == []


def test_claim_once_never_reads_ahead(host: Host) -> None:
    scope = host.scope("claimnoahead")
    for i in range(3):
        host.submit(scope, linear_recipe(1), job_id=f"j{i}")
    dead = host.store("dead")
    rows = dead.read([scope], 1, None)  # a consumer that dies holding j0's start
    assert len(rows) == 1
    w = host.worker([scope], ONE)
    r = host.client()
    time.sleep(FAST.autoclaim_idle / 1000 + 0.05)
    assert w.claim_once().applied == 1
    assert w.batches.ahead == []
    # j1 and j2 were not read by the claim: nothing is pending
    assert pending_of(r, scope) == []


# -- a server that stops answering


def test_a_server_that_stops_answering_is_unreachable_not_a_hang(tmp_path: Any) -> None:
    """A frozen server (here SIGSTOP), or a network that drops packets without a reset:
    a call on an established connection gives up after SOCKET_TIMEOUT_S (5 s; 0.3 s here)
    with the error the worker logs and reconnects on, instead of waiting for ever."""
    import signal
    import threading

    from host.server import EmbeddedServer
    from host.store import unreachable

    with EmbeddedServer(tmp_path / "frozen") as server:
        store = Store.from_url(server.url, socket_timeout=0.3)
        store.ping()  # connected, and answered
        assert server.process is not None
        outcome: list[BaseException | str] = []

        def call() -> None:
            try:
                store.r.set("k", "v")
                outcome.append("answered")
            except BaseException as e:
                outcome.append(e)

        server.process.send_signal(signal.SIGSTOP)
        t = threading.Thread(target=call, daemon=True)
        try:
            t.start()
            t.join(20)  # the test's own deadline: without the timeout it waited for ever
        finally:
            server.process.send_signal(signal.SIGCONT)
        assert not t.is_alive(), "a call to a server that stopped answering did not give up"
        (error,) = outcome
        assert isinstance(error, BaseException) and unreachable(error), error
        store.close()


# -- the raw load, in both protocols


def test_a_load_reads_the_same_in_resp2_and_resp3(host: Host) -> None:
    """The load is read raw (no redis-py callbacks): a hash is a map in RESP3 and a flat
    list in RESP2; both give the same records and settings."""
    scope = host.scope("resp")
    host.submit(scope, linear_recipe(1), job_id="j")
    r = host.client()
    r.hset(keys.settings(scope), mapping={"SFC_MAX_ATTEMPTS": "4", "answers_dropped": "2"})
    seen = []
    for protocol in (2, 3):
        store = Store(redis.Redis.from_url(host.url, protocol=protocol))
        host.stores.append(store)
        _, records, values = store.load_batch(scope, ["j", "nope"])
        record = records["j"]
        assert record is not None and records["nope"] is None
        seen.append((record, values))
    assert seen[0] == seen[1]
    record, values = seen[0]
    assert values == {"SFC_MAX_ATTEMPTS": "4", "answers_dropped": "2"}
    assert record.version == "1" and record.state.startswith(b"{") and record.due == ""


def test_replies_are_read_as_redis_py_reads_them_in_resp2_and_resp3(host: Host) -> None:
    """A round trip takes the replies hiredis holds already from its reader (store._replies)
    as redis-py's read_response returns them: an error reply is its command's result and
    the replies after it are read; a push message (RESP3: client tracking's invalidation of
    a key the connection wrote, among the replies) is handled by redis-py and is no
    command's reply. The connection is left with nothing unread."""
    scope = host.scope("replies")
    key = keys.settings(scope)
    for protocol in (2, 3):
        store = Store(redis.Redis.from_url(host.url, protocol=protocol))
        host.stores.append(store)
        # tracking needs RESP3 (or a redirection) to send its invalidations
        tracked = [("CLIENT", "TRACKING", "ON"), ("HGET", key, "f")] if protocol == 3 else []
        commands = [*tracked, ("HSET", key, "f", "1"), ("INCR", key), ("PING",)]
        out = store._round_trip(scope, commands)
        assert out[: len(tracked)] == ([b"OK", None] if tracked else [])
        wrote, wrong, pong = out[len(tracked) :]
        assert wrote == 1 and pong == b"PONG", out
        assert isinstance(wrong, redis.ResponseError) and "WRONGTYPE" in str(wrong)
        assert store._round_trip(scope, [("PING",), ("HGET", key, "f")]) == [b"PONG", b"1"]
        host.client().delete(key)


def test_jobs_run_to_the_end_in_resp2_and_in_resp3(host: Host) -> None:
    """A worker and equipment on clients of either protocol (a URL's `?protocol=3`): the
    stream reads are a list of pairs in RESP2 and a map in RESP3."""
    from host.equipment import Responder, always

    for protocol in (2, 3):
        scope = host.scope(f"resp{protocol}")
        jobs = [host.submit(scope, linear_recipe(2), job_id=f"j{i}").job for i in range(3)]

        def store() -> Store:
            s = Store(redis.Redis.from_url(host.url, protocol=protocol))  # noqa: B023
            host.stores.append(s)
            return s

        w = Worker(store(), replace(FAST, read_count=1), [scope])
        w.refresh_scopes()
        responder = Responder(store(), scope, always("ok"))
        host.run([w], [responder], host.ended(scope, jobs), what=f"RESP{protocol} jobs")
        assert all(host.order_path(scope, j) == "Ended/Completed" for j in jobs)
        assert w.counters.outcome.applied == 3 * 3


# -- the connection a store keeps between round trips (Store._lease), and the Unix socket


def _named_worker(host: Host, scope: str, name: str, read_count: int = 100) -> Worker:
    client = redis.Redis.from_url(host.url, client_name=name)
    return _worker_on(host, client, scope, read_count)


def _loads_read_their_own(store: Store, scope: str, job: str, order: bytes) -> bool:
    """Whether 300 loads of `job` on `store` all read its own stored order (a connection
    shared with another caller would hand it the other's replies)."""
    for _ in range(300):
        _, records, _ = store.load_batch(scope, [job])
        record = records[job]
        if record is None or record.order != order:
            return False
    return True


def test_a_kept_connection_the_server_closed_is_connected_again(host: Host) -> None:
    """A worker keeps its connection between batches. When the server closes it (a
    restart, an idle timeout, CLIENT KILL), the next batch connects again, as a connection
    taken from redis-py's pool would: without that check, its commit went out on the dead
    socket and the batch failed as if the server were unreachable (its entries then waited
    for XAUTOCLAIM)."""
    scope = host.scope("killed")
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(3)]
    name = f"kept-{scope}"
    w = _named_worker(host, scope, name, read_count=1)
    r = host.client()
    for n in range(1, 4):
        killed = [c for c in r.client_list() if c["name"] == name]
        assert killed, "the worker's connections are open between batches"
        for c in killed:
            r.client_kill_filter(_id=c["id"])
        assert w.read_once(block_ms=100).applied == 1
        assert sum(started(host, scope, j) for j in jobs) == n
    assert pending_of(r, scope) == []


def test_threads_sharing_a_store_each_read_their_own_replies(host: Host) -> None:
    import threading

    scope = host.scope("threads")
    host.submit(scope, linear_recipe(1), job_id="a")
    host.submit(scope, linear_recipe(2), job_id="b")
    store = host.store()
    orders = {j: store.job(scope, j).order for j in "ab"}  # type: ignore[union-attr]
    assert orders["a"] != orders["b"]
    wrong: list[str] = []

    def loads(job: str) -> None:
        if not _loads_read_their_own(store, scope, job, orders[job]):
            wrong.append(job)

    threads = [threading.Thread(target=loads, args=(j,)) for j in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and wrong == []


def test_a_forked_process_does_not_use_its_parents_kept_connection(host: Host) -> None:
    """A child forked from a process that kept a connection would share its socket: both
    would read each other's replies. The child connects on its own."""
    import os

    scope = host.scope("fork")
    host.submit(scope, linear_recipe(1), job_id="a")
    host.submit(scope, linear_recipe(2), job_id="b")
    store = host.store()
    orders = {j: store.job(scope, j).order for j in "ab"}  # type: ignore[union-attr]
    store.load_batch(scope, ["a"])  # the connection is kept now
    pid = os.fork()
    if pid == 0:  # the child: its verdict is its exit code
        code = 1
        try:
            code = 0 if _loads_read_their_own(store, scope, "b", orders["b"]) else 3
        finally:
            os._exit(code)
    ok = _loads_read_their_own(store, scope, "a", orders["a"])
    _, status = os.waitpid(pid, 0)
    assert ok and os.waitstatus_to_exitcode(status) == 0


def test_a_batch_that_raises_while_its_last_chunk_is_held_writes_none_of_it(
    host: Host,
) -> None:
    """The last chunk is held for the write that carries the read ahead. When the batch
    raises before that write (here the ack of a job that is missing), the chunks written
    land and the held one is never written: its entries stay pending, and the kept
    connection still answers in order."""
    scope = host.scope("held")
    n = COMMIT_CHUNK + 1  # one held: a chunk halves only when more wait than are left
    jobs = [host.submit(scope, linear_recipe(1), job_id=f"j{i}").job for i in range(n)]
    host.submit(scope, linear_recipe(1), job_id="gone")
    r = host.client()
    r.delete(keys.job(scope, "gone"))
    failing = threading.Event()
    failing.set()

    class AckFails(Store):
        def ack(self, *args: Any, **kwargs: Any) -> str:
            if failing.is_set():
                raise RuntimeError("a bug between the held chunk and the stream's finish")
            return super().ack(*args, **kwargs)

    store = AckFails.from_url(host.url)
    host.stores.append(store)
    w = host.worker([scope], replace(FAST, read_count=100), store=store)
    outcome = w.read_once(block_ms=100)
    assert outcome.applied == 0 and len(outcome.failed) == n + 1  # the batch raised
    assert sum(started(host, scope, j) for j in jobs) == COMMIT_CHUNK
    assert len(pending_of(r, scope)) == 2  # the held chunk's 1, and the missing job's start
    failing.clear()
    host.run([w], [], lambda: all(started(host, scope, j) for j in jobs), sweep=False)
    assert pending_of(r, scope) == []
    for job in jobs:
        history = [decode_history(f) for _, f in host.store().history(scope, job, 10)]
        assert [h.event for h in history] == ["start"], (job, history)


def _reaches(url: str) -> None:
    """A store on `url` gets an answer from the server."""
    store = Store.from_url(url)
    try:
        assert store.time_ms() > 0
    finally:
        store.close()


def test_an_embedded_server_takes_local_processes_on_its_unix_socket(tmp_path: Any) -> None:
    """Its workers use the socket (fewer system calls a round trip than TCP); a data
    directory whose socket path would not fit a socket address gets TCP alone."""
    from host.server import SOCKET_PATH_MAX, EmbeddedServer

    with EmbeddedServer(tmp_path / "short") as server:
        assert server.socket is not None and server.local_url.startswith("unix://")
        store = Store.from_url(server.local_url)
        assert store.time_ms() > 0
        tcp = redis.Redis.from_url(server.url)
        kinds = [c["flags"] for c in tcp.client_list()]
        tcp.close()
        assert any("U" in f for f in kinds), kinds  # the store's connection is on the socket
        store.close()
    deep = tmp_path / ("d" * (SOCKET_PATH_MAX - len(str(tmp_path))))
    with EmbeddedServer(deep) as server:
        assert server.socket is None and server.local_url == server.url
        _reaches(server.local_url)


def test_a_socket_path_with_url_characters_and_one_that_cannot_be_opened(tmp_path: Any) -> None:
    """A data directory may hold `?`, `#` or `%` (the URL quotes them); where the socket
    cannot be opened (here a directory is in its place; a filesystem without sockets does
    the same), the server starts on TCP alone."""
    from host.server import SOCKET_FILE, EmbeddedServer

    with EmbeddedServer(tmp_path / "line?1#a%41 b") as server:
        assert server.socket is not None
        _reaches(server.local_url)
    blocked = tmp_path / "blocked"
    (blocked / SOCKET_FILE).mkdir(parents=True)
    (blocked / SOCKET_FILE / "x").write_text("keeps it from being removed")
    with EmbeddedServer(blocked) as server:
        assert server.socket is None and server.local_url == server.url
        _reaches(server.local_url)


def test_a_store_on_a_small_pool_keeps_no_connection(host: Host) -> None:
    """With `?max_connections=1` every call needs the one connection: a kept one would
    leave none for the store's other commands."""
    scope = host.scope("small")
    host.submit(scope, linear_recipe(1), job_id="j")
    store = Store.from_url(host.url + "?max_connections=1")
    host.stores.append(store)
    for _ in range(3):
        _, records, _ = store.load_batch(scope, ["j"])
        assert records["j"] is not None
        assert store.time_ms() > 0


def test_a_closed_store_closes_its_kept_connection_and_works_again(host: Host) -> None:
    scope = host.scope("closed")
    host.submit(scope, linear_recipe(1), job_id="j")
    name = f"closing-{scope}"
    store = Store(redis.Redis.from_url(host.url, client_name=name))
    store.load_batch(scope, ["j"])  # kept now
    r = host.client()
    assert [c for c in r.client_list() if c["name"] == name]
    store.close()
    wait_for(
        lambda: not [c for c in r.client_list() if c["name"] == name],
        what="the kept connection to close",
    )
    _, records, _ = store.load_batch(scope, ["j"])  # connects again
    assert records["j"] is not None
    store.close()

"""The fast paths of host/store/wire.py are really taken, on a real server: the versions of
redis-py and hiredis that pyproject.toml allows must keep the internals they rely on.

(The cluster's slot map, `wire.slot_owners` and `wire.reload_slots`, is proved on real
nodes by tests/test_host_cluster.py's move tests: `refresh_routes` sees a slot move; and
`wire.NodePools`, which hears redis-py's own reads of it, by tests/test_host_cluster_failover.py:
a store closes its sockets to a node that left.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import hiredis
import pytest
import redis

from host import keys
from host.store import Store, wire
from tests.hostkit import Host


def _counting(calls: list[Any], f: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return f(*args, **kwargs)

    return counted


def test_the_store_packs_with_hiredis_as_redis_py_would(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round trip's commands are packed by hiredis.pack_command, one call a command, into
    the bytes redis-py's own packer makes."""
    commands: list[wire.Command] = [
        ("HSET", "k", "f", b"\x00\xffbytes", 7),
        ("XADD", "s", "*", "kind", "ü"),
        ("PING",),
    ]
    conn = redis.Redis.from_url(host.url).connection_pool.make_connection()
    assert wire.pack(commands) == b"".join(conn.pack_commands(commands))
    store = host.store()
    scope = host.scope("pack")
    store.load(scope, ["a"])  # connected: redis-py's handshake is packed before the patch
    calls: list[Any] = []
    monkeypatch.setattr(hiredis, "pack_command", _counting(calls, hiredis.pack_command))
    store.load(scope, ["a", "b"])
    assert [c[0][0] for c in calls] == ["TIME", "HMGET", "HMGET"]


def test_replies_held_by_hiredis_are_taken_from_its_reader(host: Host) -> None:
    """The connection's parser is redis-py's hiredis parser, and the replies of one write are
    taken from its reader: read_response reads the socket a few times, not once a reply."""
    store = host.store()
    pool = store.r.connection_pool
    conn = pool.get_connection()
    try:
        assert type(conn._parser) is wire.HIREDIS_PARSER
        assert hasattr(conn, "next_health_check") and conn.health_check_interval
        calls: list[Any] = []
        conn.read_response = _counting(calls, conn.read_response)
        n = 200
        wire.send(conn, [("ECHO", str(i)) for i in range(n)])
        assert wire.replies(conn, n) == [str(i).encode() for i in range(n)]
        assert 1 <= len(calls) <= n // 10, len(calls)
        assert conn.next_health_check > time.monotonic()  # taken replies count as health
    finally:
        pool.release(conn)


def test_a_reply_peeked_at_by_can_read_is_read_once(host: Host) -> None:
    """A reply that can_read saw arrive (the kept connection's check) is still the next
    reply `wire.replies` returns, and nothing is left to read."""
    store = host.store()
    pool = store.r.connection_pool
    conn = pool.get_connection()
    try:
        wire.send(conn, [("PING",), ("ECHO", "x")])
        deadline = time.monotonic() + 10
        while not conn.can_read(timeout=0.05):
            assert time.monotonic() < deadline, "no reply"
        assert wire.replies(conn, 2) == [b"PONG", b"x"]
        assert not conn.can_read(timeout=0)
    finally:
        pool.release(conn)


def test_push_messages_among_replies_are_handled_by_redis_py(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In RESP3, an invalidation pushed among a round trip's replies is taken from hiredis's
    reader and handed to redis-py's handle_push_response: it is no command's reply."""
    pushed: list[Any] = []
    handle = wire.HIREDIS_PARSER.handle_push_response
    monkeypatch.setattr(wire.HIREDIS_PARSER, "handle_push_response", _counting(pushed, handle))
    store = Store(redis.Redis.from_url(host.url, protocol=3))
    host.stores.append(store)
    scope = host.scope("push")
    key = keys.settings(scope)
    out = store._round_trip(
        scope,
        [("CLIENT", "TRACKING", "ON"), ("HGET", key, "f"), ("HSET", key, "f", "1"), ("PING",)],
    )
    assert out == [b"OK", None, 1, b"PONG"]
    assert len(pushed) == 1  # the invalidation of `key`
    host.client().delete(key)


def test_a_round_trip_reuses_the_kept_connection(host: Host) -> None:
    """Round trips take the connection given back last, not one from the pool each time."""
    store = host.store()
    pool = store.client("any").connection_pool
    taken: list[Any] = []
    pool.get_connection = _counting(taken, pool.get_connection)
    scope = host.scope("kept")
    for _ in range(20):
        store.load(scope, ["j"])
    assert len(taken) == 1

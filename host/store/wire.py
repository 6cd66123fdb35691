"""The wire: every private internal of redis-py and hiredis that the store uses, and
nothing else does (tests/test_store_wire.py proves each fast path is taken).

Commands are packed by hiredis directly and replies read raw, with no redis-py callbacks: an
error reply comes back as its exception, so the replies after it are still read. redis-py
>=5.2,<8.2 and hiredis 3 (pyproject.toml) are the versions these paths are written for.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
import redis.cluster
import redis.crc
from redis.backoff import NoBackoff
from redis.retry import Retry

Arg = bytes | str | int | float
"""One argument of a command."""
Command = tuple[Arg, ...]
"""One command: its name, then its arguments."""
Connection = Any
"""A redis-py connection (redis.connection.AbstractConnection: untyped)."""
Pool = Any
"""A redis-py connection pool (untyped)."""

HIREDIS_PARSER: Any = None
"""redis-py's hiredis parser class, whose reader `replies` takes held replies from."""
NOT_ENOUGH_DATA: Any = object()
"""What that reader returns while a reply is incomplete."""
try:
    from redis._parsers import hiredis as _parsers

    HIREDIS_PARSER, NOT_ENOUGH_DATA = _parsers._HiredisParser, _parsers.NOT_ENOUGH_DATA
except (ImportError, AttributeError):  # pragma: no cover - another redis-py: read_response
    pass

SLOTS_READ: Any = None
"""redis-py's event of a read of a cluster's slot map (redis-py 8.1 has it), which
`NodePools` listens to."""
with contextlib.suppress(ImportError, AttributeError):  # an older redis-py: look() alone
    from redis.event import AfterSlotsCacheRefreshEvent as SLOTS_READ

READS = frozenset({"TIME", "HGETALL", "HMGET"})
"""The commands of a round trip that may be sent again after a broken connection."""
KEEP_MIN_POOL = 4
"""The smallest connection pool a store keeps a connection of between round trips."""

_pid = os.getpid()
"""This process's id, kept current across forks (os.getpid twice a round trip was some 3%
of a one-entry batch's CPU)."""


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def pack(commands: Sequence[Command]) -> bytes:
    """Commands in the wire protocol, packed by hiredis (redis-py's packer looks at each
    argument in Python first: a third of a commit's cost on the hot path)."""
    # (hiredis's stub types a command as a 1-tuple)
    return b"".join([hiredis.pack_command(c) for c in commands])  # type: ignore[arg-type]


def send(conn: Connection, commands: Sequence[Command], check_health: bool = True) -> None:
    """Write `commands` packed in one write. Only a write with no reply outstanding may check
    the connection's health: a PING after unread replies would read another's reply."""
    conn.send_packed_command([pack(commands)], check_health=check_health)


def replies(conn: Connection, n: int) -> list[Any]:
    """The next `n` raw replies on `conn`; an error reply as its exception. A reply hiredis
    holds already is taken from its reader directly (as read_response would take it); one
    still to be received is read by read_response, which reads the socket."""
    out: list[Any] = []
    parser = conn._parser
    gets = None
    # (a reply that can_read peeked at is held by the parser: read_response returns it)
    if type(parser) is HIREDIS_PARSER and (
        getattr(parser, "_next_response", NOT_ENOUGH_DATA) is NOT_ENOUGH_DATA
    ):
        reader = getattr(parser, "_reader", None)  # None: not connected
        gets = None if reader is None else reader.gets
    taken = False
    lost = redis.ConnectionError
    try:
        for _ in range(n):
            while True:
                reply = NOT_ENOUGH_DATA if gets is None else gets()
                if reply is NOT_ENOUGH_DATA:
                    try:
                        reply = conn.read_response()
                    except redis.ResponseError as e:
                        reply = e
                    break
                taken = True
                if type(reply) is list:  # a plain list (a push message is a list's subclass)
                    if reply and isinstance(reply[0], lost):
                        raise reply[0]
                elif isinstance(reply, _SPECIAL) and _pushed(parser, reply):
                    continue
                break
            out.append(reply)
    except BaseException:
        conn.disconnect()  # as read_response does
        raise
    if taken and conn.health_check_interval:
        conn.next_health_check = time.monotonic() + conn.health_check_interval
    return out


_SPECIAL = (Exception, list)
"""The replies `_pushed` looks at."""


def _pushed(parser: Any, reply: Any) -> bool:
    """What read_response does with a reply taken from hiredis's reader (but a plain list's
    check, made by `replies`): a connection's error raises; a push message is handled, and
    is no reply (True)."""
    if isinstance(reply, redis.ConnectionError):
        raise reply
    if isinstance(reply, list) and reply and isinstance(reply[0], redis.ConnectionError):
        raise reply[0]
    push = getattr(parser, "_hiredis_PushNotificationType", None)
    if push is not None and isinstance(reply, push):
        parser.handle_push_response(reply)
        return True
    return False


def raised(out: list[Any]) -> list[Any]:
    """`out`, when no reply is an error reply; else the first error raises."""
    for x in out:
        if isinstance(x, Exception):
            raise x
    return out


class KeptConnections:
    """One connection of each pool kept between round trips, cheaper than the pool's. Taking
    and giving back are atomic dict operations (two threads never hold it at once); one made
    before a fork is not used."""

    def __init__(self) -> None:
        self._kept: dict[Pool, tuple[int, Connection]] = {}

    def take(self, pool: Pool) -> Connection:
        """A connection of `pool`: the one given back last, else one from the pool. One with
        something to read (the server closed it) is connected again, as the pool does."""
        got = self._kept.pop(pool, None)
        if got is None or got[0] != _pid:
            return pool.get_connection()
        conn = got[1]
        if getattr(conn, "_sock", None) is None:
            return conn  # disconnected (Store.close): the next write connects
        try:
            if conn.should_reconnect() or conn.can_read():
                raise redis.ConnectionError("the connection has data")
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            conn.disconnect()  # the next write connects again
        except BaseException:
            pool.release(conn)
            raise
        return conn

    def give_back(self, pool: Pool, conn: Connection) -> None:
        """Keep a connection whose replies were all read for the next `take`; when one is kept
        already, or the pool allows fewer than KEEP_MIN_POOL connections, release it."""
        limit = getattr(pool, "max_connections", None)
        if limit is not None and limit < KEEP_MIN_POOL:
            pool.release(conn)
            return
        kept = (_pid, conn)
        if self._kept.setdefault(pool, kept) is not kept:
            pool.release(conn)

    def pools(self) -> list[Pool]:
        """The pools a connection is kept of."""
        return list(self._kept)

    def discard(self, pool: Pool) -> None:
        """Disconnect and release the kept connection of `pool`, if one is kept."""
        got = self._kept.pop(pool, None)
        if got is not None and got[0] == _pid:
            with contextlib.suppress(Exception):
                got[1].disconnect()
                pool.release(got[1])

    def drop(self, pool: Pool, conn: Connection) -> None:
        """A connection whose replies were not all read: disconnected and released."""
        with contextlib.suppress(Exception):
            conn.disconnect()
        pool.release(conn)

    def close(self) -> None:
        """Disconnect and release every kept connection of this process."""
        kept, self._kept = self._kept, {}
        for pool, (pid, conn) in kept.items():
            if pid == _pid:
                with contextlib.suppress(Exception):
                    conn.disconnect()
                    pool.release(conn)


def round_trip(pool: Pool, kept: KeptConnections, commands: Sequence[Command]) -> list[Any]:
    """Commands in one round trip on a connection of `pool`, read raw (`replies`). Only reads
    (READS) are sent again once on a broken connection, as redis-py's pipeline would."""
    packed = pack(commands)
    again = all(c[0] in READS for c in commands)
    for attempt in (1, 2):
        conn = kept.take(pool)
        try:
            conn.send_packed_command([packed])
            out = replies(conn, len(commands))
        except (redis.ConnectionError, redis.TimeoutError) as e:
            conn.disconnect()
            pool.release(conn)
            if attempt == 2 or not again or isinstance(e, redis.BusyLoadingError):
                raise
            continue
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        kept.give_back(pool, conn)
        return out
    raise AssertionError("unreachable")  # pragma: no cover


# -- the cluster's slot map (redis-py's NodesManager)


def reload_slots(cluster: redis.cluster.RedisCluster, last: str | None = None) -> None:
    """Read which node owns which slot again (CLUSTER SLOTS), asking node `last` (host:port)
    last: redis-py asks in a random order, and a frozen node first costs a socket timeout."""
    cluster.nodes_manager.initialize(last_failed_node_name=last)


class NodePools:
    """The connection pools of a cluster's nodes, followed through every read of its slot
    map: the pool of a node that left the cluster's view is retired (`look`), and `close`
    disconnects every pool seen (RedisCluster.close disconnects none of them)."""

    def __init__(self, cluster: redis.cluster.RedisCluster, kept: KeptConnections) -> None:
        self._cluster = cluster
        self._kept = kept
        self._seen: set[Pool] = set()
        self._retired: set[Pool] = set()
        self._lock = threading.Lock()
        # redis-py tells of each read of the slot map, its own too (on a failed call); one
        # without the event is followed by `look` alone (the store's reads, and close)
        if SLOTS_READ is not None:
            listener: Any = self  # (its dispatcher calls `listen`)
            cluster.nodes_manager._event_dispatcher.register_listeners({SLOTS_READ: [listener]})
        self.look()

    def listen(self, event: object) -> None:
        """redis-py read the slot map: look (an error here must not fail its read)."""
        with contextlib.suppress(Exception):
            self.look()

    def _current(self) -> set[Pool]:
        manager = self._cluster.nodes_manager
        nodes = [*manager.nodes_cache.values(), *manager.startup_nodes.values()]
        return {n.redis_connection.connection_pool for n in nodes if n.redis_connection}

    def look(self) -> None:
        """Retire the pools of the nodes that left the cluster's view since the last look: a
        retired pool's idle and kept connections are disconnected, at this look and each
        later one while another thread still holds one of its connections."""
        current = self._current()
        with self._lock:
            self._retired |= (self._seen | set(self._kept.pools())) - current
            self._seen = current
            for pool in list(self._retired):
                self._kept.discard(pool)
                with contextlib.suppress(Exception):
                    pool.disconnect(inuse_connections=False)
                if not getattr(pool, "_in_use_connections", True):
                    self._retired.discard(pool)  # nothing of it left open

    def close(self) -> None:
        """Disconnect every connection of every pool seen, in use or not (the next call
        connects again)."""
        self.look()
        with self._lock:
            pools, self._retired = self._seen | self._retired, set()
        for pool in pools:
            with contextlib.suppress(Exception):
                pool.disconnect()


def slot_owners(cluster: redis.cluster.RedisCluster) -> list[str]:
    """The primary of every slot by name (host:port), "" for a slot no node serves."""
    slots = cluster.nodes_manager.slots_cache
    return [slots[i][0].name if slots.get(i) else "" for i in range(16384)]


def key_slot(key: bytes) -> int:
    """The cluster slot of `key`."""
    return int(redis.crc.key_slot(key))


# -- connection pools


def node_address(pool: Pool) -> str:
    """host:port (a unix socket's path) of the connections of `pool`."""
    kwargs = pool.connection_kwargs
    return f"{kwargs.get('host', kwargs.get('path', ''))}:{kwargs.get('port', '')}"


def probe_client(pool: Pool, timeout: float) -> redis.Redis:
    """A client of its own to the node of `pool`, without retries, waiting up to `timeout`."""
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    return redis.Redis(connection_pool=type(pool)(pool.connection_class, **kwargs))


# -- raw replies (RESP2 and RESP3 alike)

Fields = dict[bytes, bytes]
"""A stream entry's fields."""
Entry = tuple[str, Fields]
"""A stream entry: (entry id, fields)."""
Stored = list[tuple[bytes, Fields]]
"""Stream entries as redis-py's XRANGE and XREVRANGE give them."""
Scored = list[tuple[bytes, float]]
"""Members and scores as redis-py's ZRANGE WITHSCORES gives them."""


def text(value: object) -> str:
    """A reply's bytes as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def text_or_error(x: object) -> str | Exception:
    return x if isinstance(x, Exception) else text(x)


def ms(reply: Any) -> int:
    """Epoch milliseconds of a TIME reply."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def pairs(raw: Any) -> dict[str, str]:
    """A hash as text: a map in RESP3, a flat list in RESP2."""
    items = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    return {text(k): text(v) for k, v in items}


def entries(reply: Any) -> list[tuple[str, str, Fields]]:
    """(stream, entry id, fields) of a raw XREAD/XREADGROUP reply: a list of [stream,
    entries] in RESP2, a map in RESP3. An entry deleted while pending has no fields."""
    if not reply:
        return []
    out: list[tuple[str, str, Fields]] = []
    for stream, items in reply.items() if isinstance(reply, dict) else reply:
        name = text(stream)
        for entry_id, flat in items:
            if isinstance(flat, dict):
                values = flat
            else:
                values = dict(zip(flat[::2], flat[1::2], strict=True)) if flat else {}
            out.append((name, text(entry_id), values))
    return out


def xreadgroup(
    group: str,
    consumer: str,
    count: int,
    block_ms: int | None,
    streams: Sequence[str],
    start: str = ">",
) -> Command:
    """XREADGROUP of new entries (`>`) of `streams`, or with `start` "0" of the consumer's
    own pending ones; blocking only when `block_ms` is set."""
    block = () if block_ms is None else ("BLOCK", block_ms)
    return (
        "XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block,
        "STREAMS", *streams, *[start] * len(streams),
    )  # fmt: skip

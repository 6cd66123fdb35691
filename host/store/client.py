"""The store's connection: the client (one server, or a Valkey Cluster routed by scope),
its options, the function library and function calls, and the round trip."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Self, cast

import redis
import redis.cluster

from host import keys
from host.store import wire
from host.store.errors import StoreError, missing_function, no_permission, redacted

log = logging.getLogger("sfc.host.store")

SOCKET_TIMEOUT_S = 5.0
"""How long a call waits for the server's reply before it counts as unreachable: well above
the longest blocking read (1 s), so only a server that stopped answering reaches it."""
PROBE_TIMEOUT_S = 0.5
"""How long a probe of a node that could not be reached waits for its PING (Store.answers)."""
ROUTES_EVERY_S = 1.0
"""How often, at most, a store reads the cluster's slots again (`refresh_routes`)."""

_LIBRARY_SOURCE: str | None = None

FunctionCall = tuple[str, list[str], list[wire.Arg]]
"""One FCALL: the function's name, its keys (all of one `{scope}`), its arguments."""


def library_source() -> str:
    """The text of the function library `sfc_1` (host/functions.lua)."""
    global _LIBRARY_SOURCE
    if _LIBRARY_SOURCE is None:
        _LIBRARY_SOURCE = resources.files("host").joinpath("functions.lua").read_text("utf-8")
    return _LIBRARY_SOURCE


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """What a store writes with: the consumer it reads as, the history it keeps of a job,
    how long an event's source/id is remembered against duplicates."""

    consumer: str = ""
    history_limit: int = 1000
    dedupe_ttl_ms: int = 86_400_000


@dataclass(slots=True)
class _Shared:
    """What every store of one client shares (`Store.with_options`)."""

    kept: wire.KeptConnections = field(default_factory=wire.KeptConnections)
    pools: wire.NodePools | None = None
    """On a cluster, its nodes' pools, which `close` disconnects."""
    scope_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The keys of each scope that every commit names (formatting them was a third of
    building a commit's call)."""
    routes_at: float = 0.0
    """When the cluster's slots were last read again (`refresh_routes`)."""
    moved: bool = False
    """A read of the slots found a slot served by another node, and no wait ended on it."""
    moves: int = 0
    """How many reads of the slots found a slot served by another node."""
    turn: int = 0
    """Whose turn it is to block a read of several scopes on a cluster (`next_turn`)."""


class StoreClient:
    """A connection to the server, routed by scope on a cluster; the base of `Store`."""

    def __init__(
        self,
        client: redis.Redis | redis.cluster.RedisCluster,
        *,
        cluster: redis.cluster.RedisCluster | None = None,
        url: str = "",
        options: StoreOptions = StoreOptions(),
    ) -> None:
        self.r = client
        """The client: a redis.Redis, or on a cluster the RedisCluster (for the keys that
        live in slots of their own, sfc:scopes and sfc:recipe:*)."""
        self.cluster = cluster
        self.url = url
        self.options = options
        self._shared = _Shared()
        if cluster is not None:
            self._shared.pools = wire.NodePools(cluster, self._shared.kept)

    def with_options(
        self,
        *,
        consumer: str | None = None,
        history_limit: int | None = None,
        dedupe_ttl_ms: int | None = None,
    ) -> Self:
        """This store with other options, on the same client and connections; this one is
        unchanged."""
        old = self.options
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.options = StoreOptions(
            old.consumer if consumer is None else consumer,
            old.history_limit if history_limit is None else history_limit,
            old.dedupe_ttl_ms if dedupe_ttl_ms is None else dedupe_ttl_ms,
        )
        return other

    @property
    def consumer(self) -> str:
        return self.options.consumer

    @property
    def history_limit(self) -> int:
        return self.options.history_limit

    @property
    def dedupe_ttl_ms(self) -> int:
        return self.options.dedupe_ttl_ms

    @property
    def moves(self) -> int:
        """How many reads of the slots found a slot served by another node: a caller that
        keeps the count it saw learns of a move whoever's read found it."""
        return self._shared.moves

    @property
    def routes_read_at(self) -> float:
        """When the cluster's slots were last read again (time.monotonic; 0: never)."""
        return self._shared.routes_at

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        cluster: bool | None = None,
        socket_timeout: float = SOCKET_TIMEOUT_S,
        consumer: str = "",
        history_limit: int = 1000,
        dedupe_ttl_ms: int = 86_400_000,
    ) -> Self:
        """A store on `url` (redis://, rediss://, unix://, with user and password). A Valkey
        Cluster is detected from the server (`cluster_enabled`), or set with `cluster`."""
        tls: dict[str, Any] = {}
        ca = os.environ.get("SFC_TLS_CA")
        if url.startswith("rediss://") and ca and "ssl_ca_certs=" not in url:
            tls["ssl_ca_certs"] = ca  # the CA that signed the server's certificate
        try:
            client = redis.Redis.from_url(
                url,
                decode_responses=False,
                health_check_interval=30,
                socket_connect_timeout=5,
                socket_timeout=socket_timeout,
                **tls,
            )
        except ValueError as e:
            raise StoreError(f"unusable server URL {redacted(url)}: {e}") from None
        if cluster is None:
            try:
                cluster = bool(client.info("cluster").get("cluster_enabled"))
            except (redis.RedisError, OSError):
                cluster = False  # unreachable now: ping() says so; a cluster needs --cluster
            except TypeError as e:  # a query parameter no connection takes: `?foo=bar`
                client.close()
                said = str(e).rpartition("unexpected keyword argument ")[2] or str(e)
                raise StoreError(
                    f"unusable server URL {redacted(url)}: unknown parameter {said}"
                ) from None
        options = StoreOptions(consumer, history_limit, dedupe_ttl_ms)
        if not cluster:
            return cls(client, url=url, options=options)
        client.close()
        try:
            rc = redis.cluster.RedisCluster.from_url(
                url,
                decode_responses=False,
                socket_connect_timeout=5,
                socket_timeout=socket_timeout,
                **tls,
            )
        except (redis.RedisError, OSError) as e:
            raise StoreError(f"cannot reach the cluster at {redacted(url)}: {e}") from None
        except TypeError as e:
            said = str(e).rpartition("unexpected keyword argument ")[2] or str(e)
            raise StoreError(
                f"unusable server URL {redacted(url)}: unknown parameter {said}"
            ) from None
        return cls(rc, cluster=rc, url=url, options=options)

    def ping(self) -> None:
        """One PING; a StoreError that says what went wrong when it fails."""
        where = redacted(self.url) if self.url else "the server"
        try:
            self.r.ping()
        except redis.AuthenticationError as e:
            raise StoreError(f"{where} refused the login: {e}") from None
        except redis.ResponseError as e:
            if "NOAUTH" in str(e) or "WRONGPASS" in str(e) or "NOPERM" in str(e):
                raise StoreError(f"{where} refused the login: {e}") from None
            raise StoreError(f"{where} answered PING with an error: {e}") from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise StoreError(f"cannot reach {where}: {e}") from None

    def close(self) -> None:
        """Close the client's connections, the kept ones, and on a cluster those of every
        node's pool, of the nodes that left the cluster's view too."""
        self._shared.kept.close()
        if self._shared.pools is not None:
            self._shared.pools.close()
        with contextlib.suppress(redis.RedisError):
            self.r.close()

    # -- routing

    def client(self, scope: str) -> redis.Redis:
        """The client for the keys of `scope`: on a cluster, the node that owns the slot of
        `{scope}`, so every call and pipeline goes there directly."""
        return self._for_key(keys.work(scope))

    def _for_key(self, key: str) -> redis.Redis:
        if self.cluster is None:
            return cast(redis.Redis, self.r)  # one server: the plain client
        node = self.cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return self.cluster.get_redis_connection(node)

    def refresh_routes(self, away: str | None = None, *, now: bool = False) -> bool:
        """On a cluster, read which node owns which slot again, at most once a second (with
        `now`, at once), asking node `away` (host:port, one that does not answer) last. True
        when a slot is served by another node now."""
        if self.cluster is None:
            return False
        shared = self._shared
        at = time.monotonic()
        if not now and at - shared.routes_at < ROUTES_EVERY_S:
            return False
        shared.routes_at = at
        before = wire.slot_owners(self.cluster)
        try:
            wire.reload_slots(self.cluster, last=away)
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as e:
            # every node away ("Redis Cluster cannot be connected", which is no RedisError):
            # the next call says so
            log.debug("the cluster's slots could not be read again: %s", e)
            return False
        if shared.pools is not None:
            shared.pools.look()  # (for a redis-py that does not tell of its reads)
        moved = wire.slot_owners(self.cluster) != before
        shared.moved = shared.moved or moved
        shared.moves += moved
        return moved

    def wait_out(self, stop: threading.Event, seconds: float) -> None:
        """Wait `seconds` before the next try at an unreachable server, or until `stop` is set;
        on a cluster, end it as soon as another node serves a slot (slots read each second)."""
        if self.cluster is None:
            stop.wait(seconds)
            return
        shared = self._shared
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            if shared.moved or self.refresh_routes():
                shared.moved = False
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            stop.wait(min(left, ROUTES_EVERY_S))

    def node_name(self, scope: str) -> str:
        """The node that holds `scope` ("host:port"; the server's URL off a cluster)."""
        return wire.node_address(self._for_key(keys.work(scope)).connection_pool)

    def answers(self, scope: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
        """Whether the node of `scope` answers a PING within `timeout`, on a connection of
        its own without retries (a call waits SOCKET_TIMEOUT_S and a retry, some 10 s)."""
        probe = wire.probe_client(self._for_key(keys.work(scope)).connection_pool, timeout)
        try:
            return bool(probe.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            probe.close()
            probe.connection_pool.disconnect()

    def _round_trip(self, scope: str, commands: Sequence[wire.Command]) -> list[Any]:
        """Commands in one round trip on `scope`'s node, read raw (`wire.round_trip`)."""
        return wire.round_trip(self.client(scope).connection_pool, self._shared.kept, commands)

    def time_ms(self) -> int:
        """The server's clock, epoch ms."""
        return wire.ms(self.r.time())

    # -- the function library

    def load_library(self, key: str | None = None) -> None:
        """FUNCTION LOAD REPLACE of `sfc_1`; a StoreError when this user may not load it.
        On a cluster: on every primary (a StoreError names those that cannot be reached),
        or with `key` on the node of its slot alone."""
        if self.cluster is not None and key is None:
            away = self._load_on_primaries()
            if away:
                nodes = ", ".join(f"{node} ({error})" for node, error in away)
                raise StoreError(
                    f"the function library {keys.LIBRARY} cannot be loaded on every primary: "
                    f"{'node' if len(away) == 1 else 'nodes'} {nodes} cannot be reached; "
                    "run this again once the cluster is whole"
                )
            return
        with no_permission():
            if self.cluster is None:
                self.r.function_load(library_source(), replace=True)
            else:
                self._for_key(key or "").function_load(library_source(), replace=True)

    def _load_on_primaries(self) -> list[tuple[str, BaseException]]:
        """Load the library on every primary of the cluster; those that cannot be reached
        (host:port) with their error. A StoreError when this user may not load it."""
        assert self.cluster is not None
        away: list[tuple[str, BaseException]] = []
        for node in self.cluster.get_primaries():  # type: ignore[no-untyped-call]
            try:
                with no_permission():
                    self.cluster.get_redis_connection(node).function_load(
                        library_source(), replace=True
                    )
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                away.append((f"{node.host}:{node.port}", e))
        return away

    def ensure_library(self) -> bool:
        """Load the library if this user may; True when loaded now. On a cluster, a primary
        that cannot be reached is passed over, said at warning: its first call that misses
        the library loads it there (`load_library(key)`)."""
        try:
            if self.cluster is None:
                self.load_library()
                return True
            away = self._load_on_primaries()
        except StoreError:
            return False
        for node, error in away:
            log.warning(
                "the function library %s is not loaded on node %s, which cannot be reached "
                "(%s); passed over: its first call that misses the library loads it there",
                keys.LIBRARY,
                node,
                error,
                extra={"reason": f"{type(error).__name__}: {error}"},
            )
        return True

    def _fcall(self, name: str, keys_: Sequence[str], args: Sequence[wire.Arg]) -> Any:
        """FCALL, sent to the node of its keys (all in the slot of one `{scope}`)."""
        r = self._for_key(keys_[0])
        try:
            return r.fcall(name, len(keys_), *keys_, *args)
        except redis.ResponseError as e:
            if not missing_function(e):
                raise
        self.load_library(keys_[0])
        return r.fcall(name, len(keys_), *keys_, *args)

    def _fcalls(self, calls: Sequence[FunctionCall], each: bool = False) -> list[Any]:
        """Function calls in one pipeline; the results in order (an error reply raises, or,
        with `each`, is that call's result: the others' results are not lost)."""
        if not calls:
            return []
        r = self._for_key(calls[0][1][0])  # one scope's calls: one node
        for attempt in (1, 2):
            pipe = r.pipeline(transaction=False)
            for name, keys_, args in calls:
                pipe.fcall(name, len(keys_), *keys_, *args)
            results = pipe.execute(raise_on_error=False)
            if attempt == 1 and any(
                isinstance(x, redis.ResponseError) and missing_function(x) for x in results
            ):
                self.load_library(calls[0][1][0])
                continue
            for x in results:
                if isinstance(x, Exception) and not (each and isinstance(x, redis.ResponseError)):
                    raise x
            return results
        raise AssertionError("unreachable")  # pragma: no cover

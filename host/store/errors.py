"""How the store's errors read: the server away, a slot moving or moved (a cluster), a
login refused. Pure functions of an exception; the worker and adapters decide what to do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from host import keys
from host.store import wire


class StoreError(RuntimeError):
    """The server cannot be reached or refused the login; the message says which and where."""


def missing_function(error: BaseException) -> bool:
    """Whether `error` says the function library is not loaded on the node."""
    text = str(error).lower()
    return "function not found" in text or "no such function" in text


@contextlib.contextmanager
def no_permission() -> Iterator[None]:
    """A FUNCTION LOAD that this user may not run: a StoreError that says to run `sfc
    setup` as an admin user."""
    try:
        yield
    except redis.ResponseError as e:
        if isinstance(e, redis.exceptions.NoPermissionError) or "NOPERM" in str(e):
            raise StoreError(
                f"the function library {keys.LIBRARY} is not loaded, or not this version, "
                f"and this user may not load it ({e}); run `sfc setup` as an admin user"
            ) from None
        raise


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    auth, _, host = rest.rpartition("@")
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user + ':***' if ':' in auth else user}@{host}"


_PASSING = ("CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "MOVED ", "ASK ")
"""Error replies of a server that is there but cannot serve now: a cluster with a node
down or slots moving (or moved: the routes are read again), a replica without its primary,
a server loading its data."""


def unreachable(error: BaseException) -> bool:
    """Whether `error` says the server cannot be reached or cannot serve for now (gone,
    restarting, loading; a cluster with a node down): wait it out, with backoff."""
    if isinstance(
        error,
        redis.ConnectionError
        | redis.TimeoutError
        | redis.BusyLoadingError
        | redis.exceptions.ClusterDownError
        | redis.exceptions.TryAgainError
        | redis.exceptions.AskError  # MovedError too: a slot that moved (Store.refresh_routes)
        | OSError,
    ):
        return True
    if isinstance(error, redis.ResponseError):  # read raw, an error reply keeps its text only
        return str(error).startswith(_PASSING)
    if isinstance(error, redis.exceptions.RedisClusterException):  # no RedisError
        return "cannot be connected" in str(error)  # no node of the cluster answers
    return False


def slot_moved(error: BaseException) -> bool:
    """Whether `error` is a MOVED (or an ASK): the node answered, and another node serves
    the slot now (a failover or a reshard). Routine: read the slots again, say it at info."""
    return isinstance(error, redis.exceptions.AskError)  # MovedError is one


def slot_rehashing(error: BaseException) -> bool:
    """Whether `error` is a TRYAGAIN: a call of several keys of a slot that a reshard is
    moving, some moved and some not yet. A move under way, not an outage."""
    if isinstance(error, redis.exceptions.TryAgainError):
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith("TRYAGAIN")


@dataclass(frozen=True, slots=True)
class Moved:
    """Where a MOVED (or an ASK) points: the slot, the node that answers for it, and which
    of the two it was (`moved_to`)."""

    slot: int
    node: str
    """host:port"""
    answer: str
    """MOVED, or ASK (a reshard under way)"""


def moved_to(error: BaseException) -> Moved | None:
    """The slot and node of a MOVED (or an ASK) `error`, else None."""
    if not isinstance(error, redis.exceptions.AskError):  # MovedError is one
        return None
    answer = "MOVED" if isinstance(error, redis.exceptions.MovedError) else "ASK"
    return Moved(error.slot_id, f"{error.host}:{error.port}", answer)


def slot_of(scope: str) -> int:
    """The cluster slot of the keys of `scope` (they share it: `{scope}`)."""
    return wire.key_slot(keys.work(scope).encode())


def unreachable_reason(error: BaseException, slot: int | None = None) -> str:
    """The log's words for an error `unreachable` waits out: which slot moved and where, that
    `slot` is being moved (TRYAGAIN), or the error's text."""
    if isinstance(error, redis.exceptions.AskError):  # MovedError is one
        moved = "moved" if isinstance(error, redis.exceptions.MovedError) else "is moving"
        return (
            f"slot {error.slot_id} {moved} to {error.host}:{error.port} (a failover or a reshard)"
        )
    if slot_rehashing(error):
        which = "a slot" if slot is None else f"slot {slot}"
        return f"{which} is being moved (TRYAGAIN: a reshard under way, its keys on two nodes)"
    return str(error)


def slot_moving(error: BaseException) -> bool:
    """Whether `error` says the slot of the call is moving or moved: a MOVED or an ASK (a
    failover, a reshard), or a TRYAGAIN (a reshard under way). The node answered: routine."""
    return slot_moved(error) or slot_rehashing(error)

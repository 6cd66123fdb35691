"""The park-and-move policy as the worker applies it (`Worker`, `Routes`), where one real
server shows it as well as a cluster: the scopes the refresh takes up and forgets.

The cluster's answers themselves (MOVED, ASK, TRYAGAIN, a node away) are checked end to
end in tests/test_host_cluster_isolation.py; the policy's table in
tests/test_cluster_policy.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from host import keys
from host.cluster import Happened
from host.server import EmbeddedServer
from host.store import Store
from host.worker import Worker
from tests.hostkit import FAST, new_scope


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A server of its own: a worker of the registry takes up every scope registered."""
    server = EmbeddedServer(tmp_path / "valkey").start()
    s = Store.from_url(server.url)
    try:
        yield s
    finally:
        s.close()
        server.stop()


def test_a_scope_not_taken_up_that_left_the_registry_is_forgotten(store: Store) -> None:
    """A registered scope not taken up because its slot moved, or because its node is away,
    then dropped from `sfc:scopes`: the worker kept its move, or its name, for as long as it
    ran. It forgets them at the refresh that no longer lists it; a scope it serves keeps its
    move."""
    kept, moved, away = new_scope("left-kept"), new_scope("left-moved"), new_scope("left-away")
    for scope in (kept, moved, away):
        store.register_scope(scope)
    worker = Worker(store, FAST)
    policy = worker.routes.policy
    # what the refresh's calls of them said on a cluster (Routes.taking_up)
    assert policy.step(moved, Happened.MOVED, 1.0, taken=False).say.name == "MOVE_STARTED"
    assert policy.step(away, Happened.AWAY, 1.0, taken=False).say.name == "NOT_TAKEN"
    assert moved in policy.moving and away in policy.not_taken
    store.r.srem(keys.SCOPES, moved, away)
    taken = worker.refresh_scopes()
    assert taken == [kept], taken
    assert moved not in policy.moving
    assert away not in policy.not_taken
    # a scope served whose slot moves keeps its move across the refresh
    policy.step(kept, Happened.MOVED, 2.0)
    assert kept not in worker.refresh_scopes()
    assert kept in policy.moving

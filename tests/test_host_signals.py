"""Every process an `sfc` command starts stops with it (issue 37, item 12): `sfc run`,
`sfc serve`, `sfc equipment` and `sfc bridge mqtt`, each sent SIGTERM, SIGINT and SIGHUP
to its own process alone (a service manager, `kill`, a closed terminal), stop cleanly, and
leave no process (workers, the embedded valkey-server) and no temporary directory behind.
`sfc run` with SIGINT starts with SIGINT ignored, as a background job of a shell without
job control inherits it: `kill -INT` stops it all the same. A SIGKILL of `sfc run` takes
its server with it (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from host.serve import _running
from tests.clikit import SFC, cli_env
from tests.hostkit import linear_recipe, wait_for
from tests.test_mqtt import mqtt_broker, mqtt_url  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
AXLE = ROOT / "examples/rear-axle-fitting/recipe.json"
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


def patient_run(tmp_path: Path) -> list[str]:
    """`sfc run` args that run until a signal comes: one action with an hour's deadline,
    answered after ten minutes (the README's run ends 100 jobs in a fraction of a second
    on an idle machine, before the test's signal)."""
    recipe = tmp_path / "patient.json"
    recipe.write_bytes(linear_recipe(1, timeout_s=3600))
    script = tmp_path / "patient.script.json"
    script.write_text('{"default": "ok@600000"}')
    return ["run", str(recipe), "--jobs", "10", "--script", str(script)]


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid` (children, theirs...), with its command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                with contextlib.suppress(OSError):
                    found[child] = (
                        Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    )
                frontier.append(child)
    return found


@contextlib.contextmanager
def command(
    tmp_path: Path, *args: str, ignore_sigint: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """`sfc ARGS` in a session of its own, stderr in a file; killed with its session and
    what it started if the test fails before it ends."""
    err = open(tmp_path / "stderr", "wb")  # noqa: SIM115 (closed below)

    def dispositions() -> None:
        # SIGHUP as a terminal session has it, whatever the runner has (nohup, a CI runner
        # ignore it, and sfc keeps an inherited ignore: that is what nohup asks for)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        if ignore_sigint:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [*SFC, *args],
        cwd=tmp_path,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
        preexec_fn=dispositions,
    )
    try:
        yield proc
    finally:
        left = descendants(proc.pid)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        err.close()


def said(tmp_path: Path) -> str:
    return (tmp_path / "stderr").read_text(errors="replace")


def stop(
    proc: subprocess.Popen[bytes], sig: int, tmp_path: Path, ready: Callable[[], bool]
) -> tuple[int, dict[int, str]]:
    """Wait until `ready`, send `sig` to the process alone; its exit code, and what it
    had started (each checked gone)."""
    wait_for(lambda: ready() or proc.poll() is not None, timeout=60, what="the command to be ready")
    assert proc.poll() is None, said(tmp_path)
    started = descendants(proc.pid)
    proc.send_signal(sig)
    try:
        code = proc.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"no stop within 60 s of {sig!r}:\n{said(tmp_path)}") from None
    wait_for(
        lambda: not any(_running(p) for p in started),
        timeout=10,
        what=f"what it started to stop: {started}",
    )
    return code, started


def servers(started: dict[int, str]) -> list[int]:
    return [p for p, cmd in started.items() if "valkey-server" in cmd]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_sfc_run_stops_its_workers_and_server_and_removes_its_directory(
    tmp_path: Path, sig: int
) -> None:
    with command(tmp_path, *patient_run(tmp_path), ignore_sigint=sig == signal.SIGINT) as proc:

        def ready() -> bool:
            running = descendants(proc.pid).values()
            workers = [
                c for c in running if "multiprocessing.spawn" in c
            ]  # not its resource_tracker
            return len(workers) == 2 and any("valkey-server" in c for c in running)

        wait_for(ready, timeout=60, what="the server and both workers")
        (server,) = servers(descendants(proc.pid))
        directory = Path(os.readlink(f"/proc/{server}/cwd"))
        assert directory.name.startswith("sfc-run-")
        code, started = stop(proc, sig, tmp_path, ready)
    name = signal.Signals(sig).name
    assert code == 1, said(tmp_path)
    assert f"sfc: run: stopped by {name}; its workers and server stopped" in said(tmp_path)
    assert "Traceback" not in said(tmp_path)
    assert len(started) >= 3 and not directory.exists()


def test_sfc_run_killed_takes_its_server_with_it(tmp_path: Path) -> None:
    with command(tmp_path, *patient_run(tmp_path)) as proc:
        wait_for(
            lambda: bool(servers(descendants(proc.pid))) or proc.poll() is not None,
            timeout=60,
            what="the server",
        )
        (server,) = servers(descendants(proc.pid))
        proc.kill()
        proc.wait()
        wait_for(lambda: not _running(server), timeout=10, what="the server to stop")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_sfc_serve_stops_its_workers_and_server(tmp_path: Path, sig: int) -> None:
    data = tmp_path / "data"
    with command(tmp_path, "serve", "--data-dir", str(data), "--workers", "2") as proc:
        code, started = stop(
            proc, sig, tmp_path, lambda: said(tmp_path).count("sfc.host.serve: worker") == 2
        )
    assert code == 0, said(tmp_path)
    assert "sfc serve: stopped in" in said(tmp_path)
    workers = [c for c in started.values() if "spawn_main" in c]
    assert len(servers(started)) == 1 and len(workers) == 2, started
    assert not (data / "server.json").exists()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_sfc_equipment_stops(tmp_path: Path, valkey_url: str, sig: int) -> None:
    script = tmp_path / "script.json"
    script.write_text('{"default": "ok"}')
    args = ["equipment", "--script", str(script), "--scope", f"sig{sig}", "--redis", valkey_url]
    with command(tmp_path, *args) as proc:
        code, _ = stop(proc, sig, tmp_path, lambda: "sfc equipment: answering" in said(tmp_path))
    assert code == 0, said(tmp_path)
    assert "sfc equipment: stopped; " in said(tmp_path)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_sfc_bridge_mqtt_stops(
    tmp_path: Path,
    valkey_url: str,
    mqtt_url: str,  # noqa: F811 (the fixture)
    sig: int,
) -> None:
    args = ["bridge", "mqtt", "--broker", mqtt_url, "--scope", f"sig{sig}", "--redis", valkey_url]
    with command(tmp_path, *args) as proc:
        code, _ = stop(proc, sig, tmp_path, lambda: "sfc bridge mqtt: scope" in said(tmp_path))
    assert code == 0, said(tmp_path)
    assert "sfc bridge mqtt: stopped; " in said(tmp_path)

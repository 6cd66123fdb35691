"""Helpers of the subprocess tests of the host commands (tests/test_host_cli.py).

Every command runs as a real `sfc` process, as a plant engineer or a CI job would run it: no
stdin, no terminal, an environment without `SFC_*` variables unless a test sets one. Long
running commands (`sfc serve`, `sfc equipment`) are `Background` processes in a session of
their own, written to files (no pipes to fill), waited on with deadlines, and always stopped:
SIGTERM, then SIGKILL of the whole session, and a server that `sfc serve` left behind is
shut down through its `server.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from jsonschema import Draft202012Validator

from tests.hostkit import wait_for

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

_SCRIPT = Path(sys.executable).parent / "sfc"
SFC: list[str] = (
    [str(_SCRIPT)]
    if _SCRIPT.exists()
    else [sys.executable, "-c", "from cli.main import app; app(prog_name='sfc')"]
)
"""The console script next to this interpreter (the venv's), else the same app by `-c`."""

CALL_TIMEOUT = 60.0
"""The most any one command may take before the test fails (it is killed)."""


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI call: this one without `SFC_*`, no colours, wide lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SFC_")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


@dataclass(frozen=True, repr=False)
class Result:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        try:
            return json.loads(self.out)
        except ValueError as e:
            raise AssertionError(f"{self}\nstdout is not one JSON document: {e}") from None

    def lines(self) -> list[str]:
        return self.out.splitlines()

    def __repr__(self) -> str:
        return (
            f"sfc {' '.join(self.args)} exited {self.code}\n"
            f"--- stdout\n{self.out}--- stderr\n{self.err}"
        )


def sfc(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """Run one `sfc` command to its end."""
    (result,) = sfc_all([args], cwd=cwd, envs=[env])
    return result


def sfc_all(
    calls: Sequence[Sequence[str | Path]],
    *,
    cwd: Path,
    envs: Sequence[dict[str, str] | None] | None = None,
) -> list[Result]:
    """Run independent `sfc` commands at once (each costs a second of imports); their
    results in the order given. `envs[i]` is the environment of call i (None: `cli_env()`)."""
    started: list[tuple[tuple[str, ...], subprocess.Popen[str]]] = []
    try:
        for i, call in enumerate(calls):
            args = tuple(str(a) for a in call)
            env = envs[i] if envs is not None else None
            p = subprocess.Popen(
                [*SFC, *args],
                cwd=cwd,
                env=env or cli_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            started.append((args, p))
        deadline = time.monotonic() + CALL_TIMEOUT
        results = []
        for args, p in started:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"sfc {' '.join(args)} took over {CALL_TIMEOUT} s") from None
            results.append(Result(args, p.returncode, out, err))
        return results
    finally:
        for _, p in started:
            if p.poll() is None:
                p.kill()
            p.communicate()


@dataclass
class Background:
    """A long-running `sfc` command (serve, equipment) with its output in files."""

    name: str
    args: tuple[str, ...]
    popen: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path
    data_dir: Path | None = None
    """The data directory of an `sfc serve` with an embedded server."""
    code: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.popen.poll() is None

    def wait_for_stderr(self, text: str, *, count: int = 1, timeout: float = 30.0) -> None:
        """Wait until `text` appears `count` times in stderr; fail at once if it exited."""

        def seen() -> bool:
            if self.stderr().count(text) >= count:
                return True
            if not self.running():
                raise AssertionError(
                    f"{self.name} exited {self.popen.returncode} before saying {text!r}:\n"
                    f"{self.stderr()}"
                )
            return False

        wait_for(seen, timeout=timeout, what=f"{self.name} to say {text!r}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; SIGKILL the process's whole session after `timeout`. A server
        it left behind (its server.json outlives it) is shut down. Returns the exit code."""
        if self.code is not None:
            return self.code
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
        try:
            self.code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
            self.code = -signal.SIGKILL
        self._shutdown_left_server()
        return self.code

    def _shutdown_left_server(self) -> None:
        if self.data_dir is None:
            return
        try:
            doc = json.loads((self.data_dir / "server.json").read_text())
        except (OSError, ValueError):
            return
        if doc.get("pid") != self.popen.pid:
            return  # another serve's server: not ours to stop
        client = redis.Redis.from_url(doc["url"], socket_timeout=2)
        with contextlib.suppress(redis.RedisError):
            client.shutdown(nosave=True)
        client.close()


@dataclass
class Processes:
    """Every background process a test started; `close()` stops them, newest first."""

    logs: Path
    started: list[Background] = field(default_factory=list)

    def start(
        self,
        name: str,
        *args: str | Path,
        cwd: Path,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Background:
        self.logs.mkdir(parents=True, exist_ok=True)
        n = len(self.started) + 1
        out_path, err_path = self.logs / f"{n}-{name}.out", self.logs / f"{n}-{name}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            popen = subprocess.Popen(
                [*SFC, *(str(a) for a in args)],
                cwd=cwd,
                env=env or cli_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        bg = Background(name, tuple(str(a) for a in args), popen, out_path, err_path, data_dir)
        self.started.append(bg)
        return bg

    def serve(
        self,
        data_dir: Path,
        *args: str,
        cwd: Path,
        workers: int = 1,
        ready: bool = True,
        env: dict[str, str] | None = None,
    ) -> Background:
        """`sfc serve --data-dir DIR`: once it has set up its scopes and started its workers
        (it says `sfc serve: ...`), and with `ready`, once every worker serves."""
        bg = self.start(
            "serve", "serve", "--data-dir", data_dir, "--workers", str(workers), *args,
            cwd=cwd, data_dir=data_dir, env=env,
        )  # fmt: skip
        bg.wait_for_stderr("sfc serve: ")
        if ready:
            bg.wait_for_stderr("sfc.host.serve: worker", count=workers)
        return bg

    def equipment(
        self,
        script: Path,
        scope: str,
        data_dir: Path,
        *,
        cwd: Path,
        scale: float = 0.01,
        ready: bool = True,
    ) -> Background:
        """`sfc equipment --script S --time-scale F`; with `ready`, once it answers (its
        consumer group starts at 0, so what it reads does not depend on when it starts)."""
        bg = self.start(
            f"equipment-{scope}", "equipment", "--script", script, "--scope", scope,
            "--time-scale", str(scale), "--data-dir", data_dir, cwd=cwd,
        )  # fmt: skip
        if ready:
            bg.wait_for_stderr("sfc equipment: answering")
        return bg

    def close(self) -> None:
        for bg in reversed(self.started):
            bg.stop()


@contextlib.contextmanager
def processes(logs: Path) -> Iterator[Processes]:
    procs = Processes(logs)
    try:
        yield procs
    finally:
        procs.close()


def server_url(data_dir: Path) -> str:
    url: str = json.loads((data_dir / "server.json").read_text())["url"]
    return url


def check(doc: Any, schema: dict[str, Any]) -> Any:
    """Validate `doc` against `schema` (Draft 2020-12); returns `doc`."""
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: e.json_path)
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors)
    return doc


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """A closed object schema: these keys (all of `required` present), no others."""
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
        "additionalProperties": False,
    }


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
NUM: dict[str, Any] = {"type": "number"}
BOOL: dict[str, Any] = {"type": "boolean"}
MS_OR_NULL: dict[str, Any] = {"type": ["integer", "null"], "minimum": 0}

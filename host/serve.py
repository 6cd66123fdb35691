"""Serving: connecting, the embedded server, scope setup, and worker processes
(docs/host.md, "Serving, connecting, embedding").

- `resolve_url` finds the server: `--redis URL`, then `SFC_REDIS_URL`, then the connection
  file `<data-dir>/server.json` that a running `sfc serve` wrote.
- `setup_scope` registers a scope and writes its settings.
- `Serving` is what `sfc serve` and `sfc run` run: the embedded server when no URL is given
  (or attached to the one another `serve` runs on the same data directory), and N worker
  processes, each with a consumer name of its own. `stop()` stops the workers with SIGTERM
  (each stops between batches, leaving what it had not committed pending), then the
  embedded server (SIGTERM: the AOF is flushed).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec

from host import keys, logs
from host.server import (
    CONNECTION_FILE,
    EmbeddedServer,
    Fsync,
    ServerError,
    lock_data_dir,
    lock_holder,
    private_dir,
    read_connection,
    read_connection_file,
    stored_password,
    write_connection_file,
)
from host.settings import Settings
from host.store import Store, StoreError, redacted
from host.worker import Worker, consumer_name, tune_collector
from sfc.codec import capabilities_decoder

if TYPE_CHECKING:
    from host.metrics import MetricsServer

log = logging.getLogger("sfc.host.serve")
DEFAULT_DATA_DIR = ".sfc"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PORT_FILE = "server.port"
"""The embedded server's port, kept across runs so that a restart can take it again."""
SERVER_PID_FILE = "server.pid"
"""The pid of the embedded valkey-server, so that the next serve can stop one that a killed
serve left running."""
RESTART_LIMIT = 5
RESTART_WINDOW_S = 60
"""A worker process that exits is replaced; more than RESTART_LIMIT replacements within
RESTART_WINDOW_S seconds is a crash loop (a bug, a setting, the machine), and serve stops.
After a crash loop of its workers it leaves its embedded server running when other
instances are attached to it (`Serving.stop`)."""


ATTACHED_DIR = "attached"
"""Where each `sfc serve` attached to the server of a data directory leaves a file named by
its pid while it runs, so that a command that finds no server.json can say they wait."""


class NoServer(RuntimeError):
    """No server to connect to; the message says where it looked and how to start one."""


def attached_serves(directory: Path) -> list[int]:
    """The pids of the `sfc serve`s attached to the server of `directory` that still run."""
    try:
        names = [p.name for p in (directory / ATTACHED_DIR).iterdir()]
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and _alive(int(n)))


def _server_gone(directory: Path, attached: list[int]) -> str:
    """Why there is no server.json while serves attached to it run."""
    pids = ", ".join(str(p) for p in attached)
    return (
        f"no server: the sfc serve that ran the server of {directory} stopped (it removed "
        f"{directory / CONNECTION_FILE}), and {len(attached)} sfc serve(s) attached to it "
        f"(pid {pids}) wait for it. Start `sfc serve --data-dir {directory}` to run it again "
        "(on the same port: they reconnect), or stop them"
    )


def watch_server(directory: Path, stop: threading.Event, name: str) -> threading.Thread:
    """Say, in the log of `name`, when the server that the `sfc serve` of `directory` runs
    goes away (its server.json removed, or its serve gone) and when one is back, until
    `stop`: the command's connection only says the server cannot be reached."""
    where = logging.getLogger(name)

    def run() -> None:
        found = read_connection(directory)
        running = found[1] if found is not None else None
        while not stop.wait(1.0):
            found = read_connection(directory)
            pid = found[1] if found is not None else None
            alive = pid is not None and _alive(pid)
            if running is not None and (not alive or pid != running):
                why = (
                    f"stopped and removed {directory / CONNECTION_FILE}"
                    if found is None
                    else "is gone (killed?)"
                    if pid == running
                    else f"was replaced by pid {pid}"
                )
                where.error(
                    "the server of %s is gone: the sfc serve that ran it (pid %d) %s; "
                    "waiting for an sfc serve on %s to run it again (on the same port and "
                    "password: this process reconnects)",
                    directory,
                    running,
                    why,
                    directory,
                )
                running = None
            if running is None and alive:
                where.warning("the server of %s is back: sfc serve pid %s runs it", directory, pid)
                running = pid

    thread = threading.Thread(target=run, name="watch-server", daemon=True)
    thread.start()
    return thread


def data_dir_of(data_dir: str | Path | None) -> Path:
    return Path(data_dir or os.environ.get("SFC_DATA_DIR") or DEFAULT_DATA_DIR)


def resolve_url(redis_url: str | None, data_dir: str | Path | None = None) -> str:
    """The server's URL: `--redis`, then SFC_REDIS_URL, then `<data-dir>/server.json`."""
    if redis_url:
        return redis_url
    env = os.environ.get("SFC_REDIS_URL")
    if env:
        return env
    directory = data_dir_of(data_dir)
    url = read_connection_file(directory)
    if url:
        return url
    attached = attached_serves(directory)
    if attached:
        raise NoServer(_server_gone(directory, attached))
    raise NoServer(
        f"no server: no --redis URL, no SFC_REDIS_URL, and no {directory / CONNECTION_FILE} "
        "(written by a running `sfc serve`). Start one with `sfc serve` in another terminal "
        "(an embedded Valkey, nothing to install), or pass --redis redis://HOST:PORT"
    )


def connect(url: str, consumer: str = "", check: bool = True) -> Store:
    """A store on `url`; with `check`, one PING first, so a bad URL or password fails here
    with a StoreError that says what the server said."""
    store = Store.from_url(url, consumer=consumer)
    if check:
        store.ping()
    return store


def scope_values(
    *,
    capabilities: bytes | None = None,
    max_attempts: int | None = None,
    equipment_hold: bool | None = None,
    expiry_grace: int | None = None,
) -> dict[str, str]:
    """The fields of `sfc:scope:{S}` that these options set; capabilities are checked. The
    expiry grace is in ms, a duration as `SFC_EXPIRY_GRACE` takes it (zero or more)."""
    values: dict[str, str] = {}
    if capabilities is not None:
        try:
            capabilities_decoder.decode(capabilities)
        except (msgspec.DecodeError, RecursionError) as e:
            raise ValueError(f"the capabilities do not fit their schema: {e}") from None
        values["capabilities"] = capabilities.decode()
    if max_attempts is not None:
        if not 1 <= max_attempts <= 100:
            raise ValueError(f"--max-attempts {max_attempts} is out of range; it must be 1 to 100")
        values["maxAttempts"] = str(max_attempts)
    if equipment_hold is not None:
        values["equipmentHold"] = "true" if equipment_hold else "false"
    if expiry_grace is not None:
        if expiry_grace < 0:
            raise ValueError(
                f"--expiry-grace {expiry_grace}ms is out of range; it must be 0 or more"
            )
        values["expiryGrace"] = str(expiry_grace)
    return values


def setup_scope(store: Store, scope: str, values: Mapping[str, str]) -> None:
    """Register the scope, create its group, write its settings. The caller loads the
    function library first, once (`Store.ensure_library`; `sfc setup`: `load_library`)."""
    keys.check_scope(scope)
    store.put_scope_settings(scope, values)
    store.register_scope(scope)
    store.create_group(scope)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What stops every long-running command and what it started: a service manager's or a
container's stop, Ctrl-C or `kill -INT`, and a closed terminal."""


def stop_on_signals(stop: threading.Event, received: list[int] | None = None) -> None:
    """SIGTERM, SIGINT and SIGHUP set `stop` from a thread of its own (the handler only
    queues the number, appended to `received`). SIGINT is taken even if inherited ignored;
    SIGHUP inherited ignored stays ignored (`nohup`)."""
    signals: queue.SimpleQueue[int] = queue.SimpleQueue()

    def relay() -> None:
        number = signals.get()
        if received is not None:
            received.append(number)
        stop.set()

    threading.Thread(target=relay, name="stop-on-signal", daemon=True).start()
    for sig in STOP_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        # only a SimpleQueue's put: a handler that set `stop` itself could wait for ever on
        # the lock the interrupted main thread holds (in `stop.wait`, or a first `set`)
        signal.signal(sig, lambda number, _: signals.put(number))


def _worker_main(
    url: str,
    scopes: list[str] | None,
    values: dict[str, str],
    consumer: str,
    level: int,
    log_format: logs.LogFormat = "text",
    metrics_dir: str | None = None,
    parent: int = 0,
) -> None:
    """A worker process: serve until SIGTERM or SIGINT, or until `parent` (the pid of its
    `sfc serve`; 0: its parent now) is gone. With `metrics_dir`, it counts in the
    multiprocess files there (host/metrics.py)."""
    logs.configure(level, log_format)
    stop = threading.Event()
    stop_on_signals(stop)
    # given by serve: read here, a serve killed while its worker was starting (a second of
    # imports) was gone already, and the worker took the reaper for it and served on for ever
    parent = parent or os.getppid()
    threading.Thread(target=_stop_with_parent, args=(parent, stop), daemon=True).start()
    settings = Settings().with_values(values)
    store = Store.from_url(url)
    metrics: Any = None
    if metrics_dir is not None:
        os.environ[MULTIPROC_ENV] = metrics_dir  # inherited already; set before the import
        from host.metrics import WorkerMetrics

        metrics = WorkerMetrics()
    worker = Worker(store, settings, scopes, consumer=consumer, metrics=metrics, overlap=True)
    tune_collector()
    log.info("worker %s started", consumer)
    try:
        worker.run(stop)
    finally:
        store.close()
        log.info("worker %s stopped", consumer)


def _stop_with_parent(parent: int, stop: threading.Event) -> None:
    """A worker whose `sfc serve` was killed (SIGKILL, the OOM killer) stops, rather than
    serve on unmanaged: its parent is then another process."""
    while not stop.wait(1.0):
        if os.getppid() != parent:
            log.error("the sfc serve of this worker (pid %d) is gone; stopping", parent)
            stop.set()


def _stop_left_server(directory: Path, timeout: float = 10.0) -> None:
    """Stop (SIGTERM) the valkey-server a killed `sfc serve` left running on `directory`:
    the process of SERVER_PID_FILE, if it is a valkey-server working there (Linux only)."""
    try:
        pid = int((directory / SERVER_PID_FILE).read_text(encoding="utf-8"))
        comm = Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except (OSError, ValueError):
        return
    if "valkey" not in comm or cwd != directory.resolve():
        return
    log.warning(
        "the server of %s (pid %d) was left running by an sfc serve that is gone (killed, "
        "or left it to its clients after a crash loop); stopping it before a new one starts",
        directory,
        pid,
    )
    # a new server on the same files would be a second writer of the AOF; SIGTERM flushes it
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def _url_of_holder(directory: Path) -> str:
    """The URL of the server run by the serve holding `directory`'s lock, from its
    `server.json`; ServerError while it has not written its own yet."""
    holder = lock_holder(directory)
    found = read_connection(directory)
    if found is not None:
        url, writer = found
        # no pid in the lock file: a serve of an earlier version holds it
        if writer is not None and writer == (holder or writer) and _alive(writer):
            return url
    # a pid that does not run is the killed serve's, read before the holder wrote its own
    known = holder is not None and _alive(holder)
    who = f"another sfc serve (pid {holder})" if known else "another sfc serve"
    raise ServerError(
        f"{directory} is locked by {who} that is starting its server and has not written "
        f"its {CONNECTION_FILE} yet; try again in a moment to attach to it"
    )


def _alive(pid: int) -> bool:
    """Whether process `pid` runs: /proc where there is one (a zombie has ended), else
    signal 0."""
    if Path("/proc/self/stat").exists():
        return _running(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has ended: it only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def exit_words(code: int | None) -> str:
    """A process's exit code in words: `code 1`, or for a process a signal ended (a
    negative code) the signal's name, `code -9: killed by SIGKILL` (the OOM killer, or
    `kill -9`)."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"code {code}: killed by {signal.Signals(-code).name}"
    return f"code {code}"


class CrashLoop(Exception):
    """Workers, or the embedded server, kept exiting (Serving.replace_exited)."""

    def __init__(self, message: str, *, server: bool = False) -> None:
        super().__init__(message)
        self.server = server
        """True when the embedded server kept exiting (else the workers did)."""


@dataclass
class Serving:
    """The server (embedded or given) and N worker processes."""

    redis_url: str | None = None
    data_dir: Path | None = None
    fsync: Fsync = "everysec"
    workers: int = 1
    scopes: Sequence[str] | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    """Setting texts by name (`SWEEP_INTERVAL`...), passed to every worker."""
    url: str = ""
    worker_url: str = ""
    """The URL the worker processes use: the embedded server's Unix socket when this serve
    runs it (EmbeddedServer.local_url), else `url`."""
    server: EmbeddedServer | None = None
    server_dies_with_this: bool = False
    """Whether the embedded server gets SIGTERM when this process ends, even killed with
    SIGKILL (`sfc run`, which never leaves its server to others)."""
    attached: bool = False
    """True when another `sfc serve` runs the embedded server of this data directory."""
    processes: list[BaseProcess] = field(default_factory=list)
    log_format: logs.LogFormat = "text"
    metrics: MetricsServer | None = None
    """The `/metrics` endpoint (`start_metrics`), when serve runs one."""
    metrics_dir: str | None = None
    _lock: IO[str] | None = None
    _attached_mark: Path | None = None
    _watching: threading.Event | None = None
    _restarts: list[float] = field(default_factory=list)
    _server_restarts: list[float] = field(default_factory=list)
    """When workers were replaced (monotonic seconds), within RESTART_WINDOW_S."""

    def start_metrics(self, addr: str, port: int) -> int:
        """Serve `/metrics` on addr:port (0: any free port; returns the port). Made before
        the workers start: a temporary directory for the multiprocess files, set as
        PROMETHEUS_MULTIPROC_DIR so that every worker counts there."""
        self.metrics_dir = tempfile.mkdtemp(prefix="sfc-metrics-")
        os.environ[MULTIPROC_ENV] = self.metrics_dir
        from host.metrics import MetricsServer

        try:
            self.metrics = MetricsServer(
                addr,
                port,
                self.metrics_dir,
                Store.from_url(self.url),
                self.scopes,
                workers=lambda: sum(self.alive()),
            )
        except BaseException:
            self._drop_metrics_dir()
            raise
        return self.metrics.port

    def _drop_metrics_dir(self) -> None:
        if self.metrics_dir is not None:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            if os.environ.get(MULTIPROC_ENV) == self.metrics_dir:
                del os.environ[MULTIPROC_ENV]
            self.metrics_dir = None

    def start_server(self) -> str:
        """Connect to `redis_url`, or start (or attach to) the embedded server."""
        if self.redis_url:
            self.url = self.worker_url = self.redis_url
            return self.url
        directory = data_dir_of(self.data_dir)
        self._lock = lock_data_dir(directory)
        if self._lock is None:
            url = _url_of_holder(directory)
            self.url, self.worker_url, self.attached = url, url, True
            mark = directory / ATTACHED_DIR / str(os.getpid())
            with contextlib.suppress(OSError):
                mark.parent.mkdir(mode=0o700, exist_ok=True)
                mark.touch()
                self._attached_mark = mark
            self._watching = threading.Event()
            watch_server(directory, self._watching, log.name)
            return url
        _stop_left_server(directory)
        if private_dir(directory):
            log.warning(
                "%s could be read by other users; made it this user's alone (0700): it holds "
                "the server's data and password",
                directory,
            )
        # the port and password of the last run, when the port is free: instances that
        # stayed attached, and clients that read server.json before, find the server again
        port = _free_port_of(directory / PORT_FILE)
        self.server = EmbeddedServer(
            directory,
            port=port,
            fsync=self.fsync,
            password=stored_password(directory),
            die_with_parent=self.server_dies_with_this,
        ).start()
        if self.server.process is not None:
            pid_file = directory / SERVER_PID_FILE
            pid_file.write_text(f"{self.server.process.pid}\n", encoding="utf-8")
        (directory / PORT_FILE).write_text(f"{self.server.port}\n", encoding="utf-8")
        self.url = self.server.url
        self.worker_url = self.server.local_url
        write_connection_file(directory, self.url, os.getpid())
        return self.url

    def start_workers(self) -> list[str]:
        """Start the worker processes; returns their consumer names."""
        names = []
        for _ in range(self.workers):
            p, name = self._start_worker()
            self.processes.append(p)
            names.append(name)
        return names

    def _start_worker(self) -> tuple[BaseProcess, str]:
        ctx = multiprocessing.get_context("spawn")
        name = consumer_name()
        p = ctx.Process(
            target=_worker_main,
            args=(
                self.worker_url or self.url,
                None if self.scopes is None else list(self.scopes),
                dict(self.settings),
                name,
                logging.getLogger().getEffectiveLevel(),
                self.log_format,
                self.metrics_dir,
                os.getpid(),
            ),
            name=name,  # the consumer name: the one name of the worker in every line
            daemon=False,
        )
        p.start()
        return p, name

    def replace_exited(self) -> int:
        """Start a worker in the place of each that exited, logged; returns how many. Raises
        CrashLoop past RESTART_LIMIT replacements in RESTART_WINDOW_S."""
        replaced = self._restart_server_if_exited()
        for i, p in enumerate(self.processes):
            if p.is_alive():
                continue
            p.join()
            if self.metrics is not None and p.pid is not None:
                self.metrics.mark_dead(p.pid)
            now = time.monotonic()
            self._restarts = [t for t in self._restarts if t > now - RESTART_WINDOW_S] + [now]
            if len(self._restarts) > RESTART_LIMIT:
                raise CrashLoop(
                    f"worker {p.name} exited ({exit_words(p.exitcode)}), the "
                    f"{len(self._restarts)}th "
                    f"in {RESTART_WINDOW_S} s: the workers keep exiting (see the errors before "
                    "this)"
                )
            self.processes[i], name = self._start_worker()
            replaced += 1
            log.error(
                "worker %s exited (%s); started %s in its place",
                p.name,
                exit_words(p.exitcode),
                name,
                extra={"reason": f"{exit_words(p.exitcode)}; its pending entries are taken over"},
            )
        return replaced

    def _restart_server_if_exited(self) -> int:
        """Start the embedded server again, on its port and data directory, if it exited;
        returns 1 if it did. Raises CrashLoop past RESTART_LIMIT in RESTART_WINDOW_S."""
        server = self.server
        if server is None or server.process is None or server.process.poll() is None:
            return 0
        code = server.process.returncode
        now = time.monotonic()
        self._server_restarts = [t for t in self._server_restarts if t > now - RESTART_WINDOW_S] + [
            now
        ]
        if len(self._server_restarts) > RESTART_LIMIT:
            raise CrashLoop(
                f"the embedded server exited ({exit_words(code)}), the "
                f"{len(self._server_restarts)}th "
                f"time in {RESTART_WINDOW_S} s (see {server.data_dir / 'valkey.log'})",
                server=True,
            )
        log.error(
            "the embedded server (pid %d) exited (%s); starting it again on port %d",
            server.process.pid,
            exit_words(code),
            server.port,
            extra={"reason": f"{exit_words(code)}; the workers reconnect when it is back"},
        )
        try:
            server.start()
        except ServerError as e:
            raise CrashLoop(
                f"the embedded server exited ({exit_words(code)}) and did not start again: {e}",
                server=True,
            ) from None
        if server.process is not None:
            directory = server.data_dir
            (directory / SERVER_PID_FILE).write_text(f"{server.process.pid}\n", encoding="utf-8")
        log.warning("the embedded server is back on port %d", server.port)
        return 1

    def alive(self) -> list[bool]:
        return [p.is_alive() for p in self.processes]

    def stop(self, timeout: float = 15.0, crashed: CrashLoop | None = None) -> None:
        """Stop the workers (SIGTERM, then SIGKILL after `timeout`), then the server, unless the
        workers `crashed`: then the server is left to its other clients, for the next serve to
        take over. The log says which."""
        for p in self.processes:
            if p.is_alive() and p.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        for p in self.processes:
            p.join(timeout)
            if p.is_alive():
                log.error("worker %s did not stop in %s s; killing it", p.name, timeout)
                p.kill()
                p.join()
            if self.metrics is not None and p.pid is not None:
                self.metrics.mark_dead(p.pid)
        self.processes.clear()
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        self._drop_metrics_dir()
        if self.server is not None and not self._left_to_clients(crashed):
            directory = self.server.data_dir
            if crashed is None and not self.server_dies_with_this:
                self._say_who_loses_it()  # `sfc run`'s server has no other users
            self.server.stop()
            with contextlib.suppress(OSError):
                (directory / CONNECTION_FILE).unlink()
            with contextlib.suppress(OSError):
                (directory / SERVER_PID_FILE).unlink()
        self.server = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        if self._watching is not None:
            self._watching.set()
        if self._attached_mark is not None:
            with contextlib.suppress(OSError):
                self._attached_mark.unlink()

    def _say_who_loses_it(self) -> None:
        """Before this serve stops the embedded server: which other processes use it (the
        attached serves, and every connection of another process on TCP), and lose it."""
        server = self.server
        if server is None:
            return
        directory = server.data_dir
        serves = attached_serves(directory)
        connections = server.clients(settle=0.5)
        if not serves and not connections:
            return
        pids = f" (sfc serve pid {', '.join(map(str, serves))})" if serves else ""
        log.warning(
            "stopping the embedded server at %s with this serve: it stops the server that "
            "%d other sfc serve(s)%s and %d connection(s) of other processes (serves' "
            "workers, adapters) use; they wait until an sfc serve on %s runs it again",
            redacted(server.url),
            len(serves),
            pids,
            connections,
            directory,
        )

    def _left_to_clients(self, crashed: CrashLoop | None) -> bool:
        """Whether the embedded server is left running for the clients attached to it,
        after a crash loop; logs what happens to it."""
        server = self.server
        if crashed is None or server is None:
            return False
        if crashed.server:
            log.error(
                "the embedded server at %s is not started again: the instances and adapters "
                "attached to it lose it until an sfc serve on %s runs it again",
                redacted(server.url),
                server.data_dir,
            )
            return False
        attached = server.clients()
        if not attached:
            log.error(
                "stopping the embedded server at %s with serve: no other client is attached",
                redacted(server.url),
            )
            return False
        pid = server.process.pid if server.process is not None else 0
        log.error(
            "leaving the embedded server (pid %d) at %s running for the %d connection(s) of "
            "other processes attached to it (other serves, adapters), which keep it; the next "
            "sfc serve on %s takes it over (it stops this server and starts its own on the "
            "same port); a service manager that stops serve's whole control group stops it "
            "too",
            pid,
            redacted(server.url),
            attached,
            server.data_dir,
        )
        return True


def _free_port_of(path: Path) -> int | None:
    """The port a previous run wrote in `path`, if it is free now (TIME_WAIT counts as
    free: the server and the probe bind with SO_REUSEADDR)."""
    try:
        port = int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return None
    return port


__all__ = [
    "NoServer",
    "ServerError",
    "Serving",
    "StoreError",
    "connect",
    "resolve_url",
    "setup_scope",
]

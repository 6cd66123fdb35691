"""Serving the console: uvicorn in a thread of the process, on a socket bound first, so
that a port in use is known at once (`sfc serve` then goes on without the console)."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from host.console.auth import Guard
from host.settings import Settings
from host.store import Store

if TYPE_CHECKING:  # uvicorn and the app load when a console starts: every sfc command imports this
    import uvicorn
    from starlette.applications import Starlette

DEFAULT_ADDR = "127.0.0.1:8780"


class AddressError(ValueError):
    """An --http address that is not ADDR:PORT."""


def parse_addr(text: str) -> tuple[str, int]:
    """`127.0.0.1:8780`, `[::1]:8780`, `0.0.0.0:80` -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"--http {text!r}: give ADDR:PORT, such as {DEFAULT_ADDR}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ConsoleServer:
    server: uvicorn.Server
    thread: threading.Thread
    url: str
    app: Starlette

    def stop(self) -> None:
        """End the event streams first (their watchers stop), then the server."""
        console = getattr(self.app.state, "console", None)
        if console is not None:
            console.watchers.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_console(
    addr: str,
    open_store: Callable[[], Store],
    guard: Guard,
    settings: Settings | None = None,
) -> ConsoleServer:
    """Bind `addr` (OSError when it cannot), then serve the console on it in a thread."""
    host, port = parse_addr(addr)
    guard.public = guard.public or not loopback(host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: a small answer written in two parts (head, body)
    # would otherwise wait for the client's delayed ACK, 40 ms on Linux
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(False)
    port = sock.getsockname()[1]
    import uvicorn

    from host.console.app import create_app

    app = create_app(open_store, guard, settings)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="sfc-console", daemon=True
    )
    thread.start()
    shown = f"[{host}]" if ":" in host else host
    return ConsoleServer(server, thread, f"http://{shown}:{port}/", app)

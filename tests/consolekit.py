"""Helpers of the console tests: a console served on a free port of loopback against the
session's real server, and plain HTTP calls to it (the stdlib's client: no test client)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from host.console.auth import Guard
from host.console.serving import ConsoleServer, start_console
from host.store import Store
from tests.hostkit import wait_for

TOKEN = "test-token-0123456789"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Console:
    server: ConsoleServer
    guard: Guard

    @property
    def netloc(self) -> str:
        return urlsplit(self.server.url).netloc

    def call(
        self,
        method: str,
        path: str,
        doc: Any = None,
        *,
        token: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        conn = http.client.HTTPConnection(self.netloc, timeout=30)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else None if doc is None else json.dumps(doc).encode()
        if data is not None:
            sent["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=sent)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def get(self, path: str, **kw: Any) -> Reply:
        return self.call("GET", path, **kw)

    def post(self, path: str, doc: Any = None, **kw: Any) -> Reply:
        return self.call("POST", path, doc, **kw)


@contextmanager
def console(
    url: str, *, allow_control: bool = True, addr: str = "127.0.0.1:0", private: bool = False
) -> Iterator[Console]:
    guard = Guard(TOKEN, allow_control=allow_control, public=private)
    server = start_console(addr, lambda: Store.from_url(url), guard)
    c = Console(server, guard)
    try:
        wait_for(lambda: _answers(c), timeout=20, what="the console to serve")
        yield c
    finally:
        server.stop()


def _answers(c: Console) -> bool:
    try:
        with socket.create_connection(tuple(c.netloc.rsplit(":", 1)), timeout=1):  # type: ignore[arg-type]
            pass
    except OSError:
        time.sleep(0.02)
        return False
    return bool(c.server.server.started)


class Events:
    """A server-sent event stream read line by line, each read with a deadline."""

    def __init__(self, c: Console, path: str, headers: dict[str, str] | None = None) -> None:
        self.conn = http.client.HTTPConnection(c.netloc, timeout=10)
        self.conn.request("GET", path, headers=headers or {})
        self.response = self.conn.getresponse()

    def next_event(self, timeout: float) -> tuple[str, Any]:
        """The next event's name and data; AssertionError when none comes in `timeout` s."""
        deadline = time.monotonic() + timeout
        name, data = "message", ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no event within {timeout} s")
            sock = self.response.fp.raw._sock  # type: ignore[union-attr]
            sock.settimeout(left)
            try:
                line = self.response.fp.readline().decode()
            except TimeoutError:
                raise AssertionError(f"no event within {timeout} s") from None
            if line in ("\n", "\r\n", ""):
                if data:
                    return name, json.loads(data)
                if line == "":
                    raise AssertionError("the stream ended")
                continue
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()

    def close(self) -> None:
        self.conn.close()

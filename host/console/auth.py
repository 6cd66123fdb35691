"""Who may do what on the console and the HTTP API (docs/console.md, "Security").

- Reading needs nothing on loopback; beyond loopback every request needs the token.
- Every write needs the token and `--allow-control`: as `Authorization: Bearer TOKEN`, or
  from a browser as the session cookie that `POST /api/v1/session` sets for the token
  (HttpOnly, SameSite=Strict) together with the header `X-SFC-Console: 1`. A page of
  another site can send neither that header (it would need CORS, which is never granted)
  nor the cookie (SameSite=Strict): no cross-site request writes.
- The token is compared in constant time, never written to a URL or a log line.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

SESSION_COOKIE = "sfc_session"
CSRF_HEADER = "x-sfc-console"
TOKEN_FILE = "http-token"
SESSIONS_MAX = 1000
"""The most sessions kept; the oldest goes first."""


def token_file(path: Path) -> str:
    """The token in `path`, written there first (mode 0600) when the file does not exist."""
    try:
        text = path.read_text().strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    return token


@dataclass
class Guard:
    """The token, and the sessions opened with it."""

    token: str | None
    allow_control: bool = False
    public: bool = False
    """Bound beyond loopback, or asked (`--http-private`): every request needs the token."""
    sessions: dict[str, None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def right(self, given: str | None) -> bool:
        if self.token is None or not given:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def open_session(self) -> str:
        sid = secrets.token_urlsafe(32)
        with self.lock:
            self.sessions[sid] = None
            while len(self.sessions) > SESSIONS_MAX:
                del self.sessions[next(iter(self.sessions))]
        return sid

    def close_session(self, sid: str | None) -> None:
        with self.lock:
            self.sessions.pop(sid or "", None)

    def in_session(self, sid: str | None) -> bool:
        with self.lock:
            return bool(sid) and sid in self.sessions

    def bearer(self, authorization: str | None) -> str | None:
        if authorization is None:
            return None
        kind, _, value = authorization.partition(" ")
        return value.strip() if kind.lower() == "bearer" else None

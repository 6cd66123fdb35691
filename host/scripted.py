"""Scripted equipment on the real equipment stream (`sfc equipment --script`).

The dry run's script (examples/README.md, "The script") on wall-clock time: it reads
`sfc:equipment:{scope}` with a consumer group of its own and answers as the simulation's
equipment does, so that a job run through the host with a script ends as its dry run ends.

- The n-th time it is asked about an action of a job it gives the n-th reply of
  `replies[NAME]` (`NAME:hold`, `NAME:restart` for hold and restart), then `default`.
  The choice is the simulation's own (`sfc.simulation.choose_reply`), and so is the parsing
  (`parse_reply`). Counting is per job: each job's equipment is asked afresh, as in its own
  dry run.
- It is asked once per command id: a command delivered twice is answered once.
- A reply `outcome[@delayMs]` or `error[:text][@delayMs]` is sent `delayMs` (times
  `time_scale`) after the command was issued (the millisecond of its entry id), through the
  same encoding as `respond`: with the command id and the round it received. `silent` sends
  nothing.
- A wait (`await` notice) is answered by an event of the awaited type with the selector's
  subject and correlation id, the reply's outcome (`error` for an error reply, as in the
  simulation), source `sfc-equipment` and the await's command id as the event id, so that a
  second copy completes nothing.
- A command or wait read past its `expiresAt` is dropped, unasked (the adapter contract,
  docs/host.md "The equipment stream"). A scheduled answer is still sent when it falls past
  `expiresAt`, and a `withdraw` notice cancels nothing: in the dry run too a withdrawn
  attempt's late answer arrives (and the core absorbs it). A withdraw whose reason says
  stop the work (`limit`, `reset`, `deactivated`, `ended`: an action other than N, that
  became inactive) stops it: its scheduled answer is dropped, never sent.
- The script's `events` and `controls` belong to the virtual clock; the host has real event
  sources and operators, so a script with either is refused (`host_script_problem`).

Answers are kept in memory until they are due, and an entry is acknowledged when its
answer is sent (or at once when it gets none). A scripted equipment that stops, or dies,
with answers scheduled reads its own unacknowledged entries again when it starts (the same
group and consumer): it answers them then, when they are due, or at once when they fell due
while it was away. An answer sent just before a death is sent twice; the core absorbs the
copy.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from msgspec import UNSET

from generated.equipment_entry_v1_0 import AwaitData, CommandData, WithdrawData
from generated.simulation_script_v1_0 import SimulationScript
from host import keys
from host.entries import Entry, EntryError, decode_equipment, encode, fields
from host.equipment import answer_data, event_data
from host.keys import EVENTS_UNMATCHED
from host.reconnect import Reconnect, pump_until_stopped
from host.store import Store
from sfc.evolution import STOP_REASONS
from sfc.simulation import (
    Reply,
    ScriptError,
    choose_reply,
    load_script,
    parse_reply,
    reply_key,
)

log = logging.getLogger("sfc.host.scripted")

SOURCE = "sfc-equipment"
"""The CloudEvents source of the events the scripted equipment sends for a wait."""
DEFAULT_GROUP = "sfc-equipment"

CLOCK_ITEMS_MESSAGE = (
    "{what} belong to the dry run's virtual clock; the host has real event sources and "
    "operators: publish events with `sfc event` and control jobs with "
    "`sfc job pause|resume|stop|abort`"
)


def host_script_problem(script: SimulationScript) -> ScriptError | None:
    """Why `script` cannot run on the host (it has `events` or `controls`), or None."""
    for path, items, what in (
        ("$.events", script.events, "script events"),
        ("$.controls", script.controls, "script controls (hold, release, cancel, outage)"),
    ):
        if items is not UNSET and items:
            return ScriptError(path, CLOCK_ITEMS_MESSAGE.format(what=what))
    return None


def load_host_script(data: bytes) -> SimulationScript:
    """Decode and check a script for the host: `load_script`, then refuse `events` and
    `controls` (ScriptError, with the path and what to use instead)."""
    script = load_script(data)
    problem = host_script_problem(script)
    if problem is not None:
        raise problem
    return script


@dataclass(frozen=True, slots=True)
class _Due:
    """An answer to send: a work entry (`answer`) or an event (`event`)."""

    command_id: str
    answer: dict[str, bytes] | None = None
    event: tuple[str, bytes] | None = None
    entry_id: str = ""
    """The equipment entry it answers: acknowledged once the answer is sent."""


@dataclass(slots=True)
class Counters:
    read: int = 0
    """Entries read from the stream."""
    asked: int = 0
    """Command ids asked for the first time (push, hold, restart and await)."""
    answered: int = 0
    """Answers (work entries) sent."""
    events_published: int = 0
    """Events queued for a wait."""
    events_unmatched: int = 0
    """Events dropped by the server because no job waited for the type any more."""
    silent: int = 0
    duplicates: int = 0
    """Command ids delivered again, and not answered again."""
    dropped_expired: int = 0
    """Commands and waits read past their `expiresAt`, dropped unasked."""
    withdrawn: int = 0
    """Withdraw notices read."""
    stopped: int = 0
    """Scheduled answers dropped because a withdraw said to stop the work."""
    skipped: int = 0
    """Entries that did not decode."""


FORGET_EVERY = 1024
"""Every how many commands asked about the script's equipment forgets what expired."""
ASKED_RETENTION_MS = 24 * 3600 * 1000
"""How long past its last command's expiresAt a job's reply counts are kept: a job that
asks again later (a loop) starts its replies again from the script's first."""


@dataclass
class ScriptAnswers:
    """What the script's equipment remembers and how it chooses, for the scripted equipment
    and the MQTT device alike (`ask`)."""

    script: SimulationScript
    counters: Counters = field(default_factory=Counters)
    _seen: dict[str, int] = field(default_factory=dict, repr=False)
    """Command ids asked about, with their expiresAt: past it, a copy is dropped as expired
    anyway, so the id is forgotten (`_forget`), and a long run does not grow."""
    _asked: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict, repr=False)
    """(job, script key) -> (times asked, the last command's expiresAt): forgotten
    ASKED_RETENTION_MS after that, for a job long gone."""
    _asks: int = field(default=0, repr=False)

    def known(self, command_id: str) -> bool:
        """Whether `command_id` was asked about (or seen) before, and has not expired."""
        return command_id in self._seen

    def ask(self, kind: str, data: CommandData | AwaitData, now_ms: float) -> Reply | None:
        """The script's reply to this command or wait (counted per job and script key), or
        None: a duplicate, read past its `expiresAt`, or silent."""
        if data.command_id in self._seen:
            self.counters.duplicates += 1
            return None
        self._asks += 1
        if self._asks % FORGET_EVERY == 0:
            self._forget(now_ms)
        if now_ms > data.expires_at:
            self.counters.dropped_expired += 1
            return None
        self._seen[data.command_id] = data.expires_at
        key = reply_key(data.action_key, kind)
        n = self._asked.get((data.job, key), (0, 0))[0]
        self._asked[(data.job, key)] = (n + 1, data.expires_at)
        self.counters.asked += 1
        text = choose_reply(self.script, key, n)
        try:
            reply = parse_reply(text)
        except ValueError as e:  # pragma: no cover - load_script checked every reply
            log.warning("%s: %s", data.command_id, e)
            return None
        if reply.kind == "silent":
            self.counters.silent += 1
            return None
        return reply

    def _forget(self, now_ms: float) -> None:
        """Forget the command ids past their expiresAt, and the counts of jobs asked nothing
        for ASKED_RETENTION_MS past their last command's."""
        self._seen = {c: at for c, at in self._seen.items() if at >= now_ms}
        old = now_ms - ASKED_RETENTION_MS
        self._asked = {k: v for k, v in self._asked.items() if v[1] >= old}


@dataclass
class ScriptedEquipment:
    """The script's equipment for every job of `scope`, on wall-clock `clock`; `time_scale`
    multiplies every scripted delay (not the recipe's deadlines)."""

    store: Store
    scope: str
    script: SimulationScript
    group: str = DEFAULT_GROUP
    consumer: str = "sfc-equipment-1"
    time_scale: float = 1.0
    clock: Callable[[], float] = time.time
    counters: Counters = field(default_factory=Counters)
    _answers: ScriptAnswers = field(init=False, repr=False)
    _due: list[tuple[float, int, _Due]] = field(default_factory=list, repr=False)
    _order: int = field(default=0, repr=False)
    _own_read: bool = field(default=False, repr=False)
    """Whether its own unacknowledged entries (of a run before) were read again."""

    def __post_init__(self) -> None:
        keys.check_scope(self.scope)
        problem = host_script_problem(self.script)
        if problem is not None:
            raise problem
        if not self.time_scale >= 0:
            raise ValueError(f"time_scale must be 0 or more, not {self.time_scale}")
        self._answers = ScriptAnswers(self.script, self.counters)
        self.store.equipment_group(self.scope, self.group)

    # -- the loop

    def now_ms(self) -> float:
        return self.clock() * 1000

    @property
    def pending(self) -> int:
        """Answers scheduled and not yet sent."""
        return len(self._due)

    def next_due_ms(self) -> float | None:
        """When the next scheduled answer is due (epoch ms), or None."""
        return self._due[0][0] if self._due else None

    def pump(self, block_ms: int | None = None, count: int = 500) -> int:
        """Read what has come (blocking at most `block_ms`, and not past the next due
        answer), schedule its answers, and send every answer that is due. Returns the
        entries read plus the answers and events sent: 0 when nothing happened."""
        block = block_ms
        due = self.next_due_ms()
        if due is not None and block is not None:
            wait = int(due - self.now_ms())
            block = min(block, wait) if wait > 0 else None
        if block is not None and block <= 0:
            block = None  # XREADGROUP BLOCK 0 would wait for ever
        rows: list[tuple[str, dict[bytes, bytes]]] = []
        if not self._own_read:  # what a run before read and did not answer
            rows = self.store.read_equipment(
                self.scope, self.group, self.consumer, count, None, own=True
            )
            self._own_read = len(rows) < count
            if rows:
                log.warning(
                    "equipment of scope %s: %d entries read before and not answered: "
                    "answering them now",
                    self.scope,
                    len(rows),
                )
        if not rows:
            rows = self.store.read_equipment(self.scope, self.group, self.consumer, count, block)
        done: list[str] = []  # entries that get no answer: acknowledged now
        for entry_id, raw in rows:
            if not raw:  # deleted while pending (trimmed): nothing to answer
                done.append(entry_id)
                continue
            try:
                entry = decode_equipment(entry_id, raw)
            except EntryError as e:
                self.counters.skipped += 1
                log.warning("equipment entry %s of %s skipped: %s", entry_id, self.scope, e)
                done.append(entry_id)
                continue
            if isinstance(entry.data, WithdrawData) and entry.data.reason in STOP_REASONS:
                done.extend(self._stop(entry.data.command_id))
            if not self._receive(entry):
                done.append(entry_id)
        self.counters.read += len(rows)
        if done:
            self.store.ack_equipment(self.scope, self.group, done)
        return len(rows) + self._send_due()

    def run(self, stop: threading.Event, block_ms: int = 100) -> None:
        """Pump until `stop` is set, waiting out a server that cannot be reached
        (host/reconnect.py); answers that fell due meanwhile are sent once it is back."""
        reconnect = Reconnect(f"equipment of scope {self.scope}", log)
        pump_until_stopped(lambda: self.pump(block_ms), stop, self.store, self.scope, reconnect)

    # -- asking the script

    def _receive(self, entry: Entry) -> bool:
        """Schedule the entry's answer; False when it gets none."""
        data = entry.data
        if isinstance(data, WithdrawData):
            self.counters.withdrawn += 1
            return False
        if not isinstance(data, CommandData | AwaitData):
            return False  # pragma: no cover - every other kind is one of the two
        reply = self._answers.ask(entry.kind, data, self.now_ms())
        if reply is None:
            return False
        if isinstance(data, AwaitData):
            selector = data.selector
            ev = event_data(
                data.type_id,
                subject=None if selector is None else selector.subject,
                correlation_id=None if selector is None else selector.correlation_id,
                outcome=reply.outcome or "error",
                source=SOURCE,
                id=data.command_id,
            )
            item = _Due(data.command_id, event=(data.type_id, encode(ev)), entry_id=entry.id)
        else:
            answer = answer_data(
                data.job,
                data.action_key,
                outcome=reply.outcome if reply.kind == "outcome" else None,
                # a bare `error` is an empty text: the core reads a missing one as ""
                error=(reply.error or "") if reply.kind == "error" else None,
                command_id=data.command_id,
                round=data.round,
            )
            item = _Due(data.command_id, answer=fields("answer", answer), entry_id=entry.id)
        at = entry.ms + reply.delay_ms * self.time_scale
        heapq.heappush(self._due, (at, self._order, item))
        self._order += 1
        return True

    def _stop(self, command_id: str) -> list[str]:
        """Drop the scheduled answer of a work that was withdrawn to stop; the entries it
        would have acknowledged."""
        kept = [d for d in self._due if d[2].command_id != command_id]
        if len(kept) == len(self._due):
            return []
        stopped = [d[2].entry_id for d in self._due if d[2].command_id == command_id]
        self._due = kept
        heapq.heapify(self._due)
        self.counters.stopped += len(stopped)
        log.info("equipment of scope %s: %s stopped, not answered", self.scope, command_id)
        return [e for e in stopped if e]

    def _send_due(self) -> int:
        now = self.now_ms()
        items: list[_Due] = []
        while self._due and self._due[0][0] <= now:
            items.append(heapq.heappop(self._due)[2])
        if not items:
            return 0
        answers = [i.answer for i in items if i.answer is not None]
        events = [i.event for i in items if i.event is not None]
        try:
            _, published = self.store.send_replies(self.scope, answers, events, EVENTS_UNMATCHED)
        except BaseException:
            # not sent (or not known to be): due again, at once (a second answer to a command
            # is absorbed by the job, a second event's source/id is a duplicate)
            for item in items:
                heapq.heappush(self._due, (now, self._order, item))
                self._order += 1
            raise
        # sent: their entries are acknowledged (a death before this sends them again)
        self.store.ack_equipment(self.scope, self.group, [i.entry_id for i in items if i.entry_id])
        self.counters.answered += len(answers)
        self.counters.events_published += sum(p is not None for p in published)
        self.counters.events_unmatched += sum(p is None for p in published)
        return len(items)

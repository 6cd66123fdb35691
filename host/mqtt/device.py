"""Equipment on MQTT that answers commands and waits from a dry-run script (docs/mqtt.md,
"The device")."""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from generated.equipment_entry_v1_0 import AwaitData, CommandData
from generated.simulation_script_v1_0 import SimulationScript
from host.mqtt.cloudevents import (
    CloudEvent,
    Message,
    MessageError,
    Received,
    binary_message,
    command_of,
    reply_event,
    wait_event,
)
from host.mqtt.connection import Connection
from host.mqtt.topics import BrokerURL, Topics
from host.scripted import ASKED_RETENTION_MS, FORGET_EVERY, ScriptAnswers, host_script_problem
from host.scripted import Counters as ScriptCounters
from sfc.evolution import STOP_REASONS
from sfc.simulation import Reply

log = logging.getLogger("sfc.host.mqtt")


SEEN_IDS = 10_000
"""How many of the command ids it received the MQTT device lists (`seen_ids`)."""


@dataclass(slots=True)
class DeviceCounters:
    received: int = 0
    """Commands and awaits received (copies included)."""
    answered: int = 0
    """Responses and events sent."""
    not_held: int = 0
    """Holds of work the device did not know, answered notHeld."""
    refused: int = 0
    stopped: int = 0
    """Scheduled responses dropped: a withdraw said to stop the work (limit, reset,
    deactivated, ended)."""


@dataclass
class MqttDevice:
    """Equipment on MQTT that answers from a dry-run script (docs/mqtt.md, "The device"):
    the script is asked once per command id, and the reply sent after its delay times
    `time_scale`. `seen_ids` lists the last SEEN_IDS command ids received, copies included."""

    broker: BrokerURL
    topics: Topics
    script: SimulationScript
    time_scale: float = 1.0
    client_id: str = "sfc-device-1"
    clock: Callable[[], float] = time.time
    counters: DeviceCounters = field(default_factory=DeviceCounters)
    script_counters: ScriptCounters = field(default_factory=ScriptCounters)
    seen_ids: deque[str] = field(default_factory=lambda: deque(maxlen=SEEN_IDS))
    _answers: ScriptAnswers = field(init=False, repr=False)
    _inbox: queue.SimpleQueue[Received] = field(default_factory=queue.SimpleQueue, repr=False)
    _due: list[tuple[float, int, Message]] = field(default_factory=list, repr=False)
    _order: int = field(default=0, repr=False)
    _not_held: dict[str, int] = field(default_factory=dict, repr=False)
    """Hold command ids answered notHeld -> their expiresAt."""
    _work: dict[str, int] = field(default_factory=dict, repr=False)
    """Action key -> the latest expiresAt of the work received for it. Both are forgotten
    a day past that (`_forget`, every FORGET_EVERY commands), so a long run does not grow."""
    _received: int = field(default=0, repr=False)
    _conn: Connection = field(init=False, repr=False)

    def __post_init__(self) -> None:
        problem = host_script_problem(self.script)
        if problem is not None:
            raise problem
        self._answers = ScriptAnswers(self.script, self.script_counters)
        subs = [self.topics.commands_filter, self.topics.notices_filter]
        self._conn = Connection(self.broker, self.client_id, subs, self._receive, manual_ack=False)

    def _forget(self, now_ms: float) -> None:
        """Forget the work and the notHeld holds a day past their expiresAt
        (ASKED_RETENTION_MS, as the script's answers forget a job's counts)."""
        old = now_ms - ASKED_RETENTION_MS
        self._work = {k: at for k, at in self._work.items() if at >= old}
        self._not_held = {k: at for k, at in self._not_held.items() if at >= old}

    def start(self, timeout: float = 10.0, stop: threading.Event | None = None) -> MqttDevice:
        """Connect and subscribe, waiting at most `timeout` s (it keeps trying after), or
        until `stop` is set."""
        self._conn.start()
        if not self._conn.wait_ready(timeout, stop) and not (stop and stop.is_set()):
            log.warning("not connected to %s yet; retrying", self.broker.redacted())
        return self

    def close(self) -> None:
        self._conn.close()

    @property
    def ready(self) -> bool:
        return self._conn.subscribed.is_set()

    def _receive(self, msg: Received) -> bool:
        self._inbox.put(msg)
        return True

    def pump(self, block_s: float = 0.05) -> int:
        """Ask the script about what came and send what is due; the items handled."""
        handled = 0
        due = self._due[0][0] if self._due else None
        wait = block_s if due is None else max(0.0, min(block_s, due / 1000 - self.clock()))
        try:
            first: Received | None = self._inbox.get(timeout=wait) if wait > 0 else None
        except queue.Empty:
            first = None
        batch = [] if first is None else [first]
        while True:
            try:
                batch.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for msg in batch:
            self._ask(msg)
            handled += 1
        now = self.clock() * 1000
        while self._due and self._due[0][0] <= now:
            message = heapq.heappop(self._due)[2]
            if self._conn.publish(message) is not None:
                self.counters.answered += 1
            handled += 1
        return handled

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.pump()
        finally:
            self.close()

    def _ask(self, msg: Received) -> None:
        try:
            event = msg.cloudevent()
            if event.get("sfckind") == "withdraw":
                self._withdraw(msg, event)
                return
            kind, data = command_of(event)
        except MessageError as e:
            self.counters.refused += 1
            log.warning("the device refused a message on %s: %s", msg.topic, e)
            return
        self.counters.received += 1
        self.seen_ids.append(data.command_id)
        self._received += 1
        if self._received % FORGET_EVERY == 0:
            self._forget(self.clock() * 1000)
        sent_ms = _time_ms(event.get("time")) or self.clock() * 1000
        if kind in ("push", "restart"):
            self._work[data.action_key] = max(self._work.get(data.action_key, 0), data.expires_at)
        if kind == "hold" and isinstance(data, CommandData):
            if data.command_id in self._not_held:
                return  # a copy of a hold answered already
            if data.action_key not in self._work and not self._answers.known(data.command_id):
                # the hold overtook its work: it could not be held; the work runs on
                self._not_held[data.command_id] = data.expires_at
                self.counters.not_held += 1
                self._schedule(sent_ms, msg, event, data.command_id, None, not_held=True)
                return
        reply = self._answers.ask(kind, data, self.clock() * 1000)
        if reply is None:
            return
        at = sent_ms + reply.delay_ms * self.time_scale
        if isinstance(data, AwaitData):
            message = binary_message(self.topics.event(data.type_id), wait_event(data, reply))
            self._push(at, message)
        else:
            self._schedule(at, msg, event, data.command_id, reply)

    def _withdraw(self, msg: Received, event: CloudEvent) -> None:
        """A withdraw that says stop the work drops the work's scheduled response."""
        try:
            reason = msgspec.json.decode(event.data).get("reason")
        except (msgspec.DecodeError, AttributeError):
            return
        if reason not in STOP_REASONS:
            return  # an attempt that no longer counts: its answer is absorbed
        command_id = event.get("sfccommandid") or (msg.correlation_data or b"").decode()
        wanted = command_id.encode()
        kept = [d for d in self._due if d[2].correlation_data != wanted]
        if len(kept) != len(self._due):
            self.counters.stopped += len(self._due) - len(kept)
            self._due = kept
            heapq.heapify(self._due)
            log.info("the device stopped %s (%s), not answered", command_id, reason)

    def _schedule(
        self,
        at: float,
        msg: Received,
        event: CloudEvent,
        command_id: str,
        reply: Reply | None,
        *,
        not_held: bool = False,
    ) -> None:
        topic = msg.response_topic or self.topics.responses
        response = reply_event(event, command_id, reply, not_held=not_held)
        correlation = msg.correlation_data or command_id.encode()
        self._push(at, binary_message(topic, response, correlation_data=correlation))

    def _push(self, at: float, message: Message) -> None:
        heapq.heappush(self._due, (at, self._order, message))
        self._order += 1


def _time_ms(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
    except ValueError:
        return None

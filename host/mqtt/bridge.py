"""The MQTT bridge of one scope (docs/mqtt.md): an adapter of the equipment stream that
publishes commands and notices as CloudEvents and writes responses and events back."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from generated.equipment_entry_v1_0 import AwaitData, CommandData, WithdrawData
from host import keys
from host.cluster import moving_reason
from host.entries import Entry, EntryError, decode_equipment, encode, fields
from host.keys import EVENTS_UNMATCHED
from host.mqtt.cloudevents import (
    Message,
    MessageError,
    Received,
    command_message,
    event_of,
    notice_message,
    response_answer,
    rfc3339,
)
from host.mqtt.connection import Connection
from host.mqtt.lease import LEASE_TTL_MS, ClientIdTaken, ClientLease
from host.mqtt.topics import (
    CLIENT_ID_LIMIT,
    DEFAULT_GROUP,
    BrokerURL,
    Topics,
    check_group,
    share_name,
    shared,
    topic_problem,
)
from host.reconnect import Reconnect, pump_until_stopped
from host.store import (
    Store,
    slot_moved,
    slot_moving,
    slot_of,
    unreachable,
    unreachable_reason,
)

log = logging.getLogger("sfc.host.mqtt")

DEFAULT_CLAIM_IDLE_MS = 30_000
EXPIRED_SUMMARY_S = 10.0
"""Commands read past their expiresAt are logged in one line once the bridge has caught up
with the stream, or after this long at most."""


@dataclass(slots=True)
class ExpiredSummary:
    """The commands and notices read past their expiresAt since the last line saying so."""

    since: float
    """When the first of them was read (monotonic)."""
    kinds: Counter[str] = field(default_factory=Counter)
    first: str = ""
    last: str = ""
    earliest: int = 0
    latest: int = 0

    def add(self, kind: str, command_id: str, expires_at: int) -> None:
        if not self.kinds:
            self.first, self.earliest, self.latest = command_id, expires_at, expires_at
        self.kinds[kind] += 1
        self.last = command_id
        self.earliest = min(self.earliest, expires_at)
        self.latest = max(self.latest, expires_at)

    def line(self, scope: str) -> str:
        n = self.kinds.total()
        if n == 1:
            ((kind, _),) = self.kinds.items()
            return f"{kind} {self.first} is past its expiresAt: not sent"
        kinds = ", ".join(f"{k} {c}" for k, c in sorted(self.kinds.items()))
        return (
            f"{n} entries of {scope} past their expiresAt were not sent ({kinds}): from "
            f"{self.first} to {self.last}, expired {rfc3339(self.earliest)} to "
            f"{rfc3339(self.latest)}"
        )


@dataclass(slots=True)
class BridgeCounters:
    read: int = 0
    """Equipment entries read (new or claimed)."""
    claimed: int = 0
    """Entries claimed from another consumer of the group (XAUTOCLAIM)."""
    published: int = 0
    """Commands and notices the broker acknowledged."""
    expired: int = 0
    """Commands and waits read past their `expiresAt`: not sent."""
    unacked: int = 0
    """Publishes the broker did not acknowledge in time (the entry stays pending)."""
    skipped: int = 0
    """Entries that did not decode, or whose topic cannot be published to."""
    responses: int = 0
    """Responses written as answers."""
    events: int = 0
    """Events queued for a wait."""
    events_unmatched: int = 0
    """Events no job waited for (dropped and counted by the server)."""
    refused: int = 0
    """Incoming messages that were not a usable CloudEvent."""


@dataclass
class MqttBridge:
    """The MQTT bridge of one scope (docs/mqtt.md): `pump` does one round of the outgoing
    side, the incoming side runs on the MQTT network thread, `run(stop)` pumps until `stop`.
    A `client_id` given is held through a ClientLease, one bridge at a time."""

    store: Store
    broker: BrokerURL
    topics: Topics
    group: str = DEFAULT_GROUP
    consumer: str = "sfc-mqtt-1"
    claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS
    claim_interval_ms: int = 1000
    count: int = 100
    ack_timeout_s: float = 10.0
    notices: bool = True
    client_id: str = ""
    """The MQTT client id; empty: `sfc-bridge-{consumer}`, a new one each start."""
    session_expiry_s: int = 0
    """How long the broker keeps the session while the bridge is away (0: a clean session
    each start, and what comes meanwhile is not kept for it)."""
    lease_ttl_ms: int = LEASE_TTL_MS
    counters: BridgeCounters = field(default_factory=BridgeCounters)
    _conn: Connection = field(init=False, repr=False)
    _client_id_hold: ClientLease | None = field(default=None, repr=False)
    """The hold on a client id that was given (None: one of its own, new each start)."""
    _unwritten: list[tuple[int, Received]] = field(default_factory=list, repr=False)
    """Responses and events that could not be written (the server unreachable), with the
    connection they came on: held, not acknowledged, and written by `pump` once the server
    is back (within one connection a broker never gives a message again)."""
    _unwritten_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _draining: bool = field(default=False, repr=False)
    """`pump` is writing held messages: one that comes meanwhile is held behind them."""
    _next_claim: float = field(default=0.0, repr=False)
    _expired: ExpiredSummary | None = field(default=None, repr=False)
    """What was read past its expiresAt and not logged yet."""
    _claim_from: str = field(default="0-0", repr=False)
    """Where the next XAUTOCLAIM scan goes on ("0-0": from the start)."""

    def __post_init__(self) -> None:
        keys.check_scope(self.topics.scope)
        check_group(self.group)
        # a share name of its own for each filter: rumqttd keys a shared subscription by
        # its name alone, and loses messages when one name has two filters
        subs = [
            shared(
                share_name(self.group, "responses", self.topics.responses), self.topics.responses
            ),
            shared(share_name(self.group, "events", self.topics.events), self.topics.events),
        ]
        if self.session_expiry_s and not self.client_id:
            raise ValueError("a session the broker keeps needs a client id of its own")
        if self.client_id:
            keys.check_name(self.client_id, "client id", CLIENT_ID_LIMIT)
            self._client_id_hold = ClientLease(
                self.store, self.client_id, self.consumer, self.lease_ttl_ms
            )
        self.client_id = self.client_id or f"sfc-bridge-{self.consumer}"
        self.store.equipment_group(self.topics.scope, self.group)
        self._conn = Connection(
            self.broker,
            self.client_id,
            subs,
            self._incoming,
            clean_start=not self.session_expiry_s,
            session_expiry_s=self.session_expiry_s,
        )

    @property
    def scope(self) -> str:
        return self.topics.scope

    def start(self, timeout: float = 10.0, stop: threading.Event | None = None) -> MqttBridge:
        """Take the client id's lease (a kept session), then connect and subscribe, waiting
        at most `timeout` s (it keeps trying after) and no longer once `stop` is set."""
        if self._client_id_hold is not None:
            if not self._client_id_hold.take(stop):
                return self
            self._client_id_hold.keep(self._conn.suspend, self._conn.resume)
        self._conn.start()
        if not self._conn.wait_ready(timeout, stop) and not (stop and stop.is_set()):
            log.warning("not connected to %s yet; retrying", self.broker.redacted())
        return self

    def close(self) -> None:
        self._log_expired()
        if self._client_id_hold is not None:
            self._client_id_hold.stop()  # no fence or unfence after this
        self._conn.close()
        if self._client_id_hold is not None:
            self._client_id_hold.release()

    def _still_held(self) -> None:
        """ClientIdTaken when this bridge no longer holds its client id's session."""
        if self._client_id_hold is not None and self._client_id_hold.lost is not None:
            raise self._client_id_hold.lost
        if self._conn.taken_over:
            raise ClientIdTaken(f"{self._conn.taken_over}; give each bridge its own --client-id")

    @property
    def ready(self) -> bool:
        return self._conn.subscribed.is_set()

    # -- outgoing

    def pump(self, block_ms: int | None = 100) -> int:
        """Claim what other consumers left pending too long, read new entries, publish
        them and acknowledge what the broker took. Returns the entries handled."""
        self._still_held()
        if not self._conn.subscribed.wait((block_ms or 0) / 1000):
            return 0  # no command goes out before the responses can come back
        rows: list[tuple[str, dict[bytes, bytes]]] = []
        now = time.monotonic()
        if now >= self._next_claim:
            self._next_claim = now + self.claim_interval_ms / 1000
            self._claim_from, claimed = self.store.autoclaim_equipment(
                self.scope,
                self.group,
                self.consumer,
                self.claim_idle_ms,
                self.count,
                self._claim_from,
            )
            self.counters.claimed += len(claimed)
            rows += claimed
        if not rows:
            rows = self.store.read_equipment(
                self.scope, self.group, self.consumer, self.count, block_ms or None
            )
        if self._unwritten:  # the server answers again: write what it missed, then ack it
            self._write_held()
        if not rows:
            self._log_expired()
            return 0
        self.counters.read += len(rows)
        now_ms = self.store.time_ms()
        done: list[str] = []
        sent: dict[int, str] = {}
        for entry_id, raw in rows:
            message = self._message(entry_id, raw, now_ms)
            if message is None:
                done.append(entry_id)
                continue
            try:
                mid = self._conn.publish(message)
            except ValueError as e:  # paho refused the message itself: it never will take it
                self.counters.skipped += 1
                log.warning("equipment entry %s of %s not sent: %s", entry_id, self.scope, e)
                done.append(entry_id)
                continue
            if mid is None:
                self.counters.unacked += 1
                continue
            sent[mid] = entry_id
        acked = self._conn.wait_acked(list(sent), self.ack_timeout_s) if sent else set()
        self.counters.published += len(acked)
        self.counters.unacked += len(sent) - len(acked)
        done += [sent[m] for m in acked]
        self.store.ack_equipment(self.scope, self.group, done)
        if len(rows) < self.count or (
            self._expired and time.monotonic() - self._expired.since >= EXPIRED_SUMMARY_S
        ):
            self._log_expired()  # caught up with the stream, or a long backlog
        return len(rows)

    def _log_expired(self) -> None:
        """Log what was read past its expiresAt since the last time, in one line."""
        if self._expired is not None:
            log.info("%s", self._expired.line(self.scope))
            self._expired = None

    def _message(self, entry_id: str, raw: Mapping[bytes, bytes], now_ms: int) -> Message | None:
        try:
            entry: Entry = decode_equipment(entry_id, raw)
        except EntryError as e:
            self.counters.skipped += 1
            log.warning("equipment entry %s of %s skipped: %s", entry_id, self.scope, e)
            return None
        data = entry.data
        if isinstance(data, CommandData):
            message = command_message(self.topics, entry.kind, data, entry.ms, now_ms)
        elif self.notices and isinstance(data, AwaitData | WithdrawData):
            message = notice_message(self.topics, entry.kind, data, entry.ms, now_ms)
        else:
            return None
        if message is None:
            self.counters.expired += 1
            if self._expired is None:
                self._expired = ExpiredSummary(time.monotonic())
            expires_at = data.expires_at if isinstance(data, CommandData | AwaitData) else 0
            self._expired.add(entry.kind, data.command_id, expires_at)
            return None
        # a notice's topic too: it holds the same type id as its work (a wildcard in it
        # made paho raise, and every bridge of the group died on the entry in turn)
        problem = topic_problem(message.topic)
        if problem is not None:
            self.counters.skipped += 1
            log.warning("%s not sent: %s", data.command_id, problem)
            return None
        return message

    def run(self, stop: threading.Event, block_ms: int = 100) -> None:
        """Pump until `stop` is set, riding out a server that cannot be reached, then close."""
        try:
            self.pump_until_stopped(stop, block_ms)
        finally:
            self.close()

    def pump_until_stopped(self, stop: threading.Event, block_ms: int = 100) -> None:
        """The bridge's reconnect loop: pump until `stop`, waiting out a server that cannot
        be reached (host/reconnect.py); a slot's move is said once at info until a pump goes
        through. What was read stays pending."""
        scope = self.topics.scope
        reconnect = Reconnect(f"bridge of scope {scope}", log)
        pump_until_stopped(lambda: self.pump(block_ms), stop, self.store, scope, reconnect)

    # -- incoming (the network thread)

    def _incoming(self, msg: Received) -> bool:
        """Write a response or an event; True when it may be acknowledged (written, or not
        usable and dropped). One that cannot be written now, or comes while others are held,
        is held for `pump` (False): messages are written in the order they came."""
        with self._unwritten_lock:
            if self._unwritten or self._draining:
                self._unwritten.append((self._conn.generation, msg))
                return False
        try:
            self._write(msg)
        except Exception as e:
            if not unreachable(e):
                raise
            if slot_moved(e):
                self.store.refresh_routes()
            with self._unwritten_lock:
                if not self._unwritten:
                    self._log_held(msg.topic, e, slot_of(self.topics.scope))
                self._unwritten.append((self._conn.generation, msg))
            return False
        return True

    @staticmethod
    def _log_held(topic: str, error: Exception, slot: int) -> None:
        """Log why a message is held: a slot's move (MOVED, ASK, TRYAGAIN) at info, as the
        worker does; a server that cannot be reached at warning."""
        if slot_moving(error):
            log.info(
                "a message on %s is held: %s, and it is written then",
                topic,
                moving_reason(error, slot),
            )
            return
        log.warning(
            "a message on %s could not be written, the server is unreachable (%s); it is "
            "held, and written once the server is back",
            topic,
            unreachable_reason(error),
        )

    def _write_held(self) -> None:
        """Write the messages held while the server was away, and acknowledge them (those
        of an earlier connection the broker gives again by itself: a kept session)."""
        while True:
            with self._unwritten_lock:
                held, self._unwritten = self._unwritten, []
                self._draining = bool(held)  # what comes meanwhile waits behind these
                if not held:
                    return
            for i, (generation, msg) in enumerate(held):
                try:
                    self._write(msg)
                except Exception as e:
                    if unreachable(e):
                        with self._unwritten_lock:
                            self._unwritten[:0] = held[i:]
                            self._draining = False
                        return
                    # as on the network thread: logged, not acknowledged, and the bridge
                    # goes on
                    log.exception("a held message on %s could not be handled", msg.topic)
                    continue
                if generation == self._conn.generation:
                    self._conn.ack(msg)

    def _write(self, msg: Received) -> None:
        """Write a response as an answer, or an event for its wait; a message that is not
        usable is counted and dropped with a warning."""
        try:
            event = msg.cloudevent()
            if msg.topic == self.topics.responses:
                answer = response_answer(event, msg.correlation_data)
                self.store.add_work(self.scope, fields("answer", answer))
                self.counters.responses += 1
            else:
                ev = event_of(event, msg.correlation_data)
                entry = self.store.publish(self.scope, ev.type_id, encode(ev), EVENTS_UNMATCHED)
                if entry is None:
                    self.counters.events_unmatched += 1
                else:
                    self.counters.events += 1
        except MessageError as e:
            self.counters.refused += 1
            log.warning("a message on %s was refused: %s", msg.topic, e)

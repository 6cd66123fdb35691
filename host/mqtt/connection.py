"""One MQTT 5 client with paho's network thread: connect and reconnect, subscribe again on
each connect, publish with QoS 1 and track the broker's acknowledgements. The only module
that imports paho."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from host.mqtt.cloudevents import Message, Received
from host.mqtt.topics import BrokerURL

log = logging.getLogger("sfc.host.mqtt")

SESSION_TAKEN_OVER = 0x8E
"""The MQTT 5 DISCONNECT reason code of a session another client took over."""
UNSPECIFIED = 0x80
"""The reason code paho gives a connection the broker closed without saying why."""
TAKEN_OVER_AFTER = 3
"""How many connections in a row the broker may end without a reason, each within
SHORT_LIVED_S of accepting it, before the client takes it for another client taking its
session over (a broker that does not say so with DISCONNECT 0x8E)."""
SHORT_LIVED_S = 10.0
"""A connection the broker ends sooner after accepting it counts toward TAKEN_OVER_AFTER."""
STOP_POLL_S = 0.1
"""How often a wait that a stop may cut short looks at the stop."""
UNSUPPORTED_PROTOCOL = 0x84
"""The CONNACK reason code of a broker that does not speak MQTT 5 (paho maps 3.1.1's 1)."""
MQTT311_CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x0a\x00\x00"
"""An MQTT 3.1.1 CONNECT: clean session, keep alive 10 s, an empty client id."""
PROBE_TIMEOUT_S = 2.0
NEEDS_MQTT5 = (
    "sfc needs MQTT 5: run an MQTT 5 broker (mosquitto 2 with `listener 1883 127.0.0.1` and "
    '`allow_anonymous true`, or iotcore with a [v5] listener; docs/mqtt.md, "A broker")'
)


def properties_of(message: Message) -> Properties:
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if message.content_type is not None:
        props.ContentType = message.content_type
    if message.user_properties:
        props.UserProperty = list(message.user_properties)
    if message.response_topic is not None:
        props.ResponseTopic = message.response_topic
    if message.correlation_data is not None:
        props.CorrelationData = message.correlation_data
    if message.expiry_s is not None:
        props.MessageExpiryInterval = message.expiry_s
    return props


def received_of(msg: mqtt.MQTTMessage) -> Received:
    """paho's message as the mapping reads it."""
    props = msg.properties
    users = getattr(props, "UserProperty", None) or []
    correlation = getattr(props, "CorrelationData", None)
    return Received(
        topic=msg.topic,
        payload=bytes(msg.payload),
        content_type=getattr(props, "ContentType", None),
        user_properties=tuple((str(k), str(v)) for k, v in users),
        correlation_data=None if correlation is None else bytes(correlation),
        response_topic=getattr(props, "ResponseTopic", None),
        mid=msg.mid,
        qos=msg.qos,
    )


def speaks_mqtt311(broker: BrokerURL, stop: threading.Event) -> bool:
    """Whether `broker` answers an MQTT 3.1.1 CONNECT with a CONNACK, of any return code
    (no credentials are sent); False when it cannot be asked."""
    try:
        sock = connect_tcp(broker.host, broker.port, PROBE_TIMEOUT_S, stop)
    except OSError:
        return False
    try:
        if broker.tls:  # as Connection's tls_set: the system's CAs, or SFC_TLS_CA
            context = ssl.create_default_context(cafile=os.environ.get("SFC_TLS_CA") or None)
            sock = context.wrap_socket(sock, server_hostname=broker.host)
        sock.settimeout(PROBE_TIMEOUT_S)
        sock.sendall(MQTT311_CONNECT)
        reply = b""
        while len(reply) < 4:
            more = sock.recv(4 - len(reply))
            if not more:
                break
            reply += more
        if reply[:2] != b"\x20\x02":  # CONNACK, remaining length 2: MQTT 3.1.1's
            return False
        with contextlib.suppress(OSError):
            sock.sendall(b"\xe0\x00")  # DISCONNECT
        return True
    except OSError:
        return False
    finally:
        sock.close()


RECONNECT_S = (1.0, 2.0)
"""The pause between two tries at a broker: the first, and the longest while it fails."""


def connect_tcp(host: str, port: int, timeout: float, stop: threading.Event) -> socket.socket:
    """A TCP connection to `host`:`port`, as `socket.create_connection` makes one (each
    address in turn, up to `timeout` s each), given up within STOP_POLL_S once `stop` is
    set (ConnectionAbortedError)."""
    error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            _connect(sock, address, timeout, stop)
        except OSError as e:
            sock.close()
            error = e
            if stop.is_set():
                break
            continue
        sock.settimeout(timeout)  # as create_connection leaves it (paho sets its own after)
        return sock
    raise error or OSError(f"{host} has no address")


def _connect(sock: socket.socket, address: Any, timeout: float, stop: threading.Event) -> None:
    """Connect `sock` without blocking, looking at `stop` every STOP_POLL_S."""
    deadline = time.monotonic() + timeout
    sock.setblocking(False)
    code = sock.connect_ex(address)
    while code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
        if stop.is_set():
            raise ConnectionAbortedError("the connect was given up: a stop")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        _, ready, _ = select.select([], [sock], [], min(left, STOP_POLL_S))
        if ready:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if code:
        raise OSError(code, os.strerror(code))


class StoppableClient(mqtt.Client):
    """paho's client, whose TCP connect and pause between two tries end within STOP_POLL_S
    once `stopping` is set, through paho's private `_create_socket_connection` and
    `_reconnect_wait` (tests/test_mqtt.py checks that paho calls them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stopping = threading.Event()
        self.pause_s: float | None = None
        """The last pause between two tries; None once connected (the next is the first)."""

    def _create_socket_connection(self) -> socket.socket:
        if self._get_proxy() is not None:
            return super()._create_socket_connection()
        return connect_tcp(self._host, self._port, self.connect_timeout, self.stopping)

    def _reconnect_wait(self) -> None:
        first, longest = RECONNECT_S
        self.pause_s = first if self.pause_s is None else min(self.pause_s * 2, longest)
        if self.stopping.wait(self.pause_s):
            # on the network thread, loop_stop only tells the loop to end: it tries no
            # more (paho's loop went on trying, taking a session taken over back)
            self.loop_stop()


class Connection:
    """One MQTT 5 client with its network thread: connects (and reconnects), subscribes
    again on every connect, publishes with QoS 1 and says which publishes the broker
    acknowledged."""

    def __init__(
        self,
        broker: BrokerURL,
        client_id: str,
        subscriptions: Sequence[str],
        on_message: Callable[[Received], bool],
        *,
        manual_ack: bool = True,
        clean_start: bool = True,
        session_expiry_s: int = 0,
    ) -> None:
        self.broker = broker
        self.client_id = client_id
        self.subscriptions = list(subscriptions)
        self._on_message = on_message
        self._lock = threading.Condition()
        self._acked: dict[int, bool] = {}
        self._abandoned: set[int] = set()
        """Mids given up on (`wait_acked` timed out, or the connection dropped)."""
        self._suback_mids: set[int] = set()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self._closing = False
        self._closed = False
        self._state_lock = threading.Lock()
        """close, suspend and resume one at a time (the bridge's loop and its lease's thread)"""
        self.generation = 0
        """Counts the connections: a message is acknowledged on the one it came on."""
        self.taken_over: str | None = None
        """What the broker did when another client took the session over (the same client
        id): it connects no more. None while it did not."""
        self._accepted_at = 0.0
        """When the broker accepted the last connection (monotonic)."""
        self._cut_short = 0
        """The connections in a row the broker ended without a reason soon after accepting
        them (TAKEN_OVER_AFTER)."""
        self._down_since: float | None = None
        """Since when the broker could not be reached (monotonic), once that was logged:
        a lost connection is logged once, and so is its return."""
        self.clean_start = clean_start
        self.session_expiry_s = session_expiry_s
        self.client = StoppableClient(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=mqtt.MQTTv5,
            manual_ack=manual_ack,
        )
        self.manual_ack = manual_ack
        if broker.username is not None:
            self.client.username_pw_set(broker.username, broker.password)
        if broker.tls:  # the system's CA certificates, or the file SFC_TLS_CA names
            self.client.tls_set(ca_certs=os.environ.get("SFC_TLS_CA") or None)
        self.client.on_connect = self._connected
        self.client.on_connect_fail = self._connect_failed
        self.client.on_disconnect = self._disconnected
        self.client.on_publish = self._published
        self.client.on_subscribe = self._suback
        self.client.on_message = self._message

    def start(self) -> None:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        if self.session_expiry_s:
            props.SessionExpiryInterval = self.session_expiry_s
        self.client.connect_async(
            self.broker.host,
            self.broker.port,
            keepalive=30,
            clean_start=self.clean_start,
            properties=props,
        )
        self.client.loop_start()

    def close(self) -> None:
        """Disconnect for good: a `resume` after it does nothing."""
        with self._state_lock:
            self._closed = True
            self._stop_network(at_once=False)

    def _stop_network(self, at_once: bool) -> None:
        self._closing = True
        self.client.stopping.set()  # a connect under way, or a pause, ends now
        shutdown = getattr(self.client.socket(), "shutdown", None)
        if at_once and shutdown is not None:
            # the broker sees the connection end now, even while the network thread is in
            # a callback (a fence must not wait for it); no DISCONNECT: the session is kept
            with contextlib.suppress(OSError):
                shutdown(socket.SHUT_RDWR)
        self.client.disconnect()
        self.client.loop_stop()
        self.connected.clear()
        self.subscribed.clear()

    def suspend(self) -> None:
        """Disconnect, and stay away until `resume`."""
        with self._state_lock:
            if not self._closed:
                self._stop_network(at_once=True)

    def resume(self) -> None:
        with self._state_lock:
            if self._closed or self.taken_over:
                return
            self._resume()

    def _resume(self) -> None:
        self._closing = False
        self.client.stopping.clear()
        # paho's loop_start makes a new wake-up socket pair without closing the last one
        reset = getattr(self.client, "_reset_sockets", None)
        if reset is not None:
            reset(sockpair_only=True)
        self.start()

    def wait_ready(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Whether it connected and its subscriptions were granted within `timeout` s; it
        stops waiting once `stop` is set (a stop asked for while the broker is away)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if stop is None or left <= 0:
                return self.subscribed.wait(max(left, 0))
            if self.subscribed.wait(min(left, STOP_POLL_S)):
                return True
            if stop.is_set():
                return False

    # -- callbacks (the network thread)

    def _connected(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: ReasonCode, props: Any
    ) -> None:
        if reason.is_failure:  # logged once, as a lost connection is, not at every retry
            self._cut_short = 0
            if reason.value == UNSUPPORTED_PROTOCOL:
                self._down(f"refused MQTT 5 ({reason}); {NEEDS_MQTT5}", logging.ERROR)
            else:
                self._down(f"refused the connection ({reason})")
            return
        self._accepted_at = time.monotonic()
        if self._down_since is not None:
            log.warning(
                "connected to the broker %s again after %.1f s",
                self.broker.redacted(),
                time.monotonic() - self._down_since,
            )
            self._down_since = None
        self.client.pause_s = None  # the next try after a loss comes after the first pause
        self.generation += 1
        self.connected.set()
        if not self.subscriptions:
            self.subscribed.set()
            return
        result, mid = client.subscribe([(s, 1) for s in self.subscriptions])
        if result == mqtt.MQTT_ERR_SUCCESS and mid is not None:
            with self._lock:
                self._suback_mids.add(mid)

    def _down(self, what: str, level: int = logging.WARNING) -> None:
        """Log that the broker is away and why, once until it is back."""
        if self._closing or self._down_since is not None:
            return
        self._down_since = time.monotonic()
        log.log(level, "the broker %s %s; trying again every 1-2 s", self.broker.redacted(), what)

    def _connect_failed(self, client: mqtt.Client, userdata: Any) -> None:
        self._cut_short = 0  # the broker was away, not the session taken
        self._down("cannot be reached")

    def _taken_over(self, client: mqtt.Client, what: str) -> None:
        """Connect no more: reconnecting would take the session back from the other client,
        and the two would take turns."""
        self.taken_over = what
        self._closing = True
        self.client.stopping.set()
        client.disconnect()
        log.error("%s; not connecting again", what)

    def _disconnected(
        self, client: mqtt.Client, userdata: Any, flags: Any, reason: ReasonCode, props: Any
    ) -> None:
        self.generation += 1  # a message of the last connection is not acknowledged on the next
        code = getattr(reason, "value", None)
        broker = self.broker.redacted()
        if code == SESSION_TAKEN_OVER and not self._closing:
            self._taken_over(
                client,
                f"the broker {broker} gave the session of client id {self.client_id!r} to "
                "another client (DISCONNECT 0x8E, session taken over)",
            )
        elif self.connected.is_set():
            short = time.monotonic() - self._accepted_at < SHORT_LIVED_S
            self._cut_short = self._cut_short + 1 if code == UNSPECIFIED and short else 0
            if self._cut_short >= TAKEN_OVER_AFTER and not self._closing:
                self._taken_over(
                    client,
                    f"the broker {broker} ended {self._cut_short} connections of client id "
                    f"{self.client_id!r} in a row within {SHORT_LIVED_S:.0f} s of accepting "
                    "each, without a reason: another client with that client id takes the "
                    "session over (a broker that does not say so with DISCONNECT 0x8E)",
                )
            else:
                self._down(f"dropped the connection ({reason})")
        elif self._down_since is None and not self._closing:
            # once per outage: a broker that speaks only 3.1.1 closes an MQTT 5 CONNECT
            if speaks_mqtt311(self.broker, self.client.stopping):
                what = f"speaks MQTT 3.1.1 and closed an MQTT 5 connection; {NEEDS_MQTT5}"
                self._down(what, logging.ERROR)
            else:
                self._down(f"closed the connection before accepting it ({reason})")
        self.connected.clear()
        self.subscribed.clear()
        with self._lock:
            self._lock.notify_all()

    def _suback(
        self, client: mqtt.Client, userdata: Any, mid: int, reasons: list[ReasonCode], props: Any
    ) -> None:
        bad = [str(r) for r in reasons if r.is_failure]
        if bad:
            log.error("the broker refused a subscription: %s", ", ".join(bad))
            return
        with self._lock:
            if mid in self._suback_mids:
                self._suback_mids.discard(mid)
                self.subscribed.set()

    def _published(
        self, client: mqtt.Client, userdata: Any, mid: int, reason: ReasonCode, props: Any
    ) -> None:
        with self._lock:
            if mid in self._abandoned:  # a late PUBACK of one no longer waited for
                self._abandoned.discard(mid)
                return
            self._acked[mid] = not reason.is_failure
            self._lock.notify_all()

    def _message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            done = self._on_message(received_of(msg))
        except Exception:  # never let the network thread die
            log.exception("a message on %s could not be handled", msg.topic)
            done = False
        if done and self.manual_ack and msg.qos > 0:
            client.ack(msg.mid, msg.qos)

    def ack(self, msg: Received) -> None:
        """Acknowledge a message handled later than its callback (manual acks)."""
        if self.manual_ack and msg.qos > 0:
            self.client.ack(msg.mid, msg.qos)

    # -- publishing

    def publish(self, message: Message) -> int | None:
        """Send `message` with QoS 1; its mid, or None when it could not be queued."""
        info = self.client.publish(
            message.topic, message.payload, qos=1, properties=properties_of(message)
        )
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            return None
        with self._lock:
            self._abandoned.discard(info.mid)  # paho's mids wrapped round: this one is new
        return info.mid

    def wait_acked(self, mids: Sequence[int], timeout: float) -> set[int]:
        """The mids the broker acknowledged (PUBACK without a failure reason) within
        `timeout` s; the others are forgotten."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if all(m in self._acked for m in mids):
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not self.connected.is_set():
                    break
                self._lock.wait(left)
            ok = {m for m in mids if self._acked.get(m)}
            for m in mids:
                if self._acked.pop(m, None) is None:
                    # not acknowledged yet: paho may send it again and get its PUBACK later,
                    # which must not count for a new message of the same mid
                    self._abandoned.add(m)
        return ok

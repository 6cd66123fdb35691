"""Equipment over MQTT 5 and CloudEvents: the bridge and the device simulator (docs/mqtt.md).

The bridge is an adapter of the equipment stream (docs/host.md, "The equipment stream: the
contract for adapters"); the host stays the same.

- **Outgoing.** `MqttBridge` reads `sfc:equipment:{scope}` with its consumer group and
  publishes each push, hold and restart as a CloudEvent in MQTT 5 binary mode (QoS 1) on
  the command topic, and the notices await and withdraw on the notice topic. A command
  read past its `expiresAt` is not sent. An entry is acknowledged only after the broker
  acknowledged its publish; entries another bridge of the group left pending are claimed
  after `claim_idle_ms` (XAUTOCLAIM), so a killed bridge loses nothing.
- **Incoming.** It subscribes to the response topic and the event topic with shared
  subscriptions (`$share/{group}-responses-{digest}/...`, and `-events-` likewise): a
  response becomes `respond`, an event `publish_event`. The MQTT message is acknowledged after the
  work entry was written.
- **The device.** `MqttDevice` answers commands and waits from a dry-run script as
  equipment would, asking the script as the scripted equipment does
  (`host.scripted.ScriptAnswers`).

The mapping functions (`command_message`, `read_cloudevent`, `response_answer`,
`event_of`, ...) are pure; `Connection` (paho's client and its network thread),
`MqttBridge` and `MqttDevice` do the I/O.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import heapq
import logging
import math
import os
import queue
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from generated.equipment_entry_v1_0 import AwaitData, AwaitSelector, CommandData, WithdrawData
from generated.simulation_script_v1_0 import SimulationScript
from generated.work_entry_v1_0 import AnswerData, EventData
from host import keys
from host.apply import EVENTS_UNMATCHED
from host.entries import Entry, EntryError, decode_equipment, encode, fields
from host.equipment import answer_data, event_data
from host.scripted import ASKED_RETENTION_MS, FORGET_EVERY, ScriptAnswers, host_script_problem
from host.scripted import Counters as ScriptCounters
from host.store import (
    Store,
    a_move,
    moving_reason,
    slot_moved,
    slot_of,
    unreachable,
    unreachable_reason,
)
from sfc.simulation import Reply

log = logging.getLogger("sfc.host.mqtt")

SPECVERSION = "1.0"
JSON = "application/json"
CLOUDEVENTS = "application/cloudevents"
"""The Content Type prefix of structured mode (`application/cloudevents+json`)."""
DEFAULT_PREFIX = "sfc"
DEFAULT_GROUP = "sfc-mqtt"
DEFAULT_COMMAND_TOPIC = "{prefix}/{scope}/commands/{typeId}"
DEFAULT_CLAIM_IDLE_MS = 30_000
SESSION_TAKEN_OVER = 0x8E
"""The MQTT 5 DISCONNECT reason code of a session another client took over."""
UNSPECIFIED = 0x80
"""The reason code paho gives a connection the broker closed without saying why."""
TAKEN_OVER_AFTER = 3
"""How many connections in a row the broker may end without a reason, each within
SHORT_LIVED_S of accepting it, before the client takes it for another client taking its
session over, on a broker that does not say so with DISCONNECT 0x8E (rumqttd, and
mosquitto 2.0.11, close the connection). Each of the two would connect again and take the
session back, and they took turns for ever."""
SHORT_LIVED_S = 10.0
"""A connection the broker ends sooner after accepting it counts toward TAKEN_OVER_AFTER:
another client that takes the session back connects again within 1-2 s (paho's pause)."""
CLIENT_ID_LIMIT = 128
STOP_POLL_S = 0.1
"""How often a wait that a stop may cut short looks at the stop (a bridge started while
the broker or a client id's holder is away stops within this of SIGINT or SIGTERM)."""
LEASE_TTL_MS = 10_000
"""How long a bridge's hold on its client id lasts unless renewed (every third of it): a
bridge that was killed leaves its client id free after this."""
DEVICE_SOURCE = "sfc-device"
"""The CloudEvents source of the device simulator's responses and events."""
COMMAND_KINDS = ("push", "hold", "restart")
NOTICE_KINDS = ("await", "withdraw")
_WILDCARDS = frozenset("+#\x00")


class MessageError(ValueError):
    """An MQTT message that is not a usable CloudEvent; the message says why."""


# --------------------------------------------------------------------------- the broker URL


@dataclass(frozen=True, slots=True)
class BrokerURL:
    """`mqtt://[user[:password]@]host[:port]` or `mqtts://` (TLS; port 8883 by default)."""

    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = None

    def redacted(self) -> str:
        scheme = "mqtts" if self.tls else "mqtt"
        user = "" if self.username is None else f"{self.username}:***@"
        return f"{scheme}://{user}{self.host}:{self.port}"


def parse_broker_url(url: str) -> BrokerURL:
    """The broker of `url`, or ValueError saying what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ValueError(f"a broker URL starts with mqtt:// or mqtts://, not {url.split(':')[0]!r}")
    if not parts.hostname:
        raise ValueError("the broker URL has no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a broker URL has no path, query or fragment")
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError:
        raise ValueError("the broker URL's port is not a number from 1 to 65535") from None
    return BrokerURL(
        host=parts.hostname,
        port=port,
        tls=tls,
        username=None if parts.username is None else unquote(parts.username),
        password=None if parts.password is None else unquote(parts.password),
    )


# --------------------------------------------------------------------------- topics


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic layout of one scope (docs/mqtt.md, "Topics").

    `command` is a template with `{prefix}`, `{scope}`, `{typeId}`, `{kind}` and `{job}`.
    """

    scope: str
    prefix: str = DEFAULT_PREFIX
    command: str = DEFAULT_COMMAND_TOPIC

    def __post_init__(self) -> None:
        keys.check_scope(self.scope)
        if not self.prefix or _WILDCARDS & set(self.prefix) or self.prefix.startswith("$"):
            raise ValueError(
                f"the topic prefix {self.prefix!r} may not be empty, hold + or #, or start with $"
            )
        try:
            self.command.format(prefix="p", scope="s", typeId="t", kind="k", job="j")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"the command topic {self.command!r} is not a template of "
                "{prefix}, {scope}, {typeId}, {kind} and {job}: " + str(e)
            ) from None

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.scope}"

    @property
    def responses(self) -> str:
        """Where equipment answers (the Response Topic of every command)."""
        return f"{self.base}/responses"

    @property
    def events(self) -> str:
        """The filter of the event topics; an event is published on `events/{typeId}`."""
        return f"{self.base}/events/#"

    def event(self, type_id: str) -> str:
        return f"{self.base}/events/{type_id}"

    def notice(self, type_id: str) -> str:
        return f"{self.base}/notices/{type_id}"

    @property
    def commands_filter(self) -> str:
        """What a device subscribes to for the default layout."""
        return f"{self.base}/commands/#"

    @property
    def notices_filter(self) -> str:
        return f"{self.base}/notices/#"

    def for_command(self, kind: str, data: CommandData) -> str:
        return self.command.format(
            prefix=self.prefix, scope=self.scope, typeId=data.type_id, kind=kind, job=data.job
        )


def check_group(group: str) -> str:
    """`group`, if it can be a bridge group (a consumer group, and a part of share names)."""
    if not group or _WILDCARDS & set(group) or "/" in group:
        raise ValueError(f"the group {group!r} may not be empty, or hold /, + or #")
    return group


def share_name(group: str, what: str, topic_filter: str) -> str:
    """The share name of `group`'s subscription to `topic_filter`: one of its own for each
    filter (`{group}-{what}-` and 8 hex digits of the filter's sha256), also across scopes
    and prefixes; rumqttd keys a shared subscription by its name alone, and a name with two
    filters (two scopes' bridges of one group) lost the second's messages."""
    digest = hashlib.sha256(topic_filter.encode()).hexdigest()[:8]
    return f"{group}-{what}-{digest}"


def shared(group: str, topic_filter: str) -> str:
    """The shared subscription of `group` to `topic_filter`."""
    if not group or _WILDCARDS & set(group) or "/" in group:
        raise ValueError(f"a group name has no /, + or #: {group!r}")
    return f"$share/{group}/{topic_filter}"


def topic_problem(topic: str) -> str | None:
    """Why `topic` cannot be published to, or None."""
    if not topic:
        return "the topic is empty"
    if _WILDCARDS & set(topic):
        return f"the topic {topic!r} holds a wildcard (+ or #)"
    if len(topic.encode()) > 65535:
        return "the topic is longer than 65535 bytes"
    return None


# --------------------------------------------------------------------------- CloudEvents


@dataclass(frozen=True, slots=True)
class CloudEvent:
    """A CloudEvent as MQTT carries it: the attributes but `datacontenttype` (strings), the
    content type and the data (bytes)."""

    attributes: Mapping[str, str]
    data: bytes = b""
    content_type: str | None = None

    def get(self, name: str) -> str | None:
        return self.attributes.get(name)

    @property
    def id(self) -> str:
        return self.attributes["id"]

    @property
    def type(self) -> str:
        return self.attributes["type"]


@dataclass(frozen=True, slots=True)
class Message:
    """An MQTT 5 PUBLISH to send (QoS 1): topic, payload and properties."""

    topic: str
    payload: bytes
    content_type: str | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    response_topic: str | None = None
    correlation_data: bytes | None = None
    expiry_s: int | None = None


def rfc3339(ms: int) -> str:
    """Epoch milliseconds as an RFC 3339 time in UTC, to the millisecond."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def source_of(scope: str) -> str:
    """The CloudEvents source of the commands of `scope` (a URI reference)."""
    return f"/sfc/{scope}"


def binary_message(
    topic: str,
    event: CloudEvent,
    *,
    response_topic: str | None = None,
    correlation_data: bytes | None = None,
    expiry_s: int | None = None,
) -> Message:
    """`event` in binary mode: the data is the payload, `datacontenttype` the Content Type,
    every other attribute a User Property of its own name."""
    return Message(
        topic=topic,
        payload=event.data,
        content_type=event.content_type,
        user_properties=tuple((k, v) for k, v in event.attributes.items()),
        response_topic=response_topic,
        correlation_data=correlation_data,
        expiry_s=expiry_s,
    )


def expiry_seconds(expires_at: int, now_ms: int) -> int | None:
    """The Message Expiry Interval of a command that must not be delivered after
    `expires_at`: whole seconds, rounded up; None when it is already past."""
    left = expires_at - now_ms
    if left <= 0:
        return None
    return max(1, math.ceil(left / 1000))


def command_event(scope: str, kind: str, data: CommandData, entry_ms: int) -> CloudEvent:
    """The CloudEvent of a push, hold or restart (docs/mqtt.md, "Commands")."""
    attributes = {
        "specversion": SPECVERSION,
        "id": data.command_id,
        "source": source_of(scope),
        "type": data.type_id,
        "subject": data.action_key,
        "time": rfc3339(entry_ms),
        "sfckind": kind,
        "sfcjob": data.job,
        "sfcattempt": str(data.attempt),
        "sfcround": str(data.round),
        "sfcdeadline": str(data.deadline),
        "sfcexpiresat": str(data.expires_at),
    }
    return CloudEvent(attributes, encode(data.parameters), JSON)


def command_message(
    topics: Topics, kind: str, data: CommandData, entry_ms: int, now_ms: int
) -> Message | None:
    """The MQTT message of a command; None when it is past its `expiresAt` (not sent)."""
    expiry = expiry_seconds(data.expires_at, now_ms)
    if expiry is None:
        return None
    return binary_message(
        topics.for_command(kind, data),
        command_event(topics.scope, kind, data, entry_ms),
        response_topic=topics.responses,
        correlation_data=data.command_id.encode(),
        expiry_s=expiry,
    )


def notice_message(
    topics: Topics, kind: str, data: AwaitData | WithdrawData, entry_ms: int, now_ms: int
) -> Message | None:
    """The MQTT message of an await or withdraw notice; None for an await past its
    `expiresAt`. The data is the parameters (await; the selector's subject and correlation
    id are `sfcwaitsubject` and `sfcwaitcorrelation`) or the reason (withdraw)."""
    attributes = {
        "specversion": SPECVERSION,
        "id": f"{data.command_id}:{kind}",
        "source": source_of(topics.scope),
        "type": data.type_id,
        "subject": data.action_key,
        "time": rfc3339(entry_ms),
        "sfckind": kind,
        "sfcjob": data.job,
        "sfccommandid": data.command_id,
    }
    expiry: int | None = None
    if isinstance(data, AwaitData):
        expiry = expiry_seconds(data.expires_at, now_ms)
        if expiry is None:
            return None
        attributes |= {
            "sfcattempt": str(data.attempt),
            "sfcround": str(data.round),
            "sfcdeadline": str(data.deadline),
            "sfcexpiresat": str(data.expires_at),
        }
        selector = data.selector
        if selector is not None and selector.subject is not None:
            attributes["sfcwaitsubject"] = selector.subject
        if selector is not None and selector.correlation_id is not None:
            attributes["sfcwaitcorrelation"] = selector.correlation_id
        payload = encode(data.parameters)
    else:
        payload = encode({"reason": data.reason})
    return binary_message(
        topics.notice(data.type_id),
        CloudEvent(attributes, payload, JSON),
        correlation_data=data.command_id.encode(),
        expiry_s=expiry,
    )


_REQUIRED = ("specversion", "id", "source", "type")


def read_cloudevent(
    payload: bytes,
    content_type: str | None,
    user_properties: Sequence[tuple[str, str]] = (),
) -> CloudEvent:
    """The CloudEvent of an MQTT message: structured mode when the Content Type starts with
    `application/cloudevents` (the JSON event is the payload), binary mode otherwise (the
    attributes are User Properties). MessageError when it is not one."""
    if content_type is not None and content_type.lower().startswith(CLOUDEVENTS):
        try:
            doc = msgspec.json.decode(payload)
        except (msgspec.DecodeError, RecursionError):
            raise MessageError("a structured CloudEvent that is not JSON") from None
        if not isinstance(doc, dict):
            raise MessageError("a structured CloudEvent is a JSON object")
        attributes: dict[str, str] = {}
        data = b""
        data_type: str | None = None
        for name, value in doc.items():
            if name == "data":
                data = value.encode() if isinstance(value, str) else encode(value)
            elif name == "data_base64":
                try:
                    data = base64.b64decode(value, validate=True)
                except (ValueError, TypeError):
                    raise MessageError("data_base64 is not base64") from None
            elif name == "datacontenttype":
                data_type = str(value)
            elif isinstance(value, str):
                attributes[name] = value
            elif isinstance(value, bool):
                attributes[name] = "true" if value else "false"
            elif isinstance(value, int | float):
                attributes[name] = str(value)
            else:
                raise MessageError(f"the attribute {name!r} is not a string, number or boolean")
        if "data" in doc and data_type is None:
            data_type = JSON
        event = CloudEvent(attributes, data, data_type)
    else:
        attributes = {}
        for name, value in user_properties:
            attributes.setdefault(name, value)
        event = CloudEvent(attributes, payload, content_type)
    missing = [n for n in _REQUIRED if not event.attributes.get(n)]
    if missing:
        raise MessageError(f"not a CloudEvent: no {', '.join(missing)}")
    if event.attributes["specversion"] != SPECVERSION:
        raise MessageError(f"CloudEvents {event.attributes['specversion']!r}; this reads 1.0")
    return event


def structured(event: CloudEvent) -> bytes:
    """`event` in structured mode (the payload of `application/cloudevents+json`)."""
    doc: dict[str, Any] = dict(event.attributes)
    if event.content_type is not None:
        doc["datacontenttype"] = event.content_type
    if event.data:
        if event.content_type is None or "json" in event.content_type.lower():
            try:
                doc["data"] = msgspec.json.decode(event.data)
            except msgspec.DecodeError:
                doc["data_base64"] = base64.b64encode(event.data).decode()
        else:
            doc["data_base64"] = base64.b64encode(event.data).decode()
    return encode(doc)


def _data_value(event: CloudEvent) -> Any:
    """The event's data: JSON decoded when its content type is JSON (or absent and it
    parses), text otherwise; None when it has none."""
    if not event.data:
        return None
    kind = (event.content_type or "").lower()
    if not kind or "json" in kind:
        try:
            return msgspec.json.decode(event.data)
        except (msgspec.DecodeError, RecursionError):
            if kind:
                raise MessageError("the data is not JSON, as its content type says") from None
    try:
        return event.data.decode()
    except UnicodeDecodeError:
        raise MessageError("the data is neither JSON nor UTF-8 text") from None


def outcome_of(event: CloudEvent, error_type: bool = True) -> tuple[str | None, str | None]:
    """(outcome, error) of a response or an event: an error when its type ends in `.error`
    or its data is an object with `error` (the text: `error` or `message`); otherwise the
    outcome is the data's `outcome`, a JSON string or a text, or None (no outcome). With
    `error_type` False (events, whose type is the type id a wait matches) only the data
    tells an error."""
    value = _data_value(event)
    typed = error_type and event.type.endswith(".error")
    if typed or (isinstance(value, dict) and "error" in value):
        text: Any = None
        if isinstance(value, dict):
            text = value.get("error") if isinstance(value.get("error"), str) else None
            text = text if text is not None else value.get("message")
        elif isinstance(value, str):
            text = value
        return None, text if isinstance(text, str) else ""
    if isinstance(value, dict):
        outcome = value.get("outcome")
        if outcome is not None and not isinstance(outcome, str):
            raise MessageError("the data's outcome is not a string")
        return outcome, None
    if isinstance(value, str):
        return value or None, None
    if value is None:
        return None, None
    raise MessageError("the data is not an object, a string or empty")


def command_parts(command_id: str) -> tuple[str, str]:
    """(job, action key) of a command id `{job}:{action}#{n}[:hold]`; MessageError
    otherwise. An action's name has no `:`, so the job is what comes before the last one."""
    head, sep, number = command_id.removesuffix(":hold").rpartition("#")
    job, colon, action = head.rpartition(":")
    if not sep or not (number.isascii() and number.isdigit()) or not colon or not job or not action:
        raise MessageError(f"{command_id[:200]!r} is not a command id of the form job:action#n")
    return job, head


def response_answer(event: CloudEvent, correlation_data: bytes | None) -> AnswerData:
    """The `answer` work entry of a response (docs/mqtt.md, "Responses"): the command id
    from the Correlation Data (else the attribute `sfccommandid`), the job and action key
    from the command id, the round from `sfcround`, the outcome or error from the data."""
    if correlation_data:
        try:
            command_id = correlation_data.decode()
        except UnicodeDecodeError:
            raise MessageError("the Correlation Data is not UTF-8") from None
    else:
        command_id = event.get("sfccommandid") or ""
    if not command_id:
        raise MessageError("a response carries the command id as its Correlation Data")
    job, action_key = command_parts(command_id)
    round_text = event.get("sfcround")
    round_: int | None = None
    if round_text is not None:
        if (
            not (round_text.isascii() and round_text.isdigit())
            or len(round_text) > 9
            or int(round_text) < 1
        ):
            raise MessageError(f"sfcround {round_text[:40]!r} is not a round number")
        round_ = int(round_text)
    outcome, error = outcome_of(event)
    try:
        return answer_data(
            job, action_key, outcome=outcome, error=error, command_id=command_id, round=round_
        )
    except (ValueError, keys.KeyError_) as e:
        raise MessageError(str(e)) from None


def event_of(event: CloudEvent, correlation_data: bytes | None = None) -> EventData:
    """The `event` work entry of an event (docs/mqtt.md, "Events"): type, subject, source
    and id; the correlation id from the attribute `correlationid` (else the Correlation
    Data); the outcome from the data."""
    outcome, error = outcome_of(event, error_type=False)
    if error is not None:
        outcome = "error"
    correlation = event.get("correlationid")
    if correlation is None and correlation_data:
        try:
            correlation = correlation_data.decode()
        except UnicodeDecodeError:
            raise MessageError("the Correlation Data is not UTF-8") from None
    try:
        return event_data(
            event.type,
            subject=event.get("subject"),
            correlation_id=correlation,
            outcome=outcome,
            source=event.get("source"),
            id=event.get("id"),
        )
    except ValueError as e:
        raise MessageError(str(e)) from None


def command_of(event: CloudEvent) -> tuple[str, CommandData | AwaitData]:
    """What a device reads from a command or an await notice: (kind, data). MessageError
    when it lacks an attribute the bridge sets."""
    kind = event.get("sfckind") or ""
    try:
        base = {
            "commandId": event.get("sfccommandid") or event.id,
            "actionKey": event.attributes["subject"],
            "job": event.attributes["sfcjob"],
            "typeId": event.type,
            "attempt": int(event.attributes["sfcattempt"]),
            "round": int(event.attributes["sfcround"]),
            "deadline": int(event.attributes["sfcdeadline"]),
            "expiresAt": int(event.attributes["sfcexpiresat"]),
        }
        if kind in COMMAND_KINDS:
            params = msgspec.json.decode(event.data) if event.data else {}
            return kind, msgspec.convert({**base, "parameters": params}, CommandData)
        if kind == "await":
            params = msgspec.json.decode(event.data) if event.data else {}
            subject = event.get("sfcwaitsubject")
            correlation = event.get("sfcwaitcorrelation")
            selector = None
            if subject is not None or correlation is not None:
                selector = {"subject": subject, "correlationId": correlation}
            doc = {**base, "parameters": params, "selector": selector}
            return kind, msgspec.convert(doc, AwaitData)
    except (KeyError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise MessageError(f"not a command of the bridge: {e}") from None
    raise MessageError(f"sfckind {kind[:40]!r} is not a command or an await")


def reply_event(
    command: CloudEvent, command_id: str, reply: Reply | None, *, not_held: bool = False
) -> CloudEvent:
    """The device's response to a command: `{type}.response` with `{"outcome": ...}`, or
    `{type}.error` with `{"error": ...}`; a hold of work it does not know answers
    `notHeld`."""
    attributes = {
        "specversion": SPECVERSION,
        "id": f"{command_id}:response",
        "source": DEVICE_SOURCE,
        "subject": command.attributes.get("subject", ""),
        "sfccommandid": command_id,
    }
    if command.get("sfcround") is not None:
        attributes["sfcround"] = command.attributes["sfcround"]
    if not_held or reply is None:
        return CloudEvent(
            attributes | {"type": f"{command.type}.response"}, encode({"outcome": "notHeld"}), JSON
        )
    if reply.kind == "error":
        return CloudEvent(
            attributes | {"type": f"{command.type}.error"},
            encode({"error": reply.error or ""}),
            JSON,
        )
    return CloudEvent(
        attributes | {"type": f"{command.type}.response"}, encode({"outcome": reply.outcome}), JSON
    )


def wait_event(data: AwaitData, reply: Reply) -> CloudEvent:
    """The device's event for a wait: its type, the selector's subject and correlation id,
    the reply's outcome (`error` for an error reply), id = the await's command id."""
    selector = data.selector or AwaitSelector(subject=None, correlation_id=None)
    attributes = {
        "specversion": SPECVERSION,
        "id": data.command_id,
        "source": DEVICE_SOURCE,
        "type": data.type_id,
    }
    if selector.subject is not None:
        attributes["subject"] = selector.subject
    if selector.correlation_id is not None:
        attributes["correlationid"] = selector.correlation_id
    return CloudEvent(attributes, encode({"outcome": reply.outcome or "error"}), JSON)


# --------------------------------------------------------------------------- MQTT I/O


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


@dataclass(frozen=True, slots=True)
class Received:
    """An MQTT message as the mapping reads it."""

    topic: str
    payload: bytes
    content_type: str | None
    user_properties: tuple[tuple[str, str], ...]
    correlation_data: bytes | None
    response_topic: str | None
    mid: int
    qos: int

    @classmethod
    def of(cls, msg: mqtt.MQTTMessage) -> Received:
        props = msg.properties
        content_type = getattr(props, "ContentType", None)
        users = getattr(props, "UserProperty", None) or []
        correlation = getattr(props, "CorrelationData", None)
        response = getattr(props, "ResponseTopic", None)
        return cls(
            topic=msg.topic,
            payload=bytes(msg.payload),
            content_type=content_type,
            user_properties=tuple((str(k), str(v)) for k, v in users),
            correlation_data=None if correlation is None else bytes(correlation),
            response_topic=response,
            mid=msg.mid,
            qos=msg.qos,
        )

    def cloudevent(self) -> CloudEvent:
        return read_cloudevent(self.payload, self.content_type, self.user_properties)


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
    """paho's client, whose two waits on its network thread a stop cuts short (`stopping`
    set): the TCP connect, for which paho waits up to its connect timeout (5 s) when the
    broker's host does not answer, and the pause between two tries, which paho sleeps in
    steps of a second. `Connection.close` joins that thread, so a bridge's stop while its
    broker was away waited them out (a connect through a proxy still does)."""

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
        a lost connection is said once, and so is its return."""
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
        if reason.is_failure:  # said once, as a lost connection is, not at every retry
            self._cut_short = 0
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

    def _down(self, what: str) -> None:
        if self._closing or self._down_since is not None:
            return
        self._down_since = time.monotonic()
        log.warning("the broker %s %s; trying again every 1-2 s", self.broker.redacted(), what)

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
            done = self._on_message(Received.of(msg))
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


# --------------------------------------------------------------------------- the bridge


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


class ClientIdTaken(RuntimeError):
    """Another live bridge holds this client id: a broker session has one client at a time
    (a second one would take it over, and the two would take turns)."""


@dataclass
class ClientLease:
    """A bridge's hold on its MQTT client id: `sfc1_lease` on `sfc:mqtt-client:{ID}` (a
    broker's client ids are not a scope's), for `ttl_ms`, renewed by a thread of its own
    every third of it, whatever the bridge's loop is waiting for.

    While it cannot be renewed (the server unreachable), the bridge stays connected for two
    thirds of `ttl_ms`, then `fence` disconnects it from the broker, before the lease can
    run out and another bridge take the session; `unfence` connects it again once renewed.
    When another bridge holds it after all, `lost` says so, and the bridge stops."""

    store: Store
    client_id: str
    holder: str
    ttl_ms: int = LEASE_TTL_MS
    lost: ClientIdTaken | None = None
    renewed: int = 0
    """Renewals that landed."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return keys.mqtt_client(self.client_id)

    def take(self, stop: threading.Event | None = None) -> bool:
        """Hold the client id; wait while another bridge holds it, for as long as a killed
        holder's lease lasts; ClientIdTaken when it is held still. False when `stop` was
        set meanwhile (not held)."""
        deadline = time.monotonic() + self.ttl_ms / 1000 + 1.0
        said = False
        while True:
            other = self.store.lease(self.key, self.holder, self.ttl_ms)
            if other is None:
                return True
            if time.monotonic() >= deadline:
                raise ClientIdTaken(
                    f"the MQTT client id {self.client_id!r} is held by another bridge "
                    f"(consumer {other}): give each bridge its own --client-id"
                )
            if not said:
                log.warning(
                    "the MQTT client id %s is held by %s; waiting up to %.0f s for it",
                    self.client_id,
                    other,
                    deadline - time.monotonic(),
                )
                said = True
            pause = min(0.25, self.ttl_ms / 4000)
            if stop is None:
                time.sleep(pause)
            elif stop.wait(pause):
                return False

    def keep(self, fence: Callable[[], None], unfence: Callable[[], None]) -> None:
        """Renew it in a thread until `release`."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._renew, args=(fence, unfence), name="sfc-mqtt-lease", daemon=True
        )
        self._thread.start()

    def _renew(self, fence: Callable[[], None], unfence: Callable[[], None]) -> None:
        last, fenced = time.monotonic(), False
        while not self._stop.wait(self.ttl_ms / 3000):
            sent = time.monotonic()  # the hold runs from the call, not from its reply
            try:
                other = self.store.lease(self.key, self.holder, self.ttl_ms)
            except Exception as e:  # unreachable, or refused: it is not renewed either way
                if unreachable(e):
                    self.store.refresh_routes()  # its slot may have moved (a reshard)
                if not fenced and time.monotonic() - last > self.ttl_ms * 2 / 3000:
                    log.warning(
                        "the hold on MQTT client id %s could not be renewed for %.1f s (%s); "
                        "disconnected from the broker until it is",
                        self.client_id,
                        time.monotonic() - last,
                        e,
                    )
                    fence()
                    fenced = True
                continue
            if other is not None:
                self.lost = ClientIdTaken(
                    f"the MQTT client id {self.client_id!r} was taken by another bridge "
                    f"(consumer {other}) while this one could not renew its hold; it stops"
                )
                if not fenced:
                    fence()
                return
            last = sent
            self.renewed += 1
            if fenced:
                log.warning(
                    "the hold on MQTT client id %s is renewed; connecting again", self.client_id
                )
                unfence()
                fenced = False

    def stop(self) -> None:
        """Stop renewing (its thread joined)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def release(self) -> None:
        """Stop renewing, and give the client id up (the next bridge need not wait)."""
        self.stop()
        if self.lost is not None:
            return
        try:
            self.store.lease(self.key, self.holder, 0)
        except Exception as e:
            if not unreachable(e):
                raise


@dataclass
class MqttBridge:
    """The MQTT bridge of one scope (docs/mqtt.md). `pump` does one round of the outgoing
    side; the incoming side runs on the MQTT network thread. `run(stop)` pumps until
    `stop` is set, then closes.

    With `session_expiry_s` above 0 the broker keeps the bridge's session while it is away
    (a restart, a crash): its subscriptions stay, and the responses and events that come
    meanwhile wait for it instead of being dropped. Its `client_id` then names the session.
    A bridge given a client id holds it through a lease on the server (ClientLease), one
    bridge at a time: a second bridge with the same client id waits for the lease (a killed
    holder's runs out within `lease_ttl_ms`), then gives up with ClientIdTaken."""

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
    _lease: ClientLease | None = field(default=None, repr=False)
    _unwritten: list[tuple[int, Received]] = field(default_factory=list, repr=False)
    """Responses and events that could not be written (the server unreachable), with the
    connection they came on: held, not acknowledged, and written by `pump` once the server
    is back (within one connection a broker never gives a message again)."""
    _unwritten_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _draining: bool = field(default=False, repr=False)
    """`pump` is writing held messages: one that comes meanwhile is held behind them."""
    """The hold on a client id that was given (None: one of its own, new each start)."""
    _next_claim: float = field(default=0.0, repr=False)
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
            self._lease = ClientLease(self.store, self.client_id, self.consumer, self.lease_ttl_ms)
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
        at most `timeout` s (it keeps trying after). Once `stop` is set it waits no more:
        `run(stop)` then closes at once (a stop while the broker was away waited out the
        10 s, and a restarted bridge waited for the lease meanwhile)."""
        if self._lease is not None:
            if not self._lease.take(stop):
                return self
            self._lease.keep(self._conn.suspend, self._conn.resume)
        self._conn.start()
        if not self._conn.wait_ready(timeout, stop) and not (stop and stop.is_set()):
            log.warning("not connected to %s yet; retrying", self.broker.redacted())
        return self

    def close(self) -> None:
        if self._lease is not None:
            self._lease.stop()  # no fence or unfence after this
        self._conn.close()
        if self._lease is not None:
            self._lease.release()

    def _still_held(self) -> None:
        """ClientIdTaken when this bridge no longer holds its client id's session."""
        if self._lease is not None and self._lease.lost is not None:
            raise self._lease.lost
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
        return len(rows)

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
            log.info("%s %s is past its expiresAt: not sent", entry.kind, data.command_id)
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
        """Pump until `stop` is set, then disconnect. While the server cannot be reached it
        retries, waiting up to 5 s between tries; what it had read stays pending. A slot
        that moved or is being moved (`a_move`: a TRYAGAIN too) is said once at info, and
        a server that cannot be reached once at warning, until a pump goes through (it was
        said at every try: a reshard stuck half way, ASK for as long as it lasts, said so
        every 5 s; and a TRYAGAIN was said at warning as the server being unreachable)."""
        backoff = 0.1
        said: set[bool] = set()  # what was said since the last pump that went through: moved?
        try:
            while not stop.is_set():
                try:
                    self.pump(block_ms)
                    backoff = 0.1
                    said.clear()
                except Exception as e:
                    if not unreachable(e):
                        raise
                    self.store.refresh_routes()  # a cluster's slot may have moved
                    moved = a_move(e)  # routine: the node answered (a failover, a reshard)
                    if moved not in said:
                        said.add(moved)
                        if moved:
                            log.info("%s", moving_reason(e, slot_of(self.topics.scope)))
                        else:
                            log.warning(
                                "the server cannot be reached (%s); retrying",
                                unreachable_reason(e),
                            )
                    self.store.wait_out(stop, backoff)  # a cluster's failover ends it
                    backoff = min(backoff * 2, 5.0)
        finally:
            self.close()

    # -- incoming (the network thread)

    def _incoming(self, msg: Received) -> bool:
        """Map a response or an event; True when it may be acknowledged (written, or not
        usable: a bad message is dropped with a warning, not redelivered for ever). One that
        cannot be written now is held for `pump` (False: not acknowledged yet), and so is
        one that comes while others are held: messages are written, and acknowledged, in
        the order they came (an answer before the event it led to)."""
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
                    self._said_held(msg.topic, e, slot_of(self.topics.scope))
                self._unwritten.append((self._conn.generation, msg))
            return False
        return True

    @staticmethod
    def _said_held(topic: str, error: Exception, slot: int) -> None:
        """Say why a message is held: a slot that moved or is being moved (`a_move`: a
        MOVED, an ASK, a TRYAGAIN; the node answered: a failover or a reshard) is routine,
        said at info as the worker says it; a server that cannot be reached is said at
        warning."""
        if a_move(error):
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


# --------------------------------------------------------------------------- the device


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


@dataclass
class MqttDevice:
    """Equipment on MQTT that answers from a dry-run script (docs/mqtt.md, "The device").

    It subscribes to the commands and notices of a scope, asks the script once per command
    id (`ScriptAnswers`: deduplicated, dropped past `expiresAt`, counted per job), and
    answers after the reply's delay (times `time_scale`) from the command's `time`, on the
    Response Topic with the command id as Correlation Data. A wait is answered with an
    event on the event topic. A hold for an action whose work it has not received answers `notHeld`.
    `seen_ids` lists the last SEEN_IDS command ids received, copies included, in order.
    """

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

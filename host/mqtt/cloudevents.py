"""CloudEvents over MQTT 5 (docs/mqtt.md): commands and notices to messages, responses and
events to work entries, and the device's replies. Pure: no I/O, no clock."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from msgspec import UNSET

from generated.equipment_entry_v1_0 import AwaitData, AwaitSelector, CommandData, WithdrawData
from generated.work_entry_v1_0 import AnswerData, EventData
from host import keys
from host.entries import encode
from host.equipment import answer_data, event_data
from host.mqtt.topics import Topics
from sfc.simulation import Reply

SPECVERSION = "1.0"
JSON = "application/json"
CLOUDEVENTS = "application/cloudevents"
"""The Content Type prefix of structured mode (`application/cloudevents+json`)."""
DEVICE_SOURCE = "sfc-device"
"""The CloudEvents source of the device simulator's responses and events."""
COMMAND_KINDS = ("push", "hold", "restart")
NOTICE_KINDS = ("await", "withdraw")


class MessageError(ValueError):
    """An MQTT message that is not a usable CloudEvent; the message says why."""


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
    if data.qualifier is not UNSET:  # absent for N
        attributes["sfcqualifier"] = data.qualifier
    if data.stop_at is not UNSET:
        attributes["sfcstopat"] = str(data.stop_at)
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
    """(outcome, error) of a response or an event: an error when the type ends in `.error`
    (with `error_type`) or the data is an object with `error` (its text: `error` or
    `message`); else the data's `outcome`, a JSON string, a text, or None."""
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

    def cloudevent(self) -> CloudEvent:
        """The CloudEvent it carries; MessageError when it is not one."""
        return read_cloudevent(self.payload, self.content_type, self.user_properties)

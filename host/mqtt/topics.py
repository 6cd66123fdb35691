"""The broker URL, the topic layout of a scope and the shared subscriptions' names (pure)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from generated.equipment_entry_v1_0 import CommandData
from host import keys

DEFAULT_PREFIX = "sfc"
DEFAULT_GROUP = "sfc-mqtt"
DEFAULT_COMMAND_TOPIC = "{prefix}/{scope}/commands/{typeId}"
CLIENT_ID_LIMIT = 128
_WILDCARDS = frozenset("+#\x00")


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
    """The share name of `group`'s subscription to `topic_filter`, `{group}-{what}-` and 8
    hex digits of the filter's sha256: one per filter, as rumqttd keys a share by name."""
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

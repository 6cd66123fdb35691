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
  response becomes `respond`, an event `publish_event`. The MQTT message is acknowledged
  after the work entry was written.
- **The device.** `MqttDevice` answers commands and waits from a dry-run script as
  equipment would, asking the script as the scripted equipment does
  (`host.scripted.ScriptAnswers`).

The modules:

- `topics`: the broker URL, a scope's topics and the share names (pure);
- `cloudevents`: the mapping between entries and CloudEvents (pure);
- `connection`: paho's client and its network thread (the only module importing paho);
- `lease`: a bridge's hold on its client id, through the server;
- `bridge`: `MqttBridge`; `device`: `MqttDevice`.

This package re-exports the pure parts and the lease, which need no paho; import
`MqttBridge`, `MqttDevice` and `Connection` from their modules (paho is the `mqtt` extra).
"""

from host.mqtt.cloudevents import (
    CLOUDEVENTS,
    COMMAND_KINDS,
    DEVICE_SOURCE,
    JSON,
    NOTICE_KINDS,
    SPECVERSION,
    CloudEvent,
    Message,
    MessageError,
    Received,
    binary_message,
    command_event,
    command_message,
    command_of,
    command_parts,
    event_of,
    expiry_seconds,
    notice_message,
    outcome_of,
    read_cloudevent,
    reply_event,
    response_answer,
    rfc3339,
    source_of,
    structured,
    wait_event,
)
from host.mqtt.lease import LEASE_TTL_MS, ClientIdTaken, ClientLease
from host.mqtt.topics import (
    CLIENT_ID_LIMIT,
    DEFAULT_COMMAND_TOPIC,
    DEFAULT_GROUP,
    DEFAULT_PREFIX,
    BrokerURL,
    Topics,
    check_group,
    parse_broker_url,
    share_name,
    shared,
    topic_problem,
)

__all__ = [
    "CLIENT_ID_LIMIT",
    "CLOUDEVENTS",
    "COMMAND_KINDS",
    "DEFAULT_COMMAND_TOPIC",
    "DEFAULT_GROUP",
    "DEFAULT_PREFIX",
    "DEVICE_SOURCE",
    "JSON",
    "LEASE_TTL_MS",
    "NOTICE_KINDS",
    "SPECVERSION",
    "BrokerURL",
    "ClientIdTaken",
    "ClientLease",
    "CloudEvent",
    "Message",
    "MessageError",
    "Received",
    "Topics",
    "binary_message",
    "check_group",
    "command_event",
    "command_message",
    "command_of",
    "command_parts",
    "event_of",
    "expiry_seconds",
    "notice_message",
    "outcome_of",
    "parse_broker_url",
    "read_cloudevent",
    "reply_event",
    "response_answer",
    "rfc3339",
    "share_name",
    "shared",
    "source_of",
    "structured",
    "topic_problem",
    "wait_event",
]

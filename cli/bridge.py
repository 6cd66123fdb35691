"""`sfc bridge mqtt` and `sfc device mqtt`: equipment over MQTT 5 and CloudEvents
(docs/mqtt.md).

`sfc bridge mqtt` is an adapter of the equipment stream: it publishes each push, hold and
restart as a CloudEvent and maps responses and events back to `respond` and
`publish_event`. `sfc device mqtt` is equipment on MQTT that answers from a dry-run script.
Both run until SIGINT or SIGTERM. They need paho-mqtt, the `mqtt` extra, imported when
they run: every other command works without it.
"""

from __future__ import annotations

import importlib.util
import socket
import threading
from pathlib import Path
from typing import Annotated

import typer

from cli.equipment import read_host_script
from cli.hostcommon import (
    DataDirOption,
    RedisOption,
    ScopeOption,
    adapter_logs,
    check_scope,
    fail,
    open_store,
    warn_unregistered,
    watch_found_server,
)
from cli.hostcommon import server_errors as server_errors
from cli.main import app
from host import facade
from host.keys import KeyError_, check_name
from host.mqtt import (
    CLIENT_ID_LIMIT,
    DEFAULT_COMMAND_TOPIC,
    DEFAULT_GROUP,
    DEFAULT_PREFIX,
    BrokerURL,
    ClientIdTaken,
    Topics,
    check_group,
    parse_broker_url,
)
from host.serve import stop_on_signals
from host.settings import SettingsError, duration_ms
from host.worker import consumer_name

MAX_SESSION_EXPIRY_S = 2**32 - 1

bridge_app = typer.Typer(
    name="bridge",
    help="Adapters of the equipment stream: `sfc bridge mqtt`.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(bridge_app, name="bridge")
device_app = typer.Typer(
    name="device",
    help="Simulated equipment: `sfc device mqtt`.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(device_app, name="device")

BrokerOption = Annotated[
    str,
    typer.Option(
        "--broker",
        metavar="URL",
        help="The MQTT 5 broker: mqtt://HOST:PORT or mqtts:// (TLS), with user:password@.",
        show_default=False,
    ),
]
PrefixOption = Annotated[
    str, typer.Option("--topic-prefix", metavar="P", help="The first topic level.")
]
CommandTopicOption = Annotated[
    str,
    typer.Option(
        "--command-topic",
        metavar="TEMPLATE",
        help="Where commands go: {prefix}, {scope}, {typeId}, {kind} and {job} are replaced.",
    ),
]


NO_PAHO = (
    "the MQTT commands (bridge mqtt, device mqtt) need paho-mqtt, the `mqtt` extra: "
    "pip install 'microdcs-sfc[mqtt]' (in a clone of the repository: uv sync --extra mqtt)"
)


def _needs_paho() -> None:
    """Exit 1 saying how to get paho-mqtt when it is not installed."""
    if importlib.util.find_spec("paho") is None:
        fail(NO_PAHO, 1)


def _broker(url: str) -> BrokerURL:
    try:
        return parse_broker_url(url)
    except ValueError as e:
        fail(f"--broker: {e}", 2)


def _topics(scope: str, prefix: str, command: str) -> Topics:
    try:
        return Topics(scope, prefix, command)
    except ValueError as e:
        fail(str(e), 2)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    stop_on_signals(stop)  # not set in the handler: it could wait for the event's lock
    return stop


@bridge_app.command("mqtt")
def bridge_mqtt(
    broker: BrokerOption,
    topic_prefix: PrefixOption = DEFAULT_PREFIX,
    command_topic: CommandTopicOption = DEFAULT_COMMAND_TOPIC,
    group: Annotated[
        str,
        typer.Option(
            "--group",
            metavar="NAME",
            help="The consumer group on the stream and the shared subscription's group.",
        ),
    ] = DEFAULT_GROUP,
    claim_idle: Annotated[
        str,
        typer.Option(
            "--claim-idle",
            metavar="DURATION",
            help="Claim entries another bridge of the group left pending this long.",
        ),
    ] = "30s",
    client_id: Annotated[
        str | None,
        typer.Option(
            "--client-id",
            metavar="ID",
            help="The MQTT client id, which names the session the broker keeps (by default "
            "sfc-bridge-SCOPE-GROUP-HOSTNAME); each bridge needs its own.",
            show_default=False,
        ),
    ] = None,
    session_expiry: Annotated[
        str,
        typer.Option(
            "--session-expiry",
            metavar="DURATION",
            help="How long the broker keeps the session while the bridge is away: responses "
            "and events sent meanwhile wait for it. 0: a clean session each start.",
        ),
    ] = "1h",
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Bridge the equipment stream to an MQTT 5 broker (CloudEvents), until stopped."""
    _needs_paho()
    from host.mqtt.bridge import MqttBridge

    check_scope(scope)
    url = _broker(broker)
    topics = _topics(scope, topic_prefix, command_topic)
    try:
        check_group(group)
    except ValueError as e:
        fail(f"--group: {e}", 2)
    try:
        idle = duration_ms("--claim-idle", claim_idle)
        expiry_ms = duration_ms("--session-expiry", session_expiry)
    except SettingsError as e:
        fail(str(e), 2)
    expiry_s = -(-expiry_ms // 1000)  # whole seconds, rounded up
    if not 0 <= expiry_s <= MAX_SESSION_EXPIRY_S:
        fail(f"--session-expiry: at most {MAX_SESSION_EXPIRY_S:,} s (MQTT's limit)", 2)
    if client_id is None:
        client_id = f"sfc-bridge-{scope}-{group}-{socket.gethostname()}" if expiry_s else ""
    else:
        try:
            check_name(client_id, "client id", CLIENT_ID_LIMIT)
        except KeyError_ as e:
            fail(f"--client-id: {e}", 2)
    store = open_store(redis, data_dir)
    adapter_logs()
    stop = _stop_on_signals()
    watch_found_server(redis, data_dir, stop, "sfc.bridge")
    with server_errors():
        warn_unregistered(store, scope)  # a mistyped scope: no job's work ever comes
        try:
            bridge = MqttBridge(
                store,
                url,
                topics,
                group=group,
                consumer=consumer_name(),
                claim_idle_ms=idle,
                client_id=client_id,
                session_expiry_s=expiry_s,
            )
        except ValueError as e:
            fail(str(e), 2)
        try:
            bridge.start(stop=stop)  # a stop meanwhile ends the waits for the broker and lease
        except ClientIdTaken as e:
            fail(str(e), 1)
        session = f"session kept {session_expiry}" if expiry_s else "a clean session each start"
        if not stop.is_set():
            typer.echo(
                f"sfc bridge mqtt: scope {scope} <-> {url.redacted()} as group {group}; "
                f"commands on {command_topic.replace('{prefix}', topic_prefix).replace('{scope}', scope)}, "
                f"responses on {topics.responses}, events on {topics.events}; "
                f"client id {bridge.client_id}, {session}",
                err=True,
            )
        try:
            bridge.run(stop)
        except ClientIdTaken as e:
            fail(str(e), 1)
    c = bridge.counters
    typer.echo(
        f"sfc bridge mqtt: stopped; {c.published} published (commands and notices), "
        f"{c.expired} expired (not sent), "
        f"{c.claimed} claimed, {c.responses} response(s), {c.events} event(s)",
        err=True,
    )
    facade.close(store)


@device_app.command("mqtt")
def device_mqtt(
    broker: BrokerOption,
    script: Annotated[
        Path | None,
        typer.Option(
            "--script",
            metavar="SCRIPT",
            help="The replies (dry-run script format, replies and default only); every "
            "command answers ok without one.",
            show_default=False,
        ),
    ] = None,
    topic_prefix: PrefixOption = DEFAULT_PREFIX,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale", metavar="F", min=0.0, help="Multiply every scripted delay by F."
        ),
    ] = 1.0,
    scope: ScopeOption = "default",
) -> None:
    """Equipment on MQTT that answers commands and waits from a script, until stopped."""
    _needs_paho()
    from host.mqtt.device import MqttDevice

    check_scope(scope)
    url = _broker(broker)
    topics = _topics(scope, topic_prefix, DEFAULT_COMMAND_TOPIC)
    parsed = read_host_script(script)
    adapter_logs()
    stop = _stop_on_signals()
    device = MqttDevice(url, topics, parsed, time_scale=time_scale, client_id=consumer_name())
    device.start(stop=stop)  # a stop meanwhile ends the wait for the broker: nothing to say
    if device.ready:
        typer.echo(
            f"sfc device mqtt: answering {topics.commands_filter} on {url.redacted()}", err=True
        )
    elif not stop.is_set():
        typer.echo(
            f"sfc device mqtt: not connected to {url.redacted()} yet; it keeps trying, and "
            f"answers {topics.commands_filter} once connected",
            err=True,
        )
    device.run(stop)
    c = device.counters
    typer.echo(f"sfc device mqtt: stopped; {c.received} received, {c.answered} answered", err=True)

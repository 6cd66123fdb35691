"""Equipment over MQTT 5 and CloudEvents (docs/mqtt.md): the pure mapping, then end to end
with a real MQTT 5 broker (rumqttd from the `iotcore` wheel), a real Valkey, stepped
workers, bridges and the device simulator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis

from generated.command_v1_0 import CancelWork
from generated.equipment_entry_v1_0 import AwaitData, AwaitSelector, CommandData, WithdrawData
from host import jobs, keys
from host.mqtt import (
    JSON,
    BrokerURL,
    ClientIdTaken,
    ClientLease,
    CloudEvent,
    Message,
    MessageError,
    Topics,
    binary_message,
    command_message,
    command_of,
    command_parts,
    event_of,
    expiry_seconds,
    notice_message,
    parse_broker_url,
    read_cloudevent,
    reply_event,
    response_answer,
    rfc3339,
    structured,
)
from host.mqtt.bridge import MqttBridge
from host.mqtt.connection import Connection
from host.mqtt.device import MqttDevice
from host.scripted import load_host_script
from host.server import held_port
from host.store import Store
from sfc.builder import build
from sfc.simulation import Reply, Simulation, load_script
from tests.hostkit import Host, linear_recipe, wait_for

ROOT = Path(__file__).resolve().parent.parent
TIGHTENING = (ROOT / "examples/tightening-hold/recipe.json").read_bytes()

# --------------------------------------------------------------------------- the mapping

CMD = CommandData(
    command_id="j-1:a1#1",
    action_key="j-1:a1",
    job="j-1",
    type_id="com.example.step1.v1",
    attempt=1,
    round=1,
    deadline=1_700_000_030_000,
    expires_at=1_700_000_028_000,
    parameters={"n": 1},
)


def test_broker_urls() -> None:
    assert parse_broker_url("mqtt://localhost") == BrokerURL("localhost", 1883)
    url = parse_broker_url("mqtts://op%40x:s3cret@broker.example:8884")
    assert url == BrokerURL("broker.example", 8884, True, "op@x", "s3cret")
    assert url.redacted() == "mqtts://op@x:***@broker.example:8884"
    for bad in ("http://x", "mqtt://", "mqtt://x:99999", "mqtt://x/path"):
        with pytest.raises(ValueError):
            parse_broker_url(bad)


def test_a_command_is_a_binary_mode_cloudevent_with_the_mqtt_properties() -> None:
    topics = Topics("plant", "P")
    m = command_message(topics, "push", CMD, 1_700_000_000_000, 1_700_000_000_500)
    assert m is not None
    assert m.topic == "P/plant/commands/com.example.step1.v1"
    assert json.loads(m.payload) == {"n": 1}
    assert m.content_type == "application/json"
    assert dict(m.user_properties) == {
        "specversion": "1.0",
        "id": "j-1:a1#1",
        "source": "/sfc/plant",
        "type": "com.example.step1.v1",
        "subject": "j-1:a1",
        "time": "2023-11-14T22:13:20.000Z",
        "sfckind": "push",
        "sfcjob": "j-1",
        "sfcattempt": "1",
        "sfcround": "1",
        "sfcdeadline": "1700000030000",
        "sfcexpiresat": "1700000028000",
    }
    assert m.response_topic == "P/plant/responses"
    assert m.correlation_data == b"j-1:a1#1"
    assert m.expiry_s == 28  # 27.5 s left, rounded up
    # past its expiresAt it is not sent
    assert command_message(topics, "push", CMD, 0, CMD.expires_at) is None
    assert expiry_seconds(1000, 999) == 1 and expiry_seconds(1000, 1000) is None
    templated = Topics("plant", "P", "{prefix}/{kind}/{job}/{typeId}")
    m2 = command_message(templated, "hold", CMD, 0, 0)
    assert m2 is not None and m2.topic == "P/hold/j-1/com.example.step1.v1"
    with pytest.raises(ValueError):
        Topics("plant", "P", "{nope}")
    with pytest.raises(ValueError):
        Topics("plant", "a/#")


def test_the_device_reads_back_what_the_bridge_sends() -> None:
    topics = Topics("plant")
    m = command_message(topics, "hold", CMD, 0, 0)
    assert m is not None
    event = read_cloudevent(m.payload, m.content_type, m.user_properties)
    assert command_of(event) == ("hold", CMD)
    wait = AwaitData(
        command_id="j-1:qa#2",
        action_key="j-1:qa",
        job="j-1",
        type_id="com.example.qa.v1",
        attempt=1,
        round=1,
        deadline=10_000,
        expires_at=9_000,
        parameters={},
        selector=AwaitSelector(subject="line/j-1", correlation_id=None),
    )
    n = notice_message(topics, "await", wait, 0, 0)
    assert n is not None and n.topic == "sfc/plant/notices/com.example.qa.v1"
    kind, back = command_of(read_cloudevent(n.payload, n.content_type, n.user_properties))
    assert kind == "await" and back == wait


def test_binary_and_structured_mode_are_told_apart_by_the_content_type() -> None:
    attrs = {"specversion": "1.0", "id": "e1", "source": "dev", "type": "t.response"}
    binary = read_cloudevent(b'{"outcome":"ok"}', "application/json", list(attrs.items()))
    assert binary == CloudEvent(attrs, b'{"outcome":"ok"}', "application/json")
    doc = structured(binary)
    back = read_cloudevent(doc, "application/cloudevents+json")
    assert back.attributes == attrs and json.loads(back.data) == {"outcome": "ok"}
    with pytest.raises(MessageError, match="no id"):
        read_cloudevent(b"", None, [("specversion", "1.0"), ("source", "s"), ("type", "t")])
    with pytest.raises(MessageError):
        read_cloudevent(b"[1]", "application/cloudevents+json")


def _response(data: bytes, type_: str = "t.response", ctype: str = "application/json") -> Any:
    attrs = {"specversion": "1.0", "id": "r", "source": "dev", "type": type_}
    return CloudEvent(attrs | {"sfcround": "2"}, data, ctype)


def test_a_response_is_an_answer_and_an_error_event_is_an_error() -> None:
    a = response_answer(_response(b'{"outcome":"torqued"}'), b"my:job:a1#7")
    assert (a.job, a.action_key, a.command_id, a.outcome, a.round) == (
        "my:job",
        "my:job:a1",
        "my:job:a1#7",
        "torqued",
        2,
    )
    assert response_answer(_response(b'"ok"'), b"j:a#1").outcome == "ok"
    assert response_answer(_response(b"ok", ctype="text/plain"), b"j:a#1").outcome == "ok"
    assert response_answer(_response(b""), b"j:a#1:hold").command_id == "j:a#1:hold"
    err = response_answer(_response(b'{"error":"jammed"}', "t.error"), b"j:a#1")
    assert err.error == "jammed" and err.outcome is msgspec.UNSET
    assert response_answer(_response(b"", "t.error"), b"j:a#1").error == ""
    with pytest.raises(MessageError):
        response_answer(_response(b'{"outcome":"ok"}'), None)
    with pytest.raises(MessageError):
        command_parts("no-command-id")
    # digits that are not ASCII ("²" passes str.isdigit, and int refuses it), or too many
    for bad in ("j:a#²", "j:a#١"):
        with pytest.raises(MessageError, match="not a command id"):
            command_parts(bad)
    attrs = {"specversion": "1.0", "id": "r", "source": "dev", "type": "t.response"}
    for round_text in ("²", "0", "1" * 5000, "-1"):
        event = CloudEvent(attrs | {"sfcround": round_text}, b'"ok"', "application/json")
        with pytest.raises(MessageError, match="not a round number"):
            response_answer(event, b"j:a#1")


def test_an_event_keeps_type_subject_correlation_source_and_id() -> None:
    attrs = {
        "specversion": "1.0",
        "id": "e-9",
        "source": "qa-station",
        "type": "com.example.qa.v1",
        "subject": "line/j-1",
        "correlationid": "c-1",
    }
    ev = event_of(CloudEvent(attrs, b'{"outcome":"qa_ok"}', "application/json"))
    assert (ev.type_id, ev.subject, ev.correlation_id, ev.source, ev.id, ev.outcome) == (
        "com.example.qa.v1",
        "line/j-1",
        "c-1",
        "qa-station",
        "e-9",
        "qa_ok",
    )


def test_a_withdraw_notice_and_an_error_event() -> None:
    gone = WithdrawData(
        command_id="j-1:a1#1", action_key="j-1:a1", job="j-1", type_id="t.v1", reason="held"
    )
    n = notice_message(Topics("s"), "withdraw", gone, 5, 10)
    assert n is not None and n.expiry_s is None and n.topic == "sfc/s/notices/t.v1"
    assert json.loads(n.payload) == {"reason": "held"}
    assert dict(n.user_properties)["id"] == "j-1:a1#1:withdraw"
    attrs = {"specversion": "1.0", "id": "e", "source": "s", "type": "com.example.qa.v1"}
    ev = event_of(CloudEvent(attrs, b'{"error":"camera down"}', "application/json"))
    assert ev.outcome == "error" and ev.type_id == "com.example.qa.v1"
    with pytest.raises(MessageError):
        event_of(CloudEvent(attrs, b"{not json", "application/json"))


def test_the_device_answers_a_hold_it_cannot_place_as_not_held() -> None:
    m = command_message(Topics("s"), "hold", CMD, 0, 0)
    assert m is not None
    cmd = read_cloudevent(m.payload, m.content_type, m.user_properties)
    answer = reply_event(cmd, "j-1:a1#1:hold", None, not_held=True)
    assert response_answer(answer, b"j-1:a1#1:hold").outcome == "notHeld"
    held = reply_event(cmd, "j-1:a1#1:hold", Reply("outcome", outcome="held"))
    assert response_answer(held, b"j-1:a1#1:hold").outcome == "held"


def test_the_device_forgets_the_work_of_jobs_long_gone() -> None:
    """The device remembered every action it received work for, for as long as it ran."""
    import msgspec

    from host.mqtt import Received
    from host.scripted import ASKED_RETENTION_MS, FORGET_EVERY, load_host_script

    now = [1_700_000_000.0]
    topics = Topics("s")
    device = MqttDevice(
        parse_broker_url("mqtt://127.0.0.1:1"), topics, load_host_script(b"{}"),
        clock=lambda: now[0],
    )  # fmt: skip

    def push(job: str, expires_at: int) -> None:
        data = msgspec.structs.replace(
            CMD, command_id=f"{job}:a1#1", action_key=f"{job}:a1", job=job,
            expires_at=expires_at, deadline=expires_at + 2000,
        )  # fmt: skip
        m = command_message(topics, "push", data, 0, 0)
        assert m is not None
        device._ask(Received(m.topic, m.payload, m.content_type, m.user_properties,
                             None, None, 0, 1))  # fmt: skip

    for i in range(FORGET_EVERY - 1):
        push(f"old{i}", int(now[0] * 1000) + 10_000)
    assert len(device._work) == FORGET_EVERY - 1
    now[0] += (ASKED_RETENTION_MS + 60_000) / 1000  # a day and a minute later
    for i in range(FORGET_EVERY):
        push(f"new{i}", int(now[0] * 1000) + 10_000)
    assert "old0:a1" not in device._work and len(device._work) <= FORGET_EVERY, len(device._work)
    device.close()


# --------------------------------------------------------------------------- the broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


BROKER_CONFIG = """\
id = 0

[router]
id = 0
max_connections = 1000
max_outgoing_packet_count = 200
max_segment_size = 104857600
max_segment_count = 10

[v5.1]
name = "v5-1"
listen = "127.0.0.1:{port}"
next_connection_delay_ms = 1
    [v5.1.connections]
    connection_timeout_ms = 60000
    max_payload_size = 1048576
    max_inflight_count = 100

[v5.2]
name = "v5-2"
listen = "127.0.0.1:{auth_port}"
next_connection_delay_ms = 1
    [v5.2.connections]
    connection_timeout_ms = 60000
    max_payload_size = 1048576
    max_inflight_count = 100
    [v5.2.connections.auth]
    op = "s3cret"

[v5.3]
name = "v5-3"
listen = "127.0.0.1:{tls_port}"
next_connection_delay_ms = 1
    [v5.3.tls]
    certpath = "{cert}"
    keypath = "{key}"
    [v5.3.connections]
    connection_timeout_ms = 60000
    max_payload_size = 1048576
    max_inflight_count = 100
"""


@dataclasses.dataclass(frozen=True)
class Listeners:
    """The URLs of the test broker's listeners, and the CA that signed its certificate."""

    open: str
    auth: str
    """Wants the user `op`, password `s3cret`."""
    tls: str
    ca: Path


@pytest.fixture(scope="session")
def mqtt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listeners]:
    """A real MQTT 5 broker (rumqttd, shipped in the `iotcore` wheel), once per session,
    with an open listener, one that wants a password and one with TLS."""
    import trustme
    from iotcore import Broker

    where = tmp_path_factory.mktemp("mqtt")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.private_key_pem.write_to_path(str(where / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
    ca.cert_pem.write_to_path(str(where / "ca.pem"))
    port, auth_port, tls_port = _free_port(), _free_port(), _free_port()
    config = where / "rumqttd.toml"
    config.write_text(
        BROKER_CONFIG.format(
            port=port,
            auth_port=auth_port,
            tls_port=tls_port,
            cert=where / "cert.pem",
            key=where / "key.pem",
        )
    )
    broker = Broker(config_path=str(config))
    broker.start()
    try:
        yield Listeners(
            f"mqtt://127.0.0.1:{port}",
            f"mqtt://127.0.0.1:{auth_port}",
            f"mqtts://localhost:{tls_port}",
            where / "ca.pem",
        )
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def mqtt_url(mqtt_broker: Listeners) -> str:
    return mqtt_broker.open


class Rig:
    """Bridges and devices in threads of their own; stepped workers in the test's thread."""

    def __init__(self, host: Host, url: str, scope: str) -> None:
        self.host, self.url, self.scope = host, parse_broker_url(url), scope
        self.topics = Topics(scope, "t")
        self.threads: list[tuple[threading.Event, threading.Thread, Any]] = []

    def bridge(self, name: str, claim_idle_ms: int = 5000, **kwargs: Any) -> MqttBridge:
        b = MqttBridge(
            self.host.store(),
            self.url,
            self.topics,
            group="g",
            consumer=name,
            claim_idle_ms=claim_idle_ms,
            claim_interval_ms=200,
            **kwargs,
        )
        b.start()
        self._run(b)
        return b

    def device(
        self, script: dict[str, Any] | None = None, name: str = "dev", **kwargs: Any
    ) -> MqttDevice:
        parsed = load_host_script(json.dumps(script or {}).encode())
        d = MqttDevice(self.url, self.topics, parsed, client_id=f"{name}-{self.scope}", **kwargs)
        d.start()
        self._run(d)
        return d

    def _run(self, thing: Any) -> None:
        stop = threading.Event()
        t = threading.Thread(target=thing.run, args=(stop,), daemon=True)
        t.start()
        self.threads.append((stop, t, thing))
        wait_for(lambda: thing.ready, timeout=10, what="the MQTT subscriptions")

    def stop(self, thing: Any) -> None:
        for stop, t, x in self.threads:
            if x is thing:
                stop.set()
                t.join(10)

    def close(self) -> None:
        for stop, _, _ in self.threads:
            stop.set()
        for _, t, _ in self.threads:
            t.join(10)


@pytest.fixture
def rig(host: Host, mqtt_url: str) -> Iterator[Rig]:
    r = Rig(host, mqtt_url, host.scope("mqtt"))
    try:
        yield r
    finally:
        r.close()


def _paths(host: Host, scope: str, ids: list[str]) -> list[str]:
    return [host.order_path(scope, j) for j in ids]


def _pull_recipe() -> bytes:
    doc = json.loads(linear_recipe(2, timeout_s=30))
    doc["Steps"].append({"Name": "Qa"})
    doc["Transitions"].append({"Source": "S2", "Target": "Qa", "Condition": "true"})
    doc["Actions"].append(
        {
            "Name": "qa",
            "Step": "Qa",
            "Qualifier": "N",
            "Interaction": "pull_event",
            "TypeId": "com.example.qa.v1",
            "TimeoutSeconds": 30,
            "Selector": {"Subject": "line1/{jobId}/qa"},
        }
    )
    return json.dumps(doc).encode()


def test_push_and_pull_jobs_complete_through_two_bridges_and_the_device(rig: Rig) -> None:
    host, scope = rig.host, rig.scope
    b1, b2 = rig.bridge("b1"), rig.bridge("b2")
    # the device's error event for `bad` fails that action: its job is aborted
    script = {"default": "ok@20", "replies": {"qa": ["qa_ok"], "bad": ["error:jammed@10"]}}
    device = rig.device(script)
    bad = json.loads(linear_recipe(1))
    bad["Actions"][0]["Name"] = "bad"
    failing = host.submit(scope, json.dumps(bad).encode(), job_id="e").job
    ids = [host.submit(scope, _pull_recipe(), job_id=f"j{i}").job for i in range(6)]
    worker = host.worker([scope])
    host.run([worker], [], host.ended(scope, ids), timeout=30)
    assert _paths(host, scope, ids) == ["Ended/Completed"] * 6
    # both bridges took part, and every command went out once
    assert b1.counters.published > 0 and b2.counters.published > 0
    host.run([worker], [], host.ended(scope, [failing], "Aborted"))
    # (a bridge counts just after it wrote the entry the worker may already have applied)
    wait_for(lambda: b1.counters.responses + b2.counters.responses == 13, timeout=5)
    assert host.order_path(scope, failing).startswith("Aborted")
    said = [h[1][b"data"] for h in host.store().history(scope, failing, 20)]
    assert any(b"bad failed: jammed" in d for d in said), said
    wait_for(lambda: b1.counters.events + b2.counters.events == 6, timeout=5)
    assert Counter(device.seen_ids).most_common(1)[0][1] == 1
    # a duplicate response is absorbed: the same answer again changes nothing
    conn = Connection(rig.url, f"dup-{scope}", [], lambda m: True)
    conn.start()
    assert conn.wait_ready(10)
    # (in structured mode, the command id as `sfccommandid`, as on MQTT 3.1.1)
    attrs = {"specversion": "1.0", "id": "x", "source": "dev", "type": "t.response"}
    again = CloudEvent(attrs | {"sfccommandid": "j0:a1#1"}, b'{"outcome":"other"}', JSON)
    doc = Message(rig.topics.responses, structured(again), "application/cloudevents+json")
    mid = conn.publish(doc)
    assert mid is not None and conn.wait_acked([mid], 10) == {mid}
    conn.close()

    def absorbed() -> bool:
        last = host.store().history(scope, "j0", 1)[0][1][b"data"]
        return b'"disposition":"absorbed"' in last

    host.run([worker], [], absorbed, what="the duplicate's history entry")
    assert host.order_path(scope, "j0") == "Ended/Completed"
    # the bridges stop cleanly
    rig.close()
    assert not b1._conn.connected.is_set()


def test_a_type_id_with_a_wildcard_is_not_sent_and_the_bridge_lives_on(rig: Rig) -> None:
    """The push was skipped, but the withdraw notice of its timeout went to a topic with the
    same type id, paho raised, and every bridge of the group died on that entry in turn."""
    host, scope = rig.host, rig.scope
    bridge = rig.bridge("wild")
    doc = json.loads(linear_recipe(1, timeout_s=1, max_attempts=2))
    doc["Actions"][0]["TypeId"] = "com.example.a+b.v1"
    job = host.submit(scope, json.dumps(doc).encode(), job_id="w").job
    host.run([host.worker([scope])], [], host.ended(scope, [job], "Aborted"), timeout=20)
    assert host.order_path(scope, job) == "Aborted"  # both attempts timed out
    wait_for(lambda: _pending_of(host, scope, "") == 0, timeout=10, what="every entry acked")
    (thread,) = [t for _, t, x in rig.threads if x is bridge]
    assert thread.is_alive()
    assert bridge.counters.skipped >= 3  # two pushes and the withdraw between them
    assert bridge.counters.published == 0


def test_a_command_past_its_expiry_is_not_delivered(rig: Rig) -> None:
    host, scope = rig.host, rig.scope
    # TimeoutSeconds 2: expiresAt is half the attempt's time after it was sent (1 s)
    job = host.submit(scope, linear_recipe(1, timeout_s=2, max_attempts=5), job_id="x").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: len(host.equipment(scope)) >= 1, sweep=False)
    first = host.equipment(scope)[0][2]
    wait_for(lambda: host.store().time_ms() > first.expires_at, timeout=5, what="expiry")
    device = rig.device()
    bridge = rig.bridge("late")
    host.run([worker], [], host.ended(scope, [job]), timeout=20)
    assert host.order_path(scope, job) == "Ended/Completed"
    assert bridge.counters.expired >= 1
    assert device.seen_ids and first.command_id not in device.seen_ids  # a later attempt's
    # and the broker drops a published command whose Message Expiry passed while the
    # receiver was away (a persistent session)
    got: list[str] = []

    def away() -> Connection:
        return Connection(
            rig.url,
            f"away-{scope}",
            [f"t/{scope}/away"],
            lambda m: got.append(m.payload.decode()) is None,
            clean_start=False,
            session_expiry_s=60,
            manual_ack=False,
        )

    sub = away()
    sub.start()
    assert sub.wait_ready(10)
    sub.close()
    pub = Connection(rig.url, f"pub-{scope}", [], lambda m: True)
    pub.start()
    assert pub.wait_ready(10)
    event = CloudEvent({"specversion": "1.0", "id": "1", "source": "s", "type": "t"})
    for text, expiry in (("gone", 1), ("kept", 60)):
        msg = binary_message(f"t/{scope}/away", CloudEvent(event.attributes, text.encode()))
        mid = pub.publish(dataclasses.replace(msg, expiry_s=expiry))
        assert mid is not None and pub.wait_acked([mid], 10) == {mid}
    pub.close()
    time.sleep(2.1)  # the one place that waits for time itself: the expiry to pass
    sub = away()  # the same client id: the session the broker kept
    sub.start()
    wait_for(lambda: bool(got), timeout=10, what="the kept message")
    sub.close()
    assert got == ["kept"]


def test_the_commands_expired_in_the_streams_history_are_logged_in_one_line(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A bridge's first start reads the stream's history: it logged one INFO line per
    command past its expiresAt (147 lines seen). They are summed up in one line."""
    from host.entries import fields

    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    host, scope = rig.host, rig.scope
    client = host.client()
    past = host.store().time_ms() - 3_600_000
    for n in range(147):
        kind = "hold" if n % 21 == 10 else "push"
        job = f"old-{n}"
        data = CommandData(
            command_id=f"{job}:a#1" + (":hold" if kind == "hold" else ""),
            action_key=f"{job}:a",
            job=job,
            type_id="t.x",
            attempt=1,
            round=1,
            deadline=past + n * 1000,
            expires_at=past + n * 1000,
            parameters={},
        )
        client.xadd(keys.equipment(scope), fields(kind, data))

    def expiry_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "past" in r.getMessage()]

    bridge = rig.bridge("history")
    wait_for(lambda: bridge.counters.expired == 147, timeout=20, what="the history read")
    wait_for(lambda: bool(expiry_lines()), timeout=10, what="the summary")
    assert bridge.counters.published == 0
    (line,) = expiry_lines()
    first, last = rfc3339(past), rfc3339(past + 146_000)
    assert line == (
        f"147 entries of {scope} past their expiresAt were not sent (hold 7, push 140): "
        f"from old-0:a#1 to old-146:a#1, expired {first} to {last}"
    )
    # one that expires later is said as ever, on its own
    late = CommandData(
        command_id="late:a#1", action_key="late:a", job="late", type_id="t.x", attempt=1,
        round=1, deadline=past, expires_at=past, parameters={},
    )  # fmt: skip
    client.xadd(keys.equipment(scope), fields("push", late))
    wait_for(lambda: len(expiry_lines()) == 2, timeout=10, what="the late one")
    assert expiry_lines()[1] == "push late:a#1 is past its expiresAt: not sent"


def test_pause_and_resume_with_equipment_hold_over_mqtt(rig: Rig) -> None:
    host, scope = rig.host, rig.scope
    store = host.store()
    rig.bridge("b1")
    rig.bridge("b2")
    device = rig.device(
        {
            "default": "ok@20",
            "replies": {
                "tighten": ["ok@60000"],
                "tighten:hold": ["held@50"],
                "tighten:restart": ["ok@50"],
            },
        }
    )
    job = host.submit(scope, TIGHTENING, job_id="t").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: "t:tighten#2" in device.seen_ids)
    assert jobs.pause(store, scope, job).ok

    def kinds() -> list[tuple[str, str]]:
        return [(k, d.command_id) for _, k, d in host.equipment(scope)]

    host.run([worker], [], lambda: ("withdraw", "t:tighten#2") in kinds(), what="held")
    assert jobs.resume(store, scope, job).ok
    host.run([worker], [], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"
    assert [c for k, c in kinds() if k in ("push", "hold", "restart")] == [
        "t:clamp#1",
        "t:tighten#2",
        "t:tighten#3:hold",
        "t:tighten#4",
        "t:unclamp#5",
    ]


def test_a_hold_that_overtakes_its_work_is_not_held_and_the_work_runs_on(rig: Rig) -> None:
    host, scope = rig.host, rig.scope
    store = host.store()
    device = rig.device({"default": "ok@20", "replies": {"tighten": ["ok@300"]}})
    job = host.submit(scope, TIGHTENING, job_id="t").job
    worker = host.worker([scope])
    b1 = rig.bridge("b1")
    host.run([worker], [], lambda: any(c == "t:clamp#1" for _, _, c in _commands(host, scope)))
    # b1 relays clamp's push and its answer while the worker does not run, then stops: the
    # push of tighten comes after it (stepping the worker until the device had seen clamp
    # let the worker apply the answer in the same steps, and b1 sent tighten's push too)
    wait_for(
        lambda: "t:clamp#1" in device.seen_ids and host.client().xlen(keys.work(scope)) > 0,
        what="clamp's answer relayed",
    )
    rig.stop(b1)
    # b1 stalls after reading the push of tighten: the entry stays pending with it
    stalled = host.store()
    host.run([worker], [], lambda: any(c == "t:tighten#2" for _, _, c in _commands(host, scope)))
    rows = stalled.read_equipment(scope, "g", "b1", 10, None)
    assert [r for r in rows if b"t:tighten#2" in r[1][b"data"]]
    assert jobs.pause(store, scope, job).ok
    # b2 sends the hold first: the device does not know the work and says notHeld
    b2 = rig.bridge("b2", claim_idle_ms=1500)
    host.run([worker], [], lambda: device.counters.not_held == 1, what="notHeld")
    assert "t:tighten#2" not in device.seen_ids
    # b2 claims the stalled push after the idle time; the work runs on and completes
    assert jobs.resume(store, scope, job).ok
    host.run([worker], [], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"
    assert b2.counters.claimed >= 1
    assert device.seen_ids.index("t:tighten#3:hold") < device.seen_ids.index("t:tighten#2")


def _commands(host: Host, scope: str) -> list[tuple[str, str, str]]:
    return [(i, k, d.command_id) for i, k, d in host.equipment(scope)]


def _consumers(host: Host, scope: str) -> int:
    r = host.client()
    if not r.exists(keys.equipment(scope)):
        return 0
    return sum(int(g["consumers"]) for g in r.xinfo_groups(keys.equipment(scope)))


def _sent_for(host: Host, scope: str, job: str) -> Any:
    return lambda: any(c.startswith(f"{job}:") for *_, c in _commands(host, scope))


def _pending_of(host: Host, scope: str, prefix: str) -> int:
    rows: Any = host.client().xpending_range(keys.equipment(scope), "g", "-", "+", 1000)
    return sum(1 for r in rows if r["consumer"].decode().startswith(prefix))


def _sfc(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cli.main import app; import cli.commands; app(prog_name='sfc')",
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_line(proc: subprocess.Popen[bytes], text: str, timeout: float = 20) -> bytes:
    """Read the process's stderr until a line holds `text`; what was read."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, f"no {text!r} on stderr: {seen.decode()}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 4096)
    return seen


def _stopped(proc: subprocess.Popen[bytes], sig: int, before: bytes = b"") -> str:
    """Send `sig`, wait for the exit; its stderr. A clean stop exits 0."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = (before + err).decode()
    assert proc.returncode == 0, text
    return text


def test_the_commands_run_a_job_and_stop_cleanly(host: Host, mqtt_url: str, tmp_path: Path) -> None:
    scope = host.scope("cli")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": "ok@10"}))
    common = ["--broker", mqtt_url, "--topic-prefix", "c", "--scope", scope]
    bridge = _sfc("bridge", "mqtt", *common, "--redis", host.url)
    device = _sfc("device", "mqtt", *common, "--script", str(script))
    said_b = said_d = b""
    try:
        said_b = _wait_line(bridge, "sfc bridge mqtt: scope")
        said_d = _wait_line(device, "sfc device mqtt: answering")
        job = host.submit(scope, linear_recipe(2), job_id="c1").job
        worker = host.worker([scope])
        host.run([worker], [], host.ended(scope, [job]), timeout=30)
        assert host.order_path(scope, job) == "Ended/Completed"
    finally:
        err_b = _stopped(bridge, signal.SIGTERM, said_b)
        err_d = _stopped(device, signal.SIGINT, said_d)
    assert "sfc bridge mqtt: stopped; 2 published" in err_b
    # a session the broker keeps, named after the scope, the group and the host
    kept = f"client id sfc-bridge-{scope}-sfc-mqtt-{socket.gethostname()}, session kept 1h"
    assert kept in err_b, err_b
    assert "2 response(s)" in err_b
    assert "sfc device mqtt: stopped; 2 received, 2 answered" in err_d


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_bridge_stops_at_once_while_its_broker_is_away_and_gives_its_client_id_up(
    host: Host, sig: int
) -> None:
    """A stop while the broker could not be reached waited out start's 10 s for the
    connection (then logged 'not connected ... yet'), and one while another bridge held the
    client id waited out the hold and exited 1; a restarted bridge waited for the lease
    meanwhile."""
    scope = host.scope("away")
    client_id = f"away-{scope}-{int(sig)}"
    away = f"mqtt://127.0.0.1:{_free_port()}"  # nothing listens there
    common = ["--broker", away, "--scope", scope, "--redis", host.url, "--client-id", client_id]
    bridge = _sfc("bridge", "mqtt", *common)
    said = _wait_line(bridge, "cannot be reached")
    held = host.client().get(keys.mqtt_client(client_id))
    assert held is not None and held.decode().startswith(f"{socket.gethostname()}-{bridge.pid}-")
    err = _stopped(bridge, sig, said)
    assert "not connected" not in err and "sfc bridge mqtt: scope" not in err, err
    assert "sfc bridge mqtt: stopped; 0 published" in err
    assert not host.client().exists(keys.mqtt_client(client_id))  # given up: no wait next
    # one that waits for a client id another (live) bridge holds stops as soon
    store = host.store()
    assert store.lease(keys.mqtt_client(client_id), "other", 60_000) is None
    waiting = _sfc("bridge", "mqtt", *common)
    said = _wait_line(waiting, f"the MQTT client id {client_id} is held by other")
    err = _stopped(waiting, sig, said)
    assert "held by another bridge" not in err and "cannot be reached" not in err, err
    assert store.lease(keys.mqtt_client(client_id), "other", 0) is None  # still the other's
    store.close()
    device = _sfc("device", "mqtt", "--broker", away, "--scope", scope)  # so does the device
    said = _wait_line(device, "cannot be reached")
    err = _stopped(device, sig, said)
    assert "not connected" not in err and "sfc device mqtt: stopped; 0 received" in err, err


@contextlib.contextmanager
def _stalled_listener() -> Iterator[int]:
    """A port on 127.0.0.1 whose connects hang, as to a broker host that does not answer:
    a listener with no room left in its queue (one connection fills it), whose SYNs the
    kernel drops. Its port."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        port: int = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            yield port


def _connecting_to(port: int) -> bool:
    """Whether a TCP connect to 127.0.0.1:`port` is under way (SYN_SENT, /proc/net/tcp)."""
    remote = f"0100007F:{port:04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(r.split()[2] == remote and r.split()[3] == "02" for r in rows)


def test_a_close_gives_up_a_connect_under_way(mqtt_url: str) -> None:
    """paho waits its connect timeout (5 s) for a broker host that does not answer, on the
    network thread that close joins: a stop meanwhile waited it out. Here paho's timeout is
    600 s, so only a connect that looks at the stop lets close return by the deadline."""
    with _stalled_listener() as port:
        conn = Connection(parse_broker_url(f"mqtt://127.0.0.1:{port}"), "stalled", ["s/#"], bool)
        conn.client.connect_timeout = 600
        conn.start()
        wait_for(lambda: _connecting_to(port), timeout=10, what="the connect to be under way")
        closer = threading.Thread(target=conn.close, daemon=True)
        closer.start()
        wait_for(lambda: not closer.is_alive(), timeout=10, what="the close")
        assert not _connecting_to(port)  # given up, not left behind
        assert not conn.connected.is_set()
    # the connection does not stay stopped: it connects again after a suspend and resume
    conn = Connection(parse_broker_url(mqtt_url), "resumed", ["s/#"], bool)
    conn.start()
    assert conn.wait_ready(10)
    conn.suspend()
    conn.resume()
    assert conn.wait_ready(10)
    conn.close()


def test_a_bridge_stopped_while_it_connects_stops_at_once_and_loses_nothing(rig: Rig) -> None:
    """A bridge whose broker's host does not answer is stopped while it connects: `run`
    returns by the deadline (paho's own connect would hold it 600 s here), nothing was read,
    and the command waits for the next bridge of the group."""
    host, scope = rig.host, rig.scope
    job = host.submit(scope, linear_recipe(1), job_id="s").job
    worker = host.worker([scope])
    host.run([worker], [], _sent_for(host, scope, job), what="the push")
    with _stalled_listener() as port:
        broker = parse_broker_url(f"mqtt://127.0.0.1:{port}")
        bridge = MqttBridge(host.store(), broker, rig.topics, group="g", consumer="stalled")
        bridge._conn.client.connect_timeout = 600
        stop = threading.Event()

        def serve() -> None:
            bridge.start(stop=stop)
            bridge.run(stop)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        wait_for(lambda: _connecting_to(port), timeout=10, what="the connect to be under way")
        stop.set()
        wait_for(lambda: not t.is_alive(), timeout=10, what="the bridge to stop")
    assert bridge.counters.read == 0
    rig.bridge("next")
    rig.device()
    host.run([worker], [], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"


def test_the_bridge_command_exits_0_on_sigterm_while_it_connects(host: Host) -> None:
    scope = host.scope("stalled")
    client_id = f"stalled-{scope}"
    with _stalled_listener() as port:
        bridge = _sfc(
            "bridge", "mqtt", "--broker", f"mqtt://127.0.0.1:{port}", "--scope", scope,
            "--redis", host.url, "--client-id", client_id,
        )  # fmt: skip
        try:
            wait_for(lambda: _connecting_to(port), timeout=20, what="the connect")
        finally:
            err = _stopped(bridge, signal.SIGTERM)
    assert "sfc bridge mqtt: stopped; 0 published" in err, err
    assert "cannot be reached" not in err and "not connected" not in err, err
    assert not host.client().exists(keys.mqtt_client(client_id))  # given up


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--session-expiry", "5x"], "--session-expiry='5x' is not a duration"),
        (["--session-expiry", "60000d"], "--session-expiry: at most 4,294,967,295 s"),
        (["--client-id", "a b"], "--client-id: the client id 'a b' contains ' '"),
        (["--client-id", ""], "--client-id: the client id is empty"),
        (["--group", ""], "the group '' may not be empty, or hold /, + or #"),
        (["--group", "a/b"], "the group 'a/b' may not be empty, or hold /, + or #"),
    ],
)
def test_bad_bridge_options_exit_2_before_connecting(
    mqtt_url: str, args: list[str], said: str
) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    r = CliRunner().invoke(
        app, ["bridge", "mqtt", "--broker", mqtt_url, "--redis", "redis://127.0.0.1:1", *args]
    )
    assert r.exit_code == 2, r.output
    assert said in r.output, r.output


def test_a_killed_bridge_loses_nothing(rig: Rig, mqtt_url: str) -> None:
    host, scope = rig.host, rig.scope
    device = rig.device({"default": "ok@10"})
    proc = _sfc(
        "bridge",
        "mqtt",
        "--broker",
        mqtt_url,
        "--topic-prefix",
        "t",
        "--group",
        "g",
        "--claim-idle",
        "1s",
        "--scope",
        scope,
        "--redis",
        host.url,
    )
    prefix = f"{socket.gethostname()}-{proc.pid}-"
    try:
        _wait_line(proc, "sfc bridge mqtt: scope")
        b2 = rig.bridge("b2", claim_idle_ms=1000)
        worker = host.worker([scope])
        ids: list[str] = []
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "the subprocess bridge never held an entry"
            os.kill(proc.pid, signal.SIGSTOP)  # frozen, most likely inside XREADGROUP BLOCK
            # a response the broker handed to the frozen bridge dies with it: the engine
            # sends that command again after its 4 s timeout
            recipe = linear_recipe(3, timeout_s=4, max_attempts=5)
            job = host.submit(scope, recipe, job_id=f"k{len(ids)}").job
            ids.append(job)
            host.run([worker], [], _sent_for(host, scope, job))
            time.sleep(0.05)  # the server hands a new entry to a blocked reader at once
            if _pending_of(host, scope, prefix):
                break
            os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        host.run([worker], [], host.ended(scope, ids), timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
    assert _paths(host, scope, ids) == ["Ended/Completed"] * len(ids)
    assert b2.counters.claimed >= 1
    copies = Counter(device.seen_ids)
    assert max(copies.values()) <= 2
    # acted on once: the script was asked once per command id
    assert device.script_counters.asked == len(copies)
    assert _pending_of(host, scope, "") == 0


def test_bridges_of_one_group_for_two_scopes_each_get_their_responses(
    rig: Rig, host: Host, mqtt_url: str
) -> None:
    """One share name had two filters (`g-responses` for both scopes' response topics), and
    rumqttd gave the second scope's responses to nobody: its jobs only timed out."""
    other = Rig(host, mqtt_url, host.scope("mqtt-other"))
    try:
        rigs = [rig, other]
        for r in rigs:
            r.bridge(f"b-{r.scope}")
        for r in rigs:
            r.device({"default": "ok@10"})
        recipe = linear_recipe(2, timeout_s=5, max_attempts=1)
        ids = {
            r.scope: [host.submit(r.scope, recipe, job_id=f"t{i}").job for i in range(3)]
            for r in rigs
        }
        worker = host.worker(list(ids))
        host.run(
            [worker], [], lambda: all(host.ended(s, js)() for s, js in ids.items()), timeout=20
        )
        for s, js in ids.items():
            assert _paths(host, s, js) == ["Ended/Completed"] * 3, s
    finally:
        other.close()


@pytest.mark.parametrize("kept", [True, False])
def test_a_restarted_bridge_gets_the_responses_sent_while_it_was_away(rig: Rig, kept: bool) -> None:
    """The only bridge restarts while the equipment answers: with a session the broker
    keeps, the answers wait for it and every job completes on its first attempt; with a
    clean session they are dropped (no subscriber), and the jobs, of 1 attempt, time out.
    The device's clock stands still until the bridge has stopped: it answers then."""
    host, scope = rig.host, rig.scope
    session: dict[str, Any] = {"client_id": f"kept-{scope}", "session_expiry_s": 60} if kept else {}
    bridge = rig.bridge("first", **session)
    device_now = [time.time()]
    device = rig.device({"default": "ok@1500"}, clock=lambda: device_now[0])
    # kept: a deadline far enough not to fire on a loaded machine; clean: one that fires
    recipe = linear_recipe(1, timeout_s=120 if kept else 5, max_attempts=1)
    ids = [host.submit(scope, recipe, job_id=f"r{i}").job for i in range(3)]
    worker = host.worker([scope])
    host.run([worker], [], lambda: bridge.counters.published == 3, what="the pushes out")
    wait_for(lambda: device.counters.received == 3, timeout=10, what="the commands at the device")
    rig.stop(bridge)
    assert device.counters.answered == 0  # its clock has not moved
    device_now[0] = time.time() + 60  # past every answer's delay, before any expiry
    wait_for(lambda: device.counters.answered == 3, timeout=10, what="the answers")
    assert bridge.counters.responses == 0
    again = rig.bridge("second", **session)
    end = "Ended/Completed" if kept else "Aborted"
    host.run([worker], [], host.ended(scope, ids, end), timeout=20)
    if kept:
        assert _paths(host, scope, ids) == ["Ended/Completed"] * 3
        assert again.counters.responses == 3
        assert [c for *_, c in _commands(host, scope)] == [f"r{i}:a1#1" for i in range(3)]
    else:
        assert _paths(host, scope, ids) == ["Aborted"] * 3
        assert again.counters.responses == 0


def test_a_client_id_is_held_by_one_bridge_at_a_time(rig: Rig) -> None:
    host, scope = rig.host, rig.scope
    same = {"client_id": f"one-{scope}", "session_expiry_s": 60, "lease_ttl_ms": 1000}
    first = rig.bridge("first", **same)
    second = MqttBridge(host.store(), rig.url, rig.topics, group="g", consumer="second", **same)
    with pytest.raises(ClientIdTaken, match=r"held by another bridge .*consumer first"):
        second.start()  # it waited out a lease's time: the first renews it
    assert not second._conn.connected.is_set()
    # a clean session with that client id too (it would end the first one's session)
    clean = {**same, "session_expiry_s": 0}
    ending = MqttBridge(host.store(), rig.url, rig.topics, group="g", consumer="ender", **clean)
    with pytest.raises(ClientIdTaken, match=r"consumer first"):
        ending.start()
    rig.stop(first)  # gives the client id up: the next one takes it at once
    third = rig.bridge("third", **same)
    assert third.ready
    job = host.submit(scope, linear_recipe(1), job_id="c").job
    rig.device()
    host.run([host.worker([scope])], [], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"


def test_a_client_that_takes_the_bridges_session_over_stops_it(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Another MQTT client (no bridge: it holds no lease) connects with the bridge's client
    id. rumqttd says nothing of a takeover (no DISCONNECT 0x8E): it closes the old
    connection. The bridge connected again 1-2 s later, taking the session back, the other
    client did the same, and the two took turns for ever. Now the bridge stops, saying why,
    and leaves the session to the other client."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    caplog.set_level(logging.WARNING, logger="sfc.host.mqtt")
    client_id = f"taken-{rig.scope}"
    bridge = MqttBridge(
        rig.host.store(), rig.url, rig.topics, group="g", consumer="b",
        client_id=client_id, session_expiry_s=60,
    ).start()  # fmt: skip
    assert bridge.ready
    stop = threading.Event()
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            bridge.run(stop)
        except BaseException as e:
            failed.append(e)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    other = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    other.connect_async(rig.url.host, rig.url.port, clean_start=False)
    other.loop_start()  # paho's own reconnecting, 1 s after each loss
    try:
        wait_for(lambda: not t.is_alive(), timeout=60, what="the bridge to stop")
        assert len(failed) == 1 and isinstance(failed[0], ClientIdTaken), failed
        said = str(failed[0])
        assert f"client id {client_id!r}" in said and "another client" in said, said
        assert "give each bridge its own --client-id" in said, said
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and client_id in errors[0], errors
        assert bridge._conn.taken_over
        assert bridge._conn.client._thread is None  # no network thread: it connects no more
        wait_for(other.is_connected, timeout=10, what="the other client to keep the session")
        # a connection taken over (the device's too) ends its network thread by itself: it
        # went on trying (at once, or after paho's pause, taking the session back)
        conn = Connection(rig.url, client_id, [], bool)
        conn.start()
        wait_for(lambda: conn.taken_over is not None, timeout=60, what="the takeover")
        wait_for(lambda: conn.client._thread is None, timeout=10, what="the thread to end")
        assert not conn.connected.is_set()
        wait_for(other.is_connected, timeout=10, what="the other client to keep the session")
        conn.close()
    finally:
        stop.set()
        other.disconnect()
        other.loop_stop()


def test_the_bridge_command_exits_1_when_another_client_takes_its_session_over(
    host: Host, mqtt_url: str
) -> None:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    scope = host.scope("taken")
    client_id = f"taken-{scope}"
    args = ["--broker", mqtt_url, "--scope", scope, "--redis", host.url, "--client-id", client_id]
    bridge = _sfc("bridge", "mqtt", *args)
    other = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    try:
        said = _wait_line(bridge, "sfc bridge mqtt: scope")
        broker = parse_broker_url(mqtt_url)
        other.connect_async(broker.host, broker.port, clean_start=False)
        other.loop_start()
        _, err = bridge.communicate(timeout=60)
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.communicate()
        other.disconnect()
        other.loop_stop()
    text = (said + err).decode()
    assert bridge.returncode == 1, text
    assert f"of client id {client_id!r} in a row" in text, text
    assert text.rstrip().endswith("give each bridge its own --client-id"), text
    assert not host.client().exists(keys.mqtt_client(client_id))  # given up


def test_a_client_id_hold_that_cannot_be_renewed_disconnects_first_and_stops_when_lost(
    tmp_path: Path,
) -> None:
    """Renewed by a thread of its own; while the server is away the bridge leaves the broker
    before its hold can run out (no second bridge can take the session while it is still
    connected), and comes back once renewed; a hold another bridge took is lost for good."""
    from host.server import EmbeddedServer

    server = EmbeddedServer(tmp_path / "lease", port=held_port(bus=False)).start()
    try:
        store = Store.from_url(server.url)
        store.load_library()
        said: list[str] = []
        lease = ClientLease(store, "c-1", "first", ttl_ms=900)
        lease.take()
        lease.keep(lambda: said.append("fence"), lambda: said.append("unfence"))
        assert store.lease(lease.key, "second", 900) == "first"  # held
        server.stop()
        wait_for(lambda: said == ["fence"], timeout=10, what="the fence")
        server.start()
        wait_for(lambda: said == ["fence", "unfence"], timeout=10, what="the renewal")
        assert lease.lost is None
        client = redis.Redis.from_url(server.url)
        client.set(lease.key, "second")  # as if its hold had run out and another took it
        client.close()
        wait_for(lambda: lease.lost is not None, timeout=10, what="the loss")
        assert "taken by another bridge (consumer second)" in str(lease.lost)
        assert said == ["fence", "unfence", "fence"]
        lease.release()  # it is not ours: left alone
        assert store.lease(lease.key, "third", 900) == "second"
        store.close()
    finally:
        server.stop()


def test_a_response_that_could_not_be_written_comes_again_once_the_server_is_back(
    mqtt_url: str, tmp_path: Path
) -> None:
    """The bridge could not write a response (its server away) and left it unacknowledged,
    but within one connection a broker never gives a message again: it waited for a
    reconnect that never came, and the action timed out."""
    from host.server import EmbeddedServer

    server = EmbeddedServer(tmp_path / "valkey", port=held_port(bus=False)).start()
    h = Host(server.url)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        scope = h.scope("unwritten")
        topics = Topics(scope, "u")
        broker = parse_broker_url(mqtt_url)
        bridge = MqttBridge(
            h.store(), broker, topics, group="g", consumer="b",
            client_id=f"unwritten-{scope}", session_expiry_s=60,
        ).start()  # fmt: skip
        script = load_host_script(b'{"default": "ok@1500"}')
        device = MqttDevice(broker, topics, script, client_id=f"dev-{scope}").start()
        for thing in (bridge, device):
            threads.append(threading.Thread(target=thing.run, args=(stop,), daemon=True))
            threads[-1].start()
        job = h.submit(scope, linear_recipe(1, timeout_s=60, max_attempts=1), job_id="u").job
        worker = h.worker([scope])
        h.run([worker], [], lambda: bridge.counters.published == 1, what="the push out")
        server.stop()  # the answer comes while the server is away
        wait_for(lambda: bridge._unwritten, timeout=10, what="the answer the bridge missed")
        server.start()
        h.run([worker], [], h.ended(scope, [job]), timeout=30)
        assert h.order_path(scope, job) == "Ended/Completed"
        # written once, or twice when a slow restart of the server also cost the bridge its
        # hold on the client id for a while (the session gives the message again; the
        # engine absorbs the copy)
        assert bridge.counters.responses >= 1
        assert device.counters.answered == 1  # answered once: the same message came again
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        h.close()
        server.stop()


def test_a_message_that_comes_while_others_are_held_is_written_after_them(
    mqtt_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Responses held while the server was away are written when it is back; one that came
    meanwhile went straight in, before them, and was acknowledged first. The first one held
    is said at warning (the server cannot be reached), once."""
    from host.server import EmbeddedServer

    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    server = EmbeddedServer(tmp_path / "valkey", port=held_port(bus=False)).start()
    h = Host(server.url)
    pub: Connection | None = None
    bridge: MqttBridge | None = None
    try:
        scope = h.scope("held-order")
        topics = Topics(scope, "h")
        broker = parse_broker_url(mqtt_url)
        # not run: the test pumps it, so that nothing writes the held ones in between
        bridge = MqttBridge(h.store(), broker, topics, group="g", consumer="b").start()
        pub = Connection(broker, f"pub-{scope}", [], lambda m: True)
        pub.start()
        assert pub.wait_ready(10) and bridge.ready
        attrs = {"specversion": "1.0", "source": "dev", "type": "t.response"}

        def respond(n: int) -> None:
            assert pub is not None
            answer = CloudEvent(
                attrs | {"id": f"r{n}", "sfccommandid": f"j:a#{n}"}, b'{"outcome":"ok"}', JSON
            )
            doc = Message(topics.responses, structured(answer), "application/cloudevents+json")
            mid = pub.publish(doc)
            assert mid is not None and pub.wait_acked([mid], 10) == {mid}

        server.stop()
        respond(1)
        respond(2)
        wait_for(lambda: len(bridge._unwritten) == 2, timeout=10, what="two responses held")
        held = [r for r in caplog.records if "held" in r.getMessage()]
        assert [r.levelno for r in held] == [logging.WARNING], caplog.text
        assert (
            held[0]
            .getMessage()
            .startswith(
                f"a message on {topics.responses} could not be written, the server is unreachable ("
            )
        ), held[0].getMessage()
        assert (
            held[0].getMessage().endswith("); it is held, and written once the server is back")
        ), held[0].getMessage()
        server.start()
        respond(3)  # the server is back, and two wait to be written
        work = keys.work(scope)
        wait_for(
            lambda: len(bridge._unwritten) == 3 or h.client().xlen(work) > 0,
            timeout=10,
            what="the third response to be handled",
        )
        wait_for(
            lambda: h.client().xlen(work) == 3,
            step=lambda: bridge.pump(block_ms=10),
            timeout=20,
            what="the responses to be written",
        )
        written = [json.loads(f[b"data"])["commandId"] for _, f in h.client().xrange(work)]
        assert written == ["j:a#1", "j:a#2", "j:a#3"]
        assert bridge.counters.responses == 3
    finally:
        if pub is not None:
            pub.close()
        if bridge is not None:
            bridge.close()
        h.close()
        server.stop()


def test_a_connection_suspended_and_resumed_leaks_nothing(mqtt_url: str) -> None:
    """The fence of a client id's hold: away from the broker, then back, as often as it
    takes (paho's loop left a socket pair open at each restart)."""
    import gc

    conn = Connection(parse_broker_url(mqtt_url), "fence-1", ["f/#"], bool)
    conn.start()
    assert conn.wait_ready(10)
    for n in range(3):
        conn.suspend()
        assert not conn.connected.is_set() and not conn.subscribed.is_set()
        conn.resume()
        assert conn.wait_ready(10), n
    assert conn.generation == 7  # 4 connections, and 3 ends: each counts
    conn.close()
    gc.collect()  # an unclosed socket would warn here, and warnings are errors


def test_the_cli_works_without_paho_and_the_mqtt_commands_say_how_to_get_it() -> None:
    """paho-mqtt is the `mqtt` extra: every other command works without it, and the two
    that need it exit 1 naming the extra."""
    without_paho = (
        "import sys; sys.modules['paho'] = None; "  # an import of paho fails, as uninstalled
        "import cli.main, cli.commands; from cli.main import app; app(prog_name='sfc')"
    )

    def sfc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", without_paho, *args],
            cwd=Path(__file__).parent.parent,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    ok = sfc("validate", "examples/rear-axle-fitting/recipe.json")
    assert ok.returncode == 0, ok.stderr
    assert sfc("bridge", "mqtt", "--help").returncode == 0
    for command in (["bridge", "mqtt"], ["device", "mqtt"]):
        done = sfc(*command, "--broker", "mqtt://127.0.0.1:1")
        assert done.returncode == 1, done.stderr
        assert "need paho-mqtt, the `mqtt` extra" in done.stderr, done.stderr
        assert "pip install 'microdcs-sfc[mqtt]'" in done.stderr, done.stderr
        assert "uv sync --extra mqtt" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr, done.stderr


def test_the_paho_internals_the_connection_relies_on_are_taken(mqtt_url: str) -> None:
    """StoppableClient overrides paho's private `_create_socket_connection` and
    `_reconnect_wait`, and `Connection.resume` calls `_reset_sockets` (paho is pinned below
    3 for them): a paho that renamed one would take its own path without a word (a stop
    waiting out paho's 5 s, a socket pair leaked at each resume)."""
    import paho.mqtt.client as mqtt

    for name in ("_create_socket_connection", "_reconnect_wait", "_reset_sockets", "_get_proxy"):
        assert callable(getattr(mqtt.Client, name, None)), f"paho has no Client.{name}"
    for name in ("_host", "_port", "_sockpairR", "_thread"):
        assert hasattr(mqtt.Client(mqtt.CallbackAPIVersion.VERSION2), name), name
    away = parse_broker_url(f"mqtt://127.0.0.1:{_free_port()}")  # nothing listens there
    conn = Connection(away, "internals", [], bool)
    calls: Counter[str] = Counter()
    for name in ("_create_socket_connection", "_reconnect_wait"):
        taken = getattr(conn.client, name)  # StoppableClient's, bound

        def counted(name: str = name, taken: Any = taken) -> Any:
            calls[name] += 1
            return taken()

        setattr(conn.client, name, counted)
    try:
        conn.start()
        wait_for(
            lambda: calls["_create_socket_connection"] >= 2 and calls["_reconnect_wait"] >= 1,
            timeout=10,
            what="paho's network thread to connect through the overrides, twice",
        )
        assert conn.client.pause_s is not None  # StoppableClient's pause, not paho's sleep
    finally:
        conn.close()
    back = Connection(parse_broker_url(mqtt_url), "internals-back", ["i/#"], bool)
    try:
        back.start()
        assert back.wait_ready(10)
        before = back.client._sockpairR
        assert before is not None
        back.suspend()
        back.resume()
        assert before.fileno() == -1  # closed by _reset_sockets before loop_start's new pair
        assert back.wait_ready(10)
    finally:
        back.close()


def test_a_user_and_password_and_tls(
    host: Host, mqtt_broker: Listeners, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = mqtt_broker.auth.removeprefix("mqtt://")
    wrong = Connection(parse_broker_url(f"mqtt://op:nope@{plain}"), "wrong", ["a"], lambda m: True)
    wrong.start()
    assert not wrong.wait_ready(1)
    wrong.close()
    monkeypatch.setenv("SFC_TLS_CA", str(mqtt_broker.ca))  # the CA of the broker's certificate
    for url, hint in ((f"mqtt://op:s3cret@{plain}", "auth"), (mqtt_broker.tls, "tls")):
        rig = Rig(host, url, host.scope(hint))
        try:
            rig.bridge("b1")
            rig.device()
            job = host.submit(rig.scope, linear_recipe(2), job_id="a").job
            host.run([host.worker([rig.scope])], [], host.ended(rig.scope, [job]))
            assert host.order_path(rig.scope, job) == "Ended/Completed", url
        finally:
            rig.close()


def _accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def test_jobs_in_flight_ride_out_a_broker_killed_and_started_again(
    host: Host, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker's process is killed (SIGKILL) mid-run, with commands out at the device and
    answers due, and started again on its port: it keeps nothing. Every job completes; a
    command the engine issued reaches the device, or is sent again as a new attempt after its
    timeout (docs/mqtt.md, "Delivery"); a command id comes to the device again only when the
    broker had not acknowledged its publish; and every action is acted on once."""
    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    port = held_port(bus=False)  # below the ephemeral range: no connection takes it meanwhile
    config = tmp_path / "rumqttd.toml"
    config.write_text(BROKER_CONFIG.split("[v5.2]")[0].format(port=port))
    command = [sys.executable, "-m", "iotcore", "--config", str(config), "--log-level", "ERROR"]

    def start_broker() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(lambda: proc.poll() is not None or _accepts(port), timeout=20, what="a broker")
        assert proc.poll() is None, f"the broker exited {proc.returncode}"
        return proc

    broker = start_broker()
    rig = Rig(host, f"mqtt://127.0.0.1:{port}", host.scope("restart"))
    scope, n_jobs, n_actions = rig.scope, 20, 4
    try:
        bridge = rig.bridge("b", client_id=f"bridge-{scope}", session_expiry_s=60)
        device = rig.device({"default": "ok@300"})
        recipe = linear_recipe(n_actions, timeout_s=3, max_attempts=10)
        ids = [host.submit(scope, recipe, job_id=f"r{i}").job for i in range(n_jobs)]
        worker = host.worker([scope])
        host.run([worker], [], lambda: device.counters.answered >= n_jobs, what="a quarter")
        out = {c.command_id for _, kind, c in host.equipment(scope) if kind == "push"}
        broker.kill()  # with commands out at the device, and its answers due
        broker.wait()
        killed = time.monotonic()
        in_flight = sum(1 for j in ids if host.order_path(scope, j) == "Running")
        host.run([worker], [], lambda: not bridge.ready and not device.ready, what="the loss seen")
        broker = start_broker()
        restarted = time.monotonic()
        host.run([worker], [], lambda: bridge.ready and device.ready, what="both back")
        back_s, away_s = time.monotonic() - restarted, time.monotonic() - killed
        host.run([worker], [], host.ended(scope, ids), timeout=120)
        assert _paths(host, scope, ids) == ["Ended/Completed"] * n_jobs
    finally:
        rig.close()
        broker.kill()
        broker.wait()
    assert in_flight > 0 and len(out) >= n_jobs
    pushes = [c for _, kind, c in host.equipment(scope) if kind == "push"]
    seen = Counter(device.seen_ids)
    last_attempt: dict[str, int] = {}
    for p in pushes:
        last_attempt[p.action_key] = max(last_attempt.get(p.action_key, 0), p.attempt)
    # no command lost: each reached the device, or a later attempt of its action was sent
    # after its timeout (a command the broker had taken and died with)
    lost = [p.command_id for p in pushes if not seen[p.command_id]]
    resent = [p for p in pushes if p.attempt < last_attempt[p.action_key]]
    assert set(lost) <= {p.command_id for p in resent}, lost
    assert all(seen[p.command_id] for p in pushes if p.attempt == last_attempt[p.action_key])
    # none sent twice but for publishes the broker did not acknowledge (the bridge publishes
    # such an entry again, and paho sends it again on reconnecting: two copies at most)
    copies = sum(n - 1 for n in seen.values())
    assert copies <= 2 * bridge.counters.unacked, (copies, bridge.counters.unacked)
    # acted on once: one applied answer per action, whatever copies came
    store = host.store()
    for job in ids:
        said = [msgspec.json.decode(f[b"data"]) for _, f in store.history(scope, job, 200)]
        applied = [h for h in said if h["event"] == "answer" and h["disposition"] == "applied"]
        assert len(applied) == n_actions, (job, said)
    gone = [r.getMessage() for r in caplog.records if "dropped the connection" in r.getMessage()]
    assert len(gone) == 2, gone  # the bridge and the device, once each
    print(
        f"broker restart: {n_jobs} jobs x {n_actions} actions, {in_flight} running at the "
        f"kill; {len(pushes)} commands issued ({len(resent)} sent again as a new attempt, "
        f"{len(lost)} never at the device), {len(seen)} command ids at the device, "
        f"{copies} copies, {bridge.counters.unacked} publishes unacknowledged; both "
        f"connected again {back_s:.2f} s after the broker was started again, "
        f"{away_s:.2f} s after it was killed"
    )


def test_a_lost_broker_and_a_refused_login_are_logged_once_each_way(
    mqtt_broker: Listeners, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bridge said nothing when its broker went away or came back, and a wrong password
    looked like a broker that is slow to answer."""
    from iotcore import Broker

    caplog.set_level(logging.WARNING, logger="sfc.host.mqtt")
    port = _free_port()
    config = tmp_path / "rumqttd.toml"
    config.write_text(BROKER_CONFIG.split("[v5.2]")[0].format(port=port))
    broker = Broker(config_path=str(config))
    broker.start()
    conn = Connection(parse_broker_url(f"mqtt://127.0.0.1:{port}"), "watch", ["t/#"], bool)
    try:
        conn.start()
        assert conn.wait_ready(10)
        broker.stop()

        def said(text: str) -> int:
            return sum(text in r.getMessage() for r in caplog.records)

        wait_for(lambda: said("dropped the connection") == 1, timeout=10, what="the loss")
        broker = Broker(config_path=str(config))
        broker.start()
        wait_for(lambda: said("again after") == 1, timeout=15, what="the return")
        assert conn.wait_ready(10)
        assert said("dropped the connection") == 1  # once, not once per retry
    finally:
        conn.close()
        broker.stop()
    caplog.clear()
    wrong = mqtt_broker.auth.replace("mqtt://", "mqtt://op:wrong@")
    bad = Connection(parse_broker_url(wrong), "wrong", [], bool)
    try:
        bad.start()
        assert not bad.wait_ready(2)
        wait_for(
            lambda: any(
                "refused the connection (" in r.getMessage()
                or "before accepting it" in r.getMessage()
                for r in caplog.records
            ),
            timeout=10,
            what="the refusal",
        )
    finally:
        bad.close()


def test_a_broker_that_speaks_only_mqtt_311_is_named_once_with_the_fix(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """iotcore's default broker speaks MQTT 3.1.1 only and closes an MQTT 5 CONNECT without
    a word: the bridge said "closed the connection before accepting it (Unspecified error)"
    and retried for ever. It names MQTT 5 and the fix, once, at error."""
    from iotcore import Broker

    caplog.set_level(logging.WARNING, logger="sfc.host.mqtt")
    port = _free_port()
    broker = Broker(port=port, listen="127.0.0.1").start()  # MQTT 3.1.1 only
    url = f"mqtt://127.0.0.1:{port}"
    conn = Connection(parse_broker_url(url), "v5-only", ["t/#"], bool)
    try:
        conn.start()
        wait_for(lambda: conn.generation >= 4, timeout=20, what="three tries more")
        said = [r for r in caplog.records if r.name == "sfc.host.mqtt"]
        assert len(said) == 1, [r.getMessage() for r in said]  # once, not at every try
        (error,) = said
        assert error.levelno == logging.ERROR
        text = error.getMessage()
        assert "speaks MQTT 3.1.1 and closed an MQTT 5 connection" in text, text
        assert "sfc needs MQTT 5" in text and 'docs/mqtt.md, "A broker"' in text, text
        assert "`listener 1883 127.0.0.1` and `allow_anonymous true`" in text, text
        assert not conn.connected.is_set()
    finally:
        conn.close()
    scope = host.scope("v311")
    bridge = _sfc("bridge", "mqtt", "--broker", url, "--scope", scope, "--redis", host.url)
    try:
        said_b = _wait_line(bridge, "sfc needs MQTT 5")
        err = _stopped(bridge, signal.SIGTERM, said_b)
    finally:
        broker.stop()
    assert f"the broker {url} speaks MQTT 3.1.1" in err, err
    assert "closed the connection before accepting it" not in err, err


def test_the_iotcore_configuration_of_the_docs_speaks_mqtt_5(tmp_path: Path) -> None:
    """docs/mqtt.md, "A broker": the rumqttd configuration it shows starts a broker that
    the bridge's connection connects to and subscribes on."""
    from iotcore import Broker

    page = (Path(__file__).parent.parent / "docs" / "mqtt.md").read_text(encoding="utf-8")
    (shown,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    config = textwrap.dedent(shown)
    assert 'listen = "127.0.0.1:1883"' in config
    port = _free_port()
    (tmp_path / "rumqttd.toml").write_text(config.replace(":1883", f":{port}"))
    broker = Broker(config_path=str(tmp_path / "rumqttd.toml")).start()
    conn = Connection(parse_broker_url(f"mqtt://127.0.0.1:{port}"), "docs", ["t/#"], bool)
    try:
        conn.start()
        assert conn.wait_ready(10)
    finally:
        conn.close()
        broker.stop()


@pytest.mark.cluster
def test_a_response_held_for_a_slot_that_moved_is_said_at_info_and_written(
    tmp_path: Path, mqtt_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A response comes after the slot of the bridge's scope moved (a reshard, a failover):
    writing it answers MOVED, and it is held. The bridge said at warning that the server
    could not be reached; a node answered, and the move is routine: said at info, as the
    worker says it, and the response is written once the slots are read again."""
    from redis.cluster import RedisCluster

    from tests.clusterkit import LocalCluster, move_slot

    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    own = LocalCluster(tmp_path).start()
    h = Host(own.url)
    pub: Connection | None = None
    stop = threading.Event()
    t: threading.Thread | None = None
    try:
        h.store().load_library()
        scope = h.scope("held-moved")
        topics = Topics(scope, "m")
        broker = parse_broker_url(mqtt_url)
        # not run yet: nothing but the response calls the server, so its write meets the move
        bridge = MqttBridge(h.store(), broker, topics, group="g", consumer="b").start()
        pub = Connection(broker, f"pub-{scope}", [], lambda m: True)
        pub.start()
        assert pub.wait_ready(10) and bridge.ready
        slot, port = move_slot(own, keys.work(scope))
        answer = CloudEvent(
            {"specversion": "1.0", "source": "dev", "type": "t.response", "id": "r1"},
            b'{"outcome":"ok"}',
            JSON,
        )
        mid = pub.publish(Message(topics.responses, answer.data, JSON, (
            *answer.attributes.items(), ("sfccommandid", "j:a#1")
        )))  # fmt: skip
        assert mid is not None and pub.wait_acked([mid], 10) == {mid}
        wait_for(lambda: len(bridge._unwritten) == 1, timeout=10, what="the response held")
        line = (
            f"a message on {topics.responses} is held: slot {slot} (moved|is moving) to "
            rf"127\.0\.0\.1:{port} \(a failover or a reshard\); reading the slots again, "
            "and it is written then"
        )
        held = [r for r in caplog.records if "held" in r.getMessage()]
        assert len(held) == 1 and re.fullmatch(line, held[0].getMessage()), caplog.text
        assert held[0].levelno == logging.INFO
        t = threading.Thread(target=bridge.run, args=(stop,), daemon=True)
        t.start()
        rc = RedisCluster.from_url(own.url)
        try:
            wait_for(lambda: rc.xlen(keys.work(scope)) == 1, timeout=20, what="the write")
        finally:
            rc.close()
        assert bridge.counters.responses == 1
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    finally:
        stop.set()
        if t is not None:
            t.join(10)
        if pub is not None:
            pub.close()
        h.close()
        own.stop()


@pytest.mark.cluster
def test_a_bridge_says_an_event_held_for_a_reshard_stuck_half_way_once_at_info(
    tmp_path: Path, mqtt_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An event comes while a reshard of its scope's slot is stuck with its keys on two
    nodes: its write (`sfc1_publish`, three keys) answers TRYAGAIN. The bridge said at
    warning that the server was unreachable; it is a move, said as a worker says it, at
    info, once while the event is held and tried at each pump; the event is written once
    the reshard is over."""
    from tests.clusterkit import LocalCluster, end_move, move_slot

    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    own = LocalCluster(tmp_path).start()
    h = Host(own.url)
    pub: Connection | None = None
    stop = threading.Event()
    t: threading.Thread | None = None
    try:
        store = h.store()
        store.load_library()
        scope = h.scope("held-rehash")
        topics = Topics(scope, "m")
        store.create_group(scope)  # sfc:work:{S}: left on the node the slot is leaving
        store.put_scope_settings(scope, {"maxAttempts": "3"})  # moved ahead of it
        source = store.node_name(scope)
        broker = parse_broker_url(mqtt_url)
        bridge = MqttBridge(h.store(), broker, topics, group="g", consumer="b").start()
        pub = Connection(broker, f"pub-{scope}", [], lambda m: True)
        pub.start()
        assert pub.wait_ready(10) and bridge.ready
        slot, port = move_slot(own, keys.work(scope), only=[keys.settings(scope)])
        old = next(x for x in own.servers if source.endswith(f":{x.port}"))

        def tries() -> int:  # TRYAGAIN replies of the node the slot is leaving
            with redis.Redis(host="127.0.0.1", port=old.port) as r:
                stat = r.info("errorstats").get("errorstat_TRYAGAIN", {})
            return int(stat.get("count", 0)) if isinstance(stat, dict) else 0

        event = CloudEvent(
            {"specversion": "1.0", "source": "dev", "type": "com.example.done.v1", "id": "e1"},
            b'{"outcome":"ok"}',
            JSON,
        )
        topic = topics.event("com.example.done.v1")
        mid = pub.publish(Message(topic, event.data, JSON, tuple(event.attributes.items())))
        assert mid is not None and pub.wait_acked([mid], 10) == {mid}
        wait_for(lambda: len(bridge._unwritten) == 1, timeout=10, what="the event held")
        t = threading.Thread(target=bridge.run, args=(stop,), daemon=True)
        t.start()
        wait_for(lambda: tries() >= 5, timeout=20, what="five tries of the event's write")
        said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "sfc.host.mqtt"]
        assert said == [
            (
                logging.INFO,
                f"a message on {topic} is held: slot {slot} is being moved (TRYAGAIN: "
                "a reshard under way, its keys on two nodes); trying it again with backoff, "
                "and it is written then",
            )
        ], said
        end_move(own, slot, port)
        wait_for(
            lambda: bridge.counters.events_unmatched == 1, timeout=20, what="the event written"
        )
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    finally:
        stop.set()
        if t is not None:
            t.join(10)
        if pub is not None:
            pub.close()
        h.close()
        own.stop()


@pytest.mark.cluster
def test_a_bridge_says_a_slot_stuck_moving_once_not_at_every_try(
    tmp_path: Path, mqtt_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reshard stuck half way: the slot of the bridge's scope answers ASK for as long as
    it lasts. The bridge said its info line at every try (every 5 s once its backoff had
    grown); docs/metrics.md says once: once until a pump goes through."""
    from tests.clusterkit import LocalCluster, move_slot

    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    own = LocalCluster(tmp_path).start()
    h = Host(own.url)
    try:
        h.store().load_library()
        rig = Rig(h, mqtt_url, h.scope("mqtt-stuck"))
        try:
            rig.bridge("stuck-1")
            source = h.store().node_name(rig.scope)
            slot, port = move_slot(own, keys.equipment(rig.scope), half_way=True)
            old = next(x for x in own.servers if source.endswith(f":{x.port}"))

            def asks() -> int:  # ASK replies of the node the slot is leaving
                with redis.Redis(host="127.0.0.1", port=old.port) as r:
                    stat = r.info("errorstats").get("errorstat_ASK", {})
                return int(stat.get("count", 0)) if isinstance(stat, dict) else 0

            wait_for(lambda: asks() >= 5, timeout=20, what="five tries of the bridge")
            said = [r for r in caplog.records if "reading the slots again" in r.getMessage()]
            assert len(said) == 1, said
            assert (
                said[0]
                .getMessage()
                .startswith(
                    f"bridge of scope {rig.scope}: slot {slot} is moving to 127.0.0.1:{port} "
                )
            )
        finally:
            rig.close()
    finally:
        h.close()
        own.stop()


def test_a_bridge_says_at_info_that_the_slot_of_its_scope_moved(
    tmp_path: Path, mqtt_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reshard (or a manual failover) moves the slot of the bridge's scope: the old node
    answers MOVED, which is routine. The bridge said at warning that the server could not
    be reached."""
    from tests.clusterkit import LocalCluster, move_slot

    caplog.set_level(logging.INFO, logger="sfc.host.mqtt")
    own = LocalCluster(tmp_path).start()
    h = Host(own.url)
    try:
        h.store().load_library()
        rig = Rig(h, mqtt_url, h.scope("mqtt-moved"))
        try:
            rig.bridge("moved-1")
            slot, port = move_slot(own, keys.equipment(rig.scope))
            line = re.compile(
                rf"bridge of scope {re.escape(rig.scope)}: slot {slot} (moved|is moving) to "
                rf"127\.0\.0\.1:{port} "
                r"\(a failover or a reshard\); reading the slots again"
            )

            def said() -> list[logging.LogRecord]:
                return [r for r in caplog.records if line.fullmatch(r.getMessage())]

            wait_for(lambda: bool(said()), timeout=10, what="the bridge to see the move")
            assert all(r.levelno == logging.INFO for r in said())
            assert "cannot be reached" not in caplog.text, caplog.text
        finally:
            rig.close()
    finally:
        h.close()
        own.stop()


# --------------------------------------------------------------- qualifiers end to end

STATION_STOPS = {
    "Steps": [{"Name": "Load", "Initial": True}, {"Name": "Work"}, {"Name": "Unload"}],
    "Transitions": [
        {"Source": "Load", "Target": "Work", "Condition": "true"},
        {"Source": "Work", "Target": "Unload", "Condition": "true"},
    ],
    "Actions": [
        {"Name": "vacuum", "Step": "Load", "Qualifier": "S", "Interaction": "push_command",
         "TypeId": "t.vacuum", "TimeoutSeconds": 600, "MaxAttempts": 1},
        {"Name": "load", "Step": "Load", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.load", "TimeoutSeconds": 60},
        {"Name": "blow", "Step": "Work", "Qualifier": "L", "DurationSeconds": 1,
         "Interaction": "push_command", "TypeId": "t.blow", "TimeoutSeconds": 60,
         "MaxAttempts": 1},
        {"Name": "work", "Step": "Work", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.work", "TimeoutSeconds": 60},
        {"Name": "vacuum", "Step": "Unload", "Qualifier": "R"},
        {"Name": "unload", "Step": "Unload", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.unload", "TimeoutSeconds": 60},
    ],
}  # fmt: skip
"""An L whose limit (1 s) comes before the device's answer (3 s), and an S whose answer
(8 s) comes after the R of Unload resets it."""


def test_the_device_stops_work_withdrawn_at_its_limit_and_by_a_reset(rig: Rig) -> None:
    """Through the broker: the L's push carries its qualifier and stopAt, the device gets
    the withdraws `limit` and `reset` and never answers that work, and the job ends as its
    dry run, each command id once on the equipment stream."""
    host, scope = rig.host, rig.scope
    recipe = json.dumps(STATION_STOPS).encode()
    script = {
        "default": "ok@100",
        "replies": {"blow": ["ok@3000"], "work": ["ok@2000"], "vacuum": ["ok@8000"]},
    }
    built = build(recipe)
    assert built.graph is not None, built.errors
    dry = Simulation(built.graph, load_script(json.dumps(script).encode()), job_id="s").run()
    assert dry.end == "completed"
    expected = [
        (c.command_id, c.reason)
        for e in dry.transcript
        for c in e.commands
        if isinstance(c, CancelWork)
    ]
    assert expected == [("s:blow#3", "limit"), ("s:vacuum#1", "reset")], expected

    seen: list[Any] = []
    watched = threading.Lock()

    def watch(m: Any) -> bool:
        with watched:
            seen.append(m)
        return True

    topics = rig.topics
    watcher = Connection(
        rig.url,
        f"watch-{scope}",
        [topics.commands_filter, topics.notices_filter, topics.responses],
        watch,
    )
    watcher.start()
    assert watcher.wait_ready(10)
    try:
        rig.bridge("b1")
        device = rig.device(script)
        host.submit(scope, recipe, job_id="s")
        worker = host.worker([scope])
        host.run([worker], [], host.ended(scope, ["s"]), timeout=30)
        assert host.order_path(scope, "s") == "Ended/Completed"
        # the device answers what was not stopped: load, work, unload
        wait_for(lambda: device.counters.answered == 3, timeout=10, what="the device's answers")
        # (the job's end does not wait for the device to read the last withdraw)
        wait_for(lambda: device.counters.stopped == 2, timeout=10, what="both answers dropped")

        def by_kind() -> dict[str, list[tuple[str, dict[str, str], bytes]]]:
            out: dict[str, list[tuple[str, dict[str, str], bytes]]] = {}
            with watched:
                for m in seen:
                    e = m.cloudevent()
                    kind = e.get("sfckind") or "response"
                    cid = e.get("sfccommandid") or e.get("id") or ""
                    if kind == "response":
                        cid = (m.correlation_data or b"").decode()
                    out.setdefault(kind, []).append((cid, dict(e.attributes), e.data))
            return out

        wait_for(lambda: len(by_kind().get("withdraw", [])) == 2, timeout=10, what="withdraws")
        # the device's answers reach the watcher through the broker, after the device counts
        wait_for(lambda: len(by_kind().get("response", [])) >= 3, timeout=10, what="answers")
        got = by_kind()
        withdraws = [(cid, json.loads(data)["reason"]) for cid, _, data in got["withdraw"]]
        assert withdraws == expected
        answered = sorted(cid for cid, _, _ in got.get("response", []))
        assert answered == ["s:load#2", "s:unload#5", "s:work#4"], answered
        pushes = {cid: attrs for cid, attrs, _ in got["push"]}
        assert pushes["s:blow#3"]["sfcqualifier"] == "L"
        assert int(pushes["s:blow#3"]["sfcstopat"]) - int(pushes["s:blow#3"]["sfcdeadline"]) == (
            1000 - 60_000
        )
        assert pushes["s:vacuum#1"]["sfcqualifier"] == "S"
        assert "sfcstopat" not in pushes["s:vacuum#1"]
        assert "sfcqualifier" not in pushes["s:load#2"]  # absent for N
    finally:
        watcher.close()
    entries = host.equipment(scope)
    assert [(d.command_id, d.reason) for _, k, d in entries if k == "withdraw"] == expected
    ids = [d.command_id for _, k, d in entries if k == "push"]
    assert sorted(ids) == ["s:blow#3", "s:load#2", "s:unload#5", "s:vacuum#1", "s:work#4"]

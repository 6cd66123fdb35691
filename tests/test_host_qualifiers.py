"""The qualifiers through the host, on a real server (issue 34): the press-fit station runs
to its end with scripted equipment; the equipment stream shows every withdraw with its
reason and each command id once; a withdraw that says stop drops the work's answer; and a
worker SIGKILLed mid-run loses no timer (a D still starts, an L is still withdrawn)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET
from msgspec.structs import replace

from generated.command_v1_0 import CancelWork, StartWork
from generated.equipment_entry_v1_0 import CommandData, WithdrawData
from generated.event_v1_0 import Tick
from generated.snapshot_v1_0 import Snapshot
from generated.work_entry_v1_0 import StartData, TickData
from host import keys
from host.entries import Entry, decode_equipment, decode_work
from host.evaluate import Evaluator, GraphCache, ScopeConfig
from host.jobs import submit
from host.outcome import Outcome
from host.scripted import ScriptedEquipment, load_host_script
from host.settings import Settings
from host.store import JobRecord
from sfc.builder import build
from sfc.evolution import evolve, new_state, non_gating_outcomes, overdue_timers
from sfc.graph import Graph
from sfc.migrate import read_state
from sfc.simulation import Simulation, load_script
from tests.faultkit import Fleet, ended_count, wait_until
from tests.hostkit import Host
from tests.test_host_scripted import run_until_ended, scaled_recipe, scaled_script

ROOT = Path(__file__).resolve().parent.parent
STATION = ROOT / "examples" / "press-fit-line"
K = 0.1
"""Every delay, T, MinSeconds and TimeoutSeconds scaled (as tests/test_host_scripted.py), so
that the closest race (a limit 200 ms before the answer that leaves its step) is wider than
the worker's sweep."""


def graph_of(recipe: bytes) -> Graph:
    built = build(recipe)
    assert built.graph is not None, built.errors
    return built.graph


def dry_withdraws(recipe: bytes, script: bytes) -> list[tuple[str, str]]:
    result = Simulation(graph_of(recipe), load_script(script), job_id="job-1").run()
    assert result.end == "completed"
    return [
        (c.command_id, c.reason)
        for e in result.transcript
        for c in e.commands
        if isinstance(c, CancelWork)
    ]


def dry_non_gating(recipe: bytes, script: bytes) -> dict[tuple[str, str], int]:
    """(qualifier, outcome) -> count of the non-gating blocks the dry run ended."""
    graph = graph_of(recipe)
    result = Simulation(graph, load_script(script), job_id="job-1").run()
    state = new_state(graph, "job-1", "sim")
    counts: dict[tuple[str, str], int] = {}
    for entry in result.transcript:
        r = evolve(graph, state, None, entry.event)
        for key in non_gating_outcomes(graph, entry.event, r):
            counts[key] = counts.get(key, 0) + 1
        state = r.state
    return counts


def dry_pushes(recipe: bytes, script: bytes) -> list[StartWork]:
    result = Simulation(graph_of(recipe), load_script(script), job_id="job-1").run()
    seen: dict[str, StartWork] = {}
    for e in result.transcript:
        for c in e.commands:
            if isinstance(c, StartWork) and c.work == "push":
                seen.setdefault(c.command_id, c)
    return list(seen.values())


@pytest.mark.parametrize("name", ["happy", "slow-press", "reject"])
def test_the_station_runs_to_its_end_and_the_stream_shows_every_withdraw(
    host: Host, name: str
) -> None:
    recipe = scaled_recipe((STATION / "recipe.json").read_bytes(), K)
    doc = json.loads((STATION / f"{name}.script.json").read_bytes())
    if name == "slow-press":  # the air valve answers well before its limit, under load too
        doc["replies"]["blow_off"] = ["ok@200"]
    raw = json.dumps(doc).encode()
    script = scaled_script(raw, K)
    expected = dry_withdraws(recipe, script)
    assert {reason for _, reason in expected} & {"limit", "reset", "deactivated", "ended"}

    scope = host.scope("pressfit")
    host.submit(scope, recipe, job_id="job-1")
    equipment = ScriptedEquipment(host.store(), scope, load_host_script(raw), time_scale=K)
    worker = host.worker([scope])
    until = host.ended(scope, ["job-1"], "Ended/Completed")
    host.run([worker], [equipment], until, timeout=30)  # type: ignore[list-item]
    # what sfc_non_gating_outcomes counts: the worker's tally, as the dry run ended them
    assert worker.counters.outcome.non_gating == dry_non_gating(recipe, script)
    assert worker.counters.outcome.non_gating  # P1, P0 and L at least

    entries = host.equipment(scope)
    withdraws = [(d.command_id, d.reason) for _, kind, d in entries if kind == "withdraw"]
    assert withdraws == expected
    pushes = [d for _, kind, d in entries if kind == "push"]
    ids = [d.command_id for d in pushes]
    assert len(ids) == len(set(ids)), "a command id appended twice"
    # every push carries its qualifier (none for N) and an L its stopAt, as the core gave it
    by_id = {c.command_id: c for c in dry_pushes(recipe, script)}
    assert set(ids) == set(by_id)
    for d in pushes:
        assert isinstance(d, CommandData)
        dry = by_id[d.command_id]
        assert d.qualifier == dry.qualifier
        # stopAt is absolute: the L's limit lies as far after its deadline as in the dry run
        if dry.stop_at is UNSET:
            assert d.stop_at is UNSET
        else:
            assert d.stop_at is not UNSET and d.stop_at - d.deadline == dry.stop_at - dry.deadline


def test_a_withdraw_that_says_stop_drops_the_answer(host: Host) -> None:
    """The vacuum (S) would answer after 300 ms; the R in Unload withdraws it (`reset`)
    first, and the scripted equipment stops it: no answer is sent."""
    doc = json.loads((STATION / "happy.script.json").read_bytes())
    doc["replies"]["vacuum"] = ["ok@60000"]
    raw = json.dumps(doc).encode()
    recipe = scaled_recipe((STATION / "recipe.json").read_bytes(), K)
    scope = host.scope("stop")
    host.submit(scope, recipe, job_id="job-1")
    equipment = ScriptedEquipment(host.store(), scope, load_host_script(raw), time_scale=K)
    run_until_ended(host, scope, ["job-1"], equipment, end="Ended/Completed")
    withdraws = [(d.command_id, d.reason) for _, k, d in host.equipment(scope) if k == "withdraw"]
    assert ("job-1:vacuum#3", "reset") in withdraws
    assert equipment.counters.stopped == 1
    assert equipment.pending == 0
    rows: Any = host.client().xrange(keys.work(scope))
    answered = [
        e.data.command_id
        for e in (decode_work(i.decode(), f) for i, f in rows)
        if e.kind == "answer"
    ]
    assert "job-1:vacuum#3" not in answered


# ------------------------------------------------------------------ a worker killed


TIMED = {
    "Steps": [{"Name": "Work", "Initial": True}, {"Name": "Done"}],
    "Transitions": [{"Source": "Work", "Target": "Done", "Condition": "true"}],
    "Actions": [
        {"Name": "work", "Step": "Work", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.work", "TimeoutSeconds": 60},
        {"Name": "blow", "Step": "Work", "Qualifier": "L", "DurationSeconds": 2,
         "Interaction": "push_command", "TypeId": "t.blow", "TimeoutSeconds": 60},
        {"Name": "andon", "Step": "Work", "Qualifier": "D", "DurationSeconds": 3,
         "Interaction": "push_command", "TypeId": "t.andon", "TimeoutSeconds": 60},
        {"Name": "done", "Step": "Done", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.done", "TimeoutSeconds": 60},
    ],
}  # fmt: skip


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.close()


def test_no_timer_is_lost_when_the_worker_is_killed(fleet: Fleet) -> None:
    """The only worker is SIGKILLed after the job started, before its L limit (2 s) and its
    D (3 s); it comes back after both are due: the L is withdrawn (`limit`) and the D
    starts, then work answers and the job completes."""
    server = fleet.server()
    scope = fleet.scope(server.url, "timers")
    store = fleet.store(server.url)
    fleet.scripted(
        server.url,
        scope,
        {"replies": {"work": ["ok@5000"], "blow": ["silent"], "andon": ["silent"]}},
    )
    instance = fleet.instance(server.url, scope)
    instance.wait_serving()
    result = submit(store, scope, json.dumps(TIMED).encode(), job_id="job-1")
    assert result.ok, result.words()

    def kinds() -> list[tuple[str, str, str]]:
        out = []
        for i, f in store.equipment_entries(scope):
            e = decode_equipment(i, f)
            reason = e.data.reason if isinstance(e.data, WithdrawData) else ""
            out.append((e.kind, e.data.command_id, reason))
        return out

    wait_until(lambda: ("push", "job-1:blow#2", "") in kinds(), timeout=30, what="the L pushed")
    instance.kill()  # the job's timers, 2 s and 3 s after its start, are not due yet
    instance.start().wait_serving()
    try:
        wait_until(
            lambda: (
                ("withdraw", "job-1:blow#2", "limit") in kinds()
                and ("withdraw", "job-1:andon#3", "deactivated") in kinds()
            ),
            timeout=60,
            what="the L withdrawn at its limit, the D started and withdrawn when Work was left",
        )
    except AssertionError as e:
        raise AssertionError(
            f"{e}; the stream: {kinds()}; the log: {instance.log()[-3000:]}"
        ) from None
    wait_until(lambda: ended_count(store, scope, ["job-1"]) == 1, timeout=60, what="the job to end")
    pushes = [c for k, c, _ in kinds() if k == "push"]
    assert pushes == ["job-1:work#1", "job-1:blow#2", "job-1:andon#3", "job-1:done#4"]


def test_a_worker_killed_between_evaluating_a_timer_tick_and_its_commit(fleet: Fleet) -> None:
    """A tick that fires the D (start) and the L (withdraw `limit`) is evaluated by a worker
    that stalls before its commit and is SIGKILLed there; the next worker applies it: the D
    starts once, the L is withdrawn once, no command id twice, the job ends as its dry run."""
    server = fleet.server()
    scope = fleet.scope(server.url, "tickkill")
    store = fleet.store(server.url)
    recipe = json.dumps(TIMED).encode()
    # the work answers long after both timers: the stalled batch can only be their tick
    script = {"replies": {"work": ["ok@10000"], "blow": ["silent"], "andon": ["silent"]}}
    expected = dry_withdraws(recipe, json.dumps(script).encode())
    assert expected == [("job-1:blow#2", "limit"), ("job-1:andon#3", "deactivated")]
    fleet.scripted(server.url, scope, script)
    first = fleet.instance(server.url, scope)
    first.wait_serving()
    assert submit(store, scope, recipe, job_id="job-1").ok

    def stream() -> list[tuple[str, str, str]]:
        out = []
        for i, f in store.equipment_entries(scope):
            e = decode_equipment(i, f)
            reason = e.data.reason if isinstance(e.data, WithdrawData) else ""
            out.append((e.kind, e.data.command_id, reason))
        return out

    wait_until(lambda: ("push", "job-1:blow#2", "") in stream(), timeout=30, what="the L pushed")
    first.kill()
    record = store.job(scope, "job-1")
    assert record is not None
    timers = {n: r.timer for n, r in read_state(record.state).actions.items()}
    assert timers["blow"] is not None and timers["andon"] is not None, timers
    due = max(timers["blow"], timers["andon"])
    before = stream()
    # both timers due before the next worker looks, so that its one tick fires them both
    wait_until(lambda: server.time_ms() > due, timeout=10, what="the L's limit and the D's start")
    stall = fleet.tmp / "stall"
    stalled = fleet.instance(server.url, scope, runner=True, stall_file=stall)
    wait_until(stall.exists, timeout=30, what="the worker to evaluate the tick and stall")
    assert stream() == before, "the stalled worker committed"
    stalled.kill()
    fleet.instance(server.url, scope).wait_serving()
    wait_until(lambda: ended_count(store, scope, ["job-1"]) == 1, timeout=60, what="the job to end")
    entries = stream()
    withdraws = [(c, reason) for k, c, reason in entries if k == "withdraw"]
    assert withdraws == expected, entries
    pushes = [c for k, c, _ in entries if k == "push"]
    assert pushes == ["job-1:work#1", "job-1:blow#2", "job-1:andon#3", "job-1:done#4"], entries
    record = store.job(scope, "job-1")
    assert record is not None
    assert read_state(record.state).status == "completed"


def test_job_show_says_the_timers_the_running_stored_work_and_the_recorded_outcomes(
    host: Host,
) -> None:
    """In Press: the andon's D waits, the vacuum (S) runs from Load, the air valve (L) runs
    to its limit, the retract (P0) answered, recorded in the history, and the label (P1)."""
    from cli.job import show_text
    from host import readmodel

    raw = b'{"replies": {"press": ["silent"], "blow_off": ["silent"], "vacuum": ["silent"]}}'
    scope = host.scope("show")
    host.submit(scope, (STATION / "recipe.json").read_bytes(), job_id="job-1")
    equipment = ScriptedEquipment(host.store(), scope, load_host_script(raw), time_scale=0.001)
    worker = host.worker([scope])

    def in_press() -> bool:
        worker.read_once(block_ms=5)
        equipment.pump(block_ms=5)
        d = readmodel.job_detail(host.store(), scope, "job-1")
        answered = any("print_label answered ok" in h.reason for h in d.history) if d else False
        return d is not None and d.active_steps == ["Press"] and answered

    wait_until(in_press, timeout=30, what="the job in Press with the label printed", every=0)
    d = readmodel.job_detail(host.store(), scope, "job-1")
    assert d is not None
    shown = show_text(d)
    assert "\nProcess timers\n  andon (D 20 s) starts at " in shown
    assert "\nWork of non-gating actions still running\n" in shown
    assert "  vacuum (S): job-1:vacuum#3 runs (step Load)\n" in shown
    assert (
        "  blow_off (L 2 s): job-1:blow_off#5 runs (its step is active); withdrawn at its limit at "
    ) in shown
    # the label's step was left: its outcome is in the history, the state forgot it
    assert "print_label answered ok (P1: recorded, not waited for)" in shown


# ------------------------------------------------------------------ MQTT


def test_mqtt_carries_the_qualifier_and_stop_at_and_the_device_stops_withdrawn_work() -> None:
    """A push of an L carries sfcqualifier and sfcstopat; the device schedules its answer,
    and a withdraw `limit` drops it (stopped), where a withdraw `redispatch` would not."""
    from host.mqtt import Received, Topics, command_message, notice_message, parse_broker_url
    from host.mqtt.cloudevents import read_cloudevent
    from host.mqtt.device import MqttDevice

    topics = Topics("s")
    now = [1_700_000_000.0]
    data = CommandData(
        command_id="j-1:blow#2", action_key="j-1:blow", job="j-1", type_id="t.blow",
        attempt=1, round=1, deadline=1_700_000_030_000, expires_at=1_700_000_028_000,
        parameters={}, qualifier="L", stop_at=1_700_000_002_000,
    )  # fmt: skip
    m = command_message(topics, "push", data, 1_700_000_000_000, 1_700_000_000_000)
    assert m is not None
    attributes = read_cloudevent(m.payload, m.content_type, m.user_properties).attributes
    assert (attributes["sfcqualifier"], attributes["sfcstopat"]) == ("L", "1700000002000")
    plain = command_message(topics, "push", replace(data, qualifier=UNSET, stop_at=UNSET), 0, 0)
    assert plain is not None
    assert (
        "sfcqualifier"
        not in read_cloudevent(plain.payload, plain.content_type, plain.user_properties).attributes
    )

    def received(message: Any) -> Any:
        return Received(
            topic=message.topic,
            payload=message.payload,
            content_type=message.content_type,
            user_properties=message.user_properties,
            correlation_data=message.correlation_data,
            response_topic=message.response_topic,
            mid=0,
            qos=1,
        )

    def withdraw(reason: str) -> Any:
        w = WithdrawData(command_id="j-1:blow#2", action_key="j-1:blow", job="j-1",
                         type_id="t.blow", reason=reason)  # fmt: skip
        n = notice_message(topics, "withdraw", w, 1_700_000_000_000, 1_700_000_000_000)
        assert n is not None
        assert json.loads(n.payload) == {"reason": reason}
        return received(n)

    script = load_host_script(b'{"replies": {"blow": ["ok@60000"]}}')
    device = MqttDevice(
        parse_broker_url("mqtt://127.0.0.1:1"), topics, script, clock=lambda: now[0]
    )
    try:
        device._ask(received(m))
        assert len(device._due) == 1
        device._ask(withdraw("redispatch"))  # an attempt that no longer counts: answered
        assert len(device._due) == 1 and device.counters.stopped == 0
        device._ask(withdraw("limit"))  # stop the work
        assert device._due == [] and device.counters.stopped == 1
    finally:
        device.close()


@pytest.mark.parametrize("qualifier", ["N", "L"])
def test_the_evaluator_counts_the_lateness_the_core_names(host: Host, qualifier: str) -> None:
    """sfc_timer_lateness and sfc_non_gating_outcomes as the core's helpers name them: a
    dwell (MinSeconds) is late in a recipe of N blocks only too, an L's limit beside it."""
    action: dict[str, Any] = {
        "Name": "a1",
        "Step": "S1",
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": "com.example.press.v1",
        "TimeoutSeconds": 30,
    }
    if qualifier == "L":
        action["DurationSeconds"] = 0.5
    recipe = {
        "Steps": [{"Name": "S1", "Initial": True, "MinSeconds": 1}, {"Name": "S2"}],
        "Transitions": [{"Source": "S1", "Target": "S2", "Condition": "true"}],
        "Actions": [
            action,
            {
                "Name": "a2",
                "Step": "S2",
                "Qualifier": "N",
                "Interaction": "push_command",
                "TypeId": "com.example.unload.v1",
                "TimeoutSeconds": 30,
            },
        ],
    }
    store = host.store()
    scope = host.scope("lateness")
    assert submit(store, scope, json.dumps(recipe).encode(), job_id="job-1").ok
    record = store.load(scope, ["job-1"])[1]["job-1"]
    assert record is not None
    settings = Settings()
    evaluator = Evaluator(GraphCache(store), settings)
    config = ScopeConfig.of({}, settings)
    started = evaluator.evaluate(
        scope,
        "job-1",
        record,
        [Entry("", "start", StartData(job="job-1"))],
        1000,
        config,
        Outcome(),
    )
    state = read_state(started.state)
    assert state.dwells == {"S1": 2000}
    tally = Outcome()
    tick = Entry("2200-0", "tick", TickData(job="job-1"))
    record = JobRecord(record.version, started.state, started.order, "")
    ticked = evaluator.evaluate(scope, "job-1", record, [tick], 5000, config, tally)
    assert tally.applied == 1
    graph = graph_of(json.dumps(recipe).encode())
    assert tally.timer_late == overdue_timers(state, 2200, True)
    assert sorted(tally.timer_late) == ([200, 700] if qualifier == "L" else [200])
    result = evolve(graph, state, Snapshot(max_attempts=settings.max_attempts), Tick(at=2200))
    assert read_state(ticked.state) == result.state
    expected = {key: 1 for key in non_gating_outcomes(graph, Tick(at=2200), result)}
    assert tally.non_gating == expected == ({("L", "done"): 1} if qualifier == "L" else {})

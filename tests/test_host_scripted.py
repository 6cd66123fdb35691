"""The scripted equipment on the real equipment stream (host/scripted.py), on a real server.

Every example script without `events` and `controls` runs through the host (a stepped
worker and the scripted equipment) and must end as its dry run ends: the same end, fault
code and outcomes, and the same push, hold and restart commands in the same order.

The examples' delays and deadlines are tens of seconds, so each runs as a fast variant:
every scripted delay is scaled by `k` (the equipment's `time_scale`), and every
`TimeoutSeconds` by `k` too, rounded up to whole seconds (at least 1, the recipe format's
least). That changes the ratios, so each variant is first checked to tell the same story
in a dry run as the original (end, outcomes, commands); then the host must end as the
variant's dry run.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from generated.command_v1_0 import StartWork
from generated.dryrun_result_v1_1 import DryRunResult
from generated.step_result_v1_0 import Complete
from host import keys
from host.entries import decode_work
from host.scripted import SOURCE, ScriptedEquipment, load_host_script
from host.store import unreachable
from sfc.builder import build
from sfc.graph import Graph
from sfc.simulation import ScriptError, Simulation, load_script
from tests.hostkit import Host, linear_recipe, wait_for

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


SCRIPTS = sorted(EXAMPLES.glob("*/*.script.json"))
REPLY_ONLY = [p for p in SCRIPTS if not _doc(p).get("events") and not _doc(p).get("controls")]
CLOCK_ITEMS = [p for p in SCRIPTS if p not in REPLY_ONLY]
SCALE = {
    "recovery-routing/operator-absent": 0.005,
    "press-fit-line/happy": 0.1,
    "press-fit-line/reject": 0.1,
    "press-fit-line/slow-press": 0.1,
}
"""The scale of a variant when not 0.01: an operator wait of 600 s would take 6 s; the
press-fit line's process timers race its answers by tens of ms at 0.01, more than a busy
host's latency."""


def name_of(script: Path) -> str:
    return f"{script.parent.name}/{script.name.removesuffix('.script.json')}"


def graph_of(recipe: bytes) -> Graph:
    built = build(recipe)
    assert built.graph is not None, built.errors
    return built.graph


def scaled_recipe(recipe: bytes, k: float) -> bytes:
    """The recipe with its deadlines (whole seconds, at least 1) and its process timers
    (DurationSeconds, MinSeconds) scaled by `k`; an R block has neither."""
    doc = json.loads(recipe)
    for action in doc["Actions"]:
        if "TimeoutSeconds" in action:
            action["TimeoutSeconds"] = max(1, math.ceil(action["TimeoutSeconds"] * k))
        if "DurationSeconds" in action:
            action["DurationSeconds"] = max(0.001, round(action["DurationSeconds"] * k, 3))
    for step in doc["Steps"]:
        if "MinSeconds" in step:
            step["MinSeconds"] = max(0.001, round(step["MinSeconds"] * k, 3))
    return json.dumps(doc).encode()


def scaled_script(script: bytes, k: float) -> bytes:
    """The script with every delay scaled by `k`, as the equipment's `time_scale` does."""
    doc = json.loads(script)

    def scale(reply: str) -> str:
        m = re.fullmatch(r"(.*)@([0-9]+)", reply)
        return reply if m is None else f"{m[1]}@{round(int(m[2]) * k)}"

    if "default" in doc:
        doc["default"] = scale(doc["default"])
    doc["replies"] = {key: [scale(r) for r in rs] for key, rs in doc.get("replies", {}).items()}
    return json.dumps(doc).encode()


def story(result: DryRunResult) -> tuple[str, str | None, list[str] | None, list[tuple[str, str]]]:
    """A dry run's end, fault code, outcomes and its push, hold and restart commands (each
    command id once, in the order issued)."""
    commands: list[tuple[str, str]] = []
    for entry in result.transcript:
        for c in entry.commands:
            pushed = isinstance(c, StartWork) and c.work in ("push", "hold", "restart")
            if pushed and (c.command_id, c.work) not in commands:
                commands.append((c.command_id, c.work))
    last = result.transcript[-1].continuation
    outcomes = list(last.outcomes) if isinstance(last, Complete) else None
    code = None if result.fault is None else result.fault.code
    return result.end, code, outcomes, commands


def host_story(
    host: Host, scope: str, job: str
) -> tuple[str, str | None, list[str] | None, list[tuple[str, str]]]:
    """The same as `story`, of a job the host ran."""
    order = host.order(scope, job)
    result = order.result
    end = {"completed": "completed", "faulted": "faulted"}.get(result.ended_by, "cancelled")
    outcomes = list(result.outcomes) if end == "completed" else None
    commands = [
        (data.command_id, kind)
        for _, kind, data in host.equipment(scope)
        if kind in ("push", "hold", "restart") and data.job == job
    ]
    return end, result.fault_code, outcomes, commands


HOST_END = {"completed": "Ended/Completed", "faulted": "Aborted"}
"""The job order's end for a dry run's end."""


def run_until_ended(
    host: Host,
    scope: str,
    jobs: list[str],
    equipment: ScriptedEquipment,
    *,
    end: str,
    timeout: float = 30,
) -> None:
    """Serve `scope` until every job of `jobs` has ended as `end` (an order path prefix)."""
    worker = host.worker([scope])
    host.run([worker], [equipment], host.ended(scope, jobs, end), timeout=timeout)  # type: ignore[list-item]


def answers_in_work(host: Host, scope: str) -> list[Any]:
    rows: Any = host.client().xrange(keys.work(scope))
    entries = [decode_work(i.decode(), f) for i, f in rows]
    return [e.data for e in entries if e.kind in ("answer", "event")]


@pytest.mark.parametrize("script", REPLY_ONLY, ids=name_of)
def test_an_example_ends_as_its_dry_run(host: Host, script: Path) -> None:
    k = SCALE.get(name_of(script), 0.01)
    recipe = (script.parent / "recipe.json").read_bytes()
    raw = script.read_bytes()
    original = Simulation(graph_of(recipe), load_script(raw), job_id="job-1").run()
    variant_recipe = scaled_recipe(recipe, k)
    variant = Simulation(
        graph_of(variant_recipe), load_script(scaled_script(raw, k)), job_id="job-1"
    ).run()
    assert story(variant) == story(original), "the fast variant tells another story"
    assert variant.end in ("completed", "faulted")

    scope = host.scope("scripted")
    host.submit(scope, variant_recipe, job_id="job-1")
    equipment = ScriptedEquipment(host.store(), scope, load_host_script(raw), time_scale=k)
    run_until_ended(host, scope, ["job-1"], equipment, end=HOST_END[variant.end])

    assert host_story(host, scope, "job-1") == story(variant)
    assert equipment.counters.dropped_expired == 0
    assert equipment.counters.duplicates == 0


def test_enough_examples_run_on_the_host() -> None:
    assert len(REPLY_ONLY) >= 8, [name_of(p) for p in REPLY_ONLY]


@pytest.mark.parametrize("script", CLOCK_ITEMS, ids=name_of)
def test_a_script_with_events_or_controls_is_refused(host: Host, script: Path) -> None:
    doc = _doc(script)
    path = "$.events" if doc.get("events") else "$.controls"
    with pytest.raises(ScriptError) as refused:
        load_host_script(script.read_bytes())
    assert refused.value.path == path
    for words in ("virtual clock", "sfc event", "sfc job pause|resume|stop|abort"):
        assert words in refused.value.message
    scope = host.scope("refused")
    with pytest.raises(ScriptError, match="virtual clock"):
        ScriptedEquipment(host.store(), scope, load_script(script.read_bytes()))


def test_empty_events_and_controls_are_no_clock_items() -> None:
    """Empty `events` and `controls` lists ask for no virtual clock: the host takes them."""
    script = load_host_script(b'{"events": [], "controls": [], "default": "ok"}')
    assert (script.events, script.controls, script.default) == ([], [], "ok")
    with pytest.raises(ScriptError, match="virtual clock"):
        load_host_script(b'{"events": [], "controls": [{"kind": "hold", "atMs": 1}]}')


def test_counting_is_per_job(host: Host) -> None:
    """Each job's equipment is asked afresh: both jobs get the first reply."""
    scope = host.scope("perjob")
    script = load_host_script(b'{"replies": {"a1": ["first@20", "second"]}}')
    jobs = ["j1", "j2"]
    for job in jobs:
        host.submit(scope, linear_recipe(1), job_id=job)
    equipment = ScriptedEquipment(host.store(), scope, script)
    run_until_ended(host, scope, jobs, equipment, end="Ended/Completed")
    for job in jobs:
        assert host.order(scope, job).result.outcomes == ["first"]
    dry = Simulation(graph_of(linear_recipe(1)), script).run()
    assert story(dry)[2] == ["first"]
    assert equipment.counters.asked == 2
    assert equipment.counters.answered == 2


def test_the_scripted_answers_forget_what_expired_and_still_answer_each_command_once() -> None:
    """`sfc equipment` remembered every command id, and every job's reply count, for as
    long as it ran. Past its expiresAt a copy is dropped as expired anyway, so the id is
    forgotten; a job's count goes a day after its last command's expiry."""
    from generated.equipment_entry_v1_0 import CommandData
    from host.scripted import ASKED_RETENTION_MS, FORGET_EVERY, ScriptAnswers

    answers = ScriptAnswers(load_host_script(b'{"replies": {"a1": ["first", "second"]}}'))

    def command(job: str, n: int, expires_at: int) -> CommandData:
        return CommandData(
            command_id=f"{job}:a1#{n}", action_key=f"{job}:a1", job=job, type_id="t",
            attempt=1, round=n, deadline=expires_at + 2000, expires_at=expires_at,
            parameters={},
        )  # fmt: skip

    first = command("keep", 1, 10**9)
    assert answers.ask("push", first, 0) is not None
    for i in range(FORGET_EVERY * 3):
        assert answers.ask("push", command(f"j{i}", 1, 1000 + i), 1000 + i) is not None
    assert answers.ask("push", command("j5", 1, 1005), 10**6) is None  # expired: dropped
    assert answers.counters.dropped_expired == 1
    assert answers.ask("push", first, 10**6) is None  # a live copy: still a duplicate
    assert answers.counters.duplicates == 1
    remembered = len(answers._seen)
    assert remembered <= FORGET_EVERY + 1, remembered  # expired ids went
    # a job's reply count is kept while it may ask again, and goes a day after
    second = answers.ask("push", command("keep", 2, 2 * 10**9), 10**6)
    assert second is not None and second.outcome == "second"
    later = 2 * 10**9 + ASKED_RETENTION_MS + 1
    for i in range(FORGET_EVERY):
        answers.ask("push", command(f"k{i}", 1, later + 10**6), later)
    assert ("keep", "a1") not in answers._asked and len(answers._asked) <= FORGET_EVERY + 1


def test_an_answer_that_could_not_be_sent_is_sent_when_the_server_is_back(host: Host) -> None:
    """The server went away as an answer fell due: it stays due, and goes out with the next
    pump that reaches the server (a real server, and a real port nobody listens on)."""
    import socket

    from host.store import Store

    scope = host.scope("resend")
    host.submit(scope, linear_recipe(1), job_id="j1")
    script = load_host_script(b'{"replies": {"a1": ["ok@50"]}}')
    equipment = ScriptedEquipment(host.store(), scope, script)
    worker = host.worker([scope])
    wait_for(
        lambda: equipment.counters.asked == 1,
        step=lambda: (worker.read_once(block_ms=5), equipment.pump(block_ms=5)),
        what="the push to be asked",
    )
    due = equipment.next_due_ms()
    assert due is not None and equipment.counters.answered == 0
    wait_for(lambda: equipment.now_ms() >= due, what="the answer to fall due")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    live, equipment.store = equipment.store, Store.from_url(f"redis://127.0.0.1:{closed}")
    with pytest.raises(Exception) as gone:
        equipment._send_due()
    assert unreachable(gone.value)
    assert (equipment.pending, equipment.counters.answered) == (1, 0)
    equipment.store = live
    wait_for(lambda: equipment.counters.answered == 1, step=equipment.pump, what="the answer")
    assert [a.command_id for a in answers_in_work(host, scope)] == ["j1:a1#1"]


def test_a_command_delivered_twice_is_answered_once(host: Host) -> None:
    scope = host.scope("dedupe")
    host.submit(scope, linear_recipe(1), job_id="j1")
    script = load_host_script(b'{"replies": {"a1": ["first@200", "second"]}}')
    equipment = ScriptedEquipment(host.store(), scope, script)
    worker = host.worker([scope])

    def step() -> None:
        worker.read_once(block_ms=5)
        equipment.pump()

    wait_for(lambda: equipment.counters.asked == 1, step=step, what="the push to be asked")
    r = host.client()
    stream = keys.equipment(scope)
    rows: Any = r.xrange(stream)
    [fields] = [f for _, f in rows if f[b"kind"] == b"push"]
    copy = r.xadd(stream, fields)  # the same command, delivered again
    try:
        # the equipment alone from here, so that its answers stay in the work stream
        wait_for(
            lambda: equipment.counters.duplicates == 1 and equipment.counters.answered == 1,
            step=lambda: equipment.pump(block_ms=20),
            what="the copy and the answer",
        )
        answers = answers_in_work(host, scope)
        run_until_ended(host, scope, ["j1"], equipment, end="Ended/Completed")
    finally:
        r.xdel(stream, copy)  # the host never appends a command id twice; the test did
    assert [(a.command_id, a.outcome) for a in answers] == [("j1:a1#1", "first")]
    assert host.order(scope, "j1").result.outcomes == ["first"]
    assert equipment.counters.asked == 1
    assert equipment.counters.answered == 1


def wait_recipe(timeout_s: int = 10) -> bytes:
    """One pull action whose selector names the job; the job completes with its outcome."""
    return json.dumps(
        {
            "Steps": [{"Name": "Wait", "Initial": True}],
            "Transitions": [],
            "Actions": [
                {
                    "Name": "result",
                    "Step": "Wait",
                    "Qualifier": "N",
                    "Interaction": "pull_event",
                    "TypeId": "com.example.result.v1",
                    "TimeoutSeconds": timeout_s,
                    "Selector": {"Subject": "cell/{jobId}", "CorrelationId": "c-{jobId}"},
                }
            ],
        }
    ).encode()


@pytest.mark.parametrize(
    ("reply", "outcome", "end"),
    [
        ("passed@50", "passed", ("completed", None, ["passed"])),
        # an error reply is an event with the reserved outcome `error`, as in the dry run;
        # no transition takes it, so the job faults
        ("error:x", "error", ("faulted", "error", None)),
    ],
)
def test_a_wait_is_answered_by_an_event_that_completes_it(
    host: Host, reply: str, outcome: str, end: tuple[str, str | None, list[str] | None]
) -> None:
    scope = host.scope("await")
    recipe = wait_recipe()
    script = load_host_script(json.dumps({"replies": {"result": [reply]}}).encode())
    dry = Simulation(graph_of(recipe), script, job_id="w1").run()
    host.submit(scope, recipe, job_id="w1")
    equipment = ScriptedEquipment(host.store(), scope, script)
    worker = host.worker([scope])

    def step() -> None:
        worker.read_once(block_ms=5)
        equipment.pump(block_ms=5)

    # stop as soon as the event is sent, before the worker takes it from the work stream
    wait_for(lambda: equipment.counters.events_published == 1, step=step, what="the event")
    [event] = answers_in_work(host, scope)
    run_until_ended(host, scope, ["w1"], equipment, end=HOST_END[dry.end])

    assert host_story(host, scope, "w1") == story(dry)
    assert story(dry)[:3] == end
    assert equipment.counters.events_published == 1
    assert equipment.counters.events_unmatched == 0
    assert (event.type_id, event.subject, event.correlation_id) == (
        "com.example.result.v1",
        "cell/w1",
        "c-w1",
    )
    assert (event.outcome, event.source, event.id) == (outcome, SOURCE, "w1:result#1")


def test_a_withdrawn_attempts_late_answer_still_arrives(host: Host) -> None:
    """Attempt 1 is silent past its 1 s deadline and answers late; attempt 2 answers at once.
    The job completes with attempt 2's answer, as in the dry run, and the late answer is
    sent all the same (the core absorbs it). The late answer comes 2 s after the deadline:
    margin for a loaded machine, where the sweep that fires the deadline may lag."""
    scope = host.scope("late")
    recipe = linear_recipe(1, timeout_s=1, max_attempts=2)
    script = load_host_script(b'{"replies": {"a1": ["late@3000", "second"]}}')
    dry = Simulation(graph_of(recipe), script, job_id="j1").run()
    host.submit(scope, recipe, job_id="j1")
    equipment = ScriptedEquipment(host.store(), scope, script)
    run_until_ended(host, scope, ["j1"], equipment, end="Ended/Completed")
    assert host_story(host, scope, "j1") == story(dry)
    assert story(dry)[2] == ["second"]
    wait_for(
        lambda: equipment.counters.answered == 2,
        step=lambda: equipment.pump(block_ms=20),
        what="the late answer",
    )
    assert equipment.counters.withdrawn >= 1
    # the worker has stopped, so the late answer is still in the work stream
    assert [(a.command_id, a.outcome) for a in answers_in_work(host, scope)] == [
        ("j1:a1#1", "late")
    ]


def test_a_command_read_past_its_expiry_is_dropped(host: Host) -> None:
    scope = host.scope("expired")
    host.submit(scope, linear_recipe(1, timeout_s=1, max_attempts=1), job_id="j1")
    script = load_host_script(b'{"default": "ok"}')
    late = ScriptedEquipment(
        host.store(), scope, script, clock=lambda: time.time() + 3600
    )  # its clock says the command expired an hour ago
    run_until_ended(host, scope, ["j1"], late, end="Aborted")
    assert host.order(scope, "j1").result.ended_by == "faulted"
    assert late.counters.dropped_expired == 1
    assert late.counters.asked == 0
    assert late.counters.answered == 0


def test_delays_are_wall_clock_from_the_command(host: Host) -> None:
    """An answer is not sent before its delay has passed since the command was issued."""
    scope = host.scope("delay")
    host.submit(scope, linear_recipe(1), job_id="j1")
    script = load_host_script(b'{"default": "ok@400"}')
    equipment = ScriptedEquipment(host.store(), scope, script)
    worker = host.worker([scope])

    def step() -> None:
        worker.read_once(block_ms=5)
        equipment.pump(block_ms=5)

    wait_for(lambda: equipment.pending == 1, step=step, what="the answer to be scheduled")
    [(entry_id, _, _)] = host.equipment(scope)
    wait_for(lambda: equipment.counters.answered == 1, step=step, what="the answer")
    [answer] = answers_in_work(host, scope)
    rows: Any = host.client().xrange(keys.work(scope))
    answered_at = max(int(i.split(b"-")[0]) for i, _ in rows)
    assert answered_at - int(entry_id.split("-")[0]) >= 400
    assert answer.outcome == "ok"


def test_run_answers_from_its_own_thread_until_stopped(host: Host) -> None:
    """`run(stop)` is the loop the command line runs: it pumps until `stop` is set."""
    scope = host.scope("thread")
    jobs = ["j1", "j2", "j3"]
    for job in jobs:
        host.submit(scope, linear_recipe(3), job_id=job)
    script = load_host_script(b'{"default": "ok@30", "replies": {"a3": ["done@10"]}}')
    equipment = ScriptedEquipment(host.store(), scope, script)
    stop = threading.Event()
    thread = threading.Thread(target=equipment.run, args=(stop,), kwargs={"block_ms": 20})
    thread.start()
    try:
        host.run([host.worker([scope])], [], host.ended(scope, jobs))
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
    for job in jobs:
        assert host.order(scope, job).result.outcomes == ["done"]
    assert equipment.counters.answered == 9


def test_a_scripted_equipment_that_stopped_with_answers_scheduled_answers_them_next_time(
    host: Host,
) -> None:
    """It acknowledged a command when it scheduled its answer: stopped (or killed) before
    the answer was due, the answer was lost, and a wait for an event faulted its job (a
    wait gets no second attempt)."""
    scope = host.scope("scheduled")
    host.submit(scope, linear_recipe(1, timeout_s=600, max_attempts=1), job_id="j")
    script = load_host_script(b'{"replies": {"a1": ["ok@1500"]}}')
    first = ScriptedEquipment(host.store(), scope, script)
    worker = host.worker([scope])
    wait_for(
        lambda: first.counters.asked == 1,
        step=lambda: (worker.read_once(block_ms=5), first.pump(block_ms=5)),
        what="the push to be asked",
    )
    assert first.pending == 1 and first.counters.answered == 0
    # the first one stops here (no more pumps), its answer scheduled and not sent
    second = ScriptedEquipment(host.store(), scope, script)
    wait_for(
        host.ended(scope, ["j"]),
        step=lambda: (second.pump(block_ms=5), worker.read_once(block_ms=5)),
        what="the job, answered by the next run",
    )
    assert host.order_path(scope, "j") == "Ended/Completed"
    assert second.counters.answered == 1 and first.counters.answered == 0
    pending = host.client().xpending(keys.equipment(scope), "sfc-equipment")
    assert pending["pending"] == 0  # acknowledged once answered

"""Job control on a real server: the ISA-95 methods, each applied as one commit."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host import joborder, jobs, jobview, keys
from host.equipment import Answer, respond
from host.joborder import ReturnStatus
from host.scripted import ScriptedEquipment, load_host_script
from host.worker import Worker
from sfc.codec import state_decoder
from sfc.simulation import Simulation, load_script
from tests.hostkit import Host, linear_recipe, wait_for
from tests.test_host_scripted import graph_of, host_story, story

ROOT = Path(__file__).resolve().parent.parent
TIGHTENING = (ROOT / "examples/tightening-hold/recipe.json").read_bytes()

CALLS: dict[str, Any] = {
    "Start": jobs.start,
    "RevokeStart": jobs.revoke_start,
    "Pause": jobs.pause,
    "Resume": jobs.resume,
    "Stop": jobs.stop,
    "Abort": jobs.abort,
    "Update": lambda store, scope, job: jobs.update(store, scope, job, priority=7),
    "Cancel": jobs.cancel,
    "Clear": jobs.clear,
    "RequestJobResponseByJobOrderID": lambda store, scope, job: jobs.job_response(
        store, scope, job
    )[0],
}
STATES = ["NotAllowedToStart", "AllowedToStart", "Running", "Interrupted", "Ended", "Aborted"]


def _path(host: Host, scope: str, job: str) -> str | None:
    record = host.store().job(scope, job)
    return None if record is None else joborder.path_text(jobs.decode_order(record.order))


def _in_state(host: Host, idle: str, busy: str, worker: Worker, state: str, job: str) -> str:
    """A job of `state`: not-started jobs in the scope no worker reads, the rest in `busy`."""
    store = host.store()
    if state in ("NotAllowedToStart", "AllowedToStart"):
        host.submit(idle, linear_recipe(1), job_id=job, start=state == "AllowedToStart")
        return idle
    host.submit(busy, linear_recipe(1), job_id=job)
    host.run([worker], [], lambda: _path(host, busy, job) == "Running", sweep=False)
    if state == "Interrupted":
        assert jobs.pause(store, busy, job).ok
    elif state == "Ended":
        assert jobs.stop(store, busy, job).ok
    elif state == "Aborted":
        assert jobs.abort(store, busy, job).ok
    assert (_path(host, busy, job) or "").split("/")[0] == state
    return busy


def _expected(method: str, state: str | None) -> tuple[ReturnStatus, str | None]:
    """The ReturnStatus and the state after, from the job-order table itself."""
    table = "RequestJobResponseByJobOrderID" if method.startswith("Request") else method
    if state is None:
        return ReturnStatus.UNKNOWN_JOB_ORDER_ID, None
    allowed = joborder.ALLOWED_IN[table]
    if joborder.ANY not in allowed and state not in allowed:
        return ReturnStatus.INVALID_JOB_ORDER_STATUS, state
    if method in ("Cancel", "Clear"):
        return ReturnStatus.OK, None
    target = joborder.TARGET.get(method)
    return ReturnStatus.OK, state if target is None else target[0]


def test_every_method_in_every_state_gives_the_status_and_state_of_the_table(host: Host) -> None:
    idle, busy = host.scope("idle"), host.scope("busy")
    host.store().create_group(idle)
    host.store().create_group(busy)
    worker = host.worker([busy])
    checked = 0
    for state in [*STATES, None]:
        for method, call in CALLS.items():
            job = f"{method[:12]}-{state or 'unknown'}"
            scope = busy if state is None else _in_state(host, idle, busy, worker, state, job)
            result = call(host.store(), scope, job)
            status, after = _expected(method, state)
            assert result.status == status, f"{method} in {state}: {result.words()}"
            now = _path(host, scope, job)
            assert (None if now is None else now.split("/")[0]) == after, f"{method} in {state}"
            checked += 1
    assert checked == len(CALLS) * (len(STATES) + 1)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.lists(
        st.sampled_from(["Pause", "Resume", "Stop", "Abort", "Start", "RevokeStart", "answer"]),
        max_size=8,
    )
)
def test_random_methods_and_recipe_events_never_leave_the_table(
    valkey_url: str, steps: list[str]
) -> None:
    host = Host(valkey_url)
    try:
        scope = host.scope("random")
        store = host.store()
        job = host.submit(scope, linear_recipe(2), job_id="j").job
        worker = host.worker([scope])
        responder = host.responder(scope)
        valid = {
            "NotAllowedToStart/Ready",
            "AllowedToStart/Ready",
            "Running",
            "Interrupted/Suspended",
            "Ended/Completed",
            "Ended/Closed",
            "Aborted",
        }
        for step in steps:
            before = _path(host, scope, job)
            if step == "answer":
                responder.pump()
            else:
                result = CALLS[step](store, scope, job)
                status, _ = _expected(step, (before or "").split("/")[0])
                assert result.status == status, (step, before, result.words())
            worker.read_once(block_ms=5)
            assert _path(host, scope, job) in valid
            record = store.job(scope, job)
            if record is not None and state_decoder.decode(record.state).status in (
                "completed",
                "faulted",
                "cancelled",
            ):  # a recipe that ended ended its order in the same commit
                assert joborder.ended(jobs.decode_order(record.order)), (steps, step)
        host.check_exactly_once()
    finally:
        host.close()


def _tightening_equipment(kind: str, data: Any) -> Answer | None:
    action = data.action_key.split(":")[-1]
    if kind == "hold":
        return Answer(outcome="held")
    if action == "tighten" and kind == "push":
        return None  # it runs long: the pause comes while it is out
    return Answer(outcome="ok")


def test_the_tightening_example_paused_and_resumed_with_equipment_hold(host: Host) -> None:
    scope = host.scope("tight")
    store = host.store()
    job = host.submit(scope, TIGHTENING, job_id="t").job
    worker = host.worker([scope])
    responder = host.responder(scope, _tightening_equipment)

    def kinds() -> list[tuple[str, str]]:
        return [(k, d.command_id) for _, k, d in host.equipment(scope)]

    host.run([worker], [responder], lambda: ("push", "t:tighten#2") in kinds())
    paused = jobs.pause(store, scope, job, comment="operator break")
    assert paused.ok and paused.message == "Interrupted/Suspended"
    # the hold command went out in the Pause's own commit
    assert kinds()[-1] == ("hold", "t:tighten#3:hold")
    host.run([worker], [responder], lambda: ("withdraw", "t:tighten#2") in kinds())
    # the late answer of the withdrawn attempt is absorbed
    respond(store, scope, job, "tighten", outcome="ok", command_id="t:tighten#2", round=1)
    worker.read_once(block_ms=200)
    last = store.history(scope, job, 1)[0][1]
    assert b'"disposition":"absorbed"' in last[b"data"]
    assert jobs.pause(store, scope, job).status == ReturnStatus.INVALID_JOB_ORDER_STATUS
    resumed = jobs.resume(store, scope, job)
    assert resumed.ok and resumed.message == "Running"
    assert jobs.resume(store, scope, job).status == ReturnStatus.INVALID_JOB_ORDER_STATUS
    host.run([worker], [responder], host.ended(scope, [job]))
    assert _path(host, scope, job) == "Ended/Completed"
    sent = [(k, c) for k, c in kinds() if k in ("push", "hold", "restart")]
    assert sent == [
        ("push", "t:clamp#1"),
        ("push", "t:tighten#2"),
        ("hold", "t:tighten#3:hold"),
        ("restart", "t:tighten#4"),
        ("push", "t:unclamp#5"),
    ]
    order = host.order(scope, job)
    assert [c.text for c in order.comments] == ["operator break"]


def test_a_method_from_the_cli_or_mcp_commits_with_the_sfc_settings(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sfc job pause` and the MCP tool send the hold command with SFC_EXPIRY_GRACE, as a
    worker would: they used the defaults. They trim no history, whatever this process's
    SFC_HISTORY_LIMIT: the workers' limit is not known here, and a shell's smaller one cut
    what `sfc serve --history-limit` keeps."""
    from typer.testing import CliRunner

    from cli.main import app
    from cli.mcptools import build_server
    from host.settings import Settings
    from tests.test_mcp import _ok, _run

    scope = host.scope("cliset")
    jobs_ = [host.submit(scope, TIGHTENING, job_id=j).job for j in ("c", "m")]
    worker = host.worker([scope])
    responder = host.responder(scope, _tightening_equipment)
    pushed = {("push", f"{j}:tighten#2") for j in jobs_}
    host.run([worker], [responder], lambda: pushed <= set(_sent(host, scope)))

    def hold_of(job: str) -> Any:
        (hold,) = [d for _, k, d in host.equipment(scope) if k == "hold" and d.job == job]
        return hold

    kept = {j: host.client().xlen(keys.history(scope, j)) for j in jobs_}
    assert min(kept.values()) >= 2, kept
    monkeypatch.setenv("SFC_EXPIRY_GRACE", "3s")
    monkeypatch.setenv("SFC_HISTORY_LIMIT", "1")
    r = CliRunner().invoke(app, ["job", "pause", "c", "--scope", scope, "--redis", host.url])
    assert r.exit_code == 0, r.output
    hold = hold_of("c")
    assert hold.expires_at == hold.deadline - 3000  # the default grace is 2000
    assert host.client().xlen(keys.history(scope, "c")) == kept["c"] + 1  # nothing trimmed

    server, conn = build_server(host.url, True, Settings(expiry_grace=4000, history_limit=2))
    assert conn is not None

    async def body(c: Any) -> None:
        _ok(await c.call_tool("sfc_pause", {"job": "m", "scope": scope}))

    try:
        _run(server, body)
    finally:
        conn.close()
    hold = hold_of("m")
    assert hold.expires_at == hold.deadline - 4000
    assert host.client().xlen(keys.history(scope, "m")) == kept["m"] + 1


def test_the_scope_s_expiry_grace_is_the_one_of_every_process_that_commits(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SFC_EXPIRY_GRACE is a scope setting (`expiryGrace`), as SFC_MAX_ATTEMPTS is: a Pause
    and a Resume from `sfc job` sent their hold and restart with the grace of the operator's
    shell (here 1 s), the workers with serve's (here the default 2 s), so the equipment of a
    plant that set 4 s dropped an operator's commands as expired early."""
    from typer.testing import CliRunner

    from cli.main import app

    scope = host.scope("grace")
    at = ["--scope", scope, "--redis", host.url]
    monkeypatch.setenv("SFC_EXPIRY_GRACE", "4s")
    r = CliRunner().invoke(app, ["setup", *at])
    assert (r.exit_code, r.output) == (0, f"scope {scope}: ready (expiryGrace)\n"), r.output
    monkeypatch.setenv("SFC_EXPIRY_GRACE", "1s")  # the operator's shell
    job = host.submit(scope, TIGHTENING, job_id="t").job
    worker = host.worker([scope])  # its own grace is the default, 2 s
    assert worker.settings.expiry_grace == 2000
    responder = host.responder(scope, _tightening_equipment)
    host.run([worker], [responder], lambda: ("push", "t:tighten#2") in _sent(host, scope))
    r = CliRunner().invoke(app, ["job", "pause", job, *at])
    assert r.exit_code == 0, r.output
    host.run([worker], [responder], lambda: ("withdraw", "t:tighten#2") in _sent(host, scope))
    r = CliRunner().invoke(app, ["job", "resume", job, *at])
    assert r.exit_code == 0, r.output
    host.run([worker], [responder], host.ended(scope, [job]))
    sent = [(k, d) for _, k, d in host.equipment(scope) if k in ("push", "hold", "restart")]
    assert [(k, d.command_id) for k, d in sent] == [
        ("push", "t:clamp#1"),  # the worker's
        ("push", "t:tighten#2"),
        ("hold", "t:tighten#3:hold"),  # sfc job pause's
        ("restart", "t:tighten#4"),  # sfc job resume's
        ("push", "t:unclamp#5"),  # the worker's
    ]
    assert [d.deadline - d.expires_at for _, d in sent] == [4000] * 5


def test_a_pause_of_a_recipe_without_hold_logic_records_the_answer_and_routes_it_on_resume(
    host: Host,
) -> None:
    scope = host.scope("nohold")
    store = host.store()
    job = host.submit(scope, linear_recipe(2), job_id="j").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _path(host, scope, job) == "Running", sweep=False)
    assert jobs.pause(store, scope, job).ok
    respond(store, scope, job, "a1", outcome="ok", command_id="j:a1#1", round=1)
    worker.read_once(block_ms=200)
    state = state_decoder.decode(store.job(scope, job).state)  # type: ignore[union-attr]
    assert state.actions["a1"].outcome == "ok" and state.active_steps == ["S1"]
    assert [k for _, k, _ in host.equipment(scope)] == ["push"]
    assert jobs.resume(store, scope, job).ok
    pushes = [d.command_id for _, k, d in host.equipment(scope) if k == "push"]
    assert pushes == ["j:a1#1", "j:a2#2"]  # routed in the Resume's commit


@pytest.mark.parametrize("answer", ["ok", "error"])
def test_a_recipe_that_ends_on_resume_finishes_its_order_in_the_same_commit(
    host: Host, answer: str
) -> None:
    """The last action's answer came during the pause: the Resume's release routes it, the
    recipe ends, and the order ends with it (it stayed Running for ever)."""
    scope = host.scope(f"endonresume-{answer}")
    store = host.store()
    job = host.submit(scope, linear_recipe(1, max_attempts=1), job_id="j").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _path(host, scope, job) == "Running", sweep=False)
    assert jobs.pause(store, scope, job).ok
    if answer == "ok":
        respond(store, scope, job, "a1", outcome="ok", command_id="j:a1#1", round=1)
    else:
        respond(store, scope, job, "a1", error="jammed", command_id="j:a1#1", round=1)
    worker.read_once(block_ms=200)
    assert _path(host, scope, job) == "Interrupted/Suspended"
    assert jobs.resume(store, scope, job).ok
    order = host.order(scope, job)
    if answer == "ok":
        assert joborder.path_text(order) == "Ended/Completed"
        assert order.result.ended_by == "completed"
    else:
        assert joborder.path_text(order) == "Aborted"
        assert order.result.ended_by == "faulted"
        assert order.result.fault_code == "error"
    assert order.ended_at is not None
    assert host.client().sismember(keys.active(scope), job) == 0
    assert host.client().zscore(keys.due(scope), job) is None
    last = json.loads(store.history(scope, job, 1)[0][1][b"data"])
    assert last["event"] == "Resume" and last["order"] == joborder.path_text(order)


@pytest.mark.parametrize("method", ["Stop", "Abort"])
@pytest.mark.parametrize("paused", [False, True])
def test_stop_and_abort_withdraw_open_work_and_nothing_goes_out_after(
    host: Host, method: str, paused: bool
) -> None:
    scope = host.scope(method)
    store = host.store()
    job = host.submit(scope, TIGHTENING, job_id="t").job
    worker = host.worker([scope])
    responder = host.responder(scope, _tightening_equipment)
    host.run([worker], [responder], lambda: len(host.equipment(scope)) >= 2)
    if paused:
        assert jobs.pause(store, scope, job).ok
    result = CALLS[method](store, scope, job)
    assert result.ok, result.words()
    entries = host.equipment(scope)
    last_push = max(i for i, (_, k, _) in enumerate(entries) if k in ("push", "hold"))
    withdrawn = [
        (d.command_id, d.reason) for _, k, d in entries[last_push + 1 :] if k == "withdraw"
    ]
    reason = "stopped" if method == "Stop" else "aborted"
    assert ("t:tighten#2", reason) in withdrawn
    for _ in range(5):
        responder.pump()
        worker.read_once(block_ms=20)
    assert [k for _, k, _ in host.equipment(scope)].count("push") == 2
    order = host.order(scope, job)
    assert joborder.path_text(order) == ("Ended/Closed" if method == "Stop" else "Aborted")
    assert order.result.ended_by == reason
    assert host.client().sismember(keys.active(scope), job) == 0
    assert host.client().zscore(keys.due(scope), job) is None


@pytest.mark.parametrize("start", [False, True])
def test_abort_from_the_two_not_started_states(host: Host, start: bool) -> None:
    scope = host.scope("abortearly")
    store = host.store()
    job = host.submit(scope, linear_recipe(1), job_id="j", start=start).job
    assert jobs.abort(store, scope, job).ok
    worker = host.worker([scope])
    worker.read_once(block_ms=100)  # a queued start does nothing now
    assert _path(host, scope, job) == "Aborted"
    assert host.equipment(scope) == []
    response = jobs.job_response(store, scope, job)[1]
    assert response is not None and response.end_time is not None


def test_revoke_start_makes_a_queued_start_do_nothing(host: Host) -> None:
    scope = host.scope("revoke")
    store = host.store()
    job = host.submit(scope, linear_recipe(1), job_id="j").job
    assert jobs.revoke_start(store, scope, job).ok
    worker = host.worker([scope])
    worker.read_once(block_ms=100)
    assert _path(host, scope, job) == "NotAllowedToStart/Ready"
    assert worker.counters.outcome.absorbed == 1
    assert host.equipment(scope) == []
    assert jobs.start(store, scope, job).ok
    host.run([worker], [host.responder(scope)], host.ended(scope, [job]))
    assert _path(host, scope, job) == "Ended/Completed"


def test_update_replaces_the_order_only_before_it_starts(host: Host) -> None:
    scope = host.scope("update")
    store = host.store()
    job = host.submit(scope, linear_recipe(1), job_id="j", start=False).job
    result = jobs.update(store, scope, job, recipe=linear_recipe(2), priority=9, description="d")
    assert result.ok, result.words()
    order = host.order(scope, job)
    assert (order.priority, order.description) == (9, "d")
    bad = jobs.update(store, scope, job, recipe=b'{"Steps": []}')
    assert bad.status == ReturnStatus.UNABLE_TO_ACCEPT and bad.errors
    assert jobs.start(store, scope, job).ok
    worker = host.worker([scope])
    host.run([worker], [host.responder(scope)], host.ended(scope, [job]))
    pushes = [d.command_id for _, k, d in host.equipment(scope) if k == "push"]
    assert pushes == ["j:a1#1", "j:a2#2"]  # the updated recipe ran
    late = jobs.update(store, scope, job, priority=1)
    assert late.status == ReturnStatus.INVALID_JOB_ORDER_STATUS


@pytest.mark.parametrize(("field", "limit"), [("work_master_id", 256), ("description", 1024)])
def test_an_order_field_past_its_schema_limit_is_refused_and_nothing_is_written(
    host: Host, field: str, limit: int
) -> None:
    """Stored, it would not read back: the job, and its scope's list, could not be shown."""
    scope = host.scope("limits")
    store = host.store()
    r = host.client()
    wire = "workMasterId" if field == "work_master_id" else field
    refused = jobs.submit(store, scope, linear_recipe(1), job_id="j", **{field: "w" * (limit + 1)})
    assert refused.status == ReturnStatus.INVALID_REQUEST
    assert f"$.{wire}" in refused.message and str(limit) in refused.message
    assert store.job(scope, "j") is None and r.xlen(keys.work(scope)) == 0
    job = jobs.submit(store, scope, linear_recipe(1), job_id="j", start=False, **{field: "w"}).job
    before = r.hget(keys.job(scope, job), "order")
    bad = jobs.update(store, scope, job, priority=5, **{field: "w" * (limit + 1)})
    assert bad.status == ReturnStatus.INVALID_REQUEST and f"$.{wire}" in bad.message
    assert r.hget(keys.job(scope, job), "order") == before
    ok = jobs.update(store, scope, job, **{field: "w" * limit})
    assert ok.ok, ok.words()
    assert getattr(host.order(scope, job), field) == "w" * limit  # at the limit, it reads back


def test_every_order_that_left_the_not_started_states_has_a_job_response(host: Host) -> None:
    scope = host.scope("responses")
    store = host.store()
    host.submit(scope, linear_recipe(1), job_id="waiting", start=False)
    run = host.submit(scope, linear_recipe(1), job_id="running").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _path(host, scope, run) == "Running", sweep=False)
    status, response = jobs.job_response(store, scope, run)
    assert status.ok and response is not None
    assert [e.state_text for e in response.job_state] == ["Running"]
    assert response.start_time is not None and response.end_time is None
    result, running = jobs.job_responses(store, scope, ["Running"])
    assert result.ok and [r.job_order_id for r in running] == ["running"]
    _, waiting = jobs.job_responses(store, scope, ["NotAllowedToStart"])
    assert [r.job_order_id for r in waiting] == ["waiting"]
    bogus, _ = jobs.job_responses(store, scope, ["Cancelled"])
    assert bogus.status == ReturnStatus.INVALID_REQUEST
    assert jobs.job_response(store, scope, "nobody")[0].status == ReturnStatus.UNKNOWN_JOB_ORDER_ID


def test_a_pause_longer_than_the_open_deadline_costs_no_attempt(host: Host) -> None:
    scope = host.scope("pausedeadline")
    store = host.store()
    job = host.submit(scope, linear_recipe(1, timeout_s=1, max_attempts=1), job_id="j").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: _path(host, scope, job) == "Running", sweep=False)
    deadline = state_decoder.decode(store.job(scope, job).state).actions["a1"].deadline  # type: ignore[union-attr]
    assert jobs.pause(store, scope, job).ok
    wait_for(
        lambda: store.time_ms() > deadline + 500,  # type: ignore[operator]
        step=lambda: (worker.sweep_once(), worker.read_once(block_ms=20)),
        what="the deadline to pass while paused",
    )
    assert _path(host, scope, job) == "Interrupted/Suspended"
    assert jobs.resume(store, scope, job).ok
    moved = state_decoder.decode(store.job(scope, job).state).actions["a1"].deadline  # type: ignore[union-attr]
    held = moved - deadline  # type: ignore[operator]
    # the hold lasted from the Pause's server time to the Resume's, as the history says
    at = {h.event: h.at for _, h in jobview.view(store, scope, job).history}  # type: ignore[union-attr]
    assert held == at["Resume"] - at["Pause"] > 1000
    host.run([worker], [host.responder(scope)], host.ended(scope, [job]))
    assert _path(host, scope, job) == "Ended/Completed"
    assert [d.attempt for _, k, d in host.equipment(scope) if k == "push"] == [1]


CONTROL_METHODS = {"hold": "Pause", "release": "Resume", "cancel": "Abort"}


@pytest.mark.parametrize(
    "script",
    sorted((ROOT / "examples/tightening-hold").glob("*.script.json")),
    ids=lambda p: p.name.removesuffix(".script.json"),
)
def test_every_tightening_script_through_the_host_ends_as_its_dry_run(
    host: Host, script: Path
) -> None:
    """The script's controls become method calls at the same offsets from the start: hold
    is Pause, release is Resume, cancel is Abort. The equipment and the controls run on a
    virtual clock that moves only when the host has nothing left to do, to the next answer
    or control that is due: the order of events is the dry run's, however slow the machine.
    No deadline fires in these scripts; the host's, on the server's real clock, are made
    100 times longer, so that none can fire while the virtual clock runs ahead."""
    raw = script.read_bytes()
    dry = Simulation(graph_of(TIGHTENING), load_script(raw)).run()
    expected = story(dry)
    doc = json.loads(raw)
    controls = [(c["atMs"], CONTROL_METHODS[c["kind"]]) for c in doc.pop("controls")]
    scope = host.scope("tightscript")
    store = host.store()
    job = host.submit(scope, stretched(TIGHTENING, 100), job_id="job-1").job  # the dry run's
    worker = host.worker([scope])
    host.run([worker], [], lambda: _path(host, scope, job) == "Running", sweep=False)
    started = host.order(scope, job).started_at
    assert started is not None
    now_ms = [float(started)]
    equipment = ScriptedEquipment(
        host.store(),
        scope,
        load_host_script(json.dumps(doc).encode()),
        clock=lambda: now_ms[0] / 1000,
    )

    def busy() -> bool:
        """One round of the host and the equipment; whether anything happened."""
        moved = worker.read_once(block_ms=5)
        return bool(moved.applied or moved.absorbed or moved.rejected) | bool(equipment.pump())

    def quiet() -> None:
        rounds = 0
        while rounds < 3:  # three rounds in a row with nothing to do
            rounds = 0 if busy() else rounds + 1

    pending = list(controls)
    ended = host.ended(
        scope, [job], {"completed": "Ended/Completed", "cancelled": "Aborted"}[dry.end]
    )
    for _ in range(100):
        quiet()
        if ended():
            break
        due = [started + at for at, _ in pending[:1]] + [equipment.next_due_ms() or math.inf]
        if min(due) == math.inf:
            break  # nothing left to come
        now_ms[0] = max(now_ms[0], min(due))
        while pending and now_ms[0] >= started + pending[0][0]:
            CALLS[pending.pop(0)[1]](store, scope, job)
    assert ended(), f"the job did not end: {_path(host, scope, job)}"
    assert host_story(host, scope, job) == expected


def stretched(recipe: bytes, k: int) -> bytes:
    """The recipe with every deadline, of its actions and their hold and restart, k times
    longer."""
    doc = json.loads(recipe)
    for action in doc["Actions"]:
        for part in (action, action.get("Hold"), action.get("Restart")):
            if part is not None and "TimeoutSeconds" in part:
                part["TimeoutSeconds"] *= k
    return json.dumps(doc).encode()


def test_pause_resume_and_answers_racing_from_three_processes_lose_nothing(
    host: Host, valkey_url: str, tmp_path: Path
) -> None:
    """Three loopers in three processes: Pause, Resume and the equipment's answers, on the
    same jobs, 200 times over, with a worker applying meanwhile."""
    scope = host.scope("race")
    store = host.store()
    job_ids = [f"r{i}" for i in range(4)]
    for job in job_ids:
        host.submit(scope, TIGHTENING, job_id=job)
    worker = host.worker([scope])
    go = tmp_path / "go"
    run = [sys.executable, "-m", "tests.host_loopers"]
    answerer = subprocess.Popen(
        [*run, "answer", valkey_url, scope, str(go)], cwd=ROOT, stdout=subprocess.PIPE
    )
    loopers = [
        subprocess.Popen(
            [*run, method, valkey_url, scope, "200", *job_ids], cwd=ROOT, stdout=subprocess.PIPE
        )
        for method in ("pause", "resume")
    ]
    try:
        wait_for(
            lambda: all(p.poll() is not None for p in loopers),
            step=lambda: (worker.sweep_once(), worker.read_once(block_ms=5)),
            timeout=120,
            what="the pause and resume loopers",
        )
        counts = [json.loads(p.communicate()[0]) for p in loopers]
        assert all(p.returncode == 0 for p in loopers)
        go.touch()  # the tightening may finish now
        for job in job_ids:  # a job the pauser left paused is resumed
            if _path(host, scope, job) == "Interrupted/Suspended":
                assert jobs.resume(store, scope, job).ok
        host.run([worker], [], host.ended(scope, job_ids), timeout=60)
    finally:
        for p in [answerer, *loopers]:
            if p.poll() is None:
                p.terminate()
        out, _ = answerer.communicate(timeout=30)
        for p in loopers:
            p.communicate(timeout=30)
    answers = json.loads(out)["answers"]
    assert all(_path(host, scope, j) == "Ended/Completed" for j in job_ids)
    # no answer lost: every one the equipment wrote was evaluated (applied or absorbed)
    seen = {h.entry for j in job_ids for _, h in jobview.view(store, scope, j, 1000).history}  # type: ignore[union-attr]
    missing = [a for a in answers if a not in seen]
    assert not missing, missing
    pauses, resumes = counts
    assert pauses["calls"] == resumes["calls"] == 200 * len(job_ids)
    assert pauses["ok"] > 0 and resumes["ok"] > 0
    holds = [d for _, k, d in host.equipment(scope) if k == "hold"]
    assert holds  # pauses reached the equipment while tighten was out
    print(
        f"\nrace: {pauses['ok']} pauses and {resumes['ok']} resumes applied of "
        f"{pauses['calls']} each; commit conflicts: pause {pauses['conflicts']}, resume "
        f"{resumes['conflicts']}, worker {worker.counters.outcome.conflicts}; "
        f"{len(answers)} answers, {len(holds)} hold commands"
    )


WAITING = json.dumps(
    {
        "Steps": [{"Name": "Start", "Initial": True}, {"Name": "Wait"}, {"Name": "Done"}],
        "Transitions": [
            {"Source": "Start", "Target": "Wait", "Condition": "true"},
            {"Source": "Wait", "Target": "Done", "Condition": "true"},
        ],
        "Actions": [
            {"Name": "go", "Step": "Start", "Qualifier": "N", "Interaction": "push_command",
             "TypeId": "com.example.go.v1", "TimeoutSeconds": 600},
            {"Name": "qa", "Step": "Wait", "Qualifier": "N", "Interaction": "pull_event",
             "TypeId": "com.example.qa.v1", "TimeoutSeconds": 600,
             "Selector": {"Subject": "line1/{jobId}/qa"}},
        ],
    }
).encode()  # fmt: skip


def test_a_job_whose_state_cannot_be_read_is_removed_with_clear_unreadable(host: Host) -> None:
    """No worker can evaluate it, so its entries went dead for ever, and no method could
    remove it: Clear with `unreadable` removes it whatever its state, leaves no index
    entry or wait behind, and retires the sequence its history shows."""
    scope = host.scope("unreadable")
    store = host.store()
    job = host.submit(scope, WAITING, job_id="u").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: ("push", "u:go#1") in _sent(host, scope), sweep=False)
    respond(store, scope, job, "go", outcome="ok", command_id="u:go#1", round=1)
    host.run([worker], [], lambda: ("await", "u:qa#2") in _sent(host, scope), sweep=False)
    r = host.client()
    assert r.zcard(keys.waits(scope, "com.example.qa.v1")) == 1
    # readable: Clear as ever (a running order is refused), with or without `unreadable`
    for flag in (False, True):
        refused = jobs.clear(store, scope, job, unreadable=flag)
        assert refused.status == ReturnStatus.INVALID_JOB_ORDER_STATUS
        assert refused.message == (
            "Clear is not allowed: the order is Running; stop or abort it first "
            "(`sfc job stop` or `sfc job abort`), then clear it"
        )
    assert jobs.cancel(store, scope, job).message.startswith(
        "Cancel is not allowed: the order is Running; stop or abort it first"
    )
    assert jobs.clear(store, scope, "nobody").message == "no such job order"
    r.hset(keys.job(scope, job), "state", '{"format":"1.4","sequence":1,"garbage')
    refused = jobs.clear(store, scope, job)
    assert refused.status == ReturnStatus.INVALID_JOB_ORDER_STATUS
    # the way out is named: the state cannot be read, so no stop or abort would apply
    assert refused.message.startswith("Clear is not allowed: the order is Running; its stored ")
    assert refused.message.endswith("`sfc job clear JOB --unreadable` removes it")
    result = jobs.clear(store, scope, job, unreadable=True)
    assert result.ok, result.words()
    # the raw state says 1, the history says qa#2 was sent: 2 is retired
    assert result.message == "removed (unreadable; sequence 2 retired)"
    assert store.job(scope, job) is None
    assert r.exists(keys.history(scope, job)) == 0
    assert r.zscore(keys.orders(scope), job) is None
    assert r.zscore(keys.due(scope), job) is None
    assert r.sismember(keys.active(scope), job) == 0
    assert r.zcard(keys.waits(scope, "com.example.qa.v1")) == 0
    # stored again, the id continues the sequence: no command id is used twice
    assert host.submit(scope, WAITING, job_id="u").ok
    host.run([worker], [], lambda: ("push", "u:go#3") in _sent(host, scope), sweep=False)


def test_clear_unreadable_never_lowers_a_retired_sequence_nor_removes_a_newer_state(
    host: Host,
) -> None:
    scope = host.scope("unreadable2")
    store = host.store()
    worker = host.worker([scope])
    job = host.submit(scope, linear_recipe(1), job_id="u").job
    host.run([worker], [], lambda: ("push", "u:a1#1") in _sent(host, scope), sweep=False)
    assert jobs.abort(store, scope, job).ok
    assert jobs.clear(store, scope, job).ok
    assert store.retired_sequence(scope, job) == "1"
    # stored again, and broken before it sent anything: neither its state nor its history
    # says 1 was used, but the retired record does
    assert host.submit(scope, linear_recipe(1), job_id="u", start=False).ok
    r = host.client()
    r.hset(keys.job(scope, job), "state", b"\x00garbage")
    assert jobs.clear(store, scope, job, unreadable=True).ok
    assert store.retired_sequence(scope, job) == "1"
    # a state of a format this sfc does not know: a newer sfc's, not garbage
    assert host.submit(scope, linear_recipe(1), job_id="u", start=False).ok
    r.hset(keys.job(scope, job), "state", b'{"format":"9.9","jobId":"u","news":1}')
    refused = jobs.clear(store, scope, job, unreadable=True)
    assert refused.status == ReturnStatus.INVALID_REQUEST
    assert "format '9.9', which this sfc does not read: a newer sfc wrote it" in refused.message
    assert store.job(scope, job) is not None
    # an order with a field this sfc does not know: a newer sfc's too, maybe (no format)
    record = store.job(scope, job)
    assert record is not None
    order = json.loads(record.order)
    r.hset(
        keys.job(scope, job),
        mapping={"state": b"\x00", "order": json.dumps({**order, "newerField": 1})},
    )
    refused = jobs.clear(store, scope, job, unreadable=True)
    assert refused.status == ReturnStatus.INVALID_REQUEST
    assert "its order is one with fields this sfc does not know" in refused.message
    assert store.job(scope, job) is not None


def test_a_salvaged_sequence_takes_the_highest_number_it_can_read() -> None:
    def entry(*sent: str) -> dict[bytes, bytes]:
        h = {"at": 1, "event": "answer", "disposition": "applied", "reason": "r",
             "decisions": [], "sent": list(sent), "order": "Running"}  # fmt: skip
        return {b"data": json.dumps(h).encode()}

    assert jobs.salvaged_sequence(b"garbage", []) == 0
    assert jobs.salvaged_sequence(b'{"sequence": 7, "x', []) == 7
    history = [entry("push j:a#3"), {b"data": b"not json"}, entry("await j:b#9", "hold j:a#4:hold")]
    assert jobs.salvaged_sequence(b'{"sequence":5', history) == 9
    assert jobs.salvaged_sequence(b"", [entry("withdraw j:a#2", "push j:a#12:hold")]) == 12


def _sent(host: Host, scope: str) -> list[tuple[str, str]]:
    return [(k, d.command_id) for _, k, d in host.equipment(scope)]


def test_redispatch_says_what_it_costs_and_refuses_the_last_attempt(host: Host) -> None:
    """A push sent again uses up an attempt (spec 02): on the last one it timed out at once
    and faulted a healthy job, after an `ok` that said it was sent again."""
    scope = host.scope("redisp")
    store = host.store()
    worker = host.worker([scope])
    once = host.submit(scope, linear_recipe(1, timeout_s=900, max_attempts=1), job_id="o").job
    thrice = host.submit(scope, linear_recipe(1, timeout_s=900, max_attempts=3), job_id="t").job
    host.run(
        [worker], [], lambda: {("push", "o:a1#1"), ("push", "t:a1#1")} <= set(_sent(host, scope))
    )
    refused = jobs.redispatch(store, scope, once, "a1")
    assert refused.status == ReturnStatus.INVALID_REQUEST
    assert refused.message.startswith("a1 is on its last attempt (1 of 1): sending it again")
    again = jobs.redispatch(store, scope, thrice)
    assert again.ok and again.message.endswith("(a1 goes out as attempt 2 of 3)"), again.message
    host.run([worker], [], lambda: ("push", "t:a1#2") in _sent(host, scope), sweep=False)
    assert host.order_path(scope, once) == "Running"  # the refusal wrote nothing
    forced = jobs.redispatch(store, scope, once, "a1", force=True)
    assert forced.ok and forced.message.endswith(
        "(a1 is on its last attempt (1 of 1): it times out)"
    )
    host.run([worker], [], host.ended(scope, [once], "Aborted"), sweep=False)
    assert host.order_path(scope, once) == "Aborted"

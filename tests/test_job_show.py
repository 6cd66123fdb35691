"""`sfc job show`: what a job waits for, since when, why, and what now, in text and JSON.

On a real server: the job is moved by stepped workers (tests/hostkit.py), an adapter of the
equipment stream is played by its own store calls (a consumer group that reads and
acknowledges), and the CLI runs as a process (tests/clikit.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from syrupy.assertion import SnapshotAssertion

from cli.job import _order_waits, _show_text, show_doc
from host import jobs, keys
from host.jobs import JobView
from tests.clikit import check, sfc
from tests.hostkit import Host, linear_recipe
from tests.test_host_cli import SHOW


def _pushed(host: Host, hint: str, job: str = "j") -> tuple[str, Any]:
    """A scope with job `job` whose push command for a1 is out (and no adapter); its worker."""
    scope = host.scope(hint)
    host.submit(scope, linear_recipe(2), job_id=job)
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    return scope, worker


def _view(host: Host, scope: str, job: str = "j", history: int = 10) -> tuple[JobView, int]:
    store = host.store()
    v = jobs.view(store, scope, job, history)
    assert v is not None
    return v, store.time_ms()


def test_show_says_whether_an_adapter_reads_the_jobs_open_command(
    host: Host, tmp_path: Path
) -> None:
    scope, _ = _pushed(host, "noadapter")
    args = ["--scope", scope, "--redis", host.url]
    text = sfc("job", "show", "j", *args, cwd=tmp_path)
    assert text.code == 0, text
    said = (
        f"no adapter has read scope {scope}'s commands (its equipment stream has no consumer "
        "group): is `sfc equipment` or `sfc bridge mqtt` running?"
    )
    assert "\nOut since\n  j:a1#1: sent " in text.out, text
    assert f"\n  WARNING: {said}\n" in text.out, text
    doc = check(sfc("job", "show", "j", "--json", *args, cwd=tmp_path).json(), SHOW)
    assert doc["equipmentGroups"] == []
    assert {"kind": "noAdapter", "text": said} in doc["warnings"]
    (out,) = doc["outSince"]
    assert (out["commandId"], out["reads"]) == ("j:a1#1", [])

    # an adapter's group that has not read it yet (created where the stream begins)
    store = host.store()
    store.equipment_group(scope, "line-a")
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert (read["group"], read["status"], read["waiting"]) == ("line-a", "unread", 1)
    shown = _show_text(v, now)
    assert "\n    not read yet by group line-a: 1 command(s) wait unread\n" in shown, shown
    assert "no adapter has read" not in shown

    # read by a consumer of the group, not answered: who, and since when
    (row,) = store.read_equipment(scope, "line-a", "press-3", 10, None)
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert (read["status"], read["consumer"]) == ("read", "press-3")
    assert read["readAt"] <= now and read["text"].startswith(
        "read by group line-a (consumer press-3) at "
    ), read
    assert read["text"].endswith(" ago), no answer yet"), read

    # acknowledged (the adapter is done with it), and still no answer
    store.ack_equipment(scope, "line-a", [row[0]])
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert read["status"] == "done"
    assert "\n    read and acknowledged by group line-a, no answer yet\n" in _show_text(v, now)


def _shape(doc: Any) -> Any:
    """The JSON's shape: key names and value types; the wire documents (order, state,
    response, history entries) as `object`: their own snapshots pin them."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else []
    return type(doc).__name__


def test_show_json_shape(host: Host, tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    """Every key of `sfc job show --json`, with the facts the text gives: what it waits for
    and since when, the next deadline, how far the adapters read its commands, its dead
    entries, the warnings and the explainer's lines."""
    scope, worker = _pushed(host, "shape")
    store = host.store()
    store.equipment_group(scope, "line-a")
    store.read_equipment(scope, "line-a", "press-3", 10, None)
    store.add_work(scope, {"v": b"1", "kind": b"answer", "data": b'{"job":"j","round":"one"}'})
    host.run([worker], [], lambda: bool(store.dead(scope)), what="the dead entry")
    r = sfc("job", "show", "j", "--json", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert r.code == 0, r
    doc = check(r.json(), SHOW)
    wire = ("order", "state", "response")
    shape = {k: "object" if k in wire else _shape(v) for k, v in doc.items()}
    shape["history"] = ["object"]
    assert shape == snapshot
    (answer,) = doc["waitingFor"]
    assert (answer["for"], answer["action"], answer["commandId"]) == ("answer", "a1", "j:a1#1")
    assert answer["since"] == doc["outSince"][0]["since"]
    assert doc["nextDeadline"]["at"] == answer["deadline"]
    assert doc["nextDeadline"]["what"] == ["a1 is sent again (attempt 2 of 3)"]
    assert doc["explain"][0] == f"Job j (scope {scope}), recipe {doc['order']['recipeHash'][:12]}"
    assert doc["dead"]["count"] == 1 and doc["dead"]["latest"]["kind"] == "answer"


def test_show_counts_the_dead_entries_that_name_the_job(host: Host) -> None:
    scope, worker = _pushed(host, "dead")
    store = host.store()
    # an answer that does not fit its schema goes dead at once: `sfc work dead` names the job
    bad = {"v": b"1", "kind": b"answer", "data": b'{"job":"j","action":"a1","round":"one"}'}
    other = {"v": b"1", "kind": b"answer", "data": b'{"job":"k","round":"one"}'}
    store.add_work(scope, bad)
    store.add_work(scope, other)
    host.run([worker], [], lambda: len(store.dead(scope)) == 2, what="two dead entries")
    (latest,) = [i for i, f in store.dead(scope) if b'"job":"j"' in f[b"data"]]
    v, now = _view(host, scope)
    dead = show_doc(v, now)["dead"]
    assert (dead["count"], dead["latest"]["id"], dead["latest"]["kind"]) == (1, latest, "answer")
    assert dead["latest"]["reason"], dead
    shown = _show_text(v, now)
    assert (
        f"\nDead entries naming this job: 1 (of the last 1000 of the scope); the latest {latest} (answer, was "
        in shown
    ), shown
    assert "(`sfc work dead` lists them, `sfc work requeue ID` sends one again)\n" in shown


def test_an_ended_job_shows_no_withdrawn_command_as_out(host: Host) -> None:
    scope, _ = _pushed(host, "ended")
    assert jobs.abort(host.store(), scope, "j").ok
    v, now = _view(host, scope)
    assert v.state is not None and v.state.actions["a1"].status == "open"  # as the core left it
    assert v.out == [] and show_doc(v, now)["outSince"] == []
    shown = _show_text(v, now)
    assert "Out since" not in shown, shown
    assert "\nWork that was open when the job ended\n" in shown


def test_paused_since_does_not_depend_on_the_history_shown(host: Host) -> None:
    scope, _ = _pushed(host, "paused")
    assert jobs.pause(host.store(), scope, "j").ok
    v, now = _view(host, scope, history=0)
    assert v.state is not None and v.state.held_at is not None
    (said,) = _order_waits(v, now)
    assert said.startswith("  paused since "), said
    assert show_doc(v, now)["pausedSince"] == v.state.held_at
    (resume,) = show_doc(v, now)["waitingFor"][:1]
    assert (resume["for"], resume["since"]) == ("resume", v.state.held_at)


def test_a_job_whose_state_cannot_be_read_is_shown_as_far_as_it_can(
    host: Host, tmp_path: Path
) -> None:
    scope, _ = _pushed(host, "unreadable")
    host.client().hset(keys.job(scope, "j"), "state", '{"format":"1.4","garbage":1}')
    args = ["--scope", scope, "--redis", host.url]
    text = sfc("job", "show", "j", *args, cwd=tmp_path)
    assert text.code == 2, text
    assert text.out.startswith(f"Job order j (scope {scope}): Running\n"), text
    assert "  start -> applied: job started in step S1\n" in text.out, text  # the history
    assert "\nThe recipe: WARNING: its stored state cannot be read (" in text.out, text
    assert "sfc: j: its stored order or state cannot be read (the state; " in text.err, text
    assert "`sfc job clear j --unreadable` removes it" in text.out, text
    r = sfc("job", "show", "j", "--json", *args, cwd=tmp_path)
    assert r.code == 2, r
    doc = json.loads(r.out)
    assert doc["state"] is None and doc["order"]["jobOrderId"] == "j"
    assert doc["unreadable"] and [w["kind"] for w in doc["warnings"]] == ["unreadable"]
    assert [h["event"] for h in doc["history"]] == ["start"]


def test_a_job_whose_order_cannot_be_read_is_shown_as_far_as_it_can(host: Host) -> None:
    scope, _ = _pushed(host, "noorder")
    host.client().hset(keys.job(scope, "j"), "order", '{"bad":1}')
    v, now = _view(host, scope)
    assert v.order is None and v.state is not None and v.unreadable
    shown = _show_text(v, now)
    assert shown.startswith(f"Job order j (scope {scope}): its order cannot be read\n"), shown
    assert "\nThe recipe: WARNING: its stored order cannot be read (" in shown, shown
    assert "`sfc job clear j --unreadable` removes it" in shown
    doc = show_doc(v, now)
    assert (doc["order"], doc["response"], doc["warnings"][-1]["kind"]) == (
        None,
        None,
        "unreadable",
    )


def test_show_counts_attempts_against_the_scopes_max_attempts(host: Host) -> None:
    """The workers evolve with the scope's maxAttempts; show said "of 3" (the default)."""
    from host.serve import scope_values, setup_scope

    scope = host.scope("attempts")
    setup_scope(host.store(), scope, scope_values(max_attempts=5))
    host.submit(scope, linear_recipe(2), job_id="j")
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    v, now = _view(host, scope)
    assert v.max_attempts == 5
    text = _show_text(v, now)
    assert "attempt 1 of 5" in text and "of 3" not in text
    (wait,) = [w for w in show_doc(v, now)["waitingFor"] if w["for"] == "answer"]
    assert "attempt 1 of 5" in wait["text"]


def test_allowed_to_start_since_does_not_depend_on_the_history_shown(host: Host) -> None:
    """A job stored, then allowed to start later: it waits for a worker since the Start,
    whatever --history shows (with none shown it said since it was stored)."""
    from tests.hostkit import wait_for

    scope = host.scope("allowed")
    store = host.store()
    stored = host.submit(scope, linear_recipe(1), job_id="j", start=False)
    assert stored.ok
    order_at = host.order(scope, "j").stored_at
    wait_for(lambda: store.time_ms() > order_at, what="the server's clock to move on")
    assert jobs.start(store, scope, "j").ok
    (_, started), *_ = reversed(store.history(scope, "j"))
    start_at = json.loads(started[b"data"])["at"]
    assert start_at > order_at
    for history in (0, 10):
        v, now = _view(host, scope, history=history)
        (w,) = show_doc(v, now)["waitingFor"]
        assert (w["for"], w["since"]) == ("worker", start_at), history

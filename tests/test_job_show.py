"""`sfc job show`: what a job waits for, since when, why, and what now, in text and JSON.

On a real server: the job is moved by stepped workers (tests/hostkit.py), an adapter of the
equipment stream is played by its own store calls (a consumer group that reads and
acknowledges), and the CLI runs as a process (tests/clikit.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from syrupy.assertion import SnapshotAssertion

from cli.job import show_text
from host import jobs, jobview, keys, readmodel
from host.jobview import JobView
from sfc.explain import when
from tests.clikit import check, sfc
from tests.hostkit import Host, linear_recipe
from tests.test_host_cli import SHOW


def show_doc(v: JobView, now: int) -> Any:
    """`sfc job show --json` of the job read as `v`, at `now`."""
    return msgspec.to_builtins(readmodel.detail_of(v, now))


def _show_text(v: JobView, now: int) -> str:
    return show_text(readmodel.detail_of(v, now))


def _pushed(host: Host, hint: str, job: str = "j") -> tuple[str, Any]:
    """A scope with job `job` whose push command for a1 is out (and no adapter); its worker."""
    scope = host.scope(hint)
    host.submit(scope, linear_recipe(2), job_id=job)
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    return scope, worker


def _view(host: Host, scope: str, job: str = "j", history: int = 10) -> tuple[JobView, int]:
    store = host.store()
    v = jobview.view(store, scope, job, history)
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
    assert (
        " ago, delivered 1 time(s)), no answer yet; press-3 last read the stream " in (read["text"])
    ), read
    assert (read["deliveries"], type(read["consumerIdleMs"])) == (1, int), read

    # acknowledged (the adapter took it): no answer has come back
    store.ack_equipment(scope, "line-a", [row[0]])
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert read["status"] == "done"
    taken = "taken by group line-a (acknowledged); its answer is not applied yet"
    assert f"\n    {taken}: none has come back yet\n" in _show_text(v, now)

    # `sfc equipment` acknowledges as it writes the answer: the answer waits unread
    answer = b'{"job":"j","actionKey":"j:a1","commandId":"j:a1#1"}'
    store.add_work(scope, {"v": b"1", "kind": b"answer", "data": answer})
    v, now = _view(host, scope)
    shown = _show_text(v, now)
    assert f"\n    {taken} (it may wait in the work stream: see Work stream)\n" in shown
    assert f"\nWork stream: 1 entry of scope {scope} not read by any worker yet" in shown

    # a worker read the answer and has not applied it yet
    ((_, entry_id, _),) = host.store("stalled").read([scope], 1, None)
    v, now = _view(host, scope)
    assert show_doc(v, now)["outSince"][0]["answer"] == entry_id
    said = f"{taken}: a worker holds it ({entry_id}, see Entries read but not yet committed)"
    assert f"\n    {said}\n" in _show_text(v, now)


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
        f"\nDead entries naming this job: 1 (of the last 2 of the scope); the latest {latest} (answer, was "
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
    shown = _show_text(v, now)
    assert f"\n  paused since {when(v.state.held_at)} (" in shown, shown
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
    assert "sfc: j: its stored state cannot be read (was it written by another" in text.err
    assert text.err.rstrip().endswith("`sfc job clear j --unreadable` removes it"), text
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


def test_show_finds_a_command_past_the_first_entries_of_its_millisecond(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep that retries many jobs at once writes more equipment entries in one
    millisecond than the first page the show reads (64 were seen): the entry is found
    further on; one that is gone is said trimmed, with why that is safe to say. The
    millisecond is made full by hand: entries of an id ahead of the clock, on the history
    and the equipment stream, so that the commit's entries are of that millisecond too."""
    scope = host.scope("crowded")
    host.submit(scope, linear_recipe(2), job_id="j")
    store = host.store()
    r = store.client(scope)
    ahead = store.time_ms() + 3_600_000
    r.xadd(keys.history(scope, "j"), {"v": b"1"}, id=f"{ahead}-0")  # read, and passed over
    for seq in range(jobview.EQUIPMENT_PROBE + 10):  # other jobs' commands
        data = f'{{"commandId":"o{seq}:a#1","actionKey":"o{seq}:a","job":"o{seq}",'
        data += '"typeId":"t","reason":"teardown"}'
        fields = {"v": b"1", "kind": b"withdraw", "data": data.encode()}
        r.xadd(keys.equipment(scope), fields, id=f"{ahead}-{seq}")  # type: ignore[arg-type]
    worker = host.worker([scope])
    full = jobview.EQUIPMENT_PROBE + 11
    host.run([worker], [], lambda: r.xlen(keys.equipment(scope)) == full, what="the push")
    store.equipment_group(scope, "line-a")
    v, now = _view(host, scope)
    (out,) = v.out
    assert out.entry_id == f"{ahead}-{jobview.EQUIPMENT_PROBE + 10}", out
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert (read["status"], read["waiting"]) == ("unread", full), read

    # past the most entries of a millisecond the show reads: it cannot tell
    monkeypatch.setattr(jobview, "EQUIPMENT_SCAN", jobview.EQUIPMENT_PROBE)
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert read["status"] == "unknown", read
    said = (
        f"not found among the first {jobview.EQUIPMENT_PROBE} equipment entries of the "
        "millisecond it went out: group line-a cannot be told"
    )
    assert f"\n    {said}\n" in _show_text(v, now)
    monkeypatch.undo()

    # gone from the stream, deleted by hand before line-a (made at its start) read it
    assert out.entry_id is not None and r.xdel(keys.equipment(scope), out.entry_id) == 1
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert (read["status"], read["readPast"]) == ("trimmed", False), read
    said = (
        "not on the equipment stream any more: trimmed before group line-a read it (its "
        "last delivered entry, 0-0, is from before the command went out)"
    )
    assert f"\n    {said}\n" in _show_text(v, now)


def test_a_trimmed_command_is_said_read_past_only_by_a_group_whose_reads_are_past_it(
    host: Host, tmp_path: Path
) -> None:
    """Review: a command gone from the equipment stream was said "acknowledged by every
    group (so by group G), and trimmed since". The worker's trim removes only what every
    group acknowledged, but a trim by hand (MAXLEN) does not ask, and a group made since
    never read it. Each group is said to have read past it only when its last delivered
    entry is of a later millisecond; one of an earlier millisecond was trimmed before it
    read it; one of that millisecond cannot be told."""
    scope, _ = _pushed(host, "trimmed")
    store = host.store()
    r = store.client(scope)
    ((push, _),) = store.equipment_entries(scope)
    ms = int(push.split("-")[0])
    later = f"{ms + 1}-0"  # another job's command, of a later millisecond (made by hand)
    data = b'{"commandId":"o:a#1","actionKey":"o:a","job":"o","typeId":"t","reason":"teardown"}'
    r.xadd(keys.equipment(scope), {"v": b"1", "kind": b"withdraw", "data": data}, id=later)
    store.equipment_group(scope, "line-a")  # reads both, and acknowledges them
    store.ack_equipment(
        scope, "line-a", [i for i, _ in store.read_equipment(scope, "line-a", "p", 10, None)]
    )
    store.equipment_group(scope, "line-b")  # made at the start, has read nothing
    r.xgroup_create(keys.equipment(scope), "line-c", id=f"{ms}-0")  # of that millisecond
    assert r.xtrim(keys.equipment(scope), maxlen=1, approximate=False) == 1  # by hand
    r.xgroup_create(keys.equipment(scope), "line-d", id="$")  # made since: at the end
    args = ["--scope", scope, "--redis", host.url]
    doc = check(sfc("job", "show", "j", "--json", *args, cwd=tmp_path).json(), SHOW)
    (out,) = doc["outSince"]
    assert out["entry"] is None, out
    reads = {x["group"]: x for x in out["reads"]}
    assert {g: (x["status"], x["readPast"]) for g, x in reads.items()} == {
        "line-a": ("trimmed", True),
        "line-b": ("trimmed", False),
        "line-c": ("trimmed", None),
        "line-d": ("trimmed", True),
    }
    gone = "not on the equipment stream any more"
    said = {
        "line-a": f"{gone} (trimmed); group line-a has read past it (its last delivered "
        f"entry, {later}, is of a later millisecond)",
        "line-b": f"{gone}: trimmed before group line-b read it (its last delivered entry, "
        "0-0, is from before the command went out)",
        "line-c": f"{gone} (trimmed); group line-c has read up to {ms}-0, of the millisecond "
        "the command went out: whether it read the command cannot be told",
        "line-d": f"{gone} (trimmed); group line-d has read past it (its last delivered "
        f"entry, {later}, is of a later millisecond)",
    }
    assert {g: x["text"] for g, x in reads.items()} == said
    text = sfc("job", "show", "j", *args, cwd=tmp_path)
    assert text.code == 0, text
    for line in said.values():
        assert f"\n    {line}\n" in text.out, text
    assert "acknowledged by every group" not in text.out


def test_an_await_is_shown_as_a_wait_for_an_event_not_as_a_command_out(host: Host) -> None:
    """An await's notice goes to the equipment stream, but no adapter answers it: an event
    does. The show says what it waits for (the explainer), not how far adapters read it."""
    qa = {
        "Name": "qa",
        "Step": "Qa",
        "Qualifier": "N",
        "Interaction": "pull_event",
        "TypeId": "com.example.qa.v1",
        "TimeoutSeconds": 60,
    }
    recipe = {"Steps": [{"Name": "Qa", "Initial": True}], "Transitions": [], "Actions": [qa]}
    scope = host.scope("await")
    host.submit(scope, json.dumps(recipe).encode(), job_id="j")
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "await" for _, k, _ in host.equipment(scope)))
    host.store().equipment_group(scope, "line-a")
    v, now = _view(host, scope)
    assert v.out == [], v.out
    doc = show_doc(v, now)
    (wait,) = [w for w in doc["waitingFor"] if "action" in w]
    assert (wait["for"], wait["action"]) == ("event", "qa"), wait
    assert doc["outSince"] == [] and "Out since" not in _show_text(v, now)


def test_a_group_name_that_is_not_utf8_is_shown_not_a_crash(host: Host, tmp_path: Path) -> None:
    """A name that is not UTF-8 (made by hand) is shown with those bytes escaped; two
    groups whose names differ only in them are two (review: a replacement character made
    them one, with the reads of one shown for both)."""
    scope, _ = _pushed(host, "badname")
    host.client().xgroup_create(keys.equipment(scope), b"bad\xffname", id="0")
    host.client().xgroup_create(keys.equipment(scope), b"bad\xfename", id="0")
    r = sfc("job", "show", "j", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert r.code == 0, r
    assert "\n    not read yet by group bad\\xffname: 1 command(s) wait unread\n" in r.out, r
    assert "\n    not read yet by group bad\\xfename: 1 command(s) wait unread\n" in r.out, r
    # and one that read it: the query goes to the group as stored, the other has not
    host.client().xreadgroup(b"bad\xffname", b"press\xff", {keys.equipment(scope): ">"})
    v, now = _view(host, scope)
    doc = show_doc(v, now)
    reads = {x["group"]: x for x in doc["outSince"][0]["reads"]}
    assert sorted(g["name"] for g in doc["equipmentGroups"]) == ["bad\\xfename", "bad\\xffname"]
    read = reads["bad\\xffname"]
    assert (read["status"], read["consumer"]) == ("read", "press\\xff"), read
    assert reads["bad\\xfename"]["status"] == "unread", reads
    # a work entry of the job read by a worker named so: `job show` and `work pending`
    answer = b'{"job":"j","actionKey":"j:a1","commandId":"j:a1#1"}'
    host.store().add_work(scope, {"v": b"1", "kind": b"answer", "data": answer})
    host.client().xreadgroup(keys.GROUP, b"w\xff", {keys.work(scope): ">"})
    r = sfc("job", "show", "j", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert r.code == 0 and " by w\\xff, idle " in r.out, r
    r = sfc("work", "pending", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert r.code == 0 and "w\\xff" in r.out, r


def test_the_unread_count_is_exact_where_the_server_cannot_tell_it(
    host: Host, tmp_path: Path
) -> None:
    """Where the server cannot tell the work group's lag (an entry was deleted), `job show`,
    `work pending` and the metric give the one count: the stream's length less the entries
    pending (no whole entries fetched, no cap)."""
    from host.metrics import ScopeCollector

    scope, _ = _pushed(host, "lagless")
    store = host.store()
    r = store.client(scope)
    pipe = r.pipeline(transaction=False)
    n = 10_010
    for _ in range(n):
        pipe.xadd(keys.work(scope), {"v": b"1", "kind": b"resume", "data": b'{"job":"k"}'})
    ids = pipe.execute()
    r.xdel(keys.work(scope), ids[5])
    (group,) = [g for g in r.xinfo_groups(keys.work(scope)) if g["name"] == keys.GROUP.encode()]
    assert group["lag"] is None
    v, now = _view(host, scope)
    assert v.unread == n - 1 == store.unread(scope)
    assert f"\nWork stream: {n - 1} entries of scope {scope} not read" in _show_text(v, now)
    pending = sfc("work", "pending", "--json", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert pending.json()["unread"] == n - 1, pending
    samples = [
        x.value
        for family in ScopeCollector(store, [scope]).collect()
        for x in family.samples
        if x.name == "sfc_work_unread"
    ]
    assert samples == [n - 1]


def test_show_json_says_a_version_that_is_not_a_number(host: Host, tmp_path: Path) -> None:
    scope, _ = _pushed(host, "version")
    host.client().hset(keys.job(scope, "j"), "version", "abc")
    r = sfc("job", "show", "j", "--json", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert r.code == 0, r
    assert check(r.json(), SHOW)["version"] == "abc"


def test_job_list_lines_up_the_times_after_the_longest_state(host: Host, tmp_path: Path) -> None:
    """`Aborted (faulted timeout)` has 25 characters: the states are padded to the longest
    shown, and each `stored` time starts in the same column."""
    from host.equipment import Answer

    scope = host.scope("columns")
    faulted = host.submit(scope, linear_recipe(1, max_attempts=1), job_id="f").job
    host.submit(scope, linear_recipe(1), job_id="s", start=False)
    jammed = host.responder(scope, lambda kind, data: Answer(error="jammed"))
    host.run([host.worker([scope])], [jammed], host.ended(scope, [faulted], "Aborted"))
    # the fault's code as a timeout writes it (the longest state there is)
    r = host.client()
    raw = json.loads(r.hget(keys.job(scope, faulted), "order"))
    raw["result"]["faultCode"] = "timeout"
    r.hset(keys.job(scope, faulted), "order", json.dumps(raw))
    text = sfc("job", "list", "--scope", scope, "--redis", host.url, cwd=tmp_path)
    assert text.code == 0, text
    lines = text.out.splitlines()
    assert any("  Aborted (faulted timeout)  stored " in line for line in lines), lines
    assert len({line.index(" stored ") for line in lines}) == 1, lines


def test_show_reads_the_last_dead_entries_only_and_says_how_many(
    host: Host, tmp_path: Path
) -> None:
    """Each dead entry is read whole (it may carry 64 KiB of parameters): the show reads the
    scope's last DEAD_SCAN, and says how many it read."""
    scope, _ = _pushed(host, "deadscan")
    r = host.client()
    old = {"v": b"1", "kind": b"answer", "data": b'{"job":"j"}', "reason": b"old"}
    r.xadd(keys.dead(scope), old)  # past the scan: not counted
    other = {"v": b"1", "kind": b"answer", "data": b'{"job":"k"}', "reason": b"r"}
    for _ in range(jobview.DEAD_SCAN):
        r.xadd(keys.dead(scope), other)
    v, now = _view(host, scope)
    assert (v.scanned, v.dead) == (jobview.DEAD_SCAN, []), v.dead
    r.xadd(keys.dead(scope), {**old, "reason": b"new"})
    v, now = _view(host, scope)
    dead = show_doc(v, now)["dead"]
    assert (dead["count"], dead["scanned"], dead["latest"]["reason"]) == (1, 200, "new"), dead
    said = f"\nDead entries naming this job: 1 (of the last {jobview.DEAD_SCAN} of the scope); "
    assert said in _show_text(v, now)


def test_a_groups_unread_count_that_the_server_cannot_tell_is_counted_or_at_least(
    host: Host,
) -> None:
    """An equipment entry deleted by hand: the server cannot tell the group's lag. The
    show counts the commands after its last delivered one, and says "at least" where the
    count stopped at its cap."""
    scope, _ = _pushed(host, "atleast")
    store = host.store()
    store.equipment_group(scope, "line-a")
    r = host.client()

    def withdraws(n: int) -> list[bytes]:
        ids = []
        for seq in range(n):
            data = f'{{"commandId":"o{seq}:a#1","actionKey":"o{seq}:a","job":"o{seq}",'
            data += '"typeId":"t","reason":"teardown"}'
            fields = {"v": b"1", "kind": b"withdraw", "data": data.encode()}
            ids.append(r.xadd(keys.equipment(scope), fields))  # type: ignore[arg-type]
        return ids

    r.xdel(keys.equipment(scope), *withdraws(1))
    assert [g["lag"] for g in r.xinfo_groups(keys.equipment(scope))] == [None]
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert (read["waiting"], read["waitingAtLeast"]) == (1, False), read
    withdraws(jobview.UNREAD_COUNT + 50)
    v, now = _view(host, scope)
    (read,) = show_doc(v, now)["outSince"][0]["reads"]
    assert (read["waiting"], read["waitingAtLeast"]) == (jobview.UNREAD_COUNT, True), read
    said = f"not read yet by group line-a: at least {jobview.UNREAD_COUNT} command(s) wait unread"
    assert f"\n    {said}\n" in _show_text(v, now)

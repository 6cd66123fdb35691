"""What the operator's host commands say where a new user was misled (issue 37): an answer
that a worker would drop, a submit of several ids, a wait on a paused job, the pending
entries with no worker, and the consumer groups that hold back the trim. A real server; the
CLI in this process (tests/test_host_cli_guidance.py runs it so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host import keys
from host.jobs import pause
from tests.hostkit import Host, linear_recipe
from tests.test_host_cli_guidance import sfc


def _running(host: Host, hint: str, *jobs: str) -> tuple[str, list[str]]:
    """A scope whose jobs run, each with the push command of a1 out; the CLI's args."""
    scope = host.scope(hint)
    for job in jobs:
        host.submit(scope, linear_recipe(2), job_id=job)
    worker = host.worker([scope])
    host.run(
        [worker],
        [],
        lambda: (
            {d.command_id for _, k, d in host.equipment(scope) if k == "push"}
            >= {f"{j}:a1#1" for j in jobs}
        ),
        sweep=False,
    )
    return scope, ["--scope", scope, "--redis", host.url]


def test_respond_refuses_a_command_id_or_round_that_a_worker_would_drop(host: Host) -> None:
    scope, at = _running(host, "wrongid", "j", "k")
    before = host.client().xlen(keys.work(scope))
    # another job's command id: the worker rejected it after "queued answer", exit 0
    proc = sfc("respond", "j", "a1", "ok", "--command-id", "k:a1#1", *at)
    assert proc.returncode == 1, proc.stdout
    assert "queued" not in proc.stdout
    assert "a worker would reject this answer (rejected: command id k:a1#1 was never " in (
        proc.stderr
    ), proc.stderr
    assert "nothing queued" in proc.stderr
    assert "(its command ids are j:a1#N)" in proc.stderr, proc.stderr
    # a round the action is not in
    proc = sfc("respond", "j", "a1", "ok", "--round", "3", *at)
    assert proc.returncode == 1, proc.stdout
    assert "answer from round 3, but a1 is in round 1" in proc.stderr, proc.stderr
    # a command id never issued
    proc = sfc("respond", "j", "a1", "ok", "--command-id", "j:a1#9", *at)
    assert proc.returncode == 1 and "j:a1#9 was never issued" in proc.stderr, proc.stderr
    assert "its command ids are" not in proc.stderr  # it is of the form, only too new
    assert host.client().xlen(keys.work(scope)) == before  # nothing was queued
    # the right one is queued
    proc = sfc("respond", "j", "a1", "ok", "--command-id", "j:a1#1", "--round", "1", *at)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("queued answer ")
    assert host.client().xlen(keys.work(scope)) == before + 1


def test_wait_on_a_paused_job_says_it_waits_for_a_resume(host: Host) -> None:
    scope, at = _running(host, "waitpaused", "p")
    assert pause(host.store(), scope, "p").ok
    proc = sfc("job", "wait", "p", "--timeout", "0.5", *at)
    assert proc.returncode == 1
    # said at once on stderr, not only when the timeout comes
    assert "sfc: p is paused (Interrupted/" in proc.stderr, proc.stderr
    assert "it ends only after `sfc job resume` (or stop, or abort); waiting" in proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("p: not ended: paused (Interrupted/"), line
    assert line.endswith("it waits for `sfc job resume` (timeout)"), line
    assert json.loads(sfc("job", "list", "--json", *at).stdout)["jobs"][0]["job"] == "p"


def test_submit_of_several_ids_stores_all_or_none_and_names_every_id(
    host: Host, tmp_path: Path
) -> None:
    scope = host.scope("allornone")
    at = ["--scope", scope, "--redis", host.url]
    recipe = tmp_path / "r.json"
    recipe.write_bytes(linear_recipe(1))
    for j in ("w-1", "w-2", "w-3"):
        host.submit(scope, linear_recipe(1), job_id=j, start=False)
    proc = sfc("job", "submit", str(recipe), "--job-id", "w", "--count", "5", *at)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert (
        f"sfc: nothing stored: 3 of the 5 job ids are taken in scope {scope}: w-1, w-2, w-3; "
        "free: w-4, w-5. A submit of several ids stores all of them or none"
    ) in proc.stderr, proc.stderr
    assert _stored(host, scope) == ["w-1", "w-2", "w-3"]
    # one taken id among free ones stored those before it: now none
    proc = sfc("job", "submit", str(recipe), "--job-id", "v", "--count", "3", *at)
    assert proc.returncode == 0 and proc.stdout.split() == ["v-1", "v-2", "v-3"], proc.stderr
    host.submit(scope, linear_recipe(1), job_id="u-3", start=False)
    proc = sfc("job", "submit", str(recipe), "--job-id", "u", "--count", "4", "--json", *at)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["jobs"] == [] and [r["job"] for r in doc["refused"]] == ["u-3"], doc
    assert "free: u-1, u-2, u-4" in doc["error"], doc
    assert "u-1" not in _stored(host, scope)


def _stored(host: Host, scope: str) -> list[str]:
    return sorted(
        j["job"]
        for j in json.loads(
            sfc("job", "list", "--json", "--scope", scope, "--redis", host.url).stdout
        )["jobs"]
    )


def test_work_pending_says_no_worker_reads_and_lists_the_commands_out(host: Host) -> None:
    scope, at = _running(host, "pendinghint", "j")
    store = host.store()
    store.equipment_group(scope, "line-a")
    (row,) = store.read_equipment(scope, "line-a", "press-3", 10, None)
    proc = sfc("work", "pending", *at)
    assert proc.returncode == 0, proc.stderr
    assert "Commands out at the equipment (delivered to an adapter, not acknowledged):\n" in (
        proc.stdout
    ), proc.stdout
    said = f"  {row[0]}  j:a1#1 (job j): group line-a, consumer press-3, for "
    assert said in proc.stdout, proc.stdout
    doc = json.loads(sfc("work", "pending", "--json", *at).stdout)
    (out,) = doc["outAtEquipment"]
    assert (out["commandId"], out["job"], out["consumer"]) == ("j:a1#1", "j", "press-3"), out
    assert doc["workers"] == 1, doc

    # entries that no worker reads: the workers' group has no consumer (made, then none came)
    quiet = host.scope("noworker")
    host.client().xgroup_create(keys.work(quiet), keys.GROUP, id="0", mkstream=True)
    for n in range(3):
        host.submit(quiet, linear_recipe(1), job_id=f"q{n}")
    proc = sfc("work", "pending", "--scope", quiet, "--redis", host.url)
    assert proc.stdout.startswith(
        f"3 entries not read by any worker yet in scope {quiet}\n  no worker reads scope "
        f"{quiet} (the workers' group has no consumer): is `sfc serve` serving it?"
    ), proc.stdout
    assert f"no pending entries in scope {quiet}\n" in proc.stdout


def test_work_pending_says_when_the_workers_stopped_reading() -> None:
    from cli.work import _no_worker
    from host.workview import PendingView

    seen = PendingView(
        scope="s", pending=[], unread=20, workers=2, workers_idle_ms=335_344, out_at_equipment=[]
    )
    assert _no_worker(seen) == (
        "no worker of scope s has read for 5 min 35 s (2 consumer(s) in the workers' group, "
        "none reading): is `sfc serve` running, and keeping up? (`sfc work groups` shows the "
        "groups)"
    )
    reading = PendingView(
        scope="s", pending=[], unread=20, workers=2, workers_idle_ms=800, out_at_equipment=[]
    )
    assert _no_worker(reading) is None


def test_work_groups_lists_every_group_and_drops_one_left_behind(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope, at = _running(host, "groups", "j")
    store = host.store()
    store.equipment_group(scope, "line-a")
    store.read_equipment(scope, "line-a", "press-3", 10, None)
    store.equipment_group(scope, "one-off")  # an `sfc equipment` run once, long gone
    doc = json.loads(sfc("work", "groups", "--json", *at).stdout)
    groups = {(g["stream"], g["name"]): g for g in doc["groups"]}
    assert set(groups) == {("work", keys.GROUP), ("equipment", "line-a"), ("equipment", "one-off")}
    assert groups[("work", keys.GROUP)]["role"] == "workers"
    line = groups[("equipment", "line-a")]
    assert (line["pending"], line["lag"], line["stale"]) == (1, 0, False), line
    assert [c["name"] for c in line["consumers"]] == ["press-3"]
    assert groups[("equipment", "one-off")]["lastDeliveredAt"] is None
    text = sfc("work", "groups", *at).stdout
    assert "equipment stream (1 entries): line-a (an adapter's group): lag 0, 1 delivered " in text

    # stale once no consumer read for the retention: the trim passes over it, and it says so
    monkeypatch.setenv("SFC_EQUIPMENT_RETENTION", "1ms")
    doc = json.loads(sfc("work", "groups", "--json", *at).stdout)
    assert {g["name"]: g["stale"] for g in doc["groups"] if g["stream"] == "equipment"} == {
        "line-a": True,
        "one-off": True,
    }
    assert "one-off (an adapter's group): lag 1, 0 delivered and not acknowledged, nothing " in (
        sfc("work", "groups", *at).stdout
    )
    monkeypatch.delenv("SFC_EQUIPMENT_RETENTION")

    # dropped: the one left behind; an adapter that reads, and the workers', not without --force
    proc = sfc("work", "groups", "--drop", "line-a", *at)
    assert proc.returncode == 1 and "has a consumer that read " in proc.stderr, proc.stderr
    proc = sfc("work", "groups", "--drop", keys.GROUP, "--stream", "work", *at)
    assert proc.returncode == 1 and "is the workers' group" in proc.stderr, proc.stderr
    proc = sfc("work", "groups", "--drop", "nope", *at)
    assert proc.returncode == 1 and "no consumer group 'nope'" in proc.stderr, proc.stderr
    proc = sfc("work", "groups", "--drop", "one-off", *at)
    assert proc.returncode == 0 and proc.stdout.startswith("dropped group one-off "), proc.stderr
    left = {g["name"] for g in json.loads(sfc("work", "groups", "--json", *at).stdout)["groups"]}
    assert left == {keys.GROUP, "line-a"}


def test_a_stale_group_does_not_hold_back_the_trim(host: Host) -> None:
    scope, _ = _running(host, "staletrim", "j", "k")
    store = host.store()
    store.equipment_group(scope, "gone")  # never read, no consumer: an adapter left behind
    later = store.time_ms() + 10 * 86_400_000  # past every entry's retention
    n = host.client().xlen(keys.equipment(scope))
    assert n == 2
    # an adapter that reads holds back what it has not acknowledged, stale ones aside
    store.equipment_group(scope, "live")
    assert len(store.read_equipment(scope, "live", "press-3", 1, None)) == 1
    assert store.trim_equipment(scope, 60_000, later) == 0
    assert host.client().xlen(keys.equipment(scope)) == n
    host.client().xgroup_destroy(keys.equipment(scope), "live")
    # the left-behind group alone held back every entry for ever; now it holds back none
    assert store.trim_equipment(scope, 60_000, later) == n
    assert host.client().xlen(keys.equipment(scope)) == 0
    # a group that has no consumer yet but was delivered to within the retention is not stale
    from host.store.equipment import stale_group

    now = store.time_ms()
    assert stale_group(f"{now - 1000}-0", [], now, 60_000) is False
    assert stale_group(f"{now - 61_000}-0", [], now, 60_000) is True
    assert stale_group("0-0", [59_000], now, 60_000) is False  # a consumer read lately
    assert stale_group("0-0", [61_000, 70_000], now, 60_000) is True

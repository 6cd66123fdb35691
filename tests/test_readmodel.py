"""host/readmodel.py against a real server: the documents the CLI, `sfc mcp`, the console
and the HTTP API render, their order and paging, and that they encode to JSON as they are."""

from __future__ import annotations

import msgspec
import pytest

from host import readmodel
from host.jobs import pause
from tests.hostkit import Host, linear_recipe


def test_a_jobs_detail_encodes_as_it_is_with_every_action(host: Host) -> None:
    scope = host.scope("rmdetail")
    host.submit(scope, linear_recipe(2), job_id="j")
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    d = readmodel.job_detail(host.store(), scope, "j")
    assert d is not None and readmodel.job_detail(host.store(), scope, "nope") is None
    doc = msgspec.json.decode(msgspec.json.encode(d))
    assert (doc["job"], doc["scope"], doc["activeSteps"]) == ("j", scope, d.active_steps)
    (a1,) = doc["actions"]
    assert (a1["name"], a1["status"], a1["commandId"], a1["attempt"]) == ("a1", "open", "j:a1#1", 1)
    assert a1["maxAttempts"] == 3 and a1["qualifier"] == "N" and a1["sentAt"] is not None, a1
    (wait,) = doc["waitingFor"]
    assert (wait["for"], wait["commandId"], wait["since"]) == ("answer", "j:a1#1", a1["sentAt"])
    assert doc["nextDeadline"]["at"] == a1["deadline"]

    # paused: it waits for a person, since the pause
    assert pause(host.store(), scope, "j").ok
    d = readmodel.job_detail(host.store(), scope, "j")
    assert d is not None and d.paused_since is not None
    (first, *_) = d.waiting_for
    assert isinstance(first, readmodel.OrderWait) and first.waits_for == "resume"
    assert first.since == d.paused_since


def test_a_jobs_history_is_oldest_first_and_the_last_count(host: Host) -> None:
    scope = host.scope("rmhistory")
    host.submit(scope, linear_recipe(2), job_id="h")
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    assert pause(host.store(), scope, "h").ok
    rows = readmodel.job_history(host.store(), scope, "h")
    assert [r.event for r in rows] == ["start", "Pause"], rows
    assert rows[0].at <= rows[1].at and rows[0].sent == ["push h:a1#1"]
    assert [r.event for r in readmodel.job_history(host.store(), scope, "h", 1)] == ["Pause"]
    assert readmodel.job_history(host.store(), scope, "none") == []


def test_a_scopes_jobs_are_paged_and_filtered_by_state(host: Host) -> None:
    scope = host.scope("rmpage")
    for n in range(5):
        host.submit(scope, linear_recipe(1), job_id=f"p{n}", start=n % 2 == 0)
    store = host.store()
    page = readmodel.job_page(store, scope, offset=1, limit=2)
    assert (page.total, [r.job for r in page.jobs]) == (5, ["p1", "p2"])
    stored = readmodel.job_page(store, scope, ["NotAllowedToStart"])
    assert (stored.total, [r.job for r in stored.jobs]) == (2, ["p1", "p3"])
    allowed = readmodel.job_page(store, scope, ["AllowedToStart/Ready", "NotAllowedToStart"], 1)
    assert allowed.total == 5 and [r.job for r in allowed.jobs] == ["p1", "p2", "p3", "p4"]
    row = msgspec.json.decode(msgspec.json.encode(page.jobs[0]))
    assert row["job"] == "p1" and row["state"].startswith("NotAllowedToStart")
    assert "unreadable" not in row  # only for a job that cannot be read
    with pytest.raises(readmodel.StateError, match="unknown state Running/Nope; known: "):
        readmodel.job_page(store, scope, ["Running/Nope"])


DWELL_WITH_S = b"""{
  "Steps": [{"Name": "Cool", "Initial": true, "MinSeconds": 600}, {"Name": "Next"}],
  "Transitions": [{"Source": "Cool", "Target": "Next", "Condition": "true"}],
  "Actions": [
    {"Name": "conveyor", "Step": "Cool", "Qualifier": "S", "Interaction": "push_command",
     "TypeId": "com.example.conveyor.v1", "TimeoutSeconds": 3600, "MaxAttempts": 1}
  ]
}"""


def test_an_open_action_that_is_not_waited_for_is_not_what_the_job_waits_for(
    host: Host,
) -> None:
    # a job in a dwell with an S conveyor running: the console once said "waits for
    # answer: conveyor" although the S is "not waited for"; it waits for the dwell
    from host.console import pages
    from host.console.chart import list_waits

    scope = host.scope("rmdwell")
    host.submit(scope, DWELL_WITH_S, job_id="d")
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    d = readmodel.job_detail(host.store(), scope, "d")
    assert d is not None and "Cool" in d.dwells
    doc = msgspec.json.decode(msgspec.json.encode(d))
    (conveyor,) = doc["actions"]
    assert (conveyor["qualifier"], conveyor["status"]) == ("S", "open")
    assert doc["waitingFor"] == []
    assert pages._waiting(doc).startswith("waits for the dwell of step Cool until ")
    listed = list_waits(host.store(), scope, ["d"])["d"]
    assert (listed["for"], listed["what"], listed["deadline"]) == (
        "time",
        "the dwell of step Cool",
        d.dwells["Cool"],
    )

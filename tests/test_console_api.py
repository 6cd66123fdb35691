"""The HTTP API against a real server: every route, the token, bad input on every write
with nothing written, and the stream (docs/api.md)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from host import keys
from host.console.app import API
from host.console.openapi import document
from host.equipment import Answer
from host.store import Store
from sfc.migrate import read_state
from tests.consolekit import TOKEN, Console, Events, console
from tests.hostkit import Host, linear_recipe

RECIPE = json.loads(linear_recipe(2))
TIGHTENING = Path(__file__).parents[1] / "examples" / "tightening-hold" / "recipe.json"


@pytest.fixture
def api(valkey_url: str) -> Iterator[Console]:
    with console(valkey_url) as c:
        yield c


def submit(api: Console, scope: str, job: str, **extra: Any) -> dict[str, Any]:
    r = api.post(
        "/api/v1/jobs", {"jobId": job, "recipe": RECIPE, "scope": scope, **extra}, token=TOKEN
    )
    assert r.status == 201, r.body
    answer: dict[str, Any] = r.json()
    return answer


def running(host: Host, scope: str, job: str) -> None:
    w = host.worker([scope])
    host.run([w], [], lambda: host.order_path(scope, job).startswith("Running"), what="a start")


def nothing_written(store: Store, scope: str) -> bool:
    return store.order_ids(scope) == [] and store.unread(scope) == 0


# --------------------------------------------------------------------------- the document


def test_the_openapi_document_describes_every_route_and_nothing_else(api: Console) -> None:
    served = api.get("/api/v1/openapi.json").json()
    assert served == document()
    routes = {
        (r.path, m.lower())
        for r in API
        for m in (r.methods or ())  # type: ignore[attr-defined]
        if m != "HEAD"
    }
    described = {(p, m) for p, ops in served["paths"].items() for m in ops}
    assert routes == described
    for path, ops in served["paths"].items():
        for name in (p["name"] for op in ops.values() for p in op.get("parameters", [])):
            if "{" in path and name in ("scope", "job", "method", "entry", "action"):
                assert "{" + name + "}" in path or name == "scope", (path, name)


def test_healthz_says_the_server_answers(api: Console) -> None:
    r = api.get("/healthz")
    assert (r.status, r.json()) == (200, {"ok": True})


# --------------------------------------------------------------------------- jobs


def test_a_job_submitted_is_listed_shown_charted_and_has_history(api: Console, host: Host) -> None:
    scope = host.scope("api")
    answer = submit(api, scope, "j1")
    assert answer["status"] == "ok (1)" and answer["statusCode"] == 1
    running(host, scope, "j1")

    page = api.get(f"/api/v1/jobs?scope={scope}").json()
    assert [j["job"] for j in page["jobs"]] == ["j1"]
    assert page["jobs"][0]["state"].startswith("Running")
    assert "waiting" not in page["jobs"][0]
    (row,) = api.get(f"/api/v1/jobs?scope={scope}&waits=true").json()["jobs"]
    waiting = row["waiting"]
    assert (waiting["for"], waiting["what"], waiting["held"]) == ("answer", "a1 (j1:a1#1)", False)
    assert waiting["since"] == waiting["deadline"] - 30_000
    assert api.get(f"/api/v1/jobs?scope={scope}&state=Ended").json()["jobs"] == []

    detail = api.get(f"/api/v1/jobs/{scope}/j1").json()
    assert detail["job"] == "j1" and detail["activeSteps"] == ["S1"]
    assert detail["order"]["jobOrderId"] == "j1"
    assert [a["name"] for a in detail["actions"]] == ["a1"]
    assert detail["actions"][0]["deadline"] is not None
    assert detail["nextDeadline"]["at"] == detail["actions"][0]["deadline"]

    history = api.get(f"/api/v1/jobs/{scope}/j1/history").json()["history"]
    assert history and history[-1]["event"]

    chart = api.get(f"/api/v1/jobs/{scope}/j1/chart.svg")
    assert chart.headers["content-type"].startswith("image/svg+xml")
    assert b'data-step="S1" data-active="true"' in chart.body
    assert b'data-action="a1" data-status="open"' in chart.body

    twin = api.get(f"/api/v1/jobs/{scope}/j1?chart=true").json()
    assert 'data-step="S1" data-active="true"' in twin["chart"]


def test_paging(api: Console, host: Host) -> None:
    scope = host.scope("paged")
    for i in range(3):
        submit(api, scope, f"p{i}", start=False)
    page = api.get(f"/api/v1/jobs?scope={scope}&offset=1&limit=1&waits=true").json()
    assert (page["total"], [j["job"] for j in page["jobs"]]) == (3, ["p1"])
    waiting = page["jobs"][0]["waiting"]
    assert (waiting["for"], waiting["since"]) == ("start", page["jobs"][0]["storedAt"])


def test_an_unknown_job_is_404_naming_the_job(api: Console, host: Host) -> None:
    scope = host.scope("none")
    for path in ("", "/history", "/chart.svg"):
        r = api.get(f"/api/v1/jobs/{scope}/nope{path}")
        assert r.status == 404, path
        assert r.json()["field"] == "job"


def test_job_control_methods_answer_with_the_return_status(api: Console, host: Host) -> None:
    scope = host.scope("methods")
    submit(api, scope, "m1", start=False)
    r = api.post(f"/api/v1/jobs/{scope}/m1/pause", {"comment": "why"}, token=TOKEN)
    assert (r.status, r.json()["statusCode"]) == (409, 8)
    assert r.json()["status"] == "invalid job order status (8)"
    assert api.post(f"/api/v1/jobs/{scope}/m1/start", token=TOKEN).json()["statusCode"] == 1
    assert api.post(f"/api/v1/jobs/{scope}/m1/revoke", token=TOKEN).json()["statusCode"] == 1
    assert api.post(f"/api/v1/jobs/{scope}/m1/start", token=TOKEN).status == 200
    running(host, scope, "m1")
    r = api.post(f"/api/v1/jobs/{scope}/m1/pause", {"comment": "lunch"}, token=TOKEN)
    assert (r.status, r.json()["statusCode"]) == (200, 1), r.body
    assert host.order_path(scope, "m1").startswith("Interrupted")
    assert api.post(f"/api/v1/jobs/{scope}/m1/resume", token=TOKEN).status == 200
    assert api.post(f"/api/v1/jobs/{scope}/m1/stop", token=TOKEN).status == 200
    assert api.post(f"/api/v1/jobs/{scope}/m1/abort", token=TOKEN).status in (200, 409)
    assert api.post(f"/api/v1/jobs/{scope}/m1/clear", token=TOKEN).status == 200
    assert api.get(f"/api/v1/jobs/{scope}/m1").status == 404
    submit(api, scope, "m2", start=False)
    assert api.post(f"/api/v1/jobs/{scope}/m2/cancel", token=TOKEN).status == 200
    r = api.post(f"/api/v1/jobs/{scope}/nope/start", token=TOKEN)
    assert (r.status, r.json()["statusCode"]) == (404, 2)


def test_a_recipe_that_does_not_build_is_refused_with_its_errors(api: Console, host: Host) -> None:
    scope = host.scope("bad-recipe")
    bad = {**RECIPE, "Transitions": [{"Source": "S1", "Target": "Nowhere", "Condition": "true"}]}
    r = api.post("/api/v1/jobs", {"jobId": "b", "recipe": bad, "scope": scope}, token=TOKEN)
    assert r.status == 422
    assert r.json()["errors"][0]["code"].startswith("SFC")
    assert nothing_written(host.store(), scope)


# --------------------------------------------------------------------------- answers, events, work


def test_an_answer_moves_the_job_on(api: Console, host: Host) -> None:
    scope = host.scope("answers")
    submit(api, scope, "a")
    w = host.worker([scope])
    host.run([w], [], lambda: host.order_path(scope, "a").startswith("Running"))
    r = api.post("/api/v1/answers", {"scope": scope, "job": "a", "action": "a1"}, token=TOKEN)
    assert r.status == 202, r.body
    assert r.json()["entry"]
    host.run(
        [w],
        [],
        lambda: api.get(f"/api/v1/jobs/{scope}/a").json()["activeSteps"] == ["S2"],
        what="the answer to be applied",
    )
    r = api.post("/api/v1/answers", {"scope": scope, "job": "a", "action": "zz"}, token=TOKEN)
    assert (r.status, r.json()["field"]) == (404, "action")
    assert "has no action 'zz'; it has a1, a2" in r.json()["error"]
    r = api.post("/api/v1/answers", {"scope": scope, "job": "a", "action": "a1"}, token=TOKEN)
    assert (r.status, r.json()["field"]) == (409, "action")  # a1 is answered: no work open
    r = api.post("/api/v1/answers", {"scope": scope, "job": "a", "action": "a2:hold"}, token=TOKEN)
    assert (r.status, r.json()["field"]) == (409, "action")
    assert "no hold command is open" in r.json()["error"]


def test_an_answer_a_worker_would_drop_is_refused_naming_the_field(
    api: Console, host: Host
) -> None:
    """As `sfc respond`: the core weighs the answer against the stored state first, so a
    command id of another job, or a round the action is not in, is 409 and queues nothing."""
    scope = host.scope("wrongid")
    for job in ("j", "k"):
        submit(api, scope, job)
    w = host.worker([scope])
    host.run(
        [w],
        [],
        lambda: all(host.order_path(scope, j).startswith("Running") for j in ("j", "k")),
    )
    before = host.client().xlen(keys.work(scope))
    answer = {"scope": scope, "job": "j", "action": "a1", "outcome": "ok"}
    r = api.post("/api/v1/answers", {**answer, "commandId": "k:a1#1"}, token=TOKEN)
    assert (r.status, r.json()["field"]) == (409, "commandId"), r.body
    assert (
        "a worker would reject this answer (rejected: command id k:a1#1 was never"
        in (r.json()["error"])
    )
    r = api.post("/api/v1/answers", {**answer, "round": 3}, token=TOKEN)
    assert (r.status, r.json()["field"]) == (409, "round"), r.body
    assert "answer from round 3, but a1 is in round 1" in r.json()["error"]
    assert "nothing queued" in r.json()["error"]
    assert host.client().xlen(keys.work(scope)) == before
    r = api.post("/api/v1/answers", {**answer, "commandId": "j:a1#1", "round": 1}, token=TOKEN)
    assert r.status == 202, r.body
    assert host.client().xlen(keys.work(scope)) == before + 1


def test_an_answer_to_an_open_hold_command_holds_the_action(api: Console, host: Host) -> None:
    """`ACTION:hold` answers the hold command a pause sent out (tightening-hold)."""
    scope = host.scope("hold")
    recipe = json.loads(TIGHTENING.read_text())
    r = api.post("/api/v1/jobs", {"jobId": "t", "recipe": recipe, "scope": scope}, token=TOKEN)
    assert r.status == 201, r.body
    w = host.worker([scope])
    # the equipment answers the clamp and nothing else: tighten stays out, its hold open
    clamp = host.responder(
        scope, lambda kind, data: Answer(outcome="ok") if "clamp" in data.action_key else None
    )
    host.run(
        [w],
        [clamp],
        lambda: tighten(host, scope) is not None and tighten(host, scope).status == "open",
        what="tighten to go out",
    )
    assert api.post(f"/api/v1/jobs/{scope}/t/pause", token=TOKEN).status == 200
    rec = tighten(host, scope)
    assert rec.hold == "open" and rec.hold_command_id == "t:tighten#3:hold"
    r = api.post(
        "/api/v1/answers",
        {"scope": scope, "job": "t", "action": "tighten:hold", "outcome": "held"},
        token=TOKEN,
    )
    assert r.status == 202, r.body
    host.run([w], [], lambda: tighten(host, scope).hold == "held", what="the hold applied")
    actions = api.get(f"/api/v1/jobs/{scope}/t").json()["actions"]
    assert [a["hold"] for a in actions if a["name"] == "tighten"] == ["held"]


def tighten(host: Host, scope: str) -> Any:
    record = host.store().job(scope, "t")
    assert record is not None
    return read_state(record.state).actions.get("tighten")


def test_an_event_nobody_waits_for_is_dropped_and_said(api: Console, host: Host) -> None:
    scope = host.scope("events")
    r = api.post("/api/v1/events", {"scope": scope, "type": "t.x"}, token=TOKEN)
    assert r.status == 200
    assert r.json()["entry"] is None and "waits for t.x" in r.json()["dropped"]


def test_work_lists_pending_and_dead(api: Console, host: Host) -> None:
    scope = host.scope("work")
    r = api.get(f"/api/v1/work?scope={scope}").json()
    assert r["pending"]["pending"] == [] and r["dead"]["dead"] == []
    assert api.post(f"/api/v1/work/{scope}/1-0/requeue", token=TOKEN).status == 404
    assert api.post(f"/api/v1/work/{scope}/1-0/drop", token=TOKEN).status == 404


# --------------------------------------------------------------------------- the token


def test_a_write_needs_the_right_token(api: Console, host: Host) -> None:
    scope = host.scope("token")
    doc = {"jobId": "t", "recipe": RECIPE, "scope": scope}
    none = api.post("/api/v1/jobs", doc)
    wrong = api.post("/api/v1/jobs", doc, token="wrong")
    assert (none.status, wrong.status) == (401, 401)
    assert none.json()["field"] == "authorization"
    assert TOKEN not in none.body.decode() + wrong.body.decode()
    # each says what is wrong: a wrong token is not told "a write needs the token"
    assert "needs the token" in none.json()["error"]
    assert "not this console's" in wrong.json()["error"] and "http-token" in wrong.json()["error"]
    unschemed = api.post("/api/v1/jobs", doc, headers={"Authorization": TOKEN})
    assert unschemed.status == 401 and "'Bearer TOKEN'" in unschemed.json()["error"]
    assert TOKEN not in unschemed.body.decode()
    assert nothing_written(host.store(), scope)
    assert api.post("/api/v1/jobs", doc, token=TOKEN).status == 201


def test_a_browser_session_writes_only_with_the_console_header(api: Console, host: Host) -> None:
    scope = host.scope("session")
    assert api.post("/api/v1/session", {"token": "wrong"}).status == 401
    r = api.post("/api/v1/session", {"token": TOKEN})
    assert r.status == 200
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert TOKEN not in cookie
    session = {"Cookie": cookie.split(";")[0]}
    doc = {"jobId": "s", "recipe": RECIPE, "scope": scope}
    r = api.post("/api/v1/jobs", doc, headers=session)
    assert (r.status, r.json()["field"]) == (403, "x-sfc-console")
    assert nothing_written(host.store(), scope)
    r = api.post("/api/v1/jobs", doc, headers={**session, "X-SFC-Console": "1"})
    assert r.status == 201
    api.call("DELETE", "/api/v1/session", headers=session)
    r = api.post("/api/v1/jobs", {**doc, "jobId": "s2"}, headers={**session, "X-SFC-Console": "1"})
    assert r.status == 401


def test_a_read_only_console_refuses_every_write(valkey_url: str, host: Host) -> None:
    scope = host.scope("ro")
    with console(valkey_url, allow_control=False) as c:
        r = c.post("/api/v1/jobs", {"jobId": "r", "recipe": RECIPE, "scope": scope}, token=TOKEN)
        assert r.status == 403 and "--allow-control" in r.json()["error"]
        assert c.get(f"/api/v1/jobs?scope={scope}").status == 200
    assert nothing_written(host.store(), scope)


def test_beyond_loopback_every_request_needs_the_token(valkey_url: str) -> None:
    with console(valkey_url, addr="0.0.0.0:0") as c:
        assert c.guard.public
        assert c.get("/api/v1/jobs").status == 401
        assert c.get("/").status == 401
        assert c.get("/api/v1/jobs", token=TOKEN).status == 200


def test_a_private_console_on_loopback_needs_the_token_to_read(valkey_url: str) -> None:
    """`--http-private`: on a machine other users share, loopback is no boundary."""
    with console(valkey_url, private=True) as c:
        assert c.guard.public
        assert c.get("/api/v1/jobs").status == 401
        assert c.get("/").status == 401
        assert c.get("/api/v1/jobs", token=TOKEN).status == 200


# --------------------------------------------------------------------------- bad input


BAD_WRITES: list[tuple[str, Any, str]] = [
    ("/api/v1/jobs", None, "body"),
    ("/api/v1/jobs", [1], "body"),
    ("/api/v1/jobs", {"jobId": "x"}, "recipe"),
    ("/api/v1/jobs", {"jobId": "x", "recipe": "text"}, "recipe"),
    ("/api/v1/jobs", {"jobId": "has space", "recipe": RECIPE}, "jobId"),
    ("/api/v1/jobs", {"jobId": 7, "recipe": RECIPE}, "jobId"),
    ("/api/v1/jobs", {"jobId": "x", "recipe": RECIPE, "scope": "a{b}"}, "scope"),
    ("/api/v1/jobs", {"jobId": "x", "recipe": RECIPE, "start": "yes"}, "start"),
    ("/api/v1/jobs", {"jobId": "x", "recipe": RECIPE, "priority": -1}, "priority"),
    ("/api/v1/jobs", {"jobId": "x", "recipe": RECIPE, "colour": "red"}, "colour"),
    ("/api/v1/jobs/{scope}/x/pause", {"comment": 5}, "comment"),
    ("/api/v1/jobs/{scope}/x/start", {"comment": "no"}, "comment"),
    ("/api/v1/jobs/{scope}/x/explode", None, "method"),
    ("/api/v1/answers", {"action": "a1"}, "job"),
    ("/api/v1/answers", {"job": "x"}, "action"),
    ("/api/v1/answers", {"job": "x", "action": "a1", "outcome": "ok", "error": "e"}, "error"),
    ("/api/v1/answers", {"job": "x", "action": "a1", "round": "1"}, "round"),
    ("/api/v1/events", {}, "type"),
    ("/api/v1/events", {"type": "a b"}, "type"),
    ("/api/v1/events", {"type": "t", "source": "s"}, "id"),
    ("/api/v1/work/{scope}/1-0/burn", None, "action"),
]


@pytest.mark.parametrize(("path", "doc", "field"), BAD_WRITES)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(
    api: Console, host: Host, path: str, doc: Any, field: str
) -> None:
    scope = host.scope("bad")
    if isinstance(doc, dict) and path in ("/api/v1/jobs", "/api/v1/answers", "/api/v1/events"):
        doc = {"scope": scope, **doc} if field != "scope" else doc
    raw = b"" if doc is None and path == "/api/v1/jobs" else None
    r = api.call("POST", path.format(scope=scope), doc, token=TOKEN, raw=raw)
    assert 400 <= r.status < 500, (r.status, r.body)
    assert r.json()["field"] == field, r.body
    assert nothing_written(host.store(), scope)


def test_a_body_that_is_not_json_is_refused(api: Console, host: Host) -> None:
    r = api.call("POST", "/api/v1/jobs", raw=b"{not json", token=TOKEN)
    assert (r.status, r.json()["field"]) == (400, "body")


# --------------------------------------------------------------------------- the stream


def test_the_stream_tells_a_change(api: Console, host: Host) -> None:
    scope = host.scope("stream")
    events = Events(api, f"/api/v1/stream?scope={scope}")
    try:
        assert events.next_event(10) == ("hello", {"scope": scope})
        submit(api, scope, "s1", start=False)
        name, data = events.next_event(3)
        assert (name, data["scope"], data["jobs"]) == ("change", scope, ["s1"])
        running_done = api.post(f"/api/v1/jobs/{scope}/s1/start", token=TOKEN)
        assert running_done.status == 200
        name, data = events.next_event(3)
        assert data["jobs"] == ["s1"]
    finally:
        events.close()


def test_a_recipe_graph_is_built_once_and_kept(api: Console, host: Host) -> None:
    from host.jobview import recipe_graph
    from sfc.builder import RECIPE_V1_1_0

    scope = host.scope("graphs")
    submit(api, scope, "g1", start=False)
    order = host.order(scope, "g1")
    store = host.store()
    first, problem = recipe_graph(store, order.recipe_hash, order.dataschema)
    assert first is not None and problem == ""
    assert recipe_graph(store, order.recipe_hash, order.dataschema)[0] is first
    assert recipe_graph(store, "0" * 64, RECIPE_V1_1_0) == (
        None,
        "recipe 000000000000 is not stored",
    )


def test_the_stream_tells_a_burst_of_commits_and_then_goes_quiet(api: Console, host: Host) -> None:
    """Many commits of one job are told in a round or two, not an entry a round."""
    scope = host.scope("burst")
    submit(api, scope, "b1", start=False)
    events = Events(api, f"/api/v1/stream?scope={scope}")
    try:
        assert events.next_event(10)[0] == "hello"
        for _ in range(6):  # twelve commits, each with a history entry
            assert api.post(f"/api/v1/jobs/{scope}/b1/start", token=TOKEN).status == 200
            assert api.post(f"/api/v1/jobs/{scope}/b1/revoke", token=TOKEN).status == 200
        told = rounds = 0
        while True:
            try:
                name, data = events.next_event(2.5)
            except AssertionError:
                break  # quiet
            rounds += 1
            assert rounds <= 20, "the stream never goes quiet"
            if not data["jobs"]:  # the work entries the starts and revokes added
                assert data["work"]
                continue
            assert (name, data["jobs"]) == ("change", ["b1"])
            told += 1
            assert told <= 4, "the stream keeps telling old entries"
        assert told >= 1
    finally:
        events.close()


def test_the_charts_kept_are_bounded_and_the_least_recently_used_goes() -> None:
    from host.console.chart import Kept

    kept = Kept(2)
    kept[("a",)] = ("A", 1, 1)
    kept[("b",)] = ("B", 1, 1)
    assert kept.get(("a",)) == ("A", 1, 1)  # a is now the most recently used
    kept[("c",)] = ("C", 1, 1)
    assert sorted(kept) == [("a",), ("c",)]
    assert kept.get(("b",)) is None


def test_the_stream_tells_a_dead_entry_and_the_work_lists_it(api: Console, host: Host) -> None:
    scope = host.scope("dead")
    submit(api, scope, "d1", start=False)  # registers the scope
    events = Events(api, f"/api/v1/stream?scope={scope}")
    try:
        assert events.next_event(10)[0] == "hello"
        host.store().add_work(scope, {"v": b"1", "kind": b"nonsense", "data": b"{}"})
        w = host.worker([scope])
        host.run(
            [w],
            [],
            lambda: api.get(f"/api/v1/work?scope={scope}").json()["dead"]["dead"] != [],
            what="the malformed entry to be buried",
        )
        name, data = events.next_event(5)
        while not data.get("work"):  # a job's change may come first
            name, data = events.next_event(5)
        assert (name, data["work"]) == ("change", True)
    finally:
        events.close()


def test_the_stream_tells_pending_work_read_and_claimed_though_no_job_moves(
    api: Console, host: Host
) -> None:
    """The work page follows entries read and claimed: no job's history moves then."""
    scope = host.scope("pending")
    submit(api, scope, "p1", start=False)  # registers the scope
    client, work = host.client(), keys.work(scope)
    with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: the submit made it
        client.xgroup_create(work, keys.GROUP, "$", mkstream=True)
    events = Events(api, f"/api/v1/stream?scope={scope}")

    def told_work() -> None:
        name, data = events.next_event(5)
        while not data.get("work"):
            name, data = events.next_event(5)
        assert name == "change"

    def pending() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = api.get(f"/api/v1/work?scope={scope}").json()["pending"][
            "pending"
        ]
        return rows

    try:
        assert events.next_event(10)[0] == "hello"
        entry = host.store().add_work(scope, {"v": b"1", "kind": b"nonsense", "data": b"{}"})
        told_work()  # added, unread
        assert pending() == []
        client.xreadgroup(keys.GROUP, "ghost", {work: ">"}, count=1)
        told_work()  # read by a worker that went away
        assert [(p["id"], p["consumer"]) for p in pending()] == [(entry, "ghost")]
        client.xclaim(work, keys.GROUP, "heir", 0, [entry])
        told_work()  # claimed by another
        assert [(p["id"], p["consumer"]) for p in pending()] == [(entry, "heir")]
    finally:
        events.close()

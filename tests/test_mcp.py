"""`sfc mcp` (docs/metrics.md, "The MCP server"): the MCP tools driven by the SDK's own
client, in-process and once as a subprocess over stdio, against the real session server.

Every tool is called with good input and with bad input; bad input is a tool error
(`isError` with the reason), never a crash. The dry run equals `sfc dryrun --json`, the
explanation `sfc explain`, and without --allow-control no control tool is listed and
nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from cli.files import LIMITS
from cli.mcptools import CONTROL_TOOLS, OFFLINE_TOOLS, SERVER_TOOLS, Connection, build_server
from host import keys
from host.entries import decode_work
from host.equipment import always
from host.worker import Worker
from sfc import codec
from sfc.builder import build
from sfc.simulation import Simulation
from tests.clikit import EXAMPLES, SFC, check, cli_env, sfc_all
from tests.hostkit import FAST, Host, linear_recipe
from tests.test_host_cli import SHOW

RECIPE = EXAMPLES / "greetings-demo" / "recipe.json"
SCRIPT = EXAMPLES / "greetings-demo" / "retry.script.json"


def _run(server: Any, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with Client(server) as client:
            await body(client)

    anyio.run(main)


async def _names(client: Client) -> list[str]:
    return sorted(t.name for t in (await client.list_tools()).tools)


def _error(result: CallToolResult) -> str:
    assert result.is_error, f"expected a tool error, got {result}"
    text = result.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


def _ok(result: CallToolResult) -> CallToolResult:
    assert not result.is_error, result.content
    return result


def _text(result: CallToolResult) -> str:
    text = _ok(result).content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


def _state_of_a_run(recipe: bytes) -> bytes:
    """A job's state partway: the recipe run with no answers (it waits in its first step)."""
    graph = build(recipe).graph
    assert graph is not None
    sim = Simulation(graph, None, job_id="job-1", evaluation_limit=1)
    sim.run()
    return codec.encode(sim.state)


def test_the_tools_without_a_server_in_process(tmp_path: Path) -> None:
    recipe = RECIPE.read_text()
    script = SCRIPT.read_text()
    state = _state_of_a_run(RECIPE.read_bytes())
    (tmp_path / "state.json").write_bytes(state)
    dry, dry_script, explained, explained_state = sfc_all(
        [
            ["dryrun", RECIPE, "--json"],
            ["dryrun", RECIPE, "--script", SCRIPT, "--json"],
            ["explain", RECIPE],
            ["explain", RECIPE, "--state", tmp_path / "state.json"],
        ],
        cwd=tmp_path,
    )
    server, conn = build_server(None)
    assert conn is None

    async def body(c: Client) -> None:
        assert await _names(c) == sorted(OFFLINE_TOOLS)

        # sfc_validate: a valid recipe, an invalid one (a result, not an error), bad input
        r = _ok(await c.call_tool("sfc_validate", {"recipe": recipe}))
        assert r.structured_content is not None
        assert r.structured_content["ok"] is True and r.structured_content["errors"] == []
        bad = json.dumps({"Steps": [], "Transitions": [], "Actions": []})
        r = _ok(await c.call_tool("sfc_validate", {"recipe": bad}))
        assert r.structured_content is not None
        assert r.structured_content["ok"] is False
        assert {e["code"] for e in r.structured_content["errors"]} <= {
            f"SFC{n:03d}" for n in range(21)
        }
        assert "Input should be a valid string" in _error(
            await c.call_tool("sfc_validate", {"recipe": 5})
        )
        assert "unknown dataschema" in _error(
            await c.call_tool("sfc_validate", {"recipe": recipe, "dataschema": "x"})
        )
        assert "capabilities are not valid" in _error(
            await c.call_tool("sfc_validate", {"recipe": recipe, "capabilities": '{"x": 1}'})
        )
        assert "capabilities" in _error(
            await c.call_tool("sfc_validate", {"recipe": recipe, "capabilities": "[1]"})
        )
        huge = " " * (LIMITS["recipe"] + 1)
        assert "at most" in _error(await c.call_tool("sfc_validate", {"recipe": huge}))

        # sfc_explain: equal to `sfc explain`, with and without a state
        assert _text(await c.call_tool("sfc_explain", {"recipe": recipe})) == explained.out
        got = _text(await c.call_tool("sfc_explain", {"recipe": recipe, "state": state.decode()}))
        assert got == explained_state.out, explained_state
        assert "the recipe is not valid" in _error(
            await c.call_tool("sfc_explain", {"recipe": "[]"})
        )
        assert "not a job state" in _error(
            await c.call_tool("sfc_explain", {"recipe": recipe, "state": "{}"})
        )
        assert "Field required" in _error(await c.call_tool("sfc_explain", {}))

        # sfc_dryrun: the transcript as text, and the JSON equal to `sfc dryrun --json`
        for args, expected in (({}, dry), ({"script": script}, dry_script)):
            r = _ok(await c.call_tool("sfc_dryrun", {"recipe": recipe, **args}))
            assert r.structured_content is not None
            assert r.structured_content["dryrun"] == json.loads(expected.out)
            assert json.loads(r.content[1].text) == json.loads(expected.out)  # type: ignore[union-attr]
            transcript = r.structured_content["transcript"]
            assert r.content[0].text == transcript  # type: ignore[union-attr]
            assert "start" in transcript.splitlines()[0]
        for args, said in (
            ({"job_id": "a b"}, "job_id"),
            ({"script": "{"}, "script"),
            ({"script": json.dumps({"replies": {"nope": ["ok"]}})}, "script"),
            ({"time_limit_ms": -1}, "time_limit_ms"),
            ({"evaluation_limit": 0}, "evaluation_limit"),
            ({"evaluation_limit": 10_001}, "evaluation_limit: it must be 1 to 10,000"),
            ({"capabilities": "{"}, "capabilities"),
        ):
            assert said in _error(await c.call_tool("sfc_dryrun", {"recipe": recipe, **args}))
        # a recipe that loops for ever stops at the tool's cap, not at the CLI's 100,000
        r = _ok(await c.call_tool("sfc_dryrun", {"recipe": LOOP}))
        assert r.structured_content is not None
        dryrun = r.structured_content["dryrun"]
        assert (dryrun["end"], dryrun["evaluations"]) == ("evaluation_limit", 10_000)
        assert "Unknown tool" in _error(await c.call_tool("sfc_tick", {"job": "j"}))

    _run(server, body)


LOOP = json.dumps(
    {
        "Steps": [{"Name": "A", "Initial": True}, {"Name": "B"}],
        "Transitions": [
            {"Source": "A", "Target": "B", "Condition": "true"},
            {"Source": "B", "Target": "A", "Condition": "true"},
        ],
        "Actions": [
            {
                "Name": n,
                "Step": s,
                "Qualifier": "N",
                "Interaction": "push_command",
                "TypeId": f"com.example.{n}.v1",
                "TimeoutSeconds": 5,
            }
            for n, s in (("a", "A"), ("b", "B"))
        ],
    }
)
"""A recipe that never ends: A and B take turns, each with an action answered at once."""


def test_every_tool_is_documented() -> None:
    text = (EXAMPLES.parent / "docs" / "metrics.md").read_text()
    for tool in OFFLINE_TOOLS + SERVER_TOOLS + CONTROL_TOOLS:
        assert f"`{tool}" in text, tool
    # the README is a newcomer's page: it names the server and links its documentation
    assert "docs/metrics.md#the-mcp-server" in (EXAMPLES.parent / "README.md").read_text()


def _running_job(host: Host, scope: str) -> tuple[str, Worker]:
    """A job of a 3-step recipe in its first step (its push sent), and the worker."""
    job = host.submit(scope, linear_recipe(3)).job
    worker = host.worker([scope], FAST)
    host.run([worker], [], lambda: host.order_path(scope, job) == "Running", what="the start")
    return job, worker


def _snapshot(host: Host, scope: str) -> dict[str, Any]:
    """Everything of the scope that a write would change."""
    r = host.client()
    try:
        out: dict[str, Any] = {}
        for key in sorted(r.scan_iter(match=f"sfc:*{{{scope}}}*")):
            kind = r.type(key)
            if kind == b"stream":
                out[key] = r.xrange(key)
            elif kind == b"hash":
                out[key] = r.hgetall(key)
            elif kind == b"zset":
                out[key] = r.zrange(key, 0, -1, withscores=True)
            elif kind == b"set":
                out[key] = sorted(r.smembers(key))
        return out
    finally:
        r.close()


def test_the_reading_tools_write_nothing_and_offer_no_control(host: Host, tmp_path: Path) -> None:
    scope = host.scope("mcp-read")
    job, _ = _running_job(host, scope)
    # an entry read and not committed: pending
    host.store().add_work(
        scope, {"v": b"1", "kind": b"tick", "data": json.dumps({"job": job}).encode()}
    )
    host.store(consumer="stalled").read([scope], 10, None)
    # a job whose stored state cannot be read: listed with why, as `sfc job list` lists it
    bad = host.submit(scope, linear_recipe(1), start=False).job
    host.client().hset(keys.job(scope, bad), "state", '{"format":"1.4","garbage":1}')
    listed, pending = sfc_all(
        [
            ["job", "list", "--json", "--scope", scope, "--redis", host.url],
            ["work", "pending", "--json", "--scope", scope, "--redis", host.url],
        ],
        cwd=tmp_path,
    )
    before = _snapshot(host, scope)
    server, conn = build_server(host.url, allow_control=False)
    assert conn is not None

    async def body(c: Client) -> None:
        assert await _names(c) == sorted(OFFLINE_TOOLS + SERVER_TOOLS)
        assert not set(CONTROL_TOOLS) & set(await _names(c))

        r = _ok(await c.call_tool("sfc_job", {"job": job, "scope": scope}))
        shown = _text(r)
        assert shown.startswith(f"Job order {job} (scope {scope}): Running"), shown
        assert "Job response" in shown
        # and the document of `sfc job show --json`, structured as the other tools answer
        doc = check(r.structured_content, SHOW)
        assert json.loads(r.content[1].text) == doc  # type: ignore[union-attr]
        assert (doc["order"]["jobOrderId"], doc["explain"][0]) == (
            job,
            f"Job {job} (scope {scope}), recipe {doc['order']['recipeHash'][:12]}",
        )
        assert [w["for"] for w in doc["waitingFor"]] == ["answer"]
        assert "no such job order" in _error(
            await c.call_tool("sfc_job", {"job": "nobody", "scope": scope})
        )
        assert "job:" in _error(await c.call_tool("sfc_job", {"job": "a b", "scope": scope}))
        assert "scope:" in _error(await c.call_tool("sfc_job", {"job": job, "scope": "{x}"}))
        assert "history" in _error(
            await c.call_tool("sfc_job", {"job": job, "scope": scope, "history": -1})
        )
        # no history asked: the view without it (it raised from the server's XREVRANGE)
        bare = _text(await c.call_tool("sfc_job", {"job": job, "scope": scope, "history": 0}))
        assert bare.startswith(f"Job order {job} (scope {scope}): Running"), bare
        assert "history" not in bare.lower() or "Last 0" not in bare, bare

        r = _ok(await c.call_tool("sfc_jobs", {"scope": scope}))
        assert r.structured_content == listed.json()
        assert [(j["job"], "unreadable" in j) for j in listed.json()["jobs"]] == [
            (job, False),
            (bad, True),
        ]
        r = _ok(await c.call_tool("sfc_jobs", {"scope": scope, "state": ["Running"]}))
        assert r.structured_content is not None
        assert [j["job"] for j in r.structured_content["jobs"]] == [job]
        r = _ok(await c.call_tool("sfc_jobs", {"scope": scope, "state": ["Ended"]}))
        assert r.structured_content == {"jobs": []}
        assert "state" in _error(
            await c.call_tool("sfc_jobs", {"scope": scope, "state": ["Sleeping"]})
        )
        assert "scope:" in _error(await c.call_tool("sfc_jobs", {"scope": ""}))

        r = _ok(await c.call_tool("sfc_work_pending", {"scope": scope}))
        assert r.structured_content is not None
        expected = pending.json()
        # the idle times grow between the two reads
        got = r.structured_content
        for p in (*expected["pending"], *got["pending"]):
            p.pop("idleMs")
        for p in (*expected["outAtEquipment"], *got["outAtEquipment"]):
            p.pop("idleMs")
        assert {expected.pop("workersIdleMs") is None, got.pop("workersIdleMs") is None} == {
            expected["workers"] == 0
        }
        assert r.structured_content == expected
        assert len(expected["pending"]) == 1
        assert "scope:" in _error(await c.call_tool("sfc_work_pending", {"scope": "a b"}))

    try:
        _run(server, body)
    finally:
        conn.close()
    assert _snapshot(host, scope) == before, "a reading tool wrote to the server"


def test_the_control_tools(host: Host) -> None:
    scope = host.scope("mcp-control")
    job, worker = _running_job(host, scope)
    other = host.submit(scope, linear_recipe(2), start=False).job
    store = host.store()
    server, conn = build_server(host.url, allow_control=True)
    assert conn is not None

    def work_kinds() -> list[str]:
        rows = store.client(scope).xrange(keys.work(scope))
        return [decode_work(i.decode(), f).kind for i, f in rows]

    async def body(c: Client) -> None:
        assert await _names(c) == sorted(OFFLINE_TOOLS + SERVER_TOOLS + CONTROL_TOOLS)

        r = _ok(await c.call_tool("sfc_pause", {"job": job, "scope": scope, "comment": "lunch"}))
        assert r.structured_content is not None
        assert r.structured_content["status"] == 1
        assert host.order_path(scope, job) == "Interrupted/Suspended"
        said = _error(await c.call_tool("sfc_pause", {"job": job, "scope": scope}))
        # the status in words with its number once, as the CLI says it
        assert said == (
            f"Error executing tool sfc_pause: {job}: invalid job order status (8): "
            "Pause is not allowed: the order is "
            "Interrupted/Suspended"
        ), said
        assert "comment" in _error(
            await c.call_tool("sfc_pause", {"job": job, "scope": scope, "comment": "x" * 5000})
        )
        _ok(await c.call_tool("sfc_resume", {"job": job, "scope": scope}))
        assert host.order_path(scope, job) == "Running"
        assert "(8)" in _error(await c.call_tool("sfc_resume", {"job": job, "scope": scope}))

        r = _ok(await c.call_tool("sfc_tick", {"job": job, "scope": scope}))
        assert r.structured_content is not None
        assert r.structured_content["entry"]
        assert work_kinds()[-1] == "tick"
        assert "no such job order" in _error(
            await c.call_tool("sfc_tick", {"job": "nobody", "scope": scope})
        )

        _ok(await c.call_tool("sfc_redispatch", {"job": job, "scope": scope, "action": "a1"}))
        assert work_kinds()[-1] == "resume"
        assert "no action" in _error(
            await c.call_tool("sfc_redispatch", {"job": job, "scope": scope, "action": "zz"})
        )
        _ok(await c.call_tool("sfc_redispatch", {"job": job, "scope": scope}))

        _ok(await c.call_tool("sfc_abort", {"job": other, "scope": scope}))
        assert host.order_path(scope, other) == "Aborted"
        assert "(8)" in _error(await c.call_tool("sfc_abort", {"job": other, "scope": scope}))
        # a job whose stored state cannot be read: each tool says so, and the way out (it
        # said "Error executing tool" and nothing more)
        bad = host.submit(scope, linear_recipe(1), start=False).job
        host.client().hset(keys.job(scope, bad), "state", '{"format":"1.4","garbage":1}')
        for tool in ("sfc_job", "sfc_abort", "sfc_pause"):
            said = _error(await c.call_tool(tool, {"job": bad, "scope": scope}))
            assert "stored order or state cannot be read" in said, (tool, said)
            way_out = (
                f"`sfc job clear {bad} --unreadable` removes it"
                if tool == "sfc_job"
                else (
                    "`sfc job list` marks such a job, and `sfc job clear` with its id and "
                    "--unreadable removes it"
                )
            )
            assert way_out in said, (tool, said)
        for tool in CONTROL_TOOLS:
            assert "job:" in _error(await c.call_tool(tool, {"job": "a b", "scope": scope}))
            assert "scope:" in _error(await c.call_tool(tool, {"job": job, "scope": "a{b"}))
            assert "Field required" in _error(await c.call_tool(tool, {"scope": scope}))

    try:
        _run(server, body)
    finally:
        conn.close()
    # the worker applies what the tools queued, and the job still completes
    responder = host.responder(scope, always("ok"))
    host.run([worker], [responder], host.ended(scope, [job]))
    assert host.order_path(scope, job) == "Ended/Completed"


def test_a_server_that_is_gone_is_a_tool_error() -> None:
    server, conn = build_server("redis://127.0.0.1:1/0", allow_control=True)
    assert conn is not None

    async def body(c: Client) -> None:
        for tool, args in (("sfc_jobs", {}), ("sfc_job", {"job": "j"}), ("sfc_tick", {"job": "j"})):
            said = _error(await c.call_tool(tool, args))
            assert "127.0.0.1:1" in said or "server" in said, said

    try:
        _run(server, body)
    finally:
        conn.close()
    assert isinstance(conn, Connection)


@pytest.mark.parametrize("control", [False, True])
def test_sfc_mcp_over_stdio(host: Host, tmp_path: Path, control: bool) -> None:
    """`sfc mcp` as an MCP client starts it: a subprocess speaking over its stdin and
    stdout."""
    scope = host.scope("mcp-stdio")
    job = host.submit(scope, linear_recipe(2), start=False).job
    (dry,) = sfc_all([["dryrun", RECIPE, "--json"]], cwd=tmp_path)
    args = ["mcp", "--redis", host.url, *(["--allow-control"] if control else [])]
    params = StdioServerParameters(
        command=SFC[0], args=[*SFC[1:], *args], env=cli_env(), cwd=str(tmp_path)
    )

    async def body(c: Client) -> None:
        names = await _names(c)
        expected = OFFLINE_TOOLS + SERVER_TOOLS + (CONTROL_TOOLS if control else ())
        assert names == sorted(expected)
        r = _ok(await c.call_tool("sfc_dryrun", {"recipe": RECIPE.read_text()}))
        assert r.structured_content is not None
        assert r.structured_content["dryrun"] == json.loads(dry.out)
        assert "the recipe is not valid" in _error(await c.call_tool("sfc_dryrun", {"recipe": "1"}))
        r = _ok(await c.call_tool("sfc_jobs", {"scope": scope}))
        assert r.structured_content is not None
        assert [j["job"] for j in r.structured_content["jobs"]] == [job]
        assert "scope:" in _error(await c.call_tool("sfc_jobs", {"scope": "a b"}))
        if control:
            _ok(await c.call_tool("sfc_abort", {"job": job, "scope": scope}))
            assert host.order_path(scope, job) == "Aborted"
        else:
            assert "Unknown tool" in _error(
                await c.call_tool("sfc_abort", {"job": job, "scope": scope})
            )
            assert host.order_path(scope, job).startswith("NotAllowedToStart")

    _run(params, body)


def test_allow_control_without_a_server_is_refused(tmp_path: Path) -> None:
    no_server, offline = sfc_all(
        [
            ["mcp", "--allow-control", "--data-dir", tmp_path / "none"],
            ["mcp", "--allow-control", "--offline"],
        ],
        cwd=tmp_path,
    )
    assert no_server.code == 2 and "--allow-control needs a server" in no_server.err
    assert offline.code == 2 and "--allow-control needs a server" in offline.err
    assert no_server.out == offline.out == ""

"""What the host commands say to a plant engineer with stuck jobs (the "3 a.m." review): a
mistyped scope does not look like "all clear", an event that no wait matches is named, and
every refusal says what to do (a real server; the CLI in this process, as
tests/test_host_cli_badinput.py runs it, and real processes where the test is about one)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client
from typer.testing import CliRunner

from cli.main import app
from cli.mcptools import build_server
from host import keys
from tests.clikit import processes
from tests.hostkit import Host, linear_recipe


def sfc(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process: exit code, stdout and stderr as a subprocess gives them."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def _mcp(url: str, tool: str, arguments: dict[str, Any]) -> tuple[bool, str, Any]:
    """One MCP tool call: (is error, its text, its structured content)."""
    server, conn = build_server(url, allow_control=True)
    out: list[Any] = []

    async def main() -> None:
        async with Client(server) as client:
            r = await client.call_tool(tool, arguments)
            out.append((r.is_error, r.content[0].text, r.structured_content))  # type: ignore[union-attr]

    try:
        anyio.run(main)
    finally:
        assert conn is not None
        conn.close()
    return out[0]


def test_a_scope_that_is_not_registered_is_named_not_taken_for_all_clear(
    host: Host, valkey_url: str
) -> None:
    home = host.scope("home")
    host.submit(home, linear_recipe(1), job_id="e1", start=False)
    typo = host.scope("typo")  # never submitted to nor set up: not registered
    at = ["--scope", typo, "--redis", valkey_url]
    said = f"sfc: warning: scope {typo} is not registered (a typo?); the registered scopes: "
    for args in (["job", "list"], ["work", "dead"], ["work", "pending"]):
        proc = sfc(*args, *at)
        assert proc.returncode == 0, proc.stderr  # an empty answer is still an answer
        assert said in proc.stderr, (args, proc.stderr)
        proc = sfc(*args, *at, "--json")
        assert proc.returncode == 0, proc.stderr
        warning = json.loads(proc.stdout)["warning"]
        assert warning.startswith(f"scope {typo} is not registered"), warning
    # a registered scope with nothing in it: no warning
    proc = sfc("work", "dead", "--scope", home, "--redis", valkey_url, "--json")
    assert "warning" not in json.loads(proc.stdout) and not proc.stderr
    error, _, doc = _mcp(valkey_url, "sfc_jobs", {"scope": typo})
    assert not error and doc["jobs"] == [] and "is not registered" in doc["warning"]
    error, _, doc = _mcp(valkey_url, "sfc_work_pending", {"scope": typo})
    assert not error and "is not registered" in doc["warning"]


def test_a_job_not_found_in_its_scope_is_named_where_it_is(host: Host, valkey_url: str) -> None:
    home = host.scope("home")
    e1 = f"e1-{home}"  # the session's server holds other tests' jobs
    host.submit(home, linear_recipe(1), job_id=e1, start=False)
    other = host.scope("other")
    host.submit(other, linear_recipe(1), job_id="x1", start=False)  # registered, no e1
    at = ["--scope", other, "--redis", valkey_url]
    hint = f"job {e1} is in scope {home}: add --scope {home}"
    proc = sfc("job", "show", e1, *at)
    assert proc.returncode == 1
    assert f"{e1}: unknown job order id (2): no such job order in scope {other}; {hint}" in (
        proc.stderr
    )
    for args in (["job", "pause", e1], ["job", "redispatch", e1], ["job", "cancel", e1]):
        proc = sfc(*args, *at)
        assert proc.returncode == 1 and hint in proc.stdout, (args, proc.stdout)
    proc = sfc("job", "wait", e1, "--timeout", "1", *at)
    assert proc.returncode == 1 and hint in proc.stdout, proc.stdout
    proc = sfc("respond", e1, "a1", *at)
    assert proc.returncode == 1 and hint in proc.stderr, proc.stderr
    # an id stored nowhere, in a scope that is not registered: that is said instead
    proc = sfc("job", "show", "nowhere-h5", "--scope", "no-such-scope-h5", "--redis", valkey_url)
    assert "scope no-such-scope-h5 is not registered (a typo?)" in proc.stderr, proc.stderr
    error, text, _ = _mcp(valkey_url, "sfc_job", {"job": e1, "scope": other})
    assert error and f'job {e1} is in scope {home}: call it with scope "{home}"' in text, text
    error, text, _ = _mcp(valkey_url, "sfc_pause", {"job": e1, "scope": other})
    assert error and f"job {e1} is in scope {home}" in text, text


def test_a_job_not_found_asks_the_registered_scopes_in_one_pass(tmp_path: Path) -> None:
    """Review r3: a job not found asked each registered scope in a round trip of its own
    (one EXISTS each): with 2,000 scopes `job show nosuch` made 2,015 round trips, and
    `job wait` of 3 unknown jobs 6,016. Now one pipeline (per node) for every scope, and
    for every unknown job of a `job wait`: the server's reads are counted, on a server of
    the test's own (nothing else talks to it)."""
    from host.server import EmbeddedServer

    server = EmbeddedServer(tmp_path / "valkey").start()
    h = Host(server.url)
    try:
        home = h.scope("home")
        h.submit(home, linear_recipe(1), job_id="x1", start=False)
        r = h.client()
        r.sadd(keys.SCOPES, *[f"s{i}" for i in range(200)])
        h.submit("s150", linear_recipe(1), job_id="there", start=False)
        at = ["--scope", home, "--redis", server.url]

        def reads() -> int:
            return int(r.info("stats")["total_reads_processed"])

        before = reads()
        proc = sfc("job", "show", "nosuch", *at)
        shown = reads() - before
        assert proc.returncode == 1 and f"no such job order in scope {home}" in proc.stderr
        assert shown < 30, shown  # 200 and more, one a scope
        before = reads()
        proc = sfc("job", "wait", "nosuch", "there", "none", "--timeout", "5", *at)
        waited = reads() - before
        assert proc.returncode == 1, proc.stdout
        assert "there: unknown job order (no such job order in scope " in proc.stdout
        assert "; job there is in scope s150: add --scope s150)" in proc.stdout, proc.stdout
        assert proc.stdout.count("no such job order") == 3, proc.stdout
        assert waited < 30, waited  # 600 and more
    finally:
        h.close()
        server.stop()


def test_equipment_on_a_scope_that_is_not_registered_says_so_at_start(
    host: Host, valkey_url: str, tmp_path: Path
) -> None:
    typo = host.scope("dflt")
    script = tmp_path / "s.json"
    script.write_text('{"default": "ok"}')
    with processes(tmp_path / "logs") as procs:
        eq = procs.start(
            "equipment", "equipment", "--script", script, "--scope", typo, "--redis", valkey_url,
            cwd=tmp_path,
        )  # fmt: skip
        eq.wait_for_stderr("sfc equipment: answering")
        assert f"sfc: warning: scope {typo} is not registered (a typo?)" in eq.stderr()


def test_job_list_and_wait_tell_a_fault_from_an_operators_abort(
    host: Host, valkey_url: str
) -> None:
    from host.equipment import Answer
    from host.jobs import abort

    scope = host.scope("why")
    faulted = host.submit(scope, linear_recipe(1, max_attempts=1)).job
    aborted = host.submit(scope, linear_recipe(1)).job
    assert abort(host.store(), scope, aborted).ok
    jammed = host.responder(scope, lambda kind, data: Answer(error="jammed"))
    host.run([host.worker([scope])], [jammed], host.ended(scope, [faulted], "Aborted"))
    at = ["--scope", scope, "--redis", valkey_url]
    proc = sfc("job", "list", *at)
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert "Aborted (faulted error)" in rows[faulted], proc.stdout
    assert "Aborted (aborted)" in rows[aborted], proc.stdout
    listed = {j["job"]: j for j in json.loads(sfc("job", "list", *at, "--json").stdout)["jobs"]}
    assert (listed[faulted]["endedBy"], listed[faulted]["faultCode"]) == ("faulted", "error")
    assert (listed[aborted]["endedBy"], listed[aborted]["faultCode"]) == ("aborted", None)
    proc = sfc("job", "wait", faulted, aborted, "--timeout", "5", *at)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{faulted}: Aborted (faulted error)",
        f"{aborted}: Aborted (aborted)",
    ]


def test_refusals_say_what_to_do(host: Host, valkey_url: str, tmp_path: Path) -> None:
    from host.jobs import pause
    from tests.test_host_jobcontrol import TIGHTENING

    scope = host.scope("refusals")
    at = ["--scope", scope, "--redis", valkey_url]
    job = host.submit(scope, TIGHTENING).job
    worker = host.worker([scope])
    host.run([worker], [], lambda: host.order_path(scope, job) == "Running")
    assert pause(host.store(), scope, job).ok
    for method in ("cancel", "clear"):
        proc = sfc("job", method, job, *at)
        assert proc.returncode == 1
        assert "the order is Interrupted/Suspended; stop or abort it first" in proc.stdout, (
            proc.stdout
        )
    recipe = tmp_path / "r.json"
    recipe.write_bytes(TIGHTENING)
    proc = sfc("job", "submit", str(recipe), "--job-id", job, *at)
    assert proc.returncode == 1
    assert "the job id is taken: choose another, or remove the stored job first" in proc.stderr
    proc = sfc("respond", job, "clampp", "ok", *at)
    assert proc.returncode == 1
    assert f"clampp: the recipe of job {job} has no action 'clampp'; it has " in proc.stderr
    assert "clamp" in proc.stderr.split("it has ")[1], proc.stderr
    # an empty error text is refused as an empty OUTCOME is: it faulted the job
    proc = sfc("respond", job, "clamp", "--error", "", *at)
    assert proc.returncode == 2 and "--error is empty" in proc.stderr, proc.stderr
    # an Update that changes nothing is refused before anything is sent
    proc = sfc("job", "update", job, *at)
    assert proc.returncode == 2
    assert "nothing to update: give --recipe, --priority" in proc.stderr


def test_redispatch_on_a_last_attempt_names_force(host: Host, valkey_url: str) -> None:
    scope = host.scope("force")
    job = host.submit(scope, linear_recipe(1, max_attempts=1)).job
    worker = host.worker([scope])
    host.run([worker], [], lambda: bool(host.equipment(scope)))
    proc = sfc("job", "redispatch", job, "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 1
    assert "`sfc job redispatch --force` sends it anyway" in proc.stdout, proc.stdout


def test_a_refused_update_says_its_build_errors_once(
    host: Host, valkey_url: str, tmp_path: Path
) -> None:
    scope = host.scope("update")
    job = host.submit(scope, linear_recipe(1), start=False).job
    bad = tmp_path / "bad.json"
    bad.write_text('{"Steps": 1}')
    proc = sfc("job", "update", job, "--recipe", str(bad), "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 1
    said = proc.stdout + proc.stderr
    assert said.count("SFC0") == len([x for x in proc.stderr.splitlines() if "SFC0" in x]), said
    assert (
        f"{job}: unable to accept the job order (16): {bad} does not build for scope {scope}"
        in proc.stdout
    )


def test_work_pending_json_has_the_kind_and_job_apart(host: Host, valkey_url: str) -> None:
    scope = host.scope("pending")
    job = host.submit(scope, linear_recipe(1)).job
    host.store(consumer="stalled").read([scope], 10, None)
    proc = sfc("work", "pending", "--json", "--scope", scope, "--redis", valkey_url)
    (row,) = json.loads(proc.stdout)["pending"]
    assert (row["entry"], row["kind"], row["job"]) == (f"start for job {job}", "start", job)
    error, _, doc = _mcp(valkey_url, "sfc_work_pending", {"scope": scope})
    assert not error and (doc["pending"][0]["kind"], doc["pending"][0]["job"]) == ("start", job)


def test_an_event_that_no_wait_matches_is_said_to_be_dropped(host: Host, valkey_url: str) -> None:
    from host import keys

    scope = host.scope("events")
    host.submit(scope, linear_recipe(1), start=False)  # registered
    r = host.client()
    r.zadd(keys.waits(scope, "t.qa.v1"), {'["k1","line1/axle/a2/qa",null]': 1})
    at = ["--scope", scope, "--redis", valkey_url]
    proc = sfc("event", "t.qa.v1", "--subject", "line1/axle/A2/qa", "--outcome", "qa_ok", *at)
    assert proc.returncode == 0 and proc.stdout.startswith("queued event "), proc
    assert (
        f"sfc: warning: no wait for t.qa.v1 in scope {scope} matches this event (subject "
        "'line1/axle/A2/qa', no correlation id): it will be dropped as unmatched"
    ) in proc.stderr, proc.stderr
    assert "the waits expect subject 'line1/axle/a2/qa', any correlation id (job k1)" in (
        proc.stderr
    )
    proc = sfc("event", "t.qa.v1", "--subject", "line1/axle/a2/qa", *at)
    assert proc.returncode == 0 and proc.stdout.startswith("queued event ") and not proc.stderr
    # a scope that is not registered has no waits: dropped, and the scope is named
    proc = sfc("event", "t.qa.v1", "--scope", "no-such-scope-h5", "--redis", valkey_url)
    assert proc.returncode == 0 and proc.stdout.startswith("dropped: ")
    assert "scope no-such-scope-h5 is not registered" in proc.stderr

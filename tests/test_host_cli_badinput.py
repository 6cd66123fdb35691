"""Every host entry point of the CLI refuses bad input with a clear message and exit 1 or 2,
and writes nothing (a real server, real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from cli.main import app
from host import keys
from host.entries import decode_work
from sfc.codec import state_decoder
from tests.clikit import check
from tests.hostkit import Host, linear_recipe, wait_for
from tests.test_host_cli import LIST

METHODS = ["start", "revoke", "pause", "resume", "stop", "abort", "cancel", "clear"]


def sfc(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (the refusals are not about processes): exit code, stdout and
    stderr as a subprocess would give them."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def _written(r: redis.Redis, scope: str) -> dict[bytes, object]:
    """Everything stored under the scope's keys, to compare before and after."""
    out: dict[bytes, object] = {}
    for k in r.scan_iter(match=f"*{{{scope}}}*"):
        t = r.type(k)
        out[k] = r.xlen(k) if t == b"stream" else r.dump(k)
    return out


@pytest.fixture
def stored(host: Host) -> tuple[Host, str]:
    scope = host.scope("clibad")
    host.submit(scope, linear_recipe(1), job_id="j", start=False)
    return host, scope


@pytest.mark.parametrize("method", METHODS)
def test_every_method_refuses_an_unknown_id_and_writes_nothing(
    stored: tuple[Host, str], valkey_url: str, method: str
) -> None:
    host, scope = stored
    before = _written(host.client(), scope)
    proc = sfc("job", method, "nobody", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 1, proc.stderr
    assert "nobody: unknown job order id (2)" in proc.stdout
    assert _written(host.client(), scope) == before


MALFORMED = "a{b}"
MALFORMED_SAID = (
    "sfc: JOB: the job id 'a{b}' contains '{': braces, spaces and control characters are "
    "not allowed\n"
)


@pytest.mark.parametrize(
    "args",
    [
        *[["job", m, "j", MALFORMED] for m in METHODS],
        ["job", "pause", MALFORMED, "--comment", "c"],
        ["job", "update", MALFORMED, "--priority", "3"],
        ["job", "redispatch", MALFORMED],
        ["job", "response", "j", MALFORMED],
        ["job", "show", MALFORMED],
        ["job", "wait", "j", MALFORMED, "--timeout", "1"],
        ["respond", MALFORMED, "a1", "ok"],
    ],
)
def test_a_malformed_job_id_is_a_usage_error_in_every_command_before_it_connects(
    stored: tuple[Host, str], valkey_url: str, args: list[str]
) -> None:
    """Review r3: a malformed job id (one `host.keys.check_job` refuses) exited 1 "unknown
    job order" in `job show` and `job wait`, 1 "invalid request (4294967296)" in `job pause`,
    and 2 in `respond`. The CLI contract: 2 is usage. Now 2 in the same words everywhere,
    checked before connecting (no server is asked: none is there), and none is touched (a
    good id before it too); a well-formed unknown id stays not found, exit 1 (above)."""
    host, scope = stored
    before = _written(host.client(), scope)
    proc = sfc(*args, "--scope", scope, "--redis", valkey_url)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, MALFORMED_SAID, ""), proc
    assert _written(host.client(), scope) == before
    # before it connects: a server that is not there is not what it says
    proc = sfc(*args, "--scope", scope, "--redis", "redis://127.0.0.1:9")
    assert (proc.returncode, proc.stderr) == (2, MALFORMED_SAID), proc


def test_a_malformed_job_id_to_submit_is_a_usage_error_too(
    stored: tuple[Host, str], valkey_url: str, tmp_path: Path
) -> None:
    """`--job-id` (with --count, each id it makes) is checked as every JOB argument is."""
    host, scope = stored
    recipe = tmp_path / "r.json"
    recipe.write_bytes(linear_recipe(1))
    before = _written(host.client(), scope)
    for extra in ([], ["--count", "3"]):
        proc = sfc(
            "job", "submit", str(recipe), "--job-id", "a b", *extra,
            "--scope", scope, "--redis", valkey_url,
        )  # fmt: skip
        assert proc.returncode == 2, proc
        assert proc.stderr.startswith("sfc: --job-id: the job id 'a b"), proc.stderr
        assert "contains ' ': braces, spaces and control characters are not allowed" in proc.stderr
    assert _written(host.client(), scope) == before


def test_a_prefix_whose_ids_would_be_too_long_is_named_as_the_prefix(
    stored: tuple[Host, str], valkey_url: str, tmp_path: Path
) -> None:
    """Review: `--count 100 --job-id P` with P of 126 characters said "the job id has 129
    characters" (of P-10, the first too long), an id the user never wrote. It says what
    the ids made from P would be, and the longest prefix that fits; one that fits is
    taken."""
    host, scope = stored
    recipe = tmp_path / "r.json"
    recipe.write_bytes(linear_recipe(1))
    before = _written(host.client(), scope)
    prefix = "p" * (keys.JOB_LIMIT - 2)
    proc = sfc(
        "job", "submit", str(recipe), "--job-id", prefix, "--count", "100",
        "--scope", scope, "--redis", valkey_url,
    )  # fmt: skip
    assert proc.returncode == 2, proc
    assert proc.stderr == (
        f"sfc: --job-id: with --count 100, the ids made from the prefix (its "
        f"{keys.JOB_LIMIT - 2} characters, then -1 to -100) would have up to "
        f"{keys.JOB_LIMIT + 2} characters; at most {keys.JOB_LIMIT} are allowed: a prefix "
        f"of at most {keys.JOB_LIMIT - 4} characters fits\n"
    ), proc.stderr
    assert _written(host.client(), scope) == before
    fits = "p" * (keys.JOB_LIMIT - 4)
    proc = sfc(
        "job", "submit", str(recipe), "--job-id", fits, "--count", "100", "--store-only",
        "--scope", scope, "--redis", valkey_url,
    )  # fmt: skip
    assert proc.returncode == 0, proc
    assert proc.stdout.split()[-1] == f"{fits}-100"


@pytest.mark.parametrize(
    "args",
    [
        ["job", "start", "j"],
        ["job", "pause", "j", "--comment", "c"],
        ["job", "update", "j", "--priority", "3"],
        ["job", "redispatch", "j"],
        ["mcp", "--allow-control"],
    ],
)
def test_a_command_that_applies_a_method_refuses_a_bad_sfc_setting_and_writes_nothing(
    stored: tuple[Host, str], valkey_url: str, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """A method commits with the SFC_* settings, as a worker would; a bad one is named,
    exit 2, as `sfc serve` and `sfc run` name it (the methods used the defaults)."""
    host, scope = stored
    before = _written(host.client(), scope)
    monkeypatch.setenv("SFC_EXPIRY_GRACE", "soon")
    scoped = [] if args[0] == "mcp" else ["--scope", scope]
    proc = sfc(*args, *scoped, "--redis", valkey_url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "SFC_EXPIRY_GRACE='soon' is not a duration" in proc.stderr
    assert _written(host.client(), scope) == before


def test_a_command_that_evaluates_nothing_is_not_stopped_by_a_bad_sfc_setting(
    stored: tuple[Host, str], valkey_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancel removes an order and evaluates nothing: an unrelated bad SFC_* refused it."""
    host, scope = stored
    host.submit(scope, linear_recipe(1), job_id="gone", start=False)
    monkeypatch.setenv("SFC_EXPIRY_GRACE", "soon")
    proc = sfc("job", "cancel", "gone", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert host.client().exists(keys.job(scope, "gone")) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["respond", "j", "a1", "x" * 257], "refused, nothing written"),
        (["respond", "j", "a1", "ok", "--error", "jammed"], "not both"),
        (["respond", "j{", "a1", "ok"], "JOB:"),
        (["respond", "j", "a1", "ok", "--round", "0"], "greater than or equal to 1"),
        (["respond", "j", "a1", ""], "OUTCOME is empty: leave it out for done"),
        (["event", "t.v1", "--outcome", " "], "--outcome is empty: leave it out for done"),
        (["event", "t.v1", "--source", "s"], "come together"),
        (["event", "t.v1", "--subject", "s" * 1025], "refused, nothing written"),
        (["event", " "], "TYPE is empty"),
        (["event", "a b"], "TYPE 'a b' holds white space or a control character"),
    ],
)
def test_respond_and_event_refuse_bad_input_and_write_nothing(
    stored: tuple[Host, str], valkey_url: str, args: list[str], message: str
) -> None:
    host, scope = stored
    r = host.client()
    r.zadd(keys.waits(scope, "t.v1"), {'["j",null,null]': 1})  # a wait: a good event queues
    before = _written(r, scope)
    proc = sfc(*args, "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert _written(r, scope) == before


def test_submit_refuses_a_bad_scope_a_bad_recipe_and_a_taken_id(
    stored: tuple[Host, str], valkey_url: str, tmp_path: Path
) -> None:
    host, scope = stored
    recipe = tmp_path / "r.json"
    recipe.write_bytes(linear_recipe(1))
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"Steps": [{"Name": "A", "Initial": true}], "Transitions": [], "Actions": ['
        '{"Name": "a", "Step": "Nope", "Qualifier": "N", "Interaction": "push_command",'
        ' "TypeId": "t", "TimeoutSeconds": 1}]}'
    )
    before = _written(host.client(), scope)
    proc = sfc("job", "submit", str(recipe), "--scope", "sc{ope}", "--redis", valkey_url)
    assert proc.returncode == 2 and "--scope" in proc.stderr
    proc = sfc("job", "submit", str(bad), "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 1
    assert "unable to accept the job order (16)" in proc.stderr and "SFC003" in proc.stderr
    proc = sfc(
        "job", "submit", str(recipe), "--job-id", "j", "--scope", scope, "--redis", valkey_url
    )
    assert proc.returncode == 1 and "the job id is taken" in proc.stderr
    assert _written(host.client(), scope) == before


@pytest.mark.parametrize(
    "text",
    [
        '{"Steps": [{"Name": "A", "Initial": true}], "Transitions": [{"Source": "A", '
        '"Target": "Nowhere", "Condition": "true", "Priority": 0}], "Actions": ['
        '{"Name": "a", "Step": "Nope", "Qualifier": "N", "Interaction": "push_command",'
        ' "TypeId": "t", "TimeoutSeconds": 1}]}',
        # two shape errors (SFC000): the host's build stops at the first, validate lists both
        '{"Steps": [{"Name": 1, "Initial": true}], "Transitions": [], "Actions": ['
        '{"Name": "a", "Step": "A", "Qualifier": "Q", "Interaction": "push_command",'
        ' "TypeId": "t", "TimeoutSeconds": 1}]}',
    ],
    ids=["build", "shape"],
)
def test_submit_words_build_errors_as_validate_does(
    stored: tuple[Host, str], valkey_url: str, tmp_path: Path, text: str
) -> None:
    """A recipe that does not build: `sfc job submit` gives the same `CODE path: message`
    lines as `sfc validate` (on stderr: its stdout is job ids), then the ReturnStatus, and
    exit 1 as validate does; with --json the same paths as `sfc validate --json`."""
    _, scope = stored
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    checked = sfc("validate", str(bad))
    assert checked.returncode == 1 and len(checked.stdout.splitlines()) == 2, checked.stdout
    at = ["--scope", scope, "--redis", valkey_url]
    proc = sfc("job", "submit", str(bad), *at)
    assert proc.returncode == checked.returncode, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == checked.stdout + (
        f"sfc: (new): unable to accept the job order (16): {bad} does not build for scope {scope}\n"
    )
    as_json = sfc("job", "submit", str(bad), "--json", *at)
    (refused,) = json.loads(as_json.stdout)["refused"]
    (result,) = json.loads(sfc("validate", str(bad), "--json").stdout)["results"]
    assert as_json.returncode == 1 and refused["errors"] == result["errors"]
    # its message names the first and counts the others (of shape errors it counted none)
    assert refused["message"].endswith(": " + result["errors"][0]["message"] + " (and 1 more)")
    # an update to the recipe says its errors the same way (it said the first only)
    host, _ = stored
    job = host.submit(scope, linear_recipe(1), start=False).job
    updated = sfc("job", "update", job, "--recipe", str(bad), *at)
    assert updated.returncode == 1, updated.stderr
    assert updated.stderr == checked.stdout, updated.stderr
    # once, in validate's format: the status line does not repeat the first in another
    assert updated.stdout == (
        f"{job}: unable to accept the job order (16): {bad} does not build for scope {scope}\n"
    ), updated.stdout
    updated = sfc("job", "update", job, "--recipe", str(bad), "--json", *at)
    (said,) = json.loads(updated.stdout)["results"]
    assert updated.returncode == 1 and said["message"] == refused["message"], said


def test_a_recipe_that_validates_is_not_refused_by_submit_for_its_size(
    stored: tuple[Host, str], valkey_url: str, tmp_path: Path
) -> None:
    """`sfc validate` read recipes of up to 16 MiB (the core's limit), the host stores none
    over 4 MiB: a 5 MiB recipe validated, then submit refused it. The command line's limit
    is the host's: at it, validate and submit accept; one byte over, both refuse it unread,
    saying why (exit 2, as for any file that cannot be read)."""
    from host import jobs

    _, scope = stored
    at = ["--scope", scope, "--redis", valkey_url]
    recipe = linear_recipe(1)
    fits, over = tmp_path / "fits.json", tmp_path / "over.json"
    fits.write_bytes(recipe + b" " * (jobs.RECIPE_LIMIT - len(recipe)))
    over.write_bytes(recipe + b" " * (jobs.RECIPE_LIMIT + 1 - len(recipe)))
    assert sfc("validate", str(fits)).returncode == 0
    proc = sfc("job", "submit", str(fits), "--job-id", "fits", "--store-only", *at)
    assert (proc.returncode, proc.stdout) == (0, "fits\n"), proc.stderr
    for args in (["validate", str(over)], ["job", "submit", str(over), *at]):
        proc = sfc(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr == (
            f"sfc: cannot read the recipe {over}: it is larger than 4 MiB, the limit for a "
            "recipe (the host stores none larger)\n"
        ), args


@pytest.mark.parametrize("as_json", [False, True])
def test_submit_interrupted_reports_the_jobs_it_stored(
    host: Host, valkey_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """Ctrl-C during `--count`: the jobs stored so far are printed, and the command says it
    was interrupted (exit 130). The interrupt is raised as the third submit begins."""
    from host import jobs

    scope = host.scope("ctrlc")
    recipe = tmp_path / "r.json"
    recipe.write_bytes(linear_recipe(1))
    submit = jobs.submit
    calls = 0

    def interrupted_third(*args: object, **kwargs: object) -> jobs.MethodResult:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt
        return submit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jobs, "submit", interrupted_third)
    line = ["job", "submit", str(recipe), "--count", "5", "--job-id", "c", "--store-only"]
    proc = sfc(*line, "--scope", scope, "--redis", valkey_url, *(["--json"] if as_json else []))
    assert proc.returncode == 130
    assert "interrupted: 2 of 5 job(s) stored" in proc.stderr
    if as_json:
        assert json.loads(proc.stdout) == {
            "jobs": ["c-1", "c-2"],
            "interrupted": True,
            "refused": [],
        }
    else:
        assert proc.stdout == "c-1\nc-2\n"
    assert sorted(host.store().order_ids(scope)) == ["c-1", "c-2"]


def test_setup_settings_and_urls_are_refused_at_start(
    host: Host, valkey_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where serve would put .sfc
    scope = host.scope("setupbad")
    caps = tmp_path / "caps.json"
    caps.write_text('{"types": "not a list"}')
    cases = [
        (
            ["setup", "--scope", scope, "--capabilities", str(caps), "--redis", valkey_url],
            "capabilities",
        ),
        (["setup", "--scope", scope, "--max-attempts", "0", "--redis", valkey_url], "1 to 100"),
        (["setup", "--scope", "a b", "--redis", valkey_url], "scope"),
        (["serve", "--redis", valkey_url, "--sweep-interval", "soon"], "--sweep-interval='soon'"),
        (["job", "list", "--redis", valkey_url + "?foo=bar"], "unknown parameter 'foo'"),
        (["serve", "--redis", valkey_url + "?foo=bar"], "unknown parameter 'foo'"),
        (["serve", "--redis", valkey_url, "--outage-threshold", "10ms"], "must be above"),
        (["serve", "--redis", valkey_url, "--fsync", "never"], "--fsync"),
        (["job", "list", "--redis", "http://example"], "unusable server URL"),
        (["job", "list", "--redis", "redis://127.0.0.1:1/0"], "cannot reach"),
    ]
    for args, message in cases:
        proc = sfc(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    assert host.client().exists(keys.settings(scope)) == 0
    assert not list(tmp_path.rglob("server.json"))


@pytest.mark.parametrize(
    "args",
    [
        ["job", "submit", "{file}", "--scope", "{scope}", "--redis", "{url}"],
        ["job", "update", "j", "--recipe", "{file}", "--scope", "{scope}", "--redis", "{url}"],
        ["run", "{file}"],  # before it starts a server of its own
        ["equipment", "--script", "{file}", "--scope", "{scope}", "--redis", "{url}"],
        ["setup", "--capabilities", "{file}", "--scope", "{scope}", "--redis", "{url}"],
    ],
)
@pytest.mark.parametrize("file", ["missing.json", "."])
def test_a_file_that_cannot_be_read_is_named_and_nothing_is_written(
    stored: tuple[Host, str], valkey_url: str, tmp_path: Path, args: list[str], file: str
) -> None:
    host, scope = stored
    before = _written(host.client(), scope)
    path = str(tmp_path / file)
    values = {"{file}": path, "{scope}": scope, "{url}": valkey_url}
    proc = sfc(*[values.get(a, a) for a in args])
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "cannot read the " in proc.stderr and path in proc.stderr
    assert _written(host.client(), scope) == before


def test_work_pending_of_a_scope_without_a_group_is_empty(valkey_url: str) -> None:
    proc = sfc("work", "pending", "--scope", "nosuch-scope", "--redis", valkey_url)
    assert (proc.returncode, proc.stdout) == (0, "no pending entries in scope nosuch-scope\n")
    proc = sfc("work", "pending", "--scope", "nosuch-scope", "--redis", valkey_url, "--json")
    doc = json.loads(proc.stdout)
    assert doc.pop("warning").startswith("scope nosuch-scope is not registered (a typo?)")
    assert doc == {
        "scope": "nosuch-scope",
        "pending": [],
        "unread": 0,
        "workers": 0,
        "workersIdleMs": None,
        "outAtEquipment": [],
    }


def test_work_pending_tells_the_entries_no_worker_has_read(
    stored: tuple[Host, str], valkey_url: str
) -> None:
    from host.equipment import respond

    host, scope = stored
    for n in (1, 2):
        respond(host.store(), scope, "j", "a1", outcome="ok", command_id=f"j:a1#{n}")
    proc = sfc("work", "pending", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 0
    assert proc.stdout == (
        f"2 entries not read by any worker yet in scope {scope}\n"
        f"  no worker reads scope {scope} (the workers' group has no consumer): is `sfc "
        "serve` serving it? (`sfc work groups` shows the groups)\n"
        f"no pending entries in scope {scope}\n"
    )
    proc = sfc("work", "pending", "--scope", scope, "--redis", valkey_url, "--json")
    assert json.loads(proc.stdout)["unread"] == 2


def test_requeue_refuses_a_malformed_id_before_it_moves_any(
    stored: tuple[Host, str], valkey_url: str
) -> None:
    host, scope = stored
    r = host.client()
    dead_id = r.xadd(keys.dead(scope), {"v": "1", "kind": "tick", "data": "{}", "reason": "r"})
    before = _written(r, scope)
    proc = sfc(
        "work", "requeue", dead_id.decode(), "garbage", "--scope", scope, "--redis", valkey_url
    )
    assert proc.returncode == 2
    assert "not an entry id" in proc.stderr and "'garbage'" in proc.stderr
    assert _written(r, scope) == before  # the good one was not moved either


@pytest.mark.parametrize("field", ["state", "order"])
def test_a_job_whose_stored_document_cannot_be_read_is_named_not_a_traceback(
    stored: tuple[Host, str], valkey_url: str, field: str
) -> None:
    """Written by another program, or by hand: every job command says so, exit 2."""
    host, scope = stored
    host.client().hset(keys.job(scope, "j"), field, '{"format":"1.4","garbage":1}')
    for line in (["show", "j"], ["abort", "j"], ["pause", "j"]):  # the list shows it
        proc = sfc("job", *line, "--scope", scope, "--redis", valkey_url)
        assert proc.returncode == 2, (line, proc.stdout, proc.stderr)
        part = field if line[0] == "show" else "order or state"  # show knows which
        assert f"stored {part} cannot be read" in proc.stderr, (line, proc.stderr)
        way_out = (
            "unless a newer sfc wrote it, `sfc job clear j --unreadable` removes it"
            if line[0] == "show"
            else "`sfc job list` marks such a job, and `sfc job clear` with its id and "
            "--unreadable removes it"
        )
        assert way_out in proc.stderr, (line, proc.stderr)
        assert "Traceback" not in proc.stderr
    if field == "state":  # job wait reads the orders: it says why this one will not end
        proc = sfc("job", "wait", "j", "--timeout", "0.2", "--scope", scope, "--redis", valkey_url)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stdout.startswith("j: not ended: its stored order or state cannot be read ("), (
            proc.stdout
        )
    if field == "state":  # sfc respond reads the state for what is open
        for args in (["j", "a1", "ok"], ["j", "a1:hold", "held"]):
            proc = sfc("respond", *args, "--scope", scope, "--redis", valkey_url)
            assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
            assert "stored order or state cannot be read" in proc.stderr, proc.stderr
    # the way out
    proc = sfc("job", "clear", "j", "--unreadable", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "j: ok (1): removed (unreadable; sequence 0 retired)" in proc.stdout, proc.stdout
    assert host.store().job(scope, "j") is None


@pytest.mark.parametrize("field", ["state", "order"])
def test_job_list_marks_a_job_whose_stored_document_cannot_be_read(
    stored: tuple[Host, str], valkey_url: str, field: str
) -> None:
    """One such job made the whole list fail (an order), or was listed as if healthy (a
    state). It is listed as unreadable, in text and JSON, with why; the others as ever."""
    host, scope = stored
    host.submit(scope, linear_recipe(1), job_id="k", start=False)
    host.client().hset(keys.job(scope, "j"), field, '{"format":"1.4","garbage":1}')
    at = ["--scope", scope, "--redis", valkey_url]
    proc = sfc("job", "list", *at)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    j, k = proc.stdout.splitlines()
    if field == "order":  # nothing of it can be told
        assert j == "j  unreadable", j
    else:
        assert j.startswith(f"j  {'unreadable':<24} stored "), j
    assert k.startswith("k  NotAllowedToStart/Ready  stored "), k
    why = "Object contains unknown field"
    said = proc.stderr.splitlines()
    assert said[0].startswith("sfc: j: its stored order or state cannot be read ("), said
    assert why in said[0] and said[0].endswith("`sfc job clear j --unreadable` removes it"), said
    rows = check(json.loads(sfc("job", "list", "--json", *at).stdout), LIST)["jobs"]
    assert [(r["job"], why in r.get("unreadable", "")) for r in rows] == [
        ("j", True),
        ("k", False),
    ], rows
    assert (rows[0]["state"] is None) == (field == "order"), rows[0]
    # --state: an order that cannot be read matches no state, and is said to be left out
    proc = sfc("job", "list", "--state", "NotAllowedToStart", *at)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == (
        ["j", "k"] if field == "state" else ["k"]
    )
    if field == "order":
        assert "1 job(s) whose stored order cannot be read are not shown" in proc.stderr


def test_work_dead_names_the_job_of_an_entry(stored: tuple[Host, str], valkey_url: str) -> None:
    host, scope = stored
    r = host.client()
    fields = {"v": "1", "kind": "tick", "data": '{"job":"j"}', "reason": "r", "entry": "1-0"}
    r.xadd(keys.dead(scope), {**fields, "deliveries": "4"})
    proc = sfc("work", "dead", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 0 and "(was 1-0 at " in proc.stdout
    assert ", tick for job j): r" in proc.stdout, proc.stdout
    proc = sfc("work", "dead", "--scope", scope, "--redis", valkey_url, "--json")
    assert [d["job"] for d in json.loads(proc.stdout)["dead"]] == ["j"]


def test_respond_refuses_a_job_that_is_not_stored(
    stored: tuple[Host, str], valkey_url: str
) -> None:
    host, scope = stored
    before = _written(host.client(), scope)
    proc = sfc("respond", "jj", "a1", "ok", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 1
    assert "no job order 'jj'" in proc.stderr and "nothing queued" in proc.stderr
    assert _written(host.client(), scope) == before
    # a job not started has no work open: an answer now would answer the first command
    # it sends later, which the equipment never saw
    proc = sfc("respond", "j", "a1", "ok", "--scope", scope, "--redis", valkey_url)
    assert proc.returncode == 1, proc.stderr
    assert "a1: no work of it is open for job j (it has not started)" in proc.stderr
    assert _written(host.client(), scope) == before


def test_respond_action_hold_answers_the_open_hold_command(host: Host, valkey_url: str) -> None:
    from host.jobs import pause
    from tests.test_host_jobcontrol import TIGHTENING

    scope = host.scope("holdanswer")
    job = host.submit(scope, TIGHTENING, job_id="t").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: host.order_path(scope, job) == "Running", sweep=False)
    args = ["--scope", scope, "--redis", valkey_url]
    refused = sfc("respond", "t", "clamp:hold", "held", *args)
    assert refused.returncode == 1 and "no hold command is open" in refused.stderr
    assert sfc("respond", "t", "clamp", "ok", *args).returncode == 0
    # ACTION answers the work open now, by its command id and round
    rows = host.client().xrange(keys.work(scope))
    (answer,) = [e for e in (decode_work(i.decode(), f) for i, f in rows) if e.kind == "answer"]
    assert (answer.data.command_id, answer.data.round) == ("t:clamp#1", 1)
    host.run(
        [worker],
        [],
        lambda: any(
            k == "push" and d.command_id == "t:tighten#2" for _, k, d in host.equipment(scope)
        ),
        sweep=False,
    )
    assert pause(host.store(), scope, job).ok
    proc = sfc("respond", "t", "tighten:hold", "held", *args)
    assert proc.returncode == 0, proc.stderr
    host.run(
        [worker], [], lambda: any(k == "withdraw" for _, k, _ in host.equipment(scope)), sweep=False
    )
    withdrawn = [d for _, k, d in host.equipment(scope) if k == "withdraw"]
    assert [(d.command_id, d.reason) for d in withdrawn] == [("t:tighten#2", "held")]


def test_respond_action_hold_answers_a_hold_whose_time_ran_out(host: Host, valkey_url: str) -> None:
    """The engine takes a late `held` while the work is still out (the attempt ends), so
    `ACTION:hold` answers such a hold too; it refused, and only --command-id got through."""
    from host.jobs import pause
    from tests.test_host_jobcontrol import TIGHTENING

    doc = json.loads(TIGHTENING)
    (tighten,) = [a for a in doc["Actions"] if a["Name"] == "tighten"]
    tighten["Hold"]["TimeoutSeconds"] = 1
    scope = host.scope("latehold")
    job = host.submit(scope, json.dumps(doc).encode(), job_id="t").job
    worker = host.worker([scope])
    args = ["--scope", scope, "--redis", valkey_url]
    host.run([worker], [], lambda: host.order_path(scope, job) == "Running", sweep=False)
    assert sfc("respond", "t", "clamp", "ok", *args).returncode == 0
    host.run([worker], [], lambda: ("push", "t:tighten#2") in _sent(host, scope), sweep=False)
    assert pause(host.store(), scope, job).ok

    def not_held() -> bool:
        record = host.store().job(scope, job)
        assert record is not None
        return state_decoder.decode(record.state).actions["tighten"].hold == "notHeld"

    host.run([worker], [], not_held, what="the hold's time to run out")
    proc = sfc("respond", "t", "tighten:hold", "held", *args)
    assert proc.returncode == 0, proc.stderr
    host.run([worker], [], lambda: ("withdraw", "t:tighten#2") in _sent(host, scope), sweep=False)
    record = host.store().job(scope, job)
    assert record is not None
    assert state_decoder.decode(record.state).actions["tighten"].hold == "held"


def _sent(host: Host, scope: str) -> list[tuple[str, str]]:
    return [(k, d.command_id) for _, k, d in host.equipment(scope)]


def test_respond_to_a_wait_for_an_event_points_to_sfc_event(host: Host, valkey_url: str) -> None:
    """The engine rejects an answer to a pull action: the CLI said `queued answer`, exit 0."""
    from tests.test_host_jobcontrol import WAITING

    scope = host.scope("respondwait")
    job = host.submit(scope, WAITING, job_id="w").job
    worker = host.worker([scope])
    args = ["--scope", scope, "--redis", valkey_url]
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    assert sfc("respond", job, "go", "ok", *args).returncode == 0
    host.run([worker], [], lambda: any(k == "await" for _, k, _ in host.equipment(scope)))
    before = _written(host.client(), scope)
    proc = sfc("respond", job, "qa", "ok", *args)
    assert proc.returncode == 1, proc.stderr
    assert "qa waits for an event, not an answer: publish it with `sfc event" in proc.stderr
    assert "com.example.qa.v1" in proc.stderr
    assert _written(host.client(), scope) == before


def test_job_show_warns_when_no_worker_starts_a_job_allowed_to_start(host: Host) -> None:
    from cli.job import show_text
    from host import jobview, readmodel

    scope = host.scope("nostart")  # no worker reads it
    host.submit(scope, linear_recipe(1), job_id="s")
    view = jobview.view(host.store(), scope, "s", 20)
    assert view is not None
    assert view.unread == 1  # its start, which no worker reads
    shown = show_text(readmodel.detail_of(view, view.order.stored_at))
    assert (
        f"\nWork stream: 1 entry of scope {scope} not read by any worker yet (an answer for "
        "this job may be waiting there: is `sfc serve` serving the scope, and keeping up?)\n"
    ) in shown, shown
    stored = view.order.stored_at
    soon = show_text(readmodel.detail_of(view, stored + 1000))
    said = f"\n  allowed to start 1 s ago: a worker of scope {scope} starts it\n\n"
    assert said in soon and "WARNING: not started" not in soon, soon
    later = show_text(readmodel.detail_of(view, stored + 60_000))
    assert (
        f"\n  allowed to start 1 min ago: a worker of scope {scope} starts it\n"
        f"  WARNING: not started 1 min after it was allowed to: is `sfc serve` serving scope "
        f"{scope}, and keeping up?"
    ) in later, later


def test_job_show_and_work_dead_escape_what_would_steer_a_terminal(
    host: Host, valkey_url: str
) -> None:
    """An equipment's error text, an operator's comment and a dead entry's reason are shown
    as written: an escape sequence in them cleared or recoloured the operator's screen."""
    from host.equipment import respond
    from host.jobs import pause

    scope = host.scope("escapes")
    job = host.submit(scope, linear_recipe(2), job_id="e").job
    worker = host.worker([scope])
    host.run([worker], [], lambda: any(k == "push" for _, k, _ in host.equipment(scope)))
    assert pause(host.store(), scope, job, comment="shift\x1b[2J change").ok
    respond(host.store(), scope, job, "a1", error="jammed\x1b[31m\r", command_id="e:a1#1")
    host.run([worker], [], lambda: len(host.store().history(scope, job, 20)) >= 3)
    host.client().xadd(
        keys.dead(scope), {"v": "1", "kind": "tick", "reason": "r\x1b[H", "entry": "1-0"}
    )
    args = ["--scope", scope, "--redis", valkey_url]
    shown = sfc("job", "show", job, *args)
    dead = sfc("work", "dead", *args)
    for proc in (shown, dead):
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout and "\r" not in proc.stdout, proc.stdout
    assert "shift\\x1b[2J change" in shown.stdout
    assert "jammed\\x1b[31m\\r" in shown.stdout
    assert ": r\\x1b[H" in dead.stdout


def test_job_list_on_a_terminal_shows_ids_as_written_not_as_markup(
    host: Host, valkey_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminal's table took an id as rich markup: `[link=...]` made a hyperlink of
    it, and `job[/]` made the command raise."""
    import cli.job

    scope = host.scope("markup")
    ids = ["[link=https://evil.example]job-7[/link]", "job[/]", "[bold]x"]
    for job in ids:
        host.submit(scope, linear_recipe(1), job_id=job, start=False)
    monkeypatch.setattr(cli.job, "terminal", lambda: True)
    at = ["job", "list", "--scope", scope, "--redis", valkey_url]
    r = CliRunner().invoke(app, at, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for job in ids:
        assert job in r.output, r.output
    # on a narrow terminal, the columns wrap: nothing is cut off
    narrow = CliRunner().invoke(app, at, env={"COLUMNS": "60"})
    assert narrow.exit_code == 0 and "…" not in narrow.output, narrow.output
    assert "evil.example" in narrow.output and "tart/Ready" in narrow.output, narrow.output


def test_job_list_keeps_short_ids_compact_beside_a_long_one(
    host: Host, valkey_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row was padded to the longest id: one id of 128 characters pushed every
    state 130 columns right. Lines: the ids up to 40 characters set the width, a longer one
    is written whole and shifts only its own line. A terminal: the id column is at most 40
    wide, and a longer id folds within it, cut nowhere."""
    import cli.job

    scope = host.scope("longid")
    long_id = "line-7-" + "x" * 114 + "-tail"
    for job in ("a", "bb", long_id):
        host.submit(scope, linear_recipe(1), job_id=job, start=False)
    at = ["job", "list", "--scope", scope, "--redis", valkey_url]
    lines = sfc(*at).stdout.splitlines()
    assert [line.split("  ")[0] for line in lines] == ["a", "bb", long_id], lines
    assert {line.index("NotAllowedToStart") for line in lines} == {4, len(long_id) + 2}, lines
    monkeypatch.setattr(cli.job, "terminal", lambda: True)
    r = CliRunner().invoke(app, at, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    rows = r.output.splitlines()
    states = [row.index("NotAllowedToStart") for row in rows if "NotAllowedToStart" in row]
    assert len(states) == 3 and max(states) <= cli.job.ID_WIDTH + 3, r.output
    folded = "".join(row[: states[0]].strip() for row in rows[3:])
    assert folded == long_id, r.output


def test_work_pending_leaves_out_entries_committed_while_it_looked(
    host: Host, valkey_url: str
) -> None:
    """`sfc work pending` reads the pending ids, then their fields: an entry committed in
    between (acked and deleted) had no fields, and was shown as malformed. One deleted
    while still pending is shown."""
    from host.store import Store

    scope = host.scope("pendrace")
    r = host.client()
    store = host.store()
    ids = [
        store.add_work(scope, {"v": b"1", "kind": b"tick", "data": b'{"job":"j"}'})
        for _ in range(3)
    ]
    r.xgroup_create(keys.work(scope), keys.GROUP, id="0", mkstream=True)
    r.xreadgroup(keys.GROUP, "c-1", {keys.work(scope): ">"})
    r.xdel(keys.work(scope), ids[2])  # deleted while pending: still pending

    class Racing(Store):
        """Commits ids[0] right after the XPENDING, before the fields are read."""

        def client(self, s: str) -> Any:
            real = super().client(s)

            class Client:
                def __getattr__(self, name: str) -> Any:
                    return getattr(real, name)

                def pipeline(self, transaction: bool = True) -> Any:
                    r.xack(keys.work(scope), keys.GROUP, ids[0])
                    r.xdel(keys.work(scope), ids[0])
                    return real.pipeline(transaction=transaction)

            return Client()

    racing = Racing.from_url(valkey_url)
    try:
        shown = racing.pending_entries(scope)
    finally:
        racing.close()
    assert [p["id"] for p in shown] == ids[1:]
    assert shown[0]["fields"][b"kind"] == b"tick" and shown[1]["fields"] == {}


def test_a_server_gone_part_way_through_a_submit_still_says_what_was_stored(
    tmp_path: Path,
) -> None:
    """`sfc job submit --count N` printed nothing when the server went away part-way, and
    had stored some hundreds: a retry without --job-id stores them again."""
    from host.server import EmbeddedServer

    recipe = tmp_path / "r.json"
    recipe.write_bytes(linear_recipe(1))
    server = EmbeddedServer(tmp_path / "valkey").start()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from cli.main import app; import cli.commands; app()",
             "job", "submit", str(recipe), "--count", "20000", "--job-id", "k",
             "--scope", "gone", "--redis", server.url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        r = redis.Redis.from_url(server.url)
        wait_for(lambda: r.zcard(keys.orders("gone")) >= 200, timeout=60, what="200 stored")
        r.close()
        server.stop()
        out, err = proc.communicate(timeout=60)
    finally:
        server.stop()
    assert proc.returncode == 2, err
    printed = out.split()
    assert len(printed) >= 200 and printed == [f"k-{i}" for i in range(1, len(printed) + 1)]
    assert f"after {len(printed)} of 20000 job(s) were stored, above" in err, err
    server.start()
    try:
        r = redis.Redis.from_url(server.url)
        stored = r.zcard(keys.orders("gone"))
        r.close()
    finally:
        server.stop()
    assert stored in (len(printed), len(printed) + 1)  # and maybe the one in flight


def test_work_drop_removes_handled_dead_entries_and_names_what_it_removed(
    host: Host, valkey_url: str
) -> None:
    """A dead entry could only be requeued, unchanged (it died again): the dead stream, and
    its alert, could not be cleared with sfc."""
    scope = host.scope("drop")
    r = host.client()
    keep = r.xadd(
        keys.dead(scope),
        {"v": "1", "kind": "tick", "data": '{"job":"a"}', "reason": "r1", "entry": "1-0"},
    ).decode()
    # malformed: its data names a job all the same (shown, for the reader)
    gone = r.xadd(
        keys.dead(scope),
        {
            "v": "1",
            "kind": "answer",
            "data": '{"job":"b","round":0}',
            "reason": "malformed: round",
            "entry": "2-0",
        },
    ).decode()
    at = ["--scope", scope, "--redis", valkey_url]
    listed = json.loads(sfc("work", "dead", *at, "--json").stdout)["dead"]
    assert [(d["id"], d["job"]) for d in listed] == [(keep, "a"), (gone, "b")]
    bad = sfc("work", "drop", gone, "nonsense", *at)
    assert bad.returncode == 2 and "not an entry id" in bad.stderr
    assert r.xlen(keys.dead(scope)) == 2  # nothing half done
    dropped = sfc("work", "drop", gone, "9-9", *at)
    assert dropped.returncode == 1, dropped.stderr
    assert f"{gone}: dropped (answer for job b): malformed: round" in dropped.stdout
    assert f"9-9: no such dead entry in scope {scope}" in dropped.stderr
    assert [i.decode() for i, _ in r.xrange(keys.dead(scope))] == [keep]

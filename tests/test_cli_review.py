"""A plant engineer's review of `sfc dryrun`, `sfc explain`, `sfc render` and `sfc validate`.

Each test cites the contract it checks: docs/cli.md, issue 6 (the
simulation, transcript, explainer and rendering) or the README's command table. Tests marked
`xfail(strict=True)` show a problem found in review: they assert the correct behaviour and
fail today; the others pin behaviour the review found right and that nothing else pins
through the command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner, Result

from cli.main import app
from tests.wire import validator

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GREETINGS = EXAMPLES / "greetings-demo" / "recipe.json"
TIGHTENING = EXAMPLES / "tightening-hold" / "recipe.json"
REAR_AXLE = EXAMPLES / "rear-axle-fitting" / "recipe.json"
V1_0_0 = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
BOM = b"\xef\xbb\xbf"


def sfc(*args: Any) -> Result:
    """Run the CLI; no Python traceback may ever reach the user (only typer's exits)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {result.exception!r}"
    )
    assert "Traceback" not in result.output
    return result


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_bytes(doc if isinstance(doc, bytes) else msgspec.json.encode(doc))
    return path


def run_json(*args: Any) -> dict[str, Any]:
    done = sfc("dryrun", *args, "--json")
    assert done.exit_code in (0, 1), done.output
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def schema_errors(doc: dict[str, Any]) -> list[str]:
    return [e.message for e in validator("dryrun_result_v1_2").iter_errors(doc)]


LOOP: dict[str, Any] = {
    "Steps": [{"Name": "A", "Initial": True}, {"Name": "B"}, {"Name": "C"}],
    "Transitions": [
        {"Source": "A", "Target": "B", "Condition": "true"},
        {"Source": "B", "Target": "A", "Condition": "again", "Priority": 0},
        {"Source": "B", "Target": "C", "Condition": "true", "Priority": 1},
    ],
    "Actions": [
        {
            "Name": name,
            "Step": step,
            "Qualifier": "N",
            "Interaction": "push_command",
            "TypeId": f"t.{name}",
            "TimeoutSeconds": 10,
            "MaxAttempts": 2,
        }
        for name, step in (("a", "A"), ("b", "B"), ("c", "C"))
    ],
}
"""A -> B, and B back to A on `again`, else on to C: a loop with rounds."""

ENDLESS: dict[str, Any] = {
    "Steps": [{"Name": "A", "Initial": True}, {"Name": "B"}],
    "Transitions": [
        {"Source": "A", "Target": "B", "Condition": "true"},
        {"Source": "B", "Target": "A", "Condition": "true"},
    ],
    "Actions": LOOP["Actions"][:2],
}
"""A loop that never ends: every answer comes at once, so the clock never moves."""


# =========================================================================== findings


def test_an_empty_job_id_is_refused() -> None:
    """docs/formats.md "Commands": a work item needs an action and a job id; docs/formats.md's action keys are
    `{jobId}:{action}`. `--job-id ""` (e.g. `--job-id "$JOB"` with JOB unset) is an unusable
    argument and must exit 2 with a message, not run a job whose commands are `:send_bye#1`.
    """
    done = sfc("dryrun", GREETINGS, "--job-id", "")
    assert done.exit_code == 2
    assert "job id" in done.stderr


def test_a_reply_key_with_an_empty_suffix_is_refused(tmp_path: Path) -> None:
    """docs/scripts.md: replies are keyed NAME, NAME:hold or NAME:restart; "Bad scripts,
    such as unknown keys ... are refused with a clear message and exit code 2".

    `send_bye:` is none of the three. Today it is accepted and never asked, so the scripted
    error is lost and the run completes with ok (exit 0) - the engineer's scenario silently
    did not happen.
    """
    script = write(tmp_path, "s.json", {"replies": {"send_bye:": ["error:jammed"]}})
    done = sfc("dryrun", GREETINGS, "--script", script)
    assert done.exit_code == 2
    assert "send_bye:" in done.stderr
    assert str(script) in done.stderr


def test_explain_of_a_job_whose_equipment_held_the_work_does_not_promise_a_retry(
    tmp_path: Path,
) -> None:
    """Issue 6, explainer: "what it waits for (each open command or wait, with its attempt and
    deadline) ... whether the job is held ... and why" - in plain, correct statements.

    In tightening-hold/pause-resume at 200 s the controller has held the work: tighten#2 was
    withdrawn (`withdraw tighten#2 (held)`) and the release will send the restart command
    tighten#4. The explainer must not say tighten#2 is out, nor that attempt 2 follows, nor
    contradict itself with "no deadline; if no answer by then".
    """
    state = tmp_path / "state.json"
    script = EXAMPLES / "tightening-hold" / "pause-resume.script.json"
    ran = sfc(
        "dryrun", TIGHTENING, "--script", script, "--time-limit-ms", 200_000, "--state-out", state
    )
    assert ran.exit_code == 1
    out = sfc("explain", TIGHTENING, "--state", state)
    assert out.exit_code == 0
    assert "the equipment held the work; the release sends the restart command" in out.stdout
    assert "tighten#2 (com.example.tightening.run.v1) is out" not in out.stdout
    assert "attempt 2 is sent" not in out.stdout
    assert "no deadline; if no answer by then" not in out.stdout


ENDED = [
    pytest.param(
        TIGHTENING,
        EXAMPLES / "tightening-hold" / "abort-while-held.script.json",
        "cancelled",
        id="cancelled-while-held",
    ),
    pytest.param(
        REAR_AXLE,
        {"replies": {"camera_qa": ["silent"], "tighten": ["silent"]}},
        "faulted",
        id="faulted-with-a-torn-down-sequence",
    ),
]


@pytest.mark.parametrize(("recipe", "script", "status"), ENDED)
def test_render_of_an_ended_job_marks_no_work_as_open(
    tmp_path: Path, recipe: Path, script: Path | dict[str, Any], status: str
) -> None:
    """Issue 6, rendering: "With a state, it marks the active steps and the open actions."

    When a job is cancelled or faults, its open work is withdrawn (the transcript shows
    `withdraw tighten#2 (order aborted by the MES)`, `withdraw tighten#3 (teardown)`); the
    drawing of that state must not mark it `[open, attempt 1]`, and a cancelled job is no
    longer "held since".
    """
    path = script if isinstance(script, Path) else write(tmp_path, "s.json", script)
    state = tmp_path / "state.json"
    assert sfc("dryrun", recipe, "--script", path, "--state-out", state).exit_code == 1
    assert json.loads(state.read_bytes())["status"] == status
    for fmt in ("mermaid", "dot"):
        drawn = sfc("render", recipe, "--state", state, "--format", fmt)
        assert drawn.exit_code == 0
        assert "open, attempt" not in drawn.stdout
        assert "held since" not in drawn.stdout


def test_a_job_held_for_good_says_so_instead_of_a_reached_time_limit(tmp_path: Path) -> None:
    """Issue 6: the text transcript is for "a plant engineer [to] follow the job"; sfc/
    simulation.py: `time_limit` also covers "nothing more can happen, e.g. a job held for good".

    A hold that is never released leaves nothing due after 1 s. The end kind may stay
    `time_limit` (the schema has no other), but the line must say why the run stopped: the job
    is held. Today it reads "end: time limit of 604800.000s reached after 2 evaluations; the
    job had not ended", as if a week of virtual time had been simulated.
    """
    script = write(
        tmp_path, "s.json", {"default": "silent", "controls": [{"kind": "hold", "atMs": 1000}]}
    )
    done = sfc("dryrun", GREETINGS, "--script", script)
    assert done.exit_code == 1
    last = done.stdout.splitlines()[-1]
    assert last.startswith("end: ")
    assert "held" in last


def test_overlapping_outages_are_refused_or_not_counted_twice(tmp_path: Path) -> None:
    """docs/cli.md: an outage is "no ticks for `ms`, then one tick with that outage"; issue 6:
    bad scripts are refused with a clear message and exit 2.

    Two outages 5 s-35 s and 10 s-40 s overlap: the script is refused (exit 2, naming
    `$.controls[1]` and the outage it overlaps), and nothing runs.
    """
    doc = {
        "replies": {"send_bye": ["silent"]},
        "controls": [
            {"kind": "outage", "atMs": 5000, "ms": 30000},
            {"kind": "outage", "atMs": 10000, "ms": 30000},
        ],
    }
    script = write(tmp_path, "s.json", doc)
    done = sfc("dryrun", GREETINGS, "--script", script, "--json")
    assert done.exit_code == 2, done.output
    assert "$.controls[1]" in done.stderr
    assert "overlaps the outage at $.controls[0]" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("what", ["recipe", "script", "state"])
def test_a_file_with_a_utf8_bom_is_read_or_the_bom_is_named(tmp_path: Path, what: str) -> None:
    """Issue 6: malformed input is refused "with a clear message"; RFC 8259 section 8.1 lets a
    parser ignore a byte order mark. Windows tools (PowerShell 5.1 `-Encoding UTF8`, older
    Notepad) write one. The file must either be read, or the message must say that the file
    starts with a byte order mark - "invalid character (byte 0)" sends the engineer looking
    for a typo that is not there.
    """
    if what == "state":
        state = tmp_path / "state.json"
        assert sfc("dryrun", GREETINGS, "--state-out", state).exit_code == 0
        state.write_bytes(BOM + state.read_bytes())
        done = sfc("explain", GREETINGS, "--state", state)
    elif what == "script":
        script = write(tmp_path, "s.json", BOM + b'{"default": "ok"}')
        done = sfc("dryrun", GREETINGS, "--script", script)
    else:
        done = sfc("dryrun", write(tmp_path, "r.json", BOM + GREETINGS.read_bytes()))
    # the BOM is skipped (RFC 8259 8.1): the file reads as the same file without it
    assert done.exit_code == 0, done.output
    assert "byte order mark" not in done.output.lower()
    if what == "state":
        assert "The job completed" in done.stdout, done.stdout
    else:
        assert done.stdout.splitlines()[-1].startswith("end: completed"), done.stdout


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda s: s.__setitem__("extra", 1), "$.extra"),
        (
            lambda s: s["actions"]["send_bye"].__setitem__("attempt", "two"),
            "$.actions.send_bye.attempt",
        ),
    ],
    ids=["unknown-root-field", "bad-field-of-an-action"],
)
def test_a_broken_state_is_refused_naming_the_file_and_the_json_path(
    tmp_path: Path, edit: Any, path: str
) -> None:
    """Issue 6 / the review brief: every refusal names the file and the JSON path of the
    problem, as `sfc dryrun` does for scripts (`$.replies.send_bye[1]`) and capabilities
    (`$.types[0].typeId`). For a state the action's name is the key the engineer must find;
    msgspec's `[...]` hides it, and for an unknown field it gives no path at all.
    """
    state = tmp_path / "state.json"
    cancel = GREETINGS.parent / "cancel.script.json"  # send_bye's record stays
    assert sfc("dryrun", GREETINGS, "--script", cancel, "--state-out", state).exit_code == 1
    doc = json.loads(state.read_bytes())
    edit(doc)
    state.write_text(json.dumps(doc), encoding="utf-8")
    done = sfc("explain", GREETINGS, "--state", state)
    assert done.exit_code == 1
    assert str(state) in done.stderr
    assert path in done.stderr


# =========================================================================== regression


@pytest.mark.parametrize(
    ("doc", "code", "last"),
    [
        ({}, 0, "end: completed"),
        ({"replies": {"send_bye": ["error:jammed"]}}, 1, "end: faulted"),
        ({"default": "silent"}, 1, "end: faulted"),
        ({"default": "silent", "controls": [{"kind": "cancel", "atMs": 0}]}, 1, "end: cancelled"),
        ({"default": "silent", "controls": [{"kind": "hold", "atMs": 5}]}, 1, "end: time limit"),
    ],
    ids=["completed", "error", "timeout", "cancel-at-0", "held"],
)
def test_exit_codes_of_runs_follow_the_contract(
    tmp_path: Path, doc: dict[str, Any], code: int, last: str
) -> None:
    """docs/cli.md: "Exit 0 when the run completed, 1 otherwise"."""
    done = sfc("dryrun", GREETINGS, "--script", write(tmp_path, "s.json", doc))
    assert done.exit_code == code
    assert done.stdout.splitlines()[-1].startswith(last)
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (b"not json", "$"),
        ({"replies": {"nope": ["ok"]}}, "$.replies.nope"),
        ({"controls": [{"kind": "hold", "atMs": -5}]}, "$.controls[0].atMs"),
        ({"controls": [{"kind": "pause", "atMs": 5}]}, "$.controls[0].kind"),
        ({"replies": {"send_bye": ["ok@"]}}, "$.replies.send_bye[0]"),
        ({"default": "timeout"}, "$.default"),
        ({"replies": {"send_bye:restart": ["ok"]}}, '$.replies["send_bye:restart"]'),
    ],
    ids=[
        "not-json",
        "unknown-action",
        "negative-at",
        "unknown-control",
        "bad-reply",
        "reserved",
        "no-hold-logic",
    ],
)
def test_an_invalid_script_exits_2_naming_the_file_and_the_path(
    tmp_path: Path, doc: Any, path: str
) -> None:
    """docs/cli.md: exit 2 "on an invalid recipe or script"; issue 6: "On a malformed script it
    exits 2 with the path of the problem"."""
    script = write(tmp_path, "s.json", doc)
    done = sfc("dryrun", GREETINGS, "--script", script)
    assert done.exit_code == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"sfc: script {script}: {path}: ")


@pytest.mark.parametrize("command", ["dryrun", "explain", "render", "validate"])
@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_unreadable_recipe_exits_2_naming_it(tmp_path: Path, command: str, kind: str) -> None:
    """docs/cli.md (validate) and README (explain, render: "2 unreadable file"); dryrun: an
    unusable recipe is exit 2."""
    path = tmp_path / "missing.json" if kind == "missing" else tmp_path
    done = sfc(command, path)
    assert done.exit_code == 2
    assert f"cannot read the recipe {path}" in done.stderr


@pytest.mark.parametrize("command", ["explain", "render"])
def test_an_unreadable_state_exits_2_and_a_foreign_one_exits_1(
    tmp_path: Path, command: str
) -> None:
    """README: explain and render exit "1 invalid input, 2 unreadable file"."""
    assert sfc(command, GREETINGS, "--state", tmp_path).exit_code == 2
    not_json = write(tmp_path, "s.json", b"nope")
    done = sfc(command, GREETINGS, "--state", not_json)
    assert done.exit_code == 1
    assert str(not_json) in done.stderr


def test_a_negative_or_zero_limit_is_a_usage_error_and_zero_time_still_runs_time_zero() -> None:
    """docs/cli.md: virtual time starts at 0; `--time-limit-ms 0` still runs what happens at 0."""
    assert sfc("dryrun", GREETINGS, "--time-limit-ms", -1).exit_code == 2
    assert sfc("dryrun", GREETINGS, "--evaluation-limit", 0).exit_code == 2
    done = sfc("dryrun", GREETINGS, "--time-limit-ms", 0)
    assert done.exit_code == 0
    assert done.stdout.splitlines()[-1] == "end: completed at 0.000s after 2 evaluations"


def test_a_job_id_with_colons_runs() -> None:
    """docs/cli.md: command ids are `{actionKey}#{sequence}`; a job id such as `line:1` (a colon,
    as hosts write scoped ids) must not confuse the keys of the scripted equipment."""
    result = run_json(GREETINGS, "--job-id", "line:1")
    assert result["end"] == "completed"
    assert result["transcript"][0]["commands"][0]["commandId"] == "line:1:send_bye#1"


def test_a_job_id_with_a_hash_sign_is_run_or_refused_never_turned_into_a_fault() -> None:
    """docs/cli.md: `sfc dryrun` exits 0 when the run completed, 1 otherwise, 2 on an invalid
    recipe or script; issue 6: "The job id is job-1 unless --job-id gives another".

    The greetings demo answers ok at once, so the run must complete (exit 0) whatever the job
    id; a job id the engine cannot carry must be refused up front (exit 2, naming it), not
    turned into a fault the recipe never had. Found in review (every reply was "rejected:
    command id line#1:send_bye#1 was never issued" and the job faulted with timeout); fixed
    in d3857cc, which matches command ids at their last '#'. Kept as a regression test.
    """
    done = sfc("dryrun", GREETINGS, "--job-id", "line#1")
    assert done.exit_code in (0, 2)
    if done.exit_code == 0:
        assert "rejected" not in done.stdout
        assert done.stdout.splitlines()[-1].startswith("end: completed")
    else:
        assert "line#1" in done.stderr


def test_a_v1_0_0_recipe_runs_under_the_default_dataschema_and_its_state_explains(
    tmp_path: Path,
) -> None:
    """docs/cli.md: v1.0.0 is still accepted; v1.1.0 only adds Hold and Restart, so the recipe
    hash (and the states pinned to it) must not depend on the dataschema it was read with."""
    state = tmp_path / "state.json"
    assert sfc("dryrun", GREETINGS, "--dataschema", V1_0_0, "--state-out", state).exit_code == 0
    assert sfc("dryrun", GREETINGS).exit_code == 0
    assert sfc("explain", GREETINGS, "--state", state).exit_code == 0


ODD_RUNS = [
    pytest.param(
        GREETINGS,
        {"default": "silent", "controls": [{"kind": "hold", "atMs": 1000}]},
        (),
        "time_limit",
        id="held-for-good",
    ),
    pytest.param(
        GREETINGS,
        {"default": "silent", "controls": [{"kind": "cancel", "atMs": 0}]},
        (),
        "cancelled",
        id="cancel-at-0",
    ),
    pytest.param(
        GREETINGS,
        {
            "replies": {"send_bye": ["silent"]},
            "controls": [
                {"kind": "outage", "atMs": 5000, "ms": 20000},
                {"kind": "hold", "atMs": 10000},
                {"kind": "release", "atMs": 15000},
            ],
        },
        (),
        "completed",
        id="outage-over-a-hold",
    ),
    pytest.param(None, {}, ("--evaluation-limit", 50), "evaluation_limit", id="endless-loop"),
    pytest.param(
        GREETINGS, {"default": "silent"}, ("--time-limit-ms", 1000), "time_limit", id="time-limit"
    ),
]


@pytest.mark.parametrize(("recipe", "doc", "options", "end"), ODD_RUNS)
def test_json_output_of_every_kind_of_end_follows_the_schema(
    tmp_path: Path, recipe: Path | None, doc: dict[str, Any], options: tuple[Any, ...], end: str
) -> None:
    """docs/cli.md: `--json` prints the dry-run result (schemas/dryrun_result_v1_2.json), with
    `end` one of completed, faulted, cancelled, time_limit, evaluation_limit."""
    path = recipe or write(tmp_path, "r.json", ENDLESS)
    result = run_json(path, "--script", write(tmp_path, "s.json", doc), *options)
    assert schema_errors(result) == []
    assert result["end"] == end


def test_a_reply_on_the_deadline_wins_over_the_tick(tmp_path: Path) -> None:
    """docs/cli.md: "A reply that lands exactly on a deadline wins over the tick"."""
    script = write(tmp_path, "s.json", {"replies": {"send_bye": ["ok@30000"]}})
    result = run_json(GREETINGS, "--script", script)
    assert [e["event"]["kind"] for e in result["transcript"]] == ["start", "actionCompleted"]
    assert (result["end"], result["atMs"]) == ("completed", 30000)


def test_every_reply_carries_the_command_id_and_round_it_answers(tmp_path: Path) -> None:
    """Issue 6: "Every simulated reply carries the command id it answers (the causation id)
    and that command's round"; "A reply to a withdrawn attempt is still delivered"."""
    doc = {"replies": {"a": ["ok@15000", "ok@100", "ok@20000"], "b": ["again", "ok"]}}
    result = run_json(write(tmp_path, "r.json", LOOP), "--script", write(tmp_path, "s.json", doc))
    issued: dict[str, dict[str, Any]] = {}
    replies = []
    for entry in result["transcript"]:
        if entry["event"]["kind"] in ("actionCompleted", "actionFailed"):
            replies.append(entry)
        for command in entry["commands"]:
            if command["kind"] == "startWork":
                issued[command["commandId"]] = command
    assert replies
    for entry in replies:
        event = entry["event"]
        assert event["round"] == issued[event["commandId"]]["round"]
    late = [e for e in replies if e["event"]["commandId"] == "job-1:a#1"]
    assert [(e["atMs"], e["disposition"]) for e in late] == [(15000, "absorbed")]
    assert any(e["event"]["round"] == 2 for e in replies)


def test_a_hold_command_is_asked_under_its_own_key_and_answers_held_by_default(
    tmp_path: Path,
) -> None:
    """docs/scripts.md: "Hold and restart commands are asked under the keys NAME:hold and
    NAME:restart. A hold command's default reply is held" - even when the script's `default`
    is something else; the restart gets the script's default."""
    doc = {
        "default": "ok@500",
        "replies": {"tighten": ["silent"], "tighten:restart": ["ok@1000"]},
        "controls": [{"kind": "hold", "atMs": 5000}, {"kind": "release", "atMs": 8000}],
    }
    done = sfc("dryrun", TIGHTENING, "--script", write(tmp_path, "s.json", doc))
    assert done.exit_code == 0
    assert "reply tighten#3:hold: held" in done.stdout
    assert "reply tighten#4 (restart): ok" in done.stdout


def test_a_release_that_reissues_a_command_id_does_not_ask_the_equipment_again(
    tmp_path: Path,
) -> None:
    """docs/scripts.md: "The equipment is asked once per command id. A release that
    re-issues a command id already sent does not ask again." The second scripted reply must
    therefore go to attempt 2, not to the re-issued send_bye#1."""
    doc = {
        "replies": {"send_bye": ["silent", "ok@100"]},
        "controls": [{"kind": "hold", "atMs": 1000}, {"kind": "release", "atMs": 5000}],
    }
    result = run_json(GREETINGS, "--script", write(tmp_path, "s.json", doc))
    answered = [
        e["event"]["commandId"]
        for e in result["transcript"]
        if e["event"]["kind"] == "actionCompleted"
    ]
    assert answered == ["job-1:send_bye#2"]
    assert result["end"] == "completed"


def test_the_transcript_of_an_evaluation_limit_says_so(tmp_path: Path) -> None:
    """Issue 6: a run ends `evaluation_limit` when that many evaluations did not end the job."""
    done = sfc("dryrun", write(tmp_path, "r.json", ENDLESS), "--evaluation-limit", 5)
    assert done.exit_code == 1
    assert done.stdout.splitlines()[-1] == (
        "end: evaluation limit of 5 evaluations reached at 0.000s; the job had not ended"
    )

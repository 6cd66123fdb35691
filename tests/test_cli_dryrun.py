"""`sfc dryrun`, `sfc explain` and `sfc render` on the command line: exit codes and output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import Result
from typer.testing import CliRunner

from cli.main import app
from generated.dryrun_result_v1_2 import DryRunResult
from generated.state_v1_5 import SfcState
from tests.corehelpers import push, recipe, t

ROOT = Path(__file__).resolve().parent.parent
GREETINGS = ROOT / "examples" / "greetings-demo" / "recipe.json"
TIGHTENING = ROOT / "examples" / "tightening-hold" / "recipe.json"


def sfc(*args: Any) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_bytes(doc if isinstance(doc, bytes) else msgspec.json.encode(doc))
    return path


# --------------------------------------------------------------------------- exit codes


def test_a_completed_run_exits_0_and_prints_the_transcript() -> None:
    done = sfc("dryrun", GREETINGS)
    assert done.exit_code == 0
    assert done.stdout.splitlines() == [
        "     0.000s  start                               -> applied: job started in step "
        "send_greeting  => push send_bye#1 (attempt 1, deadline 30.000s)  [now: send_greeting]",
        "     0.000s  reply send_bye#1 (attempt 1): ok    -> applied: send_bye answered ok  "
        "=> job completed with outcomes ok",
        "end: completed at 0.000s after 2 evaluations",
    ]


def test_a_faulted_run_exits_1(tmp_path: Path) -> None:
    script = write(tmp_path, "s.json", {"replies": {"send_bye": ["error:printer on fire"]}})
    done = sfc("dryrun", GREETINGS, "--script", script)
    assert done.exit_code == 1
    assert done.stdout.splitlines()[-1].startswith("end: faulted at 0.000s after 2 evaluations")
    assert "printer on fire" in done.stdout


def test_a_cancelled_run_exits_1(tmp_path: Path) -> None:
    script = write(
        tmp_path, "s.json", {"default": "silent", "controls": [{"kind": "cancel", "atMs": 5}]}
    )
    done = sfc("dryrun", GREETINGS, "--script", script)
    assert done.exit_code == 1
    assert done.stdout.splitlines()[-1] == "end: cancelled at 0.005s after 2 evaluations"


def test_a_run_that_hits_the_time_limit_exits_1(tmp_path: Path) -> None:
    script = write(tmp_path, "s.json", {"default": "silent"})
    done = sfc("dryrun", GREETINGS, "--script", script, "--time-limit-ms", 1000)
    assert done.exit_code == 1
    assert done.stdout.splitlines()[-1] == (
        "end: time limit of 1 s reached after 1 evaluation; the job had not ended"
    )


def test_a_job_held_for_good_says_so_on_the_last_line(tmp_path: Path) -> None:
    doc = {"default": "silent", "controls": [{"kind": "hold", "atMs": 1000}]}
    done = sfc("dryrun", GREETINGS, "--script", write(tmp_path, "s.json", doc))
    assert done.exit_code == 1
    assert done.stdout.splitlines()[-1] == (
        "end: time limit of 7 days reached after 2 evaluations; "
        "the job is held since 1.000s and nothing more can happen"
    )


def test_the_evaluation_limit_can_be_set(tmp_path: Path) -> None:
    script = write(tmp_path, "s.json", {"default": "silent"})
    done = sfc("dryrun", GREETINGS, "--script", script, "--evaluation-limit", 2, "--json")
    assert done.exit_code == 1
    result = msgspec.json.decode(done.stdout.encode(), type=DryRunResult)
    assert (result.end, len(result.transcript)) == ("evaluation_limit", 2)


# --------------------------------------------------------------------------- invalid input


def test_a_recipe_with_build_errors_exits_2_and_prints_them(tmp_path: Path) -> None:
    doc = recipe(["s1", "s2"], actions=[push("a", "s1")], transitions=[t("s1", "nowhere")])
    done = sfc("dryrun", write(tmp_path, "r.json", doc))
    assert done.exit_code == 2
    assert done.stdout == ""
    line, last = done.stderr.splitlines()
    assert line.startswith("SFC003 $.Transitions[0].Target: ")
    assert "nowhere" in line
    assert "is not a valid recipe" in last


def test_build_errors_are_printed_as_sfc_validate_prints_them(tmp_path: Path) -> None:
    doc = recipe(["s1", "s2", "s3"], actions=[push("a", "s1")], transitions=[t("s1", "s2")])
    path = write(tmp_path, "r.json", doc)
    dry, checked = sfc("dryrun", path), sfc("validate", path)
    assert dry.exit_code == 2
    assert dry.stderr.splitlines()[:-1] == checked.stdout.splitlines()
    assert "SFC012" in checked.stdout


def test_the_dataschema_picks_the_recipe_format() -> None:
    v1_0_0 = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
    assert sfc("dryrun", GREETINGS, "--dataschema", v1_0_0).exit_code == 0
    old = sfc("dryrun", TIGHTENING, "--dataschema", v1_0_0)  # Hold and Restart are v1.1.0
    assert old.exit_code == 2
    assert old.stderr.startswith("SFC000 ")
    unknown = sfc("dryrun", GREETINGS, "--dataschema", "urn:nope")
    assert unknown.exit_code == 2
    assert "unknown dataschema urn:nope" in unknown.stderr


def test_a_document_that_is_no_recipe_exits_2(tmp_path: Path) -> None:
    done = sfc("dryrun", write(tmp_path, "r.json", b'{"Steps": 5}'))
    assert done.exit_code == 2
    assert done.stderr.startswith("SFC000 ")


def test_a_malformed_script_exits_2_with_the_path_of_the_problem(tmp_path: Path) -> None:
    script = write(tmp_path, "s.json", {"replies": {"send_bye": ["ok", "ok@@5"]}})
    done = sfc("dryrun", GREETINGS, "--script", script)
    assert done.exit_code == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"sfc: script {script}: $.replies.send_bye[1]: not a reply: 'ok@@5'; "
        "a reply is silent, error[:text][@delayMs] or outcome[@delayMs]\n"
    )


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"events": [{"atMs": -1, "typeId": "x"}]}, "$.events[0].atMs"),
        ({"replies": {}, "speed": 2}, "$.speed"),
        ({"replies": {"wave": ["ok"]}}, "$.replies.wave"),
        ({"controls": [{"kind": "hold"}]}, "$.controls[0]"),
    ],
)
def test_a_script_that_cannot_be_used_exits_2_naming_the_path(
    tmp_path: Path, doc: dict[str, Any], path: str
) -> None:
    done = sfc("dryrun", GREETINGS, "--script", write(tmp_path, "s.json", doc))
    assert done.exit_code == 2
    assert f": {path}: " in done.stderr


def test_a_script_that_is_not_json_exits_2(tmp_path: Path) -> None:
    done = sfc("dryrun", GREETINGS, "--script", write(tmp_path, "s.json", b"{replies"))
    assert done.exit_code == 2
    assert ": $: not valid JSON" in done.stderr


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    done = sfc("dryrun", tmp_path / "missing.json")
    assert done.exit_code == 2
    assert "cannot read the recipe" in done.stderr


def test_capabilities_are_checked_at_build(tmp_path: Path) -> None:
    caps = write(tmp_path, "caps.json", {"types": [{"typeId": "other.v1", "kind": "push"}]})
    done = sfc("dryrun", GREETINGS, "--capabilities", caps)
    assert done.exit_code == 2
    assert "SFC014" in done.stderr


def test_capabilities_that_declare_the_type_let_the_run_go(tmp_path: Path) -> None:
    caps = write(
        tmp_path,
        "caps.json",
        {
            "types": [
                {"typeId": "com.github.aschamberger.microdcs.greetings.bye.v1", "kind": "push"}
            ]
        },
    )
    assert sfc("dryrun", GREETINGS, "--capabilities", caps).exit_code == 0


def test_unusable_capabilities_exit_2(tmp_path: Path) -> None:
    done = sfc("dryrun", GREETINGS, "--capabilities", write(tmp_path, "c.json", {"types": 3}))
    assert done.exit_code == 2
    assert "capabilities" in done.stderr


# --------------------------------------------------------------------------- options


def test_json_output_is_the_dry_run_result() -> None:
    done = sfc("dryrun", GREETINGS, "--json", "--job-id", "order-9")
    assert done.exit_code == 0
    result = msgspec.json.decode(done.stdout.encode(), type=DryRunResult)
    assert (result.end, result.at_ms, result.fault) == ("completed", 0, None)
    assert result.transcript[0].commands[0].command_id == "order-9:send_bye#1"
    assert done.stdout.startswith('{\n  "end": "completed",\n  "atMs": 0,\n  "fault": null,')


def test_the_state_at_the_end_of_a_run_can_be_written_and_explained(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "s.json",
        {
            "replies": {"tighten": ["silent"], "tighten:hold": ["silent"]},
            "controls": [{"kind": "hold", "atMs": 2000}],
        },
    )
    state = tmp_path / "state.json"
    done = sfc(
        "dryrun", TIGHTENING, "--script", script, "--state-out", state, "--time-limit-ms", 3000
    )
    assert done.exit_code == 1
    job = msgspec.json.decode(state.read_bytes(), type=SfcState)
    assert (job.status, job.held_at) == ("running", 2000)
    explained = sfc("explain", TIGHTENING, "--state", state)
    assert explained.exit_code == 0
    assert "The job is HELD since 2.000s" in explained.stdout
    assert "hold command tighten#3:hold is out, deadline 12.000s" in explained.stdout
    assert "Next deadline: 12.000s: the hold of tighten counts as not held" in explained.stdout
    drawn = sfc("render", TIGHTENING, "--state", state, "--format", "dot")
    assert drawn.exit_code == 0
    assert 'label="job job-1: running, held since 2.000s";' in drawn.stdout


# --------------------------------------------------------------------------- explain and render


def test_explain_describes_the_recipe() -> None:
    done = sfc("explain", TIGHTENING)
    assert done.exit_code == 0
    assert "The job starts in step Clamp." in done.stdout
    assert "hold logic: on a pause" in done.stdout


def test_explain_and_render_refuse_an_invalid_recipe_with_exit_1(tmp_path: Path) -> None:
    path = write(tmp_path, "r.json", recipe(["s1"], transitions=[t("s1", "x")]))
    for command in ("explain", "render"):
        done = sfc(command, path)
        assert done.exit_code == 1
        assert done.stderr.startswith("SFC003 ")


def test_explain_refuses_a_state_of_another_recipe(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    assert sfc("dryrun", GREETINGS, "--state-out", state).exit_code == 0
    done = sfc("explain", TIGHTENING, "--state", state)
    assert done.exit_code == 1
    assert "the job runs recipe" in done.stderr


def test_explain_refuses_a_file_that_is_no_state(tmp_path: Path) -> None:
    done = sfc("explain", GREETINGS, "--state", write(tmp_path, "s.json", {"format": "9"}))
    assert done.exit_code == 1
    assert "not a job state" in done.stderr


def test_render_prints_mermaid_by_default_and_dot_on_request() -> None:
    assert sfc("render", GREETINGS).stdout.startswith("flowchart TD\n")
    assert sfc("render", GREETINGS, "--format", "dot").stdout.startswith("digraph sfc {\n")
    assert sfc("render", GREETINGS, "--format", "svg").stdout.startswith("<svg ")
    assert sfc("render", GREETINGS, "--format", "png").exit_code == 2

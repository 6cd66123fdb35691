"""`sfc validate`: output forms, exit codes 0/1/2, capabilities and dataschema options."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.validate import format_error, json_path
from sfc import RECIPE_V1_0_0, BuildError

RECIPES = Path(__file__).parent / "data" / "python_recipes"
VALID = str(RECIPES / "EngineBasic.json")
MISSING_STEP = str(RECIPES / "MsgpackRoundtrip.json")  # SFC003 at $.Transitions[0].Target
NO_INITIAL = str(RECIPES / "SelectionNoEntryTransitions.json")  # SFC001, SFC007
REAR_AXLE = str(RECIPES / "RearAxleFitting.json")

runner = CliRunner()


def sfc(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["validate", *args])
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, name: str, doc: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def test_a_valid_recipe_exits_0_with_a_short_line() -> None:
    code, out, err = sfc(VALID)
    assert code == 0
    assert out == f"ok: {VALID} (2 steps, 2 actions)\n"
    assert err == ""


def test_an_invalid_recipe_exits_1_with_one_line_per_error() -> None:
    code, out, _ = sfc(NO_INITIAL)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("SFC001 $.Steps: ")
    assert lines[1].startswith("SFC007 $.Branches[0]: ")
    assert '"sel"' in lines[1]


def test_several_files_prefix_each_error_with_its_file() -> None:
    code, out, _ = sfc(VALID, MISSING_STEP)
    assert code == 1
    assert out.splitlines() == [
        f"ok: {VALID} (2 steps, 2 actions)",
        f'{MISSING_STEP}: SFC003 $.Transitions[0].Target: transition "S1 -> S2" targets "S2", '
        "which is neither a step nor a divergence",
    ]


def test_all_valid_files_exit_0() -> None:
    code, out, _ = sfc(VALID, REAR_AXLE)
    assert code == 0
    assert len(out.splitlines()) == 2


def test_json_output_follows_the_contract() -> None:
    code, out, _ = sfc("--json", VALID, MISSING_STEP)
    assert code == 1
    assert out.startswith('{"results":[{"file":')
    assert json.loads(out) == {
        "results": [
            {"file": VALID, "ok": True, "errors": []},
            {
                "file": MISSING_STEP,
                "ok": False,
                "errors": [
                    {
                        "code": "SFC003",
                        "path": "Transitions[0].Target",
                        "message": 'transition "S1 -> S2" targets "S2", '
                        "which is neither a step nor a divergence",
                    }
                ],
            },
        ]
    }


def test_json_output_keeps_the_key_order_of_the_contract() -> None:
    _, out, _ = sfc("--json", MISSING_STEP)
    result = json.loads(out)["results"][0]
    assert list(result) == ["file", "ok", "errors"]
    assert list(result["errors"][0]) == ["code", "path", "message"]


def test_json_path_drops_only_the_leading_dollar() -> None:
    assert json_path("$.Transitions[2].Target") == "Transitions[2].Target"
    assert json_path("$") == ""
    assert format_error(BuildError("SFC001", "$.Steps", "m")) == "SFC001 $.Steps: m"


def test_a_decoder_error_of_the_root_has_an_empty_json_path(tmp_path: Path) -> None:
    path = write(tmp_path, "list.json", [1])
    code, out, _ = sfc("--json", path)
    assert code == 1
    (error,) = json.loads(out)["results"][0]["errors"]
    assert (error["code"], error["path"]) == ("SFC000", "")


def test_a_missing_recipe_file_is_a_result_naming_it(tmp_path: Path) -> None:
    """docs/cli.md: an unreadable file is a result with its error; the others are reported."""
    missing = str(tmp_path / "nope.json")
    code, out, err = sfc(VALID, missing)
    assert code == 1
    assert out == f"ok: {VALID} (2 steps, 2 actions)\n"
    assert missing in err and "cannot read" in err
    code, out, err = sfc(missing)
    assert code == 2
    assert out == ""


def test_no_recipe_at_all_exits_2() -> None:
    code, _, _ = sfc()
    assert code == 2


def test_capabilities_drive_the_station_checks(tmp_path: Path) -> None:
    station = write(
        tmp_path,
        "station.json",
        {
            "types": [
                {"typeId": "com.example.station.position.v1", "kind": "push"},
                {"typeId": "com.example.station.tighten.v1", "kind": "push"},
                {"typeId": "com.example.station.qa_result.v1", "kind": "pull"},
                {"typeId": "com.example.station.torque_result.v1", "kind": "pull"},
            ],
            "features": {"simultaneous": True},
        },
    )
    code, out, _ = sfc("--capabilities", station, REAR_AXLE)
    assert code == 1
    assert out.startswith("SFC016 $.Transitions[2].Condition: ")
    assert '"torque_ok"' in out


def test_capabilities_that_do_not_decode_exit_2_naming_the_file_and_the_path(
    tmp_path: Path,
) -> None:
    station = write(tmp_path, "station.json", {"types": [{"typeId": "t", "kind": "bogus"}]})
    code, out, err = sfc("--capabilities", station, VALID)
    assert code == 2
    assert out == ""
    assert station in err
    assert "$.types[0].kind" in err


def test_capabilities_that_are_not_json_exit_2(tmp_path: Path) -> None:
    station = tmp_path / "station.json"
    station.write_text("{", encoding="utf-8")
    code, _, err = sfc("--capabilities", str(station), VALID)
    assert code == 2
    assert str(station) in err


def test_an_unreadable_capabilities_file_exits_2(tmp_path: Path) -> None:
    code, _, err = sfc("--capabilities", str(tmp_path / "none.json"), VALID)
    assert code == 2
    assert "none.json" in err


def test_the_dataschema_option_picks_the_recipe_format(tmp_path: Path) -> None:
    doc = json.loads((RECIPES / "MinimalRecipe.json").read_text(encoding="utf-8"))
    doc["Actions"][0]["Hold"] = {"TypeId": "t.hold", "TimeoutSeconds": 5}
    doc["Actions"][0]["Restart"] = {"TypeId": "t.restart", "TimeoutSeconds": 5}
    path = write(tmp_path, "held.json", doc)
    assert sfc(path)[0] == 0  # v1.1.0 by default
    code, out, _ = sfc("--dataschema", RECIPE_V1_0_0, path)
    assert code == 1
    assert out.startswith("SFC000 $.Actions[0].Hold: ")


def test_an_unknown_dataschema_exits_2() -> None:
    code, out, err = sfc("--dataschema", "https://example.com/v9/", VALID)
    assert code == 2
    assert out == ""
    assert "https://example.com/v9/" in err


def test_the_installed_console_script_runs_validate(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("sfc")
    if not script.exists():  # pragma: no cover - a non-editable layout
        found = shutil.which("sfc")
        assert found is not None, "the sfc console script is not installed"
        script = Path(found)
    done = subprocess.run(
        [str(script), "validate", "--json", VALID, MISSING_STEP],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["ok"] for r in results] == [True, False]
    assert results[1]["errors"][0]["path"] == "Transitions[0].Target"


@pytest.mark.parametrize("name", ["EngineBasic", "SelectionBranch", "RearAxleFitting"])
def test_text_and_json_agree_on_validity(name: str) -> None:
    path = str(RECIPES / f"{name}.json")
    text_code = sfc(path)[0]
    json_code, out, _ = sfc("--json", path)
    assert text_code == json_code == 0
    assert json.loads(out)["results"][0]["ok"] is True

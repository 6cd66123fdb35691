"""What a new user hit on a fresh clone: one test (or a few) per finding, through the CLI.

Sections follow the findings of the issue (numbered as there). Each finding has tests that
failed before its fix; a few more pin what was right already and must stay so (a space in a
name, a deeply nested recipe). docs/ states every behaviour tested here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner, Result

from cli.main import app
from tests import wire

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TH = EXAMPLES / "tightening-hold" / "recipe.json"
GREETINGS = EXAMPLES / "greetings-demo" / "recipe.json"
REAR_AXLE = EXAMPLES / "rear-axle-fitting" / "recipe.json"


def sfc(*args: Any, stdin: bytes | None = None) -> Result:
    """Run the CLI; no Python traceback may ever reach the user (only typer's exits)."""
    result = CliRunner().invoke(app, [str(a) for a in args], input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {result.exception!r}"
    )
    assert "Traceback" not in result.output
    return result


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_bytes(doc if isinstance(doc, bytes) else msgspec.json.encode(doc))
    return path


def recipe_doc(path: Path = TH) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


MIB = 1024 * 1024
LIMITS = {"recipe": 4 * MIB, "state": 16 * MIB, "script": 16 * MIB, "capabilities": MIB}
"""docs/cli.md "Files": the most bytes read of each kind of file."""


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


# --------------------------------------------------------------------------- 1. deep nesting


@pytest.mark.parametrize(
    "script",
    [
        b'{"default": "ok", "events": [{"atMs": 1, "typeId": "t", "data": ' + nested(1000) + b"}]}",
        nested(1000),
        b"[" * 5000 + b"]" * 5000,
        b'{"default": "ok", "events": [{"atMs": 1, "typeId": "t", "data": ' + nested(200) + b"}]}",
    ],
    ids=["event-data-1000", "document-1000", "list-5000", "event-data-200"],
)
def test_a_deeply_nested_script_is_refused_with_exit_2(tmp_path: Path, script: bytes) -> None:
    """docs/cli.md "Files": a document nested too deeply is refused, never a traceback."""
    done = sfc("dryrun", TH, "--script", write(tmp_path, "s.json", script))
    assert done.exit_code == 2
    assert done.stdout == ""
    assert "nested" in done.stderr and "deep" in done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("command", "option", "code"),
    [
        ("explain", "--state", 1),
        ("render", "--state", 1),
        ("validate", "--capabilities", 2),
        ("dryrun", "--capabilities", 2),
    ],
)
def test_every_file_the_cli_reads_refuses_deep_nesting(
    tmp_path: Path, command: str, option: str, code: int
) -> None:
    deep = write(
        tmp_path, "deep.json", b'{"format": "1.4", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    )
    done = sfc(command, TH, option, deep)
    assert done.exit_code == code
    assert "nested too deeply" in done.stderr


def test_a_deeply_nested_recipe_is_sfc000(tmp_path: Path) -> None:
    doc = TH.read_bytes().replace(
        b'"Parameters": {', b'"Parameters": {"deep": ' + nested(5000) + b", ", 1
    )
    done = sfc("validate", write(tmp_path, "r.json", doc))
    assert done.exit_code == 1
    assert done.stdout == "SFC000 $: the document is nested too deeply\n"


# --------------------------------------------------------------------------- 2. stderr


INVALID: dict[str, Any] = {
    "Steps": [{"Name": "A", "Initial": True}],
    "Transitions": [{"Source": "A", "Target": "Nowhere", "Condition": "true"}],
    "Actions": [],
}


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["render", "{r}", "--format", "dot"], 1),
        (["render", "{r}"], 1),
        (["explain", "{r}"], 1),
        (["dryrun", "{r}"], 2),
        (["dryrun", "{r}", "--json"], 2),
    ],
)
def test_build_errors_go_to_stderr_and_stdout_stays_empty(
    tmp_path: Path, args: list[str], code: int
) -> None:
    """docs/cli.md "Output": stdout is only the command's result (a chart piped to dot)."""
    path = write(tmp_path, "bad.json", INVALID)
    done = sfc(*[a.replace("{r}", str(path)) for a in args])
    assert done.exit_code == code
    assert done.stdout == ""
    assert done.stderr.startswith('SFC003 $.Transitions[0].Target: transition "A -> Nowhere"')
    assert done.stderr.endswith(f"sfc: {path} is not a valid recipe\n")


def test_dryrun_json_prints_one_json_document_or_nothing(tmp_path: Path) -> None:
    bad = sfc("dryrun", write(tmp_path, "bad.json", INVALID), "--json")
    assert bad.stdout == ""
    good = sfc("dryrun", TH, "--json")
    assert json.loads(good.stdout)["end"] == "completed"


# --------------------------------------------------------------------------- 6. batches


def test_one_unreadable_file_hides_no_result_of_a_batch(tmp_path: Path) -> None:
    """docs/cli.md "sfc validate": every file is a result; exit 2 only when none was read."""
    malformed = write(tmp_path, "malformed.json", b'{"Steps": [')
    missing = tmp_path / "nonexistent.json"
    done = sfc("validate", malformed, TH, missing)
    assert done.exit_code == 1
    assert done.stdout.splitlines() == [
        f"{malformed}: SFC000 $: the document is not valid JSON: Input data was truncated",
        f"ok: {TH} (3 steps, 3 actions)",
    ]
    assert done.stderr == (f"sfc: cannot read the recipe {missing}: No such file or directory\n")


def test_a_batch_with_json_reports_the_unreadable_file_in_the_json(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.json"
    done = sfc("validate", TH, missing, "--json")
    assert done.exit_code == 1
    results = json.loads(done.stdout)["results"]
    assert [r["ok"] for r in results] == [True, False]
    assert results[1] == {
        "file": str(missing),
        "ok": False,
        "errors": [],
        "unreadable": f"cannot read the recipe {missing}: No such file or directory",
    }


def test_a_batch_where_no_file_can_be_read_exits_2(tmp_path: Path) -> None:
    done = sfc("validate", tmp_path / "a.json", tmp_path / "b.json", "--json")
    assert done.exit_code == 2
    assert [r["file"] for r in json.loads(done.stdout)["results"]] == [
        str(tmp_path / "a.json"),
        str(tmp_path / "b.json"),
    ]


# --------------------------------------------------------------------------- 7. schemas


def test_every_relative_ref_resolves_to_the_id_of_a_published_schema() -> None:
    """docs/formats.md "Schemas": plain URI resolution, no retrieve hook."""
    ids = {wire.schema(name)["$id"] for name in wire.SCHEMA_NAMES}
    for name in wire.SCHEMA_NAMES:
        for uri in wire.file_refs(wire.schema(name), wire.schema(name)["$id"]):
            assert uri in ids, f"{name}: {uri} is no schema's $id"


def test_a_registry_by_id_alone_validates_the_corpus() -> None:
    from referencing import Registry, Resource

    registry: Registry[Any] = Registry().with_resources(
        (doc["$id"], Resource.from_contents(doc))
        for doc in (json.loads(p.read_bytes()) for p in (ROOT / "schemas").glob("*.json"))
    )
    for name in wire.SCHEMA_NAMES:
        validator = Draft202012Validator(wire.schema(name), registry=registry)
        for path in wire.corpus(name, "valid"):
            assert validator.is_valid(json.loads(path.read_bytes())), path
        for path in wire.corpus(name, "invalid"):
            if path.name not in JSON_SCHEMA_ACCEPTS:
                assert not validator.is_valid(json.loads(path.read_bytes())), path


JSON_SCHEMA_ACCEPTS = {"sequence_float.json"}
"""Refused by msgspec only (tests/test_schemas.py, KNOWN_DISAGREEMENTS)."""


@pytest.mark.parametrize("name", wire.SCHEMA_NAMES)
def test_schema_bundle_is_self_contained_and_agrees_with_the_schema(name: str) -> None:
    """docs/cli.md "sfc schema": `--bundle` inlines what the schema refers to."""
    done = sfc("schema", name, "--bundle")
    assert done.exit_code == 0, done.output
    bundled = json.loads(done.stdout)
    refs = [ref for ref in _refs(bundled) if not ref.startswith("#")]
    assert refs == []
    validator = Draft202012Validator(bundled)  # no registry at all
    for verdict in ("valid", "invalid"):
        for path in wire.corpus(name, verdict):
            if path.name in JSON_SCHEMA_ACCEPTS:
                continue
            assert validator.is_valid(json.loads(path.read_bytes())) == (verdict == "valid"), path


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_schema_bundle_needs_a_name() -> None:
    done = sfc("schema", "--bundle")
    assert done.exit_code == 2
    assert "--bundle needs a schema NAME" in done.stderr


# --------------------------------------------------------------------------- 8. size limits


def test_an_endless_file_is_refused_after_the_limit_is_read(tmp_path: Path) -> None:
    """docs/cli.md "Files": at most the limit plus one byte is read. A pipe fed without end
    counts what was taken from it: the limit and one byte, plus what the pipe buffers."""
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    written = [0]

    def feed() -> None:
        chunk = b"\0" * 65536
        with contextlib.suppress(BrokenPipeError), fifo.open("wb") as out:
            while written[0] < 64 * 2**20:  # 16 times the limit: as good as endless here
                out.write(chunk)
                written[0] += len(chunk)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    done = sfc("validate", fifo)
    feeder.join(60)
    assert not feeder.is_alive(), "sfc stopped reading, and the feeder still waits"
    assert written[0] <= 4 * 2**20 + 1 + 2**20, written  # the limit, a byte, the buffers
    assert done.exit_code == 2
    assert "is larger than 4 MiB, the limit for a recipe" in done.stderr


def test_dev_zero_is_refused() -> None:
    """docs/cli.md "Files": /dev/zero has no end; the read stops after the limit."""
    done = sfc("validate", "/dev/zero")
    assert done.exit_code == 2
    assert done.stderr == (
        "sfc: cannot read the recipe /dev/zero: it is larger than 4 MiB, the limit for a recipe "
        "(the host stores none larger)\n"
    )


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("script", ["dryrun", TH, "--script", "{f}"]),
        ("state", ["explain", TH, "--state", "{f}"]),
        ("capabilities", ["validate", TH, "--capabilities", "{f}"]),
        ("recipe", ["explain", "{f}"]),
    ],
)
def test_every_kind_of_file_has_a_limit(tmp_path: Path, kind: str, args: list[Any]) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.write(b'{"scope": "' + b"x" * LIMITS[kind] + b'"}')
    done = sfc(*[str(big) if a == "{f}" else a for a in args])
    assert done.exit_code == 2
    assert "it is larger than" in done.stderr
    assert f"the limit for a {kind}" in done.stderr
    assert "xxxx" not in done.output


# --------------------------------------------------------------------------- 11. file errors


def test_a_truncated_recipe_says_it_is_cut_short_not_which_field(tmp_path: Path) -> None:
    """docs/cli.md "Files": a document that is no JSON says so first."""
    text = TH.read_bytes().rstrip()[:-1] + b', "Extra": 1'
    done = sfc("validate", write(tmp_path, "r.json", text))
    assert done.exit_code == 1
    assert done.stdout == "SFC000 $: the document is not valid JSON: Input data was truncated\n"


def test_truncated_capabilities_say_they_are_cut_short(tmp_path: Path) -> None:
    caps = write(tmp_path, "c.json", TH.read_bytes()[:200])
    done = sfc("validate", TH, "--capabilities", caps)
    assert done.exit_code == 2
    assert "Steps is not a field" not in done.stderr
    assert done.stderr == (
        f"sfc: the capabilities {caps} are not valid: $: "
        "the document is not valid JSON: Input data was truncated\n"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["validate", "{f}"], "SFC000 $: the document is empty"),
        (["dryrun", TH, "--script", "{f}"], "sfc: script {f}: $: the file is empty"),
        (
            ["explain", TH, "--state", "{f}"],
            "sfc: state {f}: not a job state: $: the file is empty",
        ),
        (
            ["validate", TH, "--capabilities", "{f}"],
            "sfc: the capabilities {f} are not valid: $: the file is empty",
        ),
    ],
)
def test_an_empty_file_says_it_is_empty(tmp_path: Path, args: list[Any], said: str) -> None:
    empty = write(tmp_path, "empty.json", b" \n")
    done = sfc(*[str(empty) if a == "{f}" else a for a in args])
    assert done.output.strip() == said.replace("{f}", str(empty))
    assert "truncated" not in done.output


# --------------------------------------------------------------------------- 13. help


@pytest.mark.parametrize("args", [["-h"], ["dryrun", "-h"], ["validate", "-h"]])
def test_dash_h_is_help(args: list[str]) -> None:
    done = sfc(*args)
    assert done.exit_code == 0
    assert "Usage: sfc" in done.stdout


def test_sfc_alone_shows_help_and_exits_0() -> None:
    done = sfc()
    assert done.exit_code == 0
    assert "Usage: sfc" in done.stdout and "dryrun" in done.stdout


@pytest.mark.parametrize("command", ["validate", "dryrun", "explain", "render", "schema"])
def test_help_shows_flags_as_flags_and_names_in_capitals(command: str) -> None:
    done = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0
    assert "<bool>" not in done.stdout
    usage = next(line for line in done.stdout.splitlines() if "Usage:" in line)
    args = usage.split("[OPTIONS]", 1)[1]
    assert args == args.upper(), usage


def test_dryrun_help_says_an_invalid_job_id_exits_2() -> None:
    done = CliRunner().invoke(app, ["dryrun", "--help"], env={"COLUMNS": "200"})
    assert "job id" in done.stdout.split("Exit 0", 1)[1].split("╭", 1)[0]


def test_one_action_is_not_one_actions(tmp_path: Path) -> None:
    doc = {
        "Steps": [{"Name": "Only", "Initial": True}],
        "Transitions": [],
        "Actions": [
            {
                "Name": "a",
                "Step": "Only",
                "Qualifier": "N",
                "Interaction": "push_command",
                "TypeId": "t.a",
                "TimeoutSeconds": 5,
            }
        ],
    }
    done = sfc("validate", write(tmp_path, "one.json", doc))
    assert done.stdout.endswith("(1 step, 1 action)\n")


def test_shell_completion_is_enabled() -> None:
    done = sfc("--help")
    assert "--install-completion" in done.stdout
    assert "--show-completion" in done.stdout


def test_the_readme_table_lists_every_option_of_every_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for option in ("--state-out", "--evaluation-limit", "--dataschema", "--bundle", "--decisions"):
        assert option in readme, option


# --------------------------------------------------------------------------- 16. stdin


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["validate", "-"], TH),
        (["explain", "-"], TH),
        (["render", "-"], TH),
        (["dryrun", "-"], TH),
        (["dryrun", TH, "--script", "-"], EXAMPLES / "tightening-hold/pause-resume.script.json"),
        (["validate", TH, "--capabilities", "-"], None),
    ],
)
def test_a_dash_reads_standard_input(args: list[Any], stdin: Path | None) -> None:
    """docs/cli.md "Files": `-` reads standard input for every file argument."""
    data = stdin.read_bytes() if stdin else b'{"types": []}'
    through_stdin = sfc(*args, stdin=data)
    if stdin is None:  # empty capabilities: no station declares the recipe's types
        assert through_stdin.exit_code == 1
        assert "SFC014" in through_stdin.stdout
        return
    named = sfc(*[str(stdin) if a == "-" else a for a in args])
    assert through_stdin.exit_code == named.exit_code == 0
    assert through_stdin.stdout == named.stdout.replace(str(stdin), "-")


def test_a_state_can_come_from_standard_input(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    assert sfc("dryrun", TH, "--state-out", state).exit_code == 0
    done = sfc("explain", TH, "--state", "-", stdin=state.read_bytes())
    assert done.exit_code == 0
    assert done.stdout == sfc("explain", TH, "--state", state).stdout


def test_standard_input_can_be_read_once() -> None:
    done = sfc("dryrun", "-", "--script", "-", stdin=b"{}")
    assert done.exit_code == 2
    assert "only one file argument can be -" in done.stderr


def test_the_limits_are_the_documented_ones() -> None:
    from cli.files import LIMITS as READ_LIMITS

    assert READ_LIMITS == LIMITS


# --------------------------------------------------------------------------- 12. every shape error

SHAPES = {
    "Steps": [{"Name": 5, "Initial": True}, {"Nme": "B"}],
    "Transitions": [{"Source": "A", "Target": "B", "Condition": "true", "Extra": 1}],
    "Actions": [
        {
            "Name": "a",
            "Step": "A",
            "Qualifier": "X",
            "Interaction": "push_command",
            "TypeId": "t",
            "TimeoutSeconds": "10",
        }
    ],
}


def test_every_shape_error_is_reported_with_its_path(tmp_path: Path) -> None:
    """docs/errors.md SFC000: after the decoder stopped at the first, the schema finds all."""
    done = sfc("validate", write(tmp_path, "r.json", SHAPES))
    assert done.exit_code == 1
    assert done.stdout.splitlines() == [
        "SFC000 $.Steps[0].Name: expected a string, got a whole number",
        'SFC010 $.Actions[0].Qualifier: "X" is not an allowed value',
        "SFC000 $.Actions[0].TimeoutSeconds: expected a whole number, got a string",
        "SFC000 $.Steps[1].Name: the required field Name is missing",
        "SFC000 $.Steps[1].Nme: Nme is not a field of the recipe format v1.2.0",
        "SFC000 $.Transitions[0].Extra: Extra is not a field of the recipe format v1.2.0",
    ]


def test_a_valid_recipe_is_never_checked_against_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The schema runs only after msgspec refused, so valid documents are as fast as before."""
    import cli.files

    def boom(data: bytes, dataschema: str) -> list[tuple[str, str]]:
        raise AssertionError("the schema ran on a valid recipe")

    monkeypatch.setattr(cli.files, "schema_errors", boom)
    assert sfc("validate", TH, REAR_AXLE, GREETINGS).exit_code == 0


# --------------------------------------------------------------------------- 4. names


def _th_with(**changes: Any) -> dict[str, Any]:
    doc = recipe_doc()
    for where, value in changes.items():
        field, index, key = where.split("__")
        doc[field][int(index)][key] = value
    return doc


def test_names_with_control_or_bidi_characters_are_sfc017(tmp_path: Path) -> None:
    """docs/errors.md SFC017: a newline breaks explain and labels; U+202E reverses the text."""
    doc = recipe_doc()
    doc["Steps"][2]["Name"] = "Ende|]]\n"
    doc["Transitions"][1]["Target"] = "Ende|]]\n"
    doc["Actions"][2]["Step"] = "Ende|]]\n"
    doc["Actions"][0]["Name"] = "prüfen\u202e"
    done = sfc("validate", write(tmp_path, "r.json", doc))
    assert done.exit_code == 1
    assert done.stdout.splitlines() == [
        'SFC017 $.Steps[2].Name: step name "Ende|]]\\n" contains the character U+000A '
        "(a line break); names may not contain control, line-break or bidi-control characters",
        'SFC017 $.Actions[0].Name: action name "prüfen\\u202e" contains the character U+202E '
        "(a bidi control); names may not contain control, line-break or bidi-control characters",
    ]
    assert "\u202e" not in done.output


@pytest.mark.parametrize("char", ["\t", "\x00", "\u2028", "\u2066", "\u200f", "\x85", "\u00a0"])
def test_every_kind_of_unsafe_character_is_refused_in_a_divergence_name(
    tmp_path: Path, char: str
) -> None:
    doc = recipe_doc(REAR_AXLE)
    old = doc["Branches"][0]["Name"]
    doc["Branches"][0]["Name"] = f"Fit{char}Qa"
    for t in doc["Transitions"]:
        t["Source"] = f"Fit{char}Qa" if t["Source"] == old else t["Source"]
        t["Target"] = f"Fit{char}Qa" if t["Target"] == old else t["Target"]
    done = sfc("validate", write(tmp_path, "r.json", doc))
    assert done.exit_code == 1
    assert done.stdout.startswith("SFC017 $.Branches[0].Name: divergence name ")


def test_a_space_in_a_name_is_fine(tmp_path: Path) -> None:
    doc = recipe_doc()
    doc["Steps"][0]["Name"] = doc["Actions"][0]["Step"] = doc["Transitions"][0]["Source"] = (
        "Clamp part"
    )
    assert sfc("validate", write(tmp_path, "r.json", doc)).exit_code == 0


def test_the_renderers_escape_what_a_state_brings(tmp_path: Path) -> None:
    """A job id or scope from a host is not checked by the builder: it shows escaped."""
    state = tmp_path / "state.json"
    assert sfc("dryrun", TH, "--state-out", state).exit_code == 0
    doc = json.loads(state.read_bytes())
    doc["scope"] = doc["jobId"] = "line1\u202e\nx"
    write(tmp_path, "state.json", doc)
    for args in (["explain"], ["render"], ["render", "--format", "dot"]):
        done = sfc(*args, TH, "--state", state)
        assert done.exit_code == 0, done.output
        assert "\u202e" not in done.stdout
        # DOT doubles the backslash inside its quoted strings; Graphviz shows one.
        assert "line1\\u202e\\u000ax" in done.stdout.replace("\\\\", "\\")


# --------------------------------------------------------------------------- 5. conditions


@pytest.mark.parametrize(
    ("condition", "says"),
    [
        ("", "an empty condition"),
        ("   ", "an empty condition"),
        ("o k", 'the condition "o k", with white space'),
        ("ok\n", 'the condition "ok\\n", with white space'),
        ("TRUE", 'the default condition is "true", in lower case'),
        ("True", 'the default condition is "true", in lower case'),
        ("x" * 257, "a condition of 257 characters; an outcome has at most 256"),
    ],
)
def test_a_condition_that_can_never_match_is_sfc009(
    tmp_path: Path, condition: str, says: str
) -> None:
    """docs/errors.md SFC009: the job would fault later; the builder says so now."""
    done = sfc("validate", write(tmp_path, "r.json", _th_with(Transitions__0__Condition=condition)))
    assert done.exit_code == 1
    line = done.stdout.splitlines()[0]
    assert line.startswith('SFC009 $.Transitions[0].Condition: transition "Clamp -> Tighten" has ')
    assert says in line


@pytest.mark.parametrize(
    ("type_id", "says"),
    [("", "an empty TypeId"), ("  ", "an empty TypeId"), ("com.x run.v1", "with white space")],
)
def test_a_type_id_that_can_never_match_is_sfc009(tmp_path: Path, type_id: str, says: str) -> None:
    done = sfc("validate", write(tmp_path, "r.json", _th_with(Actions__1__TypeId=type_id)))
    assert done.exit_code == 1
    assert done.stdout.startswith('SFC009 $.Actions[1].TypeId: action "tighten" has ')
    assert says in done.stdout


def test_a_hold_type_id_with_white_space_is_refused(tmp_path: Path) -> None:
    doc = recipe_doc()
    doc["Actions"][1]["Hold"]["TypeId"] = "com.example hold"
    done = sfc("validate", write(tmp_path, "r.json", doc))
    assert done.exit_code == 1
    assert done.stdout.startswith("SFC009 $.Actions[1].Hold.TypeId: the Hold command of action ")


# --------------------------------------------------------------------------- 9. one attempt


def test_explain_of_a_single_attempt_does_not_promise_a_second(tmp_path: Path) -> None:
    """docs/recipes.md "Attempts": MaxAttempts 1 sends the command once."""
    done = sfc("explain", write(tmp_path, "r.json", _th_with(Actions__0__MaxAttempts=1)))
    assert done.exit_code == 0
    line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("clamp:"))
    assert line.strip() == (
        "clamp: push command com.example.tightening.clamp.v1, 10 s, 1 attempt only; "
        "no answer in time gives outcome timeout"
    )
    assert "sent again" not in line


# --------------------------------------------------------------------------- 10. explain --state


def _state(tmp_path: Path, recipe: Path, script: str | None = None, *extra: str) -> Path:
    path = tmp_path / "state.json"
    args = ["dryrun", recipe, "--state-out", path, *extra]
    if script:
        args += ["--script", recipe.parent / f"{script}.script.json"]
    sfc(*args)
    return path


def test_explain_says_when_an_ended_job_ended(tmp_path: Path) -> None:
    state = _state(tmp_path, GREETINGS, "cancel")
    done = sfc("explain", GREETINGS, "--state", state)
    assert done.stdout.splitlines()[1] == (
        "The job was cancelled, started at 0.000s, ended at 45.000s: operator stopped the demo."
    )
    doc = json.loads(state.read_bytes())
    doc["endedAt"] = None
    write(tmp_path, "state.json", doc)
    done = sfc("explain", GREETINGS, "--state", state)
    assert "ended at a time the state does not record" in done.stdout


def test_a_held_job_reads_held_not_running(tmp_path: Path) -> None:
    state = _state(tmp_path, TH, "pause-resume", "--time-limit-ms", "100000")
    done = sfc("explain", TH, "--state", state)
    assert done.stdout.splitlines()[1].startswith(
        "The job is HELD since 10.000s (operator pause), started at 0.000s: "
    )
    assert "is running" not in done.stdout


def test_the_convergence_is_said_in_words(tmp_path: Path) -> None:
    state = _state(tmp_path, REAR_AXLE, "retry", "--time-limit-ms", "30000")
    done = sfc("explain", REAR_AXLE, "--state", state)
    assert (
        "  simultaneous divergence FitAndQa: sequences 1 and 2 taken; sequence 2 has reached "
        "the convergence, 1 is still running"
    ) in done.stdout.splitlines()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("activeSteps", ["NoSuchStep"], "active step NoSuchStep is not in the recipe"),
        (
            "divergences",
            [{"name": "NoSuchDivergence", "sequences": [0], "finished": []}],
            "divergence NoSuchDivergence is not in the recipe",
        ),
    ],
)
def test_a_state_that_does_not_fit_the_recipe_is_refused(
    tmp_path: Path, field: str, value: Any, reason: str
) -> None:
    state = _state(tmp_path, TH, "pause-resume", "--time-limit-ms", "100000")
    doc = json.loads(state.read_bytes())
    doc[field] = value
    write(tmp_path, "state.json", doc)
    for command in ("explain", "render"):
        done = sfc(command, TH, "--state", state)
        assert done.exit_code == 1
        assert done.stdout == ""
        assert done.stderr == f"sfc: state {state}: the state does not fit the recipe: {reason}\n"


def test_every_tone_of_a_line_has_a_colour() -> None:
    """On a terminal each line is coloured by its tone; a tone without one would crash."""
    from typing import get_args

    from cli.dryrun import TONES
    from sfc.transcript import Tone

    assert set(TONES) == set(get_args(Tone))


# --------------------------------------------------------------------------- 3. selectors

QA = "com.example.station.qa_result.v1"


@pytest.mark.parametrize(
    ("selector", "sent", "said"),
    [
        (
            {"subject": "line1/axle/job-1/QA"},
            "subject",
            "camera_qa expects subject line1/axle/job-1/qa, the event has line1/axle/job-1/QA",
        ),
        ({}, "subject", "camera_qa expects subject line1/axle/job-1/qa, the event has none"),
    ],
)
def test_a_selector_mismatch_names_the_wait_and_both_values(
    tmp_path: Path, selector: dict[str, str], sent: str, said: str
) -> None:
    """docs/recipes.md "Selectors": the classic stuck job says what was expected and got."""
    script = {
        "replies": {"camera_qa": ["silent"]},
        "events": [{"atMs": 9000, "typeId": QA, "outcome": "ok", **selector}],
    }
    done = sfc(
        "dryrun", REAR_AXLE, "--script", write(tmp_path, "s.json", script), "--time-limit-ms", 10000
    )
    line = next(ln for ln in done.stdout.splitlines() if ln.lstrip().startswith("9.000s"))
    assert line.endswith(f"-> absorbed: no open wait for {QA} matches the event's selector: {said}")


def test_a_correlation_id_mismatch_is_named_too(tmp_path: Path) -> None:
    script = {
        "replies": {"tighten": ["ok@1000"], "verify": ["silent"]},
        "events": [
            {
                "atMs": 10000,
                "typeId": "com.example.station.torque_result.v1",
                "outcome": "torque_ok",
                "correlationId": "job-7",
            }
        ],
    }
    done = sfc(
        "dryrun", REAR_AXLE, "--script", write(tmp_path, "s.json", script), "--time-limit-ms", 11000
    )
    assert "verify expects correlationId job-1, the event has job-7" in done.stdout


# --------------------------------------------------------------------------- 14. transcript


def test_a_release_says_the_same_command_id_is_re_issued_with_a_moved_deadline(
    tmp_path: Path,
) -> None:
    """docs/cli.md "Transcript": a release re-issues, it does not order twice."""
    script = {
        "default": "ok@500",
        "replies": {"clamp": ["ok@20000"]},
        "controls": [{"atMs": 200, "kind": "hold"}, {"atMs": 300, "kind": "release"}],
    }
    done = sfc("dryrun", TH, "--script", write(tmp_path, "s.json", script))
    assert (
        "=> push clamp#1 re-issued (same command id, attempt 1, deadline moved from 10.000s "
        "to 10.100s)"
    ) in done.stdout
    assert "push clamp#1 again" not in done.stdout


def test_an_outage_shows_where_it_starts_and_which_deadlines_it_moved() -> None:
    script = EXAMPLES / "rear-axle-fitting" / "outage.script.json"
    done = sfc("dryrun", REAR_AXLE, "--script", script)
    lines = done.stdout.splitlines()
    assert lines[3] == (
        "    40.000s  outage of 30 s begins                  -- the platform is down until "
        "70.000s: no ticks; a tick at its end moves the deadlines that are open by its length"
    )
    assert lines[4].endswith("-> applied: deadlines moved by an outage of 30 s: tighten to 90.000s")


@pytest.mark.parametrize(
    "script",
    [
        "greetings-demo/cancel",
        "rear-axle-fitting/selectors",
        "recovery-routing/clogged-nozzle",
        "tightening-hold/abort-while-held",
    ],
)
def test_the_columns_stay_aligned(script: str) -> None:
    example, name = script.split("/")
    done = sfc(
        "dryrun",
        EXAMPLES / example / "recipe.json",
        "--script",
        EXAMPLES / example / f"{name}.script.json",
    )
    arrows = {line.index("  -> ") for line in done.stdout.splitlines()[:-1]}
    assert len(arrows) == 1, done.stdout


def test_one_duration_style_throughout(tmp_path: Path) -> None:
    script = {
        "default": "ok@500",
        "replies": {"tighten": ["silent"], "tighten:hold": ["busy@100"]},
        "controls": [
            {"atMs": 10000, "kind": "hold"},
            {"atMs": 100000, "kind": "release"},
            {"atMs": 200000, "kind": "outage", "ms": 90000},
        ],
    }
    path = write(tmp_path, "s.json", script)
    done = sfc("dryrun", TH, "--script", path, "--time-limit-ms", 300500)
    assert "job released after 1 min 30 s" in done.stdout
    assert "outage of 1 min 30 s begins" in done.stdout
    assert "tick after an outage of 1 min 30 s" in done.stdout
    assert "end: time limit of 5 min 0.5 s reached" in done.stdout
    assert re.search(r"(?<![0-9.])90(\.000)? ?s\b", done.stdout) is None  # no `90 s`, `90.000s`


def test_a_cancel_without_a_reason_says_job_cancelled_once(tmp_path: Path) -> None:
    script = {"default": "silent", "controls": [{"atMs": 1000, "kind": "cancel"}]}
    done = sfc("dryrun", TH, "--script", write(tmp_path, "s.json", script))
    line = done.stdout.splitlines()[1]
    assert line.split("  -> ")[0].strip() == "1.000s  operator cancel"
    assert line.endswith("-> applied: job cancelled  => withdraw clamp#1  => job cancelled")
    assert "cancelled: cancelled" not in done.stdout


@pytest.mark.parametrize(
    ("args", "end", "reason"),
    [
        ([], "completed", "the job completed"),
        (
            ["--time-limit-ms", "5000", "--script", "{silent}"],
            "time_limit",
            "the time limit of 5 s was reached: the job had not ended",
        ),
        (
            ["--evaluation-limit", "2"],
            "evaluation_limit",
            "the evaluation limit of 2 evaluations was reached at 0.500s: the job had not ended",
        ),
    ],
)
def test_dryrun_json_says_why_the_run_ended_and_how_many_evaluations(
    tmp_path: Path, args: list[str], end: str, reason: str
) -> None:
    """schemas/dryrun_result_v1_2.json: endReason and evaluations (docs/formats.md)."""
    silent = write(tmp_path, "silent.json", {"default": "silent"})
    script = write(tmp_path, "ok.json", {"default": "ok@500"})
    args = [str(silent) if a == "{silent}" else a for a in args]
    if "--script" not in args:
        args += ["--script", str(script)]
    done = sfc("dryrun", TH, "--json", *args)
    doc = json.loads(done.stdout)
    assert (doc["end"], doc["endReason"]) == (end, reason)
    assert doc["evaluations"] == len(doc["transcript"])
    assert list(wire.validator("dryrun_result_v1_2").iter_errors(doc)) == []


# --------------------------------------------------------------------------- 15. ignored items


def test_script_items_that_were_not_evaluated_are_reported_as_ignored(tmp_path: Path) -> None:
    """docs/scripts.md: nothing in a script vanishes; each item not evaluated says why."""
    script = {
        "default": "ok@500",
        "events": [
            {"atMs": 100, "typeId": "com.nobody.v1"},
            {"atMs": 900000, "typeId": "com.example.station.qa_result.v1"},
        ],
        "controls": [
            {"atMs": 800000, "kind": "cancel", "reason": "too late"},
            {"atMs": 850000, "kind": "outage", "ms": 1000},
        ],
    }
    done = sfc("dryrun", TH, "--script", write(tmp_path, "s.json", script))
    assert done.exit_code == 0
    ignored = [line for line in done.stdout.splitlines() if "-- ignored: " in line]
    assert [line.split("  -- ")[0].split() for line in ignored] == [
        ["0.100s", "event", "com.nobody.v1:", "done"],
        ["800.000s", "operator", "cancel:", "too", "late"],
        ["850.000s", "outage", "of", "1", "s"],
        ["900.000s", "event", "com.example.station.qa_result.v1:", "done"],
    ]
    assert ignored[0].endswith(
        "-- ignored: no action of the recipe waits for events of type com.nobody.v1"
    )
    assert all(
        line.endswith("-- ignored: the job had already completed at 1.500s") for line in ignored[1:]
    )
    doc = json.loads(sfc("dryrun", TH, "--script", tmp_path / "s.json", "--json").stdout)
    assert [(n["atMs"], n["kind"], n["after"]) for n in doc["notes"]] == [
        (100, "ignored", 1),
        (800000, "ignored", 4),
        (850000, "ignored", 4),
        (900000, "ignored", 4),
    ]


def test_a_long_scope_is_cut_when_explained(tmp_path: Path) -> None:
    """docs/cli.md "Files": a state within the limit may still carry a long scope (a host
    writes what it was given); explain shows its first 200 characters and says how many more."""
    state = tmp_path / "state.json"
    assert sfc("dryrun", TH, "--state-out", state).exit_code == 0
    doc = json.loads(state.read_bytes())
    doc["scope"] = "x" * 100_000
    write(tmp_path, "state.json", doc)
    done = sfc("explain", TH, "--state", state)
    assert done.exit_code == 0
    first = done.stdout.splitlines()[0]
    assert first == f"Job job-1 (scope {'x' * 200}… (99,800 more characters)), recipe bc0956bf0b13"


def test_a_document_with_very_many_shape_errors_lists_the_first_hundred(tmp_path: Path) -> None:
    doc = recipe_doc()
    doc["Steps"] += [{"Name": i} for i in range(300)]
    done = sfc("validate", write(tmp_path, "r.json", doc))
    assert done.exit_code == 1
    lines = done.stdout.splitlines()
    # the decoder's first error, the schema's first 100 (one of them the same), and a last line
    assert len(lines) == 101
    assert lines[:3] == [
        f"SFC000 $.Steps[{i}].Name: expected a string, got a whole number" for i in (3, 4, 5)
    ]
    assert lines[-1] == "SFC000 $: more shape errors than these 100; correct them first"


# --------------------------------------------------------------------------- 37.14 --help width


def test_help_to_a_pipe_is_120_columns_wide_and_columns_is_respected() -> None:
    """`sfc serve --help | less`, or in a log: rich took 80 columns there and squeezed every
    option's help into a narrow column (issue 37, item 14). COLUMNS still decides."""
    import os
    import subprocess
    import sys

    script = Path(sys.executable).parent / "sfc"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}

    def widths(extra: dict[str, str]) -> list[int]:
        done = subprocess.run(
            [str(script), "serve", "--help"],
            capture_output=True,
            text=True,
            env={**env, **extra, "NO_COLOR": "1"},
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return [len(line) for line in done.stdout.splitlines()]

    assert max(widths({})) == 120
    assert max(widths({"COLUMNS": "90"})) == 90

"""cli/files.py: reading the files of every command, and naming where a document is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import Result
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.files import UTF8_BOM, decode_failure, visible
from cli.main import app
from sfc import codec

ROOT = Path(__file__).resolve().parent.parent
GREETINGS = ROOT / "examples" / "greetings-demo" / "recipe.json"
CAPABILITIES = msgspec.json.encode(
    {"types": [{"typeId": "com.github.aschamberger.microdcs.greetings.bye.v1", "kind": "push"}]}
)


def sfc(*args: Any) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def state_doc(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "state.json"
    # Cancelled with send_bye open: its record stays in the state (a completed job keeps none).
    cancel = GREETINGS.parent / "cancel.script.json"
    assert sfc("dryrun", GREETINGS, "--script", cancel, "--state-out", path).exit_code == 1
    doc: dict[str, Any] = msgspec.json.decode(path.read_bytes())
    return doc


def failure(doc: Any) -> tuple[str, str]:
    data = msgspec.json.encode(doc)
    with pytest.raises(msgspec.DecodeError) as caught:
        codec.state_decoder.decode(data)
    return decode_failure(data, codec.state_decoder, caught.value, "job state")


# --------------------------------------------------------------------------- byte order marks


@pytest.mark.parametrize("command", ["validate", "explain", "render", "dryrun"])
def test_every_command_reads_a_recipe_with_a_utf8_byte_order_mark(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(UTF8_BOM + GREETINGS.read_bytes())
    done = sfc(command, path)
    assert done.exit_code == 0, done.output
    assert sfc(command, GREETINGS).stdout == done.stdout.replace(str(path), str(GREETINGS))


@pytest.mark.parametrize("command", ["validate", "dryrun"])
def test_capabilities_with_a_utf8_byte_order_mark_are_read(tmp_path: Path, command: str) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(UTF8_BOM + CAPABILITIES)
    assert sfc(command, GREETINGS, "--capabilities", path).exit_code == 0


def test_the_recipe_hash_does_not_depend_on_a_byte_order_mark(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    assert sfc("dryrun", GREETINGS, "--state-out", state).exit_code == 0
    marked = tmp_path / "r.json"
    marked.write_bytes(UTF8_BOM + GREETINGS.read_bytes())
    assert sfc("explain", marked, "--state", state).exit_code == 0


@pytest.mark.parametrize("bom", [b"\xff\xfe", b"\xfe\xff"])
def test_a_utf16_file_is_refused_saying_so(tmp_path: Path, bom: bytes) -> None:
    path = tmp_path / "r.json"
    codec_name = "utf-16-le" if bom == b"\xff\xfe" else "utf-16-be"
    path.write_bytes(bom + GREETINGS.read_text(encoding="utf-8").encode(codec_name))
    done = sfc("validate", path)
    assert done.exit_code == 2
    assert f"cannot read the recipe {path}: it is UTF-16" in done.stderr


# --------------------------------------------------------------------------- JSON paths


def test_a_bad_field_of_an_action_is_named_by_the_action(tmp_path: Path) -> None:
    doc = state_doc(tmp_path)
    doc["actions"]["send_bye"]["round"] = 0
    assert failure(doc) == ("$.actions.send_bye.round", "expected `int` >= 1")


def test_the_action_named_is_the_one_that_is_wrong(tmp_path: Path) -> None:
    doc = state_doc(tmp_path)
    good = doc["actions"]["send_bye"]
    doc["actions"] = {"first": good, "odd name": {**good, "extra": 1}, "last": good}
    assert failure(doc) == ('$.actions["odd name"].extra', "extra is not a field of the job state")


def test_an_unknown_top_level_field_has_a_path(tmp_path: Path) -> None:
    doc = state_doc(tmp_path)
    doc["extra"] = 1
    assert failure(doc) == ("$.extra", "extra is not a field of the job state")


def test_a_path_without_keys_of_data_is_msgspecs(tmp_path: Path) -> None:
    doc = state_doc(tmp_path)
    doc["activeSteps"][0] = 7
    assert failure(doc) == ("$.activeSteps[0]", "expected a string, got a whole number")


def test_malformed_json_is_at_the_root() -> None:
    with pytest.raises(msgspec.DecodeError) as caught:
        codec.state_decoder.decode(b"{")
    where, message = decode_failure(b"{", codec.state_decoder, caught.value, "job state")
    assert where == "$"
    assert message.startswith("the document is not valid JSON")


@given(st.text())
def test_visible_text_prints_as_itself_and_keeps_its_lines(text: str) -> None:
    shown = visible(text)
    assert all(c.isprintable() or c == "\n" for c in shown)
    assert shown.count("\n") == text.count("\n")
    if all(c.isprintable() or c == "\n" for c in text):
        assert shown == text


def test_visible_text_escapes_what_would_steer_a_terminal() -> None:
    said = "jammed\x1b[2J\x1b[31m red\r over\u202eevil\u200b\n"
    assert visible(said) == "jammed\\x1b[2J\\x1b[31m red\\r over\\u202eevil\\u200b\n"

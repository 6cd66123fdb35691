"""Every example recipe and script under examples/: snapshots of its transcripts, and the CLI.

The snapshots are the exact bytes (syrupy's single-file extension, not its JSON one, which
sorts keys), so they also pin the wire order of the dry-run result. After a deliberate
change, review the transcripts and run `pytest tests/test_examples.py --snapshot-update`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from generated.dryrun_result_v1_2 import DryRunResult
from generated.simulation_script_v1_0 import SimulationScript
from sfc.builder import RECIPE_V1_1_0, RECIPE_V1_2_0, build
from sfc.graph import Graph
from sfc.simulation import Simulation, load_script
from sfc.transcript import to_json, to_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SFC = Path(sys.executable).with_name("sfc")
RECIPES = sorted(EXAMPLES.glob("*/recipe.json"))
SCRIPTS = sorted(EXAMPLES.glob("*/*.script.json"))

EXPECTED_END = {
    "bottling-line/pause-resume": "completed",
    "bottling-line/qa-loop": "completed",
    "bottling-line/vision-timeout": "faulted",
    "greetings-demo/cancel": "cancelled",
    "greetings-demo/happy": "completed",
    "greetings-demo/retry": "completed",
    "press-fit-line/happy": "completed",
    "press-fit-line/outage": "completed",
    "press-fit-line/reject": "completed",
    "press-fit-line/slow-press": "completed",
    "rear-axle-fitting/outage": "completed",
    "rear-axle-fitting/qa-reject": "completed",
    "rear-axle-fitting/retry": "completed",
    "rear-axle-fitting/selectors": "completed",
    "recovery-routing/clogged-nozzle": "completed",
    "recovery-routing/operator-absent": "faulted",
    "recovery-routing/operator-retry": "completed",
    "tightening-hold/abort-while-held": "cancelled",
    "tightening-hold/hold-refused": "completed",
    "tightening-hold/pause-resume": "completed",
}
"""What each script shows ends the job this way; a new script must be added here."""

DATASCHEMA = {"press-fit-line": RECIPE_V1_2_0}
"""Examples in a recipe format other than v1.1.0 (the CLI's --dataschema)."""


def dataschema_of(example: str) -> str:
    return DATASCHEMA.get(example, RECIPE_V1_1_0)


def _schema_name(example: str) -> str:
    return "recipe_" + dataschema_of(example).rstrip("/").rsplit("/", 1)[-1].replace(".", "_")


def _schema_file(uri: str) -> Resource[Any]:
    # Schemas refer to each other by file name, relative to their $id.
    path = ROOT / "schemas" / uri.rsplit("/", 1)[-1]
    return Resource.from_contents(
        msgspec.json.decode(path.read_bytes()), default_specification=DRAFT202012
    )


def jsonschema_error(name: str, data: bytes) -> str | None:
    """None when the document is valid under schemas/NAME.json, else the first error."""
    schema = msgspec.json.decode((ROOT / "schemas" / f"{name}.json").read_bytes())
    registry: Registry[Any] = Registry(retrieve=_schema_file)
    validator = Draft202012Validator(schema, registry=registry)
    for error in validator.iter_errors(msgspec.json.decode(data)):
        return f"{error.json_path}: {error.message}"
    return None


class TextSnapshot(SingleFileSnapshotExtension):
    file_extension = "txt"


class JsonBytesSnapshot(SingleFileSnapshotExtension):
    file_extension = "json"


def name_of(script: Path) -> str:
    return f"{script.parent.name}/{script.name.removesuffix('.script.json')}"


def graph_of(recipe: Path) -> Graph:
    built = build(recipe.read_bytes(), dataschema=dataschema_of(recipe.parent.name))
    assert built.graph is not None, built.errors
    return built.graph


def run(script: Path) -> DryRunResult:
    graph = graph_of(script.parent / "recipe.json")
    return Simulation(graph, load_script(script.read_bytes(), graph)).run()


def sfc(*args: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SFC), *map(str, args)], cwd=ROOT, capture_output=True, timeout=60, check=False
    )


script_param = pytest.mark.parametrize(
    "script", SCRIPTS, ids=lambda p: name_of(p).replace("/", ".")
)


def test_there_are_at_least_five_examples_each_with_scripts() -> None:
    assert len(RECIPES) >= 5
    for recipe in RECIPES:
        assert list(recipe.parent.glob("*.script.json")), f"{recipe.parent.name} has no script"
    assert (EXAMPLES / "README.md").is_file()


def test_every_script_has_an_expected_end() -> None:
    assert sorted(name_of(s) for s in SCRIPTS) == sorted(EXPECTED_END)


def test_the_greetings_demo_is_the_python_projects() -> None:
    # tests/data/python_recipes/ holds the Python project's recipes, copied once
    copy = ROOT / "tests" / "data" / "python_recipes" / "GreetingsDemo.json"
    assert (EXAMPLES / "greetings-demo" / "recipe.json").read_bytes() == copy.read_bytes()


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.parent.name)
def test_every_recipe_is_valid_in_its_format(recipe: Path) -> None:
    assert jsonschema_error(_schema_name(recipe.parent.name), recipe.read_bytes()) is None
    graph_of(recipe)


@script_param
def test_every_script_follows_the_schema(script: Path) -> None:
    assert jsonschema_error("simulation_script_v1_0", script.read_bytes()) is None
    assert isinstance(
        msgspec.json.decode(script.read_bytes(), type=SimulationScript), SimulationScript
    )


@script_param
def test_the_run_ends_as_the_script_means(script: Path) -> None:
    assert run(script).end == EXPECTED_END[name_of(script)]


@script_param
def test_text_transcript(script: Path, snapshot: SnapshotAssertion) -> None:
    assert to_text(run(script)).encode() == snapshot(extension_class=TextSnapshot)


@script_param
def test_json_transcript(script: Path, snapshot: SnapshotAssertion) -> None:
    data = to_json(run(script))
    assert jsonschema_error("dryrun_result_v1_2", data) is None
    assert data == snapshot(extension_class=JsonBytesSnapshot)


@script_param
def test_every_example_runs_through_the_cli(script: Path) -> None:
    example = script.parent.name
    options = ["--dataschema", DATASCHEMA[example]] if example in DATASCHEMA else []
    done = sfc("dryrun", script.parent / "recipe.json", "--script", script, *options)
    result = run(script)
    assert done.returncode == (0 if result.end == "completed" else 1), done.stderr
    assert done.stdout.decode() == to_text(result)
    assert done.stderr == b""


def test_the_cli_prints_the_json_transcript() -> None:
    script = EXAMPLES / "tightening-hold" / "pause-resume.script.json"
    done = sfc("dryrun", script.parent / "recipe.json", "--script", script, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout == to_json(run(script))

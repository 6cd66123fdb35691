"""The README stays true: its transcript, its chart and its code are what the project does."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    """The fenced code blocks of the README whose info string is `lang`."""
    blocks: list[str] = []
    body: list[str] | None = None  # inside a block: its lines so far
    keep = False
    for line in README.splitlines(keepends=True):
        if not line.startswith("```"):
            if body is not None:
                body.append(line)
        elif body is None:
            body, keep = [], line[3:].strip() == lang
        else:
            if keep:
                blocks.append("".join(body))
            body = None
    return blocks


def _main_job_args() -> list[str]:
    line = next(ln for ln in README.splitlines() if "uv run sfc dryrun" in ln)
    return line.split("uv run sfc ", 1)[1].split()


def test_the_readme_transcript_is_what_the_main_job_prints():
    args = _main_job_args()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    shown = next(b for b in _blocks("") if b.lstrip().startswith("0.000s"))
    assert result.output == shown


def test_the_readme_chart_is_what_render_prints():
    result = CliRunner().invoke(app, ["render", "examples/rear-axle-fitting/recipe.json"])
    assert result.exit_code == 0, result.output
    assert _blocks("mermaid") == [result.output]


def test_the_readme_code_runs():
    (code,) = _blocks("python")
    recipe_json = (ROOT / "examples/tightening-hold/recipe.json").read_bytes()
    namespace = {"recipe_json": recipe_json, "now_ms": 0}
    exec(compile(code, "README.md", "exec"), namespace)
    step = namespace["step"]
    assert step.disposition == "applied"  # type: ignore[attr-defined]
    assert [d.decision for d in step.decisions] == [  # type: ignore[attr-defined]
        "clamp answered ok",
        "Clamp -> Tighten fired on true (outcomes {ok})",
    ]
    assert namespace["state"] == step.state  # type: ignore[attr-defined]


def test_the_readme_recipe_and_script_are_the_main_jobs_files():
    args = _main_job_args()
    files = [args[1], args[args.index("--script") + 1]]
    shown = [json.loads(b) for b in _blocks("json")]
    assert shown == [json.loads((ROOT / f).read_text(encoding="utf-8")) for f in files]

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


def test_the_readme_names_the_main_jobs_files_and_shows_only_them():
    args = _main_job_args()
    files = [args[1], args[args.index("--script") + 1]]
    assert all((ROOT / f).is_file() for f in files)
    assert Path(files[1]).name in README  # the text names the script it describes
    kept = [json.loads((ROOT / f).read_text(encoding="utf-8")) for f in files]
    assert all(json.loads(b) in kept for b in _blocks("json"))


def test_the_readme_is_short_and_its_figures_moved_to_performance_md():
    """A newcomer's page: at most 250 lines, the two commands as they were; the scaling
    figures, their method and history are in docs/performance.md (issue 37, item 14)."""
    assert len(README.splitlines()) <= 250
    for command in (
        "python3 -m pip install uv && python3 -m uv run sfc run "
        "examples/rear-axle-fitting/recipe.json --jobs 100",
        "python3 -m pip install uv && python3 -m uv run nox -s tests",
    ):
        assert f"\n{command}\n" in README, command
    performance = (ROOT / "docs/performance.md").read_text(encoding="utf-8")
    for figure in ("15,573-16,067 events/s", "458 µs", "9,413-9,592", "13,318-14,838"):
        assert figure in performance and figure not in README, figure
    assert "source .venv/bin/activate" in README and "uv tool install" in README
    assert ".sfc/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()

"""Lint as part of the suite: ruff (lint and format) on everything, mypy --strict on sfc/, host/ and cli/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "args",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_lint(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_property_test_has_a_deadline() -> None:
    """Every Hypothesis test runs with no deadline (tests/conftest.py's profile): a slow
    example on a loaded machine is not a failure; speed is measured under bench/."""
    import ast

    from hypothesis import settings

    assert settings.default.deadline is None
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "settings":
                for kw in node.keywords:
                    if kw.arg == "deadline":
                        assert isinstance(kw.value, ast.Constant) and kw.value.value is None, (
                            f"{path.name}:{node.lineno} sets a deadline"
                        )

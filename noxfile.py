"""Developer sessions: `uv run nox -s NAME`.

They run in the project's uv environment (nox creates no virtualenv of its own), so the
tools are the locked ones from uv.lock.
"""

from __future__ import annotations

import os
import sys

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["codegen_check", "lint", "tests"]

PY = sys.executable


@nox.session
def codegen(session: nox.Session) -> None:
    """Regenerate generated/ from schemas/."""
    session.run(PY, "-m", "codegen.generate", external=True)


@nox.session
def codegen_check(session: nox.Session) -> None:
    """Fail, naming the stale file, when generated/ differs from what schemas/ gives."""
    session.run(PY, "-m", "codegen.generate", "--check", external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) and mypy --strict on the core, the host and the CLI."""
    session.run(PY, "-m", "ruff", "check", ".", external=True)
    session.run(PY, "-m", "ruff", "format", "--check", ".", external=True)
    session.run(PY, "-m", "mypy", external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite; it includes the codegen staleness check. It runs on every
    core (pytest-xdist); `nox -s tests -- -n 0` runs it in one process."""
    session.run(
        PY, "-m", "pytest", "-n", "auto", "--dist", "worksteal", *session.posargs, external=True
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks under bench/: they print medians and ratios and assert nothing."""
    uv = os.environ.get("UV", "uv")  # `uv run` tells its children where uv is
    session.run(
        uv, "run", "--group", "bench", "python", "-m", "bench", *session.posargs, external=True
    )

"""Developer sessions. Every session runs inside the project's uv environment."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["codegen_check", "lint", "tests"]

UV_RUN = ("uv", "run", "--frozen")


@nox.session
def codegen(session: nox.Session) -> None:
    """Regenerate generated/ from schemas/."""
    session.run(*UV_RUN, "python", "-m", "codegen.generate", external=True)


@nox.session
def codegen_check(session: nox.Session) -> None:
    """Fail, naming the stale file, when generated/ differs from what schemas/ gives."""
    session.run(*UV_RUN, "python", "-m", "codegen.generate", "--check", external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) and mypy --strict on the core and the host."""
    session.run(*UV_RUN, "ruff", "check", ".", external=True)
    session.run(*UV_RUN, "ruff", "format", "--check", ".", external=True)
    session.run(*UV_RUN, "mypy", external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (it includes the codegen staleness check)."""
    session.run(*UV_RUN, "pytest", *session.posargs, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks under bench/ (not tests: they print figures, they assert nothing)."""
    session.run(*UV_RUN, "--group", "bench", "python", "-m", "bench", *session.posargs, external=True)

"""The import rules of the design card's layout table.

- sfc/ (the pure core): the stdlib, msgspec and generated only; and no I/O, no clock, no
  randomness, no threads.
- generated/: msgspec and the stdlib only, and itself (relative imports).
- host/: sfc, generated, redis and the stdlib.

Every .py file is parsed, never imported, and every import statement counts, also those in
functions and under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import wire

STDLIB = frozenset(sys.stdlib_module_names)

ALLOWED = {
    "sfc": STDLIB | {"msgspec", "generated", "sfc"},
    "generated": STDLIB | {"msgspec", "generated"},
    "host": STDLIB | {"sfc", "generated", "redis", "host"},
}

# The stdlib modules a pure core has no use for: I/O, clocks, randomness, threads, processes.
IMPURE = frozenset(
    {
        "asyncio",
        "concurrent",
        "multiprocessing",
        "os",
        "pathlib",
        "random",
        "secrets",
        "selectors",
        "shutil",
        "socket",
        "subprocess",
        "tempfile",
        "threading",
        "time",
        "urllib",
        "uuid",
    }
)
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "time", "monotonic", "perf_counter"})


def _files(package: str) -> list[Path]:
    return sorted((wire.ROOT / package).rglob("*.py"))


def _imports(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """(line, top-level module) for every import in the file; relative ones name the package."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 0:
                yield node.lineno, package
            else:
                assert node.module is not None
                yield node.lineno, node.module.split(".")[0]


def _rel(path: Path) -> str:
    return path.relative_to(wire.ROOT).as_posix()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_follow_the_layout(package: str) -> None:
    files = _files(package)
    assert files, f"{package}/ has no Python files"
    offences = [
        f"{_rel(path)}:{line} imports {module!r}"
        for path in files
        for line, module in _imports(path, package)
        if module not in ALLOWED[package]
    ]
    assert not offences, f"{package}/ may import only its allowed modules:\n" + "\n".join(offences)


def test_core_does_no_io_reads_no_clock_and_draws_no_random_numbers() -> None:
    offences = [
        f"{_rel(path)}:{line} imports {module!r}"
        for path in _files("sfc")
        for line, module in _imports(path, "sfc")
        if module in IMPURE
    ]
    for path in _files("sfc"):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CLOCK_CALLS or name in {"open", "input", "print"}:
                offences.append(f"{_rel(path)}:{node.lineno} calls {name}()")
    assert not offences, "the core is pure:\n" + "\n".join(offences)


def test_the_rules_catch_an_offending_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import redis\nfrom . import sibling\nfrom os.path import join\n")
    found = [module for _, module in _imports(bad, "sfc")]
    assert found == ["redis", "sfc", "os"]
    assert [m for m in found if m not in ALLOWED["sfc"]] == ["redis"]
    assert [m for m in found if m in IMPURE] == ["os"]

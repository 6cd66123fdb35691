"""docs/ stays true: every example it shows runs, and prints what the page shows.

A page's fenced blocks are read in order. A block ```` ```json file=NAME ```` is written to
NAME in a scratch directory (where `examples/` is the repository's). A ```` ```console ````
block holds commands, each on a line starting with `$ `, followed by exactly what it prints
(stdout and stderr as a terminal shows them). `$ sfc ...` runs the command line in-process,
with `< FILE` as its standard input; `$ python3 -c ... > FILE` makes a file. docs/host.md
belongs to the host and is tested with it, and so do docs/metrics.md
(tests/test_metrics.py, tests/test_mcp.py) and docs/api.md and docs/console.md
(tests/test_console_docs.py, against a real console). docs/performance.md holds measured
figures (`nox -s bench` makes them) and runs no example.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(
    p
    for p in DOCS.glob("*.md")
    if p.name not in ("host.md", "metrics.md", "api.md", "console.md", "performance.md")
)
FENCE = re.compile(r"^```(?P<info>.*)$")


@dataclass
class Block:
    info: str
    lines: list[str] = field(default_factory=list)
    line: int = 0

    @property
    def text(self) -> str:
        return "".join(self.lines)


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    current: Block | None = None
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(keepends=True), 1):
        fence = FENCE.match(line.rstrip("\n"))
        if fence and current is None:
            current = Block(fence["info"].strip(), line=n)
        elif fence and current is not None and not fence["info"].strip():
            found.append(current)
            current = None
        elif current is not None:
            current.lines.append(line)
    assert current is None, f"{page.name}: a block is not closed"
    return found


def commands(block: Block) -> list[tuple[str, str]]:
    """(command, the output shown for it) of a console block."""
    out: list[tuple[str, str]] = []
    for line in block.lines:
        if line.startswith("$ "):
            out.append((line[2:].rstrip("\n"), ""))
        else:
            assert out, f"line {block.line}: output before any command"
            out[-1] = (out[-1][0], out[-1][1] + line)
    return out


def run(command: str, where: Path) -> str:
    if command.startswith("python3 "):
        done = subprocess.run(
            command.replace("python3", shlex.quote(sys.executable), 1),
            shell=True,
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout + done.stderr
    words = shlex.split(command)
    assert words[0] == "sfc", f"only sfc and python3 commands run here: {command}"
    stdin = None
    if "<" in words:
        i = words.index("<")
        stdin = (where / words[i + 1]).read_bytes()
        words = words[:i] + words[i + 2 :]
    result = CliRunner().invoke(app, words[1:], input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.output


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_example_of_the_page_prints_what_it_shows(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    ran = 0
    for block in blocks(page):
        words = block.info.split()
        if words[:1] == ["json"] and len(words) > 1 and words[1].startswith("file="):
            (tmp_path / words[1].removeprefix("file=")).write_text(block.text, encoding="utf-8")
        elif words[:1] == ["console"]:
            for command, shown in commands(block):
                assert run(command, tmp_path) == shown, f"{page.name}:{block.line}: $ {command}"
                ran += 1
    assert ran or page.name == "README.md", f"{page.name} shows no example"


def test_every_page_is_linked_from_the_readme_and_the_docs_index() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    assert "docs/README.md" in readme
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in index, page.name


def test_every_build_error_has_a_section_with_an_example_and_a_fix() -> None:
    text = (DOCS / "errors.md").read_text(encoding="utf-8")
    for n in range(27):
        code = f"SFC{n:03d}"
        section = text.split(f"\n## {code}: ", 1)[1].split("\n## ", 1)[0]
        assert f"\n{code} " in section, f"{code}: no example prints it"
        assert "\nFix: " in section, f"{code}: no fix"


def test_no_source_or_test_cites_a_file_outside_the_repository() -> None:
    """Docstrings and tests cite docs/, never DESIGN.md, HOST.md or ../shared/spec (files that
    are not in the repository)."""
    offences = []
    for folder in ("sfc", "host", "cli", "tests", "codegen", "bench", "examples", "docs"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".md", ".lua") or path.name == "test_docs.py":
                continue
            text = path.read_text(encoding="utf-8")
            for word in ("DESIGN.md", "HOST.md", "shared/", "spec/0"):
                if word in text:
                    offences.append(f"{path.relative_to(ROOT)}: {word}")
    assert not offences, "\n".join(offences)


def test_the_docs_name_no_option_the_cli_lacks() -> None:
    """Every `--option` the CLI pages name is one of a command's options."""
    known: set[str] = set()
    for command in ("validate", "dryrun", "explain", "render", "schema"):
        help_text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout
        known |= set(re.findall(r"--[a-z][a-z-]+", help_text))
    shown = set(re.findall(r"`[^`]*?(--[a-z][a-z-]+)", (DOCS / "cli.md").read_text()))
    assert shown - known - {"--install-completion", "--show-completion", "--version"} == set()

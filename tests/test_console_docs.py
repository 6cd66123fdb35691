"""docs/api.md and docs/console.md stay true: every ```console block runs in a shell
against a real console (`$SFC`, `$TOKEN`) and prints what the page shows; `...` in a shown
output stands for anything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.consolekit import TOKEN, Console, console
from tests.test_docs import DOCS, ROOT, blocks, commands

PAGES = [DOCS / "api.md", DOCS / "console.md"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    from host.server import EmbeddedServer

    server = EmbeddedServer(tmp_path_factory.mktemp("docs-valkey")).start()
    try:
        with console(server.url) as c:
            yield c
    finally:
        server.stop()


def shown(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")), re.DOTALL)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_example_prints_what_the_page_shows(
    page: Path, served: Console, tmp_path: Path
) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {
        **os.environ,
        "SFC": f"http://{served.netloc}",
        "TOKEN": TOKEN,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
    }
    ran = 0
    for block in blocks(page):
        if block.info != "console":
            continue
        for command, expected in commands(block):
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            out = done.stdout + ("\n" if done.stdout and not done.stdout.endswith("\n") else "")
            assert shown(expected).fullmatch(out), (
                f"{page.name}:{block.line}: $ {command}\n--- shown\n{expected}--- printed\n"
                f"{out}--- stderr\n{done.stderr}"
            )
            ran += 1
    assert ran

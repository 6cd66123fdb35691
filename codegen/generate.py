"""Regenerate generated/ from schemas/ with datamodel-code-generator, or check that it is current.

    python -m codegen.generate           # rewrite generated/
    python -m codegen.generate --check   # exit 1, naming each stale file, when generated/ is not current

The generator's settings live in pyproject.toml ([tool.datamodel-codegen]), so a bare
`datamodel-codegen` and this script produce the same files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "generated"


def _datamodel_codegen() -> str:
    exe = Path(sys.executable).with_name("datamodel-codegen")
    if exe.exists():
        return str(exe)
    found = shutil.which("datamodel-codegen")
    if found is None:
        raise SystemExit("datamodel-codegen is not installed; run `uv sync` first")
    return found


def run(check: bool) -> int:
    # Without RUFF_NO_CACHE, ruff's cache makes --check report drift that is not there.
    env = {**os.environ, "RUFF_NO_CACHE": "true"}
    args = [_datamodel_codegen(), *(["--check"] if check else [])]
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode == 0:
        print("generated/ is current" if check else "generated/ regenerated from schemas/")
        return 0
    output = proc.stdout + proc.stderr
    if check:
        stale = sorted(set(re.findall(r"^--- (\S+)", output, flags=re.MULTILINE)))
        for name in stale:
            print(f"STALE generated/{name}: it differs from what schemas/ gives")
        print(output)
        print("generated/ is stale: run `nox -s codegen` and commit the result")
    else:
        print(output)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print(__doc__)
        return 2
    return run(check=argv == ["--check"])


if __name__ == "__main__":
    raise SystemExit(main())

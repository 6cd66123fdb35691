"""Run every benchmark module under bench/ (`nox -s bench`, or `uv run --group bench python -m bench`).

Benchmarks print figures (medians and ratios); they assert nothing. Pass module names to run
only some of them: `nox -s bench -- bench_build` (or `-- build`).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = {a if a.startswith("bench_") else f"bench_{a}" for a in argv}
    chosen = [n for n in names if not argv or n in wanted]
    for name in chosen:
        print(f"== {name}")
        importlib.import_module(f"bench.{name}").main()
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

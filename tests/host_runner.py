"""A worker in a process of its own, for the real-server tests that are about processes.

    python -m tests.host_runner URL SCOPE[,SCOPE...] [--stall-file PATH] [--hold-file PATH]
        [--report PATH]

Settings come from SFC_* variables. With --stall-file, the worker stalls before its first
commit, after writing that file: the test then knows it holds pending entries, and kills it.
With --hold-file, it writes that file before its first commit and waits until the test
removes it, then commits (a stalled worker that comes back). With --report, it writes its
counters as JSON to that file every 0.2 s and when it stops (tests/faultkit.py reads them).
It runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from host.serve import stop_on_signals
from host.settings import from_environment
from host.store import Store
from host.worker import Worker


def counters(worker: Worker) -> dict[str, int]:
    c = worker.counters
    o = c.outcome
    return {
        "batches": c.batches,
        "applied": o.applied,
        "absorbed": o.absorbed,
        "rejected": o.rejected,
        "conflicts": o.conflicts,
        "gone": o.gone,
        "dropped": o.dropped,
        "failed": len(o.failed),
        "buried": c.buried,
        "claimed": c.claimed,
        "ticks": c.ticks,
        "outages": c.outages,
    }


def write_report(path: Path, worker: Worker) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(counters(worker)))
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("scopes")
    parser.add_argument("--stall-file")
    parser.add_argument("--hold-file")
    parser.add_argument("--report")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    stop_on_signals(stop)  # not set in the handler: it could wait for the event's lock
    worker = Worker(Store.from_url(args.url), from_environment(), args.scopes.split(","))
    if args.stall_file:
        marker = Path(args.stall_file)

        def stall(commits: Any) -> None:
            marker.write_text(str(len(commits)))
            while True:
                time.sleep(1)

        worker.applier.before_commit = stall
    elif args.hold_file:
        held = Path(args.hold_file)

        def hold(commits: Any) -> None:
            worker.applier.before_commit = None  # only the first batch is held
            held.write_text(str(len(commits)))
            while held.exists():
                time.sleep(0.02)

        worker.applier.before_commit = hold
    reporter: threading.Thread | None = None
    if args.report:
        report = Path(args.report)

        def reporting() -> None:
            while not stop.wait(0.2):
                write_report(report, worker)

        reporter = threading.Thread(target=reporting, daemon=True)
        reporter.start()
    try:
        worker.run(stop)
    finally:
        if args.report:
            write_report(Path(args.report), worker)


if __name__ == "__main__":
    main()

"""A worker in a process of its own, for the real-server tests that are about processes.

    python -m tests.host_runner URL SCOPE[,SCOPE...] [--stall-file PATH]

Settings come from SFC_* variables. With --stall-file, the worker stalls before its first
commit, after writing that file: the test then knows it holds pending entries, and kills it.
It runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path
from typing import Any

from host.settings import from_environment
from host.store import Store
from host.worker import Worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("scopes")
    parser.add_argument("--stall-file")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    worker = Worker(Store.from_url(args.url), from_environment(), args.scopes.split(","))
    if args.stall_file:
        marker = Path(args.stall_file)

        def stall(commits: Any) -> None:
            marker.write_text(str(len(commits)))
            while True:
                time.sleep(1)

        worker.applier.before_commit = stall
    worker.run(stop)


if __name__ == "__main__":
    main()

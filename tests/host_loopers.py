"""Loopers for the race test: each in a process of its own, on the same jobs.

    python -m tests.host_loopers pause|resume URL SCOPE ROUNDS JOB...
    python -m tests.host_loopers answer URL SCOPE GO-FILE

`pause` and `resume` apply their method to every job, ROUNDS times over, and print
{"calls", "ok", "refused", "conflicts"} as JSON. `answer` is the equipment: it answers every
hold `held` at once, clamp and unclamp `ok` at once, and tighten work (push and restart)
`ok` only once GO-FILE exists; on SIGTERM it prints {"answers": [entry ids]}.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from generated.equipment_entry_v1_0 import CommandData
from host import jobs
from host.entries import EntryError, decode_equipment, fields
from host.equipment import answer_data
from host.serve import stop_on_signals
from host.store import Store


def methods(name: str, url: str, scope: str, rounds: int, job_ids: list[str]) -> None:
    store = Store.from_url(url)
    call = jobs.pause if name == "pause" else jobs.resume
    calls = ok = conflicts = 0
    for _ in range(rounds):
        for job in job_ids:
            result = call(store, scope, job)
            calls += 1
            ok += result.ok
            conflicts += result.conflicts
    print(json.dumps({"calls": calls, "ok": ok, "refused": calls - ok, "conflicts": conflicts}))


def answer(url: str, scope: str, go: Path) -> None:
    store = Store.from_url(url)
    store.equipment_group(scope, "racer")
    stop = threading.Event()
    stop_on_signals(stop)
    waiting: list[CommandData] = []
    sent: list[str] = []
    while not stop.is_set():
        rows = store.read_equipment(scope, "racer", "racer-1", 100, 20)
        out = []
        for entry_id, raw in rows:
            try:
                e = decode_equipment(entry_id, raw)
            except EntryError:
                continue
            d = e.data
            if not isinstance(d, CommandData):
                continue
            if e.kind == "hold":
                out.append((d, "held"))
            elif d.action_key.endswith(":tighten"):
                waiting.append(d)
            else:
                out.append((d, "ok"))
        if waiting and go.exists():
            out += [(d, "ok") for d in waiting]
            waiting = []
        if out:
            entries = [
                fields(
                    "answer",
                    answer_data(
                        d.job, d.action_key, outcome=o, command_id=d.command_id, round=d.round
                    ),
                )
                for d, o in out
            ]
            sent += store.add_work_many(scope, entries)
        store.ack_equipment(scope, "racer", [i for i, _ in rows])
    print(json.dumps({"answers": sent}))


if __name__ == "__main__":
    kind, url, scope = sys.argv[1:4]
    if kind == "answer":
        answer(url, scope, Path(sys.argv[4]))
    else:
        methods(kind, url, scope, int(sys.argv[4]), sys.argv[5:])

"""build() at 1k, 5k and 20k elements (issue 3, "Must show").

An *element* is a step, a transition, an action block or a divergence: the four things
SFC018 counts. The recipe is a looped production line made of blocks, repeated until the
count is reached:

- a step with a push action and a default transition to the next block (3 elements);
- every 10th block instead a simultaneous divergence with two sequences of two steps, each
  step waiting for an event of one type told apart by a literal Selector subject (1 + 4 + 4
  elements, plus the transition into the divergence and its exit: 11);
- a final step whose push action either loops back to the first step (outcome "again") or
  ends the job by default.

The same line is timed a second time as a recipe v1.2.0 that uses every qualifier: each
plain step gets a second push action whose qualifier cycles through P1, P0, L, D, S, SD, DS
and SL (with DurationSeconds where it has a time), each stored one an R block three blocks
later, and every fifth step MinSeconds; the ratio to the N-only line of the same size is
printed.

The document is encoded once; the timed region is `build(bytes)` alone: decode, every check
and the graph's indexes, with the default garbage collector on, as a host would run it.
Each size is timed RUNS times; the median is printed (and the fastest run, which shows how
much other load on the machine moved the median), with the ratio of the medians to the size
before (linear growth gives 5.0 for 5k/1k and 4.0 for 20k/5k).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import msgspec

from sfc.builder import build

SIZES = (1_000, 5_000, 20_000)
RUNS = 11
TARGET_SECONDS = 0.5


def _action(name: str, step: str, interaction: str, type_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": interaction,
        "TypeId": type_id,
        "TimeoutSeconds": 60,
        **extra,
    }


QUALIFIED = ("P1", "P0", "L", "D", "S", "SD", "DS", "SL")


def line(elements: int, qualified: bool = False) -> dict[str, Any]:
    """A valid looped line of about `elements` elements (never more); with `qualified`, one
    of recipe v1.2.0 with every qualifier (see the module docstring)."""
    steps: list[dict[str, Any]] = [{"Name": "start", "Initial": True}]
    actions = [_action("load", "start", "push_command", "station.load")]
    transitions: list[dict[str, Any]] = []
    branches: list[dict[str, Any]] = []
    previous = "start"
    block = 0
    pending_resets: list[tuple[int, str]] = []
    """(block that resets, stored action) of the qualified line."""

    def count() -> int:
        return len(steps) + len(actions) + len(transitions) + len(branches)

    # keep room for the final step: its action and its two transitions, plus the next link
    while count() + 11 + 5 <= elements:
        block += 1
        if block % 10 == 0:
            name = f"par{block}"
            sequences = []
            for side in ("left", "right"):
                seq = [f"{name}_{side}{n}" for n in (1, 2)]
                for step in seq:
                    steps.append({"Name": step})
                    actions.append(
                        _action(
                            f"wait_{step}",
                            step,
                            "pull_event",
                            "station.sensor",
                            Selector={"Subject": step, "CorrelationId": "{jobId}"},
                        )
                    )
                sequences.append(seq)
            branches.append({"Name": name, "Type": "simultaneous", "Branches": sequences})
        else:
            name = f"op{block}"
            steps.append(
                {"Name": name, **({"MinSeconds": 2} if qualified and block % 5 == 1 else {})}
            )
            actions.append(
                _action(f"do_{name}", name, "push_command", "station.op", Parameters={"n": block})
            )
            if qualified and count() + 2 + 11 + 5 <= elements:
                q = QUALIFIED[block % len(QUALIFIED)]
                timed = {"DurationSeconds": 5} if q in ("L", "D", "SD", "DS", "SL") else {}
                actions.append(
                    _action(f"{q.lower()}_{name}", name, "push_command", "station.aux", **timed)
                )
                actions[-1]["Qualifier"] = q
                if q in ("S", "SD", "DS", "SL"):
                    pending_resets.append((block + 3, actions[-1]["Name"]))
            while qualified and pending_resets and pending_resets[0][0] <= block:
                _, stored = pending_resets.pop(0)
                actions.append({"Name": stored, "Step": name, "Qualifier": "R"})
        transitions.append({"Source": previous, "Target": name, "Condition": "true"})
        previous = name
    steps.append({"Name": "unload"})
    actions.append(_action("unload", "unload", "push_command", "station.unload"))
    transitions += [
        {"Source": previous, "Target": "unload", "Condition": "true"},
        {"Source": "unload", "Target": "start", "Condition": "again", "Priority": 0},
        {"Source": "unload", "Target": "done", "Condition": "true", "Priority": 1},
    ]
    steps.append({"Name": "done"})
    return {"Steps": steps, "Transitions": transitions, "Actions": actions, "Branches": branches}


def elements(doc: dict[str, Any]) -> int:
    return sum(len(doc[k]) for k in ("Steps", "Transitions", "Actions", "Branches"))


def timings(data: bytes) -> list[float]:
    """Seconds of each run; garbage of earlier runs is collected before the clock starts."""
    times = []
    for _ in range(RUNS):
        gc.collect()
        start = time.perf_counter()
        result = build(data)
        times.append(time.perf_counter() - start)
        assert result.ok, result.errors[:3]
    return times


def main() -> None:
    print(f"build(bytes), median of {RUNS} runs; element = step, transition, action or divergence")
    build(msgspec.json.encode(line(SIZES[0])))  # warm up imports and decoders
    previous: float | None = None
    last = 0.0
    for size in SIZES:
        doc = line(size)
        data = msgspec.json.encode(doc)
        total = elements(doc)
        counts = ", ".join(
            f"{len(doc[k])} {k.lower()}" for k in ("Steps", "Transitions", "Actions", "Branches")
        )
        del doc  # a host holds the bytes only; the dict would make every full GC pass longer
        times = timings(data)
        seconds = statistics.median(times)
        ratio = "" if previous is None else f"  x{seconds / previous:.2f} vs previous size"
        print(
            f"{total:>6} elements ({counts}; {len(data):,} bytes): "
            f"median {seconds * 1000:6.1f} ms (min {min(times) * 1000:6.1f}), "
            f"{seconds / total * 1e6:.1f} us/element{ratio}"
        )
        previous = seconds
        last = seconds
    verdict = "meets" if last <= TARGET_SECONDS else "MISSES"
    print(
        f"20k elements: {last * 1000:.1f} ms, {verdict} the target of {TARGET_SECONDS * 1000:.0f} ms"
    )
    print("recipe v1.2.0 with every qualifier, R blocks and MinSeconds (same sizes):")
    plain = last
    for size in SIZES:
        doc = line(size, qualified=True)
        data = msgspec.json.encode(doc)
        total = elements(doc)
        resets = sum(1 for a in doc["Actions"] if a["Qualifier"] == "R")
        del doc
        times = timings(data)
        seconds = statistics.median(times)
        print(
            f"{total:>6} elements ({resets} R blocks; {len(data):,} bytes): "
            f"median {seconds * 1000:6.1f} ms (min {min(times) * 1000:6.1f}), "
            f"{seconds / total * 1e6:.1f} us/element"
        )
        last = seconds
    print(f"20k elements: x{last / plain:.2f} of the N-only line")

"""State 1.4: the durable step at the end of long jobs, the state's size, SpiffWorkflow beside
it, and `sfc dryrun`'s simulation at 2,000 and 20,000 steps, each against its target.

The durable step is what a host does per event: decode the state bytes it stored, evolve,
encode the new state. Every workload is driven once from start to completion (bench_evolve's
`scenario`, answering each startWork with the command id and round it carries), keeping the
state bytes stored before each event; the timed region then runs the durable step of the last
LAST events of the job, each from its own stored bytes. So the figure is the cost *at the end*
of the chart (linear N=2000: the events around step 2000; a loop of k rounds: the events
around round k), and any growth of the state or of evolve's work with progress would show.

- linear N: N steps in a row, one push action each;
- loop after k rounds: one step whose push action answers `again` k-1 times, then `done`;
- simultaneous n: a divergence of n one-step sequences, the answers coming one by one.

The state size is that of the bytes stored before the last event: the last step is active
(for a divergence, every sequence but one has answered and all records are kept until it
converges).

All workloads are timed in one loop of ROUNDS rounds, their rounds alternating, and the
figures are per event: median, min and max over the rounds. Ratios are of medians, with the
spread of the ratio taken round by round in brackets; compare figures of one run side by side,
not across runs (the machine is shared and noisy).

SpiffWorkflow: the chain start -> N manual tasks -> end. Its durable step restores the workflow
serialized before a task (BpmnWorkflowSerializer, JSON, spec included, as bench_evolve's Spiff
persists it), runs the task and do_engine_steps, and serializes it again; timed over the last
LAST tasks of the chain, in rounds that alternate with ours at the same N.

Dryrun: Simulation(graph).run() with no script (every push action answers `ok` at once), the
graph built outside the timed region, the garbage collector on as in `sfc dryrun`; the figure
with it off is printed beside it to tell the collector's share of any growth.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.bench_evolve import (
    Scenario,
    Spiff,
    Timing,
    _machine,
    graph_of,
    interleaved,
    linear_recipe,
    loop_recipe,
    scenario,
    simultaneous_recipe,
)
from sfc.codec import encode, state_decoder
from sfc.evolution import evolve
from sfc.graph import Graph
from sfc.simulation import Simulation

LAST = 10
"""Events timed at the end of each job."""
ROUNDS = 15
ROUND_SECONDS = 0.05
"""Each round repeats a workload's LAST events for about this long."""
SPIFF_ROUNDS = 5
SPIFF_ROUND_SECONDS = 0.05
SIM_SIZES = (2_000, 20_000)
SIM_RUNS = 7
"""Runs of each dryrun size: the 2,000-step run takes 0.05 s, and with 3 runs the ratio's
median swung between 8.9 and 12.8 on this machine from run to run."""

LINEAR = (10, 200, 2000)
LOOPS = (10, 100, 1000)
SIMULTANEOUS = (8, 64)
THROUGHPUT_STEPS = 20

TARGET_GROWTH = 1.3
"""linear N=2000 at most this many times linear N=10."""
TARGET_SPIFF = {10: 75.0, 200: 300.0}
"""At least this many times faster than SpiffWorkflow's durable step, by chain length."""
TARGET_STATE_BYTES = 2048
"""The state at the last step of linear N=2000, at most (2 KB)."""
TARGET_LOOP_DRIFT = 64
"""A loop's state after 1000 rounds within this many bytes of its size after 10 rounds."""
TARGET_EVENTS_PER_S = 80_000
"""Durable throughput of linear-20 (its whole job, start included)."""
TARGET_SIM_RATIO = 12.0
"""Dryrun's time at 20,000 steps over its time at 2,000 (10x the steps): at most this."""


@dataclass
class Workload:
    label: str
    graph: Graph
    window: list[tuple[bytes, Any]]
    """(the state bytes stored before the event, the event) for the timed events."""
    state_bytes: int
    """Size of the state stored before the job's last event (its last step active)."""

    def job(self) -> Callable[[], None]:
        graph, window, dec = self.graph, self.window, state_decoder.decode

        def durable_steps() -> None:
            for blob, ev in window:
                encode(evolve(graph, dec(blob), None, ev).state)

        return durable_steps


def stored(sc: Scenario) -> list[tuple[bytes, Any]]:
    """(state bytes before the event, the event) for every event of the job; it checks that
    each durable step is applied and gives the bytes stored for the next event."""
    blob = encode(sc.initial)
    out: list[tuple[bytes, Any]] = []
    for ev in sc.events:
        out.append((blob, ev))
        r = evolve(sc.graph, state_decoder.decode(blob), None, ev)
        assert r.disposition == "applied", (sc.name, r.reason)
        blob = encode(r.state)
    assert state_decoder.decode(blob).status == "completed", sc.name
    return out


def workload(label: str, sc: Scenario, last: int | None = LAST) -> Workload:
    pairs = stored(sc)
    window = pairs if last is None else pairs[-min(last, len(pairs) - 1) :]  # never the start
    return Workload(label, sc.graph, window, len(pairs[-1][0]))


PARTS = ("decode", "evolve", "encode")


def parts(w: Workload) -> dict[str, tuple[Callable[[], object], int]]:
    """The three parts of the durable step over a workload's events, each timed on its own."""
    graph, dec = w.graph, state_decoder.decode
    states = [dec(blob) for blob, _ in w.window]
    events = [ev for _, ev in w.window]
    results = [evolve(graph, s, None, ev).state for s, ev in zip(states, events, strict=True)]
    blobs = [blob for blob, _ in w.window]

    def decode() -> None:
        for blob in blobs:
            dec(blob)

    def evolve_only() -> None:
        for s, ev in zip(states, events, strict=True):
            evolve(graph, s, None, ev)

    def encode_only() -> None:
        for s in results:
            encode(s)

    n = len(w.window)
    return {"decode": (decode, n), "evolve": (evolve_only, n), "encode": (encode_only, n)}


def _done(_action: str, _round: int) -> str:
    return "done"


def _loop(k: int) -> Callable[[str, int], str]:
    return lambda _a, r: "again" if r < k else "done"


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f}"


def _spread(a: Timing, b: Timing, digits: int = 2) -> str:
    """min-max of the ratio a/b taken round by round (the rounds alternate)."""
    ratios = [x / y for x, y in zip(a.runs, b.runs, strict=True)]
    return f"{min(ratios):.{digits}f}-{max(ratios):.{digits}f}"


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def _sim_seconds(graph: Graph, collect: bool) -> float:
    gc.collect()
    if not collect:
        gc.disable()
    try:
        t0 = time.perf_counter()
        result = Simulation(graph).run()
        elapsed = time.perf_counter() - t0
    finally:
        gc.enable()
    assert result.end == "completed", result.end
    return elapsed


def main() -> None:
    machine = _machine()
    t_start = time.perf_counter()

    # ---------------------------------------------------------------- our durable step
    loads: list[Workload] = [
        *(
            workload(f"linear N={n}", scenario(f"linear-{n}", linear_recipe(n), _done))
            for n in LINEAR
        ),
        *(
            workload(f"loop after {k} rounds", scenario(f"loop-{k}", loop_recipe(), _loop(k)))
            for k in LOOPS
        ),
        *(
            workload(
                f"simultaneous {n}",
                scenario(f"simultaneous-{n}", simultaneous_recipe(n), _done),
            )
            for n in SIMULTANEOUS
        ),
    ]
    whole = workload(
        f"linear N={THROUGHPUT_STEPS}, whole job",
        scenario("linear-20", linear_recipe(THROUGHPUT_STEPS), _done),
        last=None,
    )
    jobs = {w.label: (w.job(), len(w.window)) for w in [*loads, whole]}
    jobs.update(parts(whole))
    tm = interleaved(jobs, ROUNDS, ROUND_SECONDS)
    by = {w.label: w for w in loads}

    print(machine)
    thr = tm[whole.label]
    rate = 1e9 / thr.median_ns
    print(
        f"durable throughput, linear-{THROUGHPUT_STEPS} (decode, evolve, encode per event; whole "
        f"job of {len(whole.window)} events, start included): {rate:,.0f} events/s "
        f"(rounds {1e9 / thr.max_ns:,.0f}-{1e9 / thr.min_ns:,.0f}); "
        f"target >= {TARGET_EVENTS_PER_S:,} -> {_met(rate >= TARGET_EVENTS_PER_S)}"
    )
    split = ", ".join(f"{part} {_us(tm[part].median_ns)} µs" for part in PARTS)
    print(f"  where a durable event of it goes (medians, per event): {split}")
    print()
    print(
        f"durable step (decode the stored state bytes, evolve, encode), the last {LAST} events "
        f"of each job; µs per event over {ROUNDS} alternating rounds of ~{ROUND_SECONDS:g} s"
    )
    ref = tm["linear N=10"]
    print(
        f"  {'workload':24} {'events':>6} {'median':>8} {'min':>8} {'max':>8} "
        f"{'vs linear N=10':>20} {'state at last step':>19}"
    )
    for w in [*loads, whole]:
        t = tm[w.label]
        print(
            f"  {w.label:24} {len(w.window):>6} {_us(t.median_ns):>8} {_us(t.min_ns):>8} "
            f"{_us(t.max_ns):>8} {t.median_ns / ref.median_ns:>7.2f}x ({_spread(t, ref):>10}) "
            f"{w.state_bytes:>17,} B"
        )

    # ---------------------------------------------------------------- SpiffWorkflow
    import SpiffWorkflow

    version = getattr(SpiffWorkflow, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("spiffworkflow")
    spiffs = {n: Spiff(n) for n in TARGET_SPIFF}
    blobs = {n: sp.stored(LAST) for n, sp in spiffs.items()}
    side: dict[str, tuple[Callable[[], object], int]] = {}
    for n, sp in spiffs.items():
        side[f"ours {n}"] = (by[f"linear N={n}"].job(), len(by[f"linear N={n}"].window))
        side[f"spiff {n}"] = ((lambda sp=sp, b=blobs[n]: sp.durable_steps(b)), len(blobs[n]))
    st = interleaved(side, SPIFF_ROUNDS, SPIFF_ROUND_SECONDS)
    print()
    print(
        f"SpiffWorkflow {version} durable step (restore the serialized workflow, run the next "
        f"manual task and do_engine_steps, serialize), the last {LAST} tasks of the chain; "
        f"{SPIFF_ROUNDS} rounds alternating with ours; µs per step"
    )
    print(
        f"  {'chain':7} {'spiff median':>12} {'min':>8} {'max':>8} {'ours median':>11} "
        f"{'min':>6} {'max':>6} {'ours/spiff':>10} {'speed-up (per round)':>22} "
        f"{'state: spiff':>12} {'ours':>6}"
    )
    speedup: dict[int, float] = {}
    for n in spiffs:
        theirs, ours = st[f"spiff {n}"], st[f"ours {n}"]
        speedup[n] = theirs.median_ns / ours.median_ns
        print(
            f"  {f'N={n}':7} {_us(theirs.median_ns):>12} {_us(theirs.min_ns):>8} "
            f"{_us(theirs.max_ns):>8} {_us(ours.median_ns):>11} {_us(ours.min_ns):>6} "
            f"{_us(ours.max_ns):>6} {ours.median_ns / theirs.median_ns:>10.4f} "
            f"{f'{speedup[n]:.0f}x ({_spread(theirs, ours, 0)})':>22} "
            f"{len(blobs[n][-1].encode()):>10,} B {by[f'linear N={n}'].state_bytes:>4,} B"
        )

    # ---------------------------------------------------------------- dryrun
    graphs = {n: graph_of(linear_recipe(n)) for n in SIM_SIZES}
    sims: dict[tuple[int, bool], list[float]] = {
        (n, c): [] for n in SIM_SIZES for c in (True, False)
    }
    for _ in range(SIM_RUNS):
        for collect in (True, False):
            for n in SIM_SIZES:
                sims[n, collect].append(_sim_seconds(graphs[n], collect))
    med = {k: statistics.median(v) for k, v in sims.items()}
    small, big = SIM_SIZES
    print()
    print(
        f"sfc dryrun's simulation, Simulation(graph).run() without a script, linear charts; "
        f"median of {SIM_RUNS} runs (min-max)"
    )
    print(f"  {'':14} {'gc':>4} {'seconds':>8} {'(min-max)':>15} {'µs/evaluation':>14}")
    for collect in (True, False):
        for n in SIM_SIZES:
            runs = sims[n, collect]
            print(
                f"  {f'{n:,} steps':14} {'on' if collect else 'off':>4} {med[n, collect]:>8.3f} "
                f"({min(runs):.3f}-{max(runs):.3f}) {med[n, collect] * 1e6 / (n + 1):>14.1f}"
            )
        print(
            f"  {f'{big:,} / {small:,}':14} {'on' if collect else 'off':>4} "
            f"{med[big, collect] / med[small, collect]:>8.2f}x"
        )
    sim_ratio = med[big, True] / med[small, True]

    # ---------------------------------------------------------------- targets
    lin10, lin2000 = tm["linear N=10"], tm["linear N=2000"]
    growth = lin2000.median_ns / lin10.median_ns
    state2000 = by["linear N=2000"].state_bytes
    drift = by["loop after 1000 rounds"].state_bytes - by["loop after 10 rounds"].state_bytes
    rows = [
        (
            "durable step, linear N=2000 / N=10",
            f"<= {TARGET_GROWTH:g}x",
            f"{growth:.2f}x (per round {_spread(lin2000, lin10)})",
            growth <= TARGET_GROWTH,
        ),
        *(
            (
                f"speed-up over SpiffWorkflow, N={n}",
                f">= {target:g}x",
                f"{speedup[n]:.0f}x (per round {_spread(st[f'spiff {n}'], st[f'ours {n}'], 0)})",
                speedup[n] >= target,
            )
            for n, target in TARGET_SPIFF.items()
        ),
        (
            "state at the last step, linear N=2000",
            f"<= {TARGET_STATE_BYTES:,} B",
            f"{state2000:,} B",
            state2000 <= TARGET_STATE_BYTES,
        ),
        (
            "loop state, 1000 rounds vs 10",
            f"within {TARGET_LOOP_DRIFT} B",
            f"{drift:+,} B",
            abs(drift) <= TARGET_LOOP_DRIFT,
        ),
        (
            f"durable throughput, linear-{THROUGHPUT_STEPS}",
            f">= {TARGET_EVENTS_PER_S:,}/s",
            f"{rate:,.0f}/s",
            rate >= TARGET_EVENTS_PER_S,
        ),
        (
            f"dryrun {big:,} / {small:,} steps (gc on)",
            f"<= {TARGET_SIM_RATIO:g}",
            f"{sim_ratio:.2f}",
            sim_ratio <= TARGET_SIM_RATIO,
        ),
    ]
    print()
    print("targets of state 1.4 (judged on the medians of this run):")
    print(f"  {'target':40} {'required':>12} {'measured':>36}  met")
    for what, required, measured, ok in rows:
        print(f"  {what:40} {required:>12} {measured:>36}  {_met(ok)}")
    print(f"(bench_state took {time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()

"""State 1.5: the durable step at the end of long jobs, the state's size, SpiffWorkflow beside
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
- simultaneous n: a divergence of n one-step sequences, the answers coming one by one;
- qualified N (recipe v1.2.0): linear N whose steps also carry non-gating blocks of every
  qualifier (P, P1, P0, L, D, S, SD, DS, SL), R blocks two steps on, and a MinSeconds on
  every fourth step; stored and timed work is left unanswered, so R, limits and timers
  withdraw or start it, and ticks at `next_deadline` are part of the job's events;
- qualified loop after k rounds: a two-step loop with every qualifier (R in the second step),
  whose state must stay flat as the rounds go by.

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
from itertools import pairwise
from typing import Any

import msgspec

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
from generated.command_v1_0 import StartWork
from generated.event_v1_0 import ActionCompleted, Start, Tick
from sfc.builder import RECIPE_V1_2_0, build
from sfc.codec import encode, state_decoder
from sfc.evolution import evolve, new_state, next_deadline
from sfc.graph import STORED, TIMED, Graph
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
QUALIFIED = (10, 200)
QUALIFIED_LOOPS = (10, 1000)
TARGET_QUALIFIED = 1.5
"""The durable step of qualified N at most this many times that of linear N (N-only)."""
_CYCLE = ("P", "L", "S", "D", "P0", "SD", "P1", "DS", "SL")


def _block(name: str, step: str, qualifier: str) -> dict[str, Any]:
    block: dict[str, Any] = {
        "Name": name,
        "Step": step,
        "Qualifier": qualifier,
        "Interaction": "push_command",
        "TypeId": f"com.example.{qualifier.lower()}.v1",
        "TimeoutSeconds": 3600,
    }
    if qualifier in TIMED:
        block["DurationSeconds"] = 0.003
    return block


def qualified_recipe(n: int) -> dict[str, Any]:
    """linear N, each step with an N block and one non-gating block (the qualifiers in turn);
    a stored block is reset two steps on; every fourth step dwells 2 ms."""
    steps = [f"s{i}" for i in range(1, n + 1)]
    actions: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        actions.append(_block(f"a{i}", step, "N"))
        qualifier = _CYCLE[i % len(_CYCLE)]
        actions.append(_block(f"q{i}", step, qualifier))
        if qualifier in STORED and i + 2 < n:
            actions.append({"Name": f"q{i}", "Step": steps[i + 2], "Qualifier": "R"})
    return {
        "Steps": [
            {"Name": s, "Initial": i == 0, **({"MinSeconds": 0.002} if i % 4 == 3 else {})}
            for i, s in enumerate(steps)
        ],
        "Transitions": [
            {"Source": a, "Target": b, "Condition": "true"} for a, b in pairwise(steps)
        ],
        "Actions": actions,
    }


def n_only_twin(doc: dict[str, Any]) -> dict[str, Any]:
    """The same recipe with every block N: no R, no T, no MinSeconds (the N-only recipe a
    qualified one is judged against: the same steps and blocks)."""
    actions = [
        {k: v for k, v in a.items() if k != "DurationSeconds"} | {"Qualifier": "N"}
        for a in doc["Actions"]
        if a["Qualifier"] != "R"
    ]
    steps = [{k: v for k, v in s.items() if k != "MinSeconds"} for s in doc["Steps"]]
    return {**doc, "Steps": steps, "Actions": actions}


def qualified_loop_recipe() -> dict[str, Any]:
    """work -> rest -> work (on `again`) -> end: work carries every non-gating qualifier, rest
    resets the stored ones and dwells 2 ms."""
    actions = [_block("w", "work", "N"), _block("r", "rest", "N")]
    for q in _CYCLE:
        actions.append(_block(f"q_{q.lower()}", "work", q))
        if q in STORED:
            actions.append({"Name": f"q_{q.lower()}", "Step": "rest", "Qualifier": "R"})
    return {
        "Steps": [
            {"Name": "work", "Initial": True},
            {"Name": "rest", "MinSeconds": 0.002},
            {"Name": "end"},
        ],
        "Transitions": [
            {"Source": "work", "Target": "rest", "Condition": "true"},
            {"Source": "rest", "Target": "work", "Condition": "again", "Priority": 0},
            {"Source": "rest", "Target": "end", "Condition": "true", "Priority": 1},
        ],
        "Actions": actions,
    }


def qualified_scenario(name: str, doc: dict[str, Any], rounds: int = 1) -> Scenario:
    """Drive a v1.2.0 job once: answer N and pulse work 1 ms after it starts (`r` answers
    `again` until the last round), leave stored and timed work to R, limits and exits, and
    tick at next_deadline when nothing else is pending."""
    built = build(msgspec.json.encode(doc), dataschema=RECIPE_V1_2_0)
    assert built.graph is not None, built.errors
    graph = built.graph
    initial = new_state(graph, "job-1", "bench")
    events: list[Any] = [Start(at=0)]
    r = evolve(graph, initial, None, events[0])
    pending: list[StartWork] = []
    at = 0
    while True:
        assert r.disposition == "applied", (name, r.reason)
        state = r.state
        pending.extend(c for c in r.commands if isinstance(c, StartWork))
        if state.status != "running":
            break
        ev: Any = None
        while pending and ev is None:
            cmd = pending.pop(0)
            action = cmd.action_key.split(":", 1)[1]
            rec = state.actions.get(action)
            spec = graph.actions[action]
            if rec is None or rec.command_id != cmd.command_id or rec.status != "open":
                continue
            if spec.qualifier in TIMED or spec.qualifier in STORED:
                continue  # left to R, its limit, its exit or the job's end
            at += 1
            outcome = "again" if action == "r" and cmd.round < rounds else "done"
            ev = ActionCompleted(
                at=at,
                action_key=cmd.action_key,
                outcome=outcome,
                command_id=cmd.command_id,
                round=cmd.round,
            )
        if ev is None:
            due = next_deadline(state)
            assert due is not None, (name, "stuck")
            at = max(at + 1, due)
            ev = Tick(at=at)
        events.append(ev)
        r = evolve(graph, state, None, ev)
    assert state.status == "completed", (name, state.status, state.fault)
    return Scenario(name, graph, initial, events)


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
    qualified = [
        *(
            workload(f"qualified N={n}", qualified_scenario(f"qualified-{n}", qualified_recipe(n)))
            for n in QUALIFIED
        ),
        *(
            workload(
                f"N-only twin N={n}",
                qualified_scenario(f"twin-{n}", n_only_twin(qualified_recipe(n))),
            )
            for n in QUALIFIED
        ),
        *(
            workload(
                f"qualified loop {k} rounds",
                qualified_scenario(f"qualified-loop-{k}", qualified_loop_recipe(), k),
            )
            for k in QUALIFIED_LOOPS
        ),
    ]
    loads.extend(qualified)
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
    q_drift = (
        by["qualified loop 1000 rounds"].state_bytes - by["qualified loop 10 rounds"].state_bytes
    )
    q200, n200, t200 = tm["qualified N=200"], tm["linear N=200"], tm["N-only twin N=200"]
    q_ratio = q200.median_ns / t200.median_ns
    q_linear = q200.median_ns / n200.median_ns
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
            "durable step, qualified N=200 / N-only twin",
            f"<= {TARGET_QUALIFIED:g}x",
            f"{q_ratio:.2f}x (per round {_spread(q200, t200)})",
            q_ratio <= TARGET_QUALIFIED,
        ),
        (
            "  the same / linear N=200 (one block a step)",
            "",
            f"{q_linear:.2f}x (per round {_spread(q200, n200)})",
            True,
        ),
        (
            "qualified loop state, 1000 rounds vs 10",
            f"within {TARGET_LOOP_DRIFT} B",
            f"{q_drift:+,} B",
            abs(q_drift) <= TARGET_LOOP_DRIFT,
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
    print("targets of state 1.5 (judged on the medians of this run):")
    print(f"  {'target':40} {'required':>12} {'measured':>36}  met")
    for what, required, measured, ok in rows:
        print(f"  {what:40} {required:>12} {measured:>36}  {_met(ok) if required else ''}")
    print(f"(bench_state took {time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()

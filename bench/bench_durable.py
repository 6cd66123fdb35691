"""The durable step of state 1.4: decode the stored state, evolve, encode (issue #9).

Per workload, the cost of the events at the end of the job (so that growth with progress
would show), median with min and max over rounds, and the encoded state size at the last
step; SpiffWorkflow's durable step beside it; `sfc dryrun`'s simulation on linear charts of
2,000 and 20,000 steps. Figures only; nothing is asserted.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.bench_evolve import (
    Scenario,
    _machine,
    bpmn_chain,
    graph_of,
    linear_recipe,
    loop_recipe,
    scenario,
    simultaneous_recipe,
)
from sfc import evolve
from sfc.codec import encode, state_decoder
from sfc.simulation import Simulation

ROUNDS = 7
LAST = 20
"""Events timed at the end of each job."""


def _stored(sc: Scenario) -> list[tuple[bytes, Any]]:
    """(the state as stored before the event, the event) for every event of the job."""
    state, out = sc.initial, []
    for ev in sc.events:
        out.append((encode(state), ev))
        state = evolve(sc.graph, state, None, ev).state
    return out


def durable(sc: Scenario, last: int = LAST) -> tuple[list[float], int]:
    """µs per event over the last `last` events, per round; the state bytes at the last step."""
    pairs = _stored(sc)[-last:]
    graph, dec = sc.graph, state_decoder.decode
    reps = max(1, 2_000 // len(pairs))
    per_event = []
    for _ in range(ROUNDS):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for _ in range(reps):
                for blob, ev in pairs:
                    encode(evolve(graph, dec(blob), None, ev).state)
            per_event.append((time.perf_counter_ns() - t0) / (reps * len(pairs)) / 1000)
        finally:
            gc.enable()
    return per_event, len(pairs[-1][0])


def spiff_durable(n: int) -> float | None:
    """SpiffWorkflow's durable step (serialize and deserialize per task) on a chain of n, µs."""
    try:
        from SpiffWorkflow.bpmn.parser.BpmnParser import BpmnParser
        from SpiffWorkflow.bpmn.serializer.workflow import BpmnWorkflowSerializer
        from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
        from SpiffWorkflow.util.task import TaskState
    except ImportError:
        return None
    parser = BpmnParser()
    parser.add_bpmn_str(bpmn_chain(n).encode())
    spec = parser.get_spec("chain")
    ser = BpmnWorkflowSerializer()

    def job() -> int:
        wf = BpmnWorkflow(spec)
        wf.do_engine_steps()
        wf = ser.deserialize_json(ser.serialize_json(wf))
        steps = 0
        while (task := wf.get_next_task(state=TaskState.READY, manual=True)) is not None:
            task.run()
            wf.do_engine_steps()
            wf = ser.deserialize_json(ser.serialize_json(wf))
            steps += 1
        return steps

    runs = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        steps = job()
        runs.append((time.perf_counter_ns() - t0) / steps / 1000)
    return statistics.median(runs)


def _row(name: str, runs: list[float], size: int) -> str:
    med = statistics.median(runs)
    return f"  {name:<28} {med:8.1f} µs  (min {min(runs):.1f}, max {max(runs):.1f})  {size:>7} B"


def _dryrun_seconds(n: int, reps: int) -> float:
    graph = graph_of(linear_recipe(n))
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        Simulation(graph).run()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _loop(k: int) -> Scenario:
    return scenario(f"loop-{k}", loop_recipe(), lambda _a, r: "again" if r < k else "ok")


def main() -> None:
    print(_machine())
    ok: Callable[[str, int], str] = lambda _a, _r: "ok"  # noqa: E731
    print("durable step (decode, evolve, encode), last events of each job; state at the last step")
    figures: dict[str, tuple[float, int]] = {}
    workloads: list[tuple[str, Scenario, int]] = [
        *(
            (f"linear N={n}", scenario(f"lin-{n}", linear_recipe(n), ok), LAST)
            for n in (10, 20, 200, 2000)
        ),
        *((f"loop after {k} rounds", _loop(k), LAST) for k in (10, 100, 1000)),
        *(
            (f"simultaneous {n}", scenario(f"sim-{n}", simultaneous_recipe(n), ok), n)
            for n in (8, 64)
        ),
    ]
    for name, sc, last in workloads:
        runs, size = durable(sc, min(last, len(sc.events)))
        figures[name] = (statistics.median(runs), size)
        print(_row(name, runs, size))

    lin10, lin2000 = figures["linear N=10"], figures["linear N=2000"]
    loop10, loop1000 = figures["loop after 10 rounds"], figures["loop after 1000 rounds"]
    per_s = 1e6 / figures["linear N=20"][0]
    print("targets")
    print(f"  linear N=2000 / N=10: {lin2000[0] / lin10[0]:.2f}x (target at most 1.3x)")
    print(f"  state at the last step of linear N=2000: {lin2000[1]} B (target at most 2048 B)")
    print(
        f"  loop state after 1000 rounds - after 10: {loop1000[1] - loop10[1]} B (target at most 64 B)"
    )
    print(f"  durable throughput, linear-20: {per_s:,.0f} events/s (target 80,000/s)")
    for n, target in ((10, 75), (200, 300)):
        theirs = spiff_durable(n)
        if theirs is None:
            print("  SpiffWorkflow is not installed (uv sync --group bench)")
            break
        ours = figures[f"linear N={n}"][0]
        print(
            f"  SpiffWorkflow durable step at N={n}: {theirs:,.0f} µs; ours {ours:.1f} µs: "
            f"{theirs / ours:.0f}x (target at least {target}x)"
        )
    small, big = _dryrun_seconds(2_000, 3), _dryrun_seconds(20_000, 3)
    print(
        f"  sfc dryrun simulation, linear 2,000 steps {small:.3f} s, 20,000 steps {big:.3f} s: "
        f"ratio {big / small:.1f} (target at most 12)"
    )

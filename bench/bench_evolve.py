"""evolve throughput, and the per-step cost against SpiffWorkflow (issue 4, "Must show").

Our side: three recipes, each driven from `start` to `completed`:
- linear: 20 steps in a row, one push action each (start, then 20 responses: 21 events);
- simultaneous: a divergence of 8 one-step sequences (start, 8 responses, convergence: 9 events);
- loop: one step whose push action answers `again` 99 times (routed back to itself), then
  `done` (start, then 100 responses: 101 events).

The events are computed once, outside the timed region, by a driver that answers every
startWork with the command id and round it carries (as a host would echo them); the timed
region only replays that list through `evolve`. "persist" also msgspec-encodes the state after
every event and decodes it back for the next one, as a host storing the state would.

SpiffWorkflow: the equivalent BPMN chain (start event -> 20 manual tasks -> end event),
instantiated and completed one task at a time; "persist" serializes the workflow to JSON with
BpmnWorkflowSerializer after instantiation and after every step, and restores it for the next.

"Per step" compares whole jobs of the linear chain: job time / 20 steps, on both sides, with
the start (ours) and the instantiation (Spiff) included.

bench_state.py measures the durable step of state 1.4 (decode the stored bytes, evolve,
encode) at the end of long jobs, with the state's size, against the targets of state 1.4;
it reuses the recipes, the driver, the Spiff chain and the timing helpers below.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import msgspec

from generated.command_v1_0 import StartWork
from generated.event_v1_0 import ActionCompleted, Start
from generated.recipe_v1_1_0 import Recipe
from generated.state_v1_5 import SfcState
from sfc.codec import encode, state_decoder
from sfc.evolution import evolve, new_state
from sfc.graph import Graph, index

RUNS = 7
RUN_SECONDS = 0.15
"""Each run repeats the whole job until about this long has passed."""

LINEAR_STEPS = 20
SEQUENCES = 8
LOOP_ROUNDS = 100

TARGET_EVENTS_PER_S = 50_000
TARGET_RATIO = 20.0


# --------------------------------------------------------------------------- recipes


def _push(name: str, step: str) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": "push_command",
        "TypeId": "bench.push",
        "TimeoutSeconds": 60,
    }


def _t(source: str, target: str, condition: str = "true", priority: int = 0) -> dict[str, Any]:
    return {"Source": source, "Target": target, "Condition": condition, "Priority": priority}


def _steps(names: list[str], initial: str) -> list[dict[str, Any]]:
    return [{"Name": s, "Initial": s == initial} for s in names]


def linear_recipe(n: int = LINEAR_STEPS) -> dict[str, Any]:
    steps = [f"s{i}" for i in range(1, n + 1)]
    return {
        "Steps": _steps(steps, steps[0]),
        "Transitions": [_t(a, b) for a, b in pairwise(steps)],
        "Actions": [_push(f"a{i}", s) for i, s in enumerate(steps, 1)],
    }


def simultaneous_recipe(n: int = SEQUENCES) -> dict[str, Any]:
    branches = [f"b{i}" for i in range(1, n + 1)]
    return {
        "Steps": _steps(["begin", *branches, "end"], "begin"),
        "Transitions": [_t("begin", "fork"), _t("fork", "end")],
        "Actions": [_push(f"a{i}", b) for i, b in enumerate(branches, 1)],
        "Branches": [{"Name": "fork", "Type": "simultaneous", "Branches": [[b] for b in branches]}],
    }


def loop_recipe() -> dict[str, Any]:
    return {
        "Steps": _steps(["work", "end"], "work"),
        "Transitions": [_t("work", "work", "again", 0), _t("work", "end", "true", 1)],
        "Actions": [_push("w", "work")],
    }


def graph_of(doc: dict[str, Any]) -> Graph:
    data = msgspec.json.encode(doc)
    try:
        from sfc.builder import build
    except ImportError:  # before sfc/builder.py exists
        return index(msgspec.json.decode(data, type=Recipe), "hash", "uri")
    result = build(data)
    assert result.graph is not None, result.errors
    graph: Graph = result.graph
    return graph


# --------------------------------------------------------------------------- our side


@dataclass
class Scenario:
    name: str
    graph: Graph
    initial: SfcState
    events: list[Any]


def scenario(name: str, doc: dict[str, Any], answer: Callable[[str, int], str]) -> Scenario:
    """Drive a job once, answering each startWork with `answer(action, round)`; keep the events."""
    graph = graph_of(doc)
    initial = new_state(graph, "job-1", "bench")
    state = initial
    events: list[Any] = [Start(at=0)]
    pending: list[StartWork] = []
    at = 0
    r = evolve(graph, state, None, events[0])
    while True:
        assert r.disposition == "applied", r.reason
        state = r.state
        pending.extend(c for c in r.commands if isinstance(c, StartWork))
        if state.status != "running" or not pending:
            break
        cmd = pending.pop(0)
        at += 1
        action = cmd.action_key.split(":", 1)[1]
        ev = ActionCompleted(
            at=at,
            action_key=cmd.action_key,
            outcome=answer(action, cmd.round),
            command_id=cmd.command_id,
            round=cmd.round,
        )
        events.append(ev)
        r = evolve(graph, state, None, ev)
    assert state.status == "completed", (name, state.status, state.fault)
    return Scenario(name, graph, initial, events)


def replay(sc: Scenario) -> SfcState:
    graph, state = sc.graph, sc.initial
    for ev in sc.events:
        state = evolve(graph, state, None, ev).state
    return state


def replay_persisting(sc: Scenario) -> SfcState:
    graph, state = sc.graph, sc.initial
    dec = state_decoder.decode
    for ev in sc.events:
        state = dec(encode(evolve(graph, state, None, ev).state))
    return state


# --------------------------------------------------------------------------- SpiffWorkflow


def bpmn_chain(n: int = LINEAR_STEPS) -> str:
    ids = ["start", *(f"t{i}" for i in range(1, n + 1)), "end"]
    tasks = "\n".join(f'    <bpmn:manualTask id="t{i}" name="t{i}"/>' for i in range(1, n + 1))
    flows = "\n".join(
        f'    <bpmn:sequenceFlow id="f{i}" sourceRef="{a}" targetRef="{b}"/>'
        for i, (a, b) in enumerate(pairwise(ids))
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    id="bench" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:process id="chain" isExecutable="true">
    <bpmn:startEvent id="start"/>
{tasks}
    <bpmn:endEvent id="end"/>
{flows}
  </bpmn:process>
</bpmn:definitions>
"""


class Spiff:
    """SpiffWorkflow on the BPMN chain of `n` manual tasks (`bpmn_chain(n)`)."""

    def __init__(self, n: int = LINEAR_STEPS) -> None:
        from SpiffWorkflow.bpmn.parser.BpmnParser import BpmnParser
        from SpiffWorkflow.bpmn.serializer.workflow import BpmnWorkflowSerializer
        from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
        from SpiffWorkflow.util.task import TaskState

        parser = BpmnParser()
        parser.add_bpmn_str(bpmn_chain(n).encode())
        self.n = n
        self.spec = parser.get_spec("chain")
        self.serializer = BpmnWorkflowSerializer()
        self.workflow_cls = BpmnWorkflow
        self.ready = TaskState.READY
        self.state_bytes = 0

    def job(self) -> int:
        wf = self.workflow_cls(self.spec)
        wf.do_engine_steps()
        steps = 0
        while (task := wf.get_next_task(state=self.ready, manual=True)) is not None:
            task.run()
            wf.do_engine_steps()
            steps += 1
        assert wf.is_completed()
        return steps

    def job_persisting(self) -> int:
        ser = self.serializer
        wf = self.workflow_cls(self.spec)
        wf.do_engine_steps()
        wf = ser.deserialize_json(ser.serialize_json(wf))
        steps = 0
        while (task := wf.get_next_task(state=self.ready, manual=True)) is not None:
            task.run()
            wf.do_engine_steps()
            blob = ser.serialize_json(wf)
            wf = ser.deserialize_json(blob)
            steps += 1
        assert wf.is_completed()
        self.state_bytes = len(blob)
        return steps

    def stored(self, last: int) -> list[str]:
        """The serialized workflow before each of the last `last` manual tasks (as a host
        persisting it after every step would have stored it), from one run of the chain."""
        ser = self.serializer
        wf = self.workflow_cls(self.spec)
        wf.do_engine_steps()
        blobs: list[str] = []
        done = 0
        while (task := wf.get_next_task(state=self.ready, manual=True)) is not None:
            if done >= self.n - last:
                blobs.append(ser.serialize_json(wf))
            task.run()
            wf.do_engine_steps()
            done += 1
        assert wf.is_completed() and done == self.n
        return blobs

    def durable_steps(self, blobs: list[str]) -> None:
        """For each stored workflow: restore it, run its next manual task, serialize it."""
        ser = self.serializer
        for blob in blobs:
            wf = ser.deserialize_json(blob)
            task = wf.get_next_task(state=self.ready, manual=True)
            assert task is not None
            task.run()
            wf.do_engine_steps()
            ser.serialize_json(wf)


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    median_ns: float
    """Per unit (event or step), median over the runs."""
    min_ns: float
    max_ns: float
    runs: list[float]
    """Per unit, each run in order."""

    @classmethod
    def of(cls, runs: list[float]) -> Timing:
        return cls(statistics.median(runs), min(runs), max(runs), runs)


def interleaved(
    jobs: dict[str, tuple[Callable[[], object], int]], runs: int, seconds: float
) -> dict[str, Timing]:
    """Time each job (name -> (job, units it does)) over `runs` runs, the runs of all jobs
    alternating (a, b, c, a, b, c, ...), so that a burst of load on the machine falls on all of
    them alike and their ratios hold. Each run repeats its job for about `seconds`."""
    reps: dict[str, int] = {}
    for name, (job, _) in jobs.items():
        job()  # warm up
        t0 = time.perf_counter_ns()
        job()
        once = max(time.perf_counter_ns() - t0, 1)
        reps[name] = max(1, int(seconds * 1e9 / once))
    per_unit: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(runs):
        for name, (job, units) in jobs.items():
            n = reps[name]
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    job()
                elapsed = time.perf_counter_ns() - t0
            finally:
                gc.enable()
            per_unit[name].append(elapsed / (n * units))
    return {name: Timing.of(r) for name, r in per_unit.items()}


def measure(job: Callable[[], object], units: int) -> Timing:
    """Time `job` (one whole job of `units` events or steps): RUNS runs, each repeating it."""
    return interleaved({"job": (job, units)}, RUNS, RUN_SECONDS)["job"]


def _reference_loop() -> int:
    x = 0
    for i in range(1000):
        x += i
    return x


def _machine() -> str:
    """A yardstick for comparing figures across machines, and how busy this one is."""
    best = min(_time_ns(_reference_loop, 200) / 200 for _ in range(5))  # best of 5, ns per call
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cpus = os.cpu_count() or 1
    line = (
        f"machine: a pure-Python loop of 1,000 additions takes {best / 1000:.1f} µs; "
        f"{cpus} CPUs, 1-minute load average {load:.2f} at start"
    )
    if load >= cpus / 2:
        line += "\n  (the machine is busy: expect slower and noisier figures than on an idle one)"
    return line


def _time_ns(fn: Callable[[], object], reps: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        fn()
    return time.perf_counter_ns() - t0


def _us(ns: float) -> str:
    return f"{ns / 1000:8.2f} µs"


def _range(tm: Timing) -> str:
    return f"{tm.min_ns / 1000:.2f}-{tm.max_ns / 1000:.2f} µs"


def _rate(ns: float) -> str:
    return f"{1e9 / ns:>11,.0f}/s"


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def main() -> None:
    scenarios = [
        scenario("linear, 20 push steps", linear_recipe(), lambda _a, _r: "done"),
        scenario(
            f"simultaneous, {SEQUENCES} sequences", simultaneous_recipe(), lambda _a, _r: "done"
        ),
        scenario(
            f"loop, {LOOP_ROUNDS} rounds",
            loop_recipe(),
            lambda _a, r: "again" if r < LOOP_ROUNDS else "done",
        ),
    ]
    for sc in scenarios:  # the replays end where the driver ended
        assert encode(replay(sc)) == encode(replay_persisting(sc))
        assert replay(sc).status == "completed"

    print(_machine())
    print(
        f"median of {RUNS} runs (min-max in brackets); each run repeats the whole job for "
        f"~{RUN_SECONDS:g} s; gc disabled inside timed loops (collected before each run)"
    )
    print("events are precomputed; the timed loop only replays them through evolve")
    print()
    print(
        f"{'ours':36} {'events':>6} {'events/s (median)':>17} {'µs/event median':>16} "
        f"{'(min-max)':>21}"
    )
    timings: dict[tuple[str, bool], Timing] = {}
    for sc in scenarios:
        n = len(sc.events)
        for persist in (False, True):
            job = (lambda s=sc: replay_persisting(s)) if persist else (lambda s=sc: replay(s))
            tm = measure(job, n)
            timings[sc.name, persist] = tm
            label = f"{sc.name}{' + persist' if persist else ''}"
            print(
                f"{label:36} {n:>6} {_rate(tm.median_ns):>17} {_us(tm.median_ns):>16} "
                f"({_range(tm)})"
            )
    linear = scenarios[0]
    state_size = len(encode(replay(linear)))
    print(f"final state of the linear job: {state_size:,} bytes of JSON")

    print()
    spiff = Spiff()
    import SpiffWorkflow

    version = getattr(SpiffWorkflow, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("spiffworkflow")
    assert spiff.job() == LINEAR_STEPS and spiff.job_persisting() == LINEAR_STEPS
    print(
        f"SpiffWorkflow {version}: start -> {LINEAR_STEPS} manual tasks -> end, "
        "each ready task run, then do_engine_steps"
    )
    sp = measure(spiff.job, LINEAR_STEPS)
    sp_persist = measure(spiff.job_persisting, LINEAR_STEPS)
    print(f"  per step:           {_us(sp.median_ns)} ({_range(sp)})")
    print(f"  per step + persist: {_us(sp_persist.median_ns)} ({_range(sp_persist)})")
    print(f"  final serialized workflow: {spiff.state_bytes:,} bytes of JSON (includes the spec)")

    print()
    n_linear = len(linear.events)

    def per_step(tm: Timing) -> float:  # job time / 20 steps
        return tm.median_ns * n_linear / LINEAR_STEPS

    ours = per_step(timings[linear.name, False])
    ours_persist = per_step(timings[linear.name, True])
    ratio = sp.median_ns / ours
    ratio_persist = sp_persist.median_ns / ours_persist
    print(f"per step of the 20-step chain (job time / {LINEAR_STEPS}, start included):")
    print(f"  {'':10} {'ours':>12} {'spiff':>12} {'ours/spiff':>11} {'speed-up':>9}")
    print(
        f"  {'plain':10} {_us(ours):>12} {_us(sp.median_ns):>12} "
        f"{ours / sp.median_ns:>11.4f} {ratio:>8.1f}x"
    )
    print(
        f"  {'persist':10} {_us(ours_persist):>12} {_us(sp_persist.median_ns):>12} "
        f"{ours_persist / sp_persist.median_ns:>11.4f} {ratio_persist:>8.1f}x"
    )

    print()
    rate = 1e9 / timings[linear.name, False].median_ns
    best = 1e9 / timings[linear.name, False].min_ns
    print("targets (judged on the medians):")
    print(
        f"  linear recipe without encoding >= {TARGET_EVENTS_PER_S:,} events/s: "
        f"{rate:,.0f} events/s (best run {best:,.0f}) -> {_met(rate >= TARGET_EVENTS_PER_S)}"
    )
    print(
        f"  >= {TARGET_RATIO:g}x faster per step than SpiffWorkflow, both persisting: "
        f"{ratio_persist:.1f}x -> {_met(ratio_persist >= TARGET_RATIO)}"
    )


if __name__ == "__main__":
    main()

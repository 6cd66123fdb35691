"""A small fake host that drives the core (the habit of h11's ConnectionPair), and recipe builders.

job = Job(recipe(steps=["s1", "s2"], actions=[push("a", "s1")], transitions=[t("s1", "s2")]))
r = job.start()
r = job.respond("a", "ok", at=500)
"""

from __future__ import annotations

from typing import Any

import msgspec

from generated.command_v1_0 import CancelWork, StartWork
from generated.dryrun_result_v1_2 import TranscriptEntry
from generated.event_v1_0 import (
    ActionCompleted,
    ActionFailed,
    Cancel,
    EventReceived,
    Hold,
    Release,
    Resume,
    Start,
    Tick,
)
from generated.snapshot_v1_0 import Snapshot
from generated.state_v1_5 import ActionRecord, SfcState
from generated.step_result_v1_0 import Complete, Continuation
from generated.step_result_v1_2 import StepResult
from sfc.builder import build
from sfc.evolution import evolve, new_state, next_deadline
from sfc.graph import Graph

# -- recipe builders (wire JSON, PascalCase)


def recipe(
    steps: list[str],
    transitions: list[dict[str, Any]] | None = None,
    actions: list[dict[str, Any]] | None = None,
    branches: list[dict[str, Any]] | None = None,
    initial: str | None = None,
) -> dict[str, Any]:
    first = initial or steps[0]
    doc: dict[str, Any] = {
        "Steps": [{"Name": s, "Initial": s == first} for s in steps],
        "Transitions": transitions or [],
        "Actions": actions or [],
    }
    if branches:
        doc["Branches"] = branches
    return doc


def push(
    name: str, step: str, type_id: str = "t.push", timeout: int = 10, **extra: Any
) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": "push_command",
        "TypeId": type_id,
        "TimeoutSeconds": timeout,
        **extra,
    }


def pull(
    name: str, step: str, type_id: str = "t.pull", timeout: int = 10, **extra: Any
) -> dict[str, Any]:
    return {
        "Name": name,
        "Step": step,
        "Qualifier": "N",
        "Interaction": "pull_event",
        "TypeId": type_id,
        "TimeoutSeconds": timeout,
        **extra,
    }


def t(source: str, target: str, condition: str = "true", priority: int = 0) -> dict[str, Any]:
    return {"Source": source, "Target": target, "Condition": condition, "Priority": priority}


def divergence(name: str, kind: str, *sequences: list[str]) -> dict[str, Any]:
    return {"Name": name, "Type": kind, "Branches": [list(s) for s in sequences]}


def graph_of(doc: dict[str, Any] | bytes) -> Graph:
    data = doc if isinstance(doc, bytes) else msgspec.json.encode(doc)
    result = build(data)
    assert result.graph is not None, result.errors
    return result.graph


# -- the fake host


class Job:
    """One job driven through evolve; keeps the latest state and every result."""

    def __init__(
        self,
        doc: dict[str, Any] | bytes | Graph,
        job_id: str = "job-1",
        snapshot: Snapshot | None = None,
    ) -> None:
        self.graph = doc if isinstance(doc, Graph) else graph_of(doc)
        self.job_id = job_id
        self.snapshot = snapshot
        self.state: SfcState = new_state(self.graph, job_id, "test")
        self.results: list[StepResult] = []
        self.last_seen: dict[str, ActionRecord] = {}
        """Each action's record as the state last held it (a step that is left drops it)."""

    def send(self, event: Any) -> StepResult:
        result = evolve(self.graph, self.state, self.snapshot, event)
        self.state = result.state
        self.results.append(result)
        self.last_seen.update(result.state.actions)
        return result

    def key(self, action: str) -> str:
        return f"{self.job_id}:{action}"

    def rec(self, action: str) -> ActionRecord:
        """The action's record; once its step was left, the record it had when it was dropped."""
        found = self.state.actions.get(action)
        return self.last_seen[action] if found is None else found

    @property
    def decisions(self) -> list[str]:
        """Every decision of the job so far, in order."""
        return [d.decision for r in self.results for d in r.decisions]

    @property
    def next_deadline(self) -> int | None:
        return next_deadline(self.state)

    # events

    def start(self, at: int = 0) -> StepResult:
        return self.send(Start(at=at))

    def respond(self, action: str, outcome: str = "done", at: int = 1, **kw: Any) -> StepResult:
        return self.send(ActionCompleted(at=at, action_key=self.key(action), outcome=outcome, **kw))

    def fail(self, action: str, error: str = "jammed", at: int = 1, **kw: Any) -> StepResult:
        return self.send(ActionFailed(at=at, action_key=self.key(action), error=error, **kw))

    def event(self, type_id: str, outcome: str = "done", at: int = 1, **kw: Any) -> StepResult:
        return self.send(EventReceived(at=at, type_id=type_id, outcome=outcome, **kw))

    def tick(self, at: int, outage_ms: int = 0) -> StepResult:
        return self.send(Tick(at=at, outage_ms=outage_ms))

    def hold(self, at: int) -> StepResult:
        return self.send(Hold(at=at))

    def release(self, at: int) -> StepResult:
        return self.send(Release(at=at))

    def resume(self, at: int, live: list[str] | None = None) -> StepResult:
        if live is not None:
            self.snapshot = Snapshot(live_work=live)
        return self.send(Resume(at=at))

    def cancel(self, at: int, reason: str = "aborted") -> StepResult:
        return self.send(Cancel(at=at, reason=reason))


def starts(result: StepResult) -> list[StartWork]:
    return [c for c in result.commands if isinstance(c, StartWork)]


def cancels(result: StepResult) -> list[CancelWork]:
    return [c for c in result.commands if isinstance(c, CancelWork)]


def summary(result: StepResult) -> list[tuple[str, ...]]:
    """Commands as short tuples: ("push", command id) / ("cancel", command id, reason)."""
    out: list[tuple[str, ...]] = []
    for c in result.commands:
        if isinstance(c, StartWork):
            out.append((c.work, c.command_id))
        else:
            out.append(("cancel", c.command_id, c.reason))
    return out


def continuation_now(entry: TranscriptEntry) -> Continuation:
    """The continuation the current core gives for a frozen entry: the frozen one, but a
    job that ended in a step without actions was frozen with no outcomes, and now reports
    those that led there: the outcome of the event that ended it (docs/formats.md)."""
    frozen = entry.continuation
    outcome = getattr(entry.event, "outcome", None)
    if frozen == Complete(outcomes=[]) and isinstance(outcome, str):
        return Complete(outcomes=[outcome])
    return frozen

"""The waits index of pull events (pure; docs/host.md, "Keys": `sfc:waits:{S}:{typeId}`).

One member per open wait: the job and the wait's resolved selector, encoded as the JSON array
`[job, subject, correlationId]` (null where the selector leaves a field free), scored by the
time the wait began. An event reads the members of its type that began no later than it and
whose selector it matches, and loads only those jobs, oldest wait first.

The commit keeps the index current from the old and the new state (`changes`); recovery
rebuilds the members of a job from its state (`rebuild`), keeping the scores it finds.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from generated.state_v1_5 import SfcState
from sfc.graph import Graph

WaitOp = tuple[str, str, str, int]
"""(type id, 'add' | 'rem' | 'nx', member, score): one change of a waits key. `nx` adds a
member only when it is not there, keeping its score."""

_member_decoder = msgspec.json.Decoder(tuple[str, str | None, str | None])


@dataclass(frozen=True, slots=True)
class Wait:
    """One open wait of a job: its type, resolved selector and member of the index."""

    type_id: str
    job: str
    subject: str | None
    correlation_id: str | None
    action: str
    deadline: int | None

    @property
    def member(self) -> str:
        return member(self.job, self.subject, self.correlation_id)


def member(job: str, subject: str | None, correlation_id: str | None) -> str:
    return msgspec.json.encode([job, subject, correlation_id]).decode()


def parse_member(raw: str | bytes) -> tuple[str, str | None, str | None] | None:
    """(job, subject, correlationId) of a member; None for one this host did not write."""
    try:
        return _member_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def matches(
    wanted: tuple[str, str | None, str | None], subject: str | None, correlation_id: str | None
) -> bool:
    """Whether an event with `subject` and `correlation_id` matches a member's selector:
    each field the selector sets must be equal (docs/recipes.md)."""
    _, sub, corr = wanted
    return (sub is None or sub == subject) and (corr is None or corr == correlation_id)


def open_waits(state: SfcState, graph: Graph) -> dict[tuple[str, str], Wait]:
    """The open waits of a state, by (type id, member)."""
    out: dict[tuple[str, str], Wait] = {}
    if state.status != "running" or not graph.waits_by_type:
        return out  # (a recipe without pull events has no waits: the common case is free)
    job = state.job_id
    for name, rec in state.actions.items():
        if rec.status != "open" or rec.work != "await":
            continue
        spec = graph.actions.get(name)
        if spec is None:
            continue
        wait = Wait(
            type_id=spec.type_id,
            job=job,
            subject=None if spec.subject is None else spec.subject.replace("{jobId}", job),
            correlation_id=None
            if spec.correlation_id is None
            else spec.correlation_id.replace("{jobId}", job),
            action=name,
            deadline=rec.deadline,
        )
        out[(wait.type_id, wait.member)] = wait
    return out


def changes(old: SfcState, new: SfcState, graph: Graph, at: int) -> list[WaitOp]:
    """What the commit writes to the waits index: a wait opened adds its member scored `at`
    (the evaluation's time); a wait closed, timed out or torn down removes it."""
    if not graph.waits_by_type:
        return []  # a recipe without pull events: nothing to compare
    before, after = open_waits(old, graph), open_waits(new, graph)
    ops: list[WaitOp] = [(t, "rem", m, 0) for (t, m) in before if (t, m) not in after]
    ops += [(t, "add", m, at) for (t, m) in after if (t, m) not in before]
    return ops


def rebuild(state: SfcState, graph: Graph) -> list[WaitOp]:
    """The members of every open wait, for recovery: added where missing, scored by when the
    wait began as far as the state tells (its deadline less its timeout)."""
    ops: list[WaitOp] = []
    for (type_id, m), wait in open_waits(state, graph).items():
        spec = graph.actions[wait.action]
        began = 0 if wait.deadline is None else max(0, wait.deadline - spec.timeout_ms)
        ops.append((type_id, "nx", m, began))
    return ops

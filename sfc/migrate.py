"""State migrations: any state format ever written, read into the current one (1.5).

    state = migrate(document_bytes, graph)

Each format has a reader (its generated decoder) and, unless it is the current one, one
migration to the next format; `migrate` reads a document in its own format and chains the
migrations version by version (the habit of SpiffWorkflow's `version_migration.py`). Frozen
documents of every old format are kept as test fixtures and replayed after migrating.

1.3 -> 1.4
----------
- Records of action blocks that can no longer matter are dropped: only those of active steps
  and of the steps of a divergence that has not converged stay. A dropped record of an action
  on a cycle leaves its round in `rounds`, so the next entry counts on from it.
- The decision log is dropped. `endedAt` of an ended job is the time of its last log entry
  (the decision that ended it); None when the log is empty.
- `firstCommand` (the first command of the record's round) is exact when the record is the
  round's first attempt and was not restarted: its command id. Otherwise 1.3 did not keep it,
  and it is 1: the round number alone tells rounds apart, as in 1.3.
- Texts over the 1.4 caps (outcome 256, error 4096, cancel reason 1024 characters) are cut,
  with a mark.

1.4 -> 1.5
----------
- Every record gets `timer` None and the state `dwells` {}: a 1.4 state was written under a
  recipe of v1.0.0 or v1.1.0, whose actions are all N (gating) and whose steps have no
  MinSeconds, so it has no process timer and no record that outlives its step. Nothing else
  changes: the meaning is the same, and the rest of a job replays as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from generated import state_v1_3 as v1_3
from generated import state_v1_4 as v1_4
from generated import state_v1_5 as v1_5
from sfc.codec import state_decoder
from sfc.evolution import (
    ENDED,
    ERROR_LIMIT,
    REASON_LIMIT,
    STATE_FORMAT,
    cut,
)
from sfc.graph import OUTCOME_LIMIT, Graph


class MigrationError(ValueError):
    """A state document that no migration can read: an unknown format, or another recipe."""


class _Format(msgspec.Struct):
    format: Any = None


_format_decoder = msgspec.json.Decoder(_Format)

READERS: dict[str, msgspec.json.Decoder[Any]] = {
    "1.3": msgspec.json.Decoder(v1_3.SfcState),
    "1.4": msgspec.json.Decoder(v1_4.SfcState),
    STATE_FORMAT: state_decoder,
}
"""The decoder of every state format this engine reads."""


def state_format(document: bytes) -> str | None:
    """The `format` of a state document, or None when it has no string format."""
    try:
        found = _format_decoder.decode(document).format
    except msgspec.DecodeError:
        return None
    return found if isinstance(found, str) else None


def read_state(document: bytes) -> v1_5.SfcState:
    """A stored state of the current format, or of 1.4 brought to it (that step needs no
    recipe): how the host reads the states it stores, written before an upgrade or after.
    Raises msgspec.DecodeError, from the decoder of the document's own format."""
    try:
        return state_decoder.decode(document)
    except msgspec.DecodeError:
        if state_format(document) != "1.4":
            raise
    return _from_1_4(READERS["1.4"].decode(document), None)


def migrate(document: bytes, graph: Graph) -> v1_5.SfcState:
    """Read a state of any format ever written and bring it to the current one.

    Raises MigrationError for an unknown format or (for an old format, whose records are
    pruned by the graph) a state of another recipe; msgspec.DecodeError for a document that
    is not a valid state of its own format.
    """
    fmt = state_format(document)
    if fmt is None or fmt not in READERS:
        said = "no format" if fmt is None else f"format {fmt!r}"
        raise MigrationError(
            f"the state has {said}; this engine reads state formats {', '.join(READERS)}"
        )
    state = READERS[fmt].decode(document)
    while fmt != STATE_FORMAT:
        if state.recipe_hash != graph.recipe_hash:
            raise MigrationError(
                f"the state is pinned to recipe {state.recipe_hash[:12]}, not "
                f"{graph.recipe_hash[:12]}; a state of format {fmt} is migrated with its own recipe"
            )
        fmt, step = _MIGRATIONS[fmt]
        state = step(state, graph)
    assert isinstance(state, v1_5.SfcState)
    return state


def _first_command(rec: v1_3.ActionRecord) -> int:
    if rec.attempt == 1 and not rec.restarted and rec.command_id is not None:
        number = rec.command_id.rpartition("#")[2]
        if number.isascii() and number.isdigit() and len(number) <= 19:
            return int(number)
    return 1


def _from_1_3(old: v1_3.SfcState, graph: Graph) -> v1_4.SfcState:
    keep: set[str] = {a.name for step in old.active_steps for a in graph.step_actions.get(step, ())}
    for d in old.divergences:
        keep.update(a.name for a in graph.divergence_actions.get(d.name, ()))
    actions: dict[str, v1_4.ActionRecord] = {}
    rounds: dict[str, int] = {}
    for name, rec in old.actions.items():
        if name in keep or name not in graph.actions:
            actions[name] = v1_4.ActionRecord(
                status=rec.status,
                work=rec.work,
                type_id=rec.type_id,
                attempt=rec.attempt,
                round=rec.round,
                first_command=_first_command(rec),
                deadline=rec.deadline,
                command_id=rec.command_id,
                outcome=None if rec.outcome is None else cut(rec.outcome, OUTCOME_LIMIT),
                error=None if rec.error is None else cut(rec.error, ERROR_LIMIT),
                hold=rec.hold,
                hold_command_id=rec.hold_command_id,
                hold_deadline=rec.hold_deadline,
                restarted=rec.restarted,
            )
        elif name in graph.cyclic:
            rounds[name] = rec.round
    ended_at = old.log[-1].at if old.status in ENDED and old.log else None
    return v1_4.SfcState(
        format="1.4",
        job_id=old.job_id,
        scope=old.scope,
        recipe_hash=old.recipe_hash,
        status=old.status,
        active_steps=old.active_steps,
        divergences=[
            v1_4.DivergenceRecord(name=d.name, sequences=d.sequences, finished=d.finished)
            for d in old.divergences
        ],
        actions=actions,
        rounds=rounds,
        sequence=old.sequence,
        started_at=old.started_at,
        held_at=old.held_at,
        ended_at=ended_at,
        fault=None
        if old.fault is None
        else v1_4.Fault(code=old.fault.code, message=old.fault.message),
        outcomes=old.outcomes,
        cancel_reason=None if old.cancel_reason is None else cut(old.cancel_reason, REASON_LIMIT),
    )


def _from_1_4(old: v1_4.SfcState, graph: Graph | None) -> v1_5.SfcState:
    return v1_5.SfcState(
        format="1.5",
        job_id=old.job_id,
        scope=old.scope,
        recipe_hash=old.recipe_hash,
        status=old.status,
        active_steps=old.active_steps,
        divergences=[
            v1_5.DivergenceRecord(name=d.name, sequences=d.sequences, finished=d.finished)
            for d in old.divergences
        ],
        actions={
            name: v1_5.ActionRecord(
                status=rec.status,
                work=rec.work,
                type_id=rec.type_id,
                attempt=rec.attempt,
                round=rec.round,
                first_command=rec.first_command,
                deadline=rec.deadline,
                timer=None,
                command_id=rec.command_id,
                outcome=rec.outcome,
                error=rec.error,
                hold=rec.hold,
                hold_command_id=rec.hold_command_id,
                hold_deadline=rec.hold_deadline,
                restarted=rec.restarted,
            )
            for name, rec in old.actions.items()
        },
        rounds=old.rounds,
        dwells={},
        sequence=old.sequence,
        started_at=old.started_at,
        held_at=old.held_at,
        ended_at=old.ended_at,
        fault=None
        if old.fault is None
        else v1_5.Fault(code=old.fault.code, message=old.fault.message),
        outcomes=old.outcomes,
        cancel_reason=old.cancel_reason,
    )


_MIGRATIONS: dict[str, tuple[str, Callable[[Any, Graph], Any]]] = {
    "1.3": ("1.4", _from_1_3),
    "1.4": ("1.5", _from_1_4),
}
"""For each old format: the format it migrates to, and how."""

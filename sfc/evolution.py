"""The evolution of the chart: one pure function.

    evolve(graph, state, snapshot, event) -> StepResult(state, continuation, commands, disposition, reason)

Everything that changes a job's state lives in this module. It reads no clock (time arrives
as `event.at`, epoch milliseconds), does no I/O, and draws no random numbers: every command
id is `{actionKey}#{sequence}` with the counter kept in the state, so replaying the same
events on the same state gives byte-identical results.

Theory of operation
-------------------
An evaluation has two phases.

1. The event is *applied* by its handler (see `_HANDLERS` at the end). A handler records an
   outcome on an action block, moves deadlines, starts, holds, releases or cancels the job,
   and says what became of the event: applied, absorbed (a duplicate, a late answer,
   nothing to do) or rejected (it contradicts the chart: another job, an unknown action, a
   response to a wait). Absorbed and rejected events leave the state untouched.
2. The chart then *evolves* until nothing changes (`_Evaluation.evolve`): an active step
   whose action blocks all have an outcome is cleared, the transition it enables fires, the
   node it leads to is entered, and entering a step starts its action blocks. A step without
   actions is done at once, so it is passed through in the same loop. The loop ends when
   every active step waits for something, the job is held, or the job ended.

Action qualifiers (IEC 61131-3, recipe v1.2.0; docs/qualifiers.md)
------------------------------------------------------------------
Only *gating* action blocks (N) decide when a step is done: a step is done when every gating
block has an outcome and its MinSeconds (its *dwell*) have passed. Every other qualifier
starts and withdraws work by the rules of `_RULES`, a table, and its outcome is recorded and
routes nothing. Two kinds of time run: attempt deadlines (`deadline`, `holdDeadline`; an
outage and a hold move them) and process timers (a record's `timer`, the state's `dwells`;
only a hold moves them). A tick handles everything due in time order (`expire`); before a
process timer fires, the chart settles on what came before it, so a step left at exactly
entry+T does not start its D. Before any other event at t (but a cancel), the process timers
and dwells due before t fire first (`_AFTER_TIMERS`): a late tick loses no timer.

Where each rule lives (methods of `_Evaluation` unless marked)
--------------------------------------------------------------
- entering a step or a divergence .......................... `enter`, `enter_step`
- starting an action block (push command or await) ......... `start_action`
- what each qualifier starts and withdraws (the table) ...... `_RULES` (module), `enter_step`,
                                                              `exit_step`, `reset`, `pend`
- process timers: D/SD/DS starts, L/SL limits, dwells ....... `expire`, `fire_timer`
- a step's and a divergence's outcome set .................. `outcomes_of`
- which transition fires ................................... `_select` (module)
- sequences, convergence, ending without a transition ...... `clear`, `fire`
- deadlines that count ..................................... `_due` (module)
- expiry, re-dispatch, attempts ............................ `expire`, `redispatch`
- matching answers to the command they answer .............. `_on_answer` (handler)
- equipment hold and restart (ISA-88) ...................... `send_hold`, `_on_hold_answer`,
                                                              `not_held`, `restart`
- job hold and release ..................................... `_on_hold`, `_on_release`
- ending the job ........................................... `complete_job`, `fault_job`,
                                                              `_on_cancel`, `end_work`
- the propagation limit (dispatches, entries) ............... `start_work`, `enter_step`
- which records the state keeps (format 1.5) ............... `leave`, `start_action`
- bounded texts (outcome, error, cancel reason) ............ `_on_answer`, `_on_event`,
                                                              `_on_cancel`, `cut`

The state keeps a record only while it can still matter: those of active steps, of the
steps of a divergence that has not converged (their outcomes count at the convergence), and
of non-gating actions whose work is open or whose timer is pending (never more than one per
action block). Leaving a step, or a divergence that converged, drops the others; an action on a cycle of
the chart keeps its round in `rounds`, so its next entry counts on. An ended job keeps its
verdict (status, outcomes, fault, cancel reason, endedAt). There is no log: the decisions of
an evaluation come back in `StepResult.decisions`. So the state's size, and evolve's cost,
do not grow with the job's history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from msgspec import UNSET
from msgspec.structs import replace

from generated.command_v1_0 import CancelWork, Command, StartWork, WorkSelector
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
from generated.state_v1_5 import ActionRecord, DivergenceRecord, Fault, SfcState
from generated.step_result_v1_0 import (
    Cancelled,
    Complete,
    Continuation,
    Defer,
    FaultContinuation,
)
from generated.step_result_v1_1 import Decision
from generated.step_result_v1_2 import StepResult
from sfc.graph import (
    DEFAULT_OUTCOME,
    RESERVED_OUTCOMES,
    TRUE,
    ActionSpec,
    Graph,
    TransitionSpec,
)
from sfc.graph import OUTCOME_LIMIT as OUTCOME_LIMIT  # also sfc.evolution's, as before
from sfc.words import duration, when

STATE_FORMAT: Literal["1.5"] = "1.5"
PROPAGATION_LIMIT = 10_000
"""Most dispatches, and most step entries, in one evaluation; beyond it the job faults."""
DEFAULT_MAX_ATTEMPTS = 3
ERROR_LIMIT = 4096
"""Most characters of a reported failure kept in the state; a longer text is cut, with a mark."""
REPORT_LIMIT = 300
"""Most characters of a reported failure that a fault message quotes."""
NO_ERROR_TEXT = "failure reported"
"""The error recorded of a failure reported without a text (a fault message does not quote it)."""
REASON_LIMIT = 1024
"""Most characters of a cancel reason; a longer one is cut, with a mark."""

Disposition = Literal["applied", "absorbed", "rejected"]
FaultCode = Literal["timeout", "error", "no_transition", "propagation_limit"]
ENDED = ("completed", "faulted", "cancelled")

_DEFER = Defer()
_DEFAULT_SNAPSHOT = Snapshot()


class _PropagationLimit(Exception):
    """Raised inside one evaluation when it dispatches or enters too much; caught by evolve."""


@dataclass(frozen=True, slots=True)
class _Rule:
    """What one qualifier does with its action block's work (QUALIFIERS.md, "The table")."""

    entry: Literal["start", "timer", "none"]
    """At the step's entry: start the work, start the timer (the work starts when it runs
    out), or nothing."""
    limited: bool = False
    """The work is withdrawn (reason `limit`, outcome `done`) at start + T."""
    stored: bool = False
    """Survives its step's exit; not started again while open or pending; an R resets it."""
    pulse: bool = False
    """Never withdrawn, not even at the job's end."""
    start_at_exit: bool = False
    """P0: the work starts when the step is left."""
    withdraw_at_exit: bool = False
    """Open work is withdrawn (reason `deactivated`) when the step is left."""
    drop_pending_at_exit: bool = False
    """A timer still running when the step is left is dropped: the work never starts."""


_RULES: dict[str, _Rule] = {
    "N": _Rule(entry="start"),
    "P": _Rule(entry="start", pulse=True),
    "P1": _Rule(entry="start", pulse=True),
    "P0": _Rule(entry="none", pulse=True, start_at_exit=True),
    "L": _Rule(entry="start", limited=True, withdraw_at_exit=True),
    "D": _Rule(entry="timer", withdraw_at_exit=True, drop_pending_at_exit=True),
    "S": _Rule(entry="start", stored=True),
    "SD": _Rule(entry="timer", stored=True),
    "DS": _Rule(entry="timer", stored=True, drop_pending_at_exit=True),
    "SL": _Rule(entry="start", stored=True, limited=True),
}
"""Each qualifier's rule; R is not here: an R block is no work, it resets (`reset`)."""

REASON_LIMIT_REACHED = "limit"
REASON_RESET = "reset"
REASON_DEACTIVATED = "deactivated"
REASON_ENDED = "ended"
STOP_REASONS = frozenset({REASON_LIMIT_REACHED, REASON_RESET, REASON_DEACTIVATED, REASON_ENDED})
"""The withdraw reasons of non-gating work; each means: stop the work, and do not answer it."""


def _label(spec: ActionSpec) -> str:
    """An action block as a plant engineer reads it: `andon (D 10 s)`, `conveyor (S)`."""
    return _labelled(spec.name, spec.qualifier, spec.duration_ms)


@lru_cache(maxsize=4096)
def _labelled(name: str, qualifier: str, duration_ms: int | None) -> str:
    if duration_ms is None:
        return f"{name} ({qualifier})"
    return f"{name} ({qualifier} {duration(duration_ms)})"


def new_state(graph: Graph, job_id: str, scope: str) -> SfcState:
    """The state of a job that has not started; a `start` event enters the initial step."""
    return SfcState(
        format=STATE_FORMAT,
        job_id=job_id,
        scope=scope,
        recipe_hash=graph.recipe_hash,
        status="ready",
        active_steps=[],
        divergences=[],
        actions={},
        sequence=0,
        started_at=None,
        held_at=None,
        fault=None,
        outcomes=[],
        cancel_reason=None,
        rounds={},
        dwells={},
        ended_at=None,
    )


def _due(rec: ActionRecord, held: bool) -> tuple[int | None, int | None]:
    """The deadlines of one action record that count now: (work deadline, hold deadline).

    A hold command runs against its own deadline, also while the job is held. The work's
    deadline is not checked while the job is held (the release moves it by the hold), nor
    while its hold command is unanswered (the answer decides what becomes of the work).
    """
    hold_deadline = rec.hold_deadline if rec.hold == "open" else None
    if held or rec.status != "open" or rec.hold == "open":
        return None, hold_deadline
    return rec.deadline, hold_deadline


def next_deadline(state: SfcState) -> int | None:
    """When the host must send the next tick: the earliest deadline that counts, or None."""
    if state.status != "running":
        return None
    held = state.held_at is not None
    best: int | None = None
    for rec in state.actions.values():
        # `_due`, inlined (the host asks after every evaluation): an open hold command's
        # deadline, else the open work's unless the job is held.
        if rec.hold == "open":
            d = rec.hold_deadline
        elif held or rec.status != "open":
            d = None
        else:
            d = rec.deadline
        if d is not None and (best is None or d < best):
            best = d
        # A process timer waits for the release, like a work deadline.
        if rec.timer is not None and not held and (best is None or rec.timer < best):
            best = rec.timer
    if state.dwells and not held:
        for d in state.dwells.values():
            if best is None or d < best:
                best = d
    return best


def evolve(graph: Graph, state: SfcState, snapshot: Snapshot | None, event: Any) -> StepResult:
    """Apply one event to a job and let the chart evolve. Pure; never raises."""
    snapshot = _DEFAULT_SNAPSHOT if snapshot is None else snapshot
    handler = _HANDLERS.get(type(event))
    if handler is None:
        return _unchanged(state, "rejected", f"not an event: {type(event).__name__}")
    if not isinstance(state, SfcState):
        return StepResult(
            state=state,
            continuation=_DEFER,
            commands=[],
            disposition="rejected",
            reason=f"evolve takes a state of format {STATE_FORMAT}; migrate older ones first "
            "(sfc.migrate)",
            decisions=[],
        )
    if state.recipe_hash != graph.recipe_hash:
        return _unchanged(
            state,
            "rejected",
            f"the state is pinned to recipe {state.recipe_hash[:12]}, not {graph.recipe_hash[:12]}",
        )
    unfit = misfit(graph, state)
    if unfit is not None:
        return _unchanged(state, "rejected", f"the state does not fit the recipe: {unfit}")
    if state.status in ENDED:
        return _unchanged(state, "absorbed", f"the job has already {_ended_words(state)}")

    ev = _Evaluation(graph, state, snapshot, event.at)
    try:
        overdue: list[str] | None = None
        if (
            graph.has_timers  # (no process timer nor dwell can be due otherwise)
            and type(event) in _AFTER_TIMERS
            and state.status == "running"
            and state.held_at is None
            and _overdue(state, event.at)
        ):
            _, overdue = ev.expire(process_only=True)
        disposition, reason = handler(ev, event)
        if disposition != "applied":
            return _unchanged(state, disposition, reason)
        if overdue:
            reason = f"time passed first: {'; '.join(overdue)}; {reason}"
        ev.evolve()
    except _PropagationLimit:
        return _propagation_fault(graph, state, event.at)
    return StepResult(
        state=ev.result_state(),
        continuation=_DEFER if ev.status == "running" else _continuation(ev),  # (ended jobs only)
        commands=ev.commands,
        disposition="applied",
        reason=reason,
        decisions=ev.decisions,
    )


# --------------------------------------------------------------------------- the evaluation


class _Evaluation:
    """The working copy of one job during one evaluation; `result_state()` freezes it again."""

    __slots__ = (
        "actions",
        "active",
        "at",
        "cancel_reason",
        "carried",
        "commands",
        "decisions",
        "dispatched",
        "divergences",
        "dwells",
        "ended_at",
        "entered",
        "fault",
        "g",
        "held_at",
        "job",
        "outcomes",
        "prior",
        "rounds",
        "rounds_copied",
        "sequence",
        "snapshot",
        "started_at",
        "status",
        "worklist",
    )

    def __init__(self, graph: Graph, state: SfcState, snapshot: Snapshot, at: int) -> None:
        self.g = graph
        self.prior = state
        self.at = at
        self.job = state.job_id
        self.snapshot = snapshot
        self.status = state.status
        self.active: dict[str, None] = dict.fromkeys(state.active_steps)
        self.divergences = {d.name: d for d in state.divergences} if state.divergences else {}
        # Shared while empty unless a step has MinSeconds: nothing else adds a dwell.
        self.dwells = dict(state.dwells) if state.dwells or graph.min_ms else state.dwells
        self.actions = dict(state.actions)
        self.rounds = state.rounds  # copied on the first change (it grows with the recipe)
        self.rounds_copied = False
        self.sequence = state.sequence
        self.started_at = state.started_at
        self.held_at = state.held_at
        self.ended_at = state.ended_at
        self.fault = state.fault
        self.outcomes = state.outcomes
        self.cancel_reason = state.cancel_reason
        self.commands: list[Command] = []
        self.decisions: list[Decision] = []
        self.worklist: deque[str] = deque()
        self.carried: dict[str, list[str]] = {}
        """The outcomes that led into each node entered in this evaluation: those of the
        last node with actions before it (a job that ends in a step without actions reports
        them)."""
        self.dispatched = 0
        self.entered = 0

    # -- bookkeeping

    def note(self, decision: str) -> None:
        self.decisions.append(Decision(at=self.at, decision=decision))

    def key(self, action: str) -> str:
        return f"{self.job}:{action}"

    def new_command_id(self, action: str) -> str:
        self.sequence += 1
        return f"{self.job}:{action}#{self.sequence}"

    def max_attempts(self, spec: ActionSpec) -> int:
        if spec.max_attempts is not None:
            return spec.max_attempts
        default = self.snapshot.max_attempts
        return DEFAULT_MAX_ATTEMPTS if default is UNSET else int(default)

    def live_work(self) -> list[str]:
        return [] if self.snapshot.live_work is UNSET else self.snapshot.live_work

    def start_work(self, spec: ActionSpec, rec: ActionRecord, work: str) -> None:
        """Emit the startWork of an action's open command as the record describes it."""
        command_id: str | None
        if work == "hold":
            assert spec.hold is not None and rec.hold_command_id is not None
            type_id, params = spec.hold.type_id, spec.hold.parameters
            command_id, deadline = rec.hold_command_id, rec.hold_deadline
        else:
            command_id, deadline, type_id = rec.command_id, rec.deadline, rec.type_id
            params = (
                spec.restart.parameters
                if work == "restart" and spec.restart is not None
                else spec.parameters
            )
        assert command_id is not None and deadline is not None
        self.dispatched += 1
        if self.dispatched > PROPAGATION_LIMIT:
            raise _PropagationLimit
        self.commands.append(
            StartWork(
                work=work,  # type: ignore[arg-type]
                action_key=f"{self.job}:{spec.name}",  # self.key, inlined
                command_id=command_id,
                type_id=type_id,
                attempt=rec.attempt,
                round=rec.round,
                deadline=deadline,
                parameters=params,
                selector=self.selector(spec) if work == "await" else None,
                # N says nothing (the wire of an N-only recipe is as before 1.5).
                qualifier=UNSET if spec.gating else spec.qualifier,  # type: ignore[arg-type]
                stop_at=UNSET if rec.timer is None else rec.timer,
            )
        )

    def cancel_work(self, action: str, command_id: str | None, reason: str) -> None:
        if command_id is not None:
            self.commands.append(
                CancelWork(action_key=self.key(action), command_id=command_id, reason=reason)
            )

    def selector(self, spec: ActionSpec) -> WorkSelector | None:
        if spec.subject is None and spec.correlation_id is None:
            return None
        return WorkSelector(
            subject=None if spec.subject is None else spec.subject.replace("{jobId}", self.job),
            correlation_id=None
            if spec.correlation_id is None
            else spec.correlation_id.replace("{jobId}", self.job),
        )

    def open_work(self) -> list[tuple[str, ActionRecord]]:
        return [(n, r) for n, r in self.actions.items() if r.status == "open"]

    def withdraw_all(self, reason: str) -> None:
        """cancelWork for every open command and every unanswered hold command, pulses
        (P, P1, P0) aside: they run to their end. The state then forgets every non-gating
        record but open non-pulse work (which shows as withdrawn, as N work does)."""
        for name, rec in self.open_work():
            spec = self.g.actions[name]
            if not spec.gating and _RULES[spec.qualifier].pulse:
                continue
            if rec.hold != "held":  # a held attempt was withdrawn already
                self.cancel_work(name, rec.command_id, reason)
            if rec.hold == "open":
                self.cancel_work(name, rec.hold_command_id, reason)
        self.forget_non_gating(keep_open=True)

    def forget_non_gating(self, keep_open: bool) -> None:
        """At the job's end: drop pending timers, pulses and ended non-gating records."""
        self.dwells = {}
        for name, rec in list(self.actions.items()):
            spec = self.g.actions[name]
            if spec.gating:
                continue
            if keep_open and rec.status == "open" and not _RULES[spec.qualifier].pulse:
                continue
            del self.actions[name]

    def end_work(self, reason: str) -> None:
        """The job completed: every open non-pulse work is withdrawn (`ended`), and the
        state forgets every non-gating record."""
        if not self.g.step_non_gating and not self.dwells:  # N blocks only: nothing to do
            return
        for name, rec in self.open_work():
            spec = self.g.actions[name]
            if not spec.gating and not _RULES[spec.qualifier].pulse:
                self.cancel_work(name, rec.command_id, reason)
                self.note(f"{_label(spec)} withdrawn: the job ended")
        self.forget_non_gating(keep_open=False)

    # -- the evolution

    def evolve(self) -> None:
        """Clear done steps until nothing changes: the fixed-point loop of the chart."""
        if self.held_at is not None:
            return
        worklist = self.worklist
        if not worklist:  # e.g. a release: outcomes recorded while held may be pending
            worklist.extend(self.active)
        while worklist and self.status == "running":
            step = worklist.popleft()
            if step not in self.active:
                continue
            # A step is done when all its gating action blocks are and its dwell passed (a
            # plain loop: all() with a generator costs a frame on the hot path).
            for spec in self.g.step_gating[step]:
                if self.actions[spec.name].status != "done":
                    break
            else:
                if step not in self.dwells:
                    self.clear(step)

    def outcomes_of(self, specs: Iterable[ActionSpec]) -> tuple[list[str], str | None]:
        """The outcome set of some gating action blocks (a non-gating outcome is recorded,
        never routed), in recipe order, and the first failure."""
        outcomes: list[str] = []
        failure: str | None = None
        for spec in specs:
            outcome = self.actions[spec.name].outcome
            if outcome is None:
                continue
            if outcome not in outcomes:
                outcomes.append(outcome)
            if failure is None and outcome in RESERVED_OUTCOMES:
                failure = outcome
        return outcomes, failure

    def clear(self, step: str) -> None:
        """A done step: follow its sequence, or fire one of its transitions."""
        specs = self.g.step_gating[step]
        outcomes, failure = self.outcomes_of(specs)
        if step not in self.g.position:  # not in a sequence
            self.fire(step, self.g.outgoing[step], outcomes, failure)
            return
        pos = self.g.position[step]
        if failure is not None:
            failed = next(s.name for s in specs if self.actions[s.name].outcome == failure)
            self.fault_job(
                failure,
                f"action {failed} in step {step} ended with {failure}"
                f"{self._reported([failed])}; step {step} is in "
                f"a sequence of divergence {pos.divergence}, and a sequence cannot route a failure",
            )
            return
        del self.active[step]
        if step in self.g.step_non_gating:
            self.exit_step(step)
        spec = self.g.divergences[pos.divergence]
        if not pos.last:
            nxt = spec.sequences[pos.sequence][pos.index + 1]
            self.note(f"{step} done, next in sequence: {nxt}")
            self.enter_step(nxt)
            return
        rec = self.divergences[pos.divergence]
        finished = [*rec.finished, pos.sequence]
        self.divergences[pos.divergence] = replace(rec, finished=finished)
        if len(finished) < len(rec.sequences):
            self.note(
                f"{step} done, sequence {pos.sequence + 1} of {spec.name} waits at the convergence"
            )
            return
        d_outcomes, d_failure = self.outcomes_of(self.g.sequence_actions(spec.name, rec.sequences))
        self.note(f"{spec.name} converged with outcomes {_fmt(d_outcomes)}")
        self.fire(spec.name, spec.exits, d_outcomes, d_failure)

    def fire(
        self,
        source: str,
        transitions: tuple[TransitionSpec, ...],
        outcomes: list[str],
        failure: str | None,
    ) -> None:
        """Leave `source` through the first transition its outcomes clear, or end the job."""
        if not transitions and failure is None:
            self.leave(source)
            self.complete_job(source, outcomes)
            return
        t = _select(transitions, outcomes, failure)
        if t is None:
            self.fault_job(
                failure or "no_transition", self._why_stuck(source, transitions, outcomes, failure)
            )
            return
        self.note(f"{source} -> {t.target} fired on {t.condition} (outcomes {_fmt(outcomes)})")
        self.carried[t.target] = outcomes or self.carried.get(source, [])
        self.leave(source)
        self.enter(t.target, outcomes)

    def _why_stuck(
        self,
        source: str,
        transitions: tuple[TransitionSpec, ...],
        outcomes: list[str],
        failure: str | None,
    ) -> str:
        """The fault message when no transition leaves `source`, in a plant engineer's words."""
        options = ", ".join(f"to {x.target} on {x.condition}" for x in transitions)
        if failure is None:
            return (
                f"{source} ended with outcomes {_fmt(outcomes)}; no transition matches ({options})"
            )
        failed = [
            a.name
            for a in self.g.step_actions.get(source, ())
            if a.gating and self.actions[a.name].outcome == failure
        ]
        who = f"{', '.join(failed)} in step {source}" if failed else source
        ended = f"{who} ended with {failure}{self._reported(failed)}"
        if not transitions:
            return f"{ended}, and {source} has no transition to route it"
        return (
            f"{ended}, and no transition of {source} names {failure} "
            f'({options}); the default "true" does not match after a failure'
        )

    def _reported(self, failed: list[str]) -> str:
        """What the equipment reported of the first of the `failed` actions that ended with
        an error, for the fault message (the job response's, which the MES reads): the
        engineer's first question is why."""
        for name in failed:
            error = self.actions[name].error
            if error and error != NO_ERROR_TEXT:
                if len(error) > REPORT_LIMIT:  # (the state keeps more of it)
                    error = error[: REPORT_LIMIT - 4] + " ..."
                return f" (the equipment reported {error!r})"
        return ""

    def leave(self, node: str) -> None:
        """Leave a step, or a divergence that converged: their action records are dropped.

        An action block's record is forgotten; one on a cycle keeps the round it was in. A
        non-gating record whose work is open or whose timer is pending outlives its step.
        """
        self.active.pop(node, None)
        if self.divergences and self.divergences.pop(node, None) is not None:
            specs = self.g.divergence_actions[node]
        else:
            if node in self.g.step_non_gating:
                self.exit_step(node)
            specs = self.g.step_actions.get(node, ())
        actions, cyclic = self.actions, self.g.cyclic
        for spec in specs:
            if not spec.gating:
                rec = actions.get(spec.name)
                if rec is None or rec.status != "done":
                    continue
            rec = actions.pop(spec.name, None)
            if rec is not None and spec.name in cyclic:
                self.set_round(spec.name, rec.round)

    def drop(self, name: str) -> None:
        """Forget one record; an action on a cycle keeps the round it was in."""
        rec = self.actions.pop(name, None)
        if rec is not None and name in self.g.cyclic:
            self.set_round(name, rec.round)

    def live(self, step: str) -> bool:
        """Whether a step's records still count: it is active, or in a divergence that has
        not converged."""
        if step in self.active:
            return True
        pos = self.g.position.get(step)
        return pos is not None and pos.divergence in self.divergences

    def exit_step(self, step: str) -> None:
        """A step with non-gating blocks was left (taken off the active steps): P0 starts, L
        and D are withdrawn, a D or DS timer still running is dropped (QUALIFIERS.md, "exit")."""
        for spec in self.g.step_non_gating[step]:
            rule = _RULES[spec.qualifier]
            if rule.start_at_exit:
                self.start_action(spec)
                continue
            rec = self.actions.get(spec.name)
            if rec is None:
                continue
            if rec.status == "pending" and rule.drop_pending_at_exit:
                self.note(f"{_label(spec)} not started: {step} was left before its time")
                self.drop(spec.name)
            elif rec.status == "open" and rule.withdraw_at_exit:
                self.cancel_work(spec.name, rec.command_id, REASON_DEACTIVATED)
                self.note(f"{_label(spec)} withdrawn: {step} was left")
                self.drop(spec.name)

    def set_round(self, name: str, value: int | None) -> None:
        if not self.rounds_copied:
            self.rounds = dict(self.rounds)
            self.rounds_copied = True
        if value is None:
            self.rounds.pop(name, None)
        else:
            self.rounds[name] = value

    def enter(self, node: str, outcomes: list[str]) -> None:
        """Enter a step, or a divergence with the outcomes of the node that led into it.

        A failure among those outcomes was routed by the transition that fired, so the
        selection transitions see the outcomes as they are, the default included.
        """
        if node not in self.g.divergences:
            self.enter_step(node)
            return
        spec = self.g.divergences[node]
        if spec.kind == "simultaneous":
            taken = list(range(len(spec.sequences)))
            self.note(f"{node}: all {len(taken)} sequences start")
        else:
            t = _select(spec.entries, outcomes, None)
            if t is None:
                self.fault_job(
                    "no_transition",
                    f"selection divergence {node}: no selection transition matches "
                    f"outcomes {_fmt(outcomes)}",
                )
                return
            taken = [spec.entry_sequence[spec.entries.index(t)]]
            self.note(f"{node}: selection on {t.condition} takes the sequence of {t.target}")
        self.divergences[node] = DivergenceRecord(name=node, sequences=taken, finished=[])
        for i in taken:
            self.enter_step(spec.sequences[i][0])

    def enter_step(self, step: str) -> None:
        self.entered += 1
        if self.entered > PROPAGATION_LIMIT:
            raise _PropagationLimit
        self.active[step] = None
        if not self.g.uses_qualifiers:  # N blocks only: no R, no non-gating block, no dwell
            specs = self.g.step_actions[step]
            for spec in specs:
                self.start_action(spec)
            if not specs:  # done at once; a step with actions waits for their outcomes
                self.worklist.append(step)
            return
        resets = self.g.resets.get(step)
        if resets:
            for name in resets:
                self.reset(name, step)
        waits = False
        for spec in self.g.step_actions[step]:
            if spec.gating:
                waits = True
                self.start_action(spec)
            else:
                self.enter_qualified(spec)
        dwell = self.g.min_ms.get(step)
        if dwell:
            self.dwells[step] = self.at + dwell
        elif not waits:  # done at once; a step with gating actions waits for their outcomes
            self.worklist.append(step)

    def enter_qualified(self, spec: ActionSpec) -> None:
        """A non-gating action block at its step's entry, by its qualifier's rule."""
        rule = _RULES[spec.qualifier]
        rec = self.actions.get(spec.name)
        if rule.stored and rec is not None and rec.status != "done":
            running = "its timer runs" if rec.status == "pending" else "its work is open"
            self.note(
                f"{_label(spec)} not started again: {running} since round {rec.round} "
                "(a stored action starts again once it has ended)"
            )
            return
        if rule.entry == "start":
            self.start_action(spec)
        elif rule.entry == "timer":
            self.pend(spec)

    def next_round(self, spec: ActionSpec) -> int:
        prev = self.actions.get(spec.name)
        if prev is not None:
            return prev.round + 1
        last_round = self.rounds.get(spec.name, 0)
        if last_round:
            self.set_round(spec.name, None)  # the record carries it from now on
        return last_round + 1

    def pend(self, spec: ActionSpec) -> None:
        """A D, SD or DS block: its work starts when its timer runs out (`fire_timer`)."""
        assert spec.duration_ms is not None
        self.actions[spec.name] = ActionRecord(
            status="pending",
            work="push" if spec.push else "await",
            type_id=spec.type_id,
            attempt=0,
            round=self.next_round(spec),
            first_command=self.sequence + 1,  # any command issued before is an earlier round's
            deadline=None,
            timer=self.at + spec.duration_ms,
            command_id=None,
            outcome=None,
            error=None,
            hold=None,
            hold_command_id=None,
            hold_deadline=None,
            restarted=False,
        )

    def reset(self, name: str, step: str) -> None:
        """An R block at its step's entry: withdraw the stored action's open work (`reset`),
        or drop its pending timer."""
        spec = self.g.actions[name]
        rec = self.actions.get(name)
        if rec is None or rec.status == "done":
            self.note(f"{step}: R {name}: {_label(spec)} is not running; nothing to reset")
            return
        if rec.status == "open":
            self.cancel_work(name, rec.command_id, REASON_RESET)
            self.note(f"{step}: R {name}: {_label(spec)} withdrawn")
        else:
            self.note(f"{step}: R {name}: the timer of {_label(spec)} dropped; it never starts")
        self.drop(name)

    def start_action(self, spec: ActionSpec) -> None:
        """A fresh record in a new round, and the command that starts the action block."""
        prev = self.actions.get(spec.name)
        if prev is not None:
            last_round = prev.round
        else:
            last_round = self.rounds.get(spec.name, 0)
            if last_round:
                self.set_round(spec.name, None)  # the record carries it from now on
        work: Literal["push", "await"] = "push" if spec.push else "await"
        self.sequence += 1  # new_command_id, inlined: every step entry runs this
        command_id = f"{self.job}:{spec.name}#{self.sequence}"
        limit = (
            self.at + spec.duration_ms
            if not spec.gating and spec.duration_ms is not None and _RULES[spec.qualifier].limited
            else None
        )
        rec = ActionRecord(
            status="open",
            work=work,
            type_id=spec.type_id,
            attempt=1,
            round=last_round + 1,
            first_command=self.sequence,
            deadline=self.at + spec.timeout_ms,
            timer=limit,
            command_id=command_id,
            outcome=None,
            error=None,
            hold=None,
            hold_command_id=None,
            hold_deadline=None,
            restarted=False,
        )
        self.actions[spec.name] = rec
        self.start_work(spec, rec, work)

    # -- outcomes, deadlines, attempts

    def record_outcome(self, name: str, outcome: str, error: str | None = None) -> None:
        """An action block has its outcome: an answer, an event, or a timeout.

        A non-gating outcome is recorded and routes nothing; once its step no longer counts,
        the record is dropped at once (the decision keeps what it was).
        """
        rec = self.actions[name]
        spec = self.g.actions[name]
        if not spec.gating:
            self.actions[name] = replace(
                rec, status="done", outcome=outcome, error=error, deadline=None, timer=None
            )
            if not self.live(spec.step):
                self.drop(name)
            return
        self.worklist.append(spec.step)
        if rec.hold == "open":  # the work answered before its hold did
            self.cancel_work(name, rec.hold_command_id, "superseded")
        self.actions[name] = replace(
            rec,
            status="done",
            outcome=outcome,
            error=error,
            deadline=None,
            hold=None if rec.hold == "open" else rec.hold,
            hold_deadline=None,
        )

    def time_out(self, name: str, why: str) -> None:
        rec = self.actions[name]
        self.cancel_work(name, rec.command_id, "timeout")
        self.record_outcome(name, "timeout")
        self.note(f"{name} timed out: {why}")

    def redispatch(self, spec: ActionSpec, rec: ActionRecord, why: str) -> str:
        """Another attempt of a push command, or `timeout` when none is left; says which."""
        limit = self.max_attempts(spec)
        if rec.attempt >= limit:
            self.time_out(spec.name, f"{why}, and all {limit} attempts are used")
            return f"{spec.name} timed out after {limit} attempt(s)"
        self.cancel_work(spec.name, rec.command_id, "redispatch")
        rec = self.actions[spec.name] = replace(
            self.actions[spec.name],
            attempt=rec.attempt + 1,
            command_id=self.new_command_id(spec.name),
            deadline=self.at + spec.timeout_ms,
            hold=None,  # a hold answered late belongs to the withdrawn attempt
            hold_command_id=None,
        )
        self.note(f"{spec.name} re-dispatched: {why} (attempt {rec.attempt} of {limit})")
        self.start_work(spec, rec, "push")
        return f"{spec.name} sent again (attempt {rec.attempt} of {limit})"

    def shift_deadlines(self, gap: int, work: bool, holds: bool) -> list[str]:
        """Move open deadlines by `gap`; says which moved: `tighten to 90.000s`."""
        moved: list[str] = []
        for name, rec in self.open_work():
            changes: dict[str, int] = {}
            if work and rec.deadline is not None:
                changes["deadline"] = rec.deadline + gap
                moved.append(f"{name} to {when(rec.deadline + gap)}")
            if holds and rec.hold == "open" and rec.hold_deadline is not None:
                changes["hold_deadline"] = rec.hold_deadline + gap
                moved.append(f"the hold of {name} to {when(rec.hold_deadline + gap)}")
            if changes:
                self.actions[name] = replace(self.actions[name], **changes)
        return moved

    def shift_timers(self, gap: int) -> list[str]:
        """Move every process timer and dwell by `gap` (a hold's length; an outage's never);
        says which moved: `andon (D 10 s) to 15.000s`."""
        moved: list[str] = []
        for name, rec in self.actions.items():
            if rec.timer is not None:
                self.actions[name] = replace(rec, timer=rec.timer + gap)
                moved.append(f"{_label(self.g.actions[name])} to {when(rec.timer + gap)}")
        for step, due in self.dwells.items():
            self.dwells[step] = due + gap
            moved.append(f"the dwell of {step} to {when(due + gap)}")
        return moved

    def due_now(self) -> list[tuple[int, int, int, str]]:
        """Everything due at or before now, in the order it fires: by time; at one time,
        deadlines and dwells before process timers (an answer or a timeout that ends a step
        at entry+T wins over its D); then in the recipe's order of action blocks (dwells
        after them, in the order their steps were entered). Items: (time, 0 deadline or
        dwell / 1 timer, order, name)."""
        held = self.held_at is not None
        at = self.at
        due: list[tuple[int, int, int, str]] = []
        for name, rec in self.actions.items():
            work_deadline, hold_deadline = _due(rec, held)
            if hold_deadline is not None and hold_deadline <= at:
                due.append((hold_deadline, 0, self.g.actions[name].index, name))
            elif work_deadline is not None and work_deadline <= at:
                due.append((work_deadline, 0, self.g.actions[name].index, name))
            if rec.timer is not None and not held and rec.timer <= at:
                due.append((rec.timer, 1, self.g.actions[name].index, name))
        if self.dwells and not held:
            blocks = len(self.g.actions)
            for i, (step, when_due) in enumerate(self.dwells.items()):
                if when_due <= at:
                    due.append((when_due, 0, blocks + i, step))
        due.sort()
        return due

    def expire(self, process_only: bool = False) -> tuple[list[str], list[str]]:
        """Handle every deadline, timer and dwell at or before now; says what became of each
        (deadlines, then timers and dwells). `process_only`: only the process timers and
        dwells due *before* now (an event is about to be applied at now)."""
        held = self.held_at is not None
        expired: list[str] = []
        timers: list[str] = []
        blocks = len(self.g.actions)
        for due, kind, order, name in self.due_now():
            if self.status != "running":
                break
            if process_only and (due >= self.at or (kind == 0 and order < blocks)):
                continue  # attempt deadlines keep their tick; an event at T wins over T
            if kind == 1:
                # The chart first settles on what came before (a step left earlier does not
                # start its D); all that came before put its steps on the worklist.
                if self.worklist:
                    self.evolve()
                if self.status == "running":
                    timers.extend(self.fire_timer(name))
                continue
            if order >= blocks:  # a dwell
                if self.dwells.pop(name, None) is not None:
                    self.worklist.append(name)
                    self.note(f"{name}: its MinSeconds passed")
                    timers.append(f"the dwell of {name} passed")
                continue
            rec = self.actions.get(name)
            if rec is None or rec.status != "open":
                continue  # an earlier item of this tick ended it
            _, hold_deadline = _due(rec, held)
            if hold_deadline is not None and hold_deadline <= self.at:
                rec = self.not_held(name, "the hold was not answered in time")
                expired.append(f"the hold of {name} got no answer, the work runs on")
            deadline, _ = _due(rec, held)
            if deadline is not None and deadline <= self.at:
                spec = self.g.actions[name]
                if rec.work == "push":
                    expired.append(self.redispatch(spec, rec, "deadline passed"))
                elif rec.work == "restart":
                    self.time_out(name, "the restart was not answered in time")
                    expired.append(f"the restart of {name} timed out")
                else:
                    self.time_out(name, f"no {spec.type_id} event arrived in time")
                    expired.append(f"{name} timed out waiting for {spec.type_id}")
        if process_only and self.worklist:
            self.evolve()  # the chart as it stood just before the event
        return expired, timers

    def fire_timer(self, name: str) -> list[str]:
        """A process timer ran out: a pending D, SD or DS work starts, or an open L or SL
        work is withdrawn at its limit (outcome `done`)."""
        rec = self.actions.get(name)
        if rec is None or rec.timer is None or rec.timer > self.at:
            return []  # reset, withdrawn or dropped earlier in this tick
        spec = self.g.actions[name]
        if rec.status == "pending":
            rec = self.actions[name] = replace(
                rec,
                status="open",
                attempt=1,
                command_id=self.new_command_id(name),
                first_command=self.sequence,
                deadline=self.at + spec.timeout_ms,
                timer=None,
            )
            self.note(f"{_label(spec)} started: its time passed")
            self.start_work(spec, rec, rec.work)
            return [f"{_label(spec)} started"]
        self.cancel_work(name, rec.command_id, REASON_LIMIT_REACHED)
        self.record_outcome(name, DEFAULT_OUTCOME)
        self.note(f"{_label(spec)} withdrawn at its limit; it ended {DEFAULT_OUTCOME}")
        return [f"{_label(spec)} withdrawn at its limit"]

    # -- equipment hold

    def send_hold(self, spec: ActionSpec, rec: ActionRecord) -> None:
        assert spec.hold is not None
        rec = self.actions[spec.name] = replace(
            self.actions[spec.name],
            hold="open",
            hold_command_id=f"{self.new_command_id(spec.name)}:hold",
            hold_deadline=self.at + spec.hold.timeout_ms,
        )
        self.note(f"{spec.name}: hold command sent to the equipment")
        self.start_work(spec, rec, "hold")

    def not_held(self, name: str, why: str) -> ActionRecord:
        """The equipment could not hold the work: it runs to its end as without hold logic.

        If the job was released before this was known, the work is issued again now with its
        command id (the host sends each command id once); otherwise the release does it.
        """
        rec = self.actions[name] = replace(self.actions[name], hold="notHeld", hold_deadline=None)
        self.note(f"{name}: {why}; the work runs on")
        if self.held_at is None and rec.deadline is not None and rec.deadline > self.at:
            # An expired deadline needs no re-issue: the work's expiry handles it.
            self.start_work(self.g.actions[name], rec, rec.work)
        return rec

    def restart(self, spec: ActionSpec) -> None:
        """The equipment held the work: send its restart command (no attempt is used)."""
        assert spec.restart is not None
        rec = self.actions[spec.name] = replace(
            self.actions[spec.name],
            work="restart",
            type_id=spec.restart.type_id,
            command_id=self.new_command_id(spec.name),
            deadline=self.at + spec.restart.timeout_ms,
            hold=None,
            hold_command_id=None,
            hold_deadline=None,
            restarted=True,
        )
        self.note(f"{spec.name}: restart command sent to the equipment")
        self.start_work(spec, rec, "restart")

    # -- ending the job

    def complete_job(self, last: str, outcomes: list[str]) -> None:
        """The job's outcomes are those of its last node, or when it has no actions, of the
        last node with actions on the way to it (what decided how the job ended)."""
        self.end_work(REASON_ENDED)
        self.status = "completed"
        self.ended_at = self.at
        self.outcomes = outcomes or self.carried.get(last, [])
        self.note(f"job completed after {last} with outcomes {_fmt(self.outcomes)}")

    def fault_job(self, code: str, message: str) -> None:
        self.withdraw_all("teardown")
        self.status = "faulted"
        self.ended_at = self.at
        self.fault = Fault(code=code, message=message)  # type: ignore[arg-type]
        self.note(f"job faulted ({code}): {message}")

    # -- the result

    def result_state(self) -> SfcState:
        # A copy of the prior state with what may have changed: its job, scope and recipe
        # never do. (msgspec builds a struct from 16 keywords several times slower than from
        # 15 or fewer.)
        return replace(
            self.prior,
            format=STATE_FORMAT,
            status=self.status,
            active_steps=list(self.active),
            divergences=list(self.divergences.values()),
            actions=self.actions,
            rounds=self.rounds,
            dwells=self.dwells,
            sequence=self.sequence,
            started_at=self.started_at,
            held_at=self.held_at,
            ended_at=self.ended_at,
            fault=self.fault,
            outcomes=self.outcomes,
            cancel_reason=self.cancel_reason,
        )


def _select(
    transitions: tuple[TransitionSpec, ...], outcomes: list[str], failure: str | None
) -> TransitionSpec | None:
    """The first transition, by priority, whose condition is among the outcomes.

    After a failure (an action ended with timeout or error) only a transition that names a
    failure among the outcomes matches; neither "true" nor the outcome of another action
    does, so a recipe never silently goes on. The transition that fires has routed it.
    """
    for t in transitions:
        if failure is not None:
            if t.condition in RESERVED_OUTCOMES and t.condition in outcomes:
                return t
        elif t.condition == TRUE or t.condition in outcomes:
            return t
    return None


# --------------------------------------------------------------------------- event handlers

Handled = tuple[Disposition, str]


def _on_start(ev: _Evaluation, event: Start) -> Handled:
    if ev.status != "ready":
        return "absorbed", "the job has already started"
    ev.status = "running"
    ev.started_at = event.at
    ev.note(f"job started, entering {ev.g.initial}")
    ev.enter(ev.g.initial, [])
    return "applied", f"job started in step {ev.g.initial}"


def _on_tick(ev: _Evaluation, event: Tick) -> Handled:
    if ev.status != "running":
        return "absorbed", "the job has not started"
    held = ev.held_at is not None
    outage = 0 if event.outage_ms is UNSET else int(event.outage_ms)
    # While held, work deadlines wait for the release, which moves them by the whole hold.
    moved = ev.shift_deadlines(outage, work=not held, holds=True) if outage > 0 else []
    if not moved:
        outage = 0  # nothing was open to move
    if outage > 0:
        ev.note(f"platform outage of {duration(outage)}: open deadlines moved by it")
    expired, timers = ev.expire()
    if not expired and not timers and outage == 0:
        return "absorbed", "the job is held" if held else "nothing is due"
    parts = [f"deadline passed: {'; '.join(expired)}"] if expired else []
    if timers:
        parts.append(f"time passed: {'; '.join(timers)}")
    if outage:
        parts.insert(0, f"deadlines moved by an outage of {duration(outage)}: {', '.join(moved)}")
    return "applied", "; ".join(parts)


def _on_answer(ev: _Evaluation, event: ActionCompleted | ActionFailed) -> Handled:
    """A response from the equipment, matched by action key, command id and round.

    A command id `{key}#{n}[:hold]` is rejected when n is above the state's counter (never
    issued) or the key is not the answer's; it is absorbed when its action has no open
    record (its step was left, or the action is done) or n lies below the first command of
    the open round (an earlier round's); otherwise it answers the open round, whatever its
    attempt. A `round` below the record's is absorbed, one above it rejected.
    """
    key = event.action_key
    prefix = f"{ev.job}:"
    if not key.startswith(prefix):
        return "rejected", f"action key {key} belongs to another job"
    name = key[len(prefix) :]
    spec = ev.g.actions.get(name)
    if spec is None:
        return "rejected", f"the recipe has no action {name}"
    if not spec.push:
        return "rejected", f"{name} waits for an event; it sent no command to answer"
    error: str | None
    if isinstance(event, ActionCompleted):  # (an instance of the type itself is told fastest)
        outcome = DEFAULT_OUTCOME if event.outcome is UNSET else event.outcome
        error = None
        if len(outcome) > OUTCOME_LIMIT:
            return "rejected", _too_long(name, outcome)
    else:
        outcome = "error"
        error = cut(event.error if event.error is not UNSET else "", ERROR_LIMIT)
        error = error or NO_ERROR_TEXT
    command_id = None if event.command_id is UNSET else event.command_id
    number = None if command_id is None else _command_number(command_id, key)
    if command_id is not None and (number is None or number > ev.sequence):
        mine = "" if number is not None else f" (its command ids are {key}#N)"
        return "rejected", f"command id {command_id} was never issued for {name}{mine}"
    rec = ev.actions.get(name)
    if rec is None:
        if ev.status == "ready":
            return "rejected", f"no command was issued for {name}: the job has not started"
        if not spec.gating:  # it outlives its step while open: it ended or was withdrawn
            return "absorbed", (
                f"late answer to {_label(spec)}: none of its work is open (it ended, or "
                "was withdrawn: reset, limit or its step left)"
            )
        return "absorbed", (
            f"late answer to {name}: its step {spec.step} is not active "
            "(it was left, or not entered again yet)"
        )
    if event.round is not UNSET:
        if event.round < rec.round:
            return "absorbed", f"answer from round {event.round}; {name} is in round {rec.round}"
        if event.round > rec.round:
            return (
                "rejected",
                f"answer from round {event.round}, but {name} is in round {rec.round}",
            )
    if number is not None and number < rec.first_command:
        return "absorbed", (
            f"answer to {_short(command_id, ev.job)}, a command of an earlier round of {name} "
            f"(round {rec.round} began with #{rec.first_command})"
        )

    if command_id is not None and command_id.endswith(":hold"):
        return _on_hold_answer(ev, spec, rec, command_id, outcome)
    if rec.status != "open":  # done, or pending (one test for the common case, open)
        if rec.status == "done":
            return "absorbed", f"{name} already has outcome {rec.outcome}: duplicate or late answer"
        return (
            "absorbed",
            f"{_label(spec)} has not started: its timer runs until {when(rec.timer or 0)}",
        )
    if rec.hold == "held":
        return "absorbed", f"the attempt of {name} was withdrawn when the equipment held it"
    if rec.work == "restart" and command_id is not None and command_id != rec.command_id:
        return "absorbed", f"answer to the held work of {name}; its restart is open"
    ev.record_outcome(name, outcome, error)
    said = f"{name} answered {outcome}" if error is None else f"{name} failed: {error}"
    if not spec.gating:
        said = f"{said} ({spec.qualifier}: recorded, not waited for)"
    ev.note(said)
    return "applied", said if ev.held_at is None else f"{said} (recorded; the job is held)"


def _on_hold_answer(
    ev: _Evaluation, spec: ActionSpec, rec: ActionRecord, command_id: str, outcome: str
) -> Handled:
    name = spec.name
    if (
        command_id != rec.hold_command_id
        or rec.status == "done"
        or rec.hold
        not in (
            "open",
            "notHeld",
        )
    ):
        return "absorbed", f"answer to a hold of {name} that is no longer open"
    if outcome == "held":
        ev.cancel_work(name, rec.command_id, "held")
        ev.actions[name] = replace(ev.actions[name], hold="held", deadline=None, hold_deadline=None)
        ev.note(f"{name}: the equipment held the work")
        if ev.held_at is None:  # released before the answer: restart at once
            ev.restart(spec)
        return "applied", f"the equipment held {name}"
    if rec.hold == "notHeld":
        return "absorbed", f"the hold of {name} already counts as not held"
    ev.not_held(name, f"the equipment could not hold the work ({outcome})")
    return "applied", f"the equipment could not hold {name}; the work runs on"


def _on_event(ev: _Evaluation, event: EventReceived) -> Handled:
    """An event completes the open wait whose type and selector it matches.

    Waits are tried in recipe order; only open records are looked at, so the cost is that
    of the state, not of the recipe.
    """
    if ev.status != "running":
        return "absorbed", "the job has not started"
    if len(event.outcome) > OUTCOME_LIMIT:
        return "rejected", _too_long(event.type_id, event.outcome)
    subject = None if event.subject is UNSET else event.subject
    correlation = None if event.correlation_id is UNSET else event.correlation_id
    waits = sorted(
        (spec.index, spec)
        for name, rec in ev.actions.items()
        if rec.status == "open" and rec.work == "await"
        for spec in (ev.g.actions[name],)
        if spec.type_id == event.type_id
    )
    mismatches: list[str] = []
    for _, spec in waits:
        sel = ev.selector(spec)
        if sel is not None:
            wrong = [
                f"expects {field} {want}, the event has {_said(got)}"
                for field, want, got in (
                    ("subject", sel.subject, subject),
                    ("correlationId", sel.correlation_id, correlation),
                )
                if want is not None and want != got
            ]
            if wrong:
                mismatches.append(f"{spec.name} {' and '.join(wrong)}")
                continue
        ev.record_outcome(spec.name, event.outcome)
        ev.note(f"{spec.name} received {event.type_id} with outcome {event.outcome}")
        return "applied", f"{spec.name} received {event.type_id}: {event.outcome}"
    if mismatches:
        # The classic stuck job: the type is awaited, but the selector does not match.
        return "absorbed", (
            f"no open wait for {event.type_id} matches the event's selector: "
            + "; ".join(mismatches)
        )
    return "absorbed", f"no open wait matches {event.type_id}"


def _said(value: str | None) -> str:
    return "none" if value is None else value


def _on_resume(ev: _Evaluation, event: Resume) -> Handled:
    """Re-issue open work that the host does not know as live."""
    if ev.status != "running":
        return "absorbed", "the job has not started"
    if ev.held_at is not None:
        return "absorbed", "the job is held; the release re-issues its work"
    live = set(ev.live_work())
    reissued = 0
    for name, rec in ev.open_work():
        if rec.command_id in live or rec.hold == "open":
            continue
        spec = ev.g.actions[name]
        reissued += 1
        if rec.work == "push":
            ev.redispatch(spec, rec, "resumed without live work")
        else:  # a wait or a restart is announced again under its command id
            ev.note(f"{name}: {rec.work} announced again")
            ev.start_work(spec, rec, rec.work)
    if reissued == 0:
        return "absorbed", "all open work is live"
    return "applied", f"re-issued {reissued} open action(s)"


def _on_cancel(ev: _Evaluation, event: Cancel) -> Handled:
    reason = cut(event.reason, REASON_LIMIT)
    ev.withdraw_all(reason)
    ev.held_at = None
    ev.status = "cancelled"
    ev.ended_at = ev.at
    ev.cancel_reason = reason
    said = f"job cancelled: {reason}" if reason else "job cancelled"
    ev.note(said)
    return "applied", said


def _on_hold(ev: _Evaluation, event: Hold) -> Handled:
    if ev.status != "running":
        return "absorbed", "the job has not started"
    if ev.held_at is not None:
        return "absorbed", "the job is already held"
    ev.held_at = event.at
    ev.note("job held")
    holds = 0
    for name, rec in ev.open_work():
        spec = ev.g.actions[name]
        if spec.hold is not None and rec.work in ("push", "restart") and rec.hold != "open":
            ev.send_hold(spec, rec)
            holds += 1
    return "applied", "job held" + (f"; {holds} hold command(s) sent" if holds else "")


def _on_release(ev: _Evaluation, event: Release) -> Handled:
    """End the hold: deadlines move by its length, open pushes are issued again."""
    if ev.held_at is None:
        return "absorbed", "the job is not held"
    gap = max(0, event.at - ev.held_at)
    ev.held_at = None
    ev.shift_deadlines(gap, work=True, holds=False)
    timers = ev.shift_timers(gap) if gap > 0 else []
    said = f"job released after {duration(gap)}"
    if timers:
        said += f"; process timers moved: {', '.join(timers)}"
    ev.note(said)
    for name, rec in ev.open_work():
        spec = ev.g.actions[name]
        if rec.hold == "held":
            ev.restart(spec)
        elif rec.hold == "open":
            pass  # the hold's answer decides: `held` restarts, anything else re-issues the work
        elif rec.work in ("push", "restart"):
            ev.start_work(spec, rec, rec.work)
    return "applied", said


def _overdue(state: SfcState, at: int) -> bool:
    """Whether a process timer or dwell of the state is due before `at`."""
    for rec in state.actions.values():
        if rec.timer is not None and rec.timer < at:
            return True
    return any(d < at for d in state.dwells.values()) if state.dwells else False


_AFTER_TIMERS = (ActionCompleted, ActionFailed, EventReceived, Hold, Resume)
"""Events before which the process timers and dwells due earlier fire, in plant time: a
tick that came late (a slow sweep, a worker that died) does not let an answer overtake a
timer that ran out before it. A tick handles its own; a cancel starts nothing."""

_HANDLERS: dict[type, Any] = {
    Start: _on_start,
    Tick: _on_tick,
    ActionCompleted: _on_answer,
    ActionFailed: _on_answer,
    EventReceived: _on_event,
    Resume: _on_resume,
    Cancel: _on_cancel,
    Hold: _on_hold,
    Release: _on_release,
}


# --------------------------------------------------------------------------- helpers


def _command_number(command_id: str, action_key: str) -> int | None:
    """The sequence number n of `{action_key}#{n}[:hold]`, or None when it is not of that form."""
    head, sep, number = command_id.removesuffix(":hold").rpartition("#")
    # ASCII digits only: `str.isdigit` alone takes "²" (which `int` refuses) and other
    # scripts' digits, which no command id the host wrote has.
    if (
        head != action_key
        or sep != "#"
        or not number.isascii()
        or not number.isdigit()
        or len(number) > 19
    ):
        return None
    n = int(number)
    return n if n > 0 else None


def _short(command_id: str | None, job: str) -> str:
    return "" if command_id is None else command_id.removeprefix(f"{job}:")


def cut(text: str, limit: int) -> str:
    """`text`, or its first characters and a mark saying how long it was, in `limit` characters."""
    if len(text) <= limit:
        return text
    mark = f" ...[cut: {len(text)} characters in all]"
    return text[: limit - len(mark)] + mark


def _too_long(what: str, outcome: str) -> str:
    return (
        f"the outcome for {what} has {len(outcome)} characters; "
        f"an outcome has at most {OUTCOME_LIMIT}"
    )


def _fmt(outcomes: list[str]) -> str:
    return f"{{{', '.join(outcomes)}}}"


def _ended_words(state: SfcState) -> str:
    if state.status == "completed":
        return "completed"
    if state.status == "cancelled":
        return f"been cancelled ({state.cancel_reason})"
    return f"faulted ({state.fault.code if state.fault else '?'})"


def _continuation(job: SfcState | _Evaluation) -> Continuation:
    """What the host does next with the job, a state or one being evaluated."""
    status = job.status
    if status == "completed":
        return Complete(outcomes=job.outcomes)
    if status == "faulted" and job.fault is not None:
        return FaultContinuation(code=job.fault.code, message=job.fault.message)
    if status == "cancelled":
        return Cancelled(reason=job.cancel_reason or "cancelled")
    return _DEFER


def _unchanged(state: SfcState, disposition: Disposition, reason: str) -> StepResult:
    return StepResult(
        state=state,
        continuation=_continuation(state),
        commands=[],
        disposition=disposition,
        reason=reason,
        decisions=[],
    )


def non_gating_outcomes(graph: Graph, event: Any, result: StepResult) -> list[tuple[str, str]]:
    """(qualifier, outcome) of each non-gating action block an applied evaluation ended: an
    answer or a failure (`error`), a `timeout` after its last attempt, `done` at its limit."""
    ended: list[tuple[str, str]] = []
    if result.disposition != "applied":
        return ended
    if isinstance(event, ActionCompleted | ActionFailed):
        spec = graph.actions.get(event.action_key.rpartition(":")[2])
        cid = None if event.command_id is UNSET else event.command_id
        if spec is not None and not spec.gating and not (cid or "").endswith(":hold"):
            if isinstance(event, ActionFailed):
                ended.append((spec.qualifier, "error"))
            else:
                outcome = DEFAULT_OUTCOME if event.outcome is UNSET else event.outcome
                ended.append((spec.qualifier, outcome))
    for c in result.commands:
        if isinstance(c, CancelWork) and c.reason in ("timeout", REASON_LIMIT_REACHED):
            spec = graph.actions.get(c.action_key.rpartition(":")[2])
            if spec is not None and not spec.gating:
                ended.append((spec.qualifier, "timeout" if c.reason == "timeout" else "done"))
    return ended


def overdue_timers(state: SfcState, at: int, inclusive: bool) -> list[int]:
    """How late (ms) each process timer and dwell of a running, not held job is at `at`: those
    due at or before it (`inclusive`, a tick) or before it (another event, which fires them
    first). The host's lateness histogram."""
    late: list[int] = []
    if state.status != "running" or state.held_at is not None:
        return late
    for rec in state.actions.values():
        d = rec.timer
        if d is not None and (d < at or (inclusive and d == at)):
            late.append(at - d)
    for d in state.dwells.values():
        if d < at or (inclusive and d == at):
            late.append(at - d)
    return late


def misfit(graph: Graph, state: SfcState) -> str | None:
    """Whatever in the state the recipe does not know, or None; O(the records kept).

    `evolve` rejects such a state, and `sfc explain --state` refuses it with this reason.
    """
    for step in state.active_steps:
        if step not in graph.step_actions:
            return f"active step {step} is not in the recipe"
    for name in state.actions:
        if name not in graph.actions:
            return f"action {name} is not in the recipe"
    for d in state.divergences:
        if d.name not in graph.divergences:
            return f"divergence {d.name} is not in the recipe"
    for step in state.dwells:
        if step not in graph.step_actions:
            return f"the dwell of step {step} is not in the recipe"
    return None


def _propagation_fault(graph: Graph, state: SfcState, at: int) -> StepResult:
    """The evaluation is discarded: the job faults where it stood before the event."""
    ev = _Evaluation(graph, state, _DEFAULT_SNAPSHOT, at)
    ev.fault_job(
        "propagation_limit",
        f"one evaluation would dispatch or enter more than {PROPAGATION_LIMIT} times",
    )
    return StepResult(
        state=ev.result_state(),
        continuation=_continuation(ev),
        commands=ev.commands,
        disposition="applied",
        reason="propagation limit reached",
        decisions=ev.decisions,
    )

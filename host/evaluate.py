"""Evaluating a job's entries in memory: the graph of its recipe, its order and state
decoded, each entry evolved, and the commit that writes the result (no I/O but the graph)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from msgspec import UNSET

from generated.capabilities_v1_1 import Capabilities
from generated.command_v1_0 import Command
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
from generated.history_entry_v1_0 import HistoryEntry
from generated.job_order_v1_0 import JobOrder
from generated.snapshot_v1_0 import Snapshot
from generated.state_v1_5 import SfcState
from generated.step_result_v1_0 import Defer
from generated.work_entry_v1_0 import AnswerData, EventData, ResumeData, StartData, TickData
from host import joborder, waits
from host.entries import Entry, encode
from host.outbox import outgoing
from host.outcome import JobEnd, Outcome
from host.settings import Settings
from host.store import Commit, JobRecord, Store
from sfc.builder import build
from sfc.codec import capabilities_decoder
from sfc.evolution import evolve, next_deadline, non_gating_outcomes, overdue_timers
from sfc.graph import Graph
from sfc.migrate import read_state

log = logging.getLogger("sfc.host")
_order_decoder = msgspec.json.Decoder(JobOrder)


class GraphCache:
    """Graphs by recipe hash and dataschema, built once per process from `sfc:recipe:{hash}`
    (a failure is not cached: the recipe may be stored later)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.graphs: dict[tuple[str, str], Graph] = {}
        self.checked: set[tuple[str, str, bytes]] = set()

    def get(self, recipe_hash: str, dataschema: str) -> Graph | str:
        """The graph, or the reason there is none."""
        key = (recipe_hash, dataschema)
        cached = self.graphs.get(key)
        if cached is not None:
            return cached
        graph = self._build(recipe_hash, dataschema, None, "does not build")
        if isinstance(graph, str):
            return graph
        if graph.recipe_hash != recipe_hash:
            return f"recipe {recipe_hash[:12]} is stored with another content"
        self.graphs[key] = graph
        return graph

    def check(self, recipe_hash: str, dataschema: str, capabilities: bytes | None) -> str | None:
        """Why the stored recipe does not build against `capabilities` now, or None; a pass
        is cached per (hash, dataschema, capabilities)."""
        if capabilities is None:
            return None
        key = (recipe_hash, dataschema, capabilities)
        if key in self.checked:
            return None
        try:
            caps = capabilities_decoder.decode(capabilities)
        except (msgspec.DecodeError, RecursionError) as e:
            return f"the scope's capabilities do not decode: {e}"
        built = self._build(
            recipe_hash, dataschema, caps, "does not build for the scope's capabilities"
        )
        if isinstance(built, str):
            return built
        self.checked.add(key)
        return None

    def _build(
        self, recipe_hash: str, dataschema: str, caps: Capabilities | None, fails: str
    ) -> Graph | str:
        """The stored recipe built against `caps`, or why not (`fails` words a build error)."""
        text = self.store.recipe_text(recipe_hash)
        if text is None:
            return f"recipe {recipe_hash[:12]} is not stored (sfc:recipe:{recipe_hash})"
        result = build(text, caps, dataschema)
        if result.graph is None:
            first = "; ".join(f"{e.code} at {e.path}: {e.message}" for e in result.errors[:3])
            return f"recipe {recipe_hash[:12]} {fails}: {first}"
        return result.graph


@dataclass(frozen=True, slots=True)
class ScopeConfig:
    """What evolve and start need from the scope's settings hash."""

    max_attempts: int
    capabilities: bytes | None
    expiry_grace: int
    """In ms: a command's `expiresAt` is its deadline less this (host/outbox.py)."""

    @staticmethod
    def of(values: dict[str, str], settings: Settings) -> ScopeConfig:
        """The scope's values, the process's settings where the scope has none."""
        try:
            max_attempts = int(values.get("maxAttempts", settings.max_attempts))
        except ValueError:
            max_attempts = settings.max_attempts
        try:
            expiry_grace = int(values.get("expiryGrace", settings.expiry_grace))
        except ValueError:
            expiry_grace = settings.expiry_grace
        caps = values.get("capabilities")
        return ScopeConfig(
            max_attempts=max(1, min(100, max_attempts)),
            capabilities=caps.encode() if caps else None,
            expiry_grace=max(0, expiry_grace),
        )


@dataclass(frozen=True, slots=True)
class MethodCall:
    """A job-control method: the order change and the recipe's hold, release or cancel in
    one commit (docs/host.md, "Job orders")."""

    method: str
    comment: str | None = None
    order: JobOrder | None = None
    """Update: the order that replaces the stored one (same id and scope)."""
    state: SfcState | None = None
    """Update with another recipe: the new recipe's fresh state."""


class MethodRefused(Exception):
    """A method not allowed for the order as loaded; nothing is written but its count."""

    def __init__(self, status: joborder.ReturnStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


RECIPE_EVENTS = {"Pause": "hold", "Resume": "release", "Stop": "stopped", "Abort": "aborted"}
"""What each method does to a running recipe: hold, release, or cancel with that reason."""


T = TypeVar("T")


def decode_order(raw: bytes) -> JobOrder:
    return _order_decoder.decode(raw)


def way_out(job: str) -> str:
    """How to get out of a job whose stored order or state cannot be read, in the words of
    every line and dead entry that says so."""
    return f"unless a newer sfc wrote it, `sfc job clear {job} --unreadable` removes the job"


def unreadable(record: JobRecord) -> str | None:
    """Why a stored job's order or state cannot be read, or None."""
    try:
        decode_order(record.order)
        read_state(record.state)
    except msgspec.DecodeError as e:
        return str(e)
    return None


def open_command_ids(state: SfcState, except_action: str | None = None) -> list[str]:
    """Every open command id (work and hold) of the state, except those of one action."""
    ids: list[str] = []
    for name, rec in state.actions.items():
        if name == except_action:
            continue
        if rec.status == "open" and rec.command_id is not None:
            ids.append(rec.command_id)
        if rec.hold == "open" and rec.hold_command_id is not None:
            ids.append(rec.hold_command_id)
    return ids


class Decoded(Generic[T]):
    """Decoded states and orders by their stored bytes, the oldest dropped past `limit`.
    The objects are shared: nothing may change them (evolve returns new ones)."""

    def __init__(self, decode: Callable[[bytes], T], limit: int = 1024) -> None:
        if limit < 1:
            raise ValueError(f"a cache of decoded documents holds at least 1, not {limit}")
        self.decode = decode
        self.limit = limit
        # ordered for its O(1) popitem: a dict's oldest key is found past the slots its
        # deleted keys left, which grow with every put until the dict is resized
        self.items: OrderedDict[bytes, T] = OrderedDict()

    def get(self, raw: bytes) -> T:
        value = self.items.get(raw)
        if value is None:
            value = self.decode(raw)
            self.put(raw, value)
        return value

    def put(self, raw: bytes, value: T) -> bytes:
        items = self.items
        if len(items) >= self.limit:
            items.popitem(last=False)
        items[raw] = value
        return raw


class Evaluator:
    """Evolves one job's entries in memory and describes the commit (no I/O but the graph)."""

    def __init__(self, graphs: GraphCache, settings: Settings) -> None:
        self.graphs = graphs
        self.settings = settings
        self.states: Decoded[SfcState] = Decoded(read_state)
        self.orders: Decoded[JobOrder] = Decoded(decode_order)

    def evaluate(
        self,
        scope: str,
        job: str,
        record: JobRecord,
        entries: Sequence[Entry],
        now: int,
        config: ScopeConfig,
        tally: Outcome,
    ) -> Commit:
        """The commit of `entries`; their dispositions are added to `tally`."""
        state = self.states.get(record.state)
        order = self.orders.get(record.order)
        graph = self.graphs.get(order.recipe_hash, order.dataschema)
        loaded, loaded_order = state, order
        equipment: list[tuple[str, bytes]] = []
        history: list[tuple[str, bytes]] = []
        work: list[tuple[str, bytes]] = []
        at = now
        for entry in entries:
            at = entry.ms if entry.kind == "tick" else now
            before = order
            sent = len(equipment)
            if isinstance(entry.data, MethodCall):
                state, order, item, disposition = self._method(
                    job, state, order, graph, entry.data, at, config, equipment, work
                )
            else:
                state, order, item, disposition = self._evolve_entry(
                    scope, job, state, order, graph, entry, at, config, equipment, tally
                )
            setattr(tally, disposition, getattr(tally, disposition) + 1)
            _observe(tally, job, entry, disposition, before, order, item, len(equipment) - sent)
            if order is not before:  # the orders are frozen: a move is a new object
                path = joborder.path_text(order)
                if item.order != path:
                    item = msgspec.structs.replace(item, order=path)
            history.append(("evaluation", encode(item)))
        for kind, _ in equipment:
            tally.sent[kind] = tally.sent.get(kind, 0) + 1
        due = next_deadline(state)
        running = state.status == "running" and not joborder.ended(order)
        wait_ops = [] if isinstance(graph, str) else waits.changes(loaded, state, graph, at)
        return Commit(
            scope=scope,
            job=job,
            version=record.version,
            # what did not change is written back as it was read (encoding it is the cost)
            state=record.state if state is loaded else self.states.put(encode(state), state),
            order=record.order if order is loaded_order else self.orders.put(encode(order), order),
            due=due,
            active=running,
            acks=[e.id for e in entries if e.id],
            equipment=equipment,
            history=history,
            waits=wait_ops,
            work=work,
        )

    def _method(
        self,
        job: str,
        state: SfcState,
        order: JobOrder,
        graph: Graph | str,
        call: MethodCall,
        at: int,
        config: ScopeConfig,
        equipment: list[tuple[str, bytes]],
        work: list[tuple[str, bytes]],
    ) -> tuple[SfcState, JobOrder, HistoryEntry, str]:
        """Move the order, and hold, release or cancel a running recipe with it. Raises
        MethodRefused when the order's state does not allow the method."""
        m = call.method
        status = joborder.allowed(m, order)
        if status != joborder.ReturnStatus.OK:
            raise MethodRefused(
                status, f"{m} is not allowed: the order is {joborder.path_text(order)}"
            )
        before = joborder.path_text(order)
        if m == "Update":
            assert call.order is not None
            new = call.order
            if call.state is not None:
                state = call.state
        else:
            new = joborder.move(order, m, at)
        if m == "Start":
            work.append(("start", encode(StartData(job=job))))
        if call.comment:
            new = joborder.comment(new, at, call.comment)
        reason = f"{m}: {before} -> {joborder.path_text(new)}"
        what = RECIPE_EVENTS.get(m)
        if what is None or state.status != "running" or isinstance(graph, str):
            return state, new, self._note(at, m, "applied", reason, new), "applied"
        event: Any
        if what == "hold":
            event = Hold(at=at)
        elif what == "release":
            event = Release(at=at)
        else:
            event = Cancel(at=at, reason=what)
        result = evolve(graph, state, Snapshot(max_attempts=config.max_attempts), event)
        decisions = [d.decision for d in result.decisions]
        if result.disposition != "applied":
            reason += f"; the recipe: {result.reason}"
            note = self._note(at, m, "applied", reason, new, decisions)
            return state, new, note, "applied"
        sent = self._append(result.commands, state, job, at, graph, config, equipment)
        if not isinstance(result.continuation, Defer) and not joborder.ended(new):
            # the release routed what came during the pause, and the recipe ended: the order
            # finishes in the same commit, as after any other event
            new = joborder.finish(new, result.continuation, at)
        reason += f"; the recipe: {result.reason}"
        note = self._note(at, m, "applied", reason, new, decisions, sent)
        return result.state, new, note, "applied"

    def _append(
        self,
        commands: Sequence[Command],
        loaded: SfcState,
        job: str,
        at: int,
        graph: Graph,
        config: ScopeConfig,
        equipment: list[tuple[str, bytes]],
    ) -> list[str]:
        """Append to `equipment` what the commit sends of `commands` (host/outbox.py), with
        the scope's expiry grace; the history's `sent` lines."""
        items = outgoing(
            commands,
            loaded_sequence=loaded.sequence,
            job=job,
            at=at,
            grace=config.expiry_grace,
            graph=graph,
        )
        equipment.extend((kind, encode(d)) for kind, d in items)
        return [f"{kind} {d.command_id}" for kind, d in items]

    @staticmethod
    def _note(
        at: int,
        event: str,
        disposition: str,
        reason: str,
        order: JobOrder,
        decisions: Sequence[str] = (),
        sent: Sequence[str] = (),
    ) -> HistoryEntry:
        return HistoryEntry(
            at=at,
            event=event,
            disposition=disposition,  # type: ignore[arg-type]
            reason=reason,
            decisions=list(decisions),
            sent=list(sent),
            order=joborder.path_text(order),
        )

    def _evolve_entry(
        self,
        scope: str,
        job: str,
        state: SfcState,
        order: JobOrder,
        graph: Graph | str,
        entry: Entry,
        at: int,
        config: ScopeConfig,
        equipment: list[tuple[str, bytes]],
        tally: Outcome,
    ) -> tuple[SfcState, JobOrder, HistoryEntry, str]:
        data = entry.data
        detail = _detail(entry)

        def note(
            disposition: str, reason: str, decisions: Sequence[str] = (), sent: Sequence[str] = ()
        ) -> HistoryEntry:
            return HistoryEntry(
                at=at,
                event=entry.kind,
                entry=entry.id,
                detail=detail or UNSET,
                disposition=disposition,  # type: ignore[arg-type]
                reason=reason,
                decisions=list(decisions),
                sent=list(sent),
                order=joborder.path_text(order),
            )

        event: Any
        if isinstance(data, StartData):
            status = joborder.allowed("start", order)
            if status != joborder.ReturnStatus.OK:
                why = f"the order is {joborder.path_text(order)}, not AllowedToStart"
                return state, order, note("absorbed", why), "absorbed"
            if isinstance(graph, str):
                order = joborder.abort(order, at, "recipe", graph)
                return state, order, note("rejected", f"aborted: {graph}"), "rejected"
            problem = self.graphs.check(order.recipe_hash, order.dataschema, config.capabilities)
            if problem is not None:
                order = joborder.abort(order, at, "recipe", problem)
                return state, order, note("rejected", f"aborted: {problem}"), "rejected"
            order = joborder.move(order, "start", at)
            event = Start(at=at)
        elif isinstance(graph, str):
            return state, order, note("rejected", graph), "rejected"
        elif isinstance(data, AnswerData):
            event = answer_event(data, at)
        elif isinstance(data, TickData):
            event = Tick(at=at, outage_ms=0 if data.outage_ms is UNSET else data.outage_ms)
        elif isinstance(data, ResumeData):
            event = Resume(at=at)
        else:  # an event, offered to this job by `Applier.offer`
            event = EventReceived(
                at=at,
                type_id=data.type_id,
                outcome="done" if data.outcome is UNSET else data.outcome,
                subject=data.subject,
                correlation_id=data.correlation_id,
                source=data.source,
                id=data.id,
            )

        live: list[str] = []
        if isinstance(data, ResumeData):
            live = open_command_ids(state, None if data.action is UNSET else data.action)
            if data.action is not UNSET and data.action not in graph.actions:
                return state, order, note("rejected", f"no action {data.action!r}"), "rejected"
            if data.action is UNSET:
                live = []
        snapshot = Snapshot(max_attempts=config.max_attempts, live_work=live)
        result = evolve(graph, state, snapshot, event)
        decisions = [d.decision for d in result.decisions]
        if result.disposition != "applied":
            return (
                state,
                order,
                note(result.disposition, result.reason, decisions),
                result.disposition,
            )
        # a recipe without timers or non-gating blocks skips their scans (each O(the
        # records or the commands)): they would find nothing
        if graph.has_timers:
            tally.timer_late += overdue_timers(state, at, isinstance(event, Tick))
        if graph.step_non_gating:
            for key in non_gating_outcomes(graph, event, result):
                tally.non_gating[key] = tally.non_gating.get(key, 0) + 1
        sent = self._append(result.commands, state, job, at, graph, config, equipment)
        if not isinstance(result.continuation, Defer) and not joborder.ended(order):
            order = joborder.finish(order, result.continuation, at)
        return result.state, order, note("applied", result.reason, decisions, sent), "applied"


def _observe(
    tally: Outcome,
    job: str,
    entry: Entry,
    disposition: str,
    before: JobOrder,
    order: JobOrder,
    item: HistoryEntry,
    sent: int,
) -> None:
    """What the metrics and the logs need of one evaluated work entry (not of a method)."""
    if isinstance(entry.data, MethodCall):
        return
    key = (entry.kind, disposition)
    tally.kinds[key] = tally.kinds.get(key, 0) + 1
    if entry.kind == "answer" and sent:
        ms = entry.ms
        if ms:
            tally.answer_waits.append(max(0, item.at - ms))
    if order is not before and joborder.ended(order) and not joborder.ended(before):
        r = order.result
        ended_by, reason = "unknown", item.reason
        if r is not UNSET:
            ended_by = r.ended_by
            if r.fault_code or r.fault_message:
                reason = f"{r.fault_code or 'fault'}: {r.fault_message or ''}"
        data = entry.data
        if (
            isinstance(data, AnswerData)
            and data.error is not UNSET
            and "the equipment reported" not in reason
        ):
            # what the equipment said, where the core's message does not quote it (a job
            # that an error led to its end otherwise)
            reason += f" (the equipment reported: {data.error[:300]!r})"
        tally.ends.append(JobEnd(job, entry.id, entry.kind, disposition, ended_by, reason))


def answer_event(data: AnswerData, at: int) -> ActionCompleted | ActionFailed:
    """The core's event of an answer entry's data, evaluated at `at`."""
    if data.error is not UNSET:
        return ActionFailed(
            at=at,
            action_key=data.action_key,
            error=data.error,
            command_id=data.command_id,
            round=data.round,
        )
    return ActionCompleted(
        at=at,
        action_key=data.action_key,
        outcome="done" if data.outcome is UNSET else data.outcome,
        command_id=data.command_id,
        round=data.round,
    )


def _detail(entry: Entry) -> str:
    d = entry.data
    if isinstance(d, AnswerData):
        # the command id it answers (or the action, without one), without the job's prefix
        said = (
            f"error {d.error!r}"
            if d.error is not UNSET
            else repr("done" if d.outcome is UNSET else d.outcome)
        )
        what = d.action_key if d.command_id is UNSET else d.command_id
        return f"{what.removeprefix(d.job + ':')} {said}"[:300]
    if isinstance(d, TickData) and d.outage_ms:
        return f"outage of {d.outage_ms} ms"
    if isinstance(d, ResumeData) and d.action is not UNSET:
        return f"action {d.action}"
    if isinstance(d, EventData):
        parts = [d.type_id]
        if d.subject is not UNSET:
            parts.append(f"subject {d.subject!r}")
        if d.correlation_id is not UNSET:
            parts.append(f"correlationId {d.correlation_id!r}")
        parts.append(repr("done" if d.outcome is UNSET else d.outcome))
        if d.source is not UNSET and d.id is not UNSET:
            parts.append(f"from {d.source}/{d.id}")
        return " ".join(parts)[:300]
    return ""

"""The simulation: an in-memory host on a virtual clock, with scripted equipment.

It runs one job of a recipe through `evolve` the way a host would, without a server:
the clock is virtual (it starts at 0 ms and jumps from one due item to the next), the
equipment is a script, and every evaluation goes into a transcript, with the steps active
after it. It is **not durable** (nothing is stored; the run lives in this object) and **not
distributed** (one job, one process, one thread). It proves what a recipe does with a given
behaviour of the plant; it is not a host.

The script (schemas/simulation_script_v1_0.json, docs/scripts.md)
-------------------------------------------------------------------------------
- The n-th time the equipment is asked about an action it gives the n-th reply of
  `replies[NAME]`; after the list, `default` (itself `ok` when absent). Hold and restart
  commands are asked under `NAME:hold` and `NAME:restart`; a hold's default is `held`.
- A reply is `silent` (no answer at all), `error[:text][@delayMs]` (actionFailed) or
  `outcome[@delayMs]` (actionCompleted with that outcome). The delay counts from the
  moment the command was issued.
- The equipment is asked once per command id: a release or a resume that issues a command
  id again does not ask again, as the host sends each command id once.
- A reply to a pull action (`await`) is an eventReceived of the awaited type that matches
  the wait's selector; `error[:text]` there is an event with the reserved outcome `error`.
- Every reply to a push, hold or restart command carries the command id it answers (the
  causation id) and that command's round, as real equipment must. A reply to an attempt
  that was withdrawn in the meantime is still delivered: real equipment may finish it.
- `events` are delivered at their `atMs`; `controls` are operator hold, release and cancel
  at `atMs`, and a platform outage: no ticks from `atMs` for `ms`, then one tick with
  `outageMs = ms`. Replies and events are still delivered during an outage. Outages may
  touch but not overlap (the common time would move the deadlines twice).

Order of items that fall on the same millisecond
------------------------------------------------
The run is a total, deterministic order of items. Items are ordered by time, then by class,
then by when they were scheduled:

    0 start            the start of the job, at 0
    1 reply            equipment answers, in the order their commands were issued
    2 event            script events, in script order
    3 control          hold, release and cancel, in script order
    4 outage tick      the tick that ends an outage
    5 deadline tick    the tick at `next_deadline`

So a reply that lands exactly on a deadline wins over the tick, and what the equipment
said is recorded before an operator's hold or cancel of the same millisecond. An item
scheduled during an evaluation (a reply with no delay) joins this order at its own time.

A run ends `completed`, `faulted` or `cancelled` with the job; `time_limit` when the next
item would come after the time limit, or when nothing more can happen (a job held for good:
then `stalled` is set, and the transcript's last line says so);
`evaluation_limit` when that many evaluations did not end the job.
"""

from __future__ import annotations

import heapq
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from msgspec import UNSET

from generated.command_v1_0 import StartWork
from generated.dryrun_result_v1_2 import DryRunResult, Note, RunFault, TranscriptEntry
from generated.event_v1_0 import (
    ActionCompleted,
    ActionFailed,
    Cancel,
    EventReceived,
    Hold,
    Release,
    Start,
    Tick,
)
from generated.simulation_script_v1_0 import (
    CancelControl,
    HoldControl,
    OutageControl,
    ReleaseControl,
    ScriptEvent,
    SimulationScript,
)
from generated.snapshot_v1_0 import Snapshot
from generated.state_v1_5 import SfcState
from generated.step_result_v1_0 import Cancelled, Complete, FaultContinuation
from sfc.evolution import evolve, new_state, next_deadline
from sfc.graph import RESERVED_OUTCOMES, Graph
from sfc.transcript import describe_event, held_since
from sfc.words import duration, when

DEFAULT_TIME_LIMIT_MS = 7 * 24 * 3600 * 1000
"""Seven days of virtual time."""
DEFAULT_EVALUATION_LIMIT = 100_000
DEFAULT_REPLY = "ok"
HOLD_DEFAULT_REPLY = "held"
SOURCE = "sfc.simulation"
"""The CloudEvents source of the events the simulated equipment sends for a wait."""

End = Literal["completed", "faulted", "cancelled", "time_limit", "evaluation_limit"]
_ENDED_WORDS = {"completed": "completed", "faulted": "faulted", "cancelled": "been cancelled"}
Event = Start | Tick | ActionCompleted | ActionFailed | EventReceived | Hold | Release | Cancel

# The classes of same-time items, in the order they run (see the module docstring).
START, REPLY, EVENT, CONTROL, OUTAGE_TICK, DEADLINE_TICK = range(6)

REPLY_GRAMMAR = "silent, error[:text][@delayMs] or outcome[@delayMs]"
_REPLY = re.compile(
    r"(?P<silent>silent)"
    r"|error(?::(?P<text>[^@]*))?(?:@(?P<error_delay>[0-9]+))?"
    r"|(?P<outcome>[^:@\s]+)(?:@(?P<delay>[0-9]+))?"
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SUFFIXES = ("hold", "restart")


class ScriptError(ValueError):
    """A simulation script that cannot be used; `path` points at the problem (`$.replies.x[1]`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Reply:
    """One parsed reply of the scripted equipment."""

    kind: Literal["silent", "error", "outcome"]
    outcome: str | None = None
    error: str | None = None
    """The error text of `error:text`; None for a bare `error`."""
    delay_ms: int = 0


def parse_reply(text: str) -> Reply:
    """Parse `silent`, `error[:text][@delayMs]` or `outcome[@delayMs]`; ValueError otherwise."""
    m = _REPLY.fullmatch(text)
    if m is None:
        raise ValueError(f"not a reply: {text!r}; a reply is {REPLY_GRAMMAR}")
    if m["silent"] is not None:
        return Reply("silent")
    if m["outcome"] is not None:
        outcome = m["outcome"]
        if outcome == "silent":
            raise ValueError(f"not a reply: {text!r}; silent takes no delay")
        if outcome in RESERVED_OUTCOMES:
            raise ValueError(
                f"not a reply: {text!r}; {outcome!r} is the outcome the engine gives itself "
                "when attempts run out; script silent to let the deadline pass"
            )
        return Reply("outcome", outcome=outcome, delay_ms=int(m["delay"] or 0))
    return Reply("error", error=m["text"] or None, delay_ms=int(m["error_delay"] or 0))


def json_key_path(base: str, key: str) -> str:
    """The path of `key` in the object at `base`: `$.replies.tighten`, `$.replies["a:hold"]`."""
    return f"{base}.{key}" if _IDENTIFIER.fullmatch(key) else f"{base}[{json.dumps(key)}]"


def _check_replies(raw: Any) -> None:
    """Check `default` and `replies` by hand, so that an error names the action (msgspec says `[...]`)."""
    if not isinstance(raw, dict):
        return
    default = raw.get("default")
    if isinstance(default, str):
        try:
            parse_reply(default)
        except ValueError as e:
            raise ScriptError("$.default", str(e)) from None
    replies = raw.get("replies")
    if replies is None:
        return
    if not isinstance(replies, dict):
        raise ScriptError("$.replies", "expected an object: action name -> list of replies")
    for key, items in replies.items():
        path = json_key_path("$.replies", key)
        if not isinstance(items, list):
            raise ScriptError(path, f"expected a list of replies ({REPLY_GRAMMAR})")
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise ScriptError(f"{path}[{i}]", f"expected a string: {REPLY_GRAMMAR}")
            try:
                parse_reply(item)
            except ValueError as e:
                raise ScriptError(f"{path}[{i}]", str(e)) from None


_UNKNOWN = re.compile(r"Object contains unknown field `(?P<field>[^`]*)`")


def _validation_error(e: msgspec.ValidationError) -> ScriptError:
    text, _, at = str(e).partition(" - at `")
    path = at.rstrip("`") or "$"
    unknown = _UNKNOWN.fullmatch(text)
    if unknown is not None:
        return ScriptError(json_key_path(path, unknown["field"]), "unknown key")
    return ScriptError(path, text)


MAX_DEPTH = 64
"""The deepest nesting of a script, its event data included; deeper is refused."""


def _too_deep(doc: Any) -> str | None:
    """Where a value nested deeper than MAX_DEPTH starts (`$.events[0].data`), or None.

    Iterative, so any depth is measured without recursion; the path names the first three
    levels only.
    """
    stack: list[tuple[Any, str, int]] = [(doc, "$", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return path
        if isinstance(node, dict):
            stack.extend(
                (v, json_key_path(path, k) if depth < 3 else path, depth + 1)
                for k, v in node.items()
            )
        elif isinstance(node, list):
            stack.extend(
                (v, f"{path}[{i}]" if depth < 3 else path, depth + 1) for i, v in enumerate(node)
            )
    return None


def load_script(data: bytes, graph: Graph | None = None) -> SimulationScript:
    """Decode and check a simulation script; ScriptError names the path of the first problem.

    Overlapping outages are refused; with a graph, replies are also checked against the
    recipe's actions (`check_script`).
    """
    if not data.strip():
        raise ScriptError("$", "the file is empty")
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise ScriptError("$", f"not valid JSON: {e}") from None
    except RecursionError:
        raise ScriptError("$", "the document is nested too deeply") from None
    _check_replies(raw)
    path = _too_deep(raw)
    if path is not None:
        raise ScriptError(path, f"nested more than {MAX_DEPTH} levels deep")
    try:
        script = msgspec.json.decode(data, type=SimulationScript)
    except msgspec.ValidationError as e:
        raise _validation_error(e) from None
    if graph is None:
        check_outages(script)
    else:
        check_script(script, graph)
    return script


def check_outages(script: SimulationScript) -> None:
    """Refuse an outage that starts before another one has ended.

    The platform is either down or not: two overlapping outages would each end with a tick
    that moves the deadlines by its full length, counting the common time twice.
    """
    controls = [] if script.controls is UNSET else script.controls
    outages = sorted(
        (c.at_ms, c.at_ms + c.ms, i) for i, c in enumerate(controls) if isinstance(c, OutageControl)
    )
    latest: tuple[int, int, int] | None = None  # the outage so far that ends last
    for start, end, i in outages:
        if latest is not None and start < latest[1]:
            raise ScriptError(
                f"$.controls[{i}]",
                f"this outage ({start} ms to {end} ms) overlaps the outage at "
                f"$.controls[{latest[2]}] ({latest[0]} ms to {latest[1]} ms); "
                "script one outage for the time the platform is down",
            )
        if latest is None or end > latest[1]:
            latest = (start, end, i)


def check_script(script: SimulationScript, graph: Graph) -> None:
    """Refuse replies for actions the recipe lacks, hold or restart replies for actions
    without hold logic, and overlapping outages."""
    check_outages(script)
    replies = {} if script.replies is UNSET else script.replies
    for key in replies:
        path = json_key_path("$.replies", key)
        name, colon, suffix = key.partition(":")
        spec = graph.actions.get(name)
        if spec is None:
            known = ", ".join(graph.actions) or "none"
            raise ScriptError(path, f"the recipe has no action {name!r} (its actions: {known})")
        if colon and suffix not in _SUFFIXES:
            what = f"unknown key suffix {suffix!r}" if suffix else "an empty key suffix"
            raise ScriptError(path, f"{what}; use NAME, NAME:hold or NAME:restart")
        if suffix and spec.hold is None:
            raise ScriptError(
                path, f"action {name!r} has no hold logic, so it gets no {suffix} command"
            )


def job_id_problem(job_id: str) -> str | None:
    """Why `job_id` cannot name a job, or None when it can.

    Action keys are `{jobId}:{action}` and command ids `{actionKey}#{n}`, and a transcript
    line shows them as single words. So a job id must not be empty (`--job-id "$JOB"` with JOB
    unset would give keys such as `:send_bye`) and must contain no white space or control
    characters. Colons and '#' are fine: keys are split at their last ':' and '#'.
    """
    if not job_id:
        return "the job id is empty; action keys are JOBID:ACTION"
    if any(c.isspace() or not c.isprintable() for c in job_id):
        return f"the job id {job_id!r} contains white space or a control character"
    return None


def reply_key(action_key: str, work: str) -> str:
    """The script key a command is asked under: NAME for push and await, NAME:hold or
    NAME:restart for hold and restart (`action_key` is `{jobId}:{NAME}`)."""
    name = action_key.rpartition(":")[2]
    return name if work in ("push", "await") else f"{name}:{work}"


def choose_reply(script: SimulationScript, key: str, n: int) -> str:
    """The reply text the scripted equipment gives the n-th time (from 0) it is asked under
    `key`: the n-th of `replies[key]`, then `default` (`ok` when absent; `held` for a hold).

    Pure, and the one place the choice is made: the simulation and the host's scripted
    equipment (host/scripted.py) both ask it.
    """
    listed = [] if script.replies is UNSET else script.replies.get(key, [])
    if n < len(listed):
        return listed[n]
    if key.endswith(":hold"):
        return HOLD_DEFAULT_REPLY
    return DEFAULT_REPLY if script.default is UNSET else script.default


@dataclass(frozen=True, slots=True)
class Ask:
    """One question to the scripted equipment: a command id it saw for the first time."""

    at_ms: int
    key: str
    """NAME, NAME:hold or NAME:restart."""
    command_id: str
    reply: str


@dataclass(frozen=True, slots=True)
class _Outage:
    start: int
    end: int


def _control_event(control: HoldControl | ReleaseControl | CancelControl) -> Event:
    if isinstance(control, HoldControl):
        return Hold(at=control.at_ms)
    if isinstance(control, ReleaseControl):
        return Release(at=control.at_ms)
    # Without a reason the cancel has none: the transcript reads `operator cancel -> job cancelled`.
    return Cancel(at=control.at_ms, reason="" if control.reason is UNSET else control.reason)


def _script_event(ev: ScriptEvent) -> EventReceived:
    return EventReceived(
        at=ev.at_ms,
        type_id=ev.type_id,
        outcome="done" if ev.outcome is UNSET else ev.outcome,
        subject=ev.subject,
        correlation_id=ev.correlation_id,
        source=ev.source,
        id=ev.id,
    )


class Simulation:
    """One job of a recipe on a virtual clock with scripted equipment.

    `run()` drives it to the end and returns the dry-run result; `step()` runs one
    evaluation at a time, and `state` is the job's state after the last one.
    """

    def __init__(
        self,
        graph: Graph,
        script: SimulationScript | None = None,
        *,
        job_id: str = "job-1",
        scope: str = "sim",
        time_limit_ms: int = DEFAULT_TIME_LIMIT_MS,
        evaluation_limit: int = DEFAULT_EVALUATION_LIMIT,
        snapshot: Snapshot | None = None,
    ) -> None:
        problem = job_id_problem(job_id)
        if problem is not None:
            raise ValueError(problem)
        script = SimulationScript() if script is None else script
        check_script(script, graph)
        self.graph = graph
        self.script = script
        self.job_id = job_id
        self.time_limit_ms = time_limit_ms
        self.evaluation_limit = evaluation_limit
        self.snapshot = Snapshot() if snapshot is None else snapshot
        self.state: SfcState = new_state(graph, job_id, scope)
        self.now = 0
        self.transcript: list[TranscriptEntry] = []
        self.asks: list[Ask] = []
        """Every question to the equipment, in order."""
        self.end: End | None = None
        self.end_at: int = 0
        self.stalled = False
        """The run ended `time_limit` because nothing more could happen (a job held for good)."""
        self.fault: RunFault | None = None

        self._asked: set[str] = set()
        self._asked_per_key: dict[str, int] = {}
        self._queue: list[tuple[int, int, int, Event]] = []
        self._scheduled = 0
        self._outages: list[_Outage] = []
        self.notes: list[Note] = []
        """Script items that were not evaluations: outages that began, items ignored."""
        self._awaited = {spec.type_id for spec in graph.actions.values() if not spec.push}
        self._outage_starts: list[tuple[int, int]] = []
        """(start, length) of the outages whose start the run has not passed yet, by start."""

        self._schedule(0, START, Start(at=0))
        for ev in [] if script.events is UNSET else script.events:
            self._schedule(ev.at_ms, EVENT, _script_event(ev))
        for control in [] if script.controls is UNSET else script.controls:
            if isinstance(control, OutageControl):
                end = control.at_ms + control.ms
                self._outages.append(_Outage(control.at_ms, end))
                self._outage_starts.append((control.at_ms, control.ms))
                self._schedule(end, OUTAGE_TICK, Tick(at=end, outage_ms=control.ms))
            else:
                self._schedule(control.at_ms, CONTROL, _control_event(control))

    def _note(self, at: int, kind: Literal["ignored", "outage"], item: str, reason: str) -> None:
        self.notes.append(
            Note(at_ms=at, after=len(self.transcript), kind=kind, item=item, reason=reason)
        )

    def _outages_begun(self, until: int) -> None:
        """Note every outage that begins at or before `until`."""
        self._outage_starts.sort()
        while self._outage_starts and self._outage_starts[0][0] <= until:
            start, ms = self._outage_starts.pop(0)
            self._note(
                start,
                "outage",
                f"outage of {duration(ms)} begins",
                f"the platform is down until {when(start + ms)}: no ticks; a tick at its end "
                "moves the deadlines that are open by its length",
            )

    def _schedule(self, at: int, cls: int, event: Event) -> None:
        heapq.heappush(self._queue, (at, cls, self._scheduled, event))
        self._scheduled += 1

    def _in_outage(self, at: int) -> bool:
        return any(o.start <= at < o.end for o in self._outages)

    def _next(self) -> tuple[int, Event] | None:
        """The next item by (time, class, order): the queue's head, or the deadline tick."""
        due = next_deadline(self.state)
        tick_at = None if due is None else max(due, self.now)
        if tick_at is not None and self._in_outage(tick_at):
            tick_at = None  # the outage's own tick comes when it ends
        if self._queue and (tick_at is None or self._queue[0][:2] < (tick_at, DEADLINE_TICK)):
            at, _, _, event = heapq.heappop(self._queue)
            return at, event
        if tick_at is not None:
            return tick_at, Tick(at=tick_at)
        return None

    def _finish(self, end: End, at: int) -> None:
        """End the run; every script item still to come is noted as ignored, with why."""
        self.end = end
        self.end_at = at
        if end in ("completed", "faulted", "cancelled"):
            why = f"the job had already {_ENDED_WORDS[end]} at {when(at)}"
        elif end == "time_limit":
            why = f"it comes after the time limit of {duration(self.time_limit_ms)}"
        else:
            why = f"the evaluation limit of {self.evaluation_limit} was reached"
        left = sorted(self._queue)
        self._queue = []
        begun = {(o.start, o.end) for o in self._outages} - {
            (start, start + ms) for start, ms in self._outage_starts
        }
        items = [(start, f"outage of {duration(ms)}") for start, ms in self._outage_starts]
        self._outage_starts = []
        for due, cls, _, event in left:
            if cls in (EVENT, CONTROL):
                items.append((due, describe_event(event)))
            elif (
                isinstance(event, Tick)
                and isinstance(event.outage_ms, int)
                and (due - event.outage_ms, due) in begun
            ):
                items.append((due, f"end of the outage of {duration(event.outage_ms)}"))
        for due, item in sorted(items, key=lambda x: x[0]):
            self._note(due, "ignored", item, why)

    def step(self) -> TranscriptEntry | None:
        """Run one evaluation; None once the run has ended."""
        if self.end is not None:
            return None
        if len(self.transcript) >= self.evaluation_limit:
            self._finish("evaluation_limit", self.now)
            return None
        while True:
            item = self._next()
            if item is None or item[0] > self.time_limit_ms:
                self.stalled = item is None
                self._outages_begun(self.time_limit_ms)
                self._finish("time_limit", self.time_limit_ms)
                return None
            self._outages_begun(item[0])
            self.now, event = item
            if isinstance(event, EventReceived) and event.type_id not in self._awaited:
                self._note(
                    self.now,
                    "ignored",
                    describe_event(event),
                    f"no action of the recipe waits for events of type {event.type_id}",
                )
                continue
            break
        result = evolve(self.graph, self.state, self.snapshot, event)
        self.state = result.state
        entry = TranscriptEntry(
            at_ms=self.now,
            event=event,
            disposition=result.disposition,
            reason=result.reason,
            commands=result.commands,
            continuation=result.continuation,
            active_steps=list(result.state.active_steps),
            decisions=result.decisions,
        )
        self.transcript.append(entry)
        for command in result.commands:
            if isinstance(command, StartWork):
                self._ask(command)
        verdict = result.continuation
        if isinstance(verdict, Complete):
            self._finish("completed", self.now)
        elif isinstance(verdict, FaultContinuation):
            self.fault = RunFault(code=verdict.code, message=verdict.message)
            self._finish("faulted", self.now)
        elif isinstance(verdict, Cancelled):
            self._finish("cancelled", self.now)
        return entry

    def run(self) -> DryRunResult:
        """Run to the end and return the dry-run result."""
        while self.step() is not None:
            pass
        return self.result()

    def result(self) -> DryRunResult:
        if self.end is None:
            raise RuntimeError("the run has not ended; call run()")
        return DryRunResult(
            end=self.end,
            at_ms=self.end_at,
            fault=self.fault,
            transcript=list(self.transcript),
            evaluations=len(self.transcript),
            end_reason=self._end_reason(),
            notes=list(self.notes),
        )

    def _end_reason(self) -> str:
        """Why the run ended, in words (the dry-run result's endReason)."""
        last = self.transcript[-1] if self.transcript else None
        if self.end == "completed":
            return "the job completed"
        if self.end == "faulted":
            return "the job faulted" + ("" if self.fault is None else f": {self.fault.message}")
        if self.end == "cancelled":
            reason = self.state.cancel_reason
            return f"the job was cancelled: {reason}" if reason else "the job was cancelled"
        held = held_since(self.transcript)
        if self.end == "time_limit":
            limit = f"the time limit of {duration(self.time_limit_ms)} was reached"
            if self.stalled and held is not None:
                return f"{limit}: the job is held since {when(held)} and nothing more can happen"
            if self.stalled:
                return f"{limit}: nothing more can happen and the job had not ended"
            if held is not None:
                return f"{limit}: the job had not ended (held since {when(held)})"
            return f"{limit}: the job had not ended"
        at = "" if last is None else f" at {when(last.at_ms)}"
        return (
            f"the evaluation limit of {self.evaluation_limit} evaluations was reached{at}: "
            "the job had not ended"
        )

    def _ask(self, command: StartWork) -> None:
        """Ask the scripted equipment about a command it has not seen, and schedule its reply."""
        if command.command_id in self._asked:
            return
        self._asked.add(command.command_id)
        key = reply_key(command.action_key, command.work)
        n = self._asked_per_key.get(key, 0)
        self._asked_per_key[key] = n + 1
        text = choose_reply(self.script, key, n)
        self.asks.append(Ask(self.now, key, command.command_id, text))
        reply = parse_reply(text)
        if reply.kind == "silent":
            return
        at = self.now + reply.delay_ms
        event: Event
        if command.work == "await":
            selector = command.selector
            event = EventReceived(
                at=at,
                type_id=command.type_id,
                outcome=reply.outcome or "error",
                subject=UNSET if selector is None or selector.subject is None else selector.subject,
                correlation_id=(
                    UNSET
                    if selector is None or selector.correlation_id is None
                    else selector.correlation_id
                ),
                source=SOURCE,
                id=command.command_id,
            )
        elif reply.kind == "error":
            event = ActionFailed(
                at=at,
                action_key=command.action_key,
                error=UNSET if reply.error is None else reply.error,
                command_id=command.command_id,
                round=command.round,
            )
        else:
            event = ActionCompleted(
                at=at,
                action_key=command.action_key,
                outcome=reply.outcome or "done",
                command_id=command.command_id,
                round=command.round,
            )
        self._schedule(at, REPLY, event)

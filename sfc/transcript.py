"""The transcript of a dry run: every evaluation, as JSON (DryRunResult) and as text.

The text form gives one line per evaluation, for a plant engineer to follow the job
(examples/rear-axle-fitting, qa-reject.script.json):

         0.000s  start                                  -> applied: job started in step Init  => push position_axle#1 (attempt 1, deadline 30.000s); await camera_qa#2 (deadline 45.000s)  [now: Positioning, QaCheck]
         4.000s  reply position_axle#1 (attempt 1): ok  -> applied: position_axle answered ok  => push tighten#3 (attempt 1, deadline 64.000s)  [now: QaCheck, TightenBolts]
        15.000s  event for camera_qa#2: qa_nok          -> applied: camera_qa received com.example.station.qa_result.v1: qa_nok  [now: TightenBolts]
        42.000s  reply tighten#3 (attempt 1): ok        -> applied: tighten answered ok  => push reject#4 (attempt 1, deadline 72.000s)  [now: RejectAxle]
        42.000s  reply reject#4 (attempt 1): ok         -> applied: reject answered ok  => job completed with outcomes ok
    end: completed at 42.000s after 5 evaluations

Columns: the virtual time in seconds from the start; what happened (the event), padded so
that every `->` stands in one column; what the engine made of it (its disposition and
reason); `=>` the commands it gave, in order; when the job ended, how; and `[now: ...]` where
the job is: the active steps after the evaluation, in the order they became active, shown
on the first line and whenever they changed (not when the job ended: the line says how). Command ids are shown without the job
id (`tighten#4` stands for `job-1:tighten#4`); the JSON form has them in full, and
`activeSteps` on every entry. A command whose id was given before in the run (a release
issues open work again) is the same command, re-issued: `push send_bye#1 re-issued (same
command id, attempt 1, deadline moved from 30.000s to 42.000s)`. A line with `--` instead of
`->` is a script item that was no evaluation (the dry-run result's notes): where an outage
begins, or an item ignored and why. The last line says how the run ended (docs/cli.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import msgspec
from msgspec import UNSET

from generated.command_v1_0 import CancelWork, Command, StartWork
from generated.dryrun_result_v1_2 import DryRunResult, Note, TranscriptEntry
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
from generated.step_result_v1_0 import Cancelled, Complete, Continuation, FaultContinuation
from sfc.words import duration

Tone = Literal[
    "applied",
    "absorbed",
    "rejected",
    "completed",
    "faulted",
    "cancelled",
    "limit",
    "decision",
    "ignored",
    "note",
]
"""How a line reads: a front end may colour it (the CLI does, on a terminal)."""

_EVENT_COLUMN = 34
"""Event descriptions are padded to at least this width, and to the longest one of the run
(up to _WIDEST), so that the `->` of every line stands in one column."""
_WIDEST = 80
"""A longer event description pushes its own line to the right rather than every line."""

_decoder = msgspec.json.Decoder(DryRunResult)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    tone: Tone


def seconds(ms: int) -> str:
    """Virtual time as seconds from the start: `12.500s`."""
    return f"{ms / 1000:.3f}s"


def span(ms: int) -> str:
    """A length of time, in the one style of the core (sfc.words.duration)."""
    return duration(ms)


def _name(action_key: str) -> str:
    # Action names contain no ':' (SFC017), so the name is what follows the last one.
    return action_key.rpartition(":")[2]


def _short(command_id: str, action_key: str) -> str:
    """`job-1:tighten#4:hold` -> `tighten#4:hold`."""
    prefix = action_key[: len(action_key) - len(_name(action_key))]
    return command_id.removeprefix(prefix)


def _answered(command_id: str | None, action_key: str, issued: dict[str, StartWork]) -> str:
    """`tighten#4` with the attempt (and round, past the first) of the command it answers."""
    if command_id is None:
        return _name(action_key)
    text = _short(command_id, action_key)
    cmd = issued.get(command_id)
    if cmd is None:
        return text
    details = [f"attempt {cmd.attempt}"] if cmd.work == "push" else []
    if cmd.work == "restart":
        details.append("restart")
    if cmd.round > 1:
        details.append(f"round {cmd.round}")
    return f"{text} ({', '.join(details)})" if details else text


def describe_event(event: object, issued: dict[str, StartWork] | None = None) -> str:
    """What happened, in a few words. `issued` maps command ids to the commands given so far."""
    issued = {} if issued is None else issued
    if isinstance(event, Start):
        return "start"
    if isinstance(event, Tick):
        outage = 0 if isinstance(event.outage_ms, msgspec.UnsetType) else event.outage_ms
        return f"tick after an outage of {span(outage)}" if outage else "tick"
    if isinstance(event, ActionCompleted):
        command_id = None if isinstance(event.command_id, msgspec.UnsetType) else event.command_id
        outcome = "done" if isinstance(event.outcome, msgspec.UnsetType) else event.outcome
        return f"reply {_answered(command_id, event.action_key, issued)}: {outcome}"
    if isinstance(event, ActionFailed):
        command_id = None if isinstance(event.command_id, msgspec.UnsetType) else event.command_id
        error = "" if isinstance(event.error, msgspec.UnsetType) else f" {event.error!r}"
        return f"failure {_answered(command_id, event.action_key, issued)}: error{error}"
    if isinstance(event, EventReceived):
        wait = issued.get(event.id) if isinstance(event.id, str) else None
        if wait is not None and wait.work == "await":
            # The simulated equipment's answer to a wait carries the wait's command id as its id.
            return f"event for {_short(wait.command_id, wait.action_key)}: {event.outcome}"
        text = f"event {event.type_id}: {event.outcome}"
        matched = [
            f"{k} {v}"
            for k, v in (("subject", event.subject), ("correlationId", event.correlation_id))
            if isinstance(v, str)
        ]
        return f"{text} ({', '.join(matched)})" if matched else text
    if isinstance(event, Hold):
        return "operator hold"
    if isinstance(event, Release):
        return "operator release"
    if isinstance(event, Cancel):
        return f"operator cancel: {event.reason}" if event.reason else "operator cancel"
    if isinstance(event, Resume):
        return "resume"
    return type(event).__name__


def describe_command(command: Command, issued: dict[str, StartWork] | None = None) -> str:
    """One command, e.g. `push tighten#4 (attempt 2, deadline 120.000s)`.

    A command id in `issued` (the commands given so far) is the same command issued again,
    e.g. by a release, not a second order: `push send_bye#1 re-issued (same command id,
    attempt 1, deadline moved from 10.000s to 42.000s)`.
    """
    short = _short(command.command_id, command.action_key)
    if isinstance(command, CancelWork):
        return f"withdraw {short} ({command.reason})" if command.reason else f"withdraw {short}"
    details = [f"attempt {command.attempt}"] if command.work == "push" else []
    if command.qualifier is not UNSET:  # absent for N
        details.insert(0, command.qualifier)
    if command.round > 1:
        details.append(f"round {command.round}")
    before = None if issued is None else issued.get(command.command_id)
    if before is None:
        details.append(f"deadline {seconds(command.deadline)}")
        if command.stop_at is not UNSET:
            details.append(f"stop at {seconds(command.stop_at)}")
        return f"{command.work} {short} ({', '.join(details)})"
    if before.deadline != command.deadline:
        details.append(
            f"deadline moved from {seconds(before.deadline)} to {seconds(command.deadline)}"
        )
    else:
        details.append(f"deadline {seconds(command.deadline)}")
    return f"{command.work} {short} re-issued (same command id, {', '.join(details)})"


def describe_continuation(continuation: Continuation) -> str | None:
    """How the job ended in this evaluation; None while it goes on."""
    if isinstance(continuation, Complete):
        outcomes = ", ".join(continuation.outcomes)
        return f"job completed with outcomes {outcomes}" if outcomes else "job completed"
    if isinstance(continuation, FaultContinuation):
        return f"job FAULTED ({continuation.code}): {continuation.message}"
    if isinstance(continuation, Cancelled):
        return "job cancelled"  # the reason is in the event and the disposition's reason
    return None


def _tone(disposition: str, continuation: Continuation) -> Tone:
    if isinstance(continuation, Complete):
        return "completed"
    if isinstance(continuation, FaultContinuation):
        return "faulted"
    if isinstance(continuation, Cancelled):
        return "cancelled"
    return (
        "absorbed"
        if disposition == "absorbed"
        else "rejected"
        if disposition == "rejected"
        else "applied"
    )


def held_since(transcript: Iterable[TranscriptEntry]) -> int | None:
    """When the operator hold in force at the end of the run began, or None."""
    since: int | None = None
    for entry in transcript:
        if entry.disposition != "applied":
            continue
        if isinstance(entry.event, Hold):
            since = entry.at_ms
        elif isinstance(entry.event, (Release, Cancel)):
            since = None
    return since


def _summary(result: DryRunResult, stalled: bool) -> Line:
    n = len(result.transcript)
    evaluations = f"{n} evaluation{'' if n == 1 else 's'}"
    at = seconds(result.at_ms)
    if result.end == "completed":
        return Line(f"end: completed at {at} after {evaluations}", "completed")
    if result.end == "faulted":
        why = "" if result.fault is None else f" ({result.fault.code}: {result.fault.message})"
        return Line(f"end: faulted at {at} after {evaluations}{why}", "faulted")
    if result.end == "cancelled":
        return Line(f"end: cancelled at {at} after {evaluations}", "cancelled")
    if result.end == "time_limit":
        held = held_since(result.transcript)
        if stalled and held is not None:
            why = f"the job is held since {seconds(held)} and nothing more can happen"
        elif stalled:
            why = "nothing more can happen and the job had not ended"
        elif held is not None:
            why = f"the job had not ended (held since {seconds(held)})"
        else:
            why = "the job had not ended"
        return Line(
            f"end: time limit of {span(result.at_ms)} reached after {evaluations}; {why}", "limit"
        )
    return Line(
        f"end: evaluation limit of {evaluations} reached at {at}; the job had not ended", "limit"
    )


def describe_steps(steps: list[str]) -> str:
    """Where the job is: `[now: TightenBolts, QaCheck]`, in the order the steps became active."""
    return f"[now: {', '.join(steps)}]" if steps else "[now: no active step]"


def lines(result: DryRunResult, *, stalled: bool = False, decisions: bool = False) -> list[Line]:
    """One line per evaluation, then the end of the run.

    `decisions`: beneath each line, the decisions of the evaluation that its reason does not
    already say (a transition that fired, a sequence that started), indented and marked `·`.

    `stalled`: the run ended `time_limit` because nothing more could happen (Simulation.stalled),
    e.g. a job held for good; the last line then says so.
    """
    issued: dict[str, StartWork] = {}
    notes = [] if isinstance(result.notes, msgspec.UnsetType) else list(result.notes)
    events: list[str] = []
    for entry in result.transcript:
        events.append(describe_event(entry.event, issued))
        for command in entry.commands:
            if isinstance(command, StartWork):
                issued.setdefault(command.command_id, command)
    width = max(
        [_EVENT_COLUMN] + [len(e) for e in events + [n.item for n in notes] if len(e) <= _WIDEST]
    )
    issued = {}
    out: list[Line] = []
    shown: list[str] | None = None  # the active steps as the lines so far tell them
    for i, entry in enumerate(result.transcript):
        out.extend(_note_line(n, width) for n in notes if n.after == i)
        text = f"{seconds(entry.at_ms):>11}  {events[i]:<{width}}  -> {entry.disposition}: {entry.reason}"
        if entry.commands:
            text += "  => " + "; ".join(describe_command(c, issued) for c in entry.commands)
        ended = describe_continuation(entry.continuation)
        if ended is not None:
            text += f"  => {ended}"
        # A document written before activeSteps existed has none: then the lines say nothing.
        steps = None if isinstance(entry.active_steps, msgspec.UnsetType) else entry.active_steps
        if steps is not None and steps != shown:
            if ended is None:
                text += f"  {describe_steps(steps)}"
            shown = steps
        out.append(Line(text, _tone(entry.disposition, entry.continuation)))
        if decisions:
            out.extend(Line(text, "decision") for text in _decision_lines(entry))
        for command in entry.commands:
            if isinstance(command, StartWork):
                issued[command.command_id] = command
    n = len(result.transcript)
    out.extend(_note_line(note, width) for note in notes if note.after >= n)
    out.append(_summary(result, stalled))
    return out


def _note_line(note: Note, width: int) -> Line:
    """A script item that was no evaluation: `--` instead of `->`."""
    said = f"ignored: {note.reason}" if note.kind == "ignored" else note.reason
    tone: Tone = "ignored" if note.kind == "ignored" else "note"
    return Line(f"{seconds(note.at_ms):>11}  {note.item:<{width}}  -- {said}", tone)


def _decision_lines(entry: TranscriptEntry) -> list[str]:
    """The evaluation's decisions that its reason does not already say, one per line."""
    if isinstance(entry.decisions, msgspec.UnsetType):  # written before decisions existed
        return []
    return [f"{'':>11}  · {d.decision}" for d in entry.decisions if d.decision not in entry.reason]


def to_text(result: DryRunResult, *, stalled: bool = False, decisions: bool = False) -> str:
    """The text form: one line per evaluation (with `decisions`, and the decisions beneath
    it) and a last line on how the run ended."""
    return "".join(line.text + "\n" for line in lines(result, stalled=stalled, decisions=decisions))


def to_json(result: DryRunResult, indent: int = 2) -> bytes:
    """The JSON form (schemas/dryrun_result_v1_2.json), keys in schema order, newline-terminated."""
    data = _encoder.encode(result)
    if indent:
        data = msgspec.json.format(data, indent=indent)
    return data + b"\n"


def from_json(data: bytes) -> DryRunResult:
    return _decoder.decode(data)

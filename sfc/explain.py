"""The explainer: a recipe, and the state of a job, described in plain words.

`explain_recipe(graph)` says what the chart does: its steps and action blocks (interaction,
type, deadline, attempts, hold logic), its transitions with conditions and priorities, its
divergences, and what ends a job. `explain_state(graph, state)` says where a job is, what it
waits for (each open command or wait with its attempt and deadline), when the next deadline
is due and what happens then, and whether the job is held, ended or faulted, and why.

Times in a state are epoch milliseconds. On the simulation's virtual clock, which starts at
0, they read as seconds from the start (`45.000s`); real times read as UTC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from generated.state_v1_5 import ActionRecord, SfcState
from sfc.evolution import DEFAULT_MAX_ATTEMPTS, ENDED, next_deadline
from sfc.graph import STORED, TRUE, ActionSpec, DivergenceSpec, Graph, TransitionSpec, visible
from sfc.words import duration as duration
from sfc.words import when as when


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _params(parameters: dict[str, Any]) -> str:
    return json.dumps(parameters, ensure_ascii=False, separators=(", ", ": "))


def _condition(t: TransitionSpec) -> str:
    if t.condition == TRUE:
        return "true (the default)"
    return f"outcome {t.condition}"


SHOWN = 200
"""Most characters of a job's scope shown; a longer one is cut, with a mark."""


def _cut(text: str) -> str:
    more = len(text) - SHOWN
    return text if more <= 0 else f"{text[:SHOWN]}… ({more:,} more characters)"


def _target(graph: Graph, name: str) -> str:
    if name in graph.divergences:
        return f"divergence {name}"
    return f"step {name}"


def _where(graph: Graph, step: str) -> str:
    pos = graph.position.get(step)
    if pos is None:
        return ""
    seq = graph.divergences[pos.divergence].sequences[pos.sequence]
    return (
        f", step {pos.index + 1} of {len(seq)} in sequence {pos.sequence + 1} "
        f"of divergence {pos.divergence}"
    )


def _attempts(spec: ActionSpec, default: int) -> str:
    if spec.max_attempts is None:
        return f"up to {_plural(default, 'attempt')} (the host default)"
    return f"up to {_plural(spec.max_attempts, 'attempt')}"


def _selector(spec: ActionSpec) -> str:
    parts = []
    if spec.subject is not None:
        parts.append(f"subject {spec.subject}")
    if spec.correlation_id is not None:
        parts.append(f"correlationId {spec.correlation_id}")
    return f" with {' and '.join(parts)}" if parts else " (any event of the type)"


def qualifier_words(spec: ActionSpec, reset_in: tuple[str, ...] = ()) -> str | None:
    """What the qualifier of an action block does, in words; None for N (the plain case).

    `reset_in` names the steps whose R blocks reset the action (stored actions only).
    """
    q = spec.qualifier
    t = "" if spec.duration_ms is None else duration(spec.duration_ms)
    by = "the job ends (no R block resets it)"
    if reset_in:
        by = f"an R resets it (in {' or '.join(f'step {s}' for s in reset_in)}) or the job ends"
    words = {
        "P": "sent once at entry (a pulse, the same as P1 here) and runs to its end",
        "P1": "sent once at entry (a pulse) and runs to its end",
        "P0": "sent once when the step is left (a pulse) and runs to its end",
        "L": f"sent at entry; withdrawn after {t}, or when the step is left if that is sooner",
        "D": f"sent if the step is still active after {t}; withdrawn when the step is left",
        "S": f"sent at entry and stored: it runs on after the step is left, until {by}",
        "SD": f"sent {t} after entry, even if the step was left, unless an R resets it "
        f"first; then stored until {by}",
        "DS": f"sent if the step is still active after {t}, then stored until {by}",
        "SL": f"sent at entry and stored; withdrawn after {t}, or sooner when {by}",
    }.get(q)
    if words is None:
        return None
    head = f"{q} {t}" if t else q
    return f"{head}: {words}; not waited for"


def describe_action(
    spec: ActionSpec,
    max_attempts_default: int = DEFAULT_MAX_ATTEMPTS,
    reset_in: tuple[str, ...] = (),
) -> list[str]:
    """An action block in a few lines, the first naming it; a qualifier other than N in words
    on the second."""
    lines = _describe_work(spec, max_attempts_default)
    words = qualifier_words(spec, reset_in)
    if words is not None:
        lines.insert(1, f"  {words}")
    return lines


def _describe_work(spec: ActionSpec, max_attempts_default: int) -> list[str]:
    if not spec.push:
        return [
            f"{spec.name}: waits for event {spec.type_id}{_selector(spec)}, "
            f"for {duration(spec.timeout_ms)}; no event in time gives outcome timeout"
        ]
    attempts = max_attempts_default if spec.max_attempts is None else spec.max_attempts
    if attempts == 1:
        lines = [
            f"{spec.name}: push command {spec.type_id}, {duration(spec.timeout_ms)}, "
            f"{_attempts(spec, max_attempts_default).replace('up to ', '')} only; "
            "no answer in time gives outcome timeout"
        ]
    else:
        lines = [
            f"{spec.name}: push command {spec.type_id}, {duration(spec.timeout_ms)} per attempt, "
            f"{_attempts(spec, max_attempts_default)}; an unanswered attempt is sent again, "
            "the last one gives outcome timeout"
        ]
    if spec.parameters:
        lines.append(f"  parameters {_params(spec.parameters)}")
    if spec.hold is not None and spec.restart is not None:
        lines.append(
            f"  hold logic: on a pause the equipment is told to hold the work "
            f"({spec.hold.type_id}, answer held within {duration(spec.hold.timeout_ms)}); "
            f"on resume it is restarted ({spec.restart.type_id}, "
            f"{duration(spec.restart.timeout_ms)})"
        )
    return lines


def _transition_lines(graph: Graph, transitions: tuple[TransitionSpec, ...]) -> list[str]:
    several = len(transitions) > 1
    return [
        f"{'priority ' + str(t.priority) + ': ' if several else ''}-> {_target(graph, t.target)} "
        f"on {_condition(t)}"
        for t in transitions
    ]


def _divergence_lines(graph: Graph, spec: DivergenceSpec) -> list[str]:
    n = len(spec.sequences)
    if spec.kind == "simultaneous":
        head = f"{spec.name}: simultaneous divergence, all {n} sequences run together"
    else:
        head = f"{spec.name}: selection divergence, one of {n} sequences runs"
    out = [head]
    for i, seq in enumerate(spec.sequences):
        out.append(f"  sequence {i + 1}: {' -> '.join(seq)}")
    sources = [t.source for t in graph.transitions if t.target == spec.name]
    if sources:
        out.append(f"  entered from: {', '.join(sources)}")
    if spec.kind == "selection":
        out.append("  the sequence is chosen with the outcomes of the step that led here:")
        several = len(spec.entries) > 1
        for t, i in zip(spec.entries, spec.entry_sequence, strict=True):
            prio = f"priority {t.priority}: " if several else ""
            out.append(f"    {prio}sequence {i + 1} ({t.target}) on {_condition(t)}")
    if spec.kind == "simultaneous":
        basis = "when every sequence is done, cleared with the outcomes of every sequence"
    else:
        basis = "when the sequence taken is done, cleared with its outcomes"
    if spec.exits:
        out.append(f"  at the convergence, {basis}:")
        out.extend(f"    {line}" for line in _transition_lines(graph, spec.exits))
    else:
        out.append("  no exit: the convergence completes the job")
    return out


def explain_recipe(graph: Graph, max_attempts_default: int = DEFAULT_MAX_ATTEMPTS) -> str:
    """What the recipe does, in plain words."""
    kinds = [d.kind for d in graph.divergences.values()]
    counts = [
        _plural(len(graph.steps), "step"),
        _plural(len(graph.transitions), "transition"),
        _plural(len(graph.actions), "action block"),
        _plural(len(kinds), "divergence"),
    ]
    resets = sum(len(names) for names in graph.resets.values())
    if resets:
        counts.insert(3, _plural(resets, "R block"))
    qualified = resets or graph.min_ms or any(not a.gating for a in graph.actions.values())
    reset_in: dict[str, list[str]] = {}
    for step, names in graph.resets.items():
        for name in names:
            reset_in.setdefault(name, []).append(step)
    out = [
        f"Recipe {graph.recipe_hash[:12]} ({graph.dataschema})",
        ", ".join(counts) + ".",
        "",
        f"The job starts in step {graph.initial}. Entering a step starts all its action blocks;"
        + (
            " the step is done when every N block has an outcome and its MinSeconds have "
            "passed. The other qualifiers are not waited for: their outcomes are recorded and "
            "never decide a transition (docs/qualifiers.md)."
            if qualified
            else " the step is done when every one has an outcome."
        ),
        "",
        "Steps",
    ]
    ends: list[str] = []
    for step in graph.steps:
        initial = " (initial step)" if step == graph.initial else ""
        out.append(f"  {step}{initial}{_where(graph, step)}")
        specs = graph.step_actions[step]
        dwell = graph.min_ms.get(step)
        for name in graph.resets.get(step, ()):
            stored = graph.actions[name]
            pending = (
                ", or drops its timer if it has not started yet"
                if stored.qualifier in ("SD", "DS")
                else ""
            )
            out.append(
                f"    R {name}: at entry, resets {name} ({stored.qualifier} in step "
                f"{stored.step}): withdraws its work if it is still open{pending}"
            )
        if not specs and dwell is not None:
            out.append(f"    no action blocks: a timer step, done {duration(dwell)} after entry")
        elif not specs:
            out.append("    no action blocks: passed through at once")
        for spec in specs:
            out.extend(
                f"    {line}"
                for line in describe_action(
                    spec, max_attempts_default, tuple(reset_in.get(spec.name, ()))
                )
            )
        if specs and dwell is not None:
            out.append(
                f"    the step is not done before {duration(dwell)} after entry (MinSeconds)"
            )
        elif specs and not any(a.gating for a in specs):
            out.append("    no N action: passed through at once, once its actions are started")
        pos = graph.position.get(step)
        if pos is not None:
            if pos.last:
                out.append(f"    then: the convergence of {pos.divergence}")
            else:
                nxt = graph.divergences[pos.divergence].sequences[pos.sequence][pos.index + 1]
                out.append(f"    then: step {nxt}, next in the sequence")
            continue
        transitions = graph.outgoing[step]
        if not transitions:
            out.append("    then: the job completes (no outgoing transition)")
            ends.append(f"step {step}")
        elif len(transitions) == 1:
            t = transitions[0]
            out.append(f"    then: {_target(graph, t.target)} on {_condition(t)}")
        else:
            out.append("    then, the first that matches by priority:")
            out.extend(f"      {line}" for line in _transition_lines(graph, transitions))

    if graph.divergences:
        out += ["", "Divergences"]
        for div in graph.divergences.values():
            out.extend(f"  {line}" for line in _divergence_lines(graph, div))
            if not div.exits:
                ends.append(f"the convergence of {div.name}")

    out += [
        "",
        "Transitions (tried by priority, lower first; the first that matches fires; the "
        'default condition "true" matches any outcome, but not a timeout or error)',
    ]
    for t in graph.transitions:
        out.append(f"  {t.source} -> {t.target}  condition {t.condition}, priority {t.priority}")
    if not graph.transitions:
        out.append("  none")

    out += ["", "What ends the job"]
    if ends and qualified:
        out.append(
            f"  completed: when {' or '.join(ends)} is reached and done (its N blocks succeed "
            "and its MinSeconds have passed); work still open then is withdrawn, except a "
            "pulse (P, P1, P0), which runs to its end"
        )
    elif ends:
        out.append(
            f"  completed: when {' or '.join(ends)} is reached and all its action blocks succeed"
        )
    else:
        out.append("  completed: never by itself: every step and divergence leads on (a loop)")
    out += [
        "  faulted: when an "
        + ("N " if qualified else "")
        + "action ends with timeout or error and no transition names that "
        "outcome; when no transition matches (no_transition); a failure inside a sequence "
        "of a divergence always faults the job, and open work of the other sequences is withdrawn"
        + ("; the outcome of any other qualifier never faults it" if qualified else ""),
        "  cancelled: when an operator aborts the job; open work is withdrawn",
    ]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- a job's state


def _short(state: SfcState, command_id: str | None) -> str:
    if command_id is None:
        return "?"
    return command_id.removeprefix(f"{state.job_id}:")


def _deadline(state: SfcState, rec: ActionRecord, then: str) -> str:
    """`, deadline 64.000s; if no answer by then, ...`, or `, with no deadline` when it has none."""
    if rec.deadline is None:
        return ", with no deadline"
    moved = ""
    if state.held_at is not None:  # (so a deadline in the past while paused is no surprise)
        left = duration(max(0, rec.deadline - state.held_at))
        moved = f" (moved by the length of the hold on release; {left} was left when it began)"
    return f", deadline {when(rec.deadline)}{moved}; {then}"


def _command(state: SfcState, rec: ActionRecord, limit: int) -> tuple[str, str]:
    """(`push command tighten#2 (type)`, `, attempt 1 of 3`), or the restart command and ``."""
    cmd = _short(state, rec.command_id)
    round_ = f", round {rec.round}" if rec.round > 1 else ""
    if rec.work == "restart":
        return f"restart command {cmd} ({rec.type_id})", round_
    return f"push command {cmd} ({rec.type_id})", f", attempt {rec.attempt} of {limit}{round_}"


def _expiry(rec: ActionRecord, limit: int) -> str:
    """What the deadline of open work does."""
    if rec.work == "push" and rec.attempt < limit:
        return f"if no answer by then, attempt {rec.attempt + 1} is sent"
    if rec.work == "push":
        return "if no answer by then, the outcome is timeout (no attempt left)"
    return "no answer by then gives outcome timeout"


def _open_lines(
    graph: Graph, state: SfcState, name: str, rec: ActionRecord, default_attempts: int
) -> list[str]:
    """An open record of a running job: the command or wait that is out, and its hold."""
    spec = graph.actions[name]
    limit = default_attempts if spec.max_attempts is None else spec.max_attempts
    head = f"{name} (step {spec.step}{_not_waited_for(spec)}): "
    if rec.work == "await":
        round_ = f", round {rec.round}" if rec.round > 1 else ""
        return [
            f"{head}waits for event {rec.type_id}{_selector_of(state, spec)} as "
            f"{_short(state, rec.command_id)}{round_}"
            + _deadline(state, rec, "no event by then gives outcome timeout")
        ]
    command, details = _command(state, rec, limit)
    restart = (
        ""
        if spec.restart is None
        else f" ({spec.restart.type_id}, {duration(spec.restart.timeout_ms)} to answer)"
    )
    if rec.hold == "held":
        then = (
            f"the release sends the restart command{restart}"
            if state.held_at is not None
            else f"the restart command{restart} follows"
        )
        return [f"{head}{command}{details}, was withdrawn: the equipment held the work; {then}"]
    if rec.hold == "open":
        hold_deadline = "" if rec.hold_deadline is None else f", deadline {when(rec.hold_deadline)}"
        if state.held_at is not None:
            held = "the work is withdrawn and the release sends the restart command"
        else:
            held = "the work is withdrawn and the restart command is sent at once"
        return [
            f"{head}{command} is out{details}"
            + _deadline(state, rec, "it does not run until the hold is answered"),
            f"  hold command {_short(state, rec.hold_command_id)} is out{hold_deadline}: "
            f"if the equipment answers held, {held}; any other answer, or none by then, "
            "and the work runs on to its deadline",
        ]
    out = [f"{head}{command} is out{details}" + _deadline(state, rec, _expiry(rec, limit))]
    if rec.timer is not None:
        out.append(
            f"  withdrawn at its limit at {when(rec.timer)} (outcome done), unless it ends first"
            + _moved(state)
        )
    if spec.qualifier in STORED:
        out.append("  stored: it runs on until an R resets it or the job ends")
    if rec.hold == "notHeld":
        out.append(
            "  the work was not held (the equipment answered the hold notHeld, or not in time); "
            "it runs on to its end"
        )
    if rec.restarted:
        out.append("  it restarts the work the equipment held")
    return out


def _not_waited_for(spec: ActionSpec) -> str:
    """`, D 10 s, not waited for` for a block of any qualifier but N; `` for N."""
    if spec.gating:
        return ""
    t = "" if spec.duration_ms is None else f" {duration(spec.duration_ms)}"
    return f", {spec.qualifier}{t}, not waited for"


def _moved(state: SfcState) -> str:
    """What a hold does to a process time shown while the job is held."""
    return " (moved by the length of the hold on release)" if state.held_at is not None else ""


def _timer_lines(graph: Graph, state: SfcState) -> list[str]:
    """The process timers of a running job that have not fired: pending starts and dwells."""
    out = []
    for name, rec in state.actions.items():
        spec = graph.actions.get(name)
        if spec is None or rec.status != "pending" or rec.timer is None:
            continue
        at = when(rec.timer)
        head = f"{name} ({spec.qualifier} {duration(spec.duration_ms or 0)}, step {spec.step}): "
        if spec.qualifier == "SD":
            then = f"starts at {at}, even if its step was left, unless an R resets it first"
        elif spec.qualifier == "DS":
            then = f"starts at {at} if step {spec.step} is still active then, and is stored"
        else:
            then = f"starts at {at} if step {spec.step} is still active then"
        out.append(head + then + _moved(state))
    for step, at_ms in state.dwells.items():
        out.append(f"step {step}: not done before {when(at_ms)} (MinSeconds){_moved(state)}")
    return out


def _withdrawn_lines(
    graph: Graph, state: SfcState, name: str, rec: ActionRecord, default_attempts: int
) -> list[str]:
    """A record the core left open when the job ended: its work was withdrawn (or is moot)."""
    spec = graph.actions[name]
    limit = default_attempts if spec.max_attempts is None else spec.max_attempts
    head = f"{name} (step {spec.step}): "
    if rec.work == "await":
        what = f"the wait {_short(state, rec.command_id)} for event {rec.type_id}"
    else:
        what = "".join(_command(state, rec, limit)) + ","
    if state.status == "completed":
        return [f"{head}{what} was no longer awaited when the job completed"]
    if state.status == "cancelled":
        why = f"when the job was cancelled ({state.cancel_reason or 'cancelled'})"
    else:
        why = "when the job faulted (teardown)"
    if rec.hold == "held":
        return [
            f"{head}{what} was withdrawn when the equipment held the work; "
            f"no restart command was sent, as the job ended"
        ]
    out = [f"{head}{what} was withdrawn {why}"]
    if rec.hold == "open":
        out.append(f"  and with it hold command {_short(state, rec.hold_command_id)}")
    return out


def _selector_of(state: SfcState, spec: ActionSpec) -> str:
    parts = []
    if spec.subject is not None:
        parts.append(f"subject {spec.subject.replace('{jobId}', state.job_id)}")
    if spec.correlation_id is not None:
        parts.append(f"correlationId {spec.correlation_id.replace('{jobId}', state.job_id)}")
    return f" with {' and '.join(parts)}" if parts else ""


def _due_lines(graph: Graph, state: SfcState, at: int, default_attempts: int) -> list[str]:
    """What happens at the next deadline."""
    held = state.held_at is not None
    out = []
    for name, rec in state.actions.items():
        if rec.status != "open" or name not in graph.actions:
            continue
        if rec.hold == "open" and rec.hold_deadline == at:
            out.append(f"the hold of {name} counts as not held, and the work runs on")
        elif not held and rec.hold != "open" and rec.deadline == at:
            spec = graph.actions[name]
            limit = default_attempts if spec.max_attempts is None else spec.max_attempts
            if rec.work == "push" and rec.attempt < limit:
                out.append(f"{name} is sent again (attempt {rec.attempt + 1} of {limit})")
            else:
                out.append(f"{name} ends with outcome timeout")
    if held:  # process timers wait for the release, as work deadlines do
        return out
    for name, rec in state.actions.items():
        timed = graph.actions.get(name)
        if timed is None or rec.timer != at:
            continue
        if rec.status == "pending":
            still = (
                f" if step {timed.step} is still active" if timed.qualifier in ("D", "DS") else ""
            )
            out.append(f"{name} ({timed.qualifier}) starts{still}")
        elif rec.status == "open":
            out.append(f"{name} ({timed.qualifier}) is withdrawn at its limit")
    out += [f"the dwell of step {step} passes" for step, d in state.dwells.items() if d == at]
    return out


def _numbers(indexes: list[int]) -> str:
    shown = [str(i + 1) for i in indexes]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def _sequences(indexes: list[int]) -> str:
    word = "sequence" if len(indexes) == 1 else "sequences"
    return f"{word} {_numbers(indexes)}"


def _convergence(finished: list[int], running: list[int]) -> str:
    """Which sequences have reached the convergence and which still run, in words."""
    if not finished:
        return "none has reached the convergence yet"
    reached = (
        f"{_sequences(finished)} {'has' if len(finished) == 1 else 'have'} reached the convergence"
    )
    if not running:
        return reached
    return f"{reached}, {_numbers(running)} {'is' if len(running) == 1 else 'are'} still running"


def _status_lines(graph: Graph, state: SfcState) -> list[str]:
    if state.status == "ready":
        return [f"The job has not started; a start enters step {graph.initial}."]
    since = "" if state.started_at is None else f", started at {when(state.started_at)}"
    if state.ended_at is not None:
        since += f", ended at {when(state.ended_at)}"
    elif state.status in ENDED:
        since += ", ended at a time the state does not record"
    if state.status == "completed":
        outcomes = ", ".join(state.outcomes) or "none"
        return [f"The job completed{since}; its outcomes: {outcomes}."]
    if state.status == "faulted":
        fault = state.fault
        why = "" if fault is None else f" ({fault.code}): {fault.message}"
        return [f"The job FAULTED{since}{why}."]
    if state.status == "cancelled":
        return [f"The job was cancelled{since}: {state.cancel_reason or 'cancelled'}."]
    if state.held_at is not None:
        return [
            f"The job is HELD since {when(state.held_at)} (operator pause){since}: no "
            "transition fires and nothing is dispatched except hold commands; answers are "
            "recorded; work deadlines do not run and move by the length of the hold on release."
        ]
    return [f"The job is running{since}."]


@dataclass(frozen=True)
class Wait:
    """One open record of a running job, as the explainer says it (`lines`): the action,
    its step, its open work (push, restart or await) with command id, type and deadline,
    and its hold (`open`: a hold command is out)."""

    action: str
    step: str
    work: str
    command_id: str | None
    type_id: str
    attempt: int
    deadline: int | None
    hold: str | None
    hold_command_id: str | None
    lines: tuple[str, ...]


def waits(
    graph: Graph, state: SfcState, max_attempts_default: int = DEFAULT_MAX_ATTEMPTS
) -> list[Wait]:
    """What a running job waits for: each open record of an action of the recipe."""
    if state.status != "running":
        return []
    return [
        Wait(
            action=name,
            step=graph.actions[name].step,
            work=rec.work,
            command_id=rec.command_id,
            type_id=rec.type_id,
            attempt=rec.attempt,
            deadline=rec.deadline,
            hold=rec.hold,
            hold_command_id=rec.hold_command_id if rec.hold == "open" else None,
            lines=tuple(_open_lines(graph, state, name, rec, max_attempts_default)),
        )
        for name, rec in state.actions.items()
        if rec.status == "open" and name in graph.actions
    ]


@dataclass(frozen=True)
class Deadline:
    """A running job's next deadline (None: none) and what happens then, in words."""

    at: int | None
    what: tuple[str, ...]
    text: str


def deadline_of(
    graph: Graph, state: SfcState, max_attempts_default: int = DEFAULT_MAX_ATTEMPTS
) -> Deadline:
    """The next deadline of a running job, as `explain_state` says it."""
    due = next_deadline(state)
    if due is None:
        text = (
            "Next deadline: none while the job is held (no hold command is open)"
            if state.held_at is not None
            else "Next deadline: none"
        )
        return Deadline(None, (), text)
    what = _due_lines(graph, state, due, max_attempts_default)
    return Deadline(
        due, tuple(what), f"Next deadline: {when(due)}" + (f": {'; '.join(what)}" if what else "")
    )


def explain_state(
    graph: Graph, state: SfcState, max_attempts_default: int = DEFAULT_MAX_ATTEMPTS
) -> str:
    """Where the job is, what it waits for, when the next deadline is due, and how it ended."""
    out = [
        f"Job {visible(state.job_id)} (scope {_cut(visible(state.scope))}), "
        f"recipe {state.recipe_hash[:12]}"
    ]
    if state.recipe_hash != graph.recipe_hash:
        out.append(
            f"WARNING: the state is pinned to recipe {state.recipe_hash[:12]}, "
            f"not to this one ({graph.recipe_hash[:12]})"
        )
    out += _status_lines(graph, state)

    ended = state.status in ENDED
    if state.active_steps:
        out += ["", "Where the job stopped" if ended else "Where the job is"]
        for step in state.active_steps:
            out.append(f"  step {step}{_where(graph, step)}")
        for d in state.divergences:
            spec = graph.divergences.get(d.name)
            kind = "" if spec is None else f"{spec.kind} "
            running = [i for i in d.sequences if i not in d.finished]
            out.append(
                f"  {kind}divergence {d.name}: {_sequences(d.sequences)} taken; "
                f"{_convergence(d.finished, running)}"
            )

    open_recs = [(n, r) for n, r in state.actions.items() if r.status == "open"]
    if ended and open_recs:
        # The core leaves these records as they were; the work itself was withdrawn.
        out += ["", "Work that was open when the job ended"]
        for name, rec in open_recs:
            if name in graph.actions:
                out.extend(
                    f"  {line}"
                    for line in _withdrawn_lines(graph, state, name, rec, max_attempts_default)
                )
    if state.status == "running":
        out += ["", "What it waits for"]
        found = waits(graph, state, max_attempts_default)
        waited = [w for w in found if graph.actions[w.action].gating]
        not_waited = [w for w in found if not graph.actions[w.action].gating]
        if not waited:
            out.append("  no work it waits for is open" if not_waited else "  nothing is open")
        for w in waited:
            out.extend(f"  {line}" for line in w.lines)
        if not_waited:  # its outcome is recorded; no transition waits for it
            out += ["", "Running, not waited for"]
            for w in not_waited:
                out.extend(f"  {line}" for line in w.lines)
        # The state keeps records of active steps and of open divergences only.
        recorded = [
            (n, r) for n, r in state.actions.items() if r.status == "done" and n in graph.actions
        ]
        timers = _timer_lines(graph, state)
        if timers:
            out += ["", "Timers that have not fired (process time: an outage does not move them)"]
            out.extend(f"  {line}" for line in timers)
        if recorded:
            out += ["", "Already done in the active steps and open divergences"]
            for name, rec in recorded:
                error = f" ({rec.error})" if rec.error else ""
                block = graph.actions[name]
                recorded_only = (
                    "" if block.gating else f" ({block.qualifier}: recorded, not waited for)"
                )
                out.append(f"  {name}: outcome {rec.outcome}{error}{recorded_only}")
        out += ["", deadline_of(graph, state, max_attempts_default).text]
    return "\n".join(out) + "\n"


def explain(
    graph: Graph, state: SfcState | None = None, max_attempts_default: int = DEFAULT_MAX_ATTEMPTS
) -> str:
    """The recipe, or, with a state, the job."""
    if state is None:
        return explain_recipe(graph, max_attempts_default)
    return explain_state(graph, state, max_attempts_default)

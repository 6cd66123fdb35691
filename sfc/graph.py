"""The graph: a recipe that built, with every index evolve needs, computed once and reused.

`build()` (sfc/builder.py) validates a recipe and only then calls `index()` here, so
`index()` may assume a valid chart: every reference resolves, priorities are unique,
every divergence has sequences.

Names follow IEC 61131-3: steps, transitions, action blocks, divergences and their
sequences. A *node* is a step or a divergence; transitions connect nodes. Inside a sequence
steps follow each other without transitions; the transitions of a divergence are its
selection transitions (divergence -> first step of a sequence, selection only) and its
exits (divergence -> anything else, cleared at the convergence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from msgspec import UNSET, UnsetType

from generated.recipe_v1_2_0 import Recipe

_T = TypeVar("_T")

TRUE = "true"
"""The condition of a default transition."""

RESERVED_OUTCOMES = ("timeout", "error")
"""Outcomes the core gives itself: attempts used up, and a failure reported."""

QUALIFIERS = ("N", "P", "P1", "P0", "S", "R", "L", "D", "SD", "DS", "SL")
"""IEC 61131-3's action qualifiers (docs/qualifiers.md); only N is gating."""

TIMED = frozenset({"L", "D", "SD", "DS", "SL"})
"""Qualifiers with a duration T (DurationSeconds)."""

STORED = frozenset({"S", "SD", "DS", "SL"})
"""Qualifiers of stored actions: their work outlives the step until an R resets it."""

PULSES = frozenset({"P", "P1", "P0"})
"""One-shot qualifiers: their work is started once and never withdrawn."""

DEFAULT_OUTCOME = "done"
"""The outcome of a push response that names none."""

OUTCOME_LIMIT = 256
"""Most characters of an outcome; an answer or event with a longer one is rejected."""

BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""Characters that reorder the text around them (Unicode bidi embeddings, overrides, isolates
and marks): a name with one reads differently from what it is."""


def unsafe_char(text: str) -> str | None:
    """The first control, line-separator or bidi-control character of `text`, or None.

    Such a character breaks a line of `sfc explain`, a label of a chart, or makes a name
    read as another; names may not contain one (SFC017) and the renderers show one as `\\uXXXX`.
    """
    for ch in text:
        if ch in BIDI_CONTROLS or not (ch.isprintable() or ch == " "):
            return ch
    return None


def visible(text: str) -> str:
    """`text` with every unsafe character written as `\\uXXXX`, so it shows and does no harm."""
    if unsafe_char(text) is None:
        return text
    return "".join(
        f"\\u{ord(ch):04x}" if ch in BIDI_CONTROLS or not (ch.isprintable() or ch == " ") else ch
        for ch in text
    )


@dataclass(frozen=True, slots=True)
class EquipmentCommandSpec:
    """A hold or restart command of an action with ISA-88 hold logic."""

    type_id: str
    timeout_ms: int
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    index: int
    name: str
    step: str
    push: bool
    """True for push_command (send and wait for the answer), False for pull_event (await)."""
    type_id: str
    timeout_ms: int
    max_attempts: int | None
    """None: the snapshot's default applies."""
    parameters: dict[str, Any]
    subject: str | None
    """Selector.Subject, with {jobId} still in it; pull events only."""
    correlation_id: str | None
    """Selector.CorrelationId, with {jobId} still in it; pull events only."""
    hold: EquipmentCommandSpec | None
    restart: EquipmentCommandSpec | None
    qualifier: str = "N"
    """One of QUALIFIERS; never R (R blocks are indexed in Graph.resets)."""
    duration_ms: int | None = None
    """T of the qualifier in ms (DurationSeconds); set exactly for L, D, SD, DS and SL."""
    gating: bool = True
    """True only for N: the step waits for its outcome, and its transitions see it."""


@dataclass(frozen=True, slots=True)
class TransitionSpec:
    index: int
    source: str
    target: str
    condition: str
    priority: int


@dataclass(frozen=True, slots=True)
class DivergenceSpec:
    name: str
    kind: Literal["simultaneous", "selection"]
    sequences: tuple[tuple[str, ...], ...]
    entries: tuple[TransitionSpec, ...]
    """Selection transitions, by priority; entries[i] picks the sequence `entry_sequence[i]`."""
    entry_sequence: tuple[int, ...]
    exits: tuple[TransitionSpec, ...]
    """Transitions cleared at the convergence, by priority."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a step sits inside a divergence."""

    divergence: str
    sequence: int
    index: int
    last: bool


@dataclass(frozen=True, slots=True)
class Graph:
    recipe_hash: str
    dataschema: str
    initial: str
    steps: tuple[str, ...]
    """Step names in recipe order."""
    actions: dict[str, ActionSpec]
    """Action blocks by name, in recipe order: the block that defines each name (never an R)."""
    step_actions: dict[str, tuple[ActionSpec, ...]]
    """The action blocks of each step but its R blocks, gating or not, in recipe order (every
    step has an entry, possibly empty)."""
    transitions: tuple[TransitionSpec, ...]
    outgoing: dict[str, tuple[TransitionSpec, ...]]
    """Transitions leaving each top-level step, by priority (every step outside a sequence has an entry)."""
    divergences: dict[str, DivergenceSpec]
    position: dict[str, Position]
    """Steps inside sequences."""
    waits_by_type: dict[str, tuple[ActionSpec, ...]] = field(default_factory=dict)
    """Pull-event actions by the type id they await."""
    cyclic: frozenset[str] = frozenset()
    """Action blocks that can be entered again: their step, or the divergence it lies in,
    is on a cycle of the chart. Only these need a round counter once their step is left."""
    divergence_actions: dict[str, tuple[ActionSpec, ...]] = field(default_factory=dict)
    """The action blocks of every sequence of each divergence."""
    resets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Step -> the stored actions (S, SD, DS, SL) its R blocks reset at its entry, in recipe
    order; only steps with R blocks have an entry."""
    min_ms: dict[str, int] = field(default_factory=dict)
    """Step -> its MinSeconds in ms: the step is not done before entry + this. Only steps
    that have MinSeconds have an entry."""
    step_gating: dict[str, tuple[ActionSpec, ...]] = field(default_factory=dict)
    """The gating (N) action blocks of each step, in recipe order (every step has an entry)."""
    step_non_gating: dict[str, tuple[ActionSpec, ...]] = field(default_factory=dict)
    """The non-gating action blocks of each step, in recipe order; only steps that have
    some have an entry."""
    uses_qualifiers: bool = False
    """Whether the recipe uses a qualifier feature: a non-gating block, an R, a MinSeconds.
    Without one, evolve (and a host) can skip every qualifier rule."""
    has_timers: bool = False
    """Whether a state of this recipe can hold a process timer (L, D, SD, DS, SL) or a dwell
    (MinSeconds); without one, no process timer or dwell is ever due."""

    def gating_actions(self, step: str) -> tuple[ActionSpec, ...]:
        """The action blocks of a step whose outcomes it waits for (N), in recipe order."""
        return self.step_gating[step]

    def sequence_actions(self, divergence: str, sequences: list[int]) -> list[ActionSpec]:
        """The gating action blocks of the given sequences of a divergence, in sequence order
        (those whose outcomes the convergence sees)."""
        spec = self.divergences[divergence]
        return [a for i in sequences for step in spec.sequences[i] for a in self.step_gating[step]]


def _opt(value: Any, default: Any = None) -> Any:
    return default if value is UNSET else value


def _given(value: _T | UnsetType) -> _T:
    """A field that validation made sure of (every block but R has its TypeId, ...)."""
    assert not isinstance(value, UnsetType), "index() of a recipe that did not validate"
    return value


def _equipment(cmd: Any) -> EquipmentCommandSpec | None:
    if cmd is UNSET:
        return None
    return EquipmentCommandSpec(
        type_id=cmd.type_id,
        timeout_ms=cmd.timeout_seconds * 1000,
        parameters=_opt(cmd.parameters, {}),
    )


def seconds_to_ms(seconds: float) -> int:
    """A DurationSeconds or MinSeconds in whole milliseconds: the nearest, and at least 1."""
    return max(1, round(seconds * 1000))


def _by_priority(ts: list[TransitionSpec]) -> tuple[TransitionSpec, ...]:
    return tuple(sorted(ts, key=lambda t: (t.priority, t.index)))


def index(recipe: Recipe, recipe_hash: str, dataschema: str) -> Graph:
    """Compute the indexes of a recipe that passed validation."""
    steps = tuple(s.name for s in recipe.steps)
    initial = next(s.name for s in recipe.steps if _opt(s.initial, False))

    actions: dict[str, ActionSpec] = {}
    step_actions: dict[str, list[ActionSpec]] = {s: [] for s in steps}
    waits: dict[str, list[ActionSpec]] = {}
    resets: dict[str, list[str]] = {}
    for i, a in enumerate(recipe.actions):
        if a.qualifier == "R":
            resets.setdefault(a.step, []).append(a.name)
            continue
        selector = _opt(a.selector)
        duration = _opt(a.duration_seconds)
        spec = ActionSpec(
            index=i,
            name=a.name,
            step=a.step,
            push=a.interaction == "push_command",
            type_id=_given(a.type_id),
            timeout_ms=_given(a.timeout_seconds) * 1000,
            max_attempts=_opt(a.max_attempts),
            parameters=_opt(a.parameters, {}),
            subject=None if selector is None else _opt(selector.subject),
            correlation_id=None if selector is None else _opt(selector.correlation_id),
            hold=_equipment(a.hold),
            restart=_equipment(a.restart),
            qualifier=a.qualifier,
            duration_ms=None if duration is None else seconds_to_ms(duration),
            gating=a.qualifier == "N",
        )
        actions[a.name] = spec
        step_actions[a.step].append(spec)
        if not spec.push:
            waits.setdefault(spec.type_id, []).append(spec)

    transitions = tuple(
        TransitionSpec(
            index=i,
            source=t.source,
            target=t.target,
            condition=t.condition,
            priority=_opt(t.priority, 0),
        )
        for i, t in enumerate(recipe.transitions)
    )
    by_source: dict[str, list[TransitionSpec]] = {}
    for t in transitions:
        by_source.setdefault(t.source, []).append(t)

    position: dict[str, Position] = {}
    divergences: dict[str, DivergenceSpec] = {}
    for d in _opt(recipe.branches, []):
        sequences = tuple(tuple(seq) for seq in d.branches)
        firsts = {seq[0]: i for i, seq in enumerate(sequences)}
        for si, seq in enumerate(sequences):
            for pi, step in enumerate(seq):
                position[step] = Position(d.name, si, pi, pi == len(seq) - 1)
        own = _by_priority(by_source.get(d.name, []))
        entries = tuple(t for t in own if t.target in firsts) if d.type == "selection" else ()
        divergences[d.name] = DivergenceSpec(
            name=d.name,
            kind="selection" if d.type == "selection" else "simultaneous",
            sequences=sequences,
            entries=entries,
            entry_sequence=tuple(firsts[t.target] for t in entries),
            exits=tuple(t for t in own if t not in entries),
        )

    outgoing = {s: _by_priority(by_source.get(s, [])) for s in steps if s not in position}
    divergence_actions = {
        name: tuple(a for seq in d.sequences for step in seq for a in step_actions[step])
        for name, d in divergences.items()
    }
    edges: dict[str, list[str]] = {node: [t.target for t in ts] for node, ts in outgoing.items()}
    edges.update({name: [t.target for t in d.exits] for name, d in divergences.items()})
    on_cycle = {node for component in cycles(edges) for node in component}
    cyclic = frozenset(
        a.name
        for a in actions.values()
        if (a.step if a.step not in position else position[a.step].divergence) in on_cycle
    )
    non_gating = {
        s: rest
        for s, specs in step_actions.items()
        if (rest := tuple(a for a in specs if not a.gating))
    }
    min_ms = {
        s.name: seconds_to_ms(s.min_seconds) for s in recipe.steps if s.min_seconds is not UNSET
    }
    return Graph(
        recipe_hash=recipe_hash,
        dataschema=dataschema,
        initial=initial,
        steps=steps,
        actions=actions,
        step_actions={s: tuple(a) for s, a in step_actions.items()},
        transitions=transitions,
        outgoing=outgoing,
        divergences=divergences,
        position=position,
        waits_by_type={t: tuple(a) for t, a in waits.items()},
        cyclic=cyclic,
        divergence_actions=divergence_actions,
        resets={step: tuple(names) for step, names in resets.items()},
        min_ms=min_ms,
        step_gating={s: tuple(a for a in specs if a.gating) for s, specs in step_actions.items()},
        step_non_gating=non_gating,
        uses_qualifiers=bool(non_gating or resets or min_ms),
        has_timers=bool(min_ms)
        or any(a.duration_ms is not None for specs in non_gating.values() for a in specs),
    )


def cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components that hold a cycle (more than one node, or a node
    with a self-loop): Tarjan's algorithm, iteratively, since a chart may have 20,000 steps."""
    number: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in number:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, pos = work.pop()
            if pos == 0:
                number[node] = low[node] = len(number)
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if pos < len(targets):
                work.append((node, pos + 1))
                nxt = targets[pos]
                if nxt not in number:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], number[nxt])
                continue
            if work:  # back in the caller: pass the low link up
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == number[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in targets:
                    found.append(component)
    return found

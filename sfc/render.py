"""Drawing the chart in IEC 61131-3 style, as Mermaid or Graphviz DOT source.

- A step is a box, the initial step a box with a double border; a step with MinSeconds says
  `min T#10s` under its name. A step's action blocks sit beside it, IEC style: qualifier
  with its time (`D T#10s`), action name, interaction and deadline; a block the step does
  not wait for (any qualifier but N) says `not waited for`, and an R block `reset`.
- A transition is labelled with its condition; where a source has several, with its
  priority too (`p1: torque_ok`, lower is tried first). In DOT a transition is the short
  bar of the standard, with the condition beside it.
- A simultaneous divergence and its convergence are double bars; a selection divergence
  and its convergence single bars, the selection transitions below the divergence.
- With a job's state, the active steps are highlighted and open action blocks marked. When
  the job has ended, no work is open: what was open when it faulted or was cancelled is
  marked withdrawn.

The output depends only on the graph and the state, in recipe order: the same inputs give
the same text, so it can be kept under version control and snapshot-tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from generated.state_v1_5 import ActionRecord, SfcState
from sfc.graph import ActionSpec, Graph, TransitionSpec, visible
from sfc.words import duration, when

Format = Literal["mermaid", "dot"]
FORMATS: tuple[Format, ...] = ("mermaid", "dot")


@dataclass(frozen=True, slots=True)
class _Edge:
    source: str
    target: str
    label: str | None = None
    transition: int | None = None
    """The index of the recipe transition the edge draws, if it draws one."""


class _Chart:
    """Node ids and edges of a graph, shared by both formats."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.step_id = {s: f"s{i}" for i, s in enumerate(graph.steps)}
        self.div_id = {d: f"d{i}" for i, d in enumerate(graph.divergences)}
        self.step_ids = frozenset(self.step_id.values())
        self.edges = self._edges()

    def _node_in(self, name: str) -> str:
        """Where a transition into `name` ends: a step, or the bar of a divergence."""
        if name in self.div_id:
            return f"{self.div_id[name]}_div"
        return self.step_id[name]

    def _label(self, t: TransitionSpec, siblings: tuple[TransitionSpec, ...]) -> str:
        return f"prio {t.priority}: {t.condition}" if len(siblings) > 1 else t.condition

    def _edges(self) -> list[_Edge]:
        g = self.graph
        edges: list[_Edge] = []
        for t in g.transitions:
            div = g.divergences.get(t.source)
            if div is None:
                source, siblings = self.step_id[t.source], g.outgoing[t.source]
            elif t in div.entries:
                source, siblings = f"{self.div_id[t.source]}_div", div.entries
            else:
                source, siblings = f"{self.div_id[t.source]}_conv", div.exits
            edges.append(_Edge(source, self._node_in(t.target), self._label(t, siblings), t.index))
        for name, div in g.divergences.items():
            d = self.div_id[name]
            for seq in div.sequences:
                if div.kind == "simultaneous":
                    edges.append(_Edge(f"{d}_div", self.step_id[seq[0]]))
                for a, b in pairwise(seq):
                    edges.append(_Edge(self.step_id[a], self.step_id[b]))
                edges.append(_Edge(self.step_id[seq[-1]], f"{d}_conv"))
        return edges


def _interaction(spec: ActionSpec) -> str:
    kind = "push" if spec.push else "await"
    hold = ", hold/restart" if spec.hold is not None else ""
    gating = "" if spec.gating else ", not waited for"
    return f"{kind} {duration(spec.timeout_ms)}{hold}{gating}"


def iec_time(ms: int) -> str:
    """An IEC 61131-3 TIME literal: `T#10s`, `T#1m30s`, `T#1s500ms`, `T#7d`."""
    parts = []
    for size, unit in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")):
        n, ms = divmod(ms, size)
        if n:
            parts.append(f"{n}{unit}")
    if ms or not parts:
        parts.append(f"{ms}ms")
    return "T#" + "".join(parts)


def qualifier_field(spec: ActionSpec) -> str:
    """The qualifier field of an action block: `N`, `S`, or with its time `D T#10s`."""
    if spec.duration_ms is None:
        return spec.qualifier
    return f"{spec.qualifier} {iec_time(spec.duration_ms)}"


def _dwell(graph: Graph, step: str) -> str | None:
    ms = graph.min_ms.get(step)
    return None if ms is None else f"min {iec_time(ms)}"


def _open(state: SfcState | None, rec: ActionRecord | None) -> bool:
    """Whether the drawing marks the record as open work: only while the job runs.

    When a job ends the core leaves its records as they were; a cancel or a fault withdrew
    the work they name.
    """
    running = state is not None and state.status == "running"
    return running and rec is not None and rec.status == "open"


def _mark(state: SfcState | None, rec: ActionRecord | None, active: bool) -> str | None:
    """The state of an action block, for the drawing: open, or its outcome in an active step."""
    if state is None or rec is None:
        return None
    if rec.status == "pending":  # a process timer runs before the work starts (D, SD, DS)
        if state.status != "running" or rec.timer is None:
            return None
        return f"starts at {when(rec.timer)}"
    if rec.status == "open":
        what = f"attempt {rec.attempt}" if rec.work == "push" else rec.work
        if rec.timer is not None and state.status == "running":
            what += f", stop at {when(rec.timer)}"
        if state.status == "completed":
            return f"no longer awaited, {what}"
        if state.status != "running":
            held = ", held by the equipment" if rec.hold == "held" else ""
            return f"withdrawn, {what}{held}"
        if rec.hold == "held":
            return "held by the equipment"
        if rec.hold == "open":
            what += ", hold asked"
        elif rec.hold == "notHeld":
            what += ", not held"
        return f"open, {what}"
    if active:
        return f"done: {rec.outcome}"
    return None


def _status(state: SfcState) -> str:
    text = f"job {state.job_id}: {state.status}"
    if state.held_at is not None and state.status == "running":
        text += f", held since {when(state.held_at)}"
    if state.fault is not None:
        text += f" ({state.fault.code})"
    return text


# --------------------------------------------------------------------------- Mermaid


def _mm(text: str) -> str:
    """Text inside a quoted Mermaid label; a control or bidi character shows as `\\uXXXX`."""
    return (
        visible(text)
        .replace("#", "#35;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
    )


def _mermaid(graph: Graph, state: SfcState | None) -> str:
    chart = _Chart(graph)
    active = set() if state is None else set(state.active_steps)
    out = ["flowchart TD"]
    if state is not None:
        out.append(f"  %% {visible(_status(state))}")
    for step in graph.steps:
        rows = [_mm(step)]
        dwell = _dwell(graph, step)
        if dwell is not None:
            rows.append(_mm(dwell))
        rows.extend(f"R {_mm(name)} · reset" for name in graph.resets.get(step, ()))
        for spec in graph.step_actions[step]:
            rec = None if state is None else state.actions.get(spec.name)
            mark = _mark(state, rec, step in active)
            bullet = "● " if _open(state, rec) else ""
            row = (
                f"{bullet}{_mm(qualifier_field(spec))} {_mm(spec.name)} · {_mm(_interaction(spec))}"
            )
            if mark is not None:
                row += f" [{_mm(mark)}]"
            rows.append(row)
        label = "<br/>".join(rows)
        sid = chart.step_id[step]
        out.append(f'  {sid}[["{label}"]]' if step == graph.initial else f'  {sid}["{label}"]')
    for name, div in graph.divergences.items():
        d = chart.div_id[name]
        bar = "═══" if div.kind == "simultaneous" else "───"
        out.append(f'  {d}_div["{bar} {_mm(name)}: {div.kind} {bar}"]')
        out.append(f'  {d}_conv["{bar} end of {_mm(name)} {bar}"]')
    for e in chart.edges:
        if e.label is None:
            out.append(f"  {e.source} --> {e.target}")
        else:
            out.append(f'  {e.source} -->|"{_mm(e.label)}"| {e.target}')
    out.append("  classDef bar fill:#222,stroke:#222,color:#fff")
    bars = [f"{d}_{end}" for d in chart.div_id.values() for end in ("div", "conv")]
    if bars:
        out.append(f"  class {','.join(bars)} bar")
    if state is not None and state.active_steps:
        out.append("  classDef active fill:#d7f5d7,stroke:#1a7f1a,stroke-width:3px")
        ids = [chart.step_id[s] for s in state.active_steps if s in chart.step_id]
        if ids:
            out.append(f"  class {','.join(ids)} active")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- Graphviz DOT


def _html(text: str) -> str:
    return (
        visible(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
    )


def _quoted(text: str) -> str:
    return '"' + visible(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


_BAR = '<tr><td height="2" width="{w}" bgcolor="black"></td></tr>'
_GAP = '<tr><td height="3" width="{w}"></td></tr>'


def _bar(double: bool, width: int) -> str:
    rows = [_BAR, _GAP, _BAR] if double else [_BAR]
    body = "".join(r.format(w=width) for r in rows)
    return f'<<table border="0" cellborder="0" cellspacing="0" cellpadding="0">{body}</table>>'


def _step_label(graph: Graph, step: str, state: SfcState | None) -> str:
    active = state is not None and step in state.active_steps
    fill = ' bgcolor="#d7f5d7"' if active else ""
    dwell = _dwell(graph, step)
    dwell_row = "" if dwell is None else f"<tr><td>{_html(dwell)}</td></tr>"
    box = (
        f'<table border="{3 if active else 1}" cellborder="0" cellpadding="6"{fill}>'
        f"<tr><td>{_html(step)}</td></tr>{dwell_row}</table>"
    )
    if step == graph.initial:
        box = f'<table border="1" cellborder="0" cellpadding="2"><tr><td>{box}</td></tr></table>'
    cells = [f'<td port="step">{box}</td>']
    specs = graph.step_actions[step]
    resets = graph.resets.get(step, ())
    if specs or resets:
        rows = [
            f'<tr><td>R</td><td align="left">{_html(name)}</td><td align="left">reset</td></tr>'
            for name in resets
        ]
        for spec in specs:
            rec = None if state is None else state.actions.get(spec.name)
            mark = _mark(state, rec, active)
            colour = ' bgcolor="#ffe08a"' if _open(state, rec) else ""
            state_cell = "" if mark is None else f'<td align="left">{_html(mark)}</td>'
            rows.append(
                f"<tr><td{colour}>{_html(qualifier_field(spec))}</td>"
                f'<td align="left"{colour}>{_html(spec.name)}</td>'
                f'<td align="left">{_html(_interaction(spec))}</td>'
                f"{state_cell}</tr>"
            )
        cells.append("<td>&#8212;</td>")
        cells.append(
            '<td><table border="0" cellborder="1" cellspacing="0" cellpadding="3">'
            + "".join(rows)
            + "</table></td>"
        )
    return (
        '<<table border="0" cellborder="0" cellspacing="0" cellpadding="0"><tr>'
        + "".join(cells)
        + "</tr></table>>"
    )


def _dot(graph: Graph, state: SfcState | None) -> str:
    chart = _Chart(graph)
    out = [
        "digraph sfc {",
        "  graph [rankdir=TB, nodesep=0.4, ranksep=0.3, fontname=Helvetica];",
        "  node [fontname=Helvetica, fontsize=11, shape=plain];",
        "  edge [arrowsize=0.6, fontname=Helvetica, fontsize=10];",
    ]
    if state is not None:
        out.append(f"  label={_quoted(_status(state))};")
        out.append("  labelloc=b;")
    for step in graph.steps:
        out.append(f"  {chart.step_id[step]} [label={_step_label(graph, step, state)}];")
    for name, div in graph.divergences.items():
        d = chart.div_id[name]
        double = div.kind == "simultaneous"
        width = 60 * max(2, len(div.sequences))
        out.append(f"  {d}_div [label={_bar(double, width)}, xlabel={_quoted(name)}];")
        out.append(f"  {d}_conv [label={_bar(double, width)}];")
    for e in chart.edges:
        steps = chart.step_ids
        src = f"{e.source}:step:s" if e.source in steps else e.source
        dst = f"{e.target}:step:n" if e.target in steps else e.target
        if e.transition is None:
            out.append(f"  {src} -> {dst};")
            continue
        t = f"t{e.transition}"
        out.append(
            f"  {t} [shape=box, style=filled, fillcolor=black, fixedsize=true, width=0.35, "
            f"height=0.03, label={_quoted('')}, xlabel={_quoted(e.label or '')}];"
        )
        out.append(f"  {src} -> {t} [arrowhead=none];")
        out.append(f"  {t} -> {dst};")
    out.append("}")
    return "\n".join(out) + "\n"


def render(graph: Graph, state: SfcState | None = None, fmt: Format = "mermaid") -> str:
    """The chart as Mermaid flowchart or Graphviz DOT source; with a state, the job on it."""
    if fmt == "mermaid":
        return _mermaid(graph, state)
    if fmt == "dot":
        return _dot(graph, state)
    raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")

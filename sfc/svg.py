"""Drawing the chart as SVG in IEC 61131-3 style: pure, no Graphviz, no JavaScript.

- A step is a box, the initial step a box in a second frame. Its action blocks sit beside
  it, one row each: qualifier, action name, time (interaction and deadline), and with a
  state the block's mark.
- A transition is a bar across the line that leaves its source, with its condition beside
  it, and its priority (`p1: torque_ok`) where the source has several.
- A simultaneous divergence and its convergence are double lines, a selection divergence
  and its convergence single lines; the sequences stand side by side between them.

Layout: the top-level nodes (steps outside divergences, and divergences) stand in one column
in the order a depth-first walk from the initial step meets them, the first transition by
priority first. A transition to the node right below is a line; any other ends in a jump
arrow that names its target, as the standard draws a jump. The height grows with the chart,
the width with its widest divergence, so 200 steps stay readable.

Every step's element carries `data-step` and `data-active`, every action block's
`data-action` and `data-status` (idle, open, done, failed, withdrawn, held), for styles and
tests. Every coordinate is an integer and the output depends only on the graph and the
state: the same inputs give the same bytes.
"""

from __future__ import annotations

import unicodedata
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from generated.state_v1_5 import ActionRecord, SfcState
from sfc.graph import RESERVED_OUTCOMES, DivergenceSpec, Graph, TransitionSpec, visible
from sfc.render import _interaction, _mark, _status
from sfc.render import qualifier_field as qualifier
from sfc.words import when

Status = Literal["idle", "open", "done", "failed", "withdrawn", "held"]

MARGIN = 16
ROW = 20
"""Height of an action block's row."""
BOX_H = 30
FRAME = 4
"""The gap between the initial step's two frames."""
LINK = 12
"""A line's length between a box or a bar and the next element."""
JUMP_H = 24
GAP = 24
"""Between two sequences of a divergence."""

STYLE = (
    ".sfc-chart{font-family:monospace;font-size:12px}"
    ".sfc-chart line,.sfc-chart polyline{stroke:#000;stroke-width:1;fill:none}"
    ".sfc-chart .bar{stroke-width:3}"
    ".sfc-chart rect{fill:#fff;stroke:#000;stroke-width:1}"
    ".sfc-chart text{fill:#000}"
    ".sfc-chart polygon{fill:#000}"
    '.sfc-step[data-active="true"] rect{fill:#d7f5d7;stroke:#1a7f1a;stroke-width:3}'
    '.sfc-action[data-status="open"] rect{fill:#ffe08a}'
    '.sfc-action[data-status="held"] rect{fill:#f7c66b}'
    '.sfc-action[data-status="done"] rect{fill:#e3f1e3}'
    '.sfc-action[data-status="failed"] rect{fill:#f6c4c4}'
    '.sfc-action[data-status="withdrawn"] rect{fill:#e4e4e4}'
    ".sfc-chart .status{font-weight:bold}"
)


def text_width(text: str) -> int:
    """The width of `text` in pixels at 12 px monospace: 7.5 a cell, wide characters two."""
    if text.isascii() and text.isprintable():  # most names: a cell a character
        return (len(text) * 15 + 1) // 2
    cells = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in visible(text))
    return (cells * 15 + 1) // 2


def escape(text: str) -> str:
    """Text for an SVG element or attribute: unsafe characters as `\\uXXXX`, XML escaped."""
    return (
        (text if text.isascii() and text.isprintable() else visible(text))
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
    )


def action_status(state: SfcState | None, rec: ActionRecord | None) -> Status:
    """An action block's `data-status`: idle (no record, or a pending timer), open, held,
    withdrawn (open work of a job that ended), failed (an outcome the core gave itself:
    timeout, error) or done."""
    if state is None or rec is None or rec.status == "pending":
        return "idle"
    if rec.status == "open":
        if state.status != "running":
            return "withdrawn"
        return "held" if rec.hold == "held" else "open"
    return "failed" if rec.outcome in RESERVED_OUTCOMES else "done"


# --------------------------------------------------------------------------- measures


@dataclass(slots=True)
class _StepBox:
    name: str
    box_w: int
    initial: bool
    rows: list[tuple[str, str, str, str, Status | None]]
    """Per action block: its name, qualifier, time, mark and status; an R block (which
    resets a stored action at the step's entry) has no status."""
    cols: tuple[int, int, int, int]
    """Widths of the qualifier, name, time and mark columns (the mark 0 when none)."""

    @property
    def left(self) -> int:
        return self.box_w // 2 + (FRAME if self.initial else 0)

    @property
    def right(self) -> int:
        extra = FRAME if self.initial else 0
        if not self.rows:
            return self.box_w - self.box_w // 2 + extra
        return self.box_w - self.box_w // 2 + extra + LINK + sum(self.cols)

    @property
    def height(self) -> int:
        frame = FRAME if self.initial else 0
        rows = frame + BOX_H // 2 - ROW // 2 + ROW * len(self.rows) if self.rows else 0
        return max(BOX_H + 2 * frame, rows)


def _measure(graph: Graph, state: SfcState | None, step: str) -> _StepBox:
    active = state is not None and step in state.active_steps
    rows: list[tuple[str, str, str, str, Status | None]] = []
    for spec in graph.step_actions[step]:
        rec = None if state is None else state.actions.get(spec.name)
        if rec is not None and rec.status == "pending":
            mark = "pending" + ("" if rec.timer is None else f", starts at {when(rec.timer)}")
        else:
            mark = _mark(state, rec, active) or ""
        status = action_status(state, rec)
        rows.append((spec.name, qualifier(spec), _interaction(spec), mark, status))
    for name in graph.resets.get(step, ()):
        rows.append((name, "R", "reset at entry", "", None))

    def col(texts: Sequence[str], least: int) -> int:
        return max([least, *(text_width(t) + 12 for t in texts)])

    cols = (
        col([r[1] for r in rows], 24),
        col([r[0] for r in rows], 40),
        col([r[2] for r in rows], 40),
        col([r[3] for r in rows], 0) if any(r[3] for r in rows) else 0,
    )
    box_w = max(80, text_width(step) + 20)
    return _StepBox(step, box_w, step == graph.initial, rows, cols)


def _label(t: TransitionSpec, siblings: tuple[TransitionSpec, ...]) -> str:
    return f"prio {t.priority}: {t.condition}" if len(siblings) > 1 else t.condition


def _branch_w(label: str, target: str) -> int:
    return max(text_width(label) + 28, text_width(target) + 36, 60)


# --------------------------------------------------------------------------- drawing


@dataclass(slots=True)
class _Canvas:
    out: list[str] = field(default_factory=list)
    right: int = 0
    bottom: int = 0

    def add(self, element: str, right: int, bottom: int) -> None:
        self.out.append(element)
        self.right = max(self.right, right)
        self.bottom = max(self.bottom, bottom)

    def line(self, x1: int, y1: int, x2: int, y2: int, cls: str = "") -> None:
        if (x1, y1) == (x2, y2):
            return
        attr = f' class="{cls}"' if cls else ""
        self.add(f'<line{attr} x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}"/>', max(x1, x2), max(y1, y2))

    def text(self, x: int, y: int, text: str, cls: str = "", anchor: str = "") -> None:
        attr = f' class="{cls}"' if cls else ""
        if anchor:
            attr += f' text-anchor="{anchor}"'
        width = text_width(text)
        right = x + width // 2 if anchor == "middle" else x + width
        self.add(f'<text{attr} x="{x}" y="{y}">{escape(text)}</text>', right, y + 4)


class _Drawing:
    """Lays out and draws a graph, top to bottom."""

    def __init__(self, graph: Graph, state: SfcState | None) -> None:
        self.graph = graph
        self.state = state
        self.canvas = _Canvas()
        self.boxes = {s: _measure(graph, state, s) for s in graph.steps}
        self.order = self._order()

    def _targets(self, node: str) -> tuple[TransitionSpec, ...]:
        g = self.graph
        if node in g.divergences:
            return g.divergences[node].exits
        return g.outgoing.get(node, ())

    def _order(self) -> list[str]:
        """The top-level nodes, depth first from the initial step, then any never reached."""
        g = self.graph
        nodes = [s for s in g.steps if s not in g.position] + list(g.divergences)
        top = set(nodes)
        seen: set[str] = set()
        order: list[str] = []
        for root in [g.initial, *nodes]:
            work = [root]
            while work:
                node = work.pop()
                if node in seen or node not in top:
                    continue
                seen.add(node)
                order.append(node)
                work.extend(t.target for t in reversed(self._targets(node)))
        return order

    # ------------------------------------------------------------------ elements

    def step(self, box: _StepBox, x: int, y: int) -> int:
        """Draws a step box centred on `x` with its top at `y`; returns its bottom."""
        c = self.canvas
        active = self.state is not None and box.name in self.state.active_steps
        top = y + (FRAME if box.initial else 0)
        left = x - box.box_w // 2
        parts = [
            f'<g class="sfc-step" data-step="{escape(box.name)}" '
            f'data-active="{"true" if active else "false"}">'
        ]
        if box.initial:
            parts.append(
                f'<rect x="{left - FRAME}" y="{y}" width="{box.box_w + 2 * FRAME}" '
                f'height="{BOX_H + 2 * FRAME}"/>'
            )
        parts.append(f'<rect x="{left}" y="{top}" width="{box.box_w}" height="{BOX_H}"/>')
        parts.append(
            f'<text x="{x}" y="{top + 19}" text-anchor="middle">{escape(box.name)}</text></g>'
        )
        c.add("".join(parts), x + box.right, y + box.height)
        if box.rows:
            self.actions(box, x + box.right - sum(box.cols), top + BOX_H // 2)
        return y + BOX_H + (2 * FRAME if box.initial else 0)

    def actions(self, box: _StepBox, x: int, mid: int) -> None:
        c = self.canvas
        c.line(x - LINK, mid, x, mid)
        y = mid - ROW // 2
        for name, qual, time, mark, status in box.rows:
            parts = [
                f'<g class="sfc-action" data-action="{escape(name)}" data-status="{status}">'
                if status is not None
                else f'<g class="sfc-reset" data-reset="{escape(name)}">'
            ]
            cx = x
            for width, text in zip(box.cols, (qual, name, time, mark), strict=True):
                if width == 0:
                    continue
                parts.append(f'<rect x="{cx}" y="{y}" width="{width}" height="{ROW}"/>')
                parts.append(f'<text x="{cx + 6}" y="{y + 14}">{escape(text)}</text>')
                cx += width
            parts.append("</g>")
            c.add("".join(parts), cx, y + ROW)
            y += ROW

    def bar(self, x: int, y: int, label: str, index: int) -> None:
        """A transition: its bar across the line at (x, y), the label to the right."""
        c = self.canvas
        c.out.append(f'<g class="sfc-transition" data-transition="{index}">')
        c.line(x - 10, y, x + 10, y, "bar")
        c.text(x + 16, y + 4, label)
        c.out.append("</g>")

    def jump(self, x: int, y: int, target: str) -> None:
        """A jump: an arrow down to a step or divergence drawn elsewhere, named beside it."""
        c = self.canvas
        c.line(x, y, x, y + 8)
        c.add(f'<polygon points="{x - 6},{y + 8} {x + 6},{y + 8} {x},{y + 18}"/>', x + 6, y + 18)
        c.text(x + 10, y + 16, target, "jump")

    def leave(self, node: str, x: int, y: int, below: str | None) -> tuple[int, bool]:
        """Draws the transitions leaving `node` from (x, y); returns the bottom and whether a
        line goes on to `below`, the node under it."""
        ts = self._targets(node)
        if not ts:
            return y, False
        straight = next((t for t in ts if t.target == below), None)
        branches = ([straight] if straight else []) + [t for t in ts if t is not straight]
        c = self.canvas
        if len(branches) > 1:
            widths = [_branch_w(_label(t, ts), t.target) for t in branches]
            c.line(x, y, x, y + 8)
            y += 8
            c.line(x, y, x + sum(widths[:-1]), y)
            xs = [x + sum(widths[:i]) for i in range(len(branches))]
        else:
            xs = [x]
        bottom = y + 2 * LINK + (JUMP_H if any(t is not straight for t in branches) else 0)
        for bx, t in zip(xs, branches, strict=True):
            c.line(bx, y, bx, y + LINK)
            self.bar(bx, y + LINK, _label(t, ts), t.index)
            c.line(bx, y + LINK, bx, y + 2 * LINK)
            if t is straight:
                c.line(bx, y + 2 * LINK, bx, bottom)
            else:
                self.jump(bx, y + 2 * LINK, t.target)
        return bottom, straight is not None

    def divergence(self, spec: DivergenceSpec, x: int, y: int) -> int:
        """Draws a divergence with its sequences side by side; returns its convergence's
        bottom."""
        c = self.canvas
        double = spec.kind == "simultaneous"
        entry = {seq: t for t, seq in zip(spec.entries, spec.entry_sequence, strict=True)}
        spines = []
        right = x
        for i, seq in enumerate(spec.sequences):
            boxes = [self.boxes[s] for s in seq]
            spine = x if i == 0 else right + GAP + max(b.left for b in boxes)
            spines.append(spine)
            edge = max(b.right for b in boxes)
            if i in entry:
                edge = max(edge, 16 + text_width(_label(entry[i], spec.entries)))
            right = spine + edge
        first, last = spines[0] - 20, spines[-1] + 20
        cls = "divergence " + spec.kind
        c.out.append(f'<g class="sfc-divergence" data-divergence="{escape(spec.name)}">')
        c.line(first, y, last, y, cls)
        if double:
            c.line(first, y + 4, last, y + 4, cls)
        c.text(last + 8, y - 4, spec.name, "name")
        c.out.append("</g>")
        start = y + (4 if double else 0)
        ends = []
        for i, seq in enumerate(spec.sequences):
            sx, sy = spines[i], start
            if i in entry:
                c.line(sx, sy, sx, sy + LINK)
                self.bar(sx, sy + LINK, _label(entry[i], spec.entries), entry[i].index)
                c.line(sx, sy + LINK, sx, sy + 2 * LINK)
                sy += 2 * LINK
            else:
                c.line(sx, sy, sx, sy + LINK)
                sy += LINK
            for k, step in enumerate(seq):
                box = self.boxes[step]
                bottom = self.step(box, sx, sy)
                sy += box.height
                if k < len(seq) - 1:
                    c.line(sx, bottom, sx, sy + LINK)
                    sy += LINK
            ends.append((sx, bottom, sy))
        conv = max(e[2] for e in ends) + LINK
        for sx, bottom, _ in ends:
            c.line(sx, bottom, sx, conv)
        c.line(first, conv, last, conv, cls)
        if double:
            c.line(first, conv + 4, last, conv + 4, cls)
            conv += 4
        return conv

    def key(self) -> tuple[object, ...]:
        """All of the state the drawing's body shows: two jobs alike in it (the same active
        steps, marks and statuses) have the same body; only the title names the job."""
        active = () if self.state is None else tuple(sorted(set(self.state.active_steps)))
        rows = tuple(tuple(b.rows) for b in self.boxes.values())
        return (self.graph.recipe_hash, self.graph.dataschema, self.state is None, active, rows)

    def body(self) -> tuple[str, int, int]:
        """The elements below the title, joined, with their right and bottom edges."""
        g = self.graph
        c = self.canvas
        title = 0 if self.state is None else 24
        column = [self.boxes[n] for n in self.order if n in self.boxes]
        column += [self.boxes[s] for d in g.divergences.values() for s in d.sequences[0]]
        x = MARGIN + max([60, *(b.left for b in column)])
        y = MARGIN + title
        for i, node in enumerate(self.order):
            below = self.order[i + 1] if i + 1 < len(self.order) else None
            if node in g.divergences:
                bottom = self.divergence(g.divergences[node], x, y)
            else:
                box = self.boxes[node]
                bottom = self.step(box, x, y)
                if self._targets(node):  # the line on to its transitions, past its actions
                    c.line(x, bottom, x, y + box.height)
                bottom = y + box.height
            end, goes_on = self.leave(node, x, bottom, below)
            y = end if goes_on else end + GAP
        return "\n".join(c.out), c.right, max(c.bottom, y)

    def draw(self, drawn: MutableMapping[tuple[object, ...], tuple[str, int, int]] | None) -> str:
        key = self.key() if drawn is not None else None
        found = None if drawn is None or key is None else drawn.get(key)
        if found is None:
            found = self.body()
            if drawn is not None and key is not None:
                drawn[key] = found
        body, right, bottom = found
        parts = []
        if self.state is not None:
            head = _Canvas()
            head.text(MARGIN, MARGIN + 12, _status(self.state), "status")
            parts += head.out
            right = max(right, head.right)
        width = right + MARGIN
        height = bottom + MARGIN
        svg = (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="sfc-chart" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}">'
            f"<style>{STYLE}</style>"
        )
        return "\n".join([svg, *parts, *([body] if body else []), "</svg>"]) + "\n"


def render_svg(
    graph: Graph,
    state: SfcState | None = None,
    drawn: MutableMapping[tuple[object, ...], tuple[str, int, int]] | None = None,
) -> str:
    """The chart as an SVG document in IEC 61131-3 style; with a state, the job on it.
    `drawn` (bounded by the caller) keeps bodies drawn by what they show, for jobs alike."""
    return _Drawing(graph, state).draw(drawn)

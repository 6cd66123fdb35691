"""The raw reads of one job for its read model (host/readmodel.py): `view` loads the job's
order, state, history, indexes, pending and dead entries, and how far each equipment adapter
read its open commands, in a few pipelines; `listing` loads a scope's jobs.

Nothing here writes. A stored order or state that cannot be read is None, with why.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from generated.history_entry_v1_0 import HistoryEntry
from generated.job_order_v1_0 import JobOrder
from generated.job_response_v1_0 import JobResponse
from generated.state_v1_5 import SfcState
from host import joborder
from host.apply import ScopeConfig, decode_order
from host.apply import unreadable as why_unreadable
from host.entries import EntryError, dead_job, decode_history, entry_ms, job_named
from host.settings import Settings
from host.store import JobRecord, Store, id_tuple
from sfc.builder import build
from sfc.evolution import DEFAULT_MAX_ATTEMPTS
from sfc.graph import Graph
from sfc.migrate import READERS, read_state, state_format

SENT_SCAN = 200
"""The history entries `view` reads for when open commands went out (`sent_at`)."""


@dataclass(frozen=True)
class GroupRead:
    """How far one adapter's group has read one command: `unread`, `read` (delivered to
    `consumer`, not acknowledged), `done` (acknowledged), `trimmed` (its entry is gone;
    `read_past` says if the group had read past it) or `unknown` (not found)."""

    group: str
    status: str
    consumer: str | None = None
    idle_ms: int | None = None
    waiting: int | None = None
    deliveries: int | None = None
    consumer_idle_ms: int | None = None
    at_least: bool = False
    """`waiting` is a count that stopped at UNREAD_COUNT: at least that many wait."""
    last_delivered: str | None = None
    """Of `trimmed`: the group's last delivered entry (XINFO GROUPS)."""
    read_past: bool | None = None
    """Of `trimmed`: True when the group's last delivered entry is of a later millisecond
    than the command went out, False when it is before that millisecond (the entry was
    trimmed before the group read it), None when it is of that millisecond (the entry's
    id is not known closer: it cannot be told)."""


@dataclass(frozen=True)
class OutCommand:
    """An open command of the job: when it went out, and how far each adapter read it."""

    command_id: str
    since: int
    entry_id: str | None
    """Its equipment stream entry (None when it was not found: trimmed, or past
    EQUIPMENT_SCAN)."""
    reads: list[GroupRead] = field(default_factory=list)
    answer: str | None = None
    """A work entry of the job, pending with a worker, that answers it (not applied yet)."""


@dataclass(frozen=True)
class DeadEntry:
    """A dead entry of the scope that names the job (`sfc work dead` lists them)."""

    id: str
    reason: str
    kind: str
    entry: str
    """The id the entry had on the work stream."""


@dataclass(frozen=True)
class JobView:
    """Everything `sfc job show` tells about one job."""

    order: JobOrder | None
    """None when the stored order cannot be read (`unreadable` says why)."""
    state: SfcState | None
    """None when the stored state (or order) cannot be read (`unreadable` says why)."""
    graph: Graph | None
    graph_problem: str
    version: str
    due: int | None
    """The due index's entry (None: not on it)."""
    active: bool
    history: list[tuple[str, HistoryEntry]]
    pending: list[dict[str, Any]]
    """Work entries of this job that are read and not committed yet."""
    response: JobResponse | None
    unread: int = 0
    """Work entries of the scope that no worker has read yet (an answer for this job may be
    among them): more than a few, and no worker serves the scope, or none keeps up."""
    sent_at: dict[str, int] = field(default_factory=dict)
    """When each command id went out last (push, hold, restart, await), from the last
    SENT_SCAN history entries, however few are shown."""
    unreadable: str | None = None
    """Why the stored order or state cannot be read; None when both can."""
    out: list[OutCommand] = field(default_factory=list)
    """The job's open commands (none once it ended), oldest first."""
    equipment_groups: list[dict[str, Any]] = field(default_factory=list)
    """The consumer groups of the scope's equipment stream (`Store.show_reads`): none,
    and no adapter has ever read the scope's commands."""
    dead: list[DeadEntry] = field(default_factory=list)
    """The dead entries naming the job among the last `scanned` of the scope, newest first."""
    paused_since: int | None = None
    last_change: int | None = None
    """When the last history entry of the job was written (of the SENT_SCAN read, however
    few are shown): an order allowed to start has waited since then."""
    """When the order was paused (Interrupted), from the state's hold, else the history."""
    job: str = ""
    scope: str = ""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """The scope's attempts of an action that sets none (its `maxAttempts`, else the
    default), as the workers evolve it: the explainer's "attempt N of M"."""
    now: int = 0
    """The server's time when the job was read, ms."""
    scanned: int = 0
    """How many of the scope's last dead entries were read for those naming the job (at
    most DEAD_SCAN)."""


PENDING_SCAN = 1_000
"""The oldest pending work entries of the scope `view` reads for those of the job."""
DEAD_SCAN = 200
"""The last dead entries of the scope `view` reads for those naming the job (each is read
whole: a dead entry may carry 64 KiB of parameters)."""
EQUIPMENT_PROBE = 50
"""The equipment entries `view` reads first from the millisecond a command went out, to find
its entry (the commit's commands are among the first of that millisecond, after other
commits' of the same millisecond: a sweep that retries many jobs at once writes more)."""
EQUIPMENT_SCAN = 5_000
"""The most equipment entries of one millisecond `view` reads for a command's entry, in
pages of EQUIPMENT_PAGE: past them the command's read status is `unknown`."""
EQUIPMENT_PAGE = 500
"""The equipment entries of a crowded millisecond `view` reads on in one round trip."""
UNREAD_COUNT = 100
"""The most equipment entries `view` counts after a group's last delivered one, where the
server cannot tell the group's lag (an entry was deleted by hand)."""


GRAPHS_KEPT = 64
"""The recipes' graphs `recipe_graph` keeps built, the most recently used."""
_graphs: OrderedDict[tuple[str, str], Graph] = OrderedDict()
_graphs_lock = threading.Lock()


def recipe_graph(store: Store, recipe_hash: str, dataschema: str) -> tuple[Graph | None, str]:
    """The graph of a stored recipe, or None and why (not stored, does not build); kept
    built by its hash (GRAPHS_KEPT), since the text a hash names never changes."""
    key = (recipe_hash, dataschema)
    with _graphs_lock:
        graph = _graphs.get(key)
        if graph is not None:
            _graphs.move_to_end(key)
            return graph, ""
    text = store.recipe_text(recipe_hash)
    if text is None:
        return None, f"recipe {recipe_hash[:12]} is not stored"
    built = build(text, None, dataschema)
    if built.graph is None:
        return None, f"recipe {recipe_hash[:12]} does not build"
    with _graphs_lock:
        _graphs[key] = built.graph
        while len(_graphs) > GRAPHS_KEPT:
            _graphs.popitem(last=False)
    return built.graph, ""


def view(store: Store, scope: str, job: str, history: int = 10) -> JobView | None:
    """All that is stored of one job, its open commands with how far the adapters read
    them, and the dead entries naming it, in a few pipelines. An order or state that
    cannot be read is None, with why."""
    seen = store.show_reads(scope, job, max(history, SENT_SCAN), DEAD_SCAN, PENDING_SCAN)
    record = seen.record
    if record is None:
        return None
    why = why_unreadable(record)
    if why is not None:
        why = newer_writer(record) or why
    order: JobOrder | None = None
    state: SfcState | None = None
    with contextlib.suppress(msgspec.DecodeError):
        order = decode_order(record.order)
    with contextlib.suppress(msgspec.DecodeError):
        state = read_state(record.state)
    graph, problem = None, "its order cannot be read"
    if order is not None:
        graph, problem = recipe_graph(store, order.recipe_hash, order.dataschema)
    rows = seen.history
    read: list[tuple[str, HistoryEntry]] = []
    for entry_id, raw in rows:
        try:
            read.append((entry_id, decode_history(raw)))
        except EntryError:
            continue
    entries = read[-history:] if history > 0 else []
    sent_at: dict[str, int] = {}
    sent_in: dict[str, str] = {}  # the history entry of the commit that sent it
    for entry_id, h in read:
        for line in h.sent or ():
            kind, _, command_id = line.partition(" ")
            if kind in ("push", "hold", "restart", "await"):
                sent_at[command_id] = h.at
                sent_in[command_id] = entry_id
    pending = [
        p
        for p in store.pending_entries(scope, PENDING_SCAN, seen.pending)
        if job_named(p["id"], p["fields"]) == job
    ]
    open_ids = [c for c in _open_commands(state) if c in sent_at]
    ms_of = {c: entry_ms(sent_in[c]) for c in open_ids}
    times = sorted(set(ms_of.values()))
    first = store.equipment_from(scope, times, EQUIPMENT_PROBE)
    found = _find_entries(store, scope, ms_of, dict(zip(times, first, strict=True)))
    out = _reads(
        store,
        scope,
        [(c, *found[c]) for c in open_ids],
        sent_at,
        seen.equipment_groups,
        seen.group_names,
        _answers(pending),
        ms_of,
    )
    return JobView(
        order=order,
        state=state,
        graph=graph,
        graph_problem=problem,
        version=record.version,
        due=seen.due,
        active=seen.active,
        history=entries,
        pending=pending,
        response=None if order is None else joborder.job_response(order),
        unread=seen.unread,
        sent_at=sent_at,
        unreadable=why,
        out=out,
        equipment_groups=seen.equipment_groups,
        dead=[d for d in (_dead_entry(i, f, job) for i, f in seen.dead) if d is not None],
        paused_since=_paused_since(order, state, read),
        last_change=read[-1][1].at if read else None,
        job=job,
        scope=scope,
        max_attempts=ScopeConfig.of(seen.settings, Settings()).max_attempts,
        now=seen.now,
        scanned=len(seen.dead),
    )


def _open_commands(state: SfcState | None) -> list[str]:
    """The job's open command ids (work and hold) that an adapter answers: none once it
    ended, none of work the equipment held, none of an await."""
    if state is None or state.status != "running":
        return []
    return [
        cid
        for rec in state.actions.values()
        if rec.status == "open" and rec.hold != "held"  # held work was withdrawn
        for cid in (
            rec.command_id if rec.work != "await" else None,
            rec.hold_command_id if rec.hold == "open" else None,
        )
        if cid
    ]


def _find_entries(
    store: Store,
    scope: str,
    ms_of: Mapping[str, int],
    first: Mapping[int, Sequence[tuple[str, Mapping[bytes, bytes]]]],
) -> dict[str, tuple[str | None, str]]:
    """Each command's equipment entry, from the millisecond it went out (`first`, then on
    in pages), or why none: `trimmed` (the whole millisecond read) or `unknown`."""
    found: dict[str, tuple[str | None, str]] = {}
    pages = dict(first)
    read = {ms: len(rows) for ms, rows in pages.items()}
    full = {ms: len(rows) >= EQUIPMENT_PROBE for ms, rows in pages.items()}
    while True:
        wanted = {c: ms for c, ms in ms_of.items() if c not in found}
        for ms, rows in pages.items():
            for entry_id, f in rows:
                c = _command_of(f)
                if c is not None and wanted.get(c) == ms:
                    found[c] = (entry_id, "")
        more: list[tuple[str, int]] = []
        for ms, rows in pages.items():
            open_here = [c for c, at in ms_of.items() if at == ms and c not in found]
            if not open_here:
                continue
            on = full[ms] and rows and entry_ms(rows[-1][0]) == ms
            if on and read[ms] < EQUIPMENT_SCAN:
                more.append((rows[-1][0], ms))
            else:
                why = "unknown" if on else "trimmed"
                found.update((c, (None, why)) for c in open_here)
        if not more:
            return found
        got = store.equipment_after(scope, more, EQUIPMENT_PAGE)
        pages = {ms: rows for (_, ms), rows in zip(more, got, strict=True)}
        for ms, rows in pages.items():
            read[ms] += len(rows)
            full[ms] = len(rows) >= EQUIPMENT_PAGE


def _command_of(f: Mapping[bytes, bytes]) -> str | None:
    """The command id an equipment entry (or a work entry's answer) carries, or None."""
    try:
        data = msgspec.json.decode(f.get(b"data", b"{}"))
    except (msgspec.DecodeError, RecursionError):
        return None
    c = data.get("commandId") if isinstance(data, dict) else None
    return c if isinstance(c, str) else None


def _answers(pending: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The job's pending work entries that answer a command (a `kind` of `answer`), by the
    command id they answer: read by a worker, not applied yet."""
    out: dict[str, str] = {}
    for p in pending:
        f = p["fields"]
        c = _command_of(f) if f.get(b"kind") == b"answer" else None
        if c is not None:
            out.setdefault(c, p["id"])
    return out


def _reads(
    store: Store,
    scope: str,
    commands: Sequence[tuple[str, str | None, str]],
    sent_at: Mapping[str, int],
    groups: Sequence[Mapping[str, Any]],
    names: Sequence[bytes],
    answers: Mapping[str, str],
    ms_of: Mapping[str, int],
) -> list[OutCommand]:
    """How far each equipment group (`names`, as stored) read each open command (id,
    entry, why not found); one more round trip for the commands delivered."""
    raw = dict(zip((g["name"] for g in groups), names, strict=True))
    delivered = [
        (g["name"], entry)
        for _, entry, _ in commands
        if entry is not None
        for g in groups
        if id_tuple(entry) <= id_tuple(g["lastDelivered"])
    ]
    asked = [(raw[name], entry) for name, entry in delivered]
    held = dict(zip(delivered, store.equipment_pending(scope, asked), strict=True))
    # where the server cannot tell a group's lag (an entry deleted by hand), the commands
    # after its last delivered one are counted, up to UNREAD_COUNT, for those that wait
    waiting = {g["name"]: g["lag"] for g in groups}
    unknown = [
        {"name": raw[g["name"]], "lag": None, "last-delivered-id": g["lastDelivered"]}
        for g in groups
        if g["lag"] is None
        and any(e is not None and (g["name"], e) not in held for _, e, _ in commands)
    ]
    waiting.update(store.unread_of(scope, unknown, UNREAD_COUNT) if unknown else {})
    out = []
    for cid, entry, why in commands:
        reads = []
        for g in groups:
            name = g["name"]
            if entry is None and why == "trimmed":
                last = g["lastDelivered"]
                past = _read_past(last, ms_of[cid])
                reads.append(GroupRead(name, why, last_delivered=last, read_past=past))
            elif entry is None:
                reads.append(GroupRead(name, why))
            elif (name, entry) not in held:
                n = waiting[name]
                capped = g["lag"] is None and n is not None and n >= UNREAD_COUNT
                reads.append(GroupRead(name, "unread", waiting=n, at_least=capped))
            else:
                p = held[(name, entry)]
                if p is None:
                    reads.append(GroupRead(name, "done"))
                else:
                    reads.append(
                        GroupRead(
                            name,
                            "read",
                            p["consumer"],
                            p["idleMs"],
                            deliveries=p["deliveries"],
                            consumer_idle_ms=p.get("consumerIdleMs"),
                        )
                    )
        out.append(OutCommand(cid, sent_at[cid], entry, reads, answers.get(cid)))
    return sorted(out, key=lambda o: o.since)


def _read_past(last_delivered: str, ms: int) -> bool | None:
    """Whether a group had read past a trimmed command: by its last delivered entry's
    millisecond against the command's; None when they are the same."""
    at = id_tuple(last_delivered)[0]
    return None if at == ms else at > ms


def _dead_entry(entry_id: str, f: Mapping[bytes, bytes], job: str) -> DeadEntry | None:
    """The dead entry, if it names `job`: as a work entry, or, malformed, by its data's
    `job` (as `sfc work dead` names it)."""
    if dead_job(entry_id, f) != job:
        return None

    def text(name: bytes) -> str:
        return f.get(name, b"").decode(errors="replace")

    return DeadEntry(entry_id, text(b"reason"), text(b"kind"), text(b"entry"))


def _paused_since(
    order: JobOrder | None, state: SfcState | None, read: Sequence[tuple[str, HistoryEntry]]
) -> int | None:
    """When a paused (Interrupted) order was paused: its recipe's hold, which the pause set
    in the same commit; else the last applied Pause of the history read (SENT_SCAN
    entries, however few are shown)."""
    if order is None or not order.state or order.state[0].state_text != "Interrupted":
        return None
    if state is not None and state.held_at is not None:
        return int(state.held_at)
    paused = [h.at for _, h in read if h.event == "Pause" and h.disposition == "applied"]
    return paused[-1] if paused else None


@dataclass(frozen=True)
class Listed:
    """One stored job of a scope's list: its order, and why its stored order or state
    cannot be read (None when both can). `order` is None when the order cannot be read."""

    job: str
    order: JobOrder | None
    unreadable: str | None = None


def listing(store: Store, scope: str, chunk: int = 500) -> list[Listed]:
    """Every stored job of the scope, oldest first; one that cannot be read is listed with
    why, so that it does not hide the others."""
    return listing_of(store, scope, store.order_ids(scope), chunk)


def listing_of(store: Store, scope: str, job_ids: Sequence[str], chunk: int = 500) -> list[Listed]:
    """`listing` of the jobs `job_ids` of the scope, in that order; one not stored (removed
    since its id was read) is left out."""
    out: list[Listed] = []
    for i in range(0, len(job_ids), chunk):
        _, records = store.load(scope, job_ids[i : i + chunk])
        out += [_listed(job, r) for job, r in records.items() if r is not None]
    return out


def _listed(job: str, record: JobRecord) -> Listed:
    why = why_unreadable(record)
    if why is not None:
        why = newer_writer(record) or why
    try:
        order: JobOrder | None = decode_order(record.order)
    except msgspec.DecodeError:
        order = None
    return Listed(job, order, why)


def newer_writer(record: JobRecord) -> str | None:
    """Why a newer sfc may have written the job (a state format or order field this build
    does not know), or None; such a job is healthy, not unreadable."""
    found = state_format(record.state)
    if found is not None and found not in READERS:
        return f"its state is format {found!r}, which this sfc does not read: a newer sfc wrote it"
    try:
        decode_order(record.order)
    except msgspec.DecodeError as e:
        if "unknown field" in str(e) and _order_but_for_new_fields(record.order):
            return (
                f"its order is one with fields this sfc does not know ({e}): a newer sfc "
                "may have written it; if none did, mend the order by hand"
            )
    return None


_ORDER_FIELDS = {f.encode_name for f in msgspec.structs.fields(JobOrder)}


def _order_but_for_new_fields(raw: bytes) -> bool:
    """Whether `raw` is a good order of this build once its unknown fields are left out
    (a newer sfc's order), not garbage that happens to have a field."""
    try:
        doc = msgspec.json.decode(raw)
        if not isinstance(doc, dict):
            return False
        decode_order(msgspec.json.encode({k: v for k, v in doc.items() if k in _ORDER_FIELDS}))
    except msgspec.DecodeError:
        return False
    return True

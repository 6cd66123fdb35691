"""The job read model: what `sfc job show`, `sfc job list`, the history and the work views
say, as typed documents that encode to JSON as they are (`msgspec.json.encode`).

The CLI, `sfc mcp`, the console and the HTTP API all read jobs through these functions
and render these types; none of them reads the store itself. Every function only reads.
Times are epoch milliseconds of the server's clock (`now` is that clock when read); keys
are camelCase on the wire. A job whose stored order or state cannot be read is still
shown, as far as it can be, with `unreadable` saying why.

- `job_detail` -> `JobDetail`: one job (`GET /api/v1/jobs/{scope}/{job}`).
- `job_page` -> `JobPage`: a scope's jobs, filtered by state, paged (`GET /api/v1/jobs`).
- `job_history` -> `list[HistoryRow]`: a job's last history entries.

The work stream's views (pending and dead entries, consumer groups, commands out at the
equipment) are in host/workview.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from generated.job_order_v1_0 import JobOrder
from generated.job_response_v1_0 import JobResponse
from generated.state_v1_5 import SfcState
from host import joborder, jobview, keys
from host.entries import EntryError, decode_history
from host.jobview import DeadEntry, GroupRead, JobView, Listed, OutCommand
from host.store import Store
from sfc.explain import deadline_of, explain_state, waits, when
from sfc.words import elapsed


class Model(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A document of the read model: camelCase keys on the wire."""


class HistoryRow(Model, frozen=True, kw_only=True, omit_defaults=True):
    """One history entry of a job: what was evaluated (`event`) at `at`, and what came of it;
    `detail` and `order` are left out when the entry has none."""

    id: str
    at: int
    event: str
    disposition: str
    reason: str
    detail: str | None = None
    decisions: list[str]
    sent: list[str]
    """The commands the commit sent: `push j:a1#1`, `hold ...`, `restart ...`, `await ...`."""
    order: str | None = None


class PendingRow(Model, frozen=True):
    """A work entry read by a worker (`consumer`) `idle_ms` ago and not committed yet."""

    id: str
    consumer: str
    idle_ms: int
    deliveries: int


class OrderWait(Model, frozen=True):
    """What the order waits for from a person or a worker: `resume` (paused), `start` (stored,
    not allowed to start) or `worker` (allowed to start), since when (None: not known)."""

    waits_for: str = msgspec.field(name="for")
    since: int | None
    text: str


class ActionWait(Model, frozen=True):
    """An open action of a running job: it waits for an `answer` to its command (push,
    restart) or for an `event` (await), since its command went out (`since`, None when that
    is past the history read); `attempt` is the attempt out, `deadline` when it times out."""

    waits_for: str = msgspec.field(name="for")
    action: str
    step: str
    work: str
    command_id: str | None
    type_id: str
    attempt: int
    deadline: int | None
    hold: str | None
    hold_command_id: str | None
    since: int | None
    text: str


class ActionRow(Model, frozen=True):
    """One action of the job's state, pending (its timer runs), open or done: its qualifier,
    command, attempt `attempt` of `max_attempts`, deadline, outcome (once done), hold
    (`open`, `held`, `notHeld`) and process timer."""

    name: str
    step: str | None
    """None when the recipe cannot be built (`JobDetail.recipe_problem`), as are
    `qualifier`, `qualifier_ms` and `max_attempts`."""
    qualifier: str | None
    """IEC 61131-3's qualifier (N, S, L, D, P, SD, DS, SL, ...)."""
    qualifier_ms: int | None
    """The qualifier's T (L, D, SD, DS, SL), ms."""
    status: str
    work: str
    type_id: str
    command_id: str | None
    attempt: int
    max_attempts: int | None
    deadline: int | None
    outcome: str | None
    error: str | None
    hold: str | None
    hold_command_id: str | None
    hold_deadline: int | None
    timer: int | None
    """When its process timer fires: pending work starts (D, SD, DS), open work is
    withdrawn at its limit (L, SL); None: no timer runs."""
    sent_at: int | None
    """When its command went out last (of the history read), or None."""


class NextDeadline(Model, frozen=True):
    """A running job's next deadline (`at`, None: none) and what happens then."""

    at: int | None
    what: list[str]
    text: str


class GroupReadRow(Model, frozen=True):
    """How far one consumer group of the equipment stream (an adapter) read a command:
    `unread`, `read` (by `consumer` at `read_at`, not acknowledged), `done` (acknowledged),
    `trimmed` or `unknown` (host/jobview.py, `GroupRead`), and that in words."""

    group: str
    status: str
    consumer: str | None
    read_at: int | None
    deliveries: int | None
    consumer_idle_ms: int | None
    waiting: int | None
    waiting_at_least: bool
    read_past: bool | None
    text: str


class OutRow(Model, frozen=True):
    """An open command of the job: sent `since`, its equipment entry, an answer a worker
    holds (a work entry id), and how far each adapter read it."""

    command_id: str
    since: int
    entry: str | None
    answer: str | None
    reads: list[GroupReadRow]


class EquipmentGroup(Model, frozen=True):
    """A consumer group of the scope's equipment stream (XINFO GROUPS): `lag` is None when
    the server cannot tell it."""

    name: str
    consumers: int
    pending: int
    last_delivered: str
    lag: int | None


class DeadRow(Model, frozen=True):
    """A dead entry naming the job: its id, why it died, its kind, and its id on the work
    stream (`entry`)."""

    id: str
    reason: str
    kind: str
    entry: str


class DeadSummary(Model, frozen=True):
    """The dead entries naming the job among the last `scanned` of the scope."""

    count: int
    scanned: int
    latest: DeadRow | None


class Alert(Model, frozen=True):
    """Something likely wrong: `notStarted`, `deadlinePassed`, `noAdapter` or `unreadable`."""

    kind: str
    text: str


class JobDetail(Model, frozen=True):
    """Everything known of one job, for `sfc job show`, the console and MCP: from its stored
    order and state to what it waits for, since when, and what is likely wrong."""

    job: str
    scope: str
    order: JobOrder | None
    """None when the stored order cannot be read (`unreadable` says why)."""
    state: SfcState | None
    """None when the stored state cannot be read (`unreadable` says why)."""
    version: int | str
    """The job's version: a number as the host writes it, else as stored."""
    due: int | None
    """The job's entry on the due index (None: not on it)."""
    active: bool
    active_steps: list[str]
    dwells: dict[str, int]
    """Active steps whose MinSeconds have not passed yet, and when they pass."""
    history: list[HistoryRow]
    pending: list[PendingRow]
    """Work entries of the job read by a worker and not committed yet."""
    unread: int
    """Work entries of the scope that no worker has read yet."""
    response: JobResponse | None
    now: int
    """The server's time when the job was read."""
    unreadable: str | None
    recipe_problem: str | None
    """Why the job's recipe cannot be shown (not stored, does not build), or None."""
    waiting_for: list[OrderWait | ActionWait]
    paused_since: int | None
    next_deadline: NextDeadline | None
    actions: list[ActionRow]
    out_since: list[OutRow]
    equipment_groups: list[EquipmentGroup]
    dead: DeadSummary
    warnings: list[Alert]
    explain: list[str]


class JobRow(Model, frozen=True, omit_defaults=True):
    """One job of a list: its id, state path (with why it ended, when not completed), times
    and priority; `unreadable` (why) only for a job whose stored order or state cannot be
    read, whose other fields are then null."""

    job: str
    state: str | None
    stored_at: int | None
    started_at: int | None
    ended_at: int | None
    priority: int | None
    ended_by: str | None
    fault_code: str | None
    unreadable: str | None = None


class JobPage(Model, frozen=True):
    """A page of a scope's jobs, oldest first: `total` match the filter, `jobs` are those
    from `offset`, at most `limit`."""

    scope: str
    states: list[str]
    total: int
    offset: int
    limit: int
    jobs: list[JobRow]


class StateError(ValueError):
    """A state filter names no state of an order (the message lists the known ones)."""


# -- one job


def job_detail(store: Store, scope: str, job: str, history: int = 10) -> JobDetail | None:
    """The job's detail with its last `history` entries, read now; None when no job `job`
    is stored in `scope`."""
    v = jobview.view(store, scope, job, history)
    return None if v is None else detail_of(v, v.now)


def detail_of(v: JobView, now: int) -> JobDetail:
    """The detail of a job read as `v`, at time `now` (what waited how long)."""
    waiting = _order_waits(v, now)
    deadline = None
    explained: list[str] = []
    if v.graph is not None and v.state is not None:
        explained = explain_state(v.graph, v.state, v.max_attempts).rstrip("\n").splitlines()
        for w in waits(v.graph, v.state, v.max_attempts):
            if v.graph.actions[w.action].qualifier != "N":
                continue  # open but not waited for (S, L, D...): among `actions` only
            waiting.append(
                ActionWait(
                    waits_for="event" if w.work == "await" else "answer",
                    action=w.action,
                    step=w.step,
                    work=w.work,
                    command_id=w.command_id,
                    type_id=w.type_id,
                    attempt=w.attempt,
                    deadline=w.deadline,
                    hold=w.hold,
                    hold_command_id=w.hold_command_id,
                    since=None if w.command_id is None else v.sent_at.get(w.command_id),
                    text="\n".join(w.lines),
                )
            )
        if v.state.status == "running":
            d = deadline_of(v.graph, v.state, v.max_attempts)
            deadline = NextDeadline(at=d.at, what=list(d.what), text=d.text)
    return JobDetail(
        job=v.job,
        scope=v.scope,
        order=v.order,
        state=v.state,
        version=_version(v.version),
        due=v.due,
        active=v.active,
        active_steps=[] if v.state is None else list(v.state.active_steps),
        dwells={} if v.state is None else {k: int(x) for k, x in v.state.dwells.items()},
        history=[history_row(i, h) for i, h in v.history],
        pending=[
            PendingRow(
                id=p["id"], consumer=p["consumer"], idle_ms=p["idleMs"], deliveries=p["deliveries"]
            )
            for p in v.pending
        ],
        unread=v.unread,
        response=v.response,
        now=now,
        unreadable=v.unreadable,
        recipe_problem=None if v.graph is not None else v.graph_problem,
        waiting_for=waiting,
        paused_since=v.paused_since,
        next_deadline=deadline,
        actions=_actions(v),
        out_since=[_out_row(c, now, v.unread) for c in v.out],
        equipment_groups=[
            EquipmentGroup(
                name=g["name"],
                consumers=g["consumers"],
                pending=g["pending"],
                last_delivered=g["lastDelivered"],
                lag=g["lag"],
            )
            for g in v.equipment_groups
        ],
        dead=DeadSummary(
            count=len(v.dead),
            scanned=v.scanned,
            latest=None if not v.dead else _dead_row(v.dead[0]),
        ),
        warnings=_warnings(v, now, waiting),
        explain=explained,
    )


def history_row(entry_id: str, h: Any) -> HistoryRow:
    """A history entry (`HistoryEntry`) as a row."""
    return HistoryRow(
        id=entry_id,
        at=h.at,
        event=h.event,
        disposition=h.disposition,
        reason=h.reason,
        detail=None if h.detail is msgspec.UNSET else h.detail,
        decisions=list(h.decisions or []),
        sent=list(h.sent or []),
        order=h.order,
    )


def job_history(store: Store, scope: str, job: str, count: int = 100) -> list[HistoryRow]:
    """The job's last `count` history entries that can be read, oldest first (none for a
    job with no history, or none stored)."""
    keys.check_scope(scope)
    keys.check_job(job)
    out = []
    for entry_id, raw in store.history(scope, job, count):
        try:
            out.append(history_row(entry_id, decode_history(raw)))
        except EntryError:
            continue
    return out


def unreadable_part(d: JobDetail | JobView) -> str:
    """Which of the job's stored documents cannot be read, in words."""
    return "order" if d.order is None else "state" if d.state is None else "order or state"


def way_out(job: str, unreadable: str | None) -> str:
    """What to do with a job whose stored order or state cannot be read."""
    if "newer sfc" in (unreadable or ""):
        return "an sfc as new as the one that wrote it reads it"
    return f"no worker can evaluate it: `sfc job clear {job} --unreadable` removes it"


def _version(stored: str) -> int | str:
    try:
        return int(stored)
    except ValueError:
        return stored


def _actions(v: JobView) -> list[ActionRow]:
    """Every action record of the job's state, in the state's order."""
    if v.state is None:
        return []
    specs = {} if v.graph is None else v.graph.actions
    out = []
    for name, rec in v.state.actions.items():
        spec = specs.get(name)
        limit = None
        if spec is not None:
            limit = spec.max_attempts if spec.max_attempts is not None else v.max_attempts
        out.append(
            ActionRow(
                name=name,
                step=None if spec is None else spec.step,
                qualifier=None if spec is None else spec.qualifier,
                qualifier_ms=None if spec is None else spec.duration_ms,
                status=rec.status,
                work=rec.work,
                type_id=rec.type_id,
                command_id=rec.command_id,
                attempt=rec.attempt,
                max_attempts=limit,
                deadline=rec.deadline,
                outcome=rec.outcome,
                error=rec.error,
                hold=rec.hold,
                hold_command_id=rec.hold_command_id,
                hold_deadline=rec.hold_deadline,
                timer=rec.timer,
                sent_at=None if rec.command_id is None else v.sent_at.get(rec.command_id),
            )
        )
    return out


def _order_waits(v: JobView, now: int) -> list[OrderWait | ActionWait]:
    """What the order waits for from a person, or from a worker to start it: the recipe's
    own waits say nothing of these."""
    o = v.order
    if o is None:
        return []
    top = o.state[0].state_text if o.state else ""
    if top == "Interrupted":
        at = v.paused_since
        since = "" if at is None else f" since {when(at)} ({elapsed(now - at)} ago)"
        return [
            OrderWait(
                waits_for="resume",
                since=at,
                text=f"paused{since}: it waits for an operator's `sfc job resume` (or stop, "
                "or abort)",
            )
        ]
    if top == "NotAllowedToStart":
        return [
            OrderWait(
                waits_for="start",
                since=o.stored_at,
                text="stored, not allowed to start: it waits for `sfc job start`",
            )
        ]
    if top == "AllowedToStart":
        at = max(o.stored_at, v.last_change or 0)  # stored, or allowed later
        return [
            OrderWait(
                waits_for="worker",
                since=at,
                text=f"allowed to start {elapsed(now - at)} ago: a worker of scope {o.scope} "
                "starts it",
            )
        ]
    return []


def _warnings(v: JobView, now: int, waiting: Sequence[OrderWait | ActionWait]) -> list[Alert]:
    """What is likely wrong: no worker starts or ticks the job, no adapter reads the scope's
    commands, the job cannot be read."""
    out = []
    scope = v.scope
    for w in waiting:
        if w.waits_for != "worker" or w.since is None:
            continue
        waited = max(0, now - w.since)
        if waited > 5000 and not v.pending:
            out.append(
                Alert(
                    kind="notStarted",
                    text=f"not started {elapsed(waited)} after it was allowed to: is `sfc "
                    f"serve` serving scope {scope}, and keeping up? (`sfc work pending` shows "
                    "the entries no worker has read yet, `sfc work dead` those that failed)",
                )
            )
    running = v.state is not None and v.state.status == "running"
    if running and v.due is not None and v.due < now - 5000:
        out.append(
            Alert(
                kind="deadlinePassed",
                text=f"the deadline passed {elapsed(now - v.due)} ago and no worker has "
                "ticked it: is `sfc serve` running for this scope?",
            )
        )
    if v.out and not v.equipment_groups:
        out.append(
            Alert(
                kind="noAdapter",
                text=f"no adapter has read scope {scope}'s commands (its equipment stream "
                "has no consumer group): is `sfc equipment` or `sfc bridge mqtt` running?",
            )
        )
    if v.unreadable is not None:
        out.append(
            Alert(
                kind="unreadable",
                text=f"its stored {unreadable_part(v)} cannot be read ({v.unreadable}): "
                f"{way_out(v.job, v.unreadable)}",
            )
        )
    return out


def _dead_row(d: DeadEntry) -> DeadRow:
    return DeadRow(id=d.id, reason=d.reason, kind=d.kind, entry=d.entry)


def _out_row(c: OutCommand, now: int, unread: int) -> OutRow:
    return OutRow(
        command_id=c.command_id,
        since=c.since,
        entry=c.entry_id,
        answer=c.answer,
        reads=[
            GroupReadRow(
                group=r.group,
                status=r.status,
                consumer=r.consumer,
                read_at=None if r.idle_ms is None else now - r.idle_ms,
                deliveries=r.deliveries,
                consumer_idle_ms=r.consumer_idle_ms,
                waiting=r.waiting,
                waiting_at_least=r.at_least,
                read_past=r.read_past,
                text=_read_text(r, c, now, unread),
            )
            for r in c.reads
        ],
    )


def _read_text(r: GroupRead, c: OutCommand, now: int, unread: int) -> str:
    if r.status == "unread":
        n = "some" if r.waiting is None else str(r.waiting)
        if r.at_least:
            n = f"at least {n}"  # counted up to a cap: the server cannot tell the lag
        return f"not read yet by group {r.group}: {n} command(s) wait unread"
    if r.status == "read":
        idle = r.idle_ms or 0
        times = "" if r.deliveries is None else f", delivered {r.deliveries} time(s)"
        said = (
            f"read by group {r.group} (consumer {r.consumer}) at {when(now - idle)} "
            f"({elapsed(idle)} ago{times}), no answer yet"
        )
        if r.consumer_idle_ms is None:
            return said
        # a consumer that died looks like one that works on it, but for this
        return f"{said}; {r.consumer} last read the stream {elapsed(r.consumer_idle_ms)} ago"
    if r.status == "done":
        # `sfc equipment` acknowledges in the round trip that writes its answer, `sfc bridge
        # mqtt` once it published the command: taken, either way
        said = f"taken by group {r.group} (acknowledged); its answer is not applied yet"
        if c.answer is not None:
            return f"{said}: a worker holds it ({c.answer}, see Entries read but not yet committed)"
        if unread:
            return f"{said} (it may wait in the work stream: see Work stream)"
        return f"{said}: none has come back yet"
    if r.status == "trimmed":
        return _trimmed_text(r)
    return (
        f"not found among the first {jobview.EQUIPMENT_SCAN} equipment entries of the "
        f"millisecond it went out: group {r.group} cannot be told"
    )


def _trimmed_text(r: GroupRead) -> str:
    """A command whose entry is gone from the equipment stream, as far as group `r.group`
    is known to have read it: past it, or not, by its last delivered entry; never
    "acknowledged", which cannot be known of an entry no longer there."""
    last = r.last_delivered
    if r.read_past:
        return (
            f"not on the equipment stream any more (trimmed); group {r.group} has read past "
            f"it (its last delivered entry, {last}, is of a later millisecond)"
        )
    if r.read_past is False:
        return (
            f"not on the equipment stream any more: trimmed before group {r.group} read it "
            f"(its last delivered entry, {last}, is from before the command went out)"
        )
    return (
        f"not on the equipment stream any more (trimmed); group {r.group} has read up to "
        f"{last}, of the millisecond the command went out: whether it read the command "
        "cannot be told"
    )


# -- the jobs of a scope


def ended_state(o: JobOrder) -> str:
    """The order's state path, and for one that did not complete, why it ended (its result:
    endedBy and faultCode): a fault and an operator's abort are both Aborted."""
    said = joborder.path_text(o)
    r = o.result
    if r is msgspec.UNSET or r.ended_by == "completed":
        return said
    return f"{said} ({r.ended_by}" + (f" {r.fault_code})" if r.fault_code else ")")


def job_row(j: Listed) -> JobRow:
    """A listed job as a row."""
    o = j.order
    if o is None:
        return JobRow(
            job=j.job,
            state=None,
            stored_at=None,
            started_at=None,
            ended_at=None,
            priority=None,
            ended_by=None,
            fault_code=None,
            unreadable=j.unreadable,
        )
    r = None if o.result is msgspec.UNSET else o.result
    return JobRow(
        job=o.job_order_id,
        state=joborder.path_text(o),
        stored_at=o.stored_at,
        started_at=o.started_at,
        ended_at=o.ended_at,
        priority=o.priority,
        ended_by=None if r is None else r.ended_by,
        fault_code=None if r is None else r.fault_code,
        unreadable=j.unreadable,
    )


def known_states() -> list[str]:
    """The states (and state paths, `Ended/Completed`) a list can be filtered by."""
    return sorted(
        set(joborder.STATE_NUMBERS)
        | {f"{s}/{sub}" for s, subs in joborder.SUBSTATES.items() for sub in subs}
    )


def matches_state(o: JobOrder | None, states: Sequence[str]) -> bool:
    """Whether the order is in one of `states` (a state or a state path); every order is,
    with none given. An order that cannot be read is in none."""
    if not states:
        return True
    return o is not None and (joborder.state_of(o) in states or joborder.path_text(o) in states)


def job_page(
    store: Store,
    scope: str,
    states: Sequence[str] = (),
    offset: int = 0,
    limit: int = 100,
) -> JobPage:
    """The scope's jobs in any of `states` (all with none), oldest first, from `offset`, at
    most `limit`. An unknown state raises StateError; a job that cannot be read is listed
    (with why) only when no state is given."""
    keys.check_scope(scope)
    known = known_states()
    unknown = [s for s in states if s not in known]
    if unknown:
        raise StateError(f"unknown state {', '.join(unknown)}; known: {', '.join(known)}")
    if not states:
        ids = store.order_ids(scope)
        page = ids[offset : offset + limit]
        listed = jobview.listing_of(store, scope, page)
        total = len(ids)
    else:
        every = [j for j in jobview.listing(store, scope) if matches_state(j.order, states)]
        listed, total = every[offset : offset + limit], len(every)
    return JobPage(
        scope=scope,
        states=list(states),
        total=total,
        offset=offset,
        limit=limit,
        jobs=[job_row(j) for j in listed],
    )

"""What the CLI, `sfc mcp` and the console call to reach the server, beside the job-control
methods (host/jobs.py) and the read model (host/readmodel.py): they hold a `Connection`
and call these functions, never a method of the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from generated.job_order_v1_0 import JobOrder
from generated.snapshot_v1_0 import Snapshot
from generated.work_entry_v1_0 import AnswerData, TickData
from host import joborder, jobs, keys
from host.apply import decode_order
from host.entries import fields
from host.equipment import answer_data
from host.evaluate import ScopeConfig, answer_event
from host.settings import Settings
from host.store import Store, StoreError, redacted, unreachable
from sfc.builder import build
from sfc.evolution import evolve
from sfc.migrate import read_state

Connection: TypeAlias = Store
"""A connection to the server (one client per node of a cluster): opened by `connect`
(host/serve.py), closed by `close`."""

__all__ = [
    "Connection",
    "Refused",
    "StoreError",
    "answer",
    "close",
    "drop_dead",
    "drop_group",
    "ended",
    "ensure_library",
    "event_waits",
    "exists",
    "history_lengths",
    "load_library",
    "orders",
    "queue_answer",
    "queue_tick",
    "reach_again",
    "readers",
    "redacted",
    "requeue",
    "scopes",
    "server_time",
    "taken",
    "unreachable",
]

UNKNOWN = "unknown job order"
"""What `ended` says of a job that is not stored."""


def close(conn: Connection) -> None:
    """Close the connection's clients."""
    conn.close()


def scopes(conn: Connection) -> list[str]:
    """The registered scopes (`sfc:scopes`)."""
    return conn.scopes()


def server_time(conn: Connection) -> int:
    """The server's clock, epoch ms."""
    return conn.time_ms()


def exists(conn: Connection, scope: str, job: str) -> bool:
    """Whether job `job` is stored in `scope`."""
    return conn.job(scope, job) is not None


def taken(conn: Connection, scope: str, job_ids: Sequence[str]) -> list[str]:
    """Of `job_ids`, those stored in `scope`, in their order (one EXISTS each, pipelined
    per node)."""
    found = conn.stored_jobs([(scope, j) for j in job_ids])
    return [j for j in job_ids if (scope, j) in found]


def orders(conn: Connection, scope: str, job_ids: Sequence[str]) -> dict[str, JobOrder | None]:
    """The stored order of each job (None: not stored), in one read per node. An order
    that cannot be read raises msgspec.DecodeError."""
    _, records = conn.load(scope, list(job_ids))
    return {j: None if r is None else decode_order(r.order) for j, r in records.items()}


def ended(conn: Connection, scope: str, job_ids: Sequence[str]) -> dict[str, JobOrder | str]:
    """Of `job_ids`, the orders that have ended, and UNKNOWN for a job not stored; a job
    still under way is left out."""
    out: dict[str, JobOrder | str] = {}
    for j, o in orders(conn, scope, job_ids).items():
        if o is None:
            out[j] = UNKNOWN
        elif joborder.ended(o):
            out[j] = o
    return out


def reach_again(conn: Connection) -> None:
    """After the server could not be reached: learn the cluster's nodes again, so that the
    next call goes where the keys are now."""
    conn.refresh_routes()


def queue_tick(conn: Connection, scope: str, job: str) -> str | None:
    """Queue a tick entry for the job (its expired deadlines fire now); its entry id, or
    None when no such job is stored."""
    if conn.job(scope, job) is None:
        return None
    return conn.add_work(scope, fields("tick", TickData(job=job, outage_ms=0)))


def requeue(conn: Connection, scope: str, entry_id: str) -> str | None:
    """Move a dead entry back to the work stream: its new id, or None when there is none."""
    return conn.requeue(scope, entry_id)


def drop_dead(
    conn: Connection, scope: str, entry_ids: Sequence[str]
) -> dict[str, Mapping[bytes, bytes] | None]:
    """Remove dead entries for good: each one's fields as they were, or None for one that
    is not there (nothing removed)."""
    dead = dict(conn.dead(scope, 10_000))
    out: dict[str, Mapping[bytes, bytes] | None] = {}
    for entry_id in entry_ids:
        f = dead.get(entry_id)
        out[entry_id] = f if f is not None and conn.drop_dead(scope, entry_id) else None
    return out


def drop_group(conn: Connection, scope: str, stream: str, name: str) -> bool:
    """Remove the consumer group `name` (as `host.workview` shows it) of the scope's `work`
    or `equipment` stream; whether there was one."""
    groups = conn.stream_groups(scope).get(stream, [])
    raw = next((g["raw"] for g in groups if g["name"] == name), None)
    return raw is not None and conn.drop_group(scope, stream, raw)


def event_waits(conn: Connection, scope: str, type_id: str, at_ms: int) -> list[tuple[bytes, int]]:
    """The waits for events of `type_id` in the scope that began by `at_ms` (members of its
    waits index, with their start)."""
    members, _ = conn.waiting(scope, type_id, at_ms, None)
    return list(members)


def readers(conn: Connection, scope: str) -> int:
    """How many workers (consumers of the workers' group) read the scope's work stream."""
    try:
        return len(conn.client(scope).xinfo_consumers(keys.work(scope), keys.GROUP))
    except Exception as e:
        if str(e).startswith("NOGROUP") or "no such key" in str(e):
            return 0
        raise


def history_lengths(conn: Connection, scope: str, job_ids: Sequence[str]) -> int:
    """The history entries of the jobs, together."""
    pipe = conn.client(scope).pipeline(transaction=False)
    for j in job_ids:
        pipe.xlen(keys.history(scope, j))
    return sum(int(n) for n in pipe.execute())


def load_library(conn: Connection) -> None:
    """Load the host's function library on every primary (`sfc setup`)."""
    conn.load_library()


def ensure_library(conn: Connection) -> None:
    """Load the library where it is missing (an ACL user without FUNCTION LOAD relies on
    `sfc setup`)."""
    conn.ensure_library()


class Refused(ValueError):
    """A request refused before anything is written, with why (a person's to fix)."""


def answer(
    conn: Connection,
    scope: str,
    job: str,
    action: str,
    *,
    outcome: str | None = None,
    error: str | None = None,
    command_id: str | None = None,
    round: int | None = None,
) -> AnswerData | None:
    """The answer `sfc respond` would queue for ACTION's open work, `ACTION:hold`, or
    `command_id` in `round`; None when no such job, Refused when the core would not take
    it. Nothing is written."""
    record = conn.job(scope, job)
    if record is None:
        return None
    name = action.removeprefix(f"{job}:")
    state = read_state(record.state)
    if name.endswith(":hold") and command_id is None:
        # `ACTION:hold` answers the open hold command, as a script's reply key does; also
        # one whose time ran out while its work is still out (the engine takes a late
        # `held`: the attempt ends)
        rec = state.actions.get(name.removesuffix(":hold"))
        if (
            rec is None
            or rec.status != "open"
            or rec.hold not in ("open", "notHeld")
            or rec.hold_command_id is None
        ):
            raise Refused(f"{name}: no hold command is open for job {job}; nothing queued")
        command_id, action = rec.hold_command_id, name.removesuffix(":hold")
    elif command_id is None:
        # ACTION answers the work open now, by its command id: not work that opens later
        # (a job not started yet), nor work of a later round of its step
        rec = state.actions.get(name)
        if rec is None or rec.status != "open" or rec.command_id is None:
            names = jobs.recipe_actions(conn, record)
            if names and name not in names:
                # a mistyped action, named as `sfc job redispatch` names it
                raise Refused(
                    f"{name}: the recipe of job {job} has no action {name!r}; it has "
                    f"{', '.join(names)}; nothing queued"
                )
            raise Refused(
                f"{name}: no work of it is open for job {job} "
                f"({'it has not started' if state.status == 'ready' else 'see `sfc job show`'})"
                "; nothing queued"
            )
        if rec.work == "await":
            raise Refused(
                f"{name} waits for an event, not an answer: publish it with `sfc event "
                f"{rec.type_id} ...` (see `sfc job show {job}` for its selector); nothing queued"
            )
        command_id = rec.command_id
        if round is None:
            round = rec.round
    data = answer_data(
        job, action, outcome=outcome, error=error, command_id=command_id, round=round
    )
    order = decode_order(record.order)
    text = conn.recipe_text(order.recipe_hash)
    graph = None if text is None else build(text, None, order.dataschema).graph
    if graph is None:
        return data  # the worker says what is wrong with the job: its recipe
    config = ScopeConfig.of(conn.scope_settings(scope), Settings())
    event = answer_event(data, conn.time_ms())
    result = evolve(graph, state, Snapshot(max_attempts=config.max_attempts), event)
    if result.disposition != "applied":
        verb = "reject" if result.disposition == "rejected" else "ignore"
        raise Refused(
            f"a worker would {verb} this answer ({result.disposition}: {result.reason}); "
            "nothing queued (`sfc job show " + job + "` shows the open commands)"
        )
    return data


def queue_answer(conn: Connection, scope: str, data: AnswerData) -> str:
    """Queue an answer (`answer`) as an `answer` work entry; its entry id."""
    return conn.add_work(scope, fields("answer", data))

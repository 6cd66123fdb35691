"""`sfc respond`, `sfc event` and `sfc work pending|dead|requeue` (docs/host.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import msgspec
import typer

from cli.files import visible
from cli.hostcommon import (
    DataDirOption,
    JsonOption,
    RedisOption,
    ScopeOption,
    check_jobs,
    check_scope,
    connected,
    fail,
    open_store,
    print_json,
    process_settings,
    server_errors,
    warn_unregistered,
    where_else,
)
from cli.main import app
from host import facade, workview
from host.entries import entry_ms
from host.equipment import answer_data, publish_event
from host.waits import matches, parse_member
from sfc.explain import when
from sfc.words import elapsed

work_app = typer.Typer(
    name="work",
    help="The work stream: entries pending and dead.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(work_app, name="work")


@contextmanager
def refused() -> Iterator[None]:
    """An answer or event that a worker would bury is refused here: exit 2, nothing written."""
    try:
        yield
    except ValueError as e:  # EntryError, KeyError_ and the checks of respond/publish_event
        fail(f"refused, nothing written: {e}", 2)


@app.command()
def respond(
    job: Annotated[str, typer.Argument(metavar="JOB")],
    action: Annotated[str, typer.Argument(metavar="ACTION", help="The action (or its key).")],
    outcome: Annotated[
        str | None, typer.Argument(metavar="OUTCOME", help="The outcome (default done).")
    ] = None,
    error: Annotated[
        str | None, typer.Option("--error", metavar="TEXT", help="Report a failure instead.")
    ] = None,
    command_id: Annotated[
        str | None,
        typer.Option("--command-id", metavar="ID", help="The command id it answers."),
    ] = None,
    round_: Annotated[
        int | None, typer.Option("--round", metavar="N", min=1, help="The round it answers.")
    ] = None,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Answer a command as equipment would: queue an `answer` work entry.

    ACTION answers the action's open work; `ACTION:hold` its open hold command (or give the
    command id with --command-id). A job that is not stored is refused (exit 1)."""
    check_scope(scope)
    if outcome is not None and error is not None:
        fail("give an OUTCOME or --error, not both", 2)
    if outcome is not None and not outcome.strip():
        fail("OUTCOME is empty: leave it out for done", 2)
    if error is not None and not error.strip():
        # it faulted the job with "failure reported", as no equipment reports one
        fail("--error is empty: give the failure's text", 2)
    check_jobs([job])
    with refused():  # the answer's own shape first (exit 2), then what the job has open
        answer_data(job, action, outcome=outcome, error=error, command_id=command_id, round=round_)
    store = open_store(redis, data_dir)
    try:
        with server_errors():
            data = facade.answer(
                store,
                scope,
                job,
                action,
                outcome=outcome,
                error=error,
                command_id=command_id,
                round=round_,
            )
            elsewhere = where_else(store, scope, job) if data is None else ""
    except facade.Refused as e:
        facade.close(store)
        fail(visible(str(e)), 1)
    if data is None:
        facade.close(store)
        # an adapter's answer for a cleared job is dropped and counted by the worker; a
        # person who typed the id wants to know
        fail(
            f"no job order {job!r} in scope {scope}{elsewhere}: nothing queued "
            "(see `sfc job list`)",
            1,
        )
    with server_errors():
        entry = facade.queue_answer(store, scope, data)
    facade.close(store)
    typer.echo(f"queued answer {entry}")


@app.command()
def event(
    type_id: Annotated[str, typer.Argument(metavar="TYPE", help="The event's type id.")],
    subject: Annotated[str | None, typer.Option("--subject", metavar="S")] = None,
    correlation_id: Annotated[str | None, typer.Option("--correlation-id", metavar="C")] = None,
    outcome: Annotated[str | None, typer.Option("--outcome", metavar="O")] = None,
    source: Annotated[
        str | None, typer.Option("--source", metavar="S", help="With --id: deduplicates it.")
    ] = None,
    id_: Annotated[str | None, typer.Option("--id", metavar="I")] = None,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Publish an event for the jobs that wait for its type. It is queued only when some job
    of the scope waits for the type; otherwise it is dropped and counted (exit 0 both)."""
    check_scope(scope)
    if (source is None) != (id_ is None):
        fail("--source and --id come together: give both or neither", 2)
    if not type_id.strip():
        fail("TYPE is empty", 2)
    if not type_id.isprintable() or any(c.isspace() for c in type_id):
        # a recipe's type id cannot hold these (SFC009): no wait can be for such a type
        fail(f"TYPE {type_id!r} holds white space or a control character", 2)
    if outcome is not None and not outcome.strip():
        fail("--outcome is empty: leave it out for done", 2)
    store = open_store(redis, data_dir)
    with server_errors(), refused():
        entry = publish_event(
            store,
            scope,
            type_id,
            subject=subject,
            correlation_id=correlation_id,
            outcome=outcome,
            source=source,
            id=id_,
        )
        if entry is None:
            warn_unregistered(store, scope)
            unmatched = None
        else:
            members = facade.event_waits(store, scope, type_id, entry_ms(entry))
            unmatched = _unmatched(members, subject, correlation_id)
    facade.close(store)
    if entry is None:
        typer.echo(f"dropped: no job of scope {scope} waits for {type_id} (counted)")
        return
    typer.echo(f"queued event {entry}")
    if unmatched is not None:
        typer.echo(
            visible(
                f"sfc: warning: no wait for {type_id} in scope {scope} matches this event "
                f"({_selector(subject, correlation_id, 'no')}): it will be dropped as unmatched (a "
                f"wait that begins later never matches it); the waits expect {unmatched}"
            ),
            err=True,
        )


SHOWN_WAITS = 5
"""The most waits the warning of an unmatched event names (then how many more)."""


def _unmatched(
    members: list[tuple[bytes, int]], subject: str | None, correlation_id: str | None
) -> str | None:
    """None when a wait that began by the event matches it (`host.waits.matches`, the
    worker's rule); else what the waits of its type expect, a few of them."""
    parsed = [p for p in (parse_member(m) for m, _ in members) if p is not None]
    if not parsed or any(matches(p, subject, correlation_id) for p in parsed):
        return None
    said = [f"{_selector(sub, corr, 'any')} (job {job})" for job, sub, corr in parsed[:SHOWN_WAITS]]
    more = len(parsed) - SHOWN_WAITS
    return "; ".join(said) + (f"; and {more} more" if more > 0 else "")


def _selector(subject: str | None, correlation_id: str | None, free: str) -> str:
    """A selector in words; `free` words a field it leaves unset."""
    said = [f"subject {subject!r}" if subject is not None else f"{free} subject"]
    said.append(
        f"correlation id {correlation_id!r}"
        if correlation_id is not None
        else f"{free} correlation id"
    )
    return ", ".join(said)


_ENTRY_ID = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?")
"""A stream entry id: milliseconds, and a sequence number."""


@work_app.command()
def pending(
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Work entries read by a worker and not yet committed, oldest first."""
    check_scope(scope)
    with connected(redis, data_dir) as store:
        seen = workview.work_pending(store, scope)
        now = facade.server_time(store)
        idle = not seen.pending and not seen.unread
        warning = warn_unregistered(store, scope) if idle else None
    out, unread = seen.pending, seen.unread
    if as_json:
        print_json(msgspec.to_builtins(seen) | ({"warning": warning} if warning else {}))
        return
    if unread:
        # written and not read by any worker: none of them is reading this scope?
        typer.echo(
            f"{unread} {'entry' if unread == 1 else 'entries'} not read by any worker yet "
            f"in scope {scope}"
        )
        hint = _no_worker(seen)
        if hint:
            typer.echo(f"  {hint}")
    if not out:
        typer.echo(f"no pending entries in scope {scope}")
    for p in out:
        age = elapsed(now - entry_ms(p.id))
        typer.echo(
            visible(  # a consumer's name and a malformed entry's reason are anyone's text
                f"{p.id}  {p.entry}: written {age} ago, read by {p.consumer}, idle "
                f"{elapsed(p.idle_ms)}, delivered {p.deliveries} time(s)"
            )
        )
    if seen.out_at_equipment:
        typer.echo("Commands out at the equipment (delivered to an adapter, not acknowledged):")
    for o in seen.out_at_equipment:
        what = o.command_id or "(trimmed)"
        typer.echo(
            visible(
                f"  {o.entry}  {what}" + (f" (job {o.job})" if o.job else "") + f": group "
                f"{o.group}, consumer {o.consumer}, for {elapsed(o.idle_ms)}, delivered "
                f"{o.deliveries} time(s)"
            )
        )


WORKER_SILENT_MS = 30_000
"""A scope whose workers have not read for this long while entries wait unread: `sfc work
pending` asks whether `sfc serve` runs (a serving worker reads every few seconds)."""


def _no_worker(seen: workview.PendingView) -> str | None:
    """Why entries wait unread, when the workers' group says it: no consumer, or none that
    read lately."""
    if seen.workers == 0:
        return (
            f"no worker reads scope {seen.scope} (the workers' group has no consumer): "
            f"is `sfc serve` serving it? (`sfc work groups` shows the groups)"
        )
    idle = seen.workers_idle_ms
    if idle is not None and idle > WORKER_SILENT_MS:
        return (
            f"no worker of scope {seen.scope} has read for {elapsed(idle)} ({seen.workers} "
            "consumer(s) in the workers' group, none reading): is `sfc serve` running, and "
            "keeping up? (`sfc work groups` shows the groups)"
        )
    return None


@work_app.command()
def dead(
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Entries that could not be parsed, or failed too often, with the reason."""
    check_scope(scope)
    with connected(redis, data_dir) as store:
        seen = workview.work_dead(store, scope)
        warning = None if seen.dead else warn_unregistered(store, scope)
    out = seen.dead
    if as_json:
        print_json(msgspec.to_builtins(seen) | ({"warning": warning} if warning else {}))
        return
    if not out:
        typer.echo(f"no dead entries in scope {scope}")
        return
    for d in out:
        was = d.entry or d.id
        job = f" for job {d.job}" if d.job else ""
        typer.echo(
            visible(
                f"{d.id}  (was {was} at {when(entry_ms(was))}, {d.kind or 'no kind'}"
                f"{job}): {d.reason}"
            )
        )


def _check_entry_ids(entry_ids: list[str]) -> None:
    """Every id, before any entry is touched: a malformed one touches none (exit 2)."""
    malformed = [i for i in entry_ids if _ENTRY_ID.fullmatch(i) is None]
    if malformed:
        fail(f"not an entry id (MS-SEQ, as `sfc work dead` shows them): {malformed[0]!r}", 2)


@work_app.command()
def requeue(
    entry_ids: Annotated[list[str], typer.Argument(metavar="ENTRY-ID...")],
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Move dead entries back to the work stream (after fixing what made them fail)."""
    check_scope(scope)
    _check_entry_ids(entry_ids)
    store = open_store(redis, data_dir)
    missing = False
    with server_errors():
        for entry_id in entry_ids:
            new = facade.requeue(store, scope, entry_id)
            if new is None:
                missing = True
                typer.echo(f"{entry_id}: no such dead entry in scope {scope}", err=True)
            else:
                typer.echo(f"{entry_id}: requeued as {new}")
    facade.close(store)
    if missing:
        raise typer.Exit(1)


@work_app.command()
def drop(
    entry_ids: Annotated[list[str], typer.Argument(metavar="ENTRY-ID...")],
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Remove dead entries for good, once handled by other means (their job cleared, or
    answered by hand): the dead stream then says only what still needs someone. Each is
    logged to stdout with its kind, job and reason, for the shift's record."""
    check_scope(scope)
    _check_entry_ids(entry_ids)
    store = open_store(redis, data_dir)
    missing = False
    with server_errors():
        for entry_id, fields in facade.drop_dead(store, scope, entry_ids).items():
            if fields is None:
                missing = True
                typer.echo(f"{entry_id}: no such dead entry in scope {scope}", err=True)
                continue
            d = workview.dead_entry_row(entry_id, fields)
            job = f" for job {d.job}" if d.job else ""
            typer.echo(visible(f"{entry_id}: dropped ({d.kind or 'no kind'}{job}): {d.reason}"))
    facade.close(store)
    if missing:
        raise typer.Exit(1)


ADAPTER_LIVE_MS = 60_000
"""A group with a consumer that read within this long has an adapter running: `sfc work
groups --drop` refuses it without --force."""


@work_app.command()
def groups(
    drop: Annotated[
        str | None,
        typer.Option(
            "--drop",
            metavar="NAME",
            help="Remove this consumer group (of --stream): one an adapter left behind.",
        ),
    ] = None,
    stream: Annotated[
        str,
        typer.Option("--stream", metavar="STREAM", help="With --drop: equipment or work."),
    ] = "equipment",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --drop: also the workers' group, or a group whose adapter still reads.",
        ),
    ] = False,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """The consumer groups of the scope's work stream (the workers') and equipment stream
    (the adapters'): lag, entries delivered and not acknowledged, last delivery, since a
    consumer last read, and whether the group is stale (its adapter gone: the trim passes
    over it). --drop NAME removes a group."""
    check_scope(scope)
    if stream not in ("equipment", "work"):
        fail(f"--stream: equipment or work, not {stream!r}", 2)
    retention = process_settings().equipment_retention  # as the workers judge staleness
    with connected(redis, data_dir) as store:
        seen = workview.work_groups(store, scope, retention)
        if drop is not None:
            _drop_group(store, seen, stream, drop, force)
            return
        warning = None if seen.groups else warn_unregistered(store, scope)
    if as_json:
        print_json(msgspec.to_builtins(seen) | ({"warning": warning} if warning else {}))
        return
    if not seen.groups:
        typer.echo(f"no consumer groups in scope {scope}")
    for g in seen.groups:
        typer.echo(visible(_group_line(g, seen.now, retention)))


def _group_line(g: workview.GroupRow, now: int, retention: int) -> str:
    role = {"workers": "the workers' group", "adapter": "an adapter's group"}.get(
        g.role, "a group made by hand"
    )
    lag = "lag unknown" if g.lag is None else f"lag {g.lag}"
    last = (
        "nothing delivered yet"
        if g.last_delivered_at is None
        else f"last delivery {when(g.last_delivered_at)} ({elapsed(now - g.last_delivered_at)} ago)"
    )
    read = (
        "no consumer"
        if g.idle_ms is None
        else f"{len(g.consumers)} consumer(s), the latest read {elapsed(g.idle_ms)} ago"
    )
    said = (
        f"{g.stream} stream ({g.length} entries): {g.name} ({role}): {lag}, {g.pending} "
        f"delivered and not acknowledged, {last}, {read}"
    )
    if g.stale:
        said += (
            f"; STALE: no consumer read for {elapsed(retention)} (SFC_EQUIPMENT_RETENTION): "
            "the trim passes over it; `sfc work groups --drop NAME` removes it"
        )
    return said


def _drop_group(
    store: facade.Connection, seen: workview.GroupsView, stream: str, name: str, force: bool
) -> None:
    group = next((g for g in seen.groups if g.stream == stream and g.name == name), None)
    if group is None:
        fail(f"no consumer group {name!r} on the {stream} stream of scope {seen.scope}", 1)
    if group.role == "workers" and not force:
        fail(
            f"{name} is the workers' group: without it no worker reads scope {seen.scope}, "
            "and what they read and have not committed is forgotten; stop `sfc serve` first, "
            "then give --force",
            1,
        )
    if group.idle_ms is not None and group.idle_ms <= ADAPTER_LIVE_MS and not force:
        fail(
            f"group {name} has a consumer that read {elapsed(group.idle_ms)} ago: its adapter "
            "runs; stop it first, or give --force",
            1,
        )
    if not facade.drop_group(store, seen.scope, stream, name):
        fail(f"no consumer group {name!r} on the {stream} stream of scope {seen.scope}", 1)
    typer.echo(
        visible(
            f"dropped group {name} of the {stream} stream of scope {seen.scope} ({group.pending} "
            f"delivered and not acknowledged, lag {group.lag})"
        )
    )

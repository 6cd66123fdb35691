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
    server_errors,
    warn_unregistered,
    where_else,
)
from cli.main import app
from generated.state_v1_5 import SfcState
from host import jobs, readmodel
from host.entries import entry_ms
from host.equipment import answer_data, publish_event
from host.equipment import respond as respond_
from host.waits import matches, parse_member
from sfc.codec import state_decoder
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
    with server_errors():
        record = store.job(scope, job)
        elsewhere = where_else(store, scope, job) if record is None else ""
    if record is None:
        # an adapter's answer for a cleared job is dropped and counted by the worker; a
        # person who typed the id wants to know
        fail(
            f"no job order {job!r} in scope {scope}{elsewhere}: nothing queued "
            "(see `sfc job list`)",
            1,
        )
    name = action.removeprefix(f"{job}:")
    if name.endswith(":hold") and command_id is None:
        # `ACTION:hold` answers the open hold command, as a script's reply key does; also
        # one whose time ran out while its work is still out (the engine takes a late
        # `held`: the attempt ends)
        state = _stored_state(record.state)
        rec = state.actions.get(name.removesuffix(":hold"))
        if (
            rec is None
            or rec.status != "open"
            or rec.hold not in ("open", "notHeld")
            or rec.hold_command_id is None
        ):
            fail(f"{name}: no hold command is open for job {job}; nothing queued", 1)
        command_id, action = rec.hold_command_id, name.removesuffix(":hold")
    elif command_id is None:
        # ACTION answers the work open now, by its command id: not work that opens later
        # (a job not started yet), nor work of a later round of its step
        state = _stored_state(record.state)
        rec = state.actions.get(name)
        if rec is None or rec.status != "open" or rec.command_id is None:
            with server_errors():
                names = jobs.recipe_actions(store, record)
            if names and name not in names:
                # a mistyped action, named as `sfc job redispatch` names it
                fail(
                    f"{name}: the recipe of job {job} has no action {name!r}; it has "
                    f"{', '.join(names)}; nothing queued",
                    1,
                )
            fail(
                f"{name}: no work of it is open for job {job} "
                f"({'it has not started' if state.status == 'ready' else 'see `sfc job show`'})"
                "; nothing queued",
                1,
            )
        if rec.work == "await":
            fail(
                f"{name} waits for an event, not an answer: publish it with `sfc event "
                f"{rec.type_id} ...` (see `sfc job show {job}` for its selector); nothing queued",
                1,
            )
        command_id = rec.command_id
        if round_ is None:
            round_ = rec.round
    with server_errors(), refused():
        entry = respond_(
            store,
            scope,
            job,
            action,
            outcome=outcome,
            error=error,
            command_id=command_id,
            round=round_,
        )
    store.close()
    typer.echo(f"queued answer {entry}")


def _stored_state(raw: bytes) -> SfcState:
    """A job's stored state; one that cannot be read is said as every host command says it."""
    with server_errors():
        return state_decoder.decode(raw)
    raise AssertionError("unreachable")  # pragma: no cover - server_errors exits


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
            members, _ = store.waiting(scope, type_id, entry_ms(entry), None)
            unmatched = _unmatched(members, subject, correlation_id)
    store.close()
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
        seen = readmodel.work_pending(store, scope)
        now = store.time_ms()
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
    if not out:
        typer.echo(f"no pending entries in scope {scope}")
        return
    for p in out:
        age = elapsed(now - entry_ms(p.id))
        typer.echo(
            visible(  # a consumer's name and a malformed entry's reason are anyone's text
                f"{p.id}  {p.entry}: written {age} ago, read by {p.consumer}, idle "
                f"{elapsed(p.idle_ms)}, delivered {p.deliveries} time(s)"
            )
        )


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
        seen = readmodel.work_dead(store, scope)
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
            new = store.requeue(scope, entry_id)
            if new is None:
                missing = True
                typer.echo(f"{entry_id}: no such dead entry in scope {scope}", err=True)
            else:
                typer.echo(f"{entry_id}: requeued as {new}")
    store.close()
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
        dead = {i: f for i, f in store.dead(scope, 10_000)}
        for entry_id in entry_ids:
            fields = dead.get(entry_id)
            if fields is None or not store.drop_dead(scope, entry_id):
                missing = True
                typer.echo(f"{entry_id}: no such dead entry in scope {scope}", err=True)
                continue
            d = readmodel.dead_entry_row(entry_id, fields)
            job = f" for job {d.job}" if d.job else ""
            typer.echo(visible(f"{entry_id}: dropped ({d.kind or 'no kind'}{job}): {d.reason}"))
    store.close()
    if missing:
        raise typer.Exit(1)

"""`sfc job ...`: job orders and the ISA-95 job-control methods (docs/host.md).

Every method prints the ReturnStatus of each job, in words and as its number, and exits 1
when any job's request was refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn

import msgspec
import typer

from cli.files import (
    console,
    every_shape_error,
    format_error,
    json_path,
    read,
    terminal,
    visible,
)
from cli.hostcommon import (
    DataDirOption,
    JsonOption,
    RedisOption,
    ScopeOption,
    check_jobs,
    check_scope,
    connected,
    fail,
    not_found,
    not_found_many,
    open_store,
    print_json,
    process_settings,
    server_errors,
    server_gone,
    unreadable_job,
    warn_unregistered,
)
from cli.main import app
from host import facade, joborder, jobs, jobview, keys, readmodel
from host.facade import Connection
from host.joborder import ReturnStatus
from host.reconnect import Reconnect
from sfc.explain import when
from sfc.words import duration, elapsed

job_app = typer.Typer(
    name="job",
    help="Job orders: submit, control (ISA-95 methods), show, list and wait.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(job_app, name="job")

JobsArgument = Annotated[list[str], typer.Argument(metavar="JOB...", help="Job ids.")]
CommentOption = Annotated[
    str | None,
    typer.Option("--comment", metavar="TEXT", help="A comment kept on the order."),
]


def _status_line(result: jobs.MethodResult) -> str:
    said = joborder.status_words(int(result.status))
    return f"{result.job}: {said}" + (f": {result.message}" if result.message else "")


def _report(results: list[jobs.MethodResult], as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "results": [
                    {
                        "job": r.job,
                        "status": int(r.status),
                        "words": joborder.status_words(int(r.status)),
                        "message": r.message,
                    }
                    for r in results
                ]
            }
        )
    else:
        for r in results:
            typer.echo(_status_line(r))
    if any(not r.ok for r in results):
        raise typer.Exit(1)


@job_app.command()
def submit(
    recipe: Annotated[Path, typer.Argument(metavar="RECIPE", help="The recipe (wire JSON).")],
    job_id: Annotated[
        str | None,
        typer.Option("--job-id", metavar="ID", help="The job id (with --count, a prefix)."),
    ] = None,
    count: Annotated[int, typer.Option("--count", metavar="N", min=1, max=100_000)] = 1,
    work_master: Annotated[
        str | None, typer.Option("--work-master", metavar="ID", help="The work master id.")
    ] = None,
    priority: Annotated[int, typer.Option("--priority", metavar="N", min=0, max=1_000_000)] = 0,
    store_only: Annotated[
        bool,
        typer.Option("--store-only", help="Store (NotAllowedToStart), do not start."),
    ] = False,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """StoreAndStart (or Store, with --store-only) job orders of RECIPE; prints one job id a
    line. A recipe that does not build for the scope is refused with its build errors."""
    check_scope(scope)
    text = read(recipe, "recipe")
    ids = _submit_ids(job_id, count)
    check_jobs([i for i in ids if i is not None], "--job-id")
    store = open_store(redis, data_dir)
    results = []
    interrupted = False
    lost: str | None = None
    with server_errors():
        named = [i for i in ids if i is not None]
        held = facade.taken(store, scope, named) if len(named) > 1 else []
    if held:
        facade.close(store)
        _refuse_taken(held, named, scope, as_json)
    with server_errors():
        try:
            for one in ids:
                r = jobs.submit(
                    store,
                    scope,
                    text,
                    job_id=one,
                    start=not store_only,
                    work_master_id=work_master,
                    priority=priority,
                )
                results.append(r)
                if not r.ok:
                    break
        except KeyboardInterrupt:
            # Ctrl-C: the jobs stored so far are reported below, as ever (one submit is
            # one write: a job is stored whole or not at all)
            interrupted = True
        except Exception as e:
            if not server_gone(e) or not results:
                raise
            # the server went away part-way: say what was stored, then what went wrong
            # (a retry without --job-id would store the same orders again)
            interrupted, lost = True, str(e)
    facade.close(store)
    # every shape error, as validate lists them (the host's build stops at the first)
    refused = [_every_shape_error(text, r, scope) for r in results if not r.ok]
    if as_json:
        print_json(
            {
                "jobs": [r.job for r in results if r.ok],
                **({"interrupted": True} if interrupted else {}),
                **({"error": f"the server went away: {lost}"} if lost else {}),
                "refused": [
                    {
                        "job": r.job,
                        "status": int(r.status),
                        "message": r.message,
                        "errors": [
                            {"code": e.code, "path": json_path(e.path), "message": e.message}
                            for e in r.errors
                        ],
                    }
                    for r in refused
                ],
            }
        )
    else:
        for r in results:
            if r.ok:
                typer.echo(r.job)
        for r in refused:
            _refused(r, recipe, scope)
    stored_ids = [r.job for r in results if r.ok]
    if refused and stored_ids and not as_json:
        # taken meanwhile (the ids were free when checked): every id, stored or not
        left = [i for i in ids[len(stored_ids) :] if i is not None]
        typer.echo(
            f"sfc: stored {len(stored_ids)} of {count}: {_ids(stored_ids)}; not stored: "
            f"{_ids(left)}",
            err=True,
        )
    if interrupted:
        stored = sum(1 for r in results if r.ok)
        if lost is not None:
            typer.echo(
                f"sfc: the server went away ({lost}) after {stored} of {count} job(s) were "
                "stored, above; the one in flight may be stored too (see `sfc job list`)",
                err=True,
            )
            raise typer.Exit(2)
        typer.echo(f"sfc: interrupted: {stored} of {count} job(s) stored, above", err=True)
        raise typer.Exit(130)
    if refused:
        raise typer.Exit(1)


def _ids(ids: list[str], shown: int = 20) -> str:
    """Job ids in a line: the first `shown`, then how many more."""
    more = len(ids) - shown
    return ", ".join(ids[:shown]) + (f" and {more} more" if more > 0 else "") if ids else "none"


def _refuse_taken(held: list[str], named: list[str], scope: str, as_json: bool) -> NoReturn:
    """A submit of several ids, some of them taken: nothing is stored (all or none), and
    every id is said, taken or free; exit 1."""
    free = [i for i in named if i not in held]
    message = (
        f"nothing stored: {len(held)} of the {len(named)} job ids are taken in scope {scope}: "
        f"{_ids(held)}; free: {_ids(free)}. A submit of several ids stores all of them or "
        "none: choose another --job-id prefix, or remove the stored jobs first (`sfc job "
        "clear` once they ended, `sfc job cancel` if they have not started)"
    )
    if as_json:
        status = int(ReturnStatus.UNABLE_TO_ACCEPT)
        print_json(
            {
                "jobs": [],
                "refused": [
                    {"job": j, "status": status, "message": jobs.TAKEN, "errors": []} for j in held
                ],
                "error": message,
            }
        )
        raise typer.Exit(1)
    fail(message, 1)


def _submit_ids(job_id: str | None, count: int) -> list[str | None]:
    """The ids `submit` gives its orders: `job_id`, or with `--count N` the ids made from
    the prefix `job_id`, `job_id-1` to `job_id-N` (None: the host makes each). A prefix
    whose ids would be too long is refused, exit 2, in words of the prefix the user gave
    (the length of the longest id made from it, and the longest prefix that fits), not of
    an id the user never wrote."""
    if count == 1:
        return [job_id]
    if not job_id:
        return [None] * count
    longest = len(f"{job_id}-{count}")
    if longest > keys.JOB_LIMIT:
        fits = keys.JOB_LIMIT - (longest - len(job_id))
        fail(
            f"--job-id: with --count {count}, the ids made from the prefix (its {len(job_id)} "
            f"characters, then -1 to -{count}) would have up to {longest} characters; at most "
            f"{keys.JOB_LIMIT} are allowed: a prefix of at most {fits} characters fits",
            2,
        )
    return [f"{job_id}-{i}" for i in range(1, count + 1)]


def _every_shape_error(text: bytes, result: jobs.MethodResult, scope: str) -> jobs.MethodResult:
    """`result` with every shape error of the recipe `text` (SFC000), as `sfc validate`
    lists them: the host's build stops at the first. Its message then counts them as the
    host words a refused build (`jobs.not_built`: "(and N more)")."""
    errors = every_shape_error(text, result.errors)
    if errors is result.errors:
        return result
    return replace(result, errors=tuple(errors), message=jobs.not_built(scope, errors))


def _refused(result: jobs.MethodResult, recipe: Path, scope: str) -> None:
    """A refused submit on stderr. Build errors are worded as `sfc validate` words them, one
    `CODE path: message` line each, then the ReturnStatus, as `sfc dryrun` ends them."""
    if not result.errors:
        typer.echo(f"sfc: {_status_line(result)}", err=True)
        return
    for error in result.errors:
        typer.echo(format_error(error), err=True)
    said = joborder.status_words(int(result.status))
    typer.echo(f"sfc: {result.job}: {said}: {recipe} does not build for scope {scope}", err=True)


def _method(
    name: str, call: Callable[..., jobs.MethodResult], doc: str, settings: bool = True
) -> None:
    """Register `sfc job NAME`; with `settings`, the method commits with the process's
    `SFC_*` (read once: a bad one exits 2). One that evaluates nothing reads none, so that
    an unrelated bad variable does not stop it."""

    def command(
        job_ids: JobsArgument,
        scope: ScopeOption = "default",
        redis: RedisOption = None,
        data_dir: DataDirOption = None,
        as_json: JsonOption = False,
    ) -> None:
        s = process_settings() if settings else None  # SFC_*: it commits as a worker would
        _apply_each(
            job_ids, scope, redis, data_dir, as_json, lambda st, j: call(st, scope, j, settings=s)
        )

    def commented(
        job_ids: JobsArgument,
        comment: CommentOption = None,
        scope: ScopeOption = "default",
        redis: RedisOption = None,
        data_dir: DataDirOption = None,
        as_json: JsonOption = False,
    ) -> None:
        s = process_settings()
        _apply_each(
            job_ids,
            scope,
            redis,
            data_dir,
            as_json,
            lambda st, j: call(st, scope, j, comment, settings=s),
        )

    takes_comment = name in ("pause", "resume", "stop", "abort")
    fn = commented if takes_comment else command
    fn.__doc__ = doc
    job_app.command(name)(fn)


def _report_part(results: list[jobs.MethodResult], as_json: bool) -> None:
    """The results of the jobs done before the server went away."""
    if as_json:
        print_json(
            {
                "results": [
                    {"job": r.job, "status": int(r.status), "message": r.message} for r in results
                ],
                "interrupted": True,
            }
        )
    else:
        for r in results:
            typer.echo(_status_line(r))


def _located(store: Connection, scope: str, result: jobs.MethodResult) -> jobs.MethodResult:
    """`result`, and for a job not stored in `scope`, the message that says where it is
    (`not_found`): the id in another registered scope, or a scope that is not registered."""
    if result.status != ReturnStatus.UNKNOWN_JOB_ORDER_ID:
        return result
    return replace(result, message=not_found(store, scope, result.job))


def _apply_each(
    job_ids: list[str],
    scope: str,
    redis: str | None,
    data_dir: Path | None,
    as_json: bool,
    one: Callable[[Connection, str], jobs.MethodResult],
) -> None:
    check_scope(scope)
    check_jobs(job_ids)
    results: list[jobs.MethodResult] = []
    with connected(redis, data_dir) as store:
        try:
            for j in job_ids:
                results.append(_located(store, scope, one(store, j)))
        except Exception as e:
            if not server_gone(e) or not results:
                raise
            # part-way: what was done, then what was not (each method is one commit)
            _report_part(results, as_json)
            left = job_ids[len(results) :]
            fail(
                f"the server went away ({e}) after {len(results)} of {len(job_ids)} job(s), "
                f"above; not done, or not known to be: {', '.join(left[:10])}"
                + (f" and {len(left) - 10} more" if len(left) > 10 else ""),
                2,
            )
    _report(results, as_json)


_method(
    "start",
    jobs.start,
    "Start: NotAllowedToStart -> AllowedToStart, and the recipe starts.",
)
_method(
    "revoke",
    jobs.revoke_start,
    "RevokeStart: AllowedToStart -> NotAllowedToStart; a queued start does nothing.",
)
_method(
    "pause",
    jobs.pause,
    "Pause: Running -> Interrupted/Suspended; the recipe is held in the same commit, and "
    "equipment with hold logic gets its hold command.",
)
_method(
    "resume",
    jobs.resume,
    "Resume: Interrupted -> Running; the recipe is released (held work is restarted).",
)
_method(
    "stop",
    jobs.stop,
    "Stop: Running or Interrupted -> Ended/Closed; open work is withdrawn (reason stopped).",
)
_method(
    "abort",
    jobs.abort,
    "Abort: -> Aborted; open work is withdrawn (reason aborted).",
)
_method(
    "cancel",
    lambda store, scope, job, settings: jobs.cancel(store, scope, job),
    "Cancel: remove an order that has not started.",
    settings=False,  # it evaluates nothing
)


@job_app.command("clear")
def clear(
    job_ids: JobsArgument,
    unreadable: Annotated[
        bool,
        typer.Option(
            "--unreadable",
            help="Also remove a job whose stored order or state cannot be read (written by "
            "another program, or by hand), whatever its state: no worker can evaluate it.",
        ),
    ] = False,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Clear: remove an Ended or Aborted order with its state and history (its command
    sequence is retired, so the id may be used again without reusing a command id)."""
    _apply_each(
        job_ids,
        scope,
        redis,
        data_dir,
        as_json,
        lambda st, j: jobs.clear(st, scope, j, unreadable=unreadable),
    )


@job_app.command()
def update(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    recipe: Annotated[Path | None, typer.Option("--recipe", metavar="RECIPE")] = None,
    priority: Annotated[int | None, typer.Option("--priority", metavar="N")] = None,
    description: Annotated[str | None, typer.Option("--description", metavar="TEXT")] = None,
    work_master: Annotated[str | None, typer.Option("--work-master", metavar="ID")] = None,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Update: replace the order of a job that has not started."""
    check_scope(scope)
    check_jobs([job_id])
    if (recipe, priority, description, work_master) == (None, None, None, None):
        # an Update that changes nothing was applied, and counted, as one that did
        fail("nothing to update: give --recipe, --priority, --description or --work-master", 2)
    text = None if recipe is None else read(recipe, "recipe")
    settings = process_settings()
    store = open_store(redis, data_dir)
    with server_errors():
        result = jobs.update(
            store,
            scope,
            job_id,
            recipe=text,
            priority=priority,
            description=description,
            work_master_id=work_master,
            settings=settings,
        )
        result = _located(store, scope, result)
    facade.close(store)
    if text is not None:
        result = _every_shape_error(text, result, scope)
    if not as_json and result.errors:
        # the recipe does not build: its errors, as `sfc validate` and submit say them, once
        # (the result's message repeats the first in another format)
        for error in result.errors:
            typer.echo(format_error(error), err=True)
        result = replace(result, message=f"{recipe} does not build for scope {scope}")
    _report([result], as_json)


@job_app.command()
def redispatch(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    action: Annotated[str | None, typer.Argument(metavar="[ACTION]")] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also send again a push command on its last attempt, which then times out "
            "at once and faults the job.",
        ),
    ] = False,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send open work again (the core's resume): ACTION's work, or every open action's work
    that the equipment may have lost. A push command sent again uses up an attempt; one on
    its last attempt is refused without --force."""
    check_scope(scope)
    check_jobs([job_id])
    settings = process_settings()  # SFC_MAX_ATTEMPTS: what a push sent again costs
    store = open_store(redis, data_dir)
    with server_errors():
        result = jobs.redispatch(store, scope, job_id, action, force=force, settings=settings)
        result = _located(store, scope, result)
    facade.close(store)
    _report([result], as_json)


@job_app.command()
def response(
    job_ids: JobsArgument,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """RequestJobResponseByJobOrderID: the job responses (JSON)."""
    check_scope(scope)
    check_jobs(job_ids)
    store = open_store(redis, data_dir)
    out: list[Any] = []
    failed = False
    with server_errors():
        for j in job_ids:
            result, resp = jobs.job_response(store, scope, j)
            if resp is None:
                result = _located(store, scope, result)
                failed = True
                typer.echo(f"sfc: {_status_line(result)}", err=True)
            else:
                out.append(resp)
    facade.close(store)
    print_json({"responses": out})
    if failed:
        raise typer.Exit(1)


@job_app.command("list")
def list_(
    state: Annotated[
        list[str] | None,
        typer.Option("--state", metavar="STATE", help="Only orders in this state (repeat it)."),
    ] = None,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every job order of the scope, oldest first: id, state, times. A job whose stored order or state cannot be read is listed as unreadable, with why on stderr."""
    check_scope(scope)
    store = open_store(redis, data_dir)
    with server_errors():
        if state:
            result, responses = jobs.job_responses(store, scope, state)
            if not result.ok:
                fail(result.message, 2)
            wanted = {r.job_order_id for r in responses}
        every = jobview.listing(store, scope)
        warning = warn_unregistered(store, scope) if not every else None
    facade.close(store)
    listed = [j for j in every if not state or j.job in wanted]
    if as_json:
        print_json(
            {"jobs": [readmodel.job_row(j) for j in listed]}
            | ({"warning": warning} if warning else {})
        )
    elif not listed:
        typer.echo(f"no job orders in scope {scope}" + (f" in {', '.join(state)}" if state else ""))
    elif terminal():
        _list_table(listed)
    else:
        _list_lines(listed)
    _say_unreadable(
        [] if as_json else listed, sum(1 for j in every if j.order is None) if state else 0
    )


ID_WIDTH = 40
"""The widest job id column of `sfc job list` (a default id has 24 characters, an id may
have 128): one long id does not widen every row."""


def _list_table(listed: list[jobview.Listed]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None)
    for name in ("job", "state", "stored", "started", "ended"):
        # a narrow terminal wraps, cuts nothing; a long id folds within ID_WIDTH
        table.add_column(name, overflow="fold", max_width=ID_WIDTH if name == "job" else None)
    for j in listed:
        o = j.order
        table.add_row(
            Text(j.job),  # not markup: an id may hold [ and ]
            _listed_state(j),
            "" if o is None else when(o.stored_at),
            "" if o is None or o.started_at is None else when(o.started_at),
            "" if o is None or o.ended_at is None else when(o.ended_at),
        )
    console().print(table)


def _list_lines(listed: list[jobview.Listed]) -> None:
    """One line a job. The ids are padded to the longest of at most ID_WIDTH characters: a
    longer one is written whole (it stays one word to grep or copy) and shifts the rest of
    its own line only. The states are padded to the longest shown ("Aborted (faulted
    timeout)" has 25 characters), so that the times line up."""
    width = max((len(j.job) for j in listed if len(j.job) <= ID_WIDTH), default=0)
    states = [_listed_state(j) for j in listed]
    state_width = max((len(s) for s in states), default=0)
    for j, state in zip(listed, states, strict=True):
        o = j.order
        stored = "" if o is None else f" stored {when(o.stored_at)}"
        ended = "" if o is None or o.ended_at is None else f"  ended {when(o.ended_at)}"
        typer.echo(f"{j.job:<{width}}  {state:<{state_width}} {stored}{ended}".rstrip())


def _listed_state(j: jobview.Listed) -> str:
    if j.unreadable is not None or j.order is None:
        return "unreadable"
    return readmodel.ended_state(j.order)


def _say_unreadable(listed: list[jobview.Listed], hidden: int) -> None:
    """On stderr, why each listed job cannot be read (--json has it in the rows), and the
    way out; and how many such jobs a --state filter left out (their order cannot be read,
    so no state matches)."""
    for j in listed:
        if j.unreadable is not None:
            typer.echo(f"sfc: {unreadable_job(j.job, visible(j.unreadable))}", err=True)
    if hidden:
        typer.echo(
            f"sfc: {hidden} job(s) whose stored order cannot be read are not shown: "
            "`sfc job list` without --state shows them",
            err=True,
        )


@job_app.command()
def show(
    job_id: Annotated[str, typer.Argument(metavar="JOB")],
    history: Annotated[int, typer.Option("--history", metavar="N", min=0, max=1000)] = 10,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """The plant engineer's view of a job: the order, where the recipe is, what it waits for
    and since when, whether the scope's equipment adapters read its open commands, the next
    deadline, the job's dead entries, the last history entries, and the job response. A job
    whose stored order or state cannot be read is shown as far as it can be, and exits 2."""
    check_scope(scope)
    check_jobs([job_id])
    store = open_store(redis, data_dir)
    with server_errors():
        d = readmodel.job_detail(store, scope, job_id, history)
        missing = not_found(store, scope, job_id) if d is None else ""
    facade.close(store)
    if d is None:
        words = joborder.status_words(int(ReturnStatus.UNKNOWN_JOB_ORDER_ID))
        fail(f"{job_id}: {words}: {missing}", 1)
    if as_json:
        print_json(d)
    else:
        _print_styled(show_text(d))
    if d.unreadable is not None:
        # as every command says of such a job (docs/host.md): what it is, the way out
        said = unreadable_job(job_id, visible(d.unreadable), readmodel.unreadable_part(d))
        typer.echo(f"sfc: {said}", err=True)
        raise typer.Exit(2)


def _print_styled(text: str) -> None:
    """Plain text when piped; on a terminal, headings bold and alerts in colour."""
    if not terminal():
        typer.echo(text)
        return
    from rich.text import Text

    out = console()
    for line in text.splitlines():
        style = ""
        if line.lstrip().startswith(("The job FAULTED", "WARNING")) or "Aborted" in line[:60]:
            style = "bold red"
        elif line.startswith("The job is HELD") or "Interrupted" in line[:60]:
            style = "bold yellow"
        elif line and not line.startswith(" "):
            style = "bold"
        out.print(Text(line, style=style))


def show_text(d: readmodel.JobDetail) -> str:
    """`sfc job show` in words (and `sfc_job`'s text): made of the detail's facts."""
    now = d.now
    warned = {w.kind: w.text for w in d.warnings}
    o = d.order
    if o is None:
        lines = [f"Job order {d.job} (scope {d.scope}): its order cannot be read"]
    else:
        lines = [f"Job order {o.job_order_id} (scope {o.scope}): {joborder.path_text(o)}"]
        lines += _order_lines(o, now)
    lines += [f"  {w.text}" for w in d.waiting_for if isinstance(w, readmodel.OrderWait)]
    if "notStarted" in warned:
        lines.append(f"  WARNING: {warned['notStarted']}")
    lines.append("")
    if d.unreadable is not None:
        lines.append(f"The recipe: WARNING: {warned['unreadable']}")
    elif d.recipe_problem is not None:
        lines.append(f"The recipe: {d.recipe_problem}")
    else:
        lines += _without_sections(d.explain, _SHOWN_BELOW)
    lines += _qualified_lines(d)
    if d.out_since:
        lines += ["", "Out since"]
        for c in d.out_since:
            lines.append(f"  {c.command_id}: sent {when(c.since)} ({elapsed(now - c.since)} ago)")
            lines += [f"    {r.text}" for r in c.reads]
        if "noAdapter" in warned:
            lines.append(f"  WARNING: {warned['noAdapter']}")
    lines.append("")
    index = "on the due index at " + when(d.due) if d.due is not None else "not on the due index"
    lines.append(f"Indexes: {'active' if d.active else 'not active'}, {index}")
    if "deadlinePassed" in warned:
        lines.append(f"  WARNING: {warned['deadlinePassed']}")
    if d.unread:
        lines.append(
            f"Work stream: {d.unread} {'entry' if d.unread == 1 else 'entries'} of scope "
            f"{d.scope} not read by any worker yet (an answer for this job may be waiting "
            "there: is `sfc serve` serving the scope, and keeping up?)"
        )
    if d.pending:
        lines.append("Entries read but not yet committed:")
        for p in d.pending:
            lines.append(
                f"  {p.id} by {p.consumer}, idle {elapsed(p.idle_ms)}, "
                f"delivered {p.deliveries} time(s)"
            )
    dead = d.dead
    if dead.count and dead.latest is not None:
        x = dead.latest
        lines.append(
            f"Dead entries naming this job: {dead.count} (of the last {dead.scanned} of "
            f"the scope); the latest {x.id} ({x.kind or 'no kind'}, was {x.entry}): "
            f"{x.reason} (`sfc work dead` lists them, `sfc work requeue ID` sends one again)"
        )
    if d.history:
        lines += ["", f"Last {len(d.history)} history entries (oldest first)"]
        for h in d.history:
            detail = "" if h.detail is None else f" {h.detail}"
            lines.append(f"  {when(h.at)}  {h.event}{detail} -> {h.disposition}: {h.reason}")
            for s in h.sent:
                lines.append(f"      sent {s}")
    resp = d.response
    if resp is not None:
        lines += ["", "Job response"]
        lines.append(
            f"  {resp.job_response_id}: {'/'.join(e.state_text for e in resp.job_state)}"
            + "".join(
                f"; {p.id} {', '.join(p.value) if isinstance(p.value, list) else p.value}"
                for p in resp.job_response_data
            )
        )
    return visible("\n".join(lines))  # equipment's errors and operators' comments among them


_SHOWN_BELOW = ("Running, not waited for", "Timers that have not fired")
"""Sections of the explainer's text that `_qualified_lines` says again, on the wall clock."""


def _without_sections(lines: list[str], titles: tuple[str, ...]) -> list[str]:
    """`lines` without the sections (a title line, up to the next blank) whose title starts
    with one of `titles`, and without the blank line before each."""
    out: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith(titles):
            skipping = True
            if out and out[-1] == "":
                out.pop()
            continue
        if skipping and line == "":
            skipping = False
        if not skipping:
            out.append(line)
    return out


def _qualified_lines(d: readmodel.JobDetail) -> list[str]:
    """Pending process timers and dwells, stored work still running, and the recorded
    outcomes of non-gating actions (recipe v1.2.0): what `sfc job show` adds for them."""
    timers: list[str] = [
        f"  step {step} dwells until {when(at)} (MinSeconds)" for step, at in d.dwells.items()
    ]
    running: list[str] = []
    outcomes: list[str] = []
    for a in d.actions:
        if a.qualifier in (None, "N"):
            continue
        t = "" if a.qualifier_ms is None else f" {duration(a.qualifier_ms)}"
        label = f"{a.name} ({a.qualifier}{t})"
        if a.status == "pending" and a.timer is not None:
            timers.append(f"  {label} starts at {when(a.timer)}")
        elif a.status == "open":
            stop = "" if a.timer is None else f"; withdrawn at its limit at {when(a.timer)}"
            where = f"step {a.step}" if a.step not in d.active_steps else "its step is active"
            running.append(f"  {label}: {a.command_id} runs ({where}){stop}")
        elif a.status == "done":
            said = a.outcome if a.error is None else f"error: {a.error}"
            outcomes.append(f"  {label}: {said} (recorded; not waited for)")
    lines: list[str] = []
    for title, part in (
        ("Process timers", timers),
        ("Work of non-gating actions still running", running),
        ("Outcomes of non-gating actions", outcomes),
    ):
        if part:
            lines += ["", title, *part]
    return lines


def _order_lines(o: Any, now: int) -> list[str]:
    """The order's times, work master, result and comments."""
    times = [f"stored {when(o.stored_at)}"]
    if o.started_at is not None:
        times.append(f"started {when(o.started_at)}")
    if o.ended_at is not None:
        times.append(f"ended {when(o.ended_at)}")
    lines = ["  " + ", ".join(times) + f"; now {when(now)}"]
    if o.work_master_id is not msgspec.UNSET:
        lines.append(f"  work master {o.work_master_id}, priority {o.priority}")
    if o.result is not msgspec.UNSET:
        r = o.result
        said = f"  ended by {r.ended_by}"
        if r.outcomes:
            said += f" with outcomes {', '.join(r.outcomes)}"
        if r.fault_code:
            said += f"; fault {r.fault_code}: {r.fault_message}"
        elif r.fault_message:
            said += f" ({r.fault_message})"
        lines.append(said)
    for c in [] if o.comments is msgspec.UNSET else o.comments:
        lines.append(f"  comment at {when(c.at)}: {c.text}")
    return lines


@job_app.command()
def wait(
    job_ids: JobsArgument,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="S", help="Give up after S seconds.")
    ] = 600.0,
    scope: ScopeOption = "default",
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Wait until every job has ended; exit 0 when every one ended Completed, 1 otherwise or
    on the timeout. A server that cannot be reached for a while (a restart) is waited out,
    within the timeout."""
    check_scope(scope)
    check_jobs(job_ids)
    store = open_store(redis, data_dir)
    deadline = time.monotonic() + timeout
    with server_errors():
        ends, paused = _wait(store, scope, job_ids, deadline)
        left = [j for j in job_ids if j not in ends]
        why = jobs.unreadable_jobs(store, scope, left) if left else {}
        unknown = [j for j in job_ids if ends.get(j) == facade.UNKNOWN]
        missing = not_found_many(store, scope, unknown) if unknown else {}
    facade.close(store)
    bad = False
    for j in job_ids:
        path = ends.get(j)
        if j in missing:
            path = f"unknown job order ({missing[j]})"
        if path is None and j in why:  # no worker can evaluate it: it will never end
            path = f"not ended: its stored order or state cannot be read ({why[j]})"
        if path is None and j in paused:  # it ends only after a person's resume
            path = f"not ended: paused ({paused[j]}), it waits for `sfc job resume` (timeout)"
        typer.echo(visible(f"{j}: {path or 'not ended (timeout)'}"))
        bad = bad or path != "Ended/Completed"
    if bad:
        raise typer.Exit(1)


WAIT_BACKOFF_MAX_S = 0.5
"""`sfc job wait` tries a server it cannot reach at least this often: a person waits on it."""


def _wait(
    store: Connection, scope: str, job_ids: list[str], deadline: float
) -> tuple[dict[str, str], dict[str, str]]:
    """The jobs that ended (their state path) or are not stored, by the deadline; and of
    the others, those paused at the last look. A job seen paused is said on stderr at once:
    it ends only after a person resumes it."""
    ends: dict[str, str] = {}
    paused: dict[str, str] = {}
    progress = None
    if terminal():
        from rich.progress import Progress

        progress = Progress(transient=True)
        task = progress.add_task("waiting", total=len(job_ids))
        progress.start()
    say = partial(typer.echo, err=True)
    reconnect = Reconnect("sfc job wait", None, echo=say, most=WAIT_BACKOFF_MAX_S)
    try:
        while True:
            left = [j for j in job_ids if j not in ends]
            try:
                orders = facade.orders(store, scope, left)
            except Exception as e:
                if not server_gone(e) or time.monotonic() > deadline:
                    raise
                # a restart of the server (of `sfc serve`): waited out, as the workers do
                reconnect.unreachable(e)
                facade.reach_again(store)
                time.sleep(reconnect.wait())
                continue
            reconnect.went_through()
            for j, o in orders.items():
                if o is None:
                    ends[j] = facade.UNKNOWN
                elif joborder.ended(o):
                    ends[j] = readmodel.ended_state(o)
                    paused.pop(j, None)
                elif joborder.state_of(o) == "Interrupted":
                    if j not in paused:
                        typer.echo(
                            visible(
                                f"sfc: {j} is paused ({joborder.path_text(o)}): it ends only "
                                "after `sfc job resume` (or stop, or abort); waiting"
                            ),
                            err=True,
                        )
                    paused[j] = joborder.path_text(o)
                else:
                    paused.pop(j, None)
            if progress is not None:
                progress.update(task, completed=len(ends))
            if len(ends) == len(job_ids) or time.monotonic() > deadline:
                return ends, paused
            time.sleep(0.1)
    finally:
        if progress is not None:
            progress.stop()

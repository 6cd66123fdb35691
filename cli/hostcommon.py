"""What every host command shares: connecting, the scope option, errors and output
(docs/host.md, "The command line").

Every host command connects by `--redis URL`, then `SFC_REDIS_URL`, then the `server.json` of
the data directory (`--data-dir`, `SFC_DATA_DIR`, default `.sfc`) that a running `sfc serve`
wrote. With none of them it says so and how to start a server, and exits 2. Exit codes: 0
ok; 1 the request was refused or the run failed; 2 usage, or no server.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import msgspec
import typer

from host import facade, jobs, keys, logs
from host.facade import Connection, StoreError, unreachable
from host.serve import NoServer, connect, data_dir_of, resolve_url, watch_server
from host.settings import Settings, SettingsError, from_environment

RedisOption = Annotated[
    str | None,
    typer.Option(
        "--redis",
        metavar="URL",
        help="The server: redis://, rediss:// (TLS) or unix://, with user and password. "
        "Default: SFC_REDIS_URL, then the server.json of --data-dir.",
        show_default=False,
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        metavar="DIR",
        help="Where `sfc serve` keeps the embedded server (default: SFC_DATA_DIR, then .sfc).",
        show_default=False,
    ),
]
ScopeOption = Annotated[
    str,
    typer.Option("--scope", metavar="SCOPE", help="The scope (plant area) of the jobs."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


_error_log: logging.Logger | None = None
"""Where `fail` says its message instead of a plain line (`sfc serve --log-format json`:
every line of its stderr is a JSON object, its refusals too)."""


@contextmanager
def failures_logged(logger: logging.Logger | None) -> Iterator[None]:
    """Within the block, `fail` logs its message at error level to `logger` (None: as a
    plain line, as ever)."""
    global _error_log
    before, _error_log = _error_log, logger
    try:
        yield
    finally:
        _error_log = before


def server_gone(error: BaseException) -> bool:
    """Whether `error` says the server went away or cannot be reached (the messages of
    `server_errors`)."""
    return unreachable(error) or isinstance(error, StoreError)


def adapter_logs() -> None:
    """The logs of a long-running adapter (`sfc equipment`, `sfc bridge mqtt`, `sfc device
    mqtt`): info and above on stderr, with time, level and logger, as `sfc serve`'s text
    format (a warning was a bare line)."""
    logs.configure(logging.INFO, "text")


def fail(message: str, code: int) -> NoReturn:
    if _error_log is not None:
        _error_log.error(f"sfc: {message}")
    else:
        typer.echo(f"sfc: {message}", err=True)
    raise typer.Exit(code)


def process_settings() -> Settings:
    """The settings of this process: the `SFC_*` variables, as `sfc serve` and `sfc run`
    read them. A method a command applies itself (`sfc job pause`, an MCP tool) commits
    with them, as a worker would: the expiry grace and attempts of the commands it sends
    where the scope stores none (docs/host.md, Settings). A bad value exits 2 with its name,
    before anything is written."""
    try:
        return from_environment()
    except SettingsError as e:
        fail(str(e), 2)


def check_scope(scope: str) -> str:
    try:
        return keys.check_scope(scope)
    except keys.KeyError_ as e:
        fail(f"--scope: {e}", 2)


def check_jobs(job_ids: Sequence[str], what: str = "JOB") -> None:
    """Every job id, as the CLI parses its arguments, before it connects: a malformed one
    (`host.keys.check_job`: empty, too long, braces, spaces, control characters) is a usage
    error, exit 2, in the same words in every command, and none is touched. A well-formed
    id that is not stored is the server's answer: not found, exit 1."""
    for job in job_ids:
        try:
            keys.check_job(job)
        except keys.KeyError_ as e:
            fail(f"{what}: {e}", 2)


SHOWN_SCOPES = 10
"""The most registered scopes a warning names (then how many more)."""


def _named(scopes: list[str]) -> str:
    shown = ", ".join(scopes[:SHOWN_SCOPES])
    more = len(scopes) - SHOWN_SCOPES
    return shown + (f" and {more} more" if more > 0 else "")


def unregistered(store: Connection, scope: str, registered: list[str] | None = None) -> str | None:
    """Why an empty answer for `scope` may not be "all clear": the scope is not registered
    (`sfc:scopes`: nothing was submitted to it, nor set up), with the registered scopes
    (read when not given); None when it is. A mistyped `--scope` otherwise looks like a
    quiet plant area."""
    if registered is None:
        registered = facade.scopes(store)
    if scope in registered:
        return None
    return f"scope {scope} is not registered (a typo?); " + (
        f"the registered scopes: {_named(registered)}"
        if registered
        else "no scope is registered yet (`sfc setup`, `sfc serve` or a submit registers one)"
    )


def warn_unregistered(store: Connection, scope: str) -> str | None:
    """`unregistered`, said on stderr; returns it (for a JSON document's `warning`)."""
    warning = unregistered(store, scope)
    if warning is not None:
        typer.echo(f"sfc: warning: {warning}", err=True)
    return warning


def not_found(store: Connection, scope: str, job: str, fix: str = "add --scope {scope}") -> str:
    """The message of a job that is not stored in `scope`, shared by every command."""
    return f"no such job order in scope {scope}{where_else(store, scope, job, fix)}"


def not_found_many(
    store: Connection, scope: str, job_ids: list[str], fix: str = "add --scope {scope}"
) -> dict[str, str]:
    """`not_found` of each job, in one pass (`sfc job wait` of several)."""
    return {
        j: f"no such job order in scope {scope}{said}"
        for j, said in where_else_many(store, scope, job_ids, fix).items()
    }


def where_else(store: Connection, scope: str, job: str, fix: str = "add --scope {scope}") -> str:
    """What follows "no such job order in scope S": the other registered scopes that hold
    the id (`fix` says how to ask there), or that `scope` is not registered; "" when
    neither. Asked only on that path (one EXISTS per registered scope, pipelined)."""
    return where_else_many(store, scope, [job], fix)[job]


def where_else_many(
    store: Connection, scope: str, job_ids: list[str], fix: str = "add --scope {scope}"
) -> dict[str, str]:
    """`where_else` of each job: the registry read once, and every EXISTS in one pipeline
    per node (`host.jobs.elsewhere_many`)."""
    registered = facade.scopes(store)
    found = jobs.elsewhere_many(store, scope, job_ids, registered)
    warning = unregistered(store, scope, registered)
    out: dict[str, str] = {}
    for job, others in found.items():
        if others:
            where = "scope " + others[0] if len(others) == 1 else "scopes " + _named(others)
            out[job] = f"; job {job} is in {where}: {fix.format(scope=others[0])}"
        else:
            out[job] = "" if warning is None else f"; {warning}"
    return out


def unreadable_job(job: str | None, why: object, part: str = "order or state") -> str:
    """What every command (and `sfc mcp` tool) says of a job whose stored order or state
    cannot be read: what it is, why, and the way out, naming the job; where the error does
    not say which job (a decode failed on the way), how to find it."""
    said = f"cannot be read (was it written by another program, or by hand?): {why}"
    if job is None:
        return (
            f"a job's stored {part} {said}; unless a newer sfc wrote it, `sfc job list` "
            "marks such a job, and `sfc job clear` with its id and --unreadable removes it"
        )
    return (
        f"{job}: its stored {part} {said}; unless a newer sfc wrote it, "
        f"`sfc job clear {job} --unreadable` removes it"
    )


@contextmanager
def server_errors() -> Iterator[None]:
    """Turn an unreachable server into a message and exit 2."""
    try:
        yield
    except NoServer as e:
        fail(str(e), 2)
    except StoreError as e:
        fail(str(e), 2)
    except SettingsError as e:
        fail(str(e), 2)
    except OSError as e:  # the connection dropped mid-command
        fail(f"the server went away: {e}", 2)
    except msgspec.DecodeError as e:  # ValidationError too: what this host wrote reads back
        fail(unreadable_job(None, e), 2)
    except Exception as e:
        import redis

        if isinstance(e, redis.ConnectionError | redis.TimeoutError):
            fail(f"the server went away: {e}", 2)
        if isinstance(e, redis.ResponseError):
            fail(f"the server refused a command: {e}", 2)
        raise


def open_store(redis_url: str | None, data_dir: Path | None) -> Connection:
    """A checked connection; exits 2 with the reason when there is none."""
    with server_errors():
        return connect(resolve_url(redis_url, data_dir))


@contextmanager
def connected(redis_url: str | None, data_dir: Path | None) -> Iterator[Connection]:
    """A checked connection for the block, with the server's errors turned into messages,
    closed afterwards."""
    store = open_store(redis_url, data_dir)
    try:
        with server_errors():
            yield store
    finally:
        facade.close(store)


def watch_found_server(
    redis_url: str | None, data_dir: Path | None, stop: threading.Event, name: str
) -> None:
    """When the server was found through the server.json of the data directory (no --redis,
    no SFC_REDIS_URL), say in the log of `name` when the serve that runs it stops and when
    a server is back (host.serve.watch_server), until `stop`."""
    if not redis_url and not os.environ.get("SFC_REDIS_URL"):
        watch_server(data_dir_of(data_dir), stop, name)


def print_json(doc: Any) -> None:
    """One JSON document on stdout (msgspec structs as their wire form)."""
    sys.stdout.write(json.dumps(json.loads(msgspec.json.encode(doc)), indent=2) + "\n")

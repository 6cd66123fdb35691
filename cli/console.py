"""`sfc console`, and the console that `sfc serve` starts (docs/console.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cli.hostcommon import DataDirOption, RedisOption, fail, server_errors
from cli.main import app
from host.console.auth import TOKEN_FILE, Guard, token_file
from host.console.serving import (
    DEFAULT_ADDR,
    AddressError,
    ConsoleServer,
    parse_addr,
    start_console,
)
from host.serve import connect, data_dir_of, resolve_url, stop_on_signals
from host.settings import Settings

HttpOption = Annotated[
    str,
    typer.Option(
        "--http",
        metavar="ADDR:PORT",
        help="Where the console and the HTTP API listen; beyond loopback every request "
        "needs the token.",
    ),
]
AllowControlOption = Annotated[
    bool,
    typer.Option(
        "--allow-control",
        help="Let the console and the API drive jobs (with the token); read-only without it.",
    ),
]
PrivateOption = Annotated[
    bool,
    typer.Option(
        "--http-private",
        help="Every request needs the token, on loopback too: for a machine other users share.",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--http-token-file",
        metavar="FILE",
        help="The token's file (written, mode 0600, when missing); default <data-dir>/http-token.",
        show_default=False,
    ),
]


def checked_addr(addr: str) -> None:
    """Exit 2 for an --http that is not ADDR:PORT, before anything starts."""
    try:
        parse_addr(addr)
    except AddressError as e:
        fail(str(e), 2)


def launch(
    addr: str,
    url: str,
    data_dir: Path | None,
    allow_control: bool,
    token_path: Path | None,
    settings: Settings | None,
    say: Callable[[str], None],
    private: bool = False,
) -> ConsoleServer | None:
    """Serve the console on `addr` against the server at `url`; None, said, when the
    address cannot be bound (another `sfc serve` has it): the caller goes on without."""
    path = token_path or data_dir_of(data_dir) / TOKEN_FILE
    try:
        token = token_file(path)
    except OSError as e:
        say(f"the console's token file {path} cannot be written ({e}); no console")
        return None
    guard = Guard(token, allow_control=allow_control, public=private)
    try:
        server = start_console(addr, lambda: connect(url), guard, settings)
    except AddressError as e:
        fail(str(e), 2)
    except OSError as e:
        say(f"the console cannot listen on {addr} ({e.strerror or e}); going on without it")
        return None
    mode = (
        f"control allowed with the token in {path}"
        if allow_control
        else f"read-only (--allow-control lets it drive jobs; the token is in {path})"
    )
    say(f"console at {server.url}; {mode}")
    if guard.public:
        why = "it was asked to" if private else f"the console listens beyond loopback ({addr})"
        say(f"{why}: every request needs the token in {path}")
    return server


@app.command()
def console(
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    http: HttpOption = DEFAULT_ADDR,
    allow_control: AllowControlOption = False,
    http_token_file: TokenFileOption = None,
    http_private: PrivateOption = False,
) -> None:
    """Serve the console and the HTTP API alone, against any server or cluster, until
    Ctrl-C or SIGTERM (`sfc serve` serves them too)."""
    checked_addr(http)
    with server_errors():
        url = resolve_url(redis, data_dir)
        connect(url).close()  # a server that cannot be reached is said now, exit 2
    stop = threading.Event()
    stop_on_signals(stop)

    def say(text: str) -> None:
        typer.echo(f"sfc console: {text}", err=True)

    server = launch(http, url, data_dir, allow_control, http_token_file, None, say, http_private)
    if server is None:
        raise typer.Exit(2)
    try:
        while not stop.wait(0.5):
            if not server.thread.is_alive():
                fail("the console stopped", 1)
    finally:
        server.stop()

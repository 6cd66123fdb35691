"""`sfc mcp`: a stdio MCP server for the core and the host (docs/metrics.md, "The MCP
server").

The tools are in cli/mcptools.py, imported when the command runs, so that no other command
pays for the SDK, and every other command works without it: the MCP SDK is the `mcp` extra.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Annotated

import typer

from cli.hostcommon import DataDirOption, RedisOption, fail, process_settings
from cli.main import app
from host.facade import redacted
from host.serve import NoServer, resolve_url

NO_MCP = (
    "sfc mcp needs the MCP SDK (the mcp package), the `mcp` extra: "
    "pip install 'microdcs-sfc[mcp]' (in a clone of the repository: uv sync --extra mcp)"
)


@app.command()
def mcp(
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    allow_control: Annotated[
        bool,
        typer.Option(
            "--allow-control",
            help="Also offer the tools that write: sfc_pause, sfc_resume, sfc_abort, sfc_tick "
            "and sfc_redispatch. Without it nothing is written.",
        ),
    ] = False,
    offline: Annotated[
        bool,
        typer.Option("--offline", help="Offer only the tools that need no server."),
    ] = False,
) -> None:
    """Serve MCP tools over stdio: sfc_validate, sfc_explain and sfc_dryrun; with a server
    (--redis, SFC_REDIS_URL or the server.json of --data-dir) also sfc_job, sfc_jobs and
    sfc_work_pending; with --allow-control the job-control tools too. Logs go to stderr.
    Needs the `mcp` extra."""
    if importlib.util.find_spec("mcp") is None:
        fail(NO_MCP, 1)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    url: str | None = None
    if not offline:
        try:
            url = resolve_url(redis, data_dir)
        except NoServer as e:
            if allow_control:
                fail(f"--allow-control needs a server: {e}", 2)
            typer.echo(
                "sfc mcp: no server found (no --redis, SFC_REDIS_URL or server.json): only "
                "sfc_validate, sfc_explain and sfc_dryrun are offered",
                err=True,
            )
    if allow_control and url is None:
        fail("--allow-control needs a server: drop --offline", 2)
    # the control tools commit with the SFC_* settings, as a worker would
    settings = process_settings() if allow_control else None
    from cli.mcptools import build_server

    server, conn = build_server(url, allow_control, settings)
    if url is not None:
        typer.echo(
            f"sfc mcp: server {redacted(url)}"
            + ("; control tools on" if allow_control else "; read only"),
            err=True,
        )
    try:
        server.run("stdio")
    finally:
        if conn is not None:
            conn.close()

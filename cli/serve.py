"""`sfc setup` and `sfc serve` (docs/host.md, "Serving, connecting, embedding")."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from cli.console import (
    AllowControlOption,
    HttpOption,
    PrivateOption,
    TokenFileOption,
    checked_addr,
    launch,
)
from cli.files import read
from cli.hostcommon import (
    DataDirOption,
    RedisOption,
    check_scope,
    fail,
    failures_logged,
    server_errors,
)
from cli.main import app
from host import facade, logs
from host.console.serving import DEFAULT_ADDR, ConsoleServer
from host.facade import redacted
from host.serve import (
    CrashLoop,
    Serving,
    connect,
    resolve_url,
    scope_values,
    setup_scope,
    stop_on_signals,
)
from host.server import ServerError
from host.settings import (
    ScopeDefaults,
    Settings,
    SettingsError,
    from_environment,
    scope_defaults,
)

log = logging.getLogger("sfc.serve")

ScopesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scope",
        metavar="SCOPE",
        help="A scope to serve (repeat it); every registered scope when absent.",
        show_default=False,
    ),
]
SetupScopesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--scope",
        metavar="SCOPE",
        help="A scope to set up (repeat it); `default` when absent.",
        show_default=False,
    ),
]
CapabilitiesOption = Annotated[
    Path | None,
    typer.Option(
        "--capabilities",
        metavar="FILE",
        help="The station's capabilities (JSON): recipes are built against them at submit.",
        show_default=False,
    ),
]
MaxAttemptsOption = Annotated[
    int | None,
    typer.Option(
        "--max-attempts",
        metavar="N",
        help="Attempts of an action without MaxAttempts (scope setting; default 3).",
        show_default=False,
    ),
]
HoldOption = Annotated[
    bool | None,
    typer.Option(
        "--equipment-hold/--no-equipment-hold",
        help="Whether the scope's equipment can hold its work (recipes with Hold and Restart "
        "are refused without it; scope setting; default yes).",
        show_default=False,
    ),
]
GraceOption = Annotated[
    str | None,
    typer.Option(
        "--expiry-grace",
        metavar="VALUE",
        help="A command's expiresAt is its deadline less this, e.g. 5s (scope setting; "
        "default 2s).",
        show_default=False,
    ),
]


def _setting(name: str, help: str) -> Any:
    return typer.Option(f"--{name}", metavar="VALUE", help=help, show_default=False)


def _scope_values(
    capabilities: Path | None,
    max_attempts: int | None,
    equipment_hold: bool | None,
    expiry_grace: str | None,
    environment: bool = True,
) -> dict[str, str]:
    """The scope settings the options give; with `environment`, `SFC_MAX_ATTEMPTS`,
    `SFC_EQUIPMENT_HOLD` and `SFC_EXPIRY_GRACE` too, where their option is not given (they
    are scope settings: stored in the scope's settings, docs/host.md, Settings)."""
    caps = None if capabilities is None else read(capabilities, "capabilities")
    grace = None
    if expiry_grace is not None:
        try:  # a bad value is named as the option: `--expiry-grace='soon'`
            grace = Settings().with_values({"expiry_grace": expiry_grace}).expiry_grace
        except SettingsError as e:
            fail(str(e), 2)
    if environment:
        env = _scope_environment()
        max_attempts = env.max_attempts if max_attempts is None else max_attempts
        equipment_hold = env.equipment_hold if equipment_hold is None else equipment_hold
        grace = env.expiry_grace if grace is None else grace
    try:
        return scope_values(
            capabilities=caps,
            max_attempts=max_attempts,
            equipment_hold=equipment_hold,
            expiry_grace=grace,
        )
    except ValueError as e:
        fail(str(e), 2)


def _scope_environment() -> ScopeDefaults:
    try:
        return scope_defaults()
    except SettingsError as e:
        fail(str(e), 2)


@app.command()
def setup(
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    scope: SetupScopesOption = None,
    capabilities: CapabilitiesOption = None,
    max_attempts: MaxAttemptsOption = None,
    equipment_hold: HoldOption = None,
    expiry_grace: GraceOption = None,
) -> None:
    """Load the function library and create the scopes' settings (an admin step: the host's
    own ACL user then needs no FUNCTION LOAD)."""
    values = _scope_values(capabilities, max_attempts, equipment_hold, expiry_grace)
    scopes = [check_scope(s) for s in scope or ["default"]]
    with server_errors():
        store = connect(resolve_url(redis, data_dir))
        try:
            facade.load_library(store)
            for s in scopes:
                setup_scope(store, s, values)
                typer.echo(f"scope {s}: ready" + (f" ({', '.join(values)})" if values else ""))
        finally:
            facade.close(store)


def _say(text: str, log_format: str) -> None:
    """What serve says on stderr whatever the log level: a line, or with --log-format json
    a log record of its own (so that every line of stderr is one JSON object)."""
    if log_format != "json":
        typer.echo(text, err=True)
        return
    log.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, text, (), None))


@app.command()
def serve(
    redis: RedisOption = None,
    data_dir: DataDirOption = None,
    workers: Annotated[
        int, typer.Option("--workers", metavar="N", min=1, max=64, help="Worker processes.")
    ] = 1,
    fsync: Annotated[
        str,
        typer.Option(
            "--fsync",
            metavar="everysec|always",
            help="The embedded server's appendfsync: everysec may lose up to a second of "
            "commits on a server crash, always loses none and costs more per commit.",
        ),
    ] = "everysec",
    scope: ScopesOption = None,
    capabilities: CapabilitiesOption = None,
    max_attempts: MaxAttemptsOption = None,
    equipment_hold: HoldOption = None,
    sweep_interval: Annotated[str | None, _setting("sweep-interval", "SFC_SWEEP_INTERVAL")] = None,
    outage_threshold: Annotated[
        str | None, _setting("outage-threshold", "SFC_OUTAGE_THRESHOLD")
    ] = None,
    expiry_grace: Annotated[
        str | None, _setting("expiry-grace", "SFC_EXPIRY_GRACE (scope setting, with --scope)")
    ] = None,
    autoclaim_idle: Annotated[str | None, _setting("autoclaim-idle", "SFC_AUTOCLAIM_IDLE")] = None,
    max_deliveries: Annotated[str | None, _setting("max-deliveries", "SFC_MAX_DELIVERIES")] = None,
    read_count: Annotated[str | None, _setting("read-count", "SFC_READ_COUNT")] = None,
    sweep_limit: Annotated[str | None, _setting("sweep-limit", "SFC_SWEEP_LIMIT")] = None,
    scope_refresh_interval: Annotated[
        str | None, _setting("scope-refresh-interval", "SFC_SCOPE_REFRESH_INTERVAL")
    ] = None,
    history_limit: Annotated[str | None, _setting("history-limit", "SFC_HISTORY_LIMIT")] = None,
    event_dedupe_ttl: Annotated[
        str | None, _setting("event-dedupe-ttl", "SFC_EVENT_DEDUPE_TTL")
    ] = None,
    equipment_retention: Annotated[
        str | None, _setting("equipment-retention", "SFC_EQUIPMENT_RETENTION")
    ] = None,
    log_level: Annotated[
        str, typer.Option("--log-level", metavar="LEVEL", help="debug, info, warning, error.")
    ] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            metavar="text|json",
            help="json: one JSON object a line, with scope, job, entry, kind, disposition and "
            "reason as fields where known.",
        ),
    ] = "text",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            metavar="P",
            min=0,
            max=65535,
            help="Serve Prometheus metrics at http://ADDR:P/metrics, summed over every worker "
            "(docs/metrics.md); 0 takes a free port and says which.",
            show_default=False,
        ),
    ] = None,
    metrics_addr: Annotated[
        str, typer.Option("--metrics-addr", metavar="ADDR", help="The address of /metrics.")
    ] = "127.0.0.1",
    http: HttpOption = DEFAULT_ADDR,
    no_http: Annotated[
        bool, typer.Option("--no-http", help="Serve no console and no HTTP API.")
    ] = False,
    allow_control: AllowControlOption = False,
    http_token_file: TokenFileOption = None,
    http_private: PrivateOption = False,
) -> None:
    """Run the host until SIGINT, SIGTERM or SIGHUP: the embedded Valkey (unless --redis)
    and the worker processes. A second `sfc serve` on the same --data-dir attaches to the
    running server as one more instance. On a stop, every entry not yet committed stays
    pending."""
    if not no_http:
        checked_addr(http)
    if fsync not in ("everysec", "always"):
        fail(f"--fsync {fsync!r}: use everysec or always", 2)
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        fail(f"--log-level {log_level!r}: use debug, info, warning or error", 2)
    if log_format not in ("text", "json"):
        fail(f"--log-format {log_format!r}: use text or json", 2)
    chosen_format: Literal["text", "json"] = "json" if log_format == "json" else "text"
    logs.configure(level, chosen_format)
    with failures_logged(log if chosen_format == "json" else None):
        overrides = {  # lower-case names: a refusal names the option, not SFC_...
            k: v
            for k, v in {
                "sweep_interval": sweep_interval,
                "outage_threshold": outage_threshold,
                "expiry_grace": expiry_grace,
                "autoclaim_idle": autoclaim_idle,
                "max_deliveries": max_deliveries,
                "read_count": read_count,
                "sweep_limit": sweep_limit,
                "scope_refresh_interval": scope_refresh_interval,
                "history_limit": history_limit,
                "event_dedupe_ttl": event_dedupe_ttl,
                "equipment_retention": equipment_retention,
            }.items()
            if v is not None
        }
        try:
            settings = from_environment(overrides=overrides)
        except SettingsError as e:
            fail(str(e), 2)
        # without --scope the variables are not stored: every registered scope is served,
        # and a default must not overwrite what each has stored. --expiry-grace is then the
        # workers' own setting only (for the scopes that store none), as it was
        values = _scope_values(
            capabilities, max_attempts, equipment_hold, expiry_grace if scope else None, bool(scope)
        )
        for s in scope or []:
            check_scope(s)
        if not scope:
            env = _scope_environment()
            if env.equipment_hold is not None:
                _say(
                    "sfc serve: SFC_EQUIPMENT_HOLD is a scope setting, stored by `sfc serve "
                    "--scope S` or `sfc setup --scope S`; without --scope it is not applied",
                    chosen_format,
                )
            given = [
                name
                for name, value in (
                    ("SFC_MAX_ATTEMPTS", env.max_attempts),
                    ("--expiry-grace", expiry_grace),
                    ("SFC_EXPIRY_GRACE", None if expiry_grace is not None else env.expiry_grace),
                )
                if value is not None
            ]
            for name in given:
                _say(
                    f"sfc serve: {name} is a scope setting, stored by `sfc serve --scope S` "
                    "or `sfc setup --scope S`; without --scope the workers use it only for "
                    "scopes that store none, and a method applied by `sfc job` or `sfc mcp` "
                    "does not know it",
                    chosen_format,
                )
        chosen: Literal["everysec", "always"] = "always" if fsync == "always" else "everysec"
        serving = Serving(
            redis_url=redis or None,
            data_dir=data_dir,
            fsync=chosen,
            workers=workers,
            scopes=scope or None,
            settings=settings.texts(),
            log_format=chosen_format,
        )
        stop = threading.Event()
        stop_on_signals(stop)  # not set in the handler: it could wait for the event's lock
        crashed: CrashLoop | None = None
        console_server: ConsoleServer | None = None
        try:
            with server_errors():
                try:
                    url = serving.start_server()
                except ServerError as e:
                    fail(str(e), 2)
                store = connect(url)
                try:
                    facade.ensure_library(
                        store
                    )  # an ACL user without FUNCTION LOAD relies on setup
                    # without --scope every registered scope is served; `default` is set up at
                    # once, so a first submit to it does not wait for the scope refresh
                    for s in scope or ["default"]:
                        setup_scope(store, s, values if scope else {})
                    if not scope and values:
                        fail("--capabilities, --max-attempts and --equipment-hold need --scope", 2)
                finally:
                    facade.close(store)
            if metrics_port is not None:
                try:
                    port = serving.start_metrics(metrics_addr, metrics_port)
                except OSError as e:
                    fail(f"--metrics-port {metrics_port}: cannot serve on {metrics_addr}: {e}", 2)
                where = f"[{metrics_addr}]" if ":" in metrics_addr else metrics_addr
                _say(f"sfc serve: metrics at http://{where}:{port}/metrics", chosen_format)
            names = serving.start_workers()
            how = (
                f"attached to the server of {serving.data_dir or '.sfc'}"
                if serving.attached
                else "embedded server"
                if serving.server
                else "server"
            )
            _say(
                f"sfc serve: {how} at {redacted(url)}; {len(names)} worker(s); scopes: "
                f"{', '.join(scope) if scope else 'every registered scope'}; "
                "stop with Ctrl-C or SIGTERM",
                chosen_format,
            )
            if not no_http:
                console_server = launch(
                    http,
                    url,
                    serving.data_dir,
                    allow_control,
                    http_token_file,
                    settings,
                    lambda text: _say(f"sfc serve: {text}", chosen_format),
                    http_private,
                )
            while not stop.wait(0.5):
                try:
                    serving.replace_exited()  # a worker killed (out of memory...) is replaced
                except CrashLoop as e:
                    log.error("%s; stopping", e, extra={"reason": str(e)})
                    crashed = e  # what becomes of the embedded server: Serving.stop says
                    raise typer.Exit(1) from None
        finally:
            started = time.monotonic()
            if console_server is not None:
                console_server.stop()
            serving.stop(crashed=crashed)
            _say(f"sfc serve: stopped in {time.monotonic() - started:.1f} s", chosen_format)

"""The tools of `sfc mcp`, a stdio MCP server on the `mcp` SDK (docs/metrics.md, "The MCP
server").

Imported only by `sfc mcp` (and tests), so that no other command pays for the SDK.

- Without a server: `sfc_validate`, `sfc_explain` and `sfc_dryrun`. They take documents as
  JSON text (the recipe, a state, a script, capabilities), never file names.
- With a server (`--redis`, `SFC_REDIS_URL` or the connection file of the data directory):
  `sfc_job` (the text of `sfc job show`, and its `--json`), `sfc_jobs` (`sfc job list --json`) and
  `sfc_work_pending` (`sfc work pending --json`). They only read.
- With `--allow-control` also: `sfc_pause`, `sfc_resume`, `sfc_abort`, `sfc_tick` (queue a
  tick entry: the job's expired deadlines fire now) and `sfc_redispatch`. Nothing is written
  without it: the control tools are not even listed.

Every tool checks its input first; bad input, a refused request and an unreachable server
are tool errors (`isError`, with the reason), never a crash of the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import redis
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from cli.files import (
    LIMITS,
    TOO_DEEP,
    UTF8_BOM,
    build_recipe,
    decode_failure,
    format_error,
    syntax_error,
)
from cli.hostcommon import not_found, unreadable_job, unregistered
from cli.job import show_text
from generated.capabilities_v1_1 import Capabilities
from generated.simulation_script_v1_0 import SimulationScript
from generated.state_v1_5 import SfcState
from host import facade, joborder, jobs, jobview, keys, readmodel, workview
from host.facade import Connection as Server
from host.facade import StoreError, unreachable
from host.joborder import ReturnStatus
from host.serve import connect
from host.settings import Settings
from sfc import codec
from sfc.builder import RECIPE_V1_2_0
from sfc.evolution import misfit
from sfc.explain import explain as explain_text
from sfc.graph import Graph
from sfc.interpreter import interpreter_for, known_dataschemas
from sfc.migrate import READERS, MigrationError, migrate, state_format
from sfc.simulation import (
    DEFAULT_TIME_LIMIT_MS,
    ScriptError,
    Simulation,
    job_id_problem,
)
from sfc.simulation import load_script as parse_script
from sfc.transcript import lines, to_json

T = TypeVar("T")
MAX_ERRORS = 50
"""The most build errors a tool error lists."""
CONTROL_TOOLS = ("sfc_pause", "sfc_resume", "sfc_abort", "sfc_tick", "sfc_redispatch")
SERVER_TOOLS = ("sfc_job", "sfc_jobs", "sfc_work_pending")
OFFLINE_TOOLS = ("sfc_validate", "sfc_explain", "sfc_dryrun")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


# -- documents given as text


Document = str | dict[str, Any] | None
"""An optional document: JSON text, or the JSON object itself (a client may send either;
the SDK turns JSON text of an optional argument into the object)."""


def _document(text: str | dict[str, Any], what: str) -> bytes:
    """The bytes of a document given as JSON text (or object), within its kind's limit."""
    if isinstance(text, dict):
        data = json.dumps(text, ensure_ascii=False).encode()
    elif isinstance(text, str):
        data = text.encode("utf-8", errors="surrogatepass").removeprefix(UTF8_BOM)
    else:
        raise ToolError(f"{what}: give the {what} as JSON text")
    limit = LIMITS[what]
    if len(data) > limit:
        raise ToolError(f"{what}: {len(data):,} bytes; at most {limit:,} are allowed")
    return data


def _capabilities(text: Document) -> Capabilities | None:
    if text is None:
        return None
    data = _document(text, "capabilities")
    try:
        return codec.capabilities_decoder.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, codec.capabilities_decoder, e, "capabilities")
        raise ToolError(f"capabilities are not valid: {where}: {message}") from None
    except RecursionError:
        raise ToolError(f"capabilities are not valid: $: {TOO_DEEP}") from None


def _dataschema(dataschema: str) -> str:
    if interpreter_for(dataschema) is None:
        known = ", ".join(known_dataschemas())
        raise ToolError(f"unknown dataschema {dataschema!r}; known: {known}")
    return dataschema


def _graph(recipe: str, caps: Capabilities | None = None, dataschema: str = RECIPE_V1_2_0) -> Graph:
    """The recipe's graph; a recipe that does not build is a tool error listing its errors."""
    result = build_recipe(_document(recipe, "recipe"), caps, _dataschema(dataschema))
    if result.graph is None:
        shown = [format_error(e) for e in result.errors[:MAX_ERRORS]]
        more = len(result.errors) - len(shown)
        if more > 0:
            shown.append(f"... and {more} more")
        raise ToolError("the recipe is not valid:\n" + "\n".join(shown))
    return result.graph


def _state(text: str | dict[str, Any], graph: Graph) -> SfcState:
    """A job's state for the recipe (older formats are migrated), as `sfc explain --state`
    checks it."""
    data = _document(text, "state")
    syntax = syntax_error(data)
    if syntax is not None:
        raise ToolError(f"state: not a job state: $: {syntax}")
    fmt = state_format(data)
    reader = READERS.get(fmt) if fmt is not None else None
    if reader is None:
        said = "no format" if fmt is None else f"format {fmt!r}"
        raise ToolError(
            f"state: not a job state: it has {said}; this engine reads state formats "
            f"{', '.join(READERS)}"
        )
    try:
        reader.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, reader, e, "job state")
        raise ToolError(f"state: not a job state (format {fmt}): {where}: {message}") from None
    except RecursionError:
        raise ToolError(f"state: not a job state (format {fmt}): $: {TOO_DEEP}") from None
    try:
        state = migrate(data, graph)
    except MigrationError as e:
        raise ToolError(f"state: {e}") from None
    if state.recipe_hash != graph.recipe_hash:
        raise ToolError(
            f"state: the job runs recipe {state.recipe_hash[:12]}, not this one "
            f"({graph.recipe_hash[:12]})"
        )
    unfit = misfit(graph, state)
    if unfit is not None:
        raise ToolError(f"state: the state does not fit the recipe: {unfit}")
    return state


def _script(text: Document, graph: Graph) -> SimulationScript | None:
    if text is None:
        return None
    try:
        return parse_script(_document(text, "script"), graph)
    except ScriptError as e:
        raise ToolError(f"script: {e.path}: {e.message}") from None


# -- the tools that need no server


def sfc_validate(
    recipe: str, capabilities: Document = None, dataschema: str = RECIPE_V1_2_0
) -> dict[str, Any]:
    """Build a recipe (wire JSON text) and list every build error (SFC000 to SFC026), as
    `sfc validate --json` does. Optionally against the station's capabilities (JSON text)."""
    caps = _capabilities(capabilities)
    result = build_recipe(_document(recipe, "recipe"), caps, _dataschema(dataschema))
    graph = result.graph
    return {
        "ok": result.ok,
        "steps": 0 if graph is None else len(graph.steps),
        "actions": 0 if graph is None else len(graph.actions),
        "errors": [
            {
                "code": e.code,
                "path": e.path.removeprefix("$").removeprefix("."),
                "message": e.message,
            }
            for e in result.errors
        ],
    }


def sfc_explain(recipe: str, state: Document = None) -> str:
    """Describe a recipe (wire JSON text) in plain words: steps, actions, transitions,
    divergences and what ends a job. With a job's state (JSON text, format 1.5 or older),
    say where the job is, what it waits for and when the next deadline is due."""
    graph = _graph(recipe)
    job = None if state is None else _state(state, graph)
    return explain_text(graph, job)


MCP_EVALUATION_LIMIT = 10_000
"""The most evaluations one `sfc_dryrun` call runs (and its default). A tool's answer is
held whole in memory by both sides, and the server answers one call at a time: a recipe
that loops for 100,000 evaluations answered 200 MB in 4 s, and a limit of 10^8 ate the
machine's memory. `sfc dryrun` has no such cap."""


def sfc_dryrun(
    recipe: str,
    script: Document = None,
    job_id: str = "job-1",
    time_limit_ms: int = DEFAULT_TIME_LIMIT_MS,
    evaluation_limit: int = MCP_EVALUATION_LIMIT,
    capabilities: Document = None,
) -> CallToolResult:
    """Run a recipe (wire JSON text) on a virtual clock with scripted equipment (a simulation
    script as JSON text; without one every action answers ok at once). Returns the
    transcript as text, and the dry-run result as JSON: the same document as
    `sfc dryrun --json`. Nothing is stored or sent. At most 10,000 evaluations (the
    default): a run that needs more ends with `evaluation_limit`."""
    problem = job_id_problem(job_id)
    if problem is not None:
        raise ToolError(f"job_id: {problem}")
    if time_limit_ms < 0:
        raise ToolError("time_limit_ms: it must be 0 or more")
    if not 1 <= evaluation_limit <= MCP_EVALUATION_LIMIT:
        raise ToolError(
            f"evaluation_limit: it must be 1 to {MCP_EVALUATION_LIMIT:,} (a longer run's "
            "transcript is too long for a tool's answer; `sfc dryrun` runs longer ones)"
        )
    graph = _graph(recipe, _capabilities(capabilities))
    sim = Simulation(
        graph,
        _script(script, graph),
        job_id=job_id,
        time_limit_ms=time_limit_ms,
        evaluation_limit=evaluation_limit,
    )
    result = sim.run()
    transcript = "".join(line.text + "\n" for line in lines(result, stalled=sim.stalled))
    doc = to_json(result)
    return CallToolResult(
        content=[
            TextContent(type="text", text=transcript),
            TextContent(type="text", text=doc.decode()),
        ],
        structured_content={"transcript": transcript, "dryrun": json.loads(doc)},
    )


# -- the tools that read the server, and those that write


@dataclass
class Connection:
    """The server the tools use: connected at the first call, and again after a failure."""

    url: str
    store: Server | None = None
    opened: list[Server] = field(default_factory=list)

    def get(self) -> Server:
        if self.store is None:
            try:
                store = connect(self.url)
            except StoreError as e:
                raise ToolError(str(e)) from None
            self.opened.append(store)
            self.store = store
        return self.store

    def close(self) -> None:
        for s in self.opened:
            facade.close(s)
        self.opened.clear()
        self.store = None


def _scope(scope: str) -> str:
    try:
        return keys.check_scope(scope)
    except keys.KeyError_ as e:
        raise ToolError(f"scope: {e}") from None


def _job(job: str) -> str:
    try:
        return keys.check_job(job)
    except keys.KeyError_ as e:
        raise ToolError(f"job: {e}") from None


@contextmanager
def _server(conn: Connection) -> Iterator[Server]:
    """The store; a server that is gone or refuses is a tool error (connect again next
    time)."""
    store = conn.get()
    try:
        yield store
    except ToolError:
        raise
    except Exception as e:
        if unreachable(e) or isinstance(e, StoreError):
            conn.store = None
            raise ToolError(f"the server went away: {e}") from None
        if isinstance(e, redis.ResponseError):
            raise ToolError(f"the server refused a command: {e}") from None
        if isinstance(e, msgspec.DecodeError):  # as `sfc job` says it (cli.hostcommon)
            raise ToolError(unreadable_job(None, e)) from None
        raise


MCP_FIX = 'call it with scope "{scope}"'
"""How a tool's error says to ask another scope (`not_found`'s fix)."""


def _missing(store: Server, scope: str, job: str) -> ToolError:
    """The error of a job not stored in `scope`, saying where it is (as `sfc job` says it)."""
    words = joborder.status_words(int(ReturnStatus.UNKNOWN_JOB_ORDER_ID))
    return ToolError(f"{job}: {words}: {not_found(store, scope, job, MCP_FIX)}")


def _outcome(result: jobs.MethodResult, store: Server, scope: str) -> dict[str, Any]:
    """A method's ReturnStatus; a refusal is a tool error that says why."""
    words = joborder.status_words(int(result.status))
    if result.status == ReturnStatus.UNKNOWN_JOB_ORDER_ID:
        raise _missing(store, scope, result.job)
    if not result.ok:
        raise ToolError(result.words())
    return {
        "job": result.job,
        "status": int(result.status),
        "words": words,
        "message": result.message,
    }


def server_tools(conn: Connection) -> list[Callable[..., Any]]:
    def sfc_job(job: str, scope: str = "default", history: int = 10) -> CallToolResult:
        """Show a job as `sfc job show` does: the order's state, where the recipe is, what
        it waits for and since when, whether the equipment adapters read its open commands,
        the next deadline, its dead entries, the last history entries and the job response.
        Returns the text, and the same document as `sfc job show --json` (as a second text
        and as structured content)."""
        _scope(scope)
        _job(job)
        if not 0 <= history <= 1000:
            raise ToolError("history: 0 to 1000 entries")
        with _server(conn) as store:
            d = readmodel.job_detail(store, scope, job, history)
            if d is None:
                raise _missing(store, scope, job)
        text = show_text(d)
        if d.unreadable is not None:
            # an error, as every tool says of such a job, with what can be read of it
            raise ToolError(f"{unreadable_job(job, d.unreadable)}. What can be read:\n{text}")
        doc = msgspec.json.encode(d)
        return CallToolResult(
            content=[
                TextContent(type="text", text=text),
                TextContent(type="text", text=doc.decode()),
            ],
            structured_content=json.loads(doc),
        )

    def sfc_jobs(scope: str = "default", state: list[str] | None = None) -> dict[str, Any]:
        """Every job order of the scope, oldest first, as `sfc job list --json`: id, state
        path, times and priority, and `unreadable` (why) for a job whose stored order or state
        cannot be read; optionally only those in the given states (e.g. Running, Ended,
        Aborted)."""
        _scope(scope)
        with _server(conn) as store:
            wanted: set[str] = set()
            if state:
                result, responses = jobs.job_responses(store, scope, state)
                if not result.ok:
                    raise ToolError(f"state: {result.message}")
                wanted = {r.job_order_id for r in responses}
            every = jobview.listing(store, scope)
            warning = None if every else unregistered(store, scope)
        listed = [j for j in every if not state or j.job in wanted]
        # a job whose stored order or state cannot be read is a row with `unreadable` (why),
        # as in `sfc job list --json`, not left out; `warning`: a scope that is not registered
        return {"jobs": msgspec.to_builtins([readmodel.job_row(j) for j in listed])} | (
            {"warning": warning} if warning else {}
        )

    def sfc_work_pending(scope: str = "default") -> dict[str, Any]:
        """Work entries read by a worker and not yet committed, oldest first, as
        `sfc work pending --json`."""
        _scope(scope)
        with _server(conn) as store:
            seen = workview.work_pending(store, scope)
            idle = not seen.pending and not seen.unread
            warning = unregistered(store, scope) if idle else None
        doc: dict[str, Any] = msgspec.to_builtins(seen)
        return doc | ({"warning": warning} if warning else {})

    return [sfc_job, sfc_jobs, sfc_work_pending]


def control_tools(conn: Connection, settings: Settings | None = None) -> list[Callable[..., Any]]:
    """The tools that write; a method commits with `settings` (the `SFC_*` of `sfc mcp`),
    as a worker would."""

    def method(
        call: Callable[..., jobs.MethodResult], job: str, scope: str, comment: str | None
    ) -> dict[str, Any]:
        _scope(scope)
        _job(job)
        if comment is not None and len(comment) > joborder.TEXT_LIMIT:
            raise ToolError(f"comment: at most {joborder.TEXT_LIMIT} characters")
        with _server(conn) as store:
            return _outcome(call(store, scope, job, comment, settings=settings), store, scope)

    def sfc_pause(job: str, scope: str = "default", comment: str | None = None) -> dict[str, Any]:
        """Pause a running job (ISA-95 Pause): Running -> Interrupted/Suspended; the recipe
        is held in the same commit. A refusal (e.g. the job is not running) is an error with
        the ReturnStatus."""
        return method(jobs.pause, job, scope, comment)

    def sfc_resume(job: str, scope: str = "default", comment: str | None = None) -> dict[str, Any]:
        """Resume a paused job (ISA-95 Resume): Interrupted -> Running; held work restarts."""
        return method(jobs.resume, job, scope, comment)

    def sfc_abort(job: str, scope: str = "default", comment: str | None = None) -> dict[str, Any]:
        """Abort a job (ISA-95 Abort): it ends Aborted and its open work is withdrawn."""
        return method(jobs.abort, job, scope, comment)

    def sfc_tick(job: str, scope: str = "default") -> dict[str, Any]:
        """Queue a tick entry for a job: a worker evaluates its deadlines now (an expired
        one fires; nothing else changes). The sweep does this by itself when a deadline
        passes; use it when a job looks stuck."""
        _scope(scope)
        _job(job)
        with _server(conn) as store:
            entry = facade.queue_tick(store, scope, job)
            if entry is None:
                raise _missing(store, scope, job)
        return {"job": job, "entry": entry, "message": f"queued tick {entry}"}

    def sfc_redispatch(
        job: str, action: str | None = None, scope: str = "default"
    ) -> dict[str, Any]:
        """Send a job's open work again (the core's resume): the named action's work, or,
        without one, every open action's work that the equipment may have lost. A push
        command sent again uses up an attempt; one on its last attempt is refused (it would
        fault the job): `sfc job redispatch --force` does that."""
        _scope(scope)
        _job(job)
        with _server(conn) as store:
            result = jobs.redispatch(store, scope, job, action, settings=settings)
            return _outcome(result, store, scope)

    return [sfc_pause, sfc_resume, sfc_abort, sfc_tick, sfc_redispatch]


INSTRUCTIONS = (
    "Tools for IEC 61131-3 Sequential Function Chart recipes (microdcs-sfc). Give recipes, "
    "states, scripts and capabilities as JSON text. sfc_validate, sfc_explain and sfc_dryrun "
    "need no server; sfc_job, sfc_jobs and sfc_work_pending read the host's Valkey; the "
    "control tools (pause, resume, abort, tick, redispatch) are there only when the server "
    "was started with --allow-control."
)


def build_server(
    url: str | None, allow_control: bool = False, settings: Settings | None = None
) -> tuple[MCPServer, Connection | None]:
    """The MCP server: the offline tools; with `url` the reading tools; with
    `allow_control` (and `url`) the control tools, which commit with `settings` (the
    defaults without them). Returns it and its connection (close it when done)."""
    from importlib.metadata import version

    server: MCPServer = MCPServer(
        name="sfc",
        version=version("microdcs-sfc"),
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    for fn in (sfc_validate, sfc_explain, sfc_dryrun):
        server.add_tool(fn, annotations=READ_ONLY)
    if url is None:
        return server, None
    conn = Connection(url)
    for fn in server_tools(conn):
        server.add_tool(fn, annotations=READ_ONLY)
    if allow_control:
        for fn in control_tools(conn, settings):
            server.add_tool(fn, annotations=WRITES)
    return server, conn

"""The console and the HTTP API: one Starlette app (docs/console.md, docs/api.md).

Every page has a JSON twin under /api/v1 made from the same read model (host/readmodel.py):
the job page and `GET /api/v1/jobs/{scope}/{job}` are one `JobDetail`. Handlers parse,
call the host and answer; the store is reached through the host's functions, in a worker
thread (they block). Bad input is a 4xx whose JSON body names the field, and nothing is
written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from host import facade, jobs, keys, readmodel, workview
from host.console import pages
from host.console.auth import CSRF_HEADER, SESSION_COOKIE, Guard
from host.console.chart import (
    DRAWN_KEPT,
    Kept,
    chart_of,
    chart_of_detail,
    check_recipe,
    list_waits,
)
from host.console.openapi import document
from host.console.watch import Watchers
from host.equipment import publish_event
from host.joborder import ReturnStatus, status_words
from host.settings import Settings
from host.store import Store

BODY_LIMIT = 8 << 20
"""Most bytes of a request body (a recipe may have 4 MiB)."""
LIST_LIMIT = 1000
STATIC = Path(__file__).parent / "static"


class BadInput(Exception):
    """A request the API refuses before it calls the host: the field and why."""

    def __init__(self, field: str | None, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.status = status


@dataclass
class Console:
    """What the handlers share: the store, the guard, the watchers, the settings."""

    store: Store
    guard: Guard
    watchers: Watchers
    settings: Settings | None
    drawn: Kept = field(default_factory=lambda: Kept(DRAWN_KEPT))
    """The chart bodies drawn, for the next job alike (render_svg's `drawn`)."""


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def refused(field: str | None, message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status)


def encoded(doc: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(doc), status, media_type="application/json")


# --------------------------------------------------------------------------- the guard


def _authorised(request: Request, guard: Guard) -> bool:
    """The token as a bearer, or a session of the browser."""
    if guard.right(guard.bearer(request.headers.get("authorization"))):
        return True
    return guard.in_session(request.cookies.get(SESSION_COOKIE))


def _may_read(request: Request) -> Response | None:
    guard = _console(request).guard
    if guard.public and not _authorised(request, guard):
        return refused(
            "authorization",
            "this console is served beyond loopback: every request needs the token",
            401,
        )
    return None


def _may_write(request: Request) -> Response | None:
    guard = _console(request).guard
    if not guard.allow_control:
        return refused(None, "the console is read-only: start it with --allow-control", 403)
    if guard.right(guard.bearer(request.headers.get("authorization"))):
        return None
    if guard.in_session(request.cookies.get(SESSION_COOKIE)):
        if request.headers.get(CSRF_HEADER) == "1":
            return None
        return refused(CSRF_HEADER, f"a write from a browser needs the {CSRF_HEADER} header", 403)
    return refused("authorization", _why_not(request.headers.get("authorization")), 401)


def _why_not(authorization: str | None) -> str:
    """Why the Authorization header does not authorise a write, without echoing it."""
    if authorization is None:
        return "a write needs the token (Authorization: Bearer ...)"
    if authorization.partition(" ")[0].lower() != "bearer":
        return "the Authorization header is not 'Bearer TOKEN'"
    return (
        "the token is not this console's: it is the one in the serve's http-token file "
        "(<data-dir>/http-token, or --http-token-file)"
    )


Handler = Callable[[Request], Awaitable[Response]]


def reads(handler: Handler) -> Handler:
    async def guarded(request: Request) -> Response:
        return await _run(request, handler, _may_read)

    guarded.__name__ = handler.__name__
    guarded.__doc__ = handler.__doc__
    return guarded


def writes(handler: Handler) -> Handler:
    async def guarded(request: Request) -> Response:
        return await _run(request, handler, _may_write)

    guarded.__name__ = handler.__name__
    guarded.__doc__ = handler.__doc__
    return guarded


async def _run(
    request: Request, handler: Handler, check: Callable[[Request], Response | None]
) -> Response:
    denied = check(request)
    if denied is not None:
        return denied
    try:
        return await handler(request)
    except BadInput as e:
        return refused(e.field, e.message, e.status)
    except keys.KeyError_ as e:
        return refused("job" if "job id" in str(e) else "scope", str(e))


# --------------------------------------------------------------------------- parsing


async def body_of(request: Request, optional: bool = False) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > BODY_LIMIT:
        raise BadInput("body", f"the body has {len(raw)} bytes; at most {BODY_LIMIT}", 413)
    if not raw.strip():
        if optional:
            return {}
        raise BadInput("body", "the body is empty: send a JSON object")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise BadInput("body", f"the body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise BadInput("body", "the body must be a JSON object")
    return doc


def text_of(doc: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = doc.get(name)
    if value is None:
        if required:
            raise BadInput(name, f"{name} is required")
        return None
    if not isinstance(value, str):
        raise BadInput(name, f"{name} must be a string")
    return value


def int_of(doc: dict[str, Any], name: str) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(name, f"{name} must be an integer")
    return value


def only(doc: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for name in doc:
        if name not in allowed:
            raise BadInput(name, f"unknown field {name!r}; known: {', '.join(allowed)}")


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(name, f"{name} must be an integer") from None
    if not low <= value <= high:
        raise BadInput(name, f"{name} must be {low} to {high}")
    return value


def scope_of(value: str | None) -> str:
    scope = value if value is not None else "default"
    try:
        return keys.check_scope(scope)
    except keys.KeyError_ as e:
        raise BadInput("scope", str(e)) from None


def job_of(value: str, field: str = "job") -> str:
    try:
        return keys.check_job(value)
    except keys.KeyError_ as e:
        raise BadInput(field, str(e)) from None


HTTP_OF = {
    ReturnStatus.OK: 200,
    ReturnStatus.UNKNOWN_JOB_ORDER_ID: 404,
    ReturnStatus.INVALID_JOB_ORDER_STATUS: 409,
    ReturnStatus.UNABLE_TO_ACCEPT: 409,
    ReturnStatus.INVALID_REQUEST: 400,
}


def method_answer(result: jobs.MethodResult, ok: int = 200) -> JSONResponse:
    """A job-control method's answer: the ReturnStatus in words and as its number."""
    status = int(result.status)
    body: dict[str, Any] = {
        "job": result.job,
        "status": status_words(status),
        "statusCode": status,
        "message": result.message,
    }
    if result.errors:
        body["errors"] = [
            {"code": e.code, "path": e.path, "message": e.message} for e in result.errors
        ]
    code = ok if result.ok else HTTP_OF.get(result.status, 409)
    if result.errors:
        code = 422
    return JSONResponse(body, status_code=code)


# --------------------------------------------------------------------------- the API


@reads
async def health(request: Request) -> Response:
    """The process is alive and the server answers."""
    try:
        await run_in_threadpool(_console(request).store.ping)
    except Exception as e:
        return JSONResponse({"ok": False, "error": f"the server does not answer: {e}"}, 503)
    return JSONResponse({"ok": True})


async def openapi(request: Request) -> Response:
    denied = _may_read(request)
    return denied or JSONResponse(document())


@reads
async def list_jobs(request: Request) -> Response:
    """A scope's jobs, filtered by state, paged; with `?waits=true` what each waits for and
    since when (the jobs page's one request a change)."""
    scope = scope_of(request.query_params.get("scope"))
    states = request.query_params.getlist("state")
    offset = query_int(request, "offset", 0, 0, 10**9)
    limit = query_int(request, "limit", 100, 1, LIST_LIMIT)
    try:
        page = await run_in_threadpool(
            readmodel.job_page, _console(request).store, scope, states, offset, limit
        )
    except readmodel.StateError as e:
        raise BadInput("state", str(e)) from None
    if request.query_params.get("waits") not in ("true", "1"):
        return encoded(page)
    return encoded(await _with_waits(_console(request).store, page))


async def _with_waits(store: Store, page: readmodel.JobPage) -> dict[str, Any]:
    """The list with what each job waits for (`waiting`), as a document."""
    waiting = await run_in_threadpool(list_waits, store, page.scope, [j.job for j in page.jobs])
    doc: dict[str, Any] = msgspec.to_builtins(page)
    for row in doc["jobs"]:
        row["waiting"] = waiting.get(row["job"])
    return doc


async def _detail(request: Request, chart: bool = False) -> tuple[readmodel.JobDetail, str | None]:
    """The job's detail, and with `chart` its chart drawn from the same read, in one trip
    to a worker thread."""
    scope = scope_of(request.path_params["scope"])
    job = job_of(request.path_params["job"])
    history = query_int(request, "history", 20, 0, 1000)
    console = _console(request)

    def read() -> tuple[readmodel.JobDetail | None, str | None]:
        detail = readmodel.job_detail(console.store, scope, job, history)
        if detail is None or not chart:
            return detail, None
        return detail, chart_of_detail(console.store, detail, console.drawn)

    detail, svg = await run_in_threadpool(read)
    if detail is None:
        raise BadInput("job", f"no job order {job!r} in scope {scope}", 404)
    return detail, svg


@reads
async def job_detail(request: Request) -> Response:
    """One job: its order, state, actions, waits, next deadline, history and response;
    with `?chart=true` its chart too (the job page's one request a change)."""
    chart = request.query_params.get("chart") in ("true", "1")
    detail, svg = await _detail(request, chart)
    if not chart:
        return encoded(detail)
    doc = msgspec.to_builtins(detail)
    doc["chart"] = svg
    return encoded(doc)


@reads
async def job_history(request: Request) -> Response:
    scope = scope_of(request.path_params["scope"])
    job = job_of(request.path_params["job"])
    count = query_int(request, "count", 100, 1, 1000)
    store = _console(request).store
    rows = await run_in_threadpool(readmodel.job_history, store, scope, job, count)
    if not rows and await run_in_threadpool(store.job, scope, job) is None:
        raise BadInput("job", f"no job order {job!r} in scope {scope}", 404)
    return encoded({"scope": scope, "job": job, "history": rows})


@reads
async def job_chart(request: Request) -> Response:
    scope = scope_of(request.path_params["scope"])
    job = job_of(request.path_params["job"])
    c = _console(request)
    svg, problem = await run_in_threadpool(chart_of, c.store, scope, job, c.drawn)
    if svg is None:
        raise BadInput("job", problem, 404 if problem.startswith("no job order") else 409)
    return Response(svg, media_type="image/svg+xml")


SUBMIT_FIELDS = ("jobId", "recipe", "scope", "start", "priority", "description", "workMasterId")


@writes
async def submit(request: Request) -> Response:
    """Store, or store and start, one job order of a recipe."""
    doc = await body_of(request)
    only(doc, SUBMIT_FIELDS)
    job_id = text_of(doc, "jobId")
    if job_id is not None:
        job_of(job_id, "jobId")
    recipe = doc.get("recipe")
    if not isinstance(recipe, dict):
        raise BadInput("recipe", "recipe is required: the recipe document, a JSON object")
    scope = scope_of(text_of(doc, "scope"))
    start = doc.get("start", True)
    if not isinstance(start, bool):
        raise BadInput("start", "start must be true or false")
    priority = int_of(doc, "priority")
    if priority is not None and not 0 <= priority <= 1_000_000:
        raise BadInput("priority", "priority must be 0 to 1000000")
    result = await run_in_threadpool(
        lambda: jobs.submit(
            _console(request).store,
            scope,
            json.dumps(recipe).encode(),
            job_id=job_id,
            start=start,
            work_master_id=text_of(doc, "workMasterId"),
            priority=priority or 0,
            description=text_of(doc, "description"),
        )
    )
    return method_answer(result, ok=201)


COMMENTED = ("pause", "resume", "stop", "abort")
METHODS: dict[str, Callable[..., jobs.MethodResult]] = {
    "start": jobs.start,
    "revoke": jobs.revoke_start,
    "pause": jobs.pause,
    "resume": jobs.resume,
    "stop": jobs.stop,
    "abort": jobs.abort,
    "cancel": jobs.cancel,
    "clear": jobs.clear,
}


@writes
async def job_method(request: Request) -> Response:
    """start, revoke, pause, resume, stop, abort, cancel or clear: the host's method."""
    scope = scope_of(request.path_params["scope"])
    job = job_of(request.path_params["job"])
    name = request.path_params["method"]
    call = METHODS.get(name)
    if call is None:
        raise BadInput("method", f"unknown method {name!r}; known: {', '.join(METHODS)}", 404)
    doc = await body_of(request, optional=True)
    only(doc, ("comment",) if name in COMMENTED else ())
    comment = text_of(doc, "comment")
    c = _console(request)
    if name in COMMENTED:
        result = await run_in_threadpool(
            lambda: call(c.store, scope, job, comment, settings=c.settings)
        )
    elif name in ("start", "revoke"):
        result = await run_in_threadpool(lambda: call(c.store, scope, job, settings=c.settings))
    else:
        result = await run_in_threadpool(call, c.store, scope, job)
    return method_answer(result)


ANSWER_FIELDS = ("scope", "job", "action", "outcome", "error", "commandId", "round")


@writes
async def answer(request: Request) -> Response:
    """Answer a command as equipment would (`sfc respond`): queue an answer entry."""
    doc = await body_of(request)
    only(doc, ANSWER_FIELDS)
    scope = scope_of(text_of(doc, "scope"))
    job = job_of(text_of(doc, "job", required=True) or "")
    action = text_of(doc, "action", required=True) or ""
    outcome, error = text_of(doc, "outcome"), text_of(doc, "error")
    command_id, round_ = text_of(doc, "commandId"), int_of(doc, "round")
    if outcome is not None and error is not None:
        raise BadInput("error", "give an outcome or an error, not both")
    if outcome is not None and not outcome.strip():
        raise BadInput("outcome", "outcome is empty: leave it out for done")
    if error is not None and not error.strip():
        raise BadInput("error", "error is empty: give the failure's text")
    store = _console(request).store

    def queue() -> str:
        # the checks of `sfc respond` (facade.answer): what the job has open, then the core
        # weighs the answer against the stored state, as the worker would
        try:
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
        except msgspec.DecodeError as e:
            raise BadInput("job", f"its stored state cannot be read: {e}", 409) from None
        except facade.Refused as e:
            raise BadInput(*answer_refused(str(e), command_id, round_)) from None
        except ValueError as e:  # the answer's own shape (answer_data)
            raise BadInput("action", str(e)) from None
        if data is None:
            raise BadInput("job", f"no job order {job!r} in scope {scope}: nothing queued", 404)
        return facade.queue_answer(store, scope, data)

    entry = await run_in_threadpool(queue)
    return JSONResponse({"entry": entry, "queued": f"queued answer {entry}"}, 202)


def answer_refused(why: str, command_id: str | None, round_: int | None) -> tuple[str, str, int]:
    """The field, message and HTTP code of an answer `facade.answer` refused."""
    if "has no action" in why:
        return "action", why, 404
    if why.startswith("a worker would"):  # the core refused the command id or the round
        field = (
            "commandId" if command_id is not None else "round" if round_ is not None else "action"
        )
        return field, why, 409
    return "action", why, 409


EVENT_FIELDS = ("scope", "type", "subject", "correlationId", "outcome", "source", "id")


@writes
async def event(request: Request) -> Response:
    """Publish an event for the jobs that wait for its type (`sfc event`)."""
    doc = await body_of(request)
    only(doc, EVENT_FIELDS)
    scope = scope_of(text_of(doc, "scope"))
    type_id = text_of(doc, "type", required=True) or ""
    if not type_id.strip() or not type_id.isprintable() or any(c.isspace() for c in type_id):
        raise BadInput("type", f"type {type_id!r} is empty or holds white space")
    source, id_ = text_of(doc, "source"), text_of(doc, "id")
    if (source is None) != (id_ is None):
        raise BadInput("id" if id_ is None else "source", "source and id come together")
    outcome = text_of(doc, "outcome")
    if outcome is not None and not outcome.strip():
        raise BadInput("outcome", "outcome is empty: leave it out for done")
    subject, correlation = text_of(doc, "subject"), text_of(doc, "correlationId")
    try:
        entry = await run_in_threadpool(
            lambda: publish_event(
                _console(request).store,
                scope,
                type_id,
                subject=subject,
                correlation_id=correlation,
                outcome=outcome,
                source=source,
                id=id_,
            )
        )
    except ValueError as e:
        raise BadInput("type", str(e)) from None
    if entry is None:
        return JSONResponse(
            {"entry": None, "dropped": f"no job of scope {scope} waits for {type_id} (counted)"}
        )
    return JSONResponse({"entry": entry, "queued": f"queued event {entry}"}, 202)


@reads
async def work(request: Request) -> Response:
    """The scope's pending and dead work entries."""
    scope = scope_of(request.query_params.get("scope"))
    return encoded(await _work_of(_console(request).store, scope))


async def _work_of(store: Store, scope: str) -> dict[str, Any]:
    pending = await run_in_threadpool(workview.work_pending, store, scope)
    dead = await run_in_threadpool(workview.work_dead, store, scope)
    return {"scope": scope, "pending": pending, "dead": dead}


@writes
async def work_entry(request: Request) -> Response:
    """Requeue or drop a dead entry."""
    scope = scope_of(request.path_params["scope"])
    entry = request.path_params["entry"]
    what = request.path_params["action"]
    store = _console(request).store
    if what == "requeue":
        new = await run_in_threadpool(store.requeue, scope, entry)
        if new is None:
            raise BadInput("entry", f"no dead entry {entry} in scope {scope}", 404)
        return JSONResponse({"entry": entry, "requeued": new})
    if what == "drop":
        if not await run_in_threadpool(store.drop_dead, scope, entry):
            raise BadInput("entry", f"no dead entry {entry} in scope {scope}", 404)
        return JSONResponse({"entry": entry, "dropped": True})
    raise BadInput("action", f"unknown action {what!r}: requeue or drop", 404)


async def stream(request: Request) -> Response:
    """Server-sent events of the scope's job changes: `change` with the jobs that moved."""
    denied = _may_read(request)
    if denied is not None:
        return denied
    try:
        scope = scope_of(request.query_params.get("scope"))
    except BadInput as e:
        return refused(e.field, e.message)
    watcher = _console(request).watchers.of(scope)

    async def events() -> AsyncIterator[str]:
        listener = watcher.listen()
        try:
            # a change made once the client has its hello is told: the watcher has read
            # the scope's jobs by then (or could not, and says so in the log)
            await run_in_threadpool(watcher.ready.wait, 5)
            yield f"event: hello\ndata: {json.dumps({'scope': scope})}\n\n"
            while True:
                try:
                    change = await asyncio.wait_for(listener.queue.get(), 15)
                except TimeoutError:
                    yield ": still here\n\n"
                    continue
                if change is None:
                    return
                said: dict[str, Any] = {"scope": change.scope, "jobs": list(change.jobs)}
                if change.work:
                    said["work"] = True
                data = json.dumps(said)
                yield f"event: change\ndata: {data}\n\n"
        finally:
            watcher.leave(listener)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def session(request: Request) -> Response:
    """Open a browser session with the token (the body's `token`), or close it (DELETE)."""
    guard = _console(request).guard
    if request.method == "DELETE":
        guard.close_session(request.cookies.get(SESSION_COOKIE))
        response = JSONResponse({"session": False})
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response
    try:
        doc = await body_of(request)
        only(doc, ("token",))
        token = text_of(doc, "token", required=True)
    except BadInput as e:
        return refused(e.field, e.message, e.status)
    if not guard.right(token):
        return refused("token", "the token is wrong", 401)
    response = JSONResponse({"session": True, "control": guard.allow_control})
    response.set_cookie(
        SESSION_COOKIE, guard.open_session(), httponly=True, samesite="strict", path="/"
    )
    return response


@reads
async def recipe_check(request: Request) -> Response:
    """Validate, explain, chart and dry-run a recipe and a script: nothing is stored."""
    doc = await body_of(request)
    only(doc, ("recipe", "script"))
    recipe = doc.get("recipe")
    if not isinstance(recipe, dict):
        raise BadInput("recipe", "recipe is required: the recipe document, a JSON object")
    script = doc.get("script")
    if script is not None and not isinstance(script, dict):
        raise BadInput("script", "script must be a JSON object")
    result = await run_in_threadpool(
        check_recipe,
        json.dumps(recipe).encode(),
        None if script is None else json.dumps(script).encode(),
    )
    return JSONResponse(result)


# --------------------------------------------------------------------------- pages


def _page(render: Callable[[Request, Console], Awaitable[str]]) -> Handler:
    async def handler(request: Request) -> Response:
        console = _console(request)
        if console.guard.public and not _authorised(request, console.guard):
            return HTMLResponse(pages.login(console.guard), 401)
        try:
            return HTMLResponse(await render(request, console))
        except BadInput as e:
            return HTMLResponse(pages.problem(e.message, console.guard), e.status)

    return handler


async def _jobs_page(request: Request, console: Console) -> str:
    scope = scope_of(request.query_params.get("scope"))
    page = await run_in_threadpool(readmodel.job_page, console.store, scope, [], 0, LIST_LIMIT)
    return pages.jobs(scope, await _with_waits(console.store, page), console.guard)


async def _job_page(request: Request, console: Console) -> str:
    detail, svg = await _detail(request, chart=True)
    return pages.job(detail, svg, console.guard)


async def _work_page(request: Request, console: Console) -> str:
    scope = scope_of(request.query_params.get("scope"))
    work = msgspec.to_builtins(await _work_of(console.store, scope))
    return pages.work(scope, work, console.guard)


async def _recipe_page(request: Request, console: Console) -> str:
    return pages.recipe(console.guard)


API = [
    Route("/healthz", health),
    Route("/api/v1/openapi.json", openapi),
    Route("/api/v1/jobs", list_jobs, methods=["GET"]),
    Route("/api/v1/jobs", submit, methods=["POST"]),
    Route("/api/v1/jobs/{scope}/{job}", job_detail),
    Route("/api/v1/jobs/{scope}/{job}/history", job_history),
    Route("/api/v1/jobs/{scope}/{job}/chart.svg", job_chart),
    Route("/api/v1/jobs/{scope}/{job}/{method}", job_method, methods=["POST"]),
    Route("/api/v1/answers", answer, methods=["POST"]),
    Route("/api/v1/events", event, methods=["POST"]),
    Route("/api/v1/work", work),
    Route("/api/v1/work/{scope}/{entry}/{action}", work_entry, methods=["POST"]),
    Route("/api/v1/stream", stream),
    Route("/api/v1/session", session, methods=["POST", "DELETE"]),
    Route("/api/v1/recipe/check", recipe_check, methods=["POST"]),
]
"""The HTTP API; `host/console/openapi.py` describes every route (a test holds it)."""

PAGES = [
    Route("/", _page(_jobs_page)),
    Route("/jobs/{scope}/{job}", _page(_job_page)),
    Route("/work", _page(_work_page)),
    Route("/recipe", _page(_recipe_page)),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


def create_app(
    open_store: Callable[[], Store], guard: Guard, settings: Settings | None = None
) -> Starlette:
    """The console's app; `open_store` connects to the server (once for the handlers, once
    more for each scope watched)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = await run_in_threadpool(open_store)
        watchers = Watchers(open_store)
        app.state.console = Console(store, guard, watchers, settings)
        try:
            yield
        finally:
            await run_in_threadpool(watchers.close)
            store.close()

    return Starlette(routes=[*API, *PAGES], lifespan=lifespan)

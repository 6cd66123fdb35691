"""The job-control methods that the host applies from the caller (docs/host.md, "Job orders").

Each method returns the OPC UA ReturnStatus and a message. It is applied as one commit, with
the time read from the server's TIME. This module has Store and StoreAndStart (`submit`) and
Start; the other methods build on the same `_method` path.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from msgspec import UNSET
from msgspec.structs import replace

from generated.history_entry_v1_0 import HistoryEntry
from generated.work_entry_v1_0 import StartData
from host import joborder, keys
from host.apply import decode_order
from host.entries import encode
from host.joborder import ReturnStatus
from host.store import Commit, Store
from sfc.builder import RECIPE_V1_1_0, BuildError, build
from sfc.codec import capabilities_decoder, state_decoder
from sfc.evolution import new_state

RECIPE_LIMIT = 4 << 20
"""Most bytes of a recipe document the host stores."""
STORE_RETRIES = 20
_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"


@dataclass(frozen=True)
class MethodResult:
    """What a method returns: the ReturnStatus, the job, and a message in words."""

    status: ReturnStatus
    job: str
    message: str = ""
    errors: tuple[BuildError, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.status == ReturnStatus.OK

    def words(self) -> str:
        said = joborder.status_words(int(self.status))
        return f"{self.job}: {said}" + (f": {self.message}" if self.message else "")


def new_job_id(now_ms: int) -> str:
    """A readable unique job id: `job-20261202-215203-k7q2`."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now_ms / 1000))
    return f"job-{stamp}-{''.join(secrets.choice(_ALPHABET) for _ in range(4))}"


def submit(
    store: Store,
    scope: str,
    recipe: bytes,
    *,
    job_id: str | None = None,
    start: bool = True,
    work_master_id: str | None = None,
    priority: int = 0,
    description: str | None = None,
    dataschema: str = RECIPE_V1_1_0,
) -> MethodResult:
    """Store (start=False) or StoreAndStart one job order of `recipe` in `scope`.

    The recipe is built against the scope's capabilities first; one that does not build is
    refused with ReturnStatus 16 and the build errors, and nothing is written. A job id that
    is stored already is refused with 16 too. A job id stored again after Clear continues the
    old job's command sequence, so no command id is reused.
    """
    shown = job_id or "(new)"
    try:
        keys.check_scope(scope)
        if job_id is not None:
            keys.check_job(job_id)
    except keys.KeyError_ as e:
        return MethodResult(ReturnStatus.INVALID_REQUEST, shown, str(e))
    if not 0 <= priority <= 1_000_000:
        return MethodResult(ReturnStatus.INVALID_REQUEST, shown, "priority must be 0 to 1000000")
    if len(recipe) > RECIPE_LIMIT:
        return MethodResult(
            ReturnStatus.UNABLE_TO_ACCEPT,
            shown,
            f"the recipe has {len(recipe)} bytes; at most {RECIPE_LIMIT} are accepted",
        )
    settings = store.scope_settings(scope)
    caps = None
    if "capabilities" in settings:
        try:
            caps = capabilities_decoder.decode(settings["capabilities"].encode())
        except Exception as e:  # a broken settings hash is the operator's to fix
            return MethodResult(
                ReturnStatus.UNABLE_TO_ACCEPT, shown, f"the scope's capabilities do not decode: {e}"
            )
    built = build(recipe, caps, dataschema)
    if built.graph is None:
        first = built.errors[0]
        return MethodResult(
            ReturnStatus.UNABLE_TO_ACCEPT,
            shown,
            f"the recipe does not build for scope {scope}: {first.code} at {first.path}: "
            f"{first.message}"
            + (f" (and {len(built.errors) - 1} more)" if len(built.errors) > 1 else ""),
            built.errors,
        )
    graph = built.graph
    store.register_scope(scope)
    store.put_recipe(graph.recipe_hash, recipe)
    for _ in range(STORE_RETRIES):
        now = store.time_ms()
        job = job_id or new_job_id(now)
        retired = store.retired_sequence(scope, job)
        state = new_state(graph, job, scope)
        if retired:
            state = replace(state, sequence=int(retired))
        order = joborder.new_order(
            job_id=job,
            scope=scope,
            recipe_hash=graph.recipe_hash,
            dataschema=dataschema,
            at=now,
            start=start,
            work_master_id=work_master_id,
            priority=priority,
            description=description,
        )
        result = store.store_order(
            scope,
            job,
            order=encode(order),
            state=encode(state),
            retired=retired,
            at=now,
            start=start,
            start_data=encode(StartData(job=job)),
        )
        if result == "ok":
            return MethodResult(ReturnStatus.OK, job, joborder.path_text(order))
        if result == "exists":
            if job_id is None:
                continue  # a generated id collided: draw another
            return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, "the job id is taken")
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, shown, "the store kept conflicting")


def start(store: Store, scope: str, job: str) -> MethodResult:
    """Start: NotAllowedToStart -> AllowedToStart, and queue `start`, in one commit."""
    return _method(store, scope, job, "Start")


def _method(store: Store, scope: str, job: str, method: str) -> MethodResult:
    try:
        keys.check_scope(scope)
        keys.check_job(job)
    except keys.KeyError_ as e:
        return MethodResult(ReturnStatus.INVALID_REQUEST, job, str(e))
    for _ in range(STORE_RETRIES):
        now, records = store.load(scope, [job])
        record = records[job]
        order = None if record is None else decode_order(record.order)
        status = joborder.allowed(method, order)
        if status != ReturnStatus.OK or record is None or order is None:
            where = "" if order is None else f"the order is {joborder.path_text(order)}"
            return MethodResult(status, job, where)
        state = state_decoder.decode(record.state)
        new = joborder.move(order, method, now)
        work = [("start", encode(StartData(job=job)))] if method == "Start" else []
        note = HistoryEntry(
            at=now,
            event=method,
            detail=UNSET,
            disposition="applied",
            reason=f"{method}: {joborder.path_text(order)} -> {joborder.path_text(new)}",
            decisions=[],
            sent=[],
            order=joborder.path_text(new),
        )
        commit = Commit(
            scope=scope,
            job=job,
            version=record.version,
            state=record.state,
            order=encode(new),
            due=int(record.due) if record.due else None,
            active=state.status == "running" and not joborder.ended(new),
            history=[("method", encode(note))],
            work=work,
        )
        result = store.commits([commit])[0]
        if result == "ok":
            return MethodResult(ReturnStatus.OK, job, joborder.path_text(new))
        if result == "missing":
            return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job)
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, "the job kept conflicting")


def clear(store: Store, scope: str, job: str) -> MethodResult:
    """Clear: remove an Ended or Aborted order with its state, history and index entries.

    The job's last sequence is kept in `sfc:retired:{S}` for 30 days, so a job stored again
    under the same id continues it and no command id is ever reused.
    """
    try:
        keys.check_scope(scope)
        keys.check_job(job)
    except keys.KeyError_ as e:
        return MethodResult(ReturnStatus.INVALID_REQUEST, job, str(e))
    for _ in range(STORE_RETRIES):
        _, records = store.load(scope, [job])
        record = records[job]
        order = None if record is None else decode_order(record.order)
        status = joborder.allowed("Clear", order)
        if status != ReturnStatus.OK or record is None or order is None:
            where = "" if order is None else f"the order is {joborder.path_text(order)}"
            return MethodResult(status, job, where)
        state = state_decoder.decode(record.state)
        result = store.clear(scope, job, record.version, state.sequence)
        if result == "ok":
            return MethodResult(ReturnStatus.OK, job, "cleared")
        if result == "missing":
            return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job)
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, "the job kept conflicting")

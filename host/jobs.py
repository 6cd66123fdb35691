"""The job-control methods that the host applies from the caller (docs/host.md, "Job orders").

Each method returns the OPC UA ReturnStatus and a message. A method that moves an order is
applied through the one apply path (`Applier.method`) as one commit, with the time read from
the server's TIME: the order change and the recipe's hold, release or cancel together.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec.structs import replace

from generated.capabilities_v1_1 import Features
from generated.history_entry_v1_0 import HistoryEntry
from generated.job_order_v1_0 import JobOrder
from generated.job_response_v1_0 import JobResponse
from generated.state_v1_5 import SfcState
from generated.work_entry_v1_0 import ResumeData, StartData
from host import joborder, keys
from host.apply import Applier, MethodCall, ScopeConfig, decode_order
from host.apply import unreadable as why_unreadable
from host.entries import (
    EntryError,
    dead_job,
    decode_history,
    encode,
    entry_ms,
    fields,
    job_named,
)
from host.joborder import ReturnStatus
from host.outbox import command_number
from host.settings import HISTORY_LIMIT_MAX, Settings
from host.store import JobRecord, Store, id_tuple
from sfc.builder import RECIPE_V1_1_0, BuildError, BuildResult, build
from sfc.codec import capabilities_decoder, state_decoder
from sfc.evolution import DEFAULT_MAX_ATTEMPTS, new_state
from sfc.graph import Graph
from sfc.migrate import READERS, state_format

RECIPE_LIMIT = 4 << 20
"""Most bytes of a recipe document the host stores."""
PARAMETERS_LIMIT = 64 << 10
"""Most bytes of one command's parameters (JSON): every equipment entry carries them."""
STORE_RETRIES = 20
SENT_SCAN = 200
"""The history entries `view` reads for when open commands went out (`sent_at`)."""
HISTORY_SCAN = 1_000
"""The last history entries an unreadable job's sequence is salvaged from (command numbers
only grow: the last entries hold the highest)."""
_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"


@dataclass(frozen=True)
class MethodResult:
    """What a method returns: the ReturnStatus, the job, and a message in words."""

    status: ReturnStatus
    job: str
    message: str = ""
    errors: tuple[BuildError, ...] = field(default=())
    conflicts: int = 0
    """Commit conflicts on the way (the method was loaded and applied again each time)."""

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


TAKEN = (
    "the job id is taken: choose another, or remove the stored job first (`sfc job clear` "
    "once it has ended, `sfc job cancel` if it has not started)"
)
"""The refusal of a Store of an id that is stored, and the way out."""


def not_built(scope: str, errors: Sequence[BuildError]) -> str:
    """The message of a recipe refused for its build `errors`: the first, and how many
    more (every one is in the result's `errors`)."""
    first = errors[0]
    return (
        f"the recipe does not build for scope {scope}: {first.code} at {first.path}: "
        f"{first.message}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
    )


def _build_for_scope(
    store: Store, scope: str, recipe: bytes, dataschema: str, shown: str
) -> Graph | MethodResult:
    """The recipe's graph, built against the scope's capabilities (`sfc:scope:{S}`); or
    ReturnStatus 16 with the build errors."""
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
        except (msgspec.DecodeError, RecursionError) as e:  # the operator's to fix
            return MethodResult(
                ReturnStatus.UNABLE_TO_ACCEPT, shown, f"the scope's capabilities do not decode: {e}"
            )
    if settings.get("equipmentHold") == "false":
        # the scope's equipment cannot hold its work: a recipe with hold logic is refused
        features = Features(equipment_hold=False)
        if caps is None:
            probe = build(recipe, None, dataschema)
            holds = (
                []
                if probe.graph is None
                else [a.name for a in probe.graph.actions.values() if a.hold or a.restart]
            )
            if holds:
                return MethodResult(
                    ReturnStatus.UNABLE_TO_ACCEPT,
                    shown,
                    f"the recipe does not build for scope {scope}: SFC015: action "
                    f"{holds[0]!r} declares hold and restart, but the scope's equipment "
                    "cannot hold its work (equipmentHold is false)",
                )
        else:
            old = caps.features
            merged = features if old is msgspec.UNSET else replace(old, equipment_hold=False)
            caps = replace(caps, features=merged)
    built = build(recipe, caps, dataschema)
    if built.graph is None and settings.get("equipmentHold") == "false":
        # the station's capabilities may allow holds: say where the refusal comes from
        errors = tuple(
            BuildError(e.code, e.path, f"{e.message} (the scope's equipmentHold is false)")
            if e.code == "SFC015"
            else e
            for e in built.errors
        )
        built = BuildResult(None, errors)
    if built.graph is None:
        return MethodResult(
            ReturnStatus.UNABLE_TO_ACCEPT, shown, not_built(scope, built.errors), built.errors
        )
    graph = built.graph
    for spec in graph.actions.values():
        for what, params in (
            ("Parameters", spec.parameters),
            ("Hold.Parameters", None if spec.hold is None else spec.hold.parameters),
            ("Restart.Parameters", None if spec.restart is None else spec.restart.parameters),
        ):
            size = 0 if not params else len(msgspec.json.encode(params))
            if size > PARAMETERS_LIMIT:
                return MethodResult(
                    ReturnStatus.UNABLE_TO_ACCEPT,
                    shown,
                    f"action {spec.name!r}: its {what} encode to {size} bytes; a command "
                    f"carries at most {PARAMETERS_LIMIT}",
                )
    return graph


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
    built = _build_for_scope(store, scope, recipe, dataschema, shown)
    if isinstance(built, MethodResult):
        return built
    graph = built
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
        problem = _misfit(order)
        if problem is not None:
            return MethodResult(ReturnStatus.INVALID_REQUEST, shown, problem)
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
            return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, TAKEN)
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, shown, "the store kept conflicting")


def _misfit(order: JobOrder) -> str | None:
    """Why `order` would not read back as stored (a field past its schema's limit, such as a
    work master id or a description too long), or None: an order that does not read back
    would make its job unreadable, and its scope's list with it."""
    try:
        decode_order(encode(order))
    except msgspec.ValidationError as e:
        return f"the order does not fit its schema: {e}"
    return None


def _checked(scope: str, job: str) -> MethodResult | None:
    try:
        keys.check_scope(scope)
        keys.check_job(job)
    except keys.KeyError_ as e:
        return MethodResult(ReturnStatus.INVALID_REQUEST, job, str(e))
    return None


def apply_method(
    store: Store,
    scope: str,
    job: str,
    method: str,
    *,
    comment: str | None = None,
    settings: Settings | None = None,
) -> MethodResult:
    """Apply one of Start, RevokeStart, Pause, Resume, Stop and Abort as one commit, with
    `settings`: the process's (`SFC_*`), read by the caller (the CLI, `sfc mcp`), so that
    what a method sends is what a worker would send; the defaults without them."""
    refused = _checked(scope, job)
    if refused is not None:
        return refused
    if method not in METHODS:
        return MethodResult(ReturnStatus.INVALID_REQUEST, job, f"unknown method {method!r}")
    if comment is not None and len(comment) > joborder.TEXT_LIMIT:
        return MethodResult(
            ReturnStatus.INVALID_REQUEST,
            job,
            f"the comment has {len(comment)} characters; at most {joborder.TEXT_LIMIT} are allowed",
        )
    applier = _applier(store, settings)
    status, message = applier.method(scope, job, MethodCall(method, comment=comment))
    return MethodResult(status, job, message, conflicts=applier.conflicts)


def _applier(store: Store, settings: Settings | None) -> Applier:
    """The apply path with the process's settings (the `SFC_*` variables, read by the
    caller), as the workers apply with theirs: the expiry grace and default attempts of the
    commands a method sends, where the scope's settings (`expiryGrace`, `maxAttempts`) do
    not say; the scope's win (ScopeConfig). Without them, the defaults.

    A method applied here does not trim the job's history (HISTORY_LIMIT_MAX): the limit
    the workers keep (`sfc serve --history-limit`) is not known in this process, and
    trimming to this one's would cut what they keep. The next worker commit trims."""
    if settings is None:
        return Applier(store.with_options(history_limit=HISTORY_LIMIT_MAX), Settings())
    own = store.with_options(
        history_limit=HISTORY_LIMIT_MAX, dedupe_ttl_ms=settings.event_dedupe_ttl
    )
    return Applier(own, settings)


METHODS = ("Start", "RevokeStart", "Pause", "Resume", "Stop", "Abort")
"""The methods that move an order in place (Update, Cancel and Clear have functions of their
own; the two requests read only)."""


def start(store: Store, scope: str, job: str, *, settings: Settings | None = None) -> MethodResult:
    """Start: NotAllowedToStart -> AllowedToStart, and queue `start`, in one commit."""
    return apply_method(store, scope, job, "Start", settings=settings)


def revoke_start(
    store: Store, scope: str, job: str, *, settings: Settings | None = None
) -> MethodResult:
    """RevokeStart: AllowedToStart -> NotAllowedToStart; a `start` already queued does nothing."""
    return apply_method(store, scope, job, "RevokeStart", settings=settings)


def pause(
    store: Store,
    scope: str,
    job: str,
    comment: str | None = None,
    *,
    settings: Settings | None = None,
) -> MethodResult:
    """Pause: Running -> Interrupted/Suspended; the recipe is held in the same commit, and the
    hold commands of actions with Hold logic go out with it."""
    return apply_method(store, scope, job, "Pause", comment=comment, settings=settings)


def resume(
    store: Store,
    scope: str,
    job: str,
    comment: str | None = None,
    *,
    settings: Settings | None = None,
) -> MethodResult:
    """Resume: Interrupted -> Running; the recipe is released in the same commit."""
    return apply_method(store, scope, job, "Resume", comment=comment, settings=settings)


def stop(
    store: Store,
    scope: str,
    job: str,
    comment: str | None = None,
    *,
    settings: Settings | None = None,
) -> MethodResult:
    """Stop: Running or Interrupted -> Ended; the recipe is cancelled with reason stopped."""
    return apply_method(store, scope, job, "Stop", comment=comment, settings=settings)


def abort(
    store: Store,
    scope: str,
    job: str,
    comment: str | None = None,
    *,
    settings: Settings | None = None,
) -> MethodResult:
    """Abort: -> Aborted; a running recipe is cancelled with reason aborted."""
    return apply_method(store, scope, job, "Abort", comment=comment, settings=settings)


def update(
    store: Store,
    scope: str,
    job: str,
    *,
    recipe: bytes | None = None,
    priority: int | None = None,
    description: str | None = None,
    work_master_id: str | None = None,
    dataschema: str = RECIPE_V1_1_0,
    settings: Settings | None = None,
) -> MethodResult:
    """Update: replace the order of a job that has not started (NotAllowedToStart or
    AllowedToStart). A new recipe is built against the scope's capabilities first and
    refused with 16 and its errors; the job's command sequence goes on."""
    refused = _checked(scope, job)
    if refused is not None:
        return refused
    if priority is not None and not 0 <= priority <= 1_000_000:
        return MethodResult(ReturnStatus.INVALID_REQUEST, job, "priority must be 0 to 1000000")
    graph = None
    if recipe is not None:
        built = _build_for_scope(store, scope, recipe, dataschema, job)
        if isinstance(built, MethodResult):
            return built
        graph = built
        store.put_recipe(graph.recipe_hash, recipe)
    for _ in range(STORE_RETRIES):
        record = store.job(scope, job)
        if record is None:
            return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job, "no such job order")
        order = decode_order(record.order)
        changes: dict[str, object] = {}
        if priority is not None:
            changes["priority"] = priority
        if description is not None:
            changes["description"] = description
        if work_master_id is not None:
            changes["work_master_id"] = work_master_id
        state = None
        if graph is not None:
            changes["recipe_hash"] = graph.recipe_hash
            changes["dataschema"] = dataschema
            old = state_decoder.decode(record.state)
            state = replace(new_state(graph, job, scope), sequence=old.sequence)
        new = replace(order, **changes)
        problem = _misfit(new)
        if problem is not None:
            return MethodResult(ReturnStatus.INVALID_REQUEST, job, problem)
        call = MethodCall("Update", order=new, state=state)
        status, message = _applier(store, settings).method(scope, job, call)
        return MethodResult(status, job, message)
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, "the job kept changing")


def job_response(store: Store, scope: str, job: str) -> tuple[MethodResult, JobResponse | None]:
    """RequestJobResponseByJobOrderID: the job response of any stored order."""
    refused = _checked(scope, job)
    if refused is not None:
        return refused, None
    record = store.job(scope, job)
    if record is None:
        return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job, "no such job order"), None
    order = decode_order(record.order)
    return MethodResult(ReturnStatus.OK, job, joborder.path_text(order)), joborder.job_response(
        order
    )


def job_responses(
    store: Store, scope: str, states: Sequence[str]
) -> tuple[MethodResult, list[JobResponse]]:
    """RequestJobResponseByJobOrderState: the responses of every order of the scope whose
    state (or state path, e.g. `Ended/Completed`) is one of `states`."""
    try:
        keys.check_scope(scope)
    except keys.KeyError_ as e:
        return MethodResult(ReturnStatus.INVALID_REQUEST, "", str(e)), []
    known = set(joborder.STATE_NUMBERS) | {
        f"{s}/{sub}" for s, subs in joborder.SUBSTATES.items() for sub in subs
    }
    unknown = [s for s in states if s not in known]
    if unknown or not states:
        return (
            MethodResult(
                ReturnStatus.INVALID_REQUEST,
                "",
                f"unknown state {', '.join(unknown) or '(none given)'}; known: "
                f"{', '.join(sorted(known))}",
            ),
            [],
        )
    wanted = set(states)
    out: list[JobResponse] = []
    for order in orders(store, scope):
        if joborder.state_of(order) in wanted or joborder.path_text(order) in wanted:
            out.append(joborder.job_response(order))
    return MethodResult(ReturnStatus.OK, "", f"{len(out)} order(s)"), out


@dataclass(frozen=True)
class Listed:
    """One stored job of a scope's list: its order, and why its stored order or state
    cannot be read (None when both can). `order` is None when the order cannot be read."""

    job: str
    order: JobOrder | None
    unreadable: str | None = None


def listing(store: Store, scope: str, chunk: int = 500) -> list[Listed]:
    """Every stored job of the scope, oldest first. A job whose stored order or state cannot
    be read is listed with why (`host.apply.unreadable`, or that a newer sfc wrote it), so
    that one such job does not hide the others: `sfc job clear --unreadable` removes it."""
    jobs = store.order_ids(scope)
    out: list[Listed] = []
    for i in range(0, len(jobs), chunk):
        _, records = store.load(scope, jobs[i : i + chunk])
        out += [_listed(job, r) for job, r in records.items() if r is not None]
    return out


def _listed(job: str, record: JobRecord) -> Listed:
    why = why_unreadable(record)
    if why is not None:
        why = _newer(record) or why
    try:
        order: JobOrder | None = decode_order(record.order)
    except msgspec.DecodeError:
        order = None
    return Listed(job, order, why)


def elsewhere_many(
    store: Store, scope: str, job_ids: Sequence[str], registered: Sequence[str] | None = None
) -> dict[str, list[str]]:
    """`elsewhere` for several jobs, in one pass: every EXISTS of every job in one
    pipeline per node (`Store.held`)."""
    scopes = store.scopes() if registered is None else registered
    others = [s for s in scopes if s != scope]
    unique = list(dict.fromkeys(job_ids))
    found = store.stored_jobs([(s, j) for j in unique for s in others])
    return {j: [s for s in others if (s, j) in found] for j in unique}


def orders(store: Store, scope: str, chunk: int = 500) -> list[JobOrder]:
    """Every stored order of the scope that can be read, oldest first (`listing` also
    gives those that cannot)."""
    return [j.order for j in listing(store, scope, chunk) if j.order is not None]


def cancel(store: Store, scope: str, job: str) -> MethodResult:
    """Cancel: remove an order that has not started (NotAllowedToStart or AllowedToStart)."""
    return _remove(store, scope, job, "Cancel")


def clear(store: Store, scope: str, job: str, unreadable: bool = False) -> MethodResult:
    """Clear: remove an Ended or Aborted order with its state, history and index entries.

    The job's last sequence is kept in `sfc:retired:{S}` for 30 days, so a job stored again
    under the same id continues it and no command id is ever reused.

    With `unreadable`, a job whose stored order or state cannot be read (written by another
    program, or by hand) is removed whatever its state: no worker can evaluate it, and its
    entries go dead for ever. Its last sequence is salvaged from the raw state and its
    history, and its waits are found by a scan. A job that can be read is cleared as usual.
    """
    if unreadable:
        refused = _checked(scope, job)
        if refused is not None:
            return refused
        record = store.job(scope, job)
        if record is not None and why_unreadable(record) is not None:
            newer = _newer(record)
            if newer is not None:
                return MethodResult(
                    ReturnStatus.INVALID_REQUEST, job, f"{newer}; nothing was removed"
                )
            return _remove_unreadable(store, scope, job, record)
    return _remove(store, scope, job, "Clear")


def unreadable_jobs(store: Store, scope: str, job_ids: Sequence[str]) -> dict[str, str]:
    """Of `job_ids`, those whose stored order or state cannot be read, with why."""
    _, records = store.load(scope, job_ids)
    out: dict[str, str] = {}
    for job, record in records.items():
        why = None if record is None else why_unreadable(record)
        if why is not None:
            out[job] = why
    return out


def _newer(record: JobRecord) -> str | None:
    """Why a newer sfc may have written the job (during an upgrade: such a job is healthy,
    and must not be removed as unreadable), or None: its state has a format this build
    does not know, or its order (which has no format) a field this build does not know."""
    found = state_format(record.state)
    if found is not None and found not in READERS:
        return f"its state is format {found!r}, which this sfc does not read: a newer sfc wrote it"
    try:
        decode_order(record.order)
    except msgspec.DecodeError as e:
        if "unknown field" in str(e) and _order_but_for_new_fields(record.order):
            return (
                f"its order is one with fields this sfc does not know ({e}): a newer sfc "
                "may have written it; if none did, mend the order by hand"
            )
    return None


_ORDER_FIELDS = {f.encode_name for f in msgspec.structs.fields(JobOrder)}


def _order_but_for_new_fields(raw: bytes) -> bool:
    """Whether `raw` is a good order of this build once its unknown fields are left out
    (a newer sfc's order), not garbage that happens to have a field."""
    try:
        doc = msgspec.json.decode(raw)
        if not isinstance(doc, dict):
            return False
        decode_order(msgspec.json.encode({k: v for k, v in doc.items() if k in _ORDER_FIELDS}))
    except msgspec.DecodeError:
        return False
    return True


_SEQUENCE = re.compile(rb'"sequence"\s*:\s*(\d{1,19})')


def salvaged_sequence(raw_state: bytes, history: Sequence[Mapping[bytes, bytes]]) -> int:
    """The highest command number a job whose state cannot be read may have used: its raw
    state's `sequence`, if that much can be found, and every command id its history
    entries (those that can be read) say were sent."""
    best = max((int(m) for m in _SEQUENCE.findall(raw_state)), default=0)
    for raw in history:
        try:
            entry = decode_history(raw)
        except (EntryError, msgspec.DecodeError):
            continue
        for line in entry.sent or ():
            number = command_number(line.rpartition(" ")[2])
            if number is not None:
                best = max(best, number)
    return best


def _remove_unreadable(store: Store, scope: str, job: str, record: JobRecord) -> MethodResult:
    for _ in range(STORE_RETRIES):
        history = [f for _, f in store.history(scope, job, HISTORY_SCAN)]
        # never below what the id retired before (a clear's record lives 30 days): the job
        # may have been stored again under it, and sent nothing that the history still shows
        retired = store.retired_sequence(scope, job)
        sequence = max(salvaged_sequence(record.state, history), int(retired or 0))
        result = store.clear(scope, job, record.version, sequence, store.waits_of(scope, job))
        if result == "ok":
            return MethodResult(
                ReturnStatus.OK, job, f"removed (unreadable; sequence {sequence} retired)"
            )
        if result == "missing":
            return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job)
        again = store.job(scope, job)
        if again is None:
            return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job)
        if why_unreadable(again) is None:  # mended, or cleared and stored again meanwhile
            return _remove(store, scope, job, "Clear")
        record = again
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, "the job kept conflicting")


def _remove(store: Store, scope: str, job: str, method: str) -> MethodResult:
    refused = _checked(scope, job)
    if refused is not None:
        return refused
    for _ in range(STORE_RETRIES):
        _, records = store.load(scope, [job])
        record = records[job]
        order = None if record is None else decode_order(record.order)
        status = joborder.allowed(method, order)
        if status != ReturnStatus.OK or record is None or order is None:
            if order is None:
                return MethodResult(status, job, "no such job order")
            where = f"{method} is not allowed: the order is {joborder.path_text(order)}"
            return MethodResult(status, job, where + _removal_hint(method, order, record))
        state = state_decoder.decode(record.state)
        result = store.clear(scope, job, record.version, state.sequence)
        if result == "ok":
            return MethodResult(ReturnStatus.OK, job, "removed")
        if result == "missing":
            return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job)
    return MethodResult(ReturnStatus.UNABLE_TO_ACCEPT, job, "the job kept conflicting")


def recipe_actions(store: Store, record: JobRecord) -> list[str]:
    """The action names of the job's recipe, sorted (none when its recipe is missing or does
    not build), for a refusal that names what the recipe has."""
    order = decode_order(record.order)
    text = store.recipe_text(order.recipe_hash)
    built = None if text is None else build(text, None, order.dataschema)
    return [] if built is None or built.graph is None else sorted(built.graph.actions)


def _removal_hint(method: str, order: JobOrder, record: JobRecord | None) -> str:
    """What to do instead of a Cancel or Clear refused in the order's state: a running or
    paused order is stopped or aborted first; a stored one is cancelled, an ended one
    cleared; a job whose state cannot be read is cleared with --unreadable."""
    why = None if record is None else why_unreadable(record)
    if why is not None:
        return f"; its stored state cannot be read ({why}): `sfc job clear JOB --unreadable` removes it"
    top = joborder.state_of(order)
    if top in ("Running", "Interrupted"):
        return "; stop or abort it first (`sfc job stop` or `sfc job abort`), then clear it"
    if method == "Clear" and top in joborder.ALLOWED_IN["Cancel"]:
        return "; it has not started: `sfc job cancel` removes it"
    if method == "Cancel" and top in joborder.ALLOWED_IN["Clear"]:
        return "; it has ended: `sfc job clear` removes it"
    return ""


def redispatch(
    store: Store,
    scope: str,
    job: str,
    action: str | None = None,
    force: bool = False,
    *,
    settings: Settings | None = None,
) -> MethodResult:
    """Queue a `resume` entry: the core re-issues open work the host does not know as live
    (every open command id counts as live except the named action's; none without one).

    A push command sent again uses up an attempt (spec 02, SfcResume), so one on its last
    attempt times out at once, and the job faults: that is refused unless `force`. The
    message says what each push sent again costs; an action without MaxAttempts has the
    scope's, else `settings`' (SFC_MAX_ATTEMPTS), as the worker that sends it."""
    refused = _checked(scope, job)
    if refused is not None:
        return refused
    record = store.job(scope, job)
    if record is None:
        return MethodResult(ReturnStatus.UNKNOWN_JOB_ORDER_ID, job, "no such job order")
    order = decode_order(record.order)
    if joborder.ended(order) or not joborder.has_response(order):
        # nothing is open: a resume would be absorbed, after an `ok` that misled
        return MethodResult(
            ReturnStatus.INVALID_JOB_ORDER_STATUS,
            job,
            f"the order is {joborder.path_text(order)}: it has no work to send again",
        )
    text = store.recipe_text(order.recipe_hash)
    built = None if text is None else build(text, None, order.dataschema)
    graph = None if built is None else built.graph
    names = set() if graph is None else set(graph.actions)
    if action is not None and action not in names:
        return MethodResult(
            ReturnStatus.INVALID_REQUEST,
            job,
            f"the recipe has no action {action!r}"
            + (f"; it has {', '.join(sorted(names))}" if names else ""),
        )
    costs: list[str] = []
    last: list[str] = []
    if graph is not None:
        state = state_decoder.decode(record.state)
        default = ScopeConfig.of(store.scope_settings(scope), settings or Settings()).max_attempts
        for name, rec in sorted(state.actions.items()):
            if (action is not None and name != action) or rec.status != "open":
                continue
            if rec.work != "push" or rec.hold == "open" or name not in graph.actions:
                continue  # announced again under its id, at no cost
            spec = graph.actions[name]
            limit = spec.max_attempts if spec.max_attempts is not None else default
            if rec.attempt >= limit:
                last.append(f"{name} is on its last attempt ({rec.attempt} of {limit})")
            else:
                costs.append(f"{name} goes out as attempt {rec.attempt + 1} of {limit}")
    if last and not force:
        return MethodResult(
            ReturnStatus.INVALID_REQUEST,
            job,
            f"{'; '.join(last)}: sending it again uses an attempt, and with none left the "
            "action times out at once and the job faults (`sfc job redispatch --force` sends "
            "it anyway)",
        )
    data = ResumeData(job=job, action=msgspec.UNSET if action is None else action)
    entry_id = store.add_work(scope, fields("resume", data))
    said = costs + [f"{x}: it times out" for x in last]
    return MethodResult(
        ReturnStatus.OK,
        job,
        f"queued resume {entry_id}" + (f" ({'; '.join(said)})" if said else ""),
    )


@dataclass(frozen=True)
class GroupRead:
    """How far one consumer group of the equipment stream (an adapter: `sfc equipment`,
    `sfc bridge mqtt`) has read one command: `unread` (not delivered to it yet; `waiting`
    entries of the stream are, when the server can tell), `read` (delivered to `consumer`
    `idle_ms` ago, `deliveries` times, and not acknowledged: the consumer last read the
    stream `consumer_idle_ms` ago), `done` (acknowledged: taken; `sfc equipment` acknowledges
    in the round trip that writes its answer, `sfc bridge mqtt` once it published the
    command), `trimmed` (the command's entry is not on the stream any more: `read_past`
    says whether the group had read past it, from its `last_delivered` entry; the worker's
    trim removes only what every group acknowledged, but a trim by hand (MAXLEN), or a group
    made since, leaves a group that never read it) or `unknown` (not found among the first
    EQUIPMENT_SCAN entries of the millisecond it went out)."""

    group: str
    status: str
    consumer: str | None = None
    idle_ms: int | None = None
    waiting: int | None = None
    deliveries: int | None = None
    consumer_idle_ms: int | None = None
    at_least: bool = False
    """`waiting` is a count that stopped at UNREAD_COUNT: at least that many wait."""
    last_delivered: str | None = None
    """Of `trimmed`: the group's last delivered entry (XINFO GROUPS)."""
    read_past: bool | None = None
    """Of `trimmed`: True when the group's last delivered entry is of a later millisecond
    than the command went out, False when it is before that millisecond (the entry was
    trimmed before the group read it), None when it is of that millisecond (the entry's
    id is not known closer: it cannot be told)."""


@dataclass(frozen=True)
class OutCommand:
    """An open command of the job: when it went out, and how far each adapter read it."""

    command_id: str
    since: int
    entry_id: str | None
    """Its equipment stream entry (None when it was not found: trimmed, or past
    EQUIPMENT_SCAN)."""
    reads: list[GroupRead] = field(default_factory=list)
    answer: str | None = None
    """A work entry of the job, pending with a worker, that answers it (not applied yet)."""


@dataclass(frozen=True)
class DeadEntry:
    """A dead entry of the scope that names the job (`sfc work dead` lists them)."""

    id: str
    reason: str
    kind: str
    entry: str
    """The id the entry had on the work stream."""


@dataclass(frozen=True)
class JobView:
    """Everything `sfc job show` tells about one job."""

    order: JobOrder | None
    """None when the stored order cannot be read (`unreadable` says why)."""
    state: SfcState | None
    """None when the stored state (or order) cannot be read (`unreadable` says why)."""
    graph: Graph | None
    graph_problem: str
    version: str
    due: int | None
    """The due index's entry (None: not on it)."""
    active: bool
    history: list[tuple[str, HistoryEntry]]
    pending: list[dict[str, Any]]
    """Work entries of this job that are read and not committed yet."""
    response: JobResponse | None
    unread: int = 0
    """Work entries of the scope that no worker has read yet (an answer for this job may be
    among them): more than a few, and no worker serves the scope, or none keeps up."""
    sent_at: dict[str, int] = field(default_factory=dict)
    """When each command id went out last (push, hold, restart, await), from the last
    SENT_SCAN history entries, however few are shown."""
    unreadable: str | None = None
    """Why the stored order or state cannot be read; None when both can."""
    out: list[OutCommand] = field(default_factory=list)
    """The job's open commands (none once it ended), oldest first."""
    equipment_groups: list[dict[str, Any]] = field(default_factory=list)
    """The consumer groups of the scope's equipment stream (`Store.show_reads`): none,
    and no adapter has ever read the scope's commands."""
    dead: list[DeadEntry] = field(default_factory=list)
    """The dead entries naming the job among the last `scanned` of the scope, newest first."""
    paused_since: int | None = None
    last_change: int | None = None
    """When the last history entry of the job was written (of the SENT_SCAN read, however
    few are shown): an order allowed to start has waited since then."""
    """When the order was paused (Interrupted), from the state's hold, else the history."""
    job: str = ""
    scope: str = ""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """The scope's attempts of an action that sets none (its `maxAttempts`, else the
    default), as the workers evolve it: the explainer's "attempt N of M"."""
    now: int = 0
    """The server's time when the job was read, ms."""
    scanned: int = 0
    """How many of the scope's last dead entries were read for those naming the job (at
    most DEAD_SCAN)."""


PENDING_SCAN = 1_000
"""The oldest pending work entries of the scope `view` reads for those of the job."""
DEAD_SCAN = 200
"""The last dead entries of the scope `view` reads for those naming the job (each is read
whole: a dead entry may carry 64 KiB of parameters)."""
EQUIPMENT_PROBE = 50
"""The equipment entries `view` reads first from the millisecond a command went out, to find
its entry (the commit's commands are among the first of that millisecond, after other
commits' of the same millisecond: a sweep that retries many jobs at once writes more)."""
EQUIPMENT_SCAN = 5_000
"""The most equipment entries of one millisecond `view` reads for a command's entry, in
pages of EQUIPMENT_PAGE: past them the command's read status is `unknown`."""
EQUIPMENT_PAGE = 500
"""The equipment entries of a crowded millisecond `view` reads on in one round trip."""
UNREAD_COUNT = 100
"""The most equipment entries `view` counts after a group's last delivered one, where the
server cannot tell the group's lag (an entry was deleted by hand)."""


def view(store: Store, scope: str, job: str, history: int = 10) -> JobView | None:
    """The job's order, state, indexes, last history entries and pending entries; its open
    commands with how far the scope's adapters read them, and the dead entries naming it.
    A stored order or state that cannot be read is None, with why: the rest is shown.

    It reads in a few pipelines: `Store.show_reads` (the job, its history and indexes,
    the scope's settings and streams), the recipe, the fields of the work entries pending,
    the equipment entries of each millisecond an open command went out, and, as needed,
    the rest of a crowded millisecond and who holds the commands delivered."""
    seen = store.show_reads(scope, job, max(history, SENT_SCAN), DEAD_SCAN, PENDING_SCAN)
    record = seen.record
    if record is None:
        return None
    why = why_unreadable(record)
    if why is not None:
        why = _newer(record) or why
    order: JobOrder | None = None
    state: SfcState | None = None
    with contextlib.suppress(msgspec.DecodeError):
        order = decode_order(record.order)
    with contextlib.suppress(msgspec.DecodeError):
        state = state_decoder.decode(record.state)
    graph, problem = None, "its order cannot be read"
    if order is not None:
        problem = ""
        text = store.recipe_text(order.recipe_hash)
        if text is None:
            problem = f"recipe {order.recipe_hash[:12]} is not stored"
        else:
            built = build(text, None, order.dataschema)
            if built.graph is None:
                problem = f"recipe {order.recipe_hash[:12]} does not build"
            graph = built.graph
    rows = seen.history
    read: list[tuple[str, HistoryEntry]] = []
    for entry_id, raw in rows:
        try:
            read.append((entry_id, decode_history(raw)))
        except EntryError:
            continue
    entries = read[-history:] if history > 0 else []
    sent_at: dict[str, int] = {}
    sent_in: dict[str, str] = {}  # the history entry of the commit that sent it
    for entry_id, h in read:
        for line in h.sent or ():
            kind, _, command_id = line.partition(" ")
            if kind in ("push", "hold", "restart", "await"):
                sent_at[command_id] = h.at
                sent_in[command_id] = entry_id
    pending = [
        p
        for p in store.pending_entries(scope, PENDING_SCAN, seen.pending)
        if job_named(p["id"], p["fields"]) == job
    ]
    open_ids = [c for c in _open_commands(state) if c in sent_at]
    ms_of = {c: entry_ms(sent_in[c]) for c in open_ids}
    times = sorted(set(ms_of.values()))
    first = store.equipment_from(scope, times, EQUIPMENT_PROBE)
    found = _find_entries(store, scope, ms_of, dict(zip(times, first, strict=True)))
    out = _reads(
        store,
        scope,
        [(c, *found[c]) for c in open_ids],
        sent_at,
        seen.equipment_groups,
        seen.group_names,
        _answers(pending),
        ms_of,
    )
    return JobView(
        order=order,
        state=state,
        graph=graph,
        graph_problem=problem,
        version=record.version,
        due=seen.due,
        active=seen.active,
        history=entries,
        pending=pending,
        response=None if order is None else joborder.job_response(order),
        unread=seen.unread,
        sent_at=sent_at,
        unreadable=why,
        out=out,
        equipment_groups=seen.equipment_groups,
        dead=[d for d in (_dead_entry(i, f, job) for i, f in seen.dead) if d is not None],
        paused_since=_paused_since(order, state, read),
        last_change=read[-1][1].at if read else None,
        job=job,
        scope=scope,
        max_attempts=ScopeConfig.of(seen.settings, Settings()).max_attempts,
        now=seen.now,
        scanned=len(seen.dead),
    )


def _open_commands(state: SfcState | None) -> list[str]:
    """The job's open command ids, work and hold: none once it ended (the core leaves the
    records of work it withdrew as they were), none of work the equipment held, and none
    of an await's notice: no adapter answers it, an event does (the explainer shows what
    it waits for)."""
    if state is None or state.status != "running":
        return []
    return [
        cid
        for rec in state.actions.values()
        if rec.status == "open" and rec.hold != "held"  # held work was withdrawn
        for cid in (
            rec.command_id if rec.work != "await" else None,
            rec.hold_command_id if rec.hold == "open" else None,
        )
        if cid
    ]


def _find_entries(
    store: Store,
    scope: str,
    ms_of: Mapping[str, int],
    first: Mapping[int, Sequence[tuple[str, Mapping[bytes, bytes]]]],
) -> dict[str, tuple[str | None, str]]:
    """Each command's equipment entry, of the millisecond it went out (`ms_of`), and, where
    none is found, why: `trimmed` (every entry of that millisecond was read) or `unknown`
    (EQUIPMENT_SCAN entries of it were read, and more are there). `first` is the first
    page read of each millisecond; the rest is read on, in pages, while the pages are full
    and still of that millisecond."""
    found: dict[str, tuple[str | None, str]] = {}
    pages = dict(first)
    read = {ms: len(rows) for ms, rows in pages.items()}
    full = {ms: len(rows) >= EQUIPMENT_PROBE for ms, rows in pages.items()}
    while True:
        wanted = {c: ms for c, ms in ms_of.items() if c not in found}
        for ms, rows in pages.items():
            for entry_id, f in rows:
                c = _command_of(f)
                if c is not None and wanted.get(c) == ms:
                    found[c] = (entry_id, "")
        more: list[tuple[str, int]] = []
        for ms, rows in pages.items():
            open_here = [c for c, at in ms_of.items() if at == ms and c not in found]
            if not open_here:
                continue
            on = full[ms] and rows and entry_ms(rows[-1][0]) == ms
            if on and read[ms] < EQUIPMENT_SCAN:
                more.append((rows[-1][0], ms))
            else:
                why = "unknown" if on else "trimmed"
                found.update((c, (None, why)) for c in open_here)
        if not more:
            return found
        got = store.equipment_after(scope, more, EQUIPMENT_PAGE)
        pages = {ms: rows for (_, ms), rows in zip(more, got, strict=True)}
        for ms, rows in pages.items():
            read[ms] += len(rows)
            full[ms] = len(rows) >= EQUIPMENT_PAGE


def _command_of(f: Mapping[bytes, bytes]) -> str | None:
    """The command id an equipment entry (or a work entry's answer) carries, or None."""
    try:
        data = msgspec.json.decode(f.get(b"data", b"{}"))
    except (msgspec.DecodeError, RecursionError):
        return None
    c = data.get("commandId") if isinstance(data, dict) else None
    return c if isinstance(c, str) else None


def _answers(pending: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The job's pending work entries that answer a command (a `kind` of `answer`), by the
    command id they answer: read by a worker, not applied yet."""
    out: dict[str, str] = {}
    for p in pending:
        f = p["fields"]
        c = _command_of(f) if f.get(b"kind") == b"answer" else None
        if c is not None:
            out.setdefault(c, p["id"])
    return out


def _reads(
    store: Store,
    scope: str,
    commands: Sequence[tuple[str, str | None, str]],
    sent_at: Mapping[str, int],
    groups: Sequence[Mapping[str, Any]],
    names: Sequence[bytes],
    answers: Mapping[str, str],
    ms_of: Mapping[str, int],
) -> list[OutCommand]:
    """How far each group of the equipment stream read each open command (id, entry, why
    its entry was not found): a command past a group's last delivered id is unread by it;
    one delivered is pending with a consumer (one more round trip, for those only) or
    acknowledged; one trimmed is past the group's last delivered id or not (`_read_past`,
    by the millisecond it went out, `ms_of`). `names` are the groups' names as stored (a
    name shown may have bytes escaped, `Store._name`)."""
    raw = dict(zip((g["name"] for g in groups), names, strict=True))
    delivered = [
        (g["name"], entry)
        for _, entry, _ in commands
        if entry is not None
        for g in groups
        if id_tuple(entry) <= id_tuple(g["lastDelivered"])
    ]
    asked = [(raw[name], entry) for name, entry in delivered]
    held = dict(zip(delivered, store.equipment_pending(scope, asked), strict=True))
    # where the server cannot tell a group's lag (an entry deleted by hand), the commands
    # after its last delivered one are counted, up to UNREAD_COUNT, for those that wait
    waiting = {g["name"]: g["lag"] for g in groups}
    unknown = [
        {"name": raw[g["name"]], "lag": None, "last-delivered-id": g["lastDelivered"]}
        for g in groups
        if g["lag"] is None
        and any(e is not None and (g["name"], e) not in held for _, e, _ in commands)
    ]
    waiting.update(store.unread_of(scope, unknown, UNREAD_COUNT) if unknown else {})
    out = []
    for cid, entry, why in commands:
        reads = []
        for g in groups:
            name = g["name"]
            if entry is None and why == "trimmed":
                last = g["lastDelivered"]
                past = _read_past(last, ms_of[cid])
                reads.append(GroupRead(name, why, last_delivered=last, read_past=past))
            elif entry is None:
                reads.append(GroupRead(name, why))
            elif (name, entry) not in held:
                n = waiting[name]
                capped = g["lag"] is None and n is not None and n >= UNREAD_COUNT
                reads.append(GroupRead(name, "unread", waiting=n, at_least=capped))
            else:
                p = held[(name, entry)]
                if p is None:
                    reads.append(GroupRead(name, "done"))
                else:
                    reads.append(
                        GroupRead(
                            name,
                            "read",
                            p["consumer"],
                            p["idleMs"],
                            deliveries=p["deliveries"],
                            consumer_idle_ms=p.get("consumerIdleMs"),
                        )
                    )
        out.append(OutCommand(cid, sent_at[cid], entry, reads, answers.get(cid)))
    return sorted(out, key=lambda o: o.since)


def _read_past(last_delivered: str, ms: int) -> bool | None:
    """Whether a group had read past a command whose entry was trimmed, from its last
    delivered entry and the millisecond the command went out (its entry was of that
    millisecond: its id is not known closer): past it when the last delivered entry is of
    a later millisecond; not when it is of an earlier one (the entry was trimmed before the
    group read it); None, cannot be told, when it is of that millisecond."""
    at = id_tuple(last_delivered)[0]
    return None if at == ms else at > ms


def _dead_entry(entry_id: str, f: Mapping[bytes, bytes], job: str) -> DeadEntry | None:
    """The dead entry, if it names `job`: as a work entry, or, malformed, by its data's
    `job` (as `sfc work dead` names it)."""
    if dead_job(entry_id, f) != job:
        return None

    def text(name: bytes) -> str:
        return f.get(name, b"").decode(errors="replace")

    return DeadEntry(entry_id, text(b"reason"), text(b"kind"), text(b"entry"))


def _paused_since(
    order: JobOrder | None, state: SfcState | None, read: Sequence[tuple[str, HistoryEntry]]
) -> int | None:
    """When a paused (Interrupted) order was paused: its recipe's hold, which the pause set
    in the same commit; else the last applied Pause of the history read (SENT_SCAN
    entries, however few are shown)."""
    if order is None or not order.state or order.state[0].state_text != "Interrupted":
        return None
    if state is not None and state.held_at is not None:
        return int(state.held_at)
    paused = [h.at for _, h in read if h.event == "Pause" and h.disposition == "applied"]
    return paused[-1] if paused else None

"""The job-control methods that the host applies from the caller (docs/host.md, "Job orders").

Each method returns the OPC UA ReturnStatus and a message. A method that moves an order is
applied through the one apply path (`Applier.method`) as one commit, with the time read from
the server's TIME: the order change and the recipe's hold, release or cancel together.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
from msgspec.structs import replace

from generated.capabilities_v1_1 import Features
from generated.job_order_v1_0 import JobOrder
from generated.job_response_v1_0 import JobResponse
from generated.work_entry_v1_0 import ResumeData, StartData
from host import joborder, keys
from host.apply import Applier, MethodCall, ScopeConfig, decode_order
from host.apply import unreadable as why_unreadable
from host.entries import (
    EntryError,
    decode_history,
    encode,
    fields,
)
from host.joborder import ReturnStatus
from host.jobview import listing, newer_writer
from host.outbox import command_number
from host.settings import HISTORY_LIMIT_MAX, Settings
from host.store import JobRecord, Store
from sfc.builder import RECIPE_V1_2_0, BuildError, BuildResult, build
from sfc.codec import capabilities_decoder
from sfc.evolution import new_state
from sfc.graph import Graph
from sfc.migrate import read_state

RECIPE_LIMIT = 4 << 20
"""Most bytes of a recipe document the host stores."""
PARAMETERS_LIMIT = 64 << 10
"""Most bytes of one command's parameters (JSON): every equipment entry carries them."""
STORE_RETRIES = 20
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
    dataschema: str = RECIPE_V1_2_0,
) -> MethodResult:
    """Store (start=False) or StoreAndStart one job order of `recipe` in `scope`. Refused
    with ReturnStatus 16, nothing written, when the recipe does not build for the scope's
    capabilities or the id is stored; an id stored again after Clear reuses no command id."""
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
    """The apply path with the process's settings (defaults without), as the workers
    apply with theirs; it trims history only past HISTORY_LIMIT_MAX (the workers' limit
    is not known here)."""
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
    dataschema: str = RECIPE_V1_2_0,
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
            old = read_state(record.state)
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
    """Remove an Ended or Aborted order with its state, history and index entries, keeping
    its last sequence in `sfc:retired:{S}` for 30 days. With `unreadable`, also a job that
    cannot be read, whatever its state."""
    if unreadable:
        refused = _checked(scope, job)
        if refused is not None:
            return refused
        record = store.job(scope, job)
        if record is not None and why_unreadable(record) is not None:
            newer = newer_writer(record)
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
        state = read_state(record.state)
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
    """Queue a `resume` entry: the core re-issues the named action's open work (all open
    work without one). A push on its last attempt would fault the job: refused unless
    `force`. The message says what each push sent again costs."""
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
        state = read_state(record.state)
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

"""The job order: the ISA-95 job order state machine as a table of data (pure).

OPC 10031-4 (ISA-95 job control), as OPC 40001-3 (Machinery Jobs) uses it; docs/host.md
("Job orders"). The order's state is a path: a state and, where it has one, its sub-state,
each with its StateNumber. There is no Cancelled state: Cancel and Clear remove the order.

Every method returns the OPC UA ReturnStatus, a UInt64 bitmap (`ReturnStatus`). The host
applies a method as one commit; this module only says whether it is allowed and what the
order becomes.
"""

from __future__ import annotations

from enum import IntFlag
from typing import Literal

from msgspec import UNSET
from msgspec.structs import replace

from generated.job_order_v1_0 import JobOrder, OrderComment, OrderResult, OrderStateElement
from generated.job_response_v1_0 import JobResponse, ResponseParameter
from generated.step_result_v1_0 import Cancelled, Complete, Continuation, FaultContinuation

STATE_NUMBERS: dict[str, int] = {
    "NotAllowedToStart": 1,
    "AllowedToStart": 2,
    "Running": 3,
    "Interrupted": 4,
    "Ended": 5,
    "Aborted": 6,
}
"""The StateNumber of each state of ISA95JobOrderStateMachineType."""
SUBSTATE_NUMBERS: dict[str, int] = {
    "Waiting": 1,
    "Ready": 2,
    "Loaded": 3,
    "Held": 1,
    "Suspended": 2,
    "Completed": 1,
    "Closed": 2,
}
"""The StateNumber of each sub-state in its sub-state machine (prepare, interrupted, ended)."""
SUBSTATES: dict[str, tuple[str, ...]] = {
    "NotAllowedToStart": ("Waiting", "Ready", "Loaded"),
    "AllowedToStart": ("Waiting", "Ready", "Loaded"),
    "Interrupted": ("Held", "Suspended"),
    "Ended": ("Completed", "Closed"),
}
COMMENT_LIMIT = 100
"""Most comments an order keeps; the oldest go first."""
TEXT_LIMIT = 4096
"""Most characters of a comment or a fault message (the order's schema)."""


class ReturnStatus(IntFlag):
    """OPC UA ReturnStatus of the ISA-95 job control methods."""

    OK = 1
    UNKNOWN_JOB_ORDER_ID = 2
    INVALID_JOB_ORDER_STATUS = 8
    UNABLE_TO_ACCEPT = 16
    INVALID_REQUEST = 1 << 32


STATUS_WORDS = {
    ReturnStatus.OK: "ok",
    ReturnStatus.UNKNOWN_JOB_ORDER_ID: "unknown job order id",
    ReturnStatus.INVALID_JOB_ORDER_STATUS: "invalid job order status",
    ReturnStatus.UNABLE_TO_ACCEPT: "unable to accept the job order",
    ReturnStatus.INVALID_REQUEST: "invalid request",
}


def status_words(status: int) -> str:
    """A ReturnStatus in words, with its number: `invalid job order status (8)`."""
    words = [w for s, w in STATUS_WORDS.items() if status & s] or ["unknown status"]
    return f"{', '.join(words)} ({status})"


Method = Literal[
    "Store",
    "StoreAndStart",
    "Update",
    "Start",
    "RevokeStart",
    "Pause",
    "Resume",
    "Stop",
    "Abort",
    "Cancel",
    "Clear",
    "RequestJobResponseByJobOrderID",
]
ANY = "*"
ALLOWED_IN: dict[str, frozenset[str]] = {
    "Store": frozenset(),
    "StoreAndStart": frozenset(),
    "Update": frozenset({"NotAllowedToStart", "AllowedToStart"}),
    "Start": frozenset({"NotAllowedToStart"}),
    "RevokeStart": frozenset({"AllowedToStart"}),
    "start": frozenset({"AllowedToStart"}),
    "Pause": frozenset({"Running"}),
    "Resume": frozenset({"Interrupted"}),
    "Stop": frozenset({"Running", "Interrupted"}),
    "Abort": frozenset({"NotAllowedToStart", "AllowedToStart", "Running", "Interrupted"}),
    "finish": frozenset({"Running", "Interrupted"}),
    "Cancel": frozenset({"NotAllowedToStart", "AllowedToStart"}),
    "Clear": frozenset({"Ended", "Aborted"}),
    "RequestJobResponseByJobOrderID": frozenset({ANY}),
}
"""The states each method (and the internal `start` and `finish`) is allowed in; the two
Store methods need an id that is not stored."""
TARGET: dict[str, tuple[str, str | None]] = {
    "Store": ("NotAllowedToStart", "Ready"),
    "StoreAndStart": ("AllowedToStart", "Ready"),
    "Start": ("AllowedToStart", "Ready"),
    "RevokeStart": ("NotAllowedToStart", "Ready"),
    "start": ("Running", None),
    "Pause": ("Interrupted", "Suspended"),
    "Resume": ("Running", None),
    "Stop": ("Ended", "Closed"),
    "Abort": ("Aborted", None),
}
"""Where a method takes the order (Update keeps the state; Cancel and Clear remove it)."""


def path(state: str, sub: str | None = None) -> list[OrderStateElement]:
    elements = [OrderStateElement(state_text=state, state_number=STATE_NUMBERS[state])]  # type: ignore[arg-type]
    if sub is not None:
        if sub not in SUBSTATES.get(state, ()):
            raise ValueError(f"{sub} is not a sub-state of {state}")
        elements.append(OrderStateElement(state_text=sub, state_number=SUBSTATE_NUMBERS[sub]))  # type: ignore[arg-type]
    return elements


def state_of(order: JobOrder) -> str:
    """The order's top-level state."""
    return order.state[0].state_text


def path_text(order: JobOrder) -> str:
    """The state path in words: `Ended/Completed`."""
    path = order.state
    return path[0].state_text if len(path) == 1 else "/".join([e.state_text for e in path])


def allowed(method: str, order: JobOrder | None) -> ReturnStatus:
    """Whether `method` may be applied to `order` (None: the id is not stored)."""
    if method not in ALLOWED_IN:
        return ReturnStatus.INVALID_REQUEST
    if method in ("Store", "StoreAndStart"):
        return ReturnStatus.OK if order is None else ReturnStatus.UNABLE_TO_ACCEPT
    if order is None:
        return ReturnStatus.UNKNOWN_JOB_ORDER_ID
    states = ALLOWED_IN[method]
    if ANY in states or state_of(order) in states:
        return ReturnStatus.OK
    return ReturnStatus.INVALID_JOB_ORDER_STATUS


def new_order(
    *,
    job_id: str,
    scope: str,
    recipe_hash: str,
    dataschema: str,
    at: int,
    start: bool,
    work_master_id: str | None = None,
    priority: int = 0,
    description: str | None = None,
) -> JobOrder:
    """The order that Store (or StoreAndStart, with `start`) stores."""
    state, sub = TARGET["StoreAndStart" if start else "Store"]
    return JobOrder(
        job_order_id=job_id,
        scope=scope,
        work_master_id=UNSET if work_master_id is None else work_master_id,
        description=UNSET if description is None else description,
        recipe_hash=recipe_hash,
        dataschema=dataschema,
        priority=priority,
        state=path(state, sub),
        stored_at=at,
        started_at=None,
        ended_at=None,
    )


def move(order: JobOrder, method: str, at: int) -> JobOrder:
    """The order after `method` (already allowed), at server time `at`."""
    state, sub = TARGET[method]
    changes: dict[str, object] = {"state": path(state, sub)}
    if method == "start":
        changes["started_at"] = at
    if state in ("Ended", "Aborted"):  # Stop or Abort; a running recipe's finish may follow
        changes["ended_at"] = at
        changes["result"] = OrderResult(
            ended_by="stopped" if method == "Stop" else "aborted",
            outcomes=[],
            fault_code=None,
            fault_message=None,
        )
    return replace(order, **changes)


def comment(order: JobOrder, at: int, text: str) -> JobOrder:
    old = [] if order.comments is UNSET else order.comments
    comments = [*old, OrderComment(at=at, text=text[:TEXT_LIMIT])][-COMMENT_LIMIT:]
    return replace(order, comments=comments)


def finish(order: JobOrder, continuation: Continuation, at: int) -> JobOrder:
    """The order after the recipe ended with `continuation`: Ended/Completed on complete,
    Ended/Closed on a cancel `stopped`, else Aborted (a fault goes in the job response)."""
    if isinstance(continuation, Complete):
        result = OrderResult(
            ended_by="completed",
            outcomes=list(continuation.outcomes),
            fault_code=None,
            fault_message=None,
        )
        state = path("Ended", "Completed")
    elif isinstance(continuation, FaultContinuation):
        result = OrderResult(
            ended_by="faulted",
            outcomes=[],
            fault_code=continuation.code,
            fault_message=continuation.message[:TEXT_LIMIT],
        )
        state = path("Aborted")
    elif isinstance(continuation, Cancelled):
        stopped = continuation.reason == "stopped"
        result = OrderResult(
            ended_by="stopped" if stopped else "aborted",
            outcomes=[],
            fault_code=None,
            fault_message=continuation.reason[:TEXT_LIMIT] or None,
        )
        state = path("Ended", "Closed") if stopped else path("Aborted")
    else:
        return order
    return replace(order, state=state, ended_at=at, result=result)


def abort(order: JobOrder, at: int, code: str, message: str) -> JobOrder:
    """Aborted by the host itself, e.g. because the recipe is missing or does not build."""
    result = OrderResult(
        ended_by="faulted", outcomes=[], fault_code=code, fault_message=message[:TEXT_LIMIT]
    )
    return replace(order, state=path("Aborted"), ended_at=at, result=result)


def has_response(order: JobOrder) -> bool:
    """OPC 40001-3: every order that has left NotAllowedToStart and AllowedToStart has one."""
    return state_of(order) not in ("NotAllowedToStart", "AllowedToStart")


def job_response(order: JobOrder) -> JobResponse:
    """The job response (ISA95JobResponseDataType) of an order."""
    data: list[ResponseParameter] = []
    result = order.result
    if result is not UNSET:
        data.append(ResponseParameter(id="endedBy", value=result.ended_by))
        data.append(ResponseParameter(id="outcomes", value=list(result.outcomes)))
        if result.fault_code is not None:
            data.append(ResponseParameter(id="faultCode", value=result.fault_code))
        if result.fault_message is not None:
            data.append(ResponseParameter(id="faultMessage", value=result.fault_message))
    return JobResponse(
        job_response_id=f"{order.job_order_id}:response",
        job_order_id=order.job_order_id,
        start_time=order.started_at,
        end_time=order.ended_at,
        job_state=list(order.state),
        job_response_data=data,
    )


def ended(order: JobOrder) -> bool:
    return state_of(order) in ("Ended", "Aborted")

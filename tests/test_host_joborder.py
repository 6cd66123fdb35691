"""The job-order state machine of host/joborder.py (pure; docs/host.md "Job orders").

The tables here are written from docs/host.md and OPC 10031-4 (ISA95JobOrderStateMachineType),
not read from the module, so a change of the module's tables shows up as a failure.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from generated.job_order_v1_0 import JobOrder, OrderComment
from generated.job_response_v1_0 import JobResponse
from generated.step_result_v1_0 import Cancelled, Complete, Continuation, Defer, FaultContinuation
from host import joborder
from host.joborder import ReturnStatus

NAS, ATS, RUNNING, INTERRUPTED, ENDED, ABORTED = (
    "NotAllowedToStart",
    "AllowedToStart",
    "Running",
    "Interrupted",
    "Ended",
    "Aborted",
)
STATES = [NAS, ATS, RUNNING, INTERRUPTED, ENDED, ABORTED]
NUMBERS = {NAS: 1, ATS: 2, RUNNING: 3, INTERRUPTED: 4, ENDED: 5, ABORTED: 6}
SUB_NUMBERS = {
    NAS: {"Waiting": 1, "Ready": 2, "Loaded": 3},
    ATS: {"Waiting": 1, "Ready": 2, "Loaded": 3},
    INTERRUPTED: {"Held": 1, "Suspended": 2},
    ENDED: {"Completed": 1, "Closed": 2},
}
EVERY_PATH = [(s, None) for s in STATES] + [
    (s, sub) for s, subs in SUB_NUMBERS.items() for sub in subs
]

# docs/host.md "Job orders": the states each method is allowed in (start and finish are internal).
ALLOWED = {
    "Update": {NAS, ATS},
    "Start": {NAS},
    "RevokeStart": {ATS},
    "start": {ATS},
    "Pause": {RUNNING},
    "Resume": {INTERRUPTED},
    "Stop": {RUNNING, INTERRUPTED},
    "Abort": {NAS, ATS, RUNNING, INTERRUPTED},
    "finish": {RUNNING, INTERRUPTED},
    "Cancel": {NAS, ATS},
    "Clear": {ENDED, ABORTED},
    "RequestJobResponseByJobOrderID": set(STATES),
}
STORES = ["Store", "StoreAndStart"]
METHODS = [*STORES, *ALLOWED]
UNKNOWN_METHODS = ["", "Delete", "pause", "STORE", "RequestJobResponseByJobOrderState"]
# Where `move` takes the order: (state, sub-state) and the StateNumbers of the path.
TARGETS = {
    "Store": ((NAS, "Ready"), [1, 2]),
    "StoreAndStart": ((ATS, "Ready"), [2, 2]),
    "Start": ((ATS, "Ready"), [2, 2]),
    "RevokeStart": ((NAS, "Ready"), [1, 2]),
    "start": ((RUNNING, None), [3]),
    "Pause": ((INTERRUPTED, "Suspended"), [4, 2]),
    "Resume": ((RUNNING, None), [3]),
    "Stop": ((ENDED, "Closed"), [5, 2]),  # stopped short: not Completed (docs/host.md)
    "Abort": ((ABORTED, None), [6]),
}
STORED_AT = 1_000
_order_decoder = msgspec.json.Decoder(JobOrder)
_response_decoder = msgspec.json.Decoder(JobResponse)


def stored(start: bool = False, **kw: Any) -> JobOrder:
    return joborder.new_order(
        job_id="job-1",
        scope="plant.line1",
        recipe_hash="ab" * 32,
        dataschema="https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.1.0/",
        at=STORED_AT,
        start=start,
        **kw,
    )


def order_in(state: str, sub: str | None = None) -> JobOrder:
    return msgspec.structs.replace(stored(), state=joborder.path(state, sub))


def path_of(order: JobOrder) -> list[tuple[str, int]]:
    return [(e.state_text, e.state_number) for e in order.state]


def fits_schema(order: JobOrder) -> None:
    """The order is what the host stores: it must decode again with its own schema."""
    assert _order_decoder.decode(msgspec.json.encode(order)) == order


# -- ReturnStatus


def test_return_status_numbers_are_the_opc_ua_bitmap() -> None:
    assert [int(s) for s in ReturnStatus] == [1, 2, 8, 16, 2**32]
    assert ReturnStatus.INVALID_REQUEST == 4_294_967_296


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (1, "ok (1)"),
        (2, "unknown job order id (2)"),
        (8, "invalid job order status (8)"),
        (16, "unable to accept the job order (16)"),
        (2**32, "invalid request (4294967296)"),
        (8 | 16, "invalid job order status, unable to accept the job order (24)"),
        (0, "unknown status (0)"),
        (4, "unknown status (4)"),
    ],
)
def test_status_words(status: int, words: str) -> None:
    assert joborder.status_words(status) == words


def test_status_words_takes_the_enum_as_well() -> None:
    assert joborder.status_words(ReturnStatus.INVALID_JOB_ORDER_STATUS) == (
        "invalid job order status (8)"
    )


# -- the table: every method in every state


@pytest.mark.parametrize(("state", "sub"), EVERY_PATH)
@pytest.mark.parametrize("method", list(ALLOWED))
def test_method_in_state(method: str, state: str, sub: str | None) -> None:
    expected = (
        ReturnStatus.OK if state in ALLOWED[method] else ReturnStatus.INVALID_JOB_ORDER_STATUS
    )
    assert joborder.allowed(method, order_in(state, sub)) == expected


@pytest.mark.parametrize("method", list(ALLOWED))
def test_method_on_an_id_that_is_not_stored_is_unknown(method: str) -> None:
    assert joborder.allowed(method, None) == ReturnStatus.UNKNOWN_JOB_ORDER_ID


@pytest.mark.parametrize("method", STORES)
def test_store_needs_an_id_that_is_not_stored(method: str) -> None:
    assert joborder.allowed(method, None) == ReturnStatus.OK
    for state, sub in EVERY_PATH:
        assert joborder.allowed(method, order_in(state, sub)) == ReturnStatus.UNABLE_TO_ACCEPT


@pytest.mark.parametrize("method", UNKNOWN_METHODS)
@pytest.mark.parametrize("state", [None, *STATES])
def test_an_unknown_method_is_an_invalid_request(method: str, state: str | None) -> None:
    order = None if state is None else order_in(state)
    assert joborder.allowed(method, order) == ReturnStatus.INVALID_REQUEST


def test_the_module_table_names_exactly_these_methods() -> None:
    assert set(joborder.ALLOWED_IN) == set(METHODS)


# -- paths and state numbers


@pytest.mark.parametrize(("state", "sub"), EVERY_PATH)
def test_path_numbers(state: str, sub: str | None) -> None:
    elements = joborder.path(state, sub)
    expected = [(state, NUMBERS[state])]
    if sub is not None:
        expected.append((sub, SUB_NUMBERS[state][sub]))
    assert [(e.state_text, e.state_number) for e in elements] == expected


@pytest.mark.parametrize(
    ("state", "sub"),
    [(RUNNING, "Ready"), (ABORTED, "Completed"), (ENDED, "Held"), (INTERRUPTED, "Loaded")],
)
def test_a_sub_state_of_another_state_is_refused(state: str, sub: str) -> None:
    with pytest.raises(ValueError, match=f"{sub} is not a sub-state of {state}"):
        joborder.path(state, sub)


def test_path_text() -> None:
    assert joborder.path_text(order_in(ENDED, "Completed")) == "Ended/Completed"
    assert joborder.path_text(order_in(RUNNING)) == "Running"


# -- Store, StoreAndStart and move


def test_store_gives_not_allowed_to_start() -> None:
    order = stored(work_master_id="wm-7", priority=5, description="ten bolts")
    assert path_of(order) == [(NAS, 1), ("Ready", 2)]
    assert (order.stored_at, order.started_at, order.ended_at) == (STORED_AT, None, None)
    assert (order.work_master_id, order.priority, order.description) == ("wm-7", 5, "ten bolts")
    assert order.result is UNSET
    fits_schema(order)


def test_store_and_start_gives_allowed_to_start() -> None:
    order = stored(start=True)
    assert path_of(order) == [(ATS, 2), ("Ready", 2)]
    assert order.work_master_id is UNSET and order.description is UNSET
    fits_schema(order)


@pytest.mark.parametrize("method", [m for m in TARGETS if m not in STORES])
def test_move_target(method: str) -> None:
    (state, sub), numbers = TARGETS[method]
    before = order_in(next(iter(ALLOWED[method])))
    after = joborder.move(before, method, 5_000)
    assert joborder.path_text(after) == (state if sub is None else f"{state}/{sub}")
    assert [e.state_number for e in after.state] == numbers
    assert (after.job_order_id, after.stored_at) == (before.job_order_id, before.stored_at)
    fits_schema(after)


def test_internal_start_records_the_start_time_and_resume_keeps_it() -> None:
    running = joborder.move(stored(start=True), "start", 2_000)
    assert running.started_at == 2_000
    paused = joborder.move(running, "Pause", 3_000)
    resumed = joborder.move(paused, "Resume", 4_000)
    assert (paused.started_at, resumed.started_at) == (2_000, 2_000)
    assert resumed.ended_at is None


@pytest.mark.parametrize(
    ("method", "ended_by", "state"),
    [
        (m, by, s)
        for m, by in [("Stop", "stopped"), ("Abort", "aborted")]
        for s in STATES
        if s in ALLOWED[m]
    ],
)
def test_a_method_that_ends_the_order_records_when_and_how(
    method: str, ended_by: str, state: str
) -> None:
    after = joborder.move(order_in(state), method, 9_000)
    assert after.ended_at == 9_000
    assert after.result is not UNSET
    assert (after.result.ended_by, after.result.fault_code) == (ended_by, None)
    response = joborder.job_response(after)
    assert response.end_time == 9_000
    assert response.job_response_data[0].value == ended_by


# -- finish and abort


def running_order() -> JobOrder:
    return joborder.move(stored(start=True), "start", 2_000)


def test_finish_complete() -> None:
    order = joborder.finish(running_order(), Complete(outcomes=["ok", "torque_ok"]), 7_000)
    assert path_of(order) == [(ENDED, 5), ("Completed", 1)]
    assert (order.started_at, order.ended_at) == (2_000, 7_000)
    assert order.result is not UNSET
    assert order.result.ended_by == "completed"
    assert order.result.outcomes == ["ok", "torque_ok"]
    assert (order.result.fault_code, order.result.fault_message) == (None, None)
    fits_schema(order)


def test_finish_fault() -> None:
    fault = FaultContinuation(code="timeout", message="tighten timed out")
    order = joborder.finish(running_order(), fault, 7_000)
    assert path_of(order) == [(ABORTED, 6)]
    assert order.result is not UNSET
    assert order.result.ended_by == "faulted"
    assert (order.result.fault_code, order.result.fault_message) == (
        "timeout",
        "tighten timed out",
    )
    assert order.result.outcomes == []
    assert order.ended_at == 7_000
    fits_schema(order)


@pytest.mark.parametrize(
    ("reason", "path", "ended_by", "message"),
    [
        ("stopped", [(ENDED, 5), ("Closed", 2)], "stopped", "stopped"),
        ("aborted", [(ABORTED, 6)], "aborted", "aborted"),
        ("operator pulled the plug", [(ABORTED, 6)], "aborted", "operator pulled the plug"),
        ("", [(ABORTED, 6)], "aborted", None),
    ],
)
def test_finish_cancelled(
    reason: str, path: list[tuple[str, int]], ended_by: str, message: str | None
) -> None:
    for before in (running_order(), joborder.move(running_order(), "Pause", 3_000)):
        order = joborder.finish(before, Cancelled(reason=reason), 7_000)
        assert path_of(order) == path
        assert order.result is not UNSET
        assert order.result.ended_by == ended_by
        assert (order.result.fault_code, order.result.fault_message) == (None, message)
        assert order.ended_at == 7_000
        fits_schema(order)


def test_finish_on_defer_changes_nothing() -> None:
    before = running_order()
    assert joborder.finish(before, Defer(), 7_000) == before


def test_abort_by_the_host() -> None:
    order = joborder.abort(stored(start=True), 3_000, "recipe", "the recipe is missing")
    assert path_of(order) == [(ABORTED, 6)]
    assert order.ended_at == 3_000
    assert order.result is not UNSET
    assert order.result.ended_by == "faulted"
    assert (order.result.fault_code, order.result.fault_message) == (
        "recipe",
        "the recipe is missing",
    )
    assert joborder.ended(order)
    fits_schema(order)


def test_a_long_fault_message_still_fits_the_order_schema() -> None:
    """A build problem or fault message of any length must not make the order unreadable."""
    long = "SFC003 " + "x" * 10_000
    aborted = joborder.abort(stored(start=True), 3_000, "recipe", long)
    faulted = joborder.finish(running_order(), FaultContinuation(code="error", message=long), 7_000)
    for order in (aborted, faulted):
        fits_schema(order)
        assert order.result is not UNSET
        assert order.result.fault_message is not None
        assert order.result.fault_message.startswith("SFC003 xxx")


# -- the job response


def test_has_response() -> None:
    for state in STATES:
        assert joborder.has_response(order_in(state)) is (state not in (NAS, ATS))


def test_job_response_of_a_running_order() -> None:
    response = joborder.job_response(running_order())
    assert response.job_response_id == "job-1:response"
    assert response.job_order_id == "job-1"
    assert (response.start_time, response.end_time) == (2_000, None)
    assert [(e.state_text, e.state_number) for e in response.job_state] == [(RUNNING, 3)]
    assert response.job_response_data == []


def test_job_response_of_a_completed_order_on_the_wire() -> None:
    order = joborder.finish(running_order(), Complete(outcomes=["ok"]), 7_000)
    raw = msgspec.json.encode(joborder.job_response(order))
    assert msgspec.json.decode(raw) == {
        "jobResponseId": "job-1:response",
        "jobOrderId": "job-1",
        "startTime": 2_000,
        "endTime": 7_000,
        "jobState": [
            {"stateText": "Ended", "stateNumber": 5},
            {"stateText": "Completed", "stateNumber": 1},
        ],
        "jobResponseData": [
            {"id": "endedBy", "value": "completed"},
            {"id": "outcomes", "value": ["ok"]},
        ],
    }
    assert _response_decoder.decode(raw) == joborder.job_response(order)


def test_job_response_of_a_faulted_order() -> None:
    fault = FaultContinuation(code="no_transition", message="no transition from s2 on x")
    response = joborder.job_response(joborder.finish(running_order(), fault, 7_000))
    assert [(p.id, p.value) for p in response.job_response_data] == [
        ("endedBy", "faulted"),
        ("outcomes", []),
        ("faultCode", "no_transition"),
        ("faultMessage", "no transition from s2 on x"),
    ]
    assert [(e.state_text, e.state_number) for e in response.job_state] == [(ABORTED, 6)]


# -- comments


def test_comments_are_kept_in_order_and_capped() -> None:
    order = stored()
    for i in range(joborder.COMMENT_LIMIT + 20):
        order = joborder.comment(order, i, f"c{i}")
    assert order.comments is not UNSET
    assert len(order.comments) == 100
    assert [c.text for c in order.comments[:2]] == ["c20", "c21"]
    assert order.comments[-1] == OrderComment(at=119, text="c119")
    fits_schema(order)


def test_a_long_comment_is_cut_to_fit() -> None:
    order = joborder.comment(stored(), 5, "y" * 5_000)
    assert order.comments is not UNSET
    assert order.comments[0].text == "y" * 4096
    fits_schema(order)


# -- any sequence of methods


CONTINUATIONS: list[Continuation] = [
    Complete(outcomes=["ok"]),
    FaultContinuation(code="timeout", message="late"),
    Cancelled(reason="stopped"),
    Cancelled(reason="aborted"),
    Defer(),
]
STEPS = st.tuples(
    st.sampled_from([*METHODS, *UNKNOWN_METHODS]),
    st.sampled_from(CONTINUATIONS),
)
VALID_PATHS = {
    (NAS, "Ready"),
    (ATS, "Ready"),
    (RUNNING, None),
    (INTERRUPTED, "Suspended"),
    (ENDED, "Completed"),
    (ENDED, "Closed"),
    (ABORTED, None),
}


def expected_refusal(method: str, order: JobOrder | None) -> ReturnStatus:
    if method not in METHODS:
        return ReturnStatus.INVALID_REQUEST
    if method in STORES:
        return ReturnStatus.UNABLE_TO_ACCEPT
    if order is None:
        return ReturnStatus.UNKNOWN_JOB_ORDER_ID
    return ReturnStatus.INVALID_JOB_ORDER_STATUS


def apply(method: str, order: JobOrder | None, cont: Continuation, at: int) -> JobOrder | None:
    """What a host does with an allowed method (docs/host.md "Job orders")."""
    if method in STORES:
        return stored(start=method == "StoreAndStart")
    assert order is not None
    if method in ("Cancel", "Clear"):
        return None
    if method in ("Update", "RequestJobResponseByJobOrderID"):
        return order
    if method == "finish":
        return joborder.finish(order, cont, at)
    return joborder.move(order, method, at)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEPS, max_size=30))
def test_any_sequence_of_methods_stays_in_the_table(
    steps: list[tuple[str, Continuation]],
) -> None:
    order: JobOrder | None = None
    for at, (method, cont) in enumerate(steps, start=STORED_AT + 1):
        status = joborder.allowed(method, order)
        if status != ReturnStatus.OK:
            assert status == expected_refusal(method, order)
            continue
        before = None if order is None else joborder.state_of(order)
        assert method in STORES or before in ALLOWED[method]
        order = apply(method, order, cont, at)
        if order is None:
            continue
        path = (
            order.state[0].state_text,
            None if len(order.state) == 1 else order.state[1].state_text,
        )
        assert path in VALID_PATHS
        assert [e.state_number for e in order.state] == [
            NUMBERS[path[0]],
            *([] if path[1] is None else [SUB_NUMBERS[path[0]][path[1]]]),
        ]
        if method in TARGETS:
            assert path == TARGETS[method][0]
        final = joborder.ended(order)
        assert final is (path[0] in (ENDED, ABORTED))
        assert (order.ended_at is not None) is final
        assert (order.result is not UNSET) is final
        assert joborder.has_response(order) is (path[0] not in (NAS, ATS))
        if path[0] in (RUNNING, INTERRUPTED):
            assert order.started_at is not None
        fits_schema(order)
        response = joborder.job_response(order)
        assert response.job_state == order.state
        assert response.end_time == order.ended_at

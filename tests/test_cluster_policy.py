"""The park-and-move policy of a worker on a cluster (host.cluster), with no cluster: each
row of its table, its timers, and the words of its lines (a Routes on the session's one
server says them). The errors are the client's exceptions for the replies a node gives
(MOVED, ASK, TRYAGAIN, a connection refused)."""

from __future__ import annotations

import logging

import pytest
import redis

from host.cluster import (
    FAILURES,
    PARK_FIRST_S,
    PARK_MAX_S,
    RULES,
    WAITS,
    Happened,
    ParkPolicy,
    Routes,
    Said,
    Say,
    Status,
    failure,
    moving_reason,
    stuck_text,
)
from host.store import Store, slot_moving

H, S = Happened, Status
MOVED = redis.exceptions.MovedError("1234 127.0.0.1:7001")
ASK = redis.exceptions.AskError("1234 127.0.0.1:7002")
TRYAGAIN = redis.exceptions.TryAgainError("TRYAGAIN Multiple keys request during rehashing")
AWAY = redis.ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused.")
THRESHOLD_MS = 2000


def policy_at(status: Status, scope: str = "s", now: float = 100.0) -> ParkPolicy:
    """A policy with `scope` in `status`, reached by the table itself."""
    p = ParkPolicy(THRESHOLD_MS)
    into = {
        S.AWAY: H.AWAY,
        S.MOVED: H.MOVED,
        S.MOVING: H.MOVING,
        S.NEW_AWAY: H.AWAY,
    }
    if status in (S.NEW, S.NEW_AWAY):
        if status is S.NEW_AWAY:
            p.step(scope, H.AWAY, now, taken=False)
        assert p.status(scope, taken=False) is status
        return p
    if status in into:
        p.step(scope, into[status], now)
    assert p.status(scope) is status
    return p


# -- what a failed call says


@pytest.mark.parametrize(
    ("error", "happened"),
    [
        (MOVED, H.MOVED),
        (ASK, H.MOVING),
        (TRYAGAIN, H.MOVING),
        (redis.ResponseError("TRYAGAIN Multiple keys request during rehashing"), H.MOVING),
        (AWAY, H.AWAY),
        (redis.TimeoutError("Timeout reading from socket"), H.AWAY),
        (redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"), H.AWAY),
        (redis.ResponseError("LOADING Valkey is loading the dataset in memory"), H.AWAY),
        (redis.ResponseError("ERR unknown command"), None),
        (ValueError("a bug"), None),
    ],
)
def test_a_failed_call_is_classified(error: Exception, happened: Happened | None) -> None:
    assert failure(error) is happened
    assert slot_moving(error) == (happened in (H.MOVED, H.MOVING))


def test_a_moves_words_say_what_is_done_about_it() -> None:
    assert moving_reason(MOVED, 1234) == (
        "slot 1234 moved to 127.0.0.1:7001 (a failover or a reshard); reading the slots again"
    )
    assert moving_reason(ASK, 1234) == (
        "slot 1234 is moving to 127.0.0.1:7002 (a failover or a reshard); reading the slots again"
    )
    assert moving_reason(TRYAGAIN, 99) == (
        "slot 99 is being moved (TRYAGAIN: a reshard under way, its keys on two nodes); "
        "trying it again with backoff"
    )


# -- the table, row by row


def test_the_table_has_a_row_for_every_status_and_failure() -> None:
    for status in S:
        for happened in FAILURES:
            assert (status, happened) in RULES, (status, happened)
    for status in (S.SERVING, S.AWAY, S.MOVED, S.MOVING):
        for happened in (H.CALL_OK, H.WHOLE_OK):
            assert (status, happened) in RULES, (status, happened)


@pytest.mark.parametrize(("row", "outcome"), sorted(RULES.items(), key=str), ids=str)
def test_each_row_of_the_table(row: tuple[Status, Happened], outcome: tuple[Status, Say]) -> None:
    """The scope's status after the step is the row's, and what is said is the row's (a
    move is said at info when it starts: the scope had no move before the step)."""
    status, happened = row
    after, say = outcome
    taken = status not in (S.NEW, S.NEW_AWAY)
    p = policy_at(status)
    p.moving.clear()  # no move under way before the step: MOVE says that it starts
    said = p.step("s", happened, 101.0, taken=taken)
    assert p.status("s", taken=after is not S.NEW and after is not S.NEW_AWAY) is after
    expected = Say.MOVE_STARTED if say is Say.MOVE else say
    assert said.say is expected
    assert ("s" in p.parked) == (after in (S.AWAY, S.MOVED, S.MOVING))
    if after is S.NEW_AWAY:
        assert "s" in p.not_taken
    if after is S.SERVING:
        assert "s" not in p.not_taken


def test_a_park_is_said_with_how_long_the_node_was_away() -> None:
    p = policy_at(S.AWAY, now=100.0)
    said = p.step("s", H.CALL_OK, 107.5)
    assert said.say is Say.BACK and said.seconds == pytest.approx(7.5)


def test_a_move_is_said_at_info_once_then_once_stuck_then_its_end() -> None:
    p = ParkPolicy(THRESHOLD_MS)
    assert p.step("s", H.MOVING, 100.0).say is Say.MOVE_STARTED
    assert p.step("s", H.MOVING, 101.0).say is Say.NOTHING
    assert p.step("s", H.WHOLE_OK, 101.5).say is Say.NOTHING  # its park ends, not its move
    assert "s" not in p.parked and "s" in p.moving
    stuck = p.step("s", H.MOVING, 102.0)
    assert stuck.say is Say.MOVE_STUCK and stuck.seconds == pytest.approx(2.0)
    for t in range(3, 20):  # once, not at every try
        assert p.step("s", H.MOVING, 100.0 + t).say is Say.NOTHING
    p.step("s", H.WHOLE_OK, 120.0)
    over = p.step("s", H.BATCH_OK, 121.0)
    assert over.say is Say.MOVE_OVER and over.seconds == pytest.approx(21.0)
    assert not p.moving and p.step("s", H.BATCH_OK, 122.0).say is Say.NOTHING


def test_a_scope_set_aside_for_a_slot_being_moved_waits_for_a_whole_call() -> None:
    """In a reshard under way a read of the work stream goes through and the commit after
    it answers TRYAGAIN: a read (CALL_OK) does not end the park, the sweep does."""
    p = policy_at(S.MOVING)
    assert p.step("s", H.CALL_OK, 101.0).say is Say.NOTHING
    assert p.status("s") is S.MOVING
    assert p.serving(["s", "t"], {"s"}, whole=False) == ["t"]
    assert p.serving(["s", "t"], {"s"}, whole=True) == ["s", "t"]
    p.step("s", H.WHOLE_OK, 101.0)
    assert p.status("s") is S.SERVING


def test_a_scope_set_aside_for_a_moved_is_tried_by_a_read() -> None:
    p = policy_at(S.MOVED)
    assert p.serving(["s", "t"], {"s"}, whole=False) == ["s", "t"]
    assert p.serving(["s", "t"], set(), whole=True) == ["t"]


def test_an_outage_ends_a_moves_timer() -> None:
    """A move after an outage is timed from then, not from before it."""
    p = ParkPolicy(THRESHOLD_MS)
    p.step("s", H.MOVING, 100.0)
    assert p.step("s", H.AWAY, 100.5).say is Say.PARKED
    assert "s" not in p.moving
    assert p.step("s", H.MOVING, 110.0).say is Say.MOVE_STARTED
    assert p.step("s", H.MOVING, 111.0).say is Say.NOTHING


def test_a_scope_not_taken_up_says_its_node_away_once_across_moves() -> None:
    """A scope not taken up yet whose node is away, then answers ASK, then is away again
    (for 10 s), then answers ASK: its node away is said once, at warning, and its move is
    timed from its answer after the outage (no stuck warning), said at info twice."""
    p = ParkPolicy(THRESHOLD_MS)
    assert p.step("s", H.AWAY, 100.0, taken=False).say is Say.NOT_TAKEN
    assert p.step("s", H.MOVING, 100.5, taken=False).say is Say.MOVE_STARTED
    assert p.step("s", H.AWAY, 101.0, taken=False).say is Say.NOTHING
    assert "s" not in p.moving  # timed again from its next answer
    assert p.step("s", H.MOVING, 111.0, taken=False).say is Say.MOVE_STARTED
    assert p.step("s", H.TAKEN, 112.0, taken=False).say is Say.TAKEN
    assert not p.moving and not p.not_taken and p.status("s") is S.SERVING


def test_a_scope_that_left_the_registry_is_forgotten() -> None:
    p = ParkPolicy(THRESHOLD_MS)
    p.step("moved", H.MOVED, 100.0, taken=False)
    p.step("away", H.AWAY, 100.0, taken=False)
    p.step("kept", H.MOVED, 100.0, taken=False)
    p.forget(["kept"], [])
    assert set(p.moving) == {"kept"} and not p.not_taken


# -- the timers


def test_a_parks_backoff_doubles_at_each_try_up_to_its_most() -> None:
    p = ParkPolicy(THRESHOLD_MS)
    p.step("s", H.AWAY, 100.0)
    assert p.parked["s"].retry == 100.0 + PARK_FIRST_S
    assert p.due(100.0 + PARK_FIRST_S - 0.01) == []
    assert p.due(100.0 + PARK_FIRST_S) == ["s"]
    backoffs = []
    for _ in range(6):
        p.step("s", H.AWAY, 101.0)
        backoffs.append(p.parked["s"].backoff)
    assert backoffs == [1.0, 2.0, 4.0, PARK_MAX_S, PARK_MAX_S, PARK_MAX_S]
    assert p.parked["s"].since == 100.0  # the park's start stays


def test_a_probe_that_fails_backs_off_as_a_try() -> None:
    p = policy_at(S.AWAY)
    assert p.needs_probe(["s"])
    p.back_off("s", 101.0)
    assert p.parked["s"].backoff == 2 * PARK_FIRST_S and p.parked["s"].retry == 102.0


def test_scopes_parked_for_a_move_alone_need_no_probe() -> None:
    p = ParkPolicy(THRESHOLD_MS)
    p.step("a", H.MOVED, 100.0)
    p.step("b", H.MOVING, 100.0)
    assert not p.needs_probe(["a", "b"])
    p.step("c", H.AWAY, 100.0)
    assert p.needs_probe(["a", "b", "c"])


def test_a_slot_served_elsewhere_ends_every_backoff() -> None:
    p = ParkPolicy(THRESHOLD_MS)
    p.step("a", H.AWAY, 100.0)
    p.step("b", H.MOVED, 100.0)
    assert p.due(100.1) == []
    p.routes_moved(100.1)
    assert sorted(p.due(100.1)) == ["a", "b"]


def test_the_same_move_parked_again_goes_on_from_its_last_backoff() -> None:
    """A move whose park ended at a whole call and that answers again is parked with twice
    its last backoff, not from the first: each round of a reshard under way would try it."""
    p = ParkPolicy(THRESHOLD_MS)
    p.step("s", H.MOVING, 100.0)
    p.step("s", H.MOVING, 100.6)  # backoff 1.0
    p.step("s", H.WHOLE_OK, 101.7)
    assert p.moving["s"].backoff == 1.0
    p.step("s", H.MOVING, 101.8)
    assert p.parked["s"].backoff == 2.0


# -- the words


def test_a_stuck_moved_is_not_said_to_be_a_reshard_half_way() -> None:
    """A MOVED that the slots read again do not settle is nodes that disagree about who
    serves it, not a slot left migrating (an ASK, a TRYAGAIN)."""
    text = stuck_text("scope s", MOVED, 1234, 31.0, "its jobs wait", 1_800_000_000.0)
    assert text == (
        "scope s: slot 1234 has answered MOVED (to 127.0.0.1:7001) for 31 s, since "
        "2027-01-15 07:59:29 UTC: its nodes disagree about who serves it (a failover or a "
        "reshard not finished, or a misconfigured cluster), most likely (`CLUSTER SLOTS` and "
        "`CLUSTER NODES` on its nodes show who serves it); its jobs wait; tried again with "
        "backoff"
    )


@pytest.mark.parametrize(
    ("error", "answered"), [(ASK, "ASK (to 127.0.0.1:7002)"), (TRYAGAIN, "TRYAGAIN")]
)
def test_a_stuck_slot_being_moved_is_said_to_be_a_reshard_half_way(
    error: Exception, answered: str
) -> None:
    text = stuck_text("worker w", error, 1234, 40.0, WAITS, 1_800_000_000.0)
    assert text.startswith(f"worker w: slot 1234 has answered {answered} for 40 s, since "), text
    assert "a reshard stuck half way" in text and WAITS in text, text


def test_a_stuck_tryagain_of_no_known_slot_says_a_slot() -> None:
    text = stuck_text("worker w", TRYAGAIN, None, 40.0, "new scopes wait meanwhile", 0.0)
    assert text.startswith("worker w: a slot has answered TRYAGAIN for 40 s"), text


def test_a_scope_parked_for_an_outage_whose_node_answers_a_move_says_the_move() -> None:
    """A scope parked because its node went away, whose node is back and answers ASK (a
    reshard stuck half way): it is parked for the move from then, said at info, once at
    warning after SFC_OUTAGE_THRESHOLD, and its end at info, never as the outage's end."""
    p = ParkPolicy(THRESHOLD_MS)
    assert p.step("s", H.AWAY, 1000.0).say is Say.PARKED
    assert p.step("s", H.AWAY, 1001.0).say is Say.NOTHING
    assert p.step("s", H.MOVING, 1010.0).say is Say.MOVE_STARTED
    assert p.parked["s"].moved
    says = [p.step("s", H.MOVING, 1010.0 + 0.5 * i).say for i in range(1, 12)]
    assert says.count(Say.MOVE_STUCK) == 1 and set(says) <= {Say.NOTHING, Say.MOVE_STUCK}
    assert p.step("s", H.WHOLE_OK, 1020.0).say is Say.NOTHING  # not BACK, at warning
    over = p.step("s", H.BATCH_OK, 1021.0)
    assert over.say is Say.MOVE_OVER and over.seconds == pytest.approx(11.0)


def test_the_end_of_a_move_and_of_an_outage_are_said_at_their_levels(
    valkey_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The words and levels of a parked scope's end: a move's at info ("its slot moved"),
    an outage's at warning ("its node could not be reached")."""
    caplog.set_level(logging.INFO, logger="sfc.host.worker")
    store = Store.from_url(valkey_url)
    try:
        routes = Routes(store, THRESHOLD_MS, "c1", lambda: 0.0)
        routes.say("s", Said(Say.MOVE_OVER, 3.0))
        routes.say("s", Said(Say.BACK, 7.25))
    finally:
        store.close()
    over, back = caplog.records
    assert (over.levelno, over.getMessage()) == (logging.INFO, "scope s: served again after 3.0 s")
    assert over.reason == "its slot moved 3.0 s ago"  # type: ignore[attr-defined]
    assert (back.levelno, back.getMessage()) == (
        logging.WARNING,
        "scope s: served again after 7.2 s",
    )
    assert back.reason == "its node could not be reached for 7.2 s"  # type: ignore[attr-defined]

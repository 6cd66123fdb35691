"""Valkey Cluster routing for a worker: what a failed call says, and when to serve a scope.

A call of a scope fails in one of three ways that are not bugs (`failure`): its node cannot
be reached (AWAY), its slot moved (MOVED: a failover, a reshard done), or its slot is being
moved (MOVING: ASK, or TRYAGAIN for keys on two nodes). The park-and-move policy is a pure
state machine (`ParkPolicy`): a scope's status and what happened to it, at `now` (the
worker's monotonic clock), give its next status and what to say (`RULES`):

1. A worker of several scopes on a cluster parks a scope whose call failed so, and serves
   the others. AWAY parks every scope of that node; a move parks its scope alone (its node
   answered: the node's other scopes find out for themselves).
2. A parked scope is tried again after its backoff: PARK_FIRST_S, doubled at each try that
   fails, up to PARK_MAX_S. A slot that another node serves now ends every backoff at once.
3. A node away is probed with a short PING before a real call of its scopes (`needs_probe`).
4. MOVING waits for a whole call (the sweep, a commit: they name keys on both nodes);
   MOVED and AWAY end at any call that goes through.
5. AWAY is said at warning, once, and its end at warning. A move is routine: said at info
   when it starts, once at warning when it has lasted SFC_OUTAGE_THRESHOLD (stuck), and its
   end at info once a batch round trip of the scope goes through (BATCH_OK). AWAY ends a
   move's timer: a move after an outage is timed from then.
6. A scope not taken up yet (NEW) whose node is away is said once at warning (NEW_AWAY);
   its move is timed and said as a parked scope's.

`Routes` applies the policy for a worker: it reads the slots, probes nodes and logs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING

from host.store import (
    moved_to,
    slot_moved,
    slot_moving,
    slot_of,
    unreachable,
    unreachable_reason,
)

if TYPE_CHECKING:
    from host.metrics import WorkerMetrics
    from host.store import Store

log = logging.getLogger("sfc.host.worker")

PARK_FIRST_S = 0.5
"""How long a parked scope first waits for its next try; each try that fails doubles it."""
PARK_MAX_S = 5.0
WAITS = "the scope's jobs wait meanwhile (nothing is applied for them)"
"""What a stuck move's warning says waits, for a scope."""


# -- what a failed call says


def moving_reason(error: BaseException, slot: int | None) -> str:
    """The info line's words for a move (`slot_moving`) of `slot`, and what is done about it."""
    then = "reading the slots again" if slot_moved(error) else "trying it again with backoff"
    return f"{unreachable_reason(error, slot)}; {then}"


class Happened(Enum):
    """What happened to a call of a scope (the policy's input)."""

    AWAY = "its node cannot be reached"
    MOVED = "its slot moved (MOVED)"
    MOVING = "its slot is being moved (ASK, TRYAGAIN)"
    CALL_OK = "a call went through (a read, a claim, a trim)"
    WHOLE_OK = "a whole call went through (the sweep, a commit)"
    BATCH_OK = "a batch round trip went through (a commit, a read with nothing to apply)"
    TAKEN = "taken up (its group created, its jobs repaired)"


def failure(error: BaseException) -> Happened | None:
    """What a failed call says (AWAY, MOVED or MOVING); None when it is not the server's
    outage or a move (a bug, a bad reply: the caller raises it)."""
    if not unreachable(error):
        return None
    moved = moved_to(error)
    if moved is not None and moved.answer == "MOVED":
        return Happened.MOVED
    if slot_moving(error):
        return Happened.MOVING
    return Happened.AWAY


# -- the policy


class Status(Enum):
    """Where a scope stands with the policy."""

    NEW = "not taken up yet"
    NEW_AWAY = "not taken up: its node cannot be reached (said)"
    SERVING = "served"
    AWAY = "parked: its node cannot be reached"
    MOVED = "parked: its slot moved; any call tries it"
    MOVING = "parked: its slot is being moved; only a whole call tries it"


PARKED = (Status.AWAY, Status.MOVED, Status.MOVING)
FAILURES = (Happened.AWAY, Happened.MOVED, Happened.MOVING)


class Say(Enum):
    """What the policy says of a step (`Said`), before the move's timer is read."""

    NOTHING = "nothing"
    NOT_TAKEN = "not taken up now: its node cannot be reached (warning)"
    TAKEN = "serving scope (info)"
    PARKED = "its node cannot be reached (warning, counted)"
    BACK = "served again after an outage (warning)"
    MOVE = "the move: at info when it starts, at warning once stuck, else nothing"
    MOVE_STARTED = "the move started (info)"
    MOVE_STUCK = "the move has lasted SFC_OUTAGE_THRESHOLD (warning)"
    MOVE_OVER = "served again after a move (info)"


_S, _H = Status, Happened
RULES: dict[tuple[Status, Happened], tuple[Status, Say]] = {
    # not taken up yet: the refresh tries it again
    (_S.NEW, _H.AWAY): (_S.NEW_AWAY, Say.NOT_TAKEN),
    (_S.NEW_AWAY, _H.AWAY): (_S.NEW_AWAY, Say.NOTHING),
    (_S.NEW, _H.MOVED): (_S.NEW, Say.MOVE),
    (_S.NEW, _H.MOVING): (_S.NEW, Say.MOVE),
    (_S.NEW_AWAY, _H.MOVED): (_S.NEW_AWAY, Say.MOVE),
    (_S.NEW_AWAY, _H.MOVING): (_S.NEW_AWAY, Say.MOVE),
    (_S.NEW, _H.TAKEN): (_S.SERVING, Say.TAKEN),
    (_S.NEW_AWAY, _H.TAKEN): (_S.SERVING, Say.TAKEN),
    # served
    (_S.SERVING, _H.AWAY): (_S.AWAY, Say.PARKED),
    (_S.SERVING, _H.MOVED): (_S.MOVED, Say.MOVE),
    (_S.SERVING, _H.MOVING): (_S.MOVING, Say.MOVE),
    (_S.SERVING, _H.CALL_OK): (_S.SERVING, Say.NOTHING),
    (_S.SERVING, _H.WHOLE_OK): (_S.SERVING, Say.NOTHING),
    # parked: its node away
    (_S.AWAY, _H.AWAY): (_S.AWAY, Say.NOTHING),
    (_S.AWAY, _H.MOVED): (_S.MOVED, Say.MOVE),
    (_S.AWAY, _H.MOVING): (_S.MOVING, Say.MOVE),
    (_S.AWAY, _H.CALL_OK): (_S.SERVING, Say.BACK),
    (_S.AWAY, _H.WHOLE_OK): (_S.SERVING, Say.BACK),
    # parked: its slot moved
    (_S.MOVED, _H.AWAY): (_S.AWAY, Say.PARKED),
    (_S.MOVED, _H.MOVED): (_S.MOVED, Say.MOVE),
    (_S.MOVED, _H.MOVING): (_S.MOVING, Say.MOVE),
    (_S.MOVED, _H.CALL_OK): (_S.SERVING, Say.NOTHING),
    (_S.MOVED, _H.WHOLE_OK): (_S.SERVING, Say.NOTHING),
    # parked: its slot being moved (a read goes through; the commit after it would not)
    (_S.MOVING, _H.AWAY): (_S.AWAY, Say.PARKED),
    (_S.MOVING, _H.MOVED): (_S.MOVED, Say.MOVE),
    (_S.MOVING, _H.MOVING): (_S.MOVING, Say.MOVE),
    (_S.MOVING, _H.CALL_OK): (_S.MOVING, Say.NOTHING),
    (_S.MOVING, _H.WHOLE_OK): (_S.SERVING, Say.NOTHING),
}
"""(status, what happened) -> (next status, what to say). BATCH_OK keeps any status and
ends the move's timer (MOVE_OVER). A pair not here does not happen (a scope not taken up
is not called but by the refresh)."""


@dataclass(slots=True)
class Parked:
    """A scope set aside (`ParkPolicy.parked`)."""

    since: float
    retry: float
    """When it is tried again (the worker's clock)."""
    backoff: float
    status: Status

    @property
    def moved(self) -> bool:
        """Parked for a move (MOVED, or MOVING), not because its node cannot be reached."""
        return self.status is not Status.AWAY


@dataclass(slots=True)
class Moving:
    """A scope whose slot answers MOVED, ASK or TRYAGAIN since `since`, across its parks,
    until a batch round trip of it goes through."""

    since: float
    stuck: bool = False
    """Said at warning for lasting SFC_OUTAGE_THRESHOLD."""
    backoff: float = 0.0
    """The backoff of its last park: the next one goes on from it."""


@dataclass(frozen=True, slots=True)
class Said:
    """What a step says (`Say`), and the seconds it names (away, or the move's age)."""

    say: Say
    seconds: float = 0.0


def stuck_move(since: float, now: float, threshold_ms: int) -> bool:
    """Whether a move since `since` has lasted SFC_OUTAGE_THRESHOLD (`threshold_ms`)."""
    return (now - since) * 1000 >= threshold_ms


class ParkPolicy:
    """The park-and-move state of a worker's scopes: pure, `now` passed in (`RULES`)."""

    def __init__(self, threshold_ms: int) -> None:
        self.threshold_ms = threshold_ms
        self.parked: dict[str, Parked] = {}
        self.moving: dict[str, Moving] = {}
        self.not_taken: set[str] = set()
        """Scopes not taken up because their node cannot be reached (said once)."""

    def status(self, scope: str, taken: bool = True) -> Status:
        if not taken:
            return Status.NEW_AWAY if scope in self.not_taken else Status.NEW
        parked = self.parked.get(scope)
        return Status.SERVING if parked is None else parked.status

    def step(self, scope: str, happened: Happened, now: float, taken: bool = True) -> Said:
        """Apply what happened to `scope` at `now` (`RULES`); what to say of it."""
        if happened is Happened.BATCH_OK:
            moving = self.moving.pop(scope, None)
            return Said(Say.NOTHING) if moving is None else Said(Say.MOVE_OVER, now - moving.since)
        before = self.status(scope, taken)
        after, say = RULES[before, happened]
        parked = self.parked.get(scope)
        if happened is Happened.AWAY or happened is Happened.TAKEN:
            self.moving.pop(scope, None)  # a move's timer does not count an outage
        if after in PARKED and happened in FAILURES:
            if parked is None:
                first = PARK_FIRST_S
                moving = self.moving.get(scope)
                if after is not Status.AWAY and moving is not None:  # the same move goes on
                    first = min(PARK_MAX_S, max(PARK_FIRST_S, moving.backoff * 2))
                self.parked[scope] = Parked(now, now + first, first, after)
            else:
                self.back_off(scope, now)
                parked.status = after
        elif parked is not None and before in PARKED and after not in PARKED:
            del self.parked[scope]
            moving = self.moving.get(scope)
            if moving is not None:
                moving.backoff = parked.backoff
            if say is Say.BACK:
                self.moving.pop(scope, None)
                return Said(Say.BACK, now - parked.since)
        if after is Status.NEW_AWAY:
            self.not_taken.add(scope)
        elif after is Status.SERVING:
            self.not_taken.discard(scope)
        if say is Say.MOVE:
            return self._move(scope, now)
        return Said(say)

    def _move(self, scope: str, now: float) -> Said:
        moving = self.moving.get(scope)
        if moving is None:
            self.moving[scope] = Moving(now)
            return Said(Say.MOVE_STARTED)
        if not moving.stuck and stuck_move(moving.since, now, self.threshold_ms):
            moving.stuck = True
            return Said(Say.MOVE_STUCK, now - moving.since)
        return Said(Say.NOTHING)

    def back_off(self, scope: str, now: float) -> None:
        """A try of parked `scope` failed (or its node's probe): double its backoff."""
        parked = self.parked[scope]
        parked.backoff = min(PARK_MAX_S, parked.backoff * 2)
        parked.retry = now + parked.backoff

    def routes_moved(self, now: float) -> None:
        """Another node serves a slot now (a failover): every parked scope is tried now."""
        for parked in self.parked.values():
            parked.retry = now

    def due(self, now: float) -> list[str]:
        """The parked scopes whose next try has come."""
        return [s for s, p in self.parked.items() if p.retry <= now]

    def needs_probe(self, scopes: Sequence[str]) -> bool:
        """Whether the due scopes of one node wait for a PING first: one of them is AWAY."""
        return any(self.parked[s].status is Status.AWAY for s in scopes)

    def serving(self, scopes: Sequence[str], due: set[str], whole: bool) -> list[str]:
        """Of `scopes`, those to call now: not parked, or due (MOVING only for a `whole`
        call)."""
        parked = self.parked
        return [
            s
            for s in scopes
            if s not in parked or (s in due and (whole or parked[s].status is not Status.MOVING))
        ]

    def forget(self, wanted: Sequence[str], taken: Sequence[str]) -> None:
        """Forget the scopes not taken up that left the registry (not in `wanted`)."""
        for gone in [s for s in self.moving if s not in wanted and s not in taken]:
            del self.moving[gone]
        self.not_taken.intersection_update(wanted)


# -- the words


def stuck_text(
    who: str, error: BaseException, slot: int | None, lasted: float, waits: str, wall: float
) -> str:
    """The warning of a move that has lasted SFC_OUTAGE_THRESHOLD, with its likely cause;
    `wall` is the time of day now (time.time())."""
    where = moved_to(error)
    if where is not None:
        slot = where.slot
        answered = f"{where.answer} (to {where.node})"
    else:
        answered = "TRYAGAIN"
    if where is None or where.answer == "ASK":
        cause = (
            "a reshard stuck half way (the slot left migrating on one node and importing on "
            "another), or a misconfigured cluster, most likely"
        )
    else:
        cause = (
            "its nodes disagree about who serves it (a failover or a reshard not finished, "
            "or a misconfigured cluster), most likely"
        )
    since = datetime.fromtimestamp(wall - lasted, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"{who}: {'a slot' if slot is None else f'slot {slot}'} has answered {answered} for "
        f"{lasted:.0f} s, since {since}: {cause} (`CLUSTER SLOTS` and `CLUSTER NODES` on its "
        f"nodes show who serves it); {waits}; tried again with backoff"
    )


def _extra(scope: str | None, error: BaseException) -> dict[str, object]:
    return {"scope": scope, "reason": f"{type(error).__name__}: {error}"}


# -- the policy applied


class Routes:
    """A worker's routing on a cluster: which scopes to serve now, what a failed call
    means for them, and the log lines of both (`ParkPolicy` decides)."""

    def __init__(
        self,
        store: Store,
        threshold_ms: int,
        consumer: str,
        clock: Callable[[], float],
        metrics: WorkerMetrics | None = None,
        isolate: bool | None = None,
    ) -> None:
        self.store = store
        self.isolate = isolate
        """Whether scopes are parked one by one; None: on a cluster (production). True lets
        the park path be tested on one server."""
        self.policy = ParkPolicy(threshold_ms)
        self.parked = self.policy.parked
        self.moving = self.policy.moving
        self.consumer = consumer
        self.clock = clock
        self.metrics = metrics
        self.scopes: list[str] = []
        """The worker's scopes taken up (its own list)."""
        self.reread: dict[str, str] = {}
        """Scopes whose own pending entries are read before new ones, by the id to read
        after: a parked scope may have entries this worker read and did not commit."""
        self._moves = store.moves
        """Store.moves when the parks last ended on a slot move."""
        self.move_said_per_scope: BaseException | None = None
        """The move the refresh raises to the loop (it took up no scope), said for each
        scope already (`taking_up`)."""
        self.move_left_to_loop: tuple[BaseException, str] | None = None
        """The move left to the loop (no other scope left to serve), and whose call it was."""
        self.stalls: Counter[str] = Counter()
        """Real calls of a scope that failed because its node cannot be reached, by node
        (each waited out a timeout or was refused; a probe's PING is not counted)."""

    def isolating(self, scopes: Sequence[str] | None = None) -> bool:
        """Whether a scope that fails so is parked, the others served on: on a cluster
        (or `isolate`), with several scopes (each may live on a node of its own): those
        taken up, or `scopes` (those a refresh wants)."""
        isolate = self.store.cluster is not None if self.isolate is None else self.isolate
        return isolate and len(self.scopes if scopes is None else scopes) > 1

    def serving(self, whole: bool = False) -> list[str]:
        """The scopes to call now (`ParkPolicy.serving`); a parked node whose try has come
        is probed first with a short PING (Store.answers) and stays parked if it is silent."""
        policy = self.policy
        if not policy.parked:
            return self.scopes
        now = self.clock()
        away = next(
            (self.store.node_name(s) for s, p in policy.parked.items() if not p.moved), None
        )
        self.store.refresh_routes(away)
        if self.store.moves != self._moves:
            self._moves = self.store.moves
            policy.routes_moved(now)
        due = set(policy.due(now))
        nodes: dict[str, list[str]] = {}
        for scope in due:
            nodes.setdefault(self.store.node_name(scope), []).append(scope)
        for group in nodes.values():
            if policy.needs_probe(group) and not self.store.answers(group[0]):
                for scope in group:
                    policy.back_off(scope, now)
                due -= set(group)
        return policy.serving(self.scopes, due, whole)

    def park(self, scope: str, error: Exception) -> bool:
        """Park `scope`, whose call raised `error`, with its node's scopes if its node is
        away, and say True; False when the caller raises `error` instead (not a failure
        the policy parks for, a worker that does not isolate, or no other scope left)."""
        happened = failure(error)
        if happened is None or not self.isolating():
            return False
        if happened is Happened.AWAY:
            node = self.store.node_name(scope)
            self.stalls[node] += 1
            group = [s for s in self.scopes if s == scope or self.store.node_name(s) == node]
        else:
            self.store.refresh_routes()  # a move it shows ends the park at once (`serving`)
            group = [scope]
        for s in group:
            self.reread[s] = "0"  # what each read before may be pending: read it first
        if all(s in self.parked or s in group for s in self.scopes):
            if happened is not Happened.AWAY:
                self.move_left_to_loop = (error, scope)  # the loop says whose it is
            return False
        now = self.clock()
        for s in group:
            self.say(s, self.policy.step(s, happened, now), error)
        return True

    def went_through(self, scope: str, whole: bool = False) -> None:
        """A call of `scope` went through (`whole`: the sweep, a commit)."""
        if scope in self.parked:
            happened = Happened.WHOLE_OK if whole else Happened.CALL_OK
            self.say(scope, self.policy.step(scope, happened, self.clock()))

    def round_trip(self, scope: str) -> None:
        """A batch round trip of `scope` went through: a move of its slot is over."""
        if scope in self.moving:
            self.say(scope, self.policy.step(scope, Happened.BATCH_OK, self.clock()))

    def taking_up(self, scope: str, error: Exception | None) -> None:
        """The refresh took `scope` up (`error` None), or its node failed it so. While no
        scope is taken up, the refresh raises its last failure to the loop: a move is said
        for each scope here, not again by the loop (`move_said_per_scope`)."""
        if error is None:
            self.policy.step(scope, Happened.TAKEN, self.clock(), taken=False)
            return
        happened = failure(error)
        assert happened is not None
        if happened is not Happened.AWAY:
            self.store.refresh_routes()  # routine: the next refresh goes where it went
        if not self.scopes:
            self.move_said_per_scope = None if happened is Happened.AWAY else error
        said = self.policy.step(scope, happened, self.clock(), taken=False)
        self.say(scope, said, error)

    def say(self, scope: str, said: Said, error: BaseException | None = None) -> None:
        """The log line (and metric) of a step of `scope`."""
        say = said.say
        if say is Say.NOTHING or say is Say.TAKEN:
            return
        if say is Say.MOVE_OVER:
            log.info(
                "scope %s: served again after %.1f s",
                scope,
                said.seconds,
                extra={"scope": scope, "reason": f"its slot moved {said.seconds:.1f} s ago"},
            )
            return
        if say is Say.BACK:
            log.warning(
                "scope %s: served again after %.1f s",
                scope,
                said.seconds,
                extra={
                    "scope": scope,
                    "reason": f"its node could not be reached for {said.seconds:.1f} s",
                },
            )
            return
        assert error is not None
        if say is Say.MOVE_STARTED:
            reason = moving_reason(error, slot_of(scope))
            log.info("scope %s: %s", scope, reason, extra=_extra(scope, error))
        elif say is Say.MOVE_STUCK:
            text = stuck_text(
                f"scope {scope}", error, slot_of(scope), said.seconds, WAITS, time.time()
            )
            log.warning("%s", text, extra=_extra(scope, error))
        elif say is Say.PARKED:
            log.warning(
                "scope %s: its node cannot be reached (%s); serving the other scopes, and "
                "trying it again with backoff",
                scope,
                unreachable_reason(error, slot_of(scope)),
                extra=_extra(scope, error),
            )
            if self.metrics is not None:
                self.metrics.parked(scope)
        elif say is Say.NOT_TAKEN:
            log.warning(
                "scope %s: not taken up now: its node cannot be reached (%s); tried again "
                "at the next refresh",
                scope,
                unreachable_reason(error),
                extra=_extra(scope, error),
            )

    # -- a move the loop waits out (a worker of one scope, or every scope's)

    def loop_move(self, error: Exception, moving: Moving | None) -> Moving:
        """The loop's move: said at info when it starts, once at warning when stuck. One
        the refresh said for each scope (`move_said_per_scope`) is not said again."""
        said, self.move_said_per_scope = self.move_said_per_scope is error, None
        now = self.clock()
        if moving is None:
            moving = Moving(now)
            if not said:  # (nor its end: each scope says `serving scope S` when taken up)
                _, scope, slot = self._loop_scope(error)
                reason = moving_reason(error, slot)
                log.info("worker %s: %s", self.consumer, reason, extra=_extra(scope, error))
        elif (
            not said
            and not moving.stuck
            and stuck_move(moving.since, now, self.policy.threshold_ms)
        ):
            moving.stuck = True
            who, scope, slot = self._loop_scope(error)
            waits = WAITS if scope is not None else "new scopes wait meanwhile"
            text = stuck_text(who, error, slot, now - moving.since, waits, time.time())
            log.warning("%s", text, extra=_extra(scope, error))
        self.move_left_to_loop = None
        return moving

    def loop_move_over(self, moving: Moving) -> None:
        """The loop's move is over (a sweep went through): its end, at info, if stuck."""
        if moving.stuck:
            lasted = self.clock() - moving.since
            log.info(
                "worker %s: served again after %.1f s",
                self.consumer,
                lasted,
                extra={"reason": f"its slot moved {lasted:.1f} s ago"},
            )

    def _loop_scope(self, error: Exception) -> tuple[str, str | None, int | None]:
        """Who says the loop's move, the scope served in its slot (None: sfc:scopes), and
        the slot (None when unknown: a TRYAGAIN names none)."""
        where = moved_to(error)
        raised = self.move_left_to_loop
        if where is not None:
            slot: int | None = where.slot
            scope = next((x for x in self.scopes if slot_of(x) == slot), None)
        elif len(self.scopes) == 1:  # a TRYAGAIN: a call of several keys of a scope
            scope = self.scopes[0]
            slot = slot_of(scope)
        elif raised is not None and raised[0] is error:
            scope = raised[1]
            slot = slot_of(scope)
        else:
            scope = slot = None
        who = f"worker {self.consumer}"
        return (who if scope is None else f"{who}, scope {scope}"), scope, slot

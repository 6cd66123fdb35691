"""The adapter side of the equipment stream (docs/host.md, "The equipment stream").

An adapter reads `sfc:equipment:{scope}` with a consumer group of its own, created at `0`,
delivers push, hold and restart (deduplicated by command id, dropped past `expiresAt`), and
answers through `respond`, always with the command id and the round it received. The
notices `await` and `withdraw` may be ignored.

`Responder` is such an adapter in-process, answering with a function of the entry; tests,
the bench and the scripted equipment use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from msgspec import UNSET

from generated.equipment_entry_v1_0 import AwaitData, CommandData
from generated.work_entry_v1_0 import AnswerData, EventData
from host import keys
from host.entries import Entry, EntryError, checked, decode_equipment, encode, fields
from host.keys import EVENTS_UNMATCHED
from host.store import Store

log = logging.getLogger("sfc.host.equipment")


@dataclass(frozen=True, slots=True)
class Answer:
    """What equipment says to one command: an outcome, or an error (a failure)."""

    outcome: str | None = None
    error: str | None = None


def answer_data(
    job: str,
    action_key: str,
    *,
    outcome: str | None = None,
    error: str | None = None,
    command_id: str | None = None,
    round: int | None = None,
) -> AnswerData:
    if outcome is not None and error is not None:
        raise ValueError("an answer has an outcome or an error, not both")
    keys.check_job(job)
    if not action_key.startswith(f"{job}:"):
        action_key = f"{job}:{action_key}"
    data = AnswerData(
        job=job,
        action_key=action_key,
        command_id=UNSET if command_id is None else command_id,
        outcome=UNSET if outcome is None else outcome,
        error=UNSET if error is None else error,
        round=UNSET if round is None else round,
    )
    checked("answer", data)
    return data


def respond(
    store: Store,
    scope: str,
    job: str,
    action_key: str,
    *,
    outcome: str | None = None,
    error: str | None = None,
    command_id: str | None = None,
    round: int | None = None,
) -> str:
    """Queue equipment's answer (`action_key`: `{job}:{action}`) as an `answer` work entry;
    returns the entry id. An answer for a job not stored is dropped later, by the worker."""
    keys.check_scope(scope)
    data = answer_data(
        job, action_key, outcome=outcome, error=error, command_id=command_id, round=round
    )
    return store.add_work(scope, fields("answer", data))


def publish_event(
    store: Store,
    scope: str,
    type_id: str,
    *,
    subject: str | None = None,
    correlation_id: str | None = None,
    outcome: str | None = None,
    source: str | None = None,
    id: str | None = None,
) -> str | None:
    """Queue an event for the jobs that wait for its type; returns the entry id, or None
    when no job waits for it (dropped, counted as `eventsUnmatched`). `source` and `id`
    identify it: a second copy completes nothing."""
    keys.check_scope(scope)
    data = event_data(
        type_id,
        subject=subject,
        correlation_id=correlation_id,
        outcome=outcome,
        source=source,
        id=id,
    )
    return store.publish(scope, type_id, encode(data), EVENTS_UNMATCHED)


def event_data(
    type_id: str,
    *,
    subject: str | None = None,
    correlation_id: str | None = None,
    outcome: str | None = None,
    source: str | None = None,
    id: str | None = None,
) -> EventData:
    """The data of an `event` work entry, checked as `publish_event` checks it."""
    if not type_id:
        raise ValueError("an event needs a type id")
    if (source is None) != (id is None):
        raise ValueError("an event's source and id come together: give both or neither")
    data = EventData(
        type_id=type_id,
        subject=UNSET if subject is None else subject,
        correlation_id=UNSET if correlation_id is None else correlation_id,
        outcome=UNSET if outcome is None else outcome,
        source=UNSET if source is None else source,
        id=UNSET if id is None else id,
    )
    checked("event", data)
    return data


@dataclass(slots=True)
class Responder:
    """An in-process adapter of `scope`'s equipment stream (group `group`): answers each
    push, hold and restart with `reply(kind, data)` (None: stay silent)."""

    store: Store
    scope: str
    reply: Callable[[str, CommandData], Answer | None]
    group: str = "sfc-responder"
    consumer: str = "responder-1"
    on_await: Callable[[AwaitData], None] | None = None
    seen: set[str] = field(default_factory=set)
    answered: int = 0
    linger: float = 0.0
    """Seconds a short read waits for more commands before they are answered (0: answer at
    once). Commands that come one at a time then cost one round, not one round each."""
    sleep: Callable[[float], None] = time.sleep
    _next: list[tuple[str, dict[bytes, bytes]]] = field(default_factory=list)
    """Equipment entries read ahead with the last answers: the next round's."""

    def __post_init__(self) -> None:
        self.store.equipment_group(self.scope, self.group)

    def pump(self, block_ms: int | None = None, count: int = 500) -> int:
        """Answer what has come since the last call, ack it and read the next entries
        (blocking up to `block_ms`) in one round trip; returns the entries read."""
        rows, self._next = self._next, []
        if not rows:
            rows = self.store.read_equipment(self.scope, self.group, self.consumer, count, block_ms)
        if not rows:
            return 0
        if self.linger > 0 and len(rows) < count:
            self.sleep(self.linger)
            rows += self.store.read_equipment(
                self.scope, self.group, self.consumer, count - len(rows), None
            )
        answers: list[dict[str, bytes]] = []
        for entry_id, raw in rows:
            try:
                entry = decode_equipment(entry_id, raw)
            except EntryError as e:
                log.warning("equipment entry %s of %s skipped: %s", entry_id, self.scope, e)
                continue
            answers += self._answer(entry)
        self._next = self.store.reply_equipment(
            self.scope, self.group, self.consumer, answers, [i for i, _ in rows], count, block_ms
        )
        self.answered += len(answers)
        return len(rows)

    def _answer(self, entry: Entry) -> Sequence[dict[str, bytes]]:
        data = entry.data
        if isinstance(data, AwaitData):
            if self.on_await is not None:
                self.on_await(data)
            return []
        if not isinstance(data, CommandData) or data.command_id in self.seen:
            return []  # a notice, or a command delivered twice: deduplicated by its id
        self.seen.add(data.command_id)
        answer = self.reply(entry.kind, data)
        if answer is None:
            return []
        return [
            fields(
                "answer",
                answer_data(
                    data.job,
                    data.action_key,
                    outcome=answer.outcome,
                    error=answer.error,
                    command_id=data.command_id,
                    round=data.round,
                ),
            )
        ]


def always(outcome: str = "ok") -> Callable[[str, CommandData], Answer]:
    """A reply function that answers every command with `outcome` (a hold with `held`)."""

    def reply(kind: str, data: CommandData) -> Answer:
        return Answer(outcome="held" if kind == "hold" else outcome)

    return reply

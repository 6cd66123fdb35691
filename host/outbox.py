"""Which commands a commit appends to the equipment stream (pure; docs/host.md).

The equipment stream is the outbox: the commit that stores a state appends the commands of
that evaluation. A startWork of work push, hold or restart is appended exactly when its
command id was created in this evaluation, that is, when its number is above the loaded
state's `sequence`. A release re-issues open attempts with their old ids, and those are not
appended again, so no sent markers are needed. A startWork of work await, and every
cancelWork, is appended as a notice (kinds `await` and `withdraw`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from generated.command_v1_0 import CancelWork, Command, StartWork
from generated.equipment_entry_v1_0 import AwaitData, AwaitSelector, CommandData, WithdrawData
from sfc.graph import Graph

EquipmentItem = tuple[str, CommandData | AwaitData | WithdrawData]


def command_number(command_id: str) -> int | None:
    """The sequence number of `{actionKey}#{n}` or a hold's `{actionKey}#{n}:hold`; None
    when it has another form."""
    _, sep, number = command_id.removesuffix(":hold").rpartition("#")
    if not sep or not (number.isascii() and number.isdigit()) or len(number) > 19:
        return None
    return int(number)


def expires_at(at: int, deadline: int, grace: int) -> int:
    """The deadline less the grace, but never earlier than half the attempt's time after `at`."""
    return max(deadline - grace, at + max(0, deadline - at) // 2)


def is_new(command: StartWork, loaded_sequence: int) -> bool:
    number = command_number(command.command_id)
    return number is not None and number > loaded_sequence


def outgoing(
    commands: Iterable[Command],
    *,
    loaded_sequence: int,
    job: str,
    at: int,
    grace: int,
    graph: Graph,
) -> list[EquipmentItem]:
    """The equipment entries (kind, data) that one evaluation's commands give, in order."""
    items: list[EquipmentItem] = []
    prefix = f"{job}:"
    for c in commands:
        if isinstance(c, StartWork):
            if c.work == "await":
                selector = (
                    None
                    if c.selector is None
                    else AwaitSelector(
                        subject=c.selector.subject, correlation_id=c.selector.correlation_id
                    )
                )
                items.append(("await", AwaitData(**_common(c, job, at, grace), selector=selector)))
            elif is_new(c, loaded_sequence):
                # the fields of `_common`, named here: a push of every applied event, and
                # building them as a dict first took half its time
                data = CommandData(
                    command_id=c.command_id,
                    action_key=c.action_key,
                    job=job,
                    type_id=c.type_id,
                    attempt=c.attempt,
                    round=c.round,
                    deadline=c.deadline,
                    expires_at=expires_at(at, c.deadline, grace),
                    parameters=c.parameters,
                    qualifier=c.qualifier,
                    stop_at=c.stop_at,
                )
                items.append((c.work, data))
        elif isinstance(c, CancelWork):
            action = c.action_key.removeprefix(prefix)
            spec = graph.actions.get(action)
            items.append(
                (
                    "withdraw",
                    WithdrawData(
                        command_id=c.command_id,
                        action_key=c.action_key,
                        job=job,
                        type_id="" if spec is None else spec.type_id,
                        reason=c.reason,
                    ),
                )
            )
    return items


def _common(c: StartWork, job: str, at: int, grace: int) -> dict[str, Any]:
    return {
        "command_id": c.command_id,
        "action_key": c.action_key,
        "job": job,
        "type_id": c.type_id,
        "attempt": c.attempt,
        "round": c.round,
        "deadline": c.deadline,
        "expires_at": expires_at(at, c.deadline, grace),
        "parameters": c.parameters,
    }

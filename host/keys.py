"""Every key the host uses, in one place (docs/host.md, "Keys").

Every key of a scope carries the scope as a hash tag, `{scope}`, so that one function call
touches one slot and the same code runs on a Valkey Cluster. Three kinds of key live apart,
each in a slot of its own: the recipe texts (`sfc:recipe:{hash}`), the scope registry, and
the MQTT bridges' holds on their client ids (`sfc:mqtt-client:{id}`).
"""

from __future__ import annotations

import re

GROUP = "sfc-engine"
"""The consumer group through which every instance reads the work stream."""
LIBRARY = "sfc_1"
"""The function library; its functions are named `sfc1_<name>`."""
SCOPES = "sfc:scopes"
ENTRY_FORMAT = "1"
"""The `v` field of every stream entry."""

_NAME = re.compile(r"[^{}\x00-\x20\x7f\ud800-\udfff]+")
SCOPE_LIMIT = 64
JOB_LIMIT = 128

# Counters in sfc:scope:{S}, kept by whoever drops an entry, so any process can report them.
METHODS_APPLIED = "methodsApplied:"
"""Then the method's name (`methodsApplied:Pause`): counted in the method's commit."""
METHODS_REFUSED = "methodsRefused:"
"""Then the method's name: the order's state did not allow it (ReturnStatus 8)."""
ANSWERS_DROPPED = "answersDropped"
ENTRIES_DROPPED = "entriesDropped"
EVENTS_UNMATCHED = "eventsUnmatched"
"""Events dropped at publish because no job waited for the type, or that no wait took."""
EVENTS_DUPLICATE = "eventsDuplicate"


class KeyError_(ValueError):
    """A scope or a job id that cannot be part of a key."""


def check_name(value: str, what: str, limit: int) -> str:
    """`value`, if it can be a scope or a job id; else a KeyError_ that says why."""
    if not value:
        raise KeyError_(f"the {what} is empty")
    if len(value) > limit:
        raise KeyError_(f"the {what} has {len(value)} characters; at most {limit} are allowed")
    bad = None
    if _NAME.fullmatch(value) is None:
        bad = next(c for c in value if _NAME.fullmatch(c) is None)
        if "\ud800" <= bad <= "\udfff":  # from bytes that were not UTF-8 (a command line's)
            raise KeyError_(f"the {what} {value!r} contains {bad!r}, which is not UTF-8 text")
    elif not value.isprintable():
        # beyond ASCII: Unicode's spaces, line and paragraph separators, and control and
        # format characters (a right-to-left override, say), none of which shows as itself
        bad = next(c for c in value if not c.isprintable())
    if bad is not None:
        raise KeyError_(
            f"the {what} {value!r} contains {bad!r}: braces, spaces and control characters "
            "are not allowed"
        )
    return value


def check_scope(scope: str) -> str:
    return check_name(scope, "scope", SCOPE_LIMIT)


def check_job(job: str) -> str:
    return check_name(job, "job id", JOB_LIMIT)


def job(scope: str, job_id: str) -> str:
    return f"sfc:job:{{{scope}}}:{job_id}"


def history(scope: str, job_id: str) -> str:
    return f"sfc:history:{{{scope}}}:{job_id}"


def orders(scope: str) -> str:
    return f"sfc:orders:{{{scope}}}"


def active(scope: str) -> str:
    return f"sfc:active:{{{scope}}}"


def due(scope: str) -> str:
    return f"sfc:due:{{{scope}}}"


def waits(scope: str, type_id: str) -> str:
    return f"sfc:waits:{{{scope}}}:{type_id}"


def seen(scope: str) -> str:
    return f"sfc:seen:{{{scope}}}"


def retired(scope: str) -> str:
    return f"sfc:retired:{{{scope}}}"


def settings(scope: str) -> str:
    return f"sfc:scope:{{{scope}}}"


def work(scope: str) -> str:
    return f"sfc:work:{{{scope}}}"


def dead(scope: str) -> str:
    return f"sfc:dead:{{{scope}}}"


def equipment(scope: str) -> str:
    return f"sfc:equipment:{{{scope}}}"


def heartbeat(scope: str) -> str:
    return f"sfc:heartbeat:{{{scope}}}"


def outage(scope: str) -> str:
    """The jobs an outage pass has still to tick (a copy of `active` taken when it began)."""
    return f"sfc:outage:{{{scope}}}"


def probe(scope: str) -> str:
    """A key never written: a call that names it with the scope's other keys answers a move
    (ASK or TRYAGAIN) for as long as the slot of `{scope}` is being moved (Store.probe)."""
    return f"sfc:probe:{{{scope}}}"


def mqtt_client(client_id: str) -> str:
    """Which MQTT bridge holds a client id now (sfc1_lease): a broker's client ids are not
    a scope's, so the key lives in a slot of its own (the client id has no braces)."""
    return f"sfc:mqtt-client:{{{client_id}}}"


def recipe(recipe_hash: str) -> str:
    return f"sfc:recipe:{recipe_hash}"

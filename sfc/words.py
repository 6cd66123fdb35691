"""How the core words time: one style for points in time, one for lengths of time.

A point in time (`when`) is seconds on the virtual clock of a dry run (`12.500s`), or UTC
for a real one. A length of time (`duration`) is said in the largest units that state it
exactly, larger units first: `30 s`, `0.5 s`, `5 min`, `4 min 50 s`, `1 h 30 min`, `7 days`.
A measured length of time (`elapsed`: how long ago, how long idle) is rounded to the second
from 10 s up: `5 min 35 s`, `2.345 s`.
Transcripts, reasons, explanations and charts all use these two (docs/cli.md, "Transcript").
"""

from __future__ import annotations

from datetime import UTC, datetime

VIRTUAL_CLOCK_LIMIT = 10**11
"""Below this many milliseconds (about three years) a time is on a virtual clock."""

_UNITS = ((86_400_000, "day", "days"), (3_600_000, "h", "h"), (60_000, "min", "min"))


def when(ms: int) -> str:
    """A point in time: seconds on a virtual clock (`12.500s`), else UTC (ISO 8601)."""
    if ms < VIRTUAL_CLOCK_LIMIT:
        return f"{ms / 1000:.3f}s"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def duration(ms: int) -> str:
    """A length of time: `290000` -> `4 min 50 s`, `1500` -> `1.5 s`, `0` -> `0 s`."""
    parts = []
    for size, one, many in _UNITS:
        n, ms = divmod(ms, size)
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    if ms or not parts:
        parts.append(f"{ms / 1000:g} s")
    return " ".join(parts)


ELAPSED_EXACT_BELOW = 10_000
"""Below this many milliseconds `elapsed` keeps the milliseconds; from it, whole seconds."""


def elapsed(ms: int) -> str:
    """A measured length of time, as `duration` says it but rounded to the second from 10 s
    up (`335344` -> `5 min 35 s`, `2345` -> `2.345 s`); below 0 (clocks apart) is `0 s`."""
    ms = max(0, ms)
    if ms >= ELAPSED_EXACT_BELOW:
        ms = (ms + 500) // 1000 * 1000
    return duration(ms)

"""One reconnect policy for every loop that waits out a server it cannot reach: the worker,
the scripted equipment, the MQTT bridge and `sfc job wait`.

- A try that fails waits BACKOFF_FIRST_S before the next, doubled at each try that fails,
  up to BACKOFF_MAX_S (`Reconnect.wait`).
- The outage is said once, at warning, at the first try that fails:
  `WHO: the server is unreachable (WHY); reconnecting with backoff`.
- Its end is said once, at info, when a try goes through (or the node answers, with a move):
  `WHO: reconnected after N s`.
- A move of a cluster's slot (MOVED, ASK, TRYAGAIN) is no outage: the node answered. The
  loop says it in its own words (host/cluster.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from host.cluster import moving_reason
from host.store import slot_moving, slot_of, unreachable, unreachable_reason

if TYPE_CHECKING:
    from host.store import Store

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class Reconnect:
    """The outage of one loop: its backoff, and its two lines (`who` names the loop)."""

    def __init__(
        self,
        who: str,
        logger: logging.Logger | None,
        clock: Callable[[], float] = time.monotonic,
        on_reconnect: Callable[[], object] | None = None,
        *,
        echo: Callable[[str], object] | None = None,
        most: float = BACKOFF_MAX_S,
    ) -> None:
        self.who = who
        self.log = logger
        self.echo = echo
        """Where a command that does not log (`sfc job wait`) says the two lines instead."""
        self.clock = clock
        self.on_reconnect = on_reconnect
        """Called when an outage ends (a metric)."""
        self.most = most
        """The longest backoff (a command a person waits on tries more often)."""
        self.backoff = 0.0
        self.down_since: float | None = None
        """When the outage started (`clock`); None while the server answers."""

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def unreachable(self, error: BaseException) -> None:
        """A try failed: the server cannot be reached (said at the first such try)."""
        if self.down_since is not None:
            return
        self.down_since = self.clock()
        text = f"{self.who}: the server is unreachable ({unreachable_reason(error)})"
        if self.echo is not None:
            self.echo(f"{text}; waiting")
        if self.log is not None:
            self.log.warning(
                "%s; reconnecting with backoff",
                text,
                extra={"reason": f"{type(error).__name__}: {error}"},
            )

    def answered(self) -> None:
        """The server answered (a try went through, or a node answered a move): the
        outage, if any, is over and said."""
        if self.down_since is None:
            return
        down = self.clock() - self.down_since
        self.down_since = None
        if self.echo is not None:
            self.echo(f"{self.who}: reconnected after {down:.1f} s")
        if self.log is not None:
            self.log.info(
                "%s: reconnected after %.1f s",
                self.who,
                down,
                extra={"reason": f"the server was unreachable for {down:.1f} s"},
            )
        if self.on_reconnect is not None:
            self.on_reconnect()

    def went_through(self) -> None:
        """A try went through: the outage is over, and the backoff starts again."""
        if self.down_since is not None:
            self.answered()
        self.backoff = 0.0

    def wait(self) -> float:
        """How long to wait before the next try."""
        self.backoff = min(self.most, max(BACKOFF_FIRST_S, self.backoff * 2))
        return self.backoff


def pump_until_stopped(
    pump: Callable[[], object],
    stop: threading.Event,
    store: Store,
    scope: str,
    reconnect: Reconnect,
) -> None:
    """Call `pump` until `stop` is set, waiting out a server it cannot reach; a move of the
    slot of `scope` is said once at info until a pump goes through. Other errors raise."""
    moving = False  # a move said since the last pump that went through
    while not stop.is_set():
        try:
            pump()
        except Exception as e:
            if not unreachable(e):
                raise
            store.refresh_routes()  # a cluster's slot may have moved
            if slot_moving(e):
                reconnect.answered()  # routine: the node answered
                if not moving:
                    moving = True
                    if reconnect.log is not None:
                        reason = moving_reason(e, slot_of(scope))
                        reconnect.log.info("%s: %s", reconnect.who, reason)
            else:
                reconnect.unreachable(e)
            store.wait_out(stop, reconnect.wait())  # a cluster's failover ends it
            continue
        reconnect.went_through()
        moving = False

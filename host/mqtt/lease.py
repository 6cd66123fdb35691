"""A bridge's hold on its MQTT client id, through a lease on the server: one bridge per
broker session at a time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from host import keys
from host.store import Store, unreachable

log = logging.getLogger("sfc.host.mqtt")

LEASE_TTL_MS = 10_000
"""How long a bridge's hold on its client id lasts unless renewed (every third of it): a
bridge that was killed leaves its client id free after this."""


class ClientIdTaken(RuntimeError):
    """Another live bridge holds this client id: a broker session has one client at a time
    (a second one would take it over, and the two would take turns)."""


@dataclass
class ClientLease:
    """A bridge's hold on its MQTT client id (`sfc1_lease` on `sfc:mqtt-client:{ID}`) for
    `ttl_ms`, renewed by a thread every third of it. Unrenewed for two thirds of `ttl_ms`,
    it calls `fence` (leave the broker) until renewed; taken by another, it sets `lost`."""

    store: Store
    client_id: str
    holder: str
    ttl_ms: int = LEASE_TTL_MS
    lost: ClientIdTaken | None = None
    renewed: int = 0
    """Renewals that landed."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return keys.mqtt_client(self.client_id)

    def take(self, stop: threading.Event | None = None) -> bool:
        """Hold the client id; wait while another bridge holds it, for as long as a killed
        holder's lease lasts; ClientIdTaken when it is held still. False when `stop` was
        set meanwhile (not held)."""
        deadline = time.monotonic() + self.ttl_ms / 1000 + 1.0
        warned = False
        while True:
            other = self.store.lease(self.key, self.holder, self.ttl_ms)
            if other is None:
                return True
            if time.monotonic() >= deadline:
                raise ClientIdTaken(
                    f"the MQTT client id {self.client_id!r} is held by another bridge "
                    f"(consumer {other}): give each bridge its own --client-id"
                )
            if not warned:
                log.warning(
                    "the MQTT client id %s is held by %s; waiting up to %.0f s for it",
                    self.client_id,
                    other,
                    deadline - time.monotonic(),
                )
                warned = True
            pause = min(0.25, self.ttl_ms / 4000)
            if stop is None:
                time.sleep(pause)
            elif stop.wait(pause):
                return False

    def keep(self, fence: Callable[[], None], unfence: Callable[[], None]) -> None:
        """Renew it in a thread until `release`."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._renew, args=(fence, unfence), name="sfc-mqtt-lease", daemon=True
        )
        self._thread.start()

    def _renew(self, fence: Callable[[], None], unfence: Callable[[], None]) -> None:
        last, fenced = time.monotonic(), False
        while not self._stop.wait(self.ttl_ms / 3000):
            sent = time.monotonic()  # the hold runs from the call, not from its reply
            try:
                other = self.store.lease(self.key, self.holder, self.ttl_ms)
            except Exception as e:  # unreachable, or refused: it is not renewed either way
                if unreachable(e):
                    self.store.refresh_routes()  # its slot may have moved (a reshard)
                if not fenced and time.monotonic() - last > self.ttl_ms * 2 / 3000:
                    log.warning(
                        "the hold on MQTT client id %s could not be renewed for %.1f s (%s); "
                        "disconnected from the broker until it is",
                        self.client_id,
                        time.monotonic() - last,
                        e,
                    )
                    fence()
                    fenced = True
                continue
            if other is not None:
                self.lost = ClientIdTaken(
                    f"the MQTT client id {self.client_id!r} was taken by another bridge "
                    f"(consumer {other}) while this one could not renew its hold; it stops"
                )
                if not fenced:
                    fence()
                return
            last = sent
            self.renewed += 1
            if fenced:
                log.warning(
                    "the hold on MQTT client id %s is renewed; connecting again", self.client_id
                )
                unfence()
                fenced = False

    def stop(self) -> None:
        """Stop renewing (its thread joined)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def release(self) -> None:
        """Stop renewing, and give the client id up (the next bridge need not wait)."""
        self.stop()
        if self.lost is not None:
            return
        try:
            self.store.lease(self.key, self.holder, 0)
        except Exception as e:
            if not unreachable(e):
                raise

"""The host's settings: `SFC_` environment variables, or the `serve` option of the same name.

Durations are written `500ms`, `1s`, `2m`, `24h` or `1d` (a bare number is seconds). A bad
value is refused at start with its name. The scope's own settings (capabilities, maxAttempts,
equipmentHold, expiryGrace) live in `sfc:scope:{S}`; their process-wide defaults are here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from typing import NamedTuple

_DURATION = re.compile(r"(?P<n>[0-9]{1,15}(?:\.[0-9]{1,9})?)\s*(?P<unit>ms|s|m|h|d)?")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1000}


class SettingsError(ValueError):
    """A setting with a value that cannot be used; the message names it."""


def duration_ms(name: str, text: str) -> int:
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise SettingsError(
            f"{name}={text!r} is not a duration; write e.g. 500ms, 1s, 2m, 24h or 1d"
        )
    ms = Fraction(m["n"]) * _UNITS[m["unit"]]  # exact: 0.017m is 1020 ms, not 1020.0000001
    if ms.denominator != 1:
        raise SettingsError(f"{name}={text!r} is not a whole number of milliseconds")
    return int(ms)


def _count(name: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a whole number") from None
    if not low <= value <= high:
        raise SettingsError(f"{name}={value} is out of range; it must be {low} to {high}")
    return value


def _flag(name: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}={text!r} is not true or false")


@dataclass(frozen=True)
class Settings:
    """Durations in milliseconds; defaults follow docs/host.md ("Settings")."""

    sweep_interval: int = 1000
    outage_threshold: int = 30_000
    max_attempts: int = 3
    expiry_grace: int = 2000
    autoclaim_idle: int = 30_000
    max_deliveries: int = 5
    read_count: int = 100
    sweep_limit: int = 100
    equipment_hold: bool = True
    scope_refresh_interval: int = 5000
    history_limit: int = 1000
    event_dedupe_ttl: int = 86_400_000
    equipment_retention: int = 86_400_000

    def __post_init__(self) -> None:
        if self.outage_threshold <= self.sweep_interval:
            raise SettingsError(
                f"the outage threshold ({self.outage_threshold} ms; SFC_OUTAGE_THRESHOLD, "
                f"--outage-threshold) must be above the sweep interval ({self.sweep_interval} "
                "ms; SFC_SWEEP_INTERVAL, --sweep-interval): every sweep would be an outage"
            )

    def texts(self) -> dict[str, str]:
        """Every setting as the text `with_values` reads back (`SWEEP_INTERVAL`: `1000ms`)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _DURATIONS:
                out[f.name.upper()] = f"{value}ms"
            elif isinstance(value, bool):
                out[f.name.upper()] = "true" if value else "false"
            else:
                out[f.name.upper()] = str(value)
        return out

    def with_values(self, values: Mapping[str, str]) -> Settings:
        """These settings with `values` (names like `SWEEP_INTERVAL`, texts) applied."""
        changes: dict[str, object] = {}
        known = {f.name.upper(): f.name for f in fields(self)}
        for key, text in values.items():
            name = known.get(key.upper().removeprefix("SFC_"))
            if name is None:
                raise SettingsError(f"unknown setting {key}; known: {', '.join(sorted(known))}")
            # an option's value (`sweep_interval`, from `sfc serve --sweep-interval`) is
            # named as the option; an environment variable's as the variable
            option = key == name
            label = "--" + name.replace("_", "-") if option else f"SFC_{name.upper()}"
            changes[name] = _parse(name, label, text)
        return replace(self, **changes)  # type: ignore[arg-type]


_DURATIONS = {
    "sweep_interval",
    "outage_threshold",
    "expiry_grace",
    "autoclaim_idle",
    "scope_refresh_interval",
    "event_dedupe_ttl",
    "equipment_retention",
}
HISTORY_LIMIT_MAX = 1_000_000
"""The largest SFC_HISTORY_LIMIT: a method applied outside a worker commits with it, so that
it trims no job's history (host.jobs)."""
_COUNTS = {
    "max_attempts": (1, 100),
    "max_deliveries": (1, 1000),
    "read_count": (1, 10_000),
    "sweep_limit": (1, 100_000),
    "history_limit": (1, HISTORY_LIMIT_MAX),
}


def _parse(name: str, label: str, text: str) -> object:
    if name in _DURATIONS:
        value = duration_ms(label, text)
        if value <= 0 and name != "expiry_grace":
            raise SettingsError(f"{label}={text!r} must be above zero")
        return value
    if name in _COUNTS:
        return _count(label, text, *_COUNTS[name])
    return _flag(label, text)


def from_environment(
    environ: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None
) -> Settings:
    """The settings from `SFC_*` variables, then `overrides` (e.g. serve options) on top."""
    env = os.environ if environ is None else environ
    names = {f"SFC_{f.name.upper()}" for f in fields(Settings)}
    values = {k: v for k, v in env.items() if k in names}
    values.update(overrides or {})
    return Settings().with_values(values)


class ScopeDefaults(NamedTuple):
    """The scope settings this process's `SFC_*` variables give; None where not given."""

    max_attempts: int | None
    equipment_hold: bool | None
    expiry_grace: int | None
    """In ms."""


_SCOPE_VARIABLES = ("SFC_MAX_ATTEMPTS", "SFC_EQUIPMENT_HOLD", "SFC_EXPIRY_GRACE")


def scope_defaults(environ: Mapping[str, str] | None = None) -> ScopeDefaults:
    """The scope settings given as SFC_MAX_ATTEMPTS, SFC_EQUIPMENT_HOLD, SFC_EXPIRY_GRACE,
    parsed (None where not given, so no default overwrites what a scope stored). Raises
    SettingsError for a bad one."""
    env = os.environ if environ is None else environ
    given = {k: env[k] for k in _SCOPE_VARIABLES if k in env}
    parsed = Settings().with_values(given)
    return ScopeDefaults(
        parsed.max_attempts if "SFC_MAX_ATTEMPTS" in given else None,
        parsed.equipment_hold if "SFC_EQUIPMENT_HOLD" in given else None,
        parsed.expiry_grace if "SFC_EXPIRY_GRACE" in given else None,
    )

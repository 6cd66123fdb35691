"""The host's settings (host/settings.py) and key names (host/keys.py); docs/host.md "Settings"
and "Keys".

Every refusal of a setting names it as its environment variable (`SFC_...`), or as the
`sfc serve` option it was given as, so a bad value is refused at start with its name. Every key of a scope carries the scope as hash tag, so
one function call touches one cluster slot.
"""

from __future__ import annotations

import inspect
import unicodedata
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from host import keys
from host.settings import Settings, SettingsError, duration_ms, from_environment

# -- durations


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("1s", 1_000),
        ("2m", 120_000),
        ("24h", 86_400_000),
        ("1d", 86_400_000),
        ("30", 30_000),
        ("0", 0),
        ("1.5s", 1_500),
        ("0.25", 250),
        ("0.017m", 1_020),
        ("0.009h", 32_400),
        ("1.1s", 1_100),
        (" 2 m ", 120_000),
        ("0ms", 0),
    ],
)
def test_duration(text: str, ms: int) -> None:
    assert duration_ms("SFC_SWEEP_INTERVAL", text) == ms


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "is not a duration; write e.g. 500ms, 1s, 2m, 24h or 1d"),
        ("fast", "is not a duration"),
        ("-1s", "is not a duration"),
        ("1S", "is not a duration"),
        ("1sec", "is not a duration"),
        ("1e3", "is not a duration"),
        ("1.s", "is not a duration"),
        (".5s", "is not a duration"),
        ("1s2", "is not a duration"),
        ("9" * 400, "is not a duration"),
        ("0.5ms", "is not a whole number of milliseconds"),
        ("0.0001s", "is not a whole number of milliseconds"),
    ],
)
def test_a_bad_duration_is_refused_with_its_name(text: str, why: str) -> None:
    with pytest.raises(SettingsError) as caught:
        duration_ms("SFC_EXPIRY_GRACE", text)
    assert str(caught.value).startswith(f"SFC_EXPIRY_GRACE={text!r} ")
    assert why in str(caught.value)


@given(
    whole=st.integers(0, 10**6),
    millis=st.integers(0, 999),
    unit=st.sampled_from(
        [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
    ),
)
def test_a_duration_is_read_exactly(whole: int, millis: int, unit: tuple[str, int]) -> None:
    """Decimal text is read exactly: `w.mmm` of a unit is a whole number of milliseconds
    exactly when (1000 w + m) times the unit divides by 1000."""
    name, factor = unit
    text = f"{whole}.{millis:03d}{name}"
    thousandths = (1_000 * whole + millis) * factor
    if thousandths % 1_000 == 0:
        assert duration_ms("SFC_X", text) == thousandths // 1_000
    else:
        with pytest.raises(SettingsError, match="not a whole number of milliseconds"):
            duration_ms("SFC_X", text)


# -- the settings


def test_defaults_follow_host_md() -> None:
    s = Settings()
    assert (s.sweep_interval, s.outage_threshold, s.expiry_grace) == (1_000, 30_000, 2_000)
    assert (s.max_attempts, s.max_deliveries, s.read_count, s.sweep_limit) == (3, 5, 100, 100)
    assert (s.autoclaim_idle, s.scope_refresh_interval, s.history_limit) == (30_000, 5_000, 1_000)
    assert s.equipment_hold is True
    assert s.event_dedupe_ttl == s.equipment_retention == 24 * 3_600_000


def test_from_environment_reads_sfc_variables() -> None:
    env = {
        "SFC_SWEEP_INTERVAL": "500ms",
        "SFC_OUTAGE_THRESHOLD": "1m",
        "SFC_MAX_ATTEMPTS": "7",
        "SFC_EXPIRY_GRACE": "0",
        "SFC_EQUIPMENT_HOLD": "off",
        "SFC_EVENT_DEDUPE_TTL": "1d",
        "SFC_HISTORY_LIMIT": " 50 ",
        "SFC_REDIS_URL": "redis://elsewhere",  # not a setting of this module: left alone
        "SFC_DATA_DIR": ".sfc",
        "HOME": "/root",
    }
    s = from_environment(env)
    assert (s.sweep_interval, s.outage_threshold, s.max_attempts) == (500, 60_000, 7)
    assert (s.expiry_grace, s.equipment_hold, s.history_limit) == (0, False, 50)
    assert s.event_dedupe_ttl == 86_400_000
    assert s.read_count == 100


def test_from_environment_without_variables_is_the_defaults() -> None:
    assert from_environment({}) == Settings()
    assert from_environment({"PATH": "/bin"}, {}) == Settings()


@pytest.mark.parametrize("key", ["sweep_interval", "SWEEP_INTERVAL", "SFC_SWEEP_INTERVAL"])
def test_an_override_wins_over_the_environment(key: str) -> None:
    s = from_environment({"SFC_SWEEP_INTERVAL": "5s"}, {key: "2s"})
    assert s.sweep_interval == 2_000


def test_an_unknown_override_is_refused_by_name() -> None:
    with pytest.raises(SettingsError, match=r"^unknown setting sweep_intervall; known: ") as e:
        from_environment({}, {"sweep_intervall": "1s"})
    assert "SWEEP_INTERVAL" in str(e.value)


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("SWEEP_INTERVAL", "0", "must be above zero"),
        ("AUTOCLAIM_IDLE", "0ms", "must be above zero"),
        ("SCOPE_REFRESH_INTERVAL", "soon", "is not a duration"),
        ("EVENT_DEDUPE_TTL", "0", "must be above zero"),
        ("EQUIPMENT_RETENTION", "0s", "must be above zero"),
        ("MAX_ATTEMPTS", "0", "is out of range; it must be 1 to 100"),
        ("MAX_ATTEMPTS", "101", "is out of range; it must be 1 to 100"),
        ("MAX_ATTEMPTS", "three", "is not a whole number"),
        ("MAX_ATTEMPTS", "2.5", "is not a whole number"),
        ("MAX_DELIVERIES", "1001", "is out of range"),
        ("READ_COUNT", "0", "is out of range"),
        ("SWEEP_LIMIT", "-5", "is out of range"),
        ("HISTORY_LIMIT", "", "is not a whole number"),
        ("EQUIPMENT_HOLD", "maybe", "is not true or false"),
        ("EQUIPMENT_HOLD", "", "is not true or false"),
    ],
)
def test_every_refusal_names_the_setting(name: str, text: str, why: str) -> None:
    """As the environment variable, or as the `sfc serve` option it was given as."""
    option = "--" + name.lower().replace("_", "-")
    for source, label in (({f"SFC_{name}": text}, f"SFC_{name}"), (None, option)):
        with pytest.raises(SettingsError) as caught:
            if source is None:
                from_environment({}, {name.lower(): text})
            else:
                from_environment(source)
        message = str(caught.value)
        assert message.startswith(f"{label}="), message
        assert why in message


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", True), ("true", True), ("Yes", True), (" ON ", True), ("0", False), ("FALSE", False)],
)
def test_flags(text: str, value: bool) -> None:
    assert from_environment({"SFC_EQUIPMENT_HOLD": text}).equipment_hold is value


@pytest.mark.parametrize(
    ("sweep", "outage"), [("1s", "1s"), ("2s", "1s"), ("30s", "30000ms"), ("1m", "59s")]
)
def test_the_outage_threshold_must_exceed_the_sweep_interval(sweep: str, outage: str) -> None:
    env = {"SFC_SWEEP_INTERVAL": sweep, "SFC_OUTAGE_THRESHOLD": outage}
    with pytest.raises(SettingsError) as caught:
        from_environment(env)
    message = str(caught.value)
    assert message.startswith("the outage threshold (")
    assert "; SFC_OUTAGE_THRESHOLD, --outage-threshold) must be above the sweep interval (" in (
        message
    )
    assert "; SFC_SWEEP_INTERVAL, --sweep-interval): every sweep would be an outage" in message


def test_an_outage_threshold_just_above_the_sweep_interval_is_taken() -> None:
    s = from_environment({"SFC_SWEEP_INTERVAL": "1s", "SFC_OUTAGE_THRESHOLD": "1001ms"})
    assert (s.sweep_interval, s.outage_threshold) == (1_000, 1_001)
    with pytest.raises(SettingsError, match="SFC_OUTAGE_THRESHOLD"):
        Settings(sweep_interval=40_000)  # above the default threshold of 30 s


def test_the_outage_rule_holds_after_overrides() -> None:
    """The environment alone may break the rule; the override repairs it."""
    env = {"SFC_SWEEP_INTERVAL": "1m"}
    with pytest.raises(SettingsError):
        from_environment(env)
    assert from_environment(env, {"OUTAGE_THRESHOLD": "5m"}).outage_threshold == 300_000


# -- keys: names that can be part of a key

CHECKS: list[tuple[Callable[[str], str], str, int]] = [
    (keys.check_scope, "scope", 64),
    (keys.check_job, "job id", 128),
]


@pytest.mark.parametrize(("check", "what", "limit"), CHECKS)
def test_good_names_pass(check: Callable[[str], str], what: str, limit: int) -> None:
    for name in ("plant.line1", "job-7", "a", "Ünïcode/ÿ:#@", "x" * limit):
        assert check(name) == name


@pytest.mark.parametrize(("check", "what", "limit"), CHECKS)
def test_an_empty_name_is_refused(check: Callable[[str], str], what: str, limit: int) -> None:
    with pytest.raises(keys.KeyError_, match=f"^the {what} is empty$"):
        check("")


@pytest.mark.parametrize(("check", "what", "limit"), CHECKS)
def test_a_long_name_is_refused(check: Callable[[str], str], what: str, limit: int) -> None:
    with pytest.raises(keys.KeyError_) as caught:
        check("x" * (limit + 1))
    assert str(caught.value) == (
        f"the {what} has {limit + 1} characters; at most {limit} are allowed"
    )


BAD_CHARACTERS = ["{", "}", " ", "\x00", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f"]
BAD_CHARACTERS += ["\x85", "\xa0", "\u2007", "\u2028", "\u2029", "\u202e", "\u3000", "\ufeff"]


@pytest.mark.parametrize("bad", BAD_CHARACTERS)
@pytest.mark.parametrize(("check", "what", "limit"), CHECKS)
def test_braces_spaces_and_control_characters_are_refused(
    check: Callable[[str], str], what: str, limit: int, bad: str
) -> None:
    for name in (f"a{bad}b", bad, f"{bad}x", f"x{bad}"):
        with pytest.raises(keys.KeyError_) as caught:
            check(name)
        assert str(caught.value) == (
            f"the {what} {name!r} contains {bad!r}: braces, spaces and control characters "
            "are not allowed"
        )


@pytest.mark.parametrize(("check", "what", "limit"), CHECKS)
def test_letters_marks_and_symbols_beyond_ascii_are_names(
    check: Callable[[str], str], what: str, limit: int
) -> None:
    for name in ("Schraubstation-Ä1", "línea_3", "工位7", "a\u0301b", "cell→2", "ok✓"):
        assert check(name) == name


@pytest.mark.parametrize(("check", "what", "limit"), CHECKS)
def test_a_lone_surrogate_is_refused(check: Callable[[str], str], what: str, limit: int) -> None:
    # what Python makes of command-line bytes that are not UTF-8: no key can hold it
    name = b"line\xff".decode("utf-8", "surrogateescape")
    with pytest.raises(keys.KeyError_) as caught:
        check(name)
    assert str(caught.value) == f"the {what} {name!r} contains '\\udcff', which is not UTF-8 text"


@given(st.text(max_size=200))
def test_a_name_passes_exactly_when_it_may(name: str) -> None:
    for check, _, limit in CHECKS:
        fits = 0 < len(name) <= limit and not any(
            c in "{}"
            or ord(c) <= 0x20
            or ord(c) == 0x7F
            or 0xD800 <= ord(c) <= 0xDFFF
            # Unicode's other (control, format, unassigned, private) and separators
            or unicodedata.category(c)[0] in "CZ"
            for c in name
        )
        if fits:
            name.encode()  # every name that passes can be part of a key
        try:
            assert check(name) == name
        except keys.KeyError_ as e:
            assert not fits, e
        else:
            assert fits


# -- keys: one slot per scope

SCOPE_KEYS = [
    f
    for name, f in inspect.getmembers(keys, inspect.isfunction)
    if f.__module__ == keys.__name__
    and not name.startswith("check")
    and list(inspect.signature(f).parameters)[:1] == ["scope"]
]


def test_the_scope_keys_are_all_there() -> None:
    names = {f.__name__ for f in SCOPE_KEYS}
    assert names == {
        "job",
        "history",
        "orders",
        "active",
        "due",
        "waits",
        "seen",
        "retired",
        "settings",
        "work",
        "dead",
        "equipment",
        "heartbeat",
        "outage",
        "probe",
    }


def scope_key(f: Callable[..., str], scope: str, other: str) -> str:
    return f(scope, other) if len(inspect.signature(f).parameters) == 2 else f(scope)


def hash_tag(key: str) -> str:
    """The part of a key that Valkey Cluster hashes: the first non-empty `{...}`."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


def test_the_key_names() -> None:
    assert keys.job("line1", "job-7") == "sfc:job:{line1}:job-7"
    assert keys.history("line1", "job-7") == "sfc:history:{line1}:job-7"
    assert keys.waits("line1", "com.example.qa.v1") == "sfc:waits:{line1}:com.example.qa.v1"
    assert keys.settings("line1") == "sfc:scope:{line1}"
    assert keys.work("line1") == "sfc:work:{line1}"
    assert keys.equipment("line1") == "sfc:equipment:{line1}"
    assert keys.recipe("ab" * 32) == "sfc:recipe:" + "ab" * 32
    assert keys.SCOPES == "sfc:scopes"
    assert (keys.GROUP, keys.LIBRARY, keys.ENTRY_FORMAT) == ("sfc-engine", "sfc_1", "1")


NAME = st.text(
    st.characters(exclude_characters="{}", exclude_categories=("C", "Z"), min_codepoint=0x21),
    min_size=1,
    max_size=64,
)


@given(scope=NAME, other=st.text(max_size=40))
def test_every_key_of_a_scope_is_in_one_slot(scope: str, other: str) -> None:
    """The scope is the hash tag of each key, whatever the job id or type id that follows
    (a type id may contain braces: the scope's tag comes first)."""
    keys.check_scope(scope)
    slot = key_slot(f"{{{scope}}}".encode())
    for f in SCOPE_KEYS:
        key = scope_key(f, scope, other)
        assert f"{{{scope}}}" in key
        assert hash_tag(key) == scope
        assert key_slot(key.encode()) == slot


@settings(max_examples=50)
@given(a=NAME, b=NAME)
def test_two_scopes_do_not_share_keys(a: str, b: str) -> None:
    if a != b:
        for f in SCOPE_KEYS:
            assert scope_key(f, a, "x") != scope_key(f, b, "x")

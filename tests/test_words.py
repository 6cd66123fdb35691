"""sfc/words.py and the text helpers of sfc/graph.py: one style for time, names shown safely."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sfc.graph import BIDI_CONTROLS, unsafe_char, visible
from sfc.words import ELAPSED_EXACT_BELOW, duration, elapsed, when

_PART = re.compile(r"(\d+(?:\.\d+)?) (days|day|h|min|s)")
_MS = {"day": 86_400_000, "days": 86_400_000, "h": 3_600_000, "min": 60_000, "s": 1000}


@given(st.integers(min_value=0, max_value=10**12))
def test_a_duration_reads_back_as_the_same_length(ms: int) -> None:
    text = duration(ms)
    parts = _PART.findall(text)
    assert " ".join(f"{n} {u}" for n, u in parts) == text
    assert round(sum(float(n) * _MS[u] for n, u in parts)) == ms
    sizes = [_MS[u] for _, u in parts]
    assert sizes == sorted(set(sizes), reverse=True), "each unit once, larger first"


def test_durations_and_points_in_time_read_apart() -> None:
    assert [duration(ms) for ms in (0, 100, 30_000, 90_000, 290_000, 7_200_000)] == [
        "0 s",
        "0.1 s",
        "30 s",
        "1 min 30 s",
        "4 min 50 s",
        "2 h",
    ]
    assert duration(604_800_000) == "7 days"
    assert when(90_000) == "90.000s"


@given(st.text())
def test_visible_text_has_no_unsafe_character_and_keeps_safe_text(text: str) -> None:
    shown = visible(text)
    assert unsafe_char(shown) is None
    if unsafe_char(text) is None:
        assert shown == text


def test_unsafe_characters_are_control_line_break_and_bidi() -> None:
    assert unsafe_char("Fill bottle") is None
    assert unsafe_char("prüfen") is None
    for ch in ["\n", "\t", "\x00", "\x7f", "\u2028", "\u00a0", *BIDI_CONTROLS]:
        assert unsafe_char(f"a{ch}b") == ch
    assert visible("a\u202eb\n") == "a\\u202eb\\u000a"


def test_a_measured_time_rounds_to_the_second_from_ten_seconds() -> None:
    # "5 min 35.344 s ago" said more than a person reads (issue 37, item 14)
    assert elapsed(335_344) == "5 min 35 s"
    assert elapsed(335_500) == "5 min 36 s"
    assert [elapsed(ms) for ms in (0, 345, 2_345, 9_999)] == [
        "0 s",
        "0.345 s",
        "2.345 s",
        "9.999 s",
    ]
    assert elapsed(-40) == "0 s"  # the server's clock and a consumer's idle can disagree


@given(st.integers(min_value=ELAPSED_EXACT_BELOW, max_value=10**12))
def test_a_measured_time_is_whole_seconds_within_half_a_second(ms: int) -> None:
    parts = _PART.findall(elapsed(ms))
    said = sum(float(n) * _MS[u] for n, u in parts)
    assert said % 1000 == 0 and abs(said - ms) <= 500

"""Durations as people write them: ``500ms``, ``30s``, ``10m``, ``2h``, ``1d`` (DESIGN.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecron.durations import LONGEST, format_duration, parse_duration, parse_setting


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5s", timedelta(seconds=1, milliseconds=500)),
        ("0.25h", timedelta(minutes=15)),
        ("1d2h3m4s5ms", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
        ("0s", timedelta(0)),
        ("  45s ", timedelta(seconds=45)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
    ],
)
def test_parse_duration_reads_numbers_with_units(text: str, expected: timedelta) -> None:
    """A number followed by ms, s, m, h or d (several in a row add up) is read exactly."""
    assert parse_duration(text) == expected


def test_parse_duration_tells_minutes_from_milliseconds() -> None:
    """``m`` is minutes and ``ms`` is milliseconds, even when both appear in one value."""
    assert parse_duration("1m") == timedelta(minutes=1)
    assert parse_duration("1ms") == timedelta(milliseconds=1)
    assert parse_duration("1m1ms") == timedelta(minutes=1, milliseconds=1)


def test_parse_duration_passes_a_timedelta_through_unchanged() -> None:
    """A ``timedelta`` (e.g. from Python code) is already a duration."""
    value = timedelta(minutes=3, milliseconds=7)
    assert parse_duration(value) == value


@pytest.mark.parametrize("zero", [0, 0.0])
def test_parse_duration_accepts_a_bare_zero(zero: float) -> None:
    """Zero is the one number that needs no unit."""
    assert parse_duration(zero) == timedelta(0)


@pytest.mark.parametrize(
    "value",
    [
        "10",
        10,
        1.5,
        "5 minutes",
        "",
        "   ",
        "1x",
        "s",
        "1.s",
        "-5s",
        "1e3s",
        "10m5",
        True,
        False,
        None,
        [],
        {},
    ],
)
def test_parse_duration_refuses_what_is_not_a_duration(value: Any) -> None:
    """A bare number (but 0), an unknown unit, words, a sign or an empty value are refused."""
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(value)


@pytest.mark.parametrize("text", ["1000000000d", "99999999999999999999999h"])
def test_parse_duration_refuses_a_duration_too_long_to_hold(text: str) -> None:
    """A duration beyond what a timedelta holds is a ValueError (a config error), not a crash."""
    with pytest.raises(ValueError, match="too long a duration"):
        parse_duration(text)


def test_parse_duration_keeps_microseconds_exact_in_long_values() -> None:
    """Parts add up exactly: a millisecond is not lost next to hundreds of thousands of days."""
    assert parse_duration("300000d1ms") == timedelta(days=300000, milliseconds=1)
    assert parse_duration("0.1s0.2s") == timedelta(milliseconds=300)


def test_parse_duration_error_says_how_to_write_a_duration() -> None:
    """The error names the value and shows the expected form."""
    with pytest.raises(ValueError, match=r"'5 minutes' is not a duration.*30s"):
        parse_duration("5 minutes")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(seconds=30), "30s"),
        (timedelta(minutes=10), "10m"),
        (timedelta(hours=2), "2h"),
        (timedelta(days=1), "1d"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(seconds=1, milliseconds=500), "1s500ms"),
        (timedelta(days=2, seconds=1), "2d1s"),
    ],
)
def test_format_duration_writes_the_shortest_exact_spelling(value: timedelta, text: str) -> None:
    """Each unit appears at most once, largest first, and zero parts are left out."""
    assert format_duration(value) == text


@given(st.integers(min_value=0, max_value=timedelta.max // timedelta(milliseconds=1)))
def test_format_duration_round_trips_through_parse_duration(milliseconds: int) -> None:
    """Any whole number of milliseconds, written and read back, is the same duration."""
    value = timedelta(milliseconds=milliseconds)
    assert parse_duration(format_duration(value)) == value


@given(st.integers(min_value=0, max_value=10**12))
def test_format_duration_of_a_parsed_value_is_stable(milliseconds: int) -> None:
    """Formatting, parsing and formatting again gives the same text."""
    text = format_duration(timedelta(milliseconds=milliseconds))
    assert format_duration(parse_duration(text)) == text


def test_the_longest_duration_a_setting_takes_is_100_years() -> None:
    """36500d is taken, one millisecond more is not (a ValueError naming the value): a
    longer setting ran the times it is added to off the calendar (an OverflowError in the
    daemon's loops; found by tests/test_fuzz_input.py)."""
    assert parse_setting("36500d") == LONGEST == timedelta(days=36500)
    with pytest.raises(ValueError, match=r"'36500d1ms' is too long a duration"):
        parse_setting("36500d1ms")

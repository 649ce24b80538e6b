"""Fire times in time zones with daylight saving time: the southern hemisphere, 30- and
45-minute changes, Ramadan DST, and the documented policy for gaps and folds
(docs/configuration.md, "Daylight saving time"). Every expected time is written out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ecron.schedules import next_fire_time, parse_schedule
from tests.support.schedules import fire_times

HALF_HOUR = timedelta(minutes=30)


def utc(*args: int) -> datetime:
    """A UTC datetime, so the tests never read the real clock."""
    return datetime(*args, tzinfo=UTC)


def at(text: str) -> datetime:
    """An exact instant written with its offset, like ``2028-01-01T00:00+11:00``."""
    when = datetime.fromisoformat(text)
    assert when.tzinfo is not None, text
    return when.astimezone(UTC)


def local(times: list[datetime], zone: str) -> list[str]:
    return [time.astimezone(ZoneInfo(zone)).isoformat(timespec="minutes") for time in times]


# --- the cases of issue 10, looked for from 2027-08-21 --------------------------------------

ISSUE_ROWS = [
    pytest.param(
        "0 0 1 1 *",
        "Australia/Sydney",
        ["2028-01-01T00:00+11:00", "2029-01-01T00:00+11:00"],
        id="yearly-in-sydney-skipped-2028",
    ),
    pytest.param(
        "0 0 * 1 *",
        "Pacific/Auckland",
        ["2028-01-01T00:00+13:00", "2028-01-02T00:00+13:00", "2028-01-03T00:00+13:00"],
        id="auckland-new-years-day-skipped",
    ),
    pytest.param(
        "0 0 1 1 *",
        "America/Santiago",
        ["2028-01-01T00:00-03:00", "2029-01-01T00:00-03:00"],
        id="yearly-in-santiago-skipped-2028",
    ),
    pytest.param(
        "* * * 1-7/2 *",
        "Australia/Lord_Howe",
        ["2028-01-01T00:00+11:00", "2028-01-01T00:01+11:00", "2028-01-01T00:02+11:00"],
        id="lord-howe-lost-thirty-minutes",
    ),
]


@pytest.mark.parametrize(("expression", "zone", "expected"), ISSUE_ROWS)
def test_a_search_across_a_change_of_offset_into_a_new_year_finds_the_first_fire_time(
    expression: str, zone: str, expected: list[str]
) -> None:
    """Looking from 2027-08-21 in the southern hemisphere, where DST runs over New Year, the
    search crosses October's change into the next year and must not step over its start."""
    schedule = parse_schedule(expression, zone)
    now = datetime(2027, 8, 21, tzinfo=ZoneInfo(zone)).astimezone(UTC)
    assert fire_times(schedule, now, len(expected)) == [at(text) for text in expected]


# --- 2026–2028: a fixed-time job on the days around each change -----------------------------

#: Per zone: the job in the hour that changes (on a gap day, on a fold day), then per change
#: ``gap`` or ``fold`` and the fire times of the day before, the day and the day after. In a
#: gap the job fires once, shifted by the gap; in a fold once, at the first pass.
FIXED_TIME_ROWS: dict[str, tuple[dict[str, str], list[str]]] = {
    "Australia/Sydney": (
        {"gap": "30 2 * * *", "fold": "30 2 * * *"},
        [
            "fold 2026-04-04T02:30+11:00 2026-04-05T02:30+11:00 2026-04-06T02:30+10:00",
            "gap 2026-10-03T02:30+10:00 2026-10-04T03:30+11:00 2026-10-05T02:30+11:00",
            "fold 2027-04-03T02:30+11:00 2027-04-04T02:30+11:00 2027-04-05T02:30+10:00",
            "gap 2027-10-02T02:30+10:00 2027-10-03T03:30+11:00 2027-10-04T02:30+11:00",
            "fold 2028-04-01T02:30+11:00 2028-04-02T02:30+11:00 2028-04-03T02:30+10:00",
            "gap 2028-09-30T02:30+10:00 2028-10-01T03:30+11:00 2028-10-02T02:30+11:00",
        ],
    ),
    "Pacific/Auckland": (
        {"gap": "30 2 * * *", "fold": "30 2 * * *"},
        [
            "fold 2026-04-04T02:30+13:00 2026-04-05T02:30+13:00 2026-04-06T02:30+12:00",
            "gap 2026-09-26T02:30+12:00 2026-09-27T03:30+13:00 2026-09-28T02:30+13:00",
            "fold 2027-04-03T02:30+13:00 2027-04-04T02:30+13:00 2027-04-05T02:30+12:00",
            "gap 2027-09-25T02:30+12:00 2027-09-26T03:30+13:00 2027-09-27T02:30+13:00",
            "fold 2028-04-01T02:30+13:00 2028-04-02T02:30+13:00 2028-04-03T02:30+12:00",
            "gap 2028-09-23T02:30+12:00 2028-09-24T03:30+13:00 2028-09-25T02:30+13:00",
        ],
    ),
    # Santiago changes at midnight: 24:00 falls back to 23:00, 00:00 jumps to 01:00.
    "America/Santiago": (
        {"gap": "30 0 * * *", "fold": "30 23 * * *"},
        [
            "fold 2026-04-03T23:30-03:00 2026-04-04T23:30-03:00 2026-04-05T23:30-04:00",
            "gap 2026-09-05T00:30-04:00 2026-09-06T01:30-03:00 2026-09-07T00:30-03:00",
            "fold 2027-04-02T23:30-03:00 2027-04-03T23:30-03:00 2027-04-04T23:30-04:00",
            "gap 2027-09-04T00:30-04:00 2027-09-05T01:30-03:00 2027-09-06T00:30-03:00",
            "fold 2028-03-31T23:30-03:00 2028-04-01T23:30-03:00 2028-04-02T23:30-04:00",
            "gap 2028-09-02T00:30-04:00 2028-09-03T01:30-03:00 2028-09-04T00:30-03:00",
        ],
    ),
    # Lord Howe changes by 30 minutes: 02:00 falls back to 01:30, 02:00 jumps to 02:30.
    "Australia/Lord_Howe": (
        {"gap": "15 2 * * *", "fold": "45 1 * * *"},
        [
            "fold 2026-04-04T01:45+11:00 2026-04-05T01:45+11:00 2026-04-06T01:45+10:30",
            "gap 2026-10-03T02:15+10:30 2026-10-04T02:45+11:00 2026-10-05T02:15+11:00",
            "fold 2027-04-03T01:45+11:00 2027-04-04T01:45+11:00 2027-04-05T01:45+10:30",
            "gap 2027-10-02T02:15+10:30 2027-10-03T02:45+11:00 2027-10-04T02:15+11:00",
            "fold 2028-04-01T01:45+11:00 2028-04-02T01:45+11:00 2028-04-03T01:45+10:30",
            "gap 2028-09-30T02:15+10:30 2028-10-01T02:45+11:00 2028-10-02T02:15+11:00",
        ],
    ),
    # Chatham, +12:45 and +13:45: 03:45 falls back to 02:45, 02:45 jumps to 03:45.
    "Pacific/Chatham": (
        {"gap": "15 3 * * *", "fold": "15 3 * * *"},
        [
            "fold 2026-04-04T03:15+13:45 2026-04-05T03:15+13:45 2026-04-06T03:15+12:45",
            "gap 2026-09-26T03:15+12:45 2026-09-27T04:15+13:45 2026-09-28T03:15+13:45",
            "fold 2027-04-03T03:15+13:45 2027-04-04T03:15+13:45 2027-04-05T03:15+12:45",
            "gap 2027-09-25T03:15+12:45 2027-09-26T04:15+13:45 2027-09-27T03:15+13:45",
            "fold 2028-04-01T03:15+13:45 2028-04-02T03:15+13:45 2028-04-03T03:15+12:45",
            "gap 2028-09-23T03:15+12:45 2028-09-24T04:15+13:45 2028-09-25T03:15+13:45",
        ],
    ),
    # Casablanca is on +01:00 but for Ramadan, when it goes back to +00:00.
    "Africa/Casablanca": (
        {"gap": "30 2 * * *", "fold": "30 2 * * *"},
        [
            "fold 2026-02-14T02:30+01:00 2026-02-15T02:30+01:00 2026-02-16T02:30+00:00",
            "gap 2026-03-21T02:30+00:00 2026-03-22T03:30+01:00 2026-03-23T02:30+01:00",
            "fold 2027-02-06T02:30+01:00 2027-02-07T02:30+01:00 2027-02-08T02:30+00:00",
            "gap 2027-03-13T02:30+00:00 2027-03-14T03:30+01:00 2027-03-15T02:30+01:00",
            "fold 2028-01-22T02:30+01:00 2028-01-23T02:30+01:00 2028-01-24T02:30+00:00",
            "gap 2028-03-04T02:30+00:00 2028-03-05T03:30+01:00 2028-03-06T02:30+01:00",
        ],
    ),
    "Europe/Berlin": (
        {"gap": "30 2 * * *", "fold": "30 2 * * *"},
        [
            "gap 2026-03-28T02:30+01:00 2026-03-29T03:30+02:00 2026-03-30T02:30+02:00",
            "fold 2026-10-24T02:30+02:00 2026-10-25T02:30+02:00 2026-10-26T02:30+01:00",
            "gap 2027-03-27T02:30+01:00 2027-03-28T03:30+02:00 2027-03-29T02:30+02:00",
            "fold 2027-10-30T02:30+02:00 2027-10-31T02:30+02:00 2027-11-01T02:30+01:00",
            "gap 2028-03-25T02:30+01:00 2028-03-26T03:30+02:00 2028-03-27T02:30+02:00",
            "fold 2028-10-28T02:30+02:00 2028-10-29T02:30+02:00 2028-10-30T02:30+01:00",
        ],
    ),
}


@pytest.mark.parametrize(
    ("zone", "change", "expected"),
    [
        pytest.param(zone, row.split()[0], row.split()[1:], id=f"{zone}-{row.split()[1]}")
        for zone, (_, rows) in FIXED_TIME_ROWS.items()
        for row in rows
    ],
)
def test_a_fixed_time_job_fires_once_on_the_day_of_a_change(
    zone: str, change: str, expected: list[str]
) -> None:
    """Inside a gap the wall time fires shifted by the gap; inside a fold at its first pass;
    the days around fire at their own wall time. Never zero times, never twice."""
    schedule = parse_schedule(FIXED_TIME_ROWS[zone][0][change], zone)
    start = at(expected[0]) - timedelta(hours=1)
    times = fire_times(schedule, start, 3)
    assert local(times, zone) == expected, change
    assert times == [at(text) for text in expected]


# --- 2026–2028: a wildcard job runs by the clock across each change -------------------------

#: Per zone: a job every 30 minutes on the zone's half hours (``*/30``; Chatham's half hours
#: are :15 and :45 of UTC), then per change ``gap`` or ``fold``, the first fire time from one
#: hour before the change and the wall times of the next four. Each is 30 minutes of real
#: time after the one before: the skipped hour has no fire time, each pass of a repeated
#: hour has its own.
CLOCK_ROWS: dict[str, tuple[str, list[str]]] = {
    "Australia/Sydney": (
        "*/30 * * * *",
        [
            "fold 2026-04-05T02:00+11:00 02:30+11:00 02:00+10:00 02:30+10:00 03:00+10:00",
            "gap 2026-10-04T01:00+10:00 01:30+10:00 03:00+11:00 03:30+11:00 04:00+11:00",
            "fold 2027-04-04T02:00+11:00 02:30+11:00 02:00+10:00 02:30+10:00 03:00+10:00",
            "gap 2027-10-03T01:00+10:00 01:30+10:00 03:00+11:00 03:30+11:00 04:00+11:00",
            "fold 2028-04-02T02:00+11:00 02:30+11:00 02:00+10:00 02:30+10:00 03:00+10:00",
            "gap 2028-10-01T01:00+10:00 01:30+10:00 03:00+11:00 03:30+11:00 04:00+11:00",
        ],
    ),
    "Pacific/Auckland": (
        "*/30 * * * *",
        [
            "fold 2026-04-05T02:00+13:00 02:30+13:00 02:00+12:00 02:30+12:00 03:00+12:00",
            "gap 2026-09-27T01:00+12:00 01:30+12:00 03:00+13:00 03:30+13:00 04:00+13:00",
            "fold 2027-04-04T02:00+13:00 02:30+13:00 02:00+12:00 02:30+12:00 03:00+12:00",
            "gap 2027-09-26T01:00+12:00 01:30+12:00 03:00+13:00 03:30+13:00 04:00+13:00",
            "fold 2028-04-02T02:00+13:00 02:30+13:00 02:00+12:00 02:30+12:00 03:00+12:00",
            "gap 2028-09-24T01:00+12:00 01:30+12:00 03:00+13:00 03:30+13:00 04:00+13:00",
        ],
    ),
    "America/Santiago": (
        "*/30 * * * *",
        [
            "fold 2026-04-04T23:00-03:00 23:30-03:00 23:00-04:00 23:30-04:00 00:00-04:00",
            "gap 2026-09-05T23:00-04:00 23:30-04:00 01:00-03:00 01:30-03:00 02:00-03:00",
            "fold 2027-04-03T23:00-03:00 23:30-03:00 23:00-04:00 23:30-04:00 00:00-04:00",
            "gap 2027-09-04T23:00-04:00 23:30-04:00 01:00-03:00 01:30-03:00 02:00-03:00",
            "fold 2028-04-01T23:00-03:00 23:30-03:00 23:00-04:00 23:30-04:00 00:00-04:00",
            "gap 2028-09-02T23:00-04:00 23:30-04:00 01:00-03:00 01:30-03:00 02:00-03:00",
        ],
    ),
    "Australia/Lord_Howe": (
        "*/30 * * * *",
        [
            "fold 2026-04-05T01:00+11:00 01:30+11:00 01:30+10:30 02:00+10:30 02:30+10:30",
            "gap 2026-10-04T01:00+10:30 01:30+10:30 02:30+11:00 03:00+11:00 03:30+11:00",
            "fold 2027-04-04T01:00+11:00 01:30+11:00 01:30+10:30 02:00+10:30 02:30+10:30",
            "gap 2027-10-03T01:00+10:30 01:30+10:30 02:30+11:00 03:00+11:00 03:30+11:00",
            "fold 2028-04-02T01:00+11:00 01:30+11:00 01:30+10:30 02:00+10:30 02:30+10:30",
            "gap 2028-10-01T01:00+10:30 01:30+10:30 02:30+11:00 03:00+11:00 03:30+11:00",
        ],
    ),
    "Pacific/Chatham": (
        "15,45 * * * *",
        [
            "fold 2026-04-05T02:45+13:45 03:15+13:45 02:45+12:45 03:15+12:45 03:45+12:45",
            "gap 2026-09-27T01:45+12:45 02:15+12:45 03:45+13:45 04:15+13:45 04:45+13:45",
            "fold 2027-04-04T02:45+13:45 03:15+13:45 02:45+12:45 03:15+12:45 03:45+12:45",
            "gap 2027-09-26T01:45+12:45 02:15+12:45 03:45+13:45 04:15+13:45 04:45+13:45",
            "fold 2028-04-02T02:45+13:45 03:15+13:45 02:45+12:45 03:15+12:45 03:45+12:45",
            "gap 2028-09-24T01:45+12:45 02:15+12:45 03:45+13:45 04:15+13:45 04:45+13:45",
        ],
    ),
    "Africa/Casablanca": (
        "*/30 * * * *",
        [
            "fold 2026-02-15T02:00+01:00 02:30+01:00 02:00+00:00 02:30+00:00 03:00+00:00",
            "gap 2026-03-22T01:00+00:00 01:30+00:00 03:00+01:00 03:30+01:00 04:00+01:00",
            "fold 2027-02-07T02:00+01:00 02:30+01:00 02:00+00:00 02:30+00:00 03:00+00:00",
            "gap 2027-03-14T01:00+00:00 01:30+00:00 03:00+01:00 03:30+01:00 04:00+01:00",
            "fold 2028-01-23T02:00+01:00 02:30+01:00 02:00+00:00 02:30+00:00 03:00+00:00",
            "gap 2028-03-05T01:00+00:00 01:30+00:00 03:00+01:00 03:30+01:00 04:00+01:00",
        ],
    ),
    "Europe/Berlin": (
        "*/30 * * * *",
        [
            "gap 2026-03-29T01:00+01:00 01:30+01:00 03:00+02:00 03:30+02:00 04:00+02:00",
            "fold 2026-10-25T02:00+02:00 02:30+02:00 02:00+01:00 02:30+01:00 03:00+01:00",
            "gap 2027-03-28T01:00+01:00 01:30+01:00 03:00+02:00 03:30+02:00 04:00+02:00",
            "fold 2027-10-31T02:00+02:00 02:30+02:00 02:00+01:00 02:30+01:00 03:00+01:00",
            "gap 2028-03-26T01:00+01:00 01:30+01:00 03:00+02:00 03:30+02:00 04:00+02:00",
            "fold 2028-10-29T02:00+02:00 02:30+02:00 02:00+01:00 02:30+01:00 03:00+01:00",
        ],
    ),
}


@pytest.mark.parametrize(
    ("zone", "change", "first", "then"),
    [
        pytest.param(zone, *row.split()[:2], row.split()[2:], id=f"{zone}-{row.split()[1]}")
        for zone, (_, rows) in CLOCK_ROWS.items()
        for row in rows
    ],
)
def test_a_wildcard_job_runs_by_the_clock_across_a_change(
    zone: str, change: str, first: str, then: list[str]
) -> None:
    """A job every 30 minutes keeps firing every 30 minutes of real time: no fire time in the
    hour the clock skips, one in each pass of the hour it repeats."""
    schedule = parse_schedule(CLOCK_ROWS[zone][0], zone)
    times = fire_times(schedule, at(first), 5)
    assert times == [at(first) + n * HALF_HOUR for n in range(5)]
    assert [text[11:] for text in local(times, zone)] == [first[11:], *then], change


# --- looked for from inside a change ---------------------------------------------------------


def test_a_fixed_time_job_looked_for_just_after_a_gap_still_fires_shifted_that_day() -> None:
    """Sydney, 2026-10-04: at 03:10 AEDT the shifted 02:30 (03:30 AEDT) is still ahead."""
    schedule = parse_schedule("30 2 * * *", "Australia/Sydney")
    assert next_fire_time(schedule, None, at("2026-10-04T03:10+11:00")) == at(
        "2026-10-04T03:30+11:00"
    )
    assert next_fire_time(schedule, None, at("2026-10-04T03:31+11:00")) == at(
        "2026-10-05T02:30+11:00"
    )


def test_a_fixed_time_job_looked_for_in_the_second_pass_of_a_fold_waits_for_the_next_day() -> None:
    """Sydney, 2026-04-05: at 02:10 AEST (the second 02:10) today's 02:30 has already fired."""
    schedule = parse_schedule("30 2 * * *", "Australia/Sydney")
    assert next_fire_time(schedule, None, at("2026-04-05T02:10+10:00")) == at(
        "2026-04-06T02:30+10:00"
    )


def test_a_wildcard_job_looked_for_late_in_the_first_pass_fires_next_in_the_second() -> None:
    """Berlin, 2026-10-25: ``*/20 2 * * *`` after 02:40 CEST fires at 02:00 CET, 02:20 CET …"""
    schedule = parse_schedule("*/20 2 * * *", "Europe/Berlin")
    assert fire_times(schedule, at("2026-10-25T02:45+02:00"), 4) == [
        at("2026-10-25T02:00+01:00"),
        at("2026-10-25T02:20+01:00"),
        at("2026-10-25T02:40+01:00"),
        at("2026-10-26T02:00+01:00"),
    ]
    assert next_fire_time(schedule, None, at("2026-10-25T02:30+02:00")) == at(
        "2026-10-25T02:40+02:00"
    )


def test_a_midnight_job_on_the_day_santiago_skips_midnight_fires_at_one() -> None:
    """Santiago, 2026-09-06: 00:00 does not exist (00:00 -04 jumps to 01:00 -03)."""
    schedule = parse_schedule("0 0 * * *", "America/Santiago")
    assert fire_times(schedule, at("2026-09-05T12:00-04:00"), 2) == [
        at("2026-09-06T01:00-03:00"),
        at("2026-09-07T00:00-03:00"),
    ]


@pytest.mark.parametrize(
    ("zone", "start", "expected"),
    [
        (
            "Europe/Berlin",
            "2026-03-29T01:59:58+01:00",
            ["01:59:58+01:00", "01:59:59+01:00", "03:00:00+02:00", "03:00:01+02:00"],
        ),
        (
            "Europe/Berlin",
            "2026-10-25T02:59:58+02:00",
            ["02:59:58+02:00", "02:59:59+02:00", "02:00:00+01:00", "02:00:01+01:00"],
        ),
        (
            "Australia/Lord_Howe",
            "2026-10-04T01:59:59+10:30",
            ["01:59:59+10:30", "02:30:00+11:00", "02:30:01+11:00", "02:30:02+11:00"],
        ),
    ],
)
def test_an_every_second_job_steps_over_a_gap_and_through_a_fold(
    zone: str, start: str, expected: list[str]
) -> None:
    """``* * * * * *`` is one fire time per second of real time, whatever the clock does."""
    schedule = parse_schedule("* * * * * *", zone)
    times = fire_times(schedule, at(start), 4)
    assert times == [at(start) + timedelta(seconds=n) for n in range(4)]
    tz = ZoneInfo(zone)
    assert [time.astimezone(tz).isoformat()[11:] for time in times] == expected


# --- leap days -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("UTC", ["2028-02-29T00:00+00:00", "2032-02-29T00:00+00:00"]),
        ("Australia/Sydney", ["2028-02-29T00:00+11:00", "2032-02-29T00:00+11:00"]),
        ("Pacific/Chatham", ["2028-02-29T00:00+13:45", "2032-02-29T00:00+13:45"]),
        ("America/Santiago", ["2028-02-29T00:00-03:00", "2032-02-29T00:00-03:00"]),
    ],
)
def test_a_leap_day_job_fires_on_the_next_29_february(zone: str, expected: list[str]) -> None:
    """``0 0 29 2 *`` from 2026-03-01 fires on 2028-02-29, then 2032-02-29."""
    schedule = parse_schedule("0 0 29 2 *", zone)
    assert fire_times(schedule, utc(2026, 3, 1), 2) == [at(text) for text in expected]


# --- every with start, and at: times without an offset are read as a fixed-time job -------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"at": "2026-10-04T02:30:00"}, "2026-10-04T03:30+11:00"),  # in the gap: shifted by it
        ({"at": "2026-04-05T02:30:00"}, "2026-04-05T02:30+11:00"),  # in the fold: the first
        ({"at": "2028-01-01T00:00:00"}, "2028-01-01T00:00+11:00"),
        ({"at": "2026-10-04T02:30:00+10:00"}, "2026-10-04T03:30+11:00"),  # its own offset
    ],
)
def test_an_at_time_without_an_offset_is_read_in_the_zone_like_a_fixed_time_job(
    value: dict[str, Any], expected: str
) -> None:
    """Australia/Sydney: a skipped local time is shifted by the gap, a repeated one is the first."""
    schedule = parse_schedule(value, "Australia/Sydney")
    assert next_fire_time(schedule, None, utc(2026, 1, 1)) == at(expected)


def test_every_with_a_start_in_sydney_keeps_its_rate_in_real_time_across_both_changes() -> None:
    """``every 6h`` from 2026-04-04 03:00 AEDT: six hours of real time apart, whatever the
    clock does; the wall times move by the hour the clock moved."""
    schedule = parse_schedule({"every": "6h", "start": "2026-04-04T03:00:00"}, "Australia/Sydney")
    times = fire_times(schedule, utc(2026, 4, 1), 6)
    assert times == [at("2026-04-04T03:00+11:00") + n * timedelta(hours=6) for n in range(6)]
    assert [text[5:] for text in local(times, "Australia/Sydney")] == [
        "04-04T03:00+11:00",
        "04-04T09:00+11:00",
        "04-04T15:00+11:00",
        "04-04T21:00+11:00",
        "04-05T02:00+10:00",  # 03:00 AEDT fell back to 02:00 AEST at 16:00 UTC
        "04-05T08:00+10:00",
    ]
    spring = parse_schedule({"every": "1h", "start": "2026-10-04T01:30:00"}, "Australia/Sydney")
    assert local(fire_times(spring, utc(2026, 10, 1), 3), "Australia/Sydney") == [
        "2026-10-04T01:30+10:00",
        "2026-10-04T03:30+11:00",
        "2026-10-04T04:30+11:00",
    ]


def test_every_with_a_start_inside_a_gap_starts_shifted_by_the_gap() -> None:
    """Lord Howe, 2026-10-04: 02:15 does not exist (02:00 jumps to 02:30); it reads as 02:45."""
    schedule = parse_schedule(
        {"every": "1d", "start": "2026-10-04T02:15:00"}, "Australia/Lord_Howe"
    )
    assert fire_times(schedule, utc(2026, 10, 1), 2) == [
        at("2026-10-04T02:45+11:00"),
        at("2026-10-05T02:45+11:00"),
    ]

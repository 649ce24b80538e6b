"""Calendars and blackouts as pure fire-time math (DESIGN.md, "Calendars and blackouts"):
excluded local days of 23 and 25 hours, blackouts across a change of the clock, the
fire times listed around them, in a northern and two southern zones, and the claims that
plan excluded fire times out."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import pytest

from ecron.calendars import Exclusion
from ecron.config.model import TaskSpec
from ecron.core import Status
from ecron.planning import Claim, plan_fires
from tests.support.daemon import task

HOUR = timedelta(hours=1)


def utc(text: str) -> datetime:
    """``2026-03-28T23:00`` read as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def spec(zone: str, schedule: Any, **keys: Any) -> TaskSpec:
    return task("t", "http://h/x", schedule=schedule, timezone=zone, **keys)


#: (zone, an excluded date whose clock changes, its first instant, the next day's first
#: instant, its length in hours): the first Sunday of the north's spring and autumn, the
#: south's autumn and spring, and Santiago, whose clock changes at midnight.
CHANGE_DAYS = [
    ("Europe/Berlin", "2026-03-29", "2026-03-28T23:00", "2026-03-29T22:00", 23),
    ("Europe/Berlin", "2026-10-25", "2026-10-24T22:00", "2026-10-25T23:00", 25),
    ("Australia/Sydney", "2026-04-05", "2026-04-04T13:00", "2026-04-05T14:00", 25),
    ("Australia/Sydney", "2026-10-04", "2026-10-03T14:00", "2026-10-04T13:00", 23),
    ("America/Santiago", "2026-04-04", "2026-04-04T03:00", "2026-04-05T04:00", 25),
    ("America/Santiago", "2026-09-06", "2026-09-06T04:00", "2026-09-07T03:00", 23),
]


@pytest.mark.parametrize(("zone", "day", "start", "end", "hours"), CHANGE_DAYS)
def test_an_excluded_date_is_the_whole_local_day_of_23_or_25_hours(
    zone: str, day: str, start: str, end: str, hours: int
) -> None:
    """``every: 1h`` with the date excluded: the last fire time before it is the hour before
    the day starts, all of the day's 23 or 25 hourly fire times are planned out (and
    counted), and the next one is the next day's first instant."""
    fire_times = spec(zone, {"every": "1h"}, calendar={"exclude": [day]}).fire_times
    before = utc(start) - 2 * HOUR
    counts: Counter[str] = Counter()

    assert fire_times.upcoming(before, 3) == [
        utc(start) - 2 * HOUR,
        utc(start) - HOUR,
        utc(end),
    ]
    assert fire_times.next(utc(start) - HOUR, utc(start) - HOUR, counts) == utc(end)
    assert counts == {"calendar": hours}
    assert fire_times.excluded(utc(start)) is Exclusion.CALENDAR
    assert fire_times.excluded(utc(end) - timedelta(milliseconds=1)) is Exclusion.CALENDAR
    assert fire_times.excluded(utc(end)) is None


#: (zone, blackout as written in local time, fire times of ``every: 30m`` planned out,
#: the first after it in UTC): a window from 01:00 to 04:00 is two hours of real time
#: across a spring-forward night and four across a fall-back night.
BLACKOUTS_ACROSS_CHANGES = [
    ("Europe/Berlin", "2026-03-29T01:00:00", "2026-03-29T04:00:00", 4, "2026-03-29T02:00"),
    ("Europe/Berlin", "2026-10-25T01:00:00", "2026-10-25T04:00:00", 8, "2026-10-25T03:00"),
    ("Australia/Sydney", "2026-04-05T01:00:00", "2026-04-05T04:00:00", 8, "2026-04-04T18:00"),
    ("Australia/Sydney", "2026-10-04T01:00:00", "2026-10-04T04:00:00", 4, "2026-10-03T17:00"),
]


@pytest.mark.parametrize(("zone", "start", "end", "planned_out", "after"), BLACKOUTS_ACROSS_CHANGES)
def test_a_blackout_across_a_change_of_the_clock_spans_the_real_time_between_its_ends(
    zone: str, start: str, end: str, planned_out: int, after: str
) -> None:
    """Both ends without an offset are read in the task's zone; every half-hourly fire time
    between them is planned out as ``blackout``, and the first one at its end runs."""
    fire_times = spec(zone, {"every": "30m"}, blackout=[{"from": start, "to": end}]).fire_times
    window_start = utc(after) - planned_out * timedelta(minutes=30)
    counts: Counter[str] = Counter()

    first = fire_times.next(None, window_start - timedelta(minutes=30), counts)
    assert first == window_start - timedelta(minutes=30)
    assert fire_times.next(first, first, counts) == utc(after)
    assert counts == {"blackout": planned_out}


#: (zone, the date excluded, where to look from, the next three fire times of the fixed-time
#: job ``30 2 * * *`` in UTC): around each change, the excluded day is skipped and the days
#: around it keep the daylight saving rules (a gap's 02:30 runs at 03:30, shifted).
UPCOMING_AROUND_CHANGES = [
    (
        "Europe/Berlin",
        "2026-03-28",
        "2026-03-27T12:00",
        ["2026-03-29T01:30", "2026-03-30T00:30", "2026-03-31T00:30"],
    ),
    (
        "Europe/Berlin",
        "2026-10-25",
        "2026-10-23T12:00",
        ["2026-10-24T00:30", "2026-10-26T01:30", "2026-10-27T01:30"],
    ),
    (
        "Australia/Sydney",
        "2026-04-05",
        "2026-04-03T12:00",
        ["2026-04-03T15:30", "2026-04-05T16:30", "2026-04-06T16:30"],
    ),
    (
        "Australia/Sydney",
        "2026-10-05",
        "2026-10-02T12:00",
        ["2026-10-02T16:30", "2026-10-03T16:30", "2026-10-05T15:30"],
    ),
]


@pytest.mark.parametrize(("zone", "excluded", "since", "expected"), UPCOMING_AROUND_CHANGES)
def test_the_upcoming_fire_times_around_a_change_of_the_clock_leave_out_the_excluded_day(
    zone: str, excluded: str, since: str, expected: list[str]
) -> None:
    """The next fire times a task lists (what ``/upcoming`` answers) around each change."""
    fire_times = spec(zone, "30 2 * * *", calendar={"exclude": [excluded]}).fire_times

    assert fire_times.upcoming(fire_times.next(None, utc(since)), 3) == [
        utc(text) for text in expected
    ]


def test_weekdays_are_those_of_the_tasks_zone_not_of_utc() -> None:
    """Monday 07:00 in Sydney is Sunday 21:00 UTC: a Monday-only calendar runs it, and the
    Sunday fire time before it is planned out."""
    fire_times = spec("Australia/Sydney", "0 7 * * *", calendar={"weekdays": ["mon"]}).fire_times

    assert fire_times.next(None, utc("2026-06-06T00:00")) == utc("2026-06-07T21:00")


def test_a_long_blackout_of_a_per_second_schedule_is_jumped_not_walked() -> None:
    """A week-long window over ``every: 1s`` counts its 604,800 fire times and finds the one
    at its end in one step each way."""
    start, end = utc("2026-06-01T00:00"), utc("2026-06-08T00:00")
    fire_times = spec(
        "UTC", {"every": "1s"}, blackout=[{"from": start.isoformat(), "to": end.isoformat()}]
    ).fire_times
    counts: Counter[str] = Counter()

    assert fire_times.next(None, start, counts) == end
    assert counts == {"blackout": 7 * 86400}


# -- claims plan excluded fire times out ---------------------------------------------------------


def claim_at(now: datetime, horizon: datetime | None = None) -> Claim:
    ids = count()
    return Claim("n1", now, horizon or now, new_id=lambda _now: f"e{next(ids):05}")


def test_a_claim_plans_no_execution_for_an_excluded_fire_time_and_counts_it() -> None:
    """Hourly on a weekday calendar, claimed on Monday 00:30 after the weekend with run_all:
    Friday's last hours and Monday 00:00 run, Saturday and Sunday make no row at all (not
    even SKIPPED), and the next fire time is Monday 01:00; the plan counts the 48 planned
    out."""
    hourly = spec(
        "UTC",
        "0 * * * *",
        calendar={"weekdays": ["mon", "tue", "wed", "thu", "fri"]},
        misfire={"policy": "run_all"},
    )
    friday = utc("2026-06-05T22:00")
    plan = plan_fires("t", hourly, friday, claim_at(utc("2026-06-08T00:30")))

    monday = utc("2026-06-08T00:00")
    assert [e.scheduled_at for e in plan.executions] == [friday, friday + HOUR, monday]
    assert all(e.status is Status.SCHEDULED for e in plan.executions)
    assert plan.next_fire_at == monday + HOUR
    assert plan.excluded == {"calendar": 48}


def test_a_stored_fire_time_that_a_reload_excluded_is_planned_out_when_it_falls_due() -> None:
    """A next fire time stored before a blackout was added over it is not run: the claim
    moves to the first fire time after the window."""
    blocked = spec(
        "UTC",
        {"every": "10m"},
        blackout=[{"from": "2026-06-01T12:00:00Z", "to": "2026-06-01T12:25:00Z"}],
    )
    plan = plan_fires("t", blocked, utc("2026-06-01T12:00"), claim_at(utc("2026-06-01T12:00")))

    assert plan.executions == []
    assert plan.next_fire_at == utc("2026-06-01T12:30")
    assert plan.excluded == {"blackout": 3}


def test_run_once_after_an_outage_runs_the_latest_missed_fire_time_the_calendar_allows() -> None:
    """Down from Friday 20:00 to Monday 00:30 on a weekday calendar: the latest missed hour
    that runs is Monday 00:00 (not Sunday 23:00), and the SKIPPED misfire records are
    Friday's hours: the weekend's were planned out, not missed."""
    hourly = spec("UTC", "0 * * * *", calendar={"weekdays": ["mon", "tue", "wed", "thu", "fri"]})
    plan = plan_fires("t", hourly, utc("2026-06-05T20:00"), claim_at(utc("2026-06-08T00:30")))

    run = [e.scheduled_at for e in plan.executions if e.status is Status.SCHEDULED]
    skipped = [e.scheduled_at for e in plan.executions if e.status is Status.SKIPPED]
    assert run == [utc("2026-06-08T00:00")]
    assert skipped == [
        utc("2026-06-05T20:00"),
        utc("2026-06-05T21:00"),
        utc("2026-06-05T22:00"),
        utc("2026-06-05T23:00"),
    ]
    assert plan.next_fire_at == utc("2026-06-08T01:00")

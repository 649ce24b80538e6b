"""Fire times (DESIGN.md, "Scheduling rules"), always computed from an injected ``now``."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ecron.errors import ScheduleError
from ecron.schedules import (
    EPOCH,
    Schedule,
    ScheduleKind,
    cron_weekdays,
    jitter_offset,
    missed_fire_times,
    next_fire_time,
    parse_schedule,
)
from tests.support.schedules import fire_times

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
HOUR = timedelta(hours=1)


def utc(*args: int) -> datetime:
    """A UTC datetime, so the tests never read the real clock."""
    return datetime(*args, tzinfo=UTC)


def fire_times_until(schedule: Schedule, now: datetime, end: datetime) -> list[datetime]:
    """Every fire time from ``now`` up to ``end``, each advanced from the previous one."""
    times: list[datetime] = []
    current = next_fire_time(schedule, None, now)
    while current is not None and current < end:
        times.append(current)
        current = next_fire_time(schedule, current, now)
    return times


# --- cron: fields ---------------------------------------------------------------------------


def test_a_five_field_cron_fires_at_second_zero_of_each_matching_minute() -> None:
    """``*/15 * * * *`` fires at :00, :15, :30 and :45, always at second zero."""
    schedule = parse_schedule("*/15 * * * *")
    assert schedule.kind is ScheduleKind.CRON
    assert fire_times(schedule, utc(2026, 5, 4, 10, 7, 13), 5) == [
        utc(2026, 5, 4, 10, 15),
        utc(2026, 5, 4, 10, 30),
        utc(2026, 5, 4, 10, 45),
        utc(2026, 5, 4, 11, 0),
        utc(2026, 5, 4, 11, 15),
    ]


def test_a_six_field_cron_reads_seconds_first() -> None:
    """``*/20 30 2 * * *`` fires at 02:30:00, 02:30:20 and 02:30:40, then the next day."""
    schedule = parse_schedule("*/20 30 2 * * *")
    assert fire_times(schedule, utc(2026, 5, 4), 4) == [
        utc(2026, 5, 4, 2, 30, 0),
        utc(2026, 5, 4, 2, 30, 20),
        utc(2026, 5, 4, 2, 30, 40),
        utc(2026, 5, 5, 2, 30, 0),
    ]


def test_a_cron_fire_time_equal_to_now_is_the_next_one() -> None:
    """Without a previous fire time, a fire time exactly at ``now`` counts (at or after now)."""
    schedule = parse_schedule("0 * * * *")
    assert next_fire_time(schedule, None, utc(2026, 5, 4, 10)) == utc(2026, 5, 4, 10)
    assert next_fire_time(schedule, None, utc(2026, 5, 4, 10, 0, 0, 1000)) == utc(2026, 5, 4, 11)


def test_a_cron_with_a_previous_fire_time_gives_the_one_after_it_even_before_now() -> None:
    """Missed fire times are the caller's business: the next one after ``previous`` is returned."""
    schedule = parse_schedule("0 * * * *")
    previous = utc(2026, 5, 4, 3)
    assert next_fire_time(schedule, previous, utc(2026, 5, 4, 10, 30)) == utc(2026, 5, 4, 4)


def test_a_cron_with_a_previous_fire_time_still_ahead_of_now_gives_the_one_after_it() -> None:
    """A fire time claimed early (ahead of ``now``) advances to the following one, not itself."""
    schedule = parse_schedule("0 * * * *")
    previous = utc(2026, 5, 4, 11)
    assert next_fire_time(schedule, previous, utc(2026, 5, 4, 10, 59, 59)) == utc(2026, 5, 4, 12)
    assert next_fire_time(schedule, previous, utc(2026, 5, 4, 9)) == utc(2026, 5, 4, 12)


def test_cron_fire_times_are_utc() -> None:
    """Every fire time is returned in UTC, whatever the task's time zone."""
    schedule = parse_schedule("0 9 * * *", "Asia/Tokyo")
    fired = next_fire_time(schedule, None, utc(2026, 5, 4))
    assert fired == utc(2026, 5, 4, 0)
    assert fired is not None
    assert fired.tzinfo is UTC


# --- cron: weekdays follow crontab ----------------------------------------------------------


def test_weekdays_one_to_five_fire_monday_to_friday_only() -> None:
    """``0 9 * * 1-5`` fires on the five working days of a week and never at the weekend."""
    schedule = parse_schedule("0 9 * * 1-5")
    # 2026-05-02 is a Saturday.
    times = fire_times_until(schedule, utc(2026, 5, 2), utc(2026, 5, 9))
    assert times == [utc(2026, 5, day, 9) for day in (4, 5, 6, 7, 8)]
    assert [time.strftime("%a") for time in times] == ["Mon", "Tue", "Wed", "Thu", "Fri"]


@pytest.mark.parametrize("sunday", ["0", "7", "sun", "SUN", "sunday"])
def test_weekday_zero_seven_and_the_name_all_mean_sunday(sunday: str) -> None:
    """``0 0 * * 0`` and ``0 0 * * 7`` fire on Sundays, as in crontab."""
    schedule = parse_schedule(f"0 0 * * {sunday}")
    times = fire_times(schedule, utc(2026, 5, 4), 3)
    assert times == [utc(2026, 5, 10), utc(2026, 5, 17), utc(2026, 5, 24)]
    assert {time.weekday() for time in times} == {6}


def test_a_weekday_step_over_the_whole_week_starts_on_sunday() -> None:
    """``*/2`` in the weekday field means Sunday, Tuesday, Thursday and Saturday."""
    schedule = parse_schedule("0 12 * * */2")
    times = fire_times_until(schedule, utc(2026, 5, 3), utc(2026, 5, 10))
    assert [time.strftime("%a") for time in times] == ["Sun", "Tue", "Thu", "Sat"]


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("mon-fri", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("fri-sun", ["Fri", "Sat", "Sun"]),
        ("5-7", ["Fri", "Sat", "Sun"]),
        ("Mon,wed,FRI", ["Mon", "Wed", "Fri"]),
        ("sat,0", ["Sat", "Sun"]),
    ],
)
def test_weekday_names_ranges_and_lists_fire_on_those_days(field: str, days: list[str]) -> None:
    """Names (any case), ranges that end on Sunday and lists fire on exactly the days they name."""
    schedule = parse_schedule(f"0 6 * * {field}")
    times = fire_times_until(schedule, utc(2026, 5, 4), utc(2026, 5, 11))
    assert sorted(time.weekday() for time in times) == sorted(
        ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].index(day) for day in days
    )


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("*", "*"),
        ("?", "*"),
        ("0", "sun"),
        ("7", "sun"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("*/2", "sun,tue,thu,sat"),
        ("1-7/2", "sun,mon,wed,fri"),
        ("mon-fri", "mon,tue,wed,thu,fri"),
        ("fri-sun", "sun,fri,sat"),
        ("sat-sun", "sun,sat"),
        ("5-7", "sun,fri,sat"),
        ("0,7", "sun"),
        ("0-6", "sun,mon,tue,wed,thu,fri,sat"),
        ("TUE,Thu", "tue,thu"),
        ("monday,friday", "mon,fri"),
        ("3", "wed"),
    ],
)
def test_cron_weekdays_translates_crontab_numbers_into_day_names(field: str, expected: str) -> None:
    """Crontab numbers Sunday 0 (or 7) to Saturday 6; APScheduler gets unambiguous names."""
    assert cron_weekdays(field) == expected


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ("8", "'8' is not a weekday"),
        ("foo", "'foo' is not a weekday"),
        ("sunny", "'sunny' is not a weekday"),
        ("mo", "'mo' is not a weekday"),
        ("5-1", "runs backwards"),
        ("*/0", "step must be at least 1"),
        ("1,", "cannot read ''"),
        ("1--2", "cannot read"),
    ],
)
def test_cron_weekdays_refuses_what_is_not_a_weekday(field: str, problem: str) -> None:
    """A bad weekday field raises ScheduleError naming the field and the part it cannot read."""
    with pytest.raises(ScheduleError, match=problem) as caught:
        cron_weekdays(field)
    assert repr(field) in str(caught.value)


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("61 * * * *", r"'61 \* \* \* \*' is not a valid cron expression.*maximum value \(59\)"),
        ("0 24 * * *", r"is not a valid cron expression.*maximum value \(23\)"),
        ("0 0 32 * *", r"is not a valid cron expression.*maximum value \(31\)"),
        ("0 0 * 13 *", r"is not a valid cron expression.*maximum value \(12\)"),
        ("60 0 0 * * *", r"is not a valid cron expression.*maximum value \(59\)"),
        ("* * * *", r"has 4 fields, expected 5 .* or 6"),
        ("1 2 3 4 5 6 7", r"has 7 fields, expected 5"),
        ("", r"has 0 fields"),
        ("0 0 * * 8", r"'0 0 \* \* 8' is not a valid cron expression.*'8' is not a weekday"),
        ("0 0 * * foo", r"'0 0 \* \* foo' is not a valid cron expression.*'foo' is not a weekday"),
    ],
)
def test_an_invalid_cron_expression_raises_a_schedule_error_naming_the_problem(
    expression: str, problem: str
) -> None:
    """Out-of-range values, the wrong number of fields and bad weekdays are refused, with why."""
    with pytest.raises(ScheduleError, match=problem):
        parse_schedule(expression)


def test_manual_has_no_fire_times() -> None:
    """A manual task only runs when asked."""
    schedule = parse_schedule("manual")
    assert schedule.kind is ScheduleKind.MANUAL
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) is None
    assert next_fire_time(schedule, utc(2026, 5, 3), utc(2026, 5, 4)) is None


# --- cron: time zones and daylight saving time ----------------------------------------------


def test_three_in_the_morning_in_shanghai_is_seven_in_the_evening_utc_the_day_before() -> None:
    """``0 3 * * *`` in Asia/Shanghai (UTC+8, no DST) fires at 19:00 UTC of the previous day."""
    schedule = parse_schedule("0 3 * * *", "Asia/Shanghai")
    assert fire_times(schedule, utc(2026, 5, 4, 12), 3) == [
        utc(2026, 5, 4, 19),
        utc(2026, 5, 5, 19),
        utc(2026, 5, 6, 19),
    ]


def test_a_daily_job_in_the_hour_skipped_by_spring_forward_fires_once_an_hour_late() -> None:
    """Berlin, 2026-03-29: 02:30 does not exist, so that day it fires at 03:30 CEST (01:30 UTC).

    The missing 02:30 is read with the offset before the change (+01:00), which
    is 01:30 UTC, i.e. 03:30 local: shifted by the gap. Once that day, never zero
    or twice; the days around it fire at 02:30 local.
    """
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    times = fire_times(schedule, utc(2026, 3, 27), 5)
    assert times == [
        utc(2026, 3, 27, 1, 30),  # 02:30 CET
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 30),  # 03:30 CEST: 02:30 did not exist
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),  # 02:30 CEST
    ]
    assert [time.astimezone(BERLIN).strftime("%d %H:%M") for time in times] == [
        "27 02:30",
        "28 02:30",
        "29 03:30",
        "30 02:30",
        "31 02:30",
    ]


def test_hourly_fire_times_across_spring_forward_are_one_hour_apart_in_utc() -> None:
    """Berlin, 2026-03-29: ``0 * * * *`` goes 01:00 CET → 03:00 CEST, no gap, no duplicate."""
    schedule = parse_schedule("0 * * * *", "Europe/Berlin")
    times = fire_times_until(schedule, utc(2026, 3, 28, 20), utc(2026, 3, 29, 6))
    assert times == [utc(2026, 3, 28, 20) + n * HOUR for n in range(10)]
    local = [time.astimezone(BERLIN).strftime("%H:%M%z") for time in times]
    assert local[4:7] == ["01:00+0100", "03:00+0200", "04:00+0200"]


def test_a_daily_job_in_the_hour_repeated_by_fall_back_fires_only_the_first_time() -> None:
    """Berlin, 2026-10-25: 02:30 happens twice; the job fires at the first (02:30 CEST, 00:30 UTC).

    APScheduler 3.11 alone would fire at both 02:30 CEST and 02:30 CET; ecron,
    like Vixie cron, runs a fixed-time job once when the clock falls back.
    """
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    times = fire_times(schedule, utc(2026, 10, 23), 5)
    assert times == [
        utc(2026, 10, 23, 0, 30),  # 02:30 CEST
        utc(2026, 10, 24, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST, the first of two 02:30s
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
        utc(2026, 10, 27, 1, 30),  # 02:30 CET
    ]


def test_a_daily_job_found_between_the_two_repeated_times_waits_for_the_next_day() -> None:
    """Looking for the first fire time after 02:30 CEST on the fall-back day skips 02:30 CET."""
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    assert next_fire_time(schedule, None, utc(2026, 10, 25, 0, 31)) == utc(2026, 10, 26, 1, 30)
    assert next_fire_time(schedule, None, utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 25, 0, 30)


def test_hourly_fire_times_across_fall_back_are_one_hour_apart_in_utc() -> None:
    """Berlin, 2026-10-25: ``0 * * * *`` fires at 02:00 CEST and 02:00 CET, one hour apart."""
    schedule = parse_schedule("0 * * * *", "Europe/Berlin")
    times = fire_times_until(schedule, utc(2026, 10, 24, 20), utc(2026, 10, 25, 6))
    assert times == [utc(2026, 10, 24, 20) + n * HOUR for n in range(10)]
    local = [time.astimezone(BERLIN).strftime("%H:%M%z") for time in times]
    assert local[3:7] == ["01:00+0200", "02:00+0200", "02:00+0100", "03:00+0100"]


def test_a_wildcard_minute_job_runs_by_the_clock_in_both_repeated_hours() -> None:
    """``*/30 2 * * *`` fires at 02:00 and 02:30 of both the CEST and the CET 02 hour."""
    schedule = parse_schedule("*/30 2 * * *", "Europe/Berlin")
    times = fire_times_until(schedule, utc(2026, 10, 25), utc(2026, 10, 25, 12))
    assert times == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 1, 30),
    ]


def test_new_york_spring_forward_fires_a_missing_time_once_an_hour_late() -> None:
    """New York, 2026-03-08: 02:30 does not exist; that day ``30 2 * * *`` fires at 03:30 EDT."""
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    times = fire_times(schedule, utc(2026, 3, 7), 3)
    assert times == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)]
    assert [time.astimezone(NEW_YORK).strftime("%H:%M") for time in times] == [
        "02:30",
        "03:30",
        "02:30",
    ]


def test_new_york_fall_back_fires_a_repeated_time_once() -> None:
    """New York, 2026-11-01: 01:30 happens twice; ``30 1 * * *`` fires at 01:30 EDT only."""
    schedule = parse_schedule("30 1 * * *", "America/New_York")
    times = fire_times(schedule, utc(2026, 10, 31), 3)
    assert times == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_new_york_hourly_fire_times_are_one_hour_apart_across_both_changes() -> None:
    """``0 * * * *`` in New York never skips or repeats a UTC hour around either change."""
    schedule = parse_schedule("0 * * * *", "America/New_York")
    for start in (utc(2026, 3, 8, 3), utc(2026, 11, 1, 3)):
        times = fire_times_until(schedule, start, start + 6 * HOUR)
        assert times == [start + n * HOUR for n in range(6)]


# --- every ----------------------------------------------------------------------------------


def test_every_is_aligned_to_whole_multiples_of_its_interval_since_the_epoch() -> None:
    """``every 10m`` at 12:07:13 fires at 12:10:00, then every ten minutes."""
    schedule = parse_schedule({"every": "10m"})
    assert schedule.kind is ScheduleKind.EVERY
    assert fire_times(schedule, utc(2026, 5, 4, 12, 7, 13), 3) == [
        utc(2026, 5, 4, 12, 10),
        utc(2026, 5, 4, 12, 20),
        utc(2026, 5, 4, 12, 30),
    ]


def test_every_seven_seconds_fires_on_epoch_multiples_of_seven() -> None:
    """An interval that does not divide a minute is aligned to the epoch, not to the minute."""
    schedule = parse_schedule({"every": "7s"})
    now = utc(2026, 5, 4, 12, 7, 13)
    times = fire_times(schedule, now, 50)
    seconds = [(time - EPOCH) / timedelta(seconds=1) for time in times]
    assert all(value % 7 == 0 for value in seconds)
    assert times[0] >= now
    assert times[0] - now < timedelta(seconds=7)
    assert all(b - a == timedelta(seconds=7) for a, b in itertools.pairwise(times))


def test_every_fires_at_now_when_now_is_exactly_on_a_multiple() -> None:
    """A fire time exactly at ``now`` is the first one, for whole and fractional intervals."""
    for interval, step in (("10m", 600_000), ("7s", 7000), ("300ms", 300), ("1.1s", 1100)):
        schedule = parse_schedule({"every": interval})
        for n in range(200):
            now = EPOCH + timedelta(milliseconds=step * (5_900_000_000_000 // step + n))
            assert next_fire_time(schedule, None, now) == now, (interval, now)
            just_after = now + timedelta(microseconds=1)
            expected = now + timedelta(milliseconds=step)
            assert next_fire_time(schedule, None, just_after) == expected, (interval, now)


def test_every_with_start_is_aligned_to_start() -> None:
    """``every 10m`` from 00:03 (the task's zone) fires at :03, :13, :23 …; never before start."""
    schedule = parse_schedule({"every": "10m", "start": "2026-05-04T00:03:00"}, "Europe/Berlin")
    # 00:03 in Berlin (CEST) is 22:03 UTC the day before.
    assert next_fire_time(schedule, None, utc(2026, 5, 3)) == utc(2026, 5, 3, 22, 3)
    assert fire_times(schedule, utc(2026, 5, 4, 12, 7, 13), 2) == [
        utc(2026, 5, 4, 12, 13),
        utc(2026, 5, 4, 12, 23),
    ]


def test_every_with_a_previous_fire_time_adds_the_interval_even_before_now() -> None:
    """Given the previous fire time, the next is previous + interval, even when that is past."""
    schedule = parse_schedule({"every": "10m"})
    previous = utc(2026, 5, 4, 3, 0)
    assert next_fire_time(schedule, previous, utc(2026, 5, 4, 12)) == utc(2026, 5, 4, 3, 10)
    # And ahead of now (a fire time claimed early): still previous + interval.
    assert next_fire_time(schedule, previous, utc(2026, 5, 4, 2)) == utc(2026, 5, 4, 3, 10)


@pytest.mark.parametrize(("interval", "step_ms"), [("500ms", 500), ("100ms", 100), ("1s1ms", 1001)])
def test_every_keeps_milliseconds_exactly_over_thousands_of_fire_times(
    interval: str, step_ms: int
) -> None:
    """Sub-second intervals give exact millisecond multiples of the epoch, never float artifacts."""
    schedule = parse_schedule({"every": interval})
    now = utc(2026, 5, 4, 12, 7, 13, 123_456)
    times = fire_times(schedule, now, 3000)
    step = timedelta(milliseconds=step_ms)
    assert times[0] >= now
    assert times[0] - now < step
    for time in times:
        assert time.microsecond % 1000 == 0, time
        assert (time - EPOCH) % step == timedelta(0), time
    assert all(b - a == step for a, b in itertools.pairwise(times))


@given(
    milliseconds=st.integers(min_value=1, max_value=86_400_000),
    now=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
)
def test_every_first_fire_time_is_the_first_epoch_multiple_at_or_after_now(
    milliseconds: int, now: datetime
) -> None:
    """For any interval and ``now``, the first fire time is the least multiple not before now."""
    step = timedelta(milliseconds=milliseconds)
    schedule = parse_schedule({"every": f"{milliseconds}ms"})
    fired = next_fire_time(schedule, None, now)
    assert fired is not None
    assert (fired - EPOCH) % step == timedelta(0)
    assert now <= fired < now + step


# --- after ----------------------------------------------------------------------------------


def test_after_without_a_previous_end_fires_now() -> None:
    """A fixed-delay task with no previous execution starts at once."""
    schedule = parse_schedule({"after": "10m"})
    assert schedule.kind is ScheduleKind.AFTER
    now = utc(2026, 5, 4, 12, 7, 13, 250_000)
    assert next_fire_time(schedule, None, now) == now


def test_after_fires_the_delay_after_the_previous_execution_ended() -> None:
    """The next start is the previous end plus the delay, whatever ``now``."""
    schedule = parse_schedule({"after": "10m"})
    ended = utc(2026, 5, 4, 12, 0, 1, 500_000)
    assert next_fire_time(schedule, ended, utc(2026, 5, 4, 12, 1)) == utc(
        2026, 5, 4, 12, 10, 1, 500_000
    )
    assert next_fire_time(schedule, ended, utc(2026, 5, 5)) == utc(2026, 5, 4, 12, 10, 1, 500_000)


def test_after_rounds_to_the_millisecond() -> None:
    """Fire times keep milliseconds and nothing finer."""
    schedule = parse_schedule({"after": "1s"})
    ended = utc(2026, 5, 4, 12, 0, 0, 123_456)
    assert next_fire_time(schedule, ended, ended) == utc(2026, 5, 4, 12, 0, 1, 123_000)


# --- at -------------------------------------------------------------------------------------


def test_at_with_a_utc_string_fires_once_at_that_time() -> None:
    """``{at: "2026-12-01T03:00:00Z"}`` fires at that instant, and once fired, never again."""
    schedule = parse_schedule({"at": "2026-12-01T03:00:00Z"}, "Asia/Shanghai")
    assert schedule.kind is ScheduleKind.AT
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) == utc(2026, 12, 1, 3)
    assert next_fire_time(schedule, utc(2026, 12, 1, 3), utc(2026, 12, 1, 3)) is None


def test_at_with_a_naive_string_is_read_in_the_task_time_zone() -> None:
    """A time without an offset is local: 03:00 in Shanghai is 19:00 UTC the day before."""
    schedule = parse_schedule({"at": "2026-12-01T03:00:00"}, "Asia/Shanghai")
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) == utc(2026, 11, 30, 19)


def test_at_with_a_naive_datetime_is_read_in_the_task_time_zone() -> None:
    """A YAML timestamp without an offset arrives as a naive datetime and is read the same way."""
    schedule = parse_schedule({"at": datetime(2026, 7, 1, 3, 0)}, "Europe/Berlin")
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) == utc(2026, 7, 1, 1)


def test_at_with_an_aware_datetime_keeps_its_own_offset() -> None:
    """A datetime that carries its zone is not re-read in the task's time zone."""
    when = datetime(2026, 7, 1, 3, 0, tzinfo=NEW_YORK)
    schedule = parse_schedule({"at": when}, "Asia/Shanghai")
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) == utc(2026, 7, 1, 7)


def test_at_keeps_milliseconds() -> None:
    """An ``at`` time with milliseconds fires with those milliseconds."""
    schedule = parse_schedule({"at": "2026-12-01T03:00:00.250Z"})
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) == utc(2026, 12, 1, 3, 0, 0, 250_000)


def test_at_in_the_past_is_still_its_one_fire_time() -> None:
    """A one-off time already past is returned (to be judged by the misfire policy), not dropped."""
    schedule = parse_schedule({"at": "2026-01-01T00:00:00Z"})
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) == utc(2026, 1, 1)


@pytest.mark.parametrize(
    "value", ["0 3 * * *", {"every": "10m"}, {"at": "2026-12-01T03:00:00"}, {"after": "1m"}]
)
def test_no_schedule_depends_on_the_host_time_zone(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fire times never consult the machine's local zone (a bad TZ there must not matter)."""

    def refuse() -> None:
        raise AssertionError("the host's time zone was asked for")

    for module in ("cron", "date", "interval"):
        monkeypatch.setattr(f"apscheduler.triggers.{module}.get_localzone", refuse, raising=False)
    schedule = parse_schedule(value, "Asia/Shanghai")
    assert next_fire_time(schedule, None, utc(2026, 5, 4)) is not None


# --- missed fire times ----------------------------------------------------------------------


def test_missed_fire_times_lists_every_due_one_and_the_next_after_them() -> None:
    """From the stored fire time up to now: all due ones, and the first one still ahead."""
    schedule = parse_schedule("0 * * * *")
    due, upcoming = missed_fire_times(schedule, utc(2026, 5, 4, 3), utc(2026, 5, 4, 6, 30), 100)
    assert due == [utc(2026, 5, 4, hour) for hour in (3, 4, 5, 6)]
    assert upcoming == utc(2026, 5, 4, 7)


def test_missed_fire_times_counts_a_fire_time_exactly_at_now_as_due() -> None:
    """A fire time equal to ``now`` is due, not upcoming."""
    schedule = parse_schedule("0 * * * *")
    due, upcoming = missed_fire_times(schedule, utc(2026, 5, 4, 3), utc(2026, 5, 4, 4), 100)
    assert due == [utc(2026, 5, 4, 3), utc(2026, 5, 4, 4)]
    assert upcoming == utc(2026, 5, 4, 5)


def test_missed_fire_times_stops_at_the_limit_and_returns_the_next_unlisted_one() -> None:
    """At most ``limit`` are listed; the next one is the first not listed, even if it is due too."""
    schedule = parse_schedule({"every": "1m"})
    due, upcoming = missed_fire_times(schedule, utc(2026, 5, 4, 3), utc(2026, 5, 4, 4), 5)
    assert due == [utc(2026, 5, 4, 3, minute) for minute in range(5)]
    assert upcoming == utc(2026, 5, 4, 3, 5)


def test_missed_fire_times_with_nothing_due_returns_the_first_as_next() -> None:
    """A first fire time still ahead of now is not due."""
    schedule = parse_schedule("0 * * * *")
    due, upcoming = missed_fire_times(schedule, utc(2026, 5, 4, 7), utc(2026, 5, 4, 6, 30), 10)
    assert due == []
    assert upcoming == utc(2026, 5, 4, 7)


def test_missed_fire_times_of_an_after_schedule_is_only_ever_one() -> None:
    """A fixed-delay task has at most one due fire time: it waits for that execution to end."""
    schedule = parse_schedule({"after": "1m"})
    due, upcoming = missed_fire_times(schedule, utc(2026, 5, 4, 3), utc(2026, 5, 4, 4), 100)
    assert due == [utc(2026, 5, 4, 3)]
    assert upcoming is None


def test_missed_fire_times_of_a_one_off_has_nothing_after_it() -> None:
    """An ``at`` schedule that was missed is due once, with no next fire time."""
    schedule = parse_schedule({"at": "2026-05-04T03:00:00Z"})
    due, upcoming = missed_fire_times(schedule, utc(2026, 5, 4, 3), utc(2026, 5, 4, 4), 100)
    assert due == [utc(2026, 5, 4, 3)]
    assert upcoming is None


# --- jitter ---------------------------------------------------------------------------------


def test_jitter_offset_is_zero_without_jitter() -> None:
    """No jitter, no delay."""
    assert jitter_offset("nightly", utc(2026, 5, 4, 3), timedelta(0)) == timedelta(0)


@given(
    task=st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,30}", fullmatch=True),
    scheduled_at=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    jitter_ms=st.integers(min_value=1, max_value=7 * 86_400_000),
)
def test_jitter_offset_always_lies_within_zero_and_the_jitter(
    task: str, scheduled_at: datetime, jitter_ms: int
) -> None:
    """The delay is in ``[0, jitter)`` and the same every time it is asked for one fire time."""
    jitter = timedelta(milliseconds=jitter_ms)
    offset = jitter_offset(task, scheduled_at, jitter)
    assert timedelta(0) <= offset < jitter
    assert offset.microseconds % 1000 == 0
    assert jitter_offset(task, scheduled_at, jitter) == offset


def test_jitter_offset_is_the_same_for_the_same_task_and_fire_time() -> None:
    """Every node computes the same delay for one fire time, whatever the zone it is given in."""
    at = utc(2026, 5, 4, 3)
    jitter = timedelta(minutes=5)
    assert jitter_offset("nightly", at, jitter) == jitter_offset("nightly", at, jitter)
    assert jitter_offset("nightly", at, jitter) == jitter_offset(
        "nightly", at.astimezone(BERLIN), jitter
    )


def test_jitter_offset_differs_across_fire_times_and_tasks() -> None:
    """The delay spreads fire times: it is not one constant per task."""
    jitter = timedelta(minutes=5)
    offsets = {jitter_offset("nightly", utc(2026, 5, 4, hour), jitter) for hour in range(24)}
    assert len(offsets) > 20
    per_task = {jitter_offset(f"task-{n}", utc(2026, 5, 4, 3), jitter) for n in range(24)}
    assert len(per_task) > 20


def test_jitter_offsets_spread_over_the_whole_window() -> None:
    """Over many fire times the delays cover both halves of the jitter window."""
    jitter = timedelta(seconds=10)
    offsets = [
        jitter_offset("t", utc(2026, 5, 4) + n * timedelta(minutes=1), jitter) for n in range(500)
    ]
    low = sum(offset < jitter / 2 for offset in offsets)
    assert 150 < low < 350


# --- parse errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"every": "10m", "jitter": "1s"}, r"\['every', 'jitter'\] is not a schedule mapping"),
        ({"after": "10m", "start": "2026-01-01T00:00:00Z"}, r"is not a schedule mapping"),
        ({"every": "10m", "after": "10m"}, r"is not a schedule mapping"),
        ({}, r"\[\] is not a schedule mapping"),
        ({"every": "0s"}, r"every: '0s' must be longer than zero"),
        ({"every": 0}, r"every: 0 must be longer than zero"),
        ({"every": "10"}, r"every: '10' is not a duration"),
        ({"after": "0ms"}, r"after: '0ms' must be longer than zero"),
        ({"at": "tomorrow"}, r"at: 'tomorrow' is not a time"),
        ({"at": 1767225600}, r"at: 1767225600 is not a time"),
        ({"every": "10m", "start": "soon"}, r"start: 'soon' is not a time"),
        (5, r"5 is not a schedule"),
        (None, r"None is not a schedule"),
        (["0 * * * *"], r"is not a schedule"),
    ],
)
def test_parse_schedule_refuses_a_bad_schedule_with_a_message_naming_it(
    value: Any, problem: str
) -> None:
    """Unknown keys, a zero interval, a bad time or a value of a wrong type raise ScheduleError."""
    with pytest.raises(ScheduleError, match=problem):
        parse_schedule(value)


@pytest.mark.parametrize("timezone", ["Mars/Olympus_Mons", "", "CEST+2", "../../etc/passwd"])
def test_parse_schedule_refuses_an_unknown_time_zone(timezone: str) -> None:
    """A time zone that is not an IANA name is refused, whatever the schedule."""
    with pytest.raises(ScheduleError, match="is not a known time zone"):
        parse_schedule("0 3 * * *", timezone)


def test_schedule_text_names_the_schedule_for_people() -> None:
    """The printable form says what the schedule is, with the zone for cron."""
    assert parse_schedule("0 3 * * *", "Asia/Shanghai").text == "cron 0 3 * * * (Asia/Shanghai)"
    assert parse_schedule({"every": "90s"}).text == "every 1m30s"
    assert parse_schedule({"after": "1h"}).text == "after 1h"
    assert parse_schedule({"at": "2026-12-01T03:00:00Z"}).text == "at 2026-12-01T03:00:00.000Z"


def test_cron_with_both_day_fields_restricted_fires_when_either_matches() -> None:
    """As in crontab, "0 0 1 * 1" fires on the 1st of every month and on every Monday."""
    schedule = parse_schedule("0 0 1 * 1")
    fires = []
    previous = None
    for _ in range(6):
        previous = next_fire_time(schedule, previous, datetime(2026, 5, 27, tzinfo=UTC))
        assert previous is not None
        fires.append(previous.date().isoformat())
    # 2026-06-01 is a Monday and the 1st: it fires once, not twice
    assert fires == [
        "2026-06-01",
        "2026-06-08",
        "2026-06-15",
        "2026-06-22",
        "2026-06-29",
        "2026-07-01",
    ]


def test_a_cron_expression_that_can_never_fire_is_refused() -> None:
    """30 February does not exist: the schedule is an error, not a task that silently never runs."""
    with pytest.raises(ScheduleError, match="never fires"):
        parse_schedule("0 0 30 2 *")
    assert parse_schedule("0 0 29 2 *").kind is ScheduleKind.CRON  # leap days do exist


@pytest.mark.parametrize(
    ("value", "timezone"),
    [
        ({"at": "0001-01-01T00:00:00+01:00"}, "UTC"),
        ({"at": "0001-01-01T00:00:00"}, "Asia/Tokyo"),
        ({"at": "9999-12-31T23:59:59-01:00"}, "UTC"),
        ({"every": "1h", "start": "9999-12-31T23:00:00"}, "America/New_York"),
    ],
)
def test_a_time_that_falls_off_the_calendar_in_utc_is_refused_with_a_schedule_error(
    value: dict[str, str], timezone: str
) -> None:
    """A time whose UTC instant is before the year 1 or after 9999 is a ScheduleError
    naming the key and the value (it was an OverflowError that the config loader let
    through; found by tests/test_fuzz_input.py)."""
    key = "start" if "start" in value else "at"
    with pytest.raises(ScheduleError, match=rf"^{key}: '.*' is not a time ecron can use"):
        parse_schedule(value, timezone)


@pytest.mark.parametrize(
    "value",
    [
        {"every": "1h", "start": "9999-12-31T23:30:00Z"},
        {"every": "36500d", "start": "9999-01-01T00:00:00Z"},
        {"at": "9999-12-31T23:59:59.9996Z"},
    ],
)
def test_a_fire_time_past_the_end_of_the_calendar_is_none(value: dict[str, str]) -> None:
    """The fire time after one late in 9999-12-31, or one that rounds to the millisecond
    past it, is none: next_fire_time answers None instead of raising datetime's
    "year 10000 is out of range" (found by tests/test_fuzz_input.py)."""
    schedule = parse_schedule(value)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first = next_fire_time(schedule, None, now)
    following = None if first is None else next_fire_time(schedule, first, now)
    assert following is None
    assert first is None or first.year == 9999

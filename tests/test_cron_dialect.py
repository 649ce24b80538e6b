"""The crontab dialect (docs/configuration.md, "Cron"): what Debian's cron (Vixie cron)
accepts means the same in ecron; what it refuses is refused with a message naming the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ecron.errors import ScheduleError
from ecron.schedules import cron_weekdays, parse_schedule
from tests.support.schedules import fire_times


def utc(*args: int) -> datetime:
    """A UTC datetime, so the tests never read the real clock."""
    return datetime(*args, tzinfo=UTC)


# --- steps longer than their range -----------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (
            "9-11/3 * * * *",
            [utc(2026, 5, 4, 10, 9), utc(2026, 5, 4, 11, 9), utc(2026, 5, 4, 12, 9)],
        ),
        ("0 23-23/2 * * *", [utc(2026, 5, 4, 23), utc(2026, 5, 5, 23), utc(2026, 5, 6, 23)]),
        ("*/90 * * * *", [utc(2026, 5, 4, 11), utc(2026, 5, 4, 12), utc(2026, 5, 4, 13)]),
        ("0 0 */45 * *", [utc(2026, 6, 1), utc(2026, 7, 1), utc(2026, 8, 1)]),
        ("0 0 1 */13 *", [utc(2027, 1, 1), utc(2028, 1, 1), utc(2029, 1, 1)]),
        ("0 0 1 jan-dec/5 *", [utc(2026, 6, 1), utc(2026, 11, 1), utc(2027, 1, 1)]),
        ("30 0-5/7 0 * * *", [utc(2026, 5, 5, 0, 0, 30), utc(2026, 5, 6, 0, 0, 30)]),
        ("0 12 * * 1-3/5", [utc(2026, 5, 4, 12), utc(2026, 5, 11, 12), utc(2026, 5, 18, 12)]),
    ],
)
def test_a_step_longer_than_its_range_leaves_the_first_value_of_the_range(
    expression: str, expected: list[datetime]
) -> None:
    """As in crontab, ``9-11/3`` is minute 9 and ``*/90`` minute 0 (APScheduler refuses them)."""
    schedule = parse_schedule(expression)
    assert fire_times(schedule, utc(2026, 5, 4, 10, 7), len(expected)) == expected


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "months"),
    [
        ("0 0 1 mar-may *", [3, 4, 5, 3]),
        ("0 0 1 MAR,Jul,nov *", [3, 7, 11, 3]),
        ("0 0 1 jan/4 *", [5, 9, 1, 5]),
        ("0 0 1 feb-aug/3 *", [2, 5, 8, 2]),
    ],
)
def test_month_names_of_any_case_work_in_lists_ranges_and_steps(
    expression: str, months: list[int]
) -> None:
    """Three-letter month names are numbers 1 to 12, in any case."""
    times = fire_times(parse_schedule(expression), utc(2026, 1, 2), 4)
    assert [time.month for time in times] == months
    assert {time.day for time in times} == {1}


# --- the day-of-month and weekday fields (Vixie cron) --------------------------------------


@pytest.mark.parametrize(
    ("expression", "dates"),
    [
        # Both restricted: either matching is enough.
        ("0 0 1-7 * 1", ["05-18", "05-25", "06-01", "06-02", "06-03", "06-04", "06-05", "06-06"]),
        ("0 0 13 * fri", ["05-13", "05-15", "05-22", "05-29", "06-05", "06-12", "06-13", "06-19"]),
        # The weekday field starts with *: both must match (the 1st that is a Sun/Tue/Thu/Sat).
        ("0 0 1 * */2", ["08-01", "09-01", "10-01", "11-01", "12-01", "04-01", "05-01", "06-01"]),
        # The day field starts with *: both must match (odd days that are Mondays).
        ("0 0 */2 * 1", ["05-25", "06-01", "06-15", "06-29", "07-13", "07-27", "08-03", "08-17"]),
        # ? is * (a common extension).
        ("0 0 ? * 1", ["05-18", "05-25", "06-01", "06-08", "06-15", "06-22", "06-29", "07-06"]),
    ],
)
def test_the_two_day_fields_combine_as_in_vixie_cron(expression: str, dates: list[str]) -> None:
    """Crontab(5): when both day fields are restricted a day matching either fires; a field
    starting with ``*`` (even ``*/2``) counts as unrestricted, so both must match."""
    times = fire_times(parse_schedule(expression), utc(2026, 5, 12), 8)
    assert [time.strftime("%m-%d") for time in times] == dates


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("1/3", "sun,mon,thu"),  # from 1 to 7 (Sunday again), as in cronie
        ("mon/2", "sun,mon,wed,fri"),
        ("0-7/7", "sun"),
        ("*/9", "sun"),
        ("sat-sun", "sun,sat"),
        ("5-0", "sun,fri,sat"),
    ],
)
def test_weekday_steps_and_ranges_that_reach_sunday(field: str, expected: str) -> None:
    """7 is Sunday at the end of a range or step, and 0 is Sunday at its start."""
    assert cron_weekdays(field) == expected


# --- the shorthands of crontab(5) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("shorthand", "expression"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_a_shorthand_fires_as_the_expression_it_stands_for(shorthand: str, expression: str) -> None:
    """``@daily`` is ``0 0 * * *``, in the task's zone, and is shown as written."""
    ours = parse_schedule(shorthand, "Australia/Sydney")
    theirs = parse_schedule(expression, "Australia/Sydney")
    assert fire_times(ours, utc(2026, 9, 20), 5) == fire_times(theirs, utc(2026, 9, 20), 5)
    assert ours.text == f"cron {shorthand} (Australia/Sydney)"


def test_a_yearly_shorthand_in_sydney_fires_at_local_new_year() -> None:
    """``@yearly`` in Australia/Sydney is 1 January 00:00 AEDT, 13:00 UTC the day before."""
    times = fire_times(parse_schedule("@yearly", "Australia/Sydney"), utc(2027, 8, 21), 2)
    assert times == [utc(2027, 12, 31, 13), utc(2028, 12, 31, 13)]


# --- what cron refuses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "cron field 'minute': 61 is higher than the maximum value (59)"),
        ("0 24 * * *", "cron field 'hour': 24 is higher than the maximum value (23)"),
        ("0 0 0 * *", "cron field 'day': 0 is lower than the minimum value (1)"),
        ("0 0 32 * *", "cron field 'day': 32 is higher than the maximum value (31)"),
        ("0 0 * 0 *", "cron field 'month': 0 is lower than the minimum value (1)"),
        ("0 0 * 13 *", "cron field 'month': 13 is higher than the maximum value (12)"),
        ("0 0 * * 8", "cron field 'weekday': '8' is not a weekday (0-7 or sun-sat)"),
        ("60 0 0 * * *", "cron field 'second': 60 is higher than the maximum value (59)"),
        ("1,61 * * * *", "cron field 'minute': 61 is higher than the maximum value (59) in '1,61'"),
        ("5-1 * * * *", "cron field 'minute': range '5-1' runs backwards"),
        ("*/0 * * * *", "cron field 'minute': '*/0': the step must be at least 1"),
        ("1,,2 * * * *", "cron field 'minute': cannot read '' in '1,,2'"),
        ("0 0 * foo *", "cron field 'month': 'foo' is not a month (1-12 or jan-dec)"),
        ("0 0 * january *", "cron field 'month': 'january' is not a month (1-12 or jan-dec)"),
        ("0 mon * * *", "cron field 'hour': 'mon' is not a number from 0 to 23"),
        ("0 0 L * *", "cron field 'day': 'L' is not a day of the month (1-31)"),
        ("0 0 last * *", "cron field 'day': 'last' is not a day of the month (1-31)"),
        ("0 0 * * 1#2", "cron field 'weekday': cannot read '1#2'"),
        ("0 0 ? * *", None),
        ("0 ? * * *", "cron field 'hour': cannot read '?'"),
    ],
)
def test_an_expression_cron_refuses_is_refused_naming_the_field(
    expression: str, message: str | None
) -> None:
    """Each field is checked on its own; the message names it and says what is wrong."""
    if message is None:
        parse_schedule(expression)  # ? is accepted in the two day fields only
        return
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expression)
    assert str(caught.value) == f"{expression!r} is not a valid cron expression ({message})"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("@reboot", "'@reboot' has no fire times in ecron: use manual or {after: D}"),
        (
            "@fortnightly",
            "'@fortnightly' is not a cron expression: the shorthands are @yearly, @annually, "
            "@monthly, @weekly, @daily, @midnight, @hourly",
        ),
    ],
)
def test_a_shorthand_ecron_cannot_keep_is_refused(expression: str, message: str) -> None:
    """``@reboot`` has no meaning for a daemon's schedule; unknown shorthands are listed."""
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expression)
    assert str(caught.value) == message

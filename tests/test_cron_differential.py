"""ecron's cron fire times against an independent evaluator, in every time zone.

cronsim (written for healthchecks.io and tested against Debian cron) is asked which wall-clock
times match an expression, without a zone. ecron's fire times, read as wall times in the task's
zone, must be exactly those wherever the zone's offset does not change. Within one change's
size of a change, the documented policy decides (docs/configuration.md, "Daylight saving time");
there the fire times are checked against the policy's plain definition instead: every matching
wall time near the change, mapped to instants by the rule, sorted.

cronsim is not asked with a zone: then it loses fire times on a day the offset changes by 30
minutes (``4 */19 * * *`` in Australia/Lord_Howe on 2008-04-06) and can search for a long time.
It also reads ``5-5/2`` as ``5/2`` (5 to the end), unlike cron, so that form is not drawn.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest
from cronsim import CronSim
from hypothesis import assume, given, seed, settings
from hypothesis import strategies as st

from ecron.errors import ScheduleError
from ecron.schedules import Schedule, parse_schedule
from tests.support.schedules import fire_times

ALL_ZONES = sorted(available_timezones())


def _offsets(zone: str) -> list[timedelta]:
    """The zone's offsets in January and July of 2026 and 2027."""
    tz = ZoneInfo(zone)
    moments = [datetime(year, month, 15, tzinfo=UTC) for year in (2026, 2027) for month in (1, 7)]
    offsets = [moment.astimezone(tz).utcoffset() for moment in moments]
    return [offset for offset in offsets if offset is not None]


#: Daylight saving time over New Year (the southern hemisphere), offsets that are not whole
#: hours (30 and 45 minutes), Ramadan DST, DST of two hours (Troll), negative DST (Dublin),
#: and two northern references: always checked, whatever the sample of all zones holds.
ALWAYS = sorted(
    {zone for zone in ALL_ZONES if _offsets(zone)[0] > _offsets(zone)[1]}
    | {zone for zone in ALL_ZONES if any(offset % timedelta(hours=1) for offset in _offsets(zone))}
    | {"Africa/Casablanca", "Antarctica/Troll", "Europe/Dublin", "Europe/Berlin"}
    | {"America/New_York", "UTC"}
)
FIRE_TIMES = 6
_BEGIN = datetime(2000, 1, 1, tzinfo=UTC)
_END = datetime(2038, 1, 1, tzinfo=UTC)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_REACH = timedelta(hours=27)  # longer than any change (Pacific/Apia skipped a whole day)


def test_the_zones_always_checked_include_the_southern_hemisphere_and_odd_offsets() -> None:
    """The sets are worked out from the tz database, so they cannot silently come out empty."""
    assert {"Australia/Sydney", "Pacific/Auckland", "America/Santiago"} <= set(ALWAYS)
    assert {"Australia/Lord_Howe", "Pacific/Chatham", "Asia/Kathmandu"} <= set(ALWAYS)
    assert {"Asia/Kolkata", "America/St_Johns", "Australia/Adelaide"} <= set(ALWAYS)


# --- drawing expressions ---------------------------------------------------------------------


_FORMS = ("*", "*/s", "a", "a/s", "a-b", "a-b/s")


@functools.cache
def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """One to three terms: ``*``, ``*/s``, ``a``, ``a/s``, ``a-b`` or ``a-b/s``, with steps
    longer than the range too, and values written as names (any case) now and then."""
    forms, values = st.sampled_from(_FORMS), st.integers(low, high)
    steps, coins = st.integers(1, high - low + 3), st.integers(0, 3)

    def spelled(draw: st.DrawFn, value: int) -> str:
        index, coin = value - low, draw(coins)
        if index >= len(names) or coin < 2:
            return str(value)
        return names[index] if coin == 2 else names[index].upper()

    @st.composite
    def term(draw: st.DrawFn) -> str:
        form = draw(forms)
        if form.startswith("*"):
            return "*" if form == "*" else f"*/{draw(steps)}"
        first = draw(values)
        if "-" in form and first == high:
            first -= 1  # a-a/s is left out: cronsim reads it as a/s
        text = spelled(draw, first)
        if "-" in form:
            last = first + 1 + draw(values) % (high - first)
            text = f"{text}-{spelled(draw, last)}"
        return f"{text}/{draw(steps)}" if form.endswith("/s") else text

    return st.lists(term(), min_size=1, max_size=3).map(",".join)


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    """Expressions Debian's cron accepts (and ``N/step``), with names, lists, ranges and steps,
    5 fields or 6 with seconds first."""
    fields = [
        draw(_field(0, 59)),
        draw(_field(0, 23)),
        draw(_field(1, 31)),
        draw(_field(1, 12, _MONTHS)),
        draw(_field(0, 7, _DAYS)),
    ]
    if draw(st.integers(0, 3)) == 0:
        fields.insert(0, draw(_field(0, 59)))
    return " ".join(fields)


_STARTS = st.integers(0, int((_END - _BEGIN) / timedelta(minutes=1))).map(
    lambda minutes: _BEGIN + timedelta(minutes=minutes)
)


# --- comparing -------------------------------------------------------------------------------


def _wall(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def _near_a_change(instant: datetime, tz: ZoneInfo) -> bool:
    """Whether ``instant`` is within one change's size of a change of ``tz``'s offset."""
    instant = instant.astimezone(UTC)  # arithmetic in UTC, not on the wall clock
    low, high = instant - _REACH, instant + _REACH
    before, after = low.astimezone(tz).utcoffset(), high.astimezone(tz).utcoffset()
    assert before is not None and after is not None
    if before == after:
        return False
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(tz).utcoffset() == before:
            low = middle
        else:
            high = middle
    return abs(instant - high) <= abs(after - before) + timedelta(seconds=1)


def _parsed(expression: str, zone: str) -> Schedule:
    try:
        return parse_schedule(expression, zone)
    except ScheduleError as exc:
        assume("never fires" not in str(exc))  # 30 February: cronsim gives up after 50 years
        raise


def assert_same_as_cronsim(expression: str, zone: str, start: datetime) -> None:
    """ecron's next fire times from ``start`` are cronsim's matching wall times, away from
    changes of offset."""
    tz = ZoneInfo(zone)
    ours = fire_times(_parsed(expression, zone), start, FIRE_TIMES)
    walls = [_wall(time, tz) for time in ours]
    theirs: list[datetime] = []
    for wall in CronSim(expression, _wall(start, tz) - timedelta(seconds=1)):
        if wall > max(walls):
            break
        theirs.append(wall)
    away = [wall for time, wall in zip(ours, walls, strict=True) if not _near_a_change(time, tz)]
    expected = [wall for wall in theirs if not _near_a_change(wall.replace(tzinfo=tz), tz)]
    assert away == expected, (expression, zone, start)


def _same_as_cronsim_in(zone: str, examples: int) -> Callable[[], None]:
    """A property test for one zone, with a seed of its own (so zones get different draws)."""

    @seed(zlib.crc32(zone.encode()))
    @settings(max_examples=examples, deadline=None, database=None)
    @given(expression=cron_expressions(), start=_STARTS)
    def check(expression: str, start: datetime) -> None:
        assert_same_as_cronsim(expression, zone, start)

    return check


@pytest.mark.parametrize("zone", ALWAYS)
def test_fire_times_match_an_independent_evaluator_in_the_zones_always_checked(zone: str) -> None:
    """Southern hemisphere, 30- and 45-minute offsets, Ramadan DST: same fire times as cronsim."""
    _same_as_cronsim_in(zone, examples=5)()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(expression=cron_expressions(), zone=st.sampled_from(ALL_ZONES), start=_STARTS)
def test_fire_times_match_an_independent_evaluator_in_any_zone(
    expression: str, zone: str, start: datetime
) -> None:
    """A sample of every zone of the tz database: same fire times as cronsim."""
    assert_same_as_cronsim(expression, zone, start)


@pytest.mark.parametrize(
    ("expression", "zone"),
    [
        ("0 0 1 1 *", "Australia/Sydney"),
        ("0 0 * 1 *", "Pacific/Auckland"),
        ("0 0 1 1 *", "America/Santiago"),
        ("* * * 1-7/2 *", "Australia/Lord_Howe"),
    ],
)
def test_the_cases_of_issue_10_agree_with_the_independent_evaluator(
    expression: str, zone: str
) -> None:
    """Looking from 2027-08-21, where ecron once skipped New Year (APScheduler's search in
    the zone stepped over it), the comparison itself sees the difference."""
    assert_same_as_cronsim(expression, zone, datetime(2027, 8, 21, tzinfo=UTC))


# --- near a change: the documented policy ----------------------------------------------------


def _changes(zone: str) -> list[datetime]:
    """The changes of offset of ``zone`` in 2026–2028."""
    tz = ZoneInfo(zone)
    found: list[datetime] = []
    moment, step = datetime(2026, 1, 1, tzinfo=UTC), timedelta(days=7)  # changes are weeks apart
    while moment < datetime(2029, 1, 1, tzinfo=UTC):
        low, high = moment, moment + step
        if low.astimezone(tz).utcoffset() != high.astimezone(tz).utcoffset():
            before = low.astimezone(tz).utcoffset()
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                low, high = (
                    (middle, high) if middle.astimezone(tz).utcoffset() == before else (low, middle)
                )
            found.append(high.replace(microsecond=0))
        moment += step
    return found


CHANGES = [(zone, change) for zone in ALWAYS for change in _changes(zone)]


def test_the_changes_checked_include_those_of_the_zones_of_the_issue() -> None:
    """Sydney, Auckland, Santiago, Lord Howe, Chatham, Casablanca and Berlin change twice a year."""
    zones = [zone for zone, _ in CHANGES]
    for zone in ("Australia/Sydney", "Pacific/Auckland", "America/Santiago", "Europe/Berlin"):
        assert zones.count(zone) == 6
    for zone in ("Australia/Lord_Howe", "Pacific/Chatham", "Africa/Casablanca"):
        assert zones.count(zone) == 6


@st.composite
def expressions_near(draw: st.DrawFn, hour: int) -> str:
    """Expressions that fire around ``hour``, where a change happens."""
    seconds = draw(st.sampled_from(("", "0 ", "30 ", "*/20 ", "*/15 ")))
    minute = draw(st.sampled_from(("*", "*/7", "0", "15", "30", "45", "0,30", "5-50/15")))
    hours = draw(
        st.sampled_from(("*", "*/2", str(hour), f"{max(hour - 1, 0)}-{min(hour + 1, 23)}"))
    )
    return f"{seconds}{minute} {hours} * * *"


def by_the_policy(expression: str, tz: ZoneInfo, start: datetime, last: datetime) -> list[datetime]:
    """The fire times in ``[start, last]`` by the policy's definition: each matching wall time
    is an instant; a repeated one is two for a wildcard job, its first for a fixed-time one;
    a skipped one is none for a wildcard job, and for a fixed-time one the instant it has read
    with the offset before the gap (so it is shifted by the gap)."""
    fields = expression.split()
    fixed = not any(
        field.startswith("*") for field in (["0", *fields] if len(fields) == 5 else fields)[:3]
    )
    found: set[datetime] = set()
    for wall in CronSim(expression, _wall(start, tz) - timedelta(hours=3)):
        if wall > _wall(last, tz) + timedelta(hours=3):
            break
        first = wall.replace(tzinfo=tz).astimezone(UTC)
        second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
        if first == second or fixed:
            found.add(first)
        elif first < second:  # repeated: first < second; skipped: the other way round
            found |= {first, second}
    return sorted(time for time in found if start <= time <= last)


@settings(max_examples=250, deadline=None, derandomize=True)
@given(data=st.data())
def test_near_a_change_of_offset_fire_times_follow_the_documented_policy(
    data: st.DataObject,
) -> None:
    """From up to 36 hours before a change to 6 hours after it, in the zones always checked."""
    zone, change = data.draw(st.sampled_from(CHANGES))
    tz = ZoneInfo(zone)
    expression = data.draw(expressions_near((change - timedelta(seconds=1)).astimezone(tz).hour))
    start = change + timedelta(
        minutes=data.draw(st.integers(-36 * 60, 6 * 60)),
        seconds=data.draw(st.sampled_from((0, 17))),
    )
    ours = fire_times(parse_schedule(expression, zone), start, 12)
    assert ours == by_the_policy(expression, tz, start, ours[-1]), (expression, zone, start)

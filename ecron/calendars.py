"""Calendars and blackouts: which of a schedule's fire times really run (DESIGN.md,
"Scheduling rules").

A fire time on a day that the task's calendar leaves out (a weekday it does not list, or a
date it excludes; days are those of the task's time zone, so a day is 23 or 25 hours long
where the clock changes) or inside one of its blackout windows (``[from, to)``) is planned
out: the next fire time that runs is found by jumping over the excluded stretch (to the
start of the next allowed day, or the end of the window) and asking the schedule for its
first fire time from there. Fire times are never walked one by one to skip a stretch, so a
per-second schedule jumps a week-long blackout in one step.

``FireTimes`` wraps a ``Schedule`` with its ``Exclusions``; without any it answers exactly
as ``ecron.schedules`` does. Every method takes ``now``; nothing here reads a clock. The
excluded fire times a method jumps over are added to the ``counts`` it is given, by reason,
for ``ecron_fires_excluded_total``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from enum import StrEnum

from ecron.daylight import Resolved
from ecron.schedules import (
    Schedule,
    ScheduleKind,
    latest_fire_times,
    missed_fire_times,
    next_fire_time,
)

#: A search for the next fire time that runs gives up (None: it never fires again) after
#: jumping over this many excluded stretches: a calendar that leaves no fire time of its
#: schedule (a Sunday cron on a Monday-to-Friday calendar) is found out, not searched forever.
MAX_JUMPS = 1000
#: The excluded fire times of one stretch of a cron schedule are counted one by one, at most
#: this many (a cron firing every second over an excluded day counts 2,000, not 86,400).
COUNT_LIMIT = 2000
_DAY = timedelta(days=1)
_NO_TIMES = (ScheduleKind.MANUAL, ScheduleKind.CHAIN)


class Exclusion(StrEnum):
    """Why a fire time is planned out (the ``reason`` of ``ecron_fires_excluded_total``)."""

    #: On a day the calendar leaves out: a weekday it does not list, or an excluded date.
    CALENDAR = "calendar"
    #: Inside a blackout window.
    BLACKOUT = "blackout"


@dataclass(frozen=True, slots=True, eq=False)
class Exclusions:
    """The days and windows a task's fire times may not fall in.

    ``weekdays``: the days allowed (``date.weekday()``: 0 is Monday); ``dates``: days left
    out whatever their weekday; both in ``zone``. ``windows``: blackouts, ``[start, end)`` in
    UTC, in any order (overlapping ones are merged).
    """

    zone: tzinfo
    weekdays: frozenset[int] = frozenset(range(7))
    dates: frozenset[date] = frozenset()
    windows: tuple[tuple[datetime, datetime], ...] = ()
    _starts: tuple[datetime, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        merged: list[tuple[datetime, datetime]] = []
        for start, end in sorted(self.windows):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        object.__setattr__(self, "windows", tuple(merged))
        object.__setattr__(self, "_starts", tuple(start for start, _ in merged))

    def allows(self, day: date) -> bool:
        """True when fire times may fall on ``day`` (a date of the zone)."""
        return day.weekday() in self.weekdays and day not in self.dates

    def why(self, when: datetime) -> Exclusion | None:
        """Why ``when`` may not be a fire time, or None when it may (a time excluded both
        ways is the calendar's)."""
        if not self.allows(when.astimezone(self.zone).date()):
            return Exclusion.CALENDAR
        if self._window_end(when) is not None:
            return Exclusion.BLACKOUT
        return None

    def stretch_end(self, when: datetime, why: Exclusion) -> datetime | None:
        """The first instant after ``when`` where the exclusion ``why`` that holds at ``when``
        ends: the start of the next allowed day, or the end of the window."""
        if why is Exclusion.BLACKOUT:
            return self._window_end(when)
        day = when.astimezone(self.zone).date()
        for _ in range(len(self.dates) + 8):
            day += _DAY
            if self.allows(day):
                return self.day_start(day)
        return None  # no weekday allowed: the config refuses such a calendar

    def day_start(self, day: date) -> datetime:
        """The first instant of ``day`` in the zone, in UTC (where midnight is skipped, the
        moment the clock jumps; where it repeats, its first pass)."""
        return datetime.combine(day, time(), tzinfo=self.zone).astimezone(UTC)

    def _window_end(self, when: datetime) -> datetime | None:
        index = bisect_right(self._starts, when) - 1
        if index >= 0 and when < self.windows[index][1]:
            return self.windows[index][1]
        return None


@dataclass(frozen=True, slots=True, eq=False)
class FireTimes:
    """A schedule's fire times with its calendar and blackouts applied (see the module
    docstring); the same answers as ``ecron.schedules`` when ``exclusions`` is None."""

    schedule: Schedule
    exclusions: Exclusions | None = None

    def excluded(self, when: datetime) -> Exclusion | None:
        """Why ``when`` is planned out, or None when a fire time there runs."""
        return None if self.exclusions is None else self.exclusions.why(when)

    def next(
        self, previous: datetime | None, now: datetime, counts: Counter[str] | None = None
    ) -> datetime | None:
        """``schedules.next_fire_time``, then past the excluded fire times, if any."""
        found = next_fire_time(self.schedule, previous, now)
        return found if self.exclusions is None else self.settle(found, counts)

    def settle(
        self, candidate: datetime | None, counts: Counter[str] | None = None
    ) -> datetime | None:
        """``candidate`` if it runs, else the first fire time after it that does (None: none
        within ``MAX_JUMPS`` excluded stretches)."""
        exclusions = self.exclusions
        if exclusions is None:
            return candidate
        for _ in range(MAX_JUMPS):
            if candidate is None:
                return None
            why = exclusions.why(candidate)
            if why is None:
                return candidate
            end = exclusions.stretch_end(candidate, why)
            if counts is not None:
                counts[why.value] += self._count(candidate, end)
            candidate = None if end is None else self._at_or_after(end)
        return None

    def due(
        self, first: datetime, now: datetime, limit: int, counts: Counter[str] | None = None
    ) -> tuple[list[datetime], datetime | None]:
        """``schedules.missed_fire_times`` over the fire times that run: those from ``first``
        up to ``now`` (at most ``limit``), and the next one after them."""
        if self.exclusions is None:
            return missed_fire_times(self.schedule, first, now, limit)
        due: list[datetime] = []
        current = self.settle(first, counts)
        while current is not None and current <= now and len(due) < limit:
            due.append(current)
            if self.schedule.kind is ScheduleKind.AFTER:
                return due, None
            current = self.next(current, current, counts)
        return due, current

    def latest(self, floor: datetime, end: datetime, count: int) -> list[datetime]:
        """``schedules.latest_fire_times`` over the fire times that run: up to ``count`` of
        the latest in ``[floor, end)``, oldest first."""
        kind = self.schedule.kind
        if self.exclusions is None or kind in (*_NO_TIMES, ScheduleKind.AFTER):
            return latest_fire_times(self.schedule, floor, end, count)
        if count < 1 or floor >= end:
            return []
        window = timedelta(seconds=1)
        while True:
            start = max(floor, end - window)
            found: deque[datetime] = deque(maxlen=count)
            current = self.next(None, start)
            while current is not None and current < end:
                found.append(current)
                current = self.next(current, current)
            if len(found) >= count or start == floor:
                return list(found)
            window *= 4

    def upcoming(self, first: datetime | None, count: int) -> list[datetime]:
        """``first`` (or the first that runs after it) and the fire times that run after it:
        ``count`` of them at most. An ``after`` schedule has one: the rest depend on ends."""
        found: list[datetime] = []
        current = self.settle(first)
        while current is not None and len(found) < count:
            found.append(current)
            if self.schedule.kind is ScheduleKind.AFTER:
                break
            current = self.next(current, current)
        return found

    def dst_changes(self, start: datetime, listed: list[datetime]) -> list[Resolved]:
        """What daylight saving time did, by the task's ``dst`` policy, to the fire times
        ``listed`` (those that run from ``start`` on, oldest first): each of them it shifted,
        jumped or repeated, and the wall times it skipped up to the last of them
        (``CronRule.dst_changes``; none for a job by the clock or a schedule not cron)."""
        cron = self.schedule.cron
        if cron is None or not listed:
            return []
        runs = set(listed)
        found = cron.dst_changes(start, listed[-1])
        return [fire for fire in found if fire.at is None or fire.at in runs]

    def _at_or_after(self, when: datetime) -> datetime | None:
        """The schedule's first fire time at or after ``when``."""
        found = next_fire_time(self.schedule, None, when)
        if self.schedule.kind is ScheduleKind.AT and found is not None and found < when:
            return None  # its one fire time is before the end of the stretch
        return found

    def _count(self, first: datetime, end: datetime | None) -> int:
        """How many fire times lie in ``[first, end)`` (``first`` being one)."""
        schedule = self.schedule
        if end is None or schedule.kind in (ScheduleKind.AT, ScheduleKind.AFTER):
            return 1
        if schedule.kind is ScheduleKind.EVERY:
            assert schedule.trigger is not None
            start: datetime = schedule.trigger.start_date
            interval: timedelta = schedule.trigger.interval
            return max(1, -((start - end) // interval) - -((start - first) // interval))
        found = 0
        current: datetime | None = first
        while current is not None and current < end and found < COUNT_LIMIT:
            found += 1
            current = next_fire_time(schedule, current, current)
        return found

"""Fire times: cron (with time zone), every (fixed rate), after (fixed delay), at (once), manual,
and after other tasks (chains, which have no fire times of their own).

All fire-time math comes from APScheduler 3.11's trigger classes, behind one
small function, ``next_fire_time``, that takes ``now``: ``every`` and ``at`` from
its interval and date triggers in UTC, cron from ``ecron.cron``, which asks its
cron trigger for matching wall-clock times and turns them into instants in the
task's zone. Nothing here reads a clock. Fire times are UTC and keep their
milliseconds (nothing finer).
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from ecron.cron import CronRule, parse_cron
from ecron.cron import cron_weekdays as cron_weekdays
from ecron.daylight import DEFAULT_POLICY, DstPolicy
from ecron.durations import format_duration, parse_setting
from ecron.errors import ScheduleError

#: ``every`` schedules without ``start`` fire at whole multiples of their interval since this.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class ScheduleKind(StrEnum):
    """The forms a ``schedule`` can take."""

    #: A cron expression: 5 fields, or 6 with seconds first.
    CRON = "cron"
    #: ``{every: 10m}``: fixed rate.
    EVERY = "every"
    #: ``{after: 10m}``: fixed delay after the previous execution ends.
    AFTER = "after"
    #: ``{at: 2026-12-01T03:00:00Z}``: once.
    AT = "at"
    #: Only when asked (API, CLI).
    MANUAL = "manual"
    #: ``{after_task: NAME}``: when an execution of another task (or of each of several)
    #: ends with a listed status; no fire times of its own.
    CHAIN = "chain"


#: The statuses an upstream execution may end with to set off a chained task (``on``).
CHAIN_STATUSES = ("SUCCESS", "FAILED", "TIMED_OUT", "CANCELLED")
#: ``on`` when a chained task does not say.
CHAIN_DEFAULT_ON = ("SUCCESS",)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule: its kind, how to print it, and what computes it (a cron rule, an
    APScheduler trigger for every and at, a delay for after; for a chain, the upstream
    tasks and the statuses that set it off)."""

    kind: ScheduleKind
    text: str
    trigger: BaseTrigger | None = None
    delay: timedelta | None = None
    cron: CronRule | None = None
    upstreams: tuple[str, ...] = ()
    on: frozenset[str] = frozenset()


def zone(name: str) -> tzinfo:
    """The time zone called ``name`` (IANA), or a ``ScheduleError`` naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"{name!r} is not a known time zone (use an IANA name like Europe/Paris)"
        ) from None


def parse_schedule(value: Any, timezone: str = "UTC", dst: DstPolicy = DEFAULT_POLICY) -> Schedule:
    """Turn a ``schedule`` value from YAML into a ``Schedule``; ``ScheduleError`` says why not.
    ``dst``: what a fixed-time cron job does in gaps and folds (other schedules ignore it).

    A schedule is the same object for every task that writes it the same way (in the same
    zone, with the same ``dst``): ten thousand tasks on ``0 3 * * *`` are parsed, and
    checked, once.
    """
    try:
        key = (timezone, dst, value if isinstance(value, str) else tuple(sorted(value.items())))
        hash(key)
    except (AttributeError, TypeError):  # not a str or a mapping of plain values
        return _parse_schedule(value, timezone, dst)
    return _parsed(key, value, timezone, dst)


def _parsed(key: tuple[str, DstPolicy, Any], value: Any, timezone: str, dst: DstPolicy) -> Schedule:
    found = _SCHEDULES.get(key)
    if found is None:
        if len(_SCHEDULES) >= _SCHEDULES_MAX:
            _SCHEDULES.clear()
        found = _SCHEDULES[key] = _parse_schedule(value, timezone, dst)
    return found


#: Schedules parsed so far, by how they were written (``parse_schedule``).
_SCHEDULES: dict[tuple[str, DstPolicy, Any], Schedule] = {}
_SCHEDULES_MAX = 10_000


def _parse_schedule(value: Any, timezone: str, dst: DstPolicy = DEFAULT_POLICY) -> Schedule:
    tz = zone(timezone)
    if isinstance(value, str):
        text = value.strip()
        if text == "manual":
            return Schedule(ScheduleKind.MANUAL, "manual")
        return _parse_cron(text, tz, dst)
    if isinstance(value, dict):
        return _parse_mapping(value, tz)
    raise ScheduleError(
        f"{value!r} is not a schedule: use a cron expression, {{every: 10m}}, {{after: 10m}}, "
        "{at: TIME}, {after_task: NAME} or manual"
    )


def _parse_mapping(value: dict[Any, Any], tz: tzinfo) -> Schedule:
    value = on_key(value)
    keys = set(value)
    if keys in ({"every"}, {"every", "start"}):
        interval = _positive_duration(value["every"], "every")
        start = read_time(value["start"], tz, "start") if "start" in value else EPOCH
        trigger = IntervalTrigger(seconds=interval.total_seconds(), start_date=start, timezone=UTC)
        text = f"every {format_duration(interval)}"
        if "start" in value:
            text += f" from {_iso(start)}"
        return Schedule(ScheduleKind.EVERY, text, trigger=trigger)
    if keys == {"after"}:
        delay = _positive_duration(value["after"], "after")
        return Schedule(ScheduleKind.AFTER, f"after {format_duration(delay)}", delay=delay)
    if keys == {"at"}:
        when = read_time(value["at"], tz, "at")
        # An explicit zone, so APScheduler never asks the host's (tzlocal fails on a bad TZ).
        trigger = DateTrigger(run_date=when, timezone=UTC)
        return Schedule(ScheduleKind.AT, f"at {_iso(when)}", trigger=trigger)
    if keys in ({"after_task"}, {"after_task", "on"}):
        return _parse_chain(value["after_task"], value.get("on", list(CHAIN_DEFAULT_ON)))
    raise ScheduleError(
        f"{sorted(map(str, keys))} is not a schedule mapping: use {{every: D}} (optionally "
        "with start), {after: D}, {at: TIME} or {after_task: NAME} (optionally with on)"
    )


def on_key(value: dict[Any, Any]) -> dict[Any, Any]:
    """A chain's mapping with its ``on`` key as text: YAML 1.1 reads an unquoted ``on`` as
    the boolean true (as GitHub Actions' ``on:`` is)."""
    if True in value and "after_task" in value and "on" not in value:
        return {("on" if key is True else key): item for key, item in value.items()}
    return value


def _parse_chain(names: Any, on: Any) -> Schedule:
    """``{after_task: NAME | [NAMES], on: [STATUSES]}``: a chain (the names are checked
    against the other tasks by the config loader)."""
    upstreams = [names] if isinstance(names, str) else names
    if not isinstance(upstreams, list) or not upstreams:
        raise ScheduleError("after_task: name a task, or give a list of task names")
    if not all(isinstance(name, str) and name for name in upstreams):
        raise ScheduleError(f"after_task: {names!r} is not a task name or a list of them")
    if len(set(upstreams)) != len(upstreams):
        raise ScheduleError(f"after_task: {names!r} names a task twice")
    if not isinstance(on, list) or not on:
        raise ScheduleError(f"on: {on!r} is not a list of statuses, like [SUCCESS, FAILED]")
    statuses = [str(status).upper() for status in on]
    wrong = [status for status in on if str(status).upper() not in CHAIN_STATUSES]
    if wrong:
        raise ScheduleError(f"on: {wrong[0]!r} is not a status: use {', '.join(CHAIN_STATUSES)}")
    text = ("after task " if len(upstreams) == 1 else "after tasks ") + ", ".join(upstreams)
    if sorted(statuses) != sorted(CHAIN_DEFAULT_ON):
        text += " on " + ", ".join(s for s in CHAIN_STATUSES if s in statuses)
    return Schedule(ScheduleKind.CHAIN, text, upstreams=tuple(upstreams), on=frozenset(statuses))


def _positive_duration(value: Any, key: str) -> timedelta:
    try:
        duration = parse_setting(value)
    except ValueError as exc:
        raise ScheduleError(f"{key}: {exc}") from None
    if duration <= timedelta(0):
        raise ScheduleError(f"{key}: {value!r} must be longer than zero")
    return duration


def read_time(value: Any, tz: tzinfo, key: str) -> datetime:
    """A time from YAML (a timestamp or RFC 3339 text) in UTC; one without an offset is read
    in ``tz`` (the first of a repeated wall time, a skipped one shifted by the gap)."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ScheduleError(
                f"{key}: {value!r} is not a time: write it like 2026-12-01T03:00:00Z"
            ) from None
    else:
        raise ScheduleError(f"{key}: {value!r} is not a time: write it like 2026-12-01T03:00:00Z")
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    try:
        return when.astimezone(UTC)
    except OverflowError:  # 0001-01-01 east of UTC, 9999-12-31 west of it
        raise ScheduleError(
            f"{key}: {value!r} is not a time ecron can use: in UTC it falls before the "
            "year 1 or after the year 9999"
        ) from None


def _parse_cron(text: str, tz: tzinfo, dst: DstPolicy) -> Schedule:
    cron = parse_cron(text, tz, dst)
    where = getattr(tz, "key", str(tz))
    if cron.fixed and dst != DEFAULT_POLICY:
        where += f"; dst: gap {dst.gap}, fold {dst.fold}"
    return Schedule(ScheduleKind.CRON, f"cron {text} ({where})", cron=cron)


def next_fire_time(schedule: Schedule, previous: datetime | None, now: datetime) -> datetime | None:
    """The next fire time, in UTC with milliseconds, or None when there is none.

    ``previous`` is the previous fire time (for ``after``: when the previous
    execution ended). Without one, the first fire time at or after ``now``;
    with one, the first after it, even if that is before ``now`` (missed
    fire times are the caller's business, see ``misfire``), and even if
    ``previous`` is still ahead of ``now`` (claimed early). An ``after``
    schedule without a previous end fires at ``now``.

    Daylight saving time, for cron in a zone that has it (``CronRule``): a job whose
    second, minute and hour are fixed fires once for a wall time the clock repeats,
    at its first occurrence, and once for one it skips, shifted by the gap (02:30
    becomes 03:30 when 02:00 jumps to 03:00); a job with a wildcard among them runs
    by the clock, in both passes of a repeated hour and not in a skipped one. A
    time without an offset (``at``, ``every``'s ``start``) is read the same way as a
    fixed-time job: the first of a repeated time, a skipped one shifted by the gap.

    A fire time past the end of the calendar (after 9999-12-31 in UTC) is none.
    """
    try:
        return _next_fire_time(schedule, previous, now)
    except (OverflowError, ValueError):  # datetime's "year 10000 is out of range", and such
        return None


def _next_fire_time(
    schedule: Schedule, previous: datetime | None, now: datetime
) -> datetime | None:
    if schedule.kind in (ScheduleKind.MANUAL, ScheduleKind.CHAIN):
        return None
    if schedule.kind is ScheduleKind.AFTER:
        assert schedule.delay is not None
        return _ms(now if previous is None else previous + schedule.delay)
    if schedule.kind is ScheduleKind.EVERY and previous is None:
        assert schedule.trigger is not None
        return _ms(_first_interval_time(schedule.trigger, now))
    if previous is not None:
        return _next_from(schedule, previous)
    return _search(schedule, None, now)


@lru_cache(maxsize=65_536)
def _next_from(schedule: Schedule, previous: datetime) -> datetime | None:
    """The fire time after ``previous`` (which alone decides it), worked out once: ten
    thousand tasks of one schedule due at one moment ask for the same next one."""
    return _search(schedule, previous, previous)


def _search(schedule: Schedule, previous: datetime | None, now: datetime) -> datetime | None:
    if schedule.cron is not None:
        # Cron fire times are whole seconds in UTC already: "at or after now" is "after
        # just before now", and nothing needs rounding.
        return schedule.cron.first_after(now - _MICROSECOND if previous is None else previous)
    assert schedule.trigger is not None
    found = _next_after(schedule.trigger, previous, now)
    return None if found is None else _ms(found)


def _next_after(trigger: BaseTrigger, previous: datetime | None, now: datetime) -> datetime | None:
    if previous is None:
        return trigger.get_next_fire_time(None, now)  # type: ignore[no-any-return]
    # APScheduler looks from min(now, previous + 1µs); look from just after ``previous``,
    # whatever ``now``, adding in UTC.
    after = previous.astimezone(UTC) + _MICROSECOND
    return trigger.get_next_fire_time(after, after)  # type: ignore[no-any-return]


def _first_interval_time(trigger: BaseTrigger, now: datetime) -> datetime:
    """The first ``start + n * interval`` at or after ``now``, in exact integer arithmetic.

    APScheduler computes it with float seconds, which misses a fire time that
    falls exactly on ``now`` when the interval is not a whole number of seconds.
    """
    start: datetime = trigger.start_date
    interval: timedelta = trigger.interval
    if now <= start:
        return start
    return start + -((start - now) // interval) * interval


def missed_fire_times(
    schedule: Schedule, first: datetime, now: datetime, limit: int
) -> tuple[list[datetime], datetime | None]:
    """Fire times from ``first`` up to ``now`` (at most ``limit``), and the next one after them.

    ``after`` schedules never have more than one due fire time.
    """
    due: list[datetime] = []
    current: datetime | None = first
    while current is not None and current <= now and len(due) < limit:
        due.append(current)
        if schedule.kind is ScheduleKind.AFTER:
            return due, None
        current = next_fire_time(schedule, current, now)
    return due, current


_NO_TIMES = (ScheduleKind.AFTER, ScheduleKind.MANUAL, ScheduleKind.CHAIN)


def latest_fire_times(
    schedule: Schedule, floor: datetime, end: datetime, count: int
) -> list[datetime]:
    """Up to ``count`` of the latest fire times in ``[floor, end)``, oldest first.

    Found without walking every fire time since ``floor`` (a node down for a
    month under ``{every: 1s}`` has millions): a window before ``end`` grows
    until it holds ``count`` fire times or reaches ``floor``.
    """
    if schedule.kind in _NO_TIMES or count < 1 or floor >= end:
        return [floor] if schedule.kind is ScheduleKind.AFTER and floor < end else []
    window = timedelta(seconds=1)
    while True:
        start = max(floor, end - window)
        found = _fire_times_in(schedule, start, end, count)
        if len(found) >= count or start == floor:
            return found[-count:]
        window *= 4


def _fire_times_in(
    schedule: Schedule, start: datetime, end: datetime, count: int
) -> list[datetime]:
    """Fire times in ``[start, end)``; when there are many, only the last ``count`` are kept."""
    found: deque[datetime] = deque(maxlen=count)
    current = next_fire_time(schedule, None, start)
    while current is not None and current < end:
        found.append(current)
        current = next_fire_time(schedule, current, current)
    return list(found)


def jitter_offset(task: str, scheduled_at: datetime, jitter: timedelta) -> timedelta:
    """A delay in ``[0, jitter)`` that is the same on every node for one fire time."""
    if jitter <= timedelta(0):
        return timedelta(0)
    digest = hashlib.sha256(f"{task}@{_iso(scheduled_at)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(milliseconds=int(jitter.total_seconds() * 1000 * fraction))


def _ms(when: datetime) -> datetime:
    """``when`` in UTC, rounded to the millisecond."""
    utc = when.astimezone(UTC)
    micros = round(utc.microsecond / 1000) * 1000
    if micros == 1_000_000:
        return utc.replace(microsecond=0) + timedelta(seconds=1)
    return utc.replace(microsecond=micros)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

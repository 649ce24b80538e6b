"""Cron expressions: the crontab dialect, and their fire times in any time zone.

Which wall-clock times match an expression is worked out by APScheduler 3.11's
``CronTrigger``, asked in UTC, where wall time has no gaps and no folds. (Asked in a
zone with daylight saving time, its field-by-field search steps over matches when it
crosses a change into a new month or year: ``0 0 1 1 *`` in Australia/Sydney skipped
2028-01-01, as in APScheduler #529 and #606.) This module turns an expression into such
triggers, with crontab's meaning (Sunday is 0 or 7, names, steps longer than their
range, the day-of-month OR day-of-week rule), and each matching wall time into the
instants it fires at in the task's zone, by the daylight saving policy of ``CronRule``.
Nothing here reads a clock.

Why not a cron library that knows zones (cronsim, croniter): the policy for gaps is
ecron's own (shifted by the gap; they run such a job at the gap's end), so the mapping
from wall time to instant would be written here anyway, and cronsim asked with a zone
loses fire times where the offset changes by 30 minutes. cronsim, asked without one,
is the independent evaluator of tests/test_cron_differential.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from apscheduler.triggers.cron import CronTrigger

from ecron.daylight import DEFAULT_POLICY, DstPolicy, Resolved, changes, resolve
from ecron.errors import ScheduleError

_ZERO = timedelta(0)
_MICROSECOND = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CENTURY = datetime(2070, 1, 1, tzinfo=UTC)
#: More than any zone's offset changes at once: how far the fire times of later wall times
#: can fall before those of earlier ones (``CronRule._by_policy``).
_LARGEST_CHANGE = timedelta(hours=3)
#: ``CronRule._by_policy`` looks at no more matching wall times than this for one answer.
_MAX_CANDIDATES = 10_000
#: Zones outside ``Etc/`` whose offset never changes.
_STEADY_ZONES = frozenset(
    {"UTC", "UCT", "GMT", "GMT0", "GMT+0", "GMT-0", "Greenwich", "Universal", "Zulu"}
)

#: The shorthands of crontab(5), and the expressions they stand for.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_FULL_NAMES = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
#: One term of a field: ``*``, a value or a range of values, then maybe ``/step``.
_TERM = re.compile(r"(\*|[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)?)(?:/([0-9]+))?")


@dataclass(frozen=True, slots=True)
class _Field:
    """A numeric field: its name (in messages and for APScheduler), range and value names."""

    name: str
    low: int
    high: int
    what: str
    names: tuple[str, ...] = ()


_NUMERIC_FIELDS = (
    _Field("second", 0, 59, "a number from 0 to 59"),
    _Field("minute", 0, 59, "a number from 0 to 59"),
    _Field("hour", 0, 23, "a number from 0 to 23"),
    _Field("day", 1, 31, "a day of the month (1-31)"),
    _Field("month", 1, 12, "a month (1-12 or jan-dec)", _MONTH_NAMES),
)


@dataclass(frozen=True, slots=True, eq=False)
class CronRule:
    """When a cron expression fires in one time zone.

    Daylight saving time, as in Vixie cron with one difference:

    - A job whose second, minute and hour fields are all fixed (none starts with ``*``)
      fires once for a wall time the clock repeats, at its first occurrence, and once for
      a wall time the clock skips, shifted by the gap (02:30 fires at 03:30 when 02:00
      jumps to 03:00; Vixie cron would run it at 03:00).
    - A job with a wildcard among them runs by the clock: at every wall time that
      happens, in both passes of a repeated hour, and not at all in a skipped one.

    A fixed-time job's ``dst`` policy other than the default (shift, first) is applied by
    ``ecron.daylight.resolve`` to each matching wall time (``_by_policy``); the default is
    the same rule, worked out faster.
    """

    zone: tzinfo
    #: Second, minute and hour are all fixed.
    fixed: bool
    #: Wall-clock matches, in UTC: one trigger, or two when a day of the month OR a weekday fires.
    matchers: tuple[CronTrigger, ...]
    #: The zone's offset when it never changes (UTC, Etc/GMT-10): no gaps, no folds to look for.
    steady: timedelta | None = None
    #: What a fixed-time job does in gaps and folds (``dst``); a job by the clock ignores it.
    dst: DstPolicy = DEFAULT_POLICY
    #: Whether ``dst`` changes anything (a fixed-time job, another policy than the default):
    #: decided once here, not on every fire time.
    by_policy: bool = False

    def first_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (aware), in UTC, or None.

        Matching wall times after ``after``'s own are mapped to instants in order: one
        ``CronTrigger`` call in the ordinary case. Near a change of offset, one more
        source is looked at: inside a repeated hour, the second pass of its wall times
        up to ``after``'s (a wildcard job); just after a gap, its wall times that fire
        shifted past ``after`` (a fixed-time job).
        """
        if self.steady is not None:
            wall = (after.astimezone(UTC) + self.steady).replace(tzinfo=None)
            found = self._match(wall.replace(microsecond=0) + _SECOND)
            return None if found is None else (found - self.steady).replace(tzinfo=UTC)
        if self.by_policy:
            return self._by_policy(after)
        local = after.astimezone(self.zone)
        wall = local.replace(tzinfo=None)
        offset = local.utcoffset()
        assert offset is not None
        other = self._offset(wall, 1 - local.fold)
        start = wall.replace(microsecond=0) + _SECOND  # the first whole second after ``wall``
        earlier: datetime | None = None
        if other != offset:  # a repeated wall time: ``after`` is in one of its passes
            if local.fold == 1 and self.fixed:
                # The first-pass readings of the rest of the repeated hour are past.
                start = self._change_end(wall, other - offset)
            elif local.fold == 0 and not self.fixed:
                earlier = self._second_pass(wall, offset - other)
        elif self.fixed:
            earlier = self._shifted_from_gap(after, wall, offset)
        return _earliest(earlier, self._forward(after, start, offset))

    def _by_policy(self, after: datetime) -> datetime | None:
        """``first_after`` by ``resolve``: the earliest fire after ``after`` of the matching
        wall times from the first one that could fire after it, until no later wall time
        can fire earlier (its fires are at most ``_LARGEST_CHANGE`` before its plain reading)."""
        utc = after.astimezone(UTC)
        lowest = min(self._offset_at(utc + shift) for shift in (-_DAY, _ZERO, _DAY))
        candidate = self._match((utc + lowest).replace(tzinfo=None, microsecond=0) + _SECOND)
        best: datetime | None = None
        for _ in range(_MAX_CANDIDATES):
            if candidate is None:
                break
            highest = max(self._offset(candidate, 0), self._offset(candidate, 1))
            if (
                best is not None
                and (candidate - highest).replace(tzinfo=UTC) >= best + _LARGEST_CHANGE
            ):
                break
            for fire in resolve(candidate, self.zone, self.dst):
                if fire.at is not None and fire.at > after and (best is None or fire.at < best):
                    best = fire.at
            candidate = self._match(candidate + _SECOND)
        return best

    def dst_changes(self, start: datetime, end: datetime) -> list[Resolved]:
        """What daylight saving time does to a fixed-time job's fires in ``[start, end]``
        under its policy: every fire of a wall time in a gap or fold (``resolve``), and the
        wall times skipped (those whose plain reading, shifted by the gap, falls in the
        period). None for a job by the clock."""
        if not self.fixed or self.steady is not None:
            return []
        found: list[tuple[datetime, Resolved]] = []
        for first, stop in changes(self.zone, start, end):
            candidate = self._match(first)
            while candidate is not None and candidate < stop:
                plain = (candidate - self._offset(candidate, 0)).replace(tzinfo=UTC)
                for fire in resolve(candidate, self.zone, self.dst):
                    moment = plain if fire.at is None else fire.at
                    if start <= moment <= end:
                        found.append((moment, fire))
                candidate = self._match(candidate + _SECOND)
        return [fire for _, fire in sorted(found, key=lambda pair: (pair[0], pair[1].wall))]

    def _offset_at(self, instant: datetime) -> timedelta:
        offset = instant.astimezone(self.zone).utcoffset()
        assert offset is not None
        return offset

    def _forward(self, after: datetime, start: datetime, guess: timedelta) -> datetime | None:
        """The first instant after ``after`` of the matching wall times from ``start`` on
        (``guess``: the offset they most likely have)."""
        candidate = self._match(start)
        if candidate is not None:
            # Usually the first one is an ordinary time with the offset of ``after``: one
            # conversion back says so (a skipped time never comes back, a second pass
            # comes back with fold 1).
            instant = (candidate - guess).replace(tzinfo=UTC)
            back = instant.astimezone(self.zone)
            if back.fold == 0 and back.replace(tzinfo=None) == candidate and instant > after:
                return instant
        while candidate is not None:
            first = self._offset(candidate, 0)
            jump = self._offset(candidate, 1) - first  # > 0 in a gap, < 0 in a fold
            instant = (candidate - first).replace(tzinfo=UTC)
            if jump <= _ZERO and instant > after:
                return instant  # an ordinary time, or the first pass of a repeated one
            if jump < _ZERO and not self.fixed and instant - jump > after:
                return instant - jump  # the second pass
            if jump > _ZERO and self.fixed:
                # Skipped: fired shifted by the gap, unless a time after the gap comes first.
                return _earliest(instant, self._after_change(candidate, jump))
            if jump > _ZERO:
                candidate = self._match(self._change_end(candidate, jump))
            else:
                candidate = self._match(candidate + _SECOND)
        return None

    def _second_pass(self, wall: datetime, size: timedelta) -> datetime | None:
        """The earliest second-pass instant of a matching wall time of this fold up to ``wall``."""
        candidate = self._match(self._change_start(wall, size))
        if candidate is None or candidate > wall:
            return None  # none so far: ``_forward`` finds those ahead
        return (candidate - self._offset(candidate, 1)).replace(tzinfo=UTC)

    def _shifted_from_gap(
        self, after: datetime, wall: datetime, offset: timedelta
    ) -> datetime | None:
        """Just after a gap, the first time in it that fires shifted past ``after``, if any."""
        earlier = (after - _DAY).astimezone(self.zone).utcoffset()
        assert earlier is not None
        gap = offset - earlier
        if gap <= _ZERO or self._offset(wall - gap, 0) == self._offset(wall - gap, 1):
            return None  # no gap, or ``after`` is more than one gap past it
        # A wall time W in the gap fires at W - (offset - gap): after ``after`` when W > wall - gap.
        candidate = self._match(wall - gap + _MICROSECOND)
        if candidate is None:
            return None
        first = self._offset(candidate, 0)
        if first == self._offset(candidate, 1):
            return None
        return (candidate - first).replace(tzinfo=UTC)

    def _after_change(self, wall: datetime, size: timedelta) -> datetime | None:
        """The instant of the first matching wall time after the change that ``wall`` is in."""
        candidate = self._match(self._change_end(wall, size))
        if candidate is None:
            return None
        return (candidate - self._offset(candidate, 0)).replace(tzinfo=UTC)

    def _change_end(self, wall: datetime, size: timedelta) -> datetime:
        """The first wall time after ``wall`` outside the gap or fold (of ``size``) it is in."""
        inside = wall.replace(microsecond=0)
        outside = inside + abs(size)
        while outside - inside > _SECOND:
            middle = inside + (outside - inside) // _SECOND // 2 * _SECOND
            if self._ordinary(middle):
                outside = middle
            else:
                inside = middle
        return outside

    def _change_start(self, wall: datetime, size: timedelta) -> datetime:
        """The first wall time of the gap or fold (of ``size``) that ``wall`` is in."""
        inside = wall.replace(microsecond=0)
        outside = inside - abs(size)
        while inside - outside > _SECOND:
            middle = outside + (inside - outside) // _SECOND // 2 * _SECOND
            if self._ordinary(middle):
                outside = middle
            else:
                inside = middle
        return inside

    def _ordinary(self, wall: datetime) -> bool:
        return self._offset(wall, 0) == self._offset(wall, 1)

    def _offset(self, wall: datetime, fold: int) -> timedelta:
        offset = wall.replace(tzinfo=self.zone, fold=fold).utcoffset()
        assert offset is not None
        return offset

    def _match(self, wall: datetime) -> datetime | None:
        """The first matching wall time at or after ``wall`` (naive, rounded up to a second)."""
        start = wall.replace(tzinfo=UTC)
        found: datetime | None = None
        for matcher in self.matchers:
            when: datetime | None = matcher.get_next_fire_time(None, start)
            if when is not None and (found is None or when < found):
                found = when
        return None if found is None else found.replace(tzinfo=None)


def _earliest(one: datetime | None, other: datetime | None) -> datetime | None:
    if one is None or other is None:
        return one if other is None else other
    return min(one, other)


def parse_cron(text: str, zone: tzinfo, dst: DstPolicy = DEFAULT_POLICY) -> CronRule:
    """The rule of a crontab expression in ``zone`` (a fixed-time job's daylight saving
    time by ``dst``); ``ScheduleError`` says why there is none.

    5 fields (minute hour day month weekday), 6 with seconds first, or a shorthand
    (``@daily``). When both day fields are restricted, a day matching either fires;
    when either starts with ``*``, both must match (Vixie cron).
    """
    fields = _fields(text)
    try:
        second, minute, hour, day, month = (
            _expression(spec, field) for spec, field in zip(_NUMERIC_FIELDS, fields, strict=False)
        )
        weekdays = cron_weekdays(fields[5])
    except ScheduleError as exc:
        raise ScheduleError(f"{text!r} is not a valid cron expression ({exc})") from None
    if fields[3].startswith(("*", "?")) or fields[5].startswith(("*", "?")):
        parts = [{"day": day, "day_of_week": weekdays}]
    else:  # both restricted: a day of the month or a weekday
        parts = [{"day": day}, {"day_of_week": weekdays}]
    fields_of = {"second": second, "minute": minute, "hour": hour, "month": month}
    try:
        found = [_matcher(fields_of | part) for part in parts]
    except ValueError as exc:  # not expected: every field was checked above
        raise ScheduleError(f"{text!r} is not a valid cron expression ({exc})") from None
    matchers = tuple(matcher for matcher in found if matcher is not None)
    if not matchers:
        raise ScheduleError(f"{text!r} never fires (no such date, like 30 February)")
    fixed = not any(field.startswith("*") for field in fields[:3])
    by_policy = fixed and dst != DEFAULT_POLICY
    return CronRule(zone, fixed, matchers, _steady_offset(zone), dst, by_policy)


def _steady_offset(zone: tzinfo) -> timedelta | None:
    """The offset of a zone that never changes it (UTC and its aliases, ``Etc/*``), or None."""
    key = getattr(zone, "key", None)
    if zone is not UTC and key not in _STEADY_ZONES and not (key or "").startswith("Etc/"):
        return None
    return datetime(2000, 1, 1, tzinfo=zone).utcoffset()


def _matcher(fields: dict[str, str]) -> CronTrigger | None:
    """A trigger of these fields in UTC, or None when they match nothing in a century.

    A part that never matches (31 February) would be searched up to the year 9999 at
    every call, so it is left out. Any date that exists falls on every weekday within
    28 years, so a century is enough to tell.
    """
    probe = CronTrigger(**fields, timezone=UTC, end_date=_CENTURY)
    if probe.get_next_fire_time(None, _EPOCH) is None:
        return None
    return CronTrigger(**fields, timezone=UTC)


def _fields(text: str) -> list[str]:
    """The six fields of ``text``, seconds first (``0`` when not written)."""
    if text.startswith("@"):
        if text.lower() == "@reboot":
            raise ScheduleError("'@reboot' has no fire times in ecron: use manual or {after: D}")
        if text.lower() not in MACROS:
            raise ScheduleError(
                f"{text!r} is not a cron expression: the shorthands are {', '.join(MACROS)}"
            )
        text = MACROS[text.lower()]
    fields = text.split()
    if len(fields) == 5:
        return ["0", *fields]
    if len(fields) != 6:
        raise ScheduleError(
            f"{text!r} is not a cron expression: it has {len(fields)} fields, "
            "expected 5 (minute hour day month weekday) or 6 (seconds first)"
        )
    return fields


def _expression(spec: _Field, field: str) -> str:
    """A numeric field in APScheduler's syntax, with crontab's meaning."""
    if field == "?" and spec.name == "day":
        return "*"
    return ",".join(_term_expression(spec, part, field) for part in field.split(","))


def _term_expression(spec: _Field, part: str, field: str) -> str:
    span, step = _split_term(spec.name, part, field)
    if span == "*":
        first, last = spec.low, spec.high
        if step is None:
            return "*"
    else:
        low, dash, high = span.partition("-")
        first = _value(spec, low, part, field)
        # ``N/step`` runs from N to the end of the range (cronie's reading; Vixie refuses it).
        last = _value(spec, high, part, field) if dash else spec.high if step else first
        if first > last:
            raise _field_error(spec.name, f"range {span!r} runs backwards", part, field)
    if step is None:
        return str(first) if first == last else f"{first}-{last}"
    if step > last - first:
        # As in crontab, a step longer than its range leaves the range's first value
        # (``9-11/3`` is 9); APScheduler refuses it.
        return str(first)
    return f"*/{step}" if span == "*" else f"{first}-{last}/{step}"


def _value(spec: _Field, token: str, part: str, field: str) -> int:
    if token.lower() in spec.names:
        return spec.names.index(token.lower()) + spec.low
    if not token.isdigit():
        raise _field_error(spec.name, f"{token!r} is not {spec.what}", part, field)
    value = int(token)
    if value > spec.high:
        raise _field_error(
            spec.name, f"{value} is higher than the maximum value ({spec.high})", part, field
        )
    if value < spec.low:
        raise _field_error(
            spec.name, f"{value} is lower than the minimum value ({spec.low})", part, field
        )
    return value


def cron_weekdays(field: str) -> str:
    """Translate a crontab weekday field (0 or 7 = Sunday) into APScheduler's names.

    APScheduler 3 numbers weekdays from Monday = 0, so ``1-5`` would mean
    Tuesday to Saturday there; cron means Monday to Friday. Numbers, names,
    ranges, steps and lists are expanded to a list of day names.
    """
    if field in ("*", "?"):
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        days |= _weekday_part(part, field)
    return ",".join(_DAY_NAMES[day] for day in sorted(days))


def _weekday_part(part: str, field: str) -> set[int]:
    span, step = _split_term("weekday", part, field)
    if span == "*":
        first, last = 0, 6
    elif "-" in span:
        first, last = (_weekday(token, part, field) for token in span.split("-"))
        if last == 0 and first > 0:
            last = 7  # "5-0" and "fri-sun" end on Sunday
    else:
        first = _weekday(span, part, field)
        last = 7 if step else first  # "N/step" runs to Sunday, 7, as in cronie
    if first > last:
        raise _field_error("weekday", f"range {span!r} runs backwards", part, field)
    return {day % 7 for day in range(first, last + 1, step or 1)}


def _weekday(token: str, part: str, field: str) -> int:
    if token.isdigit() and int(token) <= 7:
        return int(token)
    for names in (_DAY_NAMES, _DAY_FULL_NAMES):
        if token.lower() in names:
            return names.index(token.lower())
    raise _field_error("weekday", f"{token!r} is not a weekday (0-7 or sun-sat)", part, field)


def _split_term(name: str, part: str, field: str) -> tuple[str, int | None]:
    """A term's span (``*``, ``a`` or ``a-b``) and step (None when it has none)."""
    match = _TERM.fullmatch(part)
    if not match:
        raise _field_error(name, f"cannot read {part!r}", part, field)
    span, step = match.group(1), match.group(2)
    if step is not None and int(step) < 1:
        raise _field_error(name, f"{part!r}: the step must be at least 1", part, field)
    return span, None if step is None else int(step)


def _field_error(name: str, problem: str, part: str, field: str) -> ScheduleError:
    where = "" if part == field else f" in {field!r}"
    return ScheduleError(f"cron field {name!r}: {problem}{where}")

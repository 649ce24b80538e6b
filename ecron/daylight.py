"""Daylight saving time: what a fixed-time cron job does with a wall time that its zone's
clock skips (a gap) or repeats (a fold), by the task's ``dst`` policy (DESIGN.md,
"Scheduling rules"; docs/configuration.md, "Daylight saving time").

``resolve`` is the one rule: a matching wall time (found by APScheduler's ``CronTrigger``,
in ``ecron.cron``) and a policy in, the instants it fires at out, each saying what daylight
saving time did to it. ``changes`` finds where a zone's offset changes in a period, for the
previews. Nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum

_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)


class Gap(StrEnum):
    """What a fixed-time job does with a wall time the clock skips."""

    #: Fires shifted by the gap: 02:30 fires at 03:30 when 02:00 jumps to 03:00 (the default).
    SHIFT = "shift"
    #: Does not fire that day.
    SKIP = "skip"
    #: Fires at the moment of the jump (03:00 above), as Vixie cron does.
    JUMP = "jump"


class Fold(StrEnum):
    """Which occurrence of a wall time the clock repeats a fixed-time job fires at."""

    #: The first (the default).
    FIRST = "first"
    #: The last.
    LAST = "last"
    #: Both.
    BOTH = "both"


class Change(StrEnum):
    """What daylight saving time did to a fire time (``/upcoming``'s ``dst[].change``)."""

    #: Its wall time was skipped by the clock; it fires shifted by the gap.
    SHIFTED = "shifted"
    #: Its wall time was skipped by the clock; it fires at the moment of the jump.
    JUMPED = "jumped"
    #: Its wall time happens twice; it fires at the occurrence(s) the policy says.
    REPEATED = "repeated"
    #: Its wall time was skipped by the clock, and so is it, that day.
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class DstPolicy:
    """A task's ``dst``: ``gap`` and ``fold`` (see ``Gap`` and ``Fold``)."""

    gap: Gap = Gap.SHIFT
    fold: Fold = Fold.FIRST


#: ``dst`` when a task does not set it: ecron's behaviour before the key existed.
DEFAULT_POLICY = DstPolicy()


@dataclass(frozen=True, slots=True)
class Resolved:
    """One fire of a matching wall time: ``at`` (UTC; None when skipped), the naive local
    ``wall`` time it stands for, and ``change`` (None on an ordinary day)."""

    at: datetime | None
    wall: datetime
    change: Change | None = None


def resolve(wall: datetime, zone: tzinfo, policy: DstPolicy) -> tuple[Resolved, ...]:
    """The fires of a fixed-time job's matching ``wall`` time (naive) in ``zone`` under
    ``policy``, in order: one on an ordinary day; in a gap, one shifted by the gap, one at
    the moment of the jump, or none (a ``skipped`` note with ``at`` None); in a fold, the
    first occurrence, the last, or both."""
    before = _offset(wall, zone, 0)
    later = _offset(wall, zone, 1)
    if before == later:
        return (Resolved(_utc(wall - before), wall),)
    if later > before:  # a gap: fold 0 reads it with the offset before the jump
        if policy.gap is Gap.SKIP:
            return (Resolved(None, wall, Change.SKIPPED),)
        if policy.gap is Gap.JUMP:
            return (Resolved(jump_moment(wall, zone, before, later), wall, Change.JUMPED),)
        return (Resolved(_utc(wall - before), wall, Change.SHIFTED),)
    first, last = _utc(wall - before), _utc(wall - later)
    occurrences: dict[Fold, tuple[datetime, ...]] = {
        Fold.FIRST: (first,),
        Fold.LAST: (last,),
        Fold.BOTH: (first, last),
    }
    return tuple(Resolved(at, wall, Change.REPEATED) for at in occurrences[policy.fold])


def jump_moment(wall: datetime, zone: tzinfo, before: timedelta, later: timedelta) -> datetime:
    """The instant the clock jumps over ``wall`` (in a gap from offset ``before`` to
    ``later``), found to the second: it lies in ``(wall - later, wall - before]``."""
    low, high = _utc(wall - later), _utc(wall - before)  # offset ``later`` at high; not at low
    while high - low > _SECOND:
        middle = low + (high - low) // _SECOND // 2 * _SECOND
        if _offset_at(middle, zone) == before:
            low = middle
        else:
            high = middle
    return high


def changes(zone: tzinfo, start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
    """The wall times (naive ``[first, stop)``) of each gap and fold whose change happens in
    ``[start, end]``, in order. The offset is looked at once a day (no zone changes twice in
    a day) and each change found to the second."""
    moment = start.astimezone(UTC).replace(microsecond=0)
    last = end.astimezone(UTC).replace(microsecond=0) + _SECOND
    offset = _offset_at(moment, zone)
    while moment < last:
        ahead = min(moment + _DAY, last)
        following = _offset_at(ahead, zone)
        if following != offset:
            at = _change_at(zone, moment, ahead, offset)
            walls = sorted((at + offset, at + following))
            yield walls[0].replace(tzinfo=None), walls[1].replace(tzinfo=None)
        moment, offset = ahead, following


def _change_at(zone: tzinfo, low: datetime, high: datetime, offset: timedelta) -> datetime:
    """The first instant in ``(low, high]`` whose offset is not ``offset`` (one change)."""
    while high - low > _SECOND:
        middle = low + (high - low) // _SECOND // 2 * _SECOND
        if _offset_at(middle, zone) == offset:
            low = middle
        else:
            high = middle
    return high


def _offset(wall: datetime, zone: tzinfo, fold: int) -> timedelta:
    offset = wall.replace(tzinfo=zone, fold=fold).utcoffset()
    assert offset is not None
    return offset


def _offset_at(instant: datetime, zone: tzinfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)

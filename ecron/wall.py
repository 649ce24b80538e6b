"""How a time is shown to a person (DESIGN.md, "What people read"), the one home of it in
Python: a wall time in a zone, to the second, with the zone's abbreviation (``CET``,
``CST``) or, where the zone has none, its offset (``+08:00``); never milliseconds. A time
of a task is shown in the task's zone, any other in the daemon's ``timezone`` (UTC unless
set); ``--utc`` shows every one in UTC. How long a run took and what daylight saving time
does to a fire time are said here too.

The CLI, ``ecron validate``, ``ecron plan`` and the demo show times through here; the
dashboard follows the same rule in the browser (``ecron/api/static/view.js``, ``wall``).
``--json`` and the API keep RFC 3339 UTC. Standard library only: the CLI's client commands
import it.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: The zone of every time with ``--utc``, and of a time whose zone is not known.
UTC_NAME = "UTC"
#: An abbreviation worth showing: letters (``CET``, ``AEDT``), not ``+08``.
_LETTERS = re.compile(r"[A-Za-z]{2,6}")
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


@lru_cache(maxsize=256)
def zone(name: str | None) -> tzinfo:
    """The zone named ``name`` (IANA, like ``Asia/Shanghai``); UTC for None, ``UTC`` or a
    name this machine does not know (the daemon checked it; a client may lack tzdata)."""
    if not name or name == UTC_NAME:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def zone_label(local: datetime) -> str:
    """The zone of the aware ``local`` time as people know it at that moment: its
    abbreviation (``CEST``), or its offset (``+08:00``) where it has none."""
    name = local.tzname() or ""
    if _LETTERS.fullmatch(name):
        return name
    offset = local.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def wall(when: datetime, zone_name: str | None = None, *, date: bool = True) -> str:
    """``2026-12-04 02:30:00 CST``: the instant ``when`` as a wall time of zone
    ``zone_name``, to the second, with the zone; ``02:30:00 CST`` without ``date``."""
    local = when.astimezone(zone(zone_name))
    shown = local.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{shown} {zone_label(local)}"


def wall_today(when: datetime, zone_name: str | None, now: datetime) -> str:
    """As ``wall``, made short for a table's narrow column: today's (the date of ``now`` in
    that zone) without its date, ``02:30:00 CST``; another day of this year's with its
    month and day, ``Nov 28 02:30:00 CST``; another year's whole."""
    tz = zone(zone_name)
    local, today = when.astimezone(tz), now.astimezone(tz).date()
    if local.date() == today:
        return wall(when, zone_name, date=False)
    if local.year != today.year:
        return wall(when, zone_name)
    return f"{_MONTHS[local.month - 1][:3]} {local.day:02d} {wall(when, zone_name, date=False)}"


def took(seconds: float) -> str:
    """How long a run took: ``0.4 s``, ``42 s``, ``3 min 5 s``, ``2 h 10 min`` (rounded half
    up, in the same steps as the dashboard's ``tookText``, so both say the same)."""
    tenths = math.floor(max(seconds, 0) * 10 + 0.5)
    if tenths < 100:
        return f"{tenths // 10}.{tenths % 10} s"
    whole = math.floor(seconds + 0.5)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s" if whole % 60 else f"{whole // 60} min"
    hours, minutes = whole // 3600, whole % 3600 // 60
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def duration(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end`` (a run's first trigger call to its end); None
    unless both are known."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def dst_note(change: str, wall_time: str, at: datetime | None, zone_name: str | None) -> str:
    """What daylight saving time does to a fire time, as a sentence: ``02:30 does not exist
    on 28 March: runs at 03:30 CEST`` (``change`` and ``wall_time`` as
    ``GET /tasks/{name}/upcoming`` lists them in ``dst``: ``shifted``, ``jumped``,
    ``skipped`` or ``repeated``, and the local wall time; ``at`` the fire time, None when
    it was skipped)."""
    meant = datetime.fromisoformat(wall_time)
    clock = meant.strftime("%H:%M:%S" if meant.second else "%H:%M")
    day = f"{meant.day} {_MONTHS[meant.month - 1]}"
    runs = "no run that day" if at is None else f"runs at {_clock_at(at, zone_name)}"
    if change == "repeated":
        return f"{clock} happens twice on {day}: {runs}"
    return f"{clock} does not exist on {day}: {runs}"


def _clock_at(at: datetime, zone_name: str | None) -> str:
    local = at.astimezone(zone(zone_name))
    return f"{local.strftime('%H:%M:%S' if local.second else '%H:%M')} {zone_label(local)}"

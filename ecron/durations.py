"""Durations as people write them in YAML: ``500ms``, ``30s``, ``10m``, ``2h``, ``1d``."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

#: Microseconds per unit: parts are added up exactly (in ``Decimal``), never in float seconds.
_UNITS = {"ms": 1000, "s": 10**6, "m": 60 * 10**6, "h": 3600 * 10**6, "d": 86400 * 10**6}
_MICROSECOND = timedelta(microseconds=1)
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: Any) -> timedelta:
    """Parse ``"1h30m"``, ``"500ms"``, ``"2d"`` (or a ``timedelta``; ``0`` alone means zero).

    A bare number other than 0 is refused: the unit is part of the value.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return timedelta(0)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration: write it with a unit, like 30s or 10m")
    text = value.strip().replace(" ", "")
    pos = 0
    micros = Decimal(0)
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        micros += Decimal(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(
            f"{value!r} is not a duration: "
            "write a number and a unit (ms, s, m, h, d), like 30s or 1h30m"
        )
    try:
        return timedelta(microseconds=int(micros.to_integral_value()))
    except OverflowError:
        raise ValueError(f"{value!r} is too long a duration (at most 999999999d)") from None


@lru_cache(maxsize=1024)
def format_duration(value: timedelta) -> str:
    """The shortest exact spelling of ``value`` in the units ``parse_duration`` reads (a
    config has few distinct durations, and every task's spec is written with them)."""
    ms = round(Decimal(value // _MICROSECOND) / 1000)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


#: The longest duration a setting may have: 100 years. A longer one, added to a time of
#: this century (a deadline, a lease, the next poll) or taken from it (history retention),
#: would run off the calendar past the year 9999 or before the year 1.
LONGEST = timedelta(days=36500)


def parse_setting(value: Any) -> timedelta:
    """``parse_duration`` for a setting: also refuses a duration longer than ``LONGEST``."""
    duration = parse_duration(value)
    if duration > LONGEST:
        raise ValueError(f"{value!r} is too long a duration (at most 36500d, 100 years)")
    return duration


#: A ``timedelta`` field read with ``parse_setting`` and written back with ``format_duration``.
Duration = Annotated[
    timedelta,
    BeforeValidator(parse_setting),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]

"""Durations as people write them in YAML: ``500ms``, ``30s``, ``10m``, ``2h``, ``1d``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
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
    seconds = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(
            f"{value!r} is not a duration: write a number and a unit (ms, s, m, h, d), like 30s or 1h30m"
        )
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact spelling of ``value`` in the units ``parse_duration`` reads."""
    ms = round(value.total_seconds() * 1000)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


#: A ``timedelta`` field read with ``parse_duration`` and written back with ``format_duration``.
Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]

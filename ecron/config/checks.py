"""Checks shared by the fields of the config's models: URLs, time zones, durations."""

from __future__ import annotations

import re
from datetime import timedelta

from ecron.errors import ScheduleError
from ecron.schedules import zone


def check_url(value: str | None) -> str | None:
    """An http(s) URL with a host, or None."""
    if value is not None and not re.match(r"https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


def known_zone(value: str) -> str:
    """An IANA time zone this machine knows (``Asia/Shanghai``, ``UTC``)."""
    try:
        zone(value)
    except ScheduleError as exc:
        raise ValueError(str(exc)) from None
    return value


def check_positive(value: timedelta | None) -> timedelta | None:
    """A duration longer than zero, or None."""
    if value is not None and value <= timedelta(0):
        raise ValueError("must be longer than zero")
    return value

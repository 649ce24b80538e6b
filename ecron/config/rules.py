"""The task keys that say when fire times may not run, and what is expected of a task:
``calendar`` (named under ``calendars`` or inline), ``blackout`` and ``expect``
(DESIGN.md, "Configuration"; ``docs/calendars.md``)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ecron.calendars import Exclusions
from ecron.durations import Duration
from ecron.errors import ScheduleError
from ecron.schedules import read_time, zone

#: Calendar names follow task names' rule.
CALENDAR_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CalendarSpec(_Strict):
    """The days a task's fire times may fall on, in the task's time zone: the ``weekdays``
    listed (default: all), less the ``exclude``d dates."""

    #: The name it was defined under in ``calendars`` (None for an inline calendar).
    name: str | None = None
    weekdays: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS))
    exclude: list[date] = Field(default_factory=list)

    @field_validator("weekdays", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [day.strip().lower() if isinstance(day, str) else day for day in value]
        return value

    @field_validator("weekdays")
    @classmethod
    def _some_day(cls, value: list[Weekday]) -> list[Weekday]:
        if not value:
            raise ValueError("the calendar excludes every day: list at least one weekday")
        return sorted(set(value), key=WEEKDAYS.index)

    @field_validator("exclude", mode="before")
    @classmethod
    def _dates(cls, value: Any) -> Any:
        if isinstance(value, list):  # a YAML timestamp with a time of day is not a date
            for item in value:
                if isinstance(item, datetime):
                    raise ValueError(f"{item.isoformat()} is a time: write a date, like 2026-12-25")
        return value


class PoolSpec(_Strict):
    """A pool of tasks that call one service (``pools`` in ecron.yaml or a tasks file):
    at most ``max_running`` of their executions PENDING or RUNNING at once across the
    cluster, at most ``max_per_second`` triggers leaving per second (each optional)."""

    #: The name it was defined under in ``pools``.
    name: str
    max_running: int | None = Field(default=None, ge=1)
    max_per_second: float | None = Field(default=None, gt=0)


class Blackout(_Strict):
    """A window ``[from, to)`` in which no fire time runs; a time without an offset is read
    in the task's time zone, and a date alone is its midnight there."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True
    )

    start: datetime | str = Field(alias="from")
    to: datetime | str

    @field_validator("start", "to", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        if isinstance(value, date) and not isinstance(value, datetime):
            value = datetime.combine(value, datetime.min.time())  # a date: its local midnight
        try:
            read_time(value, UTC, "time")
        except ScheduleError as exc:
            raise ValueError(str(exc).removeprefix("time: ")) from None
        return value.isoformat() if isinstance(value, datetime) else value

    def window(self, timezone: str) -> tuple[datetime, datetime]:
        """``[from, to)`` in UTC, times without an offset read in ``timezone``."""
        tz = zone(timezone)
        return read_time(self.start, tz, "from"), read_time(self.to, tz, "to")


class Expect(_Strict):
    """What is expected of a task: a SUCCESS at least every ``success_within``
    (``task_overdue``), and a RUNNING execution's progress moving at least every
    ``progress_within`` (``execution_stalled``); one of them at least."""

    success_within: Duration | None = None
    progress_within: Duration | None = None

    @field_validator("success_within", "progress_within")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("must be longer than zero")
        return value

    @model_validator(mode="after")
    def _something(self) -> Expect:
        if self.success_within is None and self.progress_within is None:
            raise ValueError("expect needs success_within, progress_within or both")
        return self


def exclusions(
    calendar: CalendarSpec | None, blackout: list[Blackout], timezone: str
) -> Exclusions | None:
    """The exclusions of a task's calendar and blackouts, or None when it has neither."""
    if calendar is None and not blackout:
        return None
    tz = zone(timezone)
    if calendar is None:
        return Exclusions(tz, windows=tuple(b.window(timezone) for b in blackout))
    return Exclusions(
        tz,
        weekdays=frozenset(WEEKDAYS.index(day) for day in calendar.weekdays),
        dates=frozenset(calendar.exclude),
        windows=tuple(b.window(timezone) for b in blackout),
    )


def check_blackouts(blackout: list[Blackout], timezone: str) -> None:
    """Raise naming the first window whose end is not after its start."""
    for number, window in enumerate(blackout, start=1):
        start, end = window.window(timezone)
        if end <= start:
            raise ValueError(
                f"blackout[{number}].to: {window.to!r} is not after from ({window.start!r}): "
                "a window ends after it starts"
            )

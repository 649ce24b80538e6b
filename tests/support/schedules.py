"""Fire times as the scheduler asks for them, for the schedule tests."""

from __future__ import annotations

from datetime import datetime

from ecron.schedules import Schedule, next_fire_time


def fire_times(schedule: Schedule, now: datetime, count: int) -> list[datetime]:
    """The first ``count`` fire times at or after ``now``, each advanced from the previous one."""
    times: list[datetime] = []
    previous: datetime | None = None
    for _ in range(count):
        previous = next_fire_time(schedule, previous, now)
        assert previous is not None
        times.append(previous)
    return times

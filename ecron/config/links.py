"""Checks across tasks, once each task is valid on its own: chains name tasks that exist
and never loop, and a calendar or blackout leaves the schedule some fire time to run.
Every problem names the file, the task and the field."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ecron.calendars import FireTimes
from ecron.config.model import TaskSpec
from ecron.config.rules import CalendarSpec, exclusions
from ecron.schedules import ScheduleKind, next_fire_time

AFTER_TASK = "schedule.after_task"


def check_chains(tasks: Mapping[str, TaskSpec], files: Mapping[str, str]) -> list[str]:
    """Each chained task's upstreams exist, and no chain loops (``a after b after a``),
    which is reported once, at the first task on the loop in file order. ``files``: the file
    of every task declared (valid or not: an invalid upstream is reported where it is)."""
    graph = {
        name: spec.fire_schedule.upstreams
        for name, spec in tasks.items()
        if spec.fire_schedule.kind is ScheduleKind.CHAIN
    }
    problems = []
    on_loops: set[str] = set()
    for name, upstreams in graph.items():
        where = f"{files[name]}: task {name!r}: field '{AFTER_TASK}'"
        for upstream in upstreams:
            if upstream not in files:
                problems.append(f"{where}: no task named {upstream!r} is defined.")
        loop = _loop(name, graph)
        if loop is not None and name not in on_loops:
            on_loops.update(loop)
            problems.append(
                f"{where}: the chain loops ({' after '.join(loop)}): a task cannot run after "
                "itself, even through others."
            )
    return problems


def _loop(start: str, graph: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """A path of "runs after" links from ``start`` back to itself, or None."""
    stack = [(start, [start])]
    visited = {start}
    while stack:
        name, path = stack.pop()
        for upstream in graph.get(name, ()):
            if upstream == start:
                return [*path, start]
            if upstream in graph and upstream not in visited:
                visited.add(upstream)
                stack.append((upstream, [*path, upstream]))
    return None


def check_reach(
    tasks: Mapping[str, TaskSpec], files: Mapping[str, str], now: datetime
) -> list[str]:
    """A task whose schedule has fire times after ``now`` keeps at least one that its
    calendar and blackouts let run (the search gives up after ``calendars.MAX_JUMPS``
    excluded stretches)."""
    problems = []
    for name, spec in tasks.items():
        fire_times = spec.fire_times
        schedule = fire_times.schedule
        if fire_times.exclusions is None or next_fire_time(schedule, None, now) is None:
            continue
        if fire_times.next(None, now) is not None:
            continue
        where = f"{files[name]}: task {name!r}"
        calendar = spec.calendar if isinstance(spec.calendar, CalendarSpec) else None
        alone = FireTimes(schedule, exclusions(calendar, [], spec.timezone))
        if calendar is not None and alone.next(None, now) is None:
            problems.append(
                f"{where}: field 'calendar': it leaves out every fire time of the schedule "
                f"({schedule.text}): the task would never run."
            )
        else:
            problems.append(
                f"{where}: field 'blackout': the windows cover every fire time left of the "
                f"schedule ({schedule.text}): the task would never run."
            )
    return problems

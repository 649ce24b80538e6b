"""What ``ecron validate`` prints: every problem, or each task with its next fire time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from ecron.config.loader import load_config
from ecron.config.model import CallSettings, Config, TaskSpec
from ecron.durations import format_duration
from ecron.errors import ConfigError
from ecron.schedules import ScheduleKind


def validation_report(
    directory: str | Path, now: datetime, environ: Mapping[str, str] | None = None
) -> tuple[int, list[str]]:
    """Check the config directory ``directory`` as of ``now``: (exit code, lines to print).

    On success the code is 0 and there is one line per task (see ``task_lines``), then
    one per note (see ``notes``); on failure it is 1 and there is one line per problem.
    """
    try:
        config = load_config(directory, environ, now)
    except ConfigError as exc:
        return 1, [" ".join(problem.split("\n")) for problem in exc.problems]
    return 0, task_lines(config, now) + notes(config)


def notes(config: Config) -> list[str]:
    """Lines about settings that are taken but likely not meant: a call in poll mode whose
    ``poll_interval`` is longer than its ``task_timeout`` (never polled before its deadline;
    fine where the service reports by callback, hence not an error), and a ``batch_poll_url``
    on a call that is never polled (``mode: callback`` or ``queue``)."""
    found = []
    for task in config.tasks.values():
        numbers: list[int | None] = list(range(1, len(task.steps) + 1)) if task.steps else [None]
        for number in numbers:
            name = f"task {task.name!r}"
            if number is not None:
                name += f" step {number} ({task.step_names[number - 1]})"
            found += [f"note: {name}: {note}" for note in _call_notes(task.call(number))]
    return found


def _call_notes(call: CallSettings) -> list[str]:
    if call.mode != "poll":
        if call.batch_poll_url is None:
            return []
        return [f"batch_poll_url is never used: a call in mode {call.mode} is never polled."]
    if call.poll_interval <= call.task_timeout:
        return []
    return [
        f"poll_interval {format_duration(call.poll_interval)} is longer than task_timeout "
        f"{format_duration(call.task_timeout)}: it is never polled before its deadline, so it "
        "ends TIMED_OUT unless its trigger's answer or a callback ends it first."
    ]


def task_lines(config: Config, now: datetime) -> list[str]:
    """One aligned line per task: name, schedule, next fire time after ``now``, disabled mark.

    The next fire time is RFC 3339 UTC, the first that its calendar and blackouts let
    run, or ``-`` when the schedule has none of its own (``manual``; a chain; ``after``,
    which first fires when loaded) or the task is disabled.
    """
    if not config.tasks:
        return [f"{config.directory}: no tasks are defined (add them to tasks/*.yaml)."]
    rows = [
        (task.name, task.fire_schedule.text, _next(task, now)) for task in config.tasks.values()
    ]
    name_width = max(len(name) for name, _, _ in rows)
    text_width = max(len(text) for _, text, _ in rows)
    lines = []
    for (name, text, when), task in zip(rows, config.tasks.values(), strict=True):
        mark = "" if task.enabled else "  (disabled)"
        lines.append(f"{name:<{name_width}}  {text:<{text_width}}  next: {when}{mark}")
    return lines


_NONE_OF_THEIR_OWN = (ScheduleKind.MANUAL, ScheduleKind.AFTER, ScheduleKind.CHAIN)


def _next(task: TaskSpec, now: datetime) -> str:
    schedule = task.fire_schedule
    if not task.enabled or schedule.kind in _NONE_OF_THEIR_OWN:
        return "-"
    when = task.fire_times.next(None, now)
    if when is None:
        return "-"
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

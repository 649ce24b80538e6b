"""What ``ecron validate`` prints: every problem, or each task with its next fire time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from ecron.config.loader import load_config
from ecron.config.model import CallSettings, Config, DaemonSettings, TaskSpec
from ecron.durations import format_duration
from ecron.errors import ConfigError
from ecron.schedules import ScheduleKind
from ecron.wall import UTC_NAME, wall


def validation_report(
    directory: str | Path,
    now: datetime,
    environ: Mapping[str, str] | None = None,
    *,
    utc: bool = False,
    width: int = 80,
) -> tuple[int, list[str]]:
    """Check the config directory ``directory`` as of ``now``: (exit code, lines to print).

    On success the code is 0 and there is a line per task (see ``task_lines``: next fire
    times in each task's zone, or in UTC with ``utc``, to fit ``width`` columns), then one
    per note (see ``notes``); on failure it is 1 and there is one line per problem.
    """
    try:
        config = load_config(directory, environ, now)
    except ConfigError as exc:
        return 1, problem_lines(exc)
    return 0, task_lines(config, now, utc=utc, width=width) + notes(config)


def problem_lines(exc: ConfigError) -> list[str]:
    """One line per problem of a config that cannot be used (``ecron validate``, ``ecron
    plan``): each names its file, task and field."""
    return [" ".join(problem.split("\n")) for problem in exc.problems]


def notes(config: Config) -> list[str]:
    """Lines about settings that are taken but likely not meant: a call in poll mode whose
    ``poll_interval`` is longer than its ``task_timeout`` (never polled before its deadline;
    fine where the service reports by callback, hence not an error), a ``batch_poll_url``
    on a call that is never polled (``mode: callback`` or ``queue``), and a call that is
    only pushed to where the daemon offers no way to push (``mode: callback`` without a
    ``public_url``, ``mode: queue`` without a ``queue``)."""
    found = []
    for task in config.tasks.values():
        numbers: list[int | None] = list(range(1, len(task.steps) + 1)) if task.steps else [None]
        for number in numbers:
            name = f"task {task.name!r}"
            if number is not None:
                name += f" step {number} ({task.step_names[number - 1]})"
            call = task.call(number)
            found += [f"note: {name}: {note}" for note in _call_notes(call, config.daemon)]
    return found


def _call_notes(call: CallSettings, daemon: DaemonSettings) -> list[str]:
    if call.mode != "poll":
        found = []
        if call.batch_poll_url is not None:
            found.append(
                f"batch_poll_url is never used: a call in mode {call.mode} is never polled."
            )
        if call.mode == "queue" and daemon.queue is None:
            found.append(_unpushable("queue", "queue.url (or ECRON_QUEUE_URL)", "no stream"))
        elif call.mode == "callback" and daemon.public_url is None and daemon.queue is None:
            found.append(_unpushable("callback", "public_url (or ECRON_PUBLIC_URL)", "no URL"))
        return found
    if call.poll_interval <= call.task_timeout:
        return []
    return [
        f"poll_interval {format_duration(call.poll_interval)} is longer than task_timeout "
        f"{format_duration(call.task_timeout)}: it is never polled before its deadline, so it "
        "ends TIMED_OUT unless its trigger's answer or a callback ends it first."
    ]


def _unpushable(mode: str, how: str, given: str) -> str:
    return (
        f"mode {mode}, but ecron.yaml sets no {how}: its service is given {given} to report "
        "to, and it ends FAILED unreachable after heartbeat_timeout unless it reports another "
        "way."
    )


def task_lines(config: Config, now: datetime, *, utc: bool = False, width: int = 80) -> list[str]:
    """One aligned line per task: name, schedule, next fire time after ``now``, disabled
    mark; when those lines would be longer than ``width``, two lines per task instead (its
    name and schedule, then its next fire time, indented), none running past the edge.

    The next fire time is a wall time in the task's zone (in UTC with ``utc``), to the
    second, with the zone (``ecron.wall``): the first that its calendar and blackouts let
    run, or ``-`` when the schedule has none of its own (``manual``; a chain; ``after``,
    which first fires when loaded) or the task is disabled.
    """
    if not config.tasks:
        return [f"{config.directory}: no tasks are defined (add them to tasks/*.yaml)."]
    rows = [
        (task.name, task.fire_schedule.text, _next(task, now, utc))
        for task in config.tasks.values()
    ]
    name_width = max(len(name) for name, _, _ in rows)
    text_width = max(len(text) for _, text, _ in rows)
    marks = ["" if task.enabled else "  (disabled)" for task in config.tasks.values()]
    lines = [
        f"{name:<{name_width}}  {text:<{text_width}}  next: {when}{mark}"
        for (name, text, when), mark in zip(rows, marks, strict=True)
    ]
    if max(len(line) for line in lines) <= width:
        return lines
    return [
        line
        for (name, text, when), mark in zip(rows, marks, strict=True)
        for line in (f"{name:<{name_width}}  {text}", f"    next: {when}{mark}")
    ]


_NONE_OF_THEIR_OWN = (ScheduleKind.MANUAL, ScheduleKind.AFTER, ScheduleKind.CHAIN)


def _next(task: TaskSpec, now: datetime, utc: bool) -> str:
    schedule = task.fire_schedule
    if not task.enabled or schedule.kind in _NONE_OF_THEIR_OWN:
        return "-"
    when = task.fire_times.next(None, now)
    if when is None:
        return "-"
    return wall(when, UTC_NAME if utc else task.timezone)

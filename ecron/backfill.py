"""Backfill: the past fire times of a period, run on request (DESIGN.md, "Scheduling rules",
Backfill; ``POST /api/v1/tasks/{name}/backfill``, ``ecron backfill``).

These are the pure parts: what a request may ask, which fire times a period holds, and the
runs they become. The fire times are the task's ``FireTimes`` walked as the live scheduler
walks them (``FireTimes.next`` from fire time to fire time: its schedule in its time zone,
its calendar and blackouts), so a backfill lists exactly what the scheduler would have run.

``Commands.backfill`` reads which of them already have an execution, inserts the others as
claimed runs and hands them to the engine (``Engine.hold``), which starts each through the
one start path, as it does a retry or a chained run: so ``concurrency`` (under ``forbid`` a
backfilled run waits for the older one, never SKIPPED), pools, retries and resume apply to
them as to any run, and the unique key ``(task, scheduled_at, attempt, resume_attempt)``
keeps a fire time from ever running twice. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.core import Execution, TriggerKind
from ecron.errors import EcronError
from ecron.planning import Claim, claimed
from ecron.schedules import ScheduleKind, zone

#: At most this many fire times in one backfill's period (a longer one is refused: it is
#: asked again in parts, each answer readable and each insert one bounded transaction).
MAX_FIRE_TIMES = 10_000
#: New runs one backfill may create, and unfinished backfilled runs one task may have, unless
#: ``backfill_max_runs`` says otherwise: every queued run is a row the node holds and decides
#: on, so 10,000 queued at once kept a node at 80 % of a core (3 % before), after a restart
#: too.
MAX_RUNS = 1_000
#: The schedules that have fire times of their own: ``after`` (its fire times depend on when
#: runs end), chains (their upstreams') and manual ones have none to backfill.
BACKFILLED = (ScheduleKind.CRON, ScheduleKind.EVERY, ScheduleKind.AT)


class BadBackfill(EcronError):
    """A backfill request that cannot be carried out (400): ``field`` names what is wrong in
    it (``from``, ``to``, ``dry_run``, the task's ``schedule``), ``value`` what was given."""

    def __init__(self, message: str, field: str, value: Any = None) -> None:
        self.field = field
        self.value = value
        super().__init__(message)

    @property
    def detail(self) -> dict[str, Any]:
        """The error answer's ``detail``: the field, and the value given."""
        return {"field": self.field, "value": self.value}


@dataclass(frozen=True, slots=True)
class Backfill:
    """What a backfill of task ``task`` over ``[start, end)`` found and did.

    ``fire_times``: every fire time of the period, oldest first, those that already had an
    execution included (``already_run`` of them); ``executions``: the eids of the runs it
    created, oldest fire time first (none on a dry run).
    """

    task: str
    start: datetime
    end: datetime
    fire_times: tuple[datetime, ...]
    already_run: int
    executions: tuple[str, ...] = ()

    def answer(self) -> dict[str, Any]:
        """The API's answer (docs/api.md): ``count`` is the number of fire times in the
        period, whether they ran before or not."""
        return {
            "task": self.task,
            "from": iso(self.start),
            "to": iso(self.end),
            "fire_times": [iso(when) for when in self.fire_times],
            "count": len(self.fire_times),
            "already_run": self.already_run,
            "executions": list(self.executions),
        }


#: The body a backfill request takes, as its errors show it.
_EXAMPLE = '{"from": "2026-11-01T00:00:00Z", "to": "2026-11-08T00:00:00Z", "dry_run": true}'
_FIELDS = ("from", "to", "dry_run")


def read_request(task: str, body: Any, timezone: str = "UTC") -> tuple[datetime, datetime, bool]:
    """The period ``[from, to)`` and ``dry_run`` of a backfill request's JSON ``body``
    about ``task`` (whose zone, ``timezone``, reads a date); ``BadBackfill`` naming the
    field that is missing, unknown or wrong."""
    if not isinstance(body, dict):
        raise BadBackfill(
            f"task {task!r}: the body must be a JSON object, like {_EXAMPLE}", "body", None
        )
    for field in body:
        if field not in _FIELDS:
            raise BadBackfill(
                f"task {task!r}: field {field!r} is unknown: a backfill takes from, to and dry_run",
                str(field),
                body[field],
            )
    for field in ("from", "to"):
        if field not in body:
            raise BadBackfill(f"task {task!r}: field {field!r} is missing: {_EXAMPLE}", field)
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise BadBackfill(
            f"task {task!r}: field 'dry_run': {dry_run!r} is not true or false",
            "dry_run",
            dry_run,
        )
    start = read_moment(task, body["from"], "from", timezone)
    return start, read_moment(task, body["to"], "to", timezone), dry_run


#: A date alone: its midnight in the task's zone (DESIGN.md, "Backfill").
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def read_moment(task: str, value: Any, field: str, timezone: str = "UTC") -> datetime:
    """A request's ``from`` or ``to``, in UTC: RFC 3339 text with its offset (``Z`` or
    ``+02:00``), or a date alone (``2026-11-01``), read as its midnight in the task's zone
    ``timezone``. A time of day without an offset is refused: it could be read in UTC or in
    the task's zone, and a backfill of the wrong hours cannot be taken back."""
    wrong = f"task {task!r}: field {field!r}: {value!r}"
    example = "write it like 2026-11-01T00:00:00Z, or a date (2026-11-01)"
    when = None
    if isinstance(value, str):
        with suppress(ValueError):
            when = datetime.fromisoformat(value.strip())
        if when is not None and _DATE.fullmatch(value.strip()):
            when = when.replace(tzinfo=zone(timezone))  # its midnight there
    if when is None:
        raise BadBackfill(f"{wrong} is not a time: {example}", field, value)
    if when.tzinfo is None:
        raise BadBackfill(
            f"{wrong} has no UTC offset: {example} (or +02:00 for a time of day)", field, value
        )
    try:
        return when.astimezone(UTC)
    except OverflowError:  # 0001-01-01 east of UTC, 9999-12-31 west of it
        raise BadBackfill(f"{wrong} is not in the years 1 to 9999 in UTC", field, value) from None


def period_fire_times(
    spec: TaskSpec, start: datetime, end: datetime, now: datetime
) -> list[datetime]:
    """The fire times of task ``spec`` in ``[start, end)`` that run (its calendar and
    blackouts applied), oldest first. Raises ``BadBackfill`` for a schedule without fire
    times of its own, a period that is empty, reaches past ``now``, or holds more than
    ``MAX_FIRE_TIMES``."""
    check_period(spec, start, end, now)
    fire_times = spec.fire_times
    found: list[datetime] = []
    current = fire_times.next(None, start)
    while current is not None and current < end:
        if current >= start:  # an ``at`` schedule's one fire time may come before the period
            found.append(current)
            if len(found) > MAX_FIRE_TIMES:
                raise BadBackfill(
                    f"task {spec.name!r}: field 'to': the period from {iso(start)} to "
                    f"{iso(end)} holds more than {MAX_FIRE_TIMES:,} fire times: backfill it "
                    "in shorter periods",
                    "to",
                    iso(end),
                )
        current = fire_times.next(current, current)
    return found


def check_period(spec: TaskSpec, start: datetime, end: datetime, now: datetime) -> None:
    """Raise ``BadBackfill`` when task ``spec`` cannot be backfilled over ``[start, end)``
    at ``now`` (see ``period_fire_times``)."""
    schedule = spec.fire_schedule
    if schedule.kind not in BACKFILLED:
        raise BadBackfill(
            f"task {spec.name!r}: field 'schedule': {schedule.text!r} has no fire times of its "
            "own to backfill (only cron, every and at schedules have; run it now instead)",
            "schedule",
            schedule.text,
        )
    if start >= end:
        raise BadBackfill(
            f"task {spec.name!r}: field 'from': {iso(start)} is not before 'to' ({iso(end)}): "
            "the period [from, to) is empty",
            "from",
            iso(start),
        )
    if end > now:
        raise BadBackfill(
            f"task {spec.name!r}: field 'to': {iso(end)} is in the future (now {iso(now)}): a "
            "backfill runs past fire times only; the scheduler runs the others",
            "to",
            iso(end),
        )


def check_room(task: str, new: int, unfinished: int, most: int) -> None:
    """Raise ``BadBackfill`` when ``new`` runs of task ``task``, which has ``unfinished``
    backfilled runs that have not ended, would be more than ``most`` (``backfill_max_runs``)
    in one request, or leave the task more than ``most`` unfinished ones."""
    if new > most:
        raise BadBackfill(
            f"task {task!r}: field 'to': the period has {new:,} fire times to run, more than "
            f"the {most:,} one backfill may start (backfill_max_runs): backfill it in shorter "
            "periods",
            "to",
            {"runs": new, "backfill_max_runs": most},
        )
    if unfinished + new > most:
        raise BadBackfill(
            f"task {task!r}: field 'to': it has {unfinished:,} backfilled runs not ended yet; "
            f"with these {new:,} it would have {unfinished + new:,}, more than "
            f"backfill_max_runs ({most:,}): wait for them to end, or backfill a shorter period",
            "to",
            {"runs": new, "unfinished": unfinished, "backfill_max_runs": most},
        )


def backfill_runs(spec: TaskSpec, times: Iterable[datetime], claim: Claim) -> list[Execution]:
    """The runs of fire times ``times`` of task ``spec``: ``trigger_kind: backfill``, that
    fire time as ``scheduled_at``, claimed by ``claim``'s node (SCHEDULED) and due at once,
    as a chained run is (the engine decides each one's start)."""
    return [
        claimed(
            spec.name,
            when,
            claim,
            spec=spec,
            trigger_kind=TriggerKind.BACKFILL,
            not_before=claim.now,
        )
        for when in times
    ]

"""Four rules that every path asks about one execution, each with one home here: which call
is in flight (the execution's own, or its current step's), when a claimed execution is due
to start, whether a service's ``Retry-After`` still holds its trigger back, and whether the
node holding it still owns it. Pure: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ecron.core.model import Execution, Step
from ecron.core.status import Status


def current_step(execution: Execution) -> Step | None:
    """The step in flight: the first one that did not succeed (None for a one-call task)."""
    if not execution.steps:
        return None
    return next((step for step in execution.steps if step.status is not Status.SUCCESS), None)


@dataclass(frozen=True, slots=True)
class InFlight:
    """The call in flight of an execution: the execution itself (``step`` None), or its
    current step."""

    step: Step | None
    #: The call's own status: the step's, or the execution's.
    status: Status
    #: When its trigger left (``triggered_at``, or the step's ``started_at``); None before.
    started_at: datetime | None

    @property
    def number(self) -> int | None:
        """The step's number, None for a one-call task."""
        return None if self.step is None else self.step.number

    @property
    def started(self) -> bool:
        """True once the trigger of this call has left."""
        return self.started_at is not None


def in_flight(execution: Execution) -> InFlight:
    """The call in flight of ``execution`` (see ``InFlight``)."""
    step = current_step(execution)
    if step is None:
        return InFlight(None, execution.status, execution.triggered_at)
    return InFlight(step, step.status, step.started_at)


def due_at(execution: Execution) -> datetime:
    """When a claimed execution is due to start: its fire time, or later when it must not
    start before another moment (``not_before``: the fire time plus its jitter, a retry's
    backoff, a chained run's claim)."""
    not_before = execution.not_before
    if not_before is None or not_before <= execution.scheduled_at:
        return execution.scheduled_at
    return not_before


def held_back(held_back_until: datetime | None, now: datetime) -> datetime | None:
    """Until when a trigger may not leave at ``now`` because its service answered ``429`` or
    ``503`` with ``Retry-After`` (``held_back_until``: its pool's moment, or its task's without
    a pool); None when nothing holds it back (any more). The start path asks it with the
    database's moment, the trigger path with the one this node heard."""
    if held_back_until is not None and now < held_back_until:
        return held_back_until
    return None


class Ownership(StrEnum):
    """What a fresh read of an execution says about the node that holds it."""

    #: Still this node's: the same lease (fence), not ended.
    MINE = "mine"
    #: It ended (on this node or elsewhere): nothing more to do with it.
    ENDED = "ended"
    #: The row is gone, or another node's lease (a higher fence) moved it on: let it go.
    LOST = "lost"


def ownership(held: Execution, fresh: Execution | None) -> Ownership:
    """Whether the node holding ``held`` still owns it, from ``fresh``, the row as read now:
    the one answer to "do I still own it" that every path (a lost write, a heartbeat read,
    a trigger about to be retried) asks."""
    if fresh is None or fresh.fence != held.fence:
        return Ownership.LOST
    if fresh.is_final:
        return Ownership.ENDED
    return Ownership.MINE

"""Capacity: whether a run may start now in its pool (DESIGN.md, "Scheduling rules":
Pools), and how a run that may not waits. Pure rules on the pool's gate, read in the start's
transaction; ``planning.decide_start`` asks them after the task's own rules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ecron.config.model import TaskSpec
from ecron.core import Execution, Holder, Status, TriggerKind, Waiting, WaitingFor
from ecron.core.plans import InLine, PoolGate


@dataclass(frozen=True, slots=True)
class Wait:
    """It cannot start yet: it stays claimed (SCHEDULED), waiting (``event``: what for), and
    is decided again at ``until`` at the latest (sooner when what it waits for ends here)."""

    event: Waiting
    until: datetime


#: How soon a waiting run is decided again when nothing wakes it sooner (a slot freed, or
#: an older run ended, on another node).
WAIT_RECHECK = timedelta(seconds=1)
#: How soon a backfilled run that waits behind another waiting run of its task (``forbid``)
#: is decided again when nothing wakes it sooner: it cannot start before that one does.
WAIT_IN_LINE = timedelta(minutes=1)


def in_line(execution: Execution) -> InLine:
    """Where ``execution`` stands in its pool's line: live fire times before backfilled
    ones, then the oldest fire time first."""
    backfilled = execution.trigger_kind is TriggerKind.BACKFILL
    return (backfilled, execution.scheduled_at, execution.eid)


def waits_in_turn(execution: Execution, spec: TaskSpec | None) -> bool:
    """True for a backfilled run under ``forbid``: it waits for every older run of its
    task, the retries and resumes of older fire times planned for later among them (so its
    start needs those read, see ``Holder.planned``)."""
    backfilled = execution.trigger_kind is TriggerKind.BACKFILL
    return backfilled and spec is not None and spec.concurrency == "forbid"


def wait_in_turn(older: tuple[Holder, ...], now: datetime) -> Wait:
    """How a backfilled run waits under ``forbid`` for the ``older`` runs of its task (active
    ones, waiting ones of older fire times, retries planned for later): decided again within
    ``WAIT_RECHECK`` when it is next (no waiting run is older), else within ``WAIT_IN_LINE``:
    it cannot start before the waiting one ahead of it, and an end here of a run of its task
    wakes it anyway.
    So a backfill of thousands of fire times is decided again about once a second while one
    of them runs, not thousands of times a second (each decision reads every waiting run)."""
    why = f"waiting for execution {older[0].eid} to end (concurrency: forbid)"
    behind = any(other.status is Status.SCHEDULED and not other.planned for other in older)
    until = now + (WAIT_IN_LINE if behind else WAIT_RECHECK)
    return Wait(Waiting(WaitingFor.CONCURRENCY, why), until)


def room_in_pool(execution: Execution, pool: PoolGate, now: datetime) -> Wait | None:
    """None when ``execution`` may start now in ``pool``; else how it waits. A run starts
    when fewer than ``max_running`` of the pool's executions are active, counting the runs
    ahead of it in the pool's line as started (they go first), and when ``max_per_second``
    lets a trigger leave now; else it waits: for a slot, decided again within
    ``WAIT_RECHECK`` (at once when one frees on this node); for the pace, until its turn."""
    place = in_line(execution)
    ahead = sum(1 for other in pool.line if other < place and other[2] != execution.eid)
    if pool.max_running is not None and pool.running + ahead >= pool.max_running:
        why = f"waiting for pool {pool.name} ({pool.running} of {pool.max_running} running)"
        return Wait(Waiting(WaitingFor.POOL, why), now + WAIT_RECHECK)
    due = pool.next_trigger_at
    if pool.max_per_second is not None and due is not None and (ahead or due > now):
        turn = max(due, now) + timedelta(seconds=ahead / pool.max_per_second)
        if turn > now:
            why = f"waiting for pool {pool.name} (max_per_second: {pool.max_per_second:g})"
            return Wait(Waiting(WaitingFor.POOL, why), turn)
    return None

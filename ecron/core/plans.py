"""What the scheduling rules decide on and decide: the gate a start is decided at, and a
claim's plan for a due task. Domain types, like executions: the rules (``planning``) make
and read them, the store only carries them in and out of its transactions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ecron.core.model import Execution
from ecron.core.status import Status, TriggerKind


@dataclass(frozen=True, slots=True)
class Lease:
    """A node's lease on the database (DESIGN.md, "Scale"): the node, and the epoch of its
    lease. Everything the node holds is held under one epoch; renewing the lease is one write
    whatever the number of executions, and every fenced write names the lease it was made
    under, landing only while the node's lease still has that epoch. A node whose lease ran
    out is fenced (its epoch raised by whoever takes its work over, or by itself when it takes
    its lease again), so nothing it wrote under the old epoch can land any more."""

    node: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Holder:
    """An active execution as a start decision sees it, or one waiting to start, or a
    retry or resume planned for later (``planned``: SCHEDULED, not waiting; only a
    backfilled run under ``forbid`` waits for it, so that a backfill runs each fire time's
    retry before the next fire time)."""

    eid: str
    status: Status
    scheduled_at: datetime
    trigger_kind: TriggerKind
    planned: bool = False


#: Where a run waiting for its pool stands in line: live fire times before backfilled ones,
#: then the oldest fire time first (``backfilled``, ``scheduled_at``, ``eid``).
InLine = tuple[bool, datetime, str]


@dataclass(frozen=True, slots=True)
class PoolGate:
    """What starting a run of a pool's task is decided on besides its task's gate, read in
    the start's transaction (the pool's row locked on PostgreSQL): the authority on a
    cluster. The limits are the pool's settings; the rest is the cluster's state."""

    name: str
    max_running: int | None = None
    max_per_second: float | None = None
    #: Executions of the pool's tasks PENDING or RUNNING, on every node.
    running: int = 0
    #: The pool's runs that wait for its room or its pace, in the order they start.
    line: tuple[InLine, ...] = ()
    #: The next moment a trigger of the pool may leave under ``max_per_second``.
    next_trigger_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Gate:
    """What starting a task's executions is decided on, read in the start's transaction:
    the authority on a cluster, whatever each node remembers."""

    paused: bool
    paused_reason: str | None
    #: No longer in the config (or never was).
    retired: bool
    #: The task's active executions (PENDING, RUNNING), those waiting to start, and the
    #: retries and resumes planned for later (``Holder.planned``), oldest fire time first.
    active: tuple[Holder, ...] = ()
    #: Fire times of the task's schedule claimed for later (when asked for).
    later: tuple[datetime, ...] = ()
    #: Its pool's gate, when it has a pool.
    pool: PoolGate | None = None
    #: No trigger of the task before this (the service's ``Retry-After``): its pool's moment
    #: when it has a pool (one ``Retry-After`` holds back every task of the pool), else its
    #: own (``core.held_back`` decides on it).
    held_back_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class FirePlan:
    """What to do with a task whose fire time is due, decided by the scheduler's policy.

    ``executions`` are inserted (SCHEDULED ones claimed by the calling node, SKIPPED ones
    as a record); a fire time that already has an execution is left alone.
    ``next_fire_at`` replaces the task's fire time; ``when_taken`` replaces it instead when
    the plan runs a fire time and every execution of the plan is refused for a key that is
    taken (an ``after`` task, whose next fire time waits for an execution that will now
    never exist: the clock stepped back onto an older fire time).
    """

    next_fire_at: datetime | None
    executions: Sequence[Execution] = ()
    #: Fire times its calendar or blackouts planned out, by reason (``calendar``, ``blackout``).
    excluded: Mapping[str, int] = field(default_factory=dict)
    #: The next fire time of an ``after`` task if every execution's key was taken already.
    when_taken: datetime | None = None

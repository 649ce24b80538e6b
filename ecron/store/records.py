"""What the store's operations take and give back, as plain records: a task as stored, a
due task, what a claim, a start and a sync did, a page of executions, and the callbacks
(``Planner``, ``Decider``) an operation calls inside its transaction."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ecron.clock import Reading
from ecron.core import Execution, FirePlan, Gate
from ecron.store.changes import TaskSetChange

if TYPE_CHECKING:
    from ecron.config import TaskSpec


@dataclass(frozen=True, slots=True)
class TaskState:
    """A task as stored: its spec and where its schedule stands."""

    name: str
    spec: TaskSpec
    next_fire_at: datetime | None
    last_end_at: datetime | None
    paused: bool
    paused_reason: str | None
    consecutive_failures: int
    retired: bool
    version: int
    #: When its spec was last synced (added, or changed).
    updated_at: datetime | None = None
    #: When it was added, and the end of its newest SUCCESS (``expect``).
    created_at: datetime | None = None
    last_success_at: datetime | None = None
    #: When ``task_overdue`` was last raised for it.
    overdue_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Adopted:
    """An execution taken over (as it now is: held by the node that took it), and the node
    that held it before (None: nobody, it was let go)."""

    execution: Execution
    previous_owner: str | None


@dataclass(frozen=True, slots=True)
class Renewal:
    """What renewing a node's lease found: how many nodes hold a live lease (this one
    included), and the database's clock read by the same statement (None where the
    database has no clock of its own: SQLite)."""

    live_nodes: int
    reading: Reading | None


@dataclass(frozen=True, slots=True)
class DueTask:
    """A task whose next fire time is due, as a claim reads it. Its spec is the loaded
    config's: ``spec_hash`` tells whether the row was synced from the same config."""

    name: str
    next_fire_at: datetime
    spec_hash: str
    version: int


#: Decides a due task's fate inside the claim transaction; None leaves the task alone (this
#: node does not know it, or knows another version of it). Called again when the
#: transaction is retried.
Planner = Callable[[DueTask], FirePlan | None]


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim transaction did."""

    #: The executions inserted (SCHEDULED and SKIPPED), in plan order.
    executions: list[Execution]
    #: How many due tasks it read, and how many of them it advanced.
    read: int
    advanced: int
    #: The ``excluded`` of the plans it carried out, per task.
    excluded: dict[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PoolState:
    """Where a pool stands, on every node: its executions PENDING or RUNNING, its runs that
    wait in its line, and until when the service asked for no trigger (``Retry-After``)."""

    running: int
    waiting: int
    held_back_until: datetime | None


@dataclass(frozen=True, slots=True)
class StartWrites:
    """What a start decision writes, in its own transaction: compare-and-set writes of
    claimed executions (``(before, after)``) and new runs to insert (a run people asked
    for, a resume), each inserted unless its key is taken."""

    writes: Sequence[tuple[Execution, Execution]] = ()
    inserts: Sequence[Execution] = ()
    #: Pools whose next trigger moment ``max_per_second`` moved: pool name to that moment.
    paces: Mapping[str, datetime] = field(default_factory=dict)


#: Decides, from each task's gate, what every start becomes (``StartWrites``). It may be
#: called more than once for one start (a retried transaction): only the last call's
#: decision counts.
Decider = Callable[[Mapping[str, Gate]], StartWrites]

#: One write and its result: ``(before, after, stored)``, ``stored`` None when the compare
#: failed.
Written = tuple[Execution, Execution, Execution | None]


@dataclass(frozen=True, slots=True)
class Started:
    """What a start transaction did: each write with its result, and the new runs that were
    inserted (those whose key was taken are not among them)."""

    written: list[Written]
    inserted: list[Execution]


@dataclass(frozen=True, slots=True)
class SyncResult:
    """How the task table followed the loaded config."""

    #: The rows it inserted, updated (a retired task that came back among them) and
    #: retired, by name.
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    #: What that changed, field by field (``changes.task_set_change``).
    changes: TaskSetChange = field(default_factory=TaskSetChange)


@dataclass(frozen=True, slots=True)
class Page:
    """A page of executions, newest first; ``next`` is the cursor for the following page."""

    items: list[Execution]
    next: str | None

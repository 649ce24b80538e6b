"""The store interface, in domain words. The contract of each operation is documented here, once.

One implementation (``SqlStore``) serves SQLite and PostgreSQL; dialect
differences are decided once, when it opens.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ecron.core import Execution, Status

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


@dataclass(frozen=True, slots=True)
class FirePlan:
    """What to do with a task whose fire time is due, decided by the scheduler's policy.

    ``executions`` are inserted (PENDING ones claimed by the calling node,
    SKIPPED ones as a record); a fire time that already has an execution is
    left alone. ``next_fire_at`` replaces the task's fire time.
    """

    next_fire_at: datetime | None
    executions: Sequence[Execution] = ()


#: Decides a due task's fate inside the claim transaction: (task, its active executions) -> plan.
Planner = Callable[[TaskState, Sequence[Execution]], FirePlan]


@dataclass(frozen=True, slots=True)
class SyncResult:
    """How the task table followed the loaded config."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Page:
    """A page of executions, newest first; ``next`` is the cursor for the following page."""

    items: list[Execution]
    next: str | None


class Store(abc.ABC):
    """Everything ecron keeps, behind operations named for what they mean.

    Every state write of an execution is a compare-and-set on its ``fence``
    (the lease) and ``version`` (the row): a write built on stale state is
    refused, never applied.
    """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release every connection."""

    # -- tasks ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def sync_tasks(self, specs: Mapping[str, TaskSpec], now: datetime) -> SyncResult:
        """Make the task table follow ``specs``: add new tasks, update changed ones
        (a changed schedule restarts from ``now``), retire missing ones (history kept)."""

    @abc.abstractmethod
    async def get_task(self, name: str) -> TaskState | None:
        """The task called ``name``, retired or not; None if it never existed."""

    @abc.abstractmethod
    async def list_tasks(self, *, include_retired: bool = False) -> list[TaskState]:
        """All tasks, by name."""

    @abc.abstractmethod
    async def next_fire_time(self) -> datetime | None:
        """The earliest ``next_fire_at`` of any task that can fire (for the scheduler's sleep)."""

    @abc.abstractmethod
    async def count_due(self, horizon: datetime, names: Collection[str] | None = None) -> int:
        """How many tasks (of ``names`` when given) are due at or before ``horizon``."""

    @abc.abstractmethod
    async def claim_due_fires(
        self, horizon: datetime, limit: int, plan: Planner, names: Collection[str] | None = None
    ) -> list[Execution]:
        """Claim up to ``limit`` tasks due at or before ``horizon`` (only those named in
        ``names`` when given: a node claims only what its own config knows).

        For each, in one transaction: ``plan`` decides, the task's fire time is
        advanced by a conditional update (only if nobody advanced it first),
        and the plan's executions are inserted. Returns the executions inserted
        (PENDING and SKIPPED). Several nodes may call this at once: each fire
        time is claimed by exactly one.
        """

    @abc.abstractmethod
    async def task_finished(
        self,
        name: str,
        finished_at: datetime,
        succeeded: bool | None,
        next_fire_at: datetime | None,
        *,
        pause_after: int = 0,
        pause_reason: str = "",
    ) -> TaskState | None:
        """Record that an execution of ``name`` ended, in one transaction: ``last_end_at``,
        the count of final failures in a row (reset by a success, raised by a failure, kept
        when ``succeeded`` is None), when given the next fire time (``after`` schedules),
        and, when the count reaches ``pause_after`` (> 0), pause the task with
        ``pause_reason``. Returns the task as it is now."""

    @abc.abstractmethod
    async def set_paused(
        self, name: str, paused: bool, reason: str | None, next_fire_at: datetime | None
    ) -> TaskState | None:
        """Pause (with ``reason``) or unpause ``name``; unpausing resets the failure count and
        restarts the schedule at ``next_fire_at``. None when there is no such task."""

    # -- executions -------------------------------------------------------------------------

    @abc.abstractmethod
    async def create_execution(self, execution: Execution) -> Execution | None:
        """Insert ``execution``; None when its fire-time key is already taken."""

    @abc.abstractmethod
    async def get_execution(self, eid: str) -> Execution | None:
        """The execution ``eid`` with its steps, or None."""

    @abc.abstractmethod
    async def list_executions(
        self,
        *,
        task: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> Page:
        """Executions newest first, filtered by task and status, older than ``before``."""

    @abc.abstractmethod
    async def active_executions(self, task: str) -> list[Execution]:
        """The task's PENDING and RUNNING executions, oldest first."""

    @abc.abstractmethod
    async def last_executions(self, names: Sequence[str]) -> dict[str, Execution]:
        """The newest execution of each named task that has one."""

    @abc.abstractmethod
    async def save(self, writes: Sequence[tuple[Execution, Execution]]) -> list[Execution | None]:
        """Write each ``(before, after)`` pair as a compare-and-set on ``before``'s
        fence and version, in one transaction. Returns, per pair, the stored
        execution (version raised) or None when the compare failed."""

    @abc.abstractmethod
    async def claim_runnable(
        self,
        node: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        names: Collection[str] | None = None,
    ) -> list[Execution]:
        """Take over active executions that nobody holds (no owner, or the lease
        expired before ``now``), of the tasks in ``names`` when given: owner becomes
        ``node``, fence is raised."""

    @abc.abstractmethod
    async def renew_leases(self, node: str, eids: Sequence[str], lease_until: datetime) -> set[str]:
        """Extend ``node``'s leases; returns the eids it still holds."""

    @abc.abstractmethod
    async def release_leases(self, node: str, eids: Sequence[str]) -> None:
        """Give up ``node``'s leases so another node can adopt them at once."""

    @abc.abstractmethod
    async def resumes_of(self, eids: Sequence[str]) -> dict[str, str]:
        """For each of ``eids`` that was resumed, the eid of its resume."""

    @abc.abstractmethod
    async def interrupted_unresumed(
        self, task: str, since: datetime, below_attempt: int, limit: int
    ) -> list[Execution]:
        """The task's executions that ended FAILED for an interrupting reason (interrupted,
        unreachable, lost) at or after ``since``, with ``resume_attempt`` below
        ``below_attempt``, and were not resumed; oldest first."""

    @abc.abstractmethod
    async def give_up_resume(self, eid: str, now: datetime) -> bool:
        """Record that ``eid`` will not be resumed automatically; True for the one caller
        that recorded it (any later call, from any node, gets False)."""

    @abc.abstractmethod
    async def stuck(
        self, now: datetime, silent_since: Mapping[str, datetime], limit: int
    ) -> list[Execution]:
        """Active executions that nothing seems to drive: past their deadline before
        ``now``, or (tasks in ``silent_since``) with no report or trigger since then."""

    @abc.abstractmethod
    async def force_claim(
        self, node: str, eids: Sequence[str], lease_until: datetime
    ) -> list[Execution]:
        """Take the leases of the active ones of ``eids`` whoever holds them (raising the
        fence, so the holder's writes are refused from now on)."""

    @abc.abstractmethod
    async def purge_history(self, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` final executions (with their steps) that finished before
        ``before``; how many were deleted."""

    # -- nodes and shared settings --------------------------------------------------------

    @abc.abstractmethod
    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        """The cluster-wide lock ``name``, tried without waiting: yields whether it is held."""

    @abc.abstractmethod
    async def heartbeat(self, node: str, now: datetime, *, host: str = "", pid: int = 0) -> None:
        """Register ``node`` or record that it is alive."""

    @abc.abstractmethod
    async def live_nodes(self, since: datetime) -> int:
        """How many nodes sent a heartbeat at or after ``since``."""

    @abc.abstractmethod
    async def remove_node(self, node: str) -> None:
        """Forget ``node`` (clean shutdown)."""

    @abc.abstractmethod
    async def shared_secret(self, candidate: str) -> str:
        """The cluster's callback secret: the stored one, or ``candidate`` stored now."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise if the database cannot be reached."""

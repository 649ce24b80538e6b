"""The store interface, in domain words. The contract of each operation is documented here, once.

One implementation (``SqlStore``) serves SQLite and PostgreSQL; dialect
differences are decided once, when it opens.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ecron.clock import Reading
from ecron.core import Execution, Lease, Status
from ecron.core.audit import AuditEntry, AuditPage, AuditQuery
from ecron.core.plans import PoolGate
from ecron.store.changes import FirstFires, StoredTask
from ecron.store.records import (
    Adopted,
    Claimed,
    Decider,
    Page,
    Planner,
    PoolState,
    Renewal,
    Started,
    SyncResult,
    TaskState,
)

if TYPE_CHECKING:
    from ecron.config import TaskSpec


class Store(abc.ABC):
    """Everything ecron keeps, behind operations named for what they mean.

    Every state write of an execution is a compare-and-set on its ``fence``
    (the lease) and ``version`` (the row): a write built on stale state is
    refused, never applied. A write that names the writing node's lease (``Lease``)
    lands only while that lease still has that epoch (the node was not fenced since).

    What a node holds (``owner``, ``owner_epoch``) leans on the node's own lease
    (``take_node_lease``, ``renew_node_lease``): one write per round renews all of it. A
    row is free to take over once nobody holds it, once its own short claim ran out (a
    fire time claimed ahead), or once the lease it is held under was fenced or replaced
    by a newer epoch (``claim_runnable``).

    Each operation is one transaction, run again from its start when the database
    fails it for a passing reason (``ecron.store.retry``); the callbacks an operation
    takes (``plan``, ``decide``, ``lease_for``) are then called again.
    """

    #: How many write transactions about different executions are worth having in flight
    #: at once (``StateWriter``): one where the database has one writer.
    write_concurrency: int = 1

    @abc.abstractmethod
    async def close(self) -> None:
        """Release every connection."""

    # -- tasks ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def sync_tasks(self, specs: Mapping[str, TaskSpec], firsts: FirstFires) -> SyncResult:
        """Make the task table follow ``specs`` at ``firsts.now``: add new tasks, update
        changed ones (a changed schedule restarts at its first fire time from now, as
        ``firsts`` says), retire missing ones (history kept). What it changed comes back
        as ``changes.task_set_change`` says it (``SyncResult.changes``)."""

    @abc.abstractmethod
    async def stored_tasks(self) -> dict[str, StoredTask]:
        """Every task row as ``changes.task_set_change`` compares it, retired ones too
        (one read, no write: ``ecron plan``)."""

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
    async def rewind_fire_times(self, moves: Mapping[str, tuple[datetime, datetime]]) -> None:
        """Move each named task's next fire time from ``old`` to ``new`` (``moves[name] ==
        (old, new)``) where it still is ``old``: a compare-and-set, so a claim that moved
        it meanwhile wins (the clock stepped back; see ``planning.rewound_fire_time``)."""

    @abc.abstractmethod
    async def count_due(self, horizon: datetime, limit: int | None = None) -> int:
        """How many tasks are due at or before ``horizon`` (counting at most ``limit``: a
        read that stops early, to learn whether any is due before taking the write lock)."""

    @abc.abstractmethod
    async def claim_due_fires(self, horizon: datetime, limit: int, plan: Planner) -> Claimed:
        """Claim up to ``limit`` tasks due at or before ``horizon``, earliest first, in one
        transaction: ``plan`` decides each one's fate (None: not this node's), the fire
        times of those it planned are advanced, and the plans' executions are inserted,
        many rows per statement. A fire time that already has an execution is left alone.
        Several nodes may call this at once: each due task is claimed by exactly one
        (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; one writer at a time on SQLite)."""

    @abc.abstractmethod
    async def start_executions(
        self,
        tasks: Collection[str],
        decide: Decider,
        *,
        later_of: Collection[str] = (),
        new: Collection[str] = (),
        active_of: Collection[str] | None = None,
        planned_of: Collection[str] = (),
        pools: Mapping[str, tuple[PoolGate, Collection[str]]] | None = None,
        lease: Lease | None = None,
    ) -> Started:
        """Start executions, in one transaction (its writes fenced by ``lease``, as
        ``save``'s): read the ``Gate`` of each task in ``tasks``
        (locking the task rows on PostgreSQL, so that two nodes never both start under
        ``forbid``), with its active executions for the tasks in ``active_of`` (None: all;
        a task whose rules never look at them, under ``concurrency: allow``, need not pay
        for reading thousands), its retries and resumes planned for later too for those in
        ``planned_of`` (``Holder.planned``: a backfilled run waits for them), and the fire
        times claimed for later for those in ``later_of``;
        ``decide`` turns them into writes of claimed executions, each a compare-and-set,
        and inserts of new runs (their eids are ``new``), each left out when its key (fire
        time, or ``resume_of``) is taken. ``pools``: the pools of those tasks, each with its
        limits (a ``PoolGate`` to fill in) and every task in it; each is read (its row
        locked on PostgreSQL, after the task rows) into the gates of its tasks, and its
        ``paces`` written."""

    @abc.abstractmethod
    async def hold_back(self, task: str, pool: str | None, until: datetime) -> None:
        """The service asked for no trigger before ``until`` (``Retry-After``): of ``pool``
        on every node, or of ``task`` when it has no pool. A later moment already set
        stays."""

    @abc.abstractmethod
    async def pool_states(self, pools: Mapping[str, Collection[str]]) -> dict[str, PoolState]:
        """Where each pool of ``pools`` (name to its tasks) stands, on every node."""

    @abc.abstractmethod
    async def task_finished(
        self,
        name: str,
        finished_at: datetime,
        succeeded: bool | None,
        next_fire_at: datetime | None,
    ) -> TaskState | None:
        """Record that an execution of ``name`` ended, in one transaction: ``last_end_at``,
        the count of final failures in a row (reset by a success, raised by a failure, kept
        when ``succeeded`` is None: an increment in SQL, so that ends recorded at once by
        several nodes all count), and when given the next fire time (``after`` schedules).
        Returns the task as it is now; whether that pauses it is decided by the caller
        (``planning.pauses``)."""

    @abc.abstractmethod
    async def tasks_succeeded(
        self, ends: Mapping[str, datetime], stamp: Collection[str] = ()
    ) -> None:
        """Record, in one transaction, that an execution of each task in ``ends`` succeeded
        at the time given: the count of failures in a row back to 0 (and ``last_end_at``,
        ``last_success_at``), for the tasks whose count was not 0 already; for the tasks in
        ``stamp``, ``last_success_at`` whatever their count."""

    @abc.abstractmethod
    async def last_successes(self) -> dict[str, datetime]:
        """``last_success_at`` of every task that is not retired and has one."""

    @abc.abstractmethod
    async def mark_overdue(self, task: TaskState, now: datetime) -> bool:
        """Record that ``task_overdue`` is raised for ``task`` at ``now``: a compare-and-set
        on its ``last_success_at`` and ``overdue_at`` as read, so that one caller, on one
        node, records it (and raises it); True for that caller."""

    @abc.abstractmethod
    async def set_paused(
        self,
        name: str,
        paused: bool,
        reason: str | None,
        next_fire_at: datetime | None,
        *,
        version: int,
    ) -> TaskState | None:
        """Pause (with ``reason``) or unpause ``name``, a compare-and-set on the ``version``
        the caller decided from; unpausing resets the failure count and restarts the
        schedule at ``next_fire_at``. The task as written, or None when it was not written
        (no such task, or the row has moved past ``version``: read it again and decide
        again)."""

    # -- executions -------------------------------------------------------------------------

    @abc.abstractmethod
    async def create_execution(self, execution: Execution) -> Execution | None:
        """Insert ``execution``; None when its fire-time key is already taken."""

    @abc.abstractmethod
    async def create_executions(self, executions: Sequence[Execution]) -> list[Execution]:
        """Insert ``executions`` (with their steps) in one transaction, leaving out each one
        whose fire-time key is taken (by a row already there, or by one before it in
        ``executions``); the ones inserted, in order. A backfill's runs, all or none written
        whatever the database does, so that an answer never names runs that are not there."""

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
        """Executions newest first, filtered by task and status, older than ``before``.
        Fire times claimed ahead (SCHEDULED) are not executions yet: they are listed only
        when ``status`` asks for them."""

    @abc.abstractmethod
    async def executions_by_prefix(self, prefix: str, limit: int) -> list[Execution]:
        """Up to ``limit`` executions (SCHEDULED ones too) whose eid starts with ``prefix``,
        with their steps, by eid. The eids are compared as bytes along an index, whatever the
        database's collation: a prefix names the same executions on every backend."""

    @abc.abstractmethod
    async def eid_neighbours(
        self, eids: Collection[str]
    ) -> dict[str, tuple[str | None, str | None]]:
        """For each of ``eids`` that is an execution's (SCHEDULED ones too), the eids just
        before and after it in byte order (None at either end): what it shares with them is
        what it shares with any other, so they tell the shortest prefix that names it alone
        (``ecron.ids.unique_prefix``). Three one-row index reads per eid."""

    @abc.abstractmethod
    async def recent_durations(
        self, names: Sequence[str], count: int
    ) -> dict[str, list[timedelta]]:
        """For each named task with successful runs, how long (first trigger to end) its
        ``count`` newest SUCCESS executions took, newest first; resumes are left out (they
        ran only part of the work). Many tasks cost one statement per hundred names, each
        task's part reading at most ``count`` rows of an index."""

    @abc.abstractmethod
    async def active_executions(self, task: str) -> list[Execution]:
        """The task's PENDING and RUNNING executions, oldest first."""

    @abc.abstractmethod
    async def last_executions(self, names: Sequence[str]) -> dict[str, Execution]:
        """The newest execution (not SCHEDULED) of each named task that has one."""

    @abc.abstractmethod
    async def claimed_fire_times(self, names: Sequence[str]) -> dict[str, datetime]:
        """For each named task with fire times claimed ahead (SCHEDULED, of its schedule),
        the earliest."""

    @abc.abstractmethod
    async def save(
        self,
        writes: Sequence[tuple[Execution, Execution]],
        then_insert: Mapping[str, Sequence[Execution]] | None = None,
        lease: Lease | None = None,
    ) -> list[Execution | None]:
        """Write each ``(before, after)`` pair as a compare-and-set on ``before``'s fence and
        version, in one transaction; the row takes ``after``'s version (higher than
        ``before``'s). An eid appears at most once. The state columns ``after`` changes are
        written (a claim's own ``lease_until`` among them); the owner, its epoch and the
        fence never. With ``lease`` (the writing node's), nothing lands unless that lease
        still has its epoch. Rows are locked in eid order. ``then_insert`` names, by eid,
        executions to insert in the same transaction when (and only when) that eid's write
        lands (an end and its retry: both or neither), as ``create_execution`` does.
        Returns, per pair, the stored execution or None when the compare failed."""

    @abc.abstractmethod
    async def claim_runnable(
        self,
        lease: Lease,
        now: datetime,
        lease_for: Callable[[Execution], datetime | None],
        limit: int,
        *,
        skip: Collection[str] | None = None,
    ) -> list[Adopted]:
        """Take over held executions (SCHEDULED, PENDING, RUNNING) that are free at ``now``:
        nobody holds them (let go); their own short claim ran out (a fire time claimed ahead
        by a node that did not start it); or the node lease they are held under ran out
        (that lease is fenced first, in the same transaction, so that its node cannot renew
        it any more), was fenced, or was replaced by a newer epoch of its node (the node
        lost its lease and took a new one). Without ``skip``, this node's own short claims
        are left alone (the frequent case); with it, they count too, except the eids in
        ``skip`` (those it still drives). Owner and epoch become ``lease``'s, the fence is
        raised, the own claim runs until ``lease_for(execution)`` (None: the node's lease
        holds it), called once per execution inside the transaction (so that it can count
        from the write, however late the transaction lands). A round that finds nothing
        free and no lease run out takes no write lock. Rows are locked in eid order."""

    @abc.abstractmethod
    async def take_node_lease(
        self, node: str, now: datetime, until: datetime, *, host: str = "", pid: int = 0
    ) -> Lease:
        """Register ``node`` with a lease until ``until``, or take its lease again (a new
        epoch: what it held under an older one is free from now on); the lease."""

    @abc.abstractmethod
    async def renew_node_lease(
        self, lease: Lease, now: datetime, until: datetime, ticks: Callable[[], float]
    ) -> Renewal | None:
        """Extend ``lease`` to ``until`` and record that the node is alive, in one statement
        whatever the node holds; None when the lease is no longer the node's (it was
        fenced: everything it held under it may have been taken over). On PostgreSQL the
        same statement reads the database's clock across its round trip (timed on
        ``ticks``) and counts the live leases."""

    @abc.abstractmethod
    async def live_nodes(self, now: datetime) -> int:
        """How many nodes hold a lease that runs at ``now`` or later."""

    @abc.abstractmethod
    async def let_go_node_lease(self, lease: Lease) -> None:
        """Give ``lease`` up (a clean stop): it is fenced at once, and everything held under
        it is free for another node to take over."""

    @abc.abstractmethod
    async def purge_nodes(self, before: datetime) -> int:
        """Forget the nodes whose lease ended (fenced, or ran out) and that sent nothing
        since ``before``, once they hold nothing; how many."""

    @abc.abstractmethod
    async def release_leases(self, node: str, eids: Sequence[str]) -> None:
        """Give up ``node``'s hold of ``eids`` so another node can adopt them at once. Only
        rows still held (SCHEDULED, PENDING, RUNNING) are released: one that ended meanwhile
        (a callback, another node) is never touched again."""

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
    async def unmoving(self, since: Mapping[str, datetime], limit: int) -> list[Execution]:
        """RUNNING executions of the tasks in ``since`` whose progress has not moved since
        that task's moment (``core.progress_since``) and that ``mark_stalled`` did not mark."""

    @abc.abstractmethod
    async def mark_stalled(self, eid: str, now: datetime) -> bool:
        """Record that ``execution_stalled`` is raised about ``eid`` at ``now`` (its version
        unchanged); True for the one caller that recorded it, from any node."""

    @abc.abstractmethod
    async def stuck(
        self, now: datetime, silent_since: Mapping[str, datetime], limit: int
    ) -> list[Execution]:
        """Active executions that nothing seems to drive: past their deadline before
        ``now``, or (tasks in ``silent_since``) with no report or trigger since then."""

    @abc.abstractmethod
    async def force_claim(self, lease: Lease, eids: Sequence[str]) -> list[Execution]:
        """Take the active ones of ``eids`` under ``lease`` whoever holds them (raising the
        fence, so the holder's writes are refused from now on)."""

    @abc.abstractmethod
    async def purge_history(self, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` final executions (with their steps) that finished before
        ``before``; how many were deleted."""

    # -- audit ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def add_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Append ``entries`` to the audit log, in one transaction."""

    @abc.abstractmethod
    async def audit_page(self, query: AuditQuery) -> AuditPage:
        """Audit entries matching ``query``, newest first."""

    @abc.abstractmethod
    async def purge_audit(self, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` audit entries older than ``before``; how many."""

    # -- chains -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def downstreams_of(self, eids: Sequence[str]) -> dict[str, list[str]]:
        """For each of ``eids`` that set off chained executions, their eids, oldest first."""

    @abc.abstractmethod
    async def ended_between(
        self, tasks: Sequence[str], since: datetime, until: datetime, limit: int
    ) -> list[Execution]:
        """Final executions of ``tasks`` that finished in ``[since, until)``, oldest end
        first, at most ``limit``, without their steps."""

    @abc.abstractmethod
    async def newest_of_fire_time(
        self, tasks: Sequence[str], scheduled_at: datetime
    ) -> dict[str, Execution]:
        """For each of ``tasks`` with an execution of fire time ``scheduled_at``, its newest
        (by eid: a retry or a resume comes after what it follows), without steps."""

    @abc.abstractmethod
    async def fire_times_taken(self, task: str, times: Sequence[datetime]) -> set[datetime]:
        """Those of ``times`` for which ``task`` has an execution (of any attempt)."""

    @abc.abstractmethod
    async def unfinished_backfills(self, task: str) -> int:
        """How many executions of ``task`` started by a backfill have not ended."""

    # -- nodes and shared settings --------------------------------------------------------

    @abc.abstractmethod
    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        """The cluster-wide lock ``name``, tried without waiting: yields whether it is held."""

    @abc.abstractmethod
    async def read_clock(self, ticks: Callable[[], float]) -> Reading | None:
        """The database's own clock, read across one round trip timed on ``ticks`` (a
        monotonic clock); None where the database has no clock of its own (SQLite, in this
        process: its time is this machine's)."""

    @abc.abstractmethod
    async def shared_secret(self, candidate: str) -> str:
        """The cluster's callback secret: the stored one, or ``candidate`` stored now."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise if the database cannot be reached."""

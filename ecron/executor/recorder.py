"""The Recorder: the one owner of writing a state change, whatever path it comes from
(trigger, poll, callback, cancel, start, skip).

``record`` applies the event with ``core.apply`` (the only code that changes a status),
writes the result as a compare-and-set on fence and version, and settles a lost compare by
reading the row again (``core.ownership``): under a lease that moved on (a higher fence)
this node lets go; else the same event is applied again to the newer state. An end carries
what must not be lost with it (its retry, planned by ``Retries``), inserted in the same
transaction. Every write that landed then goes through ``written``: the newest state is
held, a status change is logged, the trigger lag measured. What follows a change (the next
call, an end's book-keeping) is the engine's, asked of ``core.next_action``; ``ended``
writes the one canonical end line and the end's metrics when the engine books an end.

Changes that the rules do not act on (progress, a message, a failed probe, RUNNING after
the trigger's answer) are written behind (``StateWriter.save_soon``): the path goes on at
once with the state it wrote, and a compare lost later is settled the same way. Everything
else is durable before ``record`` returns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import structlog

from ecron.clock import Clock
from ecron.core import (
    CancelSent,
    Event,
    Execution,
    Ownership,
    Report,
    Status,
    Transition,
    TriggerKind,
    TriggerSent,
    apply,
    due_at,
    ownership,
)
from ecron.executor.calls import Calls, UnknownTask
from ecron.executor.held import Held
from ecron.executor.retries import Retries
from ecron.logs import writes
from ecron.metrics import Metrics, Series
from ecron.store.base import Store
from ecron.store.records import Written
from ecron.store.writer import StateWriter

log = structlog.get_logger(__name__)


class Change(NamedTuple):
    """What ``record`` did: the transition, the execution as stored (None: dropped, or the
    lease moved on), and what was inserted with an end (None: nothing was planned)."""

    transition: Transition
    stored: Execution | None
    inserted: Sequence[Execution] | None = None


#: How many times a lost compare-and-set is retried on fresh state before giving up.
RECORD_ATTEMPTS = 5
#: A change of progress alone is written within this much: the reports of one execution
#: in between become one write (SQLite writes a row in about 15 µs of CPU, most of a
#: poll's own cost past the HTTP call: bench.polls, docs/performance.md).
PROGRESS_SETTLE = timedelta(seconds=2)


class Recorder:
    """Applies events and writes their results; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        held: Held,
        calls: Calls,
        clock: Clock,
        metrics: Metrics,
        node_id: str,
        retries: Retries,
    ) -> None:
        self.store = store
        #: Groups the writes (its lost write-behind changes come back to this recorder).
        self.writer = StateWriter(
            store,
            on_lost=self._lost_behind,
            concurrency=store.write_concurrency,
            settle=PROGRESS_SETTLE,
        )
        self.held = held
        self.calls = calls
        self.clock = clock
        self.metrics = metrics
        self.node_id = node_id
        #: Plans what is written with an end (its retry), so that a node that dies right
        #: after the end cannot lose it.
        self.retries = retries
        self._background: set[asyncio.Task[None]] = set()
        self._series = Series(metrics)
        self._lost_leases = metrics.leases_lost

    async def record(
        self,
        execution: Execution,
        event: Event,
        *,
        as_owner: bool = True,
        now: datetime | None = None,
    ) -> Change:
        """Apply ``event`` and store the result; see the module docstring.

        ``as_owner``: the event comes from this node's lease (a poll, a trigger answer, a
        deadline), so it is dropped once the lease moved on; a callback or a person's
        cancel is not (it holds no lease), and is always durable. The stored execution is
        None when it was dropped or the row is gone. A ``cancel_due`` transition is not
        stored: the caller sends the cancel. ``now``: when the event happened, if the caller
        knows (else the clock is read).
        """
        before = execution
        transition = apply(before, event, now or self.clock.now())
        for _ in range(RECORD_ATTEMPTS):
            if transition.cancel_due or not transition.changed:
                return Change(transition, before)
            after = transition.after.evolve(version=before.version + 1)
            inserted: Sequence[Execution] | None = None
            lease = self.held.lease
            if as_owner and not _must_wait(transition, event):
                self.writer.save_soon(before, after, lease, settle=_progress_only(transition))
                stored: Execution | None = after
            else:
                if transition.finished:
                    inserted = await self.retries.with_end(after)
                stored = await self.writer.save(
                    before, after, then_insert=inserted or (), lease=lease
                )
            if stored is not None:
                self.written(transition, stored)
                return Change(transition, stored, inserted)
            fresh = await self.store.get_execution(before.eid)
            if _unmoved(before, fresh):  # refused by the node's lease, not by the row
                self.held.doubt_lease()
                return Change(transition, None)
            owned = ownership(execution, fresh) if as_owner else _unowned(fresh)
            if owned is Ownership.LOST:
                self.lost(execution, fresh)
                return Change(transition, None)
            assert fresh is not None
            if owned is Ownership.ENDED:
                self.ended_elsewhere(fresh)
                return Change(
                    Transition(fresh, fresh, ignored=f"execution is {fresh.status}"), fresh
                )
            before = fresh
            transition = apply(before, event, self.clock.now())
        log.warning("record_gave_up", execution_id=execution.eid, attempts=RECORD_ATTEMPTS)
        return Change(transition, None)

    def written_elsewhere(self, written: Written) -> Change:
        """A write made in another transaction (a start): the change as ``record`` would
        say it, followed as ``record`` does (or let go, when its compare failed)."""
        before, after, stored = written
        if stored is None:
            self.let_go(before.eid, "the lease moved on", before.fence)
            return Change(Transition(before, after), None)
        transition = Transition(before, after)
        self.written(transition, stored)
        return Change(transition, stored)

    def written(self, transition: Transition, stored: Execution) -> None:
        """What follows a change that was written: hold the newest state, log a status
        change, measure the trigger lag."""
        self.held.remember(stored)
        before = transition.before
        if (before.status is not stored.status or before.reason is not stored.reason) and writes(
            logging.INFO
        ):
            log.info(
                "execution_status_changed",
                task=stored.task,
                execution_id=stored.eid,
                attempt=stored.attempt,
                node=self.node_id,
                status=stored.status.value,
                previous=before.status.value,
                reason=None if stored.reason is None else stored.reason.value,
            )
        if before.triggered_at is None and stored.triggered_at is not None:
            lag = self.trigger_lag(stored)
            if lag is not None:
                self._series.trigger_lag(stored.task, lag)

    def ended(self, execution: Execution) -> None:
        """The one canonical line of an execution that ended, and its metrics (also for
        SKIPPED records written by a claim)."""
        reason = "" if execution.reason is None else execution.reason.value
        started = execution.triggered_at or execution.created_at
        assert execution.finished_at is not None
        duration = max(0.0, (execution.finished_at - started).total_seconds())
        if writes(logging.INFO):  # the line is built only when it is written
            lag = self.trigger_lag(execution)
            log.info(
                "execution_finished",
                task=execution.task,
                execution_id=execution.eid,
                status=execution.status.value,
                reason=reason or None,
                duration_seconds=round(duration, 3),
                attempt=execution.attempt,
                resume_attempt=execution.resume_attempt,
                trigger_lag_seconds=None if lag is None else round(lag, 3),
                steps=len(execution.steps) or None,
                scheduled_at=execution.scheduled_at.isoformat(),
                node=self.node_id,
            )
        self._series.finished(execution.task, execution.status.value, reason)
        if execution.triggered_at is not None:
            self._series.duration(execution.task, duration)

    def trigger_lag(self, execution: Execution) -> float | None:
        """Seconds from the fire time (plus jitter) to the first trigger, for fire times of
        the schedule and manual runs; None for retries and resumes, which wait on purpose."""
        if execution.triggered_at is None or execution.trigger_kind not in (
            TriggerKind.SCHEDULE,
            TriggerKind.MANUAL,
        ):
            return None
        return max(0.0, (execution.triggered_at - due_at(execution)).total_seconds())

    def warn_ignored(self, execution: Execution, report: Report) -> None:
        """Log each part of a report that was ignored (e.g. a progress that is not a number)."""
        for warning in report.warnings:
            log.warning(
                "report_field_ignored",
                task=execution.task,
                execution_id=execution.eid,
                detail=warning,
            )

    def lost(self, held: Execution, fresh: Execution | None) -> None:
        """A write of ``held`` found its row gone, or taken over by another node (a higher
        fence): this node stops driving it (``lease_lost``, counted in
        ``ecron_leases_lost``)."""
        if self.held.get(held.eid) is not None and fresh is not None:
            log.warning("lease_lost", task=held.task, execution_id=held.eid, held_by=fresh.owner)
        why = "the lease moved on" if fresh else "the row is gone"
        self.let_go(held.eid, why, held.fence)

    def ended_elsewhere(self, fresh: Execution) -> None:
        """A write found the execution ended by a report this node held no lease for (a
        callback, a queue message or a person's cancel answered by another node): this node
        stops driving it; not a lost lease."""
        if self.held.get(fresh.eid) is not None:
            log.info(
                "execution_ended_elsewhere",
                task=fresh.task,
                execution_id=fresh.eid,
                status=fresh.status.value,
            )
        self.held.remember(fresh)

    def let_go(self, eid: str, why: str, fence: int | None = None) -> None:
        """This node no longer drives ``eid`` (with ``fence``: on that lease; see
        ``Held.forget``)."""
        if self.held.forget(eid, fence) is not None:
            log.debug("execution_let_go", execution_id=eid, reason=why)
            self._lost_leases.inc()

    async def hand_back(self, eid: str, unknown: UnknownTask) -> None:
        """This node does not know the task of ``eid``: release it for a node that does."""
        execution = self.held.forget(eid)
        if execution is None or execution.owner is None:
            return
        log.warning(
            "execution_handed_back", task=unknown.task, execution_id=eid, reason=str(unknown)
        )
        try:
            await self.store.release_leases(execution.owner, [eid])
        except Exception:
            log.exception("hand_back_failed", execution_id=eid)

    async def close(self, timeout: float = 2.0) -> None:
        """Let the rows being read again be read, then close the writer (the daemon
        stops)."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout)
        for task in list(self._background):
            task.cancel()
        await self.writer.close()

    def _lost_behind(self, before: Execution, after: Execution) -> None:
        """A write-behind change lost its compare: read the row again (in the background)."""
        task = asyncio.create_task(self._refresh(after), name=f"ecron-refresh-{before.eid}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _refresh(self, lost: Execution) -> None:
        held = self.held.get(lost.eid)
        if held is None or held.version > lost.version:
            return  # let go already, or a newer write is on its way and will settle it
        try:
            fresh = await self.store.get_execution(lost.eid)
        except Exception:
            log.exception("refresh_failed", execution_id=lost.eid)
            return
        if _unmoved(lost, fresh, written=True):  # refused by the node's lease
            self.held.doubt_lease()
            return
        owned = ownership(held, fresh)
        if owned is Ownership.LOST:
            self.lost(held, fresh)
        elif owned is Ownership.ENDED:
            assert fresh is not None
            self.ended_elsewhere(fresh)
        else:
            assert fresh is not None
            self.held.hold(fresh)  # the change is lost; the next report carries it again


def _unmoved(before: Execution, fresh: Execution | None, *, written: bool = False) -> bool:
    """True when a write over ``before`` (``written``: ``before`` is the state the write
    meant to store) was refused though its row is still as it was built on: what refused it
    was the lease it was made under (the node's lease fenced, or taken again since)."""
    if fresh is None:
        return False
    version = before.version - 1 if written else before.version
    return fresh.fence == before.fence and fresh.version == version


def _unowned(fresh: Execution | None) -> Ownership:
    """For a change made without a lease (a callback, a person's cancel): only whether the
    row is still there and not ended counts."""
    if fresh is None:
        return Ownership.LOST
    return Ownership.ENDED if fresh.is_final else Ownership.MINE


def _progress_only(transition: Transition) -> bool:
    """True for a change of progress alone (its message, when the report came): nothing
    else of the execution or its steps moved."""
    before, after = transition.before, transition.after
    if before.status is not after.status or before.reason is not after.reason:
        return False
    if before.probe_failures != after.probe_failures or before.waiting_for != after.waiting_for:
        return False
    return all(old.status is new.status for old, new in zip(before.steps, after.steps, strict=True))


def _must_wait(transition: Transition, event: Event) -> bool:
    """True for a change that must be durable before the path goes on: an end, a trigger or
    a cancel about to leave, a step that ended."""
    if transition.finished or isinstance(event, TriggerSent | CancelSent):
        return True
    before, after = transition.before, transition.after
    if before.reason is not after.reason or before.status is Status.SCHEDULED:
        return True
    return any(
        old.status is not new.status for old, new in zip(before.steps, after.steps, strict=True)
    )

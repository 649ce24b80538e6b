"""What follows the end of an execution: a retry, the count of final failures in a row
(and pausing), alerts, the next fire time of an ``after`` schedule (DESIGN.md,
"Scheduling rules"). The rules themselves are pure functions in ``ecron.planning``.

A success of a task on a fixed schedule changes only the task's count of failures (back to
0) and its last end: those are written for many tasks at once, within ``SUCCESS_LINGER``.
Everything else is written before ``finished`` returns. A retry is planned before the end
is written (``executor/retries.py``, asked by the recorder) and inserted in the end's own
transaction: an end whose node dies right after it still has its retry. ``finished``
returns the runs the end set off (its retry, the chained runs), for the engine to hold and
start; it starts nothing itself.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import datetime, timedelta

import structlog

from ecron.chains import Chains
from ecron.clock import Clock, Wakeup
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Reason, Status, TriggerKind
from ecron.executor.claimant import Claimant
from ecron.metrics import Metrics
from ecron.notify import Notifier
from ecron.planning import (
    Claim,
    auto_resume_spent,
    outcome_of,
    pause_reason,
    pauses,
    plan_retry,
    resumes_automatically,
)
from ecron.schedules import ScheduleKind
from ecron.snapshots import execution_snapshot
from ecron.store.base import Store
from ecron.store.records import TaskState

log = structlog.get_logger(__name__)

#: Reads and compare-and-sets of a task row to pause it, at most, when other writes keep
#: coming first (each of them changes the row, so this is decided again on fresh state).
PAUSE_ATTEMPTS = 5

#: Successes are recorded on their tasks at most this much later, many at once.
SUCCESS_LINGER = timedelta(milliseconds=50)
#: A success of a task without ``expect`` writes its row's ``last_success_at`` at most this
#: often (per node) when nothing else moves the row: the per-second tasks stay cheap.
SUCCESS_STAMP_EVERY = timedelta(minutes=1)


class Bookkeeping:
    """Book-keeping when executions end; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        metrics: Metrics,
        scheduler_wakeup: Wakeup,
        claimant: Claimant,
        notifier: Notifier | None = None,
    ) -> None:
        self.store = store
        #: What this node's claims are made of (under its lease as it is now).
        self.claimant = claimant
        #: Makes the runs of the tasks chained to those whose executions end.
        self.chains = Chains(
            store=store, clock=clock, specs=specs, claim=claimant.claim, metrics=metrics
        )
        self.metrics = metrics
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.specs = specs
        self.notifier = notifier
        #: Tasks whose last execution succeeded, not yet recorded: when it ended.
        self._successes: dict[str, datetime] = {}
        #: Of those, the ones whose ``last_success_at`` is written this time; and the last
        #: success of each task this node wrote.
        self._stamp: set[str] = set()
        self._stamped: dict[str, datetime] = {}
        self._flusher: asyncio.Task[None] | None = None
        #: Set when the daemon stops: a lingering write goes at once, never cancelled (a
        #: transaction cut off could leave SQLite's write lock held).
        self._closing = asyncio.Event()
        #: Rung when there is a new fire time to claim (an ``after`` schedule).
        self.scheduler_wakeup = scheduler_wakeup

    def claim(self, now: datetime) -> Claim:
        """This node's claim at ``now``."""
        return self.claimant.claim(now)

    async def finished(
        self, execution: Execution, written_with: Sequence[Execution] | None = None
    ) -> list[Execution]:
        """An execution ended: see the module docstring. ``written_with``: what ``Retries``
        planned and was written with the end (None: nothing was planned, plan it now). The
        runs it set off (a retry, chained runs): claimed by this node, to be started."""
        spec = self.specs.get(execution.task)
        if execution.status is Status.SKIPPED:
            await self._skipped(execution, spec)
            return []
        if execution.finished_at is None or spec is None:
            return []
        fixed = spec.fire_schedule.kind is not ScheduleKind.AFTER
        if execution.status is Status.SUCCESS:
            self.metrics.last_success.saw(execution.task, execution.finished_at.timestamp())
        if execution.status is Status.SUCCESS and fixed:
            self._succeeded(execution.task, execution.finished_at, spec)
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.create_task(
                    self._record_successes(), name="ecron-successes"
                )
            return await self.chain(execution)
        await self.flush()  # in order: a failure after a success counts from 0
        now = self.clock.now()
        task = await self.store.get_task(execution.task)
        paused = task is not None and task.paused
        retry = await self._retry(execution, spec, task, written_with)
        following = None
        if retry is None and not fixed and spec.enabled:
            excluded: Counter[str] = Counter()
            following = spec.fire_times.next(execution.finished_at, now, excluded)
            self.metrics.excluded(execution.task, excluded)
        resumed = resumes_automatically(execution, spec) and not paused
        if retry is None and auto_resume_spent(execution, spec):
            self.chain_exhausted(execution, "the chain has no resumes left")
        outcome = outcome_of(execution, retried=retry is not None, resumed=resumed)
        if outcome is False:
            kind = (
                "execution_failed" if execution.status is Status.FAILED else "execution_timed_out"
            )
            self.alert(kind, execution.task, execution=execution_snapshot(execution))
        await self.count(execution, spec, outcome, following, paused)
        if following is not None:
            self.scheduler_wakeup.ring()
        started = [] if retry is None else [retry]
        if retry is None and not resumes_automatically(execution, spec):
            started += await self.chain(execution)
        return started

    async def chain(self, execution: Execution) -> list[Execution]:
        """An execution ended for good: the runs of the tasks chained to it (a failure to
        make them is logged; the patrol's sweep makes them later)."""
        if not self.chains.chained(execution.task):
            return []
        try:
            return await self.chains.ended(execution)
        except Exception:
            log.exception("chain_start_failed", task=execution.task, execution_id=execution.eid)
            return []

    def _succeeded(self, task: str, at: datetime, spec: TaskSpec) -> None:
        """A success to record with the next batch; its time on the row too when the task
        has ``expect`` or this node last wrote one a while ago."""
        self._successes[task] = at
        stamped = self._stamped.get(task)
        if spec.expect is not None or stamped is None or at - stamped >= SUCCESS_STAMP_EVERY:
            self._stamp.add(task)
            self._stamped[task] = at

    async def _skipped(self, execution: Execution, spec: TaskSpec | None) -> None:
        """A fire time SKIPPED for overlap or misfire: the alert ``fire_skipped``; and an
        ``after`` task's found too late at its start gets its next fire time (no end of an
        execution will set it)."""
        if execution.reason in (Reason.OVERLAP, Reason.MISFIRE):
            self.alert(
                "fire_skipped",
                execution.task,
                reason=str(execution.reason),
                execution=execution_snapshot(execution),
            )
        ended = execution.finished_at
        late = execution.reason is Reason.MISFIRE
        if late and spec is not None and ended is not None and _after(spec):
            await self._restart_after(execution.task, spec, ended)

    async def close(self) -> None:
        """Record what is waiting, now (the daemon stops)."""
        self._closing.set()
        if self._flusher is not None:
            await self._flusher
        await self.flush()

    async def _record_successes(self) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), SUCCESS_LINGER.total_seconds())
        await self.flush()

    async def flush(self) -> None:
        """Record the successes not yet recorded."""
        ends, self._successes = self._successes, {}
        stamp, self._stamp = self._stamp, set()
        if not ends:
            return
        try:
            await self.store.tasks_succeeded(ends, stamp)
        except Exception:
            log.exception("task_successes_not_recorded", tasks=len(ends))

    async def _retry(
        self,
        execution: Execution,
        spec: TaskSpec,
        task: TaskState | None,
        written_with: Sequence[Execution] | None,
    ) -> Execution | None:
        if written_with is not None:  # planned with the end, and in the database with it
            retry = next((e for e in written_with if e.trigger_kind is TriggerKind.RETRY), None)
        else:
            plan = plan_retry(
                execution, spec, self.claim(self.clock.now()), task.next_fire_at if task else None
            )
            retry = None if plan is None else await self.store.create_execution(plan)
        if retry is not None:
            start_at = None if retry.not_before is None else retry.not_before.isoformat()
            log.info(
                "retry_planned",
                task=retry.task,
                execution_id=retry.eid,
                attempt=retry.attempt,
                start_at=start_at,
            )
        return retry

    async def count(
        self,
        execution: Execution,
        spec: TaskSpec,
        outcome: bool | None,
        following: datetime | None,
        was_paused: bool,
    ) -> None:
        """Record the end on the task row, pausing it after N final failures in a row."""
        assert execution.finished_at is not None
        state = await self.store.task_finished(
            execution.task, execution.finished_at, outcome, following
        )
        state = await self._pause_if_due(execution, spec, outcome, state)
        if state is not None and state.paused and not was_paused:
            log.warning("task_paused", task=state.name, reason=state.paused_reason)
            self.alert(
                "task_paused",
                state.name,
                reason=state.paused_reason,
                execution=execution_snapshot(execution),
            )

    async def _pause_if_due(
        self, execution: Execution, spec: TaskSpec, outcome: bool | None, state: TaskState | None
    ) -> TaskState | None:
        """Pause the task when this end makes ``pause_after_failures`` in a row; the write is
        a compare-and-set on the row just read, decided again on a fresh read when another
        write (an end elsewhere, a person's unpause) came first."""
        for _ in range(PAUSE_ATTEMPTS):
            if state is None or not pauses(spec, state.consecutive_failures, state.paused, outcome):
                return state
            reason = pause_reason(spec, execution)
            written = await self.store.set_paused(
                state.name, True, reason, None, version=state.version
            )
            if written is not None:
                return written
            state = await self.store.get_task(state.name)
        return state

    async def stalled_after_tasks(self, now: datetime) -> tuple[int, list[Execution]]:
        """Book the last end of each ``after`` task left without a next fire time, once the
        end is older than ``lease_ttl`` (its own node would have booked it by then): how
        many, and the runs that booking set off (a retry, chained runs). Such a task would
        never fire again: the node that wrote the end died, or lost the database, before
        recording it on the task."""
        names = [name for name, spec in self.specs.items() if _after(spec)]
        if not names:
            return 0, []
        settled = now - self.settings.lease_ttl
        stalled = [
            t.name
            for t in await self.store.list_tasks()
            if t.name in names and t.next_fire_at is None and not t.paused
        ]
        last = await self.store.last_executions(stalled)
        restarted, started = 0, []
        for name in stalled:
            execution = last.get(name)
            if execution is not None and (
                execution.finished_at is None or execution.finished_at > settled
            ):
                continue  # still running, or ended so recently that its node may be booking it
            if await self._held(name):
                continue  # an execution claimed ahead, or a retry waiting: its end sets it
            log.warning(
                "after_task_restarted",
                task=name,
                execution_id=None if execution is None else execution.eid,
                reason="its last end was never recorded on the task",
            )
            if execution is None or execution.status is Status.SKIPPED:
                ended = now if execution is None else execution.finished_at or now
                await self._restart_after(name, self.specs[name], ended)
            else:
                started += await self.finished(execution)  # all its own node did not do
            restarted += 1
        return restarted, started

    async def _held(self, name: str) -> bool:
        """True while the task has an active execution or one claimed ahead (SCHEDULED)."""
        if await self.store.active_executions(name):
            return True
        claimed = await self.store.list_executions(task=name, status=Status.SCHEDULED, limit=1)
        return bool(claimed.items)

    async def _restart_after(self, name: str, spec: TaskSpec, ended: datetime) -> None:
        """Give an ``after`` task that has none a next fire time, ``after`` from now (when
        nothing active will end and set it)."""
        task = await self.store.get_task(name)
        if task is None or task.paused or task.next_fire_at is not None:
            return
        if await self.store.active_executions(name):
            return  # its end will set the next fire time
        now = self.clock.now()
        following = spec.fire_times.next(now, now)  # calendars and blackouts applied
        await self.store.task_finished(name, ended, None, following)
        if following is not None:
            self.scheduler_wakeup.ring()

    def chain_exhausted(self, execution: Execution, why: str) -> None:
        """An interrupted execution will not be resumed any more: say so, and alert."""
        log.warning(
            "resume_chain_exhausted",
            task=execution.task,
            execution_id=execution.eid,
            resume_attempt=execution.resume_attempt,
            reason=why,
        )
        self.alert(
            "resume_chain_exhausted",
            execution.task,
            reason=why,
            execution=execution_snapshot(execution),
        )

    async def give_up_resume(self, execution: Execution, why: str) -> list[Execution]:
        """An automatic resume that cannot happen in time (the patrol's last chance within
        ``resume.within``): the failure becomes final, counted and alerted like any other;
        the chained runs that sets off."""
        spec = self.specs.get(execution.task)
        if spec is None or not await self.store.give_up_resume(execution.eid, self.clock.now()):
            return []  # another node's patrol gave it up already
        self.chain_exhausted(execution, why)
        self.alert("execution_failed", execution.task, execution=execution_snapshot(execution))
        task = await self.store.get_task(execution.task)
        await self.count(execution, spec, False, None, task is not None and task.paused)
        return await self.chain(execution)

    def alert(self, kind: str, task: str, **details: object) -> None:
        """Send alert ``kind`` about ``task`` (in the background)."""
        if self.notifier is not None:
            self.notifier.event(kind, task, self.clock.now(), **details)


def _after(spec: TaskSpec) -> bool:
    """True for an enabled task on a fixed-delay (``after``) schedule."""
    return spec.enabled and spec.fire_schedule.kind is ScheduleKind.AFTER

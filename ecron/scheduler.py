"""The scheduler: claims due fire times, starts them on time, and adopts abandoned work.

Fire times are claimed a little ahead (``prefetch``), so the trigger can
leave exactly at the fire time: the loop sleeps until the earliest claimed
start, not until its next ``tick``. ``tick`` only bounds how long it goes
without looking for work that other nodes or the API created.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from ecron.clock import Clock
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Reason, Skipped, Status, TriggerKind
from ecron.executor.runner import Executor
from ecron.ids import new_eid
from ecron.schedules import ScheduleKind, jitter_offset, missed_fire_times, next_fire_time
from ecron.store.base import FirePlan, Store, TaskState

log = structlog.get_logger(__name__)

#: At most this many fire times of one task are handled in one claim.
MAX_FIRES_PER_CLAIM = 100
#: At most this many tasks are claimed in one transaction.
CLAIM_BATCH = 200


@dataclass(frozen=True, slots=True)
class Claim:
    """Who claims, when, and for how long: what a plan needs besides the task."""

    node: str
    now: datetime
    horizon: datetime
    lease_until: datetime
    new_id: Callable[[], str] = new_eid


def plan_fires(task: TaskState, claim: Claim) -> FirePlan:
    """Decide which of a task's due fire times run, which are SKIPPED, and the next one.

    Pure: ``claim.now`` is the time. A fire time more than ``misfire.grace``
    late follows ``misfire.policy``: ``skip`` records all late ones SKIPPED
    ``misfire``; ``run_once`` runs the latest late one and skips the rest;
    ``run_all`` runs them all. Fire times still on time always run.
    """
    spec = task.spec
    assert task.next_fire_at is not None
    due, following = missed_fire_times(
        spec.fire_schedule, task.next_fire_at, claim.horizon, MAX_FIRES_PER_CLAIM
    )
    late = [when for when in due if claim.now - when > spec.misfire.grace]
    run = [when for when in due if when not in late]
    skip: list[datetime] = []
    if spec.misfire.policy == "run_all":
        run = late + run
    elif spec.misfire.policy == "run_once" and late:
        run = [late[-1], *run]
        skip = late[:-1]
    else:
        skip = late
    if spec.fire_schedule.kind is ScheduleKind.AFTER:
        # Fixed delay: the next fire time is set when the execution ends; if none runs, from now.
        following = None if run else next_fire_time(spec.fire_schedule, claim.now, claim.now)
    executions = [_pending(task.name, when, claim) for when in run]
    executions += [_skipped(task.name, when, claim) for when in skip]
    return FirePlan(next_fire_at=following, executions=executions)


def _pending(task: str, when: datetime, claim: Claim) -> Execution:
    return Execution(
        eid=claim.new_id(),
        task=task,
        scheduled_at=when,
        created_at=claim.now,
        owner=claim.node,
        lease_until=claim.lease_until,
        fence=1,
    )


def _skipped(task: str, when: datetime, claim: Claim) -> Execution:
    return Execution(
        eid=claim.new_id(),
        task=task,
        scheduled_at=when,
        created_at=claim.now,
        status=Status.SKIPPED,
        reason=Reason.MISFIRE,
        message="the fire time was found too late (misfire policy)",
        finished_at=claim.now,
    )


def overlapping(execution: Execution, active: Sequence[Execution]) -> list[Execution]:
    """The active executions that started (or were due) before ``execution``."""
    mine = (execution.scheduled_at, execution.eid)
    return [other for other in active if (other.scheduled_at, other.eid) < mine]


class Scheduler:
    """Claims fire times, starts executions at their time, and takes over abandoned ones."""

    def __init__(
        self,
        *,
        store: Store,
        executor: Executor,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.specs = specs
        self._starts: list[tuple[datetime, int, Execution]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._next_takeover = datetime.min.replace(tzinfo=clock.now().tzinfo)
        self.claiming = True
        #: When the loop last went round, for readiness checks.
        self.last_tick: datetime | None = None

    def wake(self) -> None:
        """Look for work now instead of at the next tick."""
        self._wake.set()

    async def run(self) -> None:
        """The scheduler loop; runs until cancelled."""
        while True:
            self._wake.clear()
            now = self.clock.now()
            self.last_tick = now
            if self.claiming:
                await self._guarded(self.claim_fires(now), "claim_failed")
                if now >= self._next_takeover:
                    await self._guarded(self.take_over(now), "takeover_failed")
                    self._next_takeover = now + min(
                        self.settings.lease_ttl / 3, timedelta(seconds=2)
                    )
            await self.start_due(self.clock.now())
            await self._sleep()

    async def _guarded(self, work: Awaitable[None], event: str) -> None:
        try:
            await work
        except Exception:
            log.exception(event)

    async def _sleep(self) -> None:
        timeout = self.settings.tick.total_seconds()
        if self._starts:
            until_start = (self._starts[0][0] - self.clock.now()).total_seconds()
            timeout = min(timeout, until_start)
        if timeout <= 0:
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=timeout)

    async def claim_fires(self, now: datetime) -> None:
        """Claim the fire times due before ``now + prefetch`` and line them up to start."""
        claim = Claim(
            node=self.node_id,
            now=now,
            horizon=now + self.settings.prefetch,
            lease_until=now + self.settings.lease_ttl,
        )
        claimed = await self.store.claim_due_fires(
            claim.horizon, CLAIM_BATCH, lambda task, _active: plan_fires(task, claim)
        )
        for execution in claimed:
            if execution.status is Status.SKIPPED:
                log.info(
                    "fire_skipped",
                    task=execution.task,
                    scheduled_at=execution.scheduled_at.isoformat(),
                    reason="misfire",
                )
                continue
            self._line_up(execution)

    def _line_up(self, execution: Execution) -> None:
        """Hold a claimed, never-triggered execution until its fire time (plus jitter)."""
        spec = self.specs.get(execution.task)
        delay = timedelta(0)
        if spec is not None:
            delay = jitter_offset(execution.task, execution.scheduled_at, spec.jitter)
        self.executor.hold(execution)
        heapq.heappush(self._starts, (execution.scheduled_at + delay, next(self._seq), execution))

    async def start_due(self, now: datetime) -> None:
        """Start every lined-up execution whose time has come."""
        while self._starts and self._starts[0][0] <= now:
            _, _, execution = heapq.heappop(self._starts)
            held = self.executor.inflight.get(execution.eid)
            if held is None:
                continue  # the lease was lost meanwhile
            await self._guarded(self._start(held), "start_failed")

    async def _start(self, execution: Execution) -> None:
        spec = self.specs.get(execution.task)
        if spec is not None and spec.concurrency == "forbid":
            active = overlapping(execution, await self.store.active_executions(execution.task))
            if active:
                message = f"execution {active[0].eid} was still {active[0].status}"
                await self.executor.record(execution, Skipped(Reason.OVERLAP, message))
                log.info(
                    "fire_skipped",
                    task=execution.task,
                    execution_id=execution.eid,
                    reason="overlap",
                )
                return
        self.executor.start(execution)

    async def take_over(self, now: datetime) -> None:
        """Adopt active executions nobody holds: a dead node's, or this node's before a restart."""
        adopted = await self.store.claim_runnable(
            self.node_id, now, now + self.settings.lease_ttl, CLAIM_BATCH
        )
        for execution in adopted:
            if execution.task not in self.specs:
                log.warning(
                    "adopted_execution_of_unknown_task",
                    task=execution.task,
                    execution_id=execution.eid,
                )
                continue
            log.info(
                "execution_adopted",
                task=execution.task,
                execution_id=execution.eid,
                status=str(execution.status),
            )
            if execution.status is Status.PENDING and execution.triggered_at is None:
                self._line_up(execution)  # never triggered: it starts like a fresh claim
            else:
                self.executor.adopt(execution)

    async def run_now(self, name: str) -> tuple[Execution, bool]:
        """Start ``name`` now (a manual run). Returns the execution and whether it is new:
        under ``concurrency: forbid`` an active execution is returned and nothing starts."""
        spec = self.specs[name]
        now = self.clock.now()
        if spec.concurrency == "forbid":
            active = await self.store.active_executions(name)
            if active:
                return active[0], False
        execution = Execution(
            eid=new_eid(),
            task=name,
            scheduled_at=now.replace(microsecond=now.microsecond // 1000 * 1000),
            created_at=now,
            trigger_kind=TriggerKind.MANUAL,
            owner=self.node_id,
            lease_until=now + self.settings.lease_ttl,
            fence=1,
        )
        created = await self.store.create_execution(execution)
        if created is None:
            raise RuntimeError(f"task {name!r}: a manual run at {now.isoformat()} already exists")
        self.executor.start(created)
        return created, True

    async def finished(self, execution: Execution) -> None:
        """Book-keeping when an execution ends: failure count, the next ``after`` fire time."""
        if execution.status is Status.SKIPPED or execution.finished_at is None:
            return
        spec = self.specs.get(execution.task)
        succeeded = {Status.SUCCESS: True, Status.FAILED: False, Status.TIMED_OUT: False}.get(
            execution.status
        )
        following = None
        if spec is not None and spec.fire_schedule.kind is ScheduleKind.AFTER and spec.enabled:
            following = next_fire_time(
                spec.fire_schedule, execution.finished_at, execution.finished_at
            )
        await self.store.task_finished(execution.task, execution.finished_at, succeeded, following)
        if following is not None:
            self.wake()

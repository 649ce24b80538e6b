"""The scheduler: claims due fire times, starts them on time, and adopts abandoned work.

Fire times are claimed a little ahead (``prefetch``), so the trigger can
leave exactly at the fire time: the loop sleeps until the earliest claimed
start, not until its next ``tick``. ``tick`` only bounds how long it goes
without looking for work that other nodes or the API created. The rules
themselves (misfire, overlap, retries, pause) are pure functions in
``ecron.planning``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Mapping
from contextlib import suppress
from datetime import datetime, timedelta

import structlog

from ecron.clock import Clock
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Reason, Skipped, Status, TriggerKind
from ecron.errors import Conflict, NotFound, NothingToResume
from ecron.executor.runner import Executor
from ecron.ids import new_eid
from ecron.planning import (
    Claim,
    auto_resume_spent,
    new_steps,
    outcome_of,
    overlapping,
    pause_reason,
    plan_fires,
    plan_resume,
    plan_retry,
    resumable,
    resumes_automatically,
)
from ecron.schedules import ScheduleKind, jitter_offset, next_fire_time
from ecron.snapshots import execution_snapshot
from ecron.store.base import Store, TaskState

log = structlog.get_logger(__name__)

#: At most this many tasks, or abandoned executions, are claimed in one transaction.
CLAIM_BATCH = 200
#: Up to this many due tasks are claimed at once whatever the number of nodes; above it, a
#: node claims its share (due tasks / live nodes) per tick, so that the nodes split the work
#: instead of the first one awake taking it all. Fire times are claimed ``prefetch`` ahead,
#: so a share per tick still claims everything in time.
SMALL_CLAIM = 5


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
        #: Nodes with a recent heartbeat (this one included), kept up to date by the daemon.
        self.live_nodes = 1
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
            await self.start_due(now)  # triggers due now leave before the next claim query
            more = False
            if self.claiming:
                try:
                    more = await self.claim_fires(now)
                except Exception:
                    log.exception("claim_failed")
                if now >= self._next_takeover:
                    await self._guarded(self.take_over(now), "takeover_failed")
                    self._next_takeover = now + min(
                        self.settings.lease_ttl / 3, timedelta(seconds=2)
                    )
            await self.start_due(self.clock.now())
            if more:
                await asyncio.sleep(0)  # a full share was claimed: there may be more, now
            else:
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

    def claim(self, now: datetime) -> Claim:
        """This node's claim at ``now``: its id, the prefetch horizon, the lease."""
        return Claim(
            node=self.node_id,
            now=now,
            horizon=now + self.settings.prefetch,
            lease_until=now + self.settings.lease_ttl,
        )

    async def claim_fires(self, now: datetime) -> bool:
        """Claim this node's share of the fire times due before ``now + prefetch`` and line
        them up to start; True when the share was full (more may be due)."""
        claim = self.claim(now)
        names = list(self.specs)
        due = await self.store.count_due(claim.horizon, names)
        if due == 0:
            return False
        share = min(CLAIM_BATCH, due if due <= SMALL_CLAIM else -(-due // max(1, self.live_nodes)))
        claimed = await self.store.claim_due_fires(
            claim.horizon,
            share,
            lambda task, _active: plan_fires(task, claim),
            names=names,
        )
        self.executor.metrics.claims.labels(kind="fire").inc(len(claimed))
        for execution in claimed:
            if execution.status is Status.SKIPPED:
                self.executor.metrics.executions_finished.labels(
                    task=execution.task, status=str(execution.status), reason=str(execution.reason)
                ).inc()
                log.info(
                    "fire_skipped",
                    task=execution.task,
                    scheduled_at=execution.scheduled_at.isoformat(),
                    reason=str(execution.reason),
                )
                continue
            self._line_up(execution)
        return share == CLAIM_BATCH and len({e.task for e in claimed}) >= share

    def _line_up(self, execution: Execution) -> None:
        """Hold a claimed, never-triggered execution until it is due: its fire time plus
        jitter, or for a retry its ``next_poll_at`` (the end of its backoff)."""
        spec = self.specs.get(execution.task)
        due = execution.scheduled_at
        if spec is not None:
            due += jitter_offset(execution.task, execution.scheduled_at, spec.jitter)
        if execution.next_poll_at is not None:
            due = max(due, execution.next_poll_at)
        self.executor.hold(execution)
        heapq.heappush(self._starts, (due, next(self._seq), execution))
        if self._starts[0][2] is execution:
            self.wake()

    async def start_due(self, now: datetime) -> None:
        """Start every lined-up execution whose time has come, all at once."""
        due: list[Execution] = []
        while self._starts and self._starts[0][0] <= now:
            _, _, execution = heapq.heappop(self._starts)
            held = self.executor.inflight.get(execution.eid)
            if held is not None and not held.is_final:  # else: lease lost, or cancelled
                due.append(held)
        if due:
            await asyncio.gather(*(self._guarded(self._start(e), "start_failed") for e in due))

    async def _start(self, execution: Execution) -> None:
        """Apply pause and concurrency at the moment of starting, then trigger."""
        spec = self.specs.get(execution.task)
        task = await self.store.get_task(execution.task)
        if spec is None or task is None or task.retired:
            await self._skip(execution, Reason.PAUSED, "the task is no longer in the config")
            return
        if task.paused and execution.trigger_kind is not TriggerKind.MANUAL:
            await self._skip(execution, Reason.PAUSED, task.paused_reason or "the task is paused")
            return
        if await self._misfired(execution, spec):
            await self._skip(execution, Reason.MISFIRE, "started too late (misfire policy)")
            return
        if spec.concurrency != "allow":
            active = overlapping(execution, await self.store.active_executions(execution.task))
            if active and spec.concurrency == "forbid":
                message = f"execution {active[0].eid} was still {active[0].status}"
                await self._skip(execution, Reason.OVERLAP, message)
                return
            await self._replace(active, execution)
        self.executor.start(execution)

    async def _misfired(self, execution: Execution, spec: TaskSpec) -> bool:
        """A fire time that starts more than ``misfire.grace`` late (handed back by a node that
        stopped, adopted after a crash) follows ``misfire.policy`` like one claimed late:
        ``skip`` skips it; ``run_once`` runs it only if no later fire time is waiting."""
        if execution.trigger_kind is not TriggerKind.SCHEDULE or spec.misfire.policy == "run_all":
            return False
        if self.clock.now() - execution.scheduled_at <= spec.misfire.grace:
            return False
        if spec.misfire.policy == "skip":
            return True
        active = await self.store.active_executions(execution.task)
        return any(
            other.scheduled_at > execution.scheduled_at
            and other.trigger_kind is TriggerKind.SCHEDULE
            for other in active
        )

    async def _skip(self, execution: Execution, reason: Reason, message: str) -> None:
        await self.executor.record(execution, Skipped(reason, message))
        log.info(
            "fire_skipped", task=execution.task, execution_id=execution.eid, reason=str(reason)
        )

    async def _replace(self, active: list[Execution], execution: Execution) -> None:
        """``concurrency: replace``: cancel the older active executions through the protocol."""
        for other in active:
            try:
                await self.executor.cancel(other.eid, f"replaced by execution {execution.eid}")
            except (Conflict, NotFound):
                continue  # it ended meanwhile
            log.info(
                "execution_replaced",
                task=execution.task,
                execution_id=other.eid,
                replaced_by=execution.eid,
            )

    async def take_over(self, now: datetime) -> None:
        """Adopt active executions nobody holds: a dead node's, or this node's before a restart."""
        known = list(self.specs) + list(self.executor.retired_specs)
        adopted = await self.store.claim_runnable(
            self.node_id, now, now + self.settings.lease_ttl, CLAIM_BATCH, names=known
        )
        self.executor.metrics.claims.labels(kind="takeover").inc(len(adopted))
        for execution in adopted:
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
        """Start ``name`` now (a manual run). Returns the execution and whether it is new.

        Manual runs obey ``concurrency``: under ``forbid`` an active execution is
        returned and nothing starts; under ``replace`` the active ones are cancelled first.
        """
        spec = self.specs[name]
        now = self.clock.now()
        if spec.concurrency != "allow":
            active = await self.store.active_executions(name)
            if active and spec.concurrency == "forbid":
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
        execution = execution.evolve(steps=new_steps(spec, execution.eid))
        created = await self.store.create_execution(execution)
        if created is None:
            raise Conflict(f"task {name!r}: a manual run at {now.isoformat()} already exists")
        if spec.concurrency == "replace":
            self.executor.hold(created)
            await self._replace(active, created)
        self.executor.start(created)
        return created, True

    async def finished(self, execution: Execution) -> None:
        """Book-keeping when an execution ends: a retry, the count of final failures in a
        row (and pausing), alerts, the next ``after`` fire time."""
        spec = self.specs.get(execution.task)
        if execution.status is Status.SKIPPED or execution.finished_at is None or spec is None:
            return
        now = self.clock.now()
        task = await self.store.get_task(execution.task)
        paused = task is not None and task.paused
        retry = await self._retry(execution, spec, task)
        following = None
        if retry is None and spec.fire_schedule.kind is ScheduleKind.AFTER and spec.enabled:
            following = next_fire_time(spec.fire_schedule, execution.finished_at, now)
        resumed = resumes_automatically(execution, spec) and not paused
        if retry is None and auto_resume_spent(execution, spec):
            self._chain_exhausted(execution, "the chain has no resumes left")
        outcome = outcome_of(execution, retried=retry is not None, resumed=resumed)
        if outcome is False:
            kind = (
                "execution_failed" if execution.status is Status.FAILED else "execution_timed_out"
            )
            self._alert(kind, execution.task, execution=execution_snapshot(execution))
        await self._count(execution, spec, outcome, following, paused)
        if following is not None:
            self.wake()

    async def _retry(
        self, execution: Execution, spec: TaskSpec, task: TaskState | None
    ) -> Execution | None:
        plan = plan_retry(
            execution, spec, self.claim(self.clock.now()), task.next_fire_at if task else None
        )
        retry = None if plan is None else await self.store.create_execution(plan)
        if retry is not None:
            start_at = None if retry.next_poll_at is None else retry.next_poll_at.isoformat()
            log.info(
                "retry_planned",
                task=retry.task,
                execution_id=retry.eid,
                attempt=retry.attempt,
                start_at=start_at,
            )
            self._line_up(retry)
        return retry

    async def _count(
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
            execution.task,
            execution.finished_at,
            outcome,
            following,
            pause_after=spec.pause_after_failures,
            pause_reason=pause_reason(spec, execution),
        )
        if state is not None and state.paused and not was_paused:
            log.warning("task_paused", task=state.name, reason=state.paused_reason)
            self._alert(
                "task_paused",
                state.name,
                reason=state.paused_reason,
                execution=execution_snapshot(execution),
            )

    def _chain_exhausted(self, execution: Execution, why: str) -> None:
        log.warning(
            "resume_chain_exhausted",
            task=execution.task,
            execution_id=execution.eid,
            resume_attempt=execution.resume_attempt,
            reason=why,
        )
        self._alert(
            "resume_chain_exhausted",
            execution.task,
            reason=why,
            execution=execution_snapshot(execution),
        )

    async def give_up_resume(self, execution: Execution, why: str) -> None:
        """An automatic resume that cannot happen in time (the patrol's last chance within
        ``resume.within``): the failure becomes final, counted and alerted like any other."""
        spec = self.specs.get(execution.task)
        if spec is None or not await self.store.give_up_resume(execution.eid, self.clock.now()):
            return  # another node's patrol gave it up already
        self._chain_exhausted(execution, why)
        self._alert("execution_failed", execution.task, execution=execution_snapshot(execution))
        task = await self.store.get_task(execution.task)
        await self._count(execution, spec, False, None, task is not None and task.paused)

    async def resume(self, eid: str, *, why: str) -> Execution:
        """Resume execution ``eid`` from its first step that did not succeed (``why``: who
        asked). Raises ``NotFound``, or ``Conflict`` when it cannot be resumed, was already
        resumed (naming that resume), or the task is running under ``concurrency: forbid``
        (under ``replace`` the running one is cancelled first)."""
        old = await self.store.get_execution(eid)
        if old is None:
            raise NotFound(f"no execution {eid!r}")
        if (refusal := resumable(old)) is not None:
            raise Conflict(refusal)
        if existing := (await self.store.resumes_of([eid])).get(eid):
            raise Conflict(f"execution {eid} was already resumed by {existing}")
        spec = self.specs.get(old.task)
        if spec is None:
            raise NotFound(f"task {old.task!r} is not in this node's config")
        active = [] if spec.concurrency == "allow" else await self.store.active_executions(old.task)
        if active and spec.concurrency == "forbid":
            raise Conflict(f"task {old.task!r} is running (execution {active[0].eid})")
        planned = plan_resume(old, spec, self.claim(self.clock.now()))
        if planned.steps and all(step.status is Status.SUCCESS for step in planned.steps):
            raise NothingToResume(
                f"execution {eid}: every step of task {old.task!r} as configured now succeeded"
            )
        created = await self.store.create_execution(planned)
        if created is None:
            existing = (await self.store.resumes_of([eid])).get(eid)
            raise Conflict(f"execution {eid} was already resumed by {existing}")
        log.info(
            "execution_resumed",
            task=old.task,
            execution_id=created.eid,
            resume_of=eid,
            resume_attempt=created.resume_attempt,
            by=why,
        )
        if active:
            self.executor.hold(created)
            await self._replace(active, created)
        self.executor.start(created)
        return created

    def _alert(self, kind: str, task: str, **details: object) -> None:
        if self.executor.notifier is not None:
            self.executor.notifier.event(kind, task, self.clock.now(), **details)

    async def set_paused(self, name: str, paused: bool, reason: str | None) -> TaskState:
        """Pause or unpause ``name`` (API); unpausing restarts its schedule from now."""
        spec = self.specs.get(name)
        if spec is None:
            raise NotFound(f"no task {name!r} in this node's config")
        now = self.clock.now()
        current = await self.store.get_task(name)
        if current is not None and not paused and not current.paused:
            return current  # not paused: unpausing changes nothing (no restart of the schedule)
        following = None
        if not paused and spec.enabled:
            following = next_fire_time(spec.fire_schedule, None, now)
        state = await self.store.set_paused(name, paused, reason, following)
        if state is None:
            raise NotFound(f"no task {name!r}")
        log.info("task_paused" if paused else "task_unpaused", task=name, reason=reason)
        self.wake()
        return state

"""The scheduler: claims due fire times, decides at each start whether it runs, takes over
abandoned work, and starts runs that people ask for.

Fire times are claimed a little ahead (``prefetch``), many per transaction, and held
(SCHEDULED) by the executor, which starts them exactly on time: ``tick`` only bounds how
long the loop goes without looking for work that other nodes or the API created. When a
claimed fire time falls due, ``start`` decides, in one transaction for all that fall due
together, whether it runs (pause, misfire, concurrency): that transaction is the authority
on a cluster. The rules themselves are pure functions in ``ecron.planning``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from contextlib import suppress
from datetime import datetime, timedelta

import structlog

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Status, Transition, TriggerKind, apply
from ecron.errors import Conflict, NotFound, NothingToResume
from ecron.executor.runner import Executor
from ecron.ids import new_eid
from ecron.leases import TAKEOVER_EVERY, Leases
from ecron.planning import (
    Claim,
    is_late,
    new_steps,
    plan_fires,
    plan_resume,
    resumable,
    start_event,
    start_time,
    started,
    to_replace,
)
from ecron.schedules import next_fire_time
from ecron.store.base import DueTask, FirePlan, Gate, Holder, Store, TaskState

log = structlog.get_logger(__name__)

#: How many times a new run looks for a free millisecond for its ``scheduled_at`` (two runs
#: asked for in the same millisecond on two nodes) before giving up.
MANUAL_KEY_TRIES = 100
_MILLISECOND = timedelta(milliseconds=1)


class Scheduler:
    """Claims fire times, decides their starts, and starts runs asked for."""

    def __init__(
        self,
        *,
        store: Store,
        executor: Executor,
        leases: Leases,
        bookkeeping: Bookkeeping,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
    ) -> None:
        self.store = store
        self.executor = executor
        self.leases = leases
        self.bookkeeping = bookkeeping
        self.recorder = executor.recorder
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.specs = specs
        self._wake = asyncio.Event()
        self._manual: dict[str, datetime] = {}
        self.claiming = True
        self._stopping = False
        #: When the loop last went round, for readiness checks.
        self.last_tick: datetime | None = None
        executor.starter = self.start
        bookkeeping.wake = self.wake

    def wake(self) -> None:
        """Look for work now instead of at the next tick."""
        self._wake.set()

    def stop(self) -> None:
        """Stop claiming; the loop ends after its current round."""
        self.claiming = False
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """The scheduler loop; runs until ``stop`` (between two rounds, never inside a
        transaction) or until cancelled."""
        while not self._stopping:
            self._wake.clear()
            now = self.clock.now()
            self.last_tick = now
            more = False
            if self.claiming:
                try:
                    more = await self.claim_fires(now)
                except Exception:
                    log.exception("claim_failed")
                if self.leases.takeover_due(now):
                    await self._guarded(self.take_over(now), "takeover_failed")
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
        timeout = min(self.settings.tick, TAKEOVER_EVERY).total_seconds()
        with suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=timeout)

    def claim(self, now: datetime) -> Claim:
        """This node's claim at ``now``: its id, the prefetch horizon, the leases."""
        return self.bookkeeping.claim(now)

    # -- claiming and starting fire times -------------------------------------------------

    async def claim_fires(self, now: datetime) -> bool:
        """Claim this node's share of the fire times due before ``now + prefetch`` and hand
        them to the executor to start on time; True when the share was full."""
        claim = self.claim(now)

        def plan(due: DueTask) -> FirePlan | None:
            spec = self.specs.get(due.name)
            if spec is None or spec.digest != due.spec_hash:
                return None  # not this node's config: a node that has it claims it
            return plan_fires(due.name, spec, due.next_fire_at, claim)

        claimed, more = await self.leases.claim_fires(now, plan)
        for execution in claimed.executions:
            if execution.status is Status.SKIPPED:
                await self.recorder.ended(execution)
            else:
                spec = self.specs.get(execution.task)
                self.executor.start_at(execution, start_time(execution, spec))
        return more

    async def start(self, executions: list[Execution]) -> list[Execution]:
        """Decide, in one transaction, whether each claimed execution starts now (see
        ``planning.start_event``): the ones that started, PENDING, their triggers to send.
        Under ``concurrency: replace`` the older executions are cancelled first."""
        now = self.clock.now()
        ordered = sorted(executions, key=lambda e: (e.scheduled_at, e.eid))
        late = [e.task for e in ordered if is_late(e, self.specs.get(e.task), now)]
        waiting: list[tuple[Execution, list[Holder]]] = []

        def decide(gates: Mapping[str, Gate]) -> list[tuple[Execution, Execution]]:
            waiting.clear()  # a retried transaction decides again: only the last decision counts
            writes = []
            starting: dict[str, list[Holder]] = {}
            for execution in ordered:
                gate = gates[execution.task]
                mine = starting.setdefault(execution.task, [])
                gate = Gate(gate.paused, gate.paused_reason, gate.retired, (*gate.active, *mine))
                event = start_event(execution, self.specs.get(execution.task), gate, now)
                if event is None:
                    waiting.append((execution, to_replace(execution, gate)))
                    continue
                after = apply(execution, event, now).after
                if after.status is Status.PENDING:
                    after = after.evolve(lease_until=self.leases.full_until(now))
                    mine.append(
                        Holder(after.eid, after.status, after.scheduled_at, after.trigger_kind)
                    )
                writes.append((execution, after.evolve(version=execution.version + 1)))
            return writes

        names = {e.task for e in ordered}
        results = await self.store.start_executions(names, decide, later_of=late)
        await self.recorder.written_many(results)
        for execution, older in waiting:
            self.executor.spawn(self._replace_then_start(execution, older), "ecron-replace")
        return [s for _, _, s in results if s is not None and s.status is Status.PENDING]

    async def _replace_then_start(self, execution: Execution, older: list[Holder]) -> None:
        """``concurrency: replace``: cancel the older executions through the protocol, then
        start this one (if it is still held: it may have been cancelled meanwhile)."""
        await self._replace(older, execution.eid)
        current = self.executor.held.get(execution.eid)
        if current is None or current.status is not Status.SCHEDULED:
            return
        for execution_started in await self.start([current]):
            self.executor.trigger(execution_started)

    async def _replace(self, active: list[Holder], by: str) -> None:
        """Cancel ``active`` executions, replaced by execution ``by``."""
        for other in active:
            try:
                await self.executor.cancel(other.eid, f"replaced by execution {by}")
            except (Conflict, NotFound):
                continue  # it ended meanwhile
            log.info("execution_replaced", execution_id=other.eid, replaced_by=by)

    async def take_over(self, now: datetime) -> None:
        """Adopt executions nobody holds: a dead node's claims (at once) and active
        executions (once their lease expired), or this node's before a restart."""
        for execution in await self.leases.take_over(now, self.executor.calls.knows):
            log.info(
                "execution_adopted",
                task=execution.task,
                execution_id=execution.eid,
                status=execution.status.value,
            )
            self.executor.adopt(execution)

    # -- runs people ask for --------------------------------------------------------------

    async def run_now(self, name: str) -> tuple[Execution, bool]:
        """Start ``name`` now (a manual run). Returns the execution and whether it is new.

        Manual runs obey ``concurrency``: under ``forbid`` an active execution is
        returned and nothing starts; under ``replace`` the active ones are cancelled first.
        Any number of runs may be asked for in one millisecond: each gets its own
        ``scheduled_at`` (the moment asked for, moved on by a millisecond where taken).
        """
        spec = self.specs[name]
        now = self.clock.now()
        if spec.concurrency == "forbid":
            local = [self.executor.held[eid] for eid in self.executor.held.active_of(name)]
            if local:
                return min(local, key=lambda e: (e.scheduled_at, e.eid)), False
        eid = new_eid()
        if spec.concurrency == "replace":
            active = await self.store.active_executions(name)
            holders = [Holder(e.eid, e.status, e.scheduled_at, e.trigger_kind) for e in active]
            await self._replace(holders, eid)
        execution = Execution(
            eid=eid,
            task=name,
            scheduled_at=self._manual_time(name, now),
            created_at=now,
            trigger_kind=TriggerKind.MANUAL,
            owner=self.node_id,
            fence=1,
            steps=new_steps(spec, eid),
        )
        return await self._create_started(execution, spec, exclusive=spec.concurrency == "forbid")

    def _manual_time(self, name: str, now: datetime) -> datetime:
        """The moment asked for, to the millisecond, and never one this node gave already."""
        when = now.replace(microsecond=now.microsecond // 1000 * 1000)
        last = self._manual.get(name)
        if last is not None and when <= last:
            when = last + _MILLISECOND
        self._manual[name] = when
        return when

    async def _create_started(
        self, execution: Execution, spec: TaskSpec, *, exclusive: bool
    ) -> tuple[Execution, bool]:
        """Insert ``execution`` started (PENDING) and send its trigger; under ``exclusive``
        (forbid) an active execution is answered instead."""
        scheduled = execution
        for _ in range(MANUAL_KEY_TRIES):
            begun = started(scheduled, spec, self.claim(self.clock.now()))
            created = await (
                self.store.create_unless_active(begun)
                if exclusive
                else self.store.create_execution(begun)
            )
            if isinstance(created, Holder):
                active = await self.store.get_execution(created.eid)
                if active is not None:
                    return active, False
                continue  # it ended meanwhile: try again
            if created is not None:
                await self.recorder.written(Transition(scheduled, created), created)
                self.executor.trigger(created)
                return created, True
            scheduled = scheduled.evolve(  # another node's run took this millisecond
                scheduled_at=self._manual_time(execution.task, scheduled.scheduled_at)
            )
        raise Conflict(f"task {execution.task!r}: no free moment for a new run")

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
        claim = self.claim(self.clock.now())
        planned = plan_resume(old, spec, claim)
        if planned.steps and all(step.status is Status.SUCCESS for step in planned.steps):
            raise NothingToResume(
                f"execution {eid}: every step of task {old.task!r} as configured now succeeded"
            )
        if spec.concurrency == "replace":
            active = await self.store.active_executions(old.task)
            holders = [Holder(e.eid, e.status, e.scheduled_at, e.trigger_kind) for e in active]
            await self._replace(holders, planned.eid)
        begun = started(planned, spec, claim)
        created = await (
            self.store.create_unless_active(begun)
            if spec.concurrency == "forbid"
            else self.store.create_execution(begun)
        )
        if isinstance(created, Holder):
            raise Conflict(f"task {old.task!r} is running (execution {created.eid})")
        if created is None:
            existing = (await self.store.resumes_of([eid])).get(eid)
            raise Conflict(f"execution {eid} was already resumed by {existing}")
        await self.recorder.written(Transition(planned, created), created)
        log.info(
            "execution_resumed",
            task=old.task,
            execution_id=created.eid,
            resume_of=eid,
            resume_attempt=created.resume_attempt,
            by=why,
        )
        self.executor.trigger(created)
        return created

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

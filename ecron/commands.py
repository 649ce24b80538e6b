"""What people (and the patrol) ask a node to do: run a task now, cancel, take a callback's
report, resume, pause and unpause. The API calls these and nothing else of the engine; the
loops (scheduler, executor, patrol) only run.

Each command obeys the task's rules as the loops do (``concurrency``, pause): the rules
themselves are pure functions in ``ecron.planning``; what a command adds is the
transaction that makes it true on a cluster (``create_unless_active`` under ``forbid``)
and the trigger it hands to the executor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import structlog

from ecron.bookkeeping import PAUSE_ATTEMPTS, Bookkeeping
from ecron.clock import Clock
from ecron.config.model import TaskSpec
from ecron.core import Channel, Execution, Report, Status, Transition, TriggerKind
from ecron.errors import Conflict, NotFound, NothingToResume
from ecron.executor.runner import Executor
from ecron.ids import new_eid
from ecron.planning import new_steps, plan_resume, resumable, started
from ecron.store.base import Holder, Store, TaskState

log = structlog.get_logger(__name__)

#: How many times a new run looks for a free millisecond for its ``scheduled_at`` (two runs
#: asked for in the same millisecond on two nodes) before giving up.
MANUAL_KEY_TRIES = 100
_MILLISECOND = timedelta(milliseconds=1)


class Commands:
    """The commands of one node; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        executor: Executor,
        bookkeeping: Bookkeeping,
        clock: Clock,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        wake: Callable[[], None],
    ) -> None:
        self.store = store
        self.executor = executor
        self.bookkeeping = bookkeeping
        self.clock = clock
        self.node_id = node_id
        self.specs = specs
        #: Tells the scheduler to look for work now (after an unpause).
        self.wake = wake
        self._manual: dict[str, datetime] = {}

    def knows(self, name: str) -> bool:
        """True when task ``name`` is in this node's config."""
        return name in self.specs

    # -- runs ------------------------------------------------------------------------------

    async def run_now(self, name: str) -> tuple[Execution, bool]:
        """Start ``name`` now (a manual run). Returns the execution and whether it is new.

        Manual runs obey ``concurrency``: under ``forbid`` an active execution is
        returned and nothing starts; under ``replace`` the active ones are cancelled first.
        Any number of runs may be asked for in one millisecond: each gets its own
        ``scheduled_at`` (the moment asked for, moved on by a millisecond where taken).
        """
        spec = self.specs[name]
        now = self.clock.now()
        held = self.executor.held
        if spec.concurrency == "forbid":
            local = [held[eid] for eid in held.active_of(name)]
            if local:
                return min(local, key=lambda e: (e.scheduled_at, e.eid)), False
        eid = new_eid()
        exclusive = await self._admit(spec, name, eid)
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
        return await self._create_started(execution, spec, exclusive=exclusive)

    def _manual_time(self, name: str, now: datetime) -> datetime:
        """The moment asked for, to the millisecond, and never one this node gave already."""
        when = now.replace(microsecond=now.microsecond // 1000 * 1000)
        last = self._manual.get(name)
        if last is not None and when <= last:
            when = last + _MILLISECOND
        self._manual[name] = when
        return when

    async def _admit(self, spec: TaskSpec, name: str, by: str) -> bool:
        """The task's ``concurrency`` for a new run ``by`` that people asked for: under
        ``replace`` the active executions are cancelled now; True under ``forbid`` (the new
        run is created only if none is active, in the same transaction)."""
        if spec.concurrency == "replace":
            active = await self.store.active_executions(name)
            await self.executor.replace(
                [Holder(e.eid, e.status, e.scheduled_at, e.trigger_kind) for e in active], by
            )
        return spec.concurrency == "forbid"

    async def _create_started(
        self, execution: Execution, spec: TaskSpec, *, exclusive: bool
    ) -> tuple[Execution, bool]:
        """Insert ``execution`` started (PENDING) and send its trigger; under ``exclusive``
        (forbid) an active execution is answered instead."""
        scheduled = execution
        for _ in range(MANUAL_KEY_TRIES):
            begun = started(scheduled, spec, self.bookkeeping.claim(self.clock.now()))
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
                await self.executor.recorder.written(Transition(scheduled, created), created)
                self.executor.trigger(created)
                return created, True
            scheduled = scheduled.evolve(  # another node's run took this millisecond
                scheduled_at=self._manual_time(execution.task, scheduled.scheduled_at)
            )
        raise Conflict(f"task {execution.task!r}: no free moment for a new run")

    # -- executions ------------------------------------------------------------------------

    async def cancel(self, eid: str, message: str) -> Execution:
        """A person's cancel, from any node: the cancel call once, then CANCELLED."""
        return await self.executor.cancel(eid, message)

    async def report(
        self,
        eid: str,
        report: Report,
        step: int | None = None,
        channel: Channel = Channel.CALLBACK,
    ) -> tuple[Transition, Execution]:
        """A pushed report (a callback's, or a queue message's) about ``eid`` (or its
        ``step``), through the one core function."""
        return await self.executor.report(eid, report, step, channel)

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
        claim = self.bookkeeping.claim(self.clock.now())
        planned = plan_resume(old, spec, claim)
        if planned.steps and all(step.status is Status.SUCCESS for step in planned.steps):
            raise NothingToResume(
                f"execution {eid}: every step of task {old.task!r} as configured now succeeded"
            )
        exclusive = await self._admit(spec, old.task, planned.eid)
        begun = started(planned, spec, claim)
        created = await (
            self.store.create_unless_active(begun)
            if exclusive
            else self.store.create_execution(begun)
        )
        if isinstance(created, Holder):
            raise Conflict(f"task {old.task!r} is running (execution {created.eid})")
        if created is None:
            existing = (await self.store.resumes_of([eid])).get(eid)
            raise Conflict(f"execution {eid} was already resumed by {existing}")
        await self.executor.recorder.written(Transition(planned, created), created)
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

    # -- tasks -----------------------------------------------------------------------------

    async def pause(self, name: str, reason: str | None) -> TaskState:
        """Pause ``name``: no fire time of it starts until it is unpaused."""
        return await self._set_paused(name, True, reason)

    async def unpause(self, name: str) -> TaskState:
        """Unpause ``name``; its schedule restarts from now (nothing when it was not paused)."""
        return await self._set_paused(name, False, None)

    async def _set_paused(self, name: str, paused: bool, reason: str | None) -> TaskState:
        spec = self.specs.get(name)
        if spec is None:
            raise NotFound(f"no task {name!r} in this node's config")
        for _ in range(PAUSE_ATTEMPTS):
            current = await self.store.get_task(name)
            if current is None:
                raise NotFound(f"no task {name!r}")
            if not paused and not current.paused:
                return current  # not paused: unpausing changes nothing (no schedule restart)
            following = None
            excluded: Counter[str] = Counter()
            if not paused and spec.enabled:
                following = spec.fire_times.next(None, self.clock.now(), excluded)
            state = await self.store.set_paused(
                name, paused, reason, following, version=current.version
            )
            if state is not None:
                self.executor.metrics.excluded(name, excluded)
                break
        else:
            raise Conflict(f"task {name!r} kept changing; try again")
        log.info("task_paused" if paused else "task_unpaused", task=name, reason=reason)
        self.wake()
        return state

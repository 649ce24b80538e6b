"""What people (and the patrol) ask a node to do: run a task now, backfill a period, cancel,
take a callback's report, resume, pause and unpause. The API calls these and nothing else of
the engine; the loops (scheduler, engine, patrol) only run.

A run now and a resume are new runs that go through the one start path (``Engine.start_new``
→ ``ecron.starts``), like every fire time: the task's rules (``concurrency``, pause) are
decided there, in the same transaction that inserts the run, with the other starts due at
that moment; the command only builds the run and reads the decision. A backfill's runs are
claimed runs, inserted and handed to the engine (``Engine.hold``) as a retry is: the same
path decides each one's start when it falls due.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import structlog

from ecron.backfill import MAX_RUNS, Backfill, backfill_runs, check_room, period_fire_times
from ecron.bookkeeping import PAUSE_ATTEMPTS, Bookkeeping
from ecron.capacity import Wait
from ecron.clock import Clock, Wakeup, iso
from ecron.config.model import TaskSpec
from ecron.config.rules import PoolSpec
from ecron.core import Channel, Execution, Report, Reported, Status, Transition, TriggerKind
from ecron.engine import Engine
from ecron.errors import Conflict, NotFound, NothingToResume
from ecron.ids import new_eid
from ecron.logs import about
from ecron.metrics import Metrics
from ecron.planning import Begin, Decline, Refuse, new_steps, plan_resume, resumable
from ecron.starts import StartResult
from ecron.store.base import Store
from ecron.store.records import TaskState

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
        engine: Engine,
        bookkeeping: Bookkeeping,
        clock: Clock,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        scheduler_wakeup: Wakeup,
        metrics: Metrics,
        pools: Mapping[str, PoolSpec] | None = None,
        backfill_max_runs: int = MAX_RUNS,
    ) -> None:
        self.store = store
        #: New runs one backfill may create, and unfinished backfilled runs per task.
        self.backfill_max_runs = backfill_max_runs
        self.engine = engine
        self.metrics = metrics
        self.bookkeeping = bookkeeping
        self.clock = clock
        self.node_id = node_id
        self.specs = specs
        #: The pools the config defines (a pool no task uses yet is shown too).
        self.pool_specs: Mapping[str, PoolSpec] = {} if pools is None else pools
        #: Tells the scheduler to look for work now (after an unpause).
        self.scheduler_wakeup = scheduler_wakeup
        self._manual: dict[str, datetime] = {}

    def knows(self, name: str) -> bool:
        """True when task ``name`` is in this node's config."""
        return name in self.specs

    # -- runs ------------------------------------------------------------------------------

    async def run_now(self, name: str) -> tuple[Execution, bool]:
        """Start ``name`` now (a manual run). Returns the execution and whether it is new.

        Manual runs obey ``concurrency`` (decided in the start's transaction): under
        ``forbid`` an active execution is returned and nothing starts; under ``replace``
        the active ones are cancelled first. Any number of runs may be asked for in one
        millisecond: each gets its own ``scheduled_at`` (the moment asked for, moved on by
        a millisecond where taken, on this node or another).
        """
        spec = self.specs.get(name)
        if spec is None:
            raise NotFound(f"task {name!r} is not in this node's config")
        now = self.clock.now()
        eid = new_eid(now)
        run = Execution(
            eid=eid,
            task=name,
            scheduled_at=self._manual_time(name, now),
            created_at=now,
            trigger_kind=TriggerKind.MANUAL,
            owner=self.node_id,
            fence=1,
            steps=new_steps(spec, eid),
        )
        for _ in range(MANUAL_KEY_TRIES):
            result = await self.engine.start_new(run)
            answer = await self._answer(result)
            if answer is not None:
                return answer
            # its moment was taken (another node's run), or the active one ended meanwhile
            run = run.evolve(scheduled_at=self._manual_time(name, run.scheduled_at))
        raise Conflict(f"task {name!r}: no free moment for a new run")

    async def _answer(self, result: StartResult) -> tuple[Execution, bool] | None:
        """What a run people asked for became: started (new), answered by the active one
        (not new), or None when it must be asked again."""
        decision, change = result.decision, result.change
        if isinstance(decision, Refuse):
            raise NotFound(decision.why)
        if isinstance(decision, Decline):
            active = await self.store.get_execution(decision.active.eid)
            return None if active is None else (active, False)
        if isinstance(decision, Begin | Wait) and change is not None and change.stored is not None:
            return change.stored, True
        return None

    def _manual_time(self, name: str, now: datetime) -> datetime:
        """The moment asked for, to the millisecond, and never one this node gave already."""
        when = now.replace(microsecond=now.microsecond // 1000 * 1000)
        last = self._manual.get(name)
        if last is not None and when <= last:
            when = last + _MILLISECOND
        self._manual[name] = when
        return when

    async def backfill(
        self, name: str, start: datetime, end: datetime, *, dry_run: bool
    ) -> Backfill:
        """Run the past fire times of ``name`` in ``[start, end)`` (``ecron.backfill``), or
        only list them (``dry_run``: nothing is written). Each fire time without an execution
        gets one, claimed here and handed to the engine, which starts it through the one
        start path like a retry; one that has an execution already counts as
        ``already_run``. Raises ``NotFound``, ``BadBackfill`` (also for more new runs than
        ``backfill_max_runs``, or more unfinished backfilled runs of the task than that after
        them), and ``Conflict`` for a paused task (its runs would all be SKIPPED ``paused``,
        and their fire times spent)."""
        spec = self.specs.get(name)
        if spec is None:
            raise NotFound(f"task {name!r} is not in this node's config")
        now = self.clock.now()
        times = period_fire_times(spec, start, end, now)
        taken = await self.store.fire_times_taken(name, times)
        if dry_run:
            return Backfill(name, start, end, tuple(times), len(taken))
        task = await self.store.get_task(name)
        if task is not None and task.paused:
            raise Conflict(f"task {name!r} is paused: unpause it first, then backfill")
        todo = [when for when in times if when not in taken]
        unfinished = await self.store.unfinished_backfills(name) if todo else 0
        check_room(name, len(todo), unfinished, self.backfill_max_runs)
        runs = backfill_runs(spec, todo, self.bookkeeping.claim(now))
        created = await self.store.create_executions(runs)
        self.engine.hold(created)
        log.info(
            "backfill_started",
            task=name,
            start=iso(start),
            end=iso(end),
            fire_times=len(times),
            already_run=len(times) - len(created),
            created=len(created),
        )
        return Backfill(
            name, start, end, tuple(times), len(times) - len(created), tuple(e.eid for e in created)
        )

    # -- executions ------------------------------------------------------------------------

    async def cancel(self, eid: str, message: str) -> Execution:
        """A person's cancel, from any node: the cancel call once, then CANCELLED. Raises
        ``NotFound`` for an unknown eid, and ``Conflict`` for a final one, one that ended
        meanwhile, or one whose stop is already under way on this node."""
        execution = self.engine.holding(eid) or await self.store.get_execution(eid)
        if execution is None:
            raise NotFound(f"no execution {eid!r}")
        if execution.is_final:
            raise Conflict(f"execution {eid} is already {execution.status}")
        stopped = await self.engine.stop(execution, Status.CANCELLED, message)
        if stopped is None or stopped.status is not Status.CANCELLED:
            current = await self.store.get_execution(eid)
            if current is not None and not current.is_final:  # another stop holds it here
                raise Conflict(f"execution {eid} is already being stopped (still {current.status})")
            status = "gone" if current is None else str(current.status)
            raise Conflict(f"execution {eid} ended as {status} before the cancel")
        return stopped

    async def report(
        self,
        eid: str,
        report: Report,
        step: int | None = None,
        channel: Channel = Channel.CALLBACK,
    ) -> tuple[Transition, Execution]:
        """A pushed report (a callback's, or a queue message's) about ``eid`` (or its
        ``step``), from any node, through the one core function; what follows it is the
        engine's. Raises ``NotFound`` for an unknown eid. A transition with ``cancel_due``
        means the deadline had passed: the cancel was sent instead."""
        execution = await self.store.get_execution(eid)
        if execution is None:
            raise NotFound(f"no execution {eid!r}")
        with about(execution, self.node_id):
            event = Reported(report, channel, step=step)
            transition, current = await self.engine.report(execution, event)
            current = current or await self.store.get_execution(eid)
            return transition, current or execution

    async def pools(self) -> list[dict[str, Any]]:
        """Every pool (``GET /pools``), by name: its limits, its tasks, and where it stands
        on every node; the pool gauges are brought up to date on the way."""
        tasks: dict[str, list[str]] = {name: [] for name in self.pool_specs}
        for name, spec in sorted(self.specs.items()):
            if spec.pool is not None:
                tasks.setdefault(spec.pool.name, []).append(name)
        states = await self.store.pool_states(tasks) if tasks else {}
        metrics = self.metrics
        shown = []
        for name in sorted(tasks):
            state = states[name]
            limits = self.pool_specs.get(name) or self._pool_of(name)
            metrics.pool_running.labels(pool=name).set(state.running)
            metrics.pool_waiting.labels(pool=name).set(state.waiting)
            shown.append(
                {
                    "name": name,
                    "max_running": limits.max_running,
                    "max_per_second": limits.max_per_second,
                    "running": state.running,
                    "waiting": state.waiting,
                    # the wire name DESIGN.md ("API") gives it
                    "paused_until": iso(state.held_back_until),
                    "tasks": tasks[name],
                }
            )
        return shown

    def _pool_of(self, name: str) -> PoolSpec:
        """The definition of pool ``name`` as its tasks carry it."""
        pools = (spec.pool for spec in self.specs.values() if spec.pool is not None)
        return next(pool for pool in pools if pool.name == name)

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
        planned = plan_resume(old, spec, self.bookkeeping.claim(self.clock.now()))
        if planned.steps and all(step.status is Status.SUCCESS for step in planned.steps):
            raise NothingToResume(
                f"execution {eid}: every step of task {old.task!r} as configured now succeeded"
            )
        result = await self.engine.start_new(planned)
        decision, change = result.decision, result.change
        if isinstance(decision, Refuse):
            raise NotFound(decision.why)
        if isinstance(decision, Decline):
            raise Conflict(f"task {old.task!r} is running (execution {decision.active.eid})")
        if change is None or change.stored is None:
            existing = (await self.store.resumes_of([eid])).get(eid)
            raise Conflict(f"execution {eid} was already resumed by {existing}")
        log.info(
            "execution_resumed",
            task=old.task,
            execution_id=change.stored.eid,
            resume_of=eid,
            resume_attempt=change.stored.resume_attempt,
            by=why,
        )
        return change.stored

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
                self.metrics.excluded(name, excluded)
                break
        else:
            raise Conflict(f"task {name!r} kept changing; try again")
        log.info("task_paused" if paused else "task_unpaused", task=name, reason=reason)
        self.scheduler_wakeup.ring()
        return state

"""The scheduler: claims due fire times, decides at each start whether it runs, and takes
over abandoned work. Runs that people ask for are ``ecron.commands``'.

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
from dataclasses import replace
from datetime import datetime, timedelta

import structlog

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock, iso
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Status, apply
from ecron.executor.runner import Executor
from ecron.leases import TAKEOVER_EVERY, Leases
from ecron.planning import (
    Claim,
    is_late,
    plan_fires,
    rewound_fire_time,
    start_event,
    start_time,
    to_replace,
)
from ecron.store.base import DueTask, FirePlan, Gate, Holder, Store

log = structlog.get_logger(__name__)

#: A claim this much earlier than the latest one means the clock stepped back (smaller
#: corrections are left alone: the fire times they cover are claimed already).
STEP_BACK = timedelta(seconds=1)
#: While the oldest due start has waited this long for a worker, the node claims no more
#: fire times (backpressure): they stay on their tasks, for the misfire policy to decide
#: when claims resume, or for another node to claim.
SATURATED = timedelta(seconds=1)


class Scheduler:
    """Claims fire times, decides their starts, and takes over abandoned work."""

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
        self.claiming = True
        self._stopping = False
        #: When the loop last went round, for readiness checks.
        self.last_tick: datetime | None = None
        #: The latest time a claim was made at: a claim earlier than this by more than
        #: ``STEP_BACK`` means the clock stepped back.
        self._latest: datetime | None = None
        #: True while claims are held back because the executor is behind (``SATURATED``).
        self.saturated = False
        executor.starter = self.start
        executor.backlog.on_room = self.wake
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
        await self.clock.wait(self._wake, min(self.settings.tick, TAKEOVER_EVERY).total_seconds())

    def claim(self, now: datetime) -> Claim:
        """This node's claim at ``now``: its id, the prefetch horizon, the leases."""
        return self.bookkeeping.claim(now)

    # -- claiming and starting fire times -------------------------------------------------

    async def claim_fires(self, now: datetime) -> bool:
        """Claim this node's share of the fire times due before ``now + prefetch`` and hand
        them to the executor to start on time; True when the share was full."""
        if self._latest is not None and now < self._latest - STEP_BACK:
            await self.rewind(now, self._latest - now)
            self._latest = now  # the new time is the one to compare with from now on
        self._latest = now if self._latest is None else max(self._latest, now)
        if self._held_back(now):
            return False
        claim = self.claim(now)

        def plan(due: DueTask) -> FirePlan | None:
            spec = self.specs.get(due.name)
            if spec is None or spec.digest != due.spec_hash:
                return None  # not this node's config: a node that has it claims it
            return plan_fires(due.name, spec, due.next_fire_at, claim)

        room = self.executor.backlog.room()
        claimed, more = await self.leases.claim_fires(now, plan, room)
        if claimed.read >= room:  # the room limited it: claim again once there is room
            self.executor.backlog.call_when_room()
        for name, counts in claimed.excluded.items():
            self.leases.metrics.excluded(name, counts)
        for execution in claimed.executions:
            if execution.status is Status.SKIPPED:
                await self.recorder.ended(execution)
            else:
                spec = self.specs.get(execution.task)
                self.executor.start_at(execution, start_time(execution, spec))
        return more

    def _held_back(self, now: datetime) -> bool:
        """True while the executor is more than ``SATURATED`` behind its due starts: no
        claim now. Logged when it begins and when it ends."""
        behind = self.executor.backlog.behind(now)
        saturated = behind > SATURATED
        if saturated and not self.saturated:
            log.warning("claims_held_back", behind_seconds=round(behind.total_seconds(), 3))
        elif self.saturated and not saturated:
            log.info("claims_resumed")
        self.saturated = saturated
        return saturated

    async def rewind(self, now: datetime, step: timedelta) -> None:
        """The clock stepped back by ``step``: bring the next fire time of every task that
        this node knows back to its first one from ``now`` where that is earlier (see
        ``planning.rewound_fire_time``), so that schedules go on from the new time."""
        moves = {}
        for task in await self.store.list_tasks():
            spec = self.specs.get(task.name)
            if spec is None or task.paused:
                continue
            new = rewound_fire_time(spec, task.next_fire_at, now)
            if new is not None and task.next_fire_at is not None:
                moves[task.name] = (task.next_fire_at, new)
        await self.store.rewind_fire_times(moves)
        log.warning(
            "clock_stepped_back",
            step_seconds=round(step.total_seconds(), 3),
            now=iso(now),
            tasks_rewound=len(moves),
        )

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
                gate = replace(gate, active=(*gate.active, *mine))  # its ``later`` kept
                event = start_event(execution, self.specs.get(execution.task), gate, now)
                if event is None:
                    waiting.append((execution, to_replace(execution, gate)))
                    continue
                after = apply(execution, event, now).after
                if after.status is Status.PENDING:  # the lease runs from the write
                    after = after.evolve(lease_until=self.leases.full_until(self.clock.now()))
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
        await self.executor.replace(older, execution.eid)
        current = self.executor.held.get(execution.eid)
        if current is None or current.status is not Status.SCHEDULED:
            return
        for execution_started in await self.start([current]):
            self.executor.trigger(execution_started)

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

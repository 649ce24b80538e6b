"""The scheduler: claims due fire times and takes over abandoned work, and hands both to the
engine. Runs that people ask for are ``ecron.commands``'.

Fire times are claimed a little ahead (``prefetch``), many per transaction, and held
(SCHEDULED) by the engine, which starts them exactly on time through the one start path
(``ecron.starts``): ``tick`` only bounds how long the loop goes without looking for work
that other nodes or the API created. Whoever has new work for it rings its ``Wakeup``.
The claim rules themselves are pure functions in ``ecron.planning``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from datetime import datetime, timedelta

import structlog

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock, Wakeup, iso
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import FirePlan
from ecron.engine import Engine
from ecron.leases import TAKEOVER_EVERY, Leases
from ecron.planning import Claim, plan_fires, rewound_fire_time
from ecron.store.base import Store
from ecron.store.records import DueTask

log = structlog.get_logger(__name__)

#: A claim this much earlier than the latest one means the clock stepped back (smaller
#: corrections are left alone: the fire times they cover are claimed already).
STEP_BACK = timedelta(seconds=1)
#: While the oldest due start has waited this long for a worker, the node claims no more
#: fire times (backpressure): they stay on their tasks, for the misfire policy to decide
#: when claims resume, or for another node to claim.
SATURATED = timedelta(seconds=1)


class Scheduler:
    """Claims fire times and takes over abandoned work, for the engine."""

    def __init__(
        self,
        *,
        store: Store,
        engine: Engine,
        leases: Leases,
        bookkeeping: Bookkeeping,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        wakeup: Wakeup,
    ) -> None:
        self.store = store
        self.engine = engine
        self.leases = leases
        self.bookkeeping = bookkeeping
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.specs = specs
        #: Rung by whoever has new work for this loop (the engine, the commands, book-keeping).
        self._wake = wakeup.event
        self.claiming = True
        self._stopping = False
        #: When the loop last went round, for readiness checks.
        self.last_tick: datetime | None = None
        #: The latest time a claim was made at: a claim earlier than this by more than
        #: ``STEP_BACK`` means the clock stepped back.
        self._latest: datetime | None = None
        #: True while claims are held back because the engine is behind (``SATURATED``).
        self.saturated = False

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
                    more = more or self.leases.takeover_due(now)  # a full batch: more to take
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
        them to the engine to start on time; True when the share was full."""
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

        room = self.engine.room_for_claims()
        claimed, more = await self.leases.claim_fires(now, plan, room)
        if claimed.read >= room:  # the room limited it: claim again once there is room
            self.engine.call_when_room()
        for name, counts in claimed.excluded.items():
            self.leases.metrics.excluded(name, counts)
        self.engine.hold(claimed.executions)
        return more

    def _held_back(self, now: datetime) -> bool:
        """True while the engine is more than ``SATURATED`` behind its due starts: no
        claim now. Logged when it begins and when it ends."""
        behind = self.engine.behind(now)
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

    async def take_over(self, now: datetime) -> None:
        """Adopt executions nobody holds: a dead node's claims (at once) and active
        executions (once its lease ran out), or this node's before a restart or a lost
        lease."""
        for adopted in await self.leases.take_over(now, self.engine.knows):
            execution = adopted.execution
            log.info(
                "execution_adopted",
                task=execution.task,
                execution_id=execution.eid,
                status=execution.status.value,
                previous_owner=adopted.previous_owner,
            )
            self.engine.adopt(execution)

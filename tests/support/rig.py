"""A scheduler and executor wired to a real store and real HTTP connections, driven by a clock
the test moves by hand: fire-time rules are tested without waiting for fire times."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta

from ecron.clock import Clock
from ecron.commands import Commands
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Status
from ecron.engine import Engine
from ecron.executor.http import HttpCaller
from ecron.executor.wire import Wire
from ecron.parts import Parts
from ecron.patrol import Patrol
from ecron.planning import FirstFireTimes
from ecron.scheduler import Scheduler
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore
from tests.support.service import wait_for


class FakeClock(Clock):
    """A clock that moves only when told to; sleeping moves it instead of waiting."""

    def __init__(self, now: datetime) -> None:
        super().__init__()
        self.current = now
        #: Set (and replaced) each time the clock moves: what ``wait`` waits on.
        self._moved = asyncio.Event()

    def now(self) -> datetime:
        return self.current

    def advance(self, delta: timedelta) -> datetime:
        return self.set(self.current + delta)

    def set(self, when: datetime) -> datetime:
        self.current = when
        self._moved.set()
        self._moved = asyncio.Event()
        return when

    def advance_unseen(self, delta: timedelta) -> datetime:
        """Move the clock on without waking what waits on it: the time has passed, and the
        loops have not looked yet (a busy node between two rounds). What reads the clock
        meanwhile (a callback, an API call) sees the new time."""
        self.current += delta
        return self.current

    async def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=max(0.0, seconds))
        await asyncio.sleep(0)

    async def wait(self, event: asyncio.Event, seconds: float | None) -> bool:
        """Until ``event`` is set or this clock has been moved ``seconds`` on (None: until
        the event): real time passing changes nothing."""
        deadline = None if seconds is None else self.current + timedelta(seconds=max(0.0, seconds))
        while not event.is_set() and (deadline is None or self.current < deadline):
            moved = asyncio.ensure_future(self._moved.wait())
            setting = asyncio.ensure_future(event.wait())
            try:
                await asyncio.wait({moved, setting}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                moved.cancel()
                setting.cancel()
        return event.is_set()


@dataclass
class Rig:
    """The parts a test drives: ``scheduler.claim_fires(t)``, ``rig.start_due(t)``."""

    store: SqlStore
    clock: FakeClock
    parts: Parts
    specs: dict[str, TaskSpec]

    @property
    def engine(self) -> Engine:
        return self.parts.engine

    @property
    def scheduler(self) -> Scheduler:
        return self.parts.scheduler

    @property
    def commands(self) -> Commands:
        return self.parts.commands

    @property
    def patrol(self) -> Patrol:
        return self.parts.patrol

    async def tick(self, when: datetime) -> None:
        """Move the clock to ``when``, let the scheduler claim what is due and the engine
        start what is due, and wait until those starts are decided."""
        self.clock.set(when)
        await self.scheduler.claim_fires(when)
        await self.start_due(when)

    async def start_due(self, when: datetime) -> None:
        """Move the clock to ``when`` and wait until the engine has decided every start due
        by then and carried out what is due with it (triggers sent and answered)."""
        self.clock.set(when)
        self.engine.wake()
        await wait_for(lambda: self.engine.settled(when), timeout=10)

    async def executions(self, task: str) -> list[Execution]:
        """The task's executions, oldest first (fire times claimed ahead included)."""
        page = await self.store.list_executions(task=task, limit=500)
        claimed = await self.store.list_executions(task=task, status=Status.SCHEDULED, limit=500)
        return sorted([*page.items, *claimed.items], key=lambda e: e.eid)

    async def count_is(self, task: str, count: int) -> bool:
        """True when the task has exactly ``count`` executions."""
        return len(await self.executions(task)) == count

    async def status_is(self, eid: str, status: Status) -> bool:
        """True when execution ``eid`` is stored with ``status``."""
        execution = await self.store.get_execution(eid)
        return execution is not None and execution.status is status

    async def any_status(self, task: str, status: Status) -> bool:
        """True when one of the task's executions has ``status``."""
        return any(e.status is status for e in await self.executions(task))

    async def settled(self, task: str, count: int, timeout: float = 10.0) -> list[Execution]:
        """Wait until the task has ``count`` executions, all final (and their book-keeping
        done); oldest first."""

        async def done() -> list[Execution] | None:
            found = await self.executions(task)
            quiet = not self.parts.held and self.engine.idle
            return (
                found if len(found) == count and all(e.is_final for e in found) and quiet else None
            )

        result: list[Execution] = await wait_for(done, timeout=timeout)
        await self.parts.bookkeeping.flush()
        return result


@asynccontextmanager
async def rig(
    database_url: str,
    specs: list[TaskSpec],
    now: datetime,
    *,
    node_id: str = "n1",
    prefetch: timedelta = timedelta(0),
) -> AsyncIterator[Rig]:
    """A rig on a migrated database, with the engine running on the rig's clock: nothing is
    due until the test moves the clock (``tick``, ``start_due``). Two rigs on one database,
    with different ``node_id``s, are two nodes of a cluster."""
    store = SqlStore.open(database_url)
    await upgrade(store.engines)
    clock = FakeClock(now)
    by_name = {spec.name: spec for spec in specs}
    await store.sync_tasks(by_name, FirstFireTimes(now))
    settings = DaemonSettings(database=database_url, prefetch=prefetch, poll_workers=4)
    wire = Wire()
    caller = HttpCaller(wire, public_url=None, callback_secret="test", clock=clock)
    parts = Parts.build(
        store=store,
        caller=caller,
        clock=clock,
        settings=settings,
        node_id=node_id,
        specs=by_name,
    )
    await parts.leases.register()  # the node's lease: what everything it claims leans on
    workers = asyncio.create_task(parts.engine.run())
    try:
        yield Rig(store, clock, parts, by_name)
    finally:
        await parts.engine.drain(5)
        await parts.bookkeeping.close()  # its pending successes, before the store closes
        await parts.recorder.close()
        workers.cancel()
        with suppress(asyncio.CancelledError):
            await workers
        await wire.close()
        await store.close()

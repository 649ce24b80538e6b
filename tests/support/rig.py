"""A scheduler and executor wired to a real store and a real HTTP session, driven by a clock
the test moves by hand: fire-time rules are tested without waiting for fire times."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta

import aiohttp

from ecron.clock import Clock
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution, Status
from ecron.executor.http import HttpCaller
from ecron.executor.runner import Executor
from ecron.patrol import Patrol
from ecron.scheduler import Scheduler
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore
from ecron.store.writer import StateWriter
from tests.support.service import wait_for


class FakeClock(Clock):
    """A clock that moves only when told to; sleeping moves it instead of waiting."""

    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current

    def advance(self, delta: timedelta) -> datetime:
        self.current += delta
        return self.current

    def set(self, when: datetime) -> datetime:
        self.current = when
        return when

    async def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=max(0.0, seconds))
        await asyncio.sleep(0)


@dataclass
class Rig:
    """The parts a test drives: ``scheduler.claim_fires(t)``, ``scheduler.start_due(t)``."""

    store: SqlStore
    clock: FakeClock
    executor: Executor
    scheduler: Scheduler
    specs: dict[str, TaskSpec]
    patrol: Patrol

    async def tick(self, when: datetime) -> None:
        """Move the clock to ``when`` and let the scheduler claim and start what is due."""
        self.clock.set(when)
        await self.scheduler.claim_fires(when)
        await self.scheduler.start_due(when)

    async def executions(self, task: str) -> list[Execution]:
        """The task's executions, oldest first."""
        page = await self.store.list_executions(task=task, limit=500)
        return list(reversed(page.items))

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
            quiet = not self.executor.inflight and self.executor.idle
            return (
                found if len(found) == count and all(e.is_final for e in found) and quiet else None
            )

        result: list[Execution] = await wait_for(done, timeout=timeout)
        return result


@asynccontextmanager
async def rig(database_url: str, specs: list[TaskSpec], now: datetime) -> AsyncIterator[Rig]:
    """A rig on a migrated database, with the poll workers running."""
    store = SqlStore.open(database_url)
    await upgrade(store.engines)
    clock = FakeClock(now)
    by_name = {spec.name: spec for spec in specs}
    await store.sync_tasks(by_name, now)
    settings = DaemonSettings(database=database_url, prefetch=timedelta(0))
    session = aiohttp.ClientSession()
    writer = StateWriter(store)
    caller = HttpCaller(session, public_url=None, callback_secret="test")
    scheduler: Scheduler
    executor = Executor(
        store=store,
        writer=writer,
        caller=caller,
        clock=clock,
        specs=by_name,
        workers=4,
        on_finished=lambda execution: scheduler.finished(execution),
    )
    scheduler = Scheduler(
        store=store, executor=executor, clock=clock, settings=settings, node_id="n1", specs=by_name
    )
    patrol = Patrol(
        store=store,
        scheduler=scheduler,
        executor=executor,
        clock=clock,
        settings=settings,
        node_id="n1",
        specs=by_name,
    )
    workers = asyncio.create_task(executor.run())
    try:
        yield Rig(store, clock, executor, scheduler, by_name, patrol)
    finally:
        await executor.drain(5)
        workers.cancel()
        with suppress(asyncio.CancelledError):
            await workers
        await session.close()
        await store.close()

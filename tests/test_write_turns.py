"""Whose turn it is to write on SQLite (``WriteTurns``): first come first served, except the
node's lease, which goes before every writer still waiting, so that a node with seconds of
writes queued (a batch poll's progress, starts asked from the API) renews its lease in
time. Turns are handed on by events, never by time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import sqlalchemy as sa

from ecron.store.engine import Engines, WriteTurns


async def settled() -> None:
    """Let every task that can run reach its next wait."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_an_urgent_writer_goes_before_every_writer_waiting_and_after_the_one_under_way() -> (
    None
):
    turns = WriteTurns()
    order: list[str] = []
    release = asyncio.Event()

    async def write(name: str, *, urgent: bool = False, hold: asyncio.Event | None = None) -> None:
        async with turns.turn(urgent=urgent):
            order.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(write("under way", hold=release))
    await settled()
    waiting = [asyncio.create_task(write(f"waiting {n}")) for n in range(3)]
    await settled()
    urgent = asyncio.create_task(write("lease", urgent=True))
    await settled()
    assert order == ["under way"]
    release.set()
    await asyncio.gather(first, *waiting, urgent)
    assert order == ["under way", "lease", "waiting 0", "waiting 1", "waiting 2"]


async def test_a_writer_cancelled_while_waiting_or_just_handed_the_turn_blocks_nobody() -> None:
    turns = WriteTurns()
    order: list[str] = []
    release = asyncio.Event()

    async def write(name: str, hold: asyncio.Event | None = None) -> None:
        async with turns.turn():
            order.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(write("first", hold=release))
    await settled()
    gone = asyncio.create_task(write("gone"))
    handed = asyncio.create_task(write("handed"))
    last = asyncio.create_task(write("last"))
    await settled()
    gone.cancel()  # cancelled while waiting: taken out of the line
    await settled()
    release.set()
    await asyncio.sleep(0)  # "first" ends and hands the turn to "handed"...
    handed.cancel()  # ...which is cancelled before it runs: the turn goes on to "last"
    await asyncio.gather(first, last)
    assert gone.cancelled() and handed.cancelled()
    assert order[0] == "first" and order[-1] == "last" and "gone" not in order


async def test_a_lease_statement_on_sqlite_waits_only_for_the_write_under_way(
    tmp_path: Path,
) -> None:
    """Through the engines on a SQLite file: a write holds the turn, three more wait, and
    the single statement (the lease's) runs second."""
    engines = Engines(f"sqlite+aiosqlite:///{tmp_path / 'turns.db'}")
    try:
        async with engines.write() as conn:
            await conn.execute(sa.text("CREATE TABLE seen (name TEXT)"))
        release, entered = asyncio.Event(), asyncio.Event()

        async def write(name: str, hold: asyncio.Event | None = None) -> None:
            async with engines.write() as conn:
                await conn.execute(sa.text("INSERT INTO seen VALUES (:n)"), {"n": name})
                if hold is not None:
                    entered.set()
                    await hold.wait()

        async def lease() -> None:
            async with engines.single() as conn:
                await conn.execute(sa.text("INSERT INTO seen VALUES ('lease')"))

        first = asyncio.create_task(write("under way", release))
        await entered.wait()
        waiting = [asyncio.create_task(write(f"waiting {n}")) for n in range(3)]
        await settled()
        urgent = asyncio.create_task(lease())
        await settled()
        release.set()
        await asyncio.gather(first, *waiting, urgent)
        async with engines.read() as conn:
            rows = (await conn.execute(sa.text("SELECT name FROM seen ORDER BY rowid"))).all()
        assert [r[0] for r in rows] == ["under way", "lease", "waiting 0", "waiting 1", "waiting 2"]
    finally:
        await engines.dispose()

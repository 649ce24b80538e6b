"""What holding 10,000 executions costs a node on PostgreSQL (DESIGN.md, "Scale"): renewing
them is one statement per round, and the node's own writers (progress saves, ends,
releases, force-claims, renewals) running at once over the same 10,000 rows never
deadlock one another, because every statement that locks many rows takes them in eid
order."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from structlog.testing import capture_logs

from ecron.clock import Clock, Wakeup
from ecron.config.model import DaemonSettings
from ecron.core import Execution, Lease, Status
from ecron.executor.held import Held
from ecron.ids import new_eid
from ecron.leases import Leases
from ecron.metrics import Metrics
from ecron.store.sql import SqlStore
from ecron.store.sql_nodes import held_until, node_leases
from ecron.store.tables import execution_table
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.postgres

HELD = 10_000


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database of the test's own."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


#: Plans that take rows in the order they find them along an index (nested loops, no hash
#: or merge joins, no sequential or bitmap scans): what PostgreSQL picks on a table with a
#: long history, where a bulk update then locks rows in the order its statement lists them.
INDEX_PLANS = {
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
}


@pytest.fixture(params=["default plans", "index plans"])
async def store(postgres_url: str, request: pytest.FixtureRequest) -> AsyncIterator[SqlStore]:
    """A store whose every connection plans as PostgreSQL likes, or along indexes only."""
    store = SqlStore.open(postgres_url, pool_size=8)
    if request.param == "index plans":

        @event.listens_for(store.engines.writer.sync_engine, "connect")
        def plan_along_indexes(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            for name, value in INDEX_PLANS.items():
                cursor.execute(f"SET {name} = {value}")
            cursor.close()

    yield store
    await store.close()


async def held_by(store: SqlStore, lease: Lease, now: datetime, count: int) -> list[Execution]:
    """``count`` RUNNING executions held under ``lease``, in eid order, written 2,000 rows a
    statement."""
    rows = [
        Execution(
            eid=new_eid(now),
            task=f"t{n % 50}",
            scheduled_at=now + timedelta(milliseconds=n),
            created_at=now,
            status=Status.RUNNING,
            triggered_at=now,
            owner=lease.node,
            owner_epoch=lease.epoch,
            fence=1,
        )
        for n in range(count)
    ]
    # written in a shuffled order: the table's physical order is not the eids' (as after
    # hours of updates), so a statement that locks rows as it finds them does not lock
    # them in eid order
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    for first in range(0, count, 2000):
        part = shuffled[first : first + 2000]
        assert len(await store.create_executions(part)) == len(part)
    return rows


async def deadlocks(store: SqlStore) -> int:
    """PostgreSQL's own count of deadlocks detected in this database."""
    query = sa.text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
    async with store.engines.read() as conn:
        return int((await conn.execute(query)).scalar_one())


def later(execution: Execution, **changes: Any) -> Execution:
    return execution.evolve(version=execution.version + 1, **changes)


async def test_saves_ends_releases_and_renewals_of_10000_rows_at_once_never_deadlock(
    store: SqlStore,
) -> None:
    """10,000 RUNNING rows held by one node. Three rounds, each running at once: eight state
    writes of 2,000 rows taken at random and listed in a random order (a progress save, or
    an end: another set of columns, so two statements in one transaction), a release and a
    force-claim of 300 rows each (listed at random), and the node's lease renewed. Each row
    takes at most one of the writes that compete for it (the others find their compare
    refused), and PostgreSQL detects no deadlock, nor is any transaction retried for one.
    Whatever plans PostgreSQL picks: with plans along indexes (a table with a long history),
    a statement without the ordered lock meets the rows in the order it lists them, and the
    same test then fails: PostgreSQL reports deadlocks."""
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    lease = await store.take_node_lease("n1", now, now + timedelta(hours=1))
    rows = {row.eid: row for row in await held_by(store, lease, now, HELD)}
    other = await store.take_node_lease("n2", now, now + timedelta(hours=1))
    rng = random.Random(31)
    before = await deadlocks(store)

    def write(k: int, n: int) -> Any:
        picked = rng.sample(sorted(rows), min(2000, len(rows)))
        if n % 2:
            pairs = [(rows[e], later(rows[e], progress=float(k * 10 + n))) for e in picked]
        else:  # each write says something of its own: a row shows which one it took
            ended = {"status": Status.SUCCESS, "message": f"{k}.{n}", "finished_at": now}
            pairs = [(rows[e], later(rows[e], **ended)) for e in picked]
        return store.save(pairs, lease=lease)

    with capture_logs() as logged:
        for k in range(3):
            at = now + timedelta(seconds=k)
            results = await asyncio.gather(
                *(write(k, n) for n in range(8)),
                store.release_leases("n1", rng.sample(sorted(rows), min(300, len(rows)))),
                store.force_claim(other, rng.sample(sorted(rows), min(300, len(rows)))),
                store.renew_node_lease(lease, at, at + timedelta(hours=1), Clock().ticks),
            )
            landed: dict[str, int] = {}
            for saved in results[:8]:
                for stored in saved:
                    if stored is not None:
                        assert stored.eid not in landed, "a row took two competing writes"
                        landed[stored.eid] = 1
                        rows[stored.eid] = stored
            assert results[-1] is not None  # the renewal landed, whatever held the rows
            for taken in results[-2]:
                rows[taken.eid] = taken
            for eid in list(rows):  # released or taken rows moved on: read them again
                if rows[eid].is_final:
                    del rows[eid]
            fresh = {e.eid: e for e in await _held(store)}
            rows = {eid: fresh[eid] for eid in rows if eid in fresh}
    after = await deadlocks(store)
    retried = [e for e in logged if e["event"] == "store_retry"]
    assert after - before == 0, f"{after - before} deadlocks detected"
    assert retried == []


async def test_a_node_holding_10000_executions_renews_them_with_one_statement_per_round(
    store: SqlStore,
) -> None:
    """A node took over 10,000 RUNNING executions (a dead node's). One round of its lease
    renewal is one statement on the database, whatever it holds: the lease moves, so every
    one of the 10,000 is held longer (by the takeover's own rule, ``held_until``), and no
    execution row is written (their versions stay)."""
    start = datetime.now(UTC)
    gone = await store.take_node_lease("dead", start, start + timedelta(seconds=1))
    await held_by(store, gone, start, HELD)
    settings = DaemonSettings(lease_ttl=timedelta(seconds=15))
    held = Held("n1")
    clock = Clock()
    leases = Leases(
        store=store,
        held=held,
        clock=clock,
        settings=settings,
        node_id="n1",
        metrics=Metrics(),
        scheduler_wakeup=Wakeup(),
    )
    await leases.register()
    now = clock.now() + timedelta(seconds=2)  # the dead node's lease has run out
    while len(held) < HELD:
        for adopted in await leases.take_over(now, lambda _task: True):
            held.hold(adopted.execution)
    assert len(held) == HELD
    versions = await _versions(store)
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    engine = store.engines.writer.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        assert await leases.renew() is True
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(statements) == 1, statements
    assert statements[0].lstrip().upper().startswith("UPDATE NODE")
    async with store.engines.read() as conn:
        rows = (await conn.execute(sa.select(execution_table))).mappings().all()
        node = await node_leases(conn)
    renewed = {held_until(row, node) for row in rows}
    assert len(renewed) == 1 and (until := renewed.pop()) is not None
    assert until > now + timedelta(seconds=10)
    assert await _versions(store) == versions


async def _versions(store: SqlStore) -> dict[str, int]:
    query = sa.select(execution_table.c.eid, execution_table.c.version)
    async with store.engines.read() as conn:
        return {str(eid): int(version) for eid, version in await conn.execute(query)}


async def _held(store: SqlStore) -> list[Execution]:
    """Every row still active, as stored."""
    query = sa.select(execution_table).where(execution_table.c.status == "RUNNING")
    async with store.engines.read() as conn:
        return await store._read_executions(conn, query)


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (node type, relation) of a plan in EXPLAIN's JSON, its sub-plans included."""
    found = [(plan["Node Type"], plan.get("Relation Name", ""))]
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


async def test_a_state_write_finds_its_rows_by_key_however_small_the_table_once_looked(
    postgres_url: str,
) -> None:
    """The planner's statistics were taken when the table held 100 rows (a node that just
    started) and it has grown by 5,000 since. A state write of 20 rows, planned generically
    (as asyncpg's prepared statements are, after their first runs), reads them along the
    primary key: no sequential scan of ``execution``. Before, the rows it named were joined
    to the whole table: on the triggers benchmark (PostgreSQL, 2,000 tasks a second) each
    write read about 2,100 pages and took 24 ms at 31,000 rows, the server's busiest
    statement, and the node fell behind the fire times."""
    store = SqlStore.open(postgres_url)
    statements: list[tuple[str, Any]] = []

    @event.listens_for(store.engines.writer.sync_engine, "before_cursor_execute")
    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((statement, parameters))

    try:
        now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
        lease = await store.take_node_lease("n1", now, now + timedelta(hours=1))
        rows = await held_by(store, lease, now, 100)
        async with store.engines.write() as conn:
            await conn.execute(sa.text("ALTER TABLE execution SET (autovacuum_enabled = off)"))
            await conn.execute(sa.text("ANALYZE execution"))
        await held_by(store, lease, now + timedelta(minutes=1), 5000)
        statements.clear()
        saved = await store.save(
            [(row, later(row, progress=50.0)) for row in rows[:20]], lease=lease
        )
        assert all(s is not None for s in saved)
        ((update, parameters),) = [s for s in statements if s[0].lstrip().startswith("WITH")]
        async with store.engines.read() as conn:
            await conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            explained = await conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {update}", parameters)
            plan = explained.scalar_one()
            await conn.exec_driver_sql("RESET plan_cache_mode")
    finally:
        await store.close()
    scans = _scans((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    assert ("Seq Scan", "execution") not in scans, scans

"""Store reads for people, on SQLite and PostgreSQL from the shared fixture: the durations
of a task's recent successful runs (the ETA before any progress rests on them), and the
executions whose eid starts with a prefix (a unique one names an execution)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ecron.core import Execution, Status, TriggerKind
from ecron.ids import SHORT_ID, new_eid, unique_prefix
from ecron.store.sql import SqlStore
from ecron.store.sql_lookups import durations_query, neighbours_query, prefix_query

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def ended(task: str, took: float | None, status: Status = Status.SUCCESS, **more: Any) -> Execution:
    """An execution of ``task`` triggered at ``T0`` that ended after ``took`` seconds (None:
    still running)."""
    values: dict[str, Any] = {
        "eid": new_eid(),
        "task": task,
        "scheduled_at": T0,
        "created_at": T0,
        "status": status if took is not None else Status.RUNNING,
        "triggered_at": T0,
        "finished_at": None if took is None else T0 + timedelta(seconds=took),
    }
    values.update(more)
    return Execution(**values)


async def add(store: SqlStore, *executions: Execution) -> None:
    """Store ``executions`` (of one task, each has a fire time of its own)."""
    for one in executions:
        assert await store.create_execution(one) is not None


@contextmanager
def statements(store: SqlStore) -> Iterator[list[str]]:
    """The SQL statements the store's reader sends while the block runs."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    engine = store.engines.reader.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


async def test_recent_durations_are_the_newest_successful_full_runs_of_each_task(
    store: SqlStore,
) -> None:
    """Per task, newest first and at most ``count``: the time from the first trigger to
    the end of its SUCCESS executions; failures, running ones, resumes (which ran part of
    the work) and other tasks' runs are left out; a task without any is not in the answer."""
    runs = [
        ended("etl", float(seconds), scheduled_at=T0 + timedelta(minutes=seconds))
        for seconds in (10, 20, 30, 40)
    ]
    await add(store, *runs)
    await add(
        store,
        ended("etl", 99.0, Status.FAILED, scheduled_at=T0 + timedelta(hours=1)),
        ended("etl", None, scheduled_at=T0 + timedelta(hours=2)),
        ended(
            "etl",
            1.0,
            trigger_kind=TriggerKind.RESUME,
            resume_attempt=1,
            resume_of=runs[0].eid,
            scheduled_at=runs[0].scheduled_at,
        ),
        ended("report", 5.0),
        ended("broken", 5.0, Status.FAILED),
    )
    found = await store.recent_durations(["etl", "report", "broken", "nothing"], 3)
    assert found == {
        "etl": [timedelta(seconds=40), timedelta(seconds=30), timedelta(seconds=20)],
        "report": [timedelta(seconds=5)],
    }
    assert await store.recent_durations([], 3) == {}


async def test_durations_of_many_tasks_take_one_statement_per_hundred_of_them(
    store: SqlStore,
) -> None:
    """A list answer asks about every task it shows at once: 101 tasks are read in two
    statements, not one per task."""
    names = [f"task-{n:03d}" for n in range(101)]
    await asyncio.gather(*(add(store, ended(name, n + 1.0)) for n, name in enumerate(names)))
    with statements(store) as sent:
        found = await store.recent_durations(names, 20)
    assert len(found) == 101 and found["task-100"] == [timedelta(seconds=101)]
    assert len([s for s in sent if s.startswith("SELECT")]) == 2, sent


async def test_the_durations_query_reads_the_success_index_of_each_task(
    store: SqlStore,
) -> None:
    """The database's own plan for the query walks ``ix_execution_task_success`` (task,
    eid, successes only) rather than the table, on SQLite and PostgreSQL alike."""
    await add(
        store,
        *(ended("etl", float(n), scheduled_at=T0 + timedelta(minutes=n)) for n in range(1, 30)),
    )
    async with store.engines.read() as conn:
        compiled = durations_query(["etl", "report"], 20).compile(
            dialect=conn.dialect, compile_kwargs={"literal_binds": True}
        )
        if store.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table otherwise
            plan = [row[0] for row in await conn.exec_driver_sql(f"EXPLAIN {compiled}")]
        else:
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")
            plan = [row[-1] for row in rows]
    assert any("ix_execution_task_success" in line for line in plan), plan


def named(eid: str, task: str = "etl", status: Status = Status.SUCCESS) -> Execution:
    """An execution with the given eid (each its own fire time)."""
    at = T0 + timedelta(seconds=int(eid[-4:], 16))
    return Execution(eid=eid, task=task, scheduled_at=at, created_at=at, status=status)


PREFIXED = [
    "01a2276a-4480-73e8-967c-b18487cf0001",
    "01a2276a-4480-73e8-967c-b18487cf0002",
    "01a2276a-5e56-72c0-85ae-075f0d450003",
    "01a2276b-0000-7000-8000-000000000004",
]


async def test_an_eid_prefix_finds_the_executions_whose_eids_start_with_it(
    store: SqlStore,
) -> None:
    """By eid, at most ``limit`` of them, SCHEDULED claims too; a prefix that ends on a
    dash or runs to the whole id works alike (the ids compare as bytes, whatever the
    database's collation makes of a dash)."""
    await add(store, *(named(eid) for eid in PREFIXED[:3]))
    await add(store, named(PREFIXED[3], status=Status.SCHEDULED))

    async def ids(prefix: str, limit: int = 10) -> list[str]:
        return [e.eid for e in await store.executions_by_prefix(prefix, limit)]

    assert await ids("01a2276a-") == PREFIXED[:3]
    assert await ids("01a2276a") == PREFIXED[:3]
    assert await ids("01a2276a-4480-73e8-967c-b18487cf000") == PREFIXED[:2]
    assert await ids("01a2276a-5") == [PREFIXED[2]]
    assert await ids(PREFIXED[1]) == [PREFIXED[1]]
    assert await ids("01a2276") == PREFIXED
    assert await ids("01a2276", limit=2) == PREFIXED[:2]
    assert await ids("01a2276c") == [] and await ids("") == []
    found = await store.executions_by_prefix("01a2276b", 10)
    assert found[0].status is Status.SCHEDULED and found[0].task == "etl"


async def test_the_prefix_query_reads_an_index_of_the_ids_as_bytes(store: SqlStore) -> None:
    """The database's own plan walks an index: SQLite's primary key (its text compares
    as bytes), PostgreSQL's ``ix_execution_eid_prefix`` (``varchar_pattern_ops``)."""
    await add(store, *(named(eid) for eid in PREFIXED))
    index = "ix_execution_eid_prefix" if store.dialect.name == "postgresql" else "sqlite_autoindex"
    async with store.engines.read() as conn:
        compiled = prefix_query(store.dialect, "01a2276a-", 11).compile(
            dialect=conn.dialect, compile_kwargs={"literal_binds": True}
        )
        if store.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table otherwise
            plan = [row[0] for row in await conn.exec_driver_sql(f"EXPLAIN {compiled}")]
        else:
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")
            plan = [row[-1] for row in rows]
    assert any(index in line for line in plan), plan


async def test_the_eids_around_one_tell_the_shortest_prefix_that_names_it_alone(
    store: SqlStore,
) -> None:
    """Per eid that is an execution's (a SCHEDULED claim too), the eids just before and after
    it as bytes; an unknown eid is left out. What an id shares with them is the most it
    shares with any id, so ``unique_prefix`` of them is the start of it alone."""
    await add(store, *(named(eid) for eid in PREFIXED[:3]))
    await add(store, named(PREFIXED[3], status=Status.SCHEDULED))
    unknown = "01a2276a-4480-73e8-967c-b18487cf0009"
    around = await store.eid_neighbours([*PREFIXED, unknown, PREFIXED[0]])
    assert around == {
        PREFIXED[0]: (None, PREFIXED[1]),
        PREFIXED[1]: (PREFIXED[0], PREFIXED[2]),
        PREFIXED[2]: (PREFIXED[1], PREFIXED[3]),
        PREFIXED[3]: (PREFIXED[2], None),
    }
    prefixes = [unique_prefix(eid, *around[eid]) for eid in PREFIXED]
    assert prefixes == [PREFIXED[0], PREFIXED[1], "01a2276a-5", "01a2276b"]
    for eid, prefix in zip(PREFIXED, prefixes, strict=True):
        assert [e.eid for e in await store.executions_by_prefix(prefix, 2)] == [eid]
        shorter = prefix[:-1].rstrip("-")
        if len(shorter) >= SHORT_ID:  # one character less names more than it
            assert len(await store.executions_by_prefix(shorter, 2)) == 2
    assert await store.eid_neighbours([]) == {}


async def test_the_neighbours_query_reads_one_row_each_way_along_the_byte_index(
    store: SqlStore,
) -> None:
    """The plan searches the index of the ids as bytes for each neighbour; it never scans
    the table (the history may hold millions of executions)."""
    await add(store, *(named(eid) for eid in PREFIXED))
    postgres = store.dialect.name == "postgresql"
    index = "ix_execution_eid_prefix" if postgres else "sqlite_autoindex"
    async with store.engines.read() as conn:
        compiled = neighbours_query(store.dialect, PREFIXED[1:3]).compile(
            dialect=conn.dialect, compile_kwargs={"literal_binds": True}
        )
        if postgres:
            await conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table otherwise
            plan = [row[0] for row in await conn.exec_driver_sql(f"EXPLAIN {compiled}")]
        else:
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")
            plan = [row[-1] for row in rows]
    assert sum(index in line for line in plan) >= 4, plan
    assert not any("Seq Scan" in line or line.startswith("SCAN execution") for line in plan), plan
    assert not any("Sort" in line or "TEMP B-TREE" in line for line in plan), plan


@contextmanager
def sent_with_parameters(store: SqlStore) -> Iterator[list[tuple[str, Any]]]:
    """The SQL statements the store's reader sends while the block runs, with their
    parameters (to ask the database for the plan of exactly what was sent)."""
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    engine = store.engines.reader.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


async def test_the_newest_execution_of_each_task_skips_its_claims_ahead(store: SqlStore) -> None:
    """``last_executions`` (``GET /tasks``): per task, its newest execution that is not a
    fire time claimed ahead; 101 tasks (two statements) and a name given twice included."""
    names = [f"task-{n:03d}" for n in range(101)]
    await asyncio.gather(*(add(store, ended(name, 1.0)) for name in names))
    history = [ended("etl", 1.0, scheduled_at=T0 + timedelta(minutes=n)) for n in range(5)]
    ahead = ended("etl", None, status=Status.SCHEDULED, scheduled_at=T0 + timedelta(hours=1))
    await add(store, *history, ahead.evolve(status=Status.SCHEDULED))
    with statements(store) as sent:
        found = await store.last_executions([*names, "etl", "etl", "unknown"])
    assert found["etl"].eid == history[-1].eid
    assert sorted(found) == sorted([*names, "etl"])
    assert len([s for s in sent if s.startswith("SELECT execution.eid")]) == 2, sent
    assert await store.last_executions([]) == {}


async def test_the_newest_execution_of_a_task_is_read_without_its_history(
    store: SqlStore,
) -> None:
    """The plan of the statement ``last_executions`` sends walks ``ix_execution_task_eid``
    backwards to each task's newest row and stops there: no aggregate over the task's
    executions (``max(eid) ... GROUP BY task`` read the whole history on every ``GET
    /tasks``; at 200,000 executions that was a third of a core on SQLite)."""
    await add(
        store, *(ended("etl", 1.0, scheduled_at=T0 + timedelta(minutes=n)) for n in range(30))
    )
    with sent_with_parameters(store) as sent:
        assert set(await store.last_executions(["etl", "report"])) == {"etl"}
    statement, parameters = next((s, p) for s, p in sent if s.startswith("SELECT execution.eid"))
    async with store.engines.read() as conn:
        if store.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table otherwise
            rows = await conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
            plan = [row[0] for row in rows]
            assert not any("Aggregate" in line for line in plan), plan
            assert sum("Index Scan Backward" in line for line in plan) == 2, plan
        else:
            rows = await conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
            opcodes = [row[1] for row in rows]
            assert not any(op.startswith("Agg") for op in opcodes), opcodes
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            plan = [row[-1] for row in rows]
            assert sum("ix_execution_task_eid" in line for line in plan) == 2, plan
            assert not any(line.startswith("SCAN execution") for line in plan), plan

"""Reads for people, in SQL: executions named by a prefix of their eid, the eids around one
(how short a prefix names it alone), each task's newest execution (``GET /tasks``), and the
durations of a task's recent successful runs (which a snapshot's ETA rests on). Each reads a
few rows along an index (migrations 0001, 0005, 0006 and 0007), whatever the size of the
history; and how many backfilled runs of a task have not ended (a few, along the task's
index)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.core import HELD, Execution, Status, TriggerKind
from ecron.store.engine import Dialect, Engines
from ecron.store.retry import retried
from ecron.store.tables import execution_table

#: At most this many tasks (or eids) go into one statement (SQLite allows 500 parts to a
#: UNION).
_TASKS_PER_STATEMENT = 100
#: Written out, not bound: the partial index ``ix_execution_task_success`` is used only when
#: the query's condition is visibly the index's (SQLite cannot see through a parameter).
_IS_SUCCESS = execution_table.c.status == sa.literal_column(f"'{Status.SUCCESS}'")
_SCHEDULED = str(Status.SCHEDULED)


def prefix_query(dialect: Dialect, prefix: str, limit: int) -> sa.Select[Any]:
    """Executions whose eid starts with ``prefix`` (not empty): the range from ``prefix`` to
    the text just after every text it starts, compared as bytes (``Dialect.byte_order``)."""
    assert prefix, "an empty prefix names every execution"
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    order = dialect.byte_order
    eid = execution_table.c.eid
    return (
        sa.select(execution_table)
        .where(eid.op(order.at_least)(prefix), eid.op(order.below)(upper))
        .order_by(eid)
        .limit(limit)
    )


def neighbours_query(dialect: Dialect, eids: Sequence[str]) -> sa.CompoundSelect[Any]:
    """Per eid, whether an execution has it and the eids just before and after it, as
    bytes: three reads of one row each along the eid's index, one part per eid."""
    order = dialect.byte_order
    eid = execution_table.c.eid

    def nearest(compare: str, sort: str, to: str) -> sa.ScalarSelect[Any]:
        ordered = sa.text(f"{eid.name} {sort}")
        return (
            sa.select(eid).where(eid.op(compare)(to)).order_by(ordered).limit(1).scalar_subquery()
        )

    parts = [
        sa.select(
            sa.literal(one).label("eid"),
            sa.exists().where(eid == one).label("known"),
            nearest(order.below, order.descending, one).label("before"),
            nearest(order.above, order.ascending, one).label("after"),
        )
        for one in eids
    ]
    return sa.union_all(*parts)


def durations_query(names: Sequence[str], count: int) -> sa.CompoundSelect[Any]:
    """Per task, its ``count`` newest successful executions that are not resumes: one part
    per task, each read backwards along ``ix_execution_task_success`` and cut at ``count``."""
    table = execution_table.c
    parts = [
        sa.select(table.task, table.eid, table.triggered_at, table.finished_at)
        .where(
            table.task == name,
            _IS_SUCCESS,
            table.resume_attempt == 0,
            table.triggered_at.is_not(None),
            table.finished_at.is_not(None),
        )
        .order_by(table.eid.desc())
        .limit(count)
        .subquery()
        .select()
        for name in names
    ]
    return sa.union_all(*parts)


def newest_query(names: Sequence[str]) -> sa.Select[Any]:
    """Per task, its newest execution that is not SCHEDULED: one part per task, each read
    backwards along ``ix_execution_task_eid`` and cut at its first row. A ``max(eid)``
    grouped by task would read every execution of every task, the whole history, on each
    ``GET /tasks``."""
    table = execution_table.c
    parts = [
        sa.select(table.eid)
        .where(table.task == name, table.status != _SCHEDULED)
        .order_by(table.eid.desc())
        .limit(1)
        .subquery()
        .select()
        for name in names
    ]
    return sa.select(execution_table).where(table.eid.in_(sa.union_all(*parts)))


class LookupOperations:
    """The ``Store`` reads by eid prefix and of recent durations (mixed into ``SqlStore``)."""

    engines: Engines
    dialect: Dialect

    async def _read_executions(
        self, conn: AsyncConnection, query: sa.Select[Any]
    ) -> list[Execution]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    @retried("executions_by_prefix")
    async def executions_by_prefix(self, prefix: str, limit: int) -> list[Execution]:
        if not prefix or limit < 1:
            return []
        async with self.engines.read() as conn:
            found = await self._read_executions(conn, prefix_query(self.dialect, prefix, limit))
        # the database orders by its collation; people see the order of the bytes
        return sorted(found, key=lambda execution: execution.eid)

    @retried("eid_neighbours")
    async def eid_neighbours(
        self, eids: Collection[str]
    ) -> dict[str, tuple[str | None, str | None]]:
        unique = list(dict.fromkeys(eids))
        around: dict[str, tuple[str | None, str | None]] = {}
        async with self.engines.read() as conn:
            for start in range(0, len(unique), _TASKS_PER_STATEMENT):
                chunk = unique[start : start + _TASKS_PER_STATEMENT]
                for row in await conn.execute(neighbours_query(self.dialect, chunk)):
                    if row.known:
                        around[row.eid] = (row.before, row.after)
        return around

    @retried("last_executions")
    async def last_executions(self, names: Sequence[str]) -> dict[str, Execution]:
        unique = list(dict.fromkeys(names))
        found: dict[str, Execution] = {}
        async with self.engines.read() as conn:
            for start in range(0, len(unique), _TASKS_PER_STATEMENT):
                query = newest_query(unique[start : start + _TASKS_PER_STATEMENT])
                found.update((e.task, e) for e in await self._read_executions(conn, query))
        return found

    @retried("recent_durations")
    async def recent_durations(
        self, names: Sequence[str], count: int
    ) -> dict[str, list[timedelta]]:
        unique = list(dict.fromkeys(names))
        if not unique or count < 1:
            return {}
        runs: dict[str, list[tuple[str, timedelta]]] = defaultdict(list)
        async with self.engines.read() as conn:
            for start in range(0, len(unique), _TASKS_PER_STATEMENT):
                chunk = unique[start : start + _TASKS_PER_STATEMENT]
                for row in await conn.execute(durations_query(chunk, count)):
                    runs[row.task].append((row.eid, row.finished_at - row.triggered_at))
        # a UNION keeps no order of its own: newest first is by eid, as bytes
        return {
            name: [took for _, took in sorted(found, reverse=True)] for name, found in runs.items()
        }

    @retried("unfinished_backfills")
    async def unfinished_backfills(self, task: str) -> int:
        table = execution_table
        query = sa.select(sa.func.count()).where(
            table.c.task == task,
            table.c.trigger_kind == str(TriggerKind.BACKFILL),
            table.c.status.in_([str(status) for status in HELD]),
        )
        async with self.engines.read() as conn:
            return int((await conn.execute(query)).scalar_one())

"""Pools in SQL: what a pool stands at for people (``GET /pools``, the pool gauges), and a
service's ``Retry-After`` recorded for every node. The start's own reads of a pool are part
of its transaction (``sql_leases``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from datetime import datetime

import sqlalchemy as sa

from ecron.core import ACTIVE, IN_LINE, Status
from ecron.store.engine import Engines
from ecron.store.records import PoolState
from ecron.store.retry import retried
from ecron.store.tables import execution_table, pool_table, task_table


class PoolOperations:
    """The pool operations of ``SqlStore``."""

    engines: Engines

    @retried("hold_back")
    async def hold_back(self, task: str, pool: str | None, until: datetime) -> None:
        if pool is None:
            table, key, column = task_table, task_table.c.name == task, task_table.c.held_back_until
        else:
            table, key, column = pool_table, pool_table.c.name == pool, pool_table.c.held_back_until
        later = sa.or_(column.is_(None), column < until)
        async with self.engines.write() as conn:
            await conn.execute(table.update().where(key, later).values({column.name: until}))

    @retried("pool_states")
    async def pool_states(self, pools: Mapping[str, Collection[str]]) -> dict[str, PoolState]:
        members = {task: pool for pool, tasks in pools.items() for task in tasks}
        running: dict[str, int] = defaultdict(int)
        waiting: dict[str, int] = defaultdict(int)
        task = execution_table.c.task
        counted = (
            sa.select(task, execution_table.c.status, sa.func.count())
            .where(
                task.in_(sorted(members)),
                sa.or_(
                    execution_table.c.status.in_([str(status) for status in ACTIVE]),
                    sa.and_(
                        execution_table.c.status == str(Status.SCHEDULED),
                        execution_table.c.waiting_for.in_(sorted(IN_LINE)),
                    ),
                ),
            )
            .group_by(task, execution_table.c.status)
        )
        rows = sa.select(pool_table.c.name, pool_table.c.held_back_until).where(
            pool_table.c.name.in_(sorted(pools))
        )
        async with self.engines.read() as conn:
            for name, status, count in await conn.execute(counted):
                tally = waiting if status == str(Status.SCHEDULED) else running
                tally[members[name]] += count
            held = {row.name: row.held_back_until for row in await conn.execute(rows)}
        return {name: PoolState(running[name], waiting[name], held.get(name)) for name in pools}

"""The chain side of the SQL store: which executions a chained one was set off by and set
off, and what the patrol's sweep for missed chain starts reads (see ``Store`` for each
contract)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.core import FINAL, Execution
from ecron.store.engine import Engines
from ecron.store.mapping import to_execution
from ecron.store.retry import retried
from ecron.store.tables import execution_table

_FINAL = [str(status) for status in FINAL]
#: At most this many values go into one ``IN (...)`` list.
_CHUNK = 500


class ChainOperations:
    """The ``Store`` operations of chains (mixed into ``SqlStore``)."""

    engines: Engines

    @retried("downstreams_of")
    async def downstreams_of(self, eids: Sequence[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = defaultdict(list)
        table = execution_table.c
        async with self.engines.read() as conn:
            for start in range(0, len(eids), _CHUNK):
                query = (
                    sa.select(table.upstream, table.eid)
                    .where(table.upstream.in_(list(eids[start : start + _CHUNK])))
                    .order_by(table.eid)
                )
                for upstream, eid in await conn.execute(query):
                    found[upstream].append(eid)
        return dict(found)

    @retried("ended_between")
    async def ended_between(
        self, tasks: Sequence[str], since: datetime, until: datetime, limit: int
    ) -> list[Execution]:
        table = execution_table.c
        query = (
            sa.select(execution_table)
            .where(
                table.finished_at >= since,
                table.finished_at < until,
                table.task.in_(list(tasks)),
                table.status.in_(_FINAL),
            )
            .order_by(table.finished_at, table.eid)
            .limit(limit)
        )
        async with self.engines.read() as conn:
            return await _rows(conn, query)

    @retried("newest_of_fire_time")
    async def newest_of_fire_time(
        self, tasks: Sequence[str], scheduled_at: datetime
    ) -> dict[str, Execution]:
        table = execution_table.c
        query = sa.select(execution_table).where(
            table.task.in_(list(tasks)), table.scheduled_at == scheduled_at
        )
        async with self.engines.read() as conn:
            found = await _rows(conn, query)
        newest: dict[str, Execution] = {}
        for execution in sorted(found, key=lambda e: e.eid):
            newest[execution.task] = execution
        return newest

    @retried("fire_times_taken")
    async def fire_times_taken(self, task: str, times: Sequence[datetime]) -> set[datetime]:
        table = execution_table.c
        taken: set[datetime] = set()
        async with self.engines.read() as conn:
            for start in range(0, len(times), _CHUNK):
                query = sa.select(table.scheduled_at).where(
                    table.task == task, table.scheduled_at.in_(list(times[start : start + _CHUNK]))
                )
                taken.update((await conn.execute(query)).scalars())
        return taken


async def _rows(conn: AsyncConnection, query: sa.Select[Any]) -> list[Execution]:
    return [to_execution(row) for row in (await conn.execute(query)).mappings()]

"""Stalled executions, in SQL: RUNNING ones whose progress has not moved for their task's
``expect.progress_within``, and the once-only mark of ``execution_stalled`` (migration
0012). The mark is a column of its own, outside the state a state write sets: recording it
raises no version, so it never makes the owner's next write fail its compare-and-set."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.core import Execution, Status
from ecron.store.engine import Engines
from ecron.store.retry import retried, retrying
from ecron.store.tables import execution_table


class StalledOperations:
    """The ``Store``'s stalled-execution operations (mixed into ``SqlStore``)."""

    engines: Engines

    async def _read_executions(
        self, conn: AsyncConnection, query: sa.Select[Any]
    ) -> list[Execution]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    @retried("unmoving")
    async def unmoving(self, since: Mapping[str, datetime], limit: int) -> list[Execution]:
        if not since or limit < 1:
            return []
        table = execution_table.c
        # the rule of core.progress_since: the last change of progress, else the trigger
        moved = sa.func.coalesce(table.progress_at, table.triggered_at)
        query = (
            sa.select(execution_table)
            .where(
                table.status == str(Status.RUNNING),
                table.stalled_alerted_at.is_(None),
                sa.or_(*(sa.and_(table.task == task, moved <= at) for task, at in since.items())),
            )
            .order_by(table.eid)
            .limit(limit)
        )
        async with self.engines.read() as conn:
            return await self._read_executions(conn, query)

    @retried("mark_stalled")
    async def mark_stalled(self, eid: str, now: datetime) -> bool:
        async with self.engines.write() as conn:
            result = await conn.execute(
                sa.update(execution_table)
                .where(execution_table.c.eid == eid, execution_table.c.stalled_alerted_at.is_(None))
                .values(stalled_alerted_at=now)
            )
            if result.rowcount == 1 or not retrying():
                return result.rowcount == 1
            # the attempt before may have recorded it, its commit lost: then it is at ``now``
            query = sa.select(execution_table.c.stalled_alerted_at).where(
                execution_table.c.eid == eid
            )
            return bool((await conn.execute(query)).scalar() == now)

"""Reads for people, in SQL: the durations of a task's recent successful runs (which a
snapshot's ETA rests on), read along an index of their own (migrations 0005 and 0007)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from ecron.core import Status
from ecron.store.engine import Engines
from ecron.store.retry import retried
from ecron.store.tables import execution_table

#: At most this many tasks go into one statement (SQLite allows 500 parts to a UNION).
_TASKS_PER_STATEMENT = 100
#: Written out, not bound: the partial index ``ix_execution_task_success`` is used only when
#: the query's condition is visibly the index's (SQLite cannot see through a parameter).
_IS_SUCCESS = execution_table.c.status == sa.literal_column(f"'{Status.SUCCESS}'")


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


class LookupOperations:
    """The ``Store`` reads of recent durations (mixed into ``SqlStore``)."""

    engines: Engines

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

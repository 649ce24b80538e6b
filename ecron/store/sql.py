"""``SqlStore``: the one store implementation, for SQLite and PostgreSQL."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron import __version__
from ecron.core import ACTIVE, FINAL, INTERRUPTED_REASONS, Execution, Status, Step
from ecron.store.base import FirePlan, Page, Planner, Store, TaskState
from ecron.store.engine import Engines
from ecron.store.lock import cluster_lock
from ecron.store.mapping import (
    changed_values,
    execution_values,
    step_values,
    to_execution,
    to_step,
    to_task,
)
from ecron.store.sql_tasks import TaskOperations, can_fire
from ecron.store.tables import (
    execution_table,
    node_table,
    setting_table,
    step_table,
    task_table,
)

_ACTIVE = [str(status) for status in ACTIVE]


class SqlStore(TaskOperations, Store):
    """The store on SQLAlchemy Core; see ``Store`` for the contract of each operation."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines
        self.dialect = engines.dialect

    @classmethod
    def open(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        observe: Callable[[str, float], None] | None = None,
    ) -> SqlStore:
        """A store on the database at ``url`` (the schema must be migrated first);
        ``observe`` hears the duration of each transaction."""
        return cls(Engines(url, pool_size=pool_size, observe=observe))

    async def close(self) -> None:
        await self.engines.dispose()

    def _insert(self, table: sa.Table) -> Any:
        return (postgresql.insert if self.dialect.name == "postgresql" else sqlite.insert)(table)

    # -- tasks ------------------------------------------------------------------------------

    async def count_due(self, horizon: datetime, names: Collection[str] | None = None) -> int:
        query = (
            sa.select(sa.func.count())
            .select_from(task_table)
            .where(*can_fire(), task_table.c.next_fire_at <= horizon)
        )
        if names is not None:
            query = query.where(task_table.c.name.in_(list(names)))
        async with self.engines.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def claim_due_fires(
        self, horizon: datetime, limit: int, plan: Planner, names: Collection[str] | None = None
    ) -> list[Execution]:
        query = (
            sa.select(task_table)
            .where(*can_fire(), task_table.c.next_fire_at <= horizon)
            .order_by(task_table.c.next_fire_at)
            .limit(limit)
        )
        if names is not None:
            query = query.where(task_table.c.name.in_(list(names)))
        if self.dialect.skip_locked:
            query = query.with_for_update(skip_locked=True)
        inserted: list[Execution] = []
        async with self.engines.write() as conn:
            tasks = [to_task(row) for row in (await conn.execute(query)).mappings()]
            if not tasks:
                return []
            active = await self._active_by_task(conn, [task.name for task in tasks])
            for task in tasks:
                decided = plan(task, active.get(task.name, []))
                if await self._advance(conn, task, decided):
                    inserted.extend(await self._insert_executions(conn, decided.executions))
        return inserted

    async def _advance(self, conn: AsyncConnection, task: TaskState, plan: FirePlan) -> bool:
        """Move the task's fire time, only if it still is what we read."""
        result = await conn.execute(
            sa.update(task_table)
            .where(
                task_table.c.name == task.name,
                task_table.c.next_fire_at == task.next_fire_at,
                task_table.c.version == task.version,
            )
            .values(next_fire_at=plan.next_fire_at, version=task.version + 1)
        )
        return result.rowcount == 1

    async def _insert_executions(
        self, conn: AsyncConnection, executions: Sequence[Execution]
    ) -> list[Execution]:
        inserted = []
        for execution in executions:
            statement = (
                self._insert(execution_table)
                .values(execution_values(execution))
                .on_conflict_do_nothing()
                .returning(execution_table.c.eid)
            )
            if (await conn.execute(statement)).first() is None:
                continue
            if execution.steps:
                await conn.execute(
                    sa.insert(step_table), [step_values(execution.eid, s) for s in execution.steps]
                )
            inserted.append(execution)
        return inserted

    async def _active_by_task(
        self, conn: AsyncConnection, names: Sequence[str]
    ) -> dict[str, list[Execution]]:
        rows = (
            (
                await conn.execute(
                    sa.select(execution_table)
                    .where(execution_table.c.task.in_(names), execution_table.c.status.in_(_ACTIVE))
                    .order_by(execution_table.c.eid)
                )
            )
            .mappings()
            .all()
        )
        steps = await self._steps(conn, [row["eid"] for row in rows])
        active: dict[str, list[Execution]] = defaultdict(list)
        for row in rows:
            active[row["task"]].append(to_execution(row, steps.get(row["eid"], ())))
        return active

    # -- executions -------------------------------------------------------------------------

    async def create_execution(self, execution: Execution) -> Execution | None:
        async with self.engines.write() as conn:
            inserted = await self._insert_executions(conn, [execution])
        return inserted[0] if inserted else None

    async def get_execution(self, eid: str) -> Execution | None:
        async with self.engines.read() as conn:
            row = (
                (await conn.execute(sa.select(execution_table).where(execution_table.c.eid == eid)))
                .mappings()
                .first()
            )
            if row is None:
                return None
            steps = await self._steps(conn, [eid])
        return to_execution(row, steps.get(eid, ()))

    async def list_executions(
        self,
        *,
        task: str | None = None,
        status: Status | None = None,
        limit: int = 50,
        before: str | None = None,
    ) -> Page:
        query = sa.select(execution_table).order_by(execution_table.c.eid.desc()).limit(limit + 1)
        if task is not None:
            query = query.where(execution_table.c.task == task)
        if status is not None:
            query = query.where(execution_table.c.status == str(status))
        if before is not None:
            query = query.where(execution_table.c.eid < before)
        async with self.engines.read() as conn:
            rows = (await conn.execute(query)).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            steps = await self._steps(conn, [row["eid"] for row in rows])
        items = [to_execution(row, steps.get(row["eid"], ())) for row in rows]
        return Page(items=items, next=items[-1].eid if more else None)

    async def active_executions(self, task: str) -> list[Execution]:
        async with self.engines.read() as conn:
            return (await self._active_by_task(conn, [task])).get(task, [])

    async def last_executions(self, names: Sequence[str]) -> dict[str, Execution]:
        if not names:
            return {}
        newest = (
            sa.select(sa.func.max(execution_table.c.eid))
            .where(execution_table.c.task.in_(names))
            .group_by(execution_table.c.task)
        )
        async with self.engines.read() as conn:
            rows = (
                (
                    await conn.execute(
                        sa.select(execution_table).where(execution_table.c.eid.in_(newest))
                    )
                )
                .mappings()
                .all()
            )
            steps = await self._steps(conn, [row["eid"] for row in rows])
        return {row["task"]: to_execution(row, steps.get(row["eid"], ())) for row in rows}

    async def _steps(self, conn: AsyncConnection, eids: Sequence[str]) -> dict[str, list[Step]]:
        if not eids:
            return {}
        rows = (
            await conn.execute(
                sa.select(step_table)
                .where(step_table.c.eid.in_(eids))
                .order_by(step_table.c.eid, step_table.c.number)
            )
        ).mappings()
        steps: dict[str, list[Step]] = defaultdict(list)
        for row in rows:
            steps[row["eid"]].append(to_step(row))
        return steps

    async def save(self, writes: Sequence[tuple[Execution, Execution]]) -> list[Execution | None]:
        stored: list[Execution | None] = []
        async with self.engines.write() as conn:
            for before, after in writes:
                stored.append(await self._save_one(conn, before, after))
        return stored

    async def _save_one(
        self, conn: AsyncConnection, before: Execution, after: Execution
    ) -> Execution | None:
        values = changed_values(before, after)
        values.pop("fence", None)
        values["version"] = before.version + 1
        result = await conn.execute(
            sa.update(execution_table)
            .where(
                execution_table.c.eid == before.eid,
                execution_table.c.fence == before.fence,
                execution_table.c.version == before.version,
            )
            .values(values)
        )
        if result.rowcount != 1:
            return None
        for old, new in zip(before.steps, after.steps, strict=True):
            if old != new:
                await conn.execute(
                    sa.update(step_table)
                    .where(step_table.c.eid == before.eid, step_table.c.number == new.number)
                    .values(step_values(before.eid, new))
                )
        return after.evolve(version=before.version + 1, fence=before.fence)

    async def claim_runnable(
        self,
        node: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        names: Collection[str] | None = None,
    ) -> list[Execution]:
        free = sa.or_(execution_table.c.owner.is_(None), execution_table.c.lease_until < now)
        query = (
            sa.select(execution_table.c.eid)
            .where(execution_table.c.status.in_(_ACTIVE), free)
            .order_by(execution_table.c.lease_until)
            .limit(limit)
        )
        if names is not None:
            query = query.where(execution_table.c.task.in_(list(names)))
        if self.dialect.skip_locked:
            query = query.with_for_update(skip_locked=True)
        async with self.engines.write() as conn:
            eids = list((await conn.execute(query)).scalars())
            taken = await self._take(conn, node, eids, lease_until, free) if eids else []
        return sorted(taken, key=lambda e: e.eid)

    async def renew_leases(self, node: str, eids: Sequence[str], lease_until: datetime) -> set[str]:
        if not eids:
            return set()
        async with self.engines.write() as conn:
            rows = await conn.execute(
                sa.update(execution_table)
                .where(execution_table.c.eid.in_(eids), execution_table.c.owner == node)
                .values(lease_until=lease_until)
                .returning(execution_table.c.eid)
            )
            return set(rows.scalars())

    async def release_leases(self, node: str, eids: Sequence[str]) -> None:
        if not eids:
            return
        async with self.engines.write() as conn:
            await conn.execute(
                sa.update(execution_table)
                .where(execution_table.c.eid.in_(eids), execution_table.c.owner == node)
                .values(owner=None, lease_until=None, version=execution_table.c.version + 1)
            )

    async def resumes_of(self, eids: Sequence[str]) -> dict[str, str]:
        if not eids:
            return {}
        query = sa.select(execution_table.c.resume_of, execution_table.c.eid).where(
            execution_table.c.resume_of.in_(list(eids))
        )
        async with self.engines.read() as conn:
            return {row.resume_of: row.eid for row in await conn.execute(query)}

    async def interrupted_unresumed(
        self, task: str, since: datetime, below_attempt: int, limit: int
    ) -> list[Execution]:
        resumed = sa.select(execution_table.c.resume_of).where(
            execution_table.c.resume_of.is_not(None)
        )
        query = (
            sa.select(execution_table)
            .where(
                execution_table.c.task == task,
                execution_table.c.status == str(Status.FAILED),
                execution_table.c.reason.in_([str(r) for r in INTERRUPTED_REASONS]),
                execution_table.c.finished_at >= since,
                execution_table.c.resume_attempt < below_attempt,
                execution_table.c.resume_given_up_at.is_(None),
                execution_table.c.eid.not_in(resumed),
            )
            .order_by(execution_table.c.finished_at)
            .limit(limit)
        )
        return await self._executions(query)

    async def give_up_resume(self, eid: str, now: datetime) -> bool:
        async with self.engines.write() as conn:
            result = await conn.execute(
                sa.update(execution_table)
                .where(
                    execution_table.c.eid == eid,
                    execution_table.c.resume_given_up_at.is_(None),
                )
                .values(resume_given_up_at=now)
            )
        return result.rowcount == 1

    async def stuck(
        self, now: datetime, silent_since: Mapping[str, datetime], limit: int
    ) -> list[Execution]:
        last_heard = sa.func.coalesce(
            execution_table.c.last_report_at, execution_table.c.triggered_at
        )
        silent = [
            sa.and_(execution_table.c.task == task, last_heard < since)
            for task, since in silent_since.items()
        ]
        query = (
            sa.select(execution_table)
            .where(
                execution_table.c.status.in_(_ACTIVE),
                sa.or_(execution_table.c.deadline < now, *silent),
            )
            .order_by(execution_table.c.eid)
            .limit(limit)
        )
        return await self._executions(query)

    async def force_claim(
        self, node: str, eids: Sequence[str], lease_until: datetime
    ) -> list[Execution]:
        if not eids:
            return []
        async with self.engines.write() as conn:
            return await self._take(conn, node, list(eids), lease_until)

    async def _take(
        self,
        conn: AsyncConnection,
        node: str,
        eids: list[str],
        lease_until: datetime,
        *conditions: sa.ColumnElement[bool],
    ) -> list[Execution]:
        """Give ``node`` the leases of the active ones of ``eids`` (meeting ``conditions``),
        raising their fence; the executions as they are now."""
        taken = (
            sa.update(execution_table)
            .where(
                execution_table.c.eid.in_(eids),
                execution_table.c.status.in_(_ACTIVE),
                *conditions,
            )
            .values(
                owner=node,
                lease_until=lease_until,
                fence=execution_table.c.fence + 1,
                version=execution_table.c.version + 1,
            )
            .returning(*execution_table.c)
        )
        rows = (await conn.execute(taken)).mappings().all()
        steps = await self._steps(conn, [row["eid"] for row in rows])
        return [to_execution(row, steps.get(row["eid"], ())) for row in rows]

    async def purge_history(self, before: datetime, batch: int) -> int:
        old = (
            sa.select(execution_table.c.eid)
            .where(
                execution_table.c.status.in_([str(s) for s in FINAL]),
                execution_table.c.finished_at < before,
            )
            .limit(batch)
        )
        async with self.engines.write() as conn:
            eids = list((await conn.execute(old)).scalars())
            if eids:
                await conn.execute(sa.delete(step_table).where(step_table.c.eid.in_(eids)))
                await conn.execute(
                    sa.delete(execution_table).where(execution_table.c.eid.in_(eids))
                )
        return len(eids)

    async def _executions(self, query: sa.Select[Any]) -> list[Execution]:
        async with self.engines.read() as conn:
            rows = (await conn.execute(query)).mappings().all()
            steps = await self._steps(conn, [row["eid"] for row in rows])
        return [to_execution(row, steps.get(row["eid"], ())) for row in rows]

    # -- nodes and shared settings --------------------------------------------------------

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        return cluster_lock(self.engines, name, wait=False)

    async def heartbeat(self, node: str, now: datetime, *, host: str = "", pid: int = 0) -> None:

        statement = self._insert(node_table).values(
            node_id=node, started_at=now, heartbeat_at=now, host=host, pid=pid, version=__version__
        )
        statement = statement.on_conflict_do_update(
            index_elements=[node_table.c.node_id], set_={"heartbeat_at": now}
        )
        async with self.engines.write() as conn:
            await conn.execute(statement)

    async def live_nodes(self, since: datetime) -> int:
        query = sa.select(sa.func.count()).where(node_table.c.heartbeat_at >= since)
        async with self.engines.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def remove_node(self, node: str) -> None:
        async with self.engines.write() as conn:
            await conn.execute(sa.delete(node_table).where(node_table.c.node_id == node))

    async def shared_secret(self, candidate: str) -> str:
        async with self.engines.write() as conn:
            await conn.execute(
                self._insert(setting_table)
                .values(key="callback_secret", value=candidate)
                .on_conflict_do_nothing()
            )
            value: str = (
                await conn.execute(
                    sa.select(setting_table.c.value).where(setting_table.c.key == "callback_secret")
                )
            ).scalar_one()
        return value

    async def ping(self) -> None:
        async with self.engines.read() as conn:
            await conn.execute(sa.text("SELECT 1"))

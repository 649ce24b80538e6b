"""``SqlStore``: the one store implementation, for SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.config.model import TaskSpec
from ecron.core import ACTIVE, Execution, Status, Step
from ecron.schedules import next_fire_time
from ecron.store.base import FirePlan, Page, Planner, Store, SyncResult, TaskState
from ecron.store.engine import Engines
from ecron.store.mapping import (
    changed_values,
    execution_values,
    step_values,
    to_execution,
    to_step,
    to_task,
)
from ecron.store.tables import (
    execution_table,
    node_table,
    setting_table,
    step_table,
    task_table,
)

_ACTIVE = [str(status) for status in ACTIVE]
_REDACTED = "***"


def spec_json(spec: TaskSpec) -> dict[str, Any]:
    """The spec as stored: JSON, with header values and secrets redacted."""
    data = spec.model_dump(mode="json")

    def redact(call: dict[str, Any]) -> None:
        if call.get("headers"):
            call["headers"] = dict.fromkeys(call["headers"], _REDACTED)
        if call.get("secret"):
            call["secret"] = _REDACTED

    redact(data)
    for step in data.get("steps") or []:
        redact(step)
    return data


def spec_hash(spec: TaskSpec) -> str:
    """A digest of the whole spec (secrets included) to notice any change."""
    text = json.dumps(spec.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class SqlStore(Store):
    """The store on SQLAlchemy Core; see ``Store`` for the contract of each operation."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines
        self.dialect = engines.dialect

    @classmethod
    def open(cls, url: str, *, pool_size: int = 10) -> SqlStore:
        """A store on the database at ``url`` (the schema must be migrated first)."""
        return cls(Engines(url, pool_size=pool_size))

    async def close(self) -> None:
        await self.engines.dispose()

    def _insert(self, table: sa.Table) -> Any:
        return (postgresql.insert if self.dialect.name == "postgresql" else sqlite.insert)(table)

    # -- tasks ------------------------------------------------------------------------------

    async def sync_tasks(self, specs: Mapping[str, TaskSpec], now: datetime) -> SyncResult:
        result = SyncResult()
        async with self.engines.write() as conn:
            rows = {
                row["name"]: row for row in (await conn.execute(sa.select(task_table))).mappings()
            }
            for name, spec in specs.items():
                row = rows.get(name)
                if row is None:
                    await conn.execute(sa.insert(task_table).values(_new_task(spec, now)))
                    result.added.append(name)
                elif row["spec_hash"] != spec_hash(spec) or row["retired"]:
                    await conn.execute(
                        sa.update(task_table)
                        .where(task_table.c.name == name)
                        .values(_changed_task(row, spec, now))
                    )
                    result.updated.append(name)
            for name, row in rows.items():
                if name not in specs and not row["retired"]:
                    await conn.execute(
                        sa.update(task_table)
                        .where(task_table.c.name == name)
                        .values(
                            retired=True,
                            next_fire_at=None,
                            updated_at=now,
                            version=row["version"] + 1,
                        )
                    )
                    result.retired.append(name)
        return result

    async def get_task(self, name: str) -> TaskState | None:
        async with self.engines.read() as conn:
            row = (
                (await conn.execute(sa.select(task_table).where(task_table.c.name == name)))
                .mappings()
                .first()
            )
        return None if row is None else to_task(row)

    async def list_tasks(self, *, include_retired: bool = False) -> list[TaskState]:
        query = sa.select(task_table).order_by(task_table.c.name)
        if not include_retired:
            query = query.where(task_table.c.retired.is_(False))
        async with self.engines.read() as conn:
            return [to_task(row) for row in (await conn.execute(query)).mappings()]

    async def next_fire_time(self) -> datetime | None:
        query = sa.select(sa.func.min(task_table.c.next_fire_at)).where(*_can_fire())
        async with self.engines.read() as conn:
            value: datetime | None = (await conn.execute(query)).scalar()
        return value

    async def claim_due_fires(
        self, horizon: datetime, limit: int, plan: Planner
    ) -> list[Execution]:
        query = (
            sa.select(task_table)
            .where(*_can_fire(), task_table.c.next_fire_at <= horizon)
            .order_by(task_table.c.next_fire_at)
            .limit(limit)
        )
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

    async def task_finished(
        self,
        name: str,
        finished_at: datetime,
        succeeded: bool | None,
        next_fire_at: datetime | None,
    ) -> None:
        failures = task_table.c.consecutive_failures
        values: dict[str, Any] = {"last_end_at": finished_at, "version": task_table.c.version + 1}
        if succeeded is not None:
            values["consecutive_failures"] = 0 if succeeded else failures + 1
        if next_fire_at is not None:
            values["next_fire_at"] = next_fire_at
        async with self.engines.write() as conn:
            await conn.execute(
                sa.update(task_table).where(task_table.c.name == name).values(values)
            )

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
        self, node: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[Execution]:
        free = sa.or_(execution_table.c.owner.is_(None), execution_table.c.lease_until < now)
        query = (
            sa.select(execution_table.c.eid)
            .where(execution_table.c.status.in_(_ACTIVE), free)
            .order_by(execution_table.c.lease_until)
            .limit(limit)
        )
        if self.dialect.skip_locked:
            query = query.with_for_update(skip_locked=True)
        async with self.engines.write() as conn:
            eids = list((await conn.execute(query)).scalars())
            if not eids:
                return []
            rows = (
                (
                    await conn.execute(
                        sa.update(execution_table)
                        .where(
                            execution_table.c.eid.in_(eids),
                            execution_table.c.status.in_(_ACTIVE),
                            free,
                        )
                        .values(
                            owner=node,
                            lease_until=lease_until,
                            fence=execution_table.c.fence + 1,
                            version=execution_table.c.version + 1,
                        )
                        .returning(*execution_table.c)
                    )
                )
                .mappings()
                .all()
            )
            steps = await self._steps(conn, [row["eid"] for row in rows])
        return sorted(
            (to_execution(row, steps.get(row["eid"], ())) for row in rows), key=lambda e: e.eid
        )

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

    # -- nodes and shared settings --------------------------------------------------------

    async def heartbeat(self, node: str, now: datetime, *, host: str = "", pid: int = 0) -> None:
        from ecron import __version__

        statement = self._insert(node_table).values(
            node_id=node, started_at=now, heartbeat_at=now, host=host, pid=pid, version=__version__
        )
        statement = statement.on_conflict_do_update(
            index_elements=[node_table.c.node_id], set_={"heartbeat_at": now}
        )
        async with self.engines.write() as conn:
            await conn.execute(statement)

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


def _can_fire() -> list[sa.ColumnElement[bool]]:
    return [
        task_table.c.next_fire_at.is_not(None),
        task_table.c.enabled.is_(True),
        task_table.c.paused.is_(False),
        task_table.c.retired.is_(False),
    ]


def _new_task(spec: TaskSpec, now: datetime) -> dict[str, Any]:
    return {
        "name": spec.name,
        "spec": spec_json(spec),
        "spec_hash": spec_hash(spec),
        "schedule_text": spec.fire_schedule.text,
        "next_fire_at": next_fire_time(spec.fire_schedule, None, now) if spec.enabled else None,
        "enabled": spec.enabled,
        "created_at": now,
        "updated_at": now,
    }


def _changed_task(row: RowMapping, spec: TaskSpec, now: datetime) -> dict[str, Any]:
    old = TaskSpec.model_validate(row["spec"])
    values = _new_task(spec, now)
    del values["created_at"]
    same_schedule = (old.schedule, old.timezone, old.enabled) == (
        spec.schedule,
        spec.timezone,
        spec.enabled,
    )
    if same_schedule and not row["retired"]:
        values["next_fire_at"] = row["next_fire_at"]  # the schedule goes on where it was
    values["retired"] = False
    values["version"] = row["version"] + 1
    return values

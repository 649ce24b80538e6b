"""The task side of the SQL store: the task table follows the config, and records how
executions of each task end (failures in a row, pause, the next ``after`` fire time)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.config.model import TaskSpec
from ecron.store.bulk import Batch, Kind
from ecron.store.changes import FirstFires, StoredTask, spec_json, task_set_change
from ecron.store.engine import Engines
from ecron.store.mapping import to_task
from ecron.store.records import SyncResult, TaskState
from ecron.store.retry import retried, retrying
from ecron.store.tables import task_table


class TaskOperations:
    """The ``Store`` operations on tasks (mixed into ``SqlStore``)."""

    engines: Engines
    #: Made once, when the store opens (``successes_batch``, ``stamps_batch``).
    _successes: Batch
    _stamps: Batch

    @retried("sync_tasks")
    async def sync_tasks(self, specs: Mapping[str, TaskSpec], firsts: FirstFires) -> SyncResult:
        result = SyncResult()
        now = firsts.now
        async with self.engines.write() as conn:
            rows = {row["name"]: row for row in (await conn.execute(_SUMMARY)).mappings()}
            await _rekey(conn, rows, specs)
            # the specs of rows that may have changed, read to compare them field by field
            unlike = [name for name, row in rows.items() if _unlike(row, specs.get(name))]
            found = {row["name"]: row for row in await _whole_rows(conn, unlike)}
            stored = {name: _stored(found.get(name, row)) for name, row in rows.items()}
            change = task_set_change(stored, specs, firsts)
            after = {name: times[1] for name, times in change.next_fire.items()}
            if new := [name for name in change.added if name not in rows]:
                values = [_new_task(specs[name], now, after[name]) for name in new]
                # another node starting at the same moment may add them first: its rows stay
                insert = self.engines.dialect.insert(task_table).on_conflict_do_nothing()
                added = await conn.execute(insert.returning(task_table.c.name), values)
                result.added.extend(sorted(added.scalars()))
            if updated := [name for name in (*change.added, *change.changed) if name in rows]:
                values = [
                    _changed_task(found[name], specs[name], now, after[name]) for name in updated
                ]
                await conn.execute(_UPDATE_TASK, values)  # one executemany for them all
                result.updated.extend(sorted(updated))
            if change.retired:
                result.retired.extend(await _retire(conn, change.retired, now))
        written = [*result.added, *(name for name in change.added if name in rows)]
        return replace(result, changes=change.only(written, result.retired))

    @retried("stored_tasks")
    async def stored_tasks(self) -> dict[str, StoredTask]:
        async with self.engines.read() as conn:
            rows = (await conn.execute(sa.select(task_table))).mappings()
            return {row["name"]: _stored(row) for row in rows}

    @retried("get_task")
    async def get_task(self, name: str) -> TaskState | None:
        async with self.engines.read() as conn:
            row = (
                (await conn.execute(sa.select(task_table).where(task_table.c.name == name)))
                .mappings()
                .first()
            )
        return None if row is None else to_task(row)

    @retried("list_tasks")
    async def list_tasks(self, *, include_retired: bool = False) -> list[TaskState]:
        query = sa.select(task_table).order_by(task_table.c.name)
        if not include_retired:
            query = query.where(task_table.c.retired.is_(False))
        async with self.engines.read() as conn:
            return [to_task(row) for row in (await conn.execute(query)).mappings()]

    @retried("next_fire_time")
    async def next_fire_time(self) -> datetime | None:
        query = sa.select(sa.func.min(task_table.c.next_fire_at)).where(*can_fire())
        async with self.engines.read() as conn:
            value: datetime | None = (await conn.execute(query)).scalar()
        return value

    @retried("rewind_fire_times")
    async def rewind_fire_times(self, moves: Mapping[str, tuple[datetime, datetime]]) -> None:
        if not moves:
            return
        kind = task_table.c.next_fire_at.type
        update = (
            sa.update(task_table)
            .where(
                task_table.c.name == sa.bindparam("task"),
                task_table.c.next_fire_at == sa.bindparam("old", type_=kind),
            )
            .values(next_fire_at=sa.bindparam("new", type_=kind), version=task_table.c.version + 1)
        )
        rows = [{"task": name, "old": old, "new": new} for name, (old, new) in moves.items()]
        async with self.engines.write() as conn:
            await conn.execute(update, rows)

    @retried("task_finished")
    async def task_finished(
        self,
        name: str,
        finished_at: datetime,
        succeeded: bool | None,
        next_fire_at: datetime | None,
    ) -> TaskState | None:
        failures = task_table.c.consecutive_failures
        values: dict[str, Any] = {"last_end_at": finished_at, "version": task_table.c.version + 1}
        if succeeded is not None:
            values["consecutive_failures"] = 0 if succeeded else failures + 1
        if succeeded:
            values["last_success_at"] = finished_at
        if next_fire_at is not None:
            values["next_fire_at"] = next_fire_at
        named = task_table.c.name == name
        async with self.engines.write() as conn:
            if retrying():  # the attempt before may have recorded this end: not twice
                row = (await conn.execute(sa.select(task_table).where(named))).mappings().first()
                if row is None or row["last_end_at"] == finished_at:
                    return None if row is None else to_task(row)
            update = sa.update(task_table).where(named).values(values)
            row = (await conn.execute(update.returning(*task_table.c))).mappings().first()
        return None if row is None else to_task(row)

    @retried("tasks_succeeded")
    async def tasks_succeeded(
        self, ends: Mapping[str, datetime], stamp: Collection[str] = ()
    ) -> None:
        if not ends:
            return
        rows = [{"name": name, "last_end_at": at} for name, at in ends.items()]
        stamps = [{"name": name, "last_end_at": ends[name]} for name in stamp if name in ends]
        async with self.engines.write() as conn:
            await self._successes.update(conn, rows, returning="name")
            if stamps:
                await self._stamps.update(conn, stamps, returning="name")

    @retried("last_successes")
    async def last_successes(self) -> dict[str, datetime]:
        query = sa.select(task_table.c.name, task_table.c.last_success_at).where(
            task_table.c.last_success_at.is_not(None), task_table.c.retired.is_(False)
        )
        async with self.engines.read() as conn:
            return dict((await conn.execute(query)).all())

    @retried("mark_overdue")
    async def mark_overdue(self, task: TaskState, now: datetime) -> bool:
        table = task_table.c
        update = (
            sa.update(task_table)
            .where(
                table.name == task.name,
                table.last_success_at.is_not_distinct_from(task.last_success_at),
                table.overdue_at.is_not_distinct_from(task.overdue_at),
            )
            .values(overdue_at=now)
        )
        async with self.engines.write() as conn:
            result = await conn.execute(update)
            if result.rowcount == 1 or not retrying():
                return result.rowcount == 1
            # the attempt before may have written it, its commit lost: then it says ``now``
            query = sa.select(table.overdue_at).where(table.name == task.name)
            return bool((await conn.execute(query)).scalar() == now)

    @retried("set_paused")
    async def set_paused(
        self,
        name: str,
        paused: bool,
        reason: str | None,
        next_fire_at: datetime | None,
        *,
        version: int,
    ) -> TaskState | None:
        values: dict[str, Any] = {
            "paused": paused,
            "paused_reason": reason if paused else None,
            "version": version + 1,
        }
        if not paused:
            values.update(consecutive_failures=0, next_fire_at=next_fire_at)
        update = (
            sa.update(task_table)
            .where(task_table.c.name == name, task_table.c.version == version)
            .values(values)
            .returning(*task_table.c)
        )
        async with self.engines.write() as conn:
            row = (await conn.execute(update)).mappings().first()
        return None if row is None else to_task(row)


def can_fire() -> list[sa.ColumnElement[bool]]:
    return [
        task_table.c.next_fire_at.is_not(None),
        task_table.c.enabled.is_(True),
        task_table.c.paused.is_(False),
        task_table.c.retired.is_(False),
    ]


def _new_task(spec: TaskSpec, now: datetime, first: datetime | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "spec": spec_json(spec),
        "spec_hash": spec.digest,
        "schedule_text": spec.fire_schedule.text,
        "next_fire_at": first if spec.enabled else None,
        "enabled": spec.enabled,
        "created_at": now,
        "updated_at": now,
    }


#: One changed task row, as an executemany of this statement: ``b_name`` finds the row, a
#: compare-and-set on the ``b_version`` it was read at (a node that synced it meanwhile wins).
_UPDATE_TASK = (
    sa.update(task_table)
    .where(
        task_table.c.name == sa.bindparam("b_name"),
        task_table.c.version == sa.bindparam("b_version"),
    )
    .values(
        {
            column: sa.bindparam(column)
            for column in (
                "spec",
                "spec_hash",
                "schedule_text",
                "next_fire_at",
                "enabled",
                "updated_at",
                "retired",
                "version",
            )
        }
    )
)


def _changed_task(
    row: RowMapping, spec: TaskSpec, now: datetime, next_fire_at: datetime | None
) -> dict[str, Any]:
    """The new values of a task row whose spec changed (or that comes back from retirement),
    with the next fire time ``task_set_change`` gave it."""
    values = _new_task(spec, now, next_fire_at)
    del values["created_at"], values["name"]
    values.update(
        b_name=row["name"], b_version=row["version"], retired=False, version=row["version"] + 1
    )
    return values


async def _retire(conn: AsyncConnection, names: Collection[str], now: datetime) -> list[str]:
    """Retire the tasks ``names`` not retired yet: those it retired, by name."""
    retired = await conn.execute(
        sa.update(task_table)
        .where(task_table.c.name.in_(names), task_table.c.retired.is_(False))
        .values(retired=True, next_fire_at=None, updated_at=now, version=task_table.c.version + 1)
        .returning(task_table.c.name)
    )
    return sorted(retired.scalars())


#: What a sync reads of every task row; the whole row only of those that may have changed.
_SUMMARY = sa.select(
    task_table.c.name, task_table.c.spec_hash, task_table.c.retired, task_table.c.next_fire_at
)


async def _whole_rows(conn: AsyncConnection, names: Collection[str]) -> list[RowMapping]:
    if not names:
        return []
    query = sa.select(task_table).where(task_table.c.name.in_(names))
    return list((await conn.execute(query)).mappings())


def _unlike(row: Any, spec: TaskSpec | None) -> bool:
    """Whether a task row may differ from its loaded ``spec`` (None: no longer loaded)."""
    return spec is not None and (row["spec_hash"] != spec.digest or row["retired"])


async def _rekey(
    conn: AsyncConnection, rows: dict[str, Any], specs: Mapping[str, TaskSpec]
) -> None:
    """Rows that hold their loaded spec under its plain digest (written before digests were
    keyed) get its keyed digest, as no change: ``rows`` (by name) is updated to match."""
    rekeyed = {
        name: specs[name].digest
        for name, row in rows.items()
        if name in specs
        and row["spec_hash"] != specs[name].digest
        and row["spec_hash"] == specs[name].plain_digest
    }
    if not rekeyed:
        return
    update = (
        sa.update(task_table)
        .where(
            task_table.c.name == sa.bindparam("b_name"),
            task_table.c.spec_hash == sa.bindparam("b_old"),
        )
        .values(spec_hash=sa.bindparam("b_new"))
    )
    values = [
        {"b_name": name, "b_old": rows[name]["spec_hash"], "b_new": new}
        for name, new in rekeyed.items()
    ]
    await conn.execute(update, values)
    for name, new in rekeyed.items():
        rows[name] = {**rows[name], "spec_hash": new}


def _stored(row: Any) -> StoredTask:
    """A task row as ``task_set_change`` compares it (its spec only when it was read)."""
    return StoredTask(
        name=row["name"],
        spec=row.get("spec"),
        spec_hash=row["spec_hash"],
        retired=row["retired"],
        next_fire_at=row["next_fire_at"],
    )


def successes_batch(dialect: str) -> Batch:
    """Successes recorded on many tasks at once: most tasks count no failures, and their
    rows are not written."""
    columns: dict[str, Kind] = {"name": "text", "last_end_at": "time"}
    return Batch(
        dialect,
        "task",
        columns,
        key=["name"],
        assign={"last_end_at": "last_end_at", "last_success_at": "last_end_at"},
        also="consecutive_failures = 0, version = version + 1",
        where="consecutive_failures <> 0",
    )


def stamps_batch(dialect: str) -> Batch:
    """The end of the newest success written on many tasks at once, whatever their count of
    failures (the version stays: no rule decides on it)."""
    columns: dict[str, Kind] = {"name": "text", "last_end_at": "time"}
    return Batch(dialect, "task", columns, key=["name"], assign={"last_success_at": "last_end_at"})

"""The lease side of the SQL store: claiming fire times, starting what was claimed, taking
over what nobody holds, renewing and letting go (see ``Store`` for each contract).

Claims and starts handle many rows per statement. On PostgreSQL the rows a decision rests
on are locked for its transaction (``FOR UPDATE``, ``SKIP LOCKED`` where another node may
take the next row instead); on SQLite one writer at a time makes the same guarantee.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.core import (
    ACTIVE,
    HELD,
    IN_LINE,
    Execution,
    FirePlan,
    Gate,
    Holder,
    Lease,
    Status,
    TriggerKind,
)
from ecron.core.plans import InLine, PoolGate
from ecron.store.bulk import Batch, Kind
from ecron.store.engine import Dialect, Engines
from ecron.store.records import (
    Claimed,
    Decider,
    DueTask,
    Planner,
    Started,
    StartWrites,
)
from ecron.store.retry import retried, retrying
from ecron.store.sql_tasks import can_fire
from ecron.store.tables import execution_table, pool_table, task_table

_ACTIVE = [str(status) for status in ACTIVE]
#: The runs a start counts for ``concurrency``: the active ones, and the claimed ones that
#: wait to start (a pool's room, an older run under ``forbid``, ``Retry-After``).
_ACTIVE_OR_WAITING = sa.or_(
    execution_table.c.status.in_(_ACTIVE),
    sa.and_(
        execution_table.c.status == str(Status.SCHEDULED),
        execution_table.c.waiting_for.is_not(None),
    ),
)
#: A retry or resume planned for later (it waits for nothing yet): see ``Holder.planned``.
_PLANNED = sa.and_(
    execution_table.c.status == str(Status.SCHEDULED),
    execution_table.c.trigger_kind.in_([str(TriggerKind.RETRY), str(TriggerKind.RESUME)]),
)
_HELD = [str(status) for status in HELD]
_HELD_SQL = ", ".join(f"'{status}'" for status in sorted(_HELD))
#: At most this many eids go into one ``IN (...)`` list.
_CHUNK = 5000


class LeaseOperations:
    """The ``Store`` operations on claims and leases (mixed into ``SqlStore``)."""

    engines: Engines
    dialect: Dialect
    #: Made once, when the store opens (``advance_batch``).
    _advances: Batch

    async def _insert_executions(
        self, conn: AsyncConnection, executions: Sequence[Execution]
    ) -> list[Execution]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    async def _save(
        self,
        conn: AsyncConnection,
        writes: Sequence[tuple[Execution, Execution]],
        then_insert: Mapping[str, Sequence[Execution]] | None = None,
        lease: Lease | None = None,
    ) -> list[Execution | None]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    async def _read_executions(
        self, conn: AsyncConnection, query: sa.Select[Any]
    ) -> list[Execution]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    def _locking(self, query: sa.Select[Any], *, skip_locked: bool = False) -> sa.Select[Any]:
        if not self.dialect.skip_locked:
            return query  # SQLite: BEGIN IMMEDIATE already makes this node the only writer
        return query.with_for_update(skip_locked=skip_locked)

    # -- claiming fire times ----------------------------------------------------------------

    @retried("count_due")
    async def count_due(self, horizon: datetime, limit: int | None = None) -> int:
        due = (
            sa.select(task_table.c.name)
            .where(*can_fire(), task_table.c.next_fire_at <= horizon)
            .limit(limit)
            .subquery()
        )
        query = sa.select(sa.func.count()).select_from(due)
        async with self.engines.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    @retried("claim_due_fires")
    async def claim_due_fires(self, horizon: datetime, limit: int, plan: Planner) -> Claimed:
        query = self._locking(
            sa.select(
                task_table.c.name,
                task_table.c.next_fire_at,
                task_table.c.spec_hash,
                task_table.c.version,
            )
            .where(*can_fire(), task_table.c.next_fire_at <= horizon)
            .order_by(task_table.c.next_fire_at)
            .limit(limit),
            skip_locked=True,
        )
        async with self.engines.write() as conn:
            due = [DueTask(*row) for row in await conn.execute(query)]
            plans = [(task, plan(task)) for task in due]
            advanced = [(task, decided) for task, decided in plans if decided is not None]
            if advanced:
                moves = [{"name": t.name, "next_fire_at": p.next_fire_at} for t, p in advanced]
                await self._advances.update(conn, moves, returning="name")
            planned = [e for _, decided in advanced for e in decided.executions]
            inserted = await self._insert_executions(conn, planned)
            if taken := _all_taken(advanced, {e.eid for e in inserted}):
                await self._advances.update(conn, taken, returning="name")
        excluded = {task.name: p.excluded for task, p in advanced if p.excluded}
        return Claimed(inserted, read=len(due), advanced=len(advanced), excluded=excluded)

    # -- starting what was claimed ----------------------------------------------------------

    @retried("start_executions")
    async def start_executions(
        self,
        tasks: Collection[str],
        decide: Decider,
        *,
        later_of: Collection[str] = (),
        new: Collection[str] = (),
        active_of: Collection[str] | None = None,
        planned_of: Collection[str] = (),
        pools: Mapping[str, tuple[PoolGate, Collection[str]]] | None = None,
        lease: Lease | None = None,
    ) -> Started:
        names = sorted(set(tasks))
        holders = names if active_of is None else sorted(set(active_of))
        planned = sorted(set(planned_of) & set(holders))
        async with self.engines.write() as conn:
            gates = await self._gates(conn, names, sorted(set(later_of)), holders, planned)
            if pools:
                gates = await self._pool_gates(conn, gates, pools)
            plan = decide(gates)
            if retrying() and (own := _own_active(gates, plan, new)):
                # the attempt before started these and its commit was lost: decide as it did
                plan = decide(_without_own(gates, own))
            stored = await self._save(conn, plan.writes, lease=lease)
            inserted = await self._insert_executions(conn, plan.inserts)
            for pool, at in sorted(plan.paces.items()):
                update = pool_table.update().where(pool_table.c.name == pool)
                await conn.execute(update.values(next_trigger_at=at))
        written = [(b, a, done) for (b, a), done in zip(plan.writes, stored, strict=True)]
        return Started(written, inserted)

    async def _pool_gates(
        self,
        conn: AsyncConnection,
        gates: dict[str, Gate],
        pools: Mapping[str, tuple[PoolGate, Collection[str]]],
    ) -> dict[str, Gate]:
        """``gates`` with their pools' (see ``start_executions``): each pool's row (made on
        its first use; locked on PostgreSQL, in name order), its executions active on any
        node, and its line of waiting runs."""
        names = sorted(pools)
        rows = await self._pool_rows(conn, names)
        members = {task: pool for pool in names for task in pools[pool][1]}
        everyone = sorted(members)
        running: dict[str, int] = defaultdict(int)
        count = (
            sa.select(execution_table.c.task, sa.func.count())
            .where(execution_table.c.task.in_(everyone), execution_table.c.status.in_(_ACTIVE))
            .group_by(execution_table.c.task)
        )
        for task, active in await conn.execute(count):
            running[members[task]] += active
        line: dict[str, list[InLine]] = defaultdict(list)
        waiting = sa.select(
            execution_table.c.task,
            execution_table.c.trigger_kind,
            execution_table.c.scheduled_at,
            execution_table.c.eid,
        ).where(
            execution_table.c.task.in_(everyone),
            execution_table.c.status == str(Status.SCHEDULED),
            execution_table.c.waiting_for.in_(sorted(IN_LINE)),
        )
        for task, kind, when, eid in await conn.execute(waiting):
            line[members[task]].append((kind == str(TriggerKind.BACKFILL), when, eid))
        filled = {
            name: replace(
                pools[name][0],
                running=running[name],
                line=tuple(sorted(line[name])),
                next_trigger_at=rows[name].next_trigger_at if name in rows else None,
            )
            for name in names
        }
        held_back = {name: rows[name].held_back_until for name in names if name in rows}
        return {
            task: replace(gate, pool=filled[pool], held_back_until=held_back.get(pool))
            if (pool := members.get(task)) is not None
            else gate
            for task, gate in gates.items()
        }

    async def _pool_rows(self, conn: AsyncConnection, names: list[str]) -> dict[str, Any]:
        """The rows of pools ``names``, locked on PostgreSQL; those missing made first."""
        query = self._locking(
            sa.select(pool_table).where(pool_table.c.name.in_(names)).order_by(pool_table.c.name)
        )
        rows = {row.name: row for row in await conn.execute(query)}
        if missing := [name for name in names if name not in rows]:
            await conn.execute(self._insert_missing_pools(missing))
            rows = {row.name: row for row in await conn.execute(query)}
        return rows

    def _insert_missing_pools(self, names: list[str]) -> Any:
        values = [{"name": name} for name in names]
        return self.engines.dialect.insert(pool_table).values(values).on_conflict_do_nothing()

    async def _gates(
        self,
        conn: AsyncConnection,
        names: list[str],
        later_of: list[str],
        active_of: list[str],
        planned_of: list[str],
    ) -> dict[str, Gate]:
        """Each task's gate (see ``Gate``), with its active executions for the tasks in
        ``active_of`` (and the retries planned for later of those in ``planned_of``); the
        task rows locked on PostgreSQL, in name order."""
        rows = await conn.execute(
            self._locking(
                sa.select(
                    task_table.c.name,
                    task_table.c.paused,
                    task_table.c.paused_reason,
                    task_table.c.retired,
                    task_table.c.held_back_until,
                )
                .where(task_table.c.name.in_(names))
                .order_by(task_table.c.name)
            )
        )
        found = {row.name: row for row in rows}
        active = await self._holders(conn, active_of, planned_of) if active_of else {}
        later: dict[str, list[datetime]] = defaultdict(list)
        if later_of:
            query = sa.select(execution_table.c.task, execution_table.c.scheduled_at).where(
                execution_table.c.task.in_(later_of),
                execution_table.c.status == str(Status.SCHEDULED),
                execution_table.c.trigger_kind == str(TriggerKind.SCHEDULE),
            )
            for task, when in await conn.execute(query):
                later[task].append(when)
        gates = {}
        for name in names:
            row = found.get(name)
            gates[name] = Gate(
                paused=bool(row and row.paused),
                paused_reason=row.paused_reason if row else None,
                retired=row is None or bool(row.retired),
                active=tuple(active.get(name, ())),
                later=tuple(sorted(later.get(name, ()))),
                held_back_until=row.held_back_until if row else None,
            )
        return gates

    async def _holders(
        self, conn: AsyncConnection, names: list[str], planned_of: list[str]
    ) -> dict[str, list[Holder]]:
        """The executions of tasks ``names`` a start decision looks at (see ``Holder``); the
        retries and resumes planned for later only for the tasks in ``planned_of``."""
        wanted = _ACTIVE_OR_WAITING
        if planned_of:
            wanted = sa.or_(wanted, sa.and_(_PLANNED, execution_table.c.task.in_(planned_of)))
        query = (
            sa.select(
                execution_table.c.task,
                execution_table.c.eid,
                execution_table.c.status,
                execution_table.c.scheduled_at,
                execution_table.c.trigger_kind,
                execution_table.c.waiting_for,
            )
            .where(execution_table.c.task.in_(names), wanted)
            .order_by(execution_table.c.scheduled_at, execution_table.c.eid)
        )
        holders: dict[str, list[Holder]] = defaultdict(list)
        for task, eid, status, scheduled_at, kind, waiting_for in await conn.execute(query):
            planned = status == str(Status.SCHEDULED) and waiting_for is None
            holder = Holder(eid, Status(status), scheduled_at, TriggerKind(kind), planned)
            holders[task].append(holder)
        return holders


def _all_taken(
    advanced: Sequence[tuple[DueTask, FirePlan]], inserted: Collection[str]
) -> list[dict[str, Any]]:
    """The fire-time moves of the plans with a ``when_taken`` whose executions were all
    refused (their keys were taken)."""
    return [
        {"name": task.name, "next_fire_at": plan.when_taken}
        for task, plan in advanced
        if plan.when_taken is not None
        and plan.executions
        and not any(e.eid in inserted for e in plan.executions)
    ]


def _own_active(gates: dict[str, Gate], plan: StartWrites, new: Collection[str]) -> set[str]:
    """The eids that ``plan`` starts, or that are the new runs of the call, and that are
    active already (a decider that saw its own new run active inserted nothing)."""
    active = {h.eid for gate in gates.values() for h in gate.active if not h.planned}
    own = {before.eid for before, _ in plan.writes} | set(new)
    return own & active


def _without_own(gates: dict[str, Gate], eids: set[str]) -> dict[str, Gate]:
    """``gates`` without ``eids`` among the active executions (a retried start's own)."""
    return {
        name: replace(gate, active=tuple(h for h in gate.active if h.eid not in eids))
        for name, gate in gates.items()
    }


def advance_batch(dialect: str) -> Batch:
    """Many tasks' next fire times moved at once."""
    columns: dict[str, Kind] = {"name": "text", "next_fire_at": "time"}
    return Batch(
        dialect,
        "task",
        columns,
        key=["name"],
        assign={"next_fire_at": "next_fire_at"},
        also="version = version + 1",
    )

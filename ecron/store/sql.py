"""``SqlStore``: the one store implementation, for SQLite and PostgreSQL.

Reads and the state writes of executions live here; claims and starts in ``sql_leases``,
node leases and takeovers in ``sql_nodes``, tasks in ``sql_tasks``, lookups by eid prefix,
of each task's newest execution and of recent durations in ``sql_lookups``, chains in
``sql_chains``, stalled executions in ``sql_stalled``. Every operation but ``ping`` and
``exclusive`` is one transaction run again on a transient error (``retry``, whose docstring
says why that is safe for each kind); the dialect's statements and batches are chosen once,
here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron.core import ACTIVE, INTERRUPTED_REASONS, Execution, Lease, Status, Step, TriggerKind
from ecron.store.base import Store
from ecron.store.bulk import Batch, Kind
from ecron.store.engine import Engines, cluster_lock
from ecron.store.mapping import (
    EXECUTION_KINDS,
    execution_values,
    step_values,
    to_execution,
    to_step,
)
from ecron.store.records import Page
from ecron.store.retry import retried, retrying
from ecron.store.sql_audit import AuditOperations
from ecron.store.sql_chains import ChainOperations
from ecron.store.sql_leases import LeaseOperations, advance_batch
from ecron.store.sql_lookups import LookupOperations
from ecron.store.sql_nodes import NodeOperations, lease_guard
from ecron.store.sql_pools import PoolOperations
from ecron.store.sql_stalled import StalledOperations
from ecron.store.sql_tasks import TaskOperations, stamps_batch, successes_batch
from ecron.store.tables import (
    execution_table,
    setting_table,
    step_table,
)

ACTIVE_NAMES = [str(status) for status in ACTIVE]
_SCHEDULED = str(Status.SCHEDULED)

#: The columns a state write sets: everything ``core.apply`` may change, and a claim's own
#: short lease (a start ends it: the node's lease holds the run from then); never the owner,
#: its epoch, the fence or the identity of the execution.
STATE_COLUMNS = (
    "status",
    "reason",
    "progress",
    "message",
    "result",
    "result_truncated",
    "triggered_at",
    "last_report_at",
    "progress_at",
    "finished_at",
    "deadline",
    "not_before",
    "probe_failures",
    "cancel_sent_at",
    "cancel_acknowledged",
    "lease_until",
    "waiting_for",
)
_SAVE_KINDS: dict[str, Kind] = {
    "eid": "text",
    "fence": "int",
    "version": "int",
    "new_version": "int",
    **{name: EXECUTION_KINDS[name] for name in STATE_COLUMNS},
}
_STEP_STATE = ("status", "reason", "progress", "message", "started_at", "finished_at")
_STEP_UPDATE = (
    sa.update(step_table)
    .where(step_table.c.eid == sa.bindparam("b_eid"), step_table.c.number == sa.bindparam("b_n"))
    .values({name: sa.bindparam(f"b_{name}") for name in _STEP_STATE})
)


class SqlStore(
    LeaseOperations,
    NodeOperations,
    TaskOperations,
    LookupOperations,
    ChainOperations,
    PoolOperations,
    AuditOperations,
    StalledOperations,
    Store,
):
    """The store on SQLAlchemy Core; see ``Store`` for the contract of each operation."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines
        self.dialect = engines.dialect
        name = engines.dialect.name
        self._inserts = Batch(name, "execution", EXECUTION_KINDS)
        #: One batch per set of state columns a write changes, made on first use.
        self._saves: dict[tuple[str, ...], Batch] = {}
        #: PostgreSQL commits several transactions at once, and most of a small one's time
        #: is its commit's wait; SQLite has one writer.
        self.write_concurrency = 4 if engines.dialect.skip_locked else 1
        self._advances = advance_batch(name)
        self._successes = successes_batch(name)
        self._stamps = stamps_batch(name)
        self._insert = engines.dialect.insert

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

    # -- executions -------------------------------------------------------------------------

    @retried("create_execution")
    async def create_execution(self, execution: Execution) -> Execution | None:
        async with self.engines.write() as conn:
            inserted = await self._insert_executions(conn, [execution])
        return inserted[0] if inserted else None

    @retried("create_executions")
    async def create_executions(self, executions: Sequence[Execution]) -> list[Execution]:
        async with self.engines.write() as conn:
            return await self._insert_executions(conn, executions)

    async def _insert_executions(
        self, conn: AsyncConnection, executions: Sequence[Execution]
    ) -> list[Execution]:
        """Insert ``executions`` in one statement (their steps in one more); those whose
        fire-time key is taken are left out. The ones inserted, in order."""
        if not executions:
            return []
        rows = (execution_values(e) for e in executions)
        taken = await self._inserts.insert(conn, rows, returning="eid")
        inserted = [e for e in executions if e.eid in taken]
        steps = [step_values(e.eid, step) for e in inserted for step in e.steps]
        if steps:
            await conn.execute(sa.insert(step_table), steps)
        if retrying() and len(taken) < len(executions):
            # an eid is fresh for each call: one already there came from the attempt
            # before, whose commit was lost (its steps with it)
            missing = [e.eid for e in executions if e.eid not in taken]
            query = sa.select(execution_table.c.eid).where(execution_table.c.eid.in_(missing))
            taken |= set((await conn.execute(query)).scalars())
            inserted = [e for e in executions if e.eid in taken]
        return inserted

    @retried("get_execution")
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

    @retried("list_executions")
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
        else:
            query = query.where(execution_table.c.status != _SCHEDULED)
        if before is not None:
            query = query.where(execution_table.c.eid < before)
        async with self.engines.read() as conn:
            rows = (await conn.execute(query)).mappings().all()
            more = len(rows) > limit
            rows = rows[:limit]
            steps = await self._steps(conn, [row["eid"] for row in rows])
        items = [to_execution(row, steps.get(row["eid"], ())) for row in rows]
        return Page(items=items, next=items[-1].eid if more else None)

    @retried("active_executions")
    async def active_executions(self, task: str) -> list[Execution]:
        query = (
            sa.select(execution_table)
            .where(execution_table.c.task == task, execution_table.c.status.in_(ACTIVE_NAMES))
            .order_by(execution_table.c.scheduled_at, execution_table.c.eid)
        )
        return await self._executions(query)

    @retried("claimed_fire_times")
    async def claimed_fire_times(self, names: Sequence[str]) -> dict[str, datetime]:
        if not names:
            return {}
        query = (
            sa.select(execution_table.c.task, sa.func.min(execution_table.c.scheduled_at))
            .where(
                execution_table.c.task.in_(names),
                execution_table.c.status == _SCHEDULED,
                execution_table.c.trigger_kind == str(TriggerKind.SCHEDULE),
            )
            .group_by(execution_table.c.task)
        )
        async with self.engines.read() as conn:
            rows = (await conn.execute(query)).all()
        return dict(rows)

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

    @retried("save")
    async def save(
        self,
        writes: Sequence[tuple[Execution, Execution]],
        then_insert: Mapping[str, Sequence[Execution]] | None = None,
        lease: Lease | None = None,
    ) -> list[Execution | None]:
        async with self.engines.write() as conn:
            return await self._save(conn, writes, then_insert or {}, lease)

    async def _save(
        self,
        conn: AsyncConnection,
        writes: Sequence[tuple[Execution, Execution]],
        then_insert: Mapping[str, Sequence[Execution]] | None = None,
        lease: Lease | None = None,
    ) -> list[Execution | None]:
        """Every write in one statement per set of changed columns, each row a compare-and-set
        (see ``Store.save``); on PostgreSQL the rows of every statement locked first, in the
        order of their eid, so the statements of one transaction and of two never wait on
        each other in a circle."""
        if not writes:
            return []
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        for before, after in writes:
            columns = _changed(before, after)
            by_columns[columns].append(_state_row(before, after, columns))
        if len(by_columns) > 1:
            await self._lock_in_order(conn, [before.eid for before, _ in writes])
        guard = None if lease is None else lease_guard(lease)
        done: set[Any] = set()
        for columns, rows in by_columns.items():
            done |= await self._save_batch(columns).update(conn, rows, "eid", guard)
        steps = [
            _step_row(after.eid, new)
            for before, after in writes
            if after.eid in done
            for old, new in zip(before.steps, after.steps, strict=True)
            if old != new
        ]
        if steps:
            await conn.execute(_STEP_UPDATE, steps)
        if retrying() and len(done) < len(writes):
            done |= await self._written_before(conn, [w for w in writes if w[1].eid not in done])
        if then_insert:  # after a lost commit, the inserts recognise their own rows too
            landed = [e for eid, more in then_insert.items() if eid in done for e in more]
            await self._insert_executions(conn, landed)
        return [after if after.eid in done else None for _, after in writes]

    def _save_batch(self, columns: tuple[str, ...]) -> Batch:
        """The compare-and-set update of the state ``columns`` (and the version)."""
        batch = self._saves.get(columns)
        if batch is None:
            kinds: dict[str, Kind] = {
                "eid": "text",
                "fence": "int",
                "version": "int",
                "new_version": "int",
                **{name: EXECUTION_KINDS[name] for name in columns},
            }
            batch = self._saves[columns] = Batch(
                self.dialect.name,
                "execution",
                kinds,
                key=["eid"],
                match=["fence", "version"],
                assign={**{column: column for column in columns}, "version": "new_version"},
            )
        return batch

    async def _written_before(
        self, conn: AsyncConnection, writes: Sequence[tuple[Execution, Execution]]
    ) -> set[str]:
        """Of writes whose compare failed in a retried transaction, those the attempt before
        wrote (its commit lost): the row holds exactly ``after``."""
        wanted = {after.eid: after for _, after in writes}
        query = sa.select(execution_table).where(execution_table.c.eid.in_(list(wanted)))
        found = set()
        for row in (await conn.execute(query)).mappings():
            after = wanted[row["eid"]]
            if to_execution(row, after.steps) == after:
                found.add(after.eid)
        return found

    @retried("resumes_of")
    async def resumes_of(self, eids: Sequence[str]) -> dict[str, str]:
        if not eids:
            return {}
        query = sa.select(execution_table.c.resume_of, execution_table.c.eid).where(
            execution_table.c.resume_of.in_(list(eids))
        )
        async with self.engines.read() as conn:
            return {row.resume_of: row.eid for row in await conn.execute(query)}

    @retried("interrupted_unresumed")
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

    @retried("give_up_resume")
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
            if result.rowcount == 1 or not retrying():
                return result.rowcount == 1
            # the attempt before may have recorded it, its commit lost: then it is at ``now``
            query = sa.select(execution_table.c.resume_given_up_at).where(
                execution_table.c.eid == eid
            )
            return bool((await conn.execute(query)).scalar() == now)

    @retried("stuck")
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
                execution_table.c.status.in_(ACTIVE_NAMES),
                sa.or_(execution_table.c.deadline < now, *silent),
            )
            .order_by(execution_table.c.eid)
            .limit(limit)
        )
        return await self._executions(query)

    async def _executions(self, query: sa.Select[Any]) -> list[Execution]:
        async with self.engines.read() as conn:
            return await self._read_executions(conn, query)

    async def _read_executions(
        self, conn: AsyncConnection, query: sa.Select[Any]
    ) -> list[Execution]:
        rows = (await conn.execute(query)).mappings().all()
        steps = await self._steps(conn, [row["eid"] for row in rows])
        return [to_execution(row, steps.get(row["eid"], ())) for row in rows]

    # -- nodes and shared settings --------------------------------------------------------

    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        return cluster_lock(self.engines, name, wait=False)

    @retried("shared_secret")
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


def _changed(before: Execution, after: Execution) -> tuple[str, ...]:
    """The state columns ``after`` changes: only those are written (most writes are a
    poll's progress: four columns of seventeen)."""
    return tuple(name for name in STATE_COLUMNS if getattr(before, name) != getattr(after, name))


def _state_row(before: Execution, after: Execution, columns: tuple[str, ...]) -> dict[str, Any]:
    """One row of a state write: the compare (eid, fence, version), the new version, and the
    state ``columns`` that changed."""
    assert after.version > before.version, "a write raises the version"
    assert after.fence == before.fence, "a write keeps the fence (claims raise it)"
    values = execution_values(after, columns)
    values.update(eid=before.eid, fence=before.fence, version=before.version)
    values["new_version"] = after.version
    return values


def _step_row(eid: str, step: Step) -> dict[str, Any]:
    values = step_values(eid, step)
    row = {f"b_{name}": values[name] for name in _STEP_STATE}
    row.update(b_eid=eid, b_n=step.number)
    return row

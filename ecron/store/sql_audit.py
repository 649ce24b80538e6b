"""What the SQL store keeps for people to look back on, and for how long: audit entries
appended many per statement, read newest first by id (the order they were written in);
audit entries and final executions purged after ``history_retention``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from ecron.core import HELD
from ecron.core.audit import AuditEntry, AuditPage, AuditQuery
from ecron.store.engine import Engines
from ecron.store.retry import retried
from ecron.store.tables import audit_table, execution_table, step_table

_COLUMNS = ("at", "actor", "action", "target", "task", "status", "remote", "detail")


#: Every status but the final ones (``core.FINAL``).
_HELD = sorted(str(status) for status in HELD)


class AuditOperations:
    """The ``Store`` operations on the audit log, and the purge of old history (mixed into
    ``SqlStore``)."""

    engines: Engines

    @retried("add_audit")
    async def add_audit(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        rows = [{name: getattr(entry, name) for name in _COLUMNS} for entry in entries]
        async with self.engines.write() as conn:
            await conn.execute(sa.insert(audit_table), rows)

    @retried("audit_page")
    async def audit_page(self, query: AuditQuery) -> AuditPage:
        table = audit_table
        select = sa.select(table).order_by(table.c.id.desc()).limit(query.limit + 1)
        for column, value in (
            (table.c.actor, query.actor),
            (table.c.action, query.action),
            (table.c.task, query.task),
        ):
            if value is not None:
                select = select.where(column == value)
        if query.before is not None:
            select = select.where(table.c.id < query.before)
        async with self.engines.read() as conn:
            rows = (await conn.execute(select)).mappings().all()
        items = [AuditEntry(**{name: row[name] for name in (*_COLUMNS, "id")}) for row in rows]
        more = len(items) > query.limit
        items = items[: query.limit]
        return AuditPage(items, str(items[-1].id) if more and items else None)

    @retried("purge_audit")
    async def purge_audit(self, before: datetime, batch: int) -> int:
        old = sa.select(audit_table.c.id).where(audit_table.c.at < before).limit(batch)
        async with self.engines.write() as conn:
            ids = list((await conn.execute(old)).scalars())
            if ids:
                await conn.execute(sa.delete(audit_table).where(audit_table.c.id.in_(ids)))
        return len(ids)

    @retried("purge_history")
    async def purge_history(self, before: datetime, batch: int) -> int:
        # final, said as "not held" (FINAL and HELD part every status between them): SQLite,
        # which keeps no statistics, takes ``status IN`` for the better index and walks every
        # final execution, the whole history, in the write transaction of each patrol round;
        # ``NOT IN`` leaves it ``ix_execution_finished``, read from its oldest end
        old = (
            sa.select(execution_table.c.eid)
            .where(
                execution_table.c.status.not_in(_HELD),
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

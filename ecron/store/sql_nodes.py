"""The node side of the SQL store: a node's lease (taken, renewed in one statement, fenced,
let go), taking over what nobody holds, letting go and force-claiming executions, and the
database's clock (see ``Store`` for each contract).

What a node holds leans on its lease (``node.lease_until``, ``node.epoch``): a row is held
while its owner's lease is alive under the epoch the row was claimed under
(``owner_epoch``), and while its own short claim, if it has one, has not run out
(``held_until`` says so for people and tests; ``_free`` is the same rule as the conditions a
takeover reads along the indexes). Statements that lock many execution rows take them in
eid order (``_lock_in_order``, and ``bulk.Batch.update``'s ordered lock).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ecron import __version__
from ecron.clock import Reading
from ecron.core import ACTIVE, HELD, Execution, Lease
from ecron.store.bulk import Guard
from ecron.store.engine import Dialect, Engines
from ecron.store.records import Adopted, Renewal
from ecron.store.retry import retried
from ecron.store.tables import execution_table, node_table

_ACTIVE = [str(status) for status in ACTIVE]
_HELD = [str(status) for status in HELD]
#: At most this many eids go into one ``IN (...)`` list.
_CHUNK = 5000
#: A row taken over: its owner and epoch (given), its own claim, the fence and version raised.
_TAKE = (
    sa.update(execution_table)
    .where(execution_table.c.eid == sa.bindparam("b_eid"))
    .values(
        lease_until=sa.bindparam("b_until"),
        fence=execution_table.c.fence + 1,
        version=execution_table.c.version + 1,
    )
)


class NodeOperations:
    """The ``Store`` operations on node leases and takeovers (mixed into ``SqlStore``)."""

    engines: Engines
    dialect: Dialect

    async def _read_executions(
        self, conn: AsyncConnection, query: sa.Select[Any]
    ) -> list[Execution]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    def _locking(self, query: sa.Select[Any], *, skip_locked: bool = False) -> sa.Select[Any]:
        raise NotImplementedError  # pragma: no cover  (SqlStore)

    @retried("take_node_lease")
    async def take_node_lease(
        self, node: str, now: datetime, until: datetime, *, host: str = "", pid: int = 0
    ) -> Lease:
        values = {
            "node_id": node,
            "started_at": now,
            "heartbeat_at": now,
            "host": host,
            "pid": pid,
            "version": __version__,
            "lease_until": until,
            "epoch": 1,
        }
        statement = self.engines.dialect.insert(node_table).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=[node_table.c.node_id],
            set_={
                "epoch": node_table.c.epoch + 1,
                "lease_until": until,
                "heartbeat_at": now,
                "started_at": statement.excluded.started_at,
                "host": statement.excluded.host,
                "pid": statement.excluded.pid,
                "version": __version__,
            },
        ).returning(node_table.c.epoch)
        async with self.engines.write(urgent=True) as conn:  # the node waits on it for all
            epoch = (await conn.execute(statement)).scalar_one()
        return Lease(node, int(epoch))

    @retried("renew_node_lease")
    async def renew_node_lease(
        self, lease: Lease, now: datetime, until: datetime, ticks: Callable[[], float]
    ) -> Renewal | None:
        mine = sa.and_(node_table.c.node_id == lease.node, node_table.c.epoch == lease.epoch)
        live = (
            sa.select(sa.func.count())
            .where(sa.or_(node_table.c.lease_until >= now, node_table.c.node_id == lease.node))
            .scalar_subquery()
        )
        renew = sa.update(node_table).where(mine).values(lease_until=until, heartbeat_at=now)
        postgres = self.dialect.name == "postgresql"
        # SQLite has no clock of its own (it is this machine's): the count alone
        statement = renew.returning(live, sa.func.clock_timestamp() if postgres else live)
        async with self.engines.single() as conn:  # one statement, its own transaction
            sent = ticks()
            row = (await conn.execute(statement)).first()
            received = ticks()
        if row is None:
            return None
        return Renewal(int(row[0]), Reading(row[1], sent, received) if postgres else None)

    @retried("live_nodes")
    async def live_nodes(self, now: datetime) -> int:
        query = sa.select(sa.func.count()).where(node_table.c.lease_until >= now)
        async with self.engines.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    @retried("let_go_node_lease")
    async def let_go_node_lease(self, lease: Lease) -> None:
        fence = (
            sa.update(node_table)
            .where(node_table.c.node_id == lease.node, node_table.c.epoch == lease.epoch)
            .values(epoch=node_table.c.epoch + 1, lease_until=None)
        )
        async with self.engines.write() as conn:
            await conn.execute(fence)

    @retried("purge_nodes")
    async def purge_nodes(self, before: datetime) -> int:
        holding = sa.select(execution_table.c.eid).where(
            execution_table.c.owner == node_table.c.node_id,
            execution_table.c.status.in_(_HELD),
        )
        purge = sa.delete(node_table).where(
            sa.or_(node_table.c.lease_until.is_(None), node_table.c.lease_until < before),
            node_table.c.heartbeat_at < before,
            ~sa.exists(holding),
        )
        async with self.engines.write() as conn:
            return int((await conn.execute(purge)).rowcount or 0)

    # -- taking over, letting go ------------------------------------------------------------

    @retried("claim_runnable")
    async def claim_runnable(
        self,
        lease: Lease,
        now: datetime,
        lease_for: Callable[[Execution], datetime | None],
        limit: int,
        *,
        skip: Collection[str] | None = None,
    ) -> list[Adopted]:
        own_too = skip is not None
        # A look first, read-only: most rounds find no lease run out and nothing free.
        async with self.engines.read() as conn:
            holders = await _holders_of(conn)
            if not _current(holders, lease):  # fenced: a node without a lease takes nothing
                return []
            expired = [h for h in holders if h.ran_out(now) and h.node != lease.node]
            free = _free(holders, lease, now, own_too=own_too, fenced=expired)
            candidates = await self._free_eids(conn, free, limit, skip or ())
        if not candidates and not expired:
            return []
        async with self.engines.write() as conn:
            if expired:  # fenced first: a renewal of theirs that comes later fails
                await conn.execute(_fence(expired, now))
                holders = await _holders_of(conn)
                if not _current(holders, lease):
                    return []
                free = _free(holders, lease, now, own_too=own_too, fenced=[])
                candidates = await self._free_eids(conn, free, limit, skip or ())
            if not candidates:
                return []
            return await self._take(conn, lease, candidates, free, lease_for)

    async def _take(
        self,
        conn: AsyncConnection,
        lease: Lease,
        candidates: Sequence[str],
        free: Sequence[sa.ColumnElement[bool]],
        lease_for: Callable[[Execution], datetime | None],
    ) -> list[Adopted]:
        """Take the ``candidates`` still ``free`` (locked in eid order on PostgreSQL, those
        another transaction holds skipped) under ``lease``."""
        query = self._locking(
            sa.select(execution_table)
            .where(
                execution_table.c.eid.in_(candidates),
                execution_table.c.status.in_(_HELD),
                sa.or_(*free),
            )
            .order_by(execution_table.c.eid),
            skip_locked=True,
        )
        found = await self._read_executions(conn, query)
        if not found:
            return []
        claims = {e.eid: lease_for(e) for e in found}
        # the rows were read (and locked, on PostgreSQL) in this transaction: still free
        rows = [{"b_eid": e.eid, "b_until": claims[e.eid]} for e in found]
        await conn.execute(_TAKE.values(owner=lease.node, owner_epoch=lease.epoch), rows)
        return [
            Adopted(
                e.evolve(
                    owner=lease.node,
                    owner_epoch=lease.epoch,
                    lease_until=claims[e.eid],
                    fence=e.fence + 1,
                    version=e.version + 1,
                ),
                e.owner,
            )
            for e in found
        ]

    async def _free_eids(
        self,
        conn: AsyncConnection,
        free: Sequence[sa.ColumnElement[bool]],
        limit: int,
        skip: Collection[str],
    ) -> list[str]:
        """Up to ``limit`` eids of held rows that meet one of ``free`` (each condition read
        along its own index, ``limit`` + ``len(skip)`` at most each), but ``skip``, in eid
        order."""
        if not free:
            return []
        each = limit + len(skip)
        parts = [
            sa.select(execution_table.c.eid)
            .where(execution_table.c.status.in_(_HELD), condition)
            .limit(each)
            .subquery()
            for condition in free
        ]
        found: set[str] = set()
        for part in parts:
            found.update((await conn.execute(sa.select(part.c.eid))).scalars())
        return sorted(found - set(skip))[:limit]

    async def _lock_in_order(self, conn: AsyncConnection, eids: Sequence[str]) -> None:
        """Lock the rows of ``eids`` in eid order (PostgreSQL; on SQLite this node is the
        only writer already)."""
        if not self.dialect.skip_locked or not eids:
            return
        for start in range(0, len(eids), _CHUNK):
            chunk = sorted(eids)[start : start + _CHUNK]
            query = (
                sa.select(execution_table.c.eid)
                .where(execution_table.c.eid.in_(chunk))
                .order_by(execution_table.c.eid)
                .with_for_update()
            )
            await conn.execute(query)

    @retried("read_clock")
    async def read_clock(self, ticks: Callable[[], float]) -> Reading | None:
        if self.dialect.name != "postgresql":
            return None
        async with self.engines.single() as conn:
            await conn.execute(sa.text("SELECT 1"))  # the connection's own round trip first
            sent = ticks()
            found = (await conn.execute(sa.select(sa.func.clock_timestamp()))).scalar_one()
            received = ticks()
        return Reading(found, sent, received)

    @retried("release_leases")
    async def release_leases(self, node: str, eids: Sequence[str]) -> None:
        async with self.engines.write() as conn:
            for start in range(0, len(eids), _CHUNK):
                chunk = sorted(eids)[start : start + _CHUNK]
                await self._lock_in_order(conn, chunk)
                await conn.execute(
                    sa.update(execution_table)
                    .where(
                        execution_table.c.eid.in_(chunk),
                        execution_table.c.owner == node,
                        # one another node (or a callback) ended meanwhile stays as it ended
                        execution_table.c.status.in_(_HELD),
                    )
                    .values(
                        owner=None,
                        owner_epoch=None,
                        lease_until=None,
                        version=execution_table.c.version + 1,
                    )
                )

    @retried("force_claim")
    async def force_claim(self, lease: Lease, eids: Sequence[str]) -> list[Execution]:
        if not eids:
            return []
        chunk = sorted(set(eids))
        taken = (
            sa.update(execution_table)
            .where(execution_table.c.eid.in_(chunk), execution_table.c.status.in_(_ACTIVE))
            .values(
                owner=lease.node,
                owner_epoch=lease.epoch,
                lease_until=None,
                fence=execution_table.c.fence + 1,
                version=execution_table.c.version + 1,
            )
            .returning(execution_table.c.eid)
        )
        async with self.engines.write() as conn:
            await self._lock_in_order(conn, chunk)
            done = list((await conn.execute(taken)).scalars())
            if not done:
                return []
            query = sa.select(execution_table).where(execution_table.c.eid.in_(done))
            return await self._read_executions(conn, query)


@dataclass(frozen=True, slots=True)
class _Holder:
    """A node's lease as a takeover reads it."""

    node: str
    epoch: int
    until: datetime | None

    def ran_out(self, now: datetime) -> bool:
        """True when the lease ran out before ``now`` and nobody fenced it yet."""
        return self.until is not None and self.until < now


async def _holders_of(conn: AsyncConnection) -> list[_Holder]:
    query = sa.select(node_table.c.node_id, node_table.c.epoch, node_table.c.lease_until)
    return [_Holder(node, int(epoch), until) for node, epoch, until in await conn.execute(query)]


async def node_leases(conn: AsyncConnection) -> dict[str, tuple[int, datetime | None]]:
    """Every node's lease as stored: its epoch and until when it runs (None: fenced)."""
    return {h.node: (h.epoch, h.until) for h in await _holders_of(conn)}


def held_until(
    row: Mapping[str, Any], leases: Mapping[str, tuple[int, datetime | None]]
) -> datetime | None:
    """Until when an execution row is held, by the rule ``claim_runnable`` takes over by
    (for people and tests reading the tables): the earlier of its own claim and its
    owner's node lease under the epoch it is held under; None when nobody holds it (no
    owner, an ended row, a fenced lease or an older epoch). A row of a node lease taken
    before node leases existed (no epoch) is held by its own ``lease_until`` alone."""
    owner, epoch = row["owner"], row["owner_epoch"]
    own: datetime | None = row["lease_until"]
    if owner is None or row["status"] not in _HELD:
        return None
    if epoch is None:
        return own
    node_epoch, node_until = leases.get(owner, (None, None))
    if node_epoch != epoch or node_until is None:
        return None
    return node_until if own is None else min(own, node_until)


def _current(holders: Sequence[_Holder], lease: Lease) -> bool:
    """True when ``lease`` is still its node's (not fenced, not replaced by a newer one)."""
    return any(h.node == lease.node and h.epoch == lease.epoch for h in holders)


def _fence(nodes: Sequence[_Holder], now: datetime) -> sa.Update:
    """Fence the leases of ``nodes`` that ran out before ``now`` (checked again: a renewal
    may have landed since they were read): their epoch raised, no lease. A node fenced so
    cannot renew its lease any more; it takes a new one (a new epoch) instead."""
    return (
        sa.update(node_table)
        .where(
            node_table.c.node_id.in_(sorted(h.node for h in nodes)),
            node_table.c.lease_until < now,
        )
        .values(epoch=node_table.c.epoch + 1, lease_until=None)
    )


def _free(
    holders: Sequence[_Holder],
    lease: Lease,
    now: datetime,
    *,
    own_too: bool,
    fenced: Sequence[_Holder],
) -> list[sa.ColumnElement[bool]]:
    """The conditions under which a held row is free to take over (any of them), for a
    takeover by ``lease`` at ``now``: nobody holds it (let go); its own short claim ran out
    (of another node, or ``own_too`` this node's too); it is held under a lease that was
    fenced, or under an older epoch of a node's lease (each read along the holder index).
    ``fenced``: leases that ran out and will be fenced before the rows are taken."""
    c = execution_table.c
    claim_ran_out = sa.and_(c.lease_until.is_not(None), c.lease_until < now)
    if not own_too:
        claim_ran_out = sa.and_(claim_ran_out, c.owner != lease.node)
    free: list[sa.ColumnElement[bool]] = [c.owner.is_(None), claim_ran_out]
    gone = {h.node for h in fenced}
    for holder in holders:
        if holder.until is None or holder.node in gone:  # fenced: all it held is free
            free.append(sa.and_(c.owner == holder.node, c.owner_epoch.is_not(None)))
        else:
            free.append(sa.and_(c.owner == holder.node, c.owner_epoch < holder.epoch))
    return free


def lease_guard(lease: Lease) -> Guard:
    """The condition of every fenced write: the writing node's lease still has the epoch the
    write was made under (it was neither fenced nor taken again since)."""
    check = sa.select(node_table.c.node_id).where(
        node_table.c.node_id == lease.node, node_table.c.epoch == lease.epoch
    )
    sql = "EXISTS (SELECT 1 FROM node WHERE node.node_id = :g_node AND node.epoch = :g_epoch)"
    return Guard(sql, {"g_node": lease.node, "g_epoch": lease.epoch}, check)

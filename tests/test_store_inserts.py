"""Writes around an end, on SQLite and on PostgreSQL: ``Store.save`` with ``then_insert``
lands an end and its retry together or not at all, and releasing leases never touches an
execution that has ended."""

from __future__ import annotations

from datetime import timedelta

from ecron.core import Status, TriggerKind
from ecron.store.sql import SqlStore
from tests.test_store import T0, execution, later


async def test_executions_to_insert_with_a_write_are_inserted_only_when_the_write_lands(
    store: SqlStore,
) -> None:
    """Two executions end FAILED in one transaction, each with a retry to insert with it;
    one write's compare-and-set fails (its fence moved on): its retry is not inserted, the
    other write's retry is, with the same fire time and attempt 2."""
    landing = execution("a")
    stale = execution("b")
    assert await store.create_execution(landing) is not None
    assert await store.create_execution(stale) is not None
    ended = later(landing, status=Status.FAILED, finished_at=T0 + timedelta(seconds=1))
    lost = later(stale.evolve(fence=stale.fence - 1), status=Status.FAILED, finished_at=T0)
    retries = {
        landing.eid: [execution("a", attempt=2, trigger_kind=TriggerKind.RETRY)],
        stale.eid: [execution("b", attempt=2, trigger_kind=TriggerKind.RETRY)],
    }
    stored = await store.save(
        [(landing, ended), (stale.evolve(fence=stale.fence - 1), lost)], retries
    )
    a = await store.get_execution(retries[landing.eid][0].eid)
    b = await store.get_execution(retries[stale.eid][0].eid)
    assert [s is not None for s in stored] == [True, False]
    assert a is not None and (a.scheduled_at, a.attempt) == (T0, 2)
    assert b is None


async def test_releasing_leases_leaves_an_execution_that_ended_meanwhile_as_it_ended(
    store: SqlStore,
) -> None:
    """A node lets go of two executions it still holds as RUNNING in memory; one of them was
    ended meanwhile by a callback (applied through another node). The running one is
    released (no owner, no lease); the ended one keeps its owner, lease and version: a
    final row never changes again."""
    running = execution("a", status=Status.RUNNING)
    ended = execution("b", status=Status.RUNNING)
    for row in (running, ended):
        assert await store.create_execution(row) is not None
    [done] = await store.save([(ended, later(ended, status=Status.SUCCESS, finished_at=T0))])
    assert done is not None
    await store.release_leases("n1", [running.eid, ended.eid])
    released = await store.get_execution(running.eid)
    kept = await store.get_execution(ended.eid)
    assert released is not None and (released.owner, released.lease_until) == (None, None)
    assert kept == done

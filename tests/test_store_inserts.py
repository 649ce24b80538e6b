"""``Store.save`` with ``then_insert``: an end and its retry land together or not at all,
on SQLite and on PostgreSQL."""

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

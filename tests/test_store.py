"""The store contract, run against SQLite and PostgreSQL from one parametrised fixture."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from ecron.core import Execution, Status, Step, TriggerKind
from ecron.ids import new_eid
from ecron.planning import Claim, plan_fires
from ecron.store.base import FirePlan, TaskState
from ecron.store.migrate import current_revision, head_revision, upgrade
from ecron.store.sql import SqlStore
from tests.conftest import task

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
URL = "http://127.0.0.1:9/jobs/x"


def execution(name: str = "a", at: datetime = T0, **changes: object) -> Execution:
    values: dict[str, object] = {
        "eid": new_eid(),
        "task": name,
        "scheduled_at": at,
        "created_at": at,
        "owner": "n1",
        "lease_until": at + timedelta(seconds=15),
        "fence": 1,
    }
    values.update(changes)
    return Execution(**values)  # type: ignore[arg-type]


def claim_at(now: datetime, node: str = "n1") -> Claim:
    return Claim(node=node, now=now, horizon=now, lease_until=now + timedelta(seconds=15))


async def test_migrations_reach_the_head_revision_and_running_them_again_changes_nothing(
    store: SqlStore,
) -> None:
    """The fixture migrated the schema; upgrading once more is a no-op."""
    assert await current_revision(store.engines) == head_revision()
    before, after = await upgrade(store.engines)
    assert before == after == head_revision()


async def test_sync_adds_new_tasks_keeps_unchanged_ones_and_retires_missing_ones(
    store: SqlStore,
) -> None:
    """The task table follows the config; retired tasks keep their row."""
    a = task("a", URL, schedule={"every": "10s"})
    b = task("b", URL, schedule="0 3 * * *")
    first = await store.sync_tasks({"a": a, "b": b}, T0)
    assert (first.added, first.updated, first.retired) == (["a", "b"], [], [])
    again = await store.sync_tasks({"a": a, "b": b}, T0 + timedelta(minutes=1))
    assert (again.added, again.updated, again.retired) == ([], [], [])
    gone = await store.sync_tasks({"a": a}, T0)
    assert gone.retired == ["b"]
    retired = await store.get_task("b")
    assert retired is not None and retired.retired and retired.next_fire_at is None
    assert [t.name for t in await store.list_tasks()] == ["a"]
    assert [t.name for t in await store.list_tasks(include_retired=True)] == ["a", "b"]
    back = await store.sync_tasks({"a": a, "b": b}, T0)
    assert back.updated == ["b"]
    revived = await store.get_task("b")
    assert revived is not None and not revived.retired
    assert revived.next_fire_at == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)


async def test_a_new_task_starts_at_its_first_fire_time_and_a_changed_schedule_restarts_from_now(
    store: SqlStore,
) -> None:
    """next_fire_at comes from the schedule; changing other keys keeps it."""
    await store.sync_tasks(
        {"a": task("a", URL, schedule={"every": "10m"})}, T0 + timedelta(seconds=1)
    )
    stored = await store.get_task("a")
    assert stored is not None and stored.next_fire_at == T0 + timedelta(minutes=10)
    later = T0 + timedelta(minutes=3)
    await store.sync_tasks(
        {"a": task("a", URL, schedule={"every": "10m"}, poll_interval="2s")}, later
    )
    kept = await store.get_task("a")
    assert kept is not None and kept.next_fire_at == T0 + timedelta(minutes=10)
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "1m"})}, later)
    moved = await store.get_task("a")
    assert moved is not None and moved.next_fire_at == T0 + timedelta(minutes=3)


async def test_header_values_and_secrets_are_not_stored_in_the_task_row(store: SqlStore) -> None:
    """The stored spec shows header names but never their values or the signing secret."""
    spec = task("a", URL, headers={"Authorization": "Bearer hunter2"}, secret="s3cret")
    await store.sync_tasks({"a": spec}, T0)
    stored = await store.get_task("a")
    assert stored is not None
    assert stored.spec.headers == {"Authorization": "***"}
    assert stored.spec.secret == "***"


async def test_a_due_fire_time_is_claimed_once_and_the_task_moves_to_its_next_fire_time(
    store: SqlStore,
) -> None:
    """Claiming inserts a PENDING execution and advances next_fire_at in the same transaction."""
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "10s"})}, T0)
    claimed = await store.claim_due_fires(T0, 10, lambda t, _: plan_fires(t, claim_at(T0)))
    assert [(e.task, e.scheduled_at, e.status) for e in claimed] == [("a", T0, Status.PENDING)]
    assert await store.claim_due_fires(T0, 10, lambda t, _: plan_fires(t, claim_at(T0))) == []
    stored = await store.get_task("a")
    assert stored is not None and stored.next_fire_at == T0 + timedelta(seconds=10)
    assert await store.next_fire_time() == T0 + timedelta(seconds=10)


async def test_two_stores_claiming_the_same_fire_times_at_once_never_both_get_one(
    store: SqlStore, database_url: str
) -> None:
    """Two nodes racing over 20 tasks: every fire time is claimed exactly once."""
    specs = {f"t{i}": task(f"t{i}", URL, schedule={"every": "1s"}) for i in range(20)}
    await store.sync_tasks(specs, T0)
    other = SqlStore.open(database_url)
    try:

        async def node(s: SqlStore, name: str) -> list[Execution]:
            got: list[Execution] = []
            for step in range(5):
                claim = claim_at(T0 + timedelta(seconds=step), name)
                got += await s.claim_due_fires(
                    claim.now, 7, lambda t, _, claim=claim: plan_fires(t, claim)
                )
            return got

        first, second = await asyncio.gather(node(store, "n1"), node(other, "n2"))
    finally:
        await other.close()
    keys = [(e.task, e.scheduled_at) for e in first + second]
    assert len(keys) == len(set(keys))
    page = await store.list_executions(limit=500)
    assert len(page.items) == len(keys)


async def test_an_execution_with_a_taken_fire_time_key_is_not_inserted(store: SqlStore) -> None:
    """(task, scheduled_at, attempt, resume_attempt) is unique."""
    first = await store.create_execution(execution())
    assert first is not None
    assert await store.create_execution(execution()) is None
    assert await store.create_execution(execution(attempt=2)) is not None


async def test_a_plan_whose_fire_time_already_has_an_execution_inserts_nothing_more(
    store: SqlStore,
) -> None:
    """Claims rely on the unique key as the last guard against doubles."""
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "10s"})}, T0)
    assert await store.create_execution(execution("a", T0)) is not None

    def plan(t: TaskState, _active: Sequence[Execution]) -> FirePlan:
        return FirePlan(T0 + timedelta(seconds=10), [execution("a", T0)])

    assert await store.claim_due_fires(T0, 10, plan) == []


async def test_a_write_succeeds_once_and_a_write_built_on_stale_state_is_refused(
    store: SqlStore,
) -> None:
    """save() is a compare-and-set on fence and version."""
    created = await store.create_execution(execution())
    assert created is not None
    running = created.evolve(status=Status.RUNNING, progress=40.0, message="going")
    [stored] = await store.save([(created, running)])
    assert stored is not None and stored.version == created.version + 1
    assert await store.save([(created, running.evolve(progress=50.0))]) == [None]
    fenced = stored.evolve(fence=stored.fence + 5)
    assert await store.save([(fenced, fenced.evolve(progress=60.0))]) == [None]
    reread = await store.get_execution(created.eid)
    assert reread is not None
    assert (reread.status, reread.progress, reread.message) == (Status.RUNNING, 40.0, "going")


async def test_steps_are_stored_with_their_execution_and_updated_by_save(store: SqlStore) -> None:
    """Step rows come back in order, and a saved step change is persisted."""
    eid = new_eid()
    steps = (Step(1, "fetch", f"{eid}.1"), Step(2, "load", f"{eid}.2"))
    created = await store.create_execution(execution(eid=eid, steps=steps))
    assert created is not None
    done = steps[0].__class__(1, "fetch", f"{eid}.1", status=Status.SUCCESS, progress=100.0)
    [stored] = await store.save([(created, created.evolve(steps=(done, steps[1])))])
    assert stored is not None
    reread = await store.get_execution(eid)
    assert reread is not None
    assert [(s.number, s.name, s.status) for s in reread.steps] == [
        (1, "fetch", Status.SUCCESS),
        (2, "load", Status.PENDING),
    ]


async def test_history_is_newest_first_filtered_and_paginated_with_a_cursor(
    store: SqlStore,
) -> None:
    """list_executions pages through everything once, newest first."""
    made = []
    for i in range(7):
        status = Status.SUCCESS if i % 2 else Status.FAILED
        e = execution("a" if i < 5 else "b", T0 + timedelta(seconds=i), status=status)
        assert await store.create_execution(e) is not None
        made.append(e)
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list_executions(limit=3, before=cursor)
        seen += [e.eid for e in page.items]
        if page.next is None:
            break
        cursor = page.next
    assert seen == [e.eid for e in reversed(made)]
    only_a = await store.list_executions(task="a", status=Status.SUCCESS)
    assert [e.eid for e in only_a.items] == [made[3].eid, made[1].eid]
    assert only_a.next is None
    last = await store.last_executions(["a", "b", "c"])
    assert {name: e.eid for name, e in last.items()} == {"a": made[4].eid, "b": made[6].eid}


async def test_an_expired_lease_is_taken_over_with_a_higher_fence_and_a_live_one_is_not(
    store: SqlStore,
) -> None:
    """claim_runnable adopts only executions nobody holds."""
    expired = await store.create_execution(execution("a", T0, lease_until=T0))
    live = await store.create_execution(execution("b", T0, lease_until=T0 + timedelta(hours=1)))
    orphan = await store.create_execution(execution("c", T0, owner=None, lease_until=None))
    done = await store.create_execution(execution("d", T0, status=Status.SUCCESS, lease_until=T0))
    assert expired and live and orphan and done
    now = T0 + timedelta(seconds=1)
    taken = await store.claim_runnable("n2", now, now + timedelta(seconds=15), 10)
    assert sorted(e.eid for e in taken) == sorted([expired.eid, orphan.eid])
    assert all(e.owner == "n2" and e.fence == 2 for e in taken)
    assert await store.claim_runnable("n3", now, now + timedelta(seconds=15), 10) == []
    [stale] = await store.save([(expired, expired.evolve(progress=5.0))])
    assert stale is None  # the old holder's write is refused


async def test_leases_are_renewed_only_for_their_holder_and_released_for_adoption(
    store: SqlStore,
) -> None:
    """renew_leases returns what the node still holds; release_leases frees them at once."""
    mine = await store.create_execution(execution("a", T0, owner="n1"))
    theirs = await store.create_execution(execution("b", T0, owner="n2"))
    assert mine and theirs
    later = T0 + timedelta(minutes=1)
    assert await store.renew_leases("n1", [mine.eid, theirs.eid], later) == {mine.eid}
    await store.release_leases("n1", [mine.eid])
    taken = await store.claim_runnable("n3", T0, T0 + timedelta(seconds=15), 10)
    assert [e.eid for e in taken] == [mine.eid]


async def test_task_outcomes_count_failures_in_a_row_and_a_success_resets_them(
    store: SqlStore,
) -> None:
    """task_finished keeps consecutive_failures and can set the next fire time."""
    await store.sync_tasks({"a": task("a", URL, schedule={"after": "1m"})}, T0)
    await store.task_finished("a", T0, False, None)
    await store.task_finished("a", T0, False, T0 + timedelta(minutes=1))
    stored = await store.get_task("a")
    assert stored is not None
    assert (stored.consecutive_failures, stored.next_fire_at) == (2, T0 + timedelta(minutes=1))
    await store.task_finished("a", T0, None, None)
    await store.task_finished("a", T0, True, None)
    reset = await store.get_task("a")
    assert reset is not None and reset.consecutive_failures == 0 and reset.last_end_at == T0


async def test_the_shared_secret_is_generated_once_and_then_always_the_same(
    store: SqlStore,
) -> None:
    """The first candidate is stored; later ones are ignored."""
    assert await store.shared_secret("first") == "first"
    assert await store.shared_secret("second") == "first"


async def test_nodes_register_and_heartbeat_and_the_database_answers_a_ping(
    store: SqlStore,
) -> None:
    """heartbeat() inserts then updates; remove_node forgets; ping() works."""
    await store.heartbeat("n1", T0, host="h", pid=1)
    await store.heartbeat("n1", T0 + timedelta(seconds=5))
    await store.remove_node("n1")
    await store.ping()


async def test_times_come_back_as_aware_utc_with_their_milliseconds(store: SqlStore) -> None:
    """Fire times keep their milliseconds on both backends."""
    at = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
    created = await store.create_execution(execution("a", at, trigger_kind=TriggerKind.MANUAL))
    assert created is not None
    reread = await store.get_execution(created.eid)
    assert reread is not None
    assert reread.scheduled_at == at and reread.scheduled_at.tzinfo is not None
    assert reread.trigger_kind is TriggerKind.MANUAL


@pytest.mark.parametrize("naive", [datetime(2026, 1, 1)])
async def test_a_naive_time_is_refused_rather_than_guessed(
    store: SqlStore, naive: datetime
) -> None:
    """Every stored time must carry its zone."""
    with pytest.raises(Exception, match="naive datetime"):
        await store.create_execution(execution("a", naive))

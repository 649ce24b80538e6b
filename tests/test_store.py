"""The store contract, run against SQLite and PostgreSQL from one parametrised fixture."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ecron.core import (
    FINAL,
    HELD,
    Execution,
    FirePlan,
    Gate,
    Holder,
    Lease,
    Status,
    Step,
    TriggerKind,
    WaitingFor,
)
from ecron.ids import new_eid
from ecron.planning import Claim, FirstFireTimes, plan_fires
from ecron.store.migrate import HEAD, current_revision, head_revision, upgrade
from ecron.store.records import DueTask, Planner, StartWrites
from ecron.store.sql import SqlStore
from ecron.store.writer import StateWriter
from tests.support.daemon import task

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
        "status": Status.PENDING,
    }
    values.update(changes)
    return Execution(**values)  # type: ignore[arg-type]


def claim_at(now: datetime, node: str = "n1") -> Claim:
    return Claim(node=node, now=now, horizon=now)


def planner(claim: Claim, specs: dict[str, object] | None = None) -> Planner:
    """Plan each due task from the spec it was synced from (as a node with that config)."""

    def plan(due: DueTask) -> FirePlan:
        spec = task(due.name, URL, schedule={"every": "1s"})
        if specs is not None:
            spec = specs[due.name]  # type: ignore[assignment]
        return plan_fires(due.name, spec, due.next_fire_at, claim)

    return plan


def later(execution: Execution, **changes: object) -> Execution:
    """``execution`` with ``changes``, one version further (what a write stores)."""
    return execution.evolve(version=execution.version + 1, **changes)


async def test_migrations_reach_the_head_revision_and_running_them_again_changes_nothing(
    store: SqlStore,
) -> None:
    """The fixture migrated the schema; upgrading once more is a no-op (recognised without
    alembic, by the revision ecron knows as its newest, which is alembic's head)."""
    assert head_revision() == HEAD
    assert await current_revision(store.engines) == head_revision()
    before, after = await upgrade(store.engines)
    assert before == after == head_revision()


async def test_a_pools_retry_after_written_before_migration_0014_is_kept_under_its_new_name(
    store: SqlStore,
) -> None:
    """Migration 0014 renames ``pool.paused_until`` to ``held_back_until``, the name the
    moment has on a task's row and in the code: a moment a node wrote under the old name
    (a service's ``Retry-After``) still holds the pool back after the upgrade."""
    from alembic import command

    from ecron.store.migrate import alembic_config
    from ecron.store.tables import UTCDateTime

    def downgrade(connection: Any) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "0013")

    old = sa.table("pool", sa.column("name"), sa.column("paused_until", UTCDateTime))
    until = T0 + timedelta(seconds=30)
    async with store.engines.writer.connect() as conn:
        await conn.run_sync(downgrade)
        await conn.execute(old.insert().values(name="p", paused_until=until))
        await conn.commit()
    assert await current_revision(store.engines) == "0013"
    assert await upgrade(store.engines) == ("0013", HEAD)
    states = await store.pool_states({"p": ["a"]})
    assert states["p"].held_back_until == until


async def test_sync_adds_new_tasks_keeps_unchanged_ones_and_retires_missing_ones(
    store: SqlStore,
) -> None:
    """The task table follows the config; retired tasks keep their row."""
    a = task("a", URL, schedule={"every": "10s"})
    b = task("b", URL, schedule="0 3 * * *")
    first = await store.sync_tasks({"a": a, "b": b}, FirstFireTimes(T0))
    assert (first.added, first.updated, first.retired) == (["a", "b"], [], [])
    again = await store.sync_tasks({"a": a, "b": b}, FirstFireTimes(T0 + timedelta(minutes=1)))
    assert (again.added, again.updated, again.retired) == ([], [], [])
    gone = await store.sync_tasks({"a": a}, FirstFireTimes(T0))
    assert gone.retired == ["b"]
    retired = await store.get_task("b")
    assert retired is not None and retired.retired and retired.next_fire_at is None
    assert [t.name for t in await store.list_tasks()] == ["a"]
    assert [t.name for t in await store.list_tasks(include_retired=True)] == ["a", "b"]
    back = await store.sync_tasks({"a": a, "b": b}, FirstFireTimes(T0))
    assert back.updated == ["b"]
    revived = await store.get_task("b")
    assert revived is not None and not revived.retired
    assert revived.next_fire_at == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)


async def test_a_new_task_starts_at_its_first_fire_time_and_a_changed_schedule_restarts_from_now(
    store: SqlStore,
) -> None:
    """next_fire_at comes from the schedule; changing other keys keeps it."""
    await store.sync_tasks(
        {"a": task("a", URL, schedule={"every": "10m"})}, FirstFireTimes(T0 + timedelta(seconds=1))
    )
    stored = await store.get_task("a")
    assert stored is not None and stored.next_fire_at == T0 + timedelta(minutes=10)
    later = T0 + timedelta(minutes=3)
    await store.sync_tasks(
        {"a": task("a", URL, schedule={"every": "10m"}, poll_interval="2s")}, FirstFireTimes(later)
    )
    kept = await store.get_task("a")
    assert kept is not None and kept.next_fire_at == T0 + timedelta(minutes=10)
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "1m"})}, FirstFireTimes(later))
    moved = await store.get_task("a")
    assert moved is not None and moved.next_fire_at == T0 + timedelta(minutes=3)


async def test_header_values_and_secrets_are_not_stored_in_the_task_row(store: SqlStore) -> None:
    """The stored spec shows header names but never their values or the signing secret."""
    spec = task("a", URL, headers={"Authorization": "Bearer hunter2"}, secret="s3cret")
    await store.sync_tasks({"a": spec}, FirstFireTimes(T0))
    stored = await store.get_task("a")
    assert stored is not None
    assert stored.spec.headers == {"Authorization": "***"}
    assert stored.spec.secret == "***"


async def test_a_due_fire_time_is_claimed_once_and_the_task_moves_to_its_next_fire_time(
    store: SqlStore,
) -> None:
    """Claiming inserts a SCHEDULED execution, held until its start plus the claim's grace,
    and advances next_fire_at in the same transaction."""
    specs = {"a": task("a", URL, schedule={"every": "10s"})}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    claimed = await store.claim_due_fires(T0, 10, planner(claim_at(T0), specs))
    assert [(e.task, e.scheduled_at, e.status) for e in claimed.executions] == [
        ("a", T0, Status.SCHEDULED)
    ]
    assert (claimed.read, claimed.advanced) == (1, 1)
    again = await store.claim_due_fires(T0, 10, planner(claim_at(T0), specs))
    assert again.executions == [] and again.read == 0
    stored = await store.get_task("a")
    assert stored is not None and stored.next_fire_at == T0 + timedelta(seconds=10)
    assert await store.next_fire_time() == T0 + timedelta(seconds=10)
    [row] = (await store.list_executions(status=Status.SCHEDULED)).items
    assert row.lease_until == T0 + timedelta(seconds=1) and row.owner == "n1"


async def test_a_claim_leaves_alone_the_tasks_its_planner_does_not_know(store: SqlStore) -> None:
    """A planner answering None (another config's task) neither advances nor inserts."""
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "10s"})}, FirstFireTimes(T0))
    claimed = await store.claim_due_fires(T0, 10, lambda _due: None)
    assert (claimed.executions, claimed.read, claimed.advanced) == ([], 1, 0)
    stored = await store.get_task("a")
    assert stored is not None and stored.next_fire_at == T0


async def test_one_claim_takes_many_tasks_in_one_transaction(store: SqlStore) -> None:
    """300 due tasks, a limit of 250: 250 are claimed by the first claim, the rest by the next."""
    specs = {f"t{i:03}": task(f"t{i:03}", URL, schedule={"every": "1s"}) for i in range(300)}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    first = await store.claim_due_fires(T0, 250, planner(claim_at(T0), specs))
    second = await store.claim_due_fires(T0, 250, planner(claim_at(T0), specs))
    assert (len(first.executions), len(second.executions)) == (250, 50)
    assert {e.task for e in first.executions + second.executions} == set(specs)


async def test_two_stores_claiming_the_same_fire_times_at_once_never_both_get_one(
    store: SqlStore, database_url: str
) -> None:
    """Two nodes racing over 20 tasks: every fire time is claimed exactly once."""
    specs = {f"t{i}": task(f"t{i}", URL, schedule={"every": "1s"}) for i in range(20)}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    other = SqlStore.open(database_url)
    try:

        async def node(s: SqlStore, name: str) -> list[Execution]:
            got: list[Execution] = []
            for step in range(5):
                claim = claim_at(T0 + timedelta(seconds=step), name)
                got += (await s.claim_due_fires(claim.now, 7, planner(claim, specs))).executions
            return got

        first, second = await asyncio.gather(node(store, "n1"), node(other, "n2"))
    finally:
        await other.close()
    keys = [(e.task, e.scheduled_at) for e in first + second]
    assert len(keys) == len(set(keys))
    page = await store.list_executions(status=Status.SCHEDULED, limit=500)
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
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "10s"})}, FirstFireTimes(T0))
    assert await store.create_execution(execution("a", T0)) is not None

    def plan(_due: DueTask) -> FirePlan:
        return FirePlan(T0 + timedelta(seconds=10), [execution("a", T0)])

    claimed = await store.claim_due_fires(T0, 10, plan)
    assert claimed.executions == [] and claimed.advanced == 1


async def test_a_write_succeeds_once_and_a_write_built_on_stale_state_is_refused(
    store: SqlStore,
) -> None:
    """save() is a compare-and-set on fence and version; the row takes the new version."""
    created = await store.create_execution(execution())
    assert created is not None
    running = later(created, status=Status.RUNNING, progress=40.0, message="going")
    [stored] = await store.save([(created, running)])
    assert stored is not None and stored.version == created.version + 1
    assert await store.save([(created, later(created, progress=50.0))]) == [None]
    fenced = stored.evolve(fence=stored.fence + 5)
    assert await store.save([(fenced, later(fenced, progress=60.0))]) == [None]
    reread = await store.get_execution(created.eid)
    assert reread is not None
    assert (reread.status, reread.progress, reread.message) == (Status.RUNNING, 40.0, "going")
    assert reread.version == created.version + 1


async def test_one_save_writes_many_rows_and_refuses_exactly_the_stale_ones(
    store: SqlStore,
) -> None:
    """200 writes in one statement, every third built on stale state: those and only those
    are refused, each row keeps what its own write said, results come back in order."""
    rows = [
        await store.create_execution(execution("a", T0 + timedelta(seconds=i))) for i in range(200)
    ]
    assert all(rows)
    fresh = [row for row in rows if row is not None]
    writes = []
    for i, row in enumerate(fresh):
        before = row.evolve(version=row.version + 7) if i % 3 == 0 else row
        writes.append((before, later(before, progress=float(i % 100), message=f"m{i}")))
    stored = await store.save(writes)
    assert [s is None for s in stored] == [i % 3 == 0 for i in range(200)]
    for i, row in enumerate(fresh):
        reread = await store.get_execution(row.eid)
        assert reread is not None
        expected = (0.0, None) if i % 3 == 0 else (float(i % 100), f"m{i}")
        assert (reread.progress, reread.message) == expected


async def test_a_write_made_after_a_takeover_is_not_mistaken_for_one_on_the_old_lease(
    store: SqlStore,
) -> None:
    """A change written behind is still waiting when the execution is taken over (its fence
    and its version both raised): the next change, made on the row as taken over, has the
    version the waiting one would have written. The two are not one write: the waiting one
    is refused (its lease moved on, and its writer hears so), the new one lands."""
    created = await store.create_execution(execution("a", T0))
    assert created is not None
    lost: list[Execution] = []
    writer = StateWriter(
        store, linger=timedelta(seconds=30), on_lost=lambda before, _after: lost.append(before)
    )
    writer.save_soon(created, later(created, progress=10.0))  # waits out its linger
    [taken] = await store.force_claim(Lease("n2", 1), [created.eid])
    assert (taken.version, taken.fence) == (created.version + 1, created.fence + 1)
    stored = await writer.save(taken, later(taken, progress=20.0))
    assert stored is not None and stored.progress == 20.0
    await writer.drain(5)
    reread = await store.get_execution(created.eid)
    assert reread is not None and (reread.progress, reread.fence) == (20.0, taken.fence)
    assert [e.version for e in lost] == [created.version]


async def test_a_write_lands_only_while_the_lease_it_was_made_under_is_the_nodes(
    store: SqlStore,
) -> None:
    """A fenced write names the node's lease it was made under: it lands while the node's
    lease has that epoch, and is refused (the row untouched) once the lease was fenced or
    taken again, whatever the row's own fence says."""
    lease = await store.take_node_lease("n1", T0, T0 + timedelta(seconds=15))
    created = await store.create_execution(execution(owner_epoch=lease.epoch, lease_until=None))
    assert created is not None
    [stored] = await store.save([(created, later(created, progress=10.0))], lease=lease)
    assert stored is not None and stored.progress == 10.0
    again = await store.take_node_lease("n1", T0, T0 + timedelta(seconds=15))
    assert again.epoch == lease.epoch + 1
    assert await store.save([(stored, later(stored, progress=20.0))], lease=lease) == [None]
    reread = await store.get_execution(created.eid)
    assert reread is not None and reread.progress == 10.0
    [newer] = await store.save([(stored, later(stored, progress=30.0))], lease=again)
    assert newer is not None and newer.progress == 30.0


async def test_results_and_nulls_survive_a_bulk_write(store: SqlStore) -> None:
    """Any JSON result (nested, unicode, a bare string), booleans and cleared times come
    back as they were written."""
    created = await store.create_execution(execution(not_before=T0))
    assert created is not None
    result = {"rows": [1, 2.5, None, True], "name": "Zoë ✓", "nested": {"a": []}}
    done = later(
        created,
        status=Status.SUCCESS,
        result=result,
        result_truncated=True,
        cancel_acknowledged=False,
        finished_at=T0 + timedelta(seconds=3),
        not_before=None,
    )
    assert (await store.save([(created, done)]))[0] is not None
    reread = await store.get_execution(created.eid)
    assert reread is not None
    assert reread.result == result and reread.result_truncated is True
    assert reread.cancel_acknowledged is False and reread.not_before is None
    other = await store.create_execution(execution("b"))
    assert other is not None
    assert (await store.save([(other, later(other, result="just text"))]))[0] is not None
    text = await store.get_execution(other.eid)
    assert text is not None and text.result == "just text"


async def test_steps_are_stored_with_their_execution_and_updated_by_save(store: SqlStore) -> None:
    """Step rows come back in order, and a saved step change is persisted (also for several
    executions in one save)."""
    made = []
    for n in range(3):
        eid = new_eid()
        steps = (Step(1, "fetch", f"{eid}.1"), Step(2, "load", f"{eid}.2"))
        at = T0 + timedelta(seconds=n)
        created = await store.create_execution(execution(at=at, eid=eid, steps=steps))
        assert created is not None
        made.append(created)
    writes = []
    for created in made:
        first, second = created.steps
        done = replace(first, status=Status.SUCCESS, progress=100.0, finished_at=T0)
        writes.append((created, later(created, steps=(done, second))))
    assert all(await store.save(writes))
    for created in made:
        reread = await store.get_execution(created.eid)
        assert reread is not None
        assert [(s.number, s.name, s.status, s.finished_at) for s in reread.steps] == [
            (1, "fetch", Status.SUCCESS, T0),
            (2, "load", Status.PENDING, None),
        ]


async def test_history_is_newest_first_filtered_and_paginated_with_a_cursor(
    store: SqlStore,
) -> None:
    """list_executions pages through everything once, newest first; fire times claimed
    ahead are listed only when asked for."""
    made = []
    for i in range(7):
        status = Status.SUCCESS if i % 2 else Status.FAILED
        e = execution("a" if i < 5 else "b", T0 + timedelta(seconds=i), status=status)
        assert await store.create_execution(e) is not None
        made.append(e)
    ahead = execution("a", T0 + timedelta(minutes=1), status=Status.SCHEDULED)
    assert await store.create_execution(ahead) is not None
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
    claimed = await store.list_executions(status=Status.SCHEDULED)
    assert [e.eid for e in claimed.items] == [ahead.eid]
    assert await store.claimed_fire_times(["a", "b"]) == {"a": T0 + timedelta(minutes=1)}


async def test_what_a_lease_that_ran_out_held_is_taken_over_after_fencing_it_and_nothing_live_is(
    store: SqlStore,
) -> None:
    """claim_runnable adopts only what nobody holds: the rows of a node whose lease ran out
    (that lease fenced first, so its renewal fails and its writes are refused), rows let
    go, a claim ahead whose own short lease ran out, and a node's rows of an epoch older
    than its lease's; never a live lease's rows, nor an ended one."""
    live = await store.take_node_lease("live", T0, T0 + timedelta(hours=1))
    dead = await store.take_node_lease("dead", T0, T0 + timedelta(seconds=1))
    lost = await store.take_node_lease("lost", T0, T0 + timedelta(hours=1))
    relost = await store.take_node_lease("lost", T0, T0 + timedelta(hours=1))  # taken again

    def held(name: str, lease: Lease, **changes: object) -> Execution:
        values: dict[str, object] = {"owner": lease.node, "owner_epoch": lease.epoch}
        values["lease_until"] = None
        values.update(changes)
        return execution(name, T0, **values)

    rows = {
        "live": held("a", live),
        "dead": held("b", dead),
        "dead_ended": held("c", dead, status=Status.SUCCESS),
        "orphan": execution("d", T0, owner=None, lease_until=None),
        "claim": held("e", live, status=Status.SCHEDULED, lease_until=T0 + timedelta(seconds=1)),
        "old_epoch": held("f", lost),
        "new_epoch": held("g", relost),
        "waiting": held("h", live, status=Status.SCHEDULED, waiting_for=WaitingFor.POOL),
    }
    created = {key: await store.create_execution(row) for key, row in rows.items()}
    assert all(created.values())
    now = T0 + timedelta(seconds=2)

    def claim(e: Execution) -> datetime | None:
        return now + timedelta(seconds=1) if e.status is Status.SCHEDULED else None

    taker = await store.take_node_lease("taker", now, now + timedelta(seconds=15))
    taken = await store.claim_runnable(taker, now, claim, 10)
    eids = {key: row.eid for key, row in rows.items()}
    assert sorted(a.execution.eid for a in taken) == sorted(
        eids[k] for k in ("dead", "orphan", "claim", "old_epoch")
    )
    assert {a.execution.eid: a.previous_owner for a in taken} == {
        eids["dead"]: "dead",
        eids["orphan"]: None,
        eids["claim"]: "live",
        eids["old_epoch"]: "lost",
    }
    assert [a.execution.eid for a in taken] == sorted(a.execution.eid for a in taken)
    assert all(
        (a.execution.owner, a.execution.owner_epoch, a.execution.fence) == ("taker", 1, 2)
        for a in taken
    )
    by_eid = {a.execution.eid: a.execution for a in taken}
    assert by_eid[eids["claim"]].lease_until == now + timedelta(seconds=1)
    assert by_eid[eids["dead"]].lease_until is None
    reread = await store.get_execution(eids["claim"])
    assert reread is not None and (reread.owner, reread.owner_epoch, reread.fence) == (
        "taker",
        1,
        2,
    )
    assert await store.claim_runnable(taker, now, claim, 10) == []
    # the dead node was fenced: its renewal fails, its writes are refused
    assert await store.renew_node_lease(dead, now, now + timedelta(seconds=15), _ticks) is None
    old = created["live"]
    assert old is not None
    [kept] = await store.save([(old, later(old, progress=5.0))], lease=live)
    assert kept is not None  # the live node writes on


def _ticks() -> float:
    return 0.0


async def test_a_node_skips_its_own_executions_when_taking_over(store: SqlStore) -> None:
    """What a node still holds in memory (an overdue claim of its own) is not taken again."""
    lease = await store.take_node_lease("n1", T0, T0 + timedelta(hours=1))
    own = await store.create_execution(
        execution("a", T0, status=Status.SCHEDULED, lease_until=T0, owner_epoch=lease.epoch)
    )
    assert own is not None
    now = T0 + timedelta(seconds=5)
    taken = await store.claim_runnable(lease, now, lambda _e: now, 10, skip={own.eid})
    assert taken == []
    taken = await store.claim_runnable(lease, now, lambda _e: now, 10)  # only others' claims
    assert taken == []
    [mine] = await store.claim_runnable(lease, now, lambda _e: now, 10, skip=set())
    assert mine.execution.eid == own.eid and mine.previous_owner == "n1"


async def test_a_node_lease_is_renewed_in_one_write_and_released_rows_are_free_at_once(
    store: SqlStore,
) -> None:
    """Renewing a node's lease moves its lease alone (the rows it holds are not written);
    a fenced lease is not renewed; release_leases frees rows at once, and a clean stop
    (let_go_node_lease) frees everything the lease held."""
    lease = await store.take_node_lease("n1", T0, T0 + timedelta(seconds=15))
    other = await store.take_node_lease("n2", T0, T0 + timedelta(hours=1))
    mine = await store.create_execution(execution("a", owner_epoch=lease.epoch, lease_until=None))
    kept = await store.create_execution(execution("b", owner_epoch=lease.epoch, lease_until=None))
    assert mine and kept
    later_on = T0 + timedelta(seconds=10)
    renewal = await store.renew_node_lease(
        lease, later_on, later_on + timedelta(seconds=15), _ticks
    )
    assert renewal is not None and renewal.live_nodes == 2
    assert (await store.get_execution(mine.eid)) == mine  # the row is not written
    await store.release_leases("n1", [mine.eid])
    now = T0 + timedelta(seconds=20)
    taken = await store.claim_runnable(other, now, lambda _e: None, 10)
    assert [a.execution.eid for a in taken] == [mine.eid]
    await store.let_go_node_lease(lease)
    assert await store.renew_node_lease(lease, now, now + timedelta(seconds=15), _ticks) is None
    taken = await store.claim_runnable(other, now, lambda _e: None, 10)
    assert [a.execution.eid for a in taken] == [kept.eid]


async def test_starting_reads_each_tasks_gate_and_writes_every_decision(store: SqlStore) -> None:
    """start_executions hands the decider each task's pause, retirement, active executions
    and (when asked) fire times claimed for later, then writes what it decided."""
    specs = {name: task(name, URL, schedule={"every": "1s"}) for name in ("a", "b")}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    b = await store.get_task("b")
    assert b is not None
    await store.set_paused("b", True, "held for a release", None, version=b.version)
    running = await store.create_execution(execution("a", T0 - timedelta(minutes=1)))
    first = await store.create_execution(execution("a", T0, status=Status.SCHEDULED))
    second = await store.create_execution(execution("b", T0, status=Status.SCHEDULED))
    ahead = await store.create_execution(
        execution("a", T0 + timedelta(seconds=5), status=Status.SCHEDULED)
    )
    assert running and first and second and ahead
    seen: dict[str, Gate] = {}

    def decide(gates: dict[str, Gate]) -> StartWrites:
        seen.update(gates)
        return StartWrites([(first, later(first, status=Status.PENDING, triggered_at=T0))])

    results = (await store.start_executions(["a", "b", "gone"], decide, later_of=["a"])).written
    assert seen["a"].active == (
        Holder(running.eid, Status.PENDING, running.scheduled_at, TriggerKind.SCHEDULE),
    )
    assert seen["a"].later == (T0, T0 + timedelta(seconds=5)) and not seen["a"].paused
    assert seen["b"].paused and seen["b"].paused_reason == "held for a release"
    assert seen["b"].later == () and seen["gone"].retired
    [(before, _after, stored)] = results
    assert before is first and stored is not None and stored.status is Status.PENDING
    reread = await store.get_execution(first.eid)
    assert reread is not None and reread.status is Status.PENDING


async def test_a_start_inserts_new_runs_in_its_transaction_after_reading_their_gate(
    store: SqlStore,
) -> None:
    """New runs are inserted by the start that decided them, on the gate it read: the
    first run of ``a`` goes in (none was active), a second decided on a gate that now shows
    the first one active is not inserted by a decider that refuses it, and a run whose key
    is taken is left out of ``inserted``."""
    await store.sync_tasks({"a": task("a", URL)}, FirstFireTimes(T0))
    first = execution("a", T0)

    def only_if_idle(run: Execution) -> Callable[[Mapping[str, Gate]], StartWrites]:
        def decide(gates: Mapping[str, Gate]) -> StartWrites:
            return StartWrites(inserts=[] if gates["a"].active else [run])

        return decide

    started = await store.start_executions(["a"], only_if_idle(first))
    assert [e.eid for e in started.inserted] == [first.eid] and started.written == []
    second_run = execution("a", T0 + timedelta(seconds=1))
    second = await store.start_executions(["a"], only_if_idle(second_run))
    assert second.inserted == []
    again = execution("a", T0)  # another run of the same fire time, under a fresh eid
    taken = await store.start_executions(["a"], lambda _gates: StartWrites(inserts=[again]))
    assert taken.inserted == []  # the fire-time key is taken


async def test_task_outcomes_count_failures_in_a_row_and_a_success_resets_them(
    store: SqlStore,
) -> None:
    """task_finished keeps consecutive_failures and can set the next fire time."""
    await store.sync_tasks({"a": task("a", URL, schedule={"after": "1m"})}, FirstFireTimes(T0))
    await store.task_finished("a", T0, False, None)
    await store.task_finished("a", T0, False, T0 + timedelta(minutes=1))
    stored = await store.get_task("a")
    assert stored is not None
    assert (stored.consecutive_failures, stored.next_fire_at) == (2, T0 + timedelta(minutes=1))
    await store.task_finished("a", T0, None, None)
    await store.task_finished("a", T0, True, None)
    reset = await store.get_task("a")
    assert reset is not None and reset.consecutive_failures == 0 and reset.last_end_at == T0


async def test_pausing_is_a_compare_and_set_on_the_version_it_was_decided_from(
    store: SqlStore,
) -> None:
    """set_paused writes only on the version read: after another write (here a failure
    counted) it writes nothing and says so; on the fresh version it writes, and unpausing
    resets the count and restarts the schedule."""
    await store.sync_tasks({"a": task("a", URL, schedule={"every": "1m"})}, FirstFireTimes(T0))
    read = await store.get_task("a")
    assert read is not None
    counted = await store.task_finished("a", T0, False, None)
    assert counted is not None and counted.version == read.version + 1
    assert await store.set_paused("a", True, "stale", None, version=read.version) is None
    paused = await store.set_paused("a", True, "fresh", None, version=counted.version)
    assert paused is not None and (paused.paused, paused.paused_reason) == (True, "fresh")
    assert paused.consecutive_failures == 1
    later = T0 + timedelta(minutes=5)
    back = await store.set_paused("a", False, None, later, version=paused.version)
    assert back is not None
    assert (back.paused, back.consecutive_failures, back.next_fire_at) == (False, 0, later)


async def test_successes_of_many_tasks_are_recorded_in_one_call(store: SqlStore) -> None:
    """tasks_succeeded resets each task's count of failures and records when it ended."""
    specs = {name: task(name, URL, schedule={"every": "1s"}) for name in ("a", "b", "c")}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    for name in ("a", "b"):
        await store.task_finished(name, T0, False, None)
    ends = {"a": T0 + timedelta(seconds=1), "b": T0 + timedelta(seconds=2)}
    await store.tasks_succeeded(ends)
    for name in ("a", "b"):
        stored = await store.get_task(name)
        assert stored is not None
        assert (stored.consecutive_failures, stored.last_end_at) == (0, ends[name])
    untouched = await store.get_task("c")
    assert untouched is not None and untouched.last_end_at is None


async def test_the_shared_secret_is_generated_once_and_then_always_the_same(
    store: SqlStore,
) -> None:
    """The first candidate is stored; later ones are ignored."""
    assert await store.shared_secret("first") == "first"
    assert await store.shared_secret("second") == "first"


async def test_a_node_takes_a_new_epoch_each_time_and_is_forgotten_once_it_holds_nothing(
    store: SqlStore,
) -> None:
    """take_node_lease registers a node (epoch 1), then raises its epoch each time; the live
    leases are counted; a node whose lease ended is forgotten by purge_nodes only once it
    holds nothing; ping() works."""
    first = await store.take_node_lease("n1", T0, T0 + timedelta(seconds=15), host="h", pid=1)
    second = await store.take_node_lease("n1", T0, T0 + timedelta(seconds=15))
    assert (first.epoch, second.epoch) == (1, 2)
    gone = await store.take_node_lease("n2", T0, T0 + timedelta(seconds=15))
    assert await store.live_nodes(T0 + timedelta(seconds=1)) == 2
    holding = await store.create_execution(execution("a", owner="n2", owner_epoch=gone.epoch))
    assert holding is not None
    await store.let_go_node_lease(gone)
    assert await store.live_nodes(T0 + timedelta(seconds=1)) == 1
    after = T0 + timedelta(hours=1)
    assert await store.purge_nodes(after) == 1  # n1 ran out and holds nothing; n2 holds one
    await store.save([(holding, later(holding, status=Status.SUCCESS))])
    assert await store.purge_nodes(after) == 1
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


async def test_history_retention_reads_the_oldest_ends_not_every_final_execution(
    store: SqlStore,
) -> None:
    """``purge_history`` asks for final executions as "not held" (every status is one or
    the other), so the plan reads ``ix_execution_finished`` from its oldest end: ``status
    IN`` (the five final ones) had SQLite walk ``ix_execution_status_eid`` over every final
    execution in each patrol round's write transaction, the whole history when none was
    old enough to go."""
    assert set(Status) == FINAL | HELD and not FINAL & HELD
    old, recent = T0 - timedelta(days=40), T0 - timedelta(days=1)
    for n, (status, ended) in enumerate(
        [
            (Status.SUCCESS, old),
            (Status.FAILED, old),
            (Status.SUCCESS, recent),
            (Status.RUNNING, None),
        ]
    ):
        e = execution("a", T0 + timedelta(seconds=n), status=status, finished_at=ended)
        assert await store.create_execution(e) is not None
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    engine = store.engines.writer.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        assert await store.purge_history(T0 - timedelta(days=30), 100) == 2
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert [e.status for e in (await store.list_executions()).items] == [
        Status.RUNNING,
        Status.SUCCESS,
    ]
    statement, parameters = next((s, p) for s, p in sent if s.startswith("SELECT execution.eid"))
    async with store.engines.read() as conn:
        if store.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table otherwise
            rows = await conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
            plan = [row[0] for row in rows]
        else:
            rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            plan = [row[-1] for row in rows]
    assert any("ix_execution_finished" in line for line in plan), plan
    assert not any("ix_execution_status_eid" in line for line in plan), plan


async def test_changes_of_progress_alone_settle_into_one_write_and_another_change_takes_them_along(
    store: SqlStore,
) -> None:
    """A writer that lets progress settle: five progress reports of one execution are held
    (a durable write of another execution goes alone meanwhile); its end takes them along
    in the same write (the row holds the end, one row written for all six changes); drain
    writes whatever still settles."""
    created = await store.create_execution(execution(status=Status.RUNNING))
    other = await store.create_execution(execution("b", status=Status.RUNNING))
    assert created is not None and other is not None
    writer = StateWriter(store, linger=timedelta(milliseconds=1), settle=timedelta(hours=1))
    current = created
    for progress in (10.0, 20.0, 30.0, 40.0, 50.0):
        nxt = later(current, progress=progress)
        writer.save_soon(current, nxt, settle=True)
        current = nxt
    moved = await writer.save(other, later(other, message="going"))
    assert moved is not None and writer.writes == 1  # the other's alone
    assert (await store.get_execution(created.eid)) == created  # the progress still settles
    ended = later(current, status=Status.SUCCESS, progress=100.0, finished_at=T0)
    stored = await writer.save(current, ended)
    assert stored is not None and writer.writes == 2  # the five changes and the end: one row
    reread = await store.get_execution(created.eid)
    assert reread is not None and (reread.status, reread.progress) == (Status.SUCCESS, 100.0)
    writer.save_soon(moved, later(moved, progress=5.0), settle=True)
    assert await writer.drain(5)
    again = await store.get_execution(other.eid)
    assert again is not None and again.progress == 5.0

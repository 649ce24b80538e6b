"""Fencing and adoption: a node whose lease moved on cannot write any more, and a node that
takes over an execution polls it before anything else (never a second trigger blindly)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from structlog.testing import capture_logs

from ecron.config.model import TaskSpec
from ecron.core import Execution, Status
from ecron.daemon import Daemon
from ecron.ids import new_eid
from ecron.leases import CLAIM_GRACE
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore
from ecron.store.tables import execution_table, node_table
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock, rig
from tests.support.service import UserService, wait_for


async def take_over(
    store: SqlStore, eid: str, node: str, until: datetime | None = None, *, fence: bool = False
) -> Execution:
    """Another node takes ``eid`` (with a claim of its own until ``until``, when given): as
    the patrol's force-claim does, or (``fence``) as claim_runnable does once the holder's
    node lease ran out, fencing that lease first (here at once: the holder is as good as
    paused)."""
    lease = {} if until is None else {"lease_until": until}
    async with store.engines.write() as conn:
        if fence:
            holder = sa.select(execution_table.c.owner).where(execution_table.c.eid == eid)
            await conn.execute(
                sa.update(node_table)
                .where(node_table.c.node_id == holder.scalar_subquery())
                .values(epoch=node_table.c.epoch + 1, lease_until=None)
            )
        await conn.execute(
            sa.update(execution_table)
            .where(execution_table.c.eid == eid)
            .values(
                owner=node,
                fence=execution_table.c.fence + 1,
                version=execution_table.c.version + 1,
                **lease,
            )
        )
    taken = await store.get_execution(eid)
    assert taken is not None
    return taken


def triggered_by_a_dead_node(eid: str) -> Execution:
    """A PENDING execution whose trigger a node recorded before it died (lease expired)."""
    now = datetime.now(UTC)
    return Execution(
        eid=eid,
        task="job",
        scheduled_at=now,
        created_at=now,
        status=Status.PENDING,
        triggered_at=now,
        deadline=now + timedelta(hours=1),
        owner="dead-node",
        lease_until=now - timedelta(minutes=1),
        fence=1,
    )


async def orphan(database_url: str, execution: Execution) -> None:
    """Store ``execution`` as a node that then died would have left it."""
    store = SqlStore.open(database_url)
    try:
        await upgrade(store.engines)
        assert await store.create_execution(execution) is not None
    finally:
        await store.close()


def witness(service: UserService) -> TaskSpec:
    """A task polled on the same 50 ms as ``job``, whose lease nobody takes: its polls show
    the executor going round, without a fixed sleep."""
    service.durations["w"] = 3600
    return task("witness", f"{service.url}/jobs/w", poll_interval="50ms", task_timeout="1h")


async def polled_again(service: UserService, eid: str, polls: int = 5) -> None:
    """Wait until execution ``eid`` has been polled ``polls`` more times."""
    before = len(service.calls_for(eid, "GET"))
    await wait_for(lambda: len(service.calls_for(eid, "GET")) >= before + polls, timeout=10)


async def test_a_node_whose_lease_was_taken_over_cannot_write_the_execution_any_more(
    make_daemon: DaemonFactory, user_service: UserService, database_url: str
) -> None:
    """While the daemon polls, another node takes the lease (fence 1 -> 2). The daemon's next
    report, with new progress, is refused by the fence: it lets the execution go then, polls
    it no more, and the row keeps the intruder's lease and the state it had at the takeover."""
    user_service.duration = 2.0  # progress moves on every poll: each poll wants a write
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="50ms")
    intruder = SqlStore.open(database_url)
    try:
        async with make_daemon([spec, witness(user_service)], lease_ttl="1h") as daemon:
            watcher = await run_once(daemon, "witness")
            eid = await run_once(daemon, "job")
            await wait_for(lambda: len(user_service.calls_for(eid, "GET")) >= 2, timeout=5)
            taken = await take_over(intruder, eid, "intruder")
            await wait_for(lambda: eid not in daemon.parts.held, timeout=5)
            # Until its write-behind write is refused the node may poll on (a read, harmless,
            # as many as the write took: more on a loaded machine); once it let go, none.
            polls = len(user_service.calls_for(eid, "GET"))
            await polled_again(user_service, watcher)  # polls of "job" would have gone on
            after = await intruder.get_execution(eid)
    finally:
        await intruder.close()
    assert taken.fence == 2
    assert after is not None
    assert (after.owner, after.fence, after.version) == ("intruder", 2, taken.version)
    assert after.progress == taken.progress
    assert len(user_service.calls_for(eid, "GET")) <= polls + 1  # one under way as it let go


async def test_a_node_woken_from_a_pause_past_its_leases_sends_nothing_for_what_was_taken_over(
    make_daemon: DaemonFactory, user_service: UserService, database_url: str
) -> None:
    """The node is paused past its lease_ttl (its clock jumps 5 s with every timer due at
    once, as after SIGCONT) while another node fences its lease and takes one of its two
    executions over. On waking its renewal round comes before any call, and says it began
    late (``lease_renewal_late``): the renewal finds the lease fenced, so the node lets go of
    everything without a poll about it, takes a new lease, takes back by polling the
    execution nobody took, and never polls the other again."""
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    user_service.on_clock(clock)
    user_service.durations.update(lost=3600, kept=3600)
    lost_spec = task("lost", f"{user_service.url}/jobs/lost", poll_interval="100ms")
    kept_spec = task("kept", f"{user_service.url}/jobs/kept", poll_interval="100ms")
    intruder = SqlStore.open(database_url)
    try:
        async with make_daemon([lost_spec, kept_spec], clock=clock, lease_ttl="2s") as daemon:
            lost, kept = await run_once(daemon, "lost"), await run_once(daemon, "kept")
            await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)  # triggered
            for eid in (lost, kept):  # their RUNNING written: no write of theirs is pending
                await wait_for(lambda eid=eid: stored_running(intruder, eid), timeout=5)
            assert user_service.methods_for(lost) == ["POST"]
            await take_over(
                intruder, lost, "intruder", clock.now() + timedelta(hours=1), fence=True
            )
            kept_calls = len(user_service.calls_for(kept))
            with capture_logs() as logs:
                clock.advance(timedelta(seconds=5))  # the pause ends: every timer is due at once
                await wait_for(lambda: lost not in daemon.parts.held, timeout=5)
                await wait_for(lambda: len(user_service.calls_for(kept)) > kept_calls, timeout=5)
            after = await intruder.get_execution(lost)
    finally:
        await intruder.close()
    late = [e for e in logs if e["event"] == "lease_renewal_late"]
    assert [(e["held"], e["late_seconds"] > 0) for e in late] == [(2, True)], logs
    assert user_service.methods_for(lost) == ["POST"]  # no poll left after the wake
    assert set(user_service.methods_for(kept)[kept_calls:]) == {"GET"}  # taken back: polled
    assert after is not None and after.owner == "intruder"


async def test_a_node_that_lost_its_lease_learns_it_at_the_next_renewal_without_a_write(
    make_daemon: DaemonFactory, user_service: UserService, database_url: str
) -> None:
    """Polls that change nothing write nothing, so the fence is not tested by them; the lease
    renewal (every lease_ttl / 2) finds the node's lease fenced by the node that took the
    execution over, and the node stops polling it (it takes back, under a new lease, only
    what nobody took: the witness)."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="50ms")
    intruder = SqlStore.open(database_url)
    try:
        async with make_daemon([spec, witness(user_service)], lease_ttl="1s") as daemon:
            watcher = await run_once(daemon, "witness")
            eid = await run_once(daemon, "job")
            await wait_for(lambda: len(user_service.calls_for(eid, "GET")) >= 2, timeout=5)
            await take_over(intruder, eid, "intruder", fence=True)
            await wait_for(lambda: eid not in daemon.parts.held, timeout=3)
            polls = len(user_service.calls_for(eid, "GET"))
            await polled_again(user_service, watcher)  # polls of "job" would have gone on
    finally:
        await intruder.close()
    assert len(user_service.calls_for(eid, "GET")) <= polls + 1


async def test_a_poll_tells_an_execution_another_node_took_from_one_ended_elsewhere(
    make_daemon: DaemonFactory, user_service: UserService, database_url: str
) -> None:
    """Two running executions the node polls every 200 ms: another node takes one over (as
    the patrol's force-claim does, leaving this node's lease alone), and another node's
    callback ends the other (it holds no lease, so the row keeps this node as its owner).
    The next poll of each finds its write refused and lets it go; only the first is a lost
    lease (``lease_lost``, counted in ``ecron_leases_lost``), the second is said to have
    ended elsewhere, with its status. (A node's lease renewal reads no execution row: that
    is what keeps it one write at 50,000 executions.)"""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="200ms", concurrency="allow")
    intruder = SqlStore.open(database_url)
    try:
        with capture_logs() as logged:
            async with make_daemon([spec], lease_ttl="3s") as daemon:
                taken, ended_there = [await run_once(daemon, "job") for _ in range(2)]
                for eid in (taken, ended_there):
                    await wait_for(lambda eid=eid: running_here(daemon, eid), timeout=5)
                    await wait_for(lambda eid=eid: stored_running(intruder, eid), timeout=5)
                await take_over(intruder, taken, "intruder", datetime.now(UTC) + timedelta(hours=1))
                await end_as_a_callback_elsewhere(intruder, ended_there)
                await wait_for(lambda: not ({taken, ended_there} & set(daemon.parts.held)))
                for eid in (taken, ended_there):
                    try:
                        await wait_for(lambda eid=eid: said_about(logged, eid), timeout=5)
                    except AssertionError:
                        about = [e for e in logged if e.get("execution_id") == eid]
                        raise AssertionError(f"nothing said of {eid}: {about}") from None
                lost = daemon.metrics.registry.get_sample_value("ecron_leases_lost_total")
    finally:
        await intruder.close()
    said = {(e["event"], e.get("execution_id")) for e in logged}
    assert ("lease_lost", taken) in said
    assert ("lease_lost", ended_there) not in said
    [elsewhere] = [e for e in logged if e["event"] == "execution_ended_elsewhere"]
    assert (elsewhere["execution_id"], elsewhere["status"]) == (ended_there, "SUCCESS")
    assert lost == 1


def running_here(daemon: Daemon, eid: str) -> bool:
    """True once ``daemon`` holds ``eid`` RUNNING."""
    held = daemon.parts.held.get(eid)
    return held is not None and held.status is Status.RUNNING


async def stored_running(store: SqlStore, eid: str) -> bool:
    """True once ``eid``'s row says RUNNING (the node writes its states a moment later)."""
    stored = await store.get_execution(eid)
    return stored is not None and stored.status is Status.RUNNING


async def end_as_a_callback_elsewhere(store: SqlStore, eid: str) -> None:
    """End ``eid`` SUCCESS as another node's callback handler does: no lease, so the owner
    and the fence stay; the version moves on."""
    async with store.engines.write() as conn:
        await conn.execute(
            sa.update(execution_table)
            .where(execution_table.c.eid == eid)
            .values(
                status=Status.SUCCESS,
                progress=100,
                finished_at=datetime.now(UTC),
                version=execution_table.c.version + 1,
            )
        )


def said_about(logged: list[dict[str, Any]], eid: str) -> bool:
    return any(
        e.get("execution_id") == eid and e["event"] in ("execution_ended_elsewhere", "lease_lost")
        for e in logged
    )


async def test_a_taken_over_pending_execution_whose_trigger_may_have_left_is_polled_first(
    make_daemon: DaemonFactory, user_service: UserService, database_url: str
) -> None:
    """A dead node recorded the trigger but not its answer; the service did start the job.
    The node that takes over polls the same id, finds it RUNNING, and adopts it: no POST."""
    user_service.duration = 0.3
    eid = new_eid()
    await user_service.start(eid)
    await orphan(database_url, triggered_by_a_dead_node(eid))
    async with make_daemon([task("job", f"{user_service.url}/jobs/x")]) as daemon:
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    assert execution.owner == daemon.node_id and execution.fence == 2
    assert "POST" not in user_service.methods_for(eid)


async def test_a_taken_over_pending_execution_the_service_never_saw_is_triggered_with_its_id(
    make_daemon: DaemonFactory, user_service: UserService, database_url: str
) -> None:
    """The same, but the trigger never arrived: the poll answers 404, so the trigger is sent
    with the same execution id, and the execution succeeds."""
    user_service.duration = 0.2
    eid = new_eid()
    await orphan(database_url, triggered_by_a_dead_node(eid))
    async with make_daemon([task("job", f"{user_service.url}/jobs/x")]) as daemon:
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    assert user_service.methods_for(eid)[:2] == ["GET", "POST"]
    assert user_service.methods_for(eid).count("POST") == 1


async def test_a_taken_over_running_execution_is_adopted_by_polling(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A RUNNING execution whose holder stopped is polled to its end by the next daemon,
    with exactly one POST at the service in all."""
    user_service.duration = 1.0
    spec = task("job", f"{user_service.url}/jobs/x")
    async with make_daemon([spec]) as first:
        eid = await run_once(first, "job")
        await wait_for(lambda: user_service.calls_for(eid, "GET"), timeout=5)
    await asyncio.sleep(0)
    async with make_daemon([spec]) as second:
        execution = await ended(second, eid)
    assert execution.status is Status.SUCCESS
    assert user_service.methods_for(eid).count("POST") == 1


async def test_a_takeover_that_commits_late_counts_its_claim_from_the_write_not_from_the_round(
    tmp_path: Path, user_service: UserService
) -> None:
    """The scheduler's round begins at T0, and its takeover of a dead node's fire time
    claimed ahead reaches the database 10 s later (the database was away and the transaction
    was retried meanwhile). The claim it writes runs from the write (T0 + 10 s + the
    grace), not from the round's start: a claim counted from T0 would have run out already,
    and the fire time would be taken over again (by this node or another) while it starts.
    An active execution taken over leans on the node's lease instead (no claim of its
    own)."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    spec = task("job", f"{user_service.url}/jobs/x", task_timeout="1h")
    async with rig(database_url, [spec], t0) as r:
        orphaned = triggered_by_a_dead_node(new_eid())
        claimed = orphaned.evolve(
            eid=new_eid(),
            status=Status.SCHEDULED,
            scheduled_at=t0 - timedelta(minutes=1),
            triggered_at=None,
            deadline=None,
            lease_until=t0 - timedelta(minutes=1),
        )
        gone = orphaned.evolve(status=Status.RUNNING, lease_until=t0 - timedelta(minutes=1))
        for row in (gone, claimed):
            await r.store.create_execution(row)
        written_at = r.clock.set(t0 + timedelta(seconds=10))
        taken = await r.parts.leases.take_over(t0, lambda _task: True)
        stored = await r.store.get_execution(claimed.eid)
    by_eid = {a.execution.eid: a.execution for a in taken}
    assert sorted(by_eid) == sorted([orphaned.eid, claimed.eid])
    assert by_eid[claimed.eid].lease_until == written_at + CLAIM_GRACE
    assert stored is not None and stored.lease_until == written_at + CLAIM_GRACE
    assert by_eid[orphaned.eid].lease_until is None


async def test_a_stop_on_a_lease_this_node_let_lapse_and_took_again_holds_up_nothing(
    database_url: str, user_service: UserService
) -> None:
    """The database was away: the node's leases lapsed unrenewed (it let go of its RUNNING
    execution, fence 1) while the execution's timeout cancel was under way on that lease; it
    took the execution again (fence 2) once the database was back. The old lease's stop finds
    its write refused by the fence: it lets go of fence 1 only, not of the execution held on
    fence 2, and does not hold up fence 2's own timeout cancel, which is sent once and ends
    the execution TIMED_OUT (seen on PostgreSQL stopped for 6 s: the execution stayed
    RUNNING, held, past its deadline, with no cancel, forever)."""
    user_service.duration = 3600
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    spec = task("job", f"{user_service.url}/jobs/x", task_timeout="10s", poll_interval="1h")
    async with rig(database_url, [spec], t0) as r:
        execution, _ = await r.commands.run_now("job")
        await r.start_due(t0)
        old = r.parts.held.get(execution.eid)
        assert old is not None and old.status is Status.RUNNING and old.fence == 1
        assert r.parts.held.forget(old.eid) is not None  # lapsed unrenewed
        r.clock.set(t0 + timedelta(seconds=11))  # past the deadline
        (taken,) = await r.parts.leases.force_claim([old.eid], r.clock.now())
        assert taken.fence == 2
        old_stop = asyncio.create_task(r.engine.stop(old, Status.TIMED_OUT, "timeout"))
        r.engine.adopt(taken)
        assert await old_stop is None  # its write was refused: nothing followed from it
        ended = await wait_for(lambda: r.status_is(old.eid, Status.TIMED_OUT), timeout=10)
        held = r.parts.held.get(old.eid)
    assert ended
    assert held is None  # ended, booked, let go
    assert user_service.methods_for(old.eid).count("DELETE") == 1

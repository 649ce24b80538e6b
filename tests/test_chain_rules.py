"""The rules of chains, driven by an injected clock on a real store and service: a chained
run obeys its own pause, calendar, concurrency and retries; one upstream fire time makes
one chained run whatever ends are reported twice, retried or resumed; a fan-in waits for
every upstream; the patrol starts a chained run whose start a dead node lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ecron.core import Execution, Reason, Status, TriggerKind
from ecron.ids import new_eid
from tests.protocol_support import reply
from tests.support.daemon import task
from tests.support.rig import Rig, rig
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # a Monday
SECOND = timedelta(seconds=1)


async def ended_upstream(
    r: Rig, name: str, status: Status = Status.SUCCESS, at: datetime = T0, **changes: Any
) -> Execution:
    """An execution of ``name`` for fire time ``at`` stored as already ended with ``status``
    one second later (what a node records before its book-keeping runs)."""
    execution = Execution(
        eid=new_eid(),
        task=name,
        scheduled_at=at,
        created_at=at,
        status=status,
        reason=Reason.REMOTE_FAILED if status is Status.FAILED else None,
        triggered_at=at,
        finished_at=at + SECOND,
        **changes,
    )
    stored = await r.store.create_execution(execution)
    assert stored is not None
    return stored


async def test_chained_runs_obey_their_own_pause_calendar_and_concurrency(
    database_url: str, user_service: UserService
) -> None:
    """One upstream success sets off four chained tasks: the paused one records its run
    SKIPPED paused, the one whose calendar leaves out Mondays gets no row at all (counted as
    excluded), the forbid one already running records SKIPPED overlap, and the free one runs
    with the upstream's fire time."""
    user_service.duration = 3600
    url = f"{user_service.url}/jobs/x"
    after = {"schedule": {"after_task": "up"}}
    specs = [
        task("up", url),
        task("paused", url, **after),
        task("weekend", url, calendar={"weekdays": ["sat", "sun"]}, **after),
        task("busy", url, **after),
        task("free", url, **after),
    ]
    async with rig(database_url, specs, T0) as r:
        await r.commands.pause("paused", "maintenance")
        r.clock.set(T0 + SECOND / 2)  # not at the upstream's fire time: that key is the chain's
        busy, _ = await r.commands.run_now("busy")
        await wait_for(lambda: r.status_is(busy.eid, Status.RUNNING))
        up = await ended_upstream(r, "up")
        r.engine.hold(await r.parts.bookkeeping.chain(up))
        await r.start_due(T0 + SECOND)
        await wait_for(lambda: r.any_status("free", Status.RUNNING))
        found = {name: await r.executions(name) for name in ("paused", "weekend", "busy", "free")}
        excluded = r.parts.metrics.fires_excluded._counts
    [paused] = found["paused"]
    assert (paused.status, paused.reason, paused.upstream) == (
        Status.SKIPPED,
        Reason.PAUSED,
        up.eid,
    )
    assert found["weekend"] == []
    assert excluded[("weekend", "calendar")][0] == 1
    overlap = [e for e in found["busy"] if e.trigger_kind is TriggerKind.CHAIN]
    assert [(e.status, e.reason) for e in overlap] == [(Status.SKIPPED, Reason.OVERLAP)]
    [free] = found["free"]
    assert (free.trigger_kind, free.scheduled_at, free.upstream) == (TriggerKind.CHAIN, T0, up.eid)


async def test_one_upstream_fire_time_makes_one_chained_run_and_its_retry_keeps_the_upstream(
    database_url: str, user_service: UserService
) -> None:
    """The end of a fire time reported twice (two nodes' book-keeping) makes one chained
    run; it fails, and its retry is the same fire time with the same upstream, sent in its
    header too; a later resume of the upstream that succeeds sets off nothing more."""
    user_service.script["POST"] = [reply(200, {"status": "FAILED"})]
    user_service.duration = 0  # the trigger's answer ends it: no poll (the clock stands still)
    url = f"{user_service.url}/jobs/x"
    retry = {"max_attempts": 1, "backoff": "10s"}
    specs = [
        task("up", url),
        task("down", url, schedule={"after_task": "up", "on": ["SUCCESS"]}, retry=retry),
    ]
    async with rig(database_url, specs, T0) as r:
        up = await ended_upstream(r, "up")
        r.engine.hold(await r.parts.bookkeeping.chain(up))
        r.engine.hold(await r.parts.bookkeeping.chain(up))
        await r.start_due(T0 + SECOND)
        await wait_for(lambda: r.count_is("down", 2))
        await r.start_due(T0 + 12 * SECOND)
        runs = await r.settled("down", 2)
        resumed = await ended_upstream(
            r, "up", resume_of=up.eid, resume_attempt=1, trigger_kind=TriggerKind.RESUME
        )
        r.engine.hold(await r.parts.bookkeeping.chain(resumed))
        after_resume = await r.executions("down")
    first, second = runs
    assert (first.trigger_kind, first.status, first.upstream) == (
        TriggerKind.CHAIN,
        Status.FAILED,
        up.eid,
    )
    assert (second.trigger_kind, second.attempt, second.scheduled_at, second.upstream) == (
        TriggerKind.RETRY,
        2,
        T0,
        up.eid,
    )
    assert second.status is Status.SUCCESS
    headers = [
        c.headers["X-Ecron-Upstream-Execution-Id"] for c in user_service.calls_for(second.eid)
    ]
    assert headers and set(headers) == {up.eid}
    assert [e.eid for e in after_resume] == [first.eid, second.eid]


async def test_a_fan_in_waits_for_every_upstream_and_a_failed_one_holds_it_back(
    database_url: str, user_service: UserService
) -> None:
    """``join`` after ``[a, b]``: a's end alone starts nothing; b's FAILED end neither; once
    b's resume succeeds for the same fire time, join runs, set off by it."""
    user_service.duration = 3600
    url = f"{user_service.url}/jobs/x"
    specs = [task("a", url), task("b", url), task("join", url, schedule={"after_task": ["a", "b"]})]
    async with rig(database_url, specs, T0) as r:
        r.engine.hold(await r.parts.bookkeeping.chain(await ended_upstream(r, "a")))
        nothing_yet = await r.executions("join")
        failed = await ended_upstream(r, "b", Status.FAILED)
        r.engine.hold(await r.parts.bookkeeping.chain(failed))
        still_nothing = await r.executions("join")
        resumed = await ended_upstream(
            r, "b", resume_of=failed.eid, resume_attempt=1, trigger_kind=TriggerKind.RESUME
        )
        r.engine.hold(await r.parts.bookkeeping.chain(resumed))
        await r.start_due(T0)  # what was held is started (and nothing is left to drain)
        joined = await r.executions("join")
    assert nothing_yet == [] and still_nothing == []
    assert [(e.scheduled_at, e.upstream) for e in joined] == [(T0, resumed.eid)]


async def test_the_patrol_starts_a_chained_run_whose_start_a_dead_node_lost_and_only_once(
    database_url: str, user_service: UserService
) -> None:
    """An upstream success recorded by a node that died before its book-keeping: the next
    patrol round (past the settle time) starts the chained run; the round after starts
    nothing more. An end older than the chained task's definition is left alone."""
    user_service.duration = 3600
    url = f"{user_service.url}/jobs/x"
    specs = [task("up", url), task("down", url, schedule={"after_task": "up"})]
    async with rig(database_url, specs, T0) as r:
        before = await ended_upstream(r, "up", at=T0 - timedelta(hours=1))
        lost = await ended_upstream(r, "up", at=T0 + SECOND)
        r.clock.set(T0 + 30 * SECOND)
        first_round = await r.patrol.run_once()
        second_round = await r.patrol.run_once()
        await r.start_due(T0 + 30 * SECOND)  # the run the first round set off is started
        runs = await r.executions("down")
    assert first_round is not None and first_round["chains"] == 1
    assert second_round is not None and second_round["chains"] == 0
    assert [(e.upstream, e.scheduled_at, e.trigger_kind) for e in runs] == [
        (lost.eid, lost.scheduled_at, TriggerKind.CHAIN)
    ]
    assert before.eid not in {e.upstream for e in runs}

"""DESIGN.md, "Scheduling rules": misfire, concurrency, retries, fixed delay and pause, each
driven by an injected clock (no test waits for a fire time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import pytest

from ecron.config.model import TaskSpec
from ecron.core import Execution, FirePlan, Reason, Status, TriggerKind
from ecron.planning import (
    MAX_FIRES_PER_CLAIM,
    MISFIRE_RECORDS,
    Claim,
    outcome_of,
    plan_fires,
    plan_retry,
    retry_delay,
)
from tests.protocol_support import reply
from tests.support.daemon import task
from tests.support.rig import rig
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def plan_of(spec: TaskSpec, next_fire_at: datetime, claim: Claim) -> FirePlan:
    return plan_fires(spec.name, spec, next_fire_at, claim)


def claim_at(now: datetime, horizon: datetime | None = None) -> Claim:
    ids = count()
    return Claim("n1", now, horizon or now, new_id=lambda _now: f"e{next(ids):05}")


def times(executions: list[Execution], status: Status) -> list[datetime]:
    return [e.scheduled_at for e in executions if e.status is status]


# -- misfire (pure) ----------------------------------------------------------------------------


def test_run_once_runs_the_latest_missed_fire_time_and_records_the_ones_before_it_skipped() -> None:
    """Down for three days under an hourly task: one run (the latest missed hour), SKIPPED
    misfire records for the 20 hours before it, and the schedule goes on from the next hour."""
    spec = task("a", "http://h/x", schedule="0 * * * *")
    now = T0 + timedelta(days=3, minutes=30)
    plan = plan_of(spec, T0, claim_at(now))
    assert times(list(plan.executions), Status.SCHEDULED) == [T0 + timedelta(days=3)]
    skipped = times(list(plan.executions), Status.SKIPPED)
    assert len(skipped) == MISFIRE_RECORDS
    assert skipped[-1] == T0 + timedelta(days=3) - HOUR
    assert all(e.reason is Reason.MISFIRE for e in plan.executions if e.status is Status.SKIPPED)
    assert plan.next_fire_at == T0 + timedelta(days=3) + HOUR


def test_skip_runs_no_missed_fire_time_but_still_runs_the_ones_on_time() -> None:
    """policy skip: late ones are SKIPPED; one within the grace still runs."""
    spec = task(
        "a", "http://h/x", schedule={"every": "10m"}, misfire={"policy": "skip", "grace": "5m"}
    )
    now = T0 + timedelta(minutes=33)
    plan = plan_of(spec, T0, claim_at(now))
    assert times(list(plan.executions), Status.SKIPPED) == [
        T0,
        T0 + timedelta(minutes=10),
        T0 + timedelta(minutes=20),
    ]
    assert times(list(plan.executions), Status.SCHEDULED) == [T0 + timedelta(minutes=30)]
    assert plan.next_fire_at == T0 + timedelta(minutes=40)


def test_run_all_runs_every_missed_fire_time_in_steps() -> None:
    """policy run_all: 250 missed minutes run oldest first, 100 per claim."""
    spec = task("a", "http://h/x", schedule={"every": "1m"}, misfire={"policy": "run_all"})
    now = T0 + timedelta(minutes=250)
    plan = plan_of(spec, T0, claim_at(now))
    run = times(list(plan.executions), Status.SCHEDULED)
    assert len(run) == MAX_FIRES_PER_CLAIM and run[0] == T0
    assert plan.next_fire_at == T0 + timedelta(minutes=MAX_FIRES_PER_CLAIM)


def test_a_fire_time_late_by_less_than_the_grace_is_not_a_misfire() -> None:
    """Four minutes late with a five-minute grace: it simply runs."""
    spec = task(
        "a", "http://h/x", schedule={"every": "1h"}, misfire={"policy": "skip", "grace": "5m"}
    )
    plan = plan_of(spec, T0, claim_at(T0 + timedelta(minutes=4)))
    assert times(list(plan.executions), Status.SCHEDULED) == [T0]


def test_a_month_long_outage_of_a_per_second_task_plans_a_bounded_number_of_rows() -> None:
    """2.6 million missed seconds: the latest misfired one runs, 20 get SKIPPED records, and
    of the 300 fire times still within the 5-minute grace the first 100 run in this claim."""
    spec = task("a", "http://h/x", schedule={"every": "1s"})
    now = T0 + timedelta(days=30)
    plan = plan_of(spec, T0, claim_at(now))
    run = times(list(plan.executions), Status.SCHEDULED)
    assert len(times(list(plan.executions), Status.SKIPPED)) == MISFIRE_RECORDS
    assert run[0] == now - timedelta(minutes=5, seconds=1)  # the latest misfired second
    assert run[1] == now - timedelta(minutes=5)  # the first one within the grace
    assert len(run) == 1 + MAX_FIRES_PER_CLAIM
    assert plan.next_fire_at == run[-1] + timedelta(seconds=1)


def test_claims_look_ahead_by_the_prefetch_window() -> None:
    """With a 2 s horizon, the fire times of the next two seconds are claimed too."""
    spec = task("a", "http://h/x", schedule={"every": "1s"})
    plan = plan_of(spec, T0, claim_at(T0, horizon=T0 + timedelta(seconds=2)))
    assert times(list(plan.executions), Status.SCHEDULED) == [
        T0,
        T0 + timedelta(seconds=1),
        T0 + timedelta(seconds=2),
    ]
    assert plan.next_fire_at == T0 + timedelta(seconds=3)


def test_an_after_task_waits_for_its_execution_to_end_before_it_has_a_next_fire_time() -> None:
    """Fixed delay: running one leaves next_fire_at empty; skipping one restarts from now."""
    spec = task("a", "http://h/x", schedule={"after": "10m"})
    plan = plan_of(spec, T0, claim_at(T0))
    assert times(list(plan.executions), Status.SCHEDULED) == [T0] and plan.next_fire_at is None
    skip = task("b", "http://h/x", schedule={"after": "10m"}, misfire={"policy": "skip"})
    late = T0 + HOUR
    plan = plan_of(skip, T0, claim_at(late))
    assert times(list(plan.executions), Status.SKIPPED) == [T0]
    assert plan.next_fire_at == late + timedelta(minutes=10)


# -- retries and failures in a row (pure) ------------------------------------------------------


def failed(attempt: int = 1, status: Status = Status.FAILED, **changes: Any) -> Execution:
    return Execution(
        eid="e",
        task="a",
        scheduled_at=T0,
        created_at=T0,
        status=status,
        attempt=attempt,
        reason=Reason.REMOTE_FAILED if status is Status.FAILED else None,
        finished_at=T0,
        **changes,
    )


def test_a_failed_execution_is_retried_with_the_next_attempt_and_the_same_fire_time() -> None:
    """Retry: attempt + 1, scheduled_at kept, trigger_kind retry, after the backoff."""
    spec = task("a", "http://h/x", retry={"max_attempts": 2, "backoff": "30s", "max_backoff": "1m"})
    retry = plan_retry(failed(), spec, claim_at(T0), None)
    assert retry is not None
    assert (retry.attempt, retry.scheduled_at, retry.trigger_kind) == (2, T0, TriggerKind.RETRY)
    assert retry.not_before == T0 + timedelta(seconds=30)
    second = plan_retry(failed(attempt=2), spec, claim_at(T0), None)
    assert second is not None and second.not_before == T0 + timedelta(minutes=1)
    assert plan_retry(failed(attempt=3), spec, claim_at(T0), None) is None


def test_backoff_doubles_up_to_its_maximum_without_overflowing() -> None:
    """30s, 1m, 2m, 4m, then max_backoff; attempt 100 does not overflow."""
    spec = task(
        "a", "http://h/x", retry={"max_attempts": 100, "backoff": "30s", "max_backoff": "5m"}
    )
    assert [retry_delay(spec, n).total_seconds() for n in (1, 2, 3, 4, 5, 100)] == [
        30,
        60,
        120,
        240,
        300,
        300,
    ]


@pytest.mark.parametrize(
    "status", [Status.TIMED_OUT, Status.CANCELLED, Status.SUCCESS, Status.SKIPPED]
)
def test_only_failed_executions_are_retried(status: Status) -> None:
    """TIMED_OUT and CANCELLED are not retried (nor, of course, SUCCESS or SKIPPED)."""
    spec = task("a", "http://h/x", retry={"max_attempts": 5})
    assert plan_retry(failed(status=status), spec, claim_at(T0), None) is None


def test_a_retry_that_would_run_into_the_next_fire_time_is_superseded_by_it() -> None:
    """The cap on rows: a retry never starts at or after the task's next fire time."""
    spec = task("a", "http://h/x", retry={"max_attempts": 5, "backoff": "10m"})
    assert plan_retry(failed(), spec, claim_at(T0), T0 + timedelta(minutes=5)) is None
    assert plan_retry(failed(), spec, claim_at(T0), T0 + timedelta(minutes=11)) is not None


def test_what_counts_as_a_final_failure_in_a_row() -> None:
    """SUCCESS resets; FAILED without a retry and TIMED_OUT count; a retried failure and a
    person's cancel do not."""
    assert outcome_of(failed(status=Status.SUCCESS), retried=False) is True
    assert outcome_of(failed(), retried=False) is False
    assert outcome_of(failed(status=Status.TIMED_OUT), retried=False) is False
    assert outcome_of(failed(), retried=True) is None
    assert outcome_of(failed(status=Status.CANCELLED), retried=False) is None


# -- the rules at work: a real store, a real service, an injected clock ---------------------


async def test_forbid_records_a_fire_time_skipped_overlap_while_the_previous_one_runs(
    database_url: str, user_service: UserService
) -> None:
    """The 12:00 execution is still RUNNING at 12:01: the 12:01 fire time is SKIPPED overlap,
    and the service saw one trigger."""
    user_service.duration = 3600
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"every": "1m"})
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await r.tick(T0 + timedelta(minutes=1))
        first, second = await r.executions("a")
    assert first.status in (Status.PENDING, Status.RUNNING)
    assert (second.status, second.reason) == (Status.SKIPPED, Reason.OVERLAP)
    assert first.eid in (second.message or "")
    assert len(user_service.calls_for(first.eid, "POST")) == 1
    assert user_service.calls_for(second.eid) == []


async def test_a_retry_waiting_out_its_backoff_is_claimed_not_active(
    database_url: str, user_service: UserService
) -> None:
    """A retry waiting out its backoff is SCHEDULED: not active. A manual run of the forbid
    task meanwhile starts; at its time the retry finds that run still going and is SKIPPED
    overlap."""
    user_service.script["POST"] = [reply(200, {"status": "FAILED"})]
    user_service.duration = 3600
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        retry={"max_attempts": 1, "backoff": "10m"},
    )
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await wait_for(lambda: r.count_is("a", 2))
        r.clock.set(T0 + timedelta(minutes=5))
        manual, created = await r.commands.run_now("a")
        await wait_for(lambda: r.status_is(manual.eid, Status.RUNNING))
        waiting = [e for e in await r.executions("a") if e.attempt == 2]
        await r.start_due(T0 + timedelta(minutes=10))
        found = {e.eid: e for e in await r.executions("a")}
    assert created and manual.trigger_kind is TriggerKind.MANUAL
    assert [e.status for e in waiting] == [Status.SCHEDULED]
    retry = found[waiting[0].eid]
    assert (retry.status, retry.reason) == (Status.SKIPPED, Reason.OVERLAP)
    assert manual.eid in (retry.message or "")


async def test_allow_starts_a_second_execution_while_the_first_runs(
    database_url: str, user_service: UserService
) -> None:
    """concurrency: allow: both fire times are triggered."""
    user_service.duration = 3600
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"every": "1m"}, concurrency="allow")
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await r.tick(T0 + timedelta(minutes=1))
        eids = [e.eid for e in await r.executions("a")]
        await wait_for(lambda: all(user_service.calls_for(eid, "POST") for eid in eids))
    assert len(eids) == 2


async def test_replace_cancels_the_running_execution_through_the_protocol_then_starts_the_new(
    database_url: str, user_service: UserService
) -> None:
    """concurrency: replace: the old one gets its DELETE and ends CANCELLED before the new
    one's trigger is sent."""
    user_service.duration = 3600
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"every": "1m"}, concurrency="replace")
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        [old] = await r.executions("a")
        await wait_for(lambda: user_service.calls_for(old.eid, "POST"))
        await wait_for(lambda: r.status_is(old.eid, Status.RUNNING))
        await r.tick(T0 + timedelta(minutes=1))
        _, new = await r.executions("a")
        await wait_for(lambda: user_service.calls_for(new.eid, "POST"))
        old_now = await r.store.get_execution(old.eid)
    assert old_now is not None
    assert old_now.status is Status.CANCELLED and "replaced by" in (old_now.message or "")
    delete = user_service.calls_for(old.eid, "DELETE")
    post = user_service.calls_for(new.eid, "POST")
    assert len(delete) == 1 and delete[0].at < post[0].at


async def test_a_failed_execution_is_retried_after_its_backoff_and_not_before(
    database_url: str, user_service: UserService
) -> None:
    """FAILED at 12:00 with backoff 30s: nothing at 12:00:29, attempt 2 (X-Ecron-Attempt: 2,
    same fire time) at 12:00:30; when it fails too, max_attempts 1 stops the retries."""
    user_service.script["POST"] = [
        reply(200, {"status": "FAILED"}),
        reply(200, {"status": "FAILED"}),
    ]
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        retry={"max_attempts": 1, "backoff": "30s"},
    )
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await wait_for(lambda: r.count_is("a", 2))
        await r.tick(T0 + timedelta(seconds=29))
        _, retry = await r.executions("a")
        assert retry.status is Status.SCHEDULED and user_service.calls_for(retry.eid) == []
        await r.tick(T0 + timedelta(seconds=30))
        found = await r.settled("a", 2)
    assert [(e.attempt, e.trigger_kind, e.status) for e in found] == [
        (1, TriggerKind.SCHEDULE, Status.FAILED),
        (2, TriggerKind.RETRY, Status.FAILED),
    ]
    assert found[1].scheduled_at == found[0].scheduled_at == T0
    assert user_service.calls_for(found[1].eid, "POST")[0].headers["X-Ecron-Attempt"] == "2"


async def test_an_after_task_fires_its_delay_after_the_previous_execution_ended(
    database_url: str, user_service: UserService
) -> None:
    """{after: 10m}: the execution started at 12:00 ends at 12:03; the next fire time is
    12:13, and nothing fires before it."""
    user_service.script["POST"] = [reply(200, {"status": "RUNNING"})]
    user_service.script["GET"] = [reply(200, {"status": "SUCCESS"})]
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"after": "10m"}, poll_interval="3m")
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await wait_for(lambda: r.any_status("a", Status.RUNNING))
        r.clock.set(T0 + timedelta(minutes=3))
        r.engine.wake()
        [done] = await r.settled("a", 1)
        stored = await r.store.get_task("a")
        await r.tick(T0 + timedelta(minutes=12))
        assert len(await r.executions("a")) == 1
        await r.tick(T0 + timedelta(minutes=13))
        found = await r.executions("a")
    assert done.finished_at == T0 + timedelta(minutes=3)
    assert stored is not None and stored.next_fire_at == T0 + timedelta(minutes=13)
    assert [e.scheduled_at for e in found] == [T0, T0 + timedelta(minutes=13)]


async def test_pause_after_failures_pauses_after_n_final_failures_in_a_row_and_success_resets(
    database_url: str, user_service: UserService
) -> None:
    """pause_after_failures 2: FAILED, SUCCESS (resets the count), FAILED, FAILED -> paused,
    with a reason naming the last one; nothing fires while paused; unpausing restarts the
    schedule from now (no replay) and zeroes the count."""
    answers = ["FAILED", "SUCCESS", "FAILED", "FAILED"]
    user_service.script["POST"] = [reply(200, {"status": s}) for s in answers]
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"every": "1h"}, pause_after_failures=2)
    async with rig(database_url, [spec], T0) as r:
        for n in range(4):
            await r.tick(T0 + n * HOUR)
            await r.settled("a", n + 1)
            task_state = await r.store.get_task("a")
            assert task_state is not None
            assert task_state.paused is (n == 3), n
        paused = await r.store.get_task("a")
        await r.tick(T0 + 4 * HOUR)
        assert len(await r.executions("a")) == 4  # nothing fires while paused
        later = T0 + 6 * HOUR + timedelta(minutes=20)
        r.clock.set(later)
        unpaused = await r.commands.unpause("a")
        last = (await r.executions("a"))[-1]
    assert paused is not None and paused.consecutive_failures == 2
    assert paused.paused_reason is not None and last.eid in paused.paused_reason
    assert "2 final failures in a row" in paused.paused_reason
    assert not unpaused.paused and unpaused.consecutive_failures == 0
    assert unpaused.next_fire_at == T0 + 7 * HOUR  # from now, not the missed ones


async def test_a_claimed_fire_time_of_a_task_paused_before_it_starts_is_skipped_paused(
    database_url: str, user_service: UserService
) -> None:
    """Claimed ahead of time, then the task is paused: at its start it is SKIPPED paused,
    with the pause reason, and nothing is sent."""
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"every": "1h"})
    ahead = T0 - timedelta(seconds=1)
    async with rig(database_url, [spec], ahead, prefetch=timedelta(seconds=2)) as r:
        await r.scheduler.claim_fires(ahead)
        [claimed] = await r.executions("a")
        await r.commands.pause("a", "maintenance window")
        await r.start_due(T0)
        [execution] = await r.executions("a")
    assert claimed.status is Status.SCHEDULED and claimed.scheduled_at == T0
    assert (execution.status, execution.reason) == (Status.SKIPPED, Reason.PAUSED)
    assert execution.message == "maintenance window"
    assert user_service.calls == []


@pytest.mark.parametrize(("policy", "started"), [("skip", False), ("run_once", True)])
async def test_a_claimed_fire_time_that_starts_later_than_the_grace_follows_the_misfire_policy(
    database_url: str, user_service: UserService, policy: str, started: bool
) -> None:
    """A fire time claimed ahead but started 2 minutes late (a node stopped and handed it
    back, another adopted it): under skip it is SKIPPED misfire; under run_once it runs,
    as the latest missed one."""
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        misfire={"policy": policy, "grace": "1m"},
    )
    async with rig(database_url, [spec], T0) as r:
        await r.scheduler.claim_fires(T0)
        r.clock.set(T0 + timedelta(minutes=2))
        await r.start_due(r.clock.now())
        [execution] = await r.executions("a")
        if started:
            await wait_for(lambda: user_service.calls_for(execution.eid, "POST"))
    if started:
        assert execution.status is not Status.SKIPPED
    else:
        assert (execution.status, execution.reason) == (Status.SKIPPED, Reason.MISFIRE)
        assert user_service.calls == []


async def test_an_execution_of_a_task_this_node_does_not_know_is_handed_back_not_crashed_on(
    database_url: str, user_service: UserService
) -> None:
    """An execution whose task is in no config this node loaded: its lease is released for a
    node that knows it, and the node keeps driving its other executions."""
    user_service.script["POST"] = [reply(200, {"status": "RUNNING"})]
    user_service.script["GET"] = [reply(200, {"status": "SUCCESS"})]
    known = task("known", f"{user_service.url}/jobs/x")
    async with rig(database_url, [known], T0) as r:
        stranger = Execution(
            eid="stranger",
            task="gone",
            scheduled_at=T0,
            created_at=T0,
            status=Status.RUNNING,
            triggered_at=T0,
            owner="n1",
            lease_until=T0 + HOUR,
            fence=1,
        )
        assert await r.store.create_execution(stranger) is not None
        r.engine.adopt(stranger)
        await wait_for(lambda: "stranger" not in r.parts.held)

        async def handed_back() -> Execution | None:  # the release written, not only decided
            row = await r.store.get_execution("stranger")
            return row if row is not None and row.owner is None else None

        released = await wait_for(handed_back)
        await r.commands.run_now("known")
        await wait_for(lambda: r.any_status("known", Status.RUNNING))
        r.clock.advance(timedelta(seconds=1))  # the poll (through the same workers) is due
        r.engine.wake()
        [done] = await r.settled("known", 1)
    assert released is not None and released.owner is None
    assert done.status is Status.SUCCESS

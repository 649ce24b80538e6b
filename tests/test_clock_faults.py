"""The wall clock stepping back an hour or forward a day (docs/operations.md, "When the clock
jumps"), on SQLite and PostgreSQL: no fire time runs twice, schedules go on from the new
time, a forward jump follows the misfire policy, and deadlines and leases (wall-clock times,
compared in the database) behave as documented. Every clock here is a test's clock."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from ecron.config.model import TaskSpec
from ecron.core import Reason, Status
from ecron.planning import MISFIRE_RECORDS, rewound_fire_time
from ecron.scheduler import STEP_BACK
from tests.support.daemon import task
from tests.support.rig import Rig, rig
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
MS = timedelta(milliseconds=1)


def every(service: UserService, interval: str, policy: str, grace: str) -> TaskSpec:
    """Task ``a``: every ``interval``, instant jobs on ``service``, runs allowed side by side,
    and the misfire ``policy`` with its ``grace``."""
    service.duration = 0
    return task(
        "a",
        f"{service.url}/jobs/x",
        schedule={"every": interval},
        concurrency="allow",
        misfire={"policy": policy, "grace": grace},
    )


def posts_by_fire_time(service: UserService) -> Counter[str]:
    """How many triggers the service received for each fire time (X-Ecron-Scheduled-At)."""
    return Counter(c.headers["X-Ecron-Scheduled-At"] for c in service.calls if c.method == "POST")


async def fire_times(r: Rig, task_name: str) -> Counter[datetime]:
    """How many executions each fire time of the task has (attempt 1)."""
    return Counter(e.scheduled_at for e in await r.executions(task_name) if e.attempt == 1)


async def running(r: Rig, service: UserService) -> str:
    """Start task ``a`` now (a long job) and wait until it is RUNNING; its eid."""
    execution, _ = await r.commands.run_now("a")
    await wait_for(lambda: r.status_is(execution.eid, Status.RUNNING))
    return execution.eid


# -- the clock steps back ---------------------------------------------------------------------


async def test_after_the_clock_steps_back_an_hour_no_fire_time_runs_twice_and_the_schedule_goes_on(
    database_url: str, user_service: UserService
) -> None:
    """A task every minute ran 12:00 to 12:05; the clock steps back to 11:05. The schedule
    goes on from 11:05 (it does not stand still for the hour), and when the clock reaches
    12:00 again, the fire times 12:00 to 12:05, which ran before the step, are not run a
    second time: each fire time has one execution and reached the service once."""
    spec = every(user_service, "1m", "run_all", "2h")
    async with rig(database_url, [spec], T0) as r:
        for n in range(6):
            await r.tick(T0 + n * MINUTE)
        await r.settled("a", 6)
        back = T0 + 5 * MINUTE - HOUR
        with capture_logs() as logs:
            for n in range(3):
                await r.tick(back + n * MINUTE)
        after_step = await r.settled("a", 9)
        await r.tick(T0 + 6 * MINUTE)  # caught up: 11:08 to 12:06 are due, 12:00-12:05 ran
        found = await r.settled("a", 62)
        counts = await fire_times(r, "a")
    assert [e.scheduled_at for e in after_step[6:]] == [back, back + MINUTE, back + 2 * MINUTE]
    [stepped] = [line for line in logs if line["event"] == "clock_stepped_back"]  # once
    assert stepped["step_seconds"] == HOUR.total_seconds() and stepped["tasks_rewound"] == 1
    assert set(counts.values()) == {1}
    assert len(counts) == 62 and max(counts) == T0 + 6 * MINUTE
    assert all(e.status is Status.SUCCESS for e in found)
    assert set(posts_by_fire_time(user_service).values()) == {1}
    assert len(user_service.calls) == 62


async def test_a_fixed_delay_task_keeps_firing_when_the_clock_steps_back_onto_its_fire_times(
    database_url: str, user_service: UserService
) -> None:
    """{after: 10m} ran at 12:00 and 12:10; the clock steps back to 11:50. Its next fire time
    comes back to 12:00 (10 minutes from now, not 12:20), which an execution already has:
    that one is not run again, and the fire time moves on by a millisecond instead of the
    task waiting forever for an end that will never come."""
    user_service.duration = 0
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"after": "10m"})
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await r.settled("a", 1)
        await r.tick(T0 + 10 * MINUTE)
        await r.settled("a", 2)
        await r.tick(T0 - 10 * MINUTE)  # the step: nothing is due yet, the schedule rewinds
        rewound = await r.store.get_task("a")
        await r.tick(T0)  # 12:00 is taken by the first execution
        moved = await r.store.get_task("a")
        await r.tick(T0 + MS)
        found = await r.settled("a", 3)
    assert rewound is not None and rewound.next_fire_at == T0
    assert moved is not None and moved.next_fire_at == T0 + MS
    assert [e.scheduled_at for e in found] == [T0, T0 + 10 * MINUTE, T0 + MS]
    assert set(posts_by_fire_time(user_service).values()) == {1}


async def test_a_clock_correction_smaller_than_a_second_changes_no_fire_time(
    database_url: str, user_service: UserService
) -> None:
    """The clock steps back by less than STEP_BACK (a small NTP correction): the next fire
    time stays where it is and nothing runs twice."""
    user_service.duration = 0
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"every": "1s"})
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await r.settled("a", 1)
        await r.tick(T0 + timedelta(seconds=1))
        await r.settled("a", 2)
        await r.tick(T0 + timedelta(seconds=1) - STEP_BACK / 2)
        stored = await r.store.get_task("a")
        await r.tick(T0 + timedelta(seconds=2))
        found = await r.settled("a", 3)
    assert stored is not None and stored.next_fire_at == T0 + timedelta(seconds=2)
    assert [e.scheduled_at for e in found] == [T0 + n * timedelta(seconds=1) for n in range(3)]


def test_after_a_step_back_each_kind_of_schedule_comes_back_to_its_first_fire_time_from_now() -> (
    None
):
    """rewound_fire_time: cron and every come back to their first fire time from the new
    time, after to the new time plus its delay; a fire time already earlier, a task that
    never fires again, and a disabled task stay as they are."""
    url = "http://h/x"
    now = T0 - HOUR
    assert rewound_fire_time(task("c", url, schedule="30 * * * *"), T0, now) == now + 30 * MINUTE
    assert rewound_fire_time(task("e", url, schedule={"every": "10m"}), T0, now) == now
    assert (
        rewound_fire_time(task("f", url, schedule={"after": "10m"}), T0, now) == now + 10 * MINUTE
    )
    assert rewound_fire_time(task("e", url, schedule={"every": "10m"}), now, now) is None
    assert rewound_fire_time(task("m", url, schedule="manual"), None, now) is None
    disabled = task("d", url, schedule={"every": "10m"}, enabled=False)
    assert rewound_fire_time(disabled, T0, now) is None


# -- the clock jumps forward ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "runs", "skipped"),
    [("skip", 0, MISFIRE_RECORDS), ("run_once", 1, MISFIRE_RECORDS), ("run_all", 24, 0)],
)
async def test_a_forward_jump_of_a_day_follows_the_misfire_policy_then_fires_on_time(
    database_url: str, user_service: UserService, policy: str, runs: int, skipped: int
) -> None:
    """An hourly task ran at 12:00; the clock jumps a day and half an hour forward. The 24
    missed hours follow misfire.policy (skip: 20 SKIPPED misfire records and no run;
    run_once: the latest missed hour runs and the 20 before it are SKIPPED; run_all: all 24
    run), and the next hour fires on time."""
    spec = every(user_service, "1h", policy, "5m")
    jumped = T0 + DAY + timedelta(minutes=30)
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await r.settled("a", 1)
        await r.tick(jumped)
        late = await r.settled("a", 1 + runs + skipped)
        await r.tick(T0 + DAY + HOUR)
        found = await r.settled("a", 2 + runs + skipped)
    ran = [e.scheduled_at for e in late[1:] if e.status is Status.SUCCESS]
    misfired = [e for e in late[1:] if e.status is Status.SKIPPED]
    assert len(ran) == runs and len(misfired) == skipped
    assert all(e.reason is Reason.MISFIRE for e in misfired)
    if policy == "run_once":
        assert ran == [T0 + DAY]  # the latest missed hour
    if policy == "run_all":
        assert ran == [T0 + n * HOUR for n in range(1, 25)]
    assert misfired == sorted(misfired, key=lambda e: e.scheduled_at)
    if misfired:
        assert misfired[-1].scheduled_at == T0 + DAY - (HOUR if policy == "run_once" else 0 * HOUR)
    assert found[-1].scheduled_at == T0 + DAY + HOUR and found[-1].status is Status.SUCCESS
    assert set(posts_by_fire_time(user_service).values()) == {1}


@pytest.mark.parametrize(
    ("policy", "outcomes"),
    [
        ("skip", ["misfire", "misfire", "misfire"]),
        ("run_once", ["misfire", "misfire", "ran"]),
        ("run_all", ["ran", "ran", "ran"]),
    ],
)
async def test_fire_times_claimed_ahead_of_a_forward_jump_follow_the_misfire_policy_at_start(
    database_url: str, user_service: UserService, policy: str, outcomes: list[str]
) -> None:
    """A task every second claimed 2 s ahead (12:00:00 to 12:00:02), then the clock jumps a
    day before they start: at their start, skip records all three SKIPPED misfire, run_once
    runs only the latest (the two before it have a later one claimed), run_all runs all."""
    spec = every(user_service, "1s", policy, "5s")
    async with rig(database_url, [spec], T0, prefetch=timedelta(seconds=2)) as r:
        await r.scheduler.claim_fires(T0)
        await r.start_due(T0 + DAY)
        found = await r.settled("a", 3)
    seen = ["misfire" if e.reason is Reason.MISFIRE else "ran" for e in found]
    assert seen == outcomes
    assert [e.scheduled_at for e in found] == [T0 + n * timedelta(seconds=1) for n in range(3)]
    assert len(user_service.calls) == outcomes.count("ran")


# -- deadlines and leases ---------------------------------------------------------------------


async def test_a_forward_jump_past_the_deadline_times_the_execution_out_with_one_cancel(
    database_url: str, user_service: UserService
) -> None:
    """A RUNNING execution with a one-hour task_timeout; the clock jumps a day forward. Its
    deadline (a wall-clock time) has passed: at its next poll it gets its one cancel call and
    ends TIMED_OUT; it was triggered once."""
    user_service.duration = 3600
    spec = task("a", f"{user_service.url}/jobs/x", task_timeout="1h")
    async with rig(database_url, [spec], T0) as r:
        eid = await running(r, user_service)
        r.clock.advance(DAY)
        await wait_for(lambda: r.status_is(eid, Status.TIMED_OUT))
        [done] = await r.settled("a", 1)
    assert done.deadline == T0 + HOUR
    assert user_service.methods_for(eid).count("POST") == 1
    assert user_service.methods_for(eid).count("DELETE") == 1


async def test_a_forward_jump_expires_leases_and_the_other_node_adopts_by_polling_not_triggering(
    database_url: str, user_service: UserService
) -> None:
    """Two nodes; n1 runs an execution under a 15 s lease. Both clocks jump a day forward:
    n1's lease looks run out, n2 fences it, takes the execution over and polls it (no second
    trigger), and n1 learns at its next renewal that its lease is gone."""
    user_service.duration = 3600
    spec = task("a", f"{user_service.url}/jobs/x", task_timeout="2d")
    async with (
        rig(database_url, [spec], T0) as n1,
        rig(database_url, [spec], T0, node_id="n2") as n2,
    ):
        eid = await running(n1, user_service)
        jumped = n1.clock.advance(DAY)
        n2.clock.set(jumped)
        await n2.scheduler.take_over(jumped)
        polls = len(user_service.calls_for(eid, "GET"))
        await wait_for(lambda: len(user_service.calls_for(eid, "GET")) > polls)
        kept = await n1.parts.leases.renew()  # at the jumped clock
        adopted = await n2.store.get_execution(eid)
    assert adopted is not None and adopted.owner == "n2" and adopted.fence == 2
    assert adopted.status is Status.RUNNING
    assert kept is False  # n2 fenced n1's lease before it took the execution over
    assert user_service.methods_for(eid).count("POST") == 1


async def test_a_backward_step_delays_the_expiry_of_a_lease_until_its_holder_renews_it(
    database_url: str, user_service: UserService
) -> None:
    """n1 runs an execution under its 15 s node lease written at 12:00; the clock steps back
    an hour. A lease written before the step holds an hour longer: n2 finds nothing to take
    16 s later. Once n1 has renewed it on the new clock and stops (as if dead), n2 adopts
    the execution after one lease TTL, by polling."""
    user_service.duration = 3600
    spec = task("a", f"{user_service.url}/jobs/x", task_timeout="2d")
    async with (
        rig(database_url, [spec], T0) as n1,
        rig(database_url, [spec], T0, node_id="n2") as n2,
    ):
        eid = await running(n1, user_service)
        back = n1.clock.set(T0 - HOUR)
        later = n2.clock.set(back + timedelta(seconds=16))
        await n2.scheduler.take_over(later)
        taken_before_renewal = eid in n2.parts.held
        assert await n1.parts.leases.renew() is True  # at the stepped-back clock
        n1.parts.held.forget(eid)  # n1 stops driving it: only its lease remains
        await n2.scheduler.take_over(later)
        polls = len(user_service.calls_for(eid, "GET"))
        await wait_for(lambda: len(user_service.calls_for(eid, "GET")) > polls)
        adopted = await n2.store.get_execution(eid)
    assert not taken_before_renewal
    assert adopted is not None and adopted.owner == "n2"
    assert user_service.methods_for(eid).count("POST") == 1

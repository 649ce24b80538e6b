"""The executor's mechanism, on its own (no database, no HTTP): the timetable hands a due
plan out once, the newest plan of an eid wins, triggers go before polls, and polls go out
at the pace; the pace itself follows how busy the loop is. Time is the injected clock's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from ecron.clock import Wakeup
from ecron.core.next import Poll, Start, Trigger
from ecron.executor.pace import API_SLOW, BUSY_HIGH, LAG_ALONE, LAG_HIGH, LAG_LOW, PollPace
from ecron.executor.runner import Executor, Job
from ecron.metrics import Metrics
from tests.support.rig import FakeClock

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


async def handed_out(executor: Executor, count: int) -> list[Job]:
    """The next ``count`` jobs the dispatcher hands out (taken as a worker would)."""
    return [await asyncio.wait_for(executor.take(), timeout=5) for _ in range(count)]


async def test_due_triggers_go_before_due_polls_and_polls_go_at_the_pace() -> None:
    """Two workers; three polls due, then a trigger due: the trigger is handed out before
    the polls that were due first, and with the pace at one, a single poll is out at once
    (the next one once it is done)."""
    clock = FakeClock(T0)
    executor = Executor(clock=clock, workers=2, metrics=Metrics(), room_for_claims=Wakeup())
    executor.pace.limit = 1
    for n in range(3):
        executor.plan(f"p{n}", Poll(T0))
    executor.plan("t", Trigger(T0))
    stopping = asyncio.Event()
    dispatcher = asyncio.create_task(executor.dispatch(stopping))
    try:
        first, second = await handed_out(executor, 2)
        assert [first.actions[0][0], second.actions[0][0]] == ["t", "p0"]
        assert executor.backlog_of_polls == 2  # the pace holds the others back
        executor.done(second)
        (third,) = await handed_out(executor, 1)
        assert third.actions[0][0] == "p1"
    finally:
        stopping.set()
        executor.wake()
        await dispatcher


async def test_the_newest_plan_of_an_eid_wins_and_nothing_is_due_before_its_time() -> None:
    """A poll planned at +1 s, then replaced by one at +2 s: at +1 s nothing is handed out;
    at +2 s the one poll is. A start goes to the starts' backlog, not to the workers."""
    clock = FakeClock(T0)
    executor = Executor(clock=clock, workers=2, metrics=Metrics(), room_for_claims=Wakeup())
    executor.plan("e", Poll(T0 + SECOND))
    executor.plan("e", Poll(T0 + 2 * SECOND))
    executor.plan("s", Start(T0 + SECOND))
    stopping = asyncio.Event()
    dispatcher = asyncio.create_task(executor.dispatch(stopping))
    try:
        clock.set(T0 + SECOND)
        assert await asyncio.wait_for(executor.backlog.take(), timeout=5) == ["s"]
        assert executor.idle and executor.planned("e")  # its poll is not due before +2 s
        clock.set(T0 + 2 * SECOND)
        (job,) = await handed_out(executor, 1)
        assert job.actions == (("e", Poll(T0 + 2 * SECOND)),)
        assert not executor.planned("e")
    finally:
        stopping.set()
        executor.wake()
        await dispatcher


def test_while_the_api_is_asked_the_pace_is_cut_on_a_busy_node_and_grows_back_when_idle() -> None:
    """100 workers, the API asked: busy samples cut the pace (never below its floor); quiet
    ones raise it again by a twentieth of the workers, up to all of them. With the API not
    asked, a busy node is not held back (it polls as fast as it can), nor one whose loop is
    a little late (a busy machine's): only a loop later than ``LAG_ALONE`` cuts it then."""
    pace = PollPace(100, Metrics())
    for n in range(60):
        pace.answered(0.01, now=float(n))
        pace.observe(BUSY_HIGH + 0.1, 0.0, now=float(n))
    assert pace.limit == pace.floor == 5
    for n in range(60, 110):
        pace.answered(0.01, now=float(n))
        pace.observe(0.0, LAG_LOW / 2, now=float(n))
    assert pace.limit == 100
    for n in range(200, 260):  # nobody asks: busy all the same, not held back
        pace.observe(1.0, LAG_LOW / 2, now=float(n))
    assert pace.limit == 100
    pace.observe(1.0, LAG_HIGH * 2, now=280.0)  # a little late, nobody asking: kept
    assert pace.limit == 100
    pace.observe(0.0, LAG_ALONE * 2, now=281.0)  # too late for fire times: cut
    assert pace.limit == 90
    pace.observe(1.0, LAG_HIGH / 2, now=282.0)  # nobody asking, on time: grows back
    assert pace.limit == 95
    pace.observe(0.0, LAG_HIGH / 2, now=283.0)
    assert pace.limit == 100
    pace.answered(0.01, now=299.9)  # asked: a loop late by LAG_HIGH cuts
    pace.observe(0.0, LAG_HIGH * 2, now=300.0)
    assert pace.limit == 90
    pace.answered(API_SLOW * 2, now=300.4)  # a slow answer cuts it too
    pace.observe(0.0, 0.0, now=300.5)
    assert pace.limit == 81


async def test_a_node_is_saturated_when_polls_go_out_later_than_their_interval_asks() -> None:
    """Saturated means polls wait for a worker longer than the interval they were planned at,
    whatever that is: a poll planned every 100 ms that has waited 150 ms for a worker makes
    the node saturated; one planned every 10 s that has waited a whole second does not
    (it is late by a tenth of its interval); nothing waiting is never saturated."""
    for interval, waited, saturated in [
        (timedelta(milliseconds=100), timedelta(milliseconds=150), True),
        (timedelta(milliseconds=100), timedelta(milliseconds=50), False),
        (10 * SECOND, SECOND, False),
        (10 * SECOND, 11 * SECOND, True),
    ]:
        clock = FakeClock(T0)
        executor = Executor(clock=clock, workers=2, metrics=Metrics(), room_for_claims=Wakeup())
        assert not executor.saturated(T0)
        executor.pace.limit = 1  # one poll out at a time: the second waits
        executor.plan("first", Poll(T0 + interval))
        executor.plan("second", Poll(T0 + interval))
        stopping = asyncio.Event()
        dispatcher = asyncio.create_task(executor.dispatch(stopping))
        try:
            due = clock.set(T0 + interval)
            await handed_out(executor, 1)  # both were sorted; the second waits for the pace
            assert executor.backlog_of_polls == 1
            now = clock.set(due + waited)
            assert executor.saturated(now) is saturated, (interval, waited)
            assert executor.load(now)["saturated"] is saturated
        finally:
            stopping.set()
            executor.wake()
            await dispatcher

"""The patrol: automatic resume, stale detection and history retention, under the
cluster-wide lock, each job isolated from the others and from the scheduler."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from ecron.config.model import TaskSpec
from ecron.core import Execution, Reason, Status
from ecron.core.audit import AuditEntry, AuditQuery
from tests.protocol_support import reply
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import rig
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The patrol's rules do not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def old_execution(
    eid: str, status: Status, finished: datetime | None, **values: object
) -> Execution:
    fields: dict[str, object] = {
        "scheduled_at": finished or T0,
        "created_at": finished or T0,
        "finished_at": finished,
    }
    fields.update(values)
    return Execution(eid=eid, task="a", status=status, **fields)  # type: ignore[arg-type]


async def test_a_patrol_job_that_raises_is_logged_and_the_others_and_the_scheduler_go_on(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A job that raises every round: each round logs patrol_job_failed, the other jobs
    still run (patrol_done with their counts), and an {every: 1s} task keeps firing."""
    user_service.duration = 0.05
    spec = task("ticker", f"{user_service.url}/jobs/x", schedule={"every": "1s"})

    async def boom(_now: datetime) -> int:
        raise RuntimeError("this job is broken")

    with capture_logs() as logs:
        async with make_daemon([spec], patrol_interval="200ms") as daemon:
            daemon.patrol.jobs = {"boom": boom, **daemon.patrol.jobs}
            await wait_for(
                lambda: sum(1 for e in logs if e["event"] == "patrol_done") >= 3, timeout=10
            )
            await wait_for(lambda: len({c.eid for c in user_service.calls}) >= 2, timeout=10)
    failures = [e for e in logs if e["event"] == "patrol_job_failed"]
    rounds = [e for e in logs if e["event"] == "patrol_done"]
    assert len(failures) >= 3 and all(e["job"] == "boom" for e in failures)
    assert all(e["boom"] == -1 and e["resume"] == 0 and e["retention"] == 0 for e in rounds)


async def test_only_the_node_holding_the_patrol_lock_patrols(
    database_url: str, user_service: UserService
) -> None:
    """While another node holds the cluster-wide patrol lock, a round does nothing."""
    async with rig(database_url, [task("a", f"{user_service.url}/jobs/x")], T0) as r:
        async with r.store.exclusive("patrol") as held:
            assert held
            assert await r.patrol.run_once() is None
        assert await r.patrol.run_once() is not None


async def test_history_retention_deletes_old_final_executions_in_batches_and_keeps_the_rest(
    database_url: str, user_service: UserService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """history_retention 30d: finished before then are deleted (with their steps), in
    batches; newer ones and active ones, however old, stay."""
    monkeypatch.setattr("ecron.patrol.PURGE_BATCH", 3)
    async with rig(database_url, [task("a", f"{user_service.url}/jobs/x")], T0) as r:
        for n in range(7):
            when = T0 - timedelta(days=40, minutes=n)
            await r.store.create_execution(old_execution(f"old{n}", Status.SUCCESS, when))
        await r.store.create_execution(
            old_execution("recent", Status.FAILED, T0 - timedelta(days=2))
        )
        await r.store.create_execution(
            old_execution("active", Status.RUNNING, None, scheduled_at=T0 - timedelta(days=90))
        )
        counts = await r.patrol.run_once()
        left = {e.eid for e in (await r.store.list_executions(limit=50)).items}
    assert counts is not None and counts["retention"] == 7
    assert left == {"recent", "active"}


async def test_history_retention_deletes_audit_entries_older_than_it_too(
    database_url: str, user_service: UserService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit log is kept for history_retention as executions are: older entries go,
    in batches; newer ones stay, newest first."""
    monkeypatch.setattr("ecron.patrol.PURGE_BATCH", 2)
    async with rig(database_url, [task("a", f"{user_service.url}/jobs/x")], T0) as r:
        old = [
            AuditEntry(T0 - timedelta(days=31, minutes=n), "ci", "run", "a", "a", 202)
            for n in range(5)
        ]
        recent = AuditEntry(T0 - timedelta(days=1), "config", "change", "a", "a")
        await r.store.add_audit([*old, recent])
        counts = await r.patrol.run_once()
        page = await r.store.audit_page(AuditQuery(task="a"))
    assert counts is not None and counts["retention"] == 5
    assert [(e.actor, e.action) for e in page.items] == [("config", "change")]


async def test_an_execution_past_its_deadline_held_by_a_live_node_is_taken_over_and_timed_out(
    database_url: str, user_service: UserService
) -> None:
    """Stale detection: RUNNING well past its deadline under another node's valid lease
    (that node lost track of it): the patrol takes it over, the cancel goes out once, and
    it ends TIMED_OUT."""
    user_service.duration = 3600
    await user_service.start("stuck")
    spec = task("a", f"{user_service.url}/jobs/x")
    async with rig(database_url, [spec], T0) as r:
        stuck = old_execution(
            "stuck",
            Status.RUNNING,
            None,
            triggered_at=T0 - 2 * HOUR,
            deadline=T0 - HOUR,
            owner="other-node",
            lease_until=T0 + HOUR,
            fence=3,
        )
        await r.store.create_execution(stuck)
        counts = await r.patrol.run_once()
        done = await wait_for(lambda: r.status_is("stuck", Status.TIMED_OUT))
        execution = await r.store.get_execution("stuck")
    assert counts is not None and counts["stale"] == 1 and done
    assert execution is not None and execution.owner == "n1" and execution.fence == 4
    assert user_service.methods_for("stuck") == ["DELETE"]


async def test_an_execution_whose_holder_waits_out_the_cancel_it_recorded_is_left_to_it(
    database_url: str, user_service: UserService
) -> None:
    """Its cancel was recorded as sent at the deadline (the node that sent it was killed
    before its answer): its holder closes it three request timeouts (30 s) later, without a
    second cancel. The patrol leaves it alone until 30 s past that close, not 30 s past
    the deadline: taking it then from a live holder made two nodes take it from each other
    (a crash loop under load). Past the close and the margin, it takes it and ends it."""
    spec = task("a", f"{user_service.url}/jobs/x", request_timeout="10s")
    async with rig(database_url, [spec], T0) as r:
        deadline = T0 - timedelta(seconds=31)
        waiting = old_execution(
            "waiting",
            Status.RUNNING,
            None,
            triggered_at=deadline - HOUR,
            deadline=deadline,
            cancel_sent_at=deadline,
            owner="other-node",
            lease_until=T0 + HOUR,
            fence=2,
        )
        await r.store.create_execution(waiting)
        early = await r.patrol.run_once()
        untouched = await r.store.get_execution("waiting")
        r.clock.set(deadline + timedelta(seconds=61))
        late = await r.patrol.run_once()
        done = await wait_for(lambda: r.status_is("waiting", Status.TIMED_OUT))
        execution = await r.store.get_execution("waiting")
    assert early is not None and early["stale"] == 0
    assert untouched is not None and untouched.owner == "other-node" and untouched.fence == 2
    assert late is not None and late["stale"] == 1 and done
    assert execution is not None and execution.owner == "n1"
    assert user_service.calls == []  # the cancel was sent once, before: never again


async def test_a_silent_callback_mode_execution_held_by_a_live_node_ends_unreachable(
    database_url: str, user_service: UserService
) -> None:
    """Stale detection: callback mode, no report for longer than heartbeat_timeout (plus a
    margin), another node's lease still valid: taken over and ended FAILED unreachable."""
    spec = task("a", f"{user_service.url}/jobs/x", mode="callback", heartbeat_timeout="1m")
    async with rig(database_url, [spec], T0) as r:
        silent = old_execution(
            "quiet",
            Status.RUNNING,
            None,
            triggered_at=T0 - HOUR,
            deadline=T0 + HOUR,
            last_report_at=T0 - timedelta(minutes=5),
            owner="other-node",
            lease_until=T0 + HOUR,
            fence=1,
        )
        await r.store.create_execution(silent)
        await r.patrol.run_once()
        await wait_for(lambda: r.status_is("quiet", Status.FAILED))
        execution = await r.store.get_execution("quiet")
    assert execution is not None and execution.reason is Reason.UNREACHABLE
    assert user_service.calls == []


async def test_an_after_task_keeps_running_after_an_interrupted_execution(
    database_url: str, user_service: UserService
) -> None:
    """{after: 10m}: an execution ends FAILED interrupted at 12:00; the next fire time is
    12:10 all the same, and it runs."""
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "interrupted": True})]
    user_service.duration = 0
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"after": "10m"})
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        [first] = await r.settled("a", 1)
        await r.tick(T0 + timedelta(minutes=10))
        found = await r.settled("a", 2)
    assert (first.status, first.reason) == (Status.FAILED, Reason.INTERRUPTED)
    assert found[1].scheduled_at == T0 + timedelta(minutes=10)
    assert found[1].status is Status.SUCCESS


async def test_an_interrupted_chain_resumed_to_success_does_not_count_toward_pausing(
    database_url: str, user_service: UserService
) -> None:
    """pause_after_failures 1 with automatic resume: the interrupted execution is not a final
    failure (a resume follows); the patrol resumes it, the resume succeeds, and the task is
    not paused and its count is zero. Without automatic resume it would pause at once."""
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "interrupted": True})]
    user_service.duration = 0
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        pause_after_failures=1,
        idempotent=True,
        resume={"auto": True, "within": "1h"},
    )
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await r.settled("a", 1)
        after_failure = await r.store.get_task("a")
        counts = await r.patrol.run_once()
        found = await r.settled("a", 2)
        state = await r.store.get_task("a")
    assert after_failure is not None and not after_failure.paused
    assert counts is not None and counts["resume"] == 1
    assert [e.status for e in found] == [Status.FAILED, Status.SUCCESS]
    assert state is not None and not state.paused and state.consecutive_failures == 0


async def test_automatic_resume_is_only_within_resume_within_of_the_failure(
    database_url: str, user_service: UserService
) -> None:
    """An interrupted execution that failed longer ago than resume.within is left alone."""
    spec = TaskSpec.model_validate(
        {
            "name": "a",
            "schedule": "manual",
            "url": f"{user_service.url}/jobs/x",
            "idempotent": True,
            "resume": {"auto": True, "within": "30m"},
        }
    )
    async with rig(database_url, [spec], T0) as r:
        await r.store.create_execution(
            old_execution("late", Status.FAILED, T0 - HOUR, reason=Reason.INTERRUPTED)
        )
        await r.store.create_execution(
            old_execution(
                "fresh",
                Status.FAILED,
                T0 - timedelta(minutes=5),
                reason=Reason.LOST,
                scheduled_at=T0 - timedelta(minutes=6),
            )
        )
        counts = await r.patrol.run_once()
        resumes = await r.store.resumes_of(["late", "fresh"])
        await asyncio.sleep(0)
    assert counts is not None and counts["resume"] == 1
    assert set(resumes) == {"fresh"}


async def _let_loops_run(rounds: int = 20) -> None:
    """Give the event loop's other tasks their turn (no time passes on any clock)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_the_patrol_loop_goes_round_when_the_injected_clock_says_not_before(
    database_url: str, user_service: UserService
) -> None:
    """patrol_interval 60 s on a test clock: moved 59 s on, the loop does not go round;
    moved to 60 s, it does, once, at that time. Real time plays no part."""
    async with rig(database_url, [task("a", f"{user_service.url}/jobs/x")], T0) as r:
        rounds: list[datetime] = []
        went_round = asyncio.Event()

        async def probe(now: datetime) -> int:
            rounds.append(now)
            went_round.set()
            return 0

        r.patrol.jobs = {"probe": probe}
        loop = asyncio.create_task(r.patrol.run())
        try:
            await _let_loops_run()
            r.clock.advance(timedelta(seconds=59))
            await _let_loops_run()
            assert rounds == []
            r.clock.advance(timedelta(seconds=1))
            await asyncio.wait_for(went_round.wait(), timeout=10)
        finally:
            r.patrol.stop()
            await asyncio.wait_for(loop, timeout=10)
        assert rounds == [T0 + timedelta(seconds=60)]

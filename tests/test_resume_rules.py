"""The fine print of resume: which steps a resume keeps, what is retried, when a chain is
spent or given up, and how a resume meets the task's pause and concurrency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from ecron.config.model import TaskSpec
from ecron.core import Execution, Reason, Status, Step
from ecron.errors import Conflict
from ecron.planning import Claim, auto_resume_spent, plan_resume, plan_retry
from tests.support.rig import rig
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Resume rules do not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def spec(names: list[str], url: str = "http://h", **keys: Any) -> TaskSpec:
    values: dict[str, Any] = {
        "name": "t",
        "schedule": "manual",
        "steps": [{"name": n, "url": f"{url}/jobs/{n}"} for n in names],
    }
    values.update(keys)
    return TaskSpec.model_validate(values)


def failed_at_step(done: int, names: list[str], **changes: Any) -> Execution:
    """An execution of ``names`` whose first ``done`` steps succeeded and the next failed."""
    steps = tuple(
        Step(
            n,
            name,
            f"old.{n}",
            status=Status.SUCCESS
            if n <= done
            else (Status.FAILED if n == done + 1 else Status.PENDING),
            progress=100.0 if n <= done else 0.0,
        )
        for n, name in enumerate(names, start=1)
    )
    values: dict[str, Any] = {
        "eid": "old",
        "task": "t",
        "scheduled_at": T0,
        "created_at": T0,
        "status": Status.FAILED,
        "reason": Reason.INTERRUPTED,
        "finished_at": T0,
        "steps": steps,
    }
    values.update(changes)
    return Execution(**values)


CLAIM = Claim("n1", T0, T0, new_id=lambda _now: "new")


def test_a_resume_keeps_the_steps_done_before_the_first_unfinished_one() -> None:
    """Steps 1 and 2 were SUCCESS, 3 failed: the resume keeps 1 and 2 (old remote ids) and
    starts 3 and 4 afresh under its own id."""
    names = ["a", "b", "c", "d"]
    resume = plan_resume(failed_at_step(2, names), spec(names), CLAIM)
    assert [(s.remote_id, s.status) for s in resume.steps] == [
        ("old.1", Status.SUCCESS),
        ("old.2", Status.SUCCESS),
        ("new.3", Status.PENDING),
        ("new.4", Status.PENDING),
    ]
    assert resume.progress == 50.0


def test_a_step_renamed_in_the_config_starts_afresh_and_so_does_everything_after_it() -> None:
    """The task's step 1 was renamed since: it runs again, and so do the steps after it
    (even one that succeeded before), so nothing runs out of order."""
    old = failed_at_step(2, ["a", "b", "c"])
    resume = plan_resume(old, spec(["x", "b", "c"]), CLAIM)
    assert [(s.name, s.remote_id, s.status) for s in resume.steps] == [
        ("x", "new.1", Status.PENDING),
        ("b", "new.2", Status.PENDING),
        ("c", "new.3", Status.PENDING),
    ]


def test_a_multi_step_execution_of_a_task_that_writes_is_not_retried_once_a_step_succeeded() -> (
    None
):
    """A retry starts over at step 1: for a task that is not idempotent, once a step did its
    writing, only a person's resume continues it."""
    names = ["a", "b"]
    writes = spec(names, retry={"max_attempts": 3}, idempotent=False)
    safe = spec(names, retry={"max_attempts": 3}, idempotent=True)
    nothing_done = failed_at_step(0, names, reason=Reason.REMOTE_FAILED)
    partly_done = failed_at_step(1, names, reason=Reason.REMOTE_FAILED)
    assert plan_retry(partly_done, writes, CLAIM, None) is None
    assert plan_retry(nothing_done, writes, CLAIM, None) is not None
    assert plan_retry(partly_done, safe, CLAIM, None) is not None


def test_only_an_auto_resumed_idempotent_task_has_a_chain_to_spend() -> None:
    """A spent chain is reported only where resumes are automatic; a task that writes
    never has one (it waits for a person)."""
    names = ["a"]
    spent = failed_at_step(0, names, resume_attempt=3)
    assert auto_resume_spent(spent, spec(names, idempotent=True, resume={"auto": True}))
    assert not auto_resume_spent(spent, spec(names, idempotent=False, resume={"auto": True}))
    assert not auto_resume_spent(
        failed_at_step(0, names, resume_attempt=1),
        spec(names, idempotent=True, resume={"auto": True}),
    )


async def test_a_paused_task_is_not_resumed_automatically(
    database_url: str, user_service: UserService
) -> None:
    """The patrol leaves interrupted executions of a paused task alone."""
    task = spec(["a"], user_service.url, idempotent=True, resume={"auto": True})
    async with rig(database_url, [task], T0) as r:
        await r.store.create_execution(
            failed_at_step(0, ["a"], finished_at=T0 - timedelta(minutes=1))
        )
        await r.commands.pause("t", "maintenance")
        counts = await r.patrol.run_once()
    assert counts is not None and counts["resume"] == 0


async def test_an_interrupted_execution_that_cannot_be_resumed_in_time_becomes_a_final_failure(
    database_url: str, user_service: UserService
) -> None:
    """The task stays busy (forbid) until the last patrol within resume.within: the resume is
    given up, the chain reported spent, and the failure counts toward pausing."""
    task = spec(
        ["a"],
        user_service.url,
        idempotent=True,
        resume={"auto": True, "within": "30m"},
        pause_after_failures=1,
    )
    async with rig(database_url, [task], T0) as r:
        interrupted = failed_at_step(0, ["a"], finished_at=T0 - timedelta(minutes=29, seconds=30))
        busy = Execution(
            eid="busy",
            task="t",
            scheduled_at=T0 + timedelta(minutes=1),
            created_at=T0,
            status=Status.RUNNING,
        )
        await r.store.create_execution(interrupted)
        await r.store.create_execution(busy)
        with capture_logs() as logs:
            counts = await r.patrol.run_once()
        state = await r.store.get_task("t")
    assert counts is not None and counts["resume"] == 0
    assert any(e["event"] == "resume_chain_exhausted" for e in logs)
    assert state is not None and state.paused and state.consecutive_failures == 1


async def test_a_resume_under_replace_cancels_the_running_execution_first(
    database_url: str, user_service: UserService
) -> None:
    """concurrency: replace: resuming while another execution runs cancels that one
    (DELETE, CANCELLED), then the resume starts."""
    user_service.duration = 3600
    task = spec(["a"], user_service.url, concurrency="replace")
    async with rig(database_url, [task], T0) as r:
        await r.store.create_execution(
            failed_at_step(0, ["a"], scheduled_at=T0 - timedelta(hours=1))
        )
        running, _ = await r.commands.run_now("t")
        await wait_for(lambda: r.status_is(running.eid, Status.RUNNING))
        resumed = await r.commands.resume("old", why="test")
        await wait_for(lambda: user_service.calls_for(f"{resumed.eid}.1", "POST"))
        replaced = await r.store.get_execution(running.eid)
    assert replaced is not None and replaced.status is Status.CANCELLED
    assert len(user_service.calls_for(f"{running.eid}.1", "DELETE")) == 1


async def test_a_resume_is_given_up_once_whichever_patrol_gets_there_first(
    database_url: str, user_service: UserService
) -> None:
    """Two patrol rounds in one interval (two nodes) both at the last chance: the chain is
    reported spent and the failure counted once, not twice."""
    task = spec(
        ["a"],
        user_service.url,
        idempotent=True,
        resume={"auto": True, "within": "30m"},
        pause_after_failures=2,
    )
    async with rig(database_url, [task], T0) as r:
        await r.store.create_execution(
            failed_at_step(0, ["a"], finished_at=T0 - timedelta(minutes=29, seconds=30))
        )
        await r.store.create_execution(
            Execution(
                eid="busy",
                task="t",
                scheduled_at=T0 + timedelta(minutes=1),
                created_at=T0,
                status=Status.RUNNING,
            )
        )
        with capture_logs() as logs:
            await r.patrol.run_once()
            await r.patrol.run_once()
        state = await r.store.get_task("t")
    assert sum(e["event"] == "resume_chain_exhausted" for e in logs) == 1
    assert state is not None and state.consecutive_failures == 1 and not state.paused


async def test_a_resume_with_no_step_left_to_run_is_refused_and_given_up(
    database_url: str, user_service: UserService
) -> None:
    """The config dropped the failed step: a resume would run nothing. A person's resume
    answers 409 saying so; the patrol gives it up at once instead of leaving a stuck resume."""
    old = failed_at_step(1, ["a", "b"], finished_at=T0 - timedelta(minutes=1))
    task = spec(["a"], user_service.url, idempotent=True, resume={"auto": True})
    async with rig(database_url, [task], T0) as r:
        await r.store.create_execution(old)
        with pytest.raises(Conflict, match="as configured now succeeded"):
            await r.commands.resume("old", why="test")
        with capture_logs() as logs:
            counts = await r.patrol.run_once()
        resumes = await r.store.resumes_of(["old"])
    assert counts is not None and counts["resume"] == 0 and resumes == {}
    assert any(e["event"] == "resume_chain_exhausted" for e in logs)

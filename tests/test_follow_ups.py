"""What follows an end is never lost: an ``{after}`` task always gets its next fire time,
whether its fire time was skipped at its start as found too late, or the node that wrote
the end died (or lost the database) before it could record the end on the task."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from ecron.core import Execution, Reason, Status, TriggerKind
from tests.protocol_support import reply
from tests.support.daemon import task
from tests.support.rig import Rig, rig
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DELAY = timedelta(minutes=10)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The rules do not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def dies_after_ends(r: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node dies right after each end is written: its end's book-keeping (what
    ``Bookkeeping.finished`` records and sets off) never happens."""

    async def never_booked(_: Execution, __: Sequence[Execution] | None = None) -> list[Execution]:
        return []

    monkeypatch.setattr(r.parts.bookkeeping, "finished", never_booked)


async def test_an_after_task_whose_fire_time_is_skipped_as_too_late_at_its_start_fires_again(
    database_url: str, user_service: UserService
) -> None:
    """{after: 10m} with misfire {policy: skip, grace: 1m}: its fire time T0 is claimed, and
    only started at T0 + 5 m (the node stalled): it is SKIPPED misfire, and no execution
    ends to set the next fire time, so the skip sets it: 10 minutes after the skip."""
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"after": "10m"},
        misfire={"policy": "skip", "grace": "1m"},
    )
    ahead = T0 - timedelta(seconds=1)
    async with rig(database_url, [spec], ahead, prefetch=timedelta(seconds=2)) as r:
        await r.scheduler.claim_fires(ahead)  # claimed ahead, not started: the node stalls
        skipped_at = T0 + timedelta(minutes=5)
        await r.start_due(skipped_at)
        [skipped] = await r.settled("a", 1)
        state = await r.store.get_task("a")
    assert (skipped.status, skipped.reason) == (Status.SKIPPED, Reason.MISFIRE)
    assert state is not None and state.next_fire_at == skipped_at + DELAY


async def test_an_after_task_whose_end_was_never_recorded_on_it_is_restarted_by_the_patrol(
    database_url: str, user_service: UserService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """{after: 10m}: the node writes its execution's SUCCESS and dies before recording the
    end on the task (the book-keeping never runs), which leaves the task without a next
    fire time, for good. The patrol, once the end is older than lease_ttl, books it: the
    next fire time is 10 minutes after that end, and the task fires then."""
    user_service.duration = 0
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"after": "10m"})
    async with rig(database_url, [spec], T0) as r:
        with monkeypatch.context() as patched:
            dies_after_ends(r, patched)
            await r.tick(T0)
            [ended] = await r.settled("a", 1)
            stalled = await r.store.get_task("a")
        # another node (or this one, restarted) goes on from here
        assert ended.finished_at is not None
        r.clock.set(ended.finished_at + r.parts.leases.settings.lease_ttl + timedelta(seconds=1))
        with capture_logs() as logs:
            counts = await r.patrol.run_once()
        restarted = await r.store.get_task("a")
        assert restarted is not None and restarted.next_fire_at is not None
        await r.tick(restarted.next_fire_at)
        found = await r.settled("a", 2)
    assert ended.status is Status.SUCCESS
    assert stalled is not None and stalled.next_fire_at is None
    assert counts is not None and counts["follow_ups"] == 1
    assert restarted.next_fire_at == ended.finished_at + DELAY
    assert [e.status for e in found] == [Status.SUCCESS, Status.SUCCESS]
    [line] = [e for e in logs if e["event"] == "after_task_restarted"]
    assert line["task"] == "a" and line["execution_id"] == ended.eid


async def test_the_patrol_leaves_an_after_task_alone_while_its_last_end_may_still_be_booked(
    database_url: str, user_service: UserService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same stalled task, looked at by the patrol less than lease_ttl after the end (the
    node that wrote it may be booking it right now): nothing is done yet; looked at once the
    end is older, it is restarted, once, and a second round finds nothing to do."""
    user_service.duration = 0
    spec = task("a", f"{user_service.url}/jobs/x", schedule={"after": "10m"})
    async with rig(database_url, [spec], T0) as r:
        with monkeypatch.context() as patched:
            dies_after_ends(r, patched)
            await r.tick(T0)
            [ended] = await r.settled("a", 1)
        assert ended.finished_at is not None
        r.clock.set(ended.finished_at + timedelta(seconds=1))
        early = await r.patrol.run_once()
        r.clock.set(ended.finished_at + r.parts.leases.settings.lease_ttl + timedelta(seconds=1))
        late = await r.patrol.run_once()
        again = await r.patrol.run_once()
        await wait_for(lambda: r.engine.idle)
    assert early is not None and early["follow_ups"] == 0
    assert late is not None and late["follow_ups"] == 1
    assert again is not None and again["follow_ups"] == 0


async def test_a_failure_and_its_retry_are_written_together_so_a_death_after_the_end_keeps_it(
    database_url: str, user_service: UserService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """retry {max_attempts: 1, backoff: 30s}: the execution of fire time T0 fails, and the
    node dies right after writing the end (its book-keeping never runs). The retry is in the
    database all the same, written in the end's own transaction: SCHEDULED, attempt 2, the
    same fire time, due 30 s after the end; once the dead node's claim on it expires it is
    taken over and runs."""
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "no"})]
    user_service.duration = 0
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        retry={"max_attempts": 1, "backoff": "30s"},
    )
    async with rig(database_url, [spec], T0) as r:
        dies_after_ends(r, monkeypatch)
        await r.tick(T0)
        await wait_for(lambda: r.any_status("a", Status.FAILED))
        found = await r.executions("a")
    [failed, retry] = found
    assert (failed.status, failed.attempt) == (Status.FAILED, 1)
    assert (retry.status, retry.attempt, retry.trigger_kind) == (
        Status.SCHEDULED,
        2,
        TriggerKind.RETRY,
    )
    assert retry.scheduled_at == failed.scheduled_at == T0
    assert failed.finished_at is not None
    assert retry.not_before == failed.finished_at + timedelta(seconds=30)


async def test_a_retry_planned_with_its_end_is_started_once_by_the_node_that_wrote_it(
    database_url: str, user_service: UserService
) -> None:
    """The same failure on a node that lives on: the retry written with the end is the one
    the node holds and starts at its time (no second retry row), and it ends SUCCESS; the
    task's count of failures in a row is back to 0."""
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "no"})]
    user_service.duration = 0
    spec = task(
        "a",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        retry={"max_attempts": 1, "backoff": "30s"},
    )
    async with rig(database_url, [spec], T0) as r:
        await r.tick(T0)
        await wait_for(lambda: r.count_is("a", 2))
        [_failed, retry] = await r.executions("a")
        assert retry.not_before is not None
        await r.start_due(retry.not_before)
        found = await r.settled("a", 2)
        state = await r.store.get_task("a")
    assert [(e.attempt, e.status) for e in found] == [(1, Status.FAILED), (2, Status.SUCCESS)]
    assert found[1].eid == retry.eid
    assert [c.method for c in user_service.calls].count("POST") == 2
    assert state is not None and state.consecutive_failures == 0

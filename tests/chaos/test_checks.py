"""The crash loop's checks catch what they are for: rows that break a rule, made by hand,
are reported (a check that never fails would prove nothing)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.chaos.checks import Snapshots, Tables, chains, started_checks

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def row(eid: str, status: str, attempt: int = 1, **values: Any) -> dict[str, Any]:
    base = {
        "eid": eid,
        "task": "a",
        "scheduled_at": T0,
        "attempt": attempt,
        "resume_attempt": 0,
        "resume_of": None,
        "status": status,
        "fence": 1,
        "version": 1,
        "trigger_kind": "schedule" if attempt == 1 else "retry",
    }
    return {**base, **values}


def test_a_fire_time_with_one_failed_attempt_and_its_retry_is_one_ended_chain() -> None:
    """Attempt 1 FAILED, attempt 2 SUCCESS: one chain, ended; nothing reported."""
    rows = {r["eid"]: r for r in [row("e1", "FAILED"), row("e2", "SUCCESS", 2)]}
    assert chains(rows).problems == []


def test_two_executions_of_one_fire_time_that_both_ran_are_reported() -> None:
    """Two first attempts of one fire time (a double fire), or a SUCCESS that was
    continued by a retry, or a chain that ends RUNNING: each is reported."""
    doubled = {r["eid"]: r for r in [row("e1", "SUCCESS"), row("e2", "SUCCESS", resume_attempt=1)]}
    continued = {r["eid"]: r for r in [row("e1", "SUCCESS"), row("e2", "SUCCESS", 2)]}
    running = {"e1": row("e1", "RUNNING")}
    assert any("chain ends" in p for p in chains(doubled).problems)
    assert any("was continued" in p for p in chains(continued).problems)
    assert any("ends RUNNING" in p for p in chains(running).problems)


def test_a_fence_that_went_down_and_a_final_row_that_changed_are_reported() -> None:
    """Three snapshots: a row's fence goes from 2 to 1, and a final row's message changes
    after it was final; both are reported, and a row that vanished too."""
    snapshots = Snapshots(tables=Tables(store=None))  # type: ignore[arg-type]
    first = {"e1": row("e1", "RUNNING", fence=2), "e2": row("e2", "SUCCESS", message="done")}
    second = {"e1": row("e1", "RUNNING", fence=1), "e2": row("e2", "SUCCESS", message="again")}
    snapshots.compare(first, {})
    snapshots.compare(second, {})
    snapshots.compare({"e1": second["e1"]}, {})
    problems = " | ".join(snapshots.problems)
    assert "e1: fence/version went from (2, 1) to (1, 1)" in problems
    assert "e2: final row changed" in problems
    assert "rows disappeared: ['e2']" in problems


def test_a_remote_id_started_twice_or_for_no_execution_is_reported() -> None:
    """The services' starts against the rows: an id started twice, an id no row has, and a
    SKIPPED fire time whose id was started are each reported."""
    rows = {
        "e1": row("e1", "SUCCESS", scheduled_at=T0),
        "e2": row("e2", "SKIPPED", scheduled_at=T0 + timedelta(seconds=1)),
    }
    starts = Counter({"e1": 2, "e2": 1, "ghost": 1})
    headers = {
        "e1": ("a", "2026-06-01T12:00:00.000Z", "1"),
        "e2": ("a", "2026-06-01T12:00:01.000Z", "1"),
        "ghost": ("a", "2026-06-01T12:00:02.000Z", "1"),
    }
    problems = " | ".join(started_checks(rows, {}, starts, headers))
    assert "e1 started 2 times" in problems
    assert "ghost was started but no execution has it" in problems
    assert "e2 is SKIPPED but was started" in problems

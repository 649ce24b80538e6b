"""Kill -9 the daemon during step 2 while the user service forgets that step: after the
restart, step 2 is FAILED interrupted ("stopped here" kept as a fact) and the resume
continues from step 2. A real ``ecron run`` process on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.launcher import start_warm_node
from tests.support.cluster import (
    clean_up,
    execution,
    kill_node,
    request,
    run_now,
    stop_node,
    wait_ready,
    write_config,
)
from tests.support.service import UserService, wait_for

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_crash_during_step_2_leaves_step_2_interrupted_and_the_resume_continues_there(
    tmp_path: Path, user_service: UserService, idempotent: bool
) -> None:
    """Step 2 runs; the daemon is killed (-9) and the service forgets step 2 (it restarted
    too). The restarted daemon adopts the execution, finds step 2 unknown, and records step 2
    and the execution FAILED interrupted. Idempotent with resume.auto: a resume appears by
    itself; not idempotent: a person resumes it. Either way the resume starts at step 2, step
    1 is never called again, and it ends SUCCESS."""
    user_service.duration = 0.2
    steps = (
        "    steps:\n"
        f"      - {{name: fetch, url: '{user_service.url}/jobs/fetch'}}\n"
        f"      - {{name: load, url: '{user_service.url}/jobs/load'}}\n"
        f"      - {{name: report, url: '{user_service.url}/jobs/report'}}\n"
    )
    tasks = (
        "tasks:\n  - name: init\n    schedule: manual\n    poll_interval: 100ms\n"
        f"    idempotent: {str(idempotent).lower()}\n    resume: {{auto: true}}\n" + steps
    )
    settings = "lease_ttl: 2s\npatrol_interval: 500ms\nlog: {format: json, level: info}\n"
    directory = write_config(tmp_path / "config", settings, tasks)
    database = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    nodes = []
    try:
        first = start_warm_node("first", directory, database, tmp_path)
        nodes.append(first)
        await wait_ready(first)
        user_service.durations["load"] = 3600  # step 2 runs until the crash
        eid = await run_now(first, "init")
        await wait_for(lambda: user_service.calls_for(f"{eid}.2", "GET"), timeout=15)
        await kill_node(first)
        user_service.jobs.pop(f"{eid}.2")  # the service restarted and forgot step 2
        second = start_warm_node("second", directory, database, tmp_path)
        nodes.append(second)
        await wait_ready(second)

        async def interrupted() -> dict[str, object] | None:
            snapshot = await execution(second, eid)
            return snapshot if snapshot["status"] == "FAILED" else None

        old = await wait_for(interrupted, timeout=20)
        user_service.durations["load"] = 0.2
        if not idempotent:
            status, _ = await request(second, "POST", f"/api/v1/executions/{eid}/resume")
            assert status == 202

        async def resumed() -> dict[str, object] | None:
            snapshot = await execution(second, eid)
            by = snapshot.get("resumed_by")
            if not by:
                return None
            new = await execution(second, str(by))
            return new if new["status"] == "SUCCESS" else None

        new = await wait_for(resumed, timeout=20)
        assert await stop_node(second) == 0
    finally:
        clean_up(nodes)
    assert (old["status"], old["reason"]) == ("FAILED", "interrupted")
    step_statuses = [(s["number"], s["status"], s["reason"]) for s in old["steps"]]  # type: ignore[index]
    assert step_statuses == [
        (1, "SUCCESS", None),
        (2, "FAILED", "interrupted"),
        (3, "PENDING", None),
    ]
    assert new["resume_of"] == eid
    assert [s["status"] for s in new["steps"]] == ["SUCCESS", "SUCCESS", "SUCCESS"]  # type: ignore[index]
    assert new["steps"][0]["remote_id"] == f"{eid}.1"  # type: ignore[index]
    assert len(user_service.calls_for(f"{eid}.1", "POST")) == 1
    assert user_service.calls_for(f"{new['id']}.1") == []
    assert len(user_service.calls_for(f"{new['id']}.2", "POST")) == 1
    assert user_service.calls_for(f"{eid}.3") == []

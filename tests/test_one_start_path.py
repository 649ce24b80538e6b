"""Every kind of run starts through one path (DESIGN.md: "Every kind of run (fire time,
manual, retry, resume, chain, backfill) is started by the same one path, which applies
``concurrency`` and pools in one place").

Shown twice: in the code, where the one decision (``planning.decide_start``) and the one
start transaction (``Store.start_executions``) are called from ``ecron/starts.py`` alone,
``Starts.start`` from the engine's starter alone, and new runs reach it only through
``Engine.start_new``; and at run time, where a fire time, its retry, the run it sets off
downstream, a manual run and a resume each pass through that one decision."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import ecron.starts as starts_module
from ecron.core import Execution, Gate, Status, TriggerKind
from tests.protocol_support import reply
from tests.support.daemon import task
from tests.support.rig import rig
from tests.support.service import UserService, wait_for

ROOT = Path(__file__).resolve().parent.parent / "ecron"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def callers_of(name: str) -> set[str]:
    """The modules of ``ecron`` that call ``name`` (a function, or any object's method)."""
    found = set()
    for path in ROOT.rglob("*.py"):
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                found.add(module)
    return found


def test_in_the_code_every_start_goes_through_one_decision_and_one_transaction() -> None:
    """``decide_start`` and ``start_executions`` are called only by ``starts``; its
    ``Starts.start`` only by the starter the engine runs (``starts.Starter``); and a new
    run (manual, resume) reaches it only through ``Engine.start_new``, which the commands
    call."""
    assert callers_of("decide_start") == {"starts"}
    assert callers_of("start_executions") == {"starts"}
    assert callers_of("start_new") == {"commands"}
    starters = {
        module
        for module in callers_of("start")
        if "self._starts.start(" in (ROOT / f"{module.replace('.', '/')}.py").read_text()
    }
    assert starters == {"starts"}


def calls_in(module: str, function: str) -> set[str]:
    """The names ``function`` of ``ecron/<module>.py`` calls (functions, or any object's
    methods)."""
    tree = ast.parse((ROOT / f"{module}.py").read_text())
    [found] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
    ]
    return {
        node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for node in ast.walk(found)
        if isinstance(node, ast.Call)
    }


def test_in_the_code_backfilled_runs_are_handed_to_the_engine_like_retries() -> None:
    """A backfill inserts its runs (``create_executions``, called by the commands alone) and
    hands them to ``Engine.hold``, as the end of a run hands over its retry and chained
    runs: it starts, triggers or decides nothing itself, so the starter decides each one
    (``decide_start``) when it falls due."""
    assert callers_of("create_executions") == {"commands"}
    calls = calls_in("commands", "backfill")
    assert {"create_executions", "hold"} <= calls
    assert not calls & {"start", "start_new", "trigger", "decide_start", "start_executions"}
    assert callers_of("backfill_runs") == {"commands"}


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> list[Execution]:
    """Every run the one start decision is asked about (the real ``decide_start`` still
    decides; this only watches its one call site)."""
    seen: list[Execution] = []
    real = starts_module.decide_start

    def watched(execution: Execution, spec: Any, gate: Gate, now: datetime) -> Any:
        seen.append(execution)
        return real(execution, spec, gate, now)

    monkeypatch.setattr(starts_module, "decide_start", watched)
    return seen


async def test_a_fire_time_its_retry_its_chained_run_a_manual_run_and_a_resume_start_alike(
    database_url: str, user_service: UserService, decided: list[Execution]
) -> None:
    """An hourly task fails at T0 (its first trigger answered FAILED) and is retried 30 s
    later; the retry succeeds and sets off a chained task; then a manual run, a resume of
    the failed attempt and a backfill of another task's past hour are asked for. All six
    runs, one of each kind, were decided by the one start decision, and each of them
    started."""
    user_service.duration = 0
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "no"})]
    url = f"{user_service.url}/jobs/x"
    specs = [
        task(
            "up",
            url,
            schedule={"every": "1h"},
            retry={"max_attempts": 1, "backoff": "30s"},
            idempotent=True,
        ),
        task("down", url, schedule={"after_task": "up"}),
        task("hand", url),
        task("past", url, schedule={"every": "1h"}, enabled=False),
    ]
    async with rig(database_url, specs, T0) as r:
        await r.tick(T0)
        await wait_for(lambda: r.count_is("up", 2))  # the failure, and its retry claimed
        await r.start_due(T0 + timedelta(seconds=30))
        await wait_for(lambda: r.any_status("down", Status.SUCCESS))
        manual, _ = await r.commands.run_now("hand")
        first = (await r.executions("up"))[0]
        resumed = await r.commands.resume(first.eid, why="test")
        now = r.clock.now()
        backfill = await r.commands.backfill("past", now - HOUR, now, dry_run=False)
        await wait_for(lambda: r.engine.settled(r.clock.now()))
    kinds = {e.trigger_kind for e in decided}
    assert kinds == {
        TriggerKind.SCHEDULE,
        TriggerKind.RETRY,
        TriggerKind.CHAIN,
        TriggerKind.MANUAL,
        TriggerKind.RESUME,
        TriggerKind.BACKFILL,
    }
    assert first.status is Status.FAILED
    assert manual.trigger_kind is TriggerKind.MANUAL and manual.status is Status.PENDING
    assert resumed.trigger_kind is TriggerKind.RESUME and resumed.resume_of == first.eid
    assert backfill.fire_times == (T0,) and len(backfill.executions) == 1
    posts = {c.eid for c in user_service.calls if c.method == "POST"}
    assert {e.eid for e in decided} <= posts  # every run decided here was started

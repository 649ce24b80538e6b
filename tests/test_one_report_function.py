"""One function applies every report (PROTOCOL.md: "there is exactly one place where reports
change state"; DESIGN.md: "applied by one function in core").

Shown twice: in the code, where the report event (``Reported``) is made only by the two
adapters that turn answers and pushed reports into it, and handed to ``core.apply`` only by
the ``Recorder``; and at run time, where one daemon drives four tasks that report through
the four channels (per-execution polls, batch polls, callbacks, the Redis stream) against
one real service, and every report of each channel passes through the Recorder's call of
``core.apply``, and the four executions end the same."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import ecron.executor.recorder as recorder_module
from ecron.core import Channel, Event, Execution, Reported, Status, Transition
from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.protocol_support import ended, run_once
from tests.support.batch import BatchService, batch_service
from tests.support.daemon import DaemonFactory, task
from tests.support.redis_server import RedisServer, free_port
from tests.support.service import wait_for
from tests.test_callbacks import push, token_of
from tests.test_queue import handled, queue_of, send

ROOT = Path(__file__).resolve().parent.parent / "ecron"


def calls_to(name: str) -> set[str]:
    """The modules of ``ecron`` (outside ``core``) that call a function named ``name``."""
    found = set()
    for path in ROOT.rglob("*.py"):
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        if module.startswith("core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            if called and node.func.id == name:  # type: ignore[attr-defined]
                found.add(module)
    return found


def test_reports_become_one_event_in_two_adapters_and_reach_core_apply_through_the_recorder() -> (
    None
):
    """``Reported`` is built only by ``executor.outcomes`` (trigger and poll answers, single
    and batch) and ``Commands.report`` (callbacks and queue messages); ``core.apply`` is
    called by the Recorder, and otherwise only by the start path and the claim planning,
    which apply no report (they import no ``Reported``)."""
    assert calls_to("Reported") == {"executor.outcomes", "commands"}
    assert calls_to("poll_event") == {"executor.perform"}
    assert calls_to("take_report") == {"api.executions", "queue"}
    assert calls_to("apply") == {"executor.recorder", "starts", "planning"}
    for module in ("starts", "planning"):
        assert "Reported" not in (ROOT / f"{module}.py").read_text()


@pytest.fixture
async def service() -> AsyncIterator[BatchService]:
    """One real service: triggers and per-id polls at ``/jobs/{kind}``, batch polls at
    ``/batch/{kind}``; ``/jobs/quick`` jobs take 0.3 s, the rest run until finished."""
    async with batch_service(duration=3600) as batch:
        batch.service.durations["quick"] = 0.3
        yield batch


Applied = dict[str, list[tuple[Channel, Status]]]


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> Applied:
    """Every report the Recorder applies, by eid: its channel and the status it led to. The
    real ``core.apply`` still does the work; this only watches the one call site."""
    seen: Applied = defaultdict(list)
    real = recorder_module.apply

    def watched(execution: Execution, event: Event, now: Any) -> Transition:
        transition = real(execution, event, now)
        if isinstance(event, Reported):
            seen[execution.eid].append((event.channel, transition.after.status))
        return transition

    monkeypatch.setattr(recorder_module, "apply", watched)
    return seen


async def test_polls_batch_polls_callbacks_and_queue_messages_all_go_through_the_one_function(
    make_daemon: DaemonFactory,
    service: BatchService,
    redis_server: RedisServer,
    applied: Applied,
) -> None:
    """Four tasks, one per channel, each ending SUCCESS with the result ``{"eid": <eid>}``:
    the Recorder's ``core.apply`` saw every report of each (its trigger answer, then polls,
    batch polls, callbacks or queue messages), the last one it applied is the stored end,
    and the four ends agree on status, progress, result and reason."""
    url = f"{service.url}/jobs"
    specs = [
        task("polled", f"{url}/quick"),
        task("batched", f"{url}/quick", batch_poll_url=f"{service.url}/batch/quick"),
        task("called-back", f"{url}/slow", mode="callback"),
        task("queued", f"{url}/slow", mode="queue"),
    ]
    port = free_port()
    client = Redis.from_url(redis_server.url)
    settings = {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"}
    try:
        async with make_daemon(specs, queue=queue_of(redis_server), **settings) as daemon:
            eids = {spec.name: await run_once(daemon, spec.name) for spec in specs}
            await _push_both(daemon, service, client, eids["called-back"], eids["queued"])
            ends = {name: await ended(daemon, eid) for name, eid in eids.items()}
    finally:
        await client.aclose()

    channels = {name: {c for c, _ in applied[eid]} for name, eid in eids.items()}
    assert channels == {
        "polled": {Channel.TRIGGER, Channel.POLL},
        "batched": {Channel.TRIGGER, Channel.POLL},
        "called-back": {Channel.TRIGGER, Channel.CALLBACK},
        "queued": {Channel.TRIGGER, Channel.QUEUE},
    }
    assert all(applied[eid][-1][1] is Status.SUCCESS for eid in eids.values())
    assert {(e.status, e.progress, e.reason) for e in ends.values()} == {
        (Status.SUCCESS, 100, None)
    }
    assert all(end.result == {"eid": end.eid} for end in ends.values())
    batched = eids["batched"]
    assert service.service.calls_for(batched, "GET") == []  # never polled one by one
    assert any(batched in call.ids for call in service.calls)


async def _push_both(
    daemon: Daemon, service: BatchService, client: Redis, by_callback: str, by_queue: str
) -> None:
    """RUNNING 50, then SUCCESS with the service's result: by callback about one execution,
    through the stream about the other (each once it is RUNNING)."""
    for eid in (by_callback, by_queue):
        await wait_for(lambda eid=eid: _is(daemon, eid, Status.RUNNING), timeout=5)
    running = {"status": "RUNNING", "progress": 50}
    for eid in (by_callback, by_queue):
        success = {"status": "SUCCESS", "result": {"eid": eid}}
        for report in (running, success):
            if eid == by_callback:
                status, _ = await push(daemon, eid, report, token_of(service.service, eid))
                assert status == 200
            else:
                token = callback_token(daemon.callback_secret, eid)
                await handled(client, await send(client, eid, report, token))


async def _is(daemon: Daemon, eid: str, status: Status) -> bool:
    execution = await daemon.store.get_execution(eid)
    return execution is not None and execution.status is status

"""PROTOCOL.md, "Batch polls": a task with ``batch_poll_url`` is polled with one
``GET {batch_poll_url}?ids=a,b,c`` (at most 100 ids) for the executions due together, never
one by one; each id's report is applied as a poll's answer, a missing id reads UNKNOWN, and
a bad answer is a failed probe for every id in it. Against a real user service on 127.0.0.1,
with the executor's clock moved by the test (one poll round per move)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from ecron.config.model import TaskSpec
from ecron.core import Reason, Status
from ecron.executor.batch import CALL_NAME, batch_poll
from ecron.executor.http import CallContext, HttpCaller, OutcomeKind
from ecron.executor.wire import Wire
from ecron.metrics import Metrics
from tests.protocol_support import started_then_slow
from tests.support.batch import BatchAnswer, BatchCall, BatchService, batch_service
from tests.support.daemon import task
from tests.support.rig import Rig, rig
from tests.support.service import wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
INTERVAL = timedelta(seconds=10)
SECRET = "batch-s3cret"


@pytest.fixture
async def batch() -> Any:
    """A user service with a batch endpoint at ``/batch/x``."""
    async with batch_service() as service:
        yield service


def batch_task(service: BatchService, name: str = "job", **keys: Any) -> TaskSpec:
    """A manual task, polled every 10 s (of the test's clock) through ``/batch/x``."""
    values: dict[str, Any] = {
        "poll_interval": "10s",
        "concurrency": "allow",
        "request_timeout": "2s",
        "batch_poll_url": f"{service.url}/batch/x",
    }
    values.update(keys)
    return task(name, f"{service.url}/jobs/x", **values)


async def started(r: Rig, count: int, name: str = "job") -> list[str]:
    """``count`` runs of ``name`` started now, all RUNNING and their next polls planned."""
    eids = [(await r.commands.run_now(name))[0].eid for _ in range(count)]

    def running() -> bool:
        found = [r.parts.held.get(eid) for eid in eids]
        return r.engine.idle and all(e is not None and e.status is Status.RUNNING for e in found)

    await wait_for(running)
    return eids


async def poll_round(r: Rig, service: BatchService) -> list[BatchCall]:
    """Move the clock one poll interval on; the batch calls that round made, once every
    answer has been applied."""
    before = len(service.calls)
    r.clock.advance(INTERVAL)
    await wait_for(lambda: len(service.calls) > before and r.engine.idle)
    return service.calls[before:]


def answer(status: int, body: Any = None, *, text: str | None = None) -> BatchAnswer:
    """A scripted batch answer: this status and a JSON body (or a text body)."""

    async def respond(_ids: list[str]) -> web.StreamResponse:
        if text is not None:
            return web.Response(status=status, text=text, content_type="text/html")
        return web.json_response(body, status=status)

    return respond


async def test_executions_due_together_are_polled_in_batch_calls_of_at_most_100_ids(
    database_url: str, batch: BatchService
) -> None:
    """150 executions of one task whose polls fall due together: one round makes two batch
    calls (100 and 50 ids) that name each execution once; the round after, each report
    SUCCESS ends its execution; the service never sees a poll of a single execution."""
    async with rig(database_url, [batch_task(batch)], T0) as r:
        eids = await started(r, 150)
        first = await poll_round(r, batch)
        for eid in eids:
            batch.finish(eid)
        second = await poll_round(r, batch)
        ended = await r.settled("job", 150)
    assert sorted(len(call.ids) for call in first) == [50, 100]
    assert sorted(eid for call in first for eid in call.ids) == sorted(eids)
    assert sorted(eid for call in second for eid in call.ids) == sorted(eids)
    assert {e.status for e in ended} == {Status.SUCCESS}
    assert batch.per_id_polls == 0
    headers = first[0].headers
    assert headers["X-Ecron-Task"] == "job"
    assert "X-Ecron-Execution-Id" not in headers and "X-Ecron-Scheduled-At" not in headers


async def test_batch_reports_move_each_execution_as_a_poll_answer_would(
    database_url: str, batch: BatchService
) -> None:
    """RUNNING with progress is stored per execution; then one SUCCESS (with its result)
    and one FAILED end their own executions, remote_failed for the failure."""
    async with rig(database_url, [batch_task(batch)], T0) as r:
        good, bad = await started(r, 2)
        batch.reports = {
            good: {"status": "RUNNING", "progress": 40, "message": "page 4"},
            bad: {"status": "running", "progress": 70},
        }
        await poll_round(r, batch)
        progress = {eid: r.parts.held[eid].progress for eid in (good, bad)}
        batch.reports = {good: {"status": "SUCCESS", "result": {"rows": 3}}}
        batch.finish(bad, fail=True)
        await poll_round(r, batch)
        await r.settled("job", 2)
        won, lost = await r.store.get_execution(good), await r.store.get_execution(bad)
    assert progress == {good: 40, bad: 70}
    assert won is not None and (won.status, won.progress, won.result) == (
        Status.SUCCESS,
        100,
        {"rows": 3},
    )
    assert lost is not None and (lost.status, lost.reason) == (Status.FAILED, Reason.REMOTE_FAILED)
    assert batch.per_id_polls == 0


async def test_an_id_missing_from_the_reports_is_unknown_and_ends_it_lost(
    database_url: str, batch: BatchService
) -> None:
    """The answer leaves one RUNNING execution out: it reads UNKNOWN, so that execution
    ends FAILED lost; the other, reported, goes on RUNNING."""
    async with rig(database_url, [batch_task(batch)], T0) as r:
        kept, forgotten = await started(r, 2)
        batch.reports = {forgotten: None}
        await poll_round(r, batch)
        await wait_for(lambda: r.status_is(forgotten, Status.FAILED))
        gone = await r.store.get_execution(forgotten)
        still = r.parts.held[kept]
    assert gone is not None and gone.reason is Reason.LOST
    assert still.status is Status.RUNNING and still.probe_failures == 0


@pytest.mark.parametrize(
    ("bad", "reason", "said"),
    [
        (answer(500, {"error": "busy"}), Reason.UNREACHABLE, 'HTTP 500: {"error": "busy"}'),
        (
            answer(404, {"error": "no such route"}),
            Reason.UNREACHABLE,
            'HTTP 404: {"error": "no such route"}',
        ),
        (answer(403, {"error": "no"}), Reason.UNREACHABLE, 'HTTP 403: {"error": "no"}'),
        (answer(200, text="<html>busy</html>"), Reason.PROTOCOL_ERROR, "HTTP 200, not a report"),
        (answer(200, {"status": "RUNNING"}), Reason.PROTOCOL_ERROR, "HTTP 200, not a report"),
        (answer(200, {"reports": [1, 2]}), Reason.PROTOCOL_ERROR, "HTTP 200, not a report"),
    ],
    ids=["500", "404", "403", "html-200", "no-reports", "reports-not-an-object"],
)
async def test_a_bad_batch_answer_is_a_failed_probe_for_every_id_in_it(
    database_url: str, batch: BatchService, bad: BatchAnswer, reason: Reason, said: str
) -> None:
    """Two bad answers in a row (max_probe_failures 2) end both executions in the call:
    unreachable after a non-2xx (a 404 too: the endpoint is missing, the ids are not
    unknown), protocol_error after a 2xx without a ``reports`` object; each one's message
    says what the batch poll's service answered (``batch poll answered HTTP 500:
    {"error": "busy"}``)."""
    async with rig(database_url, [batch_task(batch, max_probe_failures=2)], T0) as r:
        eids = await started(r, 2)
        batch.script = [bad, bad]
        first = await poll_round(r, batch)
        counted = [r.parts.held[eid].probe_failures for eid in eids]
        await poll_round(r, batch)
        ended = await r.settled("job", 2)
    assert [len(call.ids) for call in first] == [2]
    assert counted == [1, 1]
    assert [(e.status, e.reason, e.probe_failures) for e in ended] == [
        (Status.FAILED, reason, 2)
    ] * 2
    for e in ended:
        assert (e.message or "").startswith(
            f"2 failed probes in a row; last: batch poll answered {said}"
        )
    assert batch.per_id_polls == 0


async def test_a_malformed_report_in_the_map_fails_only_its_own_id(
    database_url: str, batch: BatchService
) -> None:
    """One report that is not a report (a string, an unknown status) is a protocol-error
    probe of that execution alone (max_probe_failures 1 ends it); the others in the same
    answer are applied as usual."""
    spec = batch_task(batch, max_probe_failures=1)
    async with rig(database_url, [spec], T0) as r:
        fine, stringy, weird = await started(r, 3)
        batch.reports = {stringy: "RUNNING", weird: {"status": "ALMOST"}}
        await poll_round(r, batch)
        await wait_for(lambda: r.status_is(weird, Status.FAILED))
        await wait_for(lambda: r.status_is(stringy, Status.FAILED))
        broken = [await r.store.get_execution(eid) for eid in (stringy, weird)]
        healthy = r.parts.held[fine]
    assert [(e.status, e.reason) for e in broken if e] == [
        (Status.FAILED, Reason.PROTOCOL_ERROR)
    ] * 2
    assert healthy.status is Status.RUNNING and healthy.probe_failures == 0


async def test_a_batch_call_is_signed_over_its_path_and_query_and_carries_the_task_headers(
    database_url: str, batch: BatchService
) -> None:
    """With a secret, the service's ``ecron.signing.verify`` accepts X-Ecron-Signature on
    every batch GET (target: the raw path with ``?query``, the batch_poll_url's own query
    kept before ``ids``); the task's own headers come along."""
    spec = batch_task(
        batch,
        secret=SECRET,
        headers={"X-Team": "data"},
        batch_poll_url=f"{batch.url}/batch/x?region=eu",
    )
    batch.secret = SECRET
    async with rig(database_url, [spec], T0) as r:
        batch.now = lambda: r.clock.now().timestamp()
        eids = await started(r, 3)
        calls = await poll_round(r, batch)
        calls += await poll_round(r, batch)
    assert [call.signed for call in calls] == [True, True]
    assert all(call.query["region"] == "eu" for call in calls)
    assert calls[0].target == "/batch/x?region=eu&ids=" + ",".join(calls[0].ids)
    assert sorted(calls[0].ids) == sorted(eids)
    assert calls[0].headers["X-Team"] == "data"


async def test_each_step_of_a_multi_step_task_is_polled_through_the_batch_under_its_remote_id(
    database_url: str, batch: BatchService
) -> None:
    """Two steps (each with its own url) inheriting the task's batch_poll_url: the batch
    asks about ``<eid>.1`` until step 1 succeeds, then about ``<eid>.2`` until it succeeds
    too; no per-id GET."""
    spec = TaskSpec.model_validate(
        {
            "name": "job",
            "schedule": "manual",
            "poll_interval": "10s",
            "batch_poll_url": f"{batch.url}/batch/x",
            "steps": [{"name": name, "url": f"{batch.url}/jobs/{name}"} for name in ("one", "two")],
        }
    )
    async with rig(database_url, [spec], T0) as r:
        (eid,) = await started(r, 1)
        asked = [(await poll_round(r, batch))[0].ids]
        batch.finish(f"{eid}.1")
        asked.append((await poll_round(r, batch))[0].ids)
        await wait_for(lambda: f"{eid}.2" in batch.service.jobs and r.engine.idle)
        asked.append((await poll_round(r, batch))[0].ids)
        batch.finish(f"{eid}.2")
        asked.append((await poll_round(r, batch))[0].ids)
        (ended,) = await r.settled("job", 1)
    assert asked == [[f"{eid}.1"], [f"{eid}.1"], [f"{eid}.2"], [f"{eid}.2"]]
    assert ended.status is Status.SUCCESS
    assert batch.per_id_polls == 0


async def test_batch_poll_reads_each_id_and_sends_no_per_execution_header(
    batch: BatchService,
) -> None:
    """``batch_poll`` on its own: a report, a missing id (UNKNOWN) and a malformed report
    (BAD_REPORT) in one answer, for a daemon with a public_url and a queue: no callback URL
    or token (they belong to one execution), the report stream (the daemon's), and the call
    is counted as ``call="batch_poll"``."""
    spec = batch_task(batch)
    call = spec.call(None)
    ctxs = [CallContext(rid, rid, "job", T0, None, 1) for rid in ("a", "b", "c")]
    batch.reports = {"a": {"status": "RUNNING", "progress": 5}, "c": {"progress": 1}}
    metrics = Metrics()
    async with Wire() as wire:
        caller = HttpCaller(
            wire,
            public_url="http://ecron.test",
            callback_secret="x",
            metrics=metrics,
            report_stream="ecron-reports",
        )
        outcomes = await batch_poll(caller, call, ctxs)
    kinds = {rid: outcome.kind for rid, outcome in outcomes.items()}
    assert kinds == {"a": OutcomeKind.REPORT, "b": OutcomeKind.UNKNOWN, "c": OutcomeKind.BAD_REPORT}
    assert outcomes["a"].report is not None and outcomes["a"].report.progress == 5
    (sent,) = batch.calls
    assert sent.ids == ["a", "b", "c"] and sent.query == {"ids": "a,b,c"}
    assert not any(name.startswith("X-Ecron-Callback") for name in sent.headers)
    assert sent.headers["X-Ecron-Report-Stream"] == "ecron-reports"
    count = metrics.registry.get_sample_value(
        "ecron_http_calls_total", {"call": CALL_NAME, "outcome": "report"}
    )
    assert count == 1


async def test_the_poll_that_settles_an_unknown_trigger_outcome_goes_through_the_batch(
    database_url: str, batch: BatchService
) -> None:
    """The trigger started the job but its answer never came (request_timeout 300ms): the
    poll ecron sends before anything else is a batch call naming that one execution, whose
    report continues it RUNNING; the job was started once and polled by no per-id GET."""
    batch.service.script["POST"] = [started_then_slow(batch.service, 1.0)]
    async with rig(database_url, [batch_task(batch, request_timeout="300ms")], T0) as r:
        (eid,) = await started(r, 1)
    assert [call.ids for call in batch.calls] == [[eid]]
    assert batch.service.starts == {eid: 1}
    assert batch.per_id_polls == 0


async def test_twenty_executions_started_over_a_second_are_polled_in_one_call_per_interval(
    database_url: str, batch: BatchService
) -> None:
    """PROTOCOL.md: "the executions of one task that ecron holds are polled together: once
    per poll_interval, one call asks about all of them that are running, whenever each was
    started". poll_interval 500 ms; 20 runs started 50 ms apart over a second (of the
    test's clock). Each one's first poll joins its task's next batch, never later than its
    own interval (up to one interval early); once all have started, every interval makes
    exactly one call, about all 20."""
    spec = batch_task(batch, poll_interval="500ms")
    step, interval = timedelta(milliseconds=50), timedelta(milliseconds=500)
    async with rig(database_url, [spec], T0) as r:
        eids = []
        for n in range(20):
            await r.start_due(T0 + n * step)
            eids += await started(r, 1)
        all_started = r.clock.now()
        while_starting = len(batch.calls)  # 950 ms: under two intervals
        rounds = []
        for n in range(1, 7):
            before = len(batch.calls)
            await r.start_due(all_started + n * interval)
            rounds.append(batch.calls[before:])
    assert while_starting == 1  # the first batch, at 500 ms, of those started by then
    assert all(len(calls) == 1 for calls in rounds), [len(calls) for calls in rounds]
    assert all(sorted(calls[0].ids) == sorted(eids) for calls in rounds)
    assert batch.per_id_polls == 0

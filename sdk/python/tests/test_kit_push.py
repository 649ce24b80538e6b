"""Pushed reports and log lines: where a trigger carries ``X-Ecron-Callback-Url``, the kit
POSTs the run's reports there (PROTOCOL.md, "Callbacks") and its log lines beside it ("Log
lines, pushed"), against a real stand-in for ecron on 127.0.0.1. Pushing is the same
whichever adapter took the trigger; these tests use aiohttp's."""

from __future__ import annotations

import asyncio
import json

import aiohttp
from kit_jobs import service_with_jobs
from kit_servers import call, receiving, serve, until

from ecron_service import Run, Service


async def test_running_reports_are_pushed_until_ecron_polls_and_the_final_report_always(
    session: aiohttp.ClientSession,
) -> None:
    """A run with a callback URL pushes its newest RUNNING report (with the bearer token)
    as it moves, and its SUCCESS at the end; a run that ecron polls is in a polled task:
    it pushes no RUNNING report after the poll, and its final report all the same."""
    service, _ = service_with_jobs(push_every=0.05)
    body = json.dumps({"steps": 6, "pause": 0.05}).encode()
    async with receiving() as ecron, serve(service, "aiohttp") as base:
        url = f"{base}/jobs/climb"
        await call(session, "POST", url, "pushed", body, **ecron.callback_headers("pushed"))
        await call(session, "POST", url, "polled", body, **ecron.callback_headers("polled"))
        await call(session, "GET", f"{url}/polled", "polled")
        await until(lambda: ecron.reports("pushed")[-1:] and ecron.reports("polled")[-1:])
        await until(lambda: ecron.reports("pushed")[-1]["status"] == "SUCCESS")
    pushed, polled = ecron.reports("pushed"), ecron.reports("polled")
    assert pushed[-1] == {
        "status": "SUCCESS",
        "progress": 100,
        "message": "step 6 of 6",
        "result": {"steps": 6},
    }
    running = [report["progress"] for report in pushed[:-1]]
    assert running and running == sorted(running) and 0 < running[0] < 100, pushed
    assert polled == [pushed[-1]]
    assert {p.authorization for p in ecron.pushed} == {
        "Bearer token-of-pushed",
        "Bearer token-of-polled",
    }


async def test_a_quiet_run_pushes_a_heartbeat_and_a_5xx_is_pushed_again(
    session: aiohttp.ClientSession,
) -> None:
    """A run whose report does not change still pushes it every ``heartbeat`` seconds (so
    that a callback task is not failed for silence); a push answered 503 is sent again."""
    service, _ = service_with_jobs(heartbeat=0.1)
    async with receiving() as ecron, serve(service, "aiohttp") as base:
        ecron.answers["report"] = [503]
        await call(
            session, "POST", f"{base}/jobs/waits", "quiet", **ecron.callback_headers("quiet")
        )
        await until(lambda: len(ecron.reports("quiet")) >= 3)
    assert ecron.reports("quiet")[:3] == [{"status": "RUNNING", "progress": 0}] * 3


async def test_a_409_to_a_pushed_report_stops_the_job_since_ecron_has_ended_the_execution(
    session: aiohttp.ClientSession,
) -> None:
    """ecron answers 409 to a report about an execution it has ended (timed out, cancelled,
    silent too long): the kit stops the job, ends the run FAILED, and pushes no more."""
    service, seen = service_with_jobs(heartbeat=0.05)
    async with receiving() as ecron, serve(service, "aiohttp") as base:
        ecron.answers["report"] = [409]
        url = f"{base}/jobs/waits"
        await call(session, "POST", url, "ended", **ecron.callback_headers("ended"))
        await until(lambda: seen.stopped == ["ended"])
        _, report, _ = await call(session, "GET", f"{url}/ended", "ended")
    assert report == {
        "status": "FAILED",
        "progress": 0,
        "message": "stopped: ecron had ended the execution",
    }
    assert len(ecron.reports("ended")) == 1


async def test_log_lines_are_pushed_in_order_and_stop_when_ecron_takes_none(
    session: aiohttp.ClientSession,
) -> None:
    """``run.log`` lines go to ``.../executions/{id}/logs`` as ``{"lines": [...]}`` with the
    callback token, every line once and in order, several a call; a 404 (a daemon without
    the endpoint) stops the pushing of that run's lines, not its job."""
    service = Service()
    bursts = {"gone": asyncio.Event(), "kept": asyncio.Event()}

    @service.job("chatty")
    async def chatty(run: Run) -> None:
        for n in range(300):
            if n == 150:
                await bursts[run.execution_id].wait()
            run.log(f"line {n} of {run.execution_id}")

    def log_calls(remote_id: str) -> int:
        return len([p for p in ecron.pushed if p.kind == "logs" and p.remote_id == remote_id])

    async with receiving() as ecron, serve(service, "aiohttp") as base:
        ecron.answers["logs"] = [404]
        url = f"{base}/jobs/chatty"
        await call(session, "POST", url, "gone", **ecron.callback_headers("gone"))
        await until(lambda: log_calls("gone") == 1)
        bursts["gone"].set()
        await until(
            lambda: ecron.reports("gone") and ecron.reports("gone")[-1]["status"] != "RUNNING"
        )
        await call(session, "POST", url, "kept", **ecron.callback_headers("kept"))
        await until(lambda: len(ecron.lines("kept")) == 150)
        bursts["kept"].set()
        await until(lambda: len(ecron.lines("kept")) == 300)
    assert ecron.lines("kept") == [f"line {n} of kept" for n in range(300)]
    assert 2 <= log_calls("kept") < 300
    assert {p.authorization for p in ecron.pushed if p.remote_id == "kept"} == {
        "Bearer token-of-kept"
    }
    assert log_calls("gone") == 1 and ecron.reports("gone")[-1]["status"] == "SUCCESS"


async def test_shutdown_ends_running_jobs_failed_interrupted_pushed_and_refuses_triggers(
    session: aiohttp.ClientSession,
) -> None:
    """``service.shutdown()`` (what SIGTERM and each adapter's stop call) stops every running
    job, pushes its run's FAILED report with ``interrupted: true`` (a polled run's too), and
    answers a new trigger 503 with ``Retry-After``; an ended run keeps its report."""
    service, seen = service_with_jobs()
    async with receiving() as ecron, serve(service, "aiohttp") as base:
        url = f"{base}/jobs/waits"
        await call(session, "POST", url, "e1", **ecron.callback_headers("e1"))
        await call(
            session, "POST", f"{base}/jobs/waits-thread", "e2", **ecron.callback_headers("e2")
        )
        await call(session, "GET", f"{base}/jobs/waits-thread/e2", "e2")
        await asyncio.to_thread(service.shutdown)
        await until(lambda: sorted(seen.stopped) == ["e1", "e2"])
        refused = await call(session, "POST", url, "e3")
    interrupted = {
        "status": "FAILED",
        "progress": 0,
        "message": "interrupted: the service is stopping",
        "interrupted": True,
    }
    assert ecron.reports("e1") == ecron.reports("e2") == [interrupted]
    assert refused[0] == 503 and refused[2]["Retry-After"] == "1"

"""Seeing what ecron does: Prometheus metrics, structured logs with bound context and no
secrets, and alert webhooks that never hold the scheduler back."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from ecron import logs
from ecron.daemon import Daemon
from ecron.signing import callback_token, verify
from tests.protocol_support import ended, reply, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.processes import finished
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Observability does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


async def scrape(daemon: Daemon) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{daemon.port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return await response.text()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, parsed by prometheus-client's own parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_are_scraped_from_a_live_daemon_and_make_sense(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """After 3 SUCCESS and 1 FAILED executions, /metrics (parsed with prometheus-client's
    parser) counts them by task, status and reason, times them, counts the HTTP calls by
    call and outcome, and shows nothing in flight."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "no"})]
    spec = task("m", f"{user_service.url}/jobs/x", concurrency="allow")
    async with make_daemon([spec]) as daemon:
        eids = [await run_once(daemon, "m") for _ in range(4)]
        for eid in eids:
            await ended(daemon, eid)
        await wait_for(lambda: not daemon.parts.held, timeout=5)
        text = await scrape(daemon)
    found = samples(text)
    finished = "ecron_executions_finished_total"
    assert value(found, finished, task="m", status="SUCCESS", reason="") == 3
    assert value(found, finished, task="m", status="FAILED", reason="remote_failed") == 1
    assert value(found, "ecron_execution_duration_seconds_count", task="m") == 4
    assert value(found, "ecron_trigger_lag_seconds_count", task="m") == 4
    assert value(found, "ecron_http_calls_total", call="trigger", outcome="report") == 4
    assert value(found, "ecron_http_calls_total", call="poll", outcome="report") >= 3
    assert value(found, "ecron_http_call_duration_seconds_count", call="trigger") == 4
    assert value(found, "ecron_executions_in_flight") == 0
    assert value(found, "ecron_db_operation_seconds_count", operation="write") > 4
    assert value(found, "ecron_poll_lateness_seconds_count") >= 3
    assert all("execution_id" not in dict(labels) for _, labels in found)


@pytest.mark.skipif(
    shutil.which("promtool") is None and os.environ.get("CI") != "true",
    reason="promtool (Debian package prometheus) is not installed",
)
async def test_a_scrape_passes_promtool_check_metrics(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """`promtool check metrics` finds nothing wrong with a scrape (names, help, units)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "CI must have promtool (apt-get install prometheus)"
    user_service.duration = 0.05
    async with make_daemon([task("m", f"{user_service.url}/jobs/x")]) as daemon:
        await ended(daemon, await run_once(daemon, "m"))
        text = await scrape(daemon)
    process = await asyncio.create_subprocess_exec(
        promtool,
        "check",
        "metrics",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await finished(process, timeout=30, input=text.encode())
    assert process.returncode == 0, output.decode()


async def test_log_lines_about_an_execution_carry_its_context_and_it_ends_with_one_canonical_line(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Lines logged while driving an execution (a retried trigger, a failed poll, status
    changes) carry task, execution_id, attempt and node; exactly one execution_finished line
    gives status, reason, duration, attempt and trigger lag."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(503)]
    user_service.script["GET"] = [reply(500)]
    spec = task(
        "ctx", f"{user_service.url}/jobs/x", trigger_retry={"attempts": 3, "backoff": "10ms"}
    )
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as captured:
        async with make_daemon([spec]) as daemon:
            eid = await run_once(daemon, "ctx")
            stored = await ended(daemon, eid)
    about = [e for e in captured if e.get("execution_id") == eid]
    by_event = {e["event"]: e for e in about}
    for event in ("trigger_retry", "poll_failed", "execution_status_changed"):
        assert event in by_event, event
        line = by_event[event]
        assert (line["task"], line["attempt"], line["node"]) == ("ctx", 1, daemon.node_id)
    retry = by_event["trigger_retry"]
    assert retry["attempts_left"] == 2 and retry["log_level"] == "warning"
    assert by_event["poll_failed"]["attempts_left"] == 4
    [end] = [e for e in about if e["event"] == "execution_finished"]
    assert end["status"] == "SUCCESS" and end["reason"] is None
    # the line's figures are the stored run's, not numbers clamped to zero: the service
    # held the run 0.1 s at least, and the lag is from the moment asked to the first call
    assert stored.triggered_at is not None and stored.finished_at is not None
    took = (stored.finished_at - stored.triggered_at).total_seconds()
    lag = (stored.triggered_at - stored.scheduled_at).total_seconds()
    assert end["duration_seconds"] >= 0.1
    assert end["duration_seconds"] == pytest.approx(took, abs=0.002)
    assert end["trigger_lag_seconds"] == pytest.approx(lag, abs=0.002)
    assert end["attempt"] == 1 and end["log_level"] == "info"


async def test_no_secret_value_appears_in_any_log_line(
    make_daemon: DaemonFactory, user_service: UserService, json_logs: io.StringIO
) -> None:
    """Header values, signing secrets, the API token, callback tokens and signatures never
    show in the logs, even in details of failures that quote them."""
    header_secret = "Bearer hdr-s3cret-0123456789"
    user_service.duration = 0.1

    async def echo_back(request: web.Request) -> web.StreamResponse | None:
        if request.method == "GET":  # a service that quotes our own headers in its answer
            quoted = request.headers.get("Authorization", "") + request.headers.get(
                "X-Ecron-Signature", ""
            )
            return web.Response(status=200, text=f"<html>{quoted}</html>")
        return None

    user_service.behaviour = echo_back
    spec = task(
        "secretive",
        f"{user_service.url}/jobs/x",
        headers={"Authorization": header_secret},
        secret="sign-s3cret-abcdef",
        max_probe_failures=2,
    )
    async with make_daemon(
        [spec],
        api_token="api-t0ken-xyz-0123456789",
        secret="cb-s3cret-987",
        public_url="http://ecron.test",
    ) as daemon:
        eid = await _run(daemon)
        execution = await ended(daemon, eid)
    text = json_logs.getvalue()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert execution.status.value == "FAILED" and len(lines) > 5
    token = user_service.calls_for(eid, "POST")[0].headers["X-Ecron-Callback-Token"]
    signature = user_service.calls_for(eid, "POST")[0].headers["X-Ecron-Signature"]
    for secret in (
        "hdr-s3cret-0123456789",
        "sign-s3cret-abcdef",
        "api-t0ken-xyz-0123456789",
        "cb-s3cret-987",
        token,
        signature.split("v1=")[1],
    ):
        assert secret not in text, secret
    assert "protocol_error" in text  # the failure itself is logged, with its secrets hidden


async def _run(daemon: Daemon) -> str:
    """Run the one task through the API, with the API token."""
    headers = {"Authorization": "Bearer api-t0ken-xyz-0123456789"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{daemon.port}/api/v1/tasks/secretive/run", headers=headers
        ) as response,
    ):
        assert response.status == 202
        eid: str = (await response.json())["id"]
        return eid


class Receiver:
    """A webhook receiver on 127.0.0.1 that records alerts (and can refuse some first)."""

    def __init__(self, fail_first: int = 0) -> None:
        self.alerts: list[tuple[dict[str, Any], dict[str, str], bytes]] = []
        self.fail_first = fail_first
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.fail_first > 0:
            self.fail_first -= 1
            return web.Response(status=503)
        self.alerts.append((json.loads(body), dict(request.headers), body))
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> Any:
    hook = Receiver(fail_first=1)
    app = web.Application()
    app.router.add_post("/alerts", hook.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/alerts"  # type: ignore[union-attr]
    yield hook
    await runner.cleanup()


async def test_a_webhook_gets_exactly_one_signed_alert_per_failing_execution(
    make_daemon: DaemonFactory, user_service: UserService, receiver: Receiver
) -> None:
    """Two FAILED and one TIMED_OUT execution, one SUCCESS: three alerts (the first delivery
    refused once and retried), each signed with the webhook's secret, none for the success."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(200, {"status": "FAILED"})] * 2
    hooks = {
        "webhooks": [{"url": receiver.url, "secret": "hook-secret"}],
        "retry": {"attempts": 3, "backoff": "50ms"},
    }
    spec = task("alerting", f"{user_service.url}/jobs/x", concurrency="allow")
    slow = task("slow", f"{user_service.url}/jobs/slow", task_timeout="300ms")
    async with make_daemon([spec, slow], notify=hooks) as daemon:
        failing = [await run_once(daemon, "alerting") for _ in range(2)]
        user_service.durations["slow"] = 3600
        timing_out = await run_once(daemon, "slow")
        fine = await run_once(daemon, "alerting")
        for eid in [*failing, timing_out, fine]:
            await ended(daemon, eid)
        await wait_for(lambda: len(receiver.alerts) >= 3, timeout=10)
    # The stop delivers every alert still queued: one too many would be in by now.
    kinds = sorted((a["event"], a["execution"]["id"]) for a, _, _ in receiver.alerts)
    assert kinds == sorted(
        [
            ("execution_failed", failing[0]),
            ("execution_failed", failing[1]),
            ("execution_timed_out", timing_out),
        ]
    )
    for alert, headers, body in receiver.alerts:
        assert verify("hook-secret", headers["X-Ecron-Signature"], "POST", "/alerts", body)
        assert alert["task"] in ("alerting", "slow") and alert["node"] == daemon.node_id


async def test_an_alert_queued_as_the_daemon_stops_is_still_delivered(
    make_daemon: DaemonFactory, user_service: UserService, receiver: Receiver
) -> None:
    """The daemon stops right after an alert is queued, and the webhook refuses its first
    delivery: the stop waits (boundedly) for the retry, and the alert arrives."""
    hooks = {"webhooks": [{"url": receiver.url}], "retry": {"attempts": 3, "backoff": "200ms"}}
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")], notify=hooks) as daemon:
        daemon.notifier.event("execution_failed", "a", daemon.clock.now(), reason="test")
    assert receiver.fail_first == 0  # the first delivery was refused
    assert [(a["event"], a["task"]) for a, _, _ in receiver.alerts] == [("execution_failed", "a")]


async def test_a_dead_webhook_receiver_does_not_delay_the_next_fire_time(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Every execution fails and the webhook never answers: fire times of an every-1s task
    still leave on time (trigger lag stays small). On a clock the test moves a second at a
    time: each fire time is triggered at its time while the alerts of all before it hang."""

    released = asyncio.Event()

    async def black_hole(_request: web.Request) -> web.Response:
        await released.wait()  # never answers while the test runs
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/alerts", black_hole)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def every_run_fails(request: web.Request) -> web.Response | None:
        return web.json_response({"status": "FAILED"}) if request.method == "POST" else None

    user_service.behaviour = every_run_fails
    hooks = {"webhooks": [{"url": f"http://127.0.0.1:{port}/alerts", "timeout": "30s"}]}
    spec = task("tick", f"{user_service.url}/jobs/x", schedule={"every": "1s"})
    clock = FakeClock(T0 - timedelta(milliseconds=500))  # the first fire time is T0
    try:
        async with make_daemon([spec], notify=hooks, clock=clock) as daemon:
            for second in range(4):
                triggered = len(user_service.calls)
                clock.set(T0 + timedelta(seconds=second))
                await wait_for(lambda n=triggered: len(user_service.calls) > n, timeout=5)
                # its FAILED recorded (its alert queued) before the next fire time is due: a
                # run still PENDING then would make the next one SKIPPED (overlap)
                await ended(daemon, user_service.calls[-1].eid, timeout=5)
            lags = [(await daemon.store.get_execution(c.eid)) for c in user_service.calls[:4]]
            released.set()  # the alerts may end now: the node need not wait for them to stop
    finally:
        released.set()
        await runner.cleanup()
    for execution in lags:
        assert execution is not None and execution.triggered_at is not None
        assert (execution.triggered_at - execution.scheduled_at).total_seconds() < 0.5


async def test_no_failure_alert_for_an_interrupted_execution_that_is_resumed_automatically(
    make_daemon: DaemonFactory, user_service: UserService, receiver: Receiver
) -> None:
    """Alerts are for failures that stay failures: an interrupted execution of an idempotent
    task with resume.auto is resumed (and succeeds) without an execution_failed alert."""
    receiver.fail_first = 0
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "interrupted": True})]
    spec = task("resumed", f"{user_service.url}/jobs/x", idempotent=True, resume={"auto": True})
    hooks = {"webhooks": [{"url": receiver.url}]}
    async with make_daemon([spec], notify=hooks, patrol_interval="200ms") as daemon:
        eid = await run_once(daemon, "resumed")
        await ended(daemon, eid)
        resumed = await wait_for(lambda: daemon.store.resumes_of([eid]), timeout=10)
        done = await ended(daemon, resumed[eid])
    # The stop delivers every alert still queued: a failure alert would be in by now.
    assert done.status.value == "SUCCESS"
    assert receiver.alerts == []


async def test_readiness_says_unready_when_the_scheduler_loop_stalls_and_liveness_does_not(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """/readyz answers 503 naming the scheduler when its loop has not gone round within the
    bound; /healthz (the process is alive) still answers 200."""
    async with (
        make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon,
        aiohttp.ClientSession() as session,
    ):
        base = f"http://127.0.0.1:{daemon.port}"
        async with session.get(f"{base}/readyz") as response:
            ready = response.status
        daemon.scheduler.claiming = False
        for loop in daemon._loops:
            if loop.get_name() == "ecron-scheduler":
                loop.cancel()
        await asyncio.sleep(0)
        daemon.scheduler.last_tick = daemon.clock.now() - timedelta(minutes=5)
        async with session.get(f"{base}/readyz") as response:
            stalled, body = response.status, await response.json()
        async with session.get(f"{base}/healthz") as response:
            alive = response.status
    assert (ready, stalled, alive) == (200, 503, 200)
    assert any("scheduler" in problem for problem in body["problems"])


async def test_an_event_loop_held_up_shows_in_the_loop_lag_histogram(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The daemon's event loop held for 0.8 s by a blocking call (what a CPU-bound step or a
    synchronous read does) shows in ``ecron_event_loop_lag_seconds``: a sample over 0.5 s
    more than before (the sampler's 0.1 s timer fires at least 0.7 s late)."""

    async def late_samples(daemon: Daemon) -> float:
        found = samples(await scrape(daemon))
        count = value(found, "ecron_event_loop_lag_seconds_count")
        return count - value(found, "ecron_event_loop_lag_seconds_bucket", le="0.5")

    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        sampled = "ecron_event_loop_lag_seconds_count"
        await wait_for(lambda: _scraped_value(daemon, sampled), timeout=5)
        before = await late_samples(daemon)
        # The stimulus: the daemon's loop (in this process) is held.
        time.sleep(0.8)  # noqa: ASYNC251
        after = await wait_for(
            lambda: _more_than(late_samples(daemon), before), timeout=5, interval=0.05
        )
    assert after >= before + 1


async def _scraped_value(daemon: Daemon, name: str) -> float:
    return value(samples(await scrape(daemon)), name)


async def _more_than(reading: Any, floor: float) -> float | None:
    got = float(await reading)
    return got if got > floor else None


def test_library_log_lines_come_out_in_the_same_format_and_redacted(
    json_logs: io.StringIO,
) -> None:
    """A warning logged by a library through the standard logging module is a JSON line
    naming its logger, with registered secrets hidden."""
    logs.hide(["lib-s3cret-value"])
    logging.getLogger("aiohttp.client").warning("retrying with lib-s3cret-value")
    [line] = [json.loads(x) for x in json_logs.getvalue().splitlines()]
    assert line["logger"] == "aiohttp.client" and line["level"] == "warning"
    assert line["event"] == "retrying with ***"


async def test_callbacks_are_counted_by_the_status_they_got_even_a_refused_oversized_body(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """ecron_callbacks_total counts each callback by its answer: a 404, and a 413 for a body
    over the 1 MiB limit (not a 500)."""
    user_service.duration = 60
    spec = task("cb", f"{user_service.url}/jobs/x")
    async with make_daemon([spec], public_url="http://ecron.test") as daemon:
        eid = await run_once(daemon, "cb")
        await wait_for(lambda: user_service.calls_for(eid, "POST"), timeout=5)
        token = user_service.calls_for(eid, "POST")[0].headers["X-Ecron-Callback-Token"]
        base = f"http://127.0.0.1:{daemon.port}/api/v1/executions"
        async with aiohttp.ClientSession() as session:
            nope = {"Authorization": f"Bearer {callback_token(daemon.callback_secret, 'nope')}"}
            async with session.post(
                f"{base}/nope/report", json={"status": "RUNNING"}, headers=nope
            ) as r:  # unknown: 404, whatever the token
                missing = r.status
            body = io.BytesIO(b"x" * (2 * 1024 * 1024))
            headers = {"Authorization": f"Bearer {token}"}
            async with session.post(f"{base}/{eid}/report", data=body, headers=headers) as r:
                too_big = r.status
        found = samples(await scrape(daemon))
    assert (missing, too_big) == (404, 413)
    assert value(found, "ecron_callbacks_total", answer="404") == 1
    assert value(found, "ecron_callbacks_total", answer="413") == 1
    assert value(found, "ecron_callbacks_total", answer="500") == 0

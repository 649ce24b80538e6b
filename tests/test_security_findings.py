"""The findings of the security review of issue 22, first part (S6, S9, S5, S8, S7: what
ecron sends and reads), each shown fixed against the real thing: a daemon on SQLite,
real aiohttp services on 127.0.0.1. The rest are in test_security_findings_server.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from textwrap import dedent
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner

import ecron.cli.validate  # noqa: F401  (registers the command)
from ecron.cli import cli
from ecron.config.model import TaskSpec
from ecron.core import Execution, Status, WaitingFor
from ecron.daemon import Daemon
from ecron.executor.http import classify
from ecron.signing import callback_token, signature, verify
from tests.protocol_support import ended, reply, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.faulty import answering as receiving
from tests.support.faulty import endless_body
from tests.support.service import UserService, wait_for

SECRET = "s3cret"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """These findings do not depend on the database: SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


# S6: the signature binds the execution id (v2).


async def test_a_captured_signed_trigger_replayed_under_another_execution_id_fails_v2(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Every signed call carries v2 over "<t>.<METHOD>.<target>.<X-Ecron-Execution-Id>.<body>":
    the captured trigger verifies under its own execution id, and the same signature, path
    and body sent with another X-Ecron-Execution-Id does not."""
    user_service.duration = 0.05
    spec = task("job", f"{user_service.url}/jobs/x", secret=SECRET, body={"n": 1})
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid, "POST"), timeout=5)
    captured = user_service.calls_for(eid, "POST")[0]
    header = captured.headers["X-Ecron-Signature"]
    assert ",v2=" in header
    sent = captured.headers["X-Ecron-Execution-Id"]
    assert verify(SECRET, header, "POST", captured.path, captured.body, execution_id=sent)
    replayed = "0" * 26
    assert not verify(SECRET, header, "POST", captured.path, captured.body, execution_id=replayed)


def test_v2_is_the_hmac_of_time_method_target_execution_id_and_body() -> None:
    """v2=<hex HMAC-SHA256(secret, "<t>.<METHOD>.<target>.<eid>.<body>")>, beside v1; a call
    with no single execution id (a batch poll) signs an empty one."""
    import hashlib
    import hmac

    header = signature("k", "post", "/jobs/x", b"{}", 1700000000, execution_id="e1")
    v2 = hmac.new(b"k", b"1700000000.POST./jobs/x.e1.{}", hashlib.sha256).hexdigest()
    assert header.endswith(f",v2={v2}") and ",v1=" in header
    batch = signature("k", "GET", "/b?ids=a,b", b"", 1700000000)
    assert verify("k", batch, "GET", "/b?ids=a,b", b"", now=1700000000, execution_id="")


# S9: a malformed or huge Retry-After.


@pytest.mark.parametrize("value", ["²", "٣", "1e9", "-5", "12 34", "Fri, 99 Dec 9999"])
async def test_a_malformed_retry_after_is_ignored_and_the_trigger_is_retried(
    make_daemon: DaemonFactory, user_service: UserService, value: str
) -> None:
    """A 429 whose Retry-After is neither ASCII digits nor an HTTP date (a superscript two,
    an Arabic three, an exponent, a sign, a broken date) neither raises nor holds the
    service back: it is a plain 429, retried under trigger_retry, and the execution runs to
    its end."""

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({}, status=429, headers={"Retry-After": value})

    user_service.script["POST"] = [refuse]
    user_service.duration = 0.05
    retry = {"attempts": 3, "backoff": "10ms", "max_backoff": "10ms"}
    spec = task("job", f"{user_service.url}/jobs/x", trigger_retry=retry)
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")
        done = await ended(daemon, eid)
    assert done.status is Status.SUCCESS
    assert user_service.methods_for(eid)[:2] == ["POST", "POST"]


def test_a_retry_after_is_capped_at_one_hour() -> None:
    """Seconds or an HTTP date further than MAX_RETRY_AFTER (an hour) away wait an hour."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for far in ("99999999", "9" * 400):
        answer = classify(429, b"", False, {"Retry-After": far}, lambda: now)
        assert answer.retry_after == 3600.0
    date = {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}
    assert classify(503, b"", False, date, lambda: now).retry_after == 3600.0
    assert classify(503, b"", False, {"Retry-After": "120"}, lambda: now).retry_after == 120.0


async def test_a_retry_after_of_400_digits_holds_the_service_back_for_an_hour_at_most(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Retry-After: 400 nines is digits, so back-pressure, capped at an hour: the trigger
    does not raise and is not sent again; the execution waits, to be triggered again
    within the hour."""

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({}, status=429, headers={"Retry-After": "9" * 400})

    user_service.behaviour = refuse
    spec = task("job", f"{user_service.url}/jobs/x")
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")

        async def held() -> Execution | None:
            execution = await daemon.store.get_execution(eid)
            waiting = execution is not None and execution.waiting_for == WaitingFor.RETRY_AFTER
            return execution if waiting else None

        execution = await wait_for(held, timeout=5)
    assert execution.not_before is not None
    assert execution.not_before <= datetime.now(UTC) + timedelta(hours=1)
    assert user_service.methods_for(eid) == ["POST"]


# S5: alert webhooks follow no redirect and read a bounded answer.


async def test_a_webhook_that_redirects_is_a_failed_delivery_and_the_target_gets_nothing(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A webhook answering 307 to another URL is not followed: the other URL receives
    neither the alert nor its headers and signature, and the delivery counts as failed."""
    stolen: list[dict[str, str]] = []

    async def redirect(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "/stolen"})

    async def steal(request: web.Request) -> web.StreamResponse:
        stolen.append(dict(request.headers))
        return web.Response(status=204)

    async with receiving({"alerts": redirect, "stolen": steal}) as base:
        hook = {"url": f"{base}/alerts", "secret": "hook-secret", "headers": {"X-Key": "k"}}
        hooks = {"webhooks": [hook], "retry": {"attempts": 1}}
        async with make_daemon([task("a", f"{user_service.url}/jobs/x")], notify=hooks) as daemon:
            daemon.notifier.event("execution_failed", "a", daemon.clock.now(), reason="test")
            await wait_for(lambda: alerts_counted(daemon, "failed") or stolen, timeout=10)
    assert stolen == []
    assert alerts_counted(daemon, "failed") == 1


async def test_a_webhook_answer_is_read_up_to_a_cap_not_to_its_end(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A receiver that answers 200 with a body that never ends costs a bounded read: the
    delivery ends (sent, the receiver said 2xx) long before the webhook's timeout."""
    async with receiving({"alerts": endless_body()}) as base:
        hooks = {
            "webhooks": [{"url": f"{base}/alerts", "timeout": "60s"}],
            "retry": {"attempts": 1},
        }
        async with make_daemon([task("a", f"{user_service.url}/jobs/x")], notify=hooks) as daemon:
            daemon.notifier.event("execution_failed", "a", daemon.clock.now(), reason="test")
            await wait_for(lambda: alerts_counted(daemon, "sent"), timeout=10)


def alerts_counted(daemon: Daemon, outcome: str) -> float:
    """Alerts of the daemon counted with ``outcome``."""
    labels = {"event": "execution_failed", "outcome": outcome}
    return daemon.metrics.registry.get_sample_value("ecron_alerts_total", labels) or 0.0


# S8: header names and values that would split a request.


def validate(directory: Path, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """``ecron validate -c DIR``: its exit code and everything it printed."""
    result = CliRunner().invoke(cli, ["validate", "-c", str(directory)], env=environ or {})
    return result.exit_code, result.stdout + result.stderr


def test_validate_refuses_header_names_and_values_with_cr_lf_or_nul(tmp_path: Path) -> None:
    """A header value holding CR, LF or NUL (written in YAML, or brought in by ${VAR}), or a
    name that is not an HTTP token, in a task, a step or a webhook, is a config error naming
    the file, the task and the field, and quoting no value (header values are secrets)."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text(
        "notify:\n  webhooks:\n    - {url: 'http://h/a', headers: {X-Hook: \"v\\nX-Evil: 1\"}}\n"
    )
    (tmp_path / "tasks" / "t.yaml").write_text(
        dedent("""\
        tasks:
          - name: t
            schedule: manual
            headers: {X-Crlf: "secret-a\\r\\nX-Evil: 1", X-Env: "${SPLIT}", "Bad Name": ok}
            steps: [{name: a, url: "http://s/a", headers: {X-Nul: "secret-b\\u0000"}}]
        """)
    )
    code, printed = validate(tmp_path, {"SPLIT": "secret-c\rX-Evil: 1"})
    assert code == 1, printed
    assert "ecron.yaml: field 'notify.webhooks[1].headers.X-Hook'" in printed, printed
    for field in ("headers.X-Crlf", "headers.X-Env", "headers.Bad Name", "steps[1].headers.X-Nul"):
        assert f"tasks/t.yaml: task 't': field '{field}'" in printed, (field, printed)
    assert "secret-" not in printed and "X-Evil" not in printed


# S7: a step's callback is answered with that step alone.


async def post_report(
    daemon: Daemon, remote_id: str, body: dict[str, Any], token: str
) -> tuple[int, Any]:
    """POST a callback report about ``remote_id`` with ``token``, as a user service would."""
    url = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{remote_id}/report"
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as response,
    ):
        return response.status, await response.json()


async def test_a_steps_callback_is_answered_with_that_steps_own_status_only(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Step 1 ended SUCCESS with a message and a result of its own; step 2's service
    reports RUNNING by callback: the answer (200), and the 409 once step 2 has ended, show
    step 2's status, progress and message and nothing of step 1."""
    user_service.durations = {"one": 0.0, "two": 3600}
    user_service.script["POST"] = [
        reply(200, {"status": "SUCCESS", "message": "one-private", "result": {"k": "one-only"}})
    ]
    spec = TaskSpec.model_validate(
        {
            "name": "two-steps",
            "schedule": "manual",
            "poll_interval": "1h",
            "steps": [
                {"name": "first", "url": f"{user_service.url}/jobs/one"},
                {"name": "second", "url": f"{user_service.url}/jobs/two"},
            ],
        }
    )
    async with make_daemon([spec], public_url="http://ecron.test") as daemon:
        eid = await run_once(daemon, "two-steps")
        second = f"{eid}.2"
        await wait_for(lambda: user_service.calls_for(second, "POST"), timeout=5)
        token = callback_token(daemon.callback_secret, second)
        report = {"status": "RUNNING", "progress": 40, "message": "two at 40"}
        status, answer = await post_report(daemon, second, report, token)
        done, _ = await post_report(daemon, second, {"status": "SUCCESS"}, token)
        late, conflict = await post_report(daemon, second, {"status": "FAILED"}, token)
    assert (status, done, late) == (200, 200, 409)
    for shown in (answer, conflict):
        assert "one-private" not in json.dumps(shown) and "one-only" not in json.dumps(shown)
    assert (answer["status"], answer["progress"], answer["message"]) == ("RUNNING", 40, "two at 40")
    assert [step["remote_id"] for step in answer["steps"]] == [second]
    assert [step["remote_id"] for step in conflict["detail"]["steps"]] == [second]

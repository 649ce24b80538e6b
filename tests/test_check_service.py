"""`ecron check-service URL`: a checklist of the protocol's rules, run against real user
services on 127.0.0.1: the example service passes it; each way of breaking the protocol
fails the rule that names it; and nothing the check started is left running."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from ecron.cli import cli
from ecron.cli.checklist import RULES, restarted
from ecron.core import RemoteStatus, Report
from tests.support.check_service import (
    DURATION,
    PACE,
    check,
    detail,
    job_service,
    running,
    serving,
    verdicts,
)
from tests.support.processes import finished

SECRET = "check-secret"


class StartsTwice(job_service.JobService):  # type: ignore[name-defined,misc]
    """Forgets idempotency: every trigger starts the work anew, even for an eid it has seen
    (the job started before keeps running until the eid is cancelled)."""

    def __init__(self, duration: float) -> None:
        super().__init__(duration)
        self.earlier: list[Any] = []
        self.starts = 0

    async def trigger(self, request: web.Request) -> web.Response:
        key = (request.match_info["kind"], request.headers.get("X-Ecron-Execution-Id", ""))
        old = self.jobs.pop(key, None)
        if old is not None:
            self.earlier.append(old)
        self.starts += 1
        response: web.Response = await super().trigger(request)
        return response

    async def cancel(self, request: web.Request) -> web.Response:
        for job in self.earlier:
            if job.eid == request.match_info["eid"]:
                job.finish("FAILED", "cancelled")
                job.runner.cancel()
                await asyncio.wait({job.runner})
        response: web.Response = await super().cancel(request)
        return response


class KnowsEveryEid(job_service.JobService):  # type: ignore[name-defined,misc]
    """Makes up a report for an eid it never saw, instead of 404."""

    async def poll(self, request: web.Request) -> web.Response:
        if (request.match_info["kind"], request.match_info["eid"]) not in self.jobs:
            return web.json_response({"status": "RUNNING", "progress": 0})
        response: web.Response = await super().poll(request)
        return response


class RejectsTriggers(job_service.JobService):  # type: ignore[name-defined,misc]
    """Refuses every trigger with a 422."""

    async def trigger(self, request: web.Request) -> web.Response:
        return web.json_response({"error": "'region' is required"}, status=422)


class HangsOnPolls(job_service.JobService):  # type: ignore[name-defined,misc]
    """Never answers a poll (until the test releases it at the end)."""

    def __init__(self, duration: float) -> None:
        super().__init__(duration)
        self.release = asyncio.Event()

    async def poll(self, request: web.Request) -> web.Response:
        await self.release.wait()
        response: web.Response = await super().poll(request)
        return response


@pytest.fixture(autouse=True)
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's jobs move in 100 steps (instead of 20), so that a long job moves soon."""
    monkeypatch.setattr(job_service, "TICKS", 100)


async def test_the_example_service_passes_every_rule_and_is_left_with_nothing_running() -> None:
    """Against examples/job_service.py every rule passes, the exit code is 0, and the job the
    check started has been cancelled (its work stopped) when the command returns."""
    service = job_service.JobService(DURATION)
    async with serving(service) as url:
        code, checklist = await check(url)
        assert running(service) == []
    assert code == 0, checklist
    assert verdicts(checklist) == dict.fromkeys(RULES, "pass")
    assert checklist["passed"] is True
    assert [job.eid for job in service.jobs.values()] == [checklist["execution_id"]]
    assert "cancelled" in detail(checklist, "stopped-after-cancel")


async def test_a_service_that_starts_work_again_on_a_repeated_trigger_fails_idempotency() -> None:
    """A repeated trigger that starts the work anew (its progress back at the start) fails
    `nothing-started-twice`; both jobs are cancelled all the same."""
    service = StartsTwice(DURATION)
    async with serving(service) as url:
        code, checklist = await check(url)
        assert running(service) == []
    assert code == 1 and checklist["passed"] is False
    assert verdicts(checklist)["nothing-started-twice"] == "fail", checklist
    assert "started the work again" in detail(checklist, "nothing-started-twice")
    assert service.starts == 2
    failed = {rule for rule, verdict in verdicts(checklist).items() if verdict == "fail"}
    assert failed == {"nothing-started-twice"}


async def test_a_service_that_claims_to_know_an_eid_it_never_saw_fails_the_unknown_rule() -> None:
    """A 200 RUNNING for an eid never triggered fails `unknown-poll`, saying it made up a
    report; the rules about the real execution still pass."""
    service = KnowsEveryEid(DURATION)
    async with serving(service) as url:
        code, checklist = await check(url)
        assert running(service) == []
    assert code == 1
    assert verdicts(checklist)["unknown-poll"] == "fail"
    assert "made up a report for an eid it never saw" in detail(checklist, "unknown-poll")
    assert verdicts(checklist)["trigger"] == verdicts(checklist)["cancel"] == "pass"


async def test_a_service_that_rejects_triggers_fails_the_trigger_rule() -> None:
    """A 422 to the trigger fails `trigger` naming the status and what ecron would do; the
    rules about the execution are skipped, the unknown-eid rules still run."""
    service = RejectsTriggers(DURATION)
    async with serving(service) as url:
        code, checklist = await check(url)
    assert code == 1
    found = verdicts(checklist)
    assert found["trigger"] == "fail"
    assert "HTTP 422" in detail(checklist, "trigger") and "rejected" in detail(checklist, "trigger")
    assert {found[rule] for rule in ("poll", "repeat-trigger", "cancel")} == {"skip"}
    assert found["unknown-poll"] == found["unknown-cancel"] == "pass"
    assert service.jobs == {}


async def test_a_signing_service_fails_without_the_secret_and_passes_with_it() -> None:
    """A service that wants X-Ecron-Signature answers 401 to unsigned calls: `trigger` fails
    and suggests --secret. With the right --secret every rule passes: the calls are signed
    as ecron signs them."""
    unsigned, signed = job_service.JobService(DURATION), job_service.JobService(DURATION)
    async with serving(unsigned, secret=SECRET) as url:
        code, checklist = await check(url)
    assert code == 1
    assert verdicts(checklist)["trigger"] == "fail"
    assert "HTTP 401" in detail(checklist, "trigger")
    assert "pass --secret" in detail(checklist, "trigger")
    assert unsigned.jobs == {}
    async with serving(signed, secret=SECRET) as url:
        code, checklist = await check(url, "--secret", SECRET)
        assert running(signed) == []
    assert code == 0, checklist
    assert verdicts(checklist) == dict.fromkeys(RULES, "pass")


async def test_a_service_that_never_answers_polls_fails_within_the_call_timeout() -> None:
    """With `--timeout 300ms`, polls that never come back fail `poll` (and `unknown-poll`)
    as no answer within 0.3 s, rather than hanging the command; the job is still cancelled."""
    service = HangsOnPolls(DURATION)
    async with serving(service) as url:
        try:
            code, checklist = await asyncio.wait_for(check(url, "--timeout", "300ms"), 20)
            assert running(service) == []
        finally:
            service.release.set()
    assert code == 1
    assert verdicts(checklist)["poll"] == verdicts(checklist)["unknown-poll"] == "fail"
    assert "no answer within 0.3s" in detail(checklist, "poll")
    assert verdicts(checklist)["cancel"] == "pass"


async def test_the_printed_checklist_names_each_rule_with_its_verdict_and_why() -> None:
    """Without --json the command prints one line per rule (`FAIL nothing-started-twice`),
    what was seen, and a closing count; the exit code is 1."""
    service = StartsTwice(DURATION)
    async with serving(service) as url:
        command = ["check-service", url, *PACE]
        env = {"COLUMNS": "200"}
        result = await asyncio.to_thread(CliRunner().invoke, cli, command, env=env)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "PASS trigger" in lines and "FAIL nothing-started-twice" in lines
    assert "the repeated trigger started the work again" in result.output
    assert "8 rules: 7 passed, 1 failed: the service does not follow the protocol" in lines


@pytest.mark.slow
async def test_the_installed_command_checks_a_service_and_prints_json() -> None:
    """`python -m ecron check-service URL --json`, as people run it, passes the example
    service with exit code 0."""
    service = job_service.JobService(DURATION)
    async with serving(service) as url:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ecron",
            "check-service",
            url,
            "--json",
            *PACE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ECRON_CHECK_SECRET": ""},
        )
        out, err = await finished(process, timeout=30)
        assert running(service) == []
    assert process.returncode == 0, err.decode()
    assert json.loads(out)["counts"] == {"pass": 8, "warn": 0, "fail": 0, "skip": 0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ftp://example.com/jobs"], "is not an http(s) URL"),
        (["http://127.0.0.1:1/jobs", "-H", "no colon"], "is not a header"),
        (["http://127.0.0.1:1/jobs", "--body", "{nope"], "is not JSON"),
        (["http://127.0.0.1:1/jobs", "--poll-url", "{url}/{id}"], "is not a template"),
        (["http://127.0.0.1:1/jobs", "--timeout", "0s"], "must be longer than zero"),
    ],
)
def test_bad_options_are_refused_in_one_line_naming_the_problem(
    args: list[str], message: str
) -> None:
    """A URL that is not http(s), a header without a colon, a body that is not JSON, a
    template with an unknown placeholder or a zero timeout: exit 2, before any call."""
    result = CliRunner().invoke(cli, ["check-service", *args])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(
    ("before", "after", "why"),
    [
        ([("RUNNING", 0.0), ("RUNNING", 40.0)], ("RUNNING", 0.0), "went back from 40% to 0%"),
        ([("RUNNING", 10.0), ("SUCCESS", 100.0)], ("RUNNING", 0.0), "ended SUCCESS"),
        ([("RUNNING", 0.0), ("RUNNING", 40.0)], ("RUNNING", 45.0), None),
        ([("RUNNING", None), ("FAILED", None)], ("FAILED", None), None),
    ],
)
def test_a_report_is_a_restart_when_progress_goes_back_or_an_end_is_undone(
    before: list[tuple[str, float | None]], after: tuple[str, float | None], why: str | None
) -> None:
    """`restarted` says why a later report cannot be the same execution, or None."""

    def report(status: str, progress: float | None) -> Report:
        return Report(RemoteStatus(status), progress)

    found = restarted([report(*pair) for pair in before], report(*after))
    assert (found is None) if why is None else (found is not None and why in found)

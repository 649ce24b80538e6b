"""`ecron check-service URL --batch-poll-url URL`: one batch poll about the triggered eid
and an eid never triggered, sent as the daemon sends it, judged by the batch rules, against
real services on 127.0.0.1: the example's batch endpoint passes; each way of breaking the
batch protocol fails the rule that names it, in one line saying why, and exits 1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from ecron.cli import cli
from ecron.cli.checklist import BATCH_RULES, RULES, rules_checked
from ecron.signing import verify
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

SECRET = "batch-secret"


class RecordsBatchCalls(job_service.JobService):  # type: ignore[name-defined,misc]
    """The example service, keeping each batch call's raw target and headers."""

    def __init__(self, duration: float) -> None:
        super().__init__(duration)
        self.batch_calls: list[tuple[str, dict[str, str]]] = []

    async def batch_poll(self, request: web.Request) -> web.Response:
        self.batch_calls.append((request.raw_path, dict(request.headers)))
        response: web.Response = await super().batch_poll(request)
        return response


class AnswersWithoutReports(job_service.JobService):  # type: ignore[name-defined,misc]
    """Answers a batch poll as if it were one poll: a report, not ``{"reports": ...}``."""

    async def batch_poll(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "RUNNING", "progress": 0})


class MakesUpUnknownIds(job_service.JobService):  # type: ignore[name-defined,misc]
    """Reports every id asked about: a RUNNING 0% for one it never saw."""

    async def batch_poll(self, request: web.Request) -> web.Response:
        made_up = {"status": "RUNNING", "progress": 0}
        kind, ids = request.match_info["kind"], request.query["ids"].split(",")
        jobs = {eid: self.jobs.get((kind, eid)) for eid in ids}
        reports = {eid: job.report() if job else made_up for eid, job in jobs.items()}
        return web.json_response({"reports": reports})


class MalformedReports(job_service.JobService):  # type: ignore[name-defined,misc]
    """Puts a status that is not one of the protocol's in the report of a known job."""

    async def batch_poll(self, request: web.Request) -> web.Response:
        kind, ids = request.match_info["kind"], request.query["ids"].split(",")
        known = [eid for eid in ids if (kind, eid) in self.jobs]
        return web.json_response({"reports": {eid: {"status": "ALMOST"} for eid in known}})


class BatchSaysDone(job_service.JobService):  # type: ignore[name-defined,misc]
    """Answers SUCCESS 100% in the batch for a job that its polls show still running."""

    async def batch_poll(self, request: web.Request) -> web.Response:
        kind, ids = request.match_info["kind"], request.query["ids"].split(",")
        known = [eid for eid in ids if (kind, eid) in self.jobs]
        done = {"status": "SUCCESS", "progress": 100}
        return web.json_response({"reports": dict.fromkeys(known, done)})


@pytest.fixture(autouse=True)
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's jobs move in 100 steps (instead of 20), so that a long job moves soon."""
    monkeypatch.setattr(job_service, "TICKS", 100)


def batch_url(url: str) -> str:
    """The example's batch endpoint for the jobs at ``url``: the trigger's URL itself."""
    return url


def failed(checklist: dict[str, Any]) -> set[str]:
    """The rules that failed."""
    return {rule for rule, verdict in verdicts(checklist).items() if verdict == "fail"}


@pytest.mark.parametrize("secret", [None, SECRET], ids=["unsigned", "signed"])
async def test_the_example_batch_endpoint_passes_every_rule_asked_in_one_call(
    secret: str | None,
) -> None:
    """Against examples/job_service.py's `GET /jobs/{kind}?ids=` every rule, the batch ones
    included, passes (exit 0). The batch endpoint got one call, `?ids=<eid>,<unknown>`,
    with X-Ecron-Task and no per-execution header, signed over its path and query when
    --secret is given; the job is cancelled when the command returns."""
    service = RecordsBatchCalls(DURATION)
    args = ["--batch-poll-url", "", *(["--secret", secret] if secret else [])]
    async with serving(service, secret=secret) as url:
        args[1] = batch_url(url)
        code, checklist = await check(url, *args)
        assert running(service) == []
    assert code == 0, checklist
    assert verdicts(checklist) == dict.fromkeys(rules_checked(batch=True), "pass")
    eid, unknown = checklist["execution_id"], checklist["unknown_execution_id"]
    assert [target for target, _ in service.batch_calls] == [f"/jobs/demo?ids={eid},{unknown}"]
    headers = service.batch_calls[0][1]
    assert headers["X-Ecron-Task"] == "check-service"
    assert "X-Ecron-Execution-Id" not in headers and "X-Ecron-Deadline" not in headers
    if secret is None:
        assert "X-Ecron-Signature" not in headers
    else:
        target = service.batch_calls[0][0]
        assert verify(secret, headers["X-Ecron-Signature"], "GET", target, b"")
    assert "reports of 1 of the 2 ids asked about" in detail(checklist, "batch-answer")
    assert "left out of reports" in detail(checklist, "batch-unknown")


async def test_a_batch_endpoint_answering_404_fails_the_batch_answer_rule() -> None:
    """A batch_poll_url with no endpoint behind it (404) fails `batch-answer`, saying the
    endpoint is missing and that ecron would end the executions unreachable; the other
    batch rules are skipped, the per-execution rules still pass."""
    service = job_service.JobService(DURATION)
    async with serving(service) as url:
        missing = url.replace("/jobs/demo", "/batch/demo")
        code, checklist = await check(url, "--batch-poll-url", missing)
        assert running(service) == []
    assert code == 1
    assert failed(checklist) == {"batch-answer"}
    assert detail(checklist, "batch-answer").startswith("HTTP 404: the batch endpoint is missing")
    assert "FAILED unreachable" in detail(checklist, "batch-answer")
    found = verdicts(checklist)
    assert {found[rule] for rule in BATCH_RULES if rule != "batch-answer"} == {"skip"}
    assert {found[rule] for rule in RULES} == {"pass"}


@pytest.mark.parametrize(
    ("service_class", "rule", "said"),
    [
        (
            AnswersWithoutReports,
            "batch-answer",
            [
                'HTTP 200: a batch poll answer is a JSON object with a "reports" object, '
                'not {"status": "RUNNING", "progress": 0}',
                "FAILED protocol_error",
            ],
        ),
        (
            MakesUpUnknownIds,
            "batch-unknown",
            ['reports[<unknown>] = {"status": "RUNNING", "progress": 0}', "made up a report"],
        ),
        (
            MalformedReports,
            "batch-report",
            ['reports[<eid>] = {"status": "ALMOST"} is not a report', "protocol-error probe"],
        ),
        (
            BatchSaysDone,
            "batch-agrees",
            ["the batch answered SUCCESS 100%, the polls RUNNING", "it had ended SUCCESS"],
        ),
    ],
    ids=["no-reports", "made-up-unknown", "malformed-report", "disagrees-with-polls"],
)
async def test_each_broken_batch_endpoint_fails_the_rule_that_names_it(
    service_class: type[Any], rule: str, said: list[str]
) -> None:
    """A 200 without `reports`, a report made up for the unknown eid, a malformed report
    for the triggered eid, or a batch report its polls contradict: exactly that rule
    fails (exit 1), its one line quoting what was answered, under which id."""
    service = service_class(DURATION)
    async with serving(service) as url:
        code, checklist = await check(url, "--batch-poll-url", batch_url(url))
        assert running(service) == []
    assert code == 1
    assert failed(checklist) == {rule}, checklist
    seen = detail(checklist, rule)
    eid, unknown = checklist["execution_id"], checklist["unknown_execution_id"]
    for words in said:
        assert words.replace("<eid>", eid).replace("<unknown>", unknown) in seen
    assert "\n" not in seen


async def test_the_printed_checklist_lists_the_batch_rules_after_the_repeat() -> None:
    """Without --json, the batch rules are printed among the others, in the order checked
    (after `nothing-started-twice`, before `cancel`), and counted: 12 rules."""
    service = job_service.JobService(DURATION)
    async with serving(service) as url:
        command = ["check-service", url, *PACE, "--batch-poll-url", url.replace("jobs", "x")]
        env = {"COLUMNS": "200"}
        result = await asyncio.to_thread(CliRunner().invoke, cli, command, env=env)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    verdict_lines = [line for line in lines if line.split(" ")[0] in {"PASS", "FAIL", "SKIP"}]
    assert verdict_lines[3:9] == [
        "PASS nothing-started-twice",
        "FAIL batch-answer",
        "SKIP batch-report",
        "SKIP batch-unknown",
        "SKIP batch-agrees",
        "PASS cancel",
    ]
    assert "12 rules: 8 passed, 1 failed, 3 skipped: the service does not follow the protocol" in (
        lines
    )


def test_a_batch_poll_url_that_is_not_http_is_refused_before_any_call() -> None:
    """`--batch-poll-url ftp://...` is a bad option: exit 2 and one line naming the key."""
    command = ["check-service", "http://127.0.0.1:1/jobs", "--batch-poll-url", "ftp://x/b"]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 2
    assert "batch_poll_url" in result.output and "is not an http(s) URL" in result.output

"""User services that misbehave beyond PROTOCOL.md's outcome table: a service that accepts
the connection and never answers, trickles its headers a byte at a time, sends a huge or an
endless body, invalid UTF-8 or JSON nested 100,000 deep, or closes in mid-body.

Every call is bounded by the task's ``request_timeout`` and by ``BODY_LIMIT`` (1 MiB), is
read as the protocol says (a call sent without an answer is "no answer"; a 2xx without a
valid report is a protocol error, whatever the size of its body), and leaves nothing
behind: memory stays flat across hundreds of such calls.

Memory, measured on the 2-core machine (the memory test below, figures also in
docs/performance.md): 200 calls answered with an endless chunked body and 200 with a 2 MiB
body, after a warm-up of 20 calls, grew the Python heap (tracemalloc) by 0.16 MiB and the
process's RSS by 0.00 MiB, with a heap peak of 2.19 MiB above the start (one body limit's
worth of chunks and their join); the test asserts under 20 MiB of growth for both, and a
peak under four body limits.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ecron.config.model import CallSettings
from ecron.core import ProbeFailed, Reason, Status, TriggerFailed
from ecron.executor.http import BODY_LIMIT, CallContext, CallOutcome, HttpCaller, OutcomeKind
from ecron.executor.outcomes import (
    ACKNOWLEDGED,
    CANCEL_RETRYABLE,
    RETRYABLE,
    poll_event,
    trigger_event,
)
from ecron.executor.wire import Wire
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.faulty import (
    MIB,
    RawService,
    answering,
    endless_body,
    huge_body,
    invalid_utf8,
    nested,
    raw_service,
)
from tests.support.service import UserService, wait_for

#: The request_timeout of the calls here, and what a loaded machine may add to it.
TIMEOUT = 0.4
SLACK = 1.5

CTX = CallContext(
    remote_id="e1",
    eid="e1",
    task="job",
    scheduled_at=datetime(2026, 1, 1, tzinfo=UTC),
    deadline=None,
    attempt=1,
)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """How a service misbehaves does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@dataclass
class Faulty:
    """Both misbehaving services, and a caller on one session."""

    raw: RawService
    base: str
    caller: HttpCaller

    def call(self, path: str) -> CallSettings:
        base = self.raw.url if path.startswith(("/silent", "/slowloris", "/cut")) else self.base
        return CallSettings(url=base + path, request_timeout=f"{int(TIMEOUT * 1000)}ms")


@pytest.fixture
async def faulty() -> AsyncIterator[Faulty]:
    """A raw TCP service and an aiohttp service, each misbehaving by path."""
    answers = {
        "huge": huge_body(2 * MIB),
        "endless": endless_body(),
        "trickled-body": endless_body(chunk=1, pause=0.02),
        "endless-503": endless_body(503),
        "invalid-utf8": invalid_utf8(),
        "nested": nested(100_000),
    }
    async with (
        raw_service() as raw,
        answering(answers) as base,
        Wire() as wire,
    ):
        yield Faulty(raw, base, HttpCaller(wire, public_url=None, callback_secret="s"))


#: Each fault, and how every one of the three calls answered by it is read.
FAULTS = {
    "accepts-and-never-answers": ("/silent", OutcomeKind.NO_ANSWER),
    "trickles-headers-byte-by-byte": ("/slowloris", OutcomeKind.NO_ANSWER),
    "closes-in-mid-body": ("/cut", OutcomeKind.NO_ANSWER),
    "trickles-an-endless-body": ("/trickled-body", OutcomeKind.NO_ANSWER),
    "huge-body-with-its-length": ("/huge", OutcomeKind.BAD_REPORT),
    "endless-chunked-body": ("/endless", OutcomeKind.BAD_REPORT),
    "endless-body-on-a-503": ("/endless-503", OutcomeKind.TRANSIENT),
    "invalid-utf-8": ("/invalid-utf8", OutcomeKind.BAD_REPORT),
    "json-nested-100000-deep": ("/nested", OutcomeKind.BAD_REPORT),
}


def protocol_reading(kind: OutcomeKind, method: str, outcome: CallOutcome) -> Any:
    """What the protocol makes of an outcome of ``kind`` for one call, in a form to compare:
    the trigger's event (or "retried"/"unknown"), the poll's event kind, the cancel's
    acknowledgement (or "retried once")."""
    if method == "trigger":
        if kind in RETRYABLE:  # no answer: polled first, then sent again (the same eid)
            return "unknown outcome" if kind is OutcomeKind.NO_ANSWER else "retried"
        event = trigger_event(outcome)
        return event.reason if isinstance(event, TriggerFailed) else event
    if method == "poll":
        event = poll_event(outcome, CallSettings(url="http://h"))
        return event.kind if isinstance(event, ProbeFailed) else event
    if kind in ACKNOWLEDGED:
        return "acknowledged"
    return "retried once" if kind in CANCEL_RETRYABLE else "not acknowledged"


#: PROTOCOL.md's table, for the outcome kinds these faults produce.
EXPECTED = {
    OutcomeKind.NO_ANSWER: {
        "trigger": "unknown outcome",
        "poll": "unreachable",
        "cancel": "retried once",
    },
    OutcomeKind.TRANSIENT: {"trigger": "retried", "poll": "unreachable", "cancel": "retried once"},
    OutcomeKind.BAD_REPORT: {
        "trigger": Reason.PROTOCOL_ERROR,
        "poll": "protocol_error",
        "cancel": "acknowledged",
    },
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_each_call_to_a_misbehaving_service_ends_within_its_timeout_read_as_the_table_says(
    faulty: Faulty, fault: str
) -> None:
    """Trigger, poll and cancel to each misbehaving service each end within request_timeout
    (plus scheduling slack) with the outcome kind the protocol gives them, and that kind
    means what PROTOCOL.md's table says for that call."""
    path, kind = FAULTS[fault]
    call = faulty.call(path)
    for method in ("trigger", "poll", "cancel"):
        started = time.monotonic()
        outcome: CallOutcome = await getattr(faulty.caller, method)(call, CTX)
        took = time.monotonic() - started
        assert outcome.kind is kind, (method, outcome)
        assert took < TIMEOUT + SLACK, (method, took)
        assert protocol_reading(kind, method, outcome) == EXPECTED[kind][method], method
        if kind is OutcomeKind.BAD_REPORT:  # a 2xx that was read: its status is kept
            assert outcome.http_status == 200 and outcome.report is None
    if path.startswith(("/silent", "/slowloris", "/cut")):  # ecron hung up each connection
        assert faulty.raw.accepted == 3
        await wait_for(lambda: faulty.raw.open == 0, timeout=5)


async def test_a_body_over_the_limit_is_refused_after_reading_at_most_the_limit(
    faulty: Faulty,
) -> None:
    """An endless body is read up to BODY_LIMIT and no further: the call ends as soon as
    the limit is passed, before the request timeout (else it would be no answer), naming
    the limit."""
    outcome = await faulty.caller.poll(faulty.call("/endless"), CTX)
    assert outcome.kind is OutcomeKind.BAD_REPORT
    assert f"body over {BODY_LIMIT} bytes" in outcome.detail


def _rss() -> int:
    """The process's resident set size now, in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


async def test_memory_stays_flat_across_hundreds_of_huge_and_endless_bodies(
    faulty: Faulty,
) -> None:
    """200 calls answered with an endless chunked body and 200 with a 2 MiB body: the
    Python heap (tracemalloc) and the RSS grow by less than 20 MiB after a warm-up, and no
    more than about one body limit is held at once. (The numbers measured are in this
    module's docstring and in docs/performance.md.)"""
    endless, huge = faulty.call("/endless"), faulty.call("/huge")
    for _ in range(10):  # warm-up: the session's pools, the caches of the caller
        await faulty.caller.poll(endless, CTX)
        await faulty.caller.poll(huge, CTX)
    gc.collect()
    tracemalloc.start()
    try:
        heap_before, rss_before = tracemalloc.get_traced_memory()[0], _rss()
        for _ in range(200):
            assert (await faulty.caller.poll(endless, CTX)).kind is OutcomeKind.BAD_REPORT
            assert (await faulty.caller.poll(huge, CTX)).kind is OutcomeKind.BAD_REPORT
        gc.collect()
        heap_after, peak = tracemalloc.get_traced_memory()
        rss_after = _rss()
    finally:
        tracemalloc.stop()
    heap_growth, rss_growth = heap_after - heap_before, rss_after - rss_before
    print(  # the figures for docs/performance.md, with -s
        f"heap growth {heap_growth / MIB:.2f} MiB, peak {peak / MIB:.2f} MiB, "
        f"RSS growth {rss_growth / MIB:.2f} MiB"
    )
    assert heap_growth < 20 * MIB
    assert rss_growth < 20 * MIB
    assert peak - heap_before < 4 * BODY_LIMIT


# --- through a daemon --------------------------------------------------------------------------


def job(url: str, **keys: Any) -> list[Any]:
    values: dict[str, Any] = {
        "request_timeout": f"{int(TIMEOUT * 1000)}ms",
        "trigger_retry": {"attempts": 1},
        "max_probe_failures": 2,
    }
    values.update(keys)
    return [task("job", url, **values)]


async def test_a_trigger_answered_with_an_endless_body_ends_protocol_error_once(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The trigger's answer is a 200 whose chunked body never ends: ecron stops reading at
    1 MiB and the execution ends FAILED protocol_error at once, without a poll or a second
    POST, and the API goes on answering meanwhile."""
    user_service.script["POST"] = [endless_body()]
    async with make_daemon(job(f"{user_service.url}/jobs/x")) as daemon:
        started = time.monotonic()
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid, timeout=TIMEOUT + SLACK)
        took = time.monotonic() - started
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.PROTOCOL_ERROR)
    assert execution.message is not None and f"body over {BODY_LIMIT} bytes" in execution.message
    assert user_service.methods_for(eid) == ["POST"]
    assert took < TIMEOUT + SLACK


async def test_polls_to_a_service_that_never_answers_end_it_unreachable_in_bounded_time(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The job started, but every poll goes to a service that accepts the connection and
    says nothing: each poll gives up after request_timeout, and max_probe_failures (2) of
    them end the execution FAILED unreachable; ecron hung up every connection it opened."""
    user_service.duration = 3600
    async with raw_service() as raw:
        spec = job(
            f"{user_service.url}/jobs/x",
            poll_url=f"{raw.url}/silent/{{execution_id}}",
            poll_interval="100ms",
        )
        async with make_daemon(spec) as daemon:
            started = time.monotonic()
            execution = await ended(daemon, await run_once(daemon, "job"), timeout=10)
            took = time.monotonic() - started
        await wait_for(lambda: raw.open == 0, timeout=5)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.UNREACHABLE)
    assert raw.accepted == 2
    assert took < 2 * (TIMEOUT + 0.1) + SLACK


async def test_a_trigger_whose_headers_trickle_in_is_an_unknown_outcome_polled_first(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The trigger's answer trickles in a header byte at a time, longer than
    request_timeout: it was sent, so its outcome is unknown, and ecron asks the poll URL
    before anything else; the service there does not know the id and the trigger's one
    attempt is spent, so the execution ends FAILED trigger_failed, without a second POST."""
    async with raw_service(trickle=0.05) as raw:
        spec = job(
            f"{raw.url}/slowloris/jobs",
            poll_url=f"{user_service.url}/jobs/x/{{execution_id}}",
        )
        async with make_daemon(spec) as daemon:
            eid = await run_once(daemon, "job")
            execution = await ended(daemon, eid, timeout=10)
        await wait_for(lambda: raw.open == 0, timeout=5)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.TRIGGER_FAILED)
    assert raw.accepted == 1 and raw.paths == ["/slowloris/jobs"]
    assert user_service.methods_for(eid) == ["GET"]


async def test_a_success_whose_result_is_nested_940_deep_is_kept_without_it_and_the_api_answers(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A trigger answered SUCCESS with a result 940 arrays deep (within what a JSON decoder
    reads, beyond what the API's encoder can write back once stored): the execution is
    SUCCESS with its result dropped and flagged, and the history, the task list and the
    execution's snapshot still answer 200 (they answered 500 for good before)."""
    user_service.script["POST"] = [nested(940, inside_a_report=True)]
    async with make_daemon(job(f"{user_service.url}/jobs/x")) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
        base = f"http://127.0.0.1:{daemon.port}/api/v1"
        statuses = []
        async with aiohttp.ClientSession() as session:
            for path in (f"/executions/{eid}", "/executions", "/tasks", "/tasks/job"):
                async with session.get(base + path) as response:
                    statuses.append(response.status)
    assert (execution.status, execution.result, execution.result_truncated) == (
        Status.SUCCESS,
        None,
        True,
    )
    assert statuses == [200, 200, 200, 200]

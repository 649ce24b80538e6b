"""The HTTP side of the executor, piece by piece: URLs, headers, and how answers are read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from yarl import URL

from ecron.config.model import CallSettings
from ecron.executor.http import (
    BODY_LIMIT,
    CallContext,
    HttpCaller,
    OutcomeKind,
    classify,
    default_target,
    expand,
)
from ecron.executor.wire import Wire
from ecron.signing import callback_token, verify
from tests.support.rig import FakeClock

CTX = CallContext(
    remote_id="e1",
    eid="e1",
    task="job",
    scheduled_at=datetime(2026, 1, 1, tzinfo=UTC),
    deadline=None,
    attempt=2,
)


async def test_protocol_headers_replace_task_headers_of_the_same_name_in_any_case() -> None:
    """A task header spelt like a protocol header, in another case, does not survive."""
    call = CallSettings(url="http://h/jobs", headers={"x-ecron-task": "spoofed", "X-Team": "a"})
    async with Wire() as wire:
        caller = HttpCaller(wire, public_url=None, callback_secret="s")
        headers = caller.headers("GET", URL("http://h/jobs/e1"), call, CTX, b"")
    assert headers.getall("X-Ecron-Task") == ["job"]
    assert headers["X-Team"] == "a" and headers["X-Ecron-Attempt"] == "2"
    assert "X-Ecron-Deadline" not in headers and "X-Ecron-Callback-Url" not in headers


@pytest.mark.parametrize(
    ("public_url", "stream", "expected"),
    [
        (None, None, set()),
        (None, "reports", {"X-Ecron-Report-Stream", "X-Ecron-Callback-Token"}),
        ("http://ecron:8080", None, {"X-Ecron-Callback-Url", "X-Ecron-Callback-Token"}),
        (
            "http://ecron:8080",
            "reports",
            {"X-Ecron-Callback-Url", "X-Ecron-Report-Stream", "X-Ecron-Callback-Token"},
        ),
    ],
)
async def test_the_report_stream_and_the_callback_token_come_with_a_queue_the_url_with_public_url(
    public_url: str | None, stream: str | None, expected: set[str]
) -> None:
    """A daemon with a queue sends X-Ecron-Report-Stream and the callback token (the service
    needs it for its XADD) on every call; X-Ecron-Callback-Url only with public_url."""
    pushed = {"X-Ecron-Callback-Url", "X-Ecron-Report-Stream", "X-Ecron-Callback-Token"}
    call = CallSettings(url="http://h/jobs")
    async with Wire() as wire:
        caller = HttpCaller(wire, public_url=public_url, callback_secret="s", report_stream=stream)
        for method in ("POST", "GET", "DELETE"):
            headers = caller.headers(method, URL("http://h/jobs/e1"), call, CTX, b"")
            assert {name for name in pushed if name in headers} == expected
            if stream is not None:
                assert headers["X-Ecron-Report-Stream"] == stream
            if expected:
                assert headers["X-Ecron-Callback-Token"] == callback_token("s", "e1")


def test_the_default_poll_url_appends_the_encoded_id_to_the_path_and_keeps_the_query() -> None:
    """http://h/jobs/ok?x=1 polls http://h/jobs/ok/<eid>?x=1; an id is URL-encoded."""
    assert str(default_target("http://h/jobs/ok?x=1", "e1")) == "http://h/jobs/ok/e1?x=1"
    assert str(default_target("http://h/jobs/ok/", "e1.2")) == "http://h/jobs/ok/e1.2"
    call = CallSettings(url="http://h/a", poll_url="{url}/s/{execution_id}?t={task}")
    assert str(expand(call.poll_url, call, CTX)) == "http://h/a/s/e1?t=job"


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, b'{"status": "RUNNING"}', OutcomeKind.REPORT),
        (201, b'{"status": "success"}', OutcomeKind.REPORT),
        (200, b'{"status": "UNKNOWN"}', OutcomeKind.UNKNOWN),
        (404, b"", OutcomeKind.UNKNOWN),
        (400, b"", OutcomeKind.REJECTED),
        (301, b"", OutcomeKind.REJECTED),
        (408, b"", OutcomeKind.TRANSIENT),
        (429, b"", OutcomeKind.TRANSIENT),
        (500, b"", OutcomeKind.TRANSIENT),
        (200, b"<html>", OutcomeKind.BAD_REPORT),
        (200, b'{"status": 3}', OutcomeKind.BAD_REPORT),
        (204, b"", OutcomeKind.BAD_REPORT),
    ],
)
def test_each_answer_is_read_as_the_protocol_table_says(
    status: int, body: bytes, kind: OutcomeKind
) -> None:
    """classify() follows PROTOCOL.md's outcome table."""
    assert classify(status, body, False).kind is kind


def test_a_body_over_the_cap_is_a_protocol_error_and_retry_after_is_read_in_seconds() -> None:
    """Too big: BAD_REPORT naming the cap. Retry-After on 429/503 only."""
    too_big = classify(200, b"", True)
    assert too_big.kind is OutcomeKind.BAD_REPORT and str(BODY_LIMIT) in too_big.detail
    assert classify(503, b"", False, {"Retry-After": "7"}).retry_after == 7.0
    assert classify(500, b"", False, {"Retry-After": "7"}).retry_after is None


def test_a_retry_after_date_is_read_against_the_injected_clock() -> None:
    """``Retry-After: <HTTP date>`` is the time from the clock's now to that date (never
    negative), whatever the machine's time."""
    now = datetime(2027, 12, 1, tzinfo=UTC)
    later = {"Retry-After": "Wed, 01 Dec 2027 00:00:30 GMT"}
    assert classify(503, b"", False, later, lambda: now).retry_after == 30.0
    past = {"Retry-After": "Tue, 30 Nov 2027 23:59:00 GMT"}
    assert classify(429, b"", False, past, lambda: now).retry_after == 0.0


async def test_a_signature_carries_the_time_of_the_injected_clock() -> None:
    """The ``t=`` of ``X-Ecron-Signature`` is the caller's clock's, and it verifies then."""
    when = datetime(2027, 3, 4, 5, 6, 7, tzinfo=UTC)
    call = CallSettings(url="http://h/jobs", secret="k")
    async with Wire() as wire:
        caller = HttpCaller(wire, public_url=None, callback_secret="s", clock=FakeClock(when))
        headers = caller.headers("GET", URL("http://h/jobs/e1"), call, CTX, b"")
    stamp = int(when.timestamp())
    assert headers["X-Ecron-Signature"].startswith(f"t={stamp},")
    assert verify("k", headers["X-Ecron-Signature"], "GET", "/jobs/e1", b"", now=stamp)

"""The three calls of the protocol (trigger, poll, cancel) and how each answer is read.

One ``Wire`` (kept-alive connections, ``executor/wire.py``) carries every call. Bodies are
read with a size cap, so a misbehaving service can cost at most ``BODY_LIMIT`` bytes per
call.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import orjson
from multidict import CIMultiDict
from prometheus_client import Counter, Histogram
from yarl import URL

from ecron.clock import Clock, iso
from ecron.config.model import CallSettings
from ecron.core import InvalidReport, RemoteStatus, Report, parse_report
from ecron.executor.recent import Recent
from ecron.executor.wire import NoAnswer, Unsent, Wire, request_bytes
from ecron.logs import REDACTED, scrub
from ecron.metrics import Metrics
from ecron.signing import callback_token, signature

#: The most of a response body ecron reads; a larger one is a protocol error.
BODY_LIMIT = 1024 * 1024
#: The longest a ``Retry-After`` holds a service's triggers back (seconds); a longer one
#: (a service's bug, or a hostile answer) waits this long, then the trigger is tried again.
MAX_RETRY_AFTER = 3600.0
#: ``Retry-After`` in seconds: ASCII digits only (``str.isdigit`` takes ``²`` too).
_SECONDS = re.compile(r"[0-9]+")
#: The clock of ``classify`` when none is given.
_SYSTEM_CLOCK = Clock()
#: The protocol's name of each call, by its HTTP method.
_CALL_NAMES = {"POST": "trigger", "GET": "poll", "DELETE": "cancel"}


class OutcomeKind(StrEnum):
    """How an HTTP call ended (PROTOCOL.md, "How ecron reads each outcome")."""

    #: 2xx with a valid report whose status is RUNNING, SUCCESS or FAILED.
    REPORT = "report"
    #: 404, or a valid report saying UNKNOWN.
    UNKNOWN = "unknown"
    #: Another 4xx (not 408 or 429), or a redirect: the task is misconfigured.
    REJECTED = "rejected"
    #: 408, 429 or 5xx: worth trying again.
    TRANSIENT = "transient"
    #: Nothing was sent: connection refused, name not resolved, connect timeout.
    UNSENT = "unsent"
    #: Sent, but no answer came back: timeout or reset after sending.
    NO_ANSWER = "no_answer"
    #: 2xx without a valid report (or a body over the size cap).
    BAD_REPORT = "bad_report"


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """The result of one HTTP call."""

    kind: OutcomeKind
    report: Report | None = None
    http_status: int | None = None
    #: Seconds the service asked us to wait (``Retry-After`` on 429/503).
    retry_after: float | None = None
    detail: str = ""
    #: A batch poll's answer: its ``reports`` object, remote id to report JSON (unread).
    reports: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CallContext:
    """What a call is about: the ids and times that go into the ``X-Ecron-*`` headers."""

    remote_id: str
    eid: str
    task: str
    scheduled_at: datetime
    deadline: datetime | None
    attempt: int
    resume_of: str | None = None
    step_name: str | None = None
    step_number: int | None = None
    upstream: str | None = None
    #: Why the execution exists (``X-Ecron-Trigger-Kind``): schedule, manual, retry, resume,
    #: chain or backfill.
    trigger_kind: str = "schedule"


def default_target(url: str, remote_id: str) -> URL:
    """``url`` with ``/<remote id>`` appended to its path; the query string is kept."""
    base = URL(url)
    path = base.raw_path.rstrip("/") + "/" + quote(remote_id, safe="")
    return base.with_path(path, encoded=True).with_query(base.raw_query_string)


def expand(template: str | None, call: CallSettings, ctx: CallContext) -> URL:
    """The poll or cancel URL: the template filled in, or the default."""
    if template is None:
        return default_target(call.url, ctx.remote_id)
    text = template.format(
        url=call.url, execution_id=quote(ctx.remote_id, safe=""), task=quote(ctx.task, safe="")
    )
    return URL(text, encoded=True)


#: A poll prepared for an execution: its call settings, URL, headers and request bytes (the
#: last two None for a signed poll, made anew for each call).
_Prepared = tuple[CallSettings, URL, "CIMultiDict[str] | None", "bytes | None"]


class HttpCaller:
    """Makes the protocol's calls over one shared session."""

    def __init__(
        self,
        wire: Wire,
        *,
        public_url: str | None,
        callback_secret: str,
        report_stream: str | None = None,
        body_limit: int = BODY_LIMIT,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.metrics = metrics
        #: The time of signatures and of ``Retry-After`` dates.
        self.clock = clock or Clock()
        #: The URL, headers and request bytes of each execution's (or step's) poll, while it
        #: is polled (a signed poll's are made for each call: its time is in the signature).
        self._polls: Recent[tuple[str, datetime | None], _Prepared] = Recent(self.clock.ticks)
        self._children: dict[tuple[str, OutcomeKind], tuple[Counter, Histogram]] = {}
        self._bodies: dict[int, tuple[CallSettings, bytes, URL]] = {}
        self.wire = wire
        self.public_url = public_url.rstrip("/") if public_url else None
        self.callback_secret = callback_secret
        #: The Redis stream a service may push reports to (``X-Ecron-Report-Stream``).
        self.report_stream = report_stream
        self.body_limit = body_limit

    async def trigger(self, call: CallSettings, ctx: CallContext) -> CallOutcome:
        """``POST {url}`` with the task's body as JSON (encoded once per call settings)."""
        cached = self._bodies.get(id(call))
        if cached is None or cached[0] is not call:
            encoded = json.dumps({} if call.body is None else call.body).encode()
            cached = self._bodies[id(call)] = (call, encoded, URL(call.url))
        return await self._request("POST", cached[2], call, ctx, cached[1])

    async def poll(self, call: CallSettings, ctx: CallContext) -> CallOutcome:
        """``GET {poll_url}`` (the URL and the headers of an unsigned poll are worked out once
        per execution and deadline: a poll is the call made most often by far)."""
        # A remote id names its execution and step, so with the deadline (the one header
        # that can change) it names the whole context.
        key = (ctx.remote_id, ctx.deadline)
        prepared = self._polls.get(key)
        if prepared is None or prepared[0] is not call:  # new, or the config was reloaded
            url = expand(call.poll_url, call, ctx)
            if call.secret:
                prepared = (call, url, None, None)
            else:
                made = self.headers("GET", url, call, ctx, b"")
                prepared = (call, url, made, request_bytes("GET", url, made))
            self._polls.put(key, prepared)
        _, url, headers, request = prepared
        return await self._request("GET", url, call, ctx, b"", headers, request=request)

    async def cancel(self, call: CallSettings, ctx: CallContext) -> CallOutcome:
        """``DELETE {cancel_url}``."""
        return await self._request("DELETE", expand(call.cancel_url, call, ctx), call, ctx, b"")

    async def get(
        self,
        url: URL,
        call: CallSettings,
        ctx: CallContext,
        headers: CIMultiDict[str],
        *,
        read: Reader,
        name: str,
    ) -> CallOutcome:
        """A GET with its ``headers`` ready, its answer read by ``read`` and counted under
        the ``call`` label ``name`` (the batch poll, ``executor/batch.py``)."""
        return await self._request("GET", url, call, ctx, b"", headers, read=read, name=name)

    def headers(
        self, method: str, url: URL, call: CallSettings, ctx: CallContext, body: bytes
    ) -> CIMultiDict[str]:
        """Every header of one call: the task's own, then the protocol's, which replace any
        task header of the same name (names compare without regard to case)."""
        headers = CIMultiDict(call.headers)
        headers["X-Ecron-Execution-Id"] = ctx.remote_id
        headers["X-Ecron-Task"] = ctx.task
        headers["X-Ecron-Scheduled-At"] = iso(ctx.scheduled_at) or ""
        headers["X-Ecron-Attempt"] = str(ctx.attempt)
        headers["X-Ecron-Trigger-Kind"] = ctx.trigger_kind
        if ctx.deadline is not None:
            headers["X-Ecron-Deadline"] = iso(ctx.deadline) or ""
        if ctx.resume_of is not None:
            headers["X-Ecron-Resume-Of"] = ctx.resume_of
        if ctx.upstream is not None:
            headers["X-Ecron-Upstream-Execution-Id"] = ctx.upstream
        if ctx.step_number is not None:
            headers["X-Ecron-Step"] = ctx.step_name or ""
            headers["X-Ecron-Step-Number"] = str(ctx.step_number)
            headers["X-Ecron-Parent-Execution-Id"] = ctx.eid
        if self.public_url is not None:
            report_path = f"/api/v1/executions/{quote(ctx.remote_id, safe='')}/report"
            headers["X-Ecron-Callback-Url"] = self.public_url + report_path
        if self.report_stream is not None:
            headers["X-Ecron-Report-Stream"] = self.report_stream
        if self.public_url is not None or self.report_stream is not None:
            headers["X-Ecron-Callback-Token"] = callback_token(self.callback_secret, ctx.remote_id)
        if method == "POST":
            headers["Content-Type"] = "application/json"
        if call.secret:
            stamp = int(self.clock.now().timestamp())
            headers["X-Ecron-Signature"] = signature(
                call.secret, method, url.raw_path_qs, body, stamp, ctx.remote_id
            )
        return headers

    async def _request(
        self,
        method: str,
        url: URL,
        call: CallSettings,
        ctx: CallContext,
        body: bytes,
        headers: CIMultiDict[str] | None = None,
        *,
        read: Reader | None = None,
        name: str | None = None,
        request: bytes | None = None,
    ) -> CallOutcome:
        """One call; ``read`` reads its answer (``classify`` by default), ``name`` is its
        ``call`` label in the metrics (by default the protocol's name of ``method``);
        ``request``: its bytes, when prepared ahead (with ``headers``)."""
        started = time.monotonic()
        if headers is None:  # signed calls are never prepared ahead: the time is in the signature
            headers = self.headers(method, url, call, ctx, body)
        if request is None:
            request = request_bytes(method, url, headers, body)
        outcome = await self._send(url, call, request, headers, read or classify)
        if outcome.detail:  # it becomes an execution's message: it quotes no secret
            outcome = replace(outcome, detail=scrubbed(outcome.detail, headers))
        if self.metrics is not None:
            calls, duration = self._series(name or _CALL_NAMES[method], outcome.kind)
            calls.inc()
            duration.observe(time.monotonic() - started)
        return outcome

    def _series(self, name: str, kind: OutcomeKind) -> tuple[Counter, Histogram]:
        """The metric children of one call and outcome, looked up once (a label lookup costs
        more than the increment)."""
        key = (name, kind)
        found = self._children.get(key)
        if found is None:
            assert self.metrics is not None
            found = self._children[key] = (
                self.metrics.http_calls.labels(call=name, outcome=str(kind)),
                self.metrics.http_duration.labels(call=name),
            )
        return found

    async def _send(
        self,
        url: URL,
        call: CallSettings,
        request: bytes,
        headers: Mapping[str, str],
        read: Reader,
    ) -> CallOutcome:
        seconds = call.request_timeout.total_seconds()
        try:
            answer = await self.wire.call(url, request, seconds, self.body_limit)
        except Unsent as exc:
            return CallOutcome(OutcomeKind.UNSENT, detail=exc.detail)
        except NoAnswer as exc:
            return CallOutcome(OutcomeKind.NO_ANSWER, detail=exc.detail)
        return read(answer.status, answer.body, answer.too_big, answer.headers, self.clock.now)


def scrubbed(detail: str, headers: Mapping[str, str]) -> str:
    """``detail`` (which may quote the answer, and so what a service echoes of the call)
    without the configured secrets and without this call's credentials: its callback
    token and its signature."""
    detail = scrub(detail)
    for name in ("X-Ecron-Callback-Token", "X-Ecron-Signature"):
        value = headers.get(name, "")
        parts = [value, *(field.partition("=")[2] for field in value.split(","))]
        for part in parts:  # the whole value, and each digest alone
            if len(part) >= 16 and part in detail:
                detail = detail.replace(part, REDACTED)
    return detail


def classify(
    status: int,
    content: bytes,
    too_big: bool,
    headers: Mapping[str, str] | None = None,
    now: Callable[[], datetime] = _SYSTEM_CLOCK.now,
) -> CallOutcome:
    """Read an HTTP answer as PROTOCOL.md's table says (``now``: for a ``Retry-After``
    date)."""
    if 200 <= status < 300:
        if too_big:
            return CallOutcome(
                OutcomeKind.BAD_REPORT, http_status=status, detail=f"body over {BODY_LIMIT} bytes"
            )
        try:
            body = decode_body(content)
        except (ValueError, RecursionError) as exc:  # deep nesting: not a report
            detail = f"{_why(exc)}; it said: {_said(content)}" if content.strip() else _why(exc)
            return CallOutcome(OutcomeKind.BAD_REPORT, http_status=status, detail=detail)
        return report_outcome(body, status)
    detail = answered(status, b"" if too_big else content)  # a failure: what the service said
    if status == 404:
        return CallOutcome(OutcomeKind.UNKNOWN, http_status=status, detail=detail)
    if status in (408, 429) or status >= 500:
        retry_after = _retry_after(headers, now) if status in (429, 503) else None
        return CallOutcome(
            OutcomeKind.TRANSIENT, http_status=status, retry_after=retry_after, detail=detail
        )
    return CallOutcome(OutcomeKind.REJECTED, http_status=status, detail=detail)


#: The most of a failed answer's body that its message quotes (DESIGN.md, "What people
#: read").
SAID = 300
#: The fields of a JSON answer that say what went wrong, quoted instead of the whole body.
_SAYING = ("error", "message")


def answered(status: int, content: bytes) -> str:
    """``HTTP 500: {"error": "disk full"}``: the status of an answer that failed and what the
    service said with it: its ``error`` and ``message`` when the body is a JSON object that
    has them, else the body's text on one line; at most ``SAID`` characters of it, cut with
    ``…``. Only a failed answer is read so: a poll that succeeds pays nothing for it."""
    said = _said(content)
    return f"HTTP {status}: {said}" if said else f"HTTP {status}"


def _said(content: bytes) -> str:
    """What a body says, in one line of at most ``SAID`` characters (empty: it says nothing)."""
    text = " ".join(content[: 4 * SAID + 1024].decode("utf-8", "replace").split())
    if text.startswith("{"):
        try:
            body = decode_body(content)
        except (ValueError, RecursionError):
            body = None
        if isinstance(body, dict) and (saying := {k: body[k] for k in _SAYING if k in body}):
            text = json.dumps(saying, ensure_ascii=False, default=str)
    return text if len(text) <= SAID else text[: SAID - 1] + "…"


def decode_body(content: bytes) -> Any:
    """JSON with orjson; what it refuses (``NaN``, a big integer) with the standard library,
    which reads exactly what it always did."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return json.loads(content)


def report_outcome(body: Any, status: int) -> CallOutcome:
    """A decoded 2xx body (or one report of a batch answer) read as a report."""
    try:
        report = parse_report(body)
    except (ValueError, InvalidReport, RecursionError) as exc:  # deep nesting: not a report
        return CallOutcome(OutcomeKind.BAD_REPORT, http_status=status, detail=_why(exc))
    kind = OutcomeKind.UNKNOWN if report.status is RemoteStatus.UNKNOWN else OutcomeKind.REPORT
    return CallOutcome(kind, report=report, http_status=status)


#: How an answer is read: ``classify``, or (``executor/batch.py``) a batch poll's reader.
Reader = Callable[[int, bytes, bool, Mapping[str, str] | None, Callable[[], datetime]], CallOutcome]


def _why(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__


def _retry_after(headers: Mapping[str, str] | None, now: Callable[[], datetime]) -> float | None:
    """Seconds a ``Retry-After`` asks for (RFC 9110: ASCII digits, or an HTTP date), at most
    ``MAX_RETRY_AFTER``; None when there is none or it is malformed (the answer is then a
    plain 429 or 503, retried with backoff)."""
    # an answer's header names are in lower case (``Wire``); a case-blind mapping finds it so too
    value = None if headers is None else headers.get("retry-after") or headers.get("Retry-After")
    if not value:
        return None
    text = str(value).strip()
    if _SECONDS.fullmatch(text):  # 400 digits is no reason to build a 400-digit number
        return MAX_RETRY_AFTER if len(text) > 9 else min(float(text), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no zone said
        when = when.replace(tzinfo=UTC)
    return min(MAX_RETRY_AFTER, max(0.0, (when - now()).total_seconds()))

"""Batch polls (PROTOCOL.md, "Batch polls"): one ``GET {batch_poll_url}?ids=a,b,c`` about
up to ``BATCH_LIMIT`` calls in flight under the same call settings, and how its answer is
read: each remote id's report exactly as a poll's answer would be, an id left out as
UNKNOWN, and an answer that is not a 2xx ``{"reports": {...}}`` as every id's failure.

The headers of a batch call are the task's own, ``X-Ecron-Task``, ``X-Ecron-Report-Stream``
where the daemon has a queue and, where the task has a ``secret``, ``X-Ecron-Signature``
(over the path and query as sent, with an empty body); none that belongs to one execution
(its id, its times, its callback URL and token), since the call is about many. A 404 is not
read as UNKNOWN for every id: it says the batch endpoint is missing, not that the service
lost the ids, so it is a failed call (``REJECTED``): a failed probe for each id, as any
other 4xx would be.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar
from urllib.parse import quote

from multidict import CIMultiDict
from yarl import URL

from ecron.clock import Clock
from ecron.config.model import CallSettings
from ecron.core import Execution, deadline_passed
from ecron.executor.calls import Calls, UnknownTask
from ecron.executor.http import (
    BODY_LIMIT,
    CallContext,
    CallOutcome,
    HttpCaller,
    OutcomeKind,
    answered,
    classify,
    decode_body,
    report_outcome,
    scrubbed,
)
from ecron.signing import signature

#: The most remote ids one batch poll asks about.
BATCH_LIMIT = 100
#: The ``call`` label of batch polls in ``ecron_http_calls_total``.
CALL_NAME = "batch_poll"
#: An id a batch answer leaves out of its ``reports``: this service does not know it.
MISSING = CallOutcome(
    OutcomeKind.UNKNOWN, http_status=200, detail="not in the batch poll answer's reports"
)
_SYSTEM_CLOCK = Clock()

#: What due polls are batched by: the task, the step number, the call settings (by
#: identity: a reload makes new ones) and the batch endpoint.
BatchKey = tuple[str, int | None, int, str]
_T = TypeVar("_T")


def batch_key(
    execution: Execution | None, calls: Calls, stopping: Container[tuple[str, int]], now: datetime
) -> BatchKey | None:
    """What a due look at ``execution`` is batched by; None when it is not simply a poll of
    a batch-polled call: it may have ended, time out, be pushed or stopping, or its task be
    unknown here (it is then looked at on its own)."""
    if execution is None or execution.is_final:
        return None
    try:
        call, ctx = calls.call_of(execution)
    except UnknownTask:
        return None
    if call.batch_poll_url is None or call.pushed or execution.cancel_sent_at is not None:
        return None
    if (execution.eid, execution.fence) in stopping or deadline_passed(execution, now):
        return None
    return (execution.task, ctx.step_number, id(call), call.batch_poll_url)


def in_batches(keyed: Iterable[tuple[_T, BatchKey]]) -> list[list[_T]]:
    """The items of each key together, in order, in batches of at most ``BATCH_LIMIT``."""
    by_key: dict[BatchKey, list[_T]] = {}
    for item, key in keyed:
        by_key.setdefault(key, []).append(item)
    return [
        items[first : first + BATCH_LIMIT]
        for items in by_key.values()
        for first in range(0, len(items), BATCH_LIMIT)
    ]


def batch_target(url: str, remote_ids: Sequence[str]) -> URL:
    """``url`` with ``ids=a,b,c`` added to its query string (each id URL-encoded, the
    query string already there kept before it)."""
    base = URL(url)
    ids = "ids=" + ",".join(quote(remote_id, safe="") for remote_id in remote_ids)
    query = f"{base.raw_query_string}&{ids}" if base.raw_query_string else ids
    return URL.build(
        scheme=base.scheme,
        authority=base.raw_authority,
        path=base.raw_path,
        query_string=query,
        encoded=True,
    )


async def batch_poll(
    caller: HttpCaller, call: CallSettings, ctxs: Sequence[CallContext]
) -> dict[str, CallOutcome]:
    """One batch poll about ``ctxs`` (calls of one task under ``call``, at most
    ``BATCH_LIMIT``): each remote id's outcome."""
    return (await batch_answer(caller, call, ctxs))[1]


async def batch_answer(
    caller: HttpCaller, call: CallSettings, ctxs: Sequence[CallContext]
) -> tuple[CallOutcome, dict[str, CallOutcome]]:
    """One batch poll about ``ctxs``: the answer as ``read_batch`` read it (with its
    ``reports``, or what failed) and each remote id's outcome. ``ecron check-service``
    judges both; the daemon needs only the second (``batch_poll``)."""
    assert call.batch_poll_url is not None and 0 < len(ctxs) <= BATCH_LIMIT
    ids = [ctx.remote_id for ctx in ctxs]
    url = batch_target(call.batch_poll_url, ids)
    headers = CIMultiDict(call.headers)
    headers["X-Ecron-Task"] = ctxs[0].task
    if caller.report_stream is not None:  # the daemon's, the same for every id
        headers["X-Ecron-Report-Stream"] = caller.report_stream
    if call.secret:
        stamp = int(caller.clock.now().timestamp())
        headers["X-Ecron-Signature"] = signature(call.secret, "GET", url.raw_path_qs, b"", stamp)
    answer = await caller.get(url, call, ctxs[0], headers, read=read_batch, name=CALL_NAME)
    if answer.reports is None:  # the call failed: a failed probe of every id in it
        return answer, dict.fromkeys(ids, answer)
    outcomes = {}
    for remote_id in ids:
        if remote_id not in answer.reports:
            outcomes[remote_id] = MISSING
            continue
        outcome = report_outcome(answer.reports[remote_id], answer.http_status or 200)
        if outcome.detail:  # it becomes the execution's message: it quotes no secret
            outcome = replace(outcome, detail=scrubbed(outcome.detail, headers))
        outcomes[remote_id] = outcome
    return answer, outcomes


async def probe(caller: HttpCaller, call: CallSettings, ctx: CallContext) -> CallOutcome:
    """A poll of one call in flight: through the batch endpoint where the task has one (an
    execution of a batch-polled task is never polled one by one)."""
    if call.batch_poll_url is None:
        return await caller.poll(call, ctx)
    return (await batch_poll(caller, call, [ctx]))[ctx.remote_id]


def read_batch(
    status: int,
    content: bytes,
    too_big: bool,
    headers: Mapping[str, str] | None = None,
    now: Callable[[], datetime] = _SYSTEM_CLOCK.now,
) -> CallOutcome:
    """A batch poll's answer: a 2xx ``{"reports": {...}}`` (kept, unread, in ``reports``),
    or what failed, for every id in the call (a 404 too: see the module docstring)."""
    if not 200 <= status < 300:
        if status == 404:
            detail = f"{answered(status, content)} (is the batch_poll_url right?)"
            return CallOutcome(OutcomeKind.REJECTED, http_status=status, detail=detail)
        return classify(status, content, too_big, headers, now)
    if too_big:
        detail = f"body over {BODY_LIMIT} bytes"
        return CallOutcome(OutcomeKind.BAD_REPORT, http_status=status, detail=detail)
    try:
        body = decode_body(content)
    except (ValueError, RecursionError) as exc:  # deep nesting: not an answer
        detail = str(exc)[:200] or type(exc).__name__
        return CallOutcome(OutcomeKind.BAD_REPORT, http_status=status, detail=detail)
    reports = body.get("reports") if isinstance(body, dict) else None
    if not isinstance(reports, dict):
        detail = (
            f'a batch poll answer is a JSON object with a "reports" object, not {excerpt(content)}'
        )
        return CallOutcome(OutcomeKind.BAD_REPORT, http_status=status, detail=detail)
    return CallOutcome(OutcomeKind.REPORT, http_status=status, reports=reports)


def excerpt(content: bytes, limit: int = 100) -> str:
    """The start of an answer's body on one line, for a message: ``{"status": "RUNNING"}``."""
    text = " ".join(content.decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

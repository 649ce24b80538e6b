"""The cancel call: ``DELETE {cancel_url}``, with one more try after a transport error;
whether it was acknowledged, and if not, what the service said. Recording the stop around
it (the cancel recorded as sent before it leaves, so that no node ever sends a second one;
then TIMED_OUT or CANCELLED) is the engine's."""

from __future__ import annotations

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt

from ecron.config.model import CallSettings
from ecron.executor.http import CallContext, CallOutcome, HttpCaller
from ecron.executor.outcomes import ACKNOWLEDGED, CANCEL_RETRYABLE, said

log = structlog.get_logger(__name__)

#: Cancel calls in all for one stop: a transport error gets one more try, at once (no
#: backoff: the execution is ending either way, and a second cancel is never sent after
#: an answer).
CANCEL_ATTEMPTS = 2


async def send_cancel(
    caller: HttpCaller, call: CallSettings, ctx: CallContext
) -> tuple[bool, str | None]:
    """``DELETE {cancel_url}`` of the call ``ctx``, with one more try after a transport
    error: acknowledged?, and when not, what became of it in words people read (``cancel
    answered HTTP 500: {"error": "busy"}``), for the execution's message."""

    def log_retry(state: RetryCallState) -> None:
        log.warning(
            "cancel_retried",
            task=ctx.task,
            execution_id=ctx.eid,
            attempt=state.attempt_number,
            attempts_left=CANCEL_ATTEMPTS - state.attempt_number,
            detail=state.outcome.result().detail if state.outcome else None,
        )

    retrying = AsyncRetrying(
        stop=stop_after_attempt(CANCEL_ATTEMPTS),
        retry=retry_if_result(lambda outcome: outcome.kind in CANCEL_RETRYABLE),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        before_sleep=log_retry,
    )
    outcome: CallOutcome = await retrying(caller.cancel, call, ctx)
    acknowledged = outcome.kind in ACKNOWLEDGED
    log.info(
        "cancel_sent",
        task=ctx.task,
        execution_id=ctx.eid,
        acknowledged=acknowledged,
        outcome=str(outcome.kind),
    )
    return acknowledged, None if acknowledged else said("cancel", outcome)

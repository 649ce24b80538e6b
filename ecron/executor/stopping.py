"""Stopping an execution: the cancel call, sent once, then TIMED_OUT or CANCELLED.

The cancel is recorded (``cancel_sent_at``) before it leaves, so that no node ever sends
a second one: whoever records it sends it. A transport error gets one more try. After a
cancel the execution is never polled again, and later reports change nothing.
"""

from __future__ import annotations

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt

from ecron.core import CancelSent, Execution, Status, Stopped
from ecron.executor.calls import Calls
from ecron.executor.http import CallOutcome, HttpCaller
from ecron.executor.outcomes import ACKNOWLEDGED, CANCEL_RETRYABLE
from ecron.executor.recorder import Recorder
from ecron.logs import about

log = structlog.get_logger(__name__)

#: Cancel calls in all for one stop: a transport error gets one more try, at once (no
#: backoff: the execution is ending either way, and a second cancel is never sent after
#: an answer).
CANCEL_ATTEMPTS = 2


class Stopper:
    """Stops executions; ``stopping`` names those whose stop is under way on this node (they
    are never polled or triggered again meanwhile)."""

    def __init__(self, *, recorder: Recorder, calls: Calls, caller: HttpCaller) -> None:
        self.recorder = recorder
        self.calls = calls
        self.caller = caller
        self.stopping: set[str] = set()

    async def stop(self, execution: Execution, status: Status, message: str) -> Execution | None:
        """End ``execution`` as ``status`` (TIMED_OUT or CANCELLED); the stored result, or
        None when this node let go of it or another stop of it is under way here."""
        assert status in (Status.TIMED_OUT, Status.CANCELLED)
        eid = execution.eid
        if eid in self.stopping:
            return None
        self.stopping.add(eid)
        owner = status is Status.TIMED_OUT  # a person's cancel goes through whoever holds it
        try:
            with about(execution, self.recorder.node_id):
                return await self._stop(execution, status, message, owner)
        finally:
            self.stopping.discard(eid)

    async def _stop(
        self, execution: Execution, status: Status, message: str, owner: bool
    ) -> Execution | None:
        acknowledged: bool | None = None
        if execution.triggered_at is not None:
            recorded, stored = await self.recorder.record(execution, CancelSent(), as_owner=owner)
            if stored is None or stored.is_final:
                return stored
            if recorded.changed:
                acknowledged = await self.send_cancel(stored)
            execution = stored
        event = Stopped(status, acknowledged, message)
        _, stored = await self.recorder.record(execution, event, as_owner=owner)
        return stored

    async def send_cancel(self, execution: Execution) -> bool:
        """``DELETE {cancel_url}``, with one more try after a transport error; acknowledged?"""
        call, ctx = self.calls.call_of(execution)

        def log_retry(state: RetryCallState) -> None:
            log.warning(
                "cancel_retried",
                task=execution.task,
                execution_id=execution.eid,
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
        outcome: CallOutcome = await retrying(self.caller.cancel, call, ctx)
        acknowledged = outcome.kind in ACKNOWLEDGED
        log.info(
            "cancel_sent",
            task=execution.task,
            execution_id=execution.eid,
            acknowledged=acknowledged,
            outcome=str(outcome.kind),
        )
        return acknowledged

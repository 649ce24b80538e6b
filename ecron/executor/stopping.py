"""Stopping an execution: the cancel call, sent once, then TIMED_OUT or CANCELLED.

The cancel is recorded (``cancel_sent_at``) before it leaves, so that no node
ever sends a second one: whoever records it sends it. A transport error gets
one more try. After a cancel the execution is never polled again, and later
reports change nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from ecron.core import CancelSent, Execution, Status, Stopped
from ecron.executor.outcomes import ACKNOWLEDGED, CANCEL_RETRYABLE
from ecron.logs import about

if TYPE_CHECKING:
    from ecron.executor.runner import Executor

log = structlog.get_logger(__name__)


async def stop(
    executor: Executor, execution: Execution, status: Status, message: str
) -> Execution | None:
    """End ``execution`` as ``status`` (TIMED_OUT or CANCELLED); the stored result, or None
    when this node let go of it or another stop of it is under way here."""
    assert status in (Status.TIMED_OUT, Status.CANCELLED)
    eid = execution.eid
    if executor.is_stopping(eid):
        return None
    executor.stopping.add(eid)
    owner = status is Status.TIMED_OUT  # a person's cancel goes through whoever holds the lease
    try:
        with about(execution, executor.node_id):
            return await _stop(executor, execution, status, message, owner)
    finally:
        executor.stopping.discard(eid)


async def _stop(
    executor: Executor, execution: Execution, status: Status, message: str, owner: bool
) -> Execution | None:
    acknowledged: bool | None = None
    if execution.triggered_at is not None:
        recorded, stored = await executor.record(execution, CancelSent(), as_owner=owner)
        if stored is None or stored.is_final:
            return stored
        if recorded.changed:
            acknowledged = await send_cancel(executor, stored)
        execution = stored
    event = Stopped(status, acknowledged, message)
    _, stored = await executor.record(execution, event, as_owner=owner)
    return stored


async def send_cancel(executor: Executor, execution: Execution) -> bool:
    """``DELETE {cancel_url}``, with one more try after a transport error; acknowledged?"""
    call, ctx = executor.call_of(execution)
    outcome = await executor.caller.cancel(call, ctx)
    if outcome.kind in CANCEL_RETRYABLE:
        log.warning(
            "cancel_retried",
            task=execution.task,
            execution_id=execution.eid,
            attempt=1,
            attempts_left=1,
            detail=outcome.detail,
        )
        outcome = await executor.caller.cancel(call, ctx)
    acknowledged = outcome.kind in ACKNOWLEDGED
    log.info(
        "cancel_sent",
        task=execution.task,
        execution_id=execution.eid,
        acknowledged=acknowledged,
        outcome=str(outcome.kind),
    )
    return acknowledged

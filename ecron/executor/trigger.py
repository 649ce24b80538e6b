"""Starting an execution: the trigger POST, its retries, and the unknown-outcome rule.

Retries (tenacity, under ``trigger_retry``) always carry the same execution
id. A trigger that was sent but got no answer may have started the work, so
the same id is polled before anything else: a report means it started (and
the execution goes on from there); 404/UNKNOWN means it did not, and the
trigger is sent again, counted against the retry budget. A service that
dedupes on the id therefore never starts one execution twice.

When the budget is spent while the outcome is still unknown, the execution
stays PENDING and is handed to the poller, which keeps asking: a report
adopts it, 404/UNKNOWN ends it FAILED ``trigger_failed``, and the deadline or
``max_probe_failures`` end it as for any other execution.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base, wait_exponential_jitter

from ecron.config.model import CallSettings, TriggerRetry
from ecron.core import Execution, Status, current_step
from ecron.executor.http import CallContext, CallOutcome, OutcomeKind
from ecron.executor.outcomes import RETRYABLE, trigger_event
from ecron.logs import about

if TYPE_CHECKING:
    from ecron.executor.runner import Executor

log = structlog.get_logger(__name__)


class _Backoff(wait_base):
    """Exponential backoff with jitter, never shorter than the service's ``Retry-After``."""

    def __init__(self, policy: TriggerRetry) -> None:
        backoff = policy.backoff.total_seconds()
        self.exponential = wait_exponential_jitter(
            multiplier=backoff, max=policy.max_backoff.total_seconds(), jitter=backoff
        )

    def __call__(self, retry_state: RetryCallState) -> float:
        wait = self.exponential(retry_state)
        outcome = retry_state.outcome
        if outcome is not None and not outcome.failed:
            asked = outcome.result().retry_after
            if asked is not None:
                wait = max(wait, asked)
        return wait


@dataclass(slots=True)
class _StopAtDeadline(stop_base):
    """Stop when the next try could only start after the execution's deadline."""

    executor: Executor
    ctx: CallContext

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self.ctx.deadline is None:
            return False
        wake = self.executor.clock.now() + timedelta(seconds=retry_state.upcoming_sleep)
        return wake >= self.ctx.deadline


async def run_trigger(executor: Executor, execution: Execution) -> None:
    """Deliver the trigger of a PENDING ``execution`` this node holds, and record the answer.

    Whatever goes wrong unexpectedly, the execution is handed to the poller, so that its
    deadline is still kept.
    """
    try:
        with about(execution, executor.node_id):
            await _run_trigger(executor, execution)
    except Exception:
        log.exception(
            "trigger_failed_unexpectedly", task=execution.task, execution_id=execution.eid
        )
        if execution.eid in executor.inflight:
            executor.schedule(execution.eid, executor.clock.now())


async def _run_trigger(executor: Executor, execution: Execution) -> None:
    call, ctx = executor.call_of(execution)
    step = current_step(execution)
    started = execution.triggered_at if step is None else step.started_at
    probe_first = started is not None  # adopted: a trigger may have left already
    if started is None:
        _, stored = await executor.record(execution, executor.trigger_sent(execution))
        if stored is None or stored.is_final:
            return
        execution = stored
        moved = current_step(execution)
        if (execution.status if moved is None else moved.status) is not Status.PENDING:
            executor.schedule(execution.eid, executor.clock.now())  # a callback overtook it
            return
    attempt = _Attempt(executor, call, replace(ctx, deadline=execution.deadline), probe_first)
    retrying = AsyncRetrying(
        stop=stop_after_attempt(call.trigger_retry.attempts)
        | _StopAtDeadline(executor, attempt.ctx),
        wait=_Backoff(call.trigger_retry),
        retry=retry_if_result(lambda outcome: outcome.kind in RETRYABLE and not attempt.abandoned),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        before_sleep=attempt.log_retry,
        sleep=executor.clock.sleep,
    )
    outcome: CallOutcome = await retrying(attempt)
    if attempt.abandoned:
        return
    if outcome.report is not None:
        executor.warn_ignored(execution, outcome.report)
    unknown = attempt.probe_first or call.mode == "callback"
    if outcome.kind is OutcomeKind.NO_ANSWER and unknown:
        log.warning(
            "trigger_outcome_unknown",
            task=execution.task,
            execution_id=execution.eid,
            detail=outcome.detail,
        )
        executor.schedule(execution.eid, executor.clock.now() + call.poll_interval)
        return
    transition, stored = await executor.record(execution, trigger_event(outcome, ctx.step_number))
    executor.plan_next(transition, stored)


@dataclass(slots=True)
class _Attempt:
    """One try: probe first when a previous trigger's outcome is unknown, then POST."""

    executor: Executor
    call: CallSettings
    ctx: CallContext
    probe_first: bool
    tries: int = 0
    abandoned: bool = False

    async def __call__(self) -> CallOutcome:
        self.tries += 1
        if self.tries > 1 and await self._abandon():
            return CallOutcome(OutcomeKind.UNSENT, detail="the execution moved on")
        if self.call.mode == "callback":
            # Never polled: the trigger itself, sent again with the same id, is the probe
            # (the service answers a known id with its current report).
            return await self.executor.caller.trigger(self.call, self.ctx)
        caller = self.executor.caller
        if self.probe_first:
            probe = await caller.poll(self.call, self.ctx)
            if probe.kind is OutcomeKind.REPORT:
                return probe
            if probe.kind is not OutcomeKind.UNKNOWN:
                detail = f"outcome unknown, and the poll failed: {probe.detail}"
                return replace(probe, kind=OutcomeKind.NO_ANSWER, detail=detail)
            self.probe_first = False
        outcome = await caller.trigger(self.call, self.ctx)
        if outcome.kind is not OutcomeKind.NO_ANSWER:
            return outcome
        self.probe_first = True
        if self.executor.is_stopping(self.ctx.eid):
            return outcome  # cancelled meanwhile: nothing more is sent
        probe = await caller.poll(self.call, self.ctx)
        if probe.kind is OutcomeKind.REPORT:
            return probe
        if probe.kind is OutcomeKind.UNKNOWN:
            self.probe_first = False  # it never started: the next try may send it again
        return outcome

    async def _abandon(self) -> bool:
        """Before a retry: has the execution ended, been cancelled or been taken over?"""
        eid = self.ctx.eid
        held = self.executor.inflight.get(eid)
        fresh = None if held is None else await self.executor.store.get_execution(eid)
        self.abandoned = (
            self.executor.is_stopping(eid)
            or held is None
            or fresh is None
            or fresh.is_final
            or fresh.cancel_sent_at is not None
            or fresh.fence != held.fence
        )
        return self.abandoned

    def log_retry(self, retry_state: RetryCallState) -> None:
        outcome = retry_state.outcome.result() if retry_state.outcome else None
        log.warning(
            "trigger_retry",
            task=self.ctx.task,
            execution_id=self.ctx.eid,
            attempt=retry_state.attempt_number,
            attempts_left=self.call.trigger_retry.attempts - retry_state.attempt_number,
            wait_seconds=round(retry_state.upcoming_sleep, 3),
            outcome=None if outcome is None else str(outcome.kind),
            detail=None if outcome is None else outcome.detail,
        )

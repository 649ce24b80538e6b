"""Starting an execution: the trigger POST, its retries, and the unknown-outcome rule.

Retries (tenacity, under ``trigger_retry``) always carry the same execution
id. A trigger that was sent but got no answer may have started the work, so
the same id is polled before anything else: a report means it started (and
the execution goes on from there); 404/UNKNOWN means it did not, and the
trigger is sent again, counted against the retry budget. A service that
dedupes on the id therefore never starts one execution twice.
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
from ecron.core import Execution, Transition, TriggerSent, apply
from ecron.executor.http import CallContext, CallOutcome, OutcomeKind
from ecron.executor.outcomes import RETRYABLE, trigger_event

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


async def run_trigger(
    executor: Executor, execution: Execution, call: CallSettings, ctx: CallContext
) -> Transition | None:
    """Deliver the trigger of ``execution``; the transition its answer makes, or None if the
    execution was lost to another writer on the way."""
    probe_first = execution.triggered_at is not None  # adopted: a trigger may have left already
    if execution.triggered_at is None:
        sent = apply(execution, TriggerSent(call.task_timeout), executor.clock.now())
        stored = await executor.writer.save(execution, sent.after)
        if stored is None:
            await executor.reconcile(execution.eid)
            return None
        execution = stored
        executor.inflight_update(stored)
    ctx = replace(ctx, deadline=execution.deadline)
    attempt = _Attempt(executor, call, ctx, probe_first)
    retrying = AsyncRetrying(
        stop=stop_after_attempt(call.trigger_retry.attempts) | _StopAtDeadline(executor, ctx),
        wait=_Backoff(call.trigger_retry),
        retry=retry_if_result(lambda outcome: outcome.kind in RETRYABLE),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        before_sleep=attempt.log_retry,
        sleep=executor.clock.sleep,
    )
    outcome: CallOutcome = await retrying(attempt)
    return apply(execution, trigger_event(outcome), executor.clock.now())


@dataclass(slots=True)
class _Attempt:
    """One try: probe first when a previous trigger's outcome is unknown, then POST."""

    executor: Executor
    call: CallSettings
    ctx: CallContext
    probe_first: bool

    async def __call__(self) -> CallOutcome:
        caller = self.executor.caller
        if self.probe_first:
            probe = await caller.poll(self.call, self.ctx)
            if probe.kind is OutcomeKind.REPORT:
                return probe
            if probe.kind is not OutcomeKind.UNKNOWN:
                return replace(
                    probe, kind=OutcomeKind.NO_ANSWER, detail=f"outcome unknown: {probe.detail}"
                )
            self.probe_first = False
        outcome = await caller.trigger(self.call, self.ctx)
        if outcome.kind is not OutcomeKind.NO_ANSWER:
            return outcome
        self.probe_first = True
        probe = await caller.poll(self.call, self.ctx)
        if probe.kind is OutcomeKind.REPORT:
            return probe
        if probe.kind is OutcomeKind.UNKNOWN:
            self.probe_first = False
        return outcome

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

"""The trigger POST of one call, its retries, and the unknown-outcome probe: make the call,
return the outcome. What the outcome means, and what follows, is the engine's.

The first try runs in a worker of the pool, like a poll (``Attempt``). Only when it asks
for a retry does the engine give the execution a coroutine of its own, which waits out the
backoff (tenacity, under ``trigger_retry``) and tries again with the same execution id
(``retried``). A trigger that was sent but got no answer may have started the work, so the
same id is polled before anything else: a report means it started (and the execution goes
on from there); 404/UNKNOWN means it did not, and the trigger is sent again, counted
against the retry budget. A service that dedupes on the id therefore never starts one
execution twice.

When the budget is spent while the outcome is still unknown, the engine hands the
execution to the poller, which keeps asking: a report adopts it, 404/UNKNOWN ends it
FAILED ``trigger_failed``, and the deadline or ``max_probe_failures`` end it as for any
other execution.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from ecron.backoff import exponential
from ecron.clock import Clock
from ecron.config.model import CallSettings, TriggerRetry
from ecron.executor import batch
from ecron.executor.http import CallContext, CallOutcome, HttpCaller, OutcomeKind
from ecron.executor.outcomes import RETRYABLE

log = structlog.get_logger(__name__)

#: Before a retry: is the execution still this node's to trigger (not ended, not being
#: cancelled, the same lease)? Asked by the engine, which knows.
StillOurs = Callable[[], Awaitable[bool]]


def held_back(outcome: CallOutcome) -> bool:
    """True when the service answered ``429`` or ``503`` with a ``Retry-After``: "not now"
    for the whole service (PROTOCOL.md, back-pressure)."""
    return (
        outcome.kind is OutcomeKind.TRANSIENT
        and outcome.http_status in (429, 503)
        and outcome.retry_after is not None
    )


class _Backoff(wait_base):
    """Exponential backoff with jitter, never shorter than the service's ``Retry-After``."""

    def __init__(self, policy: TriggerRetry) -> None:
        self.exponential = exponential(policy.backoff, policy.max_backoff, jitter=True)

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

    clock: Clock
    ctx: CallContext

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self.ctx.deadline is None:
            return False
        wake = self.clock.now() + timedelta(seconds=retry_state.upcoming_sleep)
        return wake >= self.ctx.deadline


@dataclass(slots=True)
class Attempt:
    """The tries of one trigger: probe first when a previous trigger's outcome is unknown,
    then POST. Call it for each try."""

    caller: HttpCaller
    call: CallSettings
    ctx: CallContext
    probe_first: bool
    #: Asked before each retry (not before the first try).
    still_ours: StillOurs
    tries: int = 0
    abandoned: bool = False

    @property
    def outcome_unknown(self) -> bool:
        """True when a trigger may have left without an answer: the next step is a probe (for
        a pushed call, never polled, the trigger sent again is the probe)."""
        return self.probe_first or self.call.pushed

    def worth_retrying(self, outcome: CallOutcome) -> bool:
        """True when ``outcome`` asks for another try and one may be made (not when the
        service held the trigger back: the engine waits until its ``Retry-After``)."""
        return (
            outcome.kind in RETRYABLE
            and not held_back(outcome)
            and not self.abandoned
            and self.call.trigger_retry.attempts > self.tries
        )

    async def __call__(self) -> CallOutcome:
        self.tries += 1
        if self.tries > 1 and not await self.still_ours():
            self.abandoned = True
            return CallOutcome(OutcomeKind.UNSENT, detail="the execution moved on")
        if self.call.pushed:
            # Never polled: the trigger itself, sent again with the same id, is the probe
            # (the service answers a known id with its current report).
            return await self.caller.trigger(self.call, self.ctx)
        if self.probe_first:
            probe = await batch.probe(self.caller, self.call, self.ctx)
            if probe.kind is OutcomeKind.REPORT:
                return probe
            if probe.kind is not OutcomeKind.UNKNOWN:
                detail = f"outcome unknown, and the poll failed: {probe.detail}"
                return replace(probe, kind=OutcomeKind.NO_ANSWER, detail=detail)
            self.probe_first = False
        outcome = await self.caller.trigger(self.call, self.ctx)
        if outcome.kind is not OutcomeKind.NO_ANSWER:
            return outcome
        self.probe_first = True
        probe = await batch.probe(self.caller, self.call, self.ctx)
        if probe.kind is OutcomeKind.REPORT:
            return probe
        if probe.kind is OutcomeKind.UNKNOWN:
            self.probe_first = False  # it never started: the next try may send it again
        return outcome

    async def retried(self, first: CallOutcome, clock: Clock) -> CallOutcome:
        """The tries after ``first`` (the one made already), each after its backoff, until
        one is not worth retrying, the budget or the deadline is spent, or the execution
        moved on; the last outcome."""
        policy = self.call.trigger_retry
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.attempts) | _StopAtDeadline(clock, self.ctx),
            wait=_Backoff(policy),
            retry=retry_if_result(self.worth_retrying),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            before_sleep=self._log_retry,
            sleep=clock.sleep,
        )
        outcome: CallOutcome = await retrying(_Seeded(self, first))
        return outcome

    def _log_retry(self, retry_state: RetryCallState) -> None:
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


@dataclass(slots=True)
class _Seeded:
    """Tenacity's first try is the one already made (in the worker); later ones are real."""

    attempt: Attempt
    first: CallOutcome | None

    async def __call__(self) -> CallOutcome:
        if self.first is not None:
            outcome, self.first = self.first, None
            return outcome
        return await self.attempt()

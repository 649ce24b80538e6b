"""Starting an execution: the trigger POST, its retries, and the unknown-outcome rule.

The first try runs in a worker of the pool, like a poll. Only when it asks for a retry does
the execution get a coroutine of its own, which waits out the backoff (tenacity, under
``trigger_retry``) and tries again with the same execution id. A trigger that was sent but
got no answer may have started the work, so the same id is polled before anything else: a
report means it started (and the execution goes on from there); 404/UNKNOWN means it did
not, and the trigger is sent again, counted against the retry budget. A service that
dedupes on the id therefore never starts one execution twice.

When the budget is spent while the outcome is still unknown, the execution stays PENDING
and is handed to the poller, which keeps asking: a report adopts it, 404/UNKNOWN ends it
FAILED ``trigger_failed``, and the deadline or ``max_probe_failures`` end it as for any
other execution.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from ecron.backoff import exponential
from ecron.clock import Clock
from ecron.config.model import CallSettings, TriggerRetry
from ecron.core import Execution, Status, Transition, current_step
from ecron.executor import batch
from ecron.executor.calls import Calls
from ecron.executor.http import CallContext, CallOutcome, HttpCaller, OutcomeKind
from ecron.executor.outcomes import RETRYABLE, trigger_event
from ecron.executor.recorder import Recorder
from ecron.logs import about

log = structlog.get_logger(__name__)

#: What follows a trigger's answer (the executor's ``plan_next``).
Then = Callable[[Transition, Execution | None], None]
#: Look at an execution again at a time (the executor's ``schedule``).
Look = Callable[[str, datetime], None]
#: Run a coroutine in the background, kept until it ends.
Spawn = Callable[[Coroutine[Any, Any, Any], str], None]


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


class Triggers:
    """Sends triggers and records their answers; see the module docstring."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        calls: Calls,
        caller: HttpCaller,
        clock: Clock,
        stopping: set[str],
        then: Then,
        look: Look,
        spawn: Spawn,
    ) -> None:
        self.recorder = recorder
        self.calls = calls
        self.caller = caller
        self.clock = clock
        self.stopping = stopping
        self.then = then
        self.look = look
        self.spawn = spawn

    async def send(self, execution: Execution, *, fresh: bool) -> None:
        """Deliver the trigger of the call in flight of ``execution`` (held by this node),
        and record the answer. ``fresh``: this node has just recorded that the trigger
        leaves; otherwise (adopted) one may have left already, so the id is polled first.

        Whatever goes wrong unexpectedly, the execution is handed to the poller, so that its
        deadline is still kept.
        """
        try:
            await self._send(execution, fresh)
        except Exception:
            with about(execution, self.recorder.node_id):
                log.exception(
                    "trigger_failed_unexpectedly", task=execution.task, execution_id=execution.eid
                )
            if execution.eid in self.recorder.held:
                self.look(execution.eid, self.clock.now())

    async def _send(self, execution: Execution, fresh: bool) -> None:
        step = current_step(execution)
        if (execution.triggered_at if step is None else step.started_at) is None:
            # The next step of a multi-step execution: record that its trigger leaves.
            _, stored = await self.recorder.record(execution, self.calls.trigger_sent(execution))
            if stored is None or stored.is_final:
                return
            execution, fresh = stored, True
            moved = current_step(execution)
            if (execution.status if moved is None else moved.status) is not Status.PENDING:
                self.look(execution.eid, self.clock.now())  # a callback overtook it
                return
        call, ctx = self.calls.call_of(execution)
        attempt = _Attempt(self, call, ctx, not fresh)
        outcome = await attempt()
        if _worth_retrying(outcome, attempt) and call.trigger_retry.attempts > 1:
            name = f"ecron-trigger-retry-{execution.eid}"
            self.spawn(self._retry(execution, attempt, outcome), name)
            return
        await self._answered(execution, attempt, outcome)

    async def _retry(self, execution: Execution, attempt: _Attempt, first: CallOutcome) -> None:
        """Retries after the first try, each after its backoff, in a coroutine of its own."""
        call = attempt.call
        seeded = _Seeded(attempt, first)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(call.trigger_retry.attempts)
            | _StopAtDeadline(self.clock, attempt.ctx),
            wait=_Backoff(call.trigger_retry),
            retry=retry_if_result(lambda outcome: _worth_retrying(outcome, attempt)),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
            before_sleep=attempt.log_retry,
            sleep=self.clock.sleep,
        )
        try:
            with about(execution, self.recorder.node_id):
                outcome: CallOutcome = await retrying(seeded)
                if not attempt.abandoned:
                    await self._answered(execution, attempt, outcome)
        except Exception:
            log.exception(
                "trigger_failed_unexpectedly", task=execution.task, execution_id=execution.eid
            )
            if execution.eid in self.recorder.held:
                self.look(execution.eid, self.clock.now())

    async def _answered(
        self, execution: Execution, attempt: _Attempt, outcome: CallOutcome
    ) -> None:
        """Record the (last) answer, or hand an unknown outcome to the poller."""
        current = self.recorder.held.get(execution.eid, execution)
        if outcome.report is not None:
            self.recorder.warn_ignored(current, outcome.report)
        unknown = attempt.probe_first or attempt.call.pushed
        if outcome.kind is OutcomeKind.NO_ANSWER and unknown:
            log.warning(
                "trigger_outcome_unknown",
                task=execution.task,
                execution_id=execution.eid,
                detail=outcome.detail,
            )
            self.look(execution.eid, self.clock.now() + attempt.call.poll_interval)
            return
        event = trigger_event(outcome, attempt.ctx.step_number)
        transition, stored = await self.recorder.record(current, event)
        self.then(transition, stored)


def _worth_retrying(outcome: CallOutcome, attempt: _Attempt) -> bool:
    return outcome.kind in RETRYABLE and not attempt.abandoned


@dataclass(slots=True)
class _Seeded:
    """Tenacity's first try is the one already made (in the worker); later ones are real."""

    attempt: _Attempt
    first: CallOutcome | None

    async def __call__(self) -> CallOutcome:
        if self.first is not None:
            outcome, self.first = self.first, None
            return outcome
        return await self.attempt()


@dataclass(slots=True)
class _Attempt:
    """One try: probe first when a previous trigger's outcome is unknown, then POST."""

    triggers: Triggers
    call: CallSettings
    ctx: CallContext
    probe_first: bool
    tries: int = 0
    abandoned: bool = False

    async def __call__(self) -> CallOutcome:
        self.tries += 1
        if self.tries > 1 and await self._abandon():
            return CallOutcome(OutcomeKind.UNSENT, detail="the execution moved on")
        caller = self.triggers.caller
        if self.call.pushed:
            # Never polled: the trigger itself, sent again with the same id, is the probe
            # (the service answers a known id with its current report).
            return await caller.trigger(self.call, self.ctx)
        if self.probe_first:
            probe = await batch.probe(caller, self.call, self.ctx)
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
        if self.ctx.eid in self.triggers.stopping:
            return outcome  # cancelled meanwhile: nothing more is sent
        probe = await batch.probe(caller, self.call, self.ctx)
        if probe.kind is OutcomeKind.REPORT:
            return probe
        if probe.kind is OutcomeKind.UNKNOWN:
            self.probe_first = False  # it never started: the next try may send it again
        return outcome

    async def _abandon(self) -> bool:
        """Before a retry: has the execution ended, been cancelled or been taken over?"""
        eid = self.ctx.eid
        recorder = self.triggers.recorder
        held = recorder.held.get(eid)
        fresh = None if held is None else await recorder.store.get_execution(eid)
        self.abandoned = (
            eid in self.triggers.stopping
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

"""Looking at one execution when its time comes: the poll and what its answer means, the
deadline (the cancel call), the heartbeat of a callback-mode execution, and a cancel that a
node recorded but never finished. Executions of a batch-polled task are looked at many at a
time: the same checks one by one, one batch poll, and each answer read as one poll's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import structlog

from ecron.clock import Clock
from ecron.config.model import CallSettings
from ecron.core import Execution, ProbeFailed, Status, Transition, deadline_passed
from ecron.executor.batch import BATCH_LIMIT, batch_poll, probe
from ecron.executor.calls import Calls
from ecron.executor.http import CallContext, CallOutcome, HttpCaller
from ecron.executor.outcomes import poll_event
from ecron.executor.recorder import Recorder
from ecron.executor.stopping import Stopper
from ecron.executor.trigger import Look
from ecron.logs import about

log = structlog.get_logger(__name__)

#: When to look at a RUNNING execution next (the executor's ``_next_due``).
NextDue = Callable[[Execution], datetime]
#: What follows an answer: the executor's ``plan_next(transition, stored, call, now)``.
PlanNext = Callable[[Transition, Execution | None, CallSettings | None, datetime | None], None]
#: What follows when looking at one execution failed unexpectedly (the executor's: hand it
#: back when its task is unknown here, else log it and look again later).
Failed = Callable[[str, Exception], Awaitable[None]]


class Polls:
    """Looks at executions whose time came; see the module docstring."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        calls: Calls,
        caller: HttpCaller,
        clock: Clock,
        stopper: Stopper,
        adopted: set[str],
        then: PlanNext,
        look: Look,
        next_due: NextDue,
        forget: Callable[[str], None],
    ) -> None:
        self.recorder = recorder
        self.held = recorder.held
        self.store = recorder.store
        self.node_id = recorder.node_id
        self.calls = calls
        self.caller = caller
        self.clock = clock
        self.stopper = stopper
        self.stopping = stopper.stopping
        #: Executions taken over and not polled since: their first poll is the residue check.
        self.adopted = adopted
        self.plan_next = then
        self.schedule = look
        self.next_due = next_due
        self.forget = forget

    async def look_at(self, eid: str) -> None:
        """A due call: time out, poll, or check the heartbeat of ``eid``. A batch-polled
        execution is polled through its batch endpoint even alone (a batch of one)."""
        due = await self._before_call(eid)
        if due is None:
            return
        call, ctx = due
        if call.batch_poll_url is None:  # the common case: no batch endpoint in between
            outcome = await self.caller.poll(call, ctx)
        else:
            outcome = await probe(self.caller, call, ctx)
        await self._answered(eid, call, ctx, outcome)

    async def look_at_many(self, eids: Sequence[str], failed: Failed) -> None:
        """Due calls of batch-polled executions, grouped by the executor: the checks of
        ``look_at`` one by one (one that times out, or is pushed, is never asked about), then
        one batch poll per call settings, each id's answer applied as a poll's would be.
        ``failed``: what follows when one execution fails unexpectedly (the rest go on)."""
        groups: dict[int, tuple[CallSettings, list[tuple[str, CallContext]]]] = {}
        for eid in eids:
            try:
                due = await self._before_call(eid)
            except Exception as exc:
                await failed(eid, exc)
                continue
            if due is not None:
                groups.setdefault(id(due[0]), (due[0], []))[1].append((eid, due[1]))
        for call, calls in groups.values():
            for first in range(0, len(calls), BATCH_LIMIT):
                await self._poll_batch(call, calls[first : first + BATCH_LIMIT], failed)

    async def _poll_batch(
        self, call: CallSettings, calls: list[tuple[str, CallContext]], failed: Failed
    ) -> None:
        """One batch poll about ``calls``; each answer applied at once, side by side."""
        try:
            if call.batch_poll_url is None:  # a reload took the batch endpoint away meanwhile
                outcomes = {ctx.remote_id: await self.caller.poll(call, ctx) for _, ctx in calls}
            else:
                outcomes = await batch_poll(self.caller, call, [ctx for _, ctx in calls])
            results = await asyncio.gather(
                *(self._answered(eid, call, ctx, outcomes[ctx.remote_id]) for eid, ctx in calls),
                return_exceptions=True,
            )
        except Exception as exc:
            results = [exc] * len(calls)
        for (eid, _), result in zip(calls, results, strict=True):
            if isinstance(result, Exception):
                await failed(eid, result)
            elif isinstance(result, BaseException):
                raise result

    async def _before_call(self, eid: str) -> tuple[CallSettings, CallContext] | None:
        """What comes before a poll: nothing for an execution that ended, is being stopped or
        has not started; the end of an abandoned cancel; the timeout; a callback-mode
        heartbeat. The call to poll, or None when no poll is due."""
        execution = self.held.get(eid)
        if execution is None or execution.is_final or eid in self.stopping:
            self.adopted.discard(eid)
            return None
        if execution.status is Status.SCHEDULED:
            return None  # not started: its start is planned apart
        now = self.clock.now()
        if execution.cancel_sent_at is not None:
            await self._finish_abandoned_cancel(execution, now)
            return None
        if deadline_passed(execution, now):
            await self.stopper.stop(execution, Status.TIMED_OUT, "the task timeout passed")
            return None
        call, ctx = self.calls.call_of(execution)
        if call.pushed:
            await self._check_heartbeat(execution, call, now)
            return None
        return call, ctx

    async def _answered(
        self, eid: str, call: CallSettings, ctx: CallContext, outcome: CallOutcome
    ) -> None:
        """What a poll's answer (alone, or one id's of a batch) means, through the recorder,
        and when to look again."""
        if eid in self.stopping:
            return  # a cancel started while this poll was out: its answer no longer counts
        current = self.held.get(eid)
        if current is None:
            return  # let go meanwhile
        if outcome.report is not None and outcome.report.warnings:
            self.recorder.warn_ignored(current, outcome.report)
        adopted = eid in self.adopted
        if adopted:
            self.adopted.discard(eid)
        event = poll_event(outcome, call, ctx.step_number, after_takeover=adopted)
        answered = self.clock.now()
        transition, stored = await self.recorder.record(current, event, now=answered)
        if isinstance(event, ProbeFailed) and stored is not None:
            with about(stored, self.node_id):
                log.warning(
                    "poll_failed",
                    attempt=stored.probe_failures,
                    attempts_left=max(0, call.max_probe_failures - stored.probe_failures),
                    outcome=str(outcome.kind),
                    detail=outcome.detail,
                )
        self.plan_next(transition, stored, call, answered)

    async def _finish_abandoned_cancel(self, execution: Execution, now: datetime) -> None:
        """A cancel was recorded (by a node that died, or elsewhere) but never finished:
        after a grace period, end the execution without sending a second cancel."""
        assert execution.cancel_sent_at is not None
        call, _ = self.calls.call_of(execution)
        grace = call.request_timeout * 3
        if now < execution.cancel_sent_at + grace:
            self.schedule(execution.eid, execution.cancel_sent_at + grace)
            return
        timed_out = deadline_passed(execution, now)
        status = Status.TIMED_OUT if timed_out else Status.CANCELLED
        await self.stopper.stop(execution, status, "the cancel was sent; it never finished")

    async def _check_heartbeat(
        self, execution: Execution, call: CallSettings, now: datetime
    ) -> None:
        """Callback mode: silence past ``heartbeat_timeout`` ends it FAILED unreachable."""
        fresh = await self.store.get_execution(execution.eid)  # callbacks may land on any node
        if fresh is None or fresh.is_final or fresh.fence != execution.fence:
            self.forget(execution.eid)
            return
        self.held.remember(fresh)
        since = fresh.last_report_at or fresh.triggered_at or now
        if now < since + call.heartbeat_timeout and not deadline_passed(fresh, now):
            self.schedule(fresh.eid, self.next_due(fresh))
            return
        if deadline_passed(fresh, now):
            await self.stopper.stop(fresh, Status.TIMED_OUT, "the task timeout passed")
            return
        silence = call.heartbeat_timeout.total_seconds()
        event = ProbeFailed("unreachable", 1, f"no report for {silence:g}s (heartbeat_timeout)")
        transition, stored = await self.recorder.record(fresh, event)
        self.plan_next(transition, stored, None, None)

"""Making one call and recording what it said: the trigger (with its retries and the
unknown-outcome probe), polls (one, or a batch), the read of a pushed call's row, the stop
(the cancel recorded as sent, then sent once, then the end). Each returns what happened, as
data (``Happened``: the execution as recorded, and the occasion to ask
``core.next_action`` about); the engine asks, and carries the answer out. Nothing here
decides what comes next, and nothing calls back up into the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from itertools import compress

import structlog

from ecron.clock import Clock, iso
from ecron.config.model import CallSettings
from ecron.core import (
    CancelSent,
    Execution,
    Ownership,
    ProbeFailed,
    Status,
    Stopped,
    WaitingFor,
    ownership,
)
from ecron.core.machine import HeldBack
from ecron.core.next import Occasion, Read, Recorded, Unanswered
from ecron.executor.batch import batch_poll
from ecron.executor.calls import Calls
from ecron.executor.held import Held
from ecron.executor.held_back import HeldBackUntil
from ecron.executor.http import CallContext, CallOutcome, HttpCaller, OutcomeKind
from ecron.executor.outcomes import poll_event, trigger_event
from ecron.executor.recorder import Change, Recorder
from ecron.executor.stopping import send_cancel
from ecron.executor.trigger import Attempt, held_back
from ecron.logs import about
from ecron.store.base import Store

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Happened:
    """What a call (or a read) came to: the execution as it now is (None: let go, or gone),
    why to ask what follows, and the change recorded (with what an end inserted)."""

    eid: str
    execution: Execution | None
    occasion: Occasion
    change: Change | None = None

    @property
    def fence(self) -> int | None:
        """The fence of the lease it happened on (None: not known)."""
        if self.execution is not None:
            return self.execution.fence
        if self.change is not None:
            return self.change.transition.before.fence
        return None


@dataclass(frozen=True, slots=True)
class Retrying:
    """The first try of a trigger asks for more: the engine gives them a coroutine."""

    execution: Execution
    attempt: Attempt
    first: CallOutcome


class Performer:
    """Makes the calls of the executions this node drives; see the module docstring.
    ``stopping``: the executions whose stop is under way here, by eid and the fence of the
    lease it is made on (never polled or triggered again meanwhile on that lease; a stop on
    a lease lost since does not hold up the newer lease's)."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        held: Held,
        calls: Calls,
        store: Store,
        caller: HttpCaller,
        clock: Clock,
        node_id: str,
        held_back: HeldBackUntil,
    ) -> None:
        self.recorder = recorder
        self.held = held
        self.calls = calls
        self.store = store
        self.node_id = node_id
        self.caller = caller
        self.clock = clock
        self.stopping: set[tuple[str, int]] = set()
        #: Until when services asked for no trigger (``Retry-After``), as this node heard.
        self.held_back = held_back

    # -- triggers ---------------------------------------------------------------------------

    async def leave(self, execution: Execution) -> Happened:
        """Record that the trigger of the call in flight (a step not started yet) leaves."""
        change = await self.recorder.record(execution, self.calls.trigger_sent(execution))
        return Happened(execution.eid, change.stored, Recorded(change.transition), change)

    async def trigger(self, execution: Execution, probe_first: bool) -> Happened | Retrying | None:
        """The first try of the trigger of the call in flight (started already); what it
        came to, ``Retrying`` when it asks for more tries, or None when this node found,
        its leases confirmed, that it no longer holds the execution on that lease."""
        if not await self._confirmed(execution.eid, execution.fence):
            return None
        call, ctx = self.calls.call_of(execution)
        attempt = Attempt(
            self.caller, call, ctx, probe_first, partial(self._still_ours, execution.eid)
        )
        outcome = await attempt()
        if attempt.worth_retrying(outcome):
            return Retrying(execution, attempt, outcome)
        return await self.triggered(execution, attempt, outcome)

    async def retried(self, retrying: Retrying) -> Happened | None:
        """The tries after the first, each after its backoff; None when the execution moved
        on meanwhile (nothing to record)."""
        attempt = retrying.attempt
        outcome = await attempt.retried(retrying.first, self.clock)
        if attempt.abandoned:
            return None
        return await self.triggered(retrying.execution, attempt, outcome)

    async def _confirmed(self, eid: str, fence: int | None = None) -> bool:
        """Before a call about ``eid`` leaves: does this node still hold it (on ``fence``,
        when given), once its leases are confirmed (``Held.confirmed``: after a pause past
        them, the renewal that lets go of what was lost comes first)?"""
        await self.held.confirmed(self.clock.now())
        held = self.held.get(eid)
        return held is not None and (fence is None or held.fence == fence)

    async def _still_ours(self, eid: str) -> bool:
        """Before a trigger is tried again: is the execution still this node's, not ended
        and not being cancelled?"""
        held = self.held.get(eid)
        if held is None or (eid, held.fence) in self.stopping:
            return False
        fresh = await self.store.get_execution(eid)
        owned = ownership(held, fresh)
        return owned is Ownership.MINE and fresh is not None and fresh.cancel_sent_at is None

    async def triggered(
        self, execution: Execution, attempt: Attempt, outcome: CallOutcome
    ) -> Happened:
        """Record the (last) answer to a trigger, or say its outcome is unknown."""
        eid = execution.eid
        current = self.held.get(eid, execution)
        if outcome.report is not None:
            self.recorder.warn_ignored(current, outcome.report)
        if held_back(outcome):
            return await self._held_back(current, outcome)
        if outcome.kind is OutcomeKind.NO_ANSWER and attempt.outcome_unknown:
            log.warning(
                "trigger_outcome_unknown",
                task=execution.task,
                execution_id=eid,
                detail=outcome.detail,
            )
            return Happened(eid, current, Unanswered())
        event = trigger_event(outcome, attempt.ctx.step_number)
        change = await self.recorder.record(current, event)
        return Happened(eid, change.stored, Recorded(change.transition), change)

    async def _held_back(self, execution: Execution, outcome: CallOutcome) -> Happened:
        """The service held the trigger back (``429``/``503`` with ``Retry-After``): no trigger
        of the task's pool (or of the task) before that moment, here at once and on every
        node (``Store.hold_back``); the execution keeps its id and waits (``HeldBack``)."""
        assert outcome.retry_after is not None
        until = self.clock.now() + timedelta(seconds=outcome.retry_after)
        pool = self.held_back.pool_of(execution.task)
        self.held_back.hold(execution.task, until)
        whose = f"pool {pool}" if pool is not None else f"task {execution.task}"
        message = (
            f"the service answered HTTP {outcome.http_status} with Retry-After: "
            f"no trigger of {whose} before {iso(until)}"
        )
        try:
            await self.store.hold_back(execution.task, pool, until)
        except Exception:  # the execution waits anyway; other nodes learn at their next 429
            log.exception("hold_back_not_recorded", task=execution.task, execution_id=execution.eid)
        with about(execution, self.node_id):
            log.info("trigger_held_back", until=iso(until), http_status=outcome.http_status)
        change = await self.recorder.record(execution, HeldBack(until, message))
        return Happened(execution.eid, change.stored, Recorded(change.transition), change)

    # -- polls ------------------------------------------------------------------------------

    async def poll(
        self, call: CallSettings, items: Sequence[tuple[str, CallContext, bool]]
    ) -> list[Happened | BaseException | None]:
        """Poll ``items`` (eid, call context, first poll after a takeover) under ``call``:
        one GET for one without a batch endpoint, else batch polls; each answer recorded as
        a poll's (None when it no longer counts, an exception in its place when that failed
        unexpectedly). Only what this node still holds is polled, its leases confirmed."""
        kept = [await self._confirmed(eid) for eid, _, _ in items]
        if not all(kept):  # let go meanwhile (lost while the node was paused, say)
            answers = iter(await self.poll(call, list(compress(items, kept))) if any(kept) else [])
            return [next(answers) if keep else None for keep in kept]
        if call.batch_poll_url is None and len(items) == 1:  # the common case, direct
            eid, ctx, after_takeover = items[0]
            try:
                outcome = await self.caller.poll(call, ctx)
                return [await self.polled(eid, call, ctx, outcome, after_takeover)]
            except Exception as exc:
                return [exc]
        try:
            if call.batch_poll_url is None:  # a reload took the batch endpoint away meanwhile
                outcomes = {ctx.remote_id: await self.caller.poll(call, ctx) for _, ctx, _ in items}
            else:
                outcomes = await batch_poll(self.caller, call, [ctx for _, ctx, _ in items])
            return await asyncio.gather(
                *(
                    self.polled(eid, call, ctx, outcomes[ctx.remote_id], after)
                    for eid, ctx, after in items
                ),
                return_exceptions=True,
            )
        except Exception as exc:
            return [exc] * len(items)

    async def polled(
        self,
        eid: str,
        call: CallSettings,
        ctx: CallContext,
        outcome: CallOutcome,
        after_takeover: bool,
    ) -> Happened | None:
        """What a poll's answer (alone, or one id's of a batch) means, through the recorder;
        None when it no longer counts (a stop began while the poll was out, or this node let
        the execution go)."""
        current = self.held.get(eid)
        if current is None or (eid, current.fence) in self.stopping:
            return None
        if outcome.report is not None and outcome.report.warnings:
            self.recorder.warn_ignored(current, outcome.report)
        event = poll_event(outcome, call, ctx.step_number, after_takeover=after_takeover)
        change = await self.recorder.record(current, event, now=self.clock.now())
        if isinstance(event, ProbeFailed) and change.stored is not None:
            with about(change.stored, self.node_id):
                log.warning(
                    "poll_failed",
                    attempt=change.stored.probe_failures,
                    attempts_left=max(0, call.max_probe_failures - change.stored.probe_failures),
                    outcome=str(outcome.kind),
                    detail=outcome.detail,
                )
        return Happened(eid, change.stored, Recorded(change.transition), change)

    # -- pushed calls, stops ----------------------------------------------------------------

    async def listen(self, execution: Execution) -> Happened:
        """A pushed call's heartbeat came due: read the row (reports land on any node)."""
        fresh = await self.store.get_execution(execution.eid)
        if fresh is not None and ownership(execution, fresh) is Ownership.MINE:
            self.held.remember(fresh)
        return Happened(execution.eid, execution, Read(fresh))

    async def silent(self, execution: Execution) -> Happened:
        """No report within ``heartbeat_timeout``: a failed probe series (unreachable)."""
        silence = self.calls.call_of(execution)[0].heartbeat_timeout.total_seconds()
        event = ProbeFailed("unreachable", 1, f"no report for {silence:g}s (heartbeat_timeout)")
        change = await self.recorder.record(execution, event)
        return Happened(execution.eid, change.stored, Recorded(change.transition), change)

    async def stop(
        self, execution: Execution, status: Status, message: str, *, called: bool = True
    ) -> Happened | None:
        """End ``execution`` as ``status`` (TIMED_OUT or CANCELLED): the cancel recorded as
        sent, then sent (once: whoever recorded it sends it), then the end. None when
        another stop of it is under way here; else what it came to (the execution None when
        this node let go of it). A person's cancel goes through whoever holds it. No cancel
        call is made for a call never sent (``called`` False: its trigger was recorded only
        after the deadline, see ``core.next.Cancel``) or held back by its service."""
        eid, lease = execution.eid, (execution.eid, execution.fence)
        if lease in self.stopping:
            return None
        self.stopping.add(lease)
        owner = status is Status.TIMED_OUT
        try:
            with about(execution, self.node_id):
                acknowledged: bool | None = None
                sent_once = execution.triggered_at is not None and called
                if sent_once and execution.waiting_for is not WaitingFor.RETRY_AFTER:
                    # (a trigger the service held back started nothing: no cancel)
                    sent = await self.recorder.record(execution, CancelSent(), as_owner=owner)
                    if sent.stored is None or sent.stored.is_final:
                        return Happened(eid, sent.stored, Recorded(sent.transition), sent)
                    if sent.transition.changed:
                        call, ctx = self.calls.call_of(sent.stored)
                        acknowledged, why = await send_cancel(self.caller, call, ctx)
                        message = message if why is None else f"{message}; {why}"
                    execution = sent.stored
                event = Stopped(status, acknowledged, message)
                change = await self.recorder.record(execution, event, as_owner=owner)
                return Happened(eid, change.stored, Recorded(change.transition), change)
        finally:
            self.stopping.discard(lease)

"""The executor: drives every in-flight execution this node holds.

Thousands of executions can be in flight; they share one timing structure (a
heap of next-poll times) and a bounded pool of poll workers over one HTTP
session. No execution has a coroutine of its own while it waits. A trigger,
which is short-lived but may be retried with backoff, runs in its own task.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from datetime import datetime, timedelta

import structlog

from ecron.clock import Clock
from ecron.config.model import CallSettings, TaskSpec
from ecron.core import CancelSent, Execution, Status, Stopped, Transition, apply, deadline_passed
from ecron.executor.http import CallContext, HttpCaller
from ecron.executor.outcomes import ACKNOWLEDGED, CANCEL_RETRYABLE, poll_event
from ecron.executor.trigger import run_trigger
from ecron.ids import remote_id
from ecron.store.base import Store
from ecron.store.writer import StateWriter

log = structlog.get_logger(__name__)

Finished = Callable[[Execution], Awaitable[None]]


class Executor:
    """Runs triggers, polls and cancels for the executions this node holds."""

    def __init__(
        self,
        *,
        store: Store,
        writer: StateWriter,
        caller: HttpCaller,
        clock: Clock,
        specs: Mapping[str, TaskSpec],
        workers: int = 64,
        on_finished: Finished | None = None,
    ) -> None:
        self.store = store
        self.writer = writer
        self.caller = caller
        self.clock = clock
        self.specs = specs
        self.workers = workers
        self.on_finished = on_finished
        self._inflight: dict[str, Execution] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._heap: list[tuple[datetime, int, str]] = []
        self._live_entry: dict[str, int] = {}
        self._seq = itertools.count()
        self._queue: asyncio.Queue[str] = asyncio.Queue(maxsize=workers * 2)
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()

    # -- what the rest of ecron calls ----------------------------------------------------

    @property
    def inflight(self) -> Mapping[str, Execution]:
        """The executions this node drives, by eid."""
        return self._inflight

    def start(self, execution: Execution) -> None:
        """Send the trigger of a PENDING execution this node holds, now, in the background."""
        self._inflight[execution.eid] = execution
        self._spawn(self._trigger(execution.eid), f"ecron-trigger-{execution.eid}")

    def adopt(self, execution: Execution) -> None:
        """Take over an active execution (after a restart or another node's death).

        One never triggered is started; one whose trigger left is polled first
        (the unknown-outcome rule); a RUNNING one is polled at once.
        """
        if execution.status is Status.PENDING and execution.triggered_at is None:
            self.start(execution)
            return
        self._inflight[execution.eid] = execution
        if execution.status is Status.PENDING:
            self._spawn(self._trigger(execution.eid), f"ecron-adopt-{execution.eid}")
        else:
            self._schedule(execution.eid, self.clock.now())

    def hold(self, execution: Execution) -> None:
        """Keep ``execution`` (claimed, not yet due) among this node's leases until it starts."""
        self._inflight[execution.eid] = execution

    def inflight_update(self, execution: Execution) -> None:
        """Record the newest stored state of an execution this node drives."""
        if execution.eid in self._inflight:
            self._inflight[execution.eid] = execution

    def forget(self, eid: str) -> None:
        """Stop driving ``eid`` (its lease is gone, or it ended)."""
        self._inflight.pop(eid, None)
        self._live_entry.pop(eid, None)
        self._locks.pop(eid, None)

    async def cancel(self, eid: str, message: str) -> Execution | None:
        """A person's cancel of an execution this node drives: cancel call, then CANCELLED."""
        if eid not in self._inflight:
            return None
        async with self._lock(eid):
            execution = self._inflight.get(eid)
            if execution is None or execution.is_final:
                return execution
            return await self._stop(execution, Status.CANCELLED, message)

    async def run(self) -> None:
        """The dispatcher and the poll workers; runs until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._dispatch(), name="ecron-poll-dispatcher")
            for number in range(self.workers):
                group.create_task(self._work(), name=f"ecron-poll-worker-{number}")

    async def drain(self, timeout: float) -> None:
        """Let triggers and cancels in progress finish, for at most ``timeout`` seconds."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout)
        await self.writer.drain()

    # -- timing ---------------------------------------------------------------------------

    def _schedule(self, eid: str, due: datetime) -> None:
        seq = next(self._seq)
        self._live_entry[eid] = seq
        heapq.heappush(self._heap, (due, seq, eid))
        if self._heap[0][1] == seq:
            self._wake.set()

    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            now = self.clock.now()
            while self._heap and self._heap[0][0] <= now:
                _, seq, eid = heapq.heappop(self._heap)
                if self._live_entry.get(eid) == seq:
                    del self._live_entry[eid]
                    await self._queue.put(eid)
            delay = (self._heap[0][0] - self.clock.now()).total_seconds() if self._heap else None
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    async def _work(self) -> None:
        while True:
            eid = await self._queue.get()
            try:
                await self._poll(eid)
            except Exception:
                log.exception("poll_failed_unexpectedly", execution_id=eid)
                execution = self._inflight.get(eid)
                if execution is not None:
                    call, _ = self.call_of(execution)
                    self._schedule(eid, self.clock.now() + call.poll_interval)
            finally:
                self._queue.task_done()

    # -- the calls --------------------------------------------------------------------------

    async def _trigger(self, eid: str) -> None:
        async with self._lock(eid):
            execution = self._inflight.get(eid)
            if execution is None:
                return
            call, ctx = self.call_of(execution)
            transition = await run_trigger(self, execution, call, ctx)
            if transition is not None:
                await self.commit(transition)

    async def _poll(self, eid: str) -> None:
        async with self._lock(eid):
            execution = self._inflight.get(eid)
            if execution is None or execution.is_final:
                return
            if deadline_passed(execution, self.clock.now()):
                await self._stop(execution, Status.TIMED_OUT, "the task timeout passed")
                return
            call, ctx = self.call_of(execution)
            outcome = await self.caller.poll(call, ctx)
            await self.commit(apply(execution, poll_event(outcome, call), self.clock.now()))

    async def commit(self, transition: Transition) -> Execution | None:
        """Store a transition, then plan what comes next for that execution."""
        if transition.cancel_due:
            return await self._stop(transition.before, Status.TIMED_OUT, "the task timeout passed")
        after = transition.after
        eid = after.eid
        due = None
        if not after.is_final:
            due = self._next_due(after)
            if transition.changed:  # next_poll_at rides along on writes; it never causes one
                after = after.evolve(next_poll_at=due)
        if after != transition.before:
            stored = await self.writer.save(transition.before, after)
            if stored is None:
                await self.reconcile(eid)
                return None
            after = stored
        if eid not in self._inflight:
            return after
        self._inflight[eid] = after
        if after.is_final:
            self.forget(eid)
            await self._finished(after)
        elif due is not None and after.status is Status.RUNNING:
            self._schedule(eid, due)
        return after

    def _next_due(self, execution: Execution) -> datetime:
        call, _ = self.call_of(execution)
        due = self.clock.now() + call.poll_interval
        if execution.deadline is not None:
            due = min(due, execution.deadline)
        return due

    async def _stop(self, execution: Execution, status: Status, message: str) -> Execution | None:
        """Send the cancel call once (recorded first), then end the execution as ``status``."""
        assert status in (Status.TIMED_OUT, Status.CANCELLED)
        acknowledged: bool | None = None
        if execution.cancel_sent_at is None:
            stored = await self.writer.save(
                execution, apply(execution, CancelSent(), self.clock.now()).after
            )
            if stored is None:
                await self.reconcile(execution.eid)
                return None
            execution = stored
            self._inflight[execution.eid] = execution
            acknowledged = await self._send_cancel(execution)
        event = Stopped(status, acknowledged, message)
        return await self.commit(apply(execution, event, self.clock.now()))

    async def _send_cancel(self, execution: Execution) -> bool:
        call, ctx = self.call_of(execution)
        outcome = await self.caller.cancel(call, ctx)
        if outcome.kind in CANCEL_RETRYABLE:
            log.warning("cancel_retried", execution_id=execution.eid, detail=outcome.detail)
            outcome = await self.caller.cancel(call, ctx)
        return outcome.kind in ACKNOWLEDGED

    async def reconcile(self, eid: str) -> None:
        """A write lost its compare-and-set: take the stored state, or let go if the lease moved."""
        stored = await self.store.get_execution(eid)
        mine = self._inflight.get(eid)
        if stored is None or mine is None or stored.fence != mine.fence or stored.is_final:
            log.debug("execution_let_go", execution_id=eid)
            self.forget(eid)
            return
        self._inflight[eid] = stored
        if stored.status is Status.RUNNING:
            self._schedule(eid, self.clock.now())

    async def _finished(self, execution: Execution) -> None:
        log.info(
            "execution_finished",
            task=execution.task,
            execution_id=execution.eid,
            status=str(execution.status),
            reason=None if execution.reason is None else str(execution.reason),
        )
        if self.on_finished is not None:
            try:
                await self.on_finished(execution)
            except Exception:
                log.exception("on_finished_failed", execution_id=execution.eid)

    # -- helpers --------------------------------------------------------------------------

    def call_of(self, execution: Execution) -> tuple[CallSettings, CallContext]:
        """The call settings and header context of the call in flight for ``execution``."""
        spec = self.specs[execution.task]
        number: int | None = None  # one-call tasks; steps are driven one call at a time (resume.md)
        ctx = CallContext(
            remote_id=remote_id(execution.eid, number),
            eid=execution.eid,
            task=execution.task,
            scheduled_at=execution.scheduled_at,
            deadline=execution.deadline,
            attempt=execution.attempt,
            resume_of=execution.resume_of,
        )
        return spec.call(number), ctx

    def _lock(self, eid: str) -> asyncio.Lock:
        return self._locks.setdefault(eid, asyncio.Lock())

    def _spawn(self, coroutine: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def lease_horizon(self, ttl: timedelta) -> datetime:
        """When leases taken now expire."""
        return self.clock.now() + ttl

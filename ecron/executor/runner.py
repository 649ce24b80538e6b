"""The executor: drives every in-flight execution this node holds.

Thousands of executions can be in flight; they share one timing structure (a
heap of next-poll times) and a bounded pool of poll workers over one HTTP
session. No execution has a coroutine of its own while it waits. A trigger,
which is short-lived but may be retried with backoff, runs in its own task.

Every state change goes through ``record``: ``core.apply`` decides, the store
writes it as a compare-and-set, and a lost compare is settled by reading the
row again: under a lease that moved on (a higher fence) the node lets go; else
the same event is applied again to the newer state.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import suppress
from datetime import datetime, timedelta
from typing import Any

import structlog

from ecron.clock import Clock
from ecron.config.model import CallSettings, TaskSpec
from ecron.core import (
    Event,
    Execution,
    ProbeFailed,
    Report,
    Reported,
    Status,
    Transition,
    TriggerKind,
    TriggerSent,
    apply,
    current_step,
    deadline_passed,
)
from ecron.core.status import Channel
from ecron.errors import Conflict, EcronError, NotFound
from ecron.executor.http import CallContext, HttpCaller
from ecron.executor.outcomes import poll_event
from ecron.executor.stopping import stop
from ecron.executor.trigger import run_trigger
from ecron.logs import about
from ecron.metrics import Metrics
from ecron.notify import Notifier
from ecron.schedules import jitter_offset
from ecron.store.base import Store
from ecron.store.writer import StateWriter

log = structlog.get_logger(__name__)

Finished = Callable[[Execution], Awaitable[None]]

#: How many times a lost compare-and-set is retried on fresh state before giving up.
RECORD_ATTEMPTS = 5
#: Entries due within this much of the earliest are dispatched with it: one wake-up for
#: polls that are due together, instead of one each (a poll may leave this much early).
DISPATCH_WINDOW = timedelta(milliseconds=20)
#: When looking at an execution failed unexpectedly, look again this much later.
RETRY_AFTER_ERROR = timedelta(seconds=5)


class UnknownTask(EcronError):
    """An execution's task is in neither this node's config nor its memory."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"task {task!r} is not in this node's config")


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
        metrics: Metrics | None = None,
        node_id: str = "",
        notifier: Notifier | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.metrics.track_in_flight(lambda: len(self._inflight))
        self.node_id = node_id
        self.notifier = notifier
        self.store = store
        self.writer = writer
        self.caller = caller
        self.clock = clock
        self.specs = specs
        self.workers = workers
        self.on_finished = on_finished
        self._inflight: dict[str, Execution] = {}
        self._heap: list[tuple[datetime, int, str]] = []
        self._live_entry: dict[str, int] = {}
        self._seq = itertools.count()
        self._queue: asyncio.Queue[str] = asyncio.Queue(maxsize=workers * 2)
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        #: Specs of tasks removed by a reload while executions of them were in flight.
        self.retired_specs: dict[str, TaskSpec] = {}
        #: Executions taken over and not polled since: their first poll is the residue check.
        self._adopted: set[str] = set()
        #: Executions whose cancel call is under way on this node: never polled or triggered again.
        self.stopping: set[str] = set()

    # -- what the rest of ecron calls ----------------------------------------------------

    @property
    def inflight(self) -> Mapping[str, Execution]:
        """The executions this node drives, by eid."""
        return self._inflight

    def hold(self, execution: Execution) -> None:
        """Keep ``execution`` (claimed, not yet due) among this node's leases until it starts."""
        self._inflight[execution.eid] = execution

    def start(self, execution: Execution) -> None:
        """Send the trigger of a PENDING execution this node holds, now, in the background."""
        self._inflight[execution.eid] = execution
        self.spawn(run_trigger(self, execution), f"ecron-trigger-{execution.eid}")

    def adopt(self, execution: Execution) -> None:
        """Take over an active execution (after a restart or another node's death).

        One never triggered is started; one whose trigger left is polled first
        (the unknown-outcome rule); a RUNNING one is polled at once.
        """
        self._inflight[execution.eid] = execution
        if deadline_passed(execution, self.clock.now()):
            self.schedule(execution.eid, self.clock.now())  # no trigger: it times out
        elif _call_status(execution) is Status.PENDING:
            self.start(execution)
        else:
            self._adopted.add(execution.eid)
            self.schedule(execution.eid, self.clock.now())

    def forget(self, eid: str) -> None:
        """Stop driving ``eid`` (its lease is gone, or it ended)."""
        self._inflight.pop(eid, None)
        self._live_entry.pop(eid, None)
        self._adopted.discard(eid)

    @property
    def idle(self) -> bool:
        """True when no trigger or cancel is under way in the background."""
        return not self._background

    def wake(self) -> None:
        """Look at the heap now (the clock may have moved)."""
        self._wake.set()

    def is_stopping(self, eid: str) -> bool:
        """True while this node is stopping ``eid`` (recording and sending its cancel)."""
        return eid in self.stopping

    async def cancel(self, eid: str, message: str) -> Execution:
        """A person's cancel, from any node: the cancel call once, then CANCELLED.

        Raises ``NotFound`` for an unknown eid and ``Conflict`` for a final one.
        """
        execution = self._inflight.get(eid) or await self.store.get_execution(eid)
        if execution is None:
            raise NotFound(f"no execution {eid!r}")
        if execution.is_final:
            raise Conflict(f"execution {eid} is already {execution.status}")
        stopped = await stop(self, execution, Status.CANCELLED, message)
        if stopped is None or stopped.status is not Status.CANCELLED:
            current = await self.store.get_execution(eid)
            status = "gone" if current is None else str(current.status)
            raise Conflict(f"execution {eid} ended as {status} before the cancel")
        return stopped

    async def report(
        self, eid: str, report: Report, step: int | None = None
    ) -> tuple[Transition, Execution]:
        """A callback's report about ``eid`` (or its ``step``), from any node, through the
        one core function.

        Raises ``NotFound`` for an unknown eid. A transition with ``cancel_due``
        means the deadline had passed: the cancel was sent instead.
        """
        execution = await self.store.get_execution(eid)
        if execution is None:
            raise NotFound(f"no execution {eid!r}")
        with about(execution, self.node_id):
            return await self._report(execution, report, step)

    async def _report(
        self, execution: Execution, report: Report, step: int | None
    ) -> tuple[Transition, Execution]:
        eid = execution.eid
        self.warn_ignored(execution, report)
        event = Reported(report, Channel.CALLBACK, step=step)
        transition, stored = await self.record(execution, event, as_owner=False)
        if transition.cancel_due:
            stopped = await stop(self, execution, Status.TIMED_OUT, "the task timeout passed")
            return transition, stopped or execution
        if stored is not None and eid in self._inflight and _step_advanced(transition):
            self.plan_next(transition, stored)
        return transition, stored or await self.store.get_execution(eid) or execution

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

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coroutine`` in the background, kept until it ends (``drain`` waits for it)."""
        task = asyncio.create_task(coroutine, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- recording state ------------------------------------------------------------------

    async def record(
        self, execution: Execution, event: Event, *, as_owner: bool = True
    ) -> tuple[Transition, Execution | None]:
        """Apply ``event`` and store the result; see the module docstring.

        ``as_owner``: the event comes from this node's lease (a poll, a trigger
        answer, a deadline), so it is dropped once the lease moved on; a
        callback or a person's cancel is not (it holds no lease). Returns the
        transition and the stored execution, or None when it was dropped or
        the row is gone. A ``cancel_due`` transition is not stored: the caller
        sends the cancel.
        """
        before = execution
        for _ in range(RECORD_ATTEMPTS):
            transition = apply(before, event, self.clock.now())
            if transition.cancel_due or not transition.changed:
                return transition, before
            after = transition.after
            if not after.is_final and after.status is Status.RUNNING:
                after = after.evolve(next_poll_at=self._next_due(after))
            stored = await self.writer.save(before, after)
            if stored is not None:
                await self._written(transition, stored)
                return transition, stored
            fresh = await self.store.get_execution(before.eid)
            if fresh is None or (as_owner and fresh.fence != execution.fence):
                log.debug(
                    "execution_let_go",
                    execution_id=execution.eid,
                    reason="the lease moved on" if fresh else "the row is gone",
                )
                self.metrics.leases_lost.inc()
                self.forget(execution.eid)
                return transition, None
            if fresh.is_final:
                self._remember(fresh)
                return Transition(fresh, fresh, ignored=f"execution is {fresh.status}"), fresh
            before = fresh
        log.warning("record_gave_up", execution_id=execution.eid, attempts=RECORD_ATTEMPTS)
        return transition, None

    async def _written(self, transition: Transition, stored: Execution) -> None:
        self._remember(stored)
        before = transition.before
        if (before.status, before.reason) != (stored.status, stored.reason):
            log.info(
                "execution_status_changed",
                task=stored.task,
                execution_id=stored.eid,
                status=str(stored.status),
                previous=str(before.status),
                reason=None if stored.reason is None else str(stored.reason),
            )
        if before.triggered_at is None and stored.triggered_at is not None:
            self._trigger_lag(stored)
        if transition.finished:
            await self._finished(stored)

    def _trigger_lag(self, execution: Execution) -> None:
        lag = self.trigger_lag(execution)
        if lag is not None:
            self.metrics.trigger_lag.labels(task=execution.task).observe(lag)

    def trigger_lag(self, execution: Execution) -> float | None:
        """Seconds from the fire time (plus jitter) to the first trigger, for fire times of
        the schedule and manual runs; None for retries and resumes, which wait on purpose."""
        if execution.triggered_at is None or execution.trigger_kind not in (
            TriggerKind.SCHEDULE,
            TriggerKind.MANUAL,
        ):
            return None
        due = execution.scheduled_at
        spec = self.specs.get(execution.task)
        if spec is not None:
            due += jitter_offset(execution.task, execution.scheduled_at, spec.jitter)
        return max(0.0, (execution.triggered_at - due).total_seconds())

    def _remember(self, stored: Execution) -> None:
        """Keep the newest stored state of an execution this node drives."""
        current = self._inflight.get(stored.eid)
        if current is None:
            return
        if stored.is_final:
            self.forget(stored.eid)
        elif stored.version >= current.version:
            self._inflight[stored.eid] = stored

    async def _finished(self, execution: Execution) -> None:
        """The one canonical line per finished execution, its metrics, its alerts."""
        reason = "" if execution.reason is None else str(execution.reason)
        started = execution.triggered_at or execution.created_at
        assert execution.finished_at is not None
        duration = max(0.0, (execution.finished_at - started).total_seconds())
        lag = self.trigger_lag(execution)
        log.info(
            "execution_finished",
            task=execution.task,
            execution_id=execution.eid,
            status=str(execution.status),
            reason=reason or None,
            duration_seconds=round(duration, 3),
            attempt=execution.attempt,
            resume_attempt=execution.resume_attempt,
            trigger_lag_seconds=None if lag is None else round(lag, 3),
            steps=len(execution.steps) or None,
            node=self.node_id,
        )
        self.metrics.executions_finished.labels(
            task=execution.task, status=str(execution.status), reason=reason
        ).inc()
        if execution.triggered_at is not None:
            self.metrics.execution_duration.labels(task=execution.task).observe(duration)
        if self.on_finished is not None:
            try:
                await self.on_finished(execution)
            except Exception:
                log.exception("on_finished_failed", execution_id=execution.eid)

    # -- timing ---------------------------------------------------------------------------

    async def _hand_back(self, eid: str, exc: UnknownTask) -> None:
        """This node does not know the execution's task: release it for a node that does."""
        execution = self._inflight.get(eid)
        self.forget(eid)
        if execution is None or execution.owner is None:
            return
        log.warning("execution_handed_back", task=exc.task, execution_id=eid, reason=str(exc))
        try:
            await self.store.release_leases(execution.owner, [eid])
        except Exception:
            log.exception("hand_back_failed", execution_id=eid)

    def schedule(self, eid: str, due: datetime) -> None:
        """Look at ``eid`` again at ``due`` (replacing any earlier plan for it)."""
        seq = next(self._seq)
        self._live_entry[eid] = seq
        heapq.heappush(self._heap, (due, seq, eid))
        if self._heap[0][1] == seq:
            self._wake.set()

    def _next_due(self, execution: Execution) -> datetime:
        """When to look at a RUNNING execution next: its next poll (or, in callback mode,
        the end of its heartbeat), never after its deadline."""
        call, _ = self.call_of(execution)
        if call.mode == "callback":
            since = execution.last_report_at or execution.triggered_at or self.clock.now()
            due = since + call.heartbeat_timeout
        else:
            due = self.clock.now() + call.poll_interval
        if execution.deadline is not None:
            due = min(due, execution.deadline)
        return due

    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            now = self.clock.now()
            horizon = now + DISPATCH_WINDOW  # polls due together go out together
            while self._heap and self._heap[0][0] <= horizon:
                due, seq, eid = heapq.heappop(self._heap)
                if self._live_entry.get(eid) == seq:
                    del self._live_entry[eid]
                    await self._queue.put(eid)
                    late = (self.clock.now() - due).total_seconds()
                    self.metrics.poll_lateness.observe(max(0.0, late))
            delay = (self._heap[0][0] - self.clock.now()).total_seconds() if self._heap else None
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    async def _work(self) -> None:
        while True:
            eid = await self._queue.get()
            try:
                await self._look_at(eid)
            except UnknownTask as exc:
                await self._hand_back(eid, exc)
            except Exception:
                log.exception("poll_failed_unexpectedly", execution_id=eid)
                if eid in self._inflight:
                    self.schedule(eid, self.clock.now() + RETRY_AFTER_ERROR)
            finally:
                self._queue.task_done()

    async def _look_at(self, eid: str) -> None:
        """A due heap entry: time out, poll, or check the heartbeat of ``eid``."""
        execution = self._inflight.get(eid)
        if execution is None or execution.is_final or eid in self.stopping:
            return
        with about(execution, self.node_id):
            await self._look_at_bound(execution)

    async def _look_at_bound(self, execution: Execution) -> None:
        eid = execution.eid
        now = self.clock.now()
        if execution.cancel_sent_at is not None:
            await self._finish_abandoned_cancel(execution, now)
            return
        if deadline_passed(execution, now):
            await stop(self, execution, Status.TIMED_OUT, "the task timeout passed")
            return
        call, ctx = self.call_of(execution)
        if call.mode == "callback":
            await self._check_heartbeat(execution, call, now)
            return
        outcome = await self.caller.poll(call, ctx)
        if outcome.report is not None:
            self.warn_ignored(execution, outcome.report)
        if eid in self.stopping:
            return  # a cancel started while this poll was out: its answer no longer counts
        event = poll_event(outcome, call, ctx.step_number, after_takeover=eid in self._adopted)
        self._adopted.discard(eid)
        transition, stored = await self.record(execution, event)
        if isinstance(event, ProbeFailed) and stored is not None:
            log.warning(
                "poll_failed",
                attempt=stored.probe_failures,
                attempts_left=max(0, call.max_probe_failures - stored.probe_failures),
                outcome=str(outcome.kind),
                detail=outcome.detail,
            )
        self.plan_next(transition, stored)

    async def _finish_abandoned_cancel(self, execution: Execution, now: datetime) -> None:
        """A cancel was recorded (by a node that died, or elsewhere) but never finished:
        after a grace period, end the execution without sending a second cancel."""
        assert execution.cancel_sent_at is not None
        call, _ = self.call_of(execution)
        grace = call.request_timeout * 3
        if now < execution.cancel_sent_at + grace:
            self.schedule(execution.eid, execution.cancel_sent_at + grace)
            return
        timed_out = deadline_passed(execution, now)
        status = Status.TIMED_OUT if timed_out else Status.CANCELLED
        await stop(self, execution, status, "the cancel was sent; it never finished")

    async def _check_heartbeat(
        self, execution: Execution, call: CallSettings, now: datetime
    ) -> None:
        """Callback mode: silence past ``heartbeat_timeout`` ends it FAILED unreachable."""
        fresh = await self.store.get_execution(execution.eid)  # callbacks may land on any node
        if fresh is None or fresh.is_final or fresh.fence != execution.fence:
            self.forget(execution.eid)
            return
        self._remember(fresh)
        since = fresh.last_report_at or fresh.triggered_at or now
        if now < since + call.heartbeat_timeout and not deadline_passed(fresh, now):
            self.schedule(fresh.eid, self._next_due(fresh))
            return
        if deadline_passed(fresh, now):
            await stop(self, fresh, Status.TIMED_OUT, "the task timeout passed")
            return
        silence = call.heartbeat_timeout.total_seconds()
        event = ProbeFailed("unreachable", 1, f"no report for {silence:g}s (heartbeat_timeout)")
        transition, stored = await self.record(fresh, event)
        self.plan_next(transition, stored)

    def plan_next(self, transition: Transition, stored: Execution | None) -> None:
        """After a report: time out now, look again later, or nothing (final or let go)."""
        if transition.cancel_due:
            self.spawn(
                stop(self, transition.before, Status.TIMED_OUT, "the task timeout passed"),
                f"ecron-timeout-{transition.before.eid}",
            )
            return
        if stored is None or stored.is_final or stored.eid not in self._inflight:
            return
        if _call_status(stored) is Status.PENDING and not _call_started(stored):
            self.start(stored)  # the previous step succeeded: the next one is triggered now
            return
        self.schedule(stored.eid, self._next_due(stored))

    # -- helpers --------------------------------------------------------------------------

    def call_of(self, execution: Execution) -> tuple[CallSettings, CallContext]:
        """The call settings and header context of the call in flight for ``execution``:
        the execution itself, or its current step (under the step's remote id)."""
        spec = self.spec_of(execution.task)
        step = current_step(execution)
        ctx = CallContext(
            remote_id=execution.eid if step is None else step.remote_id,
            eid=execution.eid,
            task=execution.task,
            scheduled_at=execution.scheduled_at,
            deadline=execution.deadline,
            attempt=execution.attempt,
            resume_of=execution.resume_of,
            step_name=None if step is None else step.name,
            step_number=None if step is None else step.number,
        )
        return spec.call(ctx.step_number), ctx

    def trigger_sent(self, execution: Execution) -> TriggerSent:
        """The event for the trigger of the call in flight: the task's ``task_timeout``, and
        for a step also its own (DESIGN.md: the earlier of the two deadlines holds)."""
        call, ctx = self.call_of(execution)
        timeout = self.spec_of(execution.task).task_timeout
        return TriggerSent(timeout, None if ctx.step_number is None else call.task_timeout)

    def spec_of(self, task: str) -> TaskSpec:
        """The spec ``task`` runs under: the loaded config's, or, for a task a reload removed
        while it had executions in flight, the one it was started with."""
        spec = self.specs.get(task) or self.retired_specs.get(task)
        if spec is None:
            raise UnknownTask(task)
        return spec

    def retire_specs(self, removed: Mapping[str, TaskSpec]) -> None:
        """Keep the specs of tasks a reload removed, for their executions still in flight."""
        running = {execution.task for execution in self._inflight.values()}
        self.retired_specs.update({name: spec for name, spec in removed.items() if name in running})

    def warn_ignored(self, execution: Execution, report: Report) -> None:
        """Log each part of a report that was ignored (e.g. a progress that is not a number)."""
        for warning in report.warnings:
            log.warning(
                "report_field_ignored",
                task=execution.task,
                execution_id=execution.eid,
                detail=warning,
            )


def _call_status(execution: Execution) -> Status:
    """The status of the call in flight: the current step's, or the execution's."""
    step = current_step(execution)
    return execution.status if step is None else step.status


def _call_started(execution: Execution) -> bool:
    """True once the trigger of the call in flight has left."""
    step = current_step(execution)
    return (execution.triggered_at if step is None else step.started_at) is not None


def _step_advanced(transition: Transition) -> bool:
    """True when the transition finished one step and another is now in flight."""
    before, after = current_step(transition.before), current_step(transition.after)
    return before is not None and after is not None and after.number != before.number

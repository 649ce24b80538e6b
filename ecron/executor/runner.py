"""The executor: drives every execution this node holds, claimed ahead or in flight.

Thousands of executions can be held at once; they share one timing structure (a heap of
start times and one of call times) and a bounded pool of workers over one HTTP session.
No execution has a coroutine of its own while it waits, and none while its trigger is sent
(only a trigger that must be retried after a backoff gets one). Starts that fall due
together are decided in one transaction (``starter``, the scheduler's start rules), then
their triggers go to the workers. Every state change goes through the ``Recorder``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

import structlog

from ecron.clock import Clock
from ecron.config.model import CallSettings
from ecron.core import (
    Execution,
    Report,
    Reported,
    Status,
    Transition,
    current_step,
    deadline_passed,
)
from ecron.core.status import Channel
from ecron.errors import Conflict, NotFound
from ecron.executor.backlog import StartBacklog
from ecron.executor.batch import BatchKey, batch_key, in_batches
from ecron.executor.calls import Calls, UnknownTask
from ecron.executor.held import Held
from ecron.executor.http import HttpCaller
from ecron.executor.polls import Polls
from ecron.executor.recorder import Recorder
from ecron.executor.stopping import Stopper
from ecron.executor.trigger import Triggers
from ecron.logs import about
from ecron.store.base import Holder

log = structlog.get_logger(__name__)

#: Decides whether claimed executions start (the scheduler's start rules, in one
#: transaction); the ones that started, PENDING, their triggers to be sent.
Starter = Callable[[list[Execution]], Awaitable[list[Execution]]]

#: Calls due within this much of the earliest are dispatched with it: one wake-up for
#: polls that are due together, instead of one each (a poll may leave this much early;
#: a trigger never does).
DISPATCH_WINDOW = timedelta(milliseconds=20)
#: When looking at an execution failed unexpectedly, look again this much later.
RETRY_AFTER_ERROR = timedelta(seconds=5)
#: When a start transaction failed (the database is away), try those starts again this
#: much later.
START_RETRY = timedelta(seconds=1)
#: Starts that fall due together are decided this many per transaction.
START_SLICE = 200


class _Job(IntEnum):
    """What a worker does with an eid."""

    #: Poll it (or time it out, or check its heartbeat).
    LOOK = 0
    #: Send the trigger this node has just recorded.
    TRIGGER = 1
    #: Send the trigger of an adopted execution (one may have left already: probe first).
    TRIGGER_ADOPTED = 2
    #: Poll several executions of a batch-polled task with one call (each checked first).
    BATCH = 3


#: A worker's job: what to do, with one eid or a batch poll's eids, and when each was due.
_Planned = tuple[_Job, tuple[str, ...], tuple[datetime, ...]]


class Executor:
    """Starts, triggers, polls and cancels the executions this node holds."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        caller: HttpCaller,
        clock: Clock,
        workers: int = 100,
        starter: Starter | None = None,
    ) -> None:
        self.recorder = recorder
        self.held: Held = recorder.held
        self.calls: Calls = recorder.calls
        self.store = recorder.store
        self.metrics = recorder.metrics
        self.metrics.track_in_flight(lambda: len(self.held))
        self.node_id = recorder.node_id
        self.caller = caller
        self.clock = clock
        self.workers = workers
        self.starter = starter
        self.stopper = Stopper(recorder=recorder, calls=self.calls, caller=caller)
        #: Executions taken over and not polled since: their first poll is the residue check.
        self._adopted: set[str] = set()
        self.stopping = self.stopper.stopping
        self.polls = Polls(
            recorder=recorder,
            calls=self.calls,
            caller=caller,
            clock=clock,
            stopper=self.stopper,
            adopted=self._adopted,
            then=self.plan_next,
            look=self.schedule,
            next_due=self._next_due,
            forget=self.forget,
        )
        self.triggers = Triggers(
            recorder=recorder,
            calls=self.calls,
            caller=caller,
            clock=clock,
            stopping=self.stopping,
            then=self.plan_next,
            look=self.schedule,
            spawn=self.spawn,
        )
        self._starts: list[tuple[datetime, int, str]] = []
        self._calls: list[tuple[datetime, int, str]] = []
        self._plans: dict[str, tuple[int, _Job | None]] = {}
        self._seq = itertools.count()
        self._queue: asyncio.Queue[tuple[_Job, tuple[str, ...]]] = asyncio.Queue(workers * 2)
        #: Due starts waiting to be decided and handed to a worker (up to twice the queue).
        self.backlog = StartBacklog(2 * self._queue.maxsize)
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self._lateness = self.metrics.poll_lateness
        #: Workers in the middle of a job, and whether a start decision is under way.
        self._busy = 0
        self._starting = False
        self._stopping = False

    # -- what the rest of ecron calls ----------------------------------------------------

    @property
    def inflight(self) -> Mapping[str, Execution]:
        """The executions this node holds, by eid."""
        return self.held

    def start_at(self, execution: Execution, due: datetime) -> None:
        """Hold a claimed (SCHEDULED) execution and start it at ``due``."""
        self.held.hold(execution)
        self._plan(execution.eid, due, None)

    def trigger(self, execution: Execution) -> None:
        """Send the trigger of an execution this node has just started (PENDING), now."""
        self.held.hold(execution)
        self._plan(execution.eid, self.clock.now(), _Job.TRIGGER)

    def adopt(self, execution: Execution) -> None:
        """Take over an execution (after a restart, another node's death, or as stale).

        A claimed one is started at its time; one past its deadline times out; one whose
        trigger may have left is polled first (the unknown-outcome rule); one whose next
        step never started is triggered; a RUNNING one is polled at once.
        """
        self.held.hold(execution)
        now = self.clock.now()
        if execution.status is Status.SCHEDULED:
            self._plan(execution.eid, self.recorder.due_of(execution), None)
        elif deadline_passed(execution, now):
            self._plan(execution.eid, now, _Job.LOOK)  # no trigger: it times out
        elif _call_status(execution) is Status.PENDING:
            self._plan(execution.eid, now, _Job.TRIGGER_ADOPTED)
        else:
            self._adopted.add(execution.eid)
            self._plan(execution.eid, now, _Job.LOOK)

    def schedule(self, eid: str, due: datetime) -> None:
        """Look at ``eid`` again at ``due`` (replacing any earlier plan for it)."""
        self._plan(eid, due, _Job.LOOK)

    def forget(self, eid: str) -> None:
        """Stop driving ``eid`` (its lease is gone, or it ended)."""
        self.held.forget(eid)
        self._plans.pop(eid, None)
        self._adopted.discard(eid)

    @property
    def idle(self) -> bool:
        """True when no worker is busy (a call, its recording and the book-keeping of an
        end) and no trigger retry or cancel is under way in the background."""
        return not self._busy and self._queue.empty() and not self._background

    def wake(self) -> None:
        """Look at the heaps now (the clock may have moved)."""
        self._wake.set()

    def is_stopping(self, eid: str) -> bool:
        """True while this node is stopping ``eid`` (recording and sending its cancel)."""
        return eid in self.stopping

    async def cancel(self, eid: str, message: str) -> Execution:
        """A person's cancel, from any node: the cancel call once, then CANCELLED.

        Raises ``NotFound`` for an unknown eid, and ``Conflict`` for a final one, one that
        ended meanwhile, or one whose stop is already under way on this node.
        """
        execution = self.held.get(eid) or await self.store.get_execution(eid)
        if execution is None:
            raise NotFound(f"no execution {eid!r}")
        if execution.is_final:
            raise Conflict(f"execution {eid} is already {execution.status}")
        stopped = await self.stopper.stop(execution, Status.CANCELLED, message)
        if stopped is None or stopped.status is not Status.CANCELLED:
            current = await self.store.get_execution(eid)
            if current is not None and not current.is_final:  # another stop holds it here
                raise Conflict(f"execution {eid} is already being stopped (still {current.status})")
            status = "gone" if current is None else str(current.status)
            raise Conflict(f"execution {eid} ended as {status} before the cancel")
        return stopped

    async def replace(self, active: Iterable[Holder], by: str) -> None:
        """``concurrency: replace``: cancel the ``active`` executions, replaced by execution
        ``by`` (those that ended meanwhile are left alone)."""
        for other in active:
            try:
                await self.cancel(other.eid, f"replaced by execution {by}")
            except (Conflict, NotFound):
                continue
            log.info("execution_replaced", execution_id=other.eid, replaced_by=by)

    async def report(
        self,
        eid: str,
        report: Report,
        step: int | None = None,
        channel: Channel = Channel.CALLBACK,
    ) -> tuple[Transition, Execution]:
        """A pushed report (a callback's or a queue message's, ``channel``) about ``eid`` (or
        its ``step``), from any node, through the one core function.

        Raises ``NotFound`` for an unknown eid. A transition with ``cancel_due``
        means the deadline had passed: the cancel was sent instead.
        """
        execution = await self.store.get_execution(eid)
        if execution is None:
            raise NotFound(f"no execution {eid!r}")
        with about(execution, self.node_id):
            self.recorder.warn_ignored(execution, report)
            event = Reported(report, channel, step=step)
            transition, stored = await self.recorder.record(execution, event, as_owner=False)
            if transition.cancel_due:
                stopped = await self.stopper.stop(
                    execution, Status.TIMED_OUT, "the task timeout passed"
                )
                return transition, stopped or execution
            if stored is not None and eid in self.held and _step_advanced(transition):
                self.plan_next(transition, stored)
            return transition, stored or await self.store.get_execution(eid) or execution

    async def run(self) -> None:
        """The dispatcher, the starter and the workers; runs until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._dispatch(), name="ecron-dispatcher")
            group.create_task(self._start_due(), name="ecron-starter")
            for number in range(self.workers):
                group.create_task(self._work(), name=f"ecron-worker-{number}")

    async def drain(self, timeout: float) -> None:
        """Stop taking up new work; let the calls already handed to the workers, trigger
        retries and cancels in progress finish, and the writes they made, for at most
        ``timeout`` seconds in all."""
        self._stopping = True
        self._wake.set()
        deadline = asyncio.get_running_loop().time() + timeout
        while self._busy or not self._queue.empty() or self._starting:
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(0.01)
        left = max(0.0, deadline - asyncio.get_running_loop().time())
        if self._background:
            await asyncio.wait(set(self._background), timeout=left)
        left = max(0.0, deadline - asyncio.get_running_loop().time())
        await self.recorder.writer.drain(left)

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coroutine`` in the background, kept until it ends (``drain`` waits for it)."""
        task = asyncio.create_task(coroutine, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- timing ---------------------------------------------------------------------------

    def _plan(self, eid: str, due: datetime, job: _Job | None) -> None:
        """Plan ``job`` for ``eid`` at ``due`` (None: start it); the newest plan wins."""
        seq = next(self._seq)
        self._plans[eid] = (seq, job)
        heap = self._starts if job is None else self._calls
        heapq.heappush(heap, (due, seq, eid))
        if heap[0][1] == seq:
            self._wake.set()

    async def _dispatch(self) -> None:
        while not self._stopping:
            self._wake.clear()
            now = self.clock.now()
            starts = self._pop(self._starts, now)
            if starts:
                self.backlog.add(starts[0][2], [eid for eid, _, _ in starts])
            for job, eids, dues in self._jobs(self._pop(self._calls, now + DISPATCH_WINDOW)):
                if self._queue.full():  # every worker busy: wait for one (and the time moves)
                    await self._queue.put((job, eids))
                    now = self.clock.now()
                else:
                    self._queue.put_nowait((job, eids))
                if job is _Job.LOOK or job is _Job.BATCH:
                    for due in dues:
                        self._lateness.observe(max(0.0, (now - due).total_seconds()))
            earliest = [heap[0][0] for heap in (self._starts, self._calls) if heap]
            delay = (min(earliest) - self.clock.now()).total_seconds() if earliest else None
            await self.clock.wait(self._wake, delay)

    def _pop(
        self, heap: list[tuple[datetime, int, str]], until: datetime
    ) -> list[tuple[str, _Job | None, datetime]]:
        """The live plans of ``heap`` due at or before ``until``."""
        due = []
        while heap and heap[0][0] <= until:
            when, seq, eid = heapq.heappop(heap)
            plan = self._plans.get(eid)
            if plan is not None and plan[0] == seq:
                del self._plans[eid]
                due.append((eid, plan[1], when))
        return due

    def _jobs(self, popped: list[tuple[str, _Job | None, datetime]]) -> list[_Planned]:
        """The popped call plans as the workers' jobs (with when each was due): one each,
        but the polls of batch-polled executions in batches (``batch.batch_key``)."""
        jobs: list[_Planned] = []
        keyed: list[tuple[tuple[str, datetime], BatchKey]] = []
        now = self.clock.now()
        for eid, job, due in popped:
            assert job is not None
            key = job is _Job.LOOK and batch_key(self.held.get(eid), self.calls, self.stopping, now)
            if key:
                keyed.append(((eid, due), key))
            else:
                jobs.append((job, (eid,), (due,)))
        for batch in in_batches(keyed):
            jobs.append((_Job.BATCH, tuple(e for e, _ in batch), tuple(d for _, d in batch)))
        return jobs

    async def _start_due(self) -> None:
        """Start the claimed executions that fell due, many in one decision."""
        while not self._stopping:
            eids = await self.backlog.take()
            claimed = [
                e for eid in eids if (e := self.held.get(eid)) and e.status is Status.SCHEDULED
            ]
            if self.starter is None:
                self.backlog.done()
                continue
            # In slices no larger than the workers' queue: the first triggers leave while
            # the next slice is decided, and no start is decided long before a worker can
            # send its trigger (the rest wait, claimed, for the misfire rules to see).
            size = min(START_SLICE, self._queue.maxsize)
            self._starting = True
            try:
                for first in range(0, len(claimed), size):
                    if self._stopping:
                        break  # what is left stays claimed: released, another node starts it
                    await self._start_slice(claimed[first : first + size])
                    self.backlog.handed(size, self.clock.now())
            finally:
                self._starting = False
                self.backlog.done()

    async def _start_slice(self, claimed: list[Execution]) -> None:
        assert self.starter is not None
        try:
            started = await self.starter(claimed)
        except Exception:
            log.exception("start_failed", executions=len(claimed))
            retry_at = self.clock.now() + START_RETRY
            for execution in claimed:
                if execution.eid in self.held and execution.eid not in self._plans:
                    self._plan(execution.eid, retry_at, None)
            return
        for execution in started:
            await self._queue.put((_Job.TRIGGER, (execution.eid,)))

    async def _work(self) -> None:
        while True:
            job, eids = await self._queue.get()
            self._busy += 1
            try:
                if job is _Job.BATCH:
                    await self.polls.look_at_many(eids, self._failed)
                elif job is _Job.LOOK:
                    await self.polls.look_at(eids[0])
                else:
                    execution = self.held.get(eids[0])
                    if execution is not None and eids[0] not in self.stopping:
                        await self.triggers.send(execution, fresh=job is _Job.TRIGGER)
            except Exception as exc:
                for eid in eids:
                    await self._failed(eid, exc)
            finally:
                self._busy -= 1

    async def _failed(self, eid: str, exc: Exception) -> None:
        """Looking at ``eid`` failed unexpectedly: hand it back when this node does not know
        its task, else log it and look again a little later."""
        if isinstance(exc, UnknownTask):
            await self._hand_back(eid, exc)
            return
        log.error("poll_failed_unexpectedly", execution_id=eid, exc_info=exc)
        if eid in self.held:
            self.schedule(eid, self.clock.now() + RETRY_AFTER_ERROR)

    async def _hand_back(self, eid: str, exc: UnknownTask) -> None:
        """This node does not know the execution's task: release it for a node that does."""
        execution = self.held.get(eid)
        self.forget(eid)
        if execution is None or execution.owner is None:
            return
        log.warning("execution_handed_back", task=exc.task, execution_id=eid, reason=str(exc))
        try:
            await self.store.release_leases(execution.owner, [eid])
        except Exception:
            log.exception("hand_back_failed", execution_id=eid)

    def plan_next(
        self,
        transition: Transition,
        stored: Execution | None,
        call: CallSettings | None = None,
        now: datetime | None = None,
    ) -> None:
        """After a report: time out now, look again later, or nothing (final or let go).
        ``call``: the settings of the call that was answered, when the step did not move."""
        if transition.cancel_due:
            self.spawn(
                self.stopper.stop(transition.before, Status.TIMED_OUT, "the task timeout passed"),
                f"ecron-timeout-{transition.before.eid}",
            )
            return
        if stored is None or stored.is_final or stored.eid not in self.held:
            return
        if stored.steps and _call_status(stored) is Status.PENDING and not _call_started(stored):
            # The previous step succeeded: the next one is triggered now.
            self._plan(stored.eid, self.clock.now(), _Job.TRIGGER_ADOPTED)
            return
        if stored.steps:
            call = None  # the step may have moved: its own settings
        self.schedule(stored.eid, self._next_due(stored, call, now))

    def _next_due(
        self, execution: Execution, call: CallSettings | None = None, now: datetime | None = None
    ) -> datetime:
        """When to look at a RUNNING execution next: its next poll (or, in callback mode,
        the end of its heartbeat), never after its deadline."""
        if call is None:
            call, _ = self.calls.call_of(execution)
        now = now or self.clock.now()
        if call.pushed:
            since = execution.last_report_at or execution.triggered_at or now
            due = since + call.heartbeat_timeout
        else:
            due = now + call.poll_interval
        if execution.deadline is not None:
            due = min(due, execution.deadline)
        return due


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

"""The engine: the one loop that carries out what happens next to every execution this node
holds, and to every report and stop that reaches it.

Each turn is the same: take a job (``Executor.take``: a due action, or the polls of one
batch), make the call (a trigger, a poll, a cancel, a read of the row), record what it
said (``Recorder.record``, through ``core.apply``), ask ``core.next_action`` what follows,
and carry that out (``_carry_out``): plan the next call on the timetable, start a run
through the one start path (``Starts``), stop it, book its end (``Bookkeeping``), or let it
go. Pushed reports, people's cancels and the runs they ask for come in through the same
``_carry_out``. Nothing here decides when or what: ``next_action`` does; and no part calls
back up into the engine: the scheduler, the commands and the patrol call down into it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Hashable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import structlog

from ecron.bookkeeping import Bookkeeping
from ecron.capacity import Wait
from ecron.clock import Clock, Wakeup
from ecron.config.model import CallSettings
from ecron.core import Execution, Holder, Status, deadline_passed, in_flight
from ecron.core.next import (
    Action,
    Broke,
    Cadence,
    Cancel,
    Close,
    Drop,
    Due,
    Finish,
    Listen,
    Occasion,
    Poll,
    Read,
    Recorded,
    Silent,
    Start,
    Taken,
    Timed,
    Trigger,
    next_action,
)
from ecron.errors import Conflict
from ecron.executor.batch import batch_key
from ecron.executor.calls import UnknownTask
from ecron.executor.http import CallContext, HttpCaller
from ecron.executor.perform import Happened, Performer, Retrying
from ecron.executor.recorder import Recorder
from ecron.executor.runner import Executor, Job
from ecron.executor.waiters import Waiters
from ecron.logs import about
from ecron.planning import Defer
from ecron.starts import Asked, StartRequest, StartResult, Starts

log = structlog.get_logger(__name__)

#: Starts falling due together are decided this many per transaction at most, and no more
#: than four per worker (bench.burst, 10,000 due at once: fewer, larger transactions).
START_SLICE = 400
#: The cadence of an execution whose call is not followed (claimed, ended): never read.
_UNFOLLOWED = Cadence(timedelta(0), False, timedelta(0), timedelta(0))


class Engine:
    """Drives the executions this node holds; see the module docstring."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        caller: HttpCaller,
        clock: Clock,
        starts: Starts,
        bookkeeping: Bookkeeping,
        scheduler_wakeup: Wakeup,
        workers: int = 100,
    ) -> None:
        self.recorder = recorder
        self.held = recorder.held
        self.calls = recorder.calls
        self.store = recorder.store
        self.metrics = recorder.metrics
        self.node_id = recorder.node_id
        self.caller = caller
        self.clock = clock
        self.starts = starts
        self.bookkeeping = bookkeeping
        self.workers = workers
        #: The timetable and the hand-out to the workers (mechanism only).
        self.executor = Executor(
            clock=clock, workers=workers, metrics=self.metrics, room_for_claims=scheduler_wakeup
        )
        self.metrics.track_in_flight(lambda: len(self.held))
        self.metrics.track_load(self.load)
        #: Makes the calls and records what they said.
        self.performer = Performer(recorder=recorder, caller=caller, clock=clock)
        #: Runs people asked for, waiting for their start decision.
        self._asked = Asked()
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = asyncio.Event()
        self._starting = False
        #: Runs held here that wait to start, by what wakes them.
        self._waiting = Waiters(recorder.calls, recorder.held)

    # -- what the scheduler, the commands, the patrol and the API call --------------------

    @property
    def idle(self) -> bool:
        """True when no job is due or under way, no start decided, no retry or stop running."""
        return self.executor.idle and not self._starting and not self._background

    def settled(self, now: datetime) -> bool:
        """True once all due by ``now`` was carried out and nothing is under way (tests)."""
        return self.idle and not self.executor.due_by(now)

    def wake(self) -> None:
        """Look at the timetable now (the clock may have moved)."""
        self.executor.wake()

    def load(self) -> dict[str, Any]:
        """How loaded this node is now (``Executor.load``)."""
        return self.executor.load(self.clock.now())

    def hold(self, executions: Iterable[Execution]) -> None:
        """Take executions this node claimed (fire times, retries, chained runs): each starts
        at its time; a SKIPPED record's end is booked."""
        for execution in executions:
            if not execution.is_final:
                self.held.hold(execution)
            self._take(execution, Taken())

    def adopt(self, execution: Execution) -> None:
        """Take over an execution (after a restart, another node's death, or as stale)."""
        self.held.hold(execution)
        self._take(execution, Taken(adopted=True))

    async def start_new(self, execution: Execution) -> StartResult:
        """Start a run people asked for (SCHEDULED, not in the database yet) through the
        one start path, with the other starts due now; its result, once it is durable."""
        self._asked.add(execution)
        self.executor.backlog.add(self.clock.now(), [execution.eid])
        return await self._asked.wait(execution)

    async def stop(
        self, execution: Execution, status: Status, message: str, *, called: bool = True
    ) -> Execution | None:
        """Stop ``execution`` now, whoever holds it (a person's cancel, a deadline): the
        cancel call once (``Performer.stop``), then its end's book-keeping; the execution as
        stored, None when another stop of it is under way here."""
        if happened := await self.performer.stop(execution, status, message, called=called):
            await self.go(happened)
            return happened.execution
        return None

    async def go(self, happened: Happened | None) -> Execution | None:
        """Ask ``core.next_action`` what follows what happened, and carry it out (a pushed
        report's, a call's, a start's); the execution as a stop left it, when the answer
        was to stop it now."""
        if happened is None or self._stale(happened):
            return None
        execution = happened.execution
        action = self._next(execution, happened.occasion)
        if isinstance(happened.occasion, Read) and execution is not None:
            execution = self.held.get(happened.eid, execution)  # the row as read, if still ours
        inserted = None if happened.change is None else happened.change.inserted
        return await self._carry_out(happened.eid, action, execution, inserted)

    def _stale(self, happened: Happened) -> bool:
        """True when ``happened`` came of a lease this node has since taken again (a newer
        fence, after its leases lapsed with the database away, say): what follows it is the
        newer lease's to decide, which was planned when it was taken."""
        held = self.held.get(happened.eid)
        return held is not None and happened.fence not in (None, held.fence)

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """The dispatcher, the starter, the pace and the workers; runs until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.executor.dispatch(self._closing), name="ecron-dispatcher")
            group.create_task(self._start_due(), name="ecron-starter")
            group.create_task(self.executor.pace.run(self._closing), name="ecron-pace")
            for number in range(self.workers):
                group.create_task(self._work(), name=f"ecron-worker-{number}")

    async def drain(self, timeout: float) -> None:
        """Stop taking up new work; let the jobs already handed to the workers, trigger
        retries and stops in progress finish, and the writes they made, for at most
        ``timeout`` seconds in all."""
        self._closing.set()
        self.executor.wake()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.executor.idle or self._starting:
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.01)
        if self._background:
            await asyncio.wait(set(self._background), timeout=max(0.0, deadline - loop.time()))
        await self.recorder.writer.drain(max(0.0, deadline - loop.time()))

    def _spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coroutine`` in the background, kept until it ends (``drain`` waits)."""
        self._background.add(task := asyncio.create_task(coroutine, name=name))
        task.add_done_callback(self._background.discard)

    def _take(self, execution: Execution, occasion: Taken) -> None:
        """What follows taking ``execution``: a timed action goes on the timetable at once
        (no coroutine: the common case, thousands at a time); a claim recorded SKIPPED has
        its end booked in the background."""
        eid = execution.eid
        try:
            action = self._next(execution, occasion)
        except UnknownTask as exc:
            self._spawn(self._hand_back(eid, exc), f"ecron-hand-back-{eid}")
            return
        if isinstance(action, Start | Trigger | Poll | Listen | Cancel | Close):
            self._plan(eid, action, execution)
        else:
            self._spawn(self._carry_out(eid, action, execution, None), f"ecron-end-{eid}")

    # -- the turn: ask, then carry out ------------------------------------------------------

    def _next(
        self, execution: Execution | None, occasion: Occasion, now: datetime | None = None
    ) -> Action:
        """``core.next_action`` for ``execution`` now, with its call's cadence."""
        return next_action(execution, now or self.clock.now(), self._cadence(execution), occasion)

    def _cadence(self, execution: Execution | None) -> Cadence:
        """The cadence of the call in flight; none needed for one that is not active. A
        node that does not know the task can follow only what it does not hold (a pushed
        report about another node's execution): ``UnknownTask`` otherwise."""
        if execution is None or not execution.is_active:
            return _UNFOLLOWED
        try:
            return self.calls.cadence_of(execution)
        except UnknownTask:
            if execution.eid in self.held:
                raise
            return _UNFOLLOWED

    async def _carry_out(
        self,
        eid: str,
        action: Action,
        execution: Execution | None,
        inserted: Sequence[Execution] | None,
    ) -> Execution | None:
        """The one place where an action is carried out (see the module docstring)."""
        now = self.clock.now()
        match action:
            case Finish():
                assert execution is not None
                await self._finish(execution, inserted)
            case Drop(why, lost):
                if lost:
                    self.recorder.let_go(eid, why)
                else:
                    self.held.forget(eid)
            case Silent():
                assert execution is not None
                await self.go(await self.performer.silent(execution))
            case Cancel(at, called) if at <= now:
                assert execution is not None
                why = "the task timeout passed" + ("" if called else " before its trigger left")
                return await self.stop(execution, Status.TIMED_OUT, why, called=called)
            case Close(at) if at <= now:
                assert execution is not None
                status = Status.TIMED_OUT if deadline_passed(execution, now) else Status.CANCELLED
                return await self.stop(execution, status, "the cancel was sent; it never finished")
            case _:
                self._plan(eid, action, execution)
        return None

    def _plan(self, eid: str, action: Action, execution: Execution | None) -> None:
        """Put a timed action on the timetable (only for an execution this node holds)."""
        if eid not in self.held or not isinstance(action, Start | Timed):
            return
        key: Hashable | None = None
        if isinstance(action, Poll) and execution is not None:
            key = batch_key(execution, self.calls, self.performer.stopping, self.clock.now())
        self.executor.plan(eid, action, key)

    async def _finish(self, execution: Execution, inserted: Sequence[Execution] | None) -> None:
        """Book an end: its one end line and metrics, then what follows it (a retry, the
        counts, the chained runs), whose new runs this node holds."""
        self.held.forget(execution.eid)
        self.recorder.ended(execution)
        if execution.status is not Status.SKIPPED:  # it held room: the runs waiting go now
            for eid in self._waiting.woken(execution.task):
                if (waiting := self.held.get(eid)) and waiting.status is Status.SCHEDULED:
                    self._plan(eid, Start(self.clock.now()), waiting)
        try:
            follow = await self.bookkeeping.finished(execution, inserted)
        except Exception:
            log.exception("end_booking_failed", execution_id=execution.eid)
            return
        self.hold(follow)

    # -- the workers ------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            job = await self.executor.take()
            try:
                if job.polls:
                    await self._poll(job)
                else:
                    eid, action = job.actions[0]
                    await self._due(eid, action)
            except Exception as exc:
                for eid, action in job.actions:
                    await self._broke(eid, action, exc)
            finally:
                self.executor.done(job)

    async def _due(self, eid: str, planned: Action) -> None:
        """A planned trigger, listen, cancel or close came due: checked, then made."""
        execution = self.held.get(eid)
        if execution is None:
            return
        action = self._next(execution, Due(planned))
        if action is not planned:
            await self._carry_out(eid, action, execution, None)
        elif isinstance(action, Trigger):
            if (until := self.performer.paused_until(execution)) is not None:
                self._plan(eid, Trigger(until, action.probe_first), execution)
                return
            if not in_flight(execution).started:  # a step's: recording that it leaves first
                await self.go(await self.performer.leave(execution))
                return
            sent = await self.performer.trigger(execution, action.probe_first)
            if isinstance(sent, Retrying):
                self._spawn(self._retry(sent), f"ecron-trigger-retry-{eid}")
            else:
                await self.go(sent)
        elif isinstance(action, Listen):
            await self.go(await self.performer.listen(execution))
        else:
            await self._carry_out(eid, action, execution, None)

    async def _retry(self, retrying: Retrying) -> None:
        """A trigger's tries after the first, in a coroutine of its own."""
        with about(retrying.execution, self.node_id):
            try:
                await self.go(await self.performer.retried(retrying))
            except Exception as exc:
                await self._broke(retrying.execution.eid, Trigger(self.clock.now(), True), exc)

    async def _broke(self, eid: str, action: Action, exc: Exception) -> None:
        """Carrying ``action`` out failed unexpectedly: hand it back when this node does not
        know its task, else log it and try again later (``next_action``)."""
        if isinstance(exc, UnknownTask):
            await self._hand_back(eid, exc)
            return
        kind = type(action).__name__.lower()
        log.error("action_failed_unexpectedly", execution_id=eid, action=kind, exc_info=exc)
        if (execution := self.held.get(eid)) is not None:
            await self.go(Happened(eid, execution, Broke(action)))

    async def _hand_back(self, eid: str, exc: UnknownTask) -> None:
        """This node does not know the execution's task: release it for a node that does."""
        execution = self.held.forget(eid)
        if execution is None or execution.owner is None:
            return
        log.warning("execution_handed_back", task=exc.task, execution_id=eid, reason=str(exc))
        try:
            await self.store.release_leases(execution.owner, [eid])
        except Exception:
            log.exception("hand_back_failed", execution_id=eid)

    # -- polls ------------------------------------------------------------------------------

    async def _poll(self, job: Job) -> None:
        """Due polls (one, or a batch's): each checked, then one call per call settings (a
        batch poll where the task has a batch endpoint), each answer recorded as a poll's."""
        groups: dict[int, tuple[CallSettings, list[tuple[str, CallContext, bool]]]] = {}
        for eid, planned in job.actions:
            execution = self.held.get(eid)
            if execution is None or (eid, execution.fence) in self.performer.stopping:
                continue
            try:
                action = self._next(execution, Due(planned))
                if action is not planned:
                    await self._carry_out(eid, action, execution, None)
                    continue
                call, ctx = self.calls.call_of(execution)
            except Exception as exc:
                await self._broke(eid, planned, exc)
                continue
            assert isinstance(planned, Poll)
            groups.setdefault(id(call), (call, []))[1].append((eid, ctx, planned.after_takeover))
        for call, items in groups.values():
            answers = await self.performer.poll(call, items)
            for (eid, _, after), answer in zip(items, answers, strict=True):
                if isinstance(answer, Exception):
                    await self._broke(eid, Poll(self.clock.now(), after), answer)
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    await self.go(answer)

    # -- the start path ---------------------------------------------------------------------

    async def _start_due(self) -> None:
        """Decide the starts that fell due and the runs people asked for, many in one
        transaction, and carry out each decision."""
        while not self._closing.is_set():
            requests = []
            for eid in await self.executor.backlog.take():
                if (new := self._asked.take(eid)) is not None:
                    requests.append(StartRequest(new, new=True))
                elif (held := self.held.get(eid)) is not None and held.status is Status.SCHEDULED:
                    requests.append(StartRequest(held))
            # In slices, each once the triggers waiting are fewer than the workers: the first
            # triggers leave while the next slice is decided, and no start is decided long
            # before a worker can send its trigger (the rest wait, claimed, for the misfire
            # rules to see).
            size = min(START_SLICE, 4 * self.workers)
            self._starting = True
            try:
                for first in range(0, len(requests), size):
                    await self.executor.room_for_triggers()
                    if self._closing.is_set():
                        self._asked.refuse(requests[first:], Conflict("the node is stopping"))
                        break  # what is left stays claimed: released, another node starts it
                    await self._start_slice(requests[first : first + size])
                    self.executor.backlog.handed(size, self.clock.now())
            finally:
                self._starting = False
                self.executor.backlog.done()

    async def _start_slice(self, requests: list[StartRequest]) -> None:
        """Decide ``requests`` in one transaction; a failed one is tried again later."""
        try:
            results = await self.starts.start(requests)
        except Exception as exc:
            if isinstance(exc, Conflict):  # no lease now: a refusal, not a failure
                log.warning("start_refused", executions=len(requests), reason=str(exc))
            else:
                log.exception("start_failed", executions=len(requests))
            for request in requests:
                if request.new:
                    self._asked.fail(request.execution.eid, exc)
                elif request.execution.eid in self.held:
                    broke = Broke(Start(self.clock.now()))
                    await self.go(Happened(request.execution.eid, request.execution, broke))
            return
        for result in results:
            await self._started(result)

    async def _started(self, result: StartResult) -> None:
        """Carry out one start decision: the trigger of a run that started, the book-keeping
        of a skip, the replacement of older runs; and answer a run people asked for."""
        request, change, decision = result.request, result.change, result.decision
        eid = request.execution.eid
        if isinstance(decision, Wait):
            self._asked.answer(eid, result)
            if change is None or change.stored is not None:  # else a new run's key was taken
                self._wait(request.execution.task, eid, decision.until)
            return
        if isinstance(decision, Defer) and (change is None or change.stored is not None):
            # claimed (a new run: inserted so), it starts once the older ones are cancelled;
            # a run people asked for is answered then
            self._spawn(self._replace_then_start(eid, decision.older), f"ecron-replace-{eid}")
            return
        self._asked.answer(eid, result)
        if change is None or change.stored is None:
            return
        await self.go(Happened(eid, change.stored, Recorded(change.transition), change))

    def _wait(self, task: str, eid: str, until: datetime) -> None:
        """Run ``eid`` waits to start: decided again at ``until``, or as soon as a run of its
        task or pool ends here (``_finish``)."""
        self._waiting.add(task, eid)
        self._plan(eid, Start(until), self.held.get(eid))

    async def _replace_then_start(self, eid: str, older: Iterable[Holder]) -> None:
        """``concurrency: replace``: cancel the older executions through the protocol (those
        that ended meanwhile are left alone), then start this one (if it is still held: it
        may have been cancelled meanwhile)."""
        for other in older:
            execution = self.held.get(other.eid) or await self.store.get_execution(other.eid)
            if execution is None or execution.is_final:
                continue
            stopped = await self.stop(execution, Status.CANCELLED, f"replaced by execution {eid}")
            if stopped is not None and stopped.status is Status.CANCELLED:
                log.info("execution_replaced", execution_id=other.eid, replaced_by=eid)
        current = self.held.get(eid)
        if current is None or current.status is not Status.SCHEDULED:
            self._asked.fail(eid, Conflict(f"execution {eid} was stopped before it started"))
            return
        self.executor.backlog.add(self.clock.now(), [eid])

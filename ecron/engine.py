"""The engine: the one loop that carries out what happens next to every execution this node
holds, and to every report and stop that reaches it.

Each turn is the same: take a job (``Executor.take``: a due action, or the polls of one
batch), make the call, record what it said (``Recorder.record``, through ``core.apply``),
ask ``core.next_action`` what follows, and carry that out in one ``match`` (``_carry_out``):
make a call whose checks passed (``PROCEED``), plan the next one, let a run wait or replace
older runs, stop it, book its end (``Bookkeeping``), or let it go. Pushed reports, people's
cancels and the start decisions (``Starter``) come in through the same ``_carry_out``.
Nothing here decides when or what: ``next_action`` does, on the facts the engine hands it.
No part calls back up into the engine: the scheduler, the commands, the patrol and the
daemon call down into it, through its public methods; its parts are its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Hashable, Iterable, Mapping, Sequence
from contextlib import aclosing
from datetime import datetime, timedelta
from typing import Any

import structlog

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock, Wakeup
from ecron.config.model import CallSettings, TaskSpec
from ecron.core import Execution, Holder, Reported, Status, Transition, deadline_passed
from ecron.core.next import (
    Action,
    Broke,
    Cancel,
    Close,
    Drop,
    Due,
    Finish,
    Leave,
    Listen,
    Occasion,
    Poll,
    Proceed,
    Read,
    Recorded,
    Replace,
    Silent,
    Start,
    Taken,
    Timed,
    Trigger,
    WaitToStart,
    next_action,
)
from ecron.errors import Conflict
from ecron.executor.batch import batch_key
from ecron.executor.calls import Calls, UnknownTask
from ecron.executor.held import Held
from ecron.executor.held_back import HeldBackUntil
from ecron.executor.http import CallContext, HttpCaller
from ecron.executor.perform import Happened, Performer, Retrying
from ecron.executor.recorder import Recorder
from ecron.executor.runner import Executor, Job
from ecron.executor.waiters import Waiters
from ecron.logs import about
from ecron.metrics import Metrics
from ecron.starts import Asked, Starter, StartResult, Starts
from ecron.store.base import Store

log = structlog.get_logger(__name__)


class Engine:
    """Drives the executions this node holds; see the module docstring."""

    def __init__(
        self,
        *,
        recorder: Recorder,
        held: Held,
        calls: Calls,
        store: Store,
        metrics: Metrics,
        caller: HttpCaller,
        clock: Clock,
        starts: Starts,
        bookkeeping: Bookkeeping,
        scheduler_wakeup: Wakeup,
        node_id: str,
        workers: int = 100,
    ) -> None:
        self._recorder, self._held, self._calls, self._store = recorder, held, calls, store
        self._clock, self._bookkeeping = clock, bookkeeping
        self._node_id, self._workers = node_id, workers
        #: The timetable and the hand-out to the workers (mechanism only).
        self._executor = Executor(
            clock=clock, workers=workers, metrics=metrics, room_for_claims=scheduler_wakeup
        )
        metrics.track_in_flight(lambda: len(held))
        metrics.track_load(self.load)
        #: Until when services asked for no trigger (``Retry-After``), as this node heard.
        self._held_back = HeldBackUntil(calls)
        #: Makes the calls and records what they said.
        self._performer = Performer(
            recorder=recorder,
            held=held,
            calls=calls,
            store=store,
            caller=caller,
            clock=clock,
            node_id=node_id,
            held_back=self._held_back,
        )
        #: Runs people asked for, waiting for their start decision.
        self._asked = Asked()
        #: Decides the starts that fell due, in slices (``_start_due`` carries them out).
        self._starter = Starter(
            starts=starts,
            held=held,
            asked=self._asked,
            executor=self._executor,
            clock=clock,
            workers=workers,
        )
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = asyncio.Event()
        #: Runs held here that wait to start, by what wakes them.
        self._waiting = Waiters(calls, held)

    # -- what the scheduler, the commands, the patrol and the daemon call ------------------

    @property
    def idle(self) -> bool:
        """True when no job is due or under way, no start decided, no retry or stop running."""
        return self._executor.idle and not self._starter.starting and not self._background

    def settled(self, now: datetime) -> bool:
        """True once all due by ``now`` was carried out and nothing is under way (tests)."""
        return self.idle and not self._executor.due_by(now)

    def wake(self) -> None:
        """Look at the timetable now (the clock may have moved)."""
        self._executor.wake()

    def load(self) -> dict[str, Any]:
        """How loaded this node is now (``Executor.load``)."""
        return self._executor.load(self._clock.now())

    def answered(self, seconds: float) -> None:
        """The API answered a request in ``seconds`` (the pace keeps the API its share)."""
        self._executor.pace.answered(seconds)

    def room_for_claims(self) -> int:
        """How many more due starts this node can take up now (``Backlog.room``)."""
        return self._executor.backlog.room()

    def call_when_room(self) -> None:
        """Ring the scheduler's wakeup once there is room for claims again."""
        self._executor.backlog.call_when_room()

    def behind(self, now: datetime) -> timedelta:
        """How long the oldest due start has waited for a worker (zero when none waits)."""
        return self._executor.backlog.behind(now)

    def knows(self, task: str) -> bool:
        """True when this node can drive executions of ``task`` (in its config, or retired
        by a reload while a run of it was in flight)."""
        return self._calls.knows(task)

    def retire(self, removed: Mapping[str, TaskSpec]) -> None:
        """A reload removed the tasks ``removed``: the runs of them in flight here go on
        under the spec they started with."""
        running = {execution.task for execution in self._held.values()}
        self._calls.retire(removed, running)

    def holding(self, eid: str) -> Execution | None:
        """The newest state of ``eid`` this node holds (None: it holds no such execution)."""
        held: Execution | None = self._held.get(eid)
        return held

    def hold(self, executions: Iterable[Execution]) -> None:
        """Take executions this node claimed (fire times, retries, chained runs): each starts
        at its time; a SKIPPED record's end is booked."""
        for execution in executions:
            if not execution.is_final:
                self._held.hold(execution)
            self._take(execution, Taken())

    def adopt(self, execution: Execution) -> None:
        """Take over an execution (after a restart, another node's death, or as stale)."""
        self._held.hold(execution)
        self._take(execution, Taken(adopted=True))

    async def start_new(self, execution: Execution) -> StartResult:
        """Start a run people asked for (SCHEDULED, not in the database yet) through the
        one start path, with the other starts due now; its result, once it is durable."""
        self._asked.add(execution)
        self._executor.backlog.add(self._clock.now(), [execution.eid])
        return await self._asked.wait(execution)

    async def report(
        self, execution: Execution, event: Reported
    ) -> tuple[Transition, Execution | None]:
        """A pushed report about ``execution`` (a callback's, a queue message's), from any
        node: recorded through the one core function (no lease needed), then what follows
        carried out. The transition, and the execution as it now is (None: not known here)."""
        self._recorder.warn_ignored(execution, event.report)
        change = await self._recorder.record(execution, event, as_owner=False)
        happened = Happened(execution.eid, change.stored, Recorded(change.transition), change)
        return change.transition, await self.go(happened) or change.stored

    async def stop(
        self, execution: Execution, status: Status, message: str, *, called: bool = True
    ) -> Execution | None:
        """Stop ``execution`` now, whoever holds it (a person's cancel, a deadline): the
        cancel call once (``Performer.stop``), then its end's book-keeping; the execution as
        stored, None when another stop of it is under way here."""
        if happened := await self._performer.stop(execution, status, message, called=called):
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
            execution = self._held.get(happened.eid, execution)  # the row as read, if ours
        inserted = None if happened.change is None else happened.change.inserted
        return await self._carry_out(happened.eid, action, execution, inserted)

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """The dispatcher, the starter, the pace and the workers; runs until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._executor.dispatch(self._closing), name="ecron-dispatcher")
            group.create_task(self._start_due(), name="ecron-starter")
            group.create_task(self._executor.pace.run(self._closing), name="ecron-pace")
            for number in range(self._workers):
                group.create_task(self._work(), name=f"ecron-worker-{number}")

    async def drain(self, timeout: float) -> None:
        """Stop taking up new work; let the jobs already handed to the workers, trigger
        retries and stops in progress finish, and the writes they made, for at most
        ``timeout`` seconds in all."""
        self._closing.set()
        self._executor.wake()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._executor.idle or self._starter.starting:
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.01)
        if self._background:
            await asyncio.wait(set(self._background), timeout=max(0.0, deadline - loop.time()))
        await self._recorder.writer.drain(max(0.0, deadline - loop.time()))

    def _stale(self, happened: Happened) -> bool:
        """True when ``happened`` came of a lease this node has since taken again (a newer
        fence, after its leases lapsed with the database away, say): what follows it is the
        newer lease's to decide, which was planned when it was taken."""
        held = self._held.get(happened.eid)
        return held is not None and happened.fence not in (None, held.fence)

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
            self._spawn(self._recorder.hand_back(eid, exc), f"ecron-hand-back-{eid}")
            return
        if isinstance(action, Start | Trigger | Poll | Listen | Cancel | Close):
            self._plan(eid, action, execution)
        else:
            self._spawn(self._carry_out(eid, action, execution), f"ecron-end-{eid}")

    # -- the turn: ask, then carry out ------------------------------------------------------

    def _next(
        self,
        execution: Execution | None,
        occasion: Occasion,
        held_back_until: datetime | None = None,
    ) -> Action:
        """``core.next_action`` for ``execution`` now, with its call's cadence (and, for a
        due action, until when a service's ``Retry-After`` holds its trigger back)."""
        cadence = self._calls.cadence_for(execution, self._held)
        return next_action(execution, self._clock.now(), cadence, occasion, held_back_until)

    async def _carry_out(
        self,
        eid: str,
        action: Action,
        execution: Execution | None,
        inserted: Sequence[Execution] | None = None,
        planned: Action | None = None,
    ) -> Execution | None:
        """The one place where an action is carried out (see the module docstring);
        ``planned``: the action whose time came, when that is what was asked about."""
        now = self._clock.now()
        match action:
            case Proceed() if isinstance(planned, Trigger):
                assert execution is not None
                await self._send(execution, planned.probe_first)
            case Proceed():  # a listen (a due poll is made with its job's others: ``_poll``)
                assert execution is not None and isinstance(planned, Listen)
                await self.go(await self._performer.listen(execution))
            case Leave():
                assert execution is not None
                await self.go(await self._performer.leave(execution))
            case WaitToStart(until):
                assert execution is not None
                self._waiting.add(execution.task, eid)
                self._plan(eid, Start(until), execution)
            case Replace(older):
                self._spawn(self._replace_then_start(eid, older), f"ecron-replace-{eid}")
            case Finish():
                assert execution is not None
                await self._finish(execution, inserted)
            case Drop(why, lost=True):
                self._recorder.let_go(eid, why)
            case Drop():
                self._held.forget(eid)
            case Silent():
                assert execution is not None
                await self.go(await self._performer.silent(execution))
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
        if eid not in self._held or not isinstance(action, Start | Timed):
            return
        key: Hashable | None = None
        if isinstance(action, Poll) and execution is not None:
            key = batch_key(execution, self._calls, self._performer.stopping, self._clock.now())
        self._executor.plan(eid, action, key)

    async def _send(self, execution: Execution, probe_first: bool) -> None:
        """Send the trigger of the call in flight: its first try here, the others (after
        their backoffs) in a coroutine of their own."""
        sent = await self._performer.trigger(execution, probe_first)
        if isinstance(sent, Retrying):
            self._spawn(self._retry(sent), f"ecron-trigger-retry-{execution.eid}")
        else:
            await self.go(sent)

    async def _finish(self, execution: Execution, inserted: Sequence[Execution] | None) -> None:
        """Book an end: its one end line and metrics, then what follows it (a retry, the
        counts, the chained runs), whose new runs this node holds."""
        self._held.forget(execution.eid)
        self._recorder.ended(execution)
        if execution.status is not Status.SKIPPED:  # it held room: the runs waiting go now
            for eid in self._waiting.woken(execution.task):
                if (waiting := self._held.get(eid)) and waiting.status is Status.SCHEDULED:
                    self._plan(eid, Start(self._clock.now()), waiting)
        try:
            follow = await self._bookkeeping.finished(execution, inserted)
        except Exception:
            log.exception("end_booking_failed", execution_id=execution.eid)
            return
        self.hold(follow)

    # -- the workers ------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            job = await self._executor.take()
            try:
                if job.polls:
                    await self._poll(job)
                else:
                    await self._due(*job.actions[0])
            except Exception as exc:
                for eid, action in job.actions:
                    await self._broke(eid, action, exc)
            finally:
                self._executor.done(job)

    async def _due(self, eid: str, planned: Action) -> None:
        """A planned trigger, listen, cancel or close came due: asked about (with what this
        node heard of a service's ``Retry-After``), then carried out."""
        execution = self._held.get(eid)
        if execution is None:
            return
        held_back_until = self._held_back.of(execution.task, self._clock.now())
        action = self._next(execution, Due(planned), held_back_until)
        await self._carry_out(eid, action, execution, planned=planned)

    async def _retry(self, retrying: Retrying) -> None:
        """A trigger's tries after the first, in a coroutine of its own."""
        with about(retrying.execution, self._node_id):
            try:
                await self.go(await self._performer.retried(retrying))
            except Exception as exc:
                await self._broke(retrying.execution.eid, Trigger(self._clock.now(), True), exc)

    async def _broke(self, eid: str, action: Action, exc: Exception) -> None:
        """Carrying ``action`` out failed unexpectedly: hand it back when this node does not
        know its task, else log it and try again later (``next_action``)."""
        if isinstance(exc, UnknownTask):
            await self._recorder.hand_back(eid, exc)
            return
        kind = type(action).__name__.lower()
        log.error("action_failed_unexpectedly", execution_id=eid, action=kind, exc_info=exc)
        if (execution := self._held.get(eid)) is not None:
            await self.go(Happened(eid, execution, Broke(action)))

    # -- polls ------------------------------------------------------------------------------

    async def _poll(self, job: Job) -> None:
        """Due polls (one, or a batch's): each asked about, then one call per call settings
        (a batch poll where the task has a batch endpoint) for those that ``PROCEED``, each
        answer recorded as a poll's."""
        groups: dict[int, tuple[CallSettings, list[tuple[str, CallContext, bool]]]] = {}
        for eid, planned in job.actions:
            execution = self._held.get(eid)
            if execution is None or (eid, execution.fence) in self._performer.stopping:
                continue
            try:
                action = self._next(execution, Due(planned))
                if not isinstance(action, Proceed):
                    await self._carry_out(eid, action, execution, planned=planned)
                    continue
                call, ctx = self._calls.call_of(execution)
            except Exception as exc:
                await self._broke(eid, planned, exc)
                continue
            assert isinstance(planned, Poll)
            groups.setdefault(id(call), (call, []))[1].append((eid, ctx, planned.after_takeover))
        for call, items in groups.values():
            answers = await self._performer.poll(call, items)
            for (eid, _, after), answer in zip(items, answers, strict=True):
                if isinstance(answer, Exception):
                    await self._broke(eid, Poll(self._clock.now(), after), answer)
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    await self.go(answer)

    # -- the start path ---------------------------------------------------------------------

    async def _start_due(self) -> None:
        """Carry out each start decision as the starter makes them (``Starter.decided``)."""
        async with aclosing(self._starter.decided(self._closing)) as decided:
            async for result in decided:
                await self._started(result)

    async def _started(self, result: StartResult) -> None:
        """Ask what follows one start decision, and carry it out (the trigger of a run that
        started, the book-keeping of a skip, a wait, the replacement of older runs); a run
        people asked for is answered now, or, replacing others, once it started."""
        eid = result.request.execution.eid
        followed = result.followed()
        if followed is None or self._stale(Happened(eid, *followed, result.change)):
            self._asked.answer(eid, result)  # nothing of it for this node's lease to follow
            return
        execution, occasion = followed
        action = self._next(execution, occasion)
        if not isinstance(action, Replace):
            self._asked.answer(eid, result)
        await self._carry_out(eid, action, execution)

    async def _replace_then_start(self, eid: str, older: Iterable[Holder]) -> None:
        """``concurrency: replace``: cancel the older executions through the protocol (those
        that ended meanwhile are left alone), then start this one (if it is still held: it
        may have been cancelled meanwhile)."""
        for other in older:
            execution = self._held.get(other.eid) or await self._store.get_execution(other.eid)
            if execution is None or execution.is_final:
                continue
            stopped = await self.stop(execution, Status.CANCELLED, f"replaced by execution {eid}")
            if stopped is not None and stopped.status is Status.CANCELLED:
                log.info("execution_replaced", execution_id=other.eid, replaced_by=eid)
        current = self._held.get(eid)
        if current is None or current.status is not Status.SCHEDULED:
            self._asked.fail(eid, Conflict(f"execution {eid} was stopped before it started"))
            return
        self._executor.backlog.add(self._clock.now(), [eid])

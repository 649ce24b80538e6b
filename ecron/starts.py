"""The one start path: every kind of run (a fire time, a retry, a chained run, a run people
asked for, a resume) starts through ``Starts.start``, which decides, in one transaction
for all the runs that fall due together, whether each starts now (``planning.decide_start``:
retirement, pause, misfire, ``concurrency``), on the database's facts (each task's
``Gate``, its rows locked on PostgreSQL, so two nodes never both start under ``forbid``).

Claimed runs (SCHEDULED rows: fire times, retries, chained runs) are written as a
compare-and-set; new runs that people asked for (a manual run, a resume) are inserted in the
same transaction, already started or, under ``replace``, claimed until the older ones are
cancelled: so a run asked for costs a share of one transaction, like a fire time, and its
answer is given once its row is durable. The ``Starter`` takes the starts that fell due off
the backlog and decides them in slices; the engine carries out what follows each decision
(the trigger, the SKIPPED record's book-keeping, a wait, the replacement), as
``core.next_action`` says.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import structlog

from ecron.capacity import Wait, in_line, waits_in_turn
from ecron.clock import Clock
from ecron.config.model import TaskSpec
from ecron.core import IN_LINE, Execution, Gate, Holder, Status, Transition, apply
from ecron.core.next import Broke, Decided, Occasion, Recorded, Start
from ecron.core.plans import PoolGate
from ecron.errors import Conflict, EcronError
from ecron.executor.held import Held
from ecron.executor.recorder import Change, Recorder
from ecron.executor.runner import Executor
from ecron.leases import Leases
from ecron.planning import Begin, Defer, Skip, StartDecision, decide_start, is_late
from ecron.store.base import Store
from ecron.store.records import Started, StartWrites

log = structlog.get_logger(__name__)

#: Starts falling due together are decided this many per transaction at most, and no more
#: than four per worker (bench.burst, 10,000 due at once: fewer, larger transactions).
START_SLICE = 400


@dataclass(frozen=True, slots=True)
class StartRequest:
    """A run to decide: claimed already (a SCHEDULED row this node holds), or ``new`` (a run
    people asked for, not in the database yet)."""

    execution: Execution
    new: bool = False


@dataclass(frozen=True, slots=True)
class Undecided:
    """No decision could be made (the database away, no lease now): ``error``. A claimed
    run is decided again a little later; a run people asked for fails with ``error``."""

    error: Exception


@dataclass(frozen=True, slots=True)
class StartResult:
    """One run's decision, and the change it wrote: a claimed run's start or skip; a new
    run's insert (its ``stored`` None when its key was taken: another run of the same fire
    time, or another resume of the same execution, got there first). None when nothing was
    written (``Decline``, ``Refuse``, a claimed run deferred, no decision made)."""

    request: StartRequest
    decision: StartDecision | Undecided
    change: Change | None

    def followed(self) -> tuple[Execution, Occasion] | None:
        """What to ask ``core.next_action`` about once the decision is written: the run as
        it now is, and the occasion (a start or a skip is a change ``Recorded``; a wait or a
        replacement is ``Decided``; a claimed run not decided is ``Broke``, decided again a
        little later). None when nothing of it is this node's to follow: a run declined or
        refused, a new run not decided or whose key was taken, a write whose lease moved on
        (``Recorder.written_elsewhere`` let it go)."""
        change, decision = self.change, self.decision
        execution = self.request.execution if change is None else change.stored
        if execution is None:
            return None
        match decision:
            case Undecided() if not self.request.new:
                return execution, Broke(Start(self.request.execution.scheduled_at))
            case Wait(_, until):
                return execution, Decided(until=until)
            case Defer(older):
                return execution, Decided(older=older)
            case Begin() | Skip() if change is not None:
                return execution, Recorded(change.transition)
        return None


class Starts:
    """Decides starts in one transaction; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        recorder: Recorder,
        leases: Leases,
        clock: Clock,
        specs: Mapping[str, TaskSpec],
    ) -> None:
        self.store = store
        self.recorder = recorder
        self.leases = leases
        self.clock = clock
        self.specs = specs

    async def start(self, requests: Sequence[StartRequest]) -> list[StartResult]:
        """Decide ``requests`` in one transaction, oldest fire time first (the older run of a
        task is the one that starts under ``forbid``); each one's result. Not without a lease."""
        self._lease_held()
        now = self.clock.now()
        ordered = sorted(requests, key=lambda r: (r.execution.scheduled_at, r.execution.eid))
        late = [r.execution.task for r in ordered if self._late(r.execution, now)]
        decided: dict[str, tuple[StartDecision, Execution | None]] = {}

        def decide(gates: Mapping[str, Gate]) -> StartWrites:
            decided.clear()  # a retried transaction decides again: only the last one counts
            writes: list[tuple[Execution, Execution]] = []
            inserts: list[Execution] = []
            starting: dict[str, list[Holder]] = {}
            pools = Pools()
            for request in ordered:
                execution = request.execution
                mine = starting.setdefault(execution.task, [])
                gate = gates[execution.task]
                gate = replace(
                    gate, active=(*gate.active, *mine), pool=pools.now(gate.pool, execution)
                )
                decision = decide_start(execution, self.specs.get(execution.task), gate, now)
                after = self._after(execution, decision, request.new)
                decided[execution.eid] = (decision, after)
                if after is None:
                    continue
                pools.moved(gate.pool, after, now)
                if after.status is Status.PENDING or after.waiting_for is not None:
                    mine.append(
                        Holder(after.eid, after.status, after.scheduled_at, after.trigger_kind)
                    )
                if request.new:
                    inserts.append(after)
                    continue
                writes.append((execution, after))
            return StartWrites(writes, inserts, pools.paces)

        names = {r.execution.task for r in ordered}
        new = [r.execution.eid for r in ordered if r.new]
        watched = [name for name in names if self._watches_active(name, late)]
        in_turn = [
            r.execution.task
            for r in ordered
            if waits_in_turn(r.execution, self.specs.get(r.execution.task))
        ]
        started = await self.store.start_executions(
            names,
            decide,
            later_of=late,
            new=new,
            active_of=watched,
            planned_of=in_turn,
            pools=self._pools(names),
            lease=self.leases.held.lease,
        )
        return self._results(ordered, decided, started)

    def _late(self, execution: Execution, now: datetime) -> bool:
        """Whether ``execution`` starts late (past its task's misfire grace)."""
        return is_late(execution, self.specs.get(execution.task), now)

    def _lease_held(self) -> None:
        """Raise ``Conflict`` while the node has no lease (lost, a new one not yet taken):
        nothing starts under a lease that is no longer the node's."""
        if self.leases.lost:
            raise Conflict("this node lost its lease and is taking a new one: ask again")

    def _pools(self, names: Collection[str]) -> dict[str, tuple[PoolGate, list[str]]]:
        """The pools of the tasks ``names``: each one's limits, and every task in it."""
        used = {spec.pool.name for name in names if (spec := self.specs.get(name)) and spec.pool}
        if not used:
            return {}
        pools: dict[str, tuple[PoolGate, list[str]]] = {}
        for name, spec in self.specs.items():
            pool = spec.pool
            if pool is None or pool.name not in used:
                continue
            if pool.name not in pools:
                limits = PoolGate(pool.name, pool.max_running, pool.max_per_second)
                pools[pool.name] = (limits, [])
            pools[pool.name][1].append(name)
        return pools

    def _watches_active(self, name: str, late: Sequence[str]) -> bool:
        """Whether the start of ``name`` looks at its active executions: under ``forbid``
        and ``replace``, and for a late fire time (misfire, ``run_once``); a retired task's
        runs are decided without them."""
        spec = self.specs.get(name)
        return spec is not None and (spec.concurrency != "allow" or name in late)

    def _results(
        self,
        ordered: Sequence[StartRequest],
        decided: Mapping[str, tuple[StartDecision, Execution | None]],
        started: Started,
    ) -> list[StartResult]:
        """Each request's decision and the change it wrote, followed as ``record`` does."""
        written = {before.eid: (before, after, stored) for before, after, stored in started.written}
        inserted = {e.eid for e in started.inserted}
        results = []
        for request in ordered:
            eid = request.execution.eid
            decision, after = decided[eid]
            change = None
            if eid in written:
                change = self.recorder.written_elsewhere(written[eid])
            elif after is not None:  # a new run: inserted, or its key was taken
                stored = after if eid in inserted else None
                change = Change(Transition(request.execution, after), stored)
                if stored is not None:
                    self.recorder.held.hold(stored)
                    self.recorder.written(change.transition, stored)
            results.append(StartResult(request, decision, change))
        return results

    def _after(self, execution: Execution, decision: StartDecision, new: bool) -> Execution | None:
        """What ``execution`` becomes under ``decision`` (None: nothing is written). A run
        that starts, waits or is deferred leans on the node's lease from now on (its own
        claim, if it had one, ends); a new run is stamped with that lease."""
        now = self.clock.now()
        match decision:
            case Begin(event) | Skip(event):
                after = apply(execution, event, now).after
            case Wait(event):
                transition = apply(execution, event, now)
                if not transition.changed and not new:
                    return None  # it waits for that already: nothing to write
                after = transition.after
            case Defer() if new:
                after = execution
            case _:
                return None
        if after.status is not Status.SKIPPED:
            after = after.evolve(lease_until=None)
        if new:
            lease = self.leases.held.lease
            return after.evolve(owner=lease.node, owner_epoch=lease.epoch)
        return after.evolve(version=execution.version + 1)


class Pools:
    """The pools as one start transaction moves them: each run that starts takes a slot
    and a turn of the pace, and leaves the line; a run that comes to wait joins it. So the
    runs decided after it in the same transaction see the pool as it now is."""

    def __init__(self) -> None:
        self._now: dict[str, PoolGate] = {}
        #: The pools whose next trigger moment moved, to that moment (written with the
        #: starts).
        self.paces: dict[str, datetime] = {}

    def now(self, read: PoolGate | None, execution: Execution) -> PoolGate | None:
        """The pool of ``execution`` as it stands now (None: it has no pool)."""
        if read is None:
            return None
        return self._now.setdefault(read.name, read)

    def moved(self, pool: PoolGate | None, after: Execution, now: datetime) -> None:
        """``after`` is what a run of ``pool`` became: it started, or waits in line."""
        if pool is None:
            return
        place = in_line(after)
        line = tuple(other for other in pool.line if other[2] != after.eid)
        if after.status is Status.PENDING:
            pool = replace(pool, running=pool.running + 1, line=line)
            if pool.max_per_second is not None:
                turn = max(pool.next_trigger_at or now, now)
                following = turn + timedelta(seconds=1 / pool.max_per_second)
                pool = replace(pool, next_trigger_at=following)
                self.paces[pool.name] = following
        elif after.status is Status.SCHEDULED and after.waiting_for in IN_LINE:
            pool = replace(pool, line=tuple(sorted((*line, place))))
        self._now[pool.name] = pool


class Starter:
    """Takes the starts that fell due (and the runs people asked for) off the backlog and
    decides them through ``Starts.start``, many in one transaction, in slices: mechanism
    only; the engine carries out what follows each result (``decided``)."""

    def __init__(
        self,
        *,
        starts: Starts,
        held: Held,
        asked: Asked,
        executor: Executor,
        clock: Clock,
        workers: int,
    ) -> None:
        self._starts, self._held, self._asked = starts, held, asked
        self._executor, self._clock, self._workers = executor, clock, workers
        #: True while a slice taken up is being decided and carried out.
        self.starting = False

    async def decided(self, closing: asyncio.Event) -> AsyncGenerator[StartResult]:
        """Each decision, as it is made, until ``closing`` is set: the engine carries each
        one out before the next is handed over."""
        backlog = self._executor.backlog
        while not closing.is_set():
            requests = []
            for eid in await backlog.take():
                if (new := self._asked.take(eid)) is not None:
                    requests.append(StartRequest(new, new=True))
                elif (held := self._held.get(eid)) is not None and held.status is Status.SCHEDULED:
                    requests.append(StartRequest(held))
            # In slices, each once the triggers waiting are fewer than the workers: the first
            # triggers leave while the next slice is decided, and no start is decided long
            # before a worker can send its trigger (the rest wait, claimed, for the misfire
            # rules to see).
            size = min(START_SLICE, 4 * self._workers)
            self.starting = True
            try:
                for first in range(0, len(requests), size):
                    await self._executor.room_for_triggers()
                    if closing.is_set():
                        self._asked.refuse(requests[first:], Conflict("the node is stopping"))
                        break  # what is left stays claimed: released, another node starts it
                    for result in await self._slice(requests[first : first + size]):
                        yield result
                    backlog.handed(size, self._clock.now())
            finally:
                self.starting = False
                backlog.done()

    async def _slice(self, requests: list[StartRequest]) -> list[StartResult]:
        """Decide ``requests`` in one transaction; when that fails, each is ``Undecided``
        (a run people asked for fails now; a claimed one is decided again later)."""
        try:
            return await self._starts.start(requests)
        except Exception as exc:
            if isinstance(exc, Conflict):  # no lease now: a refusal, not a failure
                log.warning("start_refused", executions=len(requests), reason=str(exc))
            else:
                log.exception("start_failed", executions=len(requests))
            for request in requests:
                if request.new:
                    self._asked.fail(request.execution.eid, exc)
            return [StartResult(request, Undecided(exc), None) for request in requests]


class Asked:
    """The runs people asked for that wait for their start decision (a run now, a resume):
    each is handed in with the starts due now (``take``), and its caller waits for its
    answer, given once the decision is durable (or, under ``replace``, once it started)."""

    def __init__(self) -> None:
        self._new: dict[str, Execution] = {}
        self._answers: dict[str, asyncio.Future[StartResult]] = {}

    async def wait(self, execution: Execution) -> StartResult:
        """Wait for the answer about ``execution`` (handed in by ``add``)."""
        future = self._answers[execution.eid]
        try:
            return await future
        finally:
            self._answers.pop(execution.eid, None)
            self._new.pop(execution.eid, None)

    def add(self, execution: Execution) -> None:
        """``execution`` (new, SCHEDULED) waits to be decided."""
        self._answers[execution.eid] = asyncio.get_running_loop().create_future()
        self._new[execution.eid] = execution

    def take(self, eid: str) -> Execution | None:
        """The new run ``eid``, taken up to be decided (None when it is not a new one)."""
        return self._new.pop(eid, None)

    def answer(self, eid: str, result: StartResult) -> None:
        """The decision about ``eid`` is durable: its caller goes on."""
        future = self._answers.get(eid)
        if future is not None and not future.done():
            future.set_result(result)

    def fail(self, eid: str, error: Exception) -> None:
        """No decision could be made about ``eid``: its caller gets ``error``."""
        future = self._answers.get(eid)
        if future is not None and not future.done():
            future.set_exception(error)

    def refuse(self, requests: Sequence[StartRequest], error: EcronError) -> None:
        """The node stops: the new runs among ``requests`` are refused with ``error``."""
        for request in requests:
            if request.new:
                self.fail(request.execution.eid, error)

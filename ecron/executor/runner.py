"""The executor: the mechanism under the engine, and nothing else. It holds the timetable of
every planned action of the executions this node holds, hands the due ones to a bounded
pool of workers (the engine's), and keeps the starts that fell due for the engine's starter.
It decides nothing about an execution (``core.next_action`` does) and calls nothing above
it: the engine plans (``plan``) and takes (``take``).

Thousands of executions can be held at once; they share one timing structure: a heap of
start times, a heap of call times, and, for batch-polled tasks, one entry per batch (task,
step and call settings) whose members are polled together once per interval, whenever each
started (PROTOCOL.md, "Batch polls"). No execution has a coroutine of its own while it
waits. Due triggers, cancels and listens go to the workers before due polls, so that a node
with more polls than it can send still starts and stops on time; and while the event loop
runs late (``LoopLag``) fewer polls are handed out at once, so that the API, callbacks and
claims keep their share of the loop (docs/performance.md, "Overload").
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ecron.clock import Clock, Wakeup
from ecron.core.next import Poll, Start, Timed, Trigger
from ecron.executor.backlog import StartBacklog
from ecron.executor.pace import PollPace
from ecron.metrics import Metrics

#: Calls due within this much of the earliest are handed out with it: one wake-up for
#: polls that are due together, instead of one each (a poll may leave this much early;
#: a trigger never does).
DISPATCH_WINDOW = timedelta(milliseconds=20)
#: The most ids one batch poll asks about (PROTOCOL.md).
BATCH_LIMIT = 100
#: While polls wait and workers are idle (the pace holds them back), the dispatcher looks
#: again this often (seconds) whether the pace lets more go.
PACE_LOOK = 0.1
#: A due poll that waits for a worker longer than the interval it was planned at (the time
#: from its planning to its due moment: its ``poll_interval``, whatever that is), and longer
#: than this, means the node is past its polling ceiling: it is saturated (its polls go out
#: later than their interval asks; they stretch evenly, the API still answers).
SATURATED_FLOOR = timedelta(milliseconds=100)


@dataclass(frozen=True, slots=True)
class Job:
    """What a worker does next: ``actions`` (one, or the polls of one batch, ``key``), each
    for its eid, and when each was due."""

    actions: tuple[tuple[str, Timed], ...]
    due: tuple[datetime, ...]
    key: Hashable | None = None
    #: The plan number of each action (a newer plan of its eid makes it stale).
    seqs: tuple[int, ...] = ()
    #: The shortest interval its polls were planned at (from planning to due).
    asked: timedelta = timedelta(0)

    @property
    def polls(self) -> bool:
        """True when the job is polls (handed out under the pace; see ``PollPace``)."""
        return isinstance(self.actions[0][1], Poll)


#: A due plan: eid, action, when it was due, its batch key, its plan number, the interval
#: it was planned at.
_Due = tuple[str, "Timed | Start", datetime, "Hashable | None", int, timedelta]


@dataclass(slots=True)
class _Batch:
    """The next batch poll of one key: when, and its members (eid -> plan number)."""

    at: datetime
    seq: int
    members: dict[str, int]


class Executor:
    """The timetable and the hand-out to the workers; see the module docstring."""

    def __init__(
        self, *, clock: Clock, workers: int, metrics: Metrics, room_for_claims: Wakeup
    ) -> None:
        self.clock = clock
        self.workers = workers
        self.metrics = metrics
        self._seq = itertools.count()
        #: The newest plan of each eid: its number, the action, its batch key, and when it
        #: was planned.
        self._plans: dict[str, tuple[int, Timed | Start, Hashable | None, datetime]] = {}
        self._starts: list[tuple[datetime, int, str]] = []
        self._calls: list[tuple[datetime, int, str]] = []
        self._batches: dict[Hashable, _Batch] = {}
        self._batch_times: list[tuple[datetime, int, Hashable]] = []
        #: Due jobs not handed out yet: triggers, cancels and listens first, then polls.
        self._urgent: deque[Job] = deque()
        self._polls: deque[Job] = deque()
        #: Jobs handed out and not taken yet (never more than the idle workers).
        self._handoff: asyncio.Queue[Job] = asyncio.Queue()
        self._wake = asyncio.Event()
        #: Set while fewer triggers, cancels and listens wait than there are workers.
        self._urgent_room = asyncio.Event()
        self._urgent_room.set()
        #: Due starts waiting to be decided (up to four times the workers: see ``room``).
        self.backlog = StartBacklog(4 * workers, room_for_claims)
        #: How many polls may be out at once while the loop runs late.
        self.pace = PollPace(workers, metrics)
        self._busy = 0
        self._polls_out = 0
        #: Workers waiting for the dispatcher to hand them a job.
        self._idle_workers = 0
        self._lateness = metrics.poll_lateness

    # -- planning -------------------------------------------------------------------------

    def plan(self, eid: str, action: Timed | Start, key: Hashable | None = None) -> None:
        """Plan ``action`` for ``eid`` at its time; the newest plan of an eid wins. A poll
        with a batch ``key`` joins that key's next batch when it is due no later than the
        poll (it may go up to one interval early, never later)."""
        seq = next(self._seq)
        now = self.clock.now()
        self._plans[eid] = (seq, action, key, now)
        at = action.at
        if isinstance(action, Start):
            heap = self._starts
        elif not isinstance(action, Poll) and at <= now:
            self._queue_urgent(Job(((eid, action),), (at,), None, (seq,)))
            self._wake.set()
            return
        elif key is not None and self._join(eid, seq, at, key):
            return
        else:
            heap = self._calls
        heapq.heappush(heap, (at, seq, eid))
        if heap[0][1] == seq:
            self._wake.set()

    def _join(self, eid: str, seq: int, at: datetime, key: Hashable) -> bool:
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = _Batch(at, next(self._seq), {})
            heapq.heappush(self._batch_times, (at, batch.seq, key))
            if self._batch_times[0][1] == batch.seq:
                self._wake.set()
        elif batch.at > at:
            return False  # that batch comes too late for this poll: it goes on its own
        batch.members[eid] = seq
        return True

    def _queue_urgent(self, job: Job) -> None:
        self._urgent.append(job)
        if len(self._urgent) >= self.workers:
            self._urgent_room.clear()

    async def room_for_triggers(self) -> None:
        """Wait while as many triggers, cancels and listens wait for a worker as there are
        workers: the engine decides no more starts before their triggers can leave."""
        while not self._urgent_room.is_set():
            await self._urgent_room.wait()

    def planned(self, eid: str) -> bool:
        """True while ``eid`` has a plan not yet handed out."""
        return eid in self._plans

    def wake(self) -> None:
        """Look at the timetable now (the clock may have moved)."""
        self._wake.set()

    def load(self, now: datetime) -> dict[str, Any]:
        """How loaded this node is (``/readyz``'s body, the metrics): ``saturated`` while
        due polls wait for a worker longer than their interval asks (past the polling
        ceiling: polls stretch evenly, the API keeps its share), how long the oldest has
        waited, how many wait, and how many polls may be out at once now."""
        return {
            "saturated": self.saturated(now),
            "poll_delay_seconds": round(self.oldest_poll_wait(now).total_seconds(), 3),
            "polls_waiting": self.backlog_of_polls,
            "poll_pace": self.pace.limit,
        }

    # -- handing out ----------------------------------------------------------------------

    async def take(self) -> Job:
        """The next job for a worker: one that is due now, at once (a worker that finished
        a job takes the next without the dispatcher going round); else wait until the
        dispatcher hands one out."""
        job = self._next_job()
        if job is not None:
            return job
        self._idle_workers += 1
        try:
            return await self._handoff.get()
        finally:
            self._idle_workers -= 1

    def done(self, job: Job) -> None:
        """A worker finished ``job``."""
        self._busy -= 1
        if job.polls:
            self._polls_out -= 1

    @property
    def idle(self) -> bool:
        """True when no job is due, queued or being worked on."""
        return not (self._busy or self._urgent or self._polls or self._handoff.qsize())

    def due_by(self, now: datetime) -> bool:
        """True while some plan is due at or before ``now`` and not handed out yet (a stale
        entry counts until the dispatcher passes it)."""
        heaps = (self._starts, self._calls, self._batch_times)
        return any(heap and heap[0][0] <= now for heap in heaps) or self.backlog.waiting

    @property
    def backlog_of_polls(self) -> int:
        """Due poll jobs waiting for a worker."""
        return len(self._polls)

    def oldest_poll_wait(self, now: datetime) -> timedelta:
        """How long the oldest due poll waiting for a worker has waited (zero if none)."""
        if not self._polls:
            return timedelta(0)
        return max(timedelta(0), now - min(self._polls[0].due))

    def saturated(self, now: datetime) -> bool:
        """True while the oldest due poll has waited for a worker longer than the interval
        it was planned at (and than ``SATURATED_FLOOR``): polls go out later than their
        interval asks, whatever the interval."""
        if not self._polls:
            return False
        oldest = self._polls[0]
        return self.oldest_poll_wait(now) > max(oldest.asked, SATURATED_FLOOR)

    async def dispatch(self, stopping: asyncio.Event) -> None:
        """Move due plans to the workers, urgent ones first, polls at the pace; until
        ``stopping`` is set."""
        while not stopping.is_set():
            self._wake.clear()
            now = self.clock.now()
            starts = self._pop(self._starts, now)
            if starts:
                self.backlog.add(starts[0][2], [due[0] for due in starts])
            self._sort(self._pop(self._calls, now + DISPATCH_WINDOW))
            self._sort_batches(now + DISPATCH_WINDOW)
            self._hand_out()
            delay = self._next_delay()
            await self.clock.wait(self._wake, delay)

    def _next_delay(self) -> float | None:
        """How long the dispatcher may sleep: until the earliest plan falls due (None: until
        woken). Work already due is taken by the workers themselves as they finish."""
        earliest = [h[0][0] for h in (self._starts, self._calls, self._batch_times) if h]
        delay = None if not earliest else (min(earliest) - self.clock.now()).total_seconds()
        if self._polls and self._idle_workers:  # the pace may let more go: look again soon
            delay = PACE_LOOK if delay is None else min(delay, PACE_LOOK)
        return None if delay is None else max(0.0, delay)

    def _hand_out(self) -> None:
        """Hand due jobs to the workers waiting for one (each worker that is busy takes its
        next job itself when it finishes)."""
        while self._handoff.qsize() < self._idle_workers:
            job = self._next_job()
            if job is None:
                return
            self._handoff.put_nowait(job)

    def _next_job(self) -> Job | None:
        """The next job to work on, if a worker may take one now (``_busy`` counts the jobs
        handed out): urgent ones first, then polls at the pace; None when none may go."""
        while self._busy < self.workers:
            if self._urgent:
                job = self._live(self._urgent.popleft())
                if len(self._urgent) < self.workers:
                    self._urgent_room.set()
            elif self._polls and self._polls_out < self.pace.limit:
                job = self._live(self._polls.popleft())
                if job is not None:
                    self._polls_out += 1
            else:
                return None
            if job is not None:
                self._busy += 1
                if not isinstance(job.actions[0][1], Trigger):  # a trigger's is its lag
                    now = self.clock.now()
                    for due in job.due:
                        self._lateness.observe(max(0.0, (now - due).total_seconds()))
                return job
        return None

    def _live(self, job: Job) -> Job | None:
        """``job`` without the actions a newer plan of their eid replaced (None when none is
        left); the plans of those handed out are done."""
        kept = []
        for (eid, action), due, seq in zip(job.actions, job.due, job.seqs, strict=True):
            plan = self._plans.get(eid)
            if plan is not None and plan[0] == seq:
                del self._plans[eid]
                kept.append((eid, action, due, seq))
        if not kept:
            return None
        if len(kept) == len(job.actions):
            return job
        actions = tuple((eid, action) for eid, action, _, _ in kept)
        dues = tuple(d for _, _, d, _ in kept)
        return Job(actions, dues, job.key, tuple(q for *_, q in kept), job.asked)

    def _pop(self, heap: list[tuple[datetime, int, str]], until: datetime) -> list[_Due]:
        """The live plans of ``heap`` due at or before ``until``, with their batch keys (a
        call's plan stays until it is handed out: a newer one may still replace it)."""
        due = []
        while heap and heap[0][0] <= until:
            when, seq, eid = heapq.heappop(heap)
            plan = self._plans.get(eid)
            if plan is not None and plan[0] == seq:
                if heap is self._starts:
                    del self._plans[eid]
                due.append((eid, plan[1], when, plan[2], seq, when - plan[3]))
        return due

    def _sort(self, popped: list[_Due]) -> None:
        """Due calls as jobs: one each, but polls with the same batch key due together in
        one job (at most ``BATCH_LIMIT``)."""
        keyed: dict[Hashable, list[tuple[str, Timed, datetime, int, timedelta]]] = {}
        for eid, action, when, key, seq, asked in popped:
            assert not isinstance(action, Start)
            if key is None:
                job = Job(((eid, action),), (when,), None, (seq,), asked)
                if isinstance(action, Poll):
                    self._polls.append(job)
                else:
                    self._queue_urgent(job)
            else:
                keyed.setdefault(key, []).append((eid, action, when, seq, asked))
        for key, items in keyed.items():
            self._batched(key, items)

    def _sort_batches(self, until: datetime) -> None:
        """The batches due by ``until`` as jobs of their live members."""
        while self._batch_times and self._batch_times[0][0] <= until:
            when, seq, key = heapq.heappop(self._batch_times)
            batch = self._batches.get(key)
            if batch is None or batch.seq != seq:
                continue
            del self._batches[key]
            items = []
            for eid, member_seq in batch.members.items():
                plan = self._plans.get(eid)
                if plan is not None and plan[0] == member_seq:
                    action = plan[1]
                    assert isinstance(action, Poll)
                    items.append((eid, action, when, member_seq, when - plan[3]))
            self._batched(key, items)

    def _batched(
        self, key: Hashable, items: Sequence[tuple[str, Timed, datetime, int, timedelta]]
    ) -> None:
        for first in range(0, len(items), BATCH_LIMIT):
            chunk = items[first : first + BATCH_LIMIT]
            actions = tuple((eid, action) for eid, action, *_ in chunk)
            dues = tuple(item[2] for item in chunk)
            seqs = tuple(item[3] for item in chunk)
            asked = min(item[4] for item in chunk)
            self._polls.append(Job(actions, dues, key, seqs, asked))

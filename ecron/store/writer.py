"""Writes in groups: the state changes of many executions go to the database together, in
one transaction and one statement, each row still a compare-and-set on fence and version.

Two kinds of write come in:

- ``save`` (durable): the caller waits until the row is written (a final status, a
  trigger or cancel about to leave, anything answered to a person). It is flushed at once;
  writes that arrive while a transaction is in flight go in the next one. It may carry
  executions to insert in the same transaction if it lands (an end and its retry).
- ``save_soon`` (write-behind): progress and other changes that alter nothing the rules
  act on. The caller goes on at once; the change lingers up to ``linger`` so that one
  transaction carries many, and several changes of one execution before a flush become
  one write. A change whose compare fails is reported to ``on_lost``. A change of progress
  alone (``settle=True``) may wait up to ``settle``: the next reports of the same execution
  within that time become the same write (a node polling 10,000 jobs every second writes
  each at most every ``settle``, not at every poll); any other change of that execution
  takes it along at once.

A write is only ever sent on top of a state the database confirmed: one that builds on a
write still in flight waits for it, and fails without being sent when that one failed.
A write names the node's lease it was made under (``core.Lease``): it lands only while
that lease is still the node's (DESIGN.md, "Scale": a fenced node changes nothing).
Up to ``concurrency`` transactions are in flight at once, each about other executions
(PostgreSQL takes several at once, and a commit's own wait is most of a small one's time;
SQLite has one writer, so one).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta

import structlog

from ecron.core import Execution, Lease
from ecron.store.base import Store

log = structlog.get_logger(__name__)

#: How long the writer waits after an error before trying the writes again.
ERROR_PAUSE = 0.5

Lost = Callable[[Execution, Execution], None]


@dataclass(slots=True)
class _Write:
    before: Execution
    after: Execution
    waiters: list[asyncio.Future[Execution | None]] = field(default_factory=list)
    #: Executions inserted in the same transaction when this write lands (an end's retry).
    inserts: list[Execution] = field(default_factory=list)
    #: The node's lease the write was made under (None: not fenced by one).
    lease: Lease | None = None
    #: When a settling write (progress alone) is due (the loop's time).
    due: float = 0.0


class StateWriter:
    """Groups ``Store.save`` calls; see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 500,
        linger: timedelta = timedelta(milliseconds=50),
        on_lost: Lost | None = None,
        concurrency: int = 1,
        settle: timedelta = timedelta(0),
    ) -> None:
        self.store = store
        self.max_batch = max_batch
        self.concurrency = max(1, concurrency)
        self.linger = linger.total_seconds()
        self.settle = settle.total_seconds()
        self.on_lost = on_lost
        #: Writes waiting for the next transaction, by eid (one per execution).
        self._pending: dict[str, _Write] = {}
        #: Changes of progress alone waiting up to ``settle`` for the next ones, by eid, in
        #: the order they fall due (an OrderedDict: taking its first entry again and again
        #: costs what a plain dict's costs only once).
        self._settling: OrderedDict[str, _Write] = OrderedDict()
        #: Writes that build on one still pending or in flight: they go in a later round.
        self._later: list[_Write] = []
        #: Versions written by the transactions in flight, and the states (version and fence)
        #: whose compare failed.
        self._in_flight: dict[str, int] = {}
        self._failed: dict[str, tuple[int, int]] = {}
        self._urgent = asyncio.Event()
        #: Set when a transaction in flight ends, or a durable write asks to go now.
        self._moved = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        #: The transactions in flight.
        self._flights: set[asyncio.Task[None]] = set()
        #: Transactions and rows written so far, for benchmarks and metrics.
        self.transactions = 0
        self.writes = 0

    async def save(
        self,
        before: Execution,
        after: Execution,
        *,
        then_insert: Sequence[Execution] = (),
        lease: Lease | None = None,
    ) -> Execution | None:
        """Write ``after`` over ``before`` and wait: the stored execution, or None when the
        compare failed (another writer got there first, the execution's lease moved on, or
        ``lease``, the node's, is no longer its own). ``then_insert``: executions inserted
        in the same transaction if the write lands."""
        done: asyncio.Future[Execution | None] = asyncio.get_running_loop().create_future()
        self._add(_Write(before, after, [done], list(then_insert), lease))
        self._go_now()
        # Not shielded: a caller cancelled meanwhile cancels its wait, not the write.
        return await done

    def save_soon(
        self,
        before: Execution,
        after: Execution,
        lease: Lease | None = None,
        *,
        settle: bool = False,
    ) -> None:
        """Write ``after`` over ``before`` within ``linger`` (``settle``: a change of progress
        alone, within ``settle``); the caller does not wait."""
        write = _Write(before, after, lease=lease)
        if settle and self.settle > 0 and self._settles(write):
            return
        self._add(write)

    @property
    def backlog(self) -> int:
        """Writes not yet in a transaction."""
        return len(self._pending) + len(self._settling) + len(self._later)

    def _settles(self, write: _Write) -> bool:
        """Keep ``write`` settling (merged into the settling write of its execution, if it
        builds on it); False when it must go the usual way."""
        eid = write.before.eid
        if eid in self._pending or eid in self._in_flight:
            return False
        if self._later and any(w.before.eid == eid for w in self._later):
            return False
        settling = self._settling.get(eid)
        if settling is None:
            write.due = asyncio.get_running_loop().time() + self.settle
            self._settling[eid] = write
        elif _builds_on(write, settling):
            settling.after = write.after
        else:
            return False
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._run(), name="ecron-state-writer")
        return True

    def _add(self, write: _Write) -> None:
        eid = write.before.eid
        settling = self._settling.pop(eid, None)
        if settling is not None:  # another change takes the settling one along, at once
            if _builds_on(write, settling):
                write.before = settling.before
            else:
                self._pending[eid] = settling
        pending = self._pending.get(eid)
        if pending is not None and _builds_on(write, pending):
            pending.after = write.after  # builds on the pending write: one write for both
            pending.waiters += write.waiters
            pending.inserts += write.inserts
        elif pending is None and eid not in self._in_flight:
            self._pending[eid] = write
        else:
            self._later.append(write)
        self._moved.set()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._run(), name="ecron-state-writer")

    async def _run(self) -> None:
        while self._pending or self._later or self._flights or self._settling:
            full = len(self._flights) >= self.concurrency
            if self._flights and (full or not (self._pending or self._later)):
                await self._next_move()  # a transaction ends, or a write comes
                continue
            if not self._urgent.is_set() and len(self._pending) < self.max_batch:
                with suppress(TimeoutError):
                    async with asyncio.timeout(self._wait()):  # no task made, unlike wait_for
                        await self._urgent.wait()
            self._urgent.clear()
            self._settled()
            batch = self._take()
            if not batch:  # what is left builds on a write in flight, or on nothing
                await (self._next_move() if self._flights else asyncio.sleep(0))
                continue
            flight = asyncio.create_task(self._flush(batch), name="ecron-state-write")
            self._flights.add(flight)
            flight.add_done_callback(self._flight_ended)

    def _wait(self) -> float:
        """How long the flusher may wait for more writes: ``linger``, or until the first
        settling write is due when nothing else waits."""
        if self._pending or self._later or not self._settling:
            return self.linger
        first = next(iter(self._settling.values()))
        return max(self.linger, first.due - asyncio.get_running_loop().time())

    def _settled(self, everything: bool = False) -> None:
        """Move the settling writes that are due (``everything``: all) to the next
        transaction."""
        now = asyncio.get_running_loop().time()
        settling = self._settling
        while settling:
            eid, write = settling.popitem(last=False)
            if write.due > now and not everything:
                settling[eid] = write
                settling.move_to_end(eid, last=False)
                return
            self._add(write)

    def _go_now(self) -> None:
        """A write waits to go in the next transaction at once (durable, or freed by one
        that landed)."""
        self._urgent.set()
        self._moved.set()

    def _flight_ended(self, flight: asyncio.Task[None]) -> None:
        self._flights.discard(flight)
        self._moved.set()

    async def _next_move(self) -> None:
        """Wait until a transaction in flight ends or a write comes (one event, set by
        both: waiting makes no task, and never spins)."""
        self._moved.clear()
        await self._moved.wait()

    def _take(self) -> list[_Write]:
        """The next transaction's writes: at most one per execution, none built on a write
        whose compare failed (those fail too, unsent)."""
        batch = list(self._pending.values())[: self.max_batch]
        for write in batch:
            del self._pending[write.before.eid]
        taken = {write.before.eid for write in batch}
        later, self._later = self._later, []
        for write in later:
            eid = write.before.eid
            if self._failed.get(eid) == _state(write.before):
                self._settle(write, None)
            elif eid in self._pending or eid in taken or eid in self._in_flight:
                self._later.append(write)
            else:
                self._pending[eid] = write
                if write.waiters:  # a durable write: it goes in the next transaction
                    self._go_now()
        self._failed.clear()
        for write in batch:
            self._in_flight[write.before.eid] = write.after.version
        return batch

    async def _flush(self, batch: list[_Write]) -> None:
        """The transactions of ``batch`` (taken, and counted in flight, by ``_take``): one,
        unless its writes were made under different leases of the node (one each)."""
        leases = {write.lease for write in batch}
        if len(leases) == 1:
            await self._flush_one(batch, leases.pop())
            return
        for lease in leases:
            await self._flush_one([w for w in batch if w.lease == lease], lease)

    async def _flush_one(self, batch: list[_Write], lease: Lease | None) -> None:
        """One transaction of ``batch``, whose writes were all made under ``lease``."""
        try:
            inserts = {w.before.eid: w.inserts for w in batch if w.inserts}
            stored = await self.store.save([(w.before, w.after) for w in batch], inserts, lease)
        except Exception as exc:
            self._landed(batch)
            self._retry_later(batch, exc)
            await asyncio.sleep(ERROR_PAUSE)
            return
        self._landed(batch)
        self.transactions += 1
        self.writes += len(batch)
        for write, result in zip(batch, stored, strict=True):
            if result is None:
                self._failed[write.before.eid] = _state(write.after)
            self._settle(write, result)

    def _landed(self, batch: list[_Write]) -> None:
        """``batch``'s transaction is over: its executions are no longer in flight, and the
        writes that waited on them may go."""
        for write in batch:
            self._in_flight.pop(write.before.eid, None)
        if self._later:
            self._go_now()

    def _retry_later(self, batch: list[_Write], exc: Exception) -> None:
        """The transaction failed: the waiters hear why; write-behind changes stay queued
        (merged with what came meanwhile), so that nothing is lost while the database is
        away."""
        log.warning("state_write_failed", writes=len(batch), error=f"{type(exc).__name__}: {exc}")
        for write in batch:
            for waiter in write.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            if write.waiters:
                continue
            eid = write.before.eid
            newer = self._pending.pop(eid, None)
            if newer is not None and _builds_on(newer, write):
                write.after, write.waiters, write.inserts = (
                    newer.after,
                    newer.waiters,
                    newer.inserts,
                )
            elif newer is not None:
                self._later.append(newer)
            self._pending[eid] = write

    def _settle(self, write: _Write, result: Execution | None) -> None:
        if write.waiters:
            for waiter in write.waiters:
                if not waiter.done():
                    waiter.set_result(result)
        elif result is None and self.on_lost is not None:
            self.on_lost(write.before, write.after)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until every write asked for so far is done (at most ``timeout`` seconds);
        True when nothing is left."""
        self._settled(everything=True)
        self._go_now()
        if self._flusher is not None and not self._flusher.done():
            await asyncio.wait({self._flusher}, timeout=timeout)
        return self.backlog == 0 and (self._flusher is None or self._flusher.done())

    async def close(self) -> None:
        """Cut off what ``drain`` left (the daemon stops, the database too slow to take the
        last writes within the grace): its transactions are rolled back and their
        connections returned before the store closes, none left to the garbage collector."""
        left = [task for task in (self._flusher, *self._flights) if task and not task.done()]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)


def _state(execution: Execution) -> tuple[int, int]:
    """Which stored state an execution is: its version under its lease (fence). A takeover
    raises both, so a version alone can name two states of one row."""
    return execution.version, execution.fence


def _builds_on(write: _Write, earlier: _Write) -> bool:
    """True when ``write`` was made on top of the state ``earlier`` writes, under the same
    lease of the node."""
    return _state(write.before) == _state(earlier.after) and write.lease == earlier.lease

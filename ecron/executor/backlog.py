"""The starts that fell due and wait to be decided and handed to a worker (and the new runs
people asked for, which wait with them): how long the oldest has waited and how many more
this node can take up. The scheduler reads both to hold its claims back when the node has
more due work than its workers can do (backpressure, docs/performance.md "Overload"), and
is woken through its ``Wakeup`` when there is room again. Memory only, no I/O; times are
passed in."""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta

from ecron.clock import Wakeup

#: Starts handed over within this much of now count towards the rate (see ``room``).
RATE_WINDOW = timedelta(seconds=1)


class StartBacklog:
    """Due starts in the order they fell due, in batches; the batch the starter works on."""

    def __init__(self, capacity: int, room_for_claims: Wakeup) -> None:
        #: How many due starts may wait, at least, before there is no room for more.
        self.capacity = capacity
        #: When starts were handed over lately, and how many: the rate the node keeps up.
        self._handed: deque[tuple[datetime, int]] = deque()
        self._rate = 0
        self._batches: deque[tuple[datetime, list[str]]] = deque()
        self._arrived = asyncio.Event()
        #: The earliest due time of the starts taken up and not yet handed to the workers.
        self._taken_since: datetime | None = None
        #: How many of those are still to be decided or handed over.
        self._taken_left = 0
        #: Rung once when there is room again after ``call_when_room`` (the scheduler's).
        self.room_for_claims = room_for_claims
        self._room_wanted = False

    def add(self, due: datetime, eids: list[str]) -> None:
        """Starts ``eids`` fell due, the earliest at ``due``."""
        self._batches.append((due, eids))
        self._arrived.set()

    async def take(self) -> list[str]:
        """Wait for due starts and take them all up (``done`` when they are handed over)."""
        while not self._batches:
            await self._arrived.wait()
            self._arrived.clear()
        self._taken_since = min(due for due, _ in self._batches)
        eids = [eid for _, batch in self._batches for eid in batch]
        self._batches.clear()
        self._taken_left = len(eids)
        return eids

    def handed(self, count: int, now: datetime) -> None:
        """``count`` of the starts taken up were decided and handed to the workers."""
        self._taken_left = max(0, self._taken_left - count)
        self._handed.append((now, count))
        self._rate += count
        while self._handed and self._handed[0][0] < now - RATE_WINDOW:
            self._rate -= self._handed.popleft()[1]
        self._room_freed()

    def done(self) -> None:
        """Every start taken up was dealt with."""
        self._taken_since, self._taken_left = None, 0
        self._room_freed()

    @property
    def waiting(self) -> bool:
        """True while due starts wait to be taken up, or are being decided."""
        return bool(self._batches) or self._taken_since is not None

    def behind(self, now: datetime) -> timedelta:
        """How long the oldest due start has waited (zero when none waits)."""
        waiting = [] if self._taken_since is None else [self._taken_since]
        if self._batches:
            waiting.append(self._batches[0][0])
        return max(timedelta(0), now - min(waiting)) if waiting else timedelta(0)

    def room(self) -> int:
        """How many more due starts can be taken up: ``capacity``, or as many as were handed
        over in the last ``RATE_WINDOW`` when that is more (a node whose workers keep up
        takes up more), less those waiting."""
        waiting = self._taken_left + sum(len(batch) for _, batch in self._batches)
        return max(0, max(self.capacity, self._rate) - waiting)

    def call_when_room(self) -> None:
        """Ring ``room_for_claims`` once, as soon as ``room`` is above zero again."""
        self._room_wanted = True

    def _room_freed(self) -> None:
        if self._room_wanted and self.room() > 0:
            self._room_wanted = False
            self.room_for_claims.ring()

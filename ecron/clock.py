"""The clock, passed to whatever needs time, so that tests can drive it."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: How many of the latest readings of the database's clock its offset is chosen from (the
#: one with the shortest round trip): readings are taken at every heartbeat (half the
#: lease), so a slow moment of the database weighs nothing as long as one of the last few
#: was quick.
READINGS = 8
#: How many readings a node takes at start, before it writes its first lease.
START_READINGS = 3


@dataclass(frozen=True)
class Reading:
    """The database's clock, read across one round trip: what it said, and this process's
    monotonic clock (seconds) just before the question left and just after the answer
    came. Monotonic, so that a step of this machine's wall clock changes nothing."""

    database: datetime
    sent: float
    received: float

    @property
    def round_trip(self) -> float:
        return self.received - self.sent

    @property
    def offset(self) -> timedelta:
        """What to add to the monotonic clock (as seconds since the epoch) to read the
        database's: the database read its clock somewhere within the round trip; taken at
        its middle, the error is at most half the round trip."""
        return self.database - _instant(self.sent + self.round_trip / 2)


def best_offset(readings: Iterable[Reading]) -> timedelta | None:
    """The offset of the reading with the shortest round trip (the least uncertain); None
    without readings."""
    best = min(readings, key=lambda reading: reading.round_trip, default=None)
    return None if best is None else best.offset


def _instant(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class Clock:
    """The time every decision of the node is made on, in UTC: the database's clock (see
    docs/reliability.md, "Which clock decides"), and sleeping.

    Leases, deadlines and fire times are compared between nodes through the database, so
    a node reads the database's clock, not its own: ``align`` takes a reading of it at
    start and at each heartbeat, and ``now`` is this process's monotonic clock moved by the
    offset of the best recent reading. Until there is a reading (always, on SQLite: one
    machine, whose clock is the database's) it is this machine's wall clock."""

    def __init__(self) -> None:
        self.offset: timedelta | None = None
        self._readings: deque[Reading] = deque(maxlen=READINGS)

    def local(self) -> datetime:
        """This machine's own wall clock, aware, in UTC."""
        return datetime.now(UTC)

    def ticks(self) -> float:
        """This process's monotonic clock (seconds), which readings are timed on."""
        return time.monotonic()

    def now(self) -> datetime:
        """The current time by the database's clock, aware, in UTC."""
        if self.offset is None:
            return self.local()
        return _instant(self.ticks()) + self.offset

    @property
    def readings(self) -> tuple[Reading, ...]:
        """The readings of the database's clock kept (the newest last)."""
        return tuple(self._readings)

    def align(self, reading: Reading | None) -> None:
        """Take a reading of the database's clock into account (None: the database has no
        clock of its own)."""
        if reading is None:
            return
        self._readings.append(reading)
        self.offset = best_offset(self._readings)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (never negative)."""
        await asyncio.sleep(max(0.0, seconds))

    async def wait(self, event: asyncio.Event, seconds: float | None) -> bool:
        """Wait until ``event`` is set or ``seconds`` have passed on this clock (None: until
        the event), whichever comes first; True when the event is set. Every loop of the
        engine sleeps between its rounds on this, so that a test's clock can drive them."""
        if not event.is_set():
            timeout = None if seconds is None else max(0.0, seconds)
            with suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=timeout)
        return event.is_set()


class Wakeup:
    """A loop's doorbell: the loop waits on it between rounds (``Clock.wait``), and whoever
    was given it in their constructor rings it when there is work to look at now. It is
    made where the parts are wired, and handed down to each part that rings it."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def ring(self) -> None:
        """Wake the loop now instead of at its next round."""
        self.event.set()


def iso(when: datetime | None) -> str | None:
    """RFC 3339 UTC with milliseconds (``2026-12-01T03:00:00.000Z``), or None."""
    if when is None:
        return None
    if when.tzinfo is not UTC:
        when = when.astimezone(UTC)
    return when.isoformat(timespec="milliseconds")[:23] + "Z"

"""The clock, passed to whatever needs time, so that tests can drive it."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from datetime import UTC, datetime


class Clock:
    """Wall-clock time in UTC, and sleeping."""

    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        return datetime.now(UTC)

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

"""Where services asked this node for no trigger yet (PROTOCOL.md, back-pressure): a
``429`` or ``503`` with ``Retry-After`` pauses the task's pool (or the task, without one).
Triggers due here meanwhile wait until then; the other nodes learn it from the database
(``Store.hold_back``) at their next start decision."""

from __future__ import annotations

from datetime import datetime

from ecron.clock import Clock
from ecron.config.rules import PoolSpec


def pause_key(task: str, pool: PoolSpec | None) -> str:
    """What one ``Retry-After`` pauses: the task's pool, or the task without one."""
    return f"pool:{pool.name}" if pool is not None else f"task:{task}"


class Pauses:
    """The moments until which services asked for no trigger, by ``pause_key``."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._until: dict[str, datetime] = {}

    def __bool__(self) -> bool:
        """True while some pause was heard (it may have ended since)."""
        return bool(self._until)

    def hold(self, key: str, until: datetime) -> None:
        """No trigger of ``key`` before ``until`` (a later moment already set stays)."""
        if key not in self._until or self._until[key] < until:
            self._until[key] = until

    def until(self, key: str) -> datetime | None:
        """The moment ``key``'s pause ends, while it lasts; None when it is not paused."""
        until = self._until.get(key)
        if until is not None and until <= self.clock.now():
            del self._until[key]
            return None
        return until

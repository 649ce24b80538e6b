"""``Recent``: what was worked out for the executions in flight (a call's context, a poll's
URL and headers), kept while they are asked about and let go soon after they stop being
asked about, so that a node's memory follows its work in flight, not its history."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Seconds an entry is kept after it was last asked for (between one and two of these).
KEEP = 60.0
#: Entries kept at most, whatever their age (a burst of executions in one minute).
MOST = 50_000


class Recent(Generic[K, V]):
    """A cache in two generations, swapped every ``keep`` seconds of ``ticks`` (a monotonic
    clock) or when the newer one holds ``most`` entries: an entry asked for moves to the
    newer one, one not asked for during two swaps is dropped (an ended execution's, say).
    An execution polled less often than every ``keep`` seconds has its entry worked out
    again at each poll: work that small beside a poll, that rare by definition."""

    def __init__(self, ticks: Callable[[], float], keep: float = KEEP, most: int = MOST) -> None:
        self._ticks = ticks
        self._keep = keep
        self._most = most
        self._new: dict[K, V] = {}
        self._old: dict[K, V] = {}
        self._swap_at = ticks() + keep

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def get(self, key: K) -> V | None:
        """The entry of ``key``, or None; asking keeps it."""
        now = self._ticks()
        if now >= self._swap_at:
            self._swap(now)
        found = self._new.get(key)
        if found is None:
            found = self._old.pop(key, None)
            if found is not None:
                self._new[key] = found
        return found

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` as ``key``'s entry."""
        if len(self._new) >= self._most:
            self._swap(self._ticks())
        self._new[key] = value

    def _swap(self, now: float) -> None:
        if now >= self._swap_at + self._keep:  # nothing asked for in a whole period since
            self._old, self._new = {}, {}
        else:
            self._old, self._new = self._new, {}
        self._swap_at = now + self._keep

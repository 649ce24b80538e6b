"""Until when services asked this node for no trigger (PROTOCOL.md, back-pressure): a ``429``
or ``503`` with ``Retry-After`` holds back the triggers of the task's pool (or of the task,
without one) until ``held_back_until``. This node keeps what it heard here, so a trigger
that falls due meanwhile is held back without a read of the database; the other nodes learn
it from the database (``Store.hold_back``, the same pool or task) at their next start
decision. Whether a moment still holds a trigger back is ``core.held_back``'s to say, for
both."""

from __future__ import annotations

from datetime import datetime

from ecron.executor.calls import Calls


class HeldBackUntil:
    """The moments until which services asked for no trigger, by pool (or task)."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._until: dict[tuple[str, str], datetime] = {}

    def pool_of(self, task: str) -> str | None:
        """The pool whose triggers one ``Retry-After`` about ``task`` holds back (None: the
        task has none, so the task's alone)."""
        pool = self._calls.spec_of(task).pool
        return None if pool is None else pool.name

    def hold(self, task: str, until: datetime) -> None:
        """No trigger of ``task``'s pool (or of ``task`` without one) before ``until`` (a
        later moment already heard stays)."""
        key = self._key(task)
        if key not in self._until or self._until[key] < until:
            self._until[key] = until

    def of(self, task: str, now: datetime) -> datetime | None:
        """The ``held_back_until`` of ``task``'s pool (or of ``task`` without one) heard
        here; None when none was heard (the common case: nothing is looked up), or it passed
        by ``now`` (then it is forgotten)."""
        if not self._until:
            return None
        key = self._key(task)
        until = self._until.get(key)
        if until is not None and until <= now:
            del self._until[key]
            return None
        return until

    def _key(self, task: str) -> tuple[str, str]:
        pool = self.pool_of(task)
        return ("task", task) if pool is None else ("pool", pool)

"""The runs held here that wait to start (``Wait``: their pool's room or pace, an older run
under ``forbid``), by what wakes them: an end here of a run of their task, or of their
pool's. Each is planned again within a second anyway (other nodes' ends wake nobody here);
this only makes the wait short when the run that frees the room ends on this node.

Of the backfilled runs that wait for an older run of their task (``forbid``), an end wakes
only the oldest: the others cannot start before it does, and wait for the next end (or
their own recheck). So a backfill of N fire times costs about N decisions, not N²."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ecron.core import Execution, WaitingFor
from ecron.executor.calls import Calls


class Waiters:
    """Waiting runs by what wakes them; mechanism only (the engine plans their starts)."""

    def __init__(self, calls: Calls, held: Mapping[str, Execution]) -> None:
        self.calls = calls
        self.held = held
        self._by_key: dict[str, set[str]] = {}

    def _keys(self, task: str) -> tuple[str, ...]:
        spec = self.calls.specs.get(task)
        pool = None if spec is None else spec.pool
        return (f"task:{task}",) if pool is None else (f"task:{task}", f"pool:{pool.name}")

    def add(self, task: str, eid: str) -> None:
        """Run ``eid`` of ``task`` waits to start."""
        for key in self._keys(task):
            self._by_key.setdefault(key, set()).add(eid)

    def woken(self, task: str) -> set[str]:
        """A run of ``task`` ended here: the runs it wakes (each once; they wait again, if
        they must, when decided)."""
        eids: set[str] = set()
        for key in self._keys(task):
            eids |= self._by_key.pop(key, set())
        return eids - self._behind(eids)

    def _behind(self, eids: set[str]) -> set[str]:
        """Those of ``eids`` that wait in turn (``WaitingFor.CONCURRENCY``) behind an older
        one of the same task among them: they stay, to be woken by a later end."""
        oldest: dict[str, tuple[datetime, str]] = {}
        behind: set[str] = set()
        for eid in eids:
            execution = self.held.get(eid)
            if execution is None or execution.waiting_for is not WaitingFor.CONCURRENCY:
                continue
            place = (execution.scheduled_at, eid)
            ahead = oldest.setdefault(execution.task, place)
            if ahead is not place:
                later = max(ahead, place)
                oldest[execution.task] = min(ahead, place)
                behind.add(later[1])
        for eid in behind:
            self.add(self.held[eid].task, eid)
        return behind

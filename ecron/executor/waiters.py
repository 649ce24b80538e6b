"""The runs held here that wait to start (``Wait``: their pool's room or pace, an older run
under ``forbid``), by what wakes them: an end here of a run of their task, or of their
pool's. Each is planned again within a second anyway (other nodes' ends wake nobody here);
this only makes the wait short when the run that frees the room ends on this node."""

from __future__ import annotations

from ecron.executor.calls import Calls


class Waiters:
    """Waiting runs by what wakes them; mechanism only (the engine plans their starts)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
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
        return eids

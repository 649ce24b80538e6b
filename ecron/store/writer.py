"""Group commit: state writes from many executions go to the database together.

Each caller awaits its own write; while one transaction is in flight, the
writes that arrive meanwhile wait and then go in the next one. Under load
that makes one transaction carry many writes; when idle, a write is not
delayed at all.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from ecron.core import Execution
from ecron.store.base import Store

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Pending:
    before: Execution
    after: Execution
    done: asyncio.Future[Execution | None]


class StateWriter:
    """Batches ``Store.save`` calls; see the module docstring."""

    def __init__(self, store: Store, *, max_batch: int = 500) -> None:
        self.store = store
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        #: Transactions and writes so far, for benchmarks and metrics.
        self.transactions = 0
        self.writes = 0

    async def save(self, before: Execution, after: Execution) -> Execution | None:
        """Write ``after`` over ``before`` (compare-and-set); None when the compare failed."""
        done: asyncio.Future[Execution | None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(before, after, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="ecron-state-writer")
        return await asyncio.shield(done)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                stored = await self.store.save([(item.before, item.after) for item in batch])
            except Exception as exc:  # the callers decide what a failed write means
                for item in batch:
                    if not item.done.done():
                        item.done.set_exception(exc)
                continue
            self.transactions += 1
            self.writes += len(batch)
            for item, result in zip(batch, stored, strict=True):
                if not item.done.done():
                    item.done.set_result(result)

    async def drain(self) -> None:
        """Wait until every write asked for so far is done."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

"""The retry written in an end's own transaction (DESIGN.md, "Scheduling rules": retries):
planned from the end as the recorder is about to write it (``planning.plan_retry``), so a
node that dies, or loses the database, right after an end cannot lose the retry. The
recorder asks for it; book-keeping then holds what was written (``Bookkeeping.finished``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ecron.clock import Clock
from ecron.config.model import TaskSpec
from ecron.core import Execution
from ecron.executor.claimant import Claimant
from ecron.planning import plan_retry
from ecron.store.base import Store


class Retries:
    """Plans the retry that goes with an end; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        specs: Mapping[str, TaskSpec],
        clock: Clock,
        claimant: Claimant,
    ) -> None:
        self.store = store
        self.specs = specs
        self.clock = clock
        #: What this node's claims are made of (the retry is claimed by it, under its lease).
        self.claimant = claimant

    async def with_end(self, execution: Execution) -> list[Execution]:
        """What is written in the transaction of ``execution``'s end: its retry, when one
        is due (its fire time read only then: a retry never passes the next one)."""
        spec = self.specs.get(execution.task)
        claim = self.claimant.claim(self.clock.now())
        if spec is None or plan_retry(execution, spec, claim, None) is None:
            return []  # no retry whatever the next fire time: no need to read it
        task = await self.store.get_task(execution.task)
        retry = plan_retry(execution, spec, claim, task.next_fire_at if task else None)
        return [] if retry is None else [retry]

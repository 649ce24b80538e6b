"""Stalled executions (DESIGN.md, "Stalled executions"): ``expect: {progress_within: D}``
raises the alert ``execution_stalled`` when a RUNNING execution's progress has not moved
for ``D`` (``ecron.core.stall`` says from when), once per execution.

The patrol checks every ``patrol_interval`` (so an alert comes at most that much late,
plus the write-behind of the last progress, well under a second). Once per execution, on
any node and across restarts: recording the alert sets the execution row's
``stalled_alerted_at`` where it was null (``Store.mark_stalled``), and only the caller
that set it sends the alert. An execution whose progress moves again after its alert is
not alerted again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import structlog

from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.core import Execution, progress_since
from ecron.durations import format_duration
from ecron.snapshots import execution_snapshot, progress_within
from ecron.store.base import Store

log = structlog.get_logger(__name__)

#: At most this many executions are alerted about per patrol round (the rest next round).
STALLED_LIMIT = 100


def progress_limits(specs: Mapping[str, TaskSpec]) -> dict[str, timedelta]:
    """``expect.progress_within`` of each task of ``specs`` that sets it."""
    limits = {name: progress_within(spec) for name, spec in specs.items()}
    return {name: within for name, within in limits.items() if within is not None}


class Stalled:
    """The stalled-execution check; see the module docstring."""

    def __init__(
        self, *, store: Store, specs: Mapping[str, TaskSpec], alert: Callable[..., None]
    ) -> None:
        self.store = store
        self.specs = specs
        #: ``alert(kind, task, **details)``: sends an alert (``Bookkeeping.alert``).
        self.alert = alert

    async def check(self, now: datetime) -> int:
        """Raise ``execution_stalled`` for each RUNNING execution whose progress has not
        moved for its task's ``progress_within`` at ``now``, and was not alerted about yet;
        how many were raised (by this node)."""
        limits = progress_limits(self.specs)
        since = {name: now - within for name, within in limits.items()}
        raised = 0
        for execution in await self.store.unmoving(since, STALLED_LIMIT):
            if await self.store.mark_stalled(execution.eid, now):
                self._raise(execution, limits[execution.task])
                raised += 1
        return raised

    def _raise(self, execution: Execution, within: timedelta) -> None:
        details = {
            "progress_within": format_duration(within),
            "progress": execution.progress,
            "stalled_since": iso(progress_since(execution)),
        }
        log.warning("execution_stalled", task=execution.task, execution_id=execution.eid, **details)
        shown = execution_snapshot(execution, stalled=True)
        self.alert("execution_stalled", execution.task, execution=shown, **details)

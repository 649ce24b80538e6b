"""Overdue tasks (DESIGN.md, "Overdue"): ``expect: {success_within: D}`` raises the alert
``task_overdue`` when a task has had no SUCCESS for ``D``, whatever the reason (paused,
skipped, failing, excluded by its calendar, every node down), once, and again only after a
newer success and a new period; and the gauge ``ecron_task_last_success_timestamp_seconds``.

The period is measured from the task's newest success (``last_success_at`` on its row), or,
for a task that never succeeded, from when it was added. The patrol checks every
``patrol_interval`` (so an alert comes at most that much late); recording the alert is a
compare-and-set on the task row, so one node raises it, even if two patrol at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

import structlog

from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.durations import format_duration
from ecron.metrics import Metrics
from ecron.store.base import Store
from ecron.store.records import TaskState

log = structlog.get_logger(__name__)


def overdue_at(spec: TaskSpec, task: TaskState) -> datetime | None:
    """When ``task`` is overdue (its newest success, or its addition, plus
    ``success_within``), or None: no ``expect.success_within``, or ``task_overdue`` was
    raised already since its newest success."""
    within = None if spec.expect is None else spec.expect.success_within
    if within is None:
        return None
    raised = task.overdue_at
    if raised is not None and (task.last_success_at is None or raised >= task.last_success_at):
        return None
    since = task.last_success_at or task.created_at
    return None if since is None else since + within


class Overdue:
    """The overdue check and the last-success gauge; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        specs: Mapping[str, TaskSpec],
        metrics: Metrics,
        alert: Callable[..., None],
    ) -> None:
        self.store = store
        self.specs = specs
        self.metrics = metrics
        #: ``alert(kind, task, **details)``: sends an alert (``Bookkeeping.alert``).
        self.alert = alert

    async def refresh(self) -> None:
        """Bring the gauge up to what the database knows (successes on other nodes), for the
        tasks in the config."""
        gauge = self.metrics.last_success
        for name, at in (await self.store.last_successes()).items():
            if name in self.specs:
                gauge.saw(name, at.timestamp())
        gauge.keep_only(self.specs)

    async def check(self, now: datetime) -> int:
        """Raise ``task_overdue`` for each task with ``expect.success_within`` that is
        overdue at ``now`` and was not alerted for it yet; how many were raised (by this
        node)."""
        raised = 0
        for name, spec in list(self.specs.items()):
            within = None if spec.expect is None else spec.expect.success_within
            if within is None:
                continue
            task = await self.store.get_task(name)
            if task is None or task.retired:
                continue
            due = overdue_at(spec, task)
            if due is None or due > now or not await self.store.mark_overdue(task, now):
                continue
            details = {
                "success_within": format_duration(within),
                "last_success_at": iso(task.last_success_at),
                "overdue_since": iso(due),
            }
            log.warning("task_overdue", task=name, **details)
            self.alert("task_overdue", name, **details)
            raised += 1
        return raised

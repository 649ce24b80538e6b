"""Stalled executions (DESIGN.md, "Stalled executions"): the rule behind a snapshot's
``stalled`` and the alert ``execution_stalled``.

Pure, like the rest of ``core``: the moment is passed in.

- Only a RUNNING execution can be stalled.
- Its progress is measured from its last change (``progress_at``, which ``core.apply``
  sets whenever a report changes the progress), or, before any change, from its trigger
  (``triggered_at``: the current step's, for a multi-step task).
- It is stalled once that moment is ``progress_within`` or more before ``now``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ecron.core.model import Execution
from ecron.core.status import Status


def progress_since(execution: Execution) -> datetime | None:
    """Since when a RUNNING ``execution``'s progress has not moved; None for any other
    status (or a RUNNING one that has no trigger time, which does not happen)."""
    if execution.status is not Status.RUNNING:
        return None
    return execution.progress_at or execution.triggered_at


def is_stalled(execution: Execution, within: timedelta | None, now: datetime) -> bool:
    """True when ``execution`` is RUNNING and its progress has not moved for ``within``
    (the task's ``expect.progress_within``; None: never stalled)."""
    if within is None:
        return False
    since = progress_since(execution)
    return since is not None and now - since >= within

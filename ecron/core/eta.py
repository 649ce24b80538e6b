"""When a running execution will likely end: the estimate behind a snapshot's ``eta``.

Pure, like the rest of ``core``: the moment is passed in, and so is the task's history
(the durations of its recent successful runs, read from the store by the caller).

The rules (docs/api.md, "The ETA", says them for users):

- Only a RUNNING execution has an estimate; any other status has none.
- **The pace so far.** Once the execution has made progress of its own, its pace is that
  progress over the time since its first trigger left (``triggered_at``), up to ``now``;
  the rest of the way (to 100) is assumed to go at the same pace. The estimate is never
  before ``now``: at 100 (reported, but not ended yet) it is ``now``. A pace so slow that
  the end would fall after the year 9999 gives none.
- **Before any progress** (none reported yet, or 0), the estimate is the first trigger plus
  the median duration of the task's recent successful runs; none when the task has no such
  run, or when that moment has already passed (the history then says nothing more).
- **Multi-step tasks.** The execution's progress is the mean of its steps', so the pace is
  that of the whole execution, every step weighing the same. A resume starts with the
  steps it kept from the execution it continues already at 100: that share of the
  progress took none of its time, so it does not count towards its pace, and before any
  progress of its own only the remaining share of the usual duration is expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from ecron.core.model import Execution
from ecron.core.status import Status

#: How many of a task's newest successful runs the estimate before any progress looks at.
RECENT_RUNS = 20


def typical_duration(durations: Sequence[timedelta]) -> timedelta | None:
    """The median of ``durations``, None when there are none."""
    if not durations:
        return None
    ordered = sorted(durations)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def kept_progress(execution: Execution) -> float:
    """The share of progress (0..100) a resume starts with: its steps kept as SUCCESS from
    the execution it continues (their remote id is the old execution's, not this one's)."""
    if not execution.steps:
        return 0.0
    own = execution.eid + "."
    kept = sum(
        1
        for step in execution.steps
        if step.status is Status.SUCCESS and not step.remote_id.startswith(own)
    )
    return 100.0 * kept / len(execution.steps)


def needs_history(execution: Execution) -> bool:
    """Whether the estimate of ``execution`` rests on its task's recent durations: RUNNING,
    with no progress of its own yet. Callers read the history only for these."""
    return (
        execution.status is Status.RUNNING
        and execution.triggered_at is not None
        and execution.progress <= kept_progress(execution)
    )


def estimate_end(
    execution: Execution, now: datetime, recent_durations: Sequence[timedelta] = ()
) -> datetime | None:
    """When ``execution`` will likely end, seen at ``now``; None when there is no estimate.

    ``recent_durations``: how long the task's recent successful runs took (only read before
    the execution has made progress of its own, see ``needs_history``).
    """
    started = execution.triggered_at
    if execution.status is not Status.RUNNING or started is None:
        return None
    kept = kept_progress(execution)
    progress = min(100.0, execution.progress)
    gained = progress - kept
    if gained > 0:
        elapsed = max(timedelta(0), now - started)
        try:
            return now + elapsed * ((100.0 - progress) / gained)
        except OverflowError:  # a pace so slow that the end is past the calendar's
            return None
    typical = typical_duration(recent_durations)
    if typical is None:
        return None
    end = started + typical * ((100.0 - kept) / 100.0)
    return end if end >= now else None

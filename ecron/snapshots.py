"""JSON snapshots of tasks and executions, as the API, the CLI and alerts show them
(DESIGN.md, "API")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.core import RECENT_RUNS, Execution, Step, estimate_end, is_stalled, needs_history
from ecron.store.base import Store
from ecron.store.records import TaskState


def progress_within(spec: TaskSpec | None) -> timedelta | None:
    """The task's ``expect.progress_within`` (None: its executions are never stalled)."""
    return None if spec is None or spec.expect is None else spec.expect.progress_within


async def execution_snapshots(
    store: Store,
    executions: Sequence[Execution],
    now: datetime,
    specs: Mapping[str, TaskSpec],
    *,
    held: Mapping[str, Execution],
) -> list[dict[str, Any]]:
    """The snapshots of ``executions`` as the API answers them, seen at ``now``: each in
    the newest state known here (``held``: what this node holds, see ``newest``), naming
    its resume and the chained executions it set off, each RUNNING one with its ETA and
    whether it is stalled (by its task's ``expect`` in ``specs``, the config). What
    they need from the store is read for all of them at once (one read of resumes, one of
    the executions set off by the final ones, one of recent durations), whatever their
    number."""
    executions = [newest(e, held) for e in executions]
    eids = [e.eid for e in executions]
    resumes = await store.resumes_of(eids)
    ended = [e.eid for e in executions if e.is_final]  # only an end sets chained runs off
    downstream = await store.downstreams_of(ended) if ended else {}
    waiting = [e.task for e in executions if needs_history(e)]
    history = await store.recent_durations(waiting, RECENT_RUNS) if waiting else {}
    return [
        execution_snapshot(
            e,
            resumes.get(e.eid),
            eta=estimate_end(e, now, history.get(e.task, ())),
            downstream=downstream.get(e.eid, ()),
            stalled=is_stalled(e, progress_within(specs.get(e.task)), now),
        )
        for e in executions
    ]


def newest(stored: Execution, held: Mapping[str, Execution]) -> Execution:
    """``stored`` as this node holds it, when it holds a newer version under the same fence:
    a change of progress alone is written within ``PROGRESS_SETTLE``, and the node that
    polled it shows it at once (another node's API shows it once written)."""
    mine = held.get(stored.eid)
    if mine is None or mine.fence != stored.fence or mine.version <= stored.version:
        return stored
    return mine


def execution_snapshot(
    execution: Execution,
    resumed_by: str | None = None,
    *,
    eta: datetime | None = None,
    downstream: Sequence[str] = (),
    stalled: bool = False,
) -> dict[str, Any]:
    """Everything people need to know about one execution (``resumed_by``: the id of its
    resume, when it was resumed; ``eta``: when it will likely end, see
    ``ecron.core.estimate_end``; alerts, about ended executions, have none; ``downstream``:
    the executions of chained tasks that its end set off; ``stalled``: see
    ``ecron.core.is_stalled``)."""
    return {
        "id": execution.eid,
        "task": execution.task,
        "status": str(execution.status),
        "reason": None if execution.reason is None else str(execution.reason),
        "progress": execution.progress,
        "message": execution.message,
        "result": execution.result,
        "result_truncated": execution.result_truncated,
        "trigger_kind": str(execution.trigger_kind),
        "attempt": execution.attempt,
        "scheduled_at": iso(execution.scheduled_at),
        "created_at": iso(execution.created_at),
        "triggered_at": iso(execution.triggered_at),
        "last_report_at": iso(execution.last_report_at),
        "progress_at": iso(execution.progress_at),
        "stalled": stalled,
        "finished_at": iso(execution.finished_at),
        "deadline": iso(execution.deadline),
        "resume_of": execution.resume_of,
        "resume_attempt": execution.resume_attempt,
        "resumed_by": resumed_by,
        "cancel_acknowledged": execution.cancel_acknowledged,
        "eta": iso(eta),
        "upstream": execution.upstream,
        "downstream": list(downstream),
        "probe_failures": execution.probe_failures,
        "owner": execution.owner,
        "steps": [step_snapshot(step) for step in execution.steps],
    }


def step_view(shown: dict[str, Any], remote_id: str) -> dict[str, Any]:
    """The snapshot ``shown`` of a multi-step execution as the service of its step
    ``remote_id`` may see it (a step's callback answer): that step's status, reason,
    progress, message and times, and no other step (their messages and results are not
    that service's business). The snapshot of the execution when ``remote_id`` is not one
    of its steps."""
    own = [step for step in shown["steps"] if step["remote_id"] == remote_id]
    if not own:
        return shown
    [step] = own
    return {
        **shown,
        **{key: step[key] for key in ("status", "reason", "progress", "message")},
        "result": None,
        "result_truncated": False,
        "triggered_at": step["started_at"],
        "finished_at": step["finished_at"],
        "eta": None,
        "steps": own,
    }


def step_snapshot(step: Step) -> dict[str, Any]:
    """One step of a multi-step execution."""
    return {
        "number": step.number,
        "name": step.name,
        "status": str(step.status),
        "reason": None if step.reason is None else str(step.reason),
        "progress": step.progress,
        "message": step.message,
        "remote_id": step.remote_id,
        "started_at": iso(step.started_at),
        "finished_at": iso(step.finished_at),
    }


def task_snapshot(
    task: TaskState, last: dict[str, Any] | None, claimed: datetime | None = None
) -> dict[str, Any]:
    """A task's definition (secrets redacted) and where it stands. ``last``: the snapshot of
    its newest execution; ``claimed``: its earliest fire time claimed ahead, which comes
    before the task row's next one."""
    spec = task.spec
    upcoming = [when for when in (claimed, task.next_fire_at) if when is not None]
    return {
        "name": task.name,
        "schedule": spec.schedule,
        "schedule_text": spec.fire_schedule.text,
        "timezone": spec.timezone,
        "enabled": spec.enabled,
        "paused": task.paused,
        "paused_reason": task.paused_reason,
        "retired": task.retired,
        "next_fire_at": iso(min(upcoming)) if upcoming else None,
        "consecutive_failures": task.consecutive_failures,
        "concurrency": spec.concurrency,
        "mode": spec.mode,
        "idempotent": spec.idempotent,
        "steps": list(spec.step_names),
        "last_execution": last,
    }

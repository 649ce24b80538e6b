"""Execution statuses, the reasons that go with them, and which moves are allowed."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Where an execution is, as ecron sees it."""

    #: Claimed for a fire time that has not come yet (or a retry waiting out its backoff):
    #: not started, not active, never shown as running and never counted by ``concurrency``.
    SCHEDULED = "SCHEDULED"
    #: Started: its trigger is leaving or has left, and has not been answered yet.
    PENDING = "PENDING"
    #: The user service accepted the trigger and is working.
    RUNNING = "RUNNING"
    #: The user service reported success.
    SUCCESS = "SUCCESS"
    #: Ended without success; ``reason`` says why.
    FAILED = "FAILED"
    #: The task timeout passed; the cancel call was sent.
    TIMED_OUT = "TIMED_OUT"
    #: A person cancelled it; the cancel call was sent.
    CANCELLED = "CANCELLED"
    #: A fire time that was not run; ``reason`` says why.
    SKIPPED = "SKIPPED"


class Reason(StrEnum):
    """Why an execution ended FAILED or SKIPPED."""

    #: The user service reported FAILED.
    REMOTE_FAILED = "remote_failed"
    #: The user service refused the trigger (4xx, 404 or UNKNOWN).
    REJECTED = "rejected"
    #: The user service answered 2xx without a valid report.
    PROTOCOL_ERROR = "protocol_error"
    #: The trigger could not be delivered within its retry budget.
    TRIGGER_FAILED = "trigger_failed"
    #: Polls or heartbeats failed ``max_probe_failures`` times in a row.
    UNREACHABLE = "unreachable"
    #: The user service forgot an execution it had accepted.
    LOST = "lost"
    #: The work stopped for an outside cause (restart, lost session) and is safe to resume.
    INTERRUPTED = "interrupted"
    #: SKIPPED: the fire time was found too late (``misfire.policy``).
    MISFIRE = "misfire"
    #: SKIPPED: an earlier execution was still active (``concurrency: forbid``).
    OVERLAP = "overlap"
    #: SKIPPED: the task was paused.
    PAUSED = "paused"
    #: SKIPPED: the task is no longer in the config (retired) when its claimed run was due.
    RETIRED = "retired"


class RemoteStatus(StrEnum):
    """The ``status`` of a report, as the user service says it."""

    #: Working.
    RUNNING = "RUNNING"
    #: Done, successfully.
    SUCCESS = "SUCCESS"
    #: Done, unsuccessfully.
    FAILED = "FAILED"
    #: The user service does not know this execution id.
    UNKNOWN = "UNKNOWN"


class Channel(StrEnum):
    """The way a report reached ecron."""

    #: The answer to the trigger POST.
    TRIGGER = "trigger"
    #: The answer to a poll GET.
    POLL = "poll"
    #: Pushed by the user service to the callback endpoint.
    CALLBACK = "callback"
    #: Pushed by the user service through the Redis stream (``queue`` in ecron.yaml).
    QUEUE = "queue"


class TriggerKind(StrEnum):
    """Why an execution was created."""

    #: A fire time of the task's schedule.
    SCHEDULE = "schedule"
    #: A person asked for it (API, CLI).
    MANUAL = "manual"
    #: A new attempt after a FAILED execution of the same fire time.
    RETRY = "retry"
    #: The continuation of an unsuccessful execution.
    RESUME = "resume"
    #: A chained task (``schedule: {after_task: ...}``), set off by its upstream's end.
    CHAIN = "chain"
    #: A past fire time run on request (``POST /tasks/{name}/backfill``).
    BACKFILL = "backfill"


class WaitingFor(StrEnum):
    """What a run that cannot go on yet waits for (``Execution.waiting_for``)."""

    #: Claimed (SCHEDULED): its pool's room or its pace (``max_running``, ``max_per_second``).
    POOL = "pool"
    #: Claimed (SCHEDULED), backfilled: an older run of its task under ``concurrency: forbid``.
    CONCURRENCY = "concurrency"
    #: The service asked for no trigger yet (``429``/``503`` with ``Retry-After``): claimed
    #: (SCHEDULED) and not started, or PENDING with its trigger sent again at ``not_before``.
    RETRY_AFTER = "retry-after"


#: What the claimed runs that stand in their pool's line wait for.
IN_LINE: frozenset[WaitingFor] = frozenset({WaitingFor.POOL, WaitingFor.RETRY_AFTER})

#: Statuses that never change again.
FINAL: frozenset[Status] = frozenset(
    {Status.SUCCESS, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED, Status.SKIPPED}
)

#: Statuses of an execution that is still going (it counts for ``concurrency``).
ACTIVE: frozenset[Status] = frozenset({Status.PENDING, Status.RUNNING})

#: Statuses of an execution that a node holds under a lease: active, or claimed ahead.
HELD: frozenset[Status] = frozenset({Status.SCHEDULED, *ACTIVE})

#: Reasons that mean "stopped by something outside the work; safe to resume if idempotent".
INTERRUPTED_REASONS: frozenset[Reason] = frozenset(
    {Reason.INTERRUPTED, Reason.UNREACHABLE, Reason.LOST}
)

#: The allowed moves. Only a SCHEDULED execution may be SKIPPED: its trigger never left.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.SCHEDULED: frozenset({Status.PENDING, Status.SKIPPED, Status.CANCELLED}),
    Status.PENDING: frozenset(
        {
            Status.RUNNING,
            Status.SUCCESS,
            Status.FAILED,
            Status.TIMED_OUT,
            Status.CANCELLED,
        }
    ),
    Status.RUNNING: frozenset({Status.SUCCESS, Status.FAILED, Status.TIMED_OUT, Status.CANCELLED}),
    **{status: frozenset() for status in FINAL},
}


def can_move(before: Status, after: Status) -> bool:
    """True when ``before -> after`` is allowed (staying in place always is)."""
    return before == after or after in TRANSITIONS[before]

"""The one function that moves an execution: ``apply(execution, event, now)``.

Every report (trigger answer, poll answer, callback) and every other event
goes through ``apply``. It reads no clock and does no I/O: time is passed in,
and what to do next is read off the returned ``Transition``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from ecron.core.flight import current_step, in_flight
from ecron.core.model import Execution, Report, Step, clamp_progress
from ecron.core.status import Channel, Reason, RemoteStatus, Status, WaitingFor, can_move


@dataclass(frozen=True, slots=True)
class Reported:
    """A report arrived through ``channel``.

    ``after_takeover``: the first poll by a node that took the execution over from
    one that stopped; the service no longer knowing it then means FAILED
    ``interrupted`` ("stopped here"), not ``lost``.
    """

    report: Report
    channel: Channel
    after_takeover: bool = False
    #: The step the report is about (multi-step executions); another step's is ignored.
    step: int | None = None


@dataclass(frozen=True, slots=True)
class TriggerSent:
    """The trigger of the current call (the execution, or its current step) is about to
    leave: a SCHEDULED execution starts (PENDING). The first trigger fixes
    ``triggered_at``; the execution's deadline is that plus ``timeout``, and a step's is the
    earlier of that and its start plus ``step_timeout``. A call already started ignores it
    (a retry of the same call)."""

    timeout: timedelta
    step_timeout: timedelta | None = None


@dataclass(frozen=True, slots=True)
class TriggerFailed:
    """The trigger did not start the execution, for ``reason``."""

    reason: Reason
    message: str
    #: The step whose trigger failed (multi-step executions).
    step: int | None = None


@dataclass(frozen=True, slots=True)
class ProbeFailed:
    """A poll (or heartbeat) failed; ``limit`` failures in a row end the execution."""

    kind: Literal["unreachable", "protocol_error"]
    limit: int
    message: str
    #: The step that was probed (multi-step executions).
    step: int | None = None


@dataclass(frozen=True, slots=True)
class CancelSent:
    """The cancel call is about to leave (recorded first, so it is sent at most once)."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The execution was stopped by its deadline (TIMED_OUT) or by a person (CANCELLED)."""

    #: TIMED_OUT or CANCELLED.
    status: Status
    acknowledged: bool | None
    message: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A claimed (SCHEDULED) fire time is not run after all (``reason``: overlap, paused,
    misfire)."""

    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """A claimed (SCHEDULED) run cannot start yet and waits: ``what`` for (``WaitingFor``),
    ``why`` in words (its message)."""

    what: WaitingFor
    why: str


@dataclass(frozen=True, slots=True)
class HeldBack:
    """The service answered a trigger ``429`` or ``503`` with ``Retry-After``: "not now"
    (PROTOCOL.md, back-pressure). Nothing started there: the execution keeps its id and
    waits, its trigger sent again at ``until``; not a failure (no trigger attempt, no
    retry spent)."""

    until: datetime
    message: str


Event = (
    Reported
    | TriggerSent
    | TriggerFailed
    | ProbeFailed
    | CancelSent
    | Stopped
    | Skipped
    | Waiting
    | HeldBack
)


@dataclass(frozen=True, slots=True)
class Transition:
    """What ``apply`` decided."""

    before: Execution
    after: Execution
    #: The deadline has passed: send the cancel call, then apply ``Stopped(TIMED_OUT)``.
    cancel_due: bool = False
    #: Why the event changed nothing, when it did not.
    ignored: str | None = None

    @property
    def changed(self) -> bool:
        """True when the execution must be written."""
        return self.after is not self.before and self.after != self.before

    @property
    def finished(self) -> bool:
        """True when this transition made the execution final."""
        return self.after.is_final and not self.before.is_final


def apply(execution: Execution, event: Event, now: datetime) -> Transition:
    """Apply ``event`` to ``execution`` at time ``now``.

    A final execution never changes. A report that arrives after the deadline
    changes nothing and asks for the cancel call instead.
    """
    refused = _refusal(execution, event)
    if refused is not None:
        return Transition(execution, execution, ignored=refused)
    if execution.waiting_for is not None and isinstance(event, Reported):
        return _heard_at_last(execution, event, now)
    if execution.steps and isinstance(event, Reported | TriggerFailed | ProbeFailed | Stopped):
        return _apply_to_step(execution, event, now)
    match event:
        case Reported(report, channel, after_takeover, _):
            return _apply_report(execution, report, channel, now, after_takeover)
        case TriggerSent(timeout, step_timeout):
            return _apply_trigger_sent(execution, timeout, step_timeout, now)
        case TriggerFailed(reason, message, _):
            return Transition(execution, _finish(execution, Status.FAILED, reason, message, now))
        case ProbeFailed(kind, limit, message, _):
            return _apply_probe_failure(execution, kind, limit, message, now)
        case CancelSent():
            return Transition(execution, execution.evolve(cancel_sent_at=now))
        case Skipped(reason, message):
            return Transition(execution, _finish(execution, Status.SKIPPED, reason, message, now))
        case Waiting() | HeldBack():
            return _apply_wait(execution, event)
        case Stopped(status, acknowledged, message):
            assert status in (Status.TIMED_OUT, Status.CANCELLED), status
            after = _finish(execution, status, None, message, now, cancel_acknowledged=acknowledged)
            return Transition(execution, after)
    raise TypeError(f"not an event: {event!r}")  # pragma: no cover


def _refusal(execution: Execution, event: Event) -> str | None:
    """Why ``event`` cannot move ``execution`` at all, or None when it may.

    A final execution never changes. A SCHEDULED one moves only by its start (the trigger
    leaving), a skip or a person's cancel: reports cannot be about it, since nobody was told
    of it yet. Only a SCHEDULED one can be skipped, and a cancel call leaves once. Once the
    cancel call was sent, reports change nothing (PROTOCOL.md, "Deadline and cancel"): only
    the stop it began can end the execution.
    """
    if execution.is_final:
        return f"execution is {execution.status}"
    if execution.cancel_sent_at is not None and isinstance(event, Reported | ProbeFailed):
        return "the cancel call was sent"
    scheduled = execution.status is Status.SCHEDULED
    if isinstance(event, HeldBack) and execution.status is not Status.PENDING:
        return "only a trigger not yet answered can be held back"
    if isinstance(event, Skipped | Waiting) and not scheduled:
        return "the trigger already left"
    if isinstance(event, CancelSent) and execution.cancel_sent_at is not None:
        return "the cancel call was already sent"
    if not scheduled or isinstance(event, TriggerSent | Skipped | Waiting):
        return None
    if isinstance(event, Stopped) and event.status is Status.CANCELLED:
        return None
    return "it has not started yet"


def _apply_wait(execution: Execution, event: Waiting | HeldBack) -> Transition:
    """A run that waits: to start (``Waiting``), or for the moment the service asked for
    (``HeldBack``: its trigger leaves again then)."""
    if isinstance(event, HeldBack):
        after = execution.evolve(
            waiting_for=WaitingFor.RETRY_AFTER, not_before=event.until, message=event.message
        )
        return Transition(execution, after)
    if execution.waiting_for == event.what and execution.message == event.why:
        return Transition(execution, execution, ignored="it waits for that already")
    return Transition(execution, execution.evolve(waiting_for=event.what, message=event.why))


def _heard_at_last(execution: Execution, event: Reported, now: datetime) -> Transition:
    """A report about an execution whose trigger the service held back: it answered at
    last, so it no longer waits (a report that changes nothing leaves it waiting)."""
    heard = execution.evolve(waiting_for=None)
    transition = apply(heard, event, now)
    if transition.after is heard or transition.after == heard:  # nothing new, or too late
        return replace(transition, before=execution, after=execution)
    return replace(transition, before=execution)


def deadline_passed(execution: Execution, now: datetime) -> bool:
    """True when the execution has a deadline and ``now`` is at or past it."""
    return execution.deadline is not None and now >= execution.deadline


def _apply_trigger_sent(
    execution: Execution, timeout: timedelta, step_timeout: timedelta | None, now: datetime
) -> Transition:
    call = in_flight(execution)
    step = call.step
    if call.started:
        return Transition(execution, execution, ignored="this call was already triggered")
    first = execution.triggered_at or now
    deadline = first + timeout
    if step_timeout is not None:
        deadline = min(deadline, now + step_timeout)
    status = Status.PENDING if execution.status is Status.SCHEDULED else execution.status
    after = execution.evolve(
        status=status, triggered_at=first, deadline=deadline, probe_failures=0, waiting_for=None
    )
    if execution.waiting_for is not None:
        after = after.evolve(message=None)
    if step is not None:
        after = after.evolve(steps=_replace_step(after, replace(step, started_at=now)))
    return Transition(execution, after)


def _apply_to_step(execution: Execution, event: Event, now: datetime) -> Transition:
    """A multi-step execution: the event moves its current step, by the one-call rules
    applied to a view of that step; the execution then follows from its steps."""
    step = current_step(execution)
    assert step is not None, "a non-final execution has a step in flight"
    about = getattr(event, "step", None)
    if about is not None and about != step.number:
        return Transition(execution, execution, ignored=f"about step {about}, not the current one")
    view = execution.evolve(
        steps=(),
        status=step.status,
        reason=step.reason,
        progress=step.progress,
        message=step.message,
        finished_at=None,
    )
    moved = apply(view, event, now)
    if moved.cancel_due or not moved.changed:
        return Transition(execution, execution, cancel_due=moved.cancel_due, ignored=moved.ignored)
    call = moved.after
    new_step = replace(
        step,
        status=call.status,
        reason=call.reason,
        progress=100.0 if call.status is Status.SUCCESS else call.progress,
        message=call.message,
        finished_at=call.finished_at,
    )
    steps = _replace_step(execution, new_step)
    progress = sum(s.progress for s in steps) / len(steps)
    after = execution.evolve(
        steps=steps,
        progress=progress,
        progress_at=now if progress != execution.progress else execution.progress_at,
        message=call.message,
        probe_failures=call.probe_failures,
        last_report_at=call.last_report_at,
        cancel_acknowledged=call.cancel_acknowledged,
        not_before=call.not_before,
    )
    last = new_step.number == execution.steps[-1].number
    if new_step.is_final and (last or new_step.status is not Status.SUCCESS):
        after = after.evolve(
            status=call.status,
            reason=call.reason,
            finished_at=call.finished_at,
            result=call.result,
            result_truncated=call.result_truncated,
        )
    elif execution.status is Status.RUNNING or call.status is not Status.PENDING:
        after = after.evolve(status=Status.RUNNING)
    return Transition(execution, after)


def _replace_step(execution: Execution, step: Step) -> tuple[Step, ...]:
    return tuple(step if s.number == step.number else s for s in execution.steps)


def _apply_report(
    execution: Execution, report: Report, channel: Channel, now: datetime, after_takeover: bool
) -> Transition:
    if deadline_passed(execution, now):
        return Transition(execution, execution, cancel_due=True, ignored="deadline passed")
    if report.status is RemoteStatus.UNKNOWN:
        return _apply_unknown(execution, channel, now, after_takeover)
    message = report.message if report.message is not None else execution.message
    if report.status is RemoteStatus.RUNNING:
        progress = execution.progress if report.progress is None else report.progress
        if (
            execution.status is Status.RUNNING
            and execution.probe_failures == 0
            and progress == execution.progress
            and message == execution.message
            and channel is Channel.POLL
        ):
            # The common case, kept cheap: a poll that says nothing new is not written.
            return Transition(execution, execution, ignored="nothing new")
        # One copy with every change: this is the path of every poll that moves progress.
        progress = clamp_progress(progress)
        after = execution.evolve(
            status=Status.RUNNING,
            progress=progress,
            message=message,
            probe_failures=0,
            last_report_at=now,
            progress_at=now if progress != execution.progress else execution.progress_at,
        )
        return Transition(execution, after)
    heard = {"probe_failures": 0, "last_report_at": now}
    if report.status is RemoteStatus.SUCCESS:
        done = {
            "progress": 100.0,
            "result": report.result,
            "result_truncated": report.result_truncated,
        }
        after = _finish(execution, Status.SUCCESS, None, message, now, **heard, **done)
        return Transition(execution, after)
    reason = Reason.INTERRUPTED if report.interrupted else Reason.REMOTE_FAILED
    if report.progress is not None:
        heard["progress"] = clamp_progress(report.progress)
    return Transition(execution, _finish(execution, Status.FAILED, reason, message, now, **heard))


def _apply_unknown(
    execution: Execution, channel: Channel, now: datetime, after_takeover: bool
) -> Transition:
    if channel is Channel.TRIGGER:
        message = "the user service does not know the execution it was just given"
        return Transition(
            execution, _finish(execution, Status.FAILED, Reason.REJECTED, message, now)
        )
    if execution.status is Status.PENDING:
        # Polled because the trigger's outcome stayed unknown after its retries: it never started.
        message = "the trigger's outcome was unknown, and the user service does not know it"
        failed = _finish(execution, Status.FAILED, Reason.TRIGGER_FAILED, message, now)
        return Transition(execution, failed)
    if after_takeover:
        # The RUNNING residue of a node that stopped: "stopped here" is kept as a fact.
        message = "the node driving it stopped, and the user service no longer knows it"
        failed = _finish(execution, Status.FAILED, Reason.INTERRUPTED, message, now)
        return Transition(execution, failed)
    message = "the user service no longer knows this execution"
    return Transition(execution, _finish(execution, Status.FAILED, Reason.LOST, message, now))


def _apply_probe_failure(
    execution: Execution, kind: str, limit: int, message: str, now: datetime
) -> Transition:
    failures = execution.probe_failures + 1
    if failures < limit:
        return Transition(execution, execution.evolve(probe_failures=failures))
    reason = Reason.PROTOCOL_ERROR if kind == "protocol_error" else Reason.UNREACHABLE
    text = f"{failures} failed probes in a row; last: {message}"
    after = _finish(execution, Status.FAILED, reason, text, now).evolve(probe_failures=failures)
    return Transition(execution, after)


def _finish(
    execution: Execution,
    status: Status,
    reason: Reason | None,
    message: str | None,
    now: datetime,
    **more: Any,
) -> Execution:
    """``execution`` ended as ``status`` at ``now`` (with ``more`` changes, in one copy)."""
    assert can_move(execution.status, status), f"{execution.status} -> {status}"
    return execution.evolve(status=status, reason=reason, message=message, finished_at=now, **more)

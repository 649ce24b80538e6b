"""From an HTTP outcome to the core event it means, for each of the three calls."""

from __future__ import annotations

from ecron.config.model import CallSettings
from ecron.core import (
    Channel,
    Event,
    ProbeFailed,
    Reason,
    RemoteStatus,
    Report,
    Reported,
    TriggerFailed,
)
from ecron.executor.http import CallOutcome, OutcomeKind

_UNKNOWN = Report(status=RemoteStatus.UNKNOWN)

#: Trigger outcomes worth sending again (with the same execution id).
RETRYABLE = frozenset({OutcomeKind.TRANSIENT, OutcomeKind.UNSENT, OutcomeKind.NO_ANSWER})

#: Cancel outcomes that count as acknowledged (PROTOCOL.md: 2xx with or without a report, 404).
ACKNOWLEDGED = frozenset({OutcomeKind.REPORT, OutcomeKind.UNKNOWN, OutcomeKind.BAD_REPORT})

#: Cancel outcomes worth one more try.
CANCEL_RETRYABLE = frozenset({OutcomeKind.TRANSIENT, OutcomeKind.UNSENT, OutcomeKind.NO_ANSWER})


def said(call: str, outcome: CallOutcome) -> str:
    """What became of a ``call`` (``trigger``, ``poll``, ``batch poll``, ``cancel``) that
    failed, and what the service said, in words people read (DESIGN.md, "What people
    read"): ``trigger answered HTTP 500: {"error": "disk full"}``. Only a call that never
    left "could not be delivered"."""
    match outcome.kind:
        case OutcomeKind.UNSENT:
            return f"the {call} could not be delivered: {outcome.detail}"
        case OutcomeKind.NO_ANSWER:
            return f"the {call} was sent, but not answered: {outcome.detail}"
        case OutcomeKind.BAD_REPORT:
            return f"{call} answered HTTP {outcome.http_status}, not a report: {outcome.detail}"
    return f"{call} answered {outcome.detail or f'HTTP {outcome.http_status}'}"


def trigger_event(outcome: CallOutcome, step: int | None = None) -> Event:
    """What the (last) answer to a trigger (of ``step``, for a multi-step task) means."""
    match outcome.kind:
        case OutcomeKind.REPORT:
            assert outcome.report is not None
            return Reported(outcome.report, Channel.TRIGGER, step=step)
        case OutcomeKind.UNKNOWN if outcome.report is None:  # a 404: said in its words
            detail = f"{said('trigger', outcome)} (the service does not know this execution)"
            return TriggerFailed(Reason.REJECTED, detail, step)
        case OutcomeKind.UNKNOWN:
            return Reported(outcome.report or _UNKNOWN, Channel.TRIGGER, step=step)
        case OutcomeKind.REJECTED | OutcomeKind.BAD_REPORT:
            reason = (
                Reason.REJECTED if outcome.kind is OutcomeKind.REJECTED else Reason.PROTOCOL_ERROR
            )
            return TriggerFailed(reason, said("trigger", outcome), step)
    return TriggerFailed(Reason.TRIGGER_FAILED, said("trigger", outcome), step)


def poll_event(
    outcome: CallOutcome,
    call: CallSettings,
    step: int | None = None,
    *,
    after_takeover: bool = False,
) -> Event:
    """What the answer to a poll (of ``step``, for a multi-step task; through the task's
    batch endpoint when it has one) means."""
    match outcome.kind:
        case OutcomeKind.REPORT:
            assert outcome.report is not None
            return Reported(outcome.report, Channel.POLL, after_takeover, step)
        case OutcomeKind.UNKNOWN:
            return Reported(outcome.report or _UNKNOWN, Channel.POLL, after_takeover, step)
    what = said("poll" if call.batch_poll_url is None else "batch poll", outcome)
    if outcome.kind is OutcomeKind.BAD_REPORT:
        return ProbeFailed("protocol_error", call.max_probe_failures, what, step)
    return ProbeFailed("unreachable", call.max_probe_failures, what, step)

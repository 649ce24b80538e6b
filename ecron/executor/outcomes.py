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


def trigger_event(outcome: CallOutcome, step: int | None = None) -> Event:
    """What the (last) answer to a trigger (of ``step``, for a multi-step task) means."""
    match outcome.kind:
        case OutcomeKind.REPORT:
            assert outcome.report is not None
            return Reported(outcome.report, Channel.TRIGGER, step=step)
        case OutcomeKind.UNKNOWN:
            return Reported(outcome.report or _UNKNOWN, Channel.TRIGGER, step=step)
        case OutcomeKind.REJECTED:
            detail = f"the trigger was refused: {outcome.detail}"
            return TriggerFailed(Reason.REJECTED, detail, step)
        case OutcomeKind.BAD_REPORT:
            detail = f"the trigger answer is not a report: {outcome.detail}"
            return TriggerFailed(Reason.PROTOCOL_ERROR, detail, step)
    detail = f"the trigger could not be delivered: {outcome.detail}"
    return TriggerFailed(Reason.TRIGGER_FAILED, detail, step)


def poll_event(
    outcome: CallOutcome,
    call: CallSettings,
    step: int | None = None,
    *,
    after_takeover: bool = False,
) -> Event:
    """What the answer to a poll (of ``step``, for a multi-step task) means."""
    match outcome.kind:
        case OutcomeKind.REPORT:
            assert outcome.report is not None
            return Reported(outcome.report, Channel.POLL, after_takeover, step)
        case OutcomeKind.UNKNOWN:
            return Reported(outcome.report or _UNKNOWN, Channel.POLL, after_takeover, step)
        case OutcomeKind.BAD_REPORT:
            return ProbeFailed("protocol_error", call.max_probe_failures, outcome.detail, step)
    return ProbeFailed("unreachable", call.max_probe_failures, outcome.detail, step)

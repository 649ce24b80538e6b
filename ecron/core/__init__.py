"""The execution state machine: statuses, reports, and the one function that moves executions.

Nothing here does I/O or reads a clock.
"""

from ecron.core.eta import RECENT_RUNS, estimate_end, needs_history, typical_duration
from ecron.core.flight import (
    InFlight,
    Ownership,
    current_step,
    due_at,
    held_back,
    in_flight,
    ownership,
)
from ecron.core.machine import (
    CancelSent,
    Event,
    ProbeFailed,
    Reported,
    Skipped,
    Stopped,
    Transition,
    TriggerFailed,
    TriggerSent,
    Waiting,
    apply,
    deadline_passed,
)
from ecron.core.model import Execution, InvalidReport, Report, Step, parse_report
from ecron.core.plans import FirePlan, Gate, Holder, Lease
from ecron.core.stall import is_stalled, progress_since
from ecron.core.status import (
    ACTIVE,
    FINAL,
    HELD,
    IN_LINE,
    INTERRUPTED_REASONS,
    Channel,
    Reason,
    RemoteStatus,
    Status,
    TriggerKind,
    WaitingFor,
)

__all__ = [
    "ACTIVE",
    "FINAL",
    "HELD",
    "INTERRUPTED_REASONS",
    "IN_LINE",
    "RECENT_RUNS",
    "CancelSent",
    "Channel",
    "Event",
    "Execution",
    "FirePlan",
    "Gate",
    "Holder",
    "InFlight",
    "InvalidReport",
    "Lease",
    "Ownership",
    "ProbeFailed",
    "Reason",
    "RemoteStatus",
    "Report",
    "Reported",
    "Skipped",
    "Status",
    "Step",
    "Stopped",
    "Transition",
    "TriggerFailed",
    "TriggerKind",
    "TriggerSent",
    "Waiting",
    "WaitingFor",
    "apply",
    "current_step",
    "deadline_passed",
    "due_at",
    "estimate_end",
    "held_back",
    "in_flight",
    "is_stalled",
    "needs_history",
    "ownership",
    "parse_report",
    "progress_since",
    "typical_duration",
]

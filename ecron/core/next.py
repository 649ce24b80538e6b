"""What happens next to an execution: ``next_action(execution, now, cadence, occasion,
held_back_until)``.

``apply`` says what an event does to an execution; this says what the node holding it does
next: start it at its time, let it wait to start or replace older runs first, record that
its trigger leaves, send it (probing first when an earlier one may have left), poll it,
listen for its pushed reports, cancel it, close a cancel that never finished, book its end,
or drop it. Every "when and what next" rule lives here, decided from data: the execution as
held (whether its trigger is recorded as leaving is read off it: ``in_flight``), the moment,
the cadence of its call in flight, why the question is asked (``occasion``), and until when
a service's ``Retry-After`` holds its trigger back as this node heard (``held_back_until``).
A planned call whose checks passed is ``PROCEED``: said, not told by handing the planned
action back. It reads no clock and does no I/O; the engine (``ecron.engine``) carries the
answer out, in one ``match``, and asks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ecron.core.flight import Ownership, due_at, held_back, in_flight, ownership
from ecron.core.machine import Transition, deadline_passed
from ecron.core.model import Execution
from ecron.core.plans import Holder
from ecron.core.status import Status, WaitingFor

#: When carrying an action out failed unexpectedly, it is tried again this much later.
RETRY_AFTER_ERROR = timedelta(seconds=5)
#: When a start decision could not be made (the database is away), it is tried again this
#: much later.
START_RETRY = timedelta(seconds=1)
#: A cancel recorded as sent is given this many of its call's request timeouts to end the
#: execution before the node ends it without a second cancel call (``Close``).
CANCEL_GRACE_TIMEOUTS = 3


def cancel_grace(request_timeout: timedelta) -> timedelta:
    """How long a cancel recorded as sent may take (``Cadence.cancel_grace``)."""
    return request_timeout * CANCEL_GRACE_TIMEOUTS


def ends_by(execution: Execution, grace: timedelta) -> datetime | None:
    """When the node holding ``execution`` ends it by itself at the latest (None: it never
    has to): at its deadline, it records and sends the cancel; once a cancel is recorded
    as sent, ``grace`` (its ``cancel_grace``) after that it closes it. Past this, nothing
    seems to drive it (the patrol's stale rule)."""
    deadline, cancel_sent_at = execution.deadline, execution.cancel_sent_at
    if cancel_sent_at is None:
        return deadline
    closed = cancel_sent_at + grace
    return closed if deadline is None else max(deadline, closed)


@dataclass(frozen=True, slots=True)
class Cadence:
    """What the next action depends on in the settings of the call in flight."""

    poll_interval: timedelta
    #: Reports are only pushed (``mode: callback`` or ``queue``): never polled.
    pushed: bool
    heartbeat_timeout: timedelta
    #: How long a cancel that was recorded as sent may take before the execution is ended
    #: without a second cancel call (three request timeouts).
    cancel_grace: timedelta


# -- why the question is asked -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taken:
    """The node took the execution: claimed by it (``adopted`` False), or taken over from a
    node that stopped, after a restart or as stale (``adopted`` True)."""

    adopted: bool = False


@dataclass(frozen=True, slots=True)
class Recorded:
    """A change was recorded (any channel: an answer, a pushed report, a start, a stop)."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class Due:
    """A planned action's time came: the checks before its call."""

    action: Action


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A trigger was sent and no answer came: its outcome is unknown."""


@dataclass(frozen=True, slots=True)
class Read:
    """The row was read again (``fresh``; None: it is gone): whether the node still owns
    the execution, and, for a pushed call, whether it was silent too long."""

    fresh: Execution | None


@dataclass(frozen=True, slots=True)
class Broke:
    """Carrying out ``action`` failed unexpectedly."""

    action: Action


@dataclass(frozen=True, slots=True)
class Decided:
    """The one start path decided a run and wrote what it came to, which is not a start or a
    skip (those are ``Recorded``): it waits to start, decided again at ``until`` at the
    latest; or, under ``concurrency: replace``, it starts once the ``older`` runs are
    cancelled."""

    until: datetime | None = None
    older: tuple[Holder, ...] = ()


Occasion = Taken | Recorded | Due | Unanswered | Read | Broke | Decided


# -- what to do --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """Decide at ``at`` whether the claimed execution starts (the one start path)."""

    at: datetime


@dataclass(frozen=True, slots=True)
class WaitToStart:
    """A claimed run waits to start (``Execution.waiting_for`` says what for): decided again
    at ``until``, or as soon as a run of its task or pool ends on this node."""

    until: datetime


@dataclass(frozen=True, slots=True)
class Replace:
    """``concurrency: replace``: cancel the ``older`` runs through the protocol, then decide
    this one's start again."""

    older: tuple[Holder, ...]


@dataclass(frozen=True, slots=True)
class Leave:
    """The trigger of the call in flight (a step's) is due and not recorded as leaving yet:
    record that it leaves; it is sent once that is written."""


@dataclass(frozen=True, slots=True)
class Proceed:
    """The planned call whose time came passed its checks (the execution is held, not
    ended, not past its deadline, not being cancelled, and no ``Retry-After`` holds it
    back): make it now, as planned (the trigger, the poll, the listen)."""


#: The one ``Proceed``: asked for every due poll, so none is made per poll.
PROCEED = Proceed()


@dataclass(frozen=True, slots=True)
class Trigger:
    """Send the trigger of the call in flight at ``at`` (first recording that it leaves,
    when that is not recorded yet); ``probe_first``: one may have left already (taken over),
    so the id is polled first (PROTOCOL.md, "Unknown outcomes")."""

    at: datetime
    probe_first: bool = False


@dataclass(frozen=True, slots=True)
class Poll:
    """Poll the call in flight at ``at``; ``after_takeover``: the first poll of a node that
    took it over (the service no longer knowing it then means ``interrupted``)."""

    at: datetime
    after_takeover: bool = False


@dataclass(frozen=True, slots=True)
class Listen:
    """A pushed call (never polled): at ``at``, read the row and end it FAILED
    ``unreachable`` if no report came within ``heartbeat_timeout``."""

    at: datetime


@dataclass(frozen=True, slots=True)
class Silent:
    """A pushed call had no report within ``heartbeat_timeout``: it failed (unreachable)."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """The deadline passed: send the cancel call (once), then TIMED_OUT. ``called``: False
    when the call's trigger was recorded as leaving only once its deadline had passed (the
    write took longer than the timeout): it is not sent, so nothing started and no cancel
    call is made."""

    at: datetime
    called: bool = True


@dataclass(frozen=True, slots=True)
class Close:
    """A cancel was recorded as sent but never finished (its node stopped): at ``at``, end
    the execution without a second cancel call."""

    at: datetime


@dataclass(frozen=True, slots=True)
class Finish:
    """The execution ended: its end line and what follows (retry, counts, chains)."""


@dataclass(frozen=True, slots=True)
class Drop:
    """Nothing more to do here (``why``); ``lost``: because another node's lease moved it
    on (this node lost it, and counts that)."""

    why: str
    lost: bool = False


Action = (
    Start
    | WaitToStart
    | Replace
    | Leave
    | Proceed
    | Trigger
    | Poll
    | Listen
    | Silent
    | Cancel
    | Close
    | Finish
    | Drop
)
#: Actions a worker carries out at their time (a call, or a read of the row).
Timed = Trigger | Poll | Listen | Cancel | Close


def next_action(
    execution: Execution | None,
    now: datetime,
    cadence: Cadence,
    occasion: Occasion,
    held_back_until: datetime | None = None,
) -> Action:
    """What the node holding ``execution`` does next (see the module docstring).

    ``execution`` is the newest state the node has (None: it holds nothing any more, or the
    write of a change lost its lease). The rules, in order: an ended execution is booked
    once (``Finish``), then dropped; a deadline found passed by a report cancels it; a row
    read again that another lease moved on, or that ended, is dropped (``ownership``); a
    start decided as a wait or a replacement is carried out as one; a claimed one starts at
    its due time; a recorded cancel is closed after ``cancel_grace``; a deadline passed
    cancels (with no cancel call when it passed while the trigger was being recorded: that
    trigger never leaves); a planned call whose time came is made (``PROCEED``), unless it is
    a trigger that a service's ``Retry-After`` holds back (it waits for ``held_back_until``:
    ``core.held_back``) or a step's trigger not recorded as leaving (``Leave``: recorded
    first); a call whose trigger has not left is triggered now, one whose trigger may have
    left (taken over) is probed first; then the call is followed: pushed calls are
    listened for until their heartbeat ends (then ``Silent``), others polled every
    ``poll_interval``, never past the deadline.
    """
    decided, execution = _by_occasion(execution, now, occasion)
    if decided is not None:
        return decided
    if execution is None:
        return Drop("not held here")
    if execution.is_final:
        return Drop(f"execution is {execution.status}")
    if execution.status is Status.SCHEDULED:
        return Start(now + START_RETRY if isinstance(occasion, Broke) else due_at(execution))
    # A stop that failed (its write, the database away) is tried again later, not at once:
    # at once it fails again, in the worker that is handling the failure.
    soonest = now + RETRY_AFTER_ERROR if isinstance(occasion, Broke) else now
    if execution.cancel_sent_at is not None:
        return Close(max(execution.cancel_sent_at + cadence.cancel_grace, soonest))
    if deadline_passed(execution, now):
        return Cancel(soonest, called=not _just_started(occasion))
    match occasion:
        case Due(Poll() | Listen()):
            return PROCEED  # its checks passed: the call is made now (every due poll)
        case Due(Trigger() as planned):
            return _trigger_due(execution, planned, now, held_back_until)
        case Due(action):
            return action  # a planned cancel or close whose time came, carried out so
        case Broke(Poll() as action):
            # a poll that could not be recorded (the database away, say) is asked again at
            # its own cadence when that is sooner: nothing is lost, only a poll repeated
            return _later(action, now + min(RETRY_AFTER_ERROR, cadence.poll_interval))
        case Broke(action):
            return _later(action, now + RETRY_AFTER_ERROR)
    return _follow(execution, now, cadence, occasion)


def _by_occasion(
    execution: Execution | None, now: datetime, occasion: Occasion
) -> tuple[Action | None, Execution | None]:
    """What the occasion alone decides (an end to book, a deadline a report found passed, a
    row read again that is no longer this node's), or the execution to decide on (the row
    read again, when it is still this node's)."""
    match occasion:
        case Due():
            return None, execution  # a due action's time alone decides nothing (every poll)
        case Recorded(_) if execution is None:
            # the write lost its lease: nothing to book or cancel here, the node that holds
            # the execution now does (a woken node's answer to a call it had in flight when
            # it was paused, say)
            return Drop("not held here"), None
        case Recorded(transition) if transition.cancel_due:
            return Cancel(now), execution
        case Recorded(transition) if transition.finished:
            return Finish(), execution
        case Taken() if execution is not None and execution.is_final:
            return Finish(), execution  # a claim recorded SKIPPED: booked like any end
        case Read(fresh) if execution is not None:
            owned = ownership(execution, fresh)
            if owned is Ownership.LOST:
                return Drop("the lease moved on", lost=True), execution
            if owned is Ownership.ENDED:
                return Drop("it ended"), execution
            return None, fresh
        case Decided(until) if until is not None and execution is not None:
            return WaitToStart(until), execution
        case Decided(_, older) if older and execution is not None:
            return Replace(older), execution
    return None, execution


def _trigger_due(
    execution: Execution, planned: Trigger, now: datetime, held_back_until: datetime | None
) -> Action:
    """The checks before a planned trigger whose time came (past those of every planned
    call: the execution is active, its deadline not passed, no cancel recorded): it waits
    while a service's ``Retry-After`` holds it back, and a step's that is not recorded as
    leaving is recorded first (``Leave``); else it is sent (``PROCEED``)."""
    if (until := held_back(held_back_until, now)) is not None:
        return Trigger(until, planned.probe_first)
    if not in_flight(execution).started:
        return Leave()
    return PROCEED


def _follow(execution: Execution, now: datetime, cadence: Cadence, occasion: Occasion) -> Action:
    """The next call of an active execution (see ``next_action``)."""
    call = in_flight(execution)
    adopted = isinstance(occasion, Taken) and occasion.adopted
    if call.status is Status.PENDING and not call.started:
        return Trigger(now)  # a step's: recording that it leaves comes first
    if call.status is Status.PENDING and execution.waiting_for is WaitingFor.RETRY_AFTER:
        # the service held its trigger back: sent again at the moment it asked for, unless
        # the deadline comes first (then it times out there, with no cancel: nothing started)
        at = _capped(max(execution.not_before or now, now), execution)
        return Trigger(at, probe_first=adopted)
    if call.status is Status.PENDING and (adopted or _just_started(occasion)):
        return Trigger(now, probe_first=adopted)
    if cadence.pushed:
        heard = execution.last_report_at or execution.triggered_at or now
        silence_ends = heard + cadence.heartbeat_timeout
        if isinstance(occasion, Read) and silence_ends <= now:
            return Silent()
        return Listen(_capped(silence_ends, execution))
    if adopted:
        return Poll(now, after_takeover=True)  # the residue check
    return Poll(_capped(now + cadence.poll_interval, execution))


def _just_started(occasion: Occasion) -> bool:
    """True when the change recorded was the call's trigger leaving: it is sent now."""
    if not isinstance(occasion, Recorded):
        return False
    before = in_flight(occasion.transition.before)
    after = in_flight(occasion.transition.after)
    return after.started and (not before.started or before.number != after.number)


def _capped(at: datetime, execution: Execution) -> datetime:
    """``at``, or the deadline when that comes first (it is then cancelled)."""
    deadline = execution.deadline
    return at if deadline is None or at < deadline else deadline


def _later(action: Action, at: datetime) -> Action:
    """``action`` again at ``at``, after an unexpected failure (a trigger probes first: it
    may have left)."""
    match action:
        case Trigger():
            return Trigger(at, probe_first=True)
        case Poll(_, after_takeover):
            return Poll(at, after_takeover)
        case Listen() | Silent():
            return Listen(at)
        case Cancel():
            return Cancel(at)
        case Close():
            return Close(at)
    return action

"""``core.next_action``: what the node holding an execution does next, read from a table like
``apply``'s (STYLE.md rule 14). Each row is an execution as held, why the question is asked,
and the one action the rules give; every action the engine can be told to carry out has a
row, and so has every rule that chooses between them. At the end, ``planning.decide_start``,
the one start decision of every kind of run, from a table too. Pure: the moment and the
cadence are arguments, nothing is waited for."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import pytest

from ecron.capacity import WAIT_RECHECK, Wait
from ecron.core import (
    Channel,
    Execution,
    Gate,
    Holder,
    Reason,
    RemoteStatus,
    Report,
    Reported,
    Skipped,
    Status,
    Step,
    Transition,
    TriggerKind,
    TriggerSent,
    Waiting,
    WaitingFor,
    apply,
)
from ecron.core.next import (
    PROCEED,
    RETRY_AFTER_ERROR,
    START_RETRY,
    Action,
    Broke,
    Cadence,
    Cancel,
    Close,
    Decided,
    Drop,
    Due,
    Finish,
    Leave,
    Listen,
    Occasion,
    Poll,
    Proceed,
    Read,
    Recorded,
    Replace,
    Silent,
    Start,
    Taken,
    Trigger,
    Unanswered,
    WaitToStart,
    next_action,
)
from ecron.planning import Begin, Decline, Defer, Refuse, Skip, decide_start
from tests.support.daemon import task as task_spec

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=10)
SECOND = timedelta(seconds=1)
POLLED = Cadence(
    poll_interval=5 * SECOND,
    pushed=False,
    heartbeat_timeout=timedelta(minutes=5),
    cancel_grace=30 * SECOND,
)
PUSHED = Cadence(
    poll_interval=5 * SECOND,
    pushed=True,
    heartbeat_timeout=timedelta(minutes=1),
    cancel_grace=30 * SECOND,
)


def execution(**changes: object) -> Execution:
    """An execution RUNNING since T0 with an hour's deadline, changed by ``changes``."""
    return Execution(
        eid="e1",
        task="t",
        scheduled_at=T0,
        created_at=T0,
        status=Status.RUNNING,
        triggered_at=T0,
        last_report_at=T0 + timedelta(minutes=9),
        deadline=T0 + timedelta(hours=1),
        owner="n1",
        fence=3,
        version=7,
    ).evolve(**changes)


RUNNING = execution()
#: An older run of the task, as a start decision sees it.
OLDER = Holder("e0", Status.RUNNING, T0 - timedelta(hours=1), TriggerKind.SCHEDULE)
SCHEDULED = execution(
    status=Status.SCHEDULED, triggered_at=None, last_report_at=None, deadline=None
)
#: Just started by the start path: PENDING, its trigger recorded as leaving.
STARTED = execution(status=Status.PENDING, triggered_at=NOW, last_report_at=None)
#: Its trigger refused with Retry-After: 7 (nothing started there): sent again at not_before.
HELD_BACK = STARTED.evolve(waiting_for=WaitingFor.RETRY_AFTER, not_before=NOW + 7 * SECOND)
PAST_DEADLINE = execution(deadline=NOW - SECOND)
CANCEL_SENT = execution(cancel_sent_at=NOW - 10 * SECOND)
TWO_STEPS = (
    Step(1, "fetch", "e1.1", Status.SUCCESS, progress=100.0, started_at=T0, finished_at=NOW),
    Step(2, "load", "e1.2"),
)
#: Its first step just succeeded; the second has not started (and then has).
NEXT_STEP = execution(steps=TWO_STEPS)
NEXT_STEP_LEFT = execution(steps=(TWO_STEPS[0], replace(TWO_STEPS[1], started_at=NOW)))


def recorded(before: Execution, after: Execution, **flags: object) -> Recorded:
    return Recorded(Transition(before, after, **flags))  # type: ignore[arg-type]


def ended(before: Execution) -> Recorded:
    report = Report(RemoteStatus.SUCCESS)
    return Recorded(apply(before, Reported(report, Channel.POLL), NOW))


class Row(NamedTuple):
    why: str
    execution: Execution | None
    occasion: Occasion
    cadence: Cadence
    expected: Action
    #: Until when a service's ``Retry-After`` holds the trigger back, as the node heard.
    held_back_until: datetime | None = None


TABLE = [
    # -- starts
    Row("a claim starts at its fire time", SCHEDULED, Taken(), POLLED, Start(T0)),
    Row(
        "a claim with jitter or a backoff starts at not_before",
        SCHEDULED.evolve(not_before=T0 + 7 * SECOND),
        Taken(),
        POLLED,
        Start(T0 + 7 * SECOND),
    ),
    Row(
        "a start that could not be decided is tried again a little later",
        SCHEDULED,
        Broke(Start(T0)),
        POLLED,
        Start(NOW + START_RETRY),
    ),
    Row(
        "a run the start path made wait is decided again when its wait ends",
        SCHEDULED.evolve(waiting_for=WaitingFor.POOL),
        Decided(until=NOW + SECOND),
        POLLED,
        WaitToStart(NOW + SECOND),
    ),
    Row(
        "a run that replaces older ones (concurrency: replace) cancels them first",
        SCHEDULED,
        Decided(older=(OLDER,)),
        POLLED,
        Replace((OLDER,)),
    ),
    # -- triggers
    Row(
        "a run just started by the start path sends its trigger now",
        STARTED,
        recorded(SCHEDULED, STARTED),
        POLLED,
        Trigger(NOW),
    ),
    Row(
        "a step whose trigger was just recorded sends it now",
        NEXT_STEP_LEFT,
        recorded(NEXT_STEP, NEXT_STEP_LEFT),
        POLLED,
        Trigger(NOW),
    ),
    Row(
        "the next step, not started, is triggered now (recording that it leaves first)",
        NEXT_STEP,
        recorded(RUNNING.evolve(steps=TWO_STEPS), NEXT_STEP),
        POLLED,
        Trigger(NOW),
    ),
    Row(
        "a run taken over while its trigger may have left is probed first",
        STARTED,
        Taken(adopted=True),
        POLLED,
        Trigger(NOW, probe_first=True),
    ),
    Row(
        "a trigger the service held back (Retry-After) leaves again at that moment",
        HELD_BACK,
        recorded(STARTED, HELD_BACK),
        POLLED,
        Trigger(NOW + 7 * SECOND),
    ),
    Row(
        "a held-back trigger whose moment comes after the deadline waits for the deadline",
        HELD_BACK.evolve(deadline=NOW + 3 * SECOND),
        recorded(STARTED, HELD_BACK),
        POLLED,
        Trigger(NOW + 3 * SECOND),
    ),
    Row(
        "a planned trigger whose time came, its checks passed, is sent",
        STARTED,
        Due(Trigger(NOW, probe_first=True)),
        POLLED,
        PROCEED,
    ),
    Row(
        "a planned trigger that a service's Retry-After holds back waits until then",
        STARTED,
        Due(Trigger(NOW, probe_first=True)),
        POLLED,
        Trigger(NOW + 7 * SECOND, probe_first=True),
        NOW + 7 * SECOND,
    ),
    Row(
        "... and is sent once that moment has passed",
        STARTED,
        Due(Trigger(NOW)),
        POLLED,
        PROCEED,
        NOW,
    ),
    Row(
        "a step's planned trigger not recorded as leaving is recorded first",
        NEXT_STEP,
        Due(Trigger(NOW)),
        POLLED,
        Leave(),
    ),
    Row(
        "a trigger that failed unexpectedly is tried again later, probing first",
        STARTED,
        Broke(Trigger(NOW)),
        POLLED,
        Trigger(NOW + RETRY_AFTER_ERROR, probe_first=True),
    ),
    # -- polls
    Row(
        "a running execution is polled one interval after its answer",
        RUNNING,
        recorded(RUNNING, RUNNING, ignored="nothing new"),
        POLLED,
        Poll(NOW + 5 * SECOND),
    ),
    Row(
        "the next poll never comes after the deadline",
        execution(deadline=NOW + 2 * SECOND),
        recorded(RUNNING, RUNNING),
        POLLED,
        Poll(NOW + 2 * SECOND),
    ),
    Row(
        "a trigger with no answer is followed by a poll, one interval later",
        STARTED,
        Unanswered(),
        POLLED,
        Poll(NOW + 5 * SECOND),
    ),
    Row(
        "a running execution taken over is polled at once, as the residue check",
        RUNNING,
        Taken(adopted=True),
        POLLED,
        Poll(NOW, after_takeover=True),
    ),
    Row(
        "a planned poll whose time came, its checks passed, is made",
        RUNNING,
        Due(Poll(NOW, after_takeover=True)),
        POLLED,
        PROCEED,
    ),
    Row(
        "a poll is never held back: Retry-After answers triggers",
        RUNNING,
        Due(Poll(NOW)),
        POLLED,
        PROCEED,
        NOW + 7 * SECOND,
    ),
    Row(
        "a poll that failed unexpectedly is made again later",
        RUNNING,
        Broke(Poll(NOW)),
        Cadence(timedelta(minutes=1), False, timedelta(minutes=5), 30 * SECOND),
        Poll(NOW + RETRY_AFTER_ERROR),
    ),
    Row(
        "... or at its own cadence when that is sooner (its answer could not be recorded)",
        RUNNING,
        Broke(Poll(NOW, after_takeover=True)),
        Cadence(SECOND, False, timedelta(minutes=5), 30 * SECOND),
        Poll(NOW + SECOND, after_takeover=True),
    ),
    # -- pushed calls
    Row(
        "a pushed call is listened for until its heartbeat ends",
        RUNNING,
        recorded(RUNNING, RUNNING),
        PUSHED,
        Listen(T0 + timedelta(minutes=10)),
    ),
    Row(
        "a pushed call's planned read whose time came is made",
        RUNNING,
        Due(Listen(NOW)),
        PUSHED,
        PROCEED,
    ),
    Row(
        "a pushed call's row read again, silent past the heartbeat, has failed",
        execution(last_report_at=NOW - 2 * timedelta(minutes=1)),
        Read(execution(last_report_at=NOW - 2 * timedelta(minutes=1))),
        PUSHED,
        Silent(),
    ),
    Row(
        "a pushed call's row read again, with a report meanwhile, is listened for again",
        RUNNING,
        Read(execution(last_report_at=NOW, version=9)),
        PUSHED,
        Listen(NOW + timedelta(minutes=1)),
    ),
    # -- stops
    Row(
        "a report past the deadline asks for the cancel, now",
        RUNNING,
        recorded(RUNNING, RUNNING, cancel_due=True),
        POLLED,
        Cancel(NOW),
    ),
    Row(
        "a trigger recorded as leaving only once its deadline passed (a slow write) is not "
        "sent: the run times out with no cancel call",
        STARTED.evolve(deadline=NOW - SECOND),
        recorded(SCHEDULED, STARTED.evolve(deadline=NOW - SECOND)),
        POLLED,
        Cancel(NOW, called=False),
    ),
    Row(
        "so is a step's",
        NEXT_STEP_LEFT.evolve(deadline=NOW - SECOND),
        recorded(NEXT_STEP, NEXT_STEP_LEFT.evolve(deadline=NOW - SECOND)),
        POLLED,
        Cancel(NOW, called=False),
    ),
    Row(
        "a deadline found passed cancels, whatever was planned",
        PAST_DEADLINE,
        Due(Poll(NOW)),
        POLLED,
        Cancel(NOW),
    ),
    Row(
        "a deadline stop that failed (its write, the database away) is tried again later, "
        "not at once in the worker handling the failure",
        PAST_DEADLINE,
        Broke(Cancel(NOW)),
        POLLED,
        Cancel(NOW + RETRY_AFTER_ERROR),
    ),
    Row(
        "so is a close that failed",
        execution(cancel_sent_at=NOW - timedelta(minutes=1), deadline=NOW - SECOND),
        Broke(Close(NOW)),
        POLLED,
        Close(NOW + RETRY_AFTER_ERROR),
    ),
    Row(
        "a cancel recorded but never finished is closed after the grace, without a second one",
        CANCEL_SENT,
        Taken(adopted=True),
        POLLED,
        Close(NOW + 20 * SECOND),
    ),
    Row(
        "a closed cancel is checked before the deadline (no second cancel call)",
        CANCEL_SENT.evolve(deadline=NOW - SECOND),
        Due(Close(NOW + 20 * SECOND)),
        POLLED,
        Close(NOW + 20 * SECOND),
    ),
    # -- ends
    Row(
        "an end just recorded is booked",
        ended(RUNNING).transition.after,
        ended(RUNNING),
        POLLED,
        Finish(),
    ),
    Row(
        "a claim recorded SKIPPED is booked like any end",
        SCHEDULED.evolve(status=Status.SKIPPED, finished_at=NOW),
        Taken(),
        POLLED,
        Finish(),
    ),
    # -- letting go
    Row("nothing held: nothing to do", None, Due(Poll(NOW)), POLLED, Drop("not held here")),
    Row(
        "an end whose write lost its lease (another node holds it) is not booked here",
        None,
        ended(RUNNING),
        POLLED,
        Drop("not held here"),
    ),
    Row(
        "a deadline found passed by a write that lost its lease is not cancelled from here",
        None,
        recorded(RUNNING, RUNNING, cancel_due=True),
        POLLED,
        Drop("not held here"),
    ),
    Row(
        "a write that lost its lease leaves nothing to do here",
        None,
        recorded(RUNNING, RUNNING.evolve(progress=5.0)),
        POLLED,
        Drop("not held here"),
    ),
    Row(
        "an end whose write lost its lease is not booked here (the holder books its own)",
        None,
        ended(RUNNING),
        POLLED,
        Drop("not held here"),
    ),
    Row(
        "a deadline found passed by a write that lost its lease cancels nothing here",
        None,
        recorded(PAST_DEADLINE, PAST_DEADLINE, cancel_due=True),
        POLLED,
        Drop("not held here"),
    ),
    Row(
        "an execution that ended elsewhere is dropped",
        execution(status=Status.SUCCESS, finished_at=NOW),
        Due(Poll(NOW)),
        POLLED,
        Drop("execution is SUCCESS"),
    ),
    Row(
        "a row read again under another node's lease is let go (counted as lost)",
        RUNNING,
        Read(execution(fence=4)),
        PUSHED,
        Drop("the lease moved on", lost=True),
    ),
    Row(
        "a row read again that is gone is let go",
        RUNNING,
        Read(None),
        PUSHED,
        Drop("the lease moved on", lost=True),
    ),
    Row(
        "a row read again that ended is dropped",
        RUNNING,
        Read(execution(status=Status.FAILED, finished_at=NOW)),
        PUSHED,
        Drop("it ended"),
    ),
]


@pytest.mark.parametrize("row", TABLE, ids=[row.why for row in TABLE])
def test_next_action_follows_the_table(row: Row) -> None:
    """Each row: the execution as held, the occasion, the cadence, the action."""
    action = next_action(row.execution, NOW, row.cadence, row.occasion, row.held_back_until)
    assert action == row.expected


def test_a_due_call_whose_checks_pass_is_answered_with_the_one_proceed() -> None:
    """A due trigger, poll or listen whose checks pass is answered ``PROCEED``, one instance
    for all (nothing is made per poll), never the planned action handed back: the engine
    tells "made now" from "planned again" by what the answer is, not by which object."""
    for held, planned in ((STARTED, Trigger(NOW)), (RUNNING, Poll(NOW)), (RUNNING, Listen(NOW))):
        assert next_action(held, NOW, POLLED, Due(planned)) is PROCEED
    held_back = next_action(STARTED, NOW, POLLED, Due(Trigger(NOW)), NOW + SECOND)
    assert held_back == Trigger(NOW + SECOND)


def test_the_table_covers_every_action() -> None:
    """Every kind of action the engine carries out is the answer of at least one row."""
    kinds = {type(row.expected) for row in TABLE}
    assert kinds == {
        Start,
        WaitToStart,
        Replace,
        Leave,
        Proceed,
        Trigger,
        Poll,
        Listen,
        Silent,
        Cancel,
        Close,
        Finish,
        Drop,
    }


# --- the one start decision (planning.decide_start), from a table too ----------------------


OTHER = Holder("e0", Status.RUNNING, T0 - timedelta(hours=1), TriggerKind.SCHEDULE)
OPEN = Gate(paused=False, paused_reason=None, retired=False)
PAUSED = Gate(paused=True, paused_reason="release", retired=False)
BUSY = Gate(paused=False, paused_reason=None, retired=False, active=(OTHER,))
LATER = Gate(paused=False, paused_reason=None, retired=False, later=(T0 + timedelta(hours=1),))
#: A retry of an older fire time planned for later (waiting out its backoff).
PLANNED = Holder("e0", Status.SCHEDULED, T0 - timedelta(hours=1), TriggerKind.RETRY, planned=True)
RETRYING = Gate(paused=False, paused_reason=None, retired=False, active=(PLANNED,))


def claim(kind: TriggerKind, scheduled_at: datetime = NOW) -> Execution:
    return SCHEDULED.evolve(trigger_kind=kind, scheduled_at=scheduled_at)


def spec(**keys: object) -> object:
    return task_spec("t", "http://127.0.0.1:1/jobs", task_timeout="2h", **keys)


STARTS = [
    ("a fire time on an open gate starts", claim(TriggerKind.SCHEDULE), spec(), OPEN, "begin"),
    ("a paused task skips its fire time", claim(TriggerKind.SCHEDULE), spec(), PAUSED, "paused"),
    (
        "a paused task still runs what people ask for",
        claim(TriggerKind.MANUAL),
        spec(),
        PAUSED,
        "begin",
    ),
    ("a paused task still runs a resume", claim(TriggerKind.RESUME), spec(), PAUSED, "begin"),
    ("a retry of a paused task is skipped", claim(TriggerKind.RETRY), spec(), PAUSED, "paused"),
    (
        "a chained run of a paused task is skipped",
        claim(TriggerKind.CHAIN),
        spec(),
        PAUSED,
        "paused",
    ),
    (
        "a task gone from the config skips its claim",
        claim(TriggerKind.SCHEDULE),
        None,
        OPEN,
        "retired",
    ),
    (
        "a task gone from the config refuses a manual run",
        claim(TriggerKind.MANUAL),
        None,
        OPEN,
        "refuse",
    ),
    (
        "forbid: a fire time with one active is skipped (overlap)",
        claim(TriggerKind.SCHEDULE),
        spec(),
        BUSY,
        "overlap",
    ),
    (
        "forbid: a retry with one active is skipped (overlap)",
        claim(TriggerKind.RETRY),
        spec(),
        BUSY,
        "overlap",
    ),
    (
        "forbid: a manual run with one active is answered by it",
        claim(TriggerKind.MANUAL),
        spec(),
        BUSY,
        "decline",
    ),
    (
        "replace: the older ones are cancelled first",
        claim(TriggerKind.MANUAL),
        spec(concurrency="replace"),
        BUSY,
        "defer",
    ),
    (
        "allow: it starts beside the active one",
        claim(TriggerKind.SCHEDULE),
        spec(concurrency="allow"),
        BUSY,
        "begin",
    ),
    (
        "forbid: a backfilled run waits for an older fire time's retry planned for later",
        claim(TriggerKind.BACKFILL),
        spec(),
        RETRYING,
        "wait",
    ),
    (
        "forbid: a fire time does not wait for a retry planned for later (nor is skipped)",
        claim(TriggerKind.SCHEDULE),
        spec(),
        RETRYING,
        "begin",
    ),
    (
        "replace: a backfilled run cancels no retry planned for later",
        claim(TriggerKind.BACKFILL),
        spec(concurrency="replace"),
        RETRYING,
        "begin",
    ),
    (
        "run_once: a late fire time with a later one claimed is skipped (misfire)",
        claim(TriggerKind.SCHEDULE, NOW - timedelta(hours=1)),
        spec(misfire={"policy": "run_once", "grace": "5m"}),
        LATER,
        "misfire",
    ),
    (
        "a late manual run is never a misfire",
        claim(TriggerKind.MANUAL, NOW - timedelta(hours=1)),
        spec(misfire={"policy": "skip", "grace": "5m"}),
        OPEN,
        "begin",
    ),
]


def _kind(decision: object) -> str:
    match decision:
        case Begin(TriggerSent()):
            return "begin"
        case Skip(Skipped(reason)):
            return {Reason.PAUSED: "paused", Reason.RETIRED: "retired"}.get(reason, str(reason))
        case Decline(active):
            assert active == OTHER
            return "decline"
        case Refuse():
            return "refuse"
        case Defer(older):
            assert older == (OTHER,)
            return "defer"
        case Wait(Waiting(what), until):
            assert what == WaitingFor.CONCURRENCY and until == NOW + WAIT_RECHECK, decision
            return "wait"
    raise AssertionError(decision)


@pytest.mark.parametrize(
    ("why", "execution", "task", "gate", "expected"), STARTS, ids=[r[0] for r in STARTS]
)
def test_decide_start_follows_the_table(
    why: str, execution: Execution, task: object, gate: Gate, expected: str
) -> None:
    """Every kind of run, decided in one place: pause, retirement, misfire, concurrency."""
    assert _kind(decide_start(execution, task, gate, NOW)) == expected  # type: ignore[arg-type]

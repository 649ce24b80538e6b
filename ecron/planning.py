"""The scheduling rules as pure functions: misfire, overlap, retries, pause, and whether a
claimed fire time starts (DESIGN.md, "Scheduling rules"). Time is always an argument;
nothing here does I/O. Every status an execution gets here comes from ``core.apply``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ecron.backoff import delay_after, exponential
from ecron.capacity import Wait, room_in_pool, wait_in_turn, waits_in_turn
from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.core import (
    INTERRUPTED_REASONS,
    Execution,
    FirePlan,
    Gate,
    Holder,
    Reason,
    Skipped,
    Status,
    Step,
    TriggerKind,
    TriggerSent,
    Waiting,
    WaitingFor,
    apply,
    held_back,
    in_flight,
)
from ecron.ids import new_eid, remote_id
from ecron.schedules import Schedule, ScheduleKind, jitter_offset

#: At most this many fire times of one task are run in one claim (``run_all`` catches up in
#: steps of this size).
MAX_FIRES_PER_CLAIM = 100
#: At most this many missed fire times of one claim get a SKIPPED ``misfire`` record each;
#: earlier ones are skipped without a row, so a long outage cannot flood the history.
MISFIRE_RECORDS = 20
_MILLISECOND = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Claim:
    """Who claims, when, and for how long: what a plan needs besides the task.

    Everything claimed is held under the node's lease (``node``, ``epoch``); a fire time
    claimed ahead only until its start plus ``grace`` as well.
    """

    node: str
    now: datetime
    horizon: datetime
    grace: timedelta = timedelta(seconds=1)
    #: Makes an eid that names the moment ``now`` (``ids.new_eid``).
    new_id: Callable[[datetime], str] = field(default=new_eid)
    #: The epoch of the node's lease the claim is held under (``core.Lease``).
    epoch: int = 0


class FirstFireTimes:
    """Each task's first fire time from ``now`` that its calendar and blackouts let run, for
    a sync of the task table; worked out once per schedule for tasks without either (tasks
    that write a schedule the same way share one ``Schedule``), and only for the tasks the
    sync asks about (new ones, and those whose spec changed). ``excluded``: per task, the
    fire times planned out before its first (asked again, a task's count is replaced, not
    added to: a retried sync counts once)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._found: dict[int, tuple[Schedule, datetime | None]] = {}
        self.excluded: dict[str, Counter[str]] = {}

    def of(self, spec: TaskSpec) -> datetime | None:
        fire_times = spec.fire_times
        if fire_times.exclusions is not None:
            counts = self.excluded[spec.name] = Counter()
            return fire_times.next(None, self.now, counts)
        schedule = spec.fire_schedule
        found = self._found.get(id(schedule))
        if found is None or found[0] is not schedule:
            found = self._found[id(schedule)] = (schedule, fire_times.next(None, self.now))
        return found[1]


def upcoming_fire_times(
    spec: TaskSpec,
    next_fire_at: datetime | None,
    paused: bool,
    claimed: datetime | None,
    now: datetime,
    count: int,
) -> list[datetime]:
    """The next ``count`` fire times of task ``spec`` that will run, its calendar and
    blackouts applied: from the earliest one claimed ahead or its stored ``next_fire_at``;
    for a ``paused`` task, those it would have if unpaused at ``now``. None for a disabled
    task, a manual or chained one; one for an ``after`` schedule (the next depend on ends)."""
    if not spec.enabled:
        return []
    fire_times = spec.fire_times
    if paused:
        first = fire_times.next(None, now)
    else:
        stored = [when for when in (claimed, next_fire_at) if when is not None]
        first = min(stored) if stored else None
    return fire_times.upcoming(first, count)


def plan_fires(name: str, spec: TaskSpec, next_fire_at: datetime, claim: Claim) -> FirePlan:
    """Decide which of a task's due fire times run, which are SKIPPED, and the next one.

    A fire time found more than ``misfire.grace`` late follows ``misfire.policy``:
    ``skip`` records the late ones SKIPPED ``misfire`` (the latest ``MISFIRE_RECORDS``
    of them); ``run_once`` runs the latest late one and skips the rest; ``run_all``
    runs them all (``MAX_FIRES_PER_CLAIM`` per claim). Fire times on time always run.
    The ones that run are claimed (SCHEDULED) until they start. Fire times that the task's
    calendar or blackouts exclude are planned out: no row, counted in the plan's
    ``excluded`` (a stored ``next_fire_at`` that became excluded, by a reload, is too).
    """
    fire_times = spec.fire_times
    kind = fire_times.schedule.kind
    excluded: Counter[str] = Counter()
    late_before = claim.now - spec.misfire.grace
    skip: list[datetime] = []
    first = fire_times.settle(next_fire_at, excluded)
    if first is None or first >= late_before or spec.misfire.policy == "run_all":
        run: list[datetime] = []
        following: datetime | None = None
        if first is not None:
            run, following = fire_times.due(first, claim.horizon, MAX_FIRES_PER_CLAIM, excluded)
    else:
        missed = fire_times.latest(first, late_before, MISFIRE_RECORDS + 1)
        if spec.misfire.policy == "run_once":
            run, skip = missed[-1:], missed[-MISFIRE_RECORDS - 1 : -1]
        else:
            run, skip = [], missed[-MISFIRE_RECORDS:]
        first_on_time = None
        if kind is not ScheduleKind.AFTER:
            first_on_time = fire_times.next(missed[-1], missed[-1], excluded)
        following = first_on_time
        if first_on_time is not None:
            on_time, following = fire_times.due(
                first_on_time, claim.horizon, MAX_FIRES_PER_CLAIM, excluded
            )
            run += on_time
    taken = None
    if kind is ScheduleKind.AFTER:
        # Fixed delay: the next fire time is set when the execution ends; if none runs, from
        # now. One whose key an older execution has (the clock stepped back) moves on by a ms.
        following = None if run else fire_times.next(claim.now, claim.now, excluded)
        taken = run[-1] + _MILLISECOND if run else None
    executions = [claimed(name, when, claim, spec=spec) for when in run]
    why = "the fire time was found too late (misfire policy)"
    executions += [skipped(name, when, claim, Reason.MISFIRE, why) for when in skip]
    return FirePlan(
        next_fire_at=following, executions=executions, excluded=dict(excluded), when_taken=taken
    )


def rewound_fire_time(spec: TaskSpec, stored: datetime | None, now: datetime) -> datetime | None:
    """Where a task's next fire time goes when the clock has stepped back to ``now``: the
    first fire time from ``now`` (for ``after``, ``now`` plus the delay), if that is earlier
    than the ``stored`` one; None when it stays. The fire times in between that ran before
    the step already have their executions, and the unique key refuses them a second one;
    the others run as the clock reaches them, instead of the schedule standing still until
    the clock is back where it was."""
    if stored is None or not spec.enabled:
        return None
    fire_times = spec.fire_times  # calendars and blackouts applied
    after_now = now if fire_times.schedule.kind is ScheduleKind.AFTER else None
    first = fire_times.next(after_now, now)
    return first if first is not None and first < stored else None


def claimed(
    task: str, when: datetime, claim: Claim, *, spec: TaskSpec, **values: object
) -> Execution:
    """A fire time ``when`` of ``task`` claimed by ``claim``'s node (SCHEDULED), with its
    steps when the task has them, held until its start plus the claim's grace. Its start
    (``core.due_at``) is the fire time, or later: its jitter, or ``not_before`` in
    ``values`` (a retry's backoff, a chained run's claim), whichever is latest."""
    eid = claim.new_id(claim.now)
    start = when + jitter_offset(task, when, spec.jitter)
    backoff_end = values.pop("not_before", None)
    if isinstance(backoff_end, datetime):
        start = max(start, backoff_end)
    if start > when:
        values["not_before"] = start
    return Execution(
        eid=eid,
        task=task,
        scheduled_at=when,
        created_at=claim.now,
        owner=claim.node,
        owner_epoch=claim.epoch,
        lease_until=start + claim.grace,
        fence=1,
        steps=new_steps(spec, eid),
        **values,  # type: ignore[arg-type]
    )


def new_steps(spec: TaskSpec, eid: str) -> tuple[Step, ...]:
    """The steps of a new execution ``eid``: all PENDING, remote ids ``<eid>.<n>``."""
    if not spec.step_names:
        return ()
    return tuple(
        Step(number=n, name=name, remote_id=remote_id(eid, n))
        for n, name in enumerate(spec.step_names, start=1)
    )


def skipped(task: str, when: datetime, claim: Claim, reason: Reason, message: str) -> Execution:
    """A SKIPPED record for fire time ``when``: a claim that ``core.apply`` skips at once."""
    eid = claim.new_id(claim.now)
    execution = Execution(eid=eid, task=task, scheduled_at=when, created_at=claim.now)
    return apply(execution, Skipped(reason, message), claim.now).after


@dataclass(frozen=True, slots=True)
class Begin:
    """It starts now: its trigger leaves (``event``)."""

    event: TriggerSent


@dataclass(frozen=True, slots=True)
class Skip:
    """A claimed run is not run after all: recorded SKIPPED (``event``)."""

    event: Skipped


@dataclass(frozen=True, slots=True)
class Decline:
    """A run people asked for finds the task running under ``concurrency: forbid``: nothing
    is recorded, and ``active`` (the oldest active execution) is the answer."""

    active: Holder


@dataclass(frozen=True, slots=True)
class Refuse:
    """A run people asked for cannot start at all (``why``: the task left the config)."""

    why: str


@dataclass(frozen=True, slots=True)
class Defer:
    """``concurrency: replace``: ``older`` are cancelled first, then it is decided again."""

    older: tuple[Holder, ...]


StartDecision = Begin | Skip | Decline | Refuse | Defer | Wait  # Wait: see ecron.capacity


def asked_for(execution: Execution) -> bool:
    """True for a run people asked for (a manual run, a resume): a paused task still runs
    it, and under ``forbid`` an active execution answers it instead of a SKIPPED record."""
    return execution.trigger_kind in (TriggerKind.MANUAL, TriggerKind.RESUME)


def decide_start(
    execution: Execution, spec: TaskSpec | None, gate: Gate, now: datetime
) -> StartDecision:
    """Whether ``execution`` (SCHEDULED: claimed, or a new run people asked for) starts at
    ``now``, decided on ``gate`` (read in the start's transaction): the one place where
    every kind of run meets the task's rules.

    The task no longer in the config: SKIPPED ``retired`` (a run people asked for is
    refused). Paused: SKIPPED ``paused``, except for runs people asked for. Started more
    than ``misfire.grace`` late (handed back by a node that stopped, adopted after a crash),
    a fire time of the schedule follows ``misfire.policy``: ``skip`` skips it; ``run_once``
    runs it only if no later fire time is claimed. An older execution still active: under
    ``forbid`` SKIPPED ``overlap`` (a run people asked for is answered by the active one);
    under ``replace`` the older ones are cancelled first (``Defer``); a backfilled run waits
    for them under ``forbid`` (``Wait``: none is SKIPPED), and for the retries and resumes of
    older fire times planned for later (each fire time's retry runs before the next). Then
    the service's ``Retry-After`` and the pool (``room_in_pool``): a run that finds either
    closed waits, SCHEDULED.
    """
    asked = asked_for(execution)
    if spec is None or gate.retired:
        why = f"task {execution.task!r} is no longer in the config"
        return Refuse(why) if asked else Skip(Skipped(Reason.RETIRED, why))
    if gate.paused and not asked:
        return Skip(Skipped(Reason.PAUSED, gate.paused_reason or "the task is paused"))
    if misfired(execution, spec, gate, now):
        return Skip(Skipped(Reason.MISFIRE, "started too late (misfire policy)"))
    older = _older(execution, gate.active, planned=waits_in_turn(execution, spec))
    if older and spec.concurrency == "forbid":
        if execution.trigger_kind is TriggerKind.BACKFILL:
            return wait_in_turn(older, now)
        if asked:
            return Decline(older[0])
        why = f"execution {older[0].eid} was still {older[0].status}"
        return Skip(Skipped(Reason.OVERLAP, why))
    if older and spec.concurrency == "replace":
        return Defer(older)
    if (until := held_back(gate.held_back_until, now)) is not None:
        why = f"the service asked for no trigger before {iso(until)} (Retry-After)"
        return Wait(Waiting(WaitingFor.RETRY_AFTER, why), until)
    if gate.pool is not None and (wait := room_in_pool(execution, gate.pool, now)) is not None:
        return wait
    return Begin(trigger_sent(execution, spec))


def _older(
    execution: Execution, active: tuple[Holder, ...], *, planned: bool = False
) -> tuple[Holder, ...]:
    """The task's runs ``execution`` comes after: the active ones, and those that wait to
    start with an older fire time (a waiting run never waits for a younger one); with
    ``planned``, the retries and resumes planned for later with an older fire time too."""
    key = (execution.scheduled_at, execution.eid)
    return tuple(
        other
        for other in active
        if other.eid != execution.eid
        and (planned or not other.planned)
        and (other.status is not Status.SCHEDULED or (other.scheduled_at, other.eid) < key)
    )


def trigger_sent(execution: Execution, spec: TaskSpec) -> TriggerSent:
    """The start of the call in flight of ``execution``: its trigger leaves, under the
    task's ``task_timeout`` and, for a step, also the step's own (the earlier deadline
    holds)."""
    number = in_flight(execution).number
    if number is None:
        return TriggerSent(spec.task_timeout)
    return TriggerSent(spec.task_timeout, spec.call(number).task_timeout)


def misfired(execution: Execution, spec: TaskSpec, gate: Gate, now: datetime) -> bool:
    """True when a fire time of the schedule starts more than ``misfire.grace`` late and the
    policy says not to run it (see ``decide_start``)."""
    if execution.trigger_kind is not TriggerKind.SCHEDULE or spec.misfire.policy == "run_all":
        return False
    if execution.waiting_for is not None:
        return False  # it was on time, and waited: waiting is not a misfire
    if now - execution.scheduled_at <= spec.misfire.grace:
        return False
    if spec.misfire.policy == "skip":
        return True
    waiting = [*gate.later, *(h.scheduled_at for h in gate.active if not h.planned)]
    return any(when > execution.scheduled_at for when in waiting)


def is_late(execution: Execution, spec: TaskSpec | None, now: datetime) -> bool:
    """True when a start at ``now`` is past the misfire grace (its gate must then know the
    fire times claimed for later)."""
    return spec is not None and now - execution.scheduled_at > spec.misfire.grace


def retry_delay(spec: TaskSpec, attempt: int) -> timedelta:
    """How long after a FAILED attempt ``attempt`` the next one starts: ``retry.backoff``
    doubled per attempt, at most ``retry.max_backoff`` (no jitter: the time is planned)."""
    wait = exponential(spec.retry.backoff, spec.retry.max_backoff, jitter=False)
    return delay_after(wait, attempt)


def resumable(execution: Execution) -> str | None:
    """Why ``execution`` cannot be resumed, or None when it can: only a final execution
    that did not succeed (FAILED, TIMED_OUT, CANCELLED) can be."""
    if not execution.is_final:
        return f"execution {execution.eid} is still {execution.status}"
    if execution.status in (Status.SUCCESS, Status.SKIPPED):
        return f"execution {execution.eid} is {execution.status}: there is nothing to resume"
    return None


def plan_resume(old: Execution, spec: TaskSpec, claim: Claim) -> Execution:
    """The resume of ``old`` (to be started at once, through ``decide_start``): a new execution of
    the same fire time and attempt, one ``resume_attempt`` further. The steps that were
    SUCCESS before the first one that was not stay SUCCESS (with their old remote ids); from
    that one on, the steps start afresh under the new id (so does any step whose name
    changed in the config meanwhile)."""
    eid = claim.new_id(claim.now)
    fresh = new_steps(spec, eid)
    kept: list[Step] = []
    for step, before in zip(fresh, old.steps, strict=False):
        if before.status is not Status.SUCCESS or before.name != step.name:
            break
        kept.append(before)  # unchanged and done before the first unfinished step
    steps = (*kept, *fresh[len(kept) :])
    resume = Execution(
        eid=eid,
        task=old.task,
        scheduled_at=old.scheduled_at,
        created_at=claim.now,
        trigger_kind=TriggerKind.RESUME,
        attempt=old.attempt,
        resume_of=old.eid,
        upstream=old.upstream,
        resume_attempt=old.resume_attempt + 1,
        progress=sum(s.progress for s in steps) / len(steps) if steps else 0.0,
        owner=claim.node,
        owner_epoch=claim.epoch,
        fence=1,
        steps=steps,
    )
    return resume


def resumes_automatically(execution: Execution, spec: TaskSpec) -> bool:
    """True when ``execution`` will be resumed without a person: it was interrupted, the
    task is idempotent with ``resume.auto``, and its chain has resumes left."""
    return (
        execution.status is Status.FAILED
        and execution.reason in INTERRUPTED_REASONS
        and spec.idempotent
        and spec.resume.auto
        and execution.resume_attempt < spec.resume.max_attempts
    )


def auto_resume_spent(execution: Execution, spec: TaskSpec) -> bool:
    """True when an interrupted execution of an auto-resumed task has no resumes left."""
    return (
        execution.status is Status.FAILED
        and execution.reason in INTERRUPTED_REASONS
        and spec.idempotent
        and spec.resume.auto
        and execution.resume_attempt >= spec.resume.max_attempts
    )


def plan_retry(
    execution: Execution, spec: TaskSpec, claim: Claim, next_fire_at: datetime | None
) -> Execution | None:
    """The retry of a FAILED ``execution``, or None.

    Only FAILED executions are retried (not TIMED_OUT, CANCELLED or SKIPPED, and neither
    resumes nor interrupted executions that will be resumed automatically: those continue
    through the resume rules; nor a multi-step execution of a task that is not idempotent
    once a step succeeded: a retry starts over at step 1), at most ``retry.max_attempts``
    times per fire time. A retry never runs into the task's next fire time: when it would
    start at or after ``next_fire_at``, that fire time supersedes it. So a service that
    stays down costs at most ``1 + retry.max_attempts`` rows per fire time.
    """
    if execution.status is not Status.FAILED or execution.trigger_kind is TriggerKind.RESUME:
        return None
    if resumes_automatically(execution, spec):
        return None  # it continues where it stopped instead of starting over
    if not spec.idempotent and any(step.status is Status.SUCCESS for step in execution.steps):
        return None  # steps that wrote would run again: a person resumes it instead
    if execution.attempt > spec.retry.max_attempts:
        return None
    start = claim.now + retry_delay(spec, execution.attempt)
    if next_fire_at is not None and start >= next_fire_at:
        return None
    return claimed(
        execution.task,
        execution.scheduled_at,
        claim,
        spec=spec,
        trigger_kind=TriggerKind.RETRY,
        attempt=execution.attempt + 1,
        not_before=start,
        upstream=execution.upstream,
    )


def outcome_of(execution: Execution, retried: bool, resumed: bool = False) -> bool | None:
    """For the count of final failures in a row: True (success, resets it), False (a final
    failure: FAILED with no retry or automatic resume to follow, or TIMED_OUT), None (does
    not count either way)."""
    if execution.status is Status.SUCCESS:
        return True
    if execution.status is Status.TIMED_OUT:
        return False
    if execution.status is Status.FAILED and not (retried or resumed):
        return False
    return None


def pauses(spec: TaskSpec, failures: int, paused: bool, succeeded: bool | None) -> bool:
    """Whether the end just recorded (the task now at ``failures`` in a row, ``paused`` or
    not) pauses the task: a final failure that makes ``pause_after_failures`` (> 0) in a
    row, on a task not paused already."""
    limit = spec.pause_after_failures
    return succeeded is False and limit > 0 and failures >= limit and not paused


def pause_reason(spec: TaskSpec, execution: Execution) -> str:
    """The reason shown on a task paused by ``pause_after_failures``."""
    why = (
        str(execution.status)
        if execution.reason is None
        else f"{execution.status} {execution.reason}"
    )
    return (
        f"paused after {spec.pause_after_failures} final failures in a row; "
        f"the last was {execution.eid} ({why})"
    )

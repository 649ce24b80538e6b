"""Chains: tasks that run after others (``schedule: {after_task: NAME | [NAMES], on: [...]}``;
DESIGN.md, "Chains").

When an execution of an upstream task ends for good (with no retry or automatic resume to
follow) with a status in a downstream's ``on``, the downstream gets one execution of the
same ``scheduled_at``, ``trigger_kind`` ``chain`` and ``upstream`` = the eid that ended,
claimed by this node and due at once; the engine starts it through the one start path (so
its own pause, concurrency, retries apply; a fire time its own calendar or blackouts
exclude gets none). The unique key ``(task, scheduled_at, attempt, resume_attempt)`` makes it one
per upstream fire time whatever the retries, resumes, crashes and nodes: whoever inserts
second inserts nothing. With several upstreams, it starts when the last of them ends so for
that fire time (each end, once written, looks at the others: of two ends written at once,
at least the later reader sees both).

A node may die between an upstream's end and the insert; the patrol's ``sweep`` (one node,
under the cluster lock) then finds upstream ends older than ``SWEEP_SETTLE`` with no
downstream execution and starts what is missing. It looks back ``SWEEP_WINDOW`` the first
time it runs on a node, and never before the downstream's spec was last synced (a new or
changed chain does not replay history).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

import structlog

from ecron.clock import Clock, iso
from ecron.config.model import TaskSpec
from ecron.core import Execution, TriggerKind
from ecron.metrics import Metrics
from ecron.planning import Claim, claimed, resumes_automatically
from ecron.schedules import Schedule
from ecron.store.base import Store

log = structlog.get_logger(__name__)

#: How far back a node's first sweep looks for upstream ends without their chained run.
SWEEP_WINDOW = timedelta(days=1)
#: An upstream end is swept only once this old: the node that wrote it has started the
#: chained run (or planned a retry) by then, unless it died.
SWEEP_SETTLE = timedelta(seconds=5)
#: At most this many upstream ends are read per chained task and sweep.
SWEEP_LIMIT = 1000


def chain_run(spec: TaskSpec, upstream: Execution, claim: Claim) -> Execution:
    """The execution of chained task ``spec`` that ``upstream``'s end sets off: the same
    fire time, claimed by ``claim``'s node, due at once."""
    return claimed(
        spec.name,
        upstream.scheduled_at,
        claim,
        spec=spec,
        trigger_kind=TriggerKind.CHAIN,
        upstream=upstream.eid,
        not_before=claim.now,
    )


def ended_for_good(
    execution: Execution, spec: TaskSpec | None, on: Iterable[str], now: datetime
) -> bool:
    """True when ``execution`` (the newest of its fire time) ended with a status in ``on``
    and no automatic resume may still follow it (a retry would be newer than it)."""
    if not execution.is_final or str(execution.status) not in on:
        return False
    if spec is None or not resumes_automatically(execution, spec):
        return True
    assert execution.finished_at is not None
    return execution.finished_at + spec.resume.within <= now  # resumed or given up by now


class Chains:
    """Starts chained tasks; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        specs: Mapping[str, TaskSpec],
        claim: Callable[[datetime], Claim],
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.clock = clock
        self.specs = specs
        self.claim = claim
        self.metrics = metrics
        #: Upstream task -> the chained tasks that run after it.
        self._downstreams: dict[str, list[str]] = {}
        #: Chained task -> up to when its upstreams' ends were swept on this node.
        self._swept: dict[str, datetime] = {}
        self.refresh()

    def refresh(self) -> None:
        """Follow the specs (at start and after a reload)."""
        found: dict[str, list[str]] = defaultdict(list)
        for name, spec in self.specs.items():
            for upstream in spec.fire_schedule.upstreams:
                found[upstream].append(name)
        self._downstreams = dict(found)

    def chained(self, task: str) -> bool:
        """True when some task runs after ``task``."""
        return task in self._downstreams

    async def ended(self, execution: Execution) -> list[Execution]:
        """``execution`` ended for good: the run of each chained task that it completes."""
        now = self.clock.now()
        started = []
        for name in self._downstreams.get(execution.task, ()):
            spec = self.specs.get(name)
            if spec is None or not spec.enabled:
                continue
            schedule = spec.fire_schedule
            if str(execution.status) not in schedule.on:
                continue
            others = [u for u in schedule.upstreams if u != execution.task]
            if others and not await self._ready(schedule, others, execution.scheduled_at, now):
                continue
            created = await self.start(spec, execution, now)
            if created is not None:
                started.append(created)
        return started

    async def _ready(
        self, schedule: Schedule, names: list[str], scheduled_at: datetime, now: datetime
    ) -> bool:
        """Every upstream in ``names`` ended for good, for fire time ``scheduled_at``."""
        newest = await self.store.newest_of_fire_time(names, scheduled_at)
        return self._all_ended(schedule, names, newest, now)

    def _all_ended(
        self,
        schedule: Schedule,
        names: Iterable[str],
        newest: Mapping[str, Execution],
        now: datetime,
    ) -> bool:
        return all(
            name in newest and ended_for_good(newest[name], self.specs.get(name), schedule.on, now)
            for name in names
        )

    async def start(
        self, spec: TaskSpec, upstream: Execution, now: datetime, *, count: bool = True
    ) -> Execution | None:
        """Insert the chained run that ``upstream`` sets off (claimed, due now); None when
        that fire time has one already, or the task's calendar or blackouts exclude it."""
        why = spec.fire_times.excluded(upstream.scheduled_at)
        if why is not None:
            if count:
                self.metrics.excluded(spec.name, {why.value: 1})
            log.info(
                "chain_excluded",
                task=spec.name,
                upstream=upstream.eid,
                scheduled_at=iso(upstream.scheduled_at),
                reason=why.value,
            )
            return None
        created = await self.store.create_execution(chain_run(spec, upstream, self.claim(now)))
        if created is None:
            return None  # its run for this fire time exists already
        log.info(
            "chain_started",
            task=spec.name,
            execution_id=created.eid,
            upstream=upstream.eid,
            upstream_task=upstream.task,
            scheduled_at=iso(created.scheduled_at),
        )
        return created

    async def sweep(self, now: datetime) -> list[Execution]:
        """The patrol's job: the chained runs whose start a node's death lost, made now (to
        be started)."""
        names = sorted({name for names in self._downstreams.values() for name in names})
        started = []
        for name in names:
            started += await self._sweep(name, now)
        return started

    async def _sweep(self, name: str, now: datetime) -> list[Execution]:
        spec = self.specs.get(name)
        task = await self.store.get_task(name)
        if spec is None or not spec.enabled or task is None or task.retired:
            return []
        schedule = spec.fire_schedule
        until = now - SWEEP_SETTLE
        since = max(self._swept.get(name, now - SWEEP_WINDOW), task.updated_at or now)
        if since >= until:
            return []
        ends = await self.store.ended_between(schedule.upstreams, since, until, SWEEP_LIMIT)
        last_end = ends[-1].finished_at if len(ends) == SWEEP_LIMIT else None
        self._swept[name] = last_end or until
        times = sorted({e.scheduled_at for e in ends if str(e.status) in schedule.on})
        taken = await self.store.fire_times_taken(name, times)
        started = []
        for when in (t for t in times if t not in taken):
            newest = await self.store.newest_of_fire_time(schedule.upstreams, when)
            if not self._all_ended(schedule, schedule.upstreams, newest, now):
                continue
            last = max(newest.values(), key=lambda e: (e.finished_at or now, e.eid))
            if (created := await self.start(spec, last, now, count=False)) is not None:
                log.warning("chain_start_recovered", task=name, upstream=last.eid)
                started.append(created)
        return started

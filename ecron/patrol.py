"""The patrol: periodic housekeeping under the cluster-wide lock (DESIGN.md, "Patrol").

Every ``patrol_interval`` one node (whichever holds the lock) runs each job in turn:
automatic resume of interrupted executions, stale detection, chained runs whose start a
node's death lost (``Chains.sweep``), overdue tasks (``Overdue.check``), stalled executions
(``Stalled.check``), history retention, the follow-ups of ends whose book-keeping a
node's death cut off, and forgetting nodes whose lease ended long ago and that hold
nothing. The jobs are isolated: one that raises is logged and the others, and
the scheduler, go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta

import structlog

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock
from ecron.commands import Commands
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.core import Execution
from ecron.core.next import cancel_grace, ends_by
from ecron.engine import Engine
from ecron.errors import Conflict, NotFound, NothingToResume
from ecron.leases import Leases
from ecron.metrics import Metrics
from ecron.overdue import Overdue
from ecron.stalled import Stalled
from ecron.store.base import Store

log = structlog.get_logger(__name__)

Job = Callable[[datetime], Awaitable[int]]

#: A stale execution is one past its deadline (or its heartbeat) by more than this.
STALE_MARGIN = timedelta(seconds=30)
#: At most this many rows are deleted per statement, and this many statements per patrol.
PURGE_BATCH, PURGE_BATCHES = 1000, 20
#: At most this many executions are resumed, or taken over as stale, per patrol.
PATROL_LIMIT = 100
#: A node whose lease ended (fenced, or ran out) is forgotten once it holds nothing and
#: has been silent this many lease TTLs: a takeover reads every node's lease, so a cluster
#: restarted many times does not pile them up.
NODE_KEPT_TTLS = 10


class Patrol:
    """Runs the housekeeping jobs; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        commands: Commands,
        engine: Engine,
        leases: Leases,
        bookkeeping: Bookkeeping,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.commands = commands
        self.engine = engine
        self.leases = leases
        self.bookkeeping = bookkeeping
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.specs = specs
        self.overdue = Overdue(store=store, specs=specs, metrics=metrics, alert=bookkeeping.alert)
        self.stalled = Stalled(store=store, specs=specs, alert=bookkeeping.alert)
        self.jobs: dict[str, Job] = {
            "resume": self.auto_resume,
            "stale": self.stale,
            "chains": self.chains,
            "overdue": self.overdue.check,
            "stalled": self.stalled.check,
            "retention": self.retention,
            "follow_ups": self.follow_ups,
            "nodes": self.nodes,
        }
        self._stopping = asyncio.Event()
        #: When the patrol last went round, and what each job did then.
        self.last_run: datetime | None = None
        self.last_counts: dict[str, int] = {}

    async def run(self) -> None:
        """Patrol every ``patrol_interval``, until ``stop`` (between rounds)."""
        interval = self.settings.patrol_interval.total_seconds()
        while not await self.clock.wait(self._stopping, interval):
            try:
                await self.run_once()
            except Exception:
                log.exception("patrol_failed")

    def stop(self) -> None:
        """End the loop after the round under way, if any."""
        self._stopping.set()

    async def run_once(self) -> dict[str, int] | None:
        """One round, if this node gets the lock; what each job did (-1: it failed). Every
        node, lock or not, brings its last-success gauge up to date first."""
        try:
            await self.overdue.refresh()
            await self.commands.pools()  # the pool gauges, as every node shows them
        except Exception:
            log.exception("last_success_refresh_failed")
        async with self.store.exclusive("patrol") as held:
            if not held:
                log.debug("patrol_skipped", reason="another node holds the patrol lock")
                return None
            now = self.clock.now()
            counts: dict[str, int] = {}
            metrics = self.metrics
            metrics.patrol_runs.inc()
            for name, job in self.jobs.items():
                try:
                    counts[name] = await job(now)
                except Exception:
                    log.exception("patrol_job_failed", job=name)
                    metrics.patrol_failures.labels(job=name).inc()
                    counts[name] = -1
            self.last_run, self.last_counts = now, counts
            log.info("patrol_done", **counts)
            return counts

    async def auto_resume(self, now: datetime) -> int:
        """Resume interrupted executions of idempotent tasks with ``resume.auto`` (not while
        the task is paused), within ``resume.within`` of their failure, at most
        ``resume.max_attempts`` per chain and ``PATROL_LIMIT`` per round. One that still
        cannot be resumed at its last chance within ``resume.within`` is given up: its
        failure becomes final."""
        budget = PATROL_LIMIT
        for name, spec in self.specs.items():
            if budget <= 0 or not (spec.idempotent and spec.resume.auto):
                continue
            task = await self.store.get_task(name)
            if task is None or task.paused:
                continue
            candidates = await self.store.interrupted_unresumed(
                name, now - spec.resume.within, spec.resume.max_attempts, budget
            )
            for execution in candidates:
                budget -= await self._resume_one(execution, spec, now)
        return PATROL_LIMIT - budget

    async def _resume_one(self, execution: Execution, spec: TaskSpec, now: datetime) -> int:
        try:
            await self.commands.resume(execution.eid, why="patrol")
        except (Conflict, NotFound) as exc:
            assert execution.finished_at is not None
            last_chance = execution.finished_at + spec.resume.within - now
            if isinstance(exc, NothingToResume) or last_chance <= self.settings.patrol_interval:
                why = f"not resumed within resume.within: {exc}"
                self.engine.hold(await self.bookkeeping.give_up_resume(execution, why))
            else:
                log.info(
                    "auto_resume_deferred",
                    task=execution.task,
                    execution_id=execution.eid,
                    reason=str(exc),
                )
            return 0
        return 1

    async def stale(self, now: datetime) -> int:
        """Take over active executions nothing seems to drive (``_left_alone``: past the
        moment their holder would have ended them, or in callback mode silent past
        ``heartbeat_timeout``, by ``STALE_MARGIN``), whoever holds them, and let the engine
        end them as the rules say."""
        silent = {
            name: now - spec.heartbeat_timeout - STALE_MARGIN
            for name, spec in self.specs.items()
            if spec.mode != "poll"  # pushed only: callback or queue
        }
        found = await self.store.stuck(now - STALE_MARGIN, silent, PATROL_LIMIT)
        stale = [e.eid for e in found if self._left_alone(e, now, silent)]
        taken = await self.leases.force_claim(stale, now)
        for execution in taken:
            log.warning(
                "stale_execution_taken_over",
                task=execution.task,
                execution_id=execution.eid,
                status=str(execution.status),
            )
            self.engine.adopt(execution)
        return len(taken)

    def _left_alone(
        self, execution: Execution, now: datetime, silent: Mapping[str, datetime]
    ) -> bool:
        """True when nothing drives ``execution`` (one of the patrol's specs): a pushed one
        silent since ``silent``, or one ``STALE_MARGIN`` past the moment its holder would
        have ended it by itself (``core.ends_by``: its deadline, or the close of a cancel
        recorded as sent, ``cancel_grace`` later). A holder waiting out the cancel it
        recorded (a node killed between the record and the call's answer, say) is left
        to close it: taking it from a live node then only makes two nodes fight over it."""
        spec = self.specs.get(execution.task)
        if spec is None:
            return False
        heard = execution.last_report_at or execution.triggered_at
        since = silent.get(execution.task)
        if since is not None and heard is not None and heard < since:
            return True
        ends = ends_by(execution, _cancel_grace(spec))
        return ends is not None and ends < now - STALE_MARGIN

    async def chains(self, now: datetime) -> int:
        """Start the chained runs whose start a node's death lost (``Chains.sweep``)."""
        started = await self.bookkeeping.chains.sweep(now)
        self.engine.hold(started)
        return len(started)

    async def follow_ups(self, now: datetime) -> int:
        """What a node's death cut off after an end: ``after`` tasks left without a next
        fire time get one (see ``Bookkeeping.stalled_after_tasks``)."""
        restarted, started = await self.bookkeeping.stalled_after_tasks(now)
        self.engine.hold(started)
        return restarted

    async def nodes(self, now: datetime) -> int:
        """Forget the nodes whose lease ended long ago and that hold nothing."""
        return await self.store.purge_nodes(now - self.settings.lease_ttl * NODE_KEPT_TTLS)

    async def retention(self, now: datetime) -> int:
        """Delete final executions and audit entries older than ``history_retention``, in
        bounded batches."""
        before = now - self.settings.history_retention
        deleted = 0
        for purge in (self.store.purge_history, self.store.purge_audit):
            for _ in range(PURGE_BATCHES):
                count = await purge(before, PURGE_BATCH)
                deleted += count
                if count < PURGE_BATCH:
                    break
        return deleted


def _cancel_grace(spec: TaskSpec) -> timedelta:
    """The longest ``cancel_grace`` of the calls of ``spec`` (its own, or its steps')."""
    numbers: list[int | None] = list(range(1, len(spec.steps) + 1)) if spec.steps else [None]
    return max(cancel_grace(spec.call(number).request_timeout) for number in numbers)

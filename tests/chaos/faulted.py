"""The crash loop's workload on two PostgreSQL nodes under a fault other than a kill (issue
24): one node's wall clock set seconds away from the machine's (``faketime``), or its
database reached through a proxy that makes every round trip slow and then stalls.

Nothing is killed: every node is up from start to end, so a lease that changes hands was
taken from a live node, which is a problem unless, by the database's clock, it had run out
(``Snapshots.watch_leases``). On top of the crash loop's checks (``driver.problems``), what
the services saw is held against the database's clock, which is the machine's (the database,
the services and the test run on it; only the skewed node's clock is off):

- no execution was cancelled for its timeout before its task timeout had passed since its
  trigger reached the service;
- no trigger of a fire time reached a service before that fire time.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.chaos.checks import ACTIVE_NAMES, Snapshots, Tables, fire_times
from tests.chaos.driver import (
    WARM_UP,
    Run,
    _collect_starts,
    _config,
    _fires_again,
    _manual_runs,
    _settle,
    _wait_all_ended,
    counts,
    node_id,
    problems,
)
from tests.chaos.workload import EVERY, Workload, serve_workload
from tests.support.cluster import Node, clean_up, stop_node, wait_ready

#: Starts a node of a config directory: (name, directory) -> node.
Launch = Callable[[str, Path], Node]
#: The ``deadline`` task's timeout (workload.py), and the slack allowed for a cancel (or a
#: trigger) reaching the service before the deadline (after the trigger's record) by the
#: database's clock: the node's view of that clock is measured across a round trip.
TASK_TIMEOUT = 1.0
DEADLINE_SLACK = 0.1
#: How early a trigger may reach its service (the node's view of the database's clock is
#: measured across a round trip).
EARLY_SLACK = 0.1
#: Cold nodes (started under ``faketime``) need seconds of imports on a loaded machine.
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Cluster:
    """What a fault may look at: the tables, and each node's id by its name (``node1``)."""

    tables: Tables
    ids: dict[str, str]

    async def holds_work(self, name: str) -> bool:
        """True when node ``name`` holds an active (PENDING or RUNNING) execution."""
        executions, _ = await self.tables.read()
        return any(
            row["owner"] == self.ids[name] and row["status"] in ACTIVE_NAMES
            for row in executions.values()
        )


@dataclass
class Faulted:
    """What a faulted run did, besides the crash loop's ``Run``."""

    run: Run
    #: Seconds from each timed-out job's trigger to its cancel, at the service.
    cancel_after: list[float] = field(default_factory=list)
    #: Seconds each cancel reached its service after the deadline its job's trigger carried
    #: (``X-Ecron-Deadline``: the database's clock; negative: before it).
    cancel_past_deadline: list[float] = field(default_factory=list)
    #: Seconds each fire time's trigger reached its service after the fire time (negative:
    #: before it).
    trigger_lag: list[float] = field(default_factory=list)
    #: Seconds from each ``deadline`` job's trigger reaching its service to the deadline
    #: it carried (``X-Ecron-Deadline``): the time the job was given.
    deadline_given: list[float] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)
    #: Executions the nodes said they let go of when their leases lapsed (``released`` of
    #: ``leases_expired_unrenewed``, ``held`` of ``lease_renewal_late``).
    let_go: int = 0


async def faulted_run(
    database_url: str,
    tmp_path: Path,
    launch: Sequence[Launch],
    fault: Callable[[Cluster], Awaitable[None]],
    *,
    seed: int,
) -> Faulted:
    """Run the workload on one node per ``launch``, let ``fault`` run its course (given the
    tables and the nodes' ids, it returns when the window of fire times to check ends), let
    the cluster settle, and read what the checks need."""
    rng = random.Random(seed)
    run = Run(seed=seed, nodes=len(launch))
    nodes: list[Node] = []
    ids: dict[str, Node] = {}

    def up() -> list[str]:
        return [node.api for node in nodes if node.process.poll() is None]

    def live() -> set[str]:
        return {name for name, node in ids.items() if node.process.poll() is None}

    tables = Tables.open(database_url)
    try:
        async with serve_workload(up) as work:
            directory = _config(tmp_path, work)
            nodes.extend(start(f"node{n}", directory) for n, start in enumerate(launch))
            await asyncio.gather(*(wait_ready(node, READY_TIMEOUT) for node in nodes))
            ids.update({await node_id(node): node for node in nodes})
            began = datetime.now(UTC)
            run.snapshots = Snapshots(tables, live=live)
            stop = asyncio.Event()
            snapshotting = asyncio.create_task(run.snapshots.run(stop))
            manual = asyncio.create_task(_manual_runs(nodes, rng, run.manual))
            started = time.monotonic()
            await fault(Cluster(tables, {node.name: name for name, node in ids.items()}))
            window_end = datetime.now(UTC)
            run.phases["fault"] = time.monotonic() - started
            manual.cancel()
            run.adopted_after = await _settle(tables, nodes)
            expected = fire_times(EVERY, began + WARM_UP, window_end)
            run.window = (began + WARM_UP, window_end)
            await _wait_all_ended(tables, expected, run.manual)
            run.chained_after = await _fires_again(tables, "chained", window_end)
            run.phases["ended"] = time.monotonic() - started
            stop.set()
            await snapshotting
            run.exit_codes = list(await asyncio.gather(*(stop_node(node) for node in nodes)))
            run.phases["stopped"] = time.monotonic() - started
            await run.snapshots.take()
            run.executions, run.steps = await tables.read()
            run.duplicate_keys = await tables.duplicate_keys()
            run.logs = "\n".join(node.log_tail(15) for node in nodes)
            logged = [e for node in nodes for e in node.events()]
            run.events = Counter(str(e.get("event")) for e in logged)
            _collect_starts(run, work)
            found = Faulted(run, events=run.events, let_go=_let_go(logged))
            _service_times(found, work)
    finally:
        clean_up(nodes)
        await tables.close()
    return found


def _let_go(logged: Sequence[dict[str, Any]]) -> int:
    """How many executions the nodes let go of at their lapses, by their logs."""
    counts = {"leases_expired_unrenewed": "released", "lease_renewal_late": "held"}
    return sum(int(e.get(counts[e["event"]], 0)) for e in logged if e.get("event") in counts)


def _service_times(found: Faulted, work: Workload) -> None:
    """From the user service's calls (stamped on its monotonic clock, turned into the
    machine's wall clock, which is the database's): how late each first trigger of a fire
    time came; for each ``deadline`` job, the deadline its trigger carried, and when its
    cancel came, after the trigger and after that deadline."""
    wall = time.time() - time.monotonic()
    first_post: dict[str, tuple[float, datetime]] = {}
    for call in work.user.calls:
        if call.method == "POST" and call.eid not in first_post:
            told = datetime.fromisoformat(call.headers["X-Ecron-Deadline"])
            first_post[call.eid] = (call.at, told)
            scheduled = datetime.fromisoformat(call.headers["X-Ecron-Scheduled-At"])
            found.trigger_lag.append(call.at + wall - scheduled.timestamp())
            if "/jobs/slow" in call.path:
                found.deadline_given.append(told.timestamp() - (call.at + wall))
        elif call.method == "DELETE" and "/jobs/slow/" in call.path and call.eid in first_post:
            posted, told = first_post.pop(call.eid)
            found.cancel_after.append(call.at - posted)
            found.cancel_past_deadline.append(call.at + wall - told.timestamp())


def faulted_problems(found: Faulted, *, database_healthy: bool) -> dict[str, list[str]]:
    """The crash loop's problems, and those of the clock: a job cancelled before the
    deadline its trigger carried, a trigger before its fire time; and, while every node
    is up and the database answers in time (``database_healthy``), an ``after`` task
    restarted by the patrol (its last end taken for one that nobody booked), and a job
    given a deadline other than ``task_timeout`` after its trigger reached the service (a
    node's own clock used for it)."""
    early_cancels = [
        f"a cancel reached its service {-past:.2f}s before the deadline its trigger carried"
        for past in found.cancel_past_deadline
        if past < -DEADLINE_SLACK
    ]
    early_triggers = [
        f"a trigger reached its service {-lag:.2f}s before its fire time"
        for lag in found.trigger_lag
        if lag < -EARLY_SLACK
    ]
    return {
        **problems(found.run),
        "timed out early": early_cancels,
        "triggered early": early_triggers,
        **(_healthy_problems(found) if database_healthy else {}),
    }


#: What a node logs when a renewal failed, or its leases ran out before it renewed them.
LAPSES = ("leases_expired_unrenewed", "lease_renewal_failed", "lease_renewal_late")


def _healthy_problems(found: Faulted) -> dict[str, list[str]]:
    """While every node is up and renews its leases in time, no lease runs out: nothing is
    adopted (``execution_adopted``: taken over once its lease expired, so a lease taken
    from a live node), no ``after`` task is restarted by the patrol (its last end taken
    for one that nobody booked), and each job's trigger carries the deadline
    ``task_timeout`` after it reaches the service (recording that it leaves takes
    milliseconds). A node whose renewal did land too late (a loaded machine:
    ``leases_expired_unrenewed``, after ``lease_renewal_failed`` too), or whose renewal round
    began only after its leases had run out (its loop held up: ``lease_renewal_late``),
    says so and how many executions it let go; what another node adopts then was nobody's
    by the database's clock (the snapshots check that), so no more adoptions than that are
    allowed. A trigger sent again after such a takeover keeps the first's deadline
    (PROTOCOL.md), so deadlines are looked at only in a run where every renewal landed in
    time."""
    events = found.events
    lapsed = sum(events[e] for e in LAPSES)
    adopted = events["execution_adopted"]
    restarted = events["after_task_restarted"]
    found_problems = {
        "after task restarted": [f"after_task_restarted logged {restarted} times"]
        if restarted
        else [],
        "adopted from a live node": [
            f"execution_adopted logged {adopted} times; the lapses let go of {found.let_go}"
        ]
        if adopted > found.let_go
        else [],
    }
    if not lapsed:
        found_problems["deadline not task_timeout after the trigger"] = [
            f"a trigger carried a deadline {given:.2f}s after it reached the service "
            f"(task_timeout {TASK_TIMEOUT:g}s)"
            for given in found.deadline_given
            if abs(given - TASK_TIMEOUT) > DEADLINE_SLACK
        ]
    return found_problems


def faulted_counts(found: Faulted) -> str:
    """The crash loop's counts, and what the clock and lease checks saw."""
    run = found.run
    assert run.snapshots is not None
    lags = sorted(found.trigger_lag) or [0.0]
    cancels = sorted(found.cancel_after) or [0.0]
    past = sorted(found.cancel_past_deadline) or [0.0]
    given = sorted(found.deadline_given) or [0.0]
    return (
        f"{counts(run)} "
        f"timeouts_checked={len(found.cancel_after)} "
        f"cancel_after_trigger_s=[{cancels[0]:.2f}..{cancels[-1]:.2f}] "
        f"deadline_after_trigger_s=[{given[0]:.2f}..{given[-1]:.2f}] "
        f"cancel_after_deadline_s=[{past[0]:.2f}..{past[-1]:.2f}] "
        f"triggers_checked={len(found.trigger_lag)} "
        f"trigger_lag_s=[{lags[0]:.2f}..{lags[-1]:.2f}] "
        f"lease_lost={found.events['lease_lost']} "
        f"execution_adopted={found.events['execution_adopted']} "
        f"let_go_at_lapses={found.let_go} "
        + " ".join(f"{event}={found.events[event]}" for event in LAPSES)
    )

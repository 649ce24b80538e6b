"""The crash loop's driver: nodes running the mixed workload, SIGKILLed at random moments
(a seeded RNG: the seed is printed, and ``ECRON_CHAOS_SEED`` replays one) and started again
at once, while snapshots of the tables are taken; then every check of ``checks``."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from ecron.clock import iso
from tests.chaos.checks import (
    ACTIVE_NAMES,
    FINAL_NAMES,
    Snapshots,
    Tables,
    chains,
    fire_times,
    started_checks,
)
from tests.chaos.launcher import start_warm_node
from tests.chaos.workload import (
    EVERY,
    POLL_INTERVAL,
    RETRY_BACKOFF,
    Workload,
    serve_workload,
    workload_tasks,
)
from tests.support.cluster import (
    Node,
    clean_up,
    kill_node,
    let_time_pass,
    request,
    stop_node,
    wait_ready,
    write_config,
)
from tests.support.service import wait_for

#: Kills per run, and the seconds between two kills (drawn uniformly).
KILLS = 20
KILL_SPACING = (1.0, 2.5)
#: The nodes' lease, and the slack allowed on top of lease_ttl + one poll interval for the
#: last takeover round (every 0.25 s) and a loaded machine.
LEASE_TTL = 2.0
MARGIN = 1.5
#: Fire times from this long after the nodes are up are checked.
WARM_UP = timedelta(seconds=2)
#: Generous bounds on waits that end as soon as their condition holds.
SETTLE_TIMEOUT = 30.0


def chaos_seed() -> int:
    """The seed: ``ECRON_CHAOS_SEED`` when set (to replay a run), else a fresh one."""
    configured = os.environ.get("ECRON_CHAOS_SEED")
    return int(configured) if configured else random.SystemRandom().randrange(2**32)


@dataclass
class Run:
    """What one crash loop did and found."""

    seed: int
    nodes: int
    kills: list[float] = field(default_factory=list)
    window: tuple[datetime, datetime] | None = None
    adopted_after: float = 0.0
    manual: list[str] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    executions: dict[str, Any] = field(default_factory=dict)
    steps: dict[Any, Any] = field(default_factory=dict)
    snapshots: Snapshots | None = None
    duplicate_keys: list[Any] = field(default_factory=list)
    #: Starts per remote id at the services, and the task, fire time and attempt of each.
    starts: Counter[str] = field(default_factory=Counter)
    start_headers: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: The job service's starts, by its log lines and by what it answered.
    job_log_starts: Counter[str] = field(default_factory=Counter)
    job_service_starts: Counter[str] = field(default_factory=Counter)
    #: The ``after`` task fired again after the last kill; and what the nodes logged.
    chained_after: bool = False
    events: Counter[str] = field(default_factory=Counter)
    #: Seconds from the first kill's wait to the end of each phase.
    phases: dict[str, float] = field(default_factory=dict)
    logs: str = ""


async def node_id(node: Node) -> str:
    _, health = await request(node, "GET", "/healthz")
    name: str = health["node"]
    return name


async def _manual_runs(nodes: list[Node], rng: random.Random, accepted: list[str]) -> None:
    """Ask a node that is up to run ``short`` now, every 0.5 to 1.5 s; keep the eids of the
    runs that were accepted (202): each must end like any fire time."""
    while True:
        await let_time_pass(rng.uniform(0.5, 1.5))
        up = [node for node in nodes if node.process.poll() is None]
        if not up:
            continue
        try:
            status, answer = await request(rng.choice(up), "POST", "/api/v1/tasks/short/run")
        except (aiohttp.ClientError, TimeoutError, ValueError):
            continue  # the node died under the request: nothing was promised
        if status == 202:
            accepted.append(answer["id"])


def _live_ids(slots: list[Node], known: dict[str, str]) -> set[str]:
    """The ids of the nodes whose processes are up, each read once from its log's
    ``daemon_started`` line (``known``: by node name); a node not started yet has none."""
    for node in slots:
        if node.name not in known and node.process.poll() is None and node.log_path.exists():
            started = [e for e in node.events() if e.get("event") == "daemon_started"]
            if started:
                known[node.name] = str(started[0]["node"])
    up = [node.name for node in slots if node.process.poll() is None]
    return {known[name] for name in up if name in known}


def _orphans(executions: dict[str, Any], live: set[str], now: datetime) -> list[str]:
    """Active executions that no live node holds under an unexpired lease."""
    return [
        f"{row['eid']} {row['status']} owner={row['owner']} held_until={row['held_until']}"
        for row in executions.values()
        if row["status"] in ACTIVE_NAMES
        and (row["owner"] not in live or row["held_until"] is None or row["held_until"] < now)
    ]


def _unfinished(executions: dict[str, Any], expected: list[Any], manual: list[str]) -> list[str]:
    """Fire times of ``expected`` without a row or whose chain has not ended, and manual
    runs not final."""
    groups = chains(executions).chains
    missing = [
        f"{task}@{iso(when)}: no execution" for task, when in expected if (task, when) not in groups
    ]
    open_chains = [
        f"{task}@{iso(when)}: {[r['status'] for r in groups[task, when]]}"
        for task, when in expected
        if any(r["status"] not in FINAL_NAMES for r in groups.get((task, when), []))
    ]
    manual_open = [
        eid for eid in manual if executions.get(eid, {}).get("status") not in FINAL_NAMES
    ]
    return missing + open_chains + manual_open


async def crash_loop(database_url: str, tmp_path: Path, *, nodes: int, seed: int) -> Run:
    """Run the workload on ``nodes`` nodes, kill one at random KILLS times, restart it at
    once, let the cluster settle, and read everything the checks need."""
    rng = random.Random(seed)
    run = Run(seed=seed, nodes=nodes)
    slots: list[Node] = []
    everyone: list[Node] = []

    def up() -> list[str]:
        return [node.api for node in slots if node.process.poll() is None]

    tables = Tables.open(database_url)
    try:
        async with serve_workload(up) as work:
            directory = _config(tmp_path, work)

            def start(name: str) -> Node:
                node = start_warm_node(name, directory, database_url, tmp_path)
                everyone.append(node)
                return node

            slots.extend(start(f"node{n}") for n in range(nodes))
            await asyncio.gather(*(wait_ready(node) for node in slots))
            began = datetime.now(UTC)
            run.snapshots = Snapshots(tables, live=partial(_live_ids, slots, {}))
            stop = asyncio.Event()
            snapshotting = asyncio.create_task(run.snapshots.run(stop))
            manual = asyncio.create_task(_manual_runs(slots, rng, run.manual))
            started = time.monotonic()
            for kill in range(KILLS):
                await let_time_pass(rng.uniform(*KILL_SPACING))
                slot = rng.randrange(nodes)
                await kill_node(slots[slot])
                run.kills.append(round(time.monotonic() - started, 2))
                slots[slot] = start(f"node{slot}-{kill + 1}")
            window_end = datetime.now(UTC)
            run.phases["kills"] = time.monotonic() - started
            manual.cancel()
            await asyncio.gather(*(wait_ready(node) for node in slots))
            run.adopted_after = await _settle(tables, slots)
            expected = fire_times(EVERY, began + WARM_UP, window_end)
            run.window = (began + WARM_UP, window_end)
            run.phases["settled"] = time.monotonic() - started
            await _wait_all_ended(tables, expected, run.manual)
            run.chained_after = await _fires_again(tables, "chained", window_end)
            run.phases["ended"] = time.monotonic() - started
            stop.set()
            await snapshotting
            run.exit_codes = list(await asyncio.gather(*(stop_node(node) for node in slots)))
            run.phases["stopped"] = time.monotonic() - started
            await run.snapshots.take()  # after the clean stops: final rows still unchanged
            run.executions, run.steps = await tables.read()
            run.duplicate_keys = await tables.duplicate_keys()
            run.logs = "\n".join(node.log_tail(15) for node in slots)
            run.events = Counter(str(e.get("event")) for node in everyone for e in node.events())
            _collect_starts(run, work)
    finally:
        clean_up(everyone)
        await tables.close()
    return run


def _config(tmp_path: Path, work: Workload) -> Path:
    settings = (
        "node_id: auto\ntick: 100ms\n"
        f"lease_ttl: {LEASE_TTL:g}s\npatrol_interval: 1s\n"
        f"public_url: {work.urls['balancer']}\n"
        "log: {format: json, level: info}\n"
    )
    return write_config(tmp_path / "config", settings, workload_tasks(work.urls))


async def _settle(tables: Tables, slots: list[Node]) -> float:
    """Seconds from the moment every node is up again until no PENDING or RUNNING execution
    is left outside a live node's lease (the dead nodes' work adopted)."""
    live = {await node_id(node) for node in slots}
    settled = time.monotonic()
    bound = LEASE_TTL + POLL_INTERVAL + MARGIN
    found: list[str] = []

    async def adopted() -> bool:
        nonlocal found
        executions, _ = await tables.read()
        found = _orphans(executions, live, datetime.now(UTC))
        return not found

    try:
        await wait_for(adopted, timeout=bound + SETTLE_TIMEOUT, interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"still not held by a live node: {found[:10]}") from exc
    return time.monotonic() - settled


async def _fires_again(tables: Tables, task: str, after: datetime) -> bool:
    """Wait until ``task`` has an execution of a fire time later than ``after`` that ended
    (an ``after`` task that stopped firing never does); whether it came."""

    async def ended() -> bool:
        executions, _ = await tables.read()
        return any(
            row["task"] == task and row["scheduled_at"] > after and row["status"] in FINAL_NAMES
            for row in executions.values()
        )

    try:
        await wait_for(ended, timeout=SETTLE_TIMEOUT, interval=0.2)
    except AssertionError:
        return False
    return True


async def _wait_all_ended(tables: Tables, expected: list[Any], manual: list[str]) -> None:
    left: list[str] = []

    async def ended() -> bool:
        nonlocal left
        executions, _ = await tables.read()
        left = _unfinished(executions, expected, manual)
        return not left

    try:
        await wait_for(ended, timeout=SETTLE_TIMEOUT, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{len(left)} not ended: {left[:10]}") from exc


def _collect_starts(run: Run, work: Workload) -> None:
    run.starts = work.started_remote_ids()
    headers = {}
    for call in work.user.calls:
        if call.method == "POST" and call.eid in work.user.starts and call.eid not in headers:
            h = call.headers
            headers[call.eid] = (h["X-Ecron-Task"], h["X-Ecron-Scheduled-At"], h["X-Ecron-Attempt"])
    for start in work.log.starts:
        headers.setdefault(start.remote_id, (start.task, start.scheduled_at, start.attempt))
    run.start_headers = headers
    run.job_log_starts = work.starts_in_job_service_log()
    run.job_service_starts = Counter(
        s.remote_id for s in work.log.starts if s.service == "job_service"
    )


def problems(run: Run) -> dict[str, list[str]]:
    """Everything that is wrong, by check (empty lists when all holds)."""
    assert run.window is not None and run.snapshots is not None
    expected = set(fire_times(EVERY, *run.window))
    report = chains(run.executions)
    start, end = run.window
    in_window = {
        (task, when): rows
        for (task, when), rows in report.chains.items()
        if (task, when) in expected or (task == "chained" and start <= when <= end)
    }
    chain_problems = [
        p for p in report.problems if any(p.startswith(f"{t}@{iso(w)}") for t, w in in_window)
    ]
    return {
        "retries lost": _lost_retries(in_window),
        "after task stopped": [] if run.chained_after else ["chained never fired again"],
        "missing fire times": [f"{t}@{iso(w)}" for t, w in sorted(expected - set(in_window))],
        "chains": chain_problems,
        "duplicate keys": [str(key) for key in run.duplicate_keys],
        "snapshots": run.snapshots.problems,
        "starts": started_checks(
            run.executions,
            run.steps,
            run.starts,
            run.start_headers,
        ),
        "job service log": []
        if run.job_log_starts == run.job_service_starts
        else [
            "the job service's log and its starts disagree: "
            f"log-only {run.job_log_starts - run.job_service_starts}, "
            f"starts-only {run.job_service_starts - run.job_log_starts}"
        ],
        "exit codes": [str(code) for code in run.exit_codes if code != 0],
        "adoption": []
        if run.adopted_after <= LEASE_TTL + POLL_INTERVAL + MARGIN
        else [f"adopted {run.adopted_after:.2f}s after the last restart"],
    }


def _lost_retries(in_window: dict[tuple[str, datetime], list[Any]]) -> list[str]:
    """Fire times of ``flaky`` (every job fails; one retry) whose chain has no retry,
    although its failure came early enough for the retry to start before the next fire
    time (the rule that drops a retry): a retry lost."""
    lost = []
    for (task, when), rows in in_window.items():
        if task != "flaky" or len(rows) != 1 or rows[0]["finished_at"] is None:
            continue
        retry_at = rows[0]["finished_at"] + timedelta(seconds=RETRY_BACKOFF + 0.5)
        if retry_at < when + timedelta(seconds=EVERY["flaky"]):
            lost.append(f"flaky@{iso(when)} failed at {iso(rows[0]['finished_at'])}, no retry")
    return lost


def counts(run: Run) -> str:
    """The counts checked, in one line to quote."""
    assert run.window is not None and run.snapshots is not None
    expected = fire_times(EVERY, *run.window)
    statuses = Counter(row["status"] for row in run.executions.values())
    not_success = Counter(
        f"{row['task']}:{row['status']}:{row['reason']}"
        for row in run.executions.values()
        if row["status"] in FINAL_NAMES - {"SUCCESS"}
    )
    per_rid = Counter(run.starts.values())
    return (
        f"seed={run.seed} nodes={run.nodes} kills={len(run.kills)} (at {run.kills} s) "
        f"fire_times_in_window={len(expected)} executions={len(run.executions)} "
        f"steps={len(run.steps)} statuses={dict(statuses)} ends_not_success={dict(not_success)} "
        f"manual_runs={len(run.manual)} "
        f"remote_ids_started={sum(per_rid.values())} starts_per_remote_id={dict(per_rid)} "
        f"snapshots={run.snapshots.taken} final_rows_watched={run.snapshots.finals_watched} "
        f"leases_taken={run.snapshots.leases_taken} "
        f"adopted_after_last_restart={run.adopted_after:.2f}s "
        f"executions_adopted={run.events['execution_adopted']} "
        f"after_task_restarted={run.events['after_task_restarted']} "
        f"retries_planned={run.events['retry_planned']} "
        f"phases_s={ {k: round(v, 1) for k, v in run.phases.items()} }"
    )

"""``hold``: a node keeps everything it holds. N executions in flight, created through the
API, polled for minutes on one node (and then on two nodes sharing them), with the daemon's
own log and metrics read for lease lapses, self-adoptions and retried deadlocks; polls per
second and CPU per poll beside a plain aiohttp poller's; memory per execution.

    .venv/bin/python -m bench.hold --database postgresql            # the three phases, 5 min each
    .venv/bin/python -m bench.hold --phases 10000x1s --minutes 1    # one phase, shorter

A phase is ``COUNTxINTERVAL`` (one node), or ``NODESxCOUNTxINTERVAL`` (NODES nodes, COUNT
executions each: ``2x25000x10s``). Per phase, on a fresh database: the daemon(s) start with
one manual task (``poll_interval`` = INTERVAL, ``concurrency: allow``, ``task_timeout: 1d``);
the executions are asked for with ``POST /api/v1/tasks/{name}/run`` from ``--clients``
concurrent clients, each node asked for its share; once every execution has been polled
(the ramp) and one interval more, the window of ``--minutes`` opens. The user service (core
1) answers each poll ``RUNNING`` with a new progress, and per execution keeps the largest gap
between two of its polls in the window (the window's edges count as polls: an execution not
polled at all in it has the whole window as its gap).

What must be 0 in the window, read from each daemon's own log (level warning, JSON) and
``/metrics``: lease lapses (``leases_expired_unrenewed``, ``lease_renewal_late``,
``node_lease_taken_again``), executions taken over (``ecron_claims_total{kind="takeover"}``:
with no node dying, any takeover is a node adopting its own or a live node's work), lost
leases (``ecron_leases_lost_total``), retried deadlocks (``store_retry`` lines naming one,
and on PostgreSQL the database's own ``pg_stat_database.deadlocks``). Then the largest gap
over the interval (``gap_max_over_interval`` ≤ 3: every execution polled within three of its
intervals), polls/s, CPU per poll and RSS per execution. The plain aiohttp poller
(``bench/baseline_poller.py``) polls the same number of ids at the same interval on the same
core, for ``--baseline-seconds`` after its own ramp.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    SUBJECT_CORE,
    Child,
    Daemon,
    Databases,
    Service,
    ask_runs,
    emit,
    metric,
    parse,
    parser,
    ratio,
    rounded,
    runs_figures,
    scratch_dir,
    table,
    write_config,
)

TASK = "hold"
#: What the daemon's log must not say in the window.
LAPSES = ("leases_expired_unrenewed", "lease_renewal_late", "node_lease_taken_again")
DEFAULT_PHASES = "10000x1s,50000x10s,2x25000x10s"


@dataclass(frozen=True)
class Phase:
    """``nodes`` daemons, each holding ``count`` executions polled every ``interval`` s."""

    nodes: int
    count: int
    interval: float

    @property
    def total(self) -> int:
        return self.nodes * self.count

    @property
    def label(self) -> str:
        per = f"{self.count}" if self.nodes == 1 else f"{self.nodes}x{self.count}"
        return f"{per}x{self.interval:g}s"

    @classmethod
    def parse(cls, text: str) -> Phase:
        parts = text.lower().split("x")
        if len(parts) == 2:
            parts.insert(0, "1")
        nodes, count, interval = parts
        return cls(int(nodes), int(count), float(interval.rstrip("s")))


def task_yaml(url: str, interval: float) -> str:
    return (
        "tasks:\n"
        f"  - name: {TASK}\n    schedule: manual\n    url: {url}\n"
        f"    poll_interval: {interval:g}s\n    task_timeout: 1d\n    concurrency: allow\n"
    )


async def counters(api: str) -> dict[str, float]:
    return {
        "takeovers": await metric(api, "ecron_claims_total", 'kind="takeover"'),
        "leases_lost": await metric(api, "ecron_leases_lost_total"),
    }


async def pg_deadlocks(url: str) -> int | None:
    """PostgreSQL's count of deadlocks detected in the database (None on SQLite)."""
    if not url.startswith("postgresql"):
        return None
    import asyncpg
    from sqlalchemy.engine import make_url

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        query = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        return int(await conn.fetchval(query))
    finally:
        await conn.close()


def log_events(path: Path, since: float) -> Counter[str]:
    """The events of a daemon's JSON log at or after ``since`` (``time.time()``): each of
    ``LAPSES``, ``lease_lost``, and ``store_retry`` (``deadlock_retried`` when it names a
    deadlock); lines of the warning level and above (the bench runs the daemon at warning)."""
    found: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        stamp = entry.get("timestamp")
        if not isinstance(entry, dict) or stamp is None or _epoch(stamp) < since:
            continue
        name = entry.get("event", "")
        if name in (*LAPSES, "lease_lost"):
            found[name] += 1
        elif name == "store_retry":
            found["store_retry"] += 1
            if "deadlock" in str(entry.get("error", "")).lower():
                found["deadlock_retried"] += 1
    return found


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def wait_polled(service: Service, count: int, children: list[Child], timeout: float) -> float:
    """Wait until ``count`` executions have been polled at least once; how long it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        for child in children:
            child.check_alive()
        if (await service.get("/_stats/polls"))["known"] >= count:
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(0.5)
    raise TimeoutError(f"not all {count} executions were polled within {timeout}s")


async def run_ecron(args: Any, service: Service, phase: Phase, scratch: Path) -> dict[str, Any]:
    url = await args.databases.new()
    label = f"ecron-{phase.label}"
    tasks = task_yaml(f"{service.url}/jobs/{label}", phase.interval)
    config = write_config(scratch / f"config-{label}", tasks)
    daemons = [
        Daemon.start(config, url, scratch, name=f"{label}-{n}", core=SUBJECT_CORE + n)
        for n in range(phase.nodes)
    ]
    try:
        for daemon in daemons:
            await daemon.wait_ready(args.ready_timeout)
        await asyncio.sleep(args.settle)
        idle_rss = [d.child.rss() for d in daemons]
        seeding = time.monotonic()
        asked = await asyncio.gather(
            *(ask_runs(d.api, [TASK], phase.count, args.clients) for d in daemons)
        )
        seed_s = time.monotonic() - seeding
        created = runs_figures([a for node in asked for a in node])
        children = [d.child for d in daemons]
        ramp_s = await wait_polled(service, phase.total, children, args.ramp_timeout)
        await asyncio.sleep(phase.interval + 1)
        figures = await measure(args, service, daemons, phase, url)
    finally:
        for daemon in daemons:
            await daemon.child.stop()
    per_node_rss = [
        round((rss - idle) / 1024 / phase.count, 2)
        for rss, idle in zip(figures.pop("rss_bytes"), idle_rss, strict=True)
    ]
    figures.update(
        seed_s=round(seed_s, 1),
        seed_runs_per_s=round(phase.total / seed_s, 1),
        ramp_s=ramp_s,
        **{f"seed_{k}": v for k, v in created.items()},
        kib_per_execution=max(per_node_rss),
        kib_per_execution_by_node=per_node_rss,
        logs=[str(d.child.log_path) for d in daemons],
    )
    return figures


async def measure(
    args: Any, service: Service, daemons: list[Daemon], phase: Phase, url: str
) -> dict[str, Any]:
    """The window: polls, gaps, CPU, and what the daemons' logs and metrics say in it."""
    before = [await counters(d.api) for d in daemons]
    dead_before = await pg_deadlocks(url)
    await service.post("/_mark")
    opened = time.time()
    cpu = [d.child.cpu_seconds() for d in daemons]
    service_cpu, db_cpu = service.child.cpu_seconds(), args.databases.cpu_seconds()
    window = args.minutes * 60
    await asyncio.sleep(window)
    cpu = [d.child.cpu_seconds() - c for d, c in zip(daemons, cpu, strict=True)]
    service_cpu = service.child.cpu_seconds() - service_cpu
    db_cpu = None if db_cpu is None else args.databases.cpu_seconds() - db_cpu
    stats = await service.get(f"/_stats/polls?interval={phase.interval}")
    rss = [d.child.rss() for d in daemons]
    after = [await counters(d.api) for d in daemons]
    dead_after = await pg_deadlocks(url)
    events: Counter[str] = Counter()
    for daemon in daemons:
        events.update(log_events(daemon.child.log_path, opened))
    polls = stats["polls"]
    total_cpu = sum(cpu)
    gap = stats["gap_max"]
    return {
        "nodes": phase.nodes,
        "in_flight": phase.total,
        "interval_s": phase.interval,
        "window_s": round(stats["seconds"], 1),
        "polls": polls,
        "polls_per_s": round(polls / stats["seconds"], 1),
        "polls_per_s_wanted": round(phase.total / phase.interval, 1),
        "gap_max_s": rounded(gap, 3),
        "gap_max_over_interval": rounded(None if gap is None else gap / phase.interval, 2),
        "over_3_intervals": stats["over_3_intervals"],
        "unpolled_in_window": stats["unpolled"],
        "cpu_percent": round(100 * total_cpu / window, 1),
        "cpu_percent_by_node": [round(100 * c / window, 1) for c in cpu],
        "cpu_us_per_poll": round(total_cpu / polls * 1e6, 1) if polls else None,
        "service_cpu_percent": round(100 * service_cpu / window, 1),
        "database_cpu_percent": None if db_cpu is None else round(100 * db_cpu / window, 1),
        "rss_mib": [round(r / 2**20, 1) for r in rss],
        "rss_bytes": rss,
        "lapses": sum(events[name] for name in LAPSES),
        "lapse_events": {name: events[name] for name in LAPSES},
        "leases_lost": moved(before, after, "leases_lost"),
        "lease_lost_lines": events["lease_lost"],
        "takeovers": moved(before, after, "takeovers"),
        "store_retries": events["store_retry"],
        "deadlocks_retried": events["deadlock_retried"],
        "deadlocks_detected": None
        if dead_before is None or dead_after is None
        else dead_after - dead_before,
    }


def moved(before: list[dict[str, float]], after: list[dict[str, float]], name: str) -> float:
    """How much counter ``name`` moved over all nodes."""
    return sum(a[name] - b[name] for a, b in zip(after, before, strict=True))


async def run_baseline(args: Any, service: Service, phase: Phase, scratch: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.baseline_poller", "--ids", str(phase.total)]
    command += ["--url", f"{service.url}/jobs/baseline-{phase.label}"]
    command += ["--interval", str(phase.interval)]
    child = Child.start(f"poller-{phase.label}", command, SUBJECT_CORE, scratch, {})
    try:
        await child.wait_line("loop", args.ready_timeout)
        await child.wait_line("ready", args.ready_timeout)
        await asyncio.sleep(args.settle)
        idle = child.rss()
        child.process.send_signal(signal.SIGUSR1)
        ramp_s = await wait_polled(service, phase.total, [child], args.ramp_timeout)
        await asyncio.sleep(phase.interval + 1)
        await service.post("/_mark")
        cpu = child.cpu_seconds()
        await asyncio.sleep(args.baseline_seconds)
        cpu = child.cpu_seconds() - cpu
        stats = await service.get(f"/_stats/polls?interval={phase.interval}")
        rss = child.rss()
    finally:
        await child.stop()
    polls = stats["polls"]
    gap = stats["gap_max"]
    return {
        "in_flight": phase.total,
        "interval_s": phase.interval,
        "ramp_s": ramp_s,
        "window_s": round(stats["seconds"], 1),
        "polls_per_s": round(polls / stats["seconds"], 1),
        "gap_max_over_interval": rounded(None if gap is None else gap / phase.interval, 2),
        "cpu_percent": round(100 * cpu / args.baseline_seconds, 1),
        "cpu_us_per_poll": round(cpu / polls * 1e6, 1) if polls else None,
        "kib_per_execution": round((rss - idle) / 1024 / phase.total, 2),
    }


async def run(args: Any) -> dict[str, Any]:
    phases = [Phase.parse(text) for text in args.phases.split(",")]
    results = []
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("polls", scratch) as service,
        ):
            args.databases = databases
            for phase in phases:
                await service.post("/_reset")
                mine = await run_ecron(args, service, phase, scratch)
                await service.post("/_reset")
                theirs = await run_baseline(args, service, phase, scratch)
                held = {
                    "phase": phase.label,
                    "ecron": mine,
                    "baseline": theirs,
                    "ratio": {
                        "polls_per_s": ratio(mine["polls_per_s"], theirs["polls_per_s"]),
                        "cpu_us_per_poll": ratio(
                            mine["cpu_us_per_poll"], theirs["cpu_us_per_poll"]
                        ),
                    },
                    "kept": kept(mine),
                }
                report(args, phase, held)
                results.append(held)
    params = {
        "database": args.database,
        "phases": args.phases,
        "minutes": args.minutes,
        "baseline_seconds": args.baseline_seconds,
        "clients": args.clients,
    }
    return emit("hold", params, {"phases": results})


def kept(mine: dict[str, Any]) -> bool:
    """Whether the node(s) kept everything they held: no lapse, no takeover, no lost lease,
    no deadlock retried or detected, every execution polled within three intervals."""
    return (
        mine["lapses"] == 0
        and mine["takeovers"] == 0
        and mine["leases_lost"] == 0
        and mine["deadlocks_retried"] == 0
        and not mine["deadlocks_detected"]
        and mine["over_3_intervals"] == 0
    )


def report(args: Any, phase: Phase, held: dict[str, Any]) -> None:
    mine, theirs = held["ecron"], held["baseline"]
    keys = [
        ("in flight", "in_flight"),
        ("seeding (API), s", "seed_s"),
        ("  runs/s", "seed_runs_per_s"),
        ("ramp until all polled, s", "ramp_s"),
        ("window, s", "window_s"),
        ("polls/s", "polls_per_s"),
        ("polls/s wanted (in flight / interval)", "polls_per_s_wanted"),
        ("largest gap / interval", "gap_max_over_interval"),
        ("executions not polled within 3 intervals", "over_3_intervals"),
        ("CPU, % of a core (all nodes)", "cpu_percent"),
        ("CPU per poll, µs", "cpu_us_per_poll"),
        ("KiB per execution", "kib_per_execution"),
        ("the service's CPU, % of a core", "service_cpu_percent"),
        ("PostgreSQL's CPU, % of a core", "database_cpu_percent"),
        ("lease lapses (log)", "lapses"),
        ("executions taken over (metrics)", "takeovers"),
        ("leases lost (metrics)", "leases_lost"),
        ("deadlocks retried (log)", "deadlocks_retried"),
        ("deadlocks detected (PostgreSQL)", "deadlocks_detected"),
        ("store retries, any (log)", "store_retries"),
    ]
    rows = [(label, mine.get(k), theirs.get(k)) for label, k in keys]
    rows += [(f"ratio ecron/plain: {k}", v, None) for k, v in held["ratio"].items()]
    rows.append(("kept everything it held", held["kept"], None))
    title = (
        f"hold: {phase.label} ({phase.nodes} node{'s' if phase.nodes > 1 else ''}), "
        f"{args.database}, {args.minutes:g} min"
    )
    table(title, rows, ("ecron", "plain aiohttp"))


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--phases", default=DEFAULT_PHASES, help="e.g. 10000x1s,2x25000x10s")
    options.add_argument("--minutes", type=float, default=5.0, help="measured window per phase")
    options.add_argument("--baseline-seconds", type=float, default=60.0)
    options.add_argument("--clients", type=int, default=16, help="concurrent run requests")
    options.add_argument("--settle", type=float, default=2.0, help="idle wait before, s")
    options.add_argument("--ramp-timeout", type=float, default=600.0)
    options.add_argument("--ready-timeout", type=float, default=120.0)
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

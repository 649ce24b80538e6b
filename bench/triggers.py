"""``triggers``: N tasks ``{every: 1s}`` for D seconds. Are all fire times triggered, once
each, on time, and persisted? Against in-memory APScheduler 3.11 posting the same triggers.

    .venv/bin/python -m bench.triggers --tasks 2000 --duration 20 [--database postgresql]

The user service (its own process, core 1) records every POST with its arrival time and
``X-Ecron-Scheduled-At``, and answers ``SUCCESS`` at once, so nothing is left to poll.
ecron (``ecron run`` from the bench venv) and then the baseline run on core 0, one after the
other. Each is measured over the window that starts at the first whole second ``--warmup``
seconds after it is ready and lasts ``--duration`` seconds; triggers arriving up to
``--drain`` seconds after the window still count (late, with their lag).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import (
    Child,
    Daemon,
    Databases,
    Service,
    count_rows,
    emit,
    parse,
    parser,
    percentile,
    profiler,
    ratio,
    rounded,
    scratch_dir,
    table,
    tasks_yaml,
    write_config,
)

LABEL_ECRON = "ecron"
LABEL_BASELINE = "baseline"


def parse_when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def analyse(records: list[list[Any]], start: float, end: float, tasks: int) -> dict[str, Any]:
    """The figures of one run from the service's records ``[arrival, task, scheduled, eid]``."""
    seen: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], float] = {}
    for arrival, task, scheduled, _eid in records:
        key = (task, scheduled)
        seen[key] += 1
        first.setdefault(key, arrival)
    lags = []
    for (_task, scheduled), arrival in first.items():
        at = parse_when(scheduled)
        if start <= at < end:
            lags.append((arrival - at) * 1000)
    # Whatever its fire time: how fast triggers went out during the window, and how late.
    during = [
        (arrival - parse_when(sched)) * 1000
        for arrival, _t, sched, _e in records
        if start <= arrival < end
    ]
    expected = tasks * round(end - start)
    return {
        "expected": expected,
        "triggered": len(lags),
        "missed": expected - len(lags),
        "duplicates": sum(n - 1 for n in seen.values() if n > 1),
        "lag_ms_p50": rounded(percentile(lags, 50)),
        "lag_ms_p99": rounded(percentile(lags, 99)),
        "lag_ms_max": rounded(max(lags) if lags else None),
        "posts_received": len(records),
        "fired_per_s": round(len(during) / (end - start), 1),
        "fired_lag_ms_p50": rounded(percentile(during, 50)),
        "fired_lag_ms_p99": rounded(percentile(during, 99)),
    }


async def measure(
    child: Child, ready_at: float, service: Service, label: str, args: Any
) -> dict[str, Any]:
    """Measure ``child`` over its window; the figures."""
    start = math.ceil(ready_at + args.warmup)
    end = start + args.duration
    await asyncio.sleep(max(0.0, start - time.time()))
    recorder = profiler(args, child, label == LABEL_ECRON)
    cpu, service_cpu = child.cpu_seconds(), service.child.cpu_seconds()
    db_cpu, system = args.databases.cpu_seconds(), child.system_seconds()
    await asyncio.sleep(max(0.0, end - time.time()))
    cpu, service_cpu = child.cpu_seconds() - cpu, service.child.cpu_seconds() - service_cpu
    system = child.system_seconds() - system
    db_cpu = None if db_cpu is None else args.databases.cpu_seconds() - db_cpu
    rss = child.rss()
    profile = await recorder.stop() if recorder else None
    await asyncio.sleep(args.drain)
    records = (await service.get(f"/_stats/triggers/{label}"))["records"]
    figures = analyse(records, start, end, args.tasks)
    figures.update(
        window_start=datetime.fromtimestamp(start, UTC).isoformat(),
        cpu_percent=round(100 * cpu / args.duration, 1),
        rss_mib=round(rss / 2**20, 1),
        cpu_system_share=round(system / cpu, 2) if cpu else None,
        service_cpu_percent=round(100 * service_cpu / args.duration, 1),
        database_cpu_percent=None if db_cpu is None else round(100 * db_cpu / args.duration, 1),
    )
    if profile is not None:
        figures["profile"] = profile
    return figures


async def run_ecron(args: Any, service: Service, url: str, scratch: Path) -> dict[str, Any]:
    yaml = tasks_yaml(f"{service.url}/jobs/{LABEL_ECRON}", args.tasks, "{every: 1s}")
    if args.concurrency:
        yaml = yaml.replace("    schedule:", f"    concurrency: {args.concurrency}\n    schedule:")
    config = write_config(scratch / "config", yaml)
    spawned = time.time()
    daemon = Daemon.start(config, url, scratch)
    try:
        ready_at = await daemon.wait_ready(args.ready_timeout)
        figures = await measure(daemon.child, ready_at, service, LABEL_ECRON, args)
        figures["ready_s"] = round(ready_at - spawned, 2)
    finally:
        await daemon.child.stop()
    start = datetime.fromisoformat(figures["window_start"]).timestamp()
    figures.update(await count_rows(url, start, start + args.duration))
    figures["every_execution_persisted"] = figures["rows_success"] >= figures["triggered"]
    return figures


async def run_baseline(args: Any, service: Service, scratch: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.baseline_scheduler", "every"]
    command += ["--tasks", str(args.tasks), "--url", f"{service.url}/jobs/{LABEL_BASELINE}"]
    child = Child.start("apscheduler", command, 0, scratch, {})
    try:
        await child.wait_line("ready", args.ready_timeout)
        return await measure(child, time.time(), service, LABEL_BASELINE, args)
    finally:
        await child.stop()


def _per_fire(figures: dict[str, Any]) -> float | None:
    """CPU per fire (% of a core over fires a second: the budget's "CPU per fire")."""
    fired = figures.get("fired_per_s")
    return figures["cpu_percent"] / fired if fired else None


async def run(args: Any) -> dict[str, Any]:
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("triggers", scratch) as service,
        ):
            args.databases = databases
            mine = await run_ecron(args, service, await databases.new(), scratch)
            theirs = await run_baseline(args, service, scratch)
    report(args, mine, theirs)
    keys = ("database", "tasks", "duration", "warmup", "drain", "concurrency")
    params = {k: getattr(args, k) for k in keys}
    ratios = {
        "lag_p99": ratio(mine["lag_ms_p99"], theirs["lag_ms_p99"]),
        "cpu": ratio(mine["cpu_percent"], theirs["cpu_percent"]),
        "cpu_per_fire": ratio(_per_fire(mine), _per_fire(theirs)),
    }
    return emit("triggers", params, {"ecron": mine, "baseline": theirs, "ratio": ratios})


def report(args: Any, mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    keys = [
        ("fire times expected", "expected"),
        ("triggered", "triggered"),
        ("missed", "missed"),
        ("duplicates", "duplicates"),
        ("lag p50, ms", "lag_ms_p50"),
        ("lag p99, ms", "lag_ms_p99"),
        ("lag max, ms", "lag_ms_max"),
        ("triggers sent/s in the window", "fired_per_s"),
        ("  their lag p50, ms", "fired_lag_ms_p50"),
        ("  their lag p99, ms", "fired_lag_ms_p99"),
        ("CPU, % of a core", "cpu_percent"),
        ("RSS, MiB", "rss_mib"),
        ("the service's CPU, % of a core", "service_cpu_percent"),
        ("PostgreSQL's CPU, % of a core", "database_cpu_percent"),
        ("rows in the window", "rows"),
        ("rows SUCCESS", "rows_success"),
    ]
    title = f"triggers: {args.tasks} tasks {{every: 1s}}, {args.duration}s window, {args.database}"
    rows = [(label, mine.get(k), theirs.get(k)) for label, k in keys]
    table(title, rows, ("ecron", "APScheduler"))


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--tasks", type=int, default=2000)
    options.add_argument("--duration", type=int, default=20, help="measured window, seconds")
    options.add_argument("--warmup", type=float, default=5.0, help="seconds after ready")
    options.add_argument("--drain", type=float, default=5.0, help="seconds for late triggers")
    options.add_argument("--ready-timeout", type=float, default=300.0)
    options.add_argument(
        "--concurrency", choices=["allow", "forbid", "replace"], help="the tasks' (default: theirs)"
    )
    options.add_argument("--profile", help="py-spy raw profile of ecron in the window, to FILE")
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

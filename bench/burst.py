"""``burst``: N tasks on one cron fire time. How long from that instant to the first and the
last trigger? Against in-memory APScheduler 3.11 with N ``CronTrigger`` jobs on one instant.

    .venv/bin/python -m bench.burst --tasks 10000 [--database postgresql]

Every task has the same 6-field cron (seconds first) that matches one second of the year,
``--lead`` seconds after the daemon is spawned, so the daemon is ready well before it (the
run says so when it was not). The user service (core 1) records each POST and answers
``SUCCESS`` at once. ecron, then the baseline, run on core 0. A run ends when all N
triggers have arrived or ``--timeout`` seconds after the fire time.
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
    PeakRss,
    Service,
    count_rows,
    emit,
    parse,
    parser,
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


def cron_at(at: float) -> str:
    """A 6-field cron (seconds first) matching the second ``at`` once a year, UTC."""
    when = datetime.fromtimestamp(at, UTC)
    return f'"{when.second} {when.minute} {when.hour} {when.day} {when.month} *"'


def analyse(records: list[list[Any]], at: float, tasks: int) -> dict[str, Any]:
    """The figures of one run from the service's records ``[arrival, task, scheduled, eid]``."""
    seen: Counter[str] = Counter()
    arrivals = []
    for arrival, task, scheduled, _eid in records:
        if abs(datetime.fromisoformat(scheduled).timestamp() - at) < 0.001:
            seen[task] += 1
            arrivals.append(arrival)
    return {
        "tasks": tasks,
        "triggered": len(seen),
        "all_triggered": len(seen) == tasks,
        "duplicates": sum(n - 1 for n in seen.values() if n > 1),
        "first_s": rounded(min(arrivals) - at if arrivals else None, 3),
        "last_s": rounded(max(arrivals) - at if arrivals else None, 3),
    }


async def wait_all(service: Service, label: str, tasks: int, at: float, timeout: float) -> None:
    """Wait until ``tasks`` triggers of ``label`` have arrived, or ``timeout`` after ``at``."""
    await asyncio.sleep(max(0.0, at - time.time()))
    while time.time() < at + timeout:
        if (await service.get(f"/_stats/count/{label}"))["count"] >= tasks:
            return
        await asyncio.sleep(0.1)


async def measure(
    child: Child, service: Service, label: str, at: float, args: Any
) -> dict[str, Any]:
    """Watch ``child`` through the burst at ``at``; its figures."""
    with PeakRss(child) as peak:
        await asyncio.sleep(max(0.0, at - 1 - time.time()))
        recorder = profiler(args, child, label == LABEL_ECRON)
        cpu = child.cpu_seconds()
        await wait_all(service, label, args.tasks, at, args.timeout)
        await asyncio.sleep(0.5)  # a duplicate right behind the last one would show
        cpu = child.cpu_seconds() - cpu
        profile = await recorder.stop() if recorder else None
    records = (await service.get(f"/_stats/triggers/{label}"))["records"]
    figures = analyse(records, at, args.tasks)
    figures.update(cpu_s=round(cpu, 2), peak_rss_mib=round(peak.peak / 2**20, 1))
    if profile is not None:
        figures["profile"] = profile
    return figures


async def run_ecron(args: Any, service: Service, url: str, scratch: Path) -> dict[str, Any]:
    spawned = time.time()
    at = math.ceil(spawned + args.lead)
    yaml = tasks_yaml(f"{service.url}/jobs/{LABEL_ECRON}", args.tasks, cron_at(at))
    config = write_config(scratch / "config", yaml)
    daemon = Daemon.start(config, url, scratch)
    try:
        ready_at = await daemon.wait_ready(args.lead + args.timeout)
        figures = await measure(daemon.child, service, LABEL_ECRON, at, args)
    finally:
        await daemon.child.stop()
    figures.update(ready_s=round(ready_at - spawned, 2), ready_before_fire=ready_at < at)
    rows = await count_rows(url, at, at + 0.001)
    figures.update(rows, every_execution_persisted=rows["rows_success"] >= figures["triggered"])
    return figures


async def run_baseline(args: Any, service: Service, scratch: Path) -> dict[str, Any]:
    at = math.ceil(time.time() + args.baseline_lead)
    command = [sys.executable, "-m", "bench.baseline_scheduler", "cron", "--at", str(at)]
    command += ["--tasks", str(args.tasks), "--url", f"{service.url}/jobs/{LABEL_BASELINE}"]
    child = Child.start("apscheduler", command, 0, scratch, {})
    try:
        await child.wait_line("ready", args.baseline_lead)
        return await measure(child, service, LABEL_BASELINE, at, args)
    finally:
        await child.stop()


async def run(args: Any) -> dict[str, Any]:
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("triggers", scratch) as service,
        ):
            mine = await run_ecron(args, service, await databases.new(), scratch)
            theirs = await run_baseline(args, service, scratch)
    report(args, mine, theirs)
    params = {k: getattr(args, k) for k in ("database", "tasks", "lead", "timeout")}
    ratios = {"last_s": ratio(mine["last_s"], theirs["last_s"])}
    return emit("burst", params, {"ecron": mine, "baseline": theirs, "ratio": ratios})


def report(args: Any, mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    keys = [
        ("tasks on the fire time", "tasks"),
        ("triggered", "triggered"),
        ("duplicates", "duplicates"),
        ("first trigger after, s", "first_s"),
        ("last trigger after, s", "last_s"),
        ("CPU during the burst, s", "cpu_s"),
        ("peak RSS, MiB", "peak_rss_mib"),
        ("rows SUCCESS", "rows_success"),
    ]
    rows = [(label, mine.get(k), theirs.get(k)) for label, k in keys]
    table(f"burst: {args.tasks} tasks on one fire time, {args.database}", rows, ("ecron", "APS"))


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--tasks", type=int, default=10_000)
    options.add_argument("--lead", type=float, default=30.0, help="spawn to fire time, s")
    options.add_argument("--baseline-lead", type=float, default=10.0)
    options.add_argument("--timeout", type=float, default=300.0, help="after the fire time, s")
    options.add_argument("--profile", help="py-spy raw profile of ecron in the burst, to FILE")
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

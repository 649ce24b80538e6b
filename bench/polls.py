"""``polls``: N in-flight executions polled every second. Polls per second, CPU per poll,
memory per execution, progress persisted; against a plain aiohttp poller (no database).

    .venv/bin/python -m bench.polls --executions 10000 [--database postgresql]

The daemon (ecron as installed: the bench venv) starts with one manual task
(``poll_interval: 1s``, ``concurrency: allow``, ``task_timeout: 1d``) and nothing in
flight; its idle RSS is read. Then N executions are made the way a user makes them:
``POST /api/v1/tasks/{name}/run`` from ``--clients`` (16) concurrent clients until N were
answered 202 (a 409 is asked again). ``--seed db`` makes them the old way instead, as a
labelled extra: N RUNNING rows written straight into the database with no owner, as a dead
node leaves them, which the daemon adopts by takeover. The JSON line says which
(``params.seed``, and ``seeding`` in each ecron run). The user service (core 1) answers
each trigger ``RUNNING`` and every poll ``RUNNING`` with a progress that changes each time.
Once every execution has been polled at least once and one second more (the ramp), the
service counts polls for ``--duration`` seconds while ecron's CPU is read. At the end the
stored progress of each row is compared with the last values the service reported for it.
The baseline poller (``bench/baseline_poller.py``) is measured the same way on the same
core. Then (unless ``--no-batch``) ecron runs again on a fresh database with the task's
``batch_poll_url`` set to the service's batch endpoint (PROTOCOL.md, "Batch polls"), so
the same executions are polled up to 100 a request: ``polls_per_s`` counts executions
polled, ``requests_per_s`` the HTTP requests that carried them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    Child,
    Daemon,
    Databases,
    Service,
    ask_runs,
    emit,
    metric,
    parse,
    parser,
    percentile,
    profiler,
    ratio,
    rounded,
    runs_figures,
    scratch_dir,
    table,
    write_config,
)

LABEL_ECRON = "ecron"
LABEL_BASELINE = "baseline"
LABEL_BATCH = "ecron_batch"
TASK = "polls"
#: ``--seed``: how the in-flight executions are made.
SEEDINGS = {
    "api": "by POST /api/v1/tasks/{name}/run",
    "db": "by rows written into the database and adopted (--seed db)",
}


def task_yaml(url: str, batch_poll_url: str | None = None) -> str:
    batch = f"    batch_poll_url: {batch_poll_url}\n" if batch_poll_url else ""
    return (
        "tasks:\n"
        f"  - name: {TASK}\n    schedule: manual\n    url: {url}\n"
        "    poll_interval: 1s\n    task_timeout: 1d\n    concurrency: allow\n" + batch
    )


async def seed_api(api: str, count: int, clients: int) -> dict[str, Any]:
    """``count`` runs of the task through ``POST /api/v1/tasks/{name}/run`` from ``clients``
    concurrent clients, as a user makes them; how long it took and what was answered."""
    started = time.monotonic()
    asked = await ask_runs(api, [TASK], count, clients)
    seconds = time.monotonic() - started
    figures = runs_figures(asked)
    if figures["runs_created"] < count:
        raise RuntimeError(f"only {figures['runs_created']} of {count} runs created: {figures}")
    latencies = [a.latency * 1000 for a in asked]
    return {
        "seeding": "api",
        "seed_s": round(seconds, 1),
        "seed_runs_per_s": round(count / seconds, 1),
        "seed_run_ms_p99": rounded(percentile(latencies, 99)),
        **{f"seed_{key}": value for key, value in figures.items()},
    }


async def seed_db(url: str, count: int) -> dict[str, Any]:
    """``count`` RUNNING executions of the task written into the database, owned by nobody
    (as a dead node leaves them), for the daemon to adopt; when the next poll is due is left
    unset (the column's name may change), so the adopting node decides."""
    from ecron.store.engine import Engines
    from ecron.store.tables import ExecutionRow, execution_table

    now = datetime.now(UTC)
    columns = set(execution_table.c.keys())
    rows = [
        {
            key: value
            for key, value in ExecutionRow(
                eid=f"bench-{n:06d}",
                task=TASK,
                scheduled_at=now - timedelta(milliseconds=n),
                trigger_kind="manual",
                status="RUNNING",
                created_at=now,
                triggered_at=now,
                last_report_at=now,
                deadline=now + timedelta(days=1),
            )
            .model_dump()
            .items()
            if key in columns
        }
        for n in range(count)
    ]
    started = time.monotonic()
    engines = Engines(url)
    try:
        for first in range(0, count, 1000):
            async with engines.write() as conn:
                await conn.execute(execution_table.insert(), rows[first : first + 1000])
    finally:
        await engines.dispose()
    return {"seeding": "db", "seed_s": round(time.monotonic() - started, 1)}


async def stored_progress(url: str) -> dict[str, float]:
    import sqlalchemy as sa

    from ecron.store.engine import Engines
    from ecron.store.tables import execution_table as ex

    engines = Engines(url)
    try:
        async with engines.read() as conn:
            rows = await conn.execute(sa.select(ex.c.eid, ex.c.progress).where(ex.c.task == TASK))
            return {eid: float(progress) for eid, progress in rows}
    finally:
        await engines.dispose()


async def ramp(service: Service, child: Child, count: int, timeout: float) -> dict[str, Any]:
    """Wait until all ``count`` executions have been polled at least once (all adopted and
    in the poll loop, however slow it is) and then one second more; how long it took."""
    started = time.monotonic()
    known = 0
    while time.monotonic() - started < timeout:
        child.check_alive()
        known = (await service.get("/_stats/polls"))["known"]
        if known >= count:
            break
        await asyncio.sleep(0.5)
    ramp_s = round(time.monotonic() - started, 1)
    await asyncio.sleep(1.0)
    recent = (await service.get("/_stats/polls"))["recent"]
    return {"ramp_s": ramp_s, "polled_at_start": known, "polled_last_2_5s_at_start": recent}


async def paces(api: str, seen: list[float], every: float = 1.0) -> None:
    """Read the daemon's ``ecron_poll_pace`` (how many polls it lets out at once) into
    ``seen`` every ``every`` seconds until cancelled: below its workers, the node held its
    polls back (its loop ran late, or the API was asked)."""
    while True:
        seen.append(await metric(api, "ecron_poll_pace"))
        await asyncio.sleep(every)


async def measure(
    child: Child, service: Service, count: int, args: Any, api: str | None = None
) -> dict[str, Any]:
    """Polls, CPU and memory of ``child`` over the window, once ``count`` are in flight
    (and, given the daemon's ``api``, its poll pace over the window)."""
    figures = await ramp(service, child, count, args.ramp_timeout)
    await service.post("/_mark")
    recorder = profiler(args, child, child.name == "ecron")
    cpu, service_cpu = child.cpu_seconds(), service.child.cpu_seconds()
    db_cpu, system = args.databases.cpu_seconds(), child.system_seconds()
    seen: list[float] = []
    sampling = asyncio.create_task(paces(api, seen)) if api else None
    await asyncio.sleep(args.duration)
    if sampling is not None:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
        figures.update(
            pace_min=min(seen, default=None),
            pace_mean=round(sum(seen) / len(seen), 1) if seen else None,
        )
    cpu, service_cpu = child.cpu_seconds() - cpu, service.child.cpu_seconds() - service_cpu
    system = child.system_seconds() - system
    db_cpu = None if db_cpu is None else args.databases.cpu_seconds() - db_cpu
    stats = await service.get("/_stats/polls")
    if recorder is not None:
        figures["profile"] = await recorder.stop()
    polls = stats["polls"]
    figures.update(
        in_flight=count,
        polls=polls,
        polls_per_s=round(polls / stats["seconds"], 1),
        requests_per_s=round(stats["requests"] / stats["seconds"], 1),
        interval_mean_s=rounded(stats["interval_mean"], 3),
        interval_p99_s=rounded(stats["interval_p99"], 3),
        cpu_percent=round(100 * cpu / args.duration, 1),
        cpu_us_per_poll=round(cpu / polls * 1e6, 1) if polls else None,
        rss_mib=round(child.rss() / 2**20, 1),
        cpu_system_share=round(system / cpu, 2) if cpu else None,
        service_cpu_percent=round(100 * service_cpu / args.duration, 1),
        database_cpu_percent=None if db_cpu is None else round(100 * db_cpu / args.duration, 1),
    )
    return figures


def kib_per(rss_mib: float, idle_rss: int, count: int) -> float:
    """KiB of RSS per in-flight execution: (RSS in flight - RSS idle) / count."""
    return round((rss_mib * 2**20 - idle_rss) / 1024 / count, 2)


def persisted(stored: dict[str, float], reported: dict[str, list[float]]) -> dict[str, Any]:
    """How many rows hold one of the last values the service reported, or at least advanced."""
    matched = sum(1 for eid, values in reported.items() if stored.get(eid) in values)
    advanced = sum(1 for eid in reported if stored.get(eid, 0) > 0)
    total = max(1, len(stored))
    return {
        "progress_matches_recent": round(matched / total, 4),
        "progress_advanced": round(advanced / total, 4),
        "progress_persisted": advanced == len(stored) > 0,
    }


async def run_ecron(
    args: Any, service: Service, url: str, scratch: Path, batch: bool = False
) -> dict[str, Any]:
    label = LABEL_BATCH if batch else LABEL_ECRON
    batch_url = f"{service.url}/batch/{label}" if batch else None
    tasks = task_yaml(f"{service.url}/jobs/{label}", batch_url)
    config = write_config(scratch / f"config-{label}", tasks)
    daemon = Daemon.start(config, url, scratch, name=label)
    try:
        await daemon.wait_ready(args.ready_timeout)
        await asyncio.sleep(args.settle)
        idle_cpu = daemon.child.cpu_seconds()
        await asyncio.sleep(args.settle)
        idle_cpu = daemon.child.cpu_seconds() - idle_cpu
        idle_rss = daemon.child.rss()
        if args.seed == "api":
            seeded = await seed_api(daemon.api, args.executions, args.clients)
        else:
            seeded = await seed_db(url, args.executions)
        measured = await measure(daemon.child, service, args.executions, args, daemon.api)
        figures = {**seeded, **measured}
    finally:
        await daemon.child.stop()
    figures.update(
        idle_cpu_percent=round(100 * idle_cpu / args.settle, 1),
        idle_rss_mib=round(idle_rss / 2**20, 1),
        kib_per_execution=round(
            (figures["rss_mib"] * 2**20 - idle_rss) / 1024 / args.executions, 2
        ),
    )
    reported = await service.get("/_stats/progress")
    figures.update(persisted(await stored_progress(url), reported))
    return figures


async def run_baseline(args: Any, service: Service, scratch: Path) -> dict[str, Any]:
    import signal

    command = [sys.executable, "-m", "bench.baseline_poller", "--ids", str(args.executions)]
    command += ["--url", f"{service.url}/jobs/{LABEL_BASELINE}"]
    child = Child.start("poller", command, 0, scratch, {})
    try:
        await child.wait_line("ready", args.ready_timeout)
        await asyncio.sleep(args.settle)
        idle_rss = child.rss()
        child.process.send_signal(signal.SIGUSR1)
        figures = await measure(child, service, args.executions, args)
    finally:
        await child.stop()
    figures.update(
        idle_rss_mib=round(idle_rss / 2**20, 1),
        kib_per_execution=round(
            (figures["rss_mib"] * 2**20 - idle_rss) / 1024 / args.executions, 2
        ),
    )
    return figures


async def run(args: Any) -> dict[str, Any]:
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("polls", scratch) as service,
        ):
            args.databases = databases
            mine = await run_ecron(args, service, await databases.new(), scratch)
            await service.post("/_reset")
            theirs = await run_baseline(args, service, scratch)
            batched = None
            if args.batch:
                await service.post("/_reset")
                batched = await run_ecron(args, service, await databases.new(), scratch, True)
    ratios = {
        "polls_per_s": ratio(mine["polls_per_s"], theirs["polls_per_s"]),
        "cpu_us_per_poll": ratio(mine["cpu_us_per_poll"], theirs["cpu_us_per_poll"]),
        "kib_per_execution": ratio(mine["kib_per_execution"], theirs["kib_per_execution"]),
    }
    figures = {"ecron": mine, "baseline": theirs, "ratio": ratios}
    report(args, mine, theirs, ratios)
    if batched is not None:
        figures["ecron_batch"] = batched
        figures["batch_ratio"] = {
            "polls_per_s": ratio(batched["polls_per_s"], mine["polls_per_s"]),
            "cpu_us_per_poll": ratio(batched["cpu_us_per_poll"], mine["cpu_us_per_poll"]),
        }
        report_batch(args, mine, batched)
    keys = ("database", "executions", "duration", "batch", "seed", "clients")
    params = {k: getattr(args, k) for k in keys}
    return emit("polls", params, figures)


def report(args: Any, mine: dict[str, Any], theirs: dict[str, Any], ratios: dict[str, Any]) -> None:
    keys = [
        ("in flight", "in_flight"),
        ("made by (seeding)", "seeding"),
        ("seeding, s", "seed_s"),
        ("  run requests/s (API seeding)", "seed_runs_per_s"),
        ("ramp until all polled, s", "ramp_s"),
        ("polls/s", "polls_per_s"),
        ("mean interval per execution, s", "interval_mean_s"),
        ("p99 interval, s", "interval_p99_s"),
        ("CPU, % of a core", "cpu_percent"),
        ("CPU per poll, µs", "cpu_us_per_poll"),
        ("poll pace (polls out at once), min / mean", "pace_min"),
        ("  mean", "pace_mean"),
        ("the service's CPU, % of a core", "service_cpu_percent"),
        ("PostgreSQL's CPU, % of a core", "database_cpu_percent"),
        ("RSS idle, MiB", "idle_rss_mib"),
        ("RSS in flight, MiB", "rss_mib"),
        ("KiB per execution", "kib_per_execution"),
        ("progress advanced, fraction", "progress_advanced"),
        ("progress = a recent report", "progress_matches_recent"),
    ]
    rows = [(label, mine.get(k), theirs.get(k)) for label, k in keys]
    rows += [(f"ratio ecron/plain: {k}", v, None) for k, v in ratios.items()]
    title = (
        f"polls: {args.executions} in flight, poll_interval 1s, {args.database}, "
        f"made {SEEDINGS[args.seed]}"
    )
    table(title, rows, ("ecron", "plain aiohttp"))


def report_batch(args: Any, mine: dict[str, Any], batched: dict[str, Any]) -> None:
    keys = [
        ("executions polled/s", "polls_per_s"),
        ("HTTP requests/s", "requests_per_s"),
        ("mean interval per execution, s", "interval_mean_s"),
        ("p99 interval, s", "interval_p99_s"),
        ("CPU, % of a core", "cpu_percent"),
        ("CPU per execution polled, µs", "cpu_us_per_poll"),
        ("the service's CPU, % of a core", "service_cpu_percent"),
        ("RSS in flight, MiB", "rss_mib"),
        ("progress advanced, fraction", "progress_advanced"),
    ]
    rows = [(label, mine.get(k), batched.get(k)) for label, k in keys]
    title = (
        f"polls: {args.executions} in flight, one GET each vs batch_poll_url, {args.database}, "
        f"made {SEEDINGS[args.seed]}"
    )
    table(title, rows, ("ecron, per execution", "ecron, batch"))


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--executions", type=int, default=10_000)
    options.add_argument("--duration", type=float, default=20.0, help="measured window, s")
    options.add_argument("--settle", type=float, default=3.0, help="idle wait before, s")
    options.add_argument("--ramp-timeout", type=float, default=300.0)
    options.add_argument("--ready-timeout", type=float, default=120.0)
    options.add_argument("--profile", help="py-spy raw profile of ecron in the window, to FILE")
    options.add_argument(
        "--seed",
        choices=sorted(SEEDINGS),
        default="api",
        help="how the executions are made: run requests through the API, as a user makes "
        "them (default), or RUNNING rows written into the database for the daemon to adopt",
    )
    options.add_argument("--clients", type=int, default=16, help="concurrent run requests")
    options.add_argument(
        "--batch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure ecron polling through a batch endpoint (default: yes)",
    )
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

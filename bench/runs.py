"""``runs``: runs asked through ``POST /api/v1/tasks/{name}/run`` by concurrent clients.
How fast, at what CPU against a scheduled fire, whether the rate holds over 10,000, and
whether the API still answers once the node has more polls due than it can send.

    .venv/bin/python -m bench.runs --runs 10000 [--database postgresql]

Three phases, each on a fresh database and a fresh daemon (ecron as installed: the bench
venv, on core 0); the user service (``bench/service.py``) runs on core 1, and so do this
script's clients (``--client-core``), so that core 0 is ecron's alone.

- ``idle``: ``--tasks`` (50) manual tasks, ``concurrency: allow``, whose jobs are long and
  polled hourly (``poll_interval: 1h``), so nothing but the runs themselves costs. The
  clients (``--clients``, 16, each one request at a time, the tasks in turn, a 409 asked
  again) ask for ``--runs`` runs in a row. Figures: runs/s overall, of the first and of
  the last ``--edge`` (500) runs (the rate must hold), the latency of the run requests
  (p50/p99/max), and ecron's CPU per run: its CPU from the first request until the service
  has received every run's trigger, over the runs.
- ``fires`` (the baseline): ``--fire-tasks`` (2,000) tasks ``{every: 1s}`` answered
  ``SUCCESS`` at once, as in ``bench.triggers``, over a ``--fire-duration`` (10 s) window:
  fires/s (triggers that arrived in the window) and ecron's CPU per fire. ``ratio`` is
  idle runs/s over fires/s (target ≥ 0.5) and CPU per run over CPU per fire (≤ 2).
- ``ceiling``: the same tasks, but the jobs last ``--job-seconds`` (600) and are polled
  every ``--poll-interval`` (100 ms), so that past a few hundred in flight the node has
  more polls due than it can send. The clients ask for runs until ``--ceiling-runs``
  (3,000) were created
  or ``--duration`` (180 s) passed, while a reader asks ``GET /api/v1/tasks`` in a loop
  (``--read-pause`` between two); then ``--hold`` (15 s) with the reader only. Figures:
  p50/p99/max of the run requests and of the reads (targets: p99 ≤ 250 ms both), runs
  created, in flight at the end, polls/s the service received (over the phase, and during
  the hold), the largest gap between two polls of one execution (its trigger counts as
  the first; the time since its last poll counts at the end) against the interval each
  would get if the polls sent in the hold were shared evenly (in flight / polls/s, at
  least the poll interval), how many executions went more than 3 intervals unpolled, and,
  as the daemon gave them at the end, ``/readyz``'s body and the ``/metrics`` lines whose
  names hold ``saturat`` or ``poll_lag``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    SERVICE_CORE,
    Child,
    Daemon,
    Databases,
    RunAsked,
    Service,
    ask_runs,
    emit,
    parse,
    parser,
    percentile,
    profiler,
    ratio,
    rounded,
    runs_figures,
    scratch_dir,
    table,
    tasks_yaml,
    write_config,
)
from bench.triggers import analyse

PHASES = ("idle", "fires", "ceiling")
#: The metrics read at the end of the ceiling phase: every line whose name holds one of these.
METRIC_WORDS = ("saturat", "poll_lag")
IN_FLIGHT = "ecron_executions_in_flight"
#: The ceiling phase's ``poll_interval``, seconds, unless ``--poll-interval`` says: issue 31
#: reads the node past its ceiling with 3,000 in flight polled every 100 ms.
POLL_INTERVAL_S = 0.1


def manual_tasks(url: str, count: int, poll_interval: str, timeout: str) -> str:
    """``count`` manual tasks r0, r1, ... (``concurrency: allow``) posting to ``url``."""
    lines = ["tasks:"]
    for n in range(count):
        lines += [
            f"  - name: r{n}",
            "    schedule: manual",
            f"    url: {url}",
            "    concurrency: allow",
            f"    poll_interval: {poll_interval}",
            f"    task_timeout: {timeout}",
        ]
    return "\n".join(lines) + "\n"


def task_names(count: int) -> list[str]:
    return [f"r{n}" for n in range(count)]


def latency_figures(seconds: list[float], prefix: str) -> dict[str, float | None]:
    """p50, p99 and max in ms of some requests' latencies, given in seconds."""
    values = [value * 1000 for value in seconds]
    return {
        f"{prefix}_ms_p50": rounded(percentile(values, 50)),
        f"{prefix}_ms_p99": rounded(percentile(values, 99)),
        f"{prefix}_ms_max": rounded(max(values) if values else None),
    }


def late(figures: dict[str, Any]) -> dict[str, Any]:
    """The same figures, named as those of the second half of the phase's creating."""
    return {f"{key}_late": value for key, value in figures.items()}


def rate_figures(asked: list[RunAsked], started: float, edge: int) -> dict[str, Any]:
    """Runs/s overall, of the first ``edge`` runs created and of the last ``edge``: each
    the runs answered 202 over the time from the first request (or the answer to the run
    before the last ``edge``) to the answer of the last one counted."""
    ends = sorted(a.at + a.latency for a in asked if a.status == 202)
    n = len(ends)
    if not n:
        return {"runs_per_s": None, "edge": 0}
    edge = max(1, min(edge, n // 2 or 1))
    first = edge / (ends[edge - 1] - started)
    last = edge / (ends[-1] - (ends[-edge - 1] if n > edge else started))
    return {
        "seconds": round(ends[-1] - started, 2),
        "runs_per_s": round(n / (ends[-1] - started), 1),
        "edge": edge,
        "runs_per_s_first": round(first, 1),
        "runs_per_s_last": round(last, 1),
        "last_over_first": round(last / first, 3),
    }


async def get_text(url: str, timeout: float = 30.0) -> tuple[int, str]:
    """GET ``url``: its status and body (0 and the error without an answer)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url) as response,
        ):
            return response.status, await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"


async def in_flight(api: str) -> float | None:
    """``ecron_executions_in_flight`` from ``/metrics`` (None when not there)."""
    _, text = await get_text(f"{api}/metrics")
    for line in text.splitlines():
        if line.startswith(f"{IN_FLIGHT} "):
            return float(line.split()[1])
    return None


async def wait_triggers(service: Service, label: str, count: int, timeout: float) -> int:
    """Wait until the service has received ``count`` triggers of ``label``; how many came."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        seen = (await service.get(f"/_stats/count/{label}"))["count"]
        if seen >= count:
            break
        await asyncio.sleep(0.1)
    return int(seen)


class Meters:
    """The CPU used over a window by a process (ecron or a baseline), the user service, this
    script (the clients and the reader) and the embedded PostgreSQL server (None on SQLite)."""

    def __init__(self, child: Child, service: Service, databases: Databases) -> None:
        self.readers = {
            "cpu": child.cpu_seconds,
            "service_cpu": service.child.cpu_seconds,
            "client_cpu": own_cpu,
            "database_cpu": databases.cpu_seconds,
        }
        self.start = {name: read() for name, read in self.readers.items()}

    def used(self) -> dict[str, float | None]:
        """CPU seconds of each since the start."""
        result: dict[str, float | None] = {}
        for name, read in self.readers.items():
            now, then = read(), self.start[name]
            result[name] = None if now is None or then is None else now - then
        return result


def cpu_figures(used: dict[str, float | None], seconds: float) -> dict[str, float | None]:
    """Each CPU as % of a core over ``seconds``."""
    return {
        f"{name}_percent": None if value is None else round(100 * value / seconds, 1)
        for name, value in used.items()
    }


def own_cpu() -> float:
    """This script's CPU so far (its clients and reader)."""
    times = os.times()
    return times.user + times.system


# -- idle: runs of jobs polled hourly --------------------------------------------------------


async def run_idle(args: Any, service: Service, url: str, scratch: Path) -> dict[str, Any]:
    label = "idle"
    yaml = manual_tasks(f"{service.url}/jobs/{label}", args.tasks, "1h", "1d")
    daemon = Daemon.start(write_config(scratch / "config-idle", yaml), url, scratch, "ecron-idle")
    try:
        await daemon.wait_ready(args.ready_timeout)
        await asyncio.sleep(args.settle)
        rss_idle = daemon.child.rss()
        recorder = profiler(args, daemon.child, args.profile_phase == "idle")
        meters = Meters(daemon.child, service, args.databases)
        started = time.monotonic()
        asked = await ask_runs(daemon.api, task_names(args.tasks), args.runs, args.clients)
        asked_end = time.monotonic()
        daemon.child.check_alive()
        created = runs_figures(asked)
        arrived = await wait_triggers(service, label, created["runs_created"], args.drain_timeout)
        seconds = time.monotonic() - started
        used = meters.used()
        cpu = used["cpu"] or 0.0
        profile = await recorder.stop() if recorder else None
        rss = daemon.child.rss()
        held = await in_flight(daemon.api)
    finally:
        await daemon.child.stop()
    records = (await service.get(f"/_stats/triggers/{label}"))["records"]
    eids = [record[3] for record in records]
    runs = created["runs_created"]
    figures: dict[str, Any] = {
        **created,
        **rate_figures(asked, started, args.edge),
        **latency_figures([a.latency for a in asked], "run"),
        "requests_s": round(asked_end - started, 2),
        "triggers_received": arrived,
        "trigger_duplicates": len(eids) - len(set(eids)),
        "all_triggered": arrived >= runs and set(eids) >= {a.eid for a in asked if a.eid},
        "window_s": round(seconds, 2),
        "cpu_us_per_run": round(cpu / runs * 1e6, 1) if runs else None,
        **cpu_figures(used, seconds),
        "rss_mib_idle": round(rss_idle / 2**20, 1),
        "rss_mib": round(rss / 2**20, 1),
        "kib_per_run_in_flight": round((rss - rss_idle) / 1024 / runs, 2) if runs else None,
        "in_flight_end": held,
    }
    if profile is not None:
        figures["profile"] = profile
    return figures


# -- fires: the scheduled fire rate and its CPU, the comparison point -----------------------


async def run_fires(args: Any, service: Service, url: str, scratch: Path) -> dict[str, Any]:
    label = "fires"
    yaml = tasks_yaml(f"{service.url}/jobs/{label}", args.fire_tasks, "{every: 1s}")
    daemon = Daemon.start(write_config(scratch / "config-fires", yaml), url, scratch, "ecron-fires")
    try:
        ready_at = await daemon.wait_ready(args.ready_timeout)
        start = math.ceil(ready_at + args.fire_warmup)
        end = start + args.fire_duration
        await asyncio.sleep(max(0.0, start - time.time()))
        meters = Meters(daemon.child, service, args.databases)
        await asyncio.sleep(max(0.0, end - time.time()))
        used = meters.used()
        await asyncio.sleep(args.fire_drain)
    finally:
        await daemon.child.stop()
    records = (await service.get(f"/_stats/triggers/{label}"))["records"]
    figures = analyse(records, start, end, args.fire_tasks)
    fired = sum(1 for record in records if start <= record[0] < end)
    cpu = used["cpu"] or 0.0
    figures.update(
        tasks=args.fire_tasks,
        window_s=args.fire_duration,
        fired_in_window=fired,
        cpu_us_per_fire=round(cpu / fired * 1e6, 1) if fired else None,
        **cpu_figures(used, args.fire_duration),
    )
    return figures


# -- ceiling: more polls due than the node can send ------------------------------------------


class Reader:
    """``GET /api/v1/tasks`` in a loop until stopped: (asked at, latency s, status)."""

    def __init__(self, api: str, pause: float) -> None:
        self.api = api
        self.pause = pause
        self.reads: list[tuple[float, float, int]] = []
        self.running = True

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while self.running:
                asked = time.monotonic()
                try:
                    async with session.get(f"{self.api}/api/v1/tasks") as response:
                        await response.read()
                        status = response.status
                except (aiohttp.ClientError, TimeoutError):
                    status = 0
                self.reads.append((asked, time.monotonic() - asked, status))
                await asyncio.sleep(self.pause)


async def run_ceiling(args: Any, service: Service, url: str, scratch: Path) -> dict[str, Any]:
    label = "ceiling"
    interval = args.poll_interval
    poll = f"{interval:g}s"
    yaml = manual_tasks(f"{service.url}/jobs/{label}", args.tasks, poll, "1h")
    config = write_config(scratch / "config-ceiling", yaml)
    daemon = Daemon.start(config, url, scratch, "ecron-ceiling")
    reader = Reader(daemon.api, args.read_pause)
    try:
        await daemon.wait_ready(args.ready_timeout)
        await asyncio.sleep(args.settle)
        recorder = profiler(args, daemon.child, args.profile_phase == "ceiling")
        polls_start = (await service.get("/_stats/runs"))["polls_total"]
        meters = Meters(daemon.child, service, args.databases)
        started = time.monotonic()
        reading = asyncio.create_task(reader.run())
        until = started + args.duration
        names = task_names(args.tasks)
        asked = await ask_runs(daemon.api, names, args.ceiling_runs, args.clients, until)
        created_at = time.monotonic()
        polls_created = (await service.get("/_stats/runs"))["polls_total"]
        await asyncio.sleep(args.hold)
        reader.running = False
        await reading
        ended = time.monotonic()
        daemon.child.check_alive()
        # Every run's trigger has arrived by now, but on a machine far slower than asked for.
        await wait_triggers(service, label, runs_figures(asked)["runs_created"], 30)
        stats = await service.get(f"/_stats/runs?interval={interval}")
        seconds = ended - started
        used = meters.used()
        profile = await recorder.stop() if recorder else None
        readyz_status, readyz = await get_text(f"{daemon.api}/readyz")
        _, metrics = await get_text(f"{daemon.api}/metrics")
        rss = daemon.child.rss()
    finally:
        reader.running = False
        await daemon.child.stop()
    created = runs_figures(asked)
    half = started + (created_at - started) / 2
    hold_s = ended - created_at
    polls = stats["polls_total"] - polls_start
    held = next(
        (
            float(line.split()[1])
            for line in metrics.splitlines()
            if line.startswith(f"{IN_FLIGHT} ")
        ),
        None,
    )
    hold_polls = stats["polls_total"] - polls_created
    hold_polls_per_s = round(hold_polls / hold_s, 1) if hold_s > 0 else 0.0
    # Each execution's interval if the polls the node sends were shared evenly (never
    # shorter than asked): the largest gap is read against it (none starved).
    even = max(interval, stats["running"] / hold_polls_per_s) if hold_polls_per_s else None
    figures: dict[str, Any] = {
        **created,
        "creating_s": round(created_at - started, 2),
        "runs_per_s": round(created["runs_created"] / (created_at - started), 1),
        **latency_figures([a.latency for a in asked], "run"),
        **late(latency_figures([a.latency for a in asked if a.at >= half], "run")),
        "reads": len(reader.reads),
        "reads_unanswered": sum(1 for r in reader.reads if r[2] != 200),
        **latency_figures([r[1] for r in reader.reads], "read"),
        **late(latency_figures([r[1] for r in reader.reads if r[0] >= half], "read")),
        "in_flight_end": held,
        "service_running_end": stats["running"],
        "polls_per_s": round(polls / seconds, 1),
        "polls_per_s_hold": hold_polls_per_s,
        "poll_demand_per_s": round(stats["running"] / interval, 1),
        "past_the_ceiling": hold_polls_per_s < 0.9 * stats["running"] / interval,
        "trigger_duplicates": stats["duplicates"],
        "triggered": stats["triggered"],
        "never_polled": stats["never_polled"],
        "gap_max_s": rounded(stats["gap_max_s"], 2),
        "gap_p50_s": rounded(stats["gap_p50_s"], 2),
        "gap_p99_s": rounded(stats["gap_p99_s"], 2),
        "even_interval_s": rounded(even, 2),
        "gap_max_over_even": ratio(stats["gap_max_s"], even),
        "unpolled_over_3_intervals": stats["over_3_intervals"],
        "window_s": round(seconds, 2),
        **cpu_figures(used, seconds),
        "rss_mib": round(rss / 2**20, 1),
        "readyz": {"status": readyz_status, "body": readyz},
        "metrics": [
            line
            for line in metrics.splitlines()
            if not line.startswith("#") and any(word in line.split("{")[0] for word in METRIC_WORDS)
        ],
    }
    if profile is not None:
        figures["profile"] = profile
    return figures


# -- the run ---------------------------------------------------------------------------------


def pin_clients(core: int) -> None:
    """This script (the clients, the reader) onto ``core`` (-1: not pinned)."""
    # Without taskset the daemon would inherit this pinning: then nothing is pinned.
    if 0 <= core < (os.cpu_count() or 1) and shutil.which("taskset"):
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(0, {core})


async def run(args: Any) -> dict[str, Any]:
    phases = [p for p in args.phases.split(",") if p]
    unknown = set(phases) - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phases: {sorted(unknown)} (known: {', '.join(PHASES)})")
    idle = fires = ceiling = None
    with scratch_dir(args.keep) as scratch:
        async with Databases(args.database, scratch) as databases:
            args.databases = databases
            pin_clients(args.client_core)  # after the database server started: not it
            if "idle" in phases:
                async with Service.running("runs", scratch, job_seconds=args.job_seconds) as svc:
                    idle = await run_idle(args, svc, await databases.new(), scratch)
                report_idle(args, idle)
            if "fires" in phases:
                async with Service.running("triggers", scratch) as svc:
                    fires = await run_fires(args, svc, await databases.new(), scratch)
            if "ceiling" in phases:
                async with Service.running("runs", scratch, job_seconds=args.job_seconds) as svc:
                    ceiling = await run_ceiling(args, svc, await databases.new(), scratch)
                report_ceiling(args, ceiling)
    ratios = {
        "runs_per_s_over_fires_per_s": ratio(
            idle and idle["runs_per_s"], fires and fires["fired_per_s"]
        ),
        "cpu_per_run_over_cpu_per_fire": ratio(
            idle and idle["cpu_us_per_run"], fires and fires["cpu_us_per_fire"]
        ),
    }
    if idle is not None or fires is not None:
        report_ratios(idle, fires, ratios)
    keys = (
        "database",
        "phases",
        "runs",
        "tasks",
        "clients",
        "edge",
        "fire_tasks",
        "fire_duration",
        "duration",
        "hold",
        "job_seconds",
        "read_pause",
        "client_core",
    )
    params = {k: getattr(args, k) for k in keys}
    ecron = {"idle": idle, "ceiling": ceiling}
    return emit("runs", params, {"ecron": ecron, "baseline": fires, "ratio": ratios})


def report_idle(args: Any, f: dict[str, Any]) -> None:
    rows = [
        ("runs created", f["runs_created"], None),
        ("  distinct ids / triggers received", f["runs_distinct_ids"], f["triggers_received"]),
        ("  409s asked again / other answers", f["conflicts_409"], str(f["other_answers"])),
        ("runs/s overall", f["runs_per_s"], None),
        (
            f"runs/s first {f['edge']} / last {f['edge']}",
            f["runs_per_s_first"],
            f["runs_per_s_last"],
        ),
        ("  last / first", f["last_over_first"], None),
        ("run request p50 / p99, ms", f["run_ms_p50"], f["run_ms_p99"]),
        ("run request max, ms", f["run_ms_max"], None),
        ("CPU per run, µs", f["cpu_us_per_run"], None),
        ("CPU, % of a core: ecron / service", f["cpu_percent"], f["service_cpu_percent"]),
        (
            "  the clients' (this script's) / PostgreSQL's CPU, %",
            f["client_cpu_percent"],
            f["database_cpu_percent"],
        ),
        ("RSS idle / at the end, MiB", f["rss_mib_idle"], f["rss_mib"]),
        ("KiB per run in flight", f["kib_per_run_in_flight"], None),
        ("in flight at the end (/metrics)", f["in_flight_end"], None),
    ]
    title = (
        f"runs, idle: {args.runs} runs of {args.tasks} tasks (poll_interval 1h), "
        f"{args.clients} clients, {args.database}"
    )
    table(title, rows, ("value", ""))


def report_ratios(
    idle: dict[str, Any] | None, fires: dict[str, Any] | None, ratios: dict[str, Any]
) -> None:
    rows = [
        (
            "per second: runs (idle) / fires",
            idle and idle["runs_per_s"],
            fires and fires["fired_per_s"],
        ),
        (
            "CPU µs: per run / per fire",
            idle and idle["cpu_us_per_run"],
            fires and fires["cpu_us_per_fire"],
        ),
        ("ratio runs/s over fires/s (≥ 0.5)", ratios["runs_per_s_over_fires_per_s"], None),
        ("ratio CPU per run over per fire (≤ 2)", ratios["cpu_per_run_over_cpu_per_fire"], None),
    ]
    if fires is not None:
        rows += [
            ("fires: tasks {every: 1s} / expected", fires["tasks"], fires["expected"]),
            ("fires: triggered / missed", fires["triggered"], fires["missed"]),
            ("fires: lag p99, ms / CPU %", fires["lag_ms_p99"], fires["cpu_percent"]),
        ]
    table("runs against scheduled fires", rows, ("runs", "fires"))


def report_ceiling(args: Any, f: dict[str, Any]) -> None:
    rows = [
        ("runs created / in", f["runs_created"], f["creating_s"]),
        ("  409s / other answers", f["conflicts_409"], str(f["other_answers"])),
        ("in flight at the end: /metrics / service", f["in_flight_end"], f["service_running_end"]),
        ("run request p50 / p99, ms", f["run_ms_p50"], f["run_ms_p99"]),
        ("  max / p99 of the second half, ms", f["run_ms_max"], f["run_ms_p99_late"]),
        ("reads of /api/v1/tasks / unanswered", f["reads"], f["reads_unanswered"]),
        ("read p50 / p99, ms", f["read_ms_p50"], f["read_ms_p99"]),
        ("  max / p99 of the second half, ms", f["read_ms_max"], f["read_ms_p99_late"]),
        ("polls/s: over the phase / in the hold", f["polls_per_s"], f["polls_per_s_hold"]),
        (
            "polls due/s at the end / past the ceiling",
            f["poll_demand_per_s"],
            f["past_the_ceiling"],
        ),
        ("largest gap between polls, s / p99", f["gap_max_s"], f["gap_p99_s"]),
        (
            "  even share of the polls: interval, s / largest gap over it",
            f["even_interval_s"],
            f["gap_max_over_even"],
        ),
        (
            "unpolled > 3 intervals / never polled",
            f["unpolled_over_3_intervals"],
            f["never_polled"],
        ),
        ("trigger duplicates", f["trigger_duplicates"], None),
        ("CPU, % of a core: ecron / service", f["cpu_percent"], f["service_cpu_percent"]),
        (
            "  the clients' (this script's) / PostgreSQL's CPU, %",
            f["client_cpu_percent"],
            f["database_cpu_percent"],
        ),
        ("RSS at the end, MiB", f["rss_mib"], None),
    ]
    title = (
        f"runs, ceiling: up to {args.ceiling_runs} runs or {args.duration}s, jobs of "
        f"{args.job_seconds:g}s polled every {args.poll_interval:g}s, "
        f"{args.clients} clients + 1 reader, {args.database}"
    )
    table(title, rows, ("value", ""))
    print(f"  /readyz at the end: {f['readyz']['status']} {f['readyz']['body']}")
    for line in f["metrics"] or ["(no /metrics line names saturation or poll lag)"]:
        print(f"  {line}")


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--runs", type=int, default=10_000, help="runs to create per phase")
    options.add_argument("--tasks", type=int, default=50, help="manual tasks the runs go to")
    options.add_argument("--clients", type=int, default=16, help="concurrent run requests")
    options.add_argument("--phases", default=",".join(PHASES), help="of idle,fires,ceiling")
    options.add_argument("--edge", type=int, default=500, help="idle: first and last N runs")
    options.add_argument("--settle", type=float, default=2.0, help="idle wait before, s")
    options.add_argument("--drain-timeout", type=float, default=120.0, help="idle: triggers, s")
    options.add_argument("--fire-tasks", type=int, default=2000, help="fires: tasks every 1s")
    options.add_argument("--fire-duration", type=int, default=10, help="fires: window, s")
    options.add_argument("--fire-warmup", type=float, default=5.0, help="fires: after ready, s")
    options.add_argument("--fire-drain", type=float, default=3.0, help="fires: late ones, s")
    options.add_argument("--duration", type=float, default=180.0, help="ceiling: at most, s")
    options.add_argument("--hold", type=float, default=15.0, help="ceiling: reads after, s")
    options.add_argument("--ceiling-runs", type=int, default=3000, help="ceiling: runs made")
    options.add_argument(
        "--poll-interval", type=float, default=POLL_INTERVAL_S, help="ceiling: poll_interval, s"
    )
    options.add_argument("--job-seconds", type=float, default=600.0, help="ceiling: a job, s")
    options.add_argument("--read-pause", type=float, default=0.1, help="between two reads, s")
    options.add_argument(
        "--client-core",
        type=int,
        default=SERVICE_CORE,
        help="the core this script's clients run on (the service's; -1: not pinned)",
    )
    options.add_argument("--ready-timeout", type=float, default=300.0)
    options.add_argument("--profile", help="py-spy raw profile of ecron in one phase, to FILE")
    options.add_argument("--profile-phase", choices=["idle", "ceiling"], default="idle")
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

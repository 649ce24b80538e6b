"""``overload``: more due work than a node can do. Do the API and the health checks still
answer, does memory stay bounded, is what could not be done recorded, and does the node
recover when the load drops? The baseline is the same workload at 1x load.

    .venv/bin/python -m bench.overload --levels 1,2,5,10 [--workers 10 --delay 0.2]

The user service (core 1) holds each trigger's answer back ``--delay`` seconds and then
answers ``SUCCESS``; the daemon (core 0) has ``poll_workers: --workers``, so it can do about
``workers / delay`` fires a second: its capacity. At level L, ``L x capacity`` tasks fire
every second, their fire times spread over the second (``misfire: {policy: run_once,
grace: --grace}``, concurrency ``forbid``), on a fresh database and daemon per level. Over
a ``--duration`` window after ``--warmup``:

- fires done per second (triggers the service received) against the fires due;
- the latency of ``/healthz``, ``/readyz``, ``/api/v1/tasks`` and ``/api/v1/executions``,
  asked in turn by one prober every half second, each with a 5 s timeout (failures are
  counted), from the window's start to the drop (``api``) and after it (``api_after_drop``,
  which includes the reload);
- the daemon's CPU, its RSS at the start and the end of the window and its peak, and the
  executions it holds (``ecron_executions_in_flight``, read from ``/metrics`` every 2 s);

``--settle`` seconds after the window (the load still on, so that the node decides the
window's late fire times), the rows of the window's fire times are read, by status and
reason; ``without_row`` counts the others: not decided yet (the task not claimed again
since), or skipped without a row (a claim records only the latest 20 missed fire times of
a task, ``planning.MISFIRE_RECORDS``). Then the load drops: the task file is
cut to ``--after`` of the capacity (0.5) and reloaded (SIGHUP; the tasks that stay keep
their fire times). Over ``--recovery`` seconds from then, the remaining tasks' fire times
must run on time again: their lag, the ones missed, and how long after the drop every fire
time of a second arrived within a second (before its task's next one).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    Daemon,
    Databases,
    PeakRss,
    Service,
    emit,
    parse,
    parser,
    percentile,
    profiler,
    rounded,
    scratch_dir,
    table,
    write_config,
)

LABEL = "ecron"
#: What the prober asks, in turn.
ENDPOINTS = ("/healthz", "/readyz", "/api/v1/tasks", "/api/v1/executions")
#: A request slower than this counts as not answered.
PROBE_TIMEOUT = 5.0
#: The prober asks each endpoint once per this many seconds (as a monitor would), and
#: reads ``/metrics`` every ``METRICS_EVERY`` rounds: asking faster would itself load the
#: node (a ``/metrics`` of a thousand tasks costs tens of milliseconds).
PROBE_EVERY = 0.5
METRICS_EVERY = 4
#: A fire time that arrives within this much is on time (recovery): before its task's next.
ON_TIME_S = 1.0


def overload_yaml(url: str, count: int, grace: str, spread: int = 0) -> str:
    """``count`` tasks t0, t1, ... every second, posting to ``url``, late ones run_once; their
    fire times spread evenly over the second (``start`` a fraction of a second apart), so
    that a node that keeps up is on time, not a burst at each whole second. ``spread``: how
    many tasks the second is shared out between (default ``count``)."""
    lines = ["tasks:"]
    for n in range(count):
        offset = n * 1000 // (spread or count) % 1000
        lines += [
            f"  - name: t{n}",
            f'    schedule: {{every: 1s, start: "2026-01-01T00:00:00.{offset:03d}Z"}}',
            f"    url: {url}",
            f"    misfire: {{policy: run_once, grace: {grace}}}",
        ]
    return "\n".join(lines) + "\n"


class Prober:
    """Asks the endpoints in turn until stopped; each answer's latency (None: no answer
    within ``PROBE_TIMEOUT``, or not 2xx), and the in-flight gauge from ``/metrics``."""

    def __init__(self, api: str) -> None:
        self.api = api
        #: Per endpoint: (when asked, epoch seconds; latency, or None).
        self.latencies: dict[str, list[tuple[float, float | None]]] = {p: [] for p in ENDPOINTS}
        self.in_flight: list[float] = []
        self.running = True

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            rounds = 0
            while self.running:
                began = time.monotonic()
                for path in ENDPOINTS:
                    asked = time.time()
                    self.latencies[path].append((asked, await self._ask(session, path)))
                if rounds % METRICS_EVERY == 0:
                    await self._gauge(session)
                rounds += 1
                await asyncio.sleep(max(0.0, began + PROBE_EVERY - time.monotonic()))

    async def _ask(self, session: aiohttp.ClientSession, path: str) -> float | None:
        started = time.monotonic()
        try:
            async with session.get(f"{self.api}{path}") as response:
                await response.read()
                return time.monotonic() - started if response.status < 300 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _gauge(self, session: aiohttp.ClientSession) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(f"{self.api}/metrics") as response:
                for line in (await response.text()).splitlines():
                    if line.startswith("ecron_executions_in_flight "):
                        self.in_flight.append(float(line.split()[1]))

    def figures(self, start: float, end: float) -> dict[str, Any]:
        """The answers to the requests asked in [start, end), per endpoint."""
        result: dict[str, Any] = {}
        for path, asked in self.latencies.items():
            values = [latency for at, latency in asked if start <= at < end]
            answered = [v * 1000 for v in values if v is not None]
            result[path] = {
                "asked": len(values),
                "unanswered": len(values) - len(answered),
                "p50_ms": rounded(percentile(answered, 50)),
                "p99_ms": rounded(percentile(answered, 99)),
                "max_ms": rounded(max(answered) if answered else None),
            }
        return result


def lags(records: list[list[Any]], start: float, end: float) -> list[tuple[float, float, str]]:
    """``(fire time, lag s, task)`` of the first trigger of each fire time in [start, end)."""
    first: dict[tuple[str, str], float] = {}
    for arrival, task, scheduled, _eid in records:
        first.setdefault((task, scheduled), arrival)
    found = []
    for (task, scheduled), arrival in first.items():
        at = datetime.fromisoformat(scheduled).timestamp()
        if start <= at < end:
            found.append((at, arrival - at, task))
    return found


def window_figures(records: list[list[Any]], start: float, end: float, due: int) -> dict[str, Any]:
    """Fires due and done in the window, and how late the ones done were."""
    arrived = [r for r in records if start <= r[0] < end]
    late = [(r[0] - datetime.fromisoformat(r[2]).timestamp()) * 1000 for r in arrived]
    keys = Counter((r[1], r[2]) for r in records)
    seconds = end - start
    return {
        "due_per_s": round(due / seconds, 1),
        "done_per_s": round(len(arrived) / seconds, 1),
        "done_lag_ms_p50": rounded(percentile(late, 50)),
        "done_lag_ms_p99": rounded(percentile(late, 99)),
        "duplicates": sum(n - 1 for n in keys.values() if n > 1),
    }


def recovery_figures(
    records: list[list[Any]], dropped: float, end: float, tasks: int
) -> dict[str, Any]:
    """How the ``tasks`` fared from the drop on: lag, missed, and after how many
    seconds every fire time of every later second arrived within ``ON_TIME_S``."""
    remaining = {f"t{n}" for n in range(tasks)}
    start = math.ceil(dropped)
    seconds = list(range(start, math.floor(end)))
    found = [f for f in lags(records, start, math.floor(end)) if f[2] in remaining]
    by_second: dict[int, list[float]] = {}
    for at, lag, _task in found:
        by_second.setdefault(math.floor(at), []).append(lag)
    on_time = [
        len(by_second.get(s, [])) == tasks and max(by_second[s]) <= ON_TIME_S for s in seconds
    ]
    recovered_at = None
    for n in range(len(seconds)):
        if all(on_time[n:]):
            recovered_at = seconds[n]
            break
    tail = [lag * 1000 for at, lag, _ in found if recovered_at is not None and at >= recovered_at]
    return {
        "tasks": tasks,
        "expected": tasks * len(seconds),
        "missed": tasks * len(seconds) - len(found),
        "recovered_after_s": None if recovered_at is None else round(recovered_at - dropped, 1),
        "lag_ms_p99_after_recovery": rounded(percentile(tail, 99)),
    }


async def rows_by_outcome(url: str, start: float, end: float) -> dict[str, int]:
    """The window's execution rows by ``STATUS`` or ``STATUS reason``."""
    import sqlalchemy as sa

    from ecron.store.engine import Engines
    from ecron.store.tables import execution_table as ex

    engines = Engines(url)
    window = (
        ex.c.scheduled_at >= datetime.fromtimestamp(start, UTC),
        ex.c.scheduled_at < datetime.fromtimestamp(end, UTC),
    )
    query = sa.select(ex.c.status, ex.c.reason, sa.func.count()).where(*window)
    try:
        async with engines.read() as conn:
            rows = await conn.execute(query.group_by(ex.c.status, ex.c.reason))
            found = {f"{s} {r}" if r else s: int(n) for s, r, n in rows}
    finally:
        await engines.dispose()
    return dict(sorted(found.items()))


async def run_level(
    args: Any, level: float, service: Service, url: str, scratch: Path
) -> dict[str, Any]:
    """One level: L x capacity tasks for the window, then the drop and the recovery."""
    capacity = args.workers / args.delay
    tasks = max(1, round(level * capacity))
    after = min(tasks, max(1, round(args.after * capacity)))
    task_url = f"{service.url}/jobs/{LABEL}"
    yaml = overload_yaml(task_url, tasks, args.grace)
    config = write_config(scratch / f"config-{level}", yaml, f"poll_workers: {args.workers}\n")
    await service.post("/_reset")
    daemon = Daemon.start(config, url, scratch)
    prober = Prober(daemon.api)
    try:
        ready_at = await daemon.wait_ready(args.ready_timeout)
        with PeakRss(daemon.child) as peak:
            probing = asyncio.create_task(prober.run())
            start = ready_at + args.warmup
            figures = await overloaded(args, daemon, prober, start, level == max(args.level_list))
            await asyncio.sleep(args.settle)  # the window's late fire times are decided
            figures["rows"] = await rows_by_outcome(url, start, start + args.duration)
            fewer = overload_yaml(task_url, after, args.grace, spread=tasks)
            (config / "tasks" / "jobs.yaml").write_text(fewer)
            dropped = time.time()
            daemon.child.process.send_signal(signal.SIGHUP)
            await asyncio.sleep(args.recovery)
            prober.running = False
            await probing
            figures["rss_mib_after_recovery"] = round(daemon.child.rss() / 2**20, 1)
    finally:
        prober.running = False
        await daemon.child.stop()
    records = (await service.get(f"/_stats/triggers/{LABEL}"))["records"]
    figures.update(
        level=level,
        tasks=tasks,
        capacity_per_s=capacity,
        rss_mib_peak=round(peak.peak / 2**20, 1),
        api=prober.figures(start, dropped),
        api_after_drop=prober.figures(dropped, dropped + args.recovery),
        recovery=recovery_figures(records, dropped, dropped + args.recovery, after),
        **window_figures(records, start, start + args.duration, tasks * args.duration),
    )
    rows = figures["rows"]
    figures["skipped_misfire"] = rows.get("SKIPPED misfire", 0)
    figures["without_row"] = tasks * args.duration - sum(rows.values())
    return figures


async def overloaded(
    args: Any, daemon: Daemon, prober: Prober, start: float, profiled: bool
) -> dict[str, Any]:
    """Watch the daemon over the window: CPU, RSS, executions held (and its profile)."""
    await asyncio.sleep(max(0.0, start - time.time()))
    rss_start, cpu = daemon.child.rss(), daemon.child.cpu_seconds()
    recorder = profiler(args, daemon.child, profiled)
    await asyncio.sleep(max(0.0, start + args.duration - time.time()))
    rss_end, cpu = daemon.child.rss(), daemon.child.cpu_seconds() - cpu
    profile = await recorder.stop() if recorder else None
    in_flight = list(prober.in_flight)
    figures = {
        "cpu_percent": round(100 * cpu / args.duration, 1),
        "rss_mib_start": round(rss_start / 2**20, 1),
        "rss_mib_end": round(rss_end / 2**20, 1),
        "in_flight_max": max(in_flight, default=None),
        "in_flight_end": in_flight[-1] if in_flight else None,
    }
    if profile is not None:
        figures["profile"] = profile
    return figures


def knee(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Where more due work stops bringing more fires done: the most fires done per second,
    and the first level whose fires done fall below 90 % of the fires due."""
    best = max(levels, key=lambda f: f["done_per_s"])
    saturated = [f["level"] for f in levels if f["done_per_s"] < 0.9 * f["due_per_s"]]
    return {
        "max_done_per_s": best["done_per_s"],
        "at_level": best["level"],
        "first_saturated_level": min(saturated) if saturated else None,
    }


async def run(args: Any) -> dict[str, Any]:
    levels = args.level_list = [float(x) for x in args.levels.split(",")]
    found = []
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("triggers", scratch, delay=args.delay) as service,
        ):
            for level in levels:
                found.append(await run_level(args, level, service, await databases.new(), scratch))
                report(args, found[-1])
    baseline, *loaded = found
    keys = ("database", "levels", "workers", "delay", "grace", "duration", "recovery")
    params = {k: getattr(args, k) for k in keys}
    return emit("overload", params, {"ecron": loaded, "baseline": baseline, "knee": knee(found)})


def report(args: Any, figures: dict[str, Any]) -> None:
    api = figures["api"]
    rows = [
        ("tasks every second", figures["tasks"], None),
        ("fires due /s", figures["due_per_s"], None),
        ("fires done /s", figures["done_per_s"], None),
        ("  their lag p99, ms", figures["done_lag_ms_p99"], None),
        ("duplicates", figures["duplicates"], None),
        ("CPU, % of a core", figures["cpu_percent"], None),
        ("SKIPPED misfire rows", figures["skipped_misfire"], None),
        ("fire times without a row", figures["without_row"], None),
        ("RSS start / end of window, MiB", figures["rss_mib_start"], figures["rss_mib_end"]),
        (
            "RSS peak / after recovery, MiB",
            figures["rss_mib_peak"],
            figures["rss_mib_after_recovery"],
        ),
        ("in flight max / at the end", figures["in_flight_max"], figures["in_flight_end"]),
    ]
    rows += [(f"{path} p99 / max, ms", api[path]["p99_ms"], api[path]["max_ms"]) for path in api]
    rows += [(f"{path} unanswered", api[path]["unanswered"], None) for path in api]
    after = figures["api_after_drop"]
    rows += [
        ("after the drop: p99 / max of the slowest, ms", *slowest(after)),
        ("after the drop: unanswered", sum(a["unanswered"] for a in after.values()), None),
    ]
    recovery = figures["recovery"]
    rows += [
        ("recovery: missed", recovery["missed"], None),
        ("recovery: on time after, s", recovery["recovered_after_s"], None),
    ]
    title = (
        f"overload {figures['level']}x: capacity {figures['capacity_per_s']:.0f} fires/s "
        f"({args.workers} workers, {args.delay}s service), {args.database}"
    )
    table(title, rows, ("value", ""))
    print(f"  rows: {figures['rows']}")


def slowest(api: dict[str, Any]) -> tuple[float | None, float | None]:
    """The highest p99 and the highest maximum among the endpoints, ms."""
    p99s = [a["p99_ms"] for a in api.values() if a["p99_ms"] is not None]
    maxes = [a["max_ms"] for a in api.values() if a["max_ms"] is not None]
    return max(p99s, default=None), max(maxes, default=None)


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--levels", default="1,2,5,10", help="multiples of the capacity; 1 first")
    options.add_argument("--workers", type=int, default=10, help="the daemon's poll_workers")
    options.add_argument("--delay", type=float, default=0.2, help="the service's answer, s")
    options.add_argument("--grace", default="2s", help="the tasks' misfire grace")
    options.add_argument("--duration", type=int, default=10, help="measured window, seconds")
    options.add_argument("--warmup", type=float, default=3.0, help="seconds after ready")
    options.add_argument("--recovery", type=float, default=8.0, help="after the drop, seconds")
    options.add_argument("--settle", type=float, default=4.0, help="before the rows are read")
    options.add_argument("--after", type=float, default=0.5, help="load after the drop, x cap.")
    options.add_argument("--ready-timeout", type=float, default=120.0)
    options.add_argument("--profile", help="py-spy raw profile of the highest level, to FILE")
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

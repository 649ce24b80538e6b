"""``soak``: one daemon at a steady mixed load for a long time, watched from outside.

    .venv/bin/python -m bench.soak --minutes 60 --database sqlite|postgresql
        [--interval 10] [--samples FILE] [--daemon-core N] [--ecron-python PATH]

Not part of ``run_all.sh``: it is meant to run for an hour, and it asks little of the
machine (about a quarter of a core for the daemon) so that two can run side by side
(``--daemon-core 0`` for one, ``1`` for the other). ``--minutes`` may be a fraction
(``0.5``: a smoke run).

The daemon (``ecron run -c DIR``, ecron as installed) runs with ``public_url`` set to its
own address; its user service is ``bench/soak_service.py``. The load, all of it through the
schedule or the API:

- fires: ``--fire-tasks`` (50) tasks ``{every: --fire-every}`` (1 s) of short jobs, polled
  every second: the first poll answers SUCCESS;
- long jobs: ``--long-jobs`` (300) in flight at all times, polled every ``--long-poll``
  (2 s), each lasting 0.2 to 1.8 times ``--job-seconds`` (300 s); they are manual runs,
  asked through ``POST /api/v1/tasks/{name}/run`` at the start, and again by a keeper each
  time some have ended (the manual runs "now and then");
- callbacks: ``--callback-tasks`` (20) tasks ``{every: --callback-every}`` (5 s) in
  ``mode: callback``, whose service posts RUNNING 30, RUNNING 70 and SUCCESS to the callback
  URL a second apart;
- API reads: ``--reads-per-s`` (3) requests a second, in turn ``GET /api/v1/tasks``,
  ``GET /api/v1/executions`` (a page of 50) and ``GET /api/v1/executions/{id}`` of the
  newest one.

Every ``--interval`` seconds (10), from outside the daemon: its RSS, open file descriptors
and threads, its TCP connections (psutil: to the database, to the user service, to its API,
other), on PostgreSQL the server's own count of the daemon database's backends
(``pg_stat_activity``), the CPU of the daemon, the service and the database server, and
the loop's lag, two ways: the mean of ``ecron_event_loop_lag_seconds`` over the interval
(how late the loop ran its own rounds, from ``/metrics``), and the latency of
``GET /healthz`` (served on the loop, no database work), asked ``--health-per-s`` (4) times
a second on a kept-alive connection: the loop's lag plus one local HTTP round trip. Also,
per interval, the work done (fire times claimed, triggers, polls, callbacks accepted, API
reads answered, manual runs created, executions ended) and the errors. Each sample is one
JSON line in ``--samples`` (default ``bench/results/soak-<db>-<time>.jsonl``).

At the end: start (the median of the first minute's samples) against end (the last
minute's) of each figure, the slope of RSS over the second half (KiB/min, least squares),
the totals, and the JSON line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    ROOT,
    SERVICE_CORE,
    SUBJECT_CORE,
    Child,
    Daemon,
    Databases,
    Service,
    ask_run,
    ask_runs,
    emit,
    free_port,
    parse,
    parser,
    scratch_dir,
    wait_http,
    write_config,
)
from bench.soak_watch import Sampler, Traffic, summarise

#: The tasks that run the long jobs (manual runs, taken in turn).
LONG_TASKS = 10
#: How often the keeper tops the long jobs up again, seconds.
KEEP_EVERY = 2.0


@dataclass(frozen=True)
class Load:
    """The steady load; ``describe`` says it in one line."""

    fire_tasks: int
    fire_every: str
    long_jobs: int
    long_poll: str
    job_seconds: float
    callback_tasks: int
    callback_every: str
    reads_per_s: float
    health_per_s: float

    def describe(self) -> str:
        return (
            f"{self.fire_tasks} tasks every {self.fire_every} (short jobs, polled 1s); "
            f"{self.long_jobs} long jobs in flight (manual runs, polled every "
            f"{self.long_poll}, {self.job_seconds:g} s on average); {self.callback_tasks} "
            f"callback tasks every {self.callback_every} (3 callbacks each); "
            f"{self.reads_per_s:g} API reads/s; /healthz {self.health_per_s:g}/s"
        )


def tasks_yaml(service: str, load: Load) -> str:
    """The config's tasks: f*, the fires; l*, the long jobs' manual tasks; c*, callbacks."""
    lines = ["tasks:"]

    def task(name: str, schedule: str, label: str, *more: str) -> None:
        lines.extend([f"  - name: {name}", f"    schedule: {schedule}"])
        lines.extend([f"    url: {service}/jobs/{label}", "    concurrency: allow"])
        lines.extend(f"    {line}" for line in more)

    for n in range(load.fire_tasks):
        task(f"f{n}", f"{{every: {load.fire_every}}}", "short", "poll_interval: 1s")
    long_timeout = f"{int(load.job_seconds * 3 + 600)}s"
    for n in range(LONG_TASKS):
        poll = f"poll_interval: {load.long_poll}"
        task(f"l{n}", "manual", "long", poll, f"task_timeout: {long_timeout}")
    for n in range(load.callback_tasks):
        every = f"{{every: {load.callback_every}}}"
        task(f"c{n}", every, "callback", "mode: callback", "task_timeout: 5m")
    return "\n".join(lines) + "\n"


def long_task_names() -> list[str]:
    return [f"l{n}" for n in range(LONG_TASKS)]


@contextlib.asynccontextmanager
async def soak_service(args: Any, logs: Path) -> Any:
    """``bench/soak_service.py`` in its own process, on the service core."""
    port = free_port()
    command = [sys.executable, "-m", "bench.soak_service", "--port", str(port)]
    command += ["--job-seconds", str(args.job_seconds)]
    child = Child.start("service", command, SERVICE_CORE, logs, {})
    service = Service(child, f"http://127.0.0.1:{port}")
    try:
        await wait_http(child, f"{service.url}/_stats", 30)
        yield service
    finally:
        await child.stop(10)


# -- the clients -----------------------------------------------------------------------------


async def reader(api: str, traffic: Traffic, per_s: float, stop: asyncio.Event) -> None:
    """API reads in turn, ``per_s`` a second: the tasks, a page of executions, the newest."""
    newest: str | None = None
    timeout = aiohttp.ClientTimeout(total=30)
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for n in range(sys.maxsize):  # at a fixed rate: a slow answer does not lower it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), started + n / per_s - time.monotonic())
            if stop.is_set():
                return
            paths = ["/api/v1/tasks", "/api/v1/executions?limit=50"]
            paths += [f"/api/v1/executions/{newest}"] if newest else []
            path = paths[n % len(paths)]
            asked = time.perf_counter()
            try:
                async with session.get(f"{api}{path}") as answer:
                    body = await answer.read()
                    ok = answer.status == 200
                if ok and path.startswith("/api/v1/executions?"):
                    items = json.loads(body).get("items") or []
                    newest = items[0]["id"] if items else newest
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            traffic.read(ok, time.perf_counter() - asked)


async def prober(api: str, traffic: Traffic, per_s: float, stop: asyncio.Event) -> None:
    """``GET /healthz`` ``per_s`` times a second on one kept-alive connection, timed."""
    connector = aiohttp.TCPConnector(limit=1)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                async with session.get(f"{api}/healthz") as answer:
                    await answer.read()
                    ok = answer.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            traffic.health(ok, time.perf_counter() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1 / per_s)


async def keeper(
    api: str, service: Service, target: int, traffic: Traffic, stop: asyncio.Event
) -> None:
    """Keep ``target`` long jobs in flight: every ``KEEP_EVERY``, as many manual runs as
    have ended (the service says how many run; runs created but not yet triggered count)."""
    names = long_task_names()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), KEEP_EVERY)
            if stop.is_set():
                return
            try:
                stats = await service.get("/_stats")
            except (aiohttp.ClientError, TimeoutError):
                continue
            waiting = traffic.runs_created - stats.get("triggers.long", 0)
            for _ in range(target - stats.get("long.running", 0) - max(0, waiting)):
                name = names[traffic.runs_asked % len(names)]
                traffic.run(await ask_run(session, f"{api}/api/v1/tasks/{name}"))


async def start_long_jobs(api: str, service: Service, traffic: Traffic, count: int) -> None:
    """The first ``count`` long jobs, asked by 8 clients; wait until all were triggered."""
    for asked in await ask_runs(api, long_task_names(), count, clients=8):
        traffic.run(asked)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (await service.get("/_stats")).get("triggers.long", 0) >= traffic.runs_created:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the {count} long jobs were not all triggered within 120 s")


# -- the run ---------------------------------------------------------------------------------


def samples_path(args: Any) -> Path:
    if args.samples:
        return Path(args.samples)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return ROOT / "bench" / "results" / f"soak-{args.database}-{stamp}.jsonl"


async def soak(args: Any, load: Load, scratch: Path) -> dict[str, Any]:
    path = samples_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    async with Databases(args.database, scratch) as databases, soak_service(args, scratch) as svc:
        url = await databases.new()
        port = free_port()
        settings = f"public_url: http://127.0.0.1:{port}\n"
        config = write_config(scratch / "config", tasks_yaml(svc.url, load), settings)
        daemon = Daemon.start(config, url, scratch, port=port, core=args.daemon_core)
        traffic, stop = Traffic(), asyncio.Event()
        try:
            await daemon.wait_ready(60)
            await start_long_jobs(daemon.api, svc, traffic, load.long_jobs)
            first_runs = traffic.runs_created
            clients = [
                reader(daemon.api, traffic, load.reads_per_s, stop),
                prober(daemon.api, traffic, load.health_per_s, stop),
                keeper(daemon.api, svc, load.long_jobs, traffic, stop),
            ]
            running = [asyncio.create_task(client) for client in clients]
            async with Sampler(daemon, svc, databases, url, traffic) as sampler:
                samples = await sampler.run(args.minutes * 60, args.interval, path)
            stop.set()
            await asyncio.gather(*running)
            daemon.child.check_alive()
        finally:
            stop.set()
            await daemon.child.stop()
    figures = summarise(samples)
    figures["long_jobs_started_first"] = first_runs
    figures["daemon_log"] = log_levels(daemon.child.log_path)
    figures["samples_file"] = str(path)
    return figures


def log_levels(log: Path) -> dict[str, Any]:
    """How many lines the daemon logged at warning and at error (its level is warning),
    and the first few events of those."""
    counts: dict[str, int] = {}
    events: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            entry = json.loads(line)
            level = str(entry.get("level"))
            counts[level] = counts.get(level, 0) + 1
            if len(events) < 5 and entry.get("event") not in events:
                events.append(str(entry.get("event")))
    return {"lines_by_level": counts, "first_events": events}


def options() -> Any:
    result = parser(__doc__.split("\n\n")[0])
    result.add_argument("--minutes", type=float, default=60.0, help="how long (a fraction too)")
    result.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    result.add_argument("--samples", metavar="FILE", help="where the samples go (JSON lines)")
    result.add_argument("--daemon-core", type=int, default=SUBJECT_CORE)
    result.add_argument("--fire-tasks", type=int, default=50)
    result.add_argument("--fire-every", default="1s")
    result.add_argument("--long-jobs", type=int, default=300)
    result.add_argument("--long-poll", default="2s")
    result.add_argument("--job-seconds", type=float, default=300.0)
    result.add_argument("--callback-tasks", type=int, default=20)
    result.add_argument("--callback-every", default="5s")
    result.add_argument("--reads-per-s", type=float, default=3.0)
    result.add_argument("--health-per-s", type=float, default=4.0)
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse(options(), argv)
    load = Load(
        args.fire_tasks,
        args.fire_every,
        args.long_jobs,
        args.long_poll,
        args.job_seconds,
        args.callback_tasks,
        args.callback_every,
        args.reads_per_s,
        args.health_per_s,
    )
    print(f"soak on {args.database}, {args.minutes:g} min, a sample every {args.interval:g} s")
    print(f"load: {load.describe()}", flush=True)
    with scratch_dir(args.keep) as scratch:
        figures = asyncio.run(soak(args, load, scratch))
    from bench.soak_watch import show_summary

    show_summary(figures)
    params = {"minutes": args.minutes, "interval_s": args.interval, **asdict(load)}
    params["load"] = load.describe()
    params["daemon_core"] = args.daemon_core
    emit("soak", params, {"ecron": figures, "baseline": None})


if __name__ == "__main__":
    main()

"""``growth``: CPU per poll, per fire and per run at 1,000, 10,000 and 50,000 held, each at
a fixed rate of work so that only what the node holds changes. Issue 31: the cost of a unit
of work must not grow with how much the node holds (flat: within 1.25x of the smallest size).

    .venv/bin/python -m bench.growth --sizes 1000,10000,50000 --seconds 30 [--database postgresql]

Per size N and per measurement, a fresh database and a fresh daemon (ecron as installed: the
bench venv, on core 0); the user service (``bench/service.py``) and this script's clients
run on core 1 (``--client-core``). Each window lasts ``--seconds``; ``--measurements``
picks some of ``poll,fire,run`` (all by default, in that order).

- ``poll``: bench.hold's phase on one node. One manual task (``concurrency: allow``,
  ``task_timeout: 1d``) polled every N / ``--poll-rate`` seconds (1,000 polls/s: 1 s at
  1,000, 10 s at 10,000, 50 s at 50,000), so the polls a second stay the same at every size;
  N executions made through ``POST /api/v1/tasks/{name}/run`` (``--clients`` clients), each
  answered ``RUNNING`` at every poll. Once every execution has been polled (the ramp) and one
  interval more, the window: ecron's CPU (user + system) over the polls the service received
  in it, µs per poll; polls/s (≈ the poll rate); KiB of RSS per execution (over the daemon's
  idle RSS). Baseline: the plain aiohttp poller (``bench/baseline_poller.py``) polling N ids
  at the same interval over a window as long; its growth is what flat looks like.
- ``fire``: N tasks at rest (``0 0 1 1 *``: once a year, never during the run) and
  ``--fire-tasks`` (200) tasks ``{every: 1s}`` whose triggers the service answers
  ``SUCCESS`` at once. The window opens at the first whole second ``--warmup`` seconds
  after the daemon is ready: ecron's CPU over the triggers the service received in it, µs
  per fire; the lag p99 and the fire times missed, by bench.triggers's analysis (triggers
  arriving up to ``--drain`` seconds late still count). Baseline: in-memory APScheduler
  (``bench/baseline_scheduler.py``) with the same fire tasks and N jobs at rest (a
  ``CronTrigger`` on 1 January), measured the same way at each size.
- ``run``: one manual task polled hourly (``poll_interval: 1h``: no poll falls in the run);
  N runs made through the API as fast as the clients go and held (setup, not measured), then
  runs asked at ``--run-rate`` (100) a second for the window, each request leaving at its
  own time whatever the answers before it (open loop): ecron's CPU from the first of them
  until the service has received the last one's trigger, over the runs answered 202, µs per
  run; p50/p99 of those requests. No baseline of its own: beside it, the CPU per fire at the
  same size (as bench.runs sets a run beside a fire).

Growth is each size's figure over the smallest size's, ecron's and the baseline's; a
measurement is ``flat`` when each of ecron's is at most ``--flat`` (1.25). Every daemon's own
log (level warning, JSON) and ``/metrics`` are read over its window as bench.hold reads them:
lease lapses, executions taken over, lost leases, retried deadlocks (and PostgreSQL's own
count). A figure from a node that lapsed or lost what it held is not a figure: it is marked
(``held: false``), a warning is printed, and its measurement's ``flat`` is None.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    RUN_TIMEOUT,
    SERVICE_CORE,
    SUBJECT_CORE,
    Child,
    Daemon,
    Databases,
    RunAsked,
    Service,
    ask_run,
    ask_runs,
    emit,
    parse,
    parser,
    profiler,
    ratio,
    runs_figures,
    scratch_dir,
    tasks_yaml,
    write_config,
)
from bench.growth_report import report_fire, report_poll, report_run, warn_unheld
from bench.hold import LAPSES, Phase, counters, log_events, pg_deadlocks
from bench.hold import run_baseline as hold_baseline
from bench.hold import run_ecron as hold_ecron
from bench.runs import (
    Meters,
    cpu_figures,
    latency_figures,
    manual_tasks,
    pin_clients,
    wait_triggers,
)
from bench.triggers import analyse

MEASUREMENTS = ("poll", "fire", "run")
#: The figure whose growth each measurement is judged on (ecron's and its baseline's).
FIGURE = {"poll": "cpu_us_per_poll", "fire": "cpu_us_per_fire", "run": "cpu_us_per_run"}
#: A cron of the tasks at rest: midnight on 1 January, never during a run.
AT_REST = '"0 0 1 1 *"'
#: ``run``'s one manual task (``manual_tasks`` names them r0, r1, ...).
RUN_TASK = "r0"
#: The options the JSON line repeats.
PARAMS = (
    *("database", "sizes", "measurements", "seconds", "poll_rate", "fire_tasks", "run_rate"),
    *("clients", "warmup", "flat", "client_core"),
)
#: Connections the open-loop run requests may hold at once (more wait their turn, timed).
PACED_CONNECTIONS = 64


# -- the daemon's own account ----------------------------------------------------------------


@dataclass
class Watch:
    """What a daemon's own log and metrics say over a window, read as bench.hold reads them:
    takeovers and lost leases from ``/metrics`` at both ends, lapses and retried deadlocks
    from its log in between, and PostgreSQL's count of deadlocks (None on SQLite)."""

    daemon: Daemon
    url: str
    before: dict[str, float]
    deadlocks: int | None
    opened: float

    @classmethod
    async def open(cls, daemon: Daemon, url: str) -> Watch:
        before = await counters(daemon.api)
        return cls(daemon, url, before, await pg_deadlocks(url), time.time())

    async def close(self) -> dict[str, Any]:
        after = await counters(self.daemon.api)
        deadlocks = await pg_deadlocks(self.url)
        events = log_events(self.daemon.child.log_path, self.opened)
        return {
            "lapses": sum(events[name] for name in LAPSES),
            "lapse_events": {name: events[name] for name in LAPSES},
            "leases_lost": after["leases_lost"] - self.before["leases_lost"],
            "lease_lost_lines": events["lease_lost"],
            "takeovers": after["takeovers"] - self.before["takeovers"],
            "store_retries": events["store_retry"],
            "deadlocks_retried": events["deadlock_retried"],
            "deadlocks_detected": None
            if deadlocks is None or self.deadlocks is None
            else deadlocks - self.deadlocks,
        }


def held(figures: dict[str, Any]) -> bool:
    """Whether the node kept everything it held over the window: no lapse, no takeover, no
    lost lease, no deadlock retried or detected. Without that its figure is not a figure."""
    return (
        figures["lapses"] == 0
        and figures["takeovers"] == 0
        and figures["leases_lost"] == 0
        and figures["lease_lost_lines"] == 0
        and figures["deadlocks_retried"] == 0
        and not figures["deadlocks_detected"]
    )


def per_unit(cpu: float | None, units: int) -> float | None:
    """CPU seconds over ``units``, in µs (None for no units)."""
    return round((cpu or 0.0) / units * 1e6, 1) if units else None


# -- poll: N in flight polled at a fixed rate ------------------------------------------------


async def measure_poll(
    args: Any, service: Service, size: int, scratch: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """bench.hold's phase of ``size`` executions on one node at the interval that makes
    ``--poll-rate`` polls a second, then its plain aiohttp poller; (ecron's, the baseline's)."""
    phase = Phase(1, size, size / args.poll_rate)
    # bench.hold's window is in minutes; its baseline's as long as ecron's here.
    hold_args = argparse.Namespace(
        **vars(args), minutes=args.seconds / 60, baseline_seconds=args.seconds
    )
    mine = await hold_ecron(hold_args, service, phase, scratch)
    mine["held"] = held(mine)
    await service.post("/_reset")
    theirs = await hold_baseline(hold_args, service, phase, scratch)
    return mine, theirs


# -- fire: tasks at rest beside tasks firing every second ------------------------------------


def fire_yaml(url: str, fire_tasks: int, at_rest: int) -> str:
    """``fire_tasks`` tasks ``{every: 1s}`` (t0, t1, ...) and ``at_rest`` yearly ones."""
    lines = [tasks_yaml(url, fire_tasks, "{every: 1s}").rstrip("\n")]
    for n in range(at_rest):
        lines += [f"  - name: rest{n}", f"    schedule: {AT_REST}", f"    url: {url}"]
    return "\n".join(lines) + "\n"


async def count_fires(
    args: Any,
    child: Child,
    ready_at: float,
    service: Service,
    label: str,
    profile: bool = False,
) -> tuple[dict[str, Any], float, float]:
    """The window of ``label``'s fires from the first whole second ``--warmup`` after
    ``ready_at``: the CPU used in it (and its profile, when ``profile``: under
    ``"profile"``), and its start and end (``time.time()``)."""
    start = math.ceil(ready_at + args.warmup)
    end = start + args.seconds
    await asyncio.sleep(max(0.0, start - time.time()))
    recorder = profiler(args, child, profile)
    meters = Meters(child, service, args.databases)
    await asyncio.sleep(max(0.0, end - time.time()))
    used: dict[str, Any] = meters.used()
    if recorder is not None:
        used["profile"] = await recorder.stop()
    return used, start, end


async def fire_figures(
    args: Any,
    service: Service,
    label: str,
    used: dict[str, float | None],
    window: tuple[float, float],
) -> dict[str, Any]:
    """bench.triggers's analysis of ``label``'s triggers in the window, and CPU per fire."""
    await asyncio.sleep(args.drain)
    start, end = window
    records = (await service.get(f"/_stats/triggers/{label}"))["records"]
    figures = analyse(records, start, end, args.fire_tasks)
    fired = sum(1 for record in records if start <= record[0] < end)
    return {
        **figures,
        "fired_in_window": fired,
        "cpu_us_per_fire": per_unit(used["cpu"], fired),
        **cpu_figures(used, args.seconds),
    }


async def measure_fire(
    args: Any, service: Service, size: int, scratch: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """ecron with ``size`` tasks at rest and ``--fire-tasks`` firing every second, then
    APScheduler with the same tasks; (ecron's, the baseline's)."""
    mine = await fire_ecron(args, service, size, scratch)
    return mine, await fire_baseline(args, service, size, scratch)


async def fire_ecron(args: Any, service: Service, size: int, scratch: Path) -> dict[str, Any]:
    """ecron with ``size`` tasks at rest and ``--fire-tasks`` firing every second."""
    label = f"fire-{size}"
    url = await args.databases.new()
    yaml = fire_yaml(f"{service.url}/jobs/{label}", args.fire_tasks, size)
    config = write_config(scratch / f"config-{label}", yaml)
    spawned = time.time()
    daemon = Daemon.start(config, url, scratch, name=f"ecron-{label}")
    try:
        ready_at = await daemon.wait_ready(args.ready_timeout)
        watch = await Watch.open(daemon, url)
        wanted = profiled(args, "fire", size)
        used, start, end = await count_fires(args, daemon.child, ready_at, service, label, wanted)
        account = await watch.close()
        rss = daemon.child.rss()
    finally:
        await daemon.child.stop()
    profile = used.pop("profile", None)
    figures = await fire_figures(args, service, label, used, (start, end))
    if profile is not None:
        figures["profile"] = profile
    figures.update(
        at_rest=size,
        fire_tasks=args.fire_tasks,
        ready_s=round(ready_at - spawned, 2),
        rss_mib=round(rss / 2**20, 1),
        **account,
        log=str(daemon.child.log_path),
    )
    figures["held"] = held(figures)
    return figures


async def fire_baseline(args: Any, service: Service, size: int, scratch: Path) -> dict[str, Any]:
    """In-memory APScheduler with the fire tasks and ``size`` jobs at rest."""
    label = f"baseline-{size}"
    command = [sys.executable, "-m", "bench.baseline_scheduler", "every"]
    command += ["--tasks", str(args.fire_tasks), "--url", f"{service.url}/jobs/{label}"]
    command += ["--at-rest", str(size)]
    child = Child.start(f"apscheduler-{size}", command, SUBJECT_CORE, scratch, {})
    try:
        await child.wait_line("ready", args.ready_timeout)
        used, start, end = await count_fires(args, child, time.time(), service, label)
        rss = child.rss()
    finally:
        await child.stop()
    figures = await fire_figures(args, service, label, used, (start, end))
    figures.update(at_rest=size, fire_tasks=args.fire_tasks, rss_mib=round(rss / 2**20, 1))
    return figures


# -- run: runs asked at a fixed rate beside N held -------------------------------------------


async def ask_paced(api: str, task: str, rate: float, seconds: float) -> list[RunAsked]:
    """``rate`` runs a second for ``seconds`` through ``POST /api/v1/tasks/{task}/run``, open
    loop: request k leaves at start + k / rate whether or not those before it were answered
    (on one session of up to ``PACED_CONNECTIONS`` connections; a wait for one is timed)."""
    count = round(rate * seconds)
    timeout = aiohttp.ClientTimeout(total=RUN_TIMEOUT)
    connector = aiohttp.TCPConnector(limit=PACED_CONNECTIONS)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        started = time.monotonic()
        asked = []
        for k in range(count):
            await asyncio.sleep(max(0.0, started + k / rate - time.monotonic()))
            asked.append(asyncio.create_task(ask_run(session, f"{api}/api/v1/tasks/{task}")))
        return list(await asyncio.gather(*asked))


async def hold_runs(
    args: Any, daemon: Daemon, service: Service, label: str, size: int
) -> dict[str, Any]:
    """The setup: ``size`` runs made as fast as the clients go, and held (their triggers in)."""
    started = time.monotonic()
    asked = await ask_runs(daemon.api, [RUN_TASK], size, args.clients)
    created = runs_figures(asked)
    arrived = await wait_triggers(service, label, created["runs_created"], args.drain_timeout)
    seconds = time.monotonic() - started
    return {
        "held_runs": created["runs_created"],
        "held_triggers": arrived,
        "setup_s": round(seconds, 1),
        "setup_runs_per_s": round(created["runs_created"] / seconds, 1),
    }


async def measure_run(
    args: Any, service: Service, size: int, scratch: Path
) -> tuple[dict[str, Any], None]:
    """ecron holding ``size`` runs, asked for more at ``--run-rate`` over the window; no
    baseline."""
    label = f"run-{size}"
    url = await args.databases.new()
    yaml = manual_tasks(f"{service.url}/jobs/{label}", 1, "1h", "1d")
    config = write_config(scratch / f"config-{label}", yaml)
    daemon = Daemon.start(config, url, scratch, name=f"ecron-{label}")
    try:
        await daemon.wait_ready(args.ready_timeout)
        await asyncio.sleep(args.settle)
        rss_idle = daemon.child.rss()
        setup = await hold_runs(args, daemon, service, label, size)
        await asyncio.sleep(args.settle)
        rss_held = daemon.child.rss()
        watch = await Watch.open(daemon, url)
        recorder = profiler(args, daemon.child, profiled(args, "run", size))
        meters = Meters(daemon.child, service, args.databases)
        started = time.monotonic()
        asked = await ask_paced(daemon.api, RUN_TASK, args.run_rate, args.seconds)
        created = runs_figures(asked)
        wanted = setup["held_runs"] + created["runs_created"]
        arrived = await wait_triggers(service, label, wanted, args.drain_timeout)
        seconds = time.monotonic() - started
        used = meters.used()
        profile = await recorder.stop() if recorder else None
        account = await watch.close()
    finally:
        await daemon.child.stop()
    runs = created["runs_created"]
    figures = {
        "held_before": size,
        **setup,
        "kib_per_run_held": round((rss_held - rss_idle) / 1024 / size, 2) if size else None,
        "asked": len(asked),
        **created,
        "all_triggered": arrived >= wanted,
        "runs_per_s": round(runs / args.seconds, 1),
        **latency_figures([a.latency for a in asked], "run"),
        "window_s": round(seconds, 2),
        "cpu_us_per_run": per_unit(used["cpu"], runs),
        **cpu_figures(used, seconds),
        **account,
        "log": str(daemon.child.log_path),
    }
    if profile is not None:
        figures["profile"] = profile
    figures["held"] = held(figures)
    return figures, None


# -- sizes and growth ---------------------------------------------------------------------


def profiled(args: Any, name: str, size: int) -> bool:
    """Whether ``--profile`` asks for the window of measurement ``name`` at ``size``: the
    ``--profile-measurement``'s, at the first size."""
    return args.profile_measurement == name and size == int(args.sizes.split(",")[0])


async def measure_sizes(
    args: Any, name: str, sizes: list[int], scratch: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """One measurement at each size, with one user service throughout: ecron's figures,
    and the baseline's (None for ``run``, which has none)."""
    mine, theirs = [], []
    async with Service.running(SERVICE_MODE[name], scratch) as service:
        for size in sizes:
            await service.post("/_reset")
            ecron, baseline = await MEASURE[name](args, service, size, scratch)
            warn_unheld(name, size, ecron)
            mine.append(ecron)
            if baseline is not None:
                theirs.append(baseline)
    return mine, theirs or None


def growth_of(
    sizes: list[int],
    mine: list[dict[str, Any]],
    theirs: list[dict[str, Any]] | None,
    figure: str,
    limit: float,
) -> dict[str, Any]:
    """Each size's figure over the smallest size's, ecron's and the baseline's; ``flat``
    when each of ecron's is at most ``limit`` (None when a figure is missing or not one)."""
    values = [m.get(figure) for m in mine]
    grown = [ratio(value, values[0]) for value in values]
    kept = [bool(m["held"]) for m in mine]
    counted = all(kept) and None not in grown
    result: dict[str, Any] = {
        "figure": figure,
        "sizes": sizes,
        "ecron": values,
        "growth": grown,
        "held": kept,
        "limit": limit,
        "flat": all(g is not None and g <= limit for g in grown) if counted else None,
    }
    if theirs is not None:
        base = [t.get(figure) for t in theirs]
        result.update(baseline=base, baseline_growth=[ratio(b, base[0]) for b in base])
    return result


#: Each measurement's user service mode, its function (one size: ecron's figures and the
#: baseline's) and its table.
SERVICE_MODE = {"poll": "polls", "fire": "triggers", "run": "runs"}
MEASURE = {"poll": measure_poll, "fire": measure_fire, "run": measure_run}
REPORT = {"poll": report_poll, "fire": report_fire, "run": report_run}


async def run(args: Any) -> dict[str, Any]:
    sizes = sorted({int(text) for text in args.sizes.split(",") if text})
    given = {m for m in args.measurements.split(",") if m}
    if given - set(MEASUREMENTS) or not sizes:
        raise SystemExit(f"measurements are of {', '.join(MEASUREMENTS)}; sizes one at least")
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = dict.fromkeys(MEASUREMENTS)
    grown: dict[str, Any] = {}
    with scratch_dir(args.keep) as scratch:
        async with Databases(args.database, scratch) as databases:
            args.databases = databases
            pin_clients(args.client_core)  # after the database server started: not it
            for name in (m for m in MEASUREMENTS if m in given):  # fire before run: beside it
                mine[name], theirs[name] = await measure_sizes(args, name, sizes, scratch)
                grown[name] = growth_of(sizes, mine[name], theirs[name], FIGURE[name], args.flat)
                if name == "run":  # no baseline: the CPU per fire at the same size beside it
                    fires = mine.get("fire") or [{} for _ in sizes]
                    grown[name]["beside_cpu_us_per_fire"] = [f.get(FIGURE["fire"]) for f in fires]
                REPORT[name](args, mine[name], theirs[name] or [], grown[name])
    params = {k: getattr(args, k) for k in PARAMS}
    flat = {name: grown[name]["flat"] for name in grown}
    print(f"\nflat (each size within {args.flat:g}x of {sizes[0]:,}): {flat}")
    figures = {"ecron": mine, "baseline": theirs, "growth": grown, "flat": flat}
    return emit("growth", params, figures)


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--sizes", default="1000,10000,50000", help="what the node holds")
    options.add_argument("--measurements", default=",".join(MEASUREMENTS), help="of poll,fire,run")
    options.add_argument("--seconds", type=float, default=30.0, help="each measured window")
    options.add_argument("--poll-rate", type=float, default=1000.0, help="poll: polls/s wanted")
    options.add_argument("--fire-tasks", type=int, default=200, help="fire: tasks every 1s")
    options.add_argument("--run-rate", type=float, default=100.0, help="run: runs asked/s")
    options.add_argument("--clients", type=int, default=16, help="concurrent setup requests")
    options.add_argument("--warmup", type=float, default=10.0, help="fire: after ready, s")
    options.add_argument("--drain", type=float, default=3.0, help="fire: late triggers, s")
    options.add_argument("--settle", type=float, default=2.0, help="idle wait before, s")
    options.add_argument("--flat", type=float, default=1.25, help="the largest growth that is flat")
    options.add_argument("--ramp-timeout", type=float, default=900.0)
    options.add_argument("--drain-timeout", type=float, default=300.0, help="run: triggers, s")
    options.add_argument("--ready-timeout", type=float, default=300.0)
    options.add_argument("--profile", help="py-spy raw profile of ecron in one window, to FILE")
    options.add_argument(
        "--profile-measurement",
        choices=["fire", "run"],
        default="run",
        help="the measurement whose window at the first size --profile records",
    )
    options.add_argument(
        "--client-core",
        type=int,
        default=SERVICE_CORE,
        help="the core this script's clients run on (the service's; -1: not pinned)",
    )
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

"""``startup``: from spawning ``ecron run`` (the bench venv's) until ``/healthz`` answers 200,
with 0, 1,000 and 10,000 tasks, on a fresh database and on one that already has them;
against a bare aiohttp app answering ``/healthz``, started the same way.

    .venv/bin/python -m bench.startup --tasks 0,1000,10000 --runs 3 [--database postgresql]

Each run spawns the process pinned to core 0 and asks ``/healthz`` every 20 ms. "fresh" is a
new, empty database (ecron creates the schema and the tasks); "existing" restarts on the
database the fresh run left. Tasks are nightly crons that do not fire during the run. The
figures are min, median and max over ``--runs`` runs, and the RSS once ready.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Child,
    Daemon,
    Databases,
    emit,
    free_port,
    parse,
    parser,
    scratch_dir,
    tasks_yaml,
    wait_http,
    write_config,
)
from bench.profile import Recorder, show

BARE_APP = """
import sys
from aiohttp import web
async def healthz(request):
    return web.json_response({"status": "ok"})
app = web.Application()
app.add_routes([web.get("/healthz", healthz)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def time_daemon(
    config: Path, url: str, scratch: Path, timeout: float, profile: str | None = None
) -> tuple[float, int]:
    """Spawn the daemon; (seconds until /healthz answered, RSS then). It is stopped after.
    With ``profile``, py-spy records it from its spawn until it answers."""
    spawned = time.time()
    daemon = Daemon.start(config, url, scratch)
    recorder = Recorder(daemon.child.process.pid, Path(profile)) if profile else None
    try:
        ready = await daemon.wait_ready(timeout, "/healthz")
        return ready - spawned, daemon.child.rss()
    finally:
        if recorder is not None:
            show(await recorder.stop())
        await daemon.child.stop()


async def time_bare(scratch: Path, timeout: float) -> tuple[float, int]:
    port = free_port()
    spawned = time.time()
    child = Child.start("bare", [sys.executable, "-c", BARE_APP, str(port)], 0, scratch, {})
    try:
        ready = await wait_http(child, f"http://127.0.0.1:{port}/healthz", timeout)
        return ready - spawned, child.rss()
    finally:
        await child.stop()


def summary(samples: list[tuple[float, int]]) -> dict[str, Any]:
    seconds = [s for s, _ in samples]
    return {
        "runs": len(samples),
        "min_s": round(min(seconds), 3),
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
        "rss_mib": round(statistics.median(r for _, r in samples) / 2**20, 1),
    }


async def measure_size(
    tasks: int, args: Any, databases: Databases, scratch: Path
) -> dict[str, Any]:
    """Fresh and existing-database start-up times of the daemon with ``tasks`` tasks."""
    config = write_config(
        scratch / f"config-{tasks}",
        tasks_yaml("http://127.0.0.1:9/jobs/none", tasks, '"0 3 * * *"'),
    )
    fresh, existing = [], []
    for attempt in range(args.runs):
        url = await databases.new()
        profile = args.profile if attempt == 0 and tasks == args.largest else None
        fresh.append(await time_daemon(config, url, scratch, args.timeout, profile))
        existing.append(await time_daemon(config, url, scratch, args.timeout))
    return {"tasks": tasks, "fresh": summary(fresh), "existing": summary(existing)}


async def run(args: Any) -> dict[str, Any]:
    sizes = [int(n) for n in args.tasks.split(",")]
    args.largest = max(sizes)
    with scratch_dir(args.keep) as scratch:
        async with Databases(args.database, scratch) as databases:
            mine = [await measure_size(n, args, databases, scratch) for n in sizes]
            theirs = summary([await time_bare(scratch, args.timeout) for _ in range(args.runs)])
    report(args, mine, theirs)
    params = {"database": args.database, "tasks": sizes, "runs": args.runs}
    return emit("startup", params, {"ecron": mine, "baseline": theirs})


def report(args: Any, mine: list[dict[str, Any]], theirs: dict[str, Any]) -> None:
    print(f"\nstartup: spawn until /healthz answers 200, {args.runs} runs each, {args.database}")
    print(f"  {'':<28} {'min s':>8} {'median s':>9} {'max s':>8} {'RSS MiB':>8}")
    lines = [
        (f"ecron, {m['tasks']:,} tasks, {state}", m[state])
        for m in mine
        for state in ("fresh", "existing")
    ]
    lines.append(("bare aiohttp app", theirs))
    for label, s in lines:
        times = f"{s['min_s']:>8.3f} {s['median_s']:>9.3f} {s['max_s']:>8.3f}"
        print(f"  {label:<28} {times} {s['rss_mib']:>8.1f}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--tasks", default="0,1000,10000", help="comma-separated sizes")
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--timeout", type=float, default=300.0, help="per start, s")
    options.add_argument(
        "--profile", help="py-spy raw profile of the first fresh start of the largest size"
    )
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

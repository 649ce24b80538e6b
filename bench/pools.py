"""``pools``: the cost of pools. N tasks ``{every: 1s}`` for D seconds, run twice in one
script on the same machine: without pools, then in P pools of ``max_running: M`` (the
tasks dealt out among them). Does sharing limits across tasks cost little (issue 21: at
most 1.2x the CPU per fire of the same load without pools), and are all fire times still
triggered, once each, on time?

    .venv/bin/python -m bench.pools --tasks 2000 --pools 20 --max-running 50 [--database postgresql]

The service answers every trigger ``SUCCESS`` at once (as in ``bench.triggers``), so a
pool's room is taken only between a trigger and its answer, as with short jobs; the pools
are there to be counted and locked in every start transaction, which is what this measures.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import (
    Daemon,
    Databases,
    Service,
    count_rows,
    emit,
    parse,
    parser,
    ratio,
    scratch_dir,
    table,
    tasks_yaml,
    write_config,
)
from bench.triggers import measure

#: Labels of the two runs: with pools (the one measured, and profiled when asked), and the
#: same load without pools (its baseline).
POOLED, PLAIN = "ecron", "plain"


def pooled_yaml(url: str, args: Any) -> str:
    """The same tasks, each in one of ``args.pools`` pools, and the pools' definitions."""
    lines = tasks_yaml(url, args.tasks, "{every: 1s}").splitlines()
    dealt, n = [], 0
    for line in lines:
        dealt.append(line)
        if line.startswith("    url: "):
            dealt.append(f"    pool: p{n % args.pools}")
            n += 1
    pools = ["pools:"] + [f"  p{k}: {{max_running: {args.max_running}}}" for k in range(args.pools)]
    return "\n".join(pools + dealt) + "\n"


async def run_one(
    args: Any, service: Service, url: str, scratch: Path, label: str
) -> dict[str, Any]:
    target = f"{service.url}/jobs/{label}"
    yaml = (
        tasks_yaml(target, args.tasks, "{every: 1s}")
        if label == PLAIN
        else pooled_yaml(target, args)
    )
    config = write_config(scratch / f"config-{label}", yaml)
    spawned = time.time()
    daemon = Daemon.start(config, url, scratch)
    try:
        ready_at = await daemon.wait_ready(args.ready_timeout)
        figures = await measure(daemon.child, ready_at, service, label, args)
        figures["ready_s"] = round(ready_at - spawned, 2)
    finally:
        await daemon.child.stop()
    start = datetime.fromisoformat(figures["window_start"]).timestamp()
    figures.update(await count_rows(url, start, start + args.duration))
    figures["cpu_ms_per_fire"] = (
        round(10 * figures["cpu_percent"] / figures["fired_per_s"], 3)
        if figures["fired_per_s"]
        else None
    )
    return figures


async def run(args: Any) -> dict[str, Any]:
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("triggers", scratch) as service,
        ):
            args.databases = databases
            plain = await run_one(args, service, await databases.new(), scratch, PLAIN)
            pooled = await run_one(args, service, await databases.new(), scratch, POOLED)
    report(args, plain, pooled)
    keys = ("database", "tasks", "pools", "max_running", "duration", "warmup", "drain")
    ratios = {
        "cpu_per_fire": ratio(pooled["cpu_ms_per_fire"], plain["cpu_ms_per_fire"]),
        "fired_per_s": ratio(pooled["fired_per_s"], plain["fired_per_s"]),
        "lag_p99": ratio(pooled["lag_ms_p99"], plain["lag_ms_p99"]),
    }
    params = {k: getattr(args, k) for k in keys}
    return emit("pools", params, {"ecron": pooled, "baseline": plain, "ratio": ratios})


def report(args: Any, plain: dict[str, Any], pooled: dict[str, Any]) -> None:
    keys = [
        ("fire times expected", "expected"),
        ("triggered", "triggered"),
        ("missed", "missed"),
        ("duplicates", "duplicates"),
        ("lag p50, ms", "lag_ms_p50"),
        ("lag p99, ms", "lag_ms_p99"),
        ("triggers sent/s in the window", "fired_per_s"),
        ("CPU, % of a core", "cpu_percent"),
        ("CPU per fire, ms", "cpu_ms_per_fire"),
        ("PostgreSQL's CPU, % of a core", "database_cpu_percent"),
        ("rows SUCCESS", "rows_success"),
    ]
    title = (
        f"pools: {args.tasks} tasks {{every: 1s}} in {args.pools} pools of max_running "
        f"{args.max_running}, {args.duration}s window, {args.database}"
    )
    rows = [(label, plain.get(k), pooled.get(k)) for label, k in keys]
    table(title, rows, ("no pools", "pools"))


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--tasks", type=int, default=2000)
    options.add_argument("--pools", type=int, default=20)
    options.add_argument("--max-running", type=int, default=50)
    options.add_argument("--duration", type=int, default=20, help="measured window, seconds")
    options.add_argument("--warmup", type=float, default=5.0, help="seconds after ready")
    options.add_argument("--drain", type=float, default=5.0, help="seconds for late triggers")
    options.add_argument("--ready-timeout", type=float, default=300.0)
    options.add_argument("--profile", help="py-spy raw profile of ecron in pools, to FILE")
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

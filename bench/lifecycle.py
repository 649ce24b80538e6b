"""``lifecycle``: database statements and transactions per execution life (a trigger, 10
polls with changing progress, success), net of what the daemon does when idle.

    .venv/bin/python -m bench.lifecycle --executions 100 [--database postgresql]

The daemon runs in a process of its own on the daemon's interpreter (the bench venv, ecron
as installed; ``bench/lifecycle_daemon.py``), pinned to core 0, as ``ecron.daemon.Daemon``
on ecron's own loop, so that SQLAlchemy engine events on its reader and writer engines can
count every statement (``before_cursor_execute``; an executemany counts once, and by its
rows too) and every transaction (``begin``, ``commit``, ``rollback``). K executions of a
manual task (``concurrency: allow``) are started through ``POST /api/v1/tasks/{name}/run``;
the user service (core 1) answers the trigger RUNNING, polls 1-10 RUNNING with rising
progress and the 11th SUCCESS. The run window lasts until every execution is SUCCESS in the
database (checked on an engine of its own, not counted); then as long a window with nothing
running is counted, and subtracted.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import (
    SUBJECT_CORE,
    Child,
    Databases,
    Service,
    current_ecron,
    emit,
    parse,
    parser,
    scratch_dir,
    table,
)
from bench.lifecycle_daemon import KINDS, RESULT_PREFIX


async def count_life(args: Any, database_url: str, service: Service, scratch: Path) -> Any:
    """Run ``bench.lifecycle_daemon`` on the daemon's interpreter, pinned to the subject
    core; (run counts, idle counts, seconds, 409s) from its result line."""
    job = {
        "database_url": database_url,
        "service_url": service.url,
        "scratch": str(scratch),
        "poll_interval": args.poll_interval,
        "executions": args.executions,
        "settle": args.settle,
        "timeout": args.timeout,
    }
    ecron = current_ecron()
    command = [str(ecron.python), "-m", "bench.lifecycle_daemon", json.dumps(job)]
    child = Child.start("ecron", command, SUBJECT_CORE, scratch, {})
    try:
        line = await child.wait_line(RESULT_PREFIX, args.timeout * 2 + args.settle + 60)
    finally:
        await child.stop()
    counts = json.loads(line)["counts"]
    ecron.loops.append(counts["loop"])

    def counters(window: dict[str, dict[str, int]]) -> dict[str, Counter[str]]:
        return {key: Counter(value) for key, value in window.items()}

    return counters(counts["run"]), counters(counts["idle"]), counts["seconds"], counts["conflicts"]


def per_execution(run: dict[str, Counter[str]], idle: dict[str, Counter[str]], k: int) -> Any:
    """Net counts per execution: (run - idle) / k, by kind and in total."""

    def net(key: str, kind: str) -> float:
        return round((run[key][kind] - idle[key][kind]) / k, 2)

    kinds = (*KINDS, "BEGIN", "other")
    statements = {kind: net("statements", kind) for kind in kinds}
    rows = {kind: net("rows", kind) for kind in kinds}
    transactions = {name: net("transactions", name) for name in ("begin", "commit", "rollback")}
    texts = {text: net("texts", text) for text in run["texts"]}
    top = sorted(texts.items(), key=lambda item: -item[1])[:12]
    return {
        "statements": round(sum(v for kind, v in statements.items() if kind != "BEGIN"), 2),
        "statement_rows": round(sum(v for kind, v in rows.items() if kind != "BEGIN"), 2),
        "transactions": transactions["begin"],
        "statements_by_kind": statements,
        "rows_by_kind": rows,
        "transactions_by_kind": transactions,
        "top_statements": [[text, n] for text, n in top if n > 0],
    }


async def run(args: Any) -> dict[str, Any]:
    with scratch_dir(args.keep) as scratch:
        async with (
            Databases(args.database, scratch) as databases,
            Service.running("lifecycle", scratch) as service,
        ):
            run_counts, idle, seconds, conflicts = await count_life(
                args, await databases.new(), service, scratch
            )
    figures = per_execution(run_counts, idle, args.executions)
    raw = {key: dict(value) for key, value in run_counts.items()}
    idle_raw = {key: dict(value) for key, value in idle.items()}
    report(args, figures)
    params = {k: getattr(args, k) for k in ("database", "executions", "poll_interval")}
    return emit(
        "lifecycle",
        params,
        {
            "ecron": figures,
            "baseline": {"idle_window": idle_raw},
            "run_window": raw,
            "window_s": round(seconds, 2),
            "conflicts_409": conflicts,
        },
    )


def report(args: Any, figures: dict[str, Any]) -> None:
    rows = [
        ("statements", figures["statements"], None),
        ("statement rows", figures["statement_rows"], None),
        ("transactions", figures["transactions"], None),
    ]
    by_rows = figures["rows_by_kind"]
    rows += [(f"  {k}", v, by_rows[k]) for k, v in figures["statements_by_kind"].items()]
    rows += [(f"  {k}", v, None) for k, v in figures["transactions_by_kind"].items()]
    rows += [(f"  {text[:60]}", n, None) for text, n in figures["top_statements"]]
    title = (
        f"lifecycle: per execution (trigger, 10 polls, success), net of idle; "
        f"{args.executions} executions, {args.database}"
    )
    table(title, rows, ("per execution", "rows"))


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--executions", type=int, default=100)
    options.add_argument("--poll-interval", default="1s", help="the task's poll_interval")
    options.add_argument("--settle", type=float, default=2.0, help="idle wait before, s")
    options.add_argument("--timeout", type=float, default=300.0)
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

"""``lifecycle``: database statements and transactions per execution life (a trigger, 10
polls with changing progress, success), net of what the daemon does when idle.

    .venv/bin/python -m bench.lifecycle --executions 100 [--database postgresql]

The daemon runs in this process (pinned to core 0) so that SQLAlchemy engine events on its
reader and writer engines can count every statement (``before_cursor_execute``; an
executemany counts once, and by its rows too) and every transaction (``begin``, ``commit``,
``rollback``). K executions of a manual task (``concurrency: allow``) are started through
``POST /api/v1/tasks/{name}/run``; the user service (core 1) answers the trigger RUNNING,
polls 1-10 RUNNING with rising progress and the 11th SUCCESS. The run window lasts until
every execution is SUCCESS in the database (checked on an engine of its own, not counted);
then as long a window with nothing running is counted, and subtracted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from bench.common import SUBJECT_CORE, Databases, Service, emit, parser, scratch_dir, table

TASK = "life"
KINDS = ("SELECT", "INSERT", "UPDATE", "DELETE")
#: How much of a statement's text identifies it in ``top_statements``.
TEXT = 90


class Tally:
    """Statements, statement rows and transactions seen on some engines."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        self.transactions: Counter[str] = Counter()
        #: Statements by their text (cut to ``TEXT`` characters), to see which ones they are.
        self.texts: Counter[str] = Counter()

    def attach(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._statement)
        for name in ("begin", "commit", "rollback"):
            event.listen(engine, name, self._transaction(name))

    def _statement(self, _conn: Any, _cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        kind = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "?"
        kind = kind if kind in KINDS else ("BEGIN" if kind == "BEGIN" else "other")
        self.statements[kind] += 1
        self.texts[" ".join(statement.split())[:TEXT]] += 1
        executemany = bool(rest[-1]) if rest else False
        self.rows[kind] += len(params) if executemany and params is not None else 1

    def _transaction(self, name: str) -> Any:
        def count(*_: Any) -> None:
            self.transactions[name] += 1

        return count

    def snapshot(self) -> dict[str, Counter[str]]:
        return {
            "statements": Counter(self.statements),
            "rows": Counter(self.rows),
            "transactions": Counter(self.transactions),
            "texts": Counter(self.texts),
        }


def since(now: dict[str, Counter[str]], then: dict[str, Counter[str]]) -> dict[str, Counter[str]]:
    return {key: now[key] - then[key] for key in now}


def make_config(database_url: str, service_url: str, scratch: Path, poll: str) -> Any:
    from ecron.config.model import Config, DaemonSettings, TaskSpec

    spec = TaskSpec.model_validate(
        {
            "name": TASK,
            "schedule": "manual",
            "url": f"{service_url}/jobs/life",
            "poll_interval": poll,
            "task_timeout": "1h",
            "concurrency": "allow",
        }
    )
    settings = {"database": database_url, "listen": "127.0.0.1:0", "log": {"level": "warning"}}
    return Config(
        directory=str(scratch),
        daemon=DaemonSettings.model_validate(settings),
        tasks={TASK: spec},
    )


async def start_runs(api: str, count: int) -> tuple[int, int]:
    """``count`` manual runs through the API, each retried on 409; (started, 409s seen)."""
    started = conflicts = 0
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            for _attempt in range(200):
                async with session.post(f"{api}/api/v1/tasks/{TASK}/run") as response:
                    if response.status == 202:
                        started += 1
                        break
                    if response.status != 409:
                        text = await response.text()
                        raise RuntimeError(f"run answered {response.status}: {text}")
                    conflicts += 1
                await asyncio.sleep(0.002)
    return started, conflicts


async def wait_success(url: str, count: int, timeout: float) -> None:
    """Wait until ``count`` executions of the task are SUCCESS (read on a separate engine)."""
    from ecron.store.engine import Engines
    from ecron.store.tables import execution_table as ex

    engines = Engines(url)
    query = sa.select(sa.func.count()).where(ex.c.task == TASK, ex.c.status == "SUCCESS")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            async with engines.read() as conn:
                if int((await conn.execute(query)).scalar_one()) >= count:
                    return
            await asyncio.sleep(0.1)
    finally:
        await engines.dispose()
    raise TimeoutError(f"not all {count} executions ended SUCCESS within {timeout}s")


async def count_life(args: Any, database_url: str, service: Service, scratch: Path) -> Any:
    """Run the daemon and count; (run counts, idle counts, seconds, 409s)."""
    from ecron.daemon import Daemon
    from ecron.logs import configure

    configure("json", "warning")
    config = make_config(database_url, service.url, scratch, args.poll_interval)
    tally = Tally()
    async with Daemon(config) as daemon:
        engines = daemon.store.engines
        tally.attach(engines.reader.sync_engine)
        if engines.writer is not engines.reader:
            tally.attach(engines.writer.sync_engine)
        await asyncio.sleep(args.settle)
        before, started = tally.snapshot(), time.monotonic()
        _, conflicts = await start_runs(f"http://127.0.0.1:{daemon.port}", args.executions)
        await wait_success(database_url, args.executions, args.timeout)
        seconds = time.monotonic() - started
        run = since(tally.snapshot(), before)
        before = tally.snapshot()
        await asyncio.sleep(seconds)
        idle = since(tally.snapshot(), before)
    return run, idle, seconds, conflicts


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
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {SUBJECT_CORE})
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
    asyncio.run(run(options.parse_args(argv)))


if __name__ == "__main__":
    main()

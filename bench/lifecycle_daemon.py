"""The daemon side of ``lifecycle``: ecron's ``Daemon`` in this process, with SQLAlchemy
engine events counting its statements and transactions. It runs on the daemon's
interpreter (the bench venv: ecron as installed, so nothing here may import psutil or the
rest of ``bench``) and on the loop ``ecron run`` uses (``ecron.loop.run``).

    .bench-venv/bin/python -m bench.lifecycle_daemon '{"database_url": ..., ...}'

It starts K runs through ``POST /api/v1/tasks/{name}/run``, waits until all are SUCCESS,
counts an equally long idle window, and prints one line starting with ``{"counts": ``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

TASK = "life"
KINDS = ("SELECT", "INSERT", "UPDATE", "DELETE")
#: How much of a statement's text identifies it in ``top_statements``.
TEXT = 90
#: The result line starts with this.
RESULT_PREFIX = '{"counts": '


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
                async with session.post(f"{api}/api/v1/tasks/{TASK}/run", json={}) as response:
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


async def count_life(job: dict[str, Any]) -> dict[str, Any]:
    """Run the daemon and count: the run window's counts, the idle window's, its length,
    the 409s retried, and the loop the daemon ran on."""
    from ecron.daemon import Daemon
    from ecron.logs import configure
    from ecron.loop import loop_name

    configure("json", "warning")
    config = make_config(
        job["database_url"], job["service_url"], Path(job["scratch"]), job["poll_interval"]
    )
    tally = Tally()
    async with Daemon(config) as daemon:
        engines = daemon.store.engines
        tally.attach(engines.reader.sync_engine)
        if engines.writer is not engines.reader:
            tally.attach(engines.writer.sync_engine)
        await asyncio.sleep(job["settle"])
        before, started = tally.snapshot(), time.monotonic()
        _, conflicts = await start_runs(f"http://127.0.0.1:{daemon.port}", job["executions"])
        await wait_success(job["database_url"], job["executions"], job["timeout"])
        seconds = time.monotonic() - started
        run = since(tally.snapshot(), before)
        before = tally.snapshot()
        await asyncio.sleep(seconds)
        idle = since(tally.snapshot(), before)
    return {
        "run": {key: dict(value) for key, value in run.items()},
        "idle": {key: dict(value) for key, value in idle.items()},
        "seconds": seconds,
        "conflicts": conflicts,
        "loop": loop_name(),
    }


def main() -> None:
    from ecron.loop import run

    result = run(count_life(json.loads(sys.argv[1])))
    print(json.dumps({"counts": result}), flush=True)


if __name__ == "__main__":
    main()

"""How much does ecron's polling cost next to the bare aiohttp client doing the same requests?

DESIGN.md's budget: polling thousands of executions must cost close to what the raw
aiohttp client costs for the same requests. This script measures both in one process,
against one user service running in another process (so its CPU is not counted):

1. bare aiohttp in bursts: the client alone sends N x R GETs, 64 at a time (the cheapest
   way to send them: every event-loop wake-up serves many answers);
2. bare aiohttp at the same pace: N coroutines, each GETting every ``--interval`` (the
   same requests at the same times as the daemon: the fair baseline);
3. ecron: N RUNNING executions adopted by a real daemon (SQLite), polled every
   ``--interval``; measured while R rounds of polls go out, and while it idles as long.

It reports CPU per request for each and the ratios, plus the database transactions the
daemon made during those polls (the budget says: none for polls that change nothing).

    .venv/bin/python bench/poll_overhead.py --executions 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

SERVICE = """
import sys
from aiohttp import web
count = 0
async def poll(request):
    global count
    count += 1
    return web.json_response({"status": "RUNNING", "progress": 50, "message": "steady"})
async def trigger(request):
    return web.json_response({"status": "RUNNING"})
async def stats(request):
    return web.json_response({"polls": count})
app = web.Application()
app.add_routes([web.get("/jobs/x/{eid}", poll), web.post("/jobs/x", trigger),
                web.get("/stats", stats)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def polls_done(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(f"{base}/stats") as response:
        return int((await response.json())["polls"])


async def baseline(base: str, executions: int, rounds: int) -> tuple[float, int]:
    """CPU seconds spent by the bare client for executions x rounds GETs."""
    limit = asyncio.Semaphore(64)
    connector = aiohttp.TCPConnector(limit=128)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(eid: str) -> None:
            async with limit, session.get(f"{base}/jobs/x/{eid}") as response:
                await response.read()

        cpu = time.process_time()
        for _ in range(rounds):
            await asyncio.gather(*(one(f"e{n}") for n in range(executions)))
        return time.process_time() - cpu, executions * rounds


async def paced(base: str, executions: int, rounds: int, interval: float) -> tuple[float, int]:
    """CPU seconds spent by the bare client making the same requests at the same pace as
    the daemon: each execution polled every ``interval`` (one coroutine each)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128)) as session:
        stop = asyncio.get_running_loop().time() + interval * rounds
        sent = 0

        async def one(eid: str, offset: float) -> None:
            nonlocal sent
            await asyncio.sleep(offset)
            while asyncio.get_running_loop().time() < stop:
                async with session.get(f"{base}/jobs/x/{eid}") as response:
                    await response.read()
                sent += 1
                await asyncio.sleep(interval)

        cpu = time.process_time()
        await asyncio.gather(*(one(f"e{n}", interval * n / executions) for n in range(executions)))
        return time.process_time() - cpu, sent


async def with_ecron(
    base: str, executions: int, rounds: int, interval: float
) -> tuple[float, float, int, int]:
    """CPU seconds spent by a daemon while it polls ``executions`` for ``rounds`` rounds, and
    while it idles as long with nothing in flight."""
    from ecron.config.model import Config, DaemonSettings, TaskSpec
    from ecron.core import Execution, Status
    from ecron.daemon import Daemon
    from ecron.ids import new_eid

    with tempfile.TemporaryDirectory() as scratch:
        database = f"sqlite+aiosqlite:///{Path(scratch) / 'bench.db'}"
        spec = TaskSpec.model_validate(
            {
                "name": "bench",
                "schedule": "manual",
                "url": f"{base}/jobs/x",
                "poll_interval": f"{int(interval * 1000)}ms",
                "task_timeout": "1d",
                "concurrency": "allow",
            }
        )
        config = Config(
            directory=scratch,
            daemon=DaemonSettings(
                database=database, listen="127.0.0.1:0", poll_workers=64, log={"level": "warning"}
            ),  # type: ignore[arg-type]
            tasks={"bench": spec},
        )
        async with Daemon(config) as daemon, aiohttp.ClientSession() as session:
            await asyncio.sleep(interval)
            cpu = time.process_time()
            await asyncio.sleep(interval * rounds)
            idle = time.process_time() - cpu  # the loops' own cost (ticks, leases), no polls
            now = datetime.now(UTC)
            for n in range(executions):
                execution = Execution(
                    eid=new_eid(),
                    task="bench",
                    scheduled_at=now + timedelta(milliseconds=n),
                    created_at=now,
                    status=Status.RUNNING,
                    triggered_at=now,
                    deadline=now + timedelta(days=1),
                    owner=daemon.node_id,
                    lease_until=now + timedelta(hours=1),
                    fence=1,
                )
                stored = await daemon.store.create_execution(execution)
                assert stored is not None
                daemon.executor.adopt(stored)
            await asyncio.sleep(interval * 2)  # the first (changing) poll of each is done
            transactions = daemon.writer.transactions
            start = await polls_done(session, base)
            cpu = time.process_time()
            await asyncio.sleep(interval * rounds)
            spent = time.process_time() - cpu
            done = await polls_done(session, base) - start
            return spent, idle, done, daemon.writer.transactions - transactions


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval, seconds")
    parser.add_argument("--port", type=int, default=18099)
    args = parser.parse_args()
    service = subprocess.Popen([sys.executable, "-c", SERVICE, str(args.port)])  # noqa: ASYNC220
    base = f"http://127.0.0.1:{args.port}"
    try:
        await asyncio.sleep(1.5)
        raw_cpu, raw_requests = await baseline(base, args.executions, args.rounds)
        paced_cpu, paced_requests = await paced(base, args.executions, args.rounds, args.interval)
        ecron_cpu, idle_cpu, ecron_polls, writes = await with_ecron(
            base, args.executions, args.rounds, args.interval
        )
    finally:
        service.terminate()
        service.wait()
    raw = raw_cpu / raw_requests
    same_pace = paced_cpu / max(1, paced_requests)
    mine = ecron_cpu / max(1, ecron_polls)
    marginal = (ecron_cpu - idle_cpu) / max(1, ecron_polls)
    print(f"executions in flight     {args.executions}, polled every {args.interval:g}s")
    print(f"bare aiohttp, in bursts  {raw_requests} requests, {raw * 1e6:.0f} us CPU each")
    print(f"bare aiohttp, same pace  {paced_requests} requests, {same_pace * 1e6:.0f} us CPU each")
    print(f"ecron (daemon, SQLite)   {ecron_polls} polls, {mine * 1e6:.0f} us CPU each")
    print(f"  of which idle loops    {idle_cpu / max(1, ecron_polls) * 1e6:.0f} us (ticks, leases)")
    print(
        f"ratio ecron / same pace  {mine / same_pace:.2f} ({marginal / same_pace:.2f} without idle)"
    )
    print(f"ratio ecron / bursts     {mine / raw:.2f} ({marginal / raw:.2f} without idle)")
    print(f"database transactions    {writes} during {ecron_polls} unchanged polls")
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    asyncio.run(main())

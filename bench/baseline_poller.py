"""The baseline of ``polls``: a plain aiohttp poller with no database.

One ``ClientSession``, a heap of next-poll times, and 100 worker coroutines fed from the
heap (a dispatcher moves every due id to the workers' queue in one wake-up); each answer is
read as JSON, and its id goes back on the heap ``--interval`` seconds after the answer (as
ecron's ``poll_interval`` does).

``python -m bench.baseline_poller --url URL --ids N`` prints ``ready``, waits for SIGUSR1
(so its idle memory can be read first), polls ``URL/b<n>`` for n < N until SIGTERM, and
then prints how many polls it made.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import signal
from typing import Any

import aiohttp


class Poller:
    """The heap, the dispatcher and the workers."""

    def __init__(self, session: aiohttp.ClientSession, url: str, interval: float) -> None:
        self.session = session
        self.url = url
        self.interval = interval
        self.heap: list[tuple[float, str]] = []
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.pushed = asyncio.Event()
        self.polls = 0
        self.failures = 0

    def load(self, ids: list[str]) -> None:
        """Every id due once within the first interval, spread evenly."""
        now = asyncio.get_running_loop().time()
        step = self.interval / max(1, len(ids))
        self.heap = [(now + n * step, eid) for n, eid in enumerate(ids)]
        heapq.heapify(self.heap)

    async def dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.heap:
                self.pushed.clear()
                await self.pushed.wait()
                continue
            now = loop.time()
            delay = self.heap[0][0] - now
            if delay > 0:
                # A new entry is always due later than the top, so sleeping to the top is safe.
                await asyncio.sleep(delay)
                continue
            while self.heap and self.heap[0][0] <= now:  # everything due, in one wake-up
                self.queue.put_nowait(heapq.heappop(self.heap)[1])

    async def work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            eid = await self.queue.get()
            try:
                async with self.session.get(f"{self.url}/{eid}") as response:
                    await response.json()
                self.polls += 1
            except aiohttp.ClientError:
                self.failures += 1
            heapq.heappush(self.heap, (loop.time() + self.interval, eid))
            self.pushed.set()


async def run(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    go, stop = asyncio.Event(), asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    connector = aiohttp.TCPConnector(limit=args.workers)
    async with aiohttp.ClientSession(connector=connector) as session:
        poller = Poller(session, args.url, args.interval)
        print("ready", flush=True)
        await go.wait()
        poller.load([f"b{n}" for n in range(args.ids)])
        tasks = [asyncio.create_task(poller.dispatch())]
        tasks += [asyncio.create_task(poller.work()) for _ in range(args.workers)]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(f"done polls={poller.polls} failures={poller.failures}", flush=True)


def run_on_ecrons_loop(main: Any) -> None:
    """Run on the event loop ecron runs on (uvloop, a dependency of ecron, where it is
    installed), so that the baseline and ecron are measured on the same loop; say which."""
    try:
        import uvloop
    except ImportError:
        print("loop asyncio", flush=True)
        asyncio.run(main)
        return
    print("loop uvloop", flush=True)
    uvloop.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--ids", type=int, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=100)
    run_on_ecrons_loop(run(parser.parse_args()))


if __name__ == "__main__":
    main()

"""``wire``: the CPU one protocol call costs on the wire ecron uses (``ecron/executor/wire.py``:
kept-alive connections, answers read by httptools) beside aiohttp's ``ClientSession``, the
same GETs to the same service, in one run.

    .venv/bin/python -m bench.wire [--calls 20000] [--rounds 3]

Each round runs both clients, one after the other, in their own process on core 0 (the
service on core 1): ``--calls`` GETs of ``/jobs/{label}/{id}`` from 100 concurrent
workers, each answer's JSON read (orjson for the wire, ``response.json()`` as a plain
aiohttp poller does). The JSON line has every round and the medians; the figure is CPU
per call (user + system, of the client process alone) and its ratio.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from typing import Any

from bench.common import SUBJECT_CORE, Child, Service, emit, parse, parser, ratio, scratch_dir

CLIENTS = ("aiohttp", "wire")
WORKERS = 100

CLIENT = """
import asyncio, resource, sys, time
import orjson
from yarl import URL
URL_BASE, KIND, CALLS = sys.argv[1], sys.argv[2], int(sys.argv[3])

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

async def main():
    if KIND == "wire":
        from ecron.executor.wire import Wire, request_bytes
        wire = Wire(limit=200)
        urls = [URL(f"{URL_BASE}/e{n}") for n in range(1000)]
        requests = [
            request_bytes("GET", url, {"X-Ecron-Execution-Id": f"e{n}"})
            for n, url in enumerate(urls)
        ]
        async def one(n):
            answer = await wire.call(urls[n], requests[n], 10, 1 << 20)
            orjson.loads(answer.body)
    else:
        import aiohttp
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))
        urls = [f"{URL_BASE}/e{n}" for n in range(1000)]
        async def one(n):
            async with session.get(urls[n], headers={"X-Ecron-Execution-Id": f"e{n}"}) as response:
                await response.json()
    left = CALLS
    async def worker():
        nonlocal left
        while left > 0:
            left -= 1
            await one(left % 1000)
    left = 2000
    await asyncio.gather(*(worker() for _ in range(100)))  # warm: connections, caches
    left = CALLS
    started, wall = cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(100)))
    took = time.perf_counter() - wall
    print("result", (cpu() - started) / CALLS * 1e6, CALLS / took, flush=True)

try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


async def one(args: Any, service: Service, kind: str, scratch: Any) -> dict[str, float]:
    url = f"{service.url}/jobs/{kind}"
    command = [sys.executable, "-c", CLIENT, url, kind, str(args.calls)]
    child = Child.start(f"client-{kind}", command, SUBJECT_CORE, scratch, {})
    try:
        line = await child.wait_line("result", args.timeout)
    finally:
        await child.stop()
    _, cpu_us, per_s = line.split()
    return {"cpu_us_per_call": round(float(cpu_us), 1), "calls_per_s": round(float(per_s), 1)}


async def run(args: Any) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    with scratch_dir(args.keep) as scratch:
        async with Service.running("polls", scratch) as service:
            for number in range(args.rounds):
                order = CLIENTS if number % 2 == 0 else CLIENTS[::-1]
                measured = {kind: await one(args, service, kind, scratch) for kind in order}
                rounds.append(measured)
                print(json.dumps({"round": number + 1, **measured}), flush=True)
    medians = {
        kind: statistics.median(r[kind]["cpu_us_per_call"] for r in rounds) for kind in CLIENTS
    }
    figures = {
        "rounds": rounds,
        "median_cpu_us_per_call": medians,
        "ratio": {"wire_over_aiohttp": ratio(medians["wire"], medians["aiohttp"])},
    }
    print(
        f"\nCPU per GET, median of {args.rounds}: aiohttp {medians['aiohttp']:.1f} µs, "
        f"wire {medians['wire']:.1f} µs ({figures['ratio']['wire_over_aiohttp']}x)"
    )
    return emit("wire", {"calls": args.calls, "rounds": args.rounds}, figures)


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__.split("\n\n")[0])
    options.add_argument("--calls", type=int, default=20_000)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--timeout", type=float, default=300.0)
    asyncio.run(run(parse(options, argv)))


if __name__ == "__main__":
    main()

"""``kit``: the CPU a user service spends on ecron's calls through the user-service kit's
aiohttp adapter (sdk/python, ``service.aiohttp_app()``), against a bare aiohttp handler
giving the same answers, in the same run.

    .venv/bin/python -m bench.kit --triggers 3000 --rounds 3

Two service processes, both pinned to core 0 with aiohttp's default event loop: the kit's
(one ``async def`` job that reports progress once and returns a result) and a bare aiohttp
application with a dict of jobs, a task per job and ``web.json_response`` (the same job, the
same JSON). The load, from this process on core 1 with ``--clients`` (8) connections: per
execution, a trigger (``POST /jobs/work`` with ecron's headers and a new eid) and then 10
polls (``GET /jobs/work/<eid>``), one after the other. Each round measures the kit and the
bare handler once each (in alternating order, after a warm-up), reading each process's CPU
(user + system, psutil) around its load. The figure is CPU per execution (the trigger and
its 10 polls), and the kit's over the bare handler's: the issue's budget is 1.5x. Every
answer is checked (200 and a report), and the two services' answers to the first execution
of each round must be the same bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import aiohttp

from bench.common import SERVICE_CORE, SUBJECT_CORE, Child, emit, free_port, pinned, scratch_dir

LABEL_KIT = "kit"
LABEL_BARE = "baseline"
JOB = "work"
POLLS = 10
#: The issue's budget for the kit's CPU over the bare handler's.
BUDGET = 1.5

HEADERS = {
    "X-Ecron-Task": "bench-kit",
    "X-Ecron-Scheduled-At": "2026-01-01T03:00:00.000Z",
    "X-Ecron-Deadline": "2099-01-01T05:00:00.000Z",
    "X-Ecron-Attempt": "1",
    "X-Ecron-Trigger-Kind": "manual",
    "Content-Type": "application/json",
}


# -- the two services (each in its own process) ---------------------------------------------


def serve_kit(port: int) -> None:
    """The kit's aiohttp adapter, one job."""
    from aiohttp import web

    from ecron_service import Run, Service

    service = Service()

    @service.job(JOB)
    async def work(run: Run) -> dict[str, bool]:
        await run.progress(50, "half")
        return {"ok": True}

    ready = f"ready on {port}"
    web.run_app(
        service.aiohttp_app(),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=lambda _: print(ready, flush=True),
    )


def serve_bare(port: int) -> None:
    """The same answers from bare aiohttp handlers: a dict of jobs, a task per job."""
    from aiohttp import web

    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def work(job: dict[str, Any]) -> None:
        job.update(progress=50, message="half")
        await asyncio.sleep(0)
        job.update(status="SUCCESS", progress=100, result={"ok": True})

    async def trigger(request: web.Request) -> web.Response:
        eid = request.headers.get("X-Ecron-Execution-Id", "")
        if not eid:
            return web.json_response({"error": "X-Ecron-Execution-Id is missing"}, status=400)
        await request.read()
        key = (request.match_info["name"], eid)
        job = jobs.get(key)
        if job is None:
            job = jobs[key] = {"status": "RUNNING", "progress": 0}
            task = asyncio.get_running_loop().create_task(work(job))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return web.json_response(job)

    async def poll(request: web.Request) -> web.Response:
        job = jobs.get((request.match_info["name"], request.match_info["eid"]))
        if job is None:
            return web.json_response({"status": "UNKNOWN"}, status=404)
        return web.json_response(job)

    app = web.Application()
    app.router.add_post("/jobs/{name}", trigger)
    app.router.add_get("/jobs/{name}/{eid}", poll)
    ready = f"ready on {port}"
    web.run_app(
        app, host="127.0.0.1", port=port, access_log=None, print=lambda _: print(ready, flush=True)
    )


# -- the load ------------------------------------------------------------------------------------


async def execution(session: aiohttp.ClientSession, url: str, eid: str) -> list[bytes]:
    """A trigger and its polls; every answer's body (each must be a 200)."""
    headers = {**HEADERS, "X-Ecron-Execution-Id": eid}
    bodies = []
    async with session.post(f"{url}/jobs/{JOB}", data=b"{}", headers=headers) as answer:
        bodies.append(await answer.read())
        if answer.status != 200:
            raise RuntimeError(f"trigger of {eid}: HTTP {answer.status}: {bodies[-1]!r}")
    for _ in range(POLLS):
        async with session.get(f"{url}/jobs/{JOB}/{eid}", headers=headers) as answer:
            bodies.append(await answer.read())
            if answer.status != 200 or b'"status"' not in bodies[-1]:
                raise RuntimeError(f"poll of {eid}: HTTP {answer.status}: {bodies[-1]!r}")
    return bodies


async def load(url: str, prefix: str, count: int, clients: int) -> tuple[float, list[bytes]]:
    """``count`` executions from ``clients`` connections; the seconds it took, and the
    answers of the first execution."""
    eids = iter(f"{prefix}-{n:06d}" for n in range(count))
    first: list[bytes] = []
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client() -> None:
            for eid in eids:
                bodies = await execution(session, url, eid)
                if eid.endswith("-000000"):
                    first.extend(bodies)

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.monotonic() - started, first


async def measure(child: Child, url: str, prefix: str, args: argparse.Namespace) -> dict[str, Any]:
    """One side's load, with the service's CPU read around it."""
    before = child.cpu_seconds()
    seconds, first = await load(url, prefix, args.triggers, args.clients)
    cpu = child.cpu_seconds() - before
    child.check_alive()
    return {
        "cpu_s": round(cpu, 3),
        "cpu_us_per_execution": round(cpu / args.triggers * 1e6, 1),
        "requests_per_s": round(args.triggers * (1 + POLLS) / seconds, 1),
        "first": first,
    }


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    per = [r["cpu_us_per_execution"] for r in rounds]
    return {
        "rounds": len(rounds),
        "cpu_us_per_execution": round(statistics.median(per), 1),
        "cpu_us_per_execution_all": per,
        "requests_per_s": round(statistics.median(r["requests_per_s"] for r in rounds), 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with scratch_dir(args.keep) as scratch:
        children: dict[str, tuple[Child, str]] = {}
        try:
            for side in (LABEL_KIT, LABEL_BARE):
                port = free_port()
                command = [sys.executable, "-m", "bench.kit", "--serve", side, "--port", str(port)]
                child = Child.start(side, command, SUBJECT_CORE, scratch, {})
                await child.wait_line("ready on", 30)
                children[side] = (child, f"http://127.0.0.1:{port}")
            measured = await rounds(children, args)
        finally:
            for child, _ in children.values():
                await child.stop(10)
    figures = {side: summary(measured[side]) for side in (LABEL_KIT, LABEL_BARE)}
    ratios = [
        k["cpu_us_per_execution"] / max(b["cpu_us_per_execution"], 1e-9)  # 0: under a tick
        for k, b in zip(measured[LABEL_KIT], measured[LABEL_BARE], strict=True)
    ]
    figures["ratio"] = round(statistics.median(ratios), 3)
    figures["ratios"] = [round(r, 3) for r in ratios]
    figures["same_answers"] = all(
        k["first"] == b["first"]
        for k, b in zip(measured[LABEL_KIT], measured[LABEL_BARE], strict=True)
    )
    report(args, figures)
    params = {
        "triggers": args.triggers,
        "polls": POLLS,
        "rounds": args.rounds,
        "clients": args.clients,
    }
    return emit("kit", params, figures)


async def rounds(
    children: dict[str, tuple[Child, str]], args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    """A warm-up of each, then ``args.rounds`` rounds, the order alternating."""
    for side, (_, url) in children.items():
        await load(url, f"warm-{side}", args.warmup, args.clients)
    measured: dict[str, list[dict[str, Any]]] = {LABEL_KIT: [], LABEL_BARE: []}
    for number in range(args.rounds):
        order = [LABEL_KIT, LABEL_BARE] if number % 2 == 0 else [LABEL_BARE, LABEL_KIT]
        for side in order:
            child, url = children[side]
            measured[side].append(await measure(child, url, f"r{number}-{side}", args))
    return measured


def report(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    kit, bare = figures[LABEL_KIT], figures[LABEL_BARE]
    print(f"\nkit: a trigger and {POLLS} polls; {args.triggers:,} executions a round")
    print(f"  {'':<34} {'kit':>12} {'bare aiohttp':>14}")
    for label, key in (("CPU per execution (µs, median)", "cpu_us_per_execution"),
                       ("requests/s (median)", "requests_per_s")):  # fmt: skip
        print(f"  {label:<34} {kit[key]:>12,.1f} {bare[key]:>14,.1f}")
    verdict = "within" if figures["ratio"] <= BUDGET else "OVER"
    print(f"  kit / bare: {figures['ratio']:.3f} ({verdict} the {BUDGET}x budget)")
    print(f"  by round: {figures['ratios']}; the same answers: {figures['same_answers']}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--triggers", type=int, default=3000, help="executions a round and side")
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--warmup", type=int, default=300, help="executions before measuring")
    options.add_argument("--clients", type=int, default=8, help="concurrent connections")
    options.add_argument("--keep", action="store_true", help="keep the scratch dir (logs)")
    options.add_argument("--serve", choices=[LABEL_KIT, LABEL_BARE], help=argparse.SUPPRESS)
    options.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = options.parse_args(argv)
    if args.serve == LABEL_KIT:
        serve_kit(args.port)
    elif args.serve == LABEL_BARE:
        serve_bare(args.port)
    else:
        pinned_self(SERVICE_CORE)
        asyncio.run(run(args))


def pinned_self(core: int) -> None:
    """Run the load on ``core`` (the services are on the other), where the machine has it."""
    import os

    if (
        hasattr(os, "sched_setaffinity")
        and core < (os.cpu_count() or 1)
        and pinned(["x"], core) != ["x"]
    ):
        os.sched_setaffinity(0, {core})


if __name__ == "__main__":
    main()

"""Running `ecron check-service` against the example service (examples/job_service.py, or a
subclass of its ``JobService`` that breaks a rule) served on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from click.testing import CliRunner

from ecron.cli import check_service, cli  # noqa: F401  (registers the command)
from tests.support.examples import load_example

job_service = load_example("job_service.py")

#: Jobs last far longer than any test (only the check's cancel can stop them in time) and
#: move by 1% every 0.2 s (the example's jobs take TICKS steps; tests set 100).
DURATION = 20.0
#: Fast polls and a long watch: the check sees a job move at once, and never waits on time.
PACE = ["--poll-interval", "50ms", "--watch", "5s"]


def running(service: Any) -> list[str]:
    """The eids of the service's jobs whose work still runs."""
    jobs = [*service.jobs.values(), *getattr(service, "earlier", [])]
    return [job.eid for job in jobs if job.runner is not None and not job.runner.done()]


@asynccontextmanager
async def serving(service: Any, secret: str | None = None) -> AsyncIterator[str]:
    """``service`` behind the example's routes on 127.0.0.1; the URL of its ``demo`` jobs."""
    runner = web.AppRunner(job_service.make_app(secret=secret, service=service))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/jobs/demo"
    finally:
        await runner.cleanup()


async def check(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    """Run `ecron check-service URL --json ARGS` (in a thread: it runs its own event loop
    while the service serves on this one); its exit code and checklist."""
    command = ["check-service", url, "--json", *PACE, *args]
    result = await asyncio.to_thread(CliRunner().invoke, cli, command)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.output)


def verdicts(checklist: dict[str, Any]) -> dict[str, str]:
    """Rule → verdict."""
    return {check["rule"]: check["verdict"] for check in checklist["checks"]}


def detail(checklist: dict[str, Any], rule: str) -> str:
    """What the check saw for ``rule``."""
    return next(str(check["detail"]) for check in checklist["checks"] if check["rule"] == rule)

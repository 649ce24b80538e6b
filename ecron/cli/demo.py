"""``ecron demo``: the example service and a daemon on SQLite, printing progress as it moves."""

from __future__ import annotations

import asyncio
import importlib.util
import signal
import sys
import tempfile
from contextlib import AsyncExitStack, suppress
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import click
from aiohttp import web
from rich.console import Console
from rich.markup import escape
from rich.text import Text

import ecron
from ecron.cli.display import FINAL, short_length, status_text, took_text
from ecron.cli.group import cli
from ecron.cli.outside import markup
from ecron.cli.watch import eta_text
from ecron.config import Config, DaemonSettings, TaskSpec
from ecron.core import Execution, Status
from ecron.durations import parse_duration
from ecron.errors import EcronError, ListenError
from ecron.logs import configure
from ecron.snapshots import execution_snapshots
from ecron.wall import UTC_NAME, wall


def load_example_service() -> ModuleType:
    """``examples/job_service.py``: from the wheel (``ecron/_examples``) or the source tree."""
    package = Path(ecron.__file__).parent
    for path in (
        package / "_examples" / "job_service.py",
        package.parent / "examples" / "job_service.py",
    ):
        if path.is_file() and path.stat().st_size > 100:
            spec = importlib.util.spec_from_file_location("ecron_example_job_service", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
    raise click.ClickException("the example service (examples/job_service.py) is not installed")


def demo_config(directory: Path, port: int, service_url: str, every: str, duration: str) -> Config:
    """One task against the example service, on a SQLite file in ``directory``."""
    settings = DaemonSettings(
        database=f"sqlite+aiosqlite:///{directory / 'ecron-demo.db'}",
        listen=f"127.0.0.1:{port}",
        tick="100ms",
        log={"format": "console", "level": "warning"},
    )
    spec = TaskSpec.model_validate(
        {
            "name": "demo",
            "schedule": {"every": every},
            "url": f"{service_url}/jobs/demo",
            "body": {"duration": duration},
            "poll_interval": "500ms",
            "task_timeout": "2m",
        }
    )
    return Config(directory=str(directory), daemon=settings, tasks={"demo": spec})


#: The demo's ids are shown this long at least: a UUIDv7's first 13 characters are its
#: millisecond, so an id keeps one length from its first line to its last (at the 8 of
#: ``short_length`` alone, an id printed before the next fire time was claimed would grow).
MILLISECOND_ID = 13


class Printer:
    """Prints a line whenever an execution's status or progress moves: when it printed it
    (``now``, to the second, in ``zone``: a clock that moves), its short id (unique among
    those printed, so ``ecron show`` takes it), a bar, the status, the ETA while it runs
    (or how long it took once it ended), the message cut to what the line has left."""

    def __init__(self, console: Console, zone: str = UTC_NAME) -> None:
        self.console = console
        self.zone = zone
        self.seen: dict[str, tuple[str, int]] = {}
        self.done: set[str] = set()

    def show(self, item: dict[str, Any], now: datetime) -> None:
        eid, status = str(item["id"]), str(item["status"])
        step = int(item["progress"] // 10)
        if eid in self.done or self.seen.get(eid) == (status, step):
            return
        self.seen[eid] = (status, step)
        length = max(MILLISECOND_ID, short_length([*self.seen, *self.done]))
        bar = escape("[" + "#" * step + "-" * (10 - step) + "]")
        after = f"in {took_text(item)}" if status in FINAL else eta_text(item, self.zone)
        head = (
            f"{wall(now, self.zone, date=False)}  {eid[:length]}  {bar} "
            f"{item['progress']:3.0f}%  {status_text(item)}  {after}"
        ).rstrip()
        room = min(self.console.width, 80) - Text.from_markup(head).cell_len - 2
        message = " ".join((item.get("message") or "").split())
        if len(message) > room:
            message = message[: max(room - 1, 0)] + "…" if room > 1 else ""
        line = f"{head}  {markup(message)}" if message else head
        self.console.print(line, highlight=False, soft_wrap=True)
        if status in FINAL:
            self.seen.pop(eid, None)
            self.done.add(eid)


@cli.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to keep the SQLite file (default: a temporary directory).",
)
@click.option(
    "--port", default=8080, show_default=True, help="Port of ecron's API (0: any free one)."
)
@click.option(
    "--service-port", default=8081, show_default=True, help="Port of the example service."
)
@click.option("--every", default="10s", show_default=True, help="How often the demo task fires.")
@click.option("--duration", default="8s", show_default=True, help="How long each job runs.")
@click.option("--run-for", default=None, help="Stop by itself after this long (e.g. 30s).")
def demo(
    directory: str | None,
    port: int,
    service_port: int,
    every: str,
    duration: str,
    run_for: str | None,
) -> None:
    """Run the example service and ecron together and watch executions move (Ctrl-C stops)."""
    configure("console", "warning")
    limit = None if run_for is None else parse_duration(run_for).total_seconds()
    with tempfile.TemporaryDirectory(prefix="ecron-demo-") as scratch:
        where = Path(directory) if directory else Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        try:
            asyncio.run(_demo(where, port, service_port, every, duration, limit))
        except EcronError as exc:  # a port taken: one line, no traceback
            raise click.ClickException(str(exc)) from exc


async def _demo(
    where: Path, port: int, service_port: int, every: str, duration: str, limit: float | None
) -> None:
    from ecron.daemon import Daemon

    console = Console()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncExitStack() as stack:
        runner = web.AppRunner(load_example_service().make_app())
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, "127.0.0.1", service_port)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError.of("127.0.0.1", service_port, exc) from exc
        bound = runner.addresses[0][1]
        service_url = f"http://127.0.0.1:{bound}"
        config = demo_config(where, port, service_url, every, duration)
        daemon = await stack.enter_async_context(Daemon(config))
        console.print(
            f"ecron demo: dashboard http://127.0.0.1:{daemon.port}/\n"
            f"            example service {service_url}\n"
            f"            database {where / 'ecron-demo.db'}\n"
            f"task 'demo' fires every {every} and runs about {duration}; Ctrl-C stops.\n"
            f"Each line starts with the time it was printed ({config.daemon.timezone}).\n",
            soft_wrap=True,
            highlight=False,
        )
        printer = Printer(console, config.daemon.timezone)
        started = loop.time()
        while not stop.is_set():
            # The next fire time, claimed ahead (SCHEDULED), then the executions themselves.
            claimed = await daemon.store.list_executions(
                task="demo", status=Status.SCHEDULED, limit=1
            )
            page = await daemon.store.list_executions(task="demo", limit=5)
            shown = sorted({e.eid: e for e in [*claimed.items, *page.items]}.values(), key=eid_of)
            now = daemon.clock.now()
            for item in await execution_snapshots(
                daemon.store, shown, now, daemon.specs, held=daemon.parts.held
            ):
                printer.show(item, now)
            if limit is not None and loop.time() - started >= limit:
                break
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.25)
    console.print("demo stopped")


def eid_of(execution: Execution) -> str:
    """The id of ``execution``: the order of the demo's lines (UUIDv7: the order made)."""
    return execution.eid

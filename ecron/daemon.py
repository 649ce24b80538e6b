"""The daemon: wires store, executor, scheduler and API together, and takes them down cleanly."""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING

import aiohttp
import structlog
from aiohttp import web

from ecron.api.app import make_app
from ecron.api.callers import Callers
from ecron.api.context import ApiContext
from ecron.audit import AuditLog
from ecron.clock import START_READINGS, Clock
from ecron.config.digests import digest_key
from ecron.config.hidden import config_secrets
from ecron.config.model import Config, TaskSpec
from ecron.config.queue import QueueSettings
from ecron.config.rules import PoolSpec
from ecron.errors import ConfigError, ListenError
from ecron.executor.http import HttpCaller
from ecron.executor.wire import Wire
from ecron.logs import hide
from ecron.loop import loop_name
from ecron.metrics import Metrics
from ecron.notify import Notifier
from ecron.parts import Parts
from ecron.planning import FirstFireTimes
from ecron.store.engine import cluster_lock
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore

if TYPE_CHECKING:
    from ecron.queue import QueueConsumer

log = structlog.get_logger(__name__)

#: How long a stopping daemon lets triggers and cancels in progress finish.
SHUTDOWN_GRACE = 5.0
#: The garbage collector's thresholds once the daemon runs (Python's: 700, 10, 10).
GC_THRESHOLDS = (20_000, 20, 20)


def resolve_node_id(node_id: str) -> str:
    """``auto`` becomes an id unique to this process: host, pid and a random suffix."""
    if node_id != "auto":
        return node_id
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Daemon:
    """One ecron node. ``async with Daemon(config) as daemon:`` runs it; leaving stops it."""

    def __init__(self, config: Config, *, clock: Clock | None = None) -> None:
        """Build every part (no I/O yet: ``async with`` starts them). Call it inside a
        running event loop: the HTTP session belongs to the loop."""
        self.config = config
        self.settings = settings = config.daemon
        self.clock = clock or Clock()
        self.node_id = resolve_node_id(settings.node_id)
        self.specs: dict[str, TaskSpec] = dict(config.tasks)
        self.pools: dict[str, PoolSpec] = dict(config.pools)
        if settings.queue is not None:
            _require_redis()  # before anything that would need closing
        self.metrics = metrics = Metrics()
        hide(config_secrets(config))
        self.store = SqlStore.open(
            settings.database,
            observe=lambda kind, seconds: metrics.db_duration.labels(operation=kind).observe(
                seconds
            ),
        )
        self.session = session = _session()
        #: The connections to the user services (``executor/wire.py``).
        self.wire = Wire(limit=max(100, settings.poll_workers * 2))
        #: The callback secret is the one thing read from the database, at start.
        self.caller = HttpCaller(
            self.wire,
            public_url=settings.public_url,
            callback_secret="",
            report_stream=settings.queue.stream if settings.queue is not None else None,
            metrics=metrics,
            clock=self.clock,
        )
        self.notifier = Notifier(settings.notify, self.specs, session, metrics, self.node_id)
        self.parts = parts = Parts.build(
            store=self.store,
            caller=self.caller,
            clock=self.clock,
            settings=settings,
            node_id=self.node_id,
            specs=self.specs,
            metrics=metrics,
            notifier=self.notifier,
            pools=self.pools,
        )
        self.engine, self.scheduler, self.patrol = parts.engine, parts.scheduler, parts.patrol
        #: Who did what through the API, and what each config load changed.
        self.audit = AuditLog(self.store, self.clock)
        #: Who may call the API, by token: the config's callers, replaced at each reload.
        self.callers = Callers(settings.callers)
        self.leases = parts.leases
        #: Groups the state writes (the recorder's).
        self.writer = parts.recorder.writer
        #: The Redis Streams consumer, when the daemon has a ``queue``.
        self.queue = None if settings.queue is None else self._consumer(settings.queue)
        self._stack = AsyncExitStack()
        self._loops: list[asyncio.Task[None]] = []
        self._started = False
        self.port: int | None = None
        self._digest_key = b""

    @property
    def callback_secret(self) -> str:
        return self.caller.callback_secret

    def _consumer(self, settings: QueueSettings) -> QueueConsumer:
        """The report stream's consumer (redis-py is needed only then: checked first)."""
        from ecron.queue import QueueConsumer, connect

        caller = self.caller
        return QueueConsumer(
            settings=settings,
            client=connect(settings),
            store=self.store,
            commands=self.parts.commands,
            secret=lambda: caller.callback_secret,
            metrics=self.metrics,
            node_id=self.node_id,
        )

    async def __aenter__(self) -> Daemon:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _start(self) -> None:
        """Open the database, take the tasks, serve the API, then run the loops.

        The loops run in a TaskGroup on the daemon's exit stack: a loop that dies (each
        catches the errors of its own rounds, so only a bug can end one) stops the node,
        and ``async with`` raises its error, instead of a node running on half its parts.
        """
        self._stack.push_async_callback(self.session.close)
        self._stack.push_async_callback(self.wire.close)
        self._stack.push_async_callback(self.store.close)
        if self.queue is not None:
            self._stack.push_async_callback(self.queue.client.aclose)
        before, after = await upgrade(self.store.engines)
        if before != after:
            log.info("database_migrated", before=before, after=after)
        await self.leases.align_clock(readings=START_READINGS)
        secret = self.settings.secret or await self.store.shared_secret(secrets.token_hex(32))
        self.caller.callback_secret = secret
        hide([secret])
        #: The key of the specs' digests (``spec_hash``): from the secret, never stored.
        self._digest_key = digest_key(secret)
        for spec in self.specs.values():
            spec.keyed(self._digest_key)
        await self._sync_tasks(self.clock.now())
        await self.patrol.overdue.refresh()
        await self.leases.register()
        await self._serve_api()
        group = await self._stack.enter_async_context(asyncio.TaskGroup())
        loops = {
            "ecron-engine": self.engine.run,
            "ecron-scheduler": self.scheduler.run,
            "ecron-keep-alive": self.leases.run,
            "ecron-patrol": self.patrol.run,
            "ecron-notifier": self.notifier.run,
        }
        if self.queue is not None:
            loops["ecron-queue"] = self.queue.run
        self._loops = [
            group.create_task(_watched(name, run), name=name) for name, run in loops.items()
        ]
        self._started = True
        log.info(
            "daemon_started",
            node=self.node_id,
            listen=self.settings.listen,
            port=self.port,
            tasks=len(self.specs),
            loop=loop_name(),
        )

    async def _serve_api(self) -> None:
        scheduler = self.scheduler
        ctx = ApiContext(
            store=self.store,
            commands=self.parts.commands,
            settings=self.settings,
            clock=self.clock,
            node_id=self.node_id,
            callback_secret=self.callback_secret,
            metrics=self.metrics,
            last_tick=lambda: scheduler.last_tick,
            readiness=self._readiness(),
            load=self.engine.load,
            answered=self.engine.answered,
            audit=self.audit,
            callers=self.callers,
            held=self.parts.held,
        )
        # aiohttp's keep-alive timer runs from the connection's start (and from each answer)
        # and is not put off by bytes that make no whole request: it closes an idle
        # connection and one whose headers trickle in alike (its default is an hour).
        idle = self.settings.api_idle_timeout.total_seconds()
        # A request still in a handler when the daemon stops (a callback that came as the
        # engine closed) holds the runner's cleanup: for SHUTDOWN_GRACE, not aiohttp's 60 s.
        runner = web.AppRunner(
            make_app(ctx), access_log=None, keepalive_timeout=idle, shutdown_timeout=SHUTDOWN_GRACE
        )
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        host, port = self.settings.host_port
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError.of(host, port, exc) from exc
        addresses = runner.addresses  # the bound sockets' names: the port when 0 was asked
        self.port = int(addresses[0][1]) if addresses else port

    def _readiness(self) -> tuple[Callable[[], str | None], ...]:
        """The checks ``/readyz`` makes besides the database and the scheduler: the queue's,
        when it is ``required``."""
        queue, settings = self.queue, self.settings.queue
        if queue is None or settings is None or not settings.required:
            return ()
        return (lambda: queue.problem,)

    async def _sync_tasks(self, now: datetime) -> None:
        firsts = FirstFireTimes(now)
        async with cluster_lock(self.store.engines, "sync"):
            result = await self.store.sync_tasks(self.specs, firsts)
        for name in (*result.added, *result.updated):  # planned out before the first fire time
            self.metrics.excluded(name, firsts.excluded.get(name, {}))
        changes = result.changes
        if changes:  # the diff ``ecron plan`` shows, in the shape of its --json
            log.info("tasks_synced", **changes.as_json())
            fields = {
                name: [{"field": f.field, "old": f.old, "new": f.new} for f in found]
                for name, found in changes.changed.items()
            }
            self.audit.config_changed(changes.added, fields, changes.retired)

    async def reload(self, config: Config) -> None:
        """Take new task definitions and callers (SIGHUP): the database follows, running work
        goes on, and a token no longer configured is refused from the next request on.
        Whether a token is asked for at all changes only at a restart: a reload that would
        remove every token (or add the first) keeps the callers as they were, and says so."""
        hide(config_secrets(config))
        for spec in config.tasks.values():
            spec.keyed(self._digest_key)
        try:
            self.callers.replace(config.daemon.callers)
        except ValueError:
            log.error(
                "callers_not_reloaded",
                why="a reload cannot turn the API's tokens on or off: restart the daemon",
                callers=len(config.daemon.callers),
            )
        removed = {name: spec for name, spec in self.specs.items() if name not in config.tasks}
        self.engine.retire(removed)
        self.specs.clear()
        self.specs.update(config.tasks)
        self.pools.clear()
        self.pools.update(config.pools)
        self.parts.bookkeeping.chains.refresh()
        await self._sync_tasks(self.clock.now())
        self.scheduler.wake()

    async def stop(self) -> None:
        """Stop claiming and reading the queue, let calls in progress and queued alerts finish
        briefly, hand leases back, close.

        Each loop ends between two rounds, never inside a transaction (a transaction cut off
        by cancellation could leave a SQLite connection holding the write lock); only a loop
        that does not end in time is cancelled.
        """
        if self._started:
            self.scheduler.stop()
            self.patrol.stop()
            if self.queue is not None:
                self.queue.stop()
            await self._end({"ecron-scheduler", "ecron-patrol", "ecron-queue"}, SHUTDOWN_GRACE)
            await self.engine.drain(SHUTDOWN_GRACE)
            await self.parts.bookkeeping.close()
            await self.parts.recorder.close()
            await self.audit.close()
            await self.notifier.drain(SHUTDOWN_GRACE)  # alerts of the last ends, too
            self.leases.stop()
            await self._end({"ecron-keep-alive"}, SHUTDOWN_GRACE)
        await self._end({loop.get_name() for loop in self._loops}, 0)
        self._loops = []
        if self._started:
            self._started = False
            released = 0
            with suppress(Exception):
                released = await self.leases.let_go()
            log.info("daemon_stopped", node=self.node_id, released=released)
        await self._stack.aclose()

    async def _end(self, names: set[str], timeout: float) -> None:
        """Wait up to ``timeout`` for the loops called ``names`` to end; cancel the rest."""
        loops = [loop for loop in self._loops if loop.get_name() in names]
        if loops and timeout > 0:
            await asyncio.wait(loops, timeout=timeout)
        for loop in loops:
            loop.cancel()
        if loops:  # their errors, if any, are the TaskGroup's to raise (at the stack's close)
            await asyncio.wait(loops)


def _require_redis() -> None:
    """A daemon with a ``queue`` needs redis-py: one clear line when it is missing."""
    try:
        import ecron.queue  # noqa: F401  (it imports redis-py)
    except ImportError as exc:
        raise ConfigError(["queue: needs redis-py: pip install 'ecron[redis]'"]) from exc


def _session() -> aiohttp.ClientSession:
    """The HTTP session of alert webhooks (the protocol's calls go through the ``Wire``)."""
    connector = aiohttp.TCPConnector(limit=100)
    # No cookies: deliveries are independent of each other.
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


async def _watched(name: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run one loop; its death is logged before it stops the node."""
    try:
        await run()
    except Exception:
        log.exception("daemon_loop_died", loop=name)
        raise


def settle_memory() -> None:
    """After start-up (``ecron run``; not for a daemon inside another program): the objects
    made so far (modules, config, tasks) are kept for good, so the garbage collector stops
    walking them; and it runs less often. The engine makes and
    drops many small objects per second, few of them in cycles, and holds tens of thousands
    of executions that a full collection would walk each time."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def run_until_signalled(config: Config, reload: Callable[[], Config] | None = None) -> None:
    """Run a daemon until SIGTERM or SIGINT; SIGHUP calls ``reload`` for a new config.

    The signals are handled from before the daemon starts, not from after: one that came
    between the API's first answer and the handlers (a SIGHUP right after /readyz said
    ready) took its default action and ended the process on the spot. SIGTERM or SIGINT
    while the daemon starts ends the start (what it opened is closed) and returns; a
    SIGHUP then reloads once the daemon is up."""
    signals = _Signals(asyncio.get_running_loop(), reload)
    try:
        async with Daemon(config) as daemon:
            signals.up(daemon)
            settle_memory()
            await signals.stop.wait()
            log.info("daemon_stopping", node=daemon.node_id)
            if signals.reloads:  # a reload under way finishes before the parts stop
                await asyncio.gather(*signals.reloads, return_exceptions=True)
    except asyncio.CancelledError:
        if not signals.cancelled_start():
            raise
        log.info("daemon_stopped_while_starting")


class _Signals:
    """SIGTERM and SIGINT (stop), and SIGHUP (reload, when ``reload`` is given), handled
    by the running loop from the moment this is made."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reload: Callable[[], Config] | None):
        self.stop = asyncio.Event()
        #: Reloads under way: kept until done, and awaited at stop.
        self.reloads: set[asyncio.Task[None]] = set()
        self._load = reload
        self._daemon: Daemon | None = None
        self._starting = asyncio.current_task()
        self._reload_asked = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop)
        if reload is not None:
            loop.add_signal_handler(signal.SIGHUP, self._on_sighup)

    def up(self, daemon: Daemon) -> None:
        """The daemon has started: stops wait for it now, and a SIGHUP that came while it
        started is acted on."""
        self._daemon = daemon
        if self._reload_asked:
            self._on_sighup()

    def cancelled_start(self) -> bool:
        """Whether the start was cancelled by a stop signal (not by anything else)."""
        if self._daemon is not None or not self.stop.is_set() or self._starting is None:
            return False
        self._starting.uncancel()
        return True

    def _on_stop(self) -> None:
        if self.stop.is_set():
            return
        self.stop.set()
        if self._daemon is None and self._starting is not None:
            self._starting.cancel()  # the start ends, and closes what it opened

    def _on_sighup(self) -> None:
        if self._daemon is None or self._load is None:
            self._reload_asked = True
            return
        self._reload_asked = False
        task = asyncio.create_task(_reload(self._daemon, self._load), name="ecron-reload")
        self.reloads.add(task)
        task.add_done_callback(self.reloads.discard)


async def _reload(daemon: Daemon, load: Callable[[], Config]) -> None:
    try:
        config = load()
    except Exception as exc:
        log.error("reload_failed", error=str(exc))
        return
    await daemon.reload(config)
    log.info("tasks_reloaded", tasks=len(daemon.specs))

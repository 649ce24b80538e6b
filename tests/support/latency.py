"""A TCP proxy on 127.0.0.1 that makes a database slow: every round trip through it takes
``delay`` seconds longer, and ``stall`` holds everything in both directions for a while.

toxiproxy is not packaged for Debian, so this is the few lines of it the tests need, on
asyncio. The delay is added to what comes back (the server's answers), each chunk released
``delay`` after it arrived and in order, so one request and its answer take ``delay`` longer
however many are in flight (a slow network, not a slow server). A stall holds both
directions until it ends; nothing is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sqlalchemy.engine import URL, make_url


@dataclass
class LatencyProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (host and port, or the path of a Unix
    socket); see the module docstring."""

    target: tuple[str, int] | str
    #: Seconds added to every round trip.
    delay: float = 0.0
    port: int = 0
    #: Nothing moves, either way, before this moment (``time.monotonic``).
    stalled_until: float = 0.0
    #: Connections opened through the proxy.
    connections: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def stall(self, seconds: float) -> None:
        """Hold every byte, both ways, for ``seconds`` from now."""
        self.stalled_until = time.monotonic() + seconds

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _connected(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        try:
            if isinstance(self.target, str):
                server_in, server_out = await asyncio.open_unix_connection(self.target)
            else:
                server_in, server_out = await asyncio.open_connection(*self.target)
        except OSError:
            client_out.close()
            return
        pumps = [
            asyncio.create_task(self._pump(client_in, server_out, delayed=False)),
            asyncio.create_task(self._pump(server_in, client_out, delayed=True)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for writer in (client_out, server_out):
                writer.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, delayed: bool
    ) -> None:
        """Copy ``source`` to ``sink``, each chunk held until ``delay`` after it arrived
        (``delayed``) and until any stall has ended."""
        queue: deque[tuple[float, bytes]] = deque()
        arrived = asyncio.Event()
        ended = False

        async def read() -> None:
            nonlocal ended
            while chunk := await source.read(65536):
                queue.append((time.monotonic() + (self.delay if delayed else 0.0), chunk))
                arrived.set()
            ended = True
            arrived.set()

        reader = asyncio.create_task(read())
        try:
            while True:
                await arrived.wait()
                arrived.clear()
                while queue:
                    ready, chunk = queue[0]
                    await _until(lambda ready=ready: max(ready, self.stalled_until))
                    queue.popleft()
                    sink.write(chunk)
                    await sink.drain()
                if ended:
                    return
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await reader


async def _until(moment: Callable[[], float]) -> None:
    """Wait until ``time.monotonic()`` reaches ``moment()`` (asked again after each wait: a
    stall may begin or be extended meanwhile). The proxy's way of holding bytes back."""
    while (wait := moment() - time.monotonic()) > 0:  # noqa: ASYNC110  (a moving deadline)
        await asyncio.sleep(wait)


@asynccontextmanager
async def latency_proxy(target: tuple[str, int] | str) -> AsyncIterator[LatencyProxy]:
    """A running ``LatencyProxy`` to ``target`` (no delay until one is set)."""
    proxy = LatencyProxy(target)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


def _server_address(url: URL) -> tuple[str, int] | str:
    """Where PostgreSQL listens: host and port, or its Unix socket (``?host=/dir``)."""
    directory = url.query.get("host")
    if isinstance(directory, str) and directory.startswith("/"):
        return f"{directory}/.s.PGSQL.{url.port or 5432}"
    assert url.host, f"no PostgreSQL address in {url!r}"
    return (url.host, url.port or 5432)


@asynccontextmanager
async def proxied_database(database_url: str) -> AsyncIterator[tuple[LatencyProxy, str]]:
    """A ``LatencyProxy`` in front of the PostgreSQL server of ``database_url``, and the
    URL that reaches that database through it."""
    url = make_url(database_url)
    async with latency_proxy(_server_address(url)) as proxy:
        through = url.set(host="127.0.0.1", port=proxy.port, query={})
        yield proxy, through.render_as_string(hide_password=False)

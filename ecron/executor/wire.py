"""The protocol's calls on the wire: HTTP/1.1 over kept-alive connections, the answers read
by httptools (the parser uvicorn uses).

ecron makes its calls to user services by the thousand a second: a trigger POST, a poll
GET, a cancel DELETE, a batch poll GET. They are plain: a JSON body or none, no redirect
followed, no cookie, no compression asked for, no proxy. aiohttp's client does much more
for each (a request and a response object with their streams, header merging,
middlewares, traces, timers): on this machine a GET through a ``ClientSession`` costs
110-190 µs of CPU, the same GET here about 25 µs (docs/performance.md, "The wire"); at
10,000 polls a second that is most of a core. So the protocol's calls go through
``Wire``; aiohttp still serves the API and sends alert webhooks.

What it does, and what it leaves out on purpose:

- one request at a time per connection; a connection is kept for the next call to the
  same scheme, host and port (``keepalive`` seconds idle at most) unless the answer says
  ``Connection: close`` or was not read to its end (too big, timed out, cancelled);
- a call is never sent twice: a connection that drops after the request left is the
  call's outcome (``NoAnswer``), which the protocol's rules read (PROTOCOL.md, "How ecron
  reads each outcome"); a kept connection found closed before anything was written is
  replaced, which sends nothing twice;
- ``timeout`` bounds the whole call (connecting, sending, reading); failing to connect is
  ``Unsent`` (nothing reached the service);
- a body longer than ``limit`` is not read: the answer is marked ``too_big`` and its
  connection closed;
- ``https`` with the system's trust store (the default ``ssl`` context), as aiohttp did.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import httptools
from yarl import URL

from ecron import __version__
from ecron.errors import EcronError

#: How long a connection may sit idle before it is closed (aiohttp's default too).
KEEPALIVE = 15.0
_USER_AGENT = f"ecron/{__version__}"


class CallFailed(EcronError):
    """A call that got no answer; ``detail`` says why, in one line."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unsent(CallFailed):
    """Nothing reached the service: no connection (refused, no such host, timed out)."""


class NoAnswer(CallFailed):
    """The request may have reached the service, and no whole answer came back: timed out,
    or the connection dropped, or the answer was not HTTP."""


@dataclass(slots=True)
class Answer:
    """An HTTP answer: its status, its headers (names in lower case; the last of a repeated
    one), its body, and whether the body was longer than the limit (then it is empty)."""

    status: int
    headers: dict[str, str]
    body: bytes
    too_big: bool = False


def request_bytes(method: str, url: URL, headers: Mapping[str, str], body: bytes = b"") -> bytes:
    """One request as it goes on the wire: its line, ``Host``, the given headers, and a
    ``Content-Length`` when there is a body (a call made again and again, a poll, is
    encoded once). Refuses a header that would split the request (CR or LF in it)."""
    lines = [f"{method} {url.raw_path_qs or '/'} HTTP/1.1", f"Host: {url.host_port_subcomponent}"]
    given = set()
    for name, value in headers.items():
        text = f"{name}: {value}"
        if "\r" in text or "\n" in text:
            raise ValueError(f"header {name!r}: a line break is not allowed in a header")
        lines.append(text)
        given.add(name.lower())
    if "user-agent" not in given:
        lines.append(f"User-Agent: {_USER_AGENT}")
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Wire:
    """Pooled connections to user services; see the module docstring. At most ``limit``
    calls are under way at once (more wait for one to end), and at most ``limit``
    connections are kept idle."""

    def __init__(self, *, limit: int = 100, keepalive: float = KEEPALIVE) -> None:
        self.limit = limit
        self.keepalive = keepalive
        self._room = asyncio.Semaphore(limit)
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._idle_count = 0
        self._sweeping: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def __aenter__(self) -> Wire:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def call(self, url: URL, request: bytes, timeout: float, limit: int) -> Answer:
        """Send ``request`` (``request_bytes``) to ``url``'s host and read the answer, all
        within ``timeout`` seconds, the body up to ``limit`` bytes. Raises ``Unsent`` or
        ``NoAnswer``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._room:
            connection = self._kept(url, loop.time())
            if connection is None:
                connection = await self._connect(url, max(0.0, deadline - loop.time()))
            answer = await connection.exchange(request, limit, deadline, timeout)
            if connection.reusable:
                self._keep(connection, loop)
            else:
                connection.close()
            return answer

    async def close(self) -> None:
        """Close every idle connection (those under way close when their call ends)."""
        self._closed = True
        for kept in self._idle.values():
            for connection in kept:
                connection.close()
        self._idle.clear()
        self._idle_count = 0
        if self._sweeping is not None:
            self._sweeping.cancel()

    # -- connections ----------------------------------------------------------------------

    def _kept(self, url: URL, now: float) -> _Connection | None:
        """A kept connection to ``url``'s host that is still open (the newest first)."""
        kept = self._idle.get(_key(url))
        while kept:
            connection = kept.pop()
            self._idle_count -= 1
            if connection.open and now - connection.idle_since < self.keepalive:
                return connection
            connection.close()
        return None

    async def _connect(self, url: URL, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        scheme, host, port = _key(url)
        tls = self._context() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection((scheme, host, port)),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            raise Unsent(f"connect timed out: {url.host_port_subcomponent}") from None
        except (OSError, ssl.SSLError) as exc:
            raise Unsent(f"could not connect: {url.host_port_subcomponent}: {exc}") from exc
        return connection

    def _keep(self, connection: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        if self._closed or self._idle_count >= self.limit:
            connection.close()
            return
        connection.idle_since = loop.time()
        self._idle.setdefault(connection.key, []).append(connection)
        self._idle_count += 1
        if self._sweeping is None:
            self._sweeping = loop.call_later(self.keepalive, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close the connections idle for ``keepalive`` seconds (looked for once a
        ``keepalive`` while any is kept)."""
        self._sweeping = None
        stale = loop.time() - self.keepalive
        for key, kept in list(self._idle.items()):
            fresh = [c for c in kept if c.open and c.idle_since > stale]
            for connection in kept:
                if connection not in fresh:
                    connection.close()
            self._idle_count -= len(kept) - len(fresh)
            if fresh:
                self._idle[key] = fresh
            else:
                del self._idle[key]
        if self._idle_count:
            self._sweeping = loop.call_later(self.keepalive, self._sweep, loop)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl


def _key(url: URL) -> tuple[str, str, int]:
    scheme = url.scheme
    if scheme not in ("http", "https") or not url.raw_host:
        raise Unsent(f"not an http or https URL: {url}")
    return scheme, url.raw_host, url.port or (443 if scheme == "https" else 80)


class _Connection(asyncio.Protocol):
    """One connection and the call under way on it (one at a time)."""

    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.open = False
        self.idle_since = 0.0
        #: Whether the connection can take another call once this one's answer is read.
        self.reusable = False
        self._waiter: asyncio.Future[Answer] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._limit = 0
        self._headers_done = False
        self._received = False

    # -- one call -------------------------------------------------------------------------

    async def exchange(self, request: bytes, limit: int, deadline: float, timeout: float) -> Answer:
        """Send ``request`` and wait for its answer until ``deadline`` (the loop's time)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Answer] = loop.create_future()
        self._waiter = waiter
        self._headers, self._body, self._size, self._limit = {}, [], 0, limit
        self._headers_done = self._received = False
        self.reusable = False
        timer = loop.call_at(deadline, self._timed_out, timeout)
        try:
            self.transport.write(request)
            return await waiter
        except asyncio.CancelledError:
            self.close()  # its answer may still come: this connection cannot carry another
            raise
        finally:
            timer.cancel()
            self._waiter = None

    def _timed_out(self, timeout: float) -> None:
        self._fail(NoAnswer(f"no answer within {timeout:g}s"))
        self.close()

    def _finish(self, too_big: bool = False) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        status = self.parser.get_status_code()
        body = b"" if too_big else b"".join(self._body)
        self._body = []  # nothing of an answer is held once it is handed over
        waiter.set_result(Answer(status, self._headers, body, too_big))

    def _fail(self, error: CallFailed) -> None:
        self._body = []
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.open = True

    def data_received(self, data: bytes) -> None:
        self._received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(NoAnswer("the service answered with a protocol upgrade"))
            self.close()
        except httptools.HttpParserError as exc:
            self._fail(NoAnswer(f"not an HTTP answer: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost says what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self.reusable = False
        if self._waiter is None or self._waiter.done():
            return
        framed = "content-length" in self._headers or "transfer-encoding" in self._headers
        if self._headers_done and not framed:  # a body that ends with the connection
            self._finish(too_big=self._size > self._limit)
            return
        why = "the connection closed before the answer" if exc is None else str(exc)
        self._fail(NoAnswer(f"ServerDisconnected: {why}"))

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        length = self._headers.get("content-length", "")
        if length.isdigit() and int(length) > self._limit:
            self._finish(too_big=True)
            self.close()

    def on_body(self, body: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            return  # the rest of an answer given up on (too big): dropped as it comes
        self._size += len(body)
        if self._size > self._limit:
            self._finish(too_big=True)
            self.close()
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.reusable = self.open and self.parser.should_keep_alive()
        self._finish()

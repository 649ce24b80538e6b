"""The wire the protocol's calls go over (``ecron/executor/wire.py``), against real servers on
127.0.0.1: kept-alive connections are used again and nothing is ever sent twice; answers
framed every way HTTP/1.1 allows are read whole; a connection the service closes, or that
an answer leaves unusable, is not used again; what cannot be sent is ``Unsent``, what got
no whole answer ``NoAnswer``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from yarl import URL

from ecron.executor.wire import NoAnswer, Unsent, Wire, _key, request_bytes
from tests.support.service import wait_for

LIMIT = 1024 * 1024

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Raw:
    """A server on 127.0.0.1 whose ``answer`` writes the bytes of each answer; it counts the
    connections it accepted and the requests it read."""

    def __init__(self) -> None:
        self.accepted = 0
        self.requests: list[bytes] = []
        self.answers: list[bytes] = []
        self.close_after: set[int] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                number = len(self.requests)
                writer.write(self.answers[min(number, len(self.answers)) - 1])
                await writer.drain()
                if number in self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            await writer.wait_closed()


@asynccontextmanager
async def serving(raw: Raw) -> AsyncIterator[URL]:
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield URL(f"http://127.0.0.1:{port}/jobs/x")
    finally:
        server.close()
        await server.wait_closed()


def answer(body: bytes, *head: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *head]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def framed(body: bytes) -> bytes:
    return answer(body, f"Content-Length: {len(body)}")


async def test_calls_to_one_host_go_over_one_kept_connection() -> None:
    """Ten calls one after the other to one service: one connection carries all ten, each
    answer read whole, and each request sent once."""
    raw = Raw()
    raw.answers = [framed(b'{"status": "RUNNING"}')]
    async with serving(raw) as url, Wire() as wire:
        for _ in range(10):
            got = await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
            assert (got.status, got.body) == (200, b'{"status": "RUNNING"}')
    assert raw.accepted == 1
    assert len(raw.requests) == 10


async def test_answers_framed_by_chunks_or_by_closing_are_read_whole() -> None:
    """A chunked answer, and one whose body ends when the service closes the connection
    (no length, no chunks), are read whole; the second's connection is not kept."""
    raw = Raw()
    chunked = answer(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "Transfer-Encoding: chunked")
    raw.answers = [chunked, answer(b"until the end", "Connection: close")]
    raw.close_after = {2}
    async with serving(raw) as url, Wire() as wire:
        first = await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
        second = await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
        third_accepted = raw.accepted
        raw.answers.append(framed(b"again"))
        third = await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
    assert first.body == b"hello world"
    assert second.body == b"until the end"
    assert third.body == b"again"
    assert third_accepted == 1 and raw.accepted == 2  # a new connection after the close


async def test_a_body_over_the_limit_is_not_kept_and_its_connection_is_closed() -> None:
    """An answer longer than the limit comes back empty and marked too big; the next call
    goes over a new connection (the rest of that body is never read)."""
    raw = Raw()
    raw.answers = [framed(b"x" * 100), framed(b"ok")]
    async with serving(raw) as url, Wire() as wire:
        big = await wire.call(url, request_bytes("GET", url, {}), 5, 10)
        small = await wire.call(url, request_bytes("GET", url, {}), 5, 10)
    assert (big.status, big.body, big.too_big) == (200, b"", True)
    assert (small.body, small.too_big) == (b"ok", False)
    assert raw.accepted == 2


async def test_a_connection_the_service_closed_while_idle_is_not_used_again() -> None:
    """The service closes a kept connection while it is idle: the next call opens a new one
    and is sent once."""
    raw = Raw()
    raw.answers = [framed(b"one"), framed(b"two")]
    raw.close_after = {1}
    async with serving(raw) as url, Wire() as wire:
        await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
        await wait_for(lambda: not any(c.open for c in wire._idle[_key(url)]), timeout=5)
        got = await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
    assert got.body == b"two"
    assert len(raw.requests) == 2 and raw.accepted == 2


async def test_nothing_reaches_a_closed_port_and_a_silent_service_gets_no_answer() -> None:
    """A refused connection is Unsent (nothing was sent); a service that reads the request
    and never answers is NoAnswer after the timeout."""
    raw = Raw()
    async with serving(raw) as url:
        closed = url.with_port(url.port or 0)
    with pytest.raises(Unsent, match="could not connect"):
        async with Wire() as wire:
            await wire.call(closed, request_bytes("GET", closed, {}), 1, LIMIT)

    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await done.wait()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = URL(f"http://127.0.0.1:{port}/x")
    try:
        async with Wire() as wire:
            with pytest.raises(NoAnswer, match=r"no answer within 0\.2s"):
                await wire.call(url, request_bytes("GET", url, {}), 0.2, LIMIT)
    finally:
        done.set()
        server.close()
        await server.wait_closed()


async def test_a_connection_dropped_after_the_request_is_no_answer_and_not_sent_again() -> None:
    """The service reads the request and hangs up without answering: NoAnswer, and the
    request was sent once (the wire never sends a call again by itself)."""
    raw = Raw()
    requests = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        raw.accepted += 1
        await reader.readuntil(b"\r\n\r\n")
        requests += 1
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = URL(f"http://127.0.0.1:{port}/x")
    try:
        async with Wire() as wire:
            with pytest.raises(NoAnswer, match="closed before the answer"):
                await wire.call(url, request_bytes("DELETE", url, {}), 5, LIMIT)
    finally:
        server.close()
        await server.wait_closed()
    assert requests == 1


def test_a_request_is_encoded_once_with_its_host_length_and_headers_and_no_line_break() -> None:
    """The request line keeps the encoded path and query; Host names a non-default port;
    a POST says its length; a header with a line break in it is refused, naming it."""
    url = URL("http://127.0.0.1:8081/jobs/a%2Fb?x=1")
    sent = request_bytes("POST", url, {"X-Ecron-Task": "t"}, b"{}")
    head, body = sent.split(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /jobs/a%2Fb?x=1 HTTP/1.1"
    assert "Host: 127.0.0.1:8081" in lines and "Content-Length: 2" in lines
    assert "X-Ecron-Task: t" in lines and body == b"{}"
    assert "Host: h" in request_bytes("GET", URL("http://h/x"), {}).decode()
    with pytest.raises(ValueError, match="'X-Bad'"):
        request_bytes("GET", url, {"X-Bad": "a\r\nEvil: 1"})


async def test_a_cancelled_call_leaves_its_connection_unused() -> None:
    """A call cancelled while it waits for its answer closes its connection: a late answer
    can never be read as the next call's."""
    raw = Raw()
    raw.answers = [framed(b"late"), framed(b"fresh")]
    gate = asyncio.Event()
    handle = raw.handle

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if raw.accepted == 0:
            raw.accepted += 1
            await reader.readuntil(b"\r\n\r\n")
            await gate.wait()
            writer.write(raw.answers[0])
            writer.close()
            await writer.wait_closed()
            return
        await handle(reader, writer)

    raw.handle = slow_first  # type: ignore[method-assign]
    async with serving(raw) as url, Wire() as wire:
        call = asyncio.create_task(wire.call(url, request_bytes("GET", url, {}), 5, LIMIT))
        await wait_for(lambda: raw.accepted == 1, timeout=5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        gate.set()
        raw.requests.append(b"the first")  # the next answer is the second
        got = await wire.call(url, request_bytes("GET", url, {}), 5, LIMIT)
    assert got.body == b"fresh"
    assert raw.accepted == 2

"""Requests from many addresses of one machine: all of 127.0.0.0/8 is this machine's, so a
test can send each request from an address of its own, as many clients would. The daemon
counts bad tokens and refusals per remote address (docs/security.md, "The audit log"): a
test that sends hundreds of wrong tokens on purpose, to check each answer, sends them from
as many addresses, as a real crowd of clients would."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import aiohttp

#: Addresses handed out so far in this process (from 127.1.0.1 on: 127.0.0.1 stays the
#: address of every other request of the suite).
_NEXT: Iterator[int] = itertools.count(1)


def next_address() -> str:
    """A loopback address no request of this process has come from yet."""
    n = next(_NEXT)
    return f"127.{1 + (n >> 16) % 254}.{(n >> 8) & 255}.{n & 255}"


def session_from(address: str | None = None) -> aiohttp.ClientSession:
    """A client session whose connections come from ``address`` (a new one when None)."""
    connector = aiohttp.TCPConnector(local_addr=(address or next_address(), 0))
    return aiohttp.ClientSession(connector=connector)

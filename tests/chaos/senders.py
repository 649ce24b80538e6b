"""Which node sent each call the user services received, and whether it still held the
execution then: the pause loops' witness of zombies.

A call's sender is found from its TCP connection, the way ``ss -p`` finds it: the call's peer
address is the local end of a socket that one node process holds, so ``/proc/net/tcp`` gives
that socket's inode and ``/proc/<pid>/fd`` the process holding it (once per connection:
keep-alive connections carry many calls). No header and no log line of ecron is trusted to
say who sent what.

For every call from a node that was paused and woke again (SIGSTOP, then SIGCONT), the
execution's row is read the moment the call arrives, before it is answered: the node must
hold its lease then (the row's owner, under its node lease not run out with the epoch the
row is held under, ``sql_leases.held_until``). The one exception is a
call the node had in flight when it stopped, about an execution it held then: a stop can
fall between the node's lease check and the call's bytes leaving, and those bytes then leave
first thing on waking. Such a call is counted apart (``in_flight``) when the witness can
tell it was checked before the stop:

- on a pooled connection, check and write are one step of Python that does not yield (aiohttp
  writes a GET's request in the coroutine that asked for it), so at most one call can be
  caught between them: the node's first call after waking;
- on a connection of its own, the check comes before the connect, and the connect's SYN
  before the stop when the socket was already the node's as it woke (the kernel completes
  the handshake of a stopped process): the first call on a socket the node held at waking,
  that carried no call before.

Every other call must be for what it holds (a zombie's first call is missed, not the ones
after it, and not one on a connection it opens after waking).

A call about an execution whose row is still the sender's (its owner, its fence: nobody
took it over) under a lease that ran out unrenewed is harmless, and counted apart
(``lapsed``): no other node holds the execution, and one that takes it over later raises
the fence and adopts it by polling. What must never leave is a call about an execution
that another node holds, or that was let go.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from aiohttp import web
from aiohttp.typedefs import Handler

from ecron.store.sql_nodes import held_until, node_leases
from ecron.store.tables import execution_table
from tests.chaos.checks import Tables
from tests.support.service import wait_for


@dataclass(frozen=True)
class Sent:
    """A call from a node that had woken from a pause, and the row as it was on arrival."""

    node: str
    method: str
    remote_id: str
    arrived: datetime
    owner: str | None
    lease_until: datetime | None
    status: str | None
    #: The node's first call after waking, about an execution it held when it stopped.
    in_flight: bool

    @property
    def held(self) -> bool:
        """True when the node held the execution's lease as the call arrived."""
        until = self.lease_until
        return self.owner == self.node and until is not None and until > self.arrived

    @property
    def lapsed(self) -> bool:
        """True when the row was still the node's, under a lease that had run out unrenewed
        (nobody had taken it over)."""
        return self.owner == self.node and not self.held


@dataclass
class Senders:
    """The node processes (pid to node id), their pauses, and the calls of woken nodes."""

    tables: Tables = field(repr=False)
    #: Node ids by pid ("" until the node told its id: its calls are still known as a node's).
    nodes: dict[int, str] = field(default_factory=dict)
    #: Node ids stopped now; woken ones (each paused once at least, awake now) with the
    #: eids each held when it stopped, and whether its first call since waking came yet.
    stopped: set[str] = field(default_factory=set)
    held_at_stop: dict[str, set[str]] = field(default_factory=dict)
    first_due: set[str] = field(default_factory=set)
    woken: set[str] = field(default_factory=set)
    #: The socket inodes each woken node held as it woke (connections it began before).
    sockets_at_wake: dict[str, set[str]] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list, repr=False)
    #: Calls of any node and of nodes not found (these must be none).
    calls: int = 0
    unknown: int = 0
    _connections: dict[int, tuple[Any, int | None]] = field(default_factory=dict, repr=False)

    def add(self, pid: int, node: str = "") -> None:
        """A node process (at its start: its calls begin before it answers), or its id."""
        self.nodes[pid] = node

    async def stopping(self, node: str, pid: int) -> None:
        """``node`` was sent SIGSTOP: once it is stopped, what it holds (it changes nothing
        while stopped)."""
        await _until_stopped(pid)
        self.stopped.add(node)
        self.woken.discard(node)
        c = execution_table.c
        query = sa.select(c.eid, c.owner, c.owner_epoch, c.lease_until, c.status).where(
            c.owner == node
        )
        now = datetime.now(UTC)
        async with self.tables.store.engines.read() as conn:
            rows = (await conn.execute(query)).mappings().all()
            leases = await node_leases(conn)
        self.held_at_stop[node] = {
            row["eid"] for row in rows if (until := held_until(row, leases)) and until > now
        }

    def woke(self, node: str) -> None:
        """``node`` was sent SIGCONT (called before the signal leaves)."""
        self.stopped.discard(node)
        self.woken.add(node)
        self.first_due.add(node)
        pids = [pid for pid, name in self.nodes.items() if name == node]
        self.sockets_at_wake[node] = {inode for pid in pids for inode in _socket_inodes(pid)}

    def middleware(self) -> Any:
        @web.middleware
        async def watch(request: web.Request, handler: Handler) -> web.StreamResponse:
            self.calls += 1
            node, opened_before = self._sender(request)
            if node is None:
                self.unknown += 1
            elif node in self.woken:
                await self._record(node, request, opened_before)
            return await handler(request)

        return watch

    async def _record(self, node: str, request: web.Request, opened_before: bool) -> None:
        """``opened_before``: the call is the first on a socket the node held as it woke."""
        remote_id = request.headers.get("X-Ecron-Execution-Id", "")
        eid = remote_id.split(".", 1)[0]
        first = node in self.first_due or opened_before
        self.first_due.discard(node)
        c = execution_table.c
        query = sa.select(c.owner, c.owner_epoch, c.lease_until, c.status).where(c.eid == eid)
        async with self.tables.store.engines.read() as conn:
            row = (await conn.execute(query)).mappings().first()
            leases = await node_leases(conn)
        arrived = datetime.now(UTC)
        self.sent.append(
            Sent(
                node=node,
                method=request.method,
                remote_id=remote_id,
                arrived=arrived,
                owner=None if row is None else row["owner"],
                lease_until=None if row is None else held_until(row, leases),
                status=None if row is None else str(row["status"]),
                in_flight=first and eid in self.held_at_stop.get(node, set()),
            )
        )

    def _sender(self, request: web.Request) -> tuple[str | None, bool]:
        """The node that sent ``request`` (None when none is found), and whether this is the
        first call on a socket that node held as it last woke."""
        transport = request.transport
        assert transport is not None
        cached = self._connections.get(id(transport))
        if cached is not None and cached[0] is transport:
            pid = cached[1]
            return (None if pid is None else self.nodes[pid]), False
        peer = transport.get_extra_info("peername")
        here = transport.get_extra_info("sockname")
        found = None if peer is None or here is None else self._owner_of(peer[1], here[1])
        if found is None:
            return None, False
        pid, inode = found
        self._connections[id(transport)] = (transport, pid)
        node = self.nodes[pid]
        return node, inode in self.sockets_at_wake.get(node, set())

    def _owner_of(self, port: int, service_port: int) -> tuple[int, str] | None:
        """The node process whose socket has local port ``port`` and remote port
        ``service_port``, and that socket's inode."""
        inode = _socket_inode(port, service_port)
        if inode is None:
            return None
        for pid in self.nodes:
            if inode in _socket_inodes(pid):
                return pid, inode
        return None

    def problems(self) -> list[str]:
        """Calls of woken nodes about executions that were not theirs (another node's, or
        let go), not in flight; calls whose sender was not found."""
        found = [
            f"{s.node} sent {s.method} {s.remote_id} at {s.arrived.isoformat()} without its "
            f"lease (owner={s.owner} lease_until={s.lease_until} status={s.status})"
            for s in self.sent
            if not s.held and not s.lapsed and not s.in_flight
        ]
        if self.unknown:
            found.append(f"{self.unknown} calls whose sender is no node")
        return found


def _socket_inode(port: int, remote_port: int) -> str | None:
    """The inode of the IPv4 TCP socket from local ``port`` to remote ``remote_port``."""
    local, remote = f":{port:04X}", f":{remote_port:04X}"
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[1].endswith(local) and fields[2].endswith(remote):
                return fields[9]
    return None


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds (none once it has ended)."""
    found: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:[") : -1])
    return found


async def _until_stopped(pid: int) -> None:
    """Wait until the kernel shows every thread of ``pid`` stopped (SIGSTOP is delivered
    asynchronously, and a thread, aiosqlite's say, stops when it next can)."""

    def stopped() -> bool:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "T":
                    return False
        return True

    await wait_for(stopped, timeout=10, interval=0.005)

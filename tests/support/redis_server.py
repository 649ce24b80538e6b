"""A real ``redis-server`` for the tests (Debian's package), on a free port of 127.0.0.1,
without persistence. Missing ``redis-server`` skips locally and fails when CI=true."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

import pytest

#: How long a starting server has to answer PING.
START_TIMEOUT = 10.0


def unavailable(reason: str) -> None:
    """Skip (locally) or fail (in CI) because redis-server is not there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"redis-server is required in CI: {reason}", pytrace=False)
    pytest.skip(f"no redis-server: {reason}")


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _pings(port: int) -> bool:
    """True when a server on ``port`` answers PING (the inline command) with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    """One ``redis-server`` process; ``stop`` and ``start`` again on the same port (an
    outage: it comes back empty, as a server without persistence does)."""

    binary: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not _pings(self.port):
            if self.process.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"redis-server did not answer PING in {START_TIMEOUT}s")
            time.sleep(0.01)

    def stop(self) -> None:
        """Kill the server (its clients see their connections closed) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


def start_redis() -> RedisServer:
    """A started server (skipping or failing the test when there is no redis-server)."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not on PATH (apt-get install redis-server)")
    assert binary is not None
    server = RedisServer(binary)
    server.start()
    return server

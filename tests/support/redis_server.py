"""A real ``redis-server`` for the tests (Debian's package), on a free port of 127.0.0.1,
without persistence. Missing ``redis-server`` skips locally and fails when CI=true."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import IO

import pytest

#: How long a starting server has to say that it accepts connections.
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


#: The line a server logs once it accepts connections.
READY = b"Ready to accept connections"


@dataclass
class ServerLog:
    """What a server said so far: its last lines, and whether it said it is ready."""

    tail: deque[bytes] = field(default_factory=lambda: deque(maxlen=20))
    ready: bool = False
    #: Set when it says it is ready, or when its log ends (it exited first).
    told: threading.Event = field(default_factory=threading.Event)

    def follow(self, stream: IO[bytes]) -> None:
        """Read the log as it comes (so that the pipe never fills), until the server ends."""
        with stream:
            for line in stream:
                self.tail.append(line)
                if READY in line:
                    self.ready = True
                    self.told.set()
        self.told.set()


@dataclass
class RedisServer:
    """One ``redis-server`` process; ``stop`` and ``start`` again on the same port (an
    outage: it comes back empty, as a server without persistence does)."""

    binary: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    _log: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it says that it accepts connections (its own log
        line, read as it comes)."""
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--loglevel", "notice"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.process.stdout is not None
        log = ServerLog()
        self._log = threading.Thread(target=log.follow, args=(self.process.stdout,), daemon=True)
        self._log.start()
        log.told.wait(START_TIMEOUT)
        if not log.ready:
            self.stop()
            said = b"".join(log.tail).decode(errors="replace")
            raise AssertionError(f"redis-server did not get ready in {START_TIMEOUT}s:\n{said}")

    def stop(self) -> None:
        """Kill the server (its clients see their connections closed) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(timeout=10)
        if self._log is not None:
            self._log.join(timeout=10)  # its log ends with it: the pipe is closed then
        self.process, self._log = None, None


def start_redis() -> RedisServer:
    """A started server (skipping or failing the test when there is no redis-server)."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not on PATH (apt-get install redis-server)")
    assert binary is not None
    server = RedisServer(binary)
    server.start()
    return server

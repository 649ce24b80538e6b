"""User services written with the kit (or in another language), each run as its own process
on a port of 127.0.0.1, as a user would start it: started, waited for until it accepts
connections, and stopped with SIGTERM (what a deployment sends) at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServiceProcess:
    """``command`` run from the repository's root with ``env`` added, serving ``port``."""

    command: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        """Start it, and wait until it accepts connections (or fail with its stderr)."""
        self.process = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        until = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < until:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)  # polling a condition: is the port open yet?
        raise AssertionError(f"{self.command} did not start within {timeout}s: {self.stop()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> str:
        """End it with ``sig`` (SIGKILL if it has not ended within 15 s); its stderr."""
        process, self.process = self.process, None
        if process is None:
            return ""
        if process.poll() is None:
            process.send_signal(sig)
        try:
            _, err = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        return err.decode(errors="replace")

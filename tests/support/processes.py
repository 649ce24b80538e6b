"""Child processes that a test starts with asyncio and pipes: waited for with a bound, and
never left behind. A child still running when its test ends keeps its pipes and transports
open; the garbage collector finds them later, in whatever test runs then, and their
ResourceWarnings (``unclosed transport``, ``unclosed file``) fail that test instead."""

from __future__ import annotations

import asyncio
import signal

#: How long a child that was told to end (or killed) has to end and close its pipes.
ENDING = 10.0


async def finished(
    process: asyncio.subprocess.Process,
    timeout: float,
    *,
    input: bytes | None = None,
    stuck: signal.Signals = signal.SIGKILL,
) -> tuple[bytes, bytes]:
    """``process.communicate(input)``: its output once it ended within ``timeout`` seconds.
    Otherwise it is sent ``stuck`` (SIGABRT makes a child started with ``-X faulthandler``
    print where each of its threads was), killed if need be and reaped, and the test fails
    with what it wrote on stderr."""
    try:
        return await asyncio.wait_for(process.communicate(input), timeout=timeout)
    except TimeoutError:
        pass
    _, err = await reaped(process, stuck)
    raise AssertionError(
        f"the child process was still running after {timeout}s; its stderr:\n"
        + err.decode(errors="replace")
    )


async def reaped(
    process: asyncio.subprocess.Process, sig: signal.Signals = signal.SIGKILL
) -> tuple[bytes, bytes]:
    """End ``process`` if it still runs (``sig``, then SIGKILL), wait until it is reaped and
    its pipes are read to their end and closed; what was left to read of its output."""
    if process.returncode is None:
        process.send_signal(sig)
        try:
            await asyncio.wait_for(process.wait(), timeout=ENDING)
        except TimeoutError:
            process.kill()
    return await asyncio.wait_for(process.communicate(), timeout=ENDING)

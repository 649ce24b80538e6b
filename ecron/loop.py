"""The event loop the daemon runs on: uvloop (a dependency of ecron wherever it exists:
Linux and macOS) unless switched off with ``ECRON_UVLOOP=0``, else asyncio's own."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def uvloop_wanted() -> bool:
    """True when uvloop is installed (it is, but on Windows) and not switched off."""
    if os.environ.get("ECRON_UVLOOP", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return importlib.util.find_spec("uvloop") is not None


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to its end on the best loop available."""
    if uvloop_wanted():
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def loop_name() -> str:
    """The kind of the running loop, for the start-up log line."""
    kind = type(asyncio.get_running_loop())
    return "uvloop" if kind.__module__.startswith("uvloop") else "asyncio"

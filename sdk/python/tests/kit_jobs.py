"""The jobs most of the kit's tests serve, and what they saw."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ecron_service import Interrupted, Run, Service


@dataclass
class Seen:
    """What the jobs of ``service_with_jobs`` saw: runs started, and jobs that stopped."""

    started: list[Run] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


def service_with_jobs(**options: Any) -> tuple[Service, Seen]:
    """A ``Service(**options)`` with the jobs the tests use, and what they saw:

    - ``climb`` (async) and ``climb-thread`` (def): ``body["steps"]`` steps (5) of
      ``body["pause"]`` seconds (0.02) each, reporting progress; the result
      ``{"steps": n}``;
    - ``waits`` and ``waits-thread``: run until cancelled, then note it in ``stopped``;
    - ``raises``: raises ``RuntimeError(body["message"])``; ``interrupted``: raises
      ``Interrupted``.
    """
    service, seen = Service(**options), Seen()

    @service.job("climb")
    async def climb(run: Run) -> dict[str, int]:
        seen.started.append(run)
        steps = run.body.get("steps", 5)
        for step in range(1, steps + 1):
            await asyncio.sleep(run.body.get("pause", 0.02))
            await run.progress(step * 100 / steps - 1, f"step {step} of {steps}")
        return {"steps": steps}

    @service.job("climb-thread")
    def climb_thread(run: Run) -> dict[str, int]:
        seen.started.append(run)
        steps = run.body.get("steps", 5)
        for step in range(1, steps + 1):
            time.sleep(run.body.get("pause", 0.02))
            run.progress(step * 100 / steps - 1, f"step {step} of {steps}")
        return {"steps": steps}

    @service.job("waits")
    async def waits(run: Run) -> None:
        seen.started.append(run)
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            seen.stopped.append(run.execution_id)
            raise

    @service.job("waits-thread")
    def waits_thread(run: Run) -> None:
        seen.started.append(run)
        while not run.cancelled:
            time.sleep(0.01)
        seen.stopped.append(run.execution_id)

    @service.job("raises")
    async def raises(run: Run) -> None:
        seen.started.append(run)
        raise RuntimeError(run.body.get("message", "the disk is full"))

    @service.job("interrupted")
    def interrupted(run: Run) -> None:
        seen.started.append(run)
        raise Interrupted("the session to the warehouse was lost")

    return service, seen

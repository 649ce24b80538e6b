"""The board: every run the service knows, under one lock, with how many jobs are running
and when ended runs are forgotten (``keep_ended``)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ecron_service.push import Pusher
    from ecron_service.run import Run


class Board:
    """The runs by (job, remote id). ``lock`` guards them and every run's report; it is
    reentrant, so that the SIGTERM handler may take it in a thread that holds it."""

    def __init__(self, keep_ended: float, logger: logging.Logger) -> None:
        self.keep_ended = keep_ended
        self.logger = logger
        self.lock = threading.RLock()
        self.runs: dict[tuple[str, str], Run] = {}
        #: Jobs whose code is still running (a cancelled thread counts until it returns).
        self.live = 0
        #: Ended runs, oldest end first: what ``forget_old`` looks at.
        self._ended: deque[tuple[float, tuple[str, str]]] = deque()
        # Set by the service once its pusher exists (the pusher needs the lock first).
        self.pusher: Pusher

    def add(self, run: Run) -> None:
        """A new run, whose job is starting."""
        self.runs[run.job, run.execution_id] = run
        self.live += 1

    def ended(self, run: Run) -> None:
        """``run`` has just ended: remember when, to forget it ``keep_ended`` later."""
        run.ended_at = time.monotonic()
        self._ended.append((run.ended_at, (run.job, run.execution_id)))

    def forget_old(self, now: float) -> None:
        """Forget the runs that ended more than ``keep_ended`` seconds before ``now``."""
        cutoff = now - self.keep_ended
        while self._ended and self._ended[0][0] <= cutoff:
            _, key = self._ended.popleft()
            self.runs.pop(key, None)

"""``Run``: one execution as its job sees it (what ecron sent, and how to report), and the
report it makes, which every call about it answers."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Generator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ecron_service.board import Board
    from ecron_service.push import PushState

RUNNING, SUCCESS, FAILED = "RUNNING", "SUCCESS", "FAILED"


class Interrupted(Exception):
    """Raise it from a job when the work stopped because of something outside it (a lost
    session, a dependency going away), not because it is wrong, and running it again is
    safe: the run ends ``FAILED`` with ``interrupted: true`` and the exception's message,
    and ecron may resume it (an ``idempotent`` task with ``resume: {auto: true}``)."""


class Checkpoint:
    """What ``run.progress`` returns: awaiting it lets the event loop run once, so that an
    ``async`` job that reports progress can be cancelled there. A ``def`` job ignores it."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield  # what asyncio.sleep(0) does: back to the loop once, and on


CHECKPOINT = Checkpoint()


class Run:
    """One execution of a job: what ecron's trigger carried, and how the job reports.

    ``execution_id`` is the remote id (an eid, or ``<eid>.<n>`` for step *n* of a
    multi-step task); ``task`` the task's name; ``scheduled_at`` the fire time this run
    belongs to and ``deadline`` when the task's timeout expires (aware datetimes, None when
    not sent); ``attempt`` 1 for the first execution of a fire time; ``resume_of`` the eid
    this run continues (None unless resumed); ``step`` and ``step_number`` the step's name
    and number (None unless a step); ``trigger_kind`` why it runs (``schedule``,
    ``manual``, ...); ``body`` the trigger's JSON body (``{}`` when empty); ``headers`` every
    header of the trigger, by lower-case name.
    """

    def __init__(
        self,
        board: Board,
        job: str,
        execution_id: str,
        headers: Mapping[str, str],
        body: Any,
        *,
        scheduled_at: datetime | None,
        deadline: datetime | None,
        attempt: int,
    ) -> None:
        self.job = job
        self.execution_id = execution_id
        self.headers = headers
        self.body = body
        self.scheduled_at = scheduled_at
        self.deadline = deadline
        self.attempt = attempt
        self.task: str = headers.get("x-ecron-task") or ""
        self.resume_of: str | None = headers.get("x-ecron-resume-of") or None
        self.step: str | None = headers.get("x-ecron-step") or None
        number = headers.get("x-ecron-step-number") or ""
        self.step_number: int | None = int(number) if number.isdigit() else None
        self.trigger_kind: str | None = headers.get("x-ecron-trigger-kind") or None
        self._board = board
        self._status = RUNNING
        self._progress: float = 0
        self._message: str | None = None
        self._result: Any = None
        self._interrupted = False
        #: The report as JSON bytes, made again after each change (polls answer it as is).
        self._encoded: bytes | None = None
        #: Counts the changes of the report (what a push sent is compared with it).
        self.version = 0
        self._cancelled = threading.Event()
        #: Stops an ``async`` job (cancels its task); None for a thread.
        self.stop: Callable[[], None] | None = None
        #: When the run ended (``time.monotonic()``), None while it runs.
        self.ended_at: float | None = None
        #: Where its reports and log lines are pushed, when ecron offered a callback URL.
        self.push: PushState | None = None

    def __repr__(self) -> str:
        return f"<Run {self.job}/{self.execution_id} {self._status}>"

    @property
    def cancelled(self) -> bool:
        """True once ecron cancelled the run (or the service is stopping): a ``def`` job
        should return soon after (an ``async`` job is cancelled at its next await)."""
        return self._cancelled.is_set()

    @property
    def status(self) -> str:
        """``RUNNING``, ``SUCCESS`` or ``FAILED``."""
        return self._status

    def progress(self, percent: float, message: str | None = None) -> Checkpoint:
        """Report how far along the run is (0 to 100, clamped), and a line for people
        (None keeps the last one). In an ``async`` job, ``await`` it: the job can then be
        cancelled there. Once the run has ended, nothing changes."""
        if isinstance(percent, bool) or not isinstance(percent, int | float):
            raise TypeError(f"run.progress: percent must be a number, not {percent!r}")
        if not math.isfinite(percent):
            raise ValueError(f"run.progress: percent must be finite, not {percent!r}")
        value = min(100, max(0, percent))
        with self._board.lock:
            if self._status == RUNNING:
                text = self._message if message is None else str(message)
                if value != self._progress or text != self._message:
                    self._progress, self._message = value, text
                    self._changed()
        return CHECKPOINT

    def log(self, line: str) -> None:
        """A line of what the job prints: logged by the ``ecron_service`` logger and, when
        ecron offered a callback URL, pushed to the execution's log (PROTOCOL.md, "Log
        lines, pushed"), in order, several lines a call."""
        text = str(line)
        self._board.logger.info("%s %s: %s", self.job, self.execution_id, text)
        if self.push is not None:
            self._board.pusher.add_line(self, text)

    # -- the report (callers hold the board's lock) ------------------------------------------

    def report(self) -> dict[str, Any]:
        """The report ecron reads (PROTOCOL.md, "Reports")."""
        report: dict[str, Any] = {"status": self._status, "progress": self._progress}
        if self._message is not None:
            report["message"] = self._message
        if self._status == SUCCESS and self._result is not None:
            report["result"] = self._result
        if self._interrupted:
            report["interrupted"] = True
        return report

    def encoded(self) -> bytes:
        """The report as JSON bytes."""
        if self._encoded is None:
            self._encoded = json.dumps(self.report()).encode()
        return self._encoded

    def finish(
        self, status: str, message: str | None, result: Any = None, interrupted: bool = False
    ) -> bool:
        """End the run once (the first end is the one kept); False when it had ended."""
        if self._status != RUNNING:
            return False
        self._status, self._result, self._interrupted = status, result, interrupted
        if message is not None:
            self._message = message
        if status == SUCCESS:
            self._progress = 100
        self._changed()
        self._board.ended(self)
        return True

    def halt(self, message: str, interrupted: bool = False) -> bool:
        """End the run FAILED with ``message`` and stop its job: a cancel, ecron having
        ended it, the service stopping. False when it had ended already (the job is asked
        to stop all the same)."""
        ended = self.finish(FAILED, message, interrupted=interrupted)
        self._cancelled.set()
        if self.stop is not None:
            self.stop()
        return ended

    def _changed(self) -> None:
        self.version += 1
        self._encoded = None
        if self.push is not None:
            self._board.pusher.changed(self)

"""Pushed reports and log lines (PROTOCOL.md, "Callbacks" and "Log lines, pushed"), when
a trigger carried ``X-Ecron-Callback-Url``. A run's RUNNING reports are pushed until ecron
polls it (a polled task is not in ``mode: callback``): at most one each ``push_every``
seconds, the newest only, and one each ``heartbeat`` seconds when nothing changed; its
final report is always pushed. One thread decides what is due; a few send it, with
``urllib`` (the standard library), one call in flight per run and kind."""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ecron_service.protocol import JSON_TYPE
from ecron_service.run import RUNNING

if TYPE_CHECKING:
    from ecron_service.run import Run

#: Tries of one push, and the first wait between two (doubled each time).
TRIES, BACKOFF = 4, 0.2
#: The most of one log call (PROTOCOL.md: 64 KiB), and of a run's lines waiting to be sent.
LOG_CALL_BYTES = 64 * 1024 - 64
LOG_BUFFER_BYTES = 1024 * 1024
#: How many pushes are in flight at once, for all runs.
SENDERS = 4
#: The pusher looks at what is due at most this often (seconds).
COALESCE = 0.02


@dataclass(slots=True, eq=False)
class PushState:
    """Where one run's reports and lines go, and what was sent."""

    report_url: str
    logs_url: str
    token: str
    #: RUNNING reports are pushed (False once ecron polled the run, or refused a push).
    running_reports: bool = True
    #: The final report is still to be pushed.
    final_report: bool = True
    sent_version: int = 0
    last_sent: float = field(default_factory=time.monotonic)
    report_busy: bool = False
    report_tries: int = 0
    report_after: float = 0.0
    #: Log lines waiting, each with the bytes it takes in a call.
    lines: list[tuple[str, int]] = field(default_factory=list)
    lines_bytes: int = 0
    logs: bool = True
    logs_busy: bool = False
    log_tries: int = 0
    log_after: float = 0.0


def push_state(url: str | None, token: str | None) -> PushState | None:
    """The push state of a run whose trigger carried ``url`` and ``token`` (None without)."""
    if not url or not token:
        return None
    logs_url = url[: -len("/report")] + "/logs" if url.endswith("/report") else url + "/logs"
    return PushState(url, logs_url, token)


def post(url: str, payload: bytes, token: str, timeout: float) -> tuple[int | None, str]:
    """POST ``payload`` to ``url`` with the bearer ``token``; the status (None when no answer
    came) and up to 300 characters of what was said."""
    headers = {"Content-Type": JSON_TYPE, "Authorization": f"Bearer {token}"}
    if not url.startswith(("http://", "https://")):
        return None, f"not an HTTP URL: {url[:100]!r}"
    request = urllib.request.Request(url, data=payload, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status), ""
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(300).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out
        return None, f"{type(exc).__name__}: {exc}"


class Pusher:
    """Pushes what is due for the runs it watches. Its condition shares the board's lock:
    a run's change wakes it (``wake``, called holding the lock)."""

    def __init__(
        self,
        lock: threading.RLock,
        logger: logging.Logger,
        *,
        every: float,
        heartbeat: float,
        timeout: float = 10.0,
    ) -> None:
        self._wake = threading.Condition(lock)
        self.logger = logger
        self.every = every
        self.heartbeat = heartbeat
        self.timeout = timeout
        self._watched: set[Run] = set()
        self._thread: threading.Thread | None = None
        self._senders: ThreadPoolExecutor | None = None
        self._closed = False

    def watch(self, run: Run) -> None:
        """Push ``run``'s reports and lines from now on (the caller holds the lock)."""
        self._watched.add(run)
        if self._thread is None and not self._closed:
            self._senders = ThreadPoolExecutor(SENDERS, thread_name_prefix="ecron-service push")
            self._thread = threading.Thread(target=self._decide, name="ecron-service pusher")
            self._thread.daemon = True
            self._thread.start()
        self._wake.notify_all()

    def changed(self, run: Run) -> None:
        """``run``'s report changed (the caller holds the lock): wake the pusher when that
        is to be pushed (a polled run's RUNNING reports are not)."""
        push = run.push
        if push is not None and (push.running_reports or run.status != RUNNING):
            self.watch(run)

    def polled(self, run: Run) -> None:
        """ecron polled ``run``: its task is not in callback mode; RUNNING reports stop."""
        if run.push is not None:
            run.push.running_reports = False

    def add_line(self, run: Run, text: str) -> None:
        """Queue a log line of ``run``, cut to what one call may carry; past the buffer,
        the oldest lines waiting are dropped."""
        with self._wake:
            push = run.push
            if push is None or not push.logs:
                return
            size = len(json.dumps(text, ensure_ascii=False).encode()) + 1
            while size > LOG_CALL_BYTES:
                text = text[: max(1, len(text) * LOG_CALL_BYTES // size - 1)]
                size = len(json.dumps(text, ensure_ascii=False).encode()) + 1
            push.lines.append((text, size))
            push.lines_bytes += size
            while push.lines_bytes > LOG_BUFFER_BYTES:
                push.lines_bytes -= push.lines.pop(0)[1]
            self._watched.add(run)
            self._wake.notify_all()

    def flush(self, runs: list[Run], timeout: float) -> None:
        """Push the final reports and the lines of ``runs`` now, whether polled or not (the
        service is stopping); wait until they are sent or given up, at most ``timeout`` s."""
        until = time.monotonic() + timeout
        with self._wake:
            pushed = [run for run in runs if run.push is not None]
            for run in pushed:
                assert run.push is not None
                run.push.final_report, run.push.report_after = True, 0.0
                self.watch(run)
            while any(self._pending(run) for run in pushed):
                left = until - time.monotonic()
                if left <= 0:
                    self.logger.warning("ecron_service: %d pushes not sent in time", len(pushed))
                    return
                self._wake.wait(left)

    def close(self) -> None:
        """Stop pushing (what is in flight ends on its own)."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
            senders = self._senders
        if senders is not None:
            senders.shutdown(wait=False)

    # -- deciding (the pusher's thread, holding the lock) ------------------------------------

    def _decide(self) -> None:
        with self._wake:
            while not self._closed:
                dispatched = time.monotonic()
                self._wake.wait(self._dispatch(dispatched))
                # A burst of changes (a job reporting in a tight loop) is one look, not many.
                while (left := dispatched + COALESCE - time.monotonic()) > 0 and not self._closed:
                    self._wake.wait(left)

    def _dispatch(self, now: float) -> float | None:
        """Send what is due; how long until the next thing is (None: nothing waits)."""
        soonest: float | None = None
        for run in list(self._watched):
            push = run.push
            assert push is not None
            due = self._report_due(run, push)
            if due is not None and due <= now and self._senders is not None:
                push.report_busy = True
                self._senders.submit(self._send_report, run, push, run.encoded(), run.version)
            elif due is not None:
                soonest = due if soonest is None else min(soonest, due)
            due = self._logs_due(push)
            if due is not None and due <= now and self._senders is not None:
                push.logs_busy = True
                self._senders.submit(self._send_lines, run, push, self._take_lines(push))
            elif due is not None:
                soonest = due if soonest is None else min(soonest, due)
            if not self._pending(run) and (run.status != RUNNING or not push.running_reports):
                self._watched.discard(run)
        return None if soonest is None else max(0.0, soonest - now)

    def _report_due(self, run: Run, push: PushState) -> float | None:
        """When ``run``'s report is due to be pushed (None: it is not)."""
        if push.report_busy:
            return None
        if run.status != RUNNING:
            return push.report_after if push.final_report else None
        if not push.running_reports:
            return None
        wait = self.every if push.sent_version != run.version else self.heartbeat
        return max(push.last_sent + wait, push.report_after)

    @staticmethod
    def _logs_due(push: PushState) -> float | None:
        if push.logs_busy or not push.logs or not push.lines:
            return None
        return push.log_after

    @staticmethod
    def _pending(run: Run) -> bool:
        push = run.push
        assert push is not None
        final = run.status != RUNNING and push.final_report
        return final or push.report_busy or push.logs_busy or bool(push.logs and push.lines)

    # -- sending (a sender's thread) ---------------------------------------------------------

    def _send_report(self, run: Run, push: PushState, payload: bytes, version: int) -> None:
        status, detail = post(push.report_url, payload, push.token, self.timeout)
        with self._wake:
            push.report_busy = False
            self._report_answered(run, push, version, status, detail)
            self._wake.notify_all()

    def _report_answered(
        self, run: Run, push: PushState, version: int, status: int | None, detail: str
    ) -> None:
        now = time.monotonic()
        final = run.status != RUNNING and version == run.version
        if status is not None and 200 <= status < 300:
            push.sent_version, push.last_sent, push.report_tries = version, now, 0
            push.final_report = push.final_report and not final
        elif status == 409:  # ecron has ended the execution: nobody waits for the work
            push.running_reports = push.final_report = False
            if run.halt("stopped: ecron had ended the execution"):
                self.logger.info("ecron has ended %s; its job is stopped", run.execution_id)
        elif status is not None and status < 500 and status not in (408, 429):
            push.running_reports = push.final_report = False
            self.logger.error(
                "ecron refused a report about %s (HTTP %d), no more are pushed: %s",
                run.execution_id,
                status,
                detail,
            )
        else:
            push.report_tries += 1
            if push.report_tries < TRIES:
                push.report_after = now + BACKOFF * 2 ** (push.report_tries - 1)
                return
            self.logger.warning(
                "a report about %s was not delivered in %d tries: %s",
                run.execution_id,
                TRIES,
                detail or f"HTTP {status}",
            )
            push.report_tries, push.last_sent = 0, now
            push.final_report = push.final_report and not final

    @staticmethod
    def _take_lines(push: PushState) -> list[tuple[str, int]]:
        """The oldest waiting lines that fit in one call, taken off the buffer."""
        taken, size = 0, 0
        while taken < len(push.lines) and size + push.lines[taken][1] <= LOG_CALL_BYTES:
            size += push.lines[taken][1]
            taken += 1
        lines = push.lines[:taken]
        del push.lines[:taken]
        push.lines_bytes -= size
        return lines

    def _send_lines(self, run: Run, push: PushState, lines: list[tuple[str, int]]) -> None:
        texts = [text for text, _ in lines]
        payload = json.dumps({"lines": texts}, ensure_ascii=False).encode()
        status, detail = post(push.logs_url, payload, push.token, self.timeout)
        with self._wake:
            push.logs_busy = False
            if status is not None and 200 <= status < 300:
                push.log_tries = 0
            elif status is not None and status < 500 and status not in (408, 429):
                push.logs, push.lines, push.lines_bytes = False, [], 0
                self.logger.info(
                    "ecron took no log lines of %s (HTTP %d), none are pushed any more: %s",
                    run.execution_id,
                    status,
                    detail,
                )
            else:
                push.log_tries += 1
                if push.log_tries < TRIES:
                    push.lines[:0] = lines
                    push.lines_bytes += sum(size for _, size in lines)
                    push.log_after = time.monotonic() + BACKOFF * 2 ** (push.log_tries - 1)
                else:
                    push.log_tries = 0
                    self.logger.warning(
                        "%d log lines of %s were not delivered: %s",
                        len(lines),
                        run.execution_id,
                        detail or f"HTTP {status}",
                    )
            self._wake.notify_all()

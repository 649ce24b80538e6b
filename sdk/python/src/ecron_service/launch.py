"""Where a job runs: an ``async def`` as a task of the event loop that took the trigger
(ASGI, aiohttp), or of the kit's own loop in a thread (WSGI); a ``def`` in a thread of its
own. However it ends, its run is settled once: a value is SUCCESS, ``Interrupted`` is
FAILED interrupted, any other exception FAILED with its message."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from ecron_service.board import Board
from ecron_service.run import FAILED, SUCCESS, Interrupted, Run

#: A job: ``async def job(run)`` or ``def job(run)``; what it returns is the run's result.
Job = Callable[[Run], Any]

_CANCELLED = (asyncio.CancelledError, concurrent.futures.CancelledError)


class BackgroundLoop:
    """An event loop in a thread of its own, started on first use: where ``async`` jobs run
    when the trigger came in without one (a WSGI server's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coroutine: Awaitable[Any]) -> concurrent.futures.Future[Any]:
        """Run ``coroutine`` on the loop; its future (cancelling it cancels the task)."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._loop,), name="ecron-service loop", daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(_awaited(coroutine), self._loop)

    def close(self, timeout: float) -> None:
        """Stop the loop (its tasks are cancelled and awaited first) and wait for its thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def launch(board: Board, run: Run, job: Job, background: BackgroundLoop) -> None:
    """Start ``job`` for ``run`` (the caller holds the board's lock)."""
    if not inspect.iscoroutinefunction(job):
        name = f"ecron-service {run.job} {run.execution_id}"
        threading.Thread(target=_in_thread, args=(board, run, job), name=name, daemon=True).start()
        return
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        future = background.submit(job(run))
        future.add_done_callback(lambda done: settle(board, run, done.result))
        run.stop = lambda: _cancel_future(future)
        return
    task = loop.create_task(job(run), name=f"ecron-service {run.job} {run.execution_id}")
    task.add_done_callback(lambda done: settle(board, run, done.result))
    run.stop = lambda: _cancel_soon(loop, task)


def _cancel_future(future: concurrent.futures.Future[Any]) -> None:
    future.cancel()


def _cancel_soon(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` from any thread (a WSGI thread, a signal handler, the pusher's)."""
    with contextlib.suppress(RuntimeError):  # a closed loop: the task can run no more
        loop.call_soon_threadsafe(task.cancel)


def _in_thread(board: Board, run: Run, job: Job) -> None:
    settle(board, run, lambda: job(run))


def settle(board: Board, run: Run, outcome: Callable[[], Any]) -> None:
    """End ``run`` by what ``outcome()`` returns or raises; the job no longer counts as
    running, in the same step (so that a SUCCESS seen by ecron has freed its place)."""
    status, message, result, interrupted = SUCCESS, None, None, False
    escaping: BaseException | None = None
    try:
        result = outcome()
    except _CANCELLED:
        status, message, interrupted = FAILED, "the job was cancelled", True
    except Interrupted as exc:
        status, message, interrupted = FAILED, str(exc) or "interrupted", True
    except Exception as exc:  # the job's failure is the run's, and this service carries on
        status, message = FAILED, str(exc) or type(exc).__name__
        board.logger.error("job %s %s failed", run.job, run.execution_id, exc_info=exc)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt: booked, then let through
        status, message, escaping = FAILED, f"{type(exc).__name__}: {exc}", exc
    else:
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            status, message, result = FAILED, f"the job's result is not JSON: {exc}", None
    with board.lock:
        board.live -= 1
        if run.finish(status, message, result, interrupted):
            board.logger.info("job %s %s ended %s", run.job, run.execution_id, status)
    if escaping is not None:
        raise escaping

"""Transactions that are run again when the database fails them for a passing reason.

Every store operation runs one transaction; ``@retried`` re-invokes the whole operation
(its transaction from ``BEGIN``, never one statement) when it fails on one of the
transient errors below, at most ``ATTEMPTS`` times with exponential backoff and jitter,
logging ``store_retry`` (warning) with the operation, the attempt and the error. Any other
error, and the last attempt's, propagates as it is (callers catch the SQLAlchemy error,
as before). The first attempt costs one ``try``: tenacity is only reached once it failed.

Transient errors, listed once (``transient``):

- SQLite: ``database is locked`` / ``database is busy`` (another process held the write
  lock longer than the busy timeout).
- PostgreSQL (asyncpg): the connection lost or refused (``ConnectionDoesNotExistError``,
  ``InterfaceError`` on a closed connection, ``CannotConnectNowError``, an ``OSError`` on
  connect, SQLSTATE class 08, or SQLAlchemy saw a disconnect), a serialization failure
  (40001) and a deadlock (40P01).

**A commit whose outcome is unknown** (the connection lost during ``COMMIT``): the attempt
that is run again may find its own work already done. Why each kind stays right:

- ``set_paused`` is a compare-and-set on the task's version: on a retry after its own
  commit it finds the row moved on and says so, and the caller reads it again.
- Reads, and writes of absolute values (``renew_leases``, ``heartbeat``,
  ``tasks_succeeded``, ``shared_secret``): doing them twice is doing them once.
  ``purge_history``, ``purge_audit``: a retry deletes the next batch, as the patrol's next
  round would. ``add_audit`` appends without a key: a retry after its own commit writes
  its entries twice (audit ids are the database's own), which a reader sees as the same
  time, actor and action twice; nothing is lost.
  ``release_leases`` matches ``owner = node``: the second time it finds none.
  ``force_claim`` raises the fence once more and returns the rows as they now are.
- ``save`` and ``start_executions``: compare-and-set on fence and version. On a retry a
  row whose compare fails but that already holds exactly the write (same fence, the new
  version, the same state) counts as written (``retrying()`` tells them); a start decides
  again without counting its own started (or inserted) executions as active ones.
- Inserts (``create_execution``, the new runs of a start, the executions of a claim):
  ``ON CONFLICT DO NOTHING``; on a retry an execution whose eid (fresh for each call) is
  already there is the one this call inserted.
- ``claim_due_fires`` and ``claim_runnable``: a landed claim leaves nothing due or free,
  so the retry claims nothing; the rows it took are this node's until their lease
  expires, and are then taken over like any others (late by up to a lease, never twice).
- ``task_finished`` (counts failures in a row): on a retry, a task whose ``last_end_at``
  already is this end is not counted again. ``give_up_resume``: on a retry, the row
  already marked at ``now`` is this call's. ``sync_tasks`` (itself a compare-and-set: new
  rows ``ON CONFLICT DO NOTHING``, changed rows at the version read): a landed sync leaves
  nothing to change, and the retry's result then lists nothing.

Not retried: ``ping`` (it reports the database as it is now) and the cluster lock (held on
a connection for its whole span; a lock not taken is an ordinary outcome).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, Concatenate, ParamSpec, TypeVar

import asyncpg
import sqlalchemy as sa
import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ecron.backoff import exponential

log = structlog.get_logger(__name__)

#: Attempts of one transaction in all (the first included), and the backoff between them:
#: 50 ms, 100 ms, 200 ms, 400 ms (each plus up to one backoff, 50 ms, of jitter), at most 2 s.
ATTEMPTS = 5
BACKOFF_INITIAL = 0.05
BACKOFF_MAX = 2.0

#: SQLSTATEs worth a new attempt: serialization failure, deadlock, cannot connect now.
_SQLSTATES = frozenset({"40001", "40P01", "57P03"})
_SQLITE_BUSY = ("database is locked", "database is busy")
_ASYNCPG_LOST = (asyncpg.ConnectionDoesNotExistError, asyncpg.CannotConnectNowError)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, the driver error SQLAlchemy wrapped, and what each was raised from."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or any(item is s for s in seen) or len(seen) > 8:
            continue
        seen.append(item)
        todo += [getattr(item, "orig", None), item.__cause__]
    return seen


def _transient_one(exc: BaseException) -> bool:
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return any(text in str(exc) for text in _SQLITE_BUSY)
    if isinstance(exc, _ASYNCPG_LOST):
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc) or "connection was closed" in str(exc)
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and (sqlstate in _SQLSTATES or sqlstate.startswith("08")):
        return True
    return isinstance(exc, OSError)  # connecting failed (refused, reset, timed out)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth running the transaction again (see the module docstring)."""
    return any(_transient_one(item) for item in _chain(exc))


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    log.warning(
        "store_retry",
        operation=state.kwargs.get("operation", "?"),
        attempt=state.attempt_number,
        attempts=ATTEMPTS,
        retry_in=round(state.upcoming_sleep, 3),
        error=f"{type(error).__name__}: {error}",
    )


#: The policy, built once; each retried call runs on a copy (tenacity keeps per-call state).
POLICY = AsyncRetrying(
    retry=retry_if_exception(transient),
    stop=stop_after_attempt(ATTEMPTS),
    wait=exponential(BACKOFF_INITIAL, BACKOFF_MAX, jitter=True),
    before_sleep=_log_retry,
    reraise=True,
)

_retrying: ContextVar[bool] = ContextVar("ecron_store_retrying", default=False)


def retrying() -> bool:
    """True inside an attempt after the first: its work may already be committed."""
    return _retrying.get()


S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


def retried(
    operation: str,
) -> Callable[
    [Callable[Concatenate[S, P], Coroutine[Any, Any, R]]],
    Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
]:
    """Run the decorated store method again from its start on a transient error."""

    def decorate(
        method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
        async def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await method(self, *args, **kwargs)
            except Exception as exc:
                if not transient(exc):
                    raise
                first: Exception | None = exc

            async def again(**_named: str) -> R:  # ``operation``, for the log line
                nonlocal first
                if first is not None:  # attempt 1 is the failure already seen
                    error, first = first, None
                    raise error
                token = _retrying.set(True)
                try:
                    return await method(self, *args, **kwargs)
                finally:
                    _retrying.reset(token)

            return await POLICY.copy()(again, operation=operation)

        functools.update_wrapper(run, method)
        return run

    return decorate

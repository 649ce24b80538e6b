"""Domain objects: reports, executions and their steps. Frozen; never rows."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from ecron.core.status import (
    ACTIVE,
    FINAL,
    Reason,
    RemoteStatus,
    Status,
    TriggerKind,
    WaitingFor,
)
from ecron.errors import EcronError

#: A report's ``message`` is stored cut to this many characters.
MESSAGE_LIMIT = 1000
#: A report's ``result`` is stored up to this many bytes of JSON; larger ones are cut and flagged.
RESULT_LIMIT = 64 * 1024
#: A report's ``result`` nested deeper than this (arrays and objects) is not stored: no
#: real result needs it, and JSON that deep breaks the encoders that read it back.
RESULT_DEPTH = 100


class InvalidReport(EcronError, ValueError):
    """A body that is not a report (PROTOCOL.md, "Reports"); a ``ValueError`` too."""


@dataclass(frozen=True, slots=True)
class Report:
    """What a user service says about one execution, from any channel."""

    status: RemoteStatus
    progress: float | None = None
    message: str | None = None
    result: Any = None
    result_truncated: bool = False
    interrupted: bool = False
    #: Parts of the body that were ignored, in words (e.g. a progress that is not a number).
    warnings: tuple[str, ...] = ()


def parse_report(body: Any) -> Report:
    """Turn a decoded JSON body into a ``Report``, or raise ``InvalidReport``.

    ``status`` is matched without regard to case; a ``progress`` that is not a
    finite number is ignored (and named in ``warnings``); one outside 0..100 is
    clamped; ``message`` is cut to 1,000 characters; ``result`` over 64 KiB of
    JSON is cut and flagged.
    """
    if not isinstance(body, dict):
        raise InvalidReport(f"a report is a JSON object, not {type(body).__name__}")
    raw_status = body.get("status")
    status = _STATUSES.get(raw_status) if isinstance(raw_status, str) else None
    if status is None:  # not written the usual way: read it the long way
        status = _read_status(raw_status)
    warnings: list[str] = []
    progress = body.get("progress")
    if progress is not None and (type(progress) is not float or not 0.0 <= progress <= 100.0):
        progress = _read_progress(progress, warnings)  # the usual float in range passes as is
    message = body.get("message")
    if message is not None and not isinstance(message, str):
        warnings.append(f"message {message!r} is not a string; ignored")
        message = None
    elif message is not None and "\x00" in message:  # PostgreSQL's text cannot hold it
        message = message.replace("\x00", "\N{REPLACEMENT CHARACTER}")
    result = body.get("result")
    truncated = False
    if result is not None and _deeper_than(result, RESULT_DEPTH):
        warnings.append(f"result is nested more than {RESULT_DEPTH} levels deep; not stored")
        result, truncated = None, True
    elif result is not None:
        result, truncated = _cap_result(result)
    return Report(
        status=status,
        progress=progress,
        message=message[:MESSAGE_LIMIT] if message is not None else None,
        result=result,
        result_truncated=truncated,
        interrupted=body.get("interrupted") is True,
        warnings=tuple(warnings) if warnings else (),
    )


#: Statuses as user services usually write them.
_STATUSES = {status.value: status for status in RemoteStatus} | {
    status.value.lower(): status for status in RemoteStatus
}


def _read_status(raw: Any) -> RemoteStatus:
    if not isinstance(raw, str):
        raise InvalidReport("a report needs a string 'status'")
    try:
        return RemoteStatus(raw.strip().upper())
    except ValueError:
        raise InvalidReport(
            f"unknown status {raw!r}: expected RUNNING, SUCCESS, FAILED or UNKNOWN"
        ) from None


def _read_progress(value: Any, warnings: list[str]) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        warnings.append(f"progress {value!r} is not a number; ignored")
        return None
    return clamp_progress(float(value))


def clamp_progress(value: float) -> float:
    """Progress always lies in 0..100."""
    return min(100.0, max(0.0, value))


def _deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists and dicts more than ``limit`` levels deep (walked
    without recursion, so any depth is measured)."""
    if not isinstance(value, list | dict):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, list | dict))
    return False


def _cap_result(result: Any) -> tuple[Any, bool]:
    if result is None:
        return None, False
    encoded = json.dumps(result, ensure_ascii=False, default=str)
    if len(encoded.encode()) <= RESULT_LIMIT:
        return result, False
    return encoded.encode()[:RESULT_LIMIT].decode(errors="ignore"), True


@dataclass(frozen=True, slots=True)
class Step:
    """One call of a multi-step execution."""

    number: int
    name: str
    remote_id: str
    status: Status = Status.PENDING
    reason: Reason | None = None
    progress: float = 0.0
    message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def is_final(self) -> bool:
        """True once this step can never change again."""
        return self.status in FINAL


@dataclass(frozen=True, slots=True)
class Execution:
    """One run of a task, as ecron knows it.

    The call fields (``triggered_at``, ``deadline``, ``probe_failures``,
    ``cancel_sent_at``) are about the call in flight: the execution itself
    for a one-call task, its current step for a multi-step one.
    """

    eid: str
    task: str
    scheduled_at: datetime
    created_at: datetime
    trigger_kind: TriggerKind = TriggerKind.SCHEDULE
    attempt: int = 1
    resume_attempt: int = 0
    resume_of: str | None = None
    #: Chains: the eid of the upstream execution whose end set this one (or the run it
    #: retries or resumes) off.
    upstream: str | None = None
    status: Status = Status.SCHEDULED
    reason: Reason | None = None
    progress: float = 0.0
    message: str | None = None
    result: Any = None
    result_truncated: bool = False
    triggered_at: datetime | None = None
    last_report_at: datetime | None = None
    #: When a report last changed its progress; None while none has (``core.stall``).
    progress_at: datetime | None = None
    finished_at: datetime | None = None
    deadline: datetime | None = None
    #: A claimed execution does not start before this (its fire time plus jitter, a retry's
    #: backoff, a chained run's claim); kept once it started, as a fact of the run.
    not_before: datetime | None = None
    #: A claimed run that waits to start: what for (its pool's room, an older run under
    #: ``forbid``, the service's ``Retry-After``). It counts as active for its task's
    #: ``concurrency`` meanwhile, and waiting is not a misfire. None once it started.
    waiting_for: WaitingFor | None = None
    probe_failures: int = 0
    cancel_sent_at: datetime | None = None
    cancel_acknowledged: bool | None = None
    #: The node that holds it (its claim, its lease), or last held it.
    owner: str | None = None
    #: The epoch of ``owner``'s node lease it is held under: held while that node's lease
    #: is alive under this epoch (DESIGN.md, "Scale": one write renews everything a node
    #: holds). None while nobody holds it.
    owner_epoch: int | None = None
    #: A claim of its own, shorter than the node's lease: a fire time claimed ahead and not
    #: waiting is held only until its start plus a grace (a dead node costs its own claims
    #: under a second). None once it started or waits: then the node's lease holds it.
    lease_until: datetime | None = None
    fence: int = 0
    version: int = 0
    steps: tuple[Step, ...] = field(default=())

    @property
    def is_final(self) -> bool:
        """True once the status can never change again."""
        return self.status in FINAL

    @property
    def is_active(self) -> bool:
        """True while PENDING or RUNNING."""
        return self.status in ACTIVE

    def evolve(self, **changes: Any) -> Execution:
        """A copy with ``changes`` applied (the hot paths make one per report: this copies
        the fields directly, several times faster than ``dataclasses.replace``)."""
        unknown = changes.keys() - _EXECUTION_FIELDS
        if unknown:
            raise TypeError(f"Execution has no field {sorted(unknown)[0]!r}")
        return _copy_execution(self, changes)


_EXECUTION_FIELDS = frozenset(f.name for f in fields(Execution))


def _copier(cls: type) -> Any:
    """A function ``(instance, changes) -> copy`` for a frozen, slotted dataclass ``cls``,
    generated once: one line per field, no keyword parsing, no ``__init__``."""
    lines = ["def copy(old, changes):", "    new = new_object(cls)", "    get = changes.get"]
    lines += [f"    set_field(new, {f.name!r}, get({f.name!r}, old.{f.name}))" for f in fields(cls)]
    lines.append("    return new")
    scope: dict[str, Any] = {"new_object": object.__new__, "set_field": object.__setattr__}
    scope["cls"] = cls
    exec("\n".join(lines), scope)  # noqa: S102  (the text is made of the class's own field names)
    return scope["copy"]


_copy_execution: Callable[[Execution, dict[str, Any]], Execution] = _copier(Execution)

"""Structured logs with structlog: JSON lines (default off a terminal) or a console rendering.

Every line about an execution carries ``task``, ``execution_id``, ``attempt``, ``node``
and, for a multi-step task, ``step``, bound once with contextvars. Secrets never reach
a log line: values registered with ``hide`` (header values, signing secrets, the API
token, the callback secret, the database password, webhook URLs) are replaced wherever
they appear, and so is any field named like a secret. ``scrub`` does the same for text
that is stored (what an execution's message quotes of an answer).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from ecron.core import Execution, current_step

REDACTED = "***"
#: Fields whose value is always hidden, whatever it is.
SECRET_FIELD = re.compile(r"authorization|token|secret|signature|password|api_key", re.I)
#: Values shorter than this are not hidden inside other text (too many false matches).
MIN_SECRET = 4

_secrets: set[str] = set()


def hide(values: Iterable[str | None]) -> None:
    """Never show these values in a log line (the process keeps them for its lifetime)."""
    _secrets.update(v for v in values if v and len(v) >= MIN_SECRET)
    for value in list(_secrets):
        scheme, _, rest = value.partition(" ")
        if scheme.lower() in ("bearer", "basic", "token") and len(rest) >= MIN_SECRET:
            _secrets.add(rest)  # "Bearer X": X alone must not show either


def redact(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """The structlog processor that hides secrets (see the module docstring)."""
    return {key: _clean(key, value) for key, value in event.items()}


def scrub(text: str) -> str:
    """``text`` with every value registered with ``hide`` written ``***``: for texts that
    leave the process other than by a log line (an execution's message quoting an answer)."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _clean(key: str, value: Any) -> Any:
    if SECRET_FIELD.search(key) and value not in (None, ""):
        return REDACTED
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _clean(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(key, v) for v in value]
    return value


#: The level lines are written from (``configure``); until then every level is.
_level = logging.NOTSET


def writes(level: int) -> bool:
    """True when lines of ``level`` are written: hot paths build a line only then (asking
    a structlog proxy costs as much as building the line)."""
    return level >= _level


def configure(format: str | None, level: str, stream: TextIO | None = None) -> None:
    """Set up structlog (and the standard library's logging) to print one event per line."""
    global _level
    out = stream or sys.stderr
    use_json = format == "json" or (format is None and not out.isatty())
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        redact,
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    )
    numeric = logging.getLevelName(level.upper())
    _level = numeric
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    # Lines from libraries (aiohttp, SQLAlchemy, asyncio) go through the same processors:
    # the same format, the same redaction, with the logger's name.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(numeric, logging.WARNING))


@contextmanager
def about(execution: Execution, node: str) -> Iterator[None]:
    """Bind the execution's context to every log line inside the block."""
    step = current_step(execution)
    context: dict[str, Any] = {
        "task": execution.task,
        "execution_id": execution.eid,
        "attempt": execution.attempt,
        "node": node,
    }
    if step is not None:
        context["step"] = step.number
    with structlog.contextvars.bound_contextvars(**context):
        yield

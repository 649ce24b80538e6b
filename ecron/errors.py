"""The root of every error ecron raises on purpose.

Messages name the thing they are about (file, task, field, execution id) and,
where there is one, what to do about it.
"""

from __future__ import annotations

import errno
from typing import Any


class EcronError(Exception):
    """Base class of every error raised by ecron on purpose."""


class ConfigError(EcronError):
    """The configuration cannot be used; ``problems`` lists every reason at once."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ScheduleError(EcronError):
    """A schedule expression cannot be turned into fire times."""


class ListenError(EcronError):
    """A server cannot listen where it was told: the port is taken, or the address is not
    one of this machine's."""

    @classmethod
    def of(cls, host: str, port: int, exc: OSError) -> ListenError:
        """The error of binding ``host:port``, said in one line from the socket's ``exc``."""
        if exc.errno == errno.EADDRINUSE:
            why = "the address is already in use (another ecron, or another program?)"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "the address is not one of this machine's"
        elif exc.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges)"
        else:
            why = (exc.strerror or str(exc)).lower()
        return cls(f"cannot listen on {host}:{port}: {why}")


class StoreError(EcronError):
    """The database could not do what was asked."""


class NotFound(EcronError):
    """A task or execution that does not exist was named."""


class Conflict(EcronError):
    """The request contradicts the current state (e.g. resuming twice)."""


class NothingToResume(Conflict):
    """A resume would have no step left to run (the config dropped them meanwhile)."""


class Ambiguous(Conflict):
    """A name that fits several things, such as the start of several execution ids;
    ``candidates`` describes them (JSON), for the person to choose."""

    def __init__(self, message: str, candidates: list[dict[str, Any]]) -> None:
        self.candidates = candidates
        super().__init__(message)

"""What tests build daemons from: a task spec with short test-friendly defaults, and the
type of the ``make_daemon`` fixture (``tests/conftest.py`` serves it). Tests import these
from here, never from ``conftest.py``: pytest loads a conftest as a plugin, and importing
it as a module too runs it twice under two names."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from ecron.config.model import TaskSpec
from ecron.daemon import Daemon

#: ``make_daemon``: ``async with make_daemon(tasks, **settings) as daemon``.
DaemonFactory = Callable[..., AbstractAsyncContextManager[Daemon]]


def task(name: str, url: str, **keys: Any) -> TaskSpec:
    """A task spec with short test-friendly defaults."""
    values: dict[str, Any] = {
        "name": name,
        "schedule": "manual",
        "url": url,
        "poll_interval": "100ms",
    }
    values.update(keys)
    return TaskSpec.model_validate(values)

"""SIGTERM: every service of the process stops its running jobs, reporting them FAILED with
``interrupted: true`` (pushed, where ecron offered a callback URL), then whatever handled
SIGTERM before runs (a server's graceful stop, or the default: the process ends).

One handler for the process, set from the main thread when an adapter is made; a server
that sets its own afterwards (aiohttp's ``run_app``) replaces it, and the adapter's
shutdown hook does the same work instead."""

from __future__ import annotations

import signal
import threading
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ecron_service.service import Service

_services: weakref.WeakSet[Service] = weakref.WeakSet()
_previous: Any = None
_lock = threading.Lock()


def stop_on_sigterm(service: Service) -> None:
    """Make SIGTERM shut ``service`` down first (from the main thread only: elsewhere
    Python cannot set a handler, and the adapter's shutdown hook is what stops it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    global _previous
    with _lock:
        _services.add(service)
        current = signal.getsignal(signal.SIGTERM)
        if current is not _on_sigterm:
            _previous = current
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    for service in list(_services):
        service.shutdown()
    previous = _previous
    if callable(previous):
        previous(signum, frame)
    elif previous in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

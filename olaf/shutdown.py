"""How a long-running olaf program stops cleanly: SIGINT and SIGTERM set an event that its
main loop watches, so it leaves through its own ``finally`` (final line printed, sockets
closed) instead of dying where the signal found it."""

from __future__ import annotations

import signal
import threading


def stop_on_signals() -> threading.Event:
    """An event that SIGINT or SIGTERM sets; call from the main thread."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop

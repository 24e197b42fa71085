"""Ctrl-C that is never lost.

Python turns SIGINT into a KeyboardInterrupt at the next bytecode of the main thread.
When that bytecode belongs to a callback run from compiled code (a JAX monitoring
listener, a destructor), the exception can be swallowed there and the command runs on.
`catch` installs a handler that also records the signal; long commands call `check` at
their step boundaries, and the command line checks once more when a command returns, so
an interrupt always ends the command with its one line and exit code 130."""

from __future__ import annotations

import signal
import threading

__all__ = ["catch", "release", "check", "seen"]

_seen = threading.Event()


def _handler(signum, frame):
    _seen.set()
    raise KeyboardInterrupt


def catch():
    """Record SIGINT as well as raising KeyboardInterrupt (main thread only; elsewhere
    Python's own handling stays). → the handler it replaced (for `release`), or None."""
    _seen.clear()
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, _handler)


def release(previous) -> None:
    """Put back the SIGINT handler `catch` replaced."""
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, previous)


def seen() -> bool:
    """Whether SIGINT arrived since `catch`."""
    return _seen.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived since `catch` (it may have been
    swallowed where it was first raised)."""
    if _seen.is_set():
        raise KeyboardInterrupt

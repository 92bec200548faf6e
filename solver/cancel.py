"""Cooperative cancellation: a search stops soon after whoever waits for it gives up.

Owns: `CancelToken` (set once by the waiting side, from any thread), the token of the
current thread (`active()` installs one for the work it wraps), `check()`, which the search
loops call between steps and which raises `Cancelled` once the token is set, and
`stopping(fn)`, which calls `fn` when the token is set while the block runs: CP-SAT runs stop
through it (`solver/cpsat.py`). Must not: know who cancels or why (the service's pool does
it on a timeout or when the client has gone), or import anything heavy.

Why a token of the thread and not a parameter: CP-SAT runs sit several calls below the
entry points (plan -> candidate evaluation -> per-stage policy model -> `cpsat.solve`);
one token per thread reaches all of them without every signature on the way carrying it.
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Cancelled(Exception):  # noqa: N818 (a state, not a failure of the code)
    """The computation was cancelled: nobody waits for its result any more."""


class CancelToken:
    """A one-way flag with callbacks run when it is set (thread-safe)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        """Whether `cancel()` was called."""
        return self._event.is_set()

    def cancel(self, reason: str) -> None:
        """Set the token and run the registered callbacks (once; later calls do nothing)."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    @contextmanager
    def stopping(self, callback: Callable[[], None]) -> Iterator[None]:
        """Within the block, call `callback` when the token is set (at once if it is)."""
        with self._lock:
            already = self._event.is_set()
            if not already:
                self._callbacks.append(callback)
        if already:
            callback()
        try:
            yield
        finally:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)


_local = threading.local()


def current() -> CancelToken | None:
    """The token of this thread's computation, if one was installed."""
    token: CancelToken | None = getattr(_local, "token", None)
    return token


@contextmanager
def active(token: CancelToken) -> Iterator[CancelToken]:
    """Make `token` this thread's token for the block (the previous one is restored)."""
    previous = current()
    _local.token = token
    try:
        yield token
    finally:
        _local.token = previous


def check() -> None:
    """Raise `Cancelled` when this thread's token is set; otherwise do nothing.

    Raises:
        Cancelled: the token was set.
    """
    token = current()
    if token is not None and token.cancelled:
        raise Cancelled(token.reason or "cancelled")


@contextmanager
def stopping(callback: Callable[[], None]) -> Iterator[None]:
    """`current().stopping(callback)`, or nothing when this thread has no token."""
    token = current()
    if token is None:
        yield
        return
    with token.stopping(callback):
        yield


__all__ = ["CancelToken", "Cancelled", "active", "check", "current", "stopping"]

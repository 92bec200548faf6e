"""The bounded pool that runs searches off the event loop.

Owns: admission (at most `threads + queue` searches admitted at once; the next one is
refused with 503 overloaded and a Retry-After), in-flight de-duplication (a second request
with the same key while the first is running waits for the first one's result instead of
solving again) and the wall-clock guard (a search that outlives its limit plus a grace period
answers 503 solver-time-limit; the thread finishes in the background and its result is still
delivered to its continuation, e.g. stored).

Why threads and not processes: the long part of a search is CP-SAT, which runs in C++ and
releases the GIL, so threads overlap it; threads share the catalog caches and need no
pickling of requests and responses, and a solve's progress callback can reach the caller
directly. Python-heavy work (the cost model) does serialise under the GIL inside one process;
the service scales across cores with more server processes (`atlas-planner serve --workers
N`), which share the database. Must not: know what the submitted functions do.
"""

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from service.problems import OverloadedError, SolveTimeoutError

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SolverPool:
    """Threads for searches, with admission control and de-duplication by key."""

    def __init__(self, *, threads: int, queue: int, retry_after_s: int) -> None:
        self.threads = threads
        self.capacity = threads + queue
        self.retry_after_s = retry_after_s
        self._executor = ThreadPoolExecutor(max_workers=threads,
                                            thread_name_prefix="atlas-search")
        self._admitted = 0
        self._in_flight: dict[str, asyncio.Future[Any]] = {}

    @property
    def admitted(self) -> int:
        """Searches running or queued now."""
        return self._admitted

    def in_flight(self, key: str) -> bool:
        """Whether a search with this key is running or queued now."""
        return key in self._in_flight

    async def run(self, fn: Callable[[], T], *, key: str | None, timeout_s: float,
                  stores_result: bool = False) -> T:
        """Run `fn` on a pool thread and wait at most `timeout_s` for its result.

        Args:
            fn: the work; it runs to completion even if the caller stops waiting.
            key: de-duplication key; a call whose key is in flight joins that call.
            timeout_s: how long the caller waits before answering solver-time-limit.
            stores_result: whether `fn` stores its result (plans), so that a retry finds it;
                the timeout answer says so only then.

        Raises:
            OverloadedError: the pool and its queue are full.
            SolveTimeoutError: the result did not arrive within `timeout_s`.
        """
        future: asyncio.Future[T]
        if key is not None and key in self._in_flight:
            logger.info("joining the search already in flight for %s", key[:12])
            future = self._in_flight[key]
        else:
            future = self._admit(fn, key=key)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=timeout_s)
        except TimeoutError:
            kept = ("it keeps running and its result will be stored, so retry the same "
                    "request after Retry-After seconds, or lower solver.time_limit_s"
                    if stores_result else
                    "its result is not kept; retry later with a smaller input or a lower "
                    "time_limit_s")
            raise SolveTimeoutError(
                f"the computation did not finish within {timeout_s:.1f} s (its time limit "
                f"plus the grace period); {kept}", time_limit_s=timeout_s,
                retry_after_s=self.retry_after_s) from None

    def _admit(self, fn: Callable[[], T], *, key: str | None) -> "asyncio.Future[T]":
        if self._admitted >= self.capacity:
            raise OverloadedError(
                f"all {self.threads} solver threads are busy and {self.capacity - self.threads}"
                f" searches are queued ({self._admitted} admitted, capacity {self.capacity});"
                f" retry after {self.retry_after_s} s or raise ATLAS_SOLVER_THREADS / "
                "ATLAS_SOLVER_QUEUE on the server", retry_after_s=self.retry_after_s)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.run_in_executor(self._executor, fn)
        self._admitted += 1
        if key is not None:
            self._in_flight[key] = future

        def release(done: "asyncio.Future[T]") -> None:
            self._admitted -= 1
            if key is not None and self._in_flight.get(key) is done:
                del self._in_flight[key]
            if not done.cancelled() and done.exception() is not None:
                # Retrieve the exception so an abandoned future does not log "never retrieved".
                logger.debug("search %s failed: %r", key, done.exception())

        future.add_done_callback(release)
        return future

    def shutdown(self) -> None:
        """Stop accepting work; running searches finish, queued ones are dropped."""
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["SolverPool"]

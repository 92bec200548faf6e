"""The bounded pool that runs searches off the event loop.

Owns: admission (at most `threads + queue` searches admitted at once; the next one is
refused with 503 overloaded and a Retry-After), in-flight de-duplication (a second request
with the same key while the first is running waits for the first one's result instead of
solving again), the wall-clock guard (a search that outlives its limit plus a grace period
answers 503 solver-time-limit) and cancellation: each admitted computation runs under a
`solver.cancel.CancelToken`, set when its last waiter stops waiting (timed out, or its
request was cancelled because the client went away), so the search stops at its next check
(between candidates, and CP-SAT at once) instead of running on unseen; nothing of it is kept;
and an idle hook, run on a pool thread whenever the last admitted computation ends (the
service releases the search caches there).

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
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from service.problems import OverloadedError, SolveTimeoutError
from solver.cancel import Cancelled, CancelToken, active

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class _Job(Generic[T]):
    """One admitted computation: its result, its token and how many requests wait for it."""

    future: "asyncio.Future[T]"
    token: CancelToken
    waiters: int = 0


class SolverPool:
    """Threads for searches, with admission control, de-duplication by key and
    cancellation of computations nobody waits for."""

    def __init__(self, *, threads: int, queue: int, retry_after_s: int,
                 on_idle: Callable[[], object] | None = None) -> None:
        self.threads = threads
        self._on_idle = on_idle
        self.capacity = threads + queue
        self.retry_after_s = retry_after_s
        self._executor = ThreadPoolExecutor(max_workers=threads,
                                            thread_name_prefix="atlas-search")
        self._admitted = 0
        self._in_flight: dict[str, _Job[Any]] = {}

    @property
    def admitted(self) -> int:
        """Searches running or queued now (a cancelled one counts until its thread stops)."""
        return self._admitted

    def in_flight(self, key: str) -> bool:
        """Whether a search with this key is running or queued now, and not cancelled."""
        return key in self._in_flight

    def waiting(self, key: str) -> int:
        """Requests waiting now for the search with this key (0 when none is in flight)."""
        job = self._in_flight.get(key)
        return job.waiters if job is not None else 0

    async def run(self, fn: Callable[[], T], *, key: str | None, timeout_s: float,
                  stores_result: bool = False) -> T:
        """Run `fn` on a pool thread and wait at most `timeout_s` for its result.

        Args:
            fn: the work; it runs with a cancellation token installed for its thread
                (`solver.cancel.current()`), set when no caller waits for it any more.
            key: de-duplication key; a call whose key is in flight joins that call.
            timeout_s: how long the caller waits before answering solver-time-limit.
            stores_result: whether `fn` stores its result (plans); the timeout answer says
                so when another request still waits for the same computation.

        Raises:
            OverloadedError: the pool and its queue are full.
            SolveTimeoutError: the result did not arrive within `timeout_s`.
        """
        job: _Job[T]
        if key is not None and key in self._in_flight:
            logger.info("joining the search already in flight for %s", key[:12])
            job = self._in_flight[key]
        else:
            job = self._admit(fn, key=key)
        job.waiters += 1  # only counted down by waiters that leave before the result
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), timeout=timeout_s)
        except TimeoutError:
            left = self._leave(job, key=key, why=f"no result within {timeout_s:.1f} s")
            raise SolveTimeoutError(
                f"the computation did not finish within {timeout_s:.1f} s (its time limit "
                f"plus the grace period); {self._timeout_outcome(left, stores_result)}",
                time_limit_s=timeout_s, retry_after_s=self.retry_after_s) from None
        except asyncio.CancelledError:
            self._leave(job, key=key, why="the request was cancelled (client gone)")
            raise

    @staticmethod
    def _timeout_outcome(waiting: int, stores_result: bool) -> str:
        if waiting == 0:
            return ("it was stopped and nothing of it is kept; retry with a lower time limit "
                    "or a smaller input")
        if stores_result:
            return ("another request waits for the same search, so it keeps running and its "
                    "result will be stored: retry the same request after Retry-After seconds")
        return ("another request waits for the same computation, so it keeps running; its "
                "result is not kept")

    def _leave(self, job: "_Job[T]", *, key: str | None, why: str) -> int:
        """One waiter stops waiting; the last one cancels the job. Returns the waiters left."""
        job.waiters -= 1
        if job.waiters > 0 or job.future.done():
            return job.waiters
        if key is not None and self._in_flight.get(key) is job:
            del self._in_flight[key]  # a later identical request starts afresh
        logger.info("cancelling %s: %s", key[:12] if key else "a computation", why)
        job.token.cancel(why)
        return 0

    def _admit(self, fn: Callable[[], T], *, key: str | None) -> "_Job[T]":
        if self._admitted >= self.capacity:
            raise OverloadedError(
                f"all {self.threads} solver threads are busy and {self.capacity - self.threads}"
                f" searches are queued ({self._admitted} admitted, capacity {self.capacity});"
                f" retry after {self.retry_after_s} s or raise ATLAS_SOLVER_THREADS / "
                "ATLAS_SOLVER_QUEUE on the server", retry_after_s=self.retry_after_s)
        token = CancelToken()

        def under_token() -> T:
            if token.cancelled:  # cancelled while queued: do not start
                raise Cancelled(token.reason)
            with active(token):
                return fn()

        loop = asyncio.get_running_loop()
        # The caller's context (its request id, for the log lines the search writes).
        job = _Job(future=loop.run_in_executor(self._executor, copy_context().run,
                                               under_token), token=token)
        self._admitted += 1
        if key is not None:
            self._in_flight[key] = job

        def release(done: "asyncio.Future[T]") -> None:
            self._admitted -= 1
            if self._admitted == 0 and self._on_idle is not None:
                self._idle()
            if key is not None and self._in_flight.get(key) is job:
                del self._in_flight[key]
            if not done.cancelled() and done.exception() is not None:
                # Retrieve the exception so an abandoned future does not log "never retrieved".
                logger.debug("search %s ended: %r", key, done.exception())

        job.future.add_done_callback(release)
        return job

    def _idle(self) -> None:
        """Run `on_idle` on a pool thread (not the event loop); its failure is logged."""
        def run() -> None:
            try:
                assert self._on_idle is not None
                self._on_idle()
            except Exception:
                logger.warning("the idle hook failed", exc_info=True)

        try:
            self._executor.submit(run)
        except RuntimeError:  # shut down
            pass

    def shutdown(self) -> None:
        """Stop accepting work; running searches finish, queued ones are dropped."""
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["SolverPool"]

"""The store gate: every database call of the service goes through it, bounded in time.

Owns: the threads that talk to the database (apart from the request threads and the solver
threads, so a database that hangs can only ever hold these), admission (at most four store
calls per thread waiting at once; the next one is refused at once), the wait limits (a read
whose answer does not come within `timeout_s`, or a write within `write_timeout_s`, is
answered as `StoreUnavailableError`; the thread is left to the driver's own timeouts),
turning connection-level driver failures into `StoreUnavailableError`, re-creating the
schema when the database came back empty (the call is then retried once), and for a SQLite
file: refusing calls while the file is gone
(connecting would create an empty one) and dropping the pooled connections after a failure,
so the store recovers without a restart once the file is usable again. Must not: know what
the calls do, or build HTTP responses.
"""

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from contextvars import copy_context
from pathlib import Path
from typing import NoReturn, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from service.persistence.db import check_sqlite_file, init_db, is_missing_schema, sqlite_file
from service.problems import StoreUnavailableError

logger = logging.getLogger(__name__)

T = TypeVar("T")

QUEUE_PER_THREAD = 4
"""Store calls admitted per store thread (running or waiting) before refusing."""

_UNAVAILABLE = (OperationalError, DisconnectionError, PoolTimeoutError, OSError)
"""Failures that mean the database cannot be reached or does not answer in time (refused,
reset or terminated connections, a missing database, statement or pool timeouts)."""


class StoreGate:
    """Runs store calls on their own threads with admission and a wait limit."""

    def __init__(self, engine: Engine, *, threads: int, timeout_s: float,
                 retry_after_s: int, write_timeout_s: float | None = None) -> None:
        self.engine = engine
        self.timeout_s = timeout_s
        self.write_timeout_s = write_timeout_s if write_timeout_s is not None else timeout_s
        self.retry_after_s = retry_after_s
        self.capacity = threads * QUEUE_PER_THREAD
        self._executor = ThreadPoolExecutor(max_workers=threads,
                                            thread_name_prefix="atlas-store")
        self._lock = threading.Lock()
        self._admitted = 0
        self._schema_ready = False
        self._sqlite_file = sqlite_file(engine)
        self._file_id: tuple[int, int] | None = None

    @property
    def admitted(self) -> int:
        """Store calls running or waiting now."""
        return self._admitted

    def prepare(self) -> bool:
        """Create the schema now if the database answers (start-up); False if it does not,
        in which case the first call that reaches the database creates it."""
        try:
            self._ensure_schema(force=True)
            if self._sqlite_file is not None:
                self._check_file(self._sqlite_file)
        except _UNAVAILABLE + (DBAPIError,):
            logger.warning("plan store unreachable at start-up; the service starts degraded "
                           "and creates the schema when the database answers", exc_info=True)
            return False
        return True

    def _ensure_schema(self, *, force: bool = False) -> None:
        if force or not self._schema_ready:
            init_db(self.engine)
            self._schema_ready = True

    def _run(self, fn: Callable[[Engine], T]) -> T:
        """On a store thread: the call, after the schema if it is not known to exist. A
        SQLite file must still be at its path once created; after a connection-level
        failure on one, the pooled connections are dropped, so that the next call opens the
        file as it is then (restored, writable again, or with space again)."""
        if self._sqlite_file is not None:
            self._check_file(self._sqlite_file)
        try:
            self._ensure_schema()
            return fn(self.engine)
        except _UNAVAILABLE:
            if self._sqlite_file is not None:
                self.engine.dispose()
            raise
        except DBAPIError as error:
            if not is_missing_schema(error):
                raise
            logger.warning("the plan table is missing (the database came back empty); "
                           "creating the schema and retrying")
            self._schema_ready = False
            self._ensure_schema()
            return fn(self.engine)

    def _check_file(self, path: Path) -> None:
        """Once the file exists: refuse while it is gone, and drop the pooled connections
        when another file took its place (restored from a copy), which they do not see."""
        try:
            found = path.stat()
        except FileNotFoundError:
            if self._file_id is None:
                return  # not created yet: the schema step creates it
            self.engine.dispose()
            check_sqlite_file(path)
            raise
        identity = (found.st_dev, found.st_ino)
        if self._file_id is not None and identity != self._file_id:
            logger.warning("the SQLite file %s was replaced; reopening it", path)
            self.engine.dispose()
        self._file_id = identity

    def _submit(self, fn: Callable[[Engine], T], what: str) -> "Future[T]":
        with self._lock:
            if self._admitted >= self.capacity:
                raise self._unavailable(
                    what, f"{self._admitted} store calls are already waiting for it")
            self._admitted += 1
        future = self._executor.submit(copy_context().run, self._run, fn)  # request id too

        def release(_: "Future[T]") -> None:
            with self._lock:
                self._admitted -= 1

        future.add_done_callback(release)
        return future

    def _unavailable(self, what: str, why: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"the plan store could not {what}: {why}; retry after {self.retry_after_s} s "
            "(GET /healthz says when the database answers again)",
            retry_after_s=self.retry_after_s)

    def _no_answer(self, what: str, limit_s: float) -> StoreUnavailableError:
        """The error of a call the database did not answer within `limit_s`."""
        return self._unavailable(what, f"the database did not answer within {limit_s:g} s")

    def _raise_translated(self, error: Exception, what: str) -> NoReturn:
        """Raise `error` as `_translate` has it: itself, or the translation from it."""
        translated = self._translate(error, what)
        if translated is error:
            raise error
        raise translated from error

    def _translate(self, error: BaseException, what: str) -> BaseException:
        if isinstance(error, _UNAVAILABLE):
            logger.warning("plan store failed to %s: %s", what, error)
            return self._unavailable(what, f"the database failed ({type(error).__name__})")
        return error

    async def call(self, fn: Callable[[Engine], T], *, what: str, write: bool = False) -> T:
        """`fn(engine)` on a store thread, waited for at most `timeout_s` (a read) or
        `write_timeout_s` (a write, which must not be abandoned while the database may
        still complete it: the caller would report unstored what is stored).

        Args:
            fn: the store work; it receives the engine.
            what: the action in words for the error detail ("read the plan").
            write: whether `fn` writes.

        Raises:
            StoreUnavailableError: too many calls waiting, no answer in time, or a
                connection-level failure.
        """
        future = self._submit(fn, what)
        limit = self.write_timeout_s if write else self.timeout_s
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=limit)
        except TimeoutError:
            raise self._no_answer(what, limit) from None
        except Exception as error:
            self._raise_translated(error, what)

    def call_sync(self, fn: Callable[[Engine], T], *, what: str, write: bool = False) -> T:
        """`call` for code already on a worker thread (a search storing its result)."""
        future = self._submit(fn, what)
        limit = self.write_timeout_s if write else self.timeout_s
        try:
            return future.result(timeout=limit)
        except FutureTimeoutError:
            future.cancel()
            raise self._no_answer(what, limit) from None
        except Exception as error:
            self._raise_translated(error, what)

    def shutdown(self) -> None:
        """Stop the store threads (calls in progress are left to the driver's timeouts)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["QUEUE_PER_THREAD", "StoreGate"]

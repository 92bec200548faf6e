"""The distributed job queue: procrastinate on the service's PostgreSQL.

Owns: the procrastinate app (a psycopg pool on the store's database), its schema (applied
by `apply_queue_schema` when absent, under an advisory lock so concurrent starts do not
race), the one task (`atlas.run_job`: run a job row by id on a thread, taking over a run
whose worker died), `ProcrastinateJobQueue` (what the service defers jobs to; it opens on
the first job), and `retry_stalled` (jobs of workers whose heartbeat stopped, re-queued
through procrastinate's own stalled-job API). Must not: decide what a job computes
(`service/jobs/execute.py`).
"""

import asyncio
import logging
from typing import Any

import procrastinate
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.schema import SchemaManager
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from service.jobs.execute import JobServices, run_job

logger = logging.getLogger(__name__)

TASK_NAME = "atlas.run_job"
QUEUE_NAME = "atlas-jobs"
QUEUE_SCHEMA_LOCK_KEY = 0x61746C6171
"""Advisory-lock key held while applying procrastinate's schema ('atlaq' in ASCII)."""

OPEN_TIMEOUT_S = 5.0
"""Longest wait for the queue's first database connection."""


def conninfo(database_url: str) -> str:
    """The libpq URL of a SQLAlchemy PostgreSQL URL (driver name dropped)."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)


def apply_queue_schema(engine: Engine) -> bool:
    """Create procrastinate's tables and functions unless they exist; True when created."""
    with engine.begin() as connection:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                           {"key": QUEUE_SCHEMA_LOCK_KEY})
        if connection.execute(text("SELECT to_regclass('procrastinate_jobs')")).scalar():
            return False
        driver: Any = connection.connection.driver_connection
        driver.execute(SchemaManager.get_schema())  # no parameters: sent as written
    logger.info("procrastinate schema applied")
    return True


def make_app(database_url: str) -> procrastinate.App:
    """A procrastinate app on the store's database (not opened)."""
    connector = procrastinate.PsycopgConnector(conninfo=conninfo(database_url), min_size=1,
                                               max_size=4, timeout=OPEN_TIMEOUT_S)
    return procrastinate.App(connector=connector)


def register_task(app: procrastinate.App, services: JobServices) -> None:
    """Give the app its task: run the job on a thread (a job whose run was interrupted by
    a dead worker and re-queued is taken over)."""
    async def run_job_task(job_id: str) -> None:
        await asyncio.to_thread(run_job, job_id, services, take_running=True)

    app.task(name=TASK_NAME, queue=QUEUE_NAME)(run_job_task)


async def retry_stalled(app: procrastinate.App, *, stalled_after_s: float,
                        every_s: float) -> None:
    """Forever: re-queue the jobs whose worker has sent no heartbeat for `stalled_after_s`
    (killed, frozen or cut off), checking every `every_s`."""
    while True:
        await asyncio.sleep(every_s)
        try:
            stalled = await app.job_manager.get_stalled_jobs(
                task_name=TASK_NAME, seconds_since_heartbeat=stalled_after_s)
            for job in stalled:
                logger.warning("re-queuing job %s (queue job %s): its worker stopped",
                               job.task_kwargs.get("job_id"), job.id)
                await app.job_manager.retry_job(job)
        except Exception:
            logger.warning("stalled jobs not checked", exc_info=True)


class ProcrastinateJobQueue:
    """The service's side of the queue: defers each job for a worker to take."""

    name = "procrastinate"

    def __init__(self, database_url: str, engine: Engine) -> None:
        self._app = make_app(database_url)
        self._engine = engine
        self._open = False
        self._lock = asyncio.Lock()

    async def _ensure_open(self) -> None:
        async with self._lock:
            if not self._open:
                await asyncio.to_thread(apply_queue_schema, self._engine)
                await self._app.open_async()
                self._open = True

    async def start(self) -> None:
        """Nothing yet: the schema is checked and the pool opened on the first job, so a
        start with the database away is not delayed."""

    async def enqueue(self, job_id: str) -> None:
        """Defer the job's run to the workers (the queue's schema applied and its pool
        opened first, on the first job); a job already waiting in the queue is not added
        twice (its id is the queueing lock)."""
        await self._ensure_open()
        try:
            await self._app.configure_task(TASK_NAME, queue=QUEUE_NAME,
                                           queueing_lock=job_id).defer_async(job_id=job_id)
        except AlreadyEnqueued:
            logger.info("job %s is already waiting in the queue", job_id)

    async def stop(self) -> None:
        """Close the pool."""
        if self._open:
            await self._app.close_async()
            self._open = False


__all__ = ["QUEUE_NAME", "TASK_NAME", "ProcrastinateJobQueue", "apply_queue_schema",
           "conninfo", "make_app", "register_task", "retry_stalled"]

"""Which job queue the service uses, started and stopped with it.

Owns: `start_job_queue` (from `ATLAS_JOB_QUEUE`: procrastinate on PostgreSQL, whose
schema is applied on the first job, else the in-process runner) and `stop_job_queue`.
Must not: run jobs itself.
"""

import logging
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from service.jobs.execute import JobServices
from service.jobs.local import LocalJobQueue
from service.persistence.gate import StoreGate
from service.planning import Planner
from service.settings import Settings

logger = logging.getLogger(__name__)


class RunningQueue(Protocol):
    """A job queue the service started."""

    name: str

    async def enqueue(self, job_id: str) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def is_postgres(database_url: str) -> bool:
    """Whether the URL names a PostgreSQL database."""
    return make_url(database_url).get_backend_name() == "postgresql"


async def start_job_queue(settings: Settings, *, engine: Engine, store: StoreGate,
                          planner: Planner) -> RunningQueue:
    """The configured queue, started.

    Raises:
        ValueError: `ATLAS_JOB_QUEUE=procrastinate` without a PostgreSQL store.
    """
    url = settings.resolved_database_url()
    choice = settings.job_queue
    if choice == "auto":
        choice = "procrastinate" if is_postgres(url) else "inprocess"
    queue: RunningQueue
    if choice == "procrastinate":
        if not is_postgres(url):
            raise ValueError("ATLAS_JOB_QUEUE=procrastinate needs a PostgreSQL DATABASE_URL")
        from service.jobs.queue import ProcrastinateJobQueue  # procrastinate, when used

        queue = ProcrastinateJobQueue(url, engine)
    else:
        services = JobServices(engine=engine, store=store, settings=settings, planner=planner)
        queue = LocalJobQueue(services, threads=settings.solver_threads)
    await queue.start()
    logger.info("jobs go to the %s queue", queue.name)
    return queue


async def stop_job_queue(queue: RunningQueue) -> None:
    """Stop the queue (jobs left queued stay in the store)."""
    await queue.stop()


__all__ = ["RunningQueue", "is_postgres", "start_job_queue", "stop_job_queue"]

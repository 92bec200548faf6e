"""The `atlas-planner worker` process: takes jobs from the procrastinate queue and runs them.

Owns: building what a run needs (engine, plan store gate, planner) from the settings,
creating the store's tables and the queue's schema when absent, and running procrastinate's
worker beside the stalled-job check (`service/jobs/queue.py: retry_stalled`) until SIGINT or
SIGTERM (procrastinate's handlers: the jobs in progress finish first). Must not: serve HTTP.
"""

import asyncio
import logging
import os
import socket
from dataclasses import dataclass

import procrastinate

from service.jobs.execute import JobServices
from service.jobs.queue import (
    QUEUE_NAME,
    apply_queue_schema,
    make_app,
    register_task,
    retry_stalled,
)
from service.jobs.runtime import is_postgres
from service.persistence.db import StoreTimeouts, make_engine
from service.persistence.gate import StoreGate
from service.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How one worker process runs."""

    concurrency: int
    """Jobs run at once (threads)."""
    heartbeat_s: float = 10.0
    """How often the worker tells the queue it is alive."""
    stalled_after_s: float = 30.0
    """A worker silent this long is dead: its jobs are re-queued."""


def run_worker(settings: Settings, options: WorkerOptions) -> None:
    """Run the worker until it is told to stop.

    Raises:
        ValueError: the configured database is not PostgreSQL (the embedded SQLite store
            runs jobs inside `atlas-planner serve`).
    """
    url = settings.resolved_database_url()
    if not is_postgres(url):
        raise ValueError("workers take jobs from the PostgreSQL queue: set DATABASE_URL (or "
                         "--database-url) to the service's PostgreSQL; with the embedded "
                         "SQLite store, `atlas-planner serve` runs jobs itself")
    from service import solver_calls

    engine = make_engine(url, StoreTimeouts(connect_s=settings.store_connect_timeout_s,
                                            statement_s=settings.store_statement_timeout_s,
                                            pool_s=settings.store_pool_timeout_s))
    gate = StoreGate(engine, threads=settings.store_threads,
                     timeout_s=max(settings.store_timeout_s, 30.0),
                     retry_after_s=settings.retry_after_s)
    if not gate.prepare():
        raise ConnectionError("the database does not answer; the worker cannot start")
    apply_queue_schema(engine)
    solver_calls.preload()
    services = JobServices(engine=engine, store=gate, settings=settings,
                           planner=solver_calls.plan)
    app = make_app(url)
    register_task(app, services)
    try:
        asyncio.run(_work(app, options))
    finally:
        gate.shutdown()
        engine.dispose()


async def _work(app: procrastinate.App, options: WorkerOptions) -> None:
    async with app.open_async():
        checker = asyncio.create_task(retry_stalled(
            app, stalled_after_s=options.stalled_after_s,
            every_s=max(0.5, options.heartbeat_s)))
        name = f"{socket.gethostname()}:{os.getpid()}"
        logger.info("worker %s taking jobs from queue %s (%d at once)", name, QUEUE_NAME,
                    options.concurrency)
        try:
            await app.run_worker_async(
                queues=[QUEUE_NAME], name=name, concurrency=options.concurrency,
                update_heartbeat_interval=options.heartbeat_s,
                stalled_worker_timeout=options.stalled_after_s,
                delete_jobs="successful")  # the job row keeps the outcome
        finally:
            checker.cancel()


__all__ = ["WorkerOptions", "run_worker"]

"""The embedded job runner: jobs run on threads of the service process, with no broker.

Owns: `LocalJobQueue`, the default where the store is SQLite (or `ATLAS_JOB_QUEUE=inprocess`):
a queued job is handed to one of `solver_threads` threads at once, and the jobs still
queued when the process starts (submitted before a restart, or stopped by a shutdown) are
handed over at start-up, with the jobs an earlier server left marked running (killed with
kill -9 or by the kernel, so its runs never stopped): every job whose run started before
this `serve` command did (`SERVE_STARTED_ENV`, set by `atlas-planner serve` for all its
worker processes; else this queue's creation) is queued again first.
Cancellation, progress and outcomes go through the job rows as with the distributed queue
(`service/jobs/execute.py`). Must not: run jobs of another process's queue (a job is claimed
from `queued` only, so two server processes never both run one).
"""

import asyncio
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from service.jobs import store
from service.jobs.execute import JobServices, run_job

logger = logging.getLogger(__name__)

SERVE_STARTED_ENV = "ATLAS_SERVE_STARTED_AT"
"""When the `serve` command started, in seconds since the epoch; its worker processes
inherit it, so a worker that uvicorn starts again later does not take its siblings' runs
for an earlier server's."""


def serve_started_at() -> datetime:
    """The start of this `serve` command (or now, for an app built without it)."""
    given = os.environ.get(SERVE_STARTED_ENV)
    try:
        return datetime.fromtimestamp(float(given), UTC) if given else datetime.now(UTC)
    except ValueError:
        return datetime.now(UTC)


class LocalJobQueue:
    """Threads of this process that run jobs as they are submitted."""

    name = "in-process"

    def __init__(self, services: JobServices, *, threads: int) -> None:
        self._services = services
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="atlas-job")
        self._stopping = threading.Event()
        self._started_at = serve_started_at()

    def _run(self, job_id: str) -> None:
        try:
            run_job(job_id, self._services, take_running=False, stopping=self._stopping)
        except Exception:
            logger.exception("job %s: the run could not be recorded", job_id)

    async def enqueue(self, job_id: str) -> None:
        """Run the job on the next free thread."""
        self._executor.submit(self._run, job_id)

    async def start(self) -> None:
        """Queue again the jobs an earlier server left running, then hand over the queued
        ones (none when the store does not answer: they wait for the next start)."""
        try:
            orphans = await asyncio.to_thread(store.requeue_orphans, self._services.engine,
                                              started_before=self._started_at)
            if orphans:
                logger.warning("%d jobs left running by an earlier server queued again",
                               len(orphans))
            left = await asyncio.to_thread(store.queued_ids, self._services.engine)
        except Exception:
            logger.warning("queued jobs not read at start-up", exc_info=True)
            return
        for job_id in left:
            await self.enqueue(job_id)
        if left:
            logger.info("%d queued jobs handed to the in-process runner", len(left))

    async def stop(self) -> None:
        """Take no more jobs: queued ones stay queued in the store, running ones stop within
        about a second and are queued again, for the next start."""
        self._stopping.set()
        self._executor.shutdown(wait=False, cancel_futures=True)


__all__ = ["LocalJobQueue"]

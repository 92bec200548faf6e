"""The embedded job runner: jobs run on threads of the service process, with no broker.

Owns: `LocalJobQueue`, the default where the store is SQLite (or `ATLAS_JOB_QUEUE=inprocess`):
a queued job is handed to one of `solver_threads` threads at once, and the jobs still
queued when the process starts (submitted before a restart, or stopped by a shutdown) are
handed over at start-up.
Cancellation, progress and outcomes go through the job rows as with the distributed queue
(`service/jobs/execute.py`). Must not: run jobs of another process's queue (a job is claimed
from `queued` only, so two server processes never both run one).
"""

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from service.jobs import store
from service.jobs.execute import JobServices, run_job

logger = logging.getLogger(__name__)


class LocalJobQueue:
    """Threads of this process that run jobs as they are submitted."""

    name = "in-process"

    def __init__(self, services: JobServices, *, threads: int) -> None:
        self._services = services
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="atlas-job")
        self._stopping = threading.Event()

    def _run(self, job_id: str) -> None:
        try:
            run_job(job_id, self._services, take_running=False, stopping=self._stopping)
        except Exception:
            logger.exception("job %s: the run could not be recorded", job_id)

    async def enqueue(self, job_id: str) -> None:
        """Run the job on the next free thread."""
        self._executor.submit(self._run, job_id)

    async def start(self) -> None:
        """Hand over the jobs left queued by an earlier process (none when the store does
        not answer: they wait for the next start)."""
        try:
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

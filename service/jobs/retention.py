"""Deleting finished jobs past their retention, in the background of each server process.

Owns: `prune_logged` (awaited at start-up, before serving) and `prune_loop` (then every
`prune_interval_s(...)`: a tenth of the retention, between a minute and an hour): the jobs
that finished more than ATLAS_JOB_RETENTION_S ago are deleted with their events
(`store.prune_finished`), through the store gate as a write, so a store that does not answer
delays the pruning and never a request. Several server processes pruning at once is
harmless: each deletes what is still there. Must not: delete plans, or jobs that have not
finished.
"""

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from functools import partial

from service.jobs import store
from service.persistence.gate import StoreGate
from service.problems import StoreUnavailableError
from service.settings import Settings

logger = logging.getLogger(__name__)


def prune_interval_s(retention_s: float) -> float:
    """Seconds between two prunings: a tenth of the retention, within [60, 3600]."""
    return min(3600.0, max(60.0, retention_s / 10))


async def prune_once(settings: Settings, gate: StoreGate) -> int:
    """Delete the jobs finished before now minus the retention; how many were deleted."""
    cutoff = datetime.now(UTC) - timedelta(seconds=settings.job_retention_s)
    removed: int = await gate.call(partial(store.prune_finished, finished_before=cutoff),
                                   what="delete finished jobs past their retention",
                                   write=True)
    if removed:
        logger.info("%d finished jobs older than %g s deleted", removed,
                    settings.job_retention_s)
    return removed


async def prune_logged(settings: Settings, gate: StoreGate) -> None:
    """`prune_once`, a failure logged rather than raised; nothing when the retention is 0
    (keep forever). The server awaits it once at start-up, before it serves, so that no
    pruning is still holding a store connection when a short-lived server shuts down."""
    if settings.job_retention_s <= 0:
        return
    try:
        await prune_once(settings, gate)
    except StoreUnavailableError as error:
        logger.warning("finished jobs not pruned: %s", error)
    except Exception:
        logger.exception("finished jobs not pruned")


async def prune_loop(settings: Settings, gate: StoreGate) -> None:
    """Prune every `prune_interval_s` after the start-up pruning, until cancelled; nothing
    when the retention is 0 (keep forever)."""
    if settings.job_retention_s <= 0:
        return
    while True:
        await asyncio.sleep(prune_interval_s(settings.job_retention_s))
        await prune_logged(settings, gate)


__all__ = ["prune_interval_s", "prune_logged", "prune_loop", "prune_once"]

"""`atlas-planner worker`: a process that runs queued jobs (see `service/jobs/worker.py`).

Owns: turning the command's flags into the environment the settings read and the worker's
options, and logging to stderr. Must not: import the solver or procrastinate before the
command runs.
"""

import argparse
import logging
import os


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker until SIGINT or SIGTERM; 1 when it cannot start."""
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from service.jobs.worker import WorkerOptions, run_worker
    from service.settings import get_settings

    settings = get_settings()
    options = WorkerOptions(concurrency=args.concurrency or settings.solver_threads,
                            heartbeat_s=args.heartbeat, stalled_after_s=args.stalled_after)
    try:
        run_worker(settings, options)
    except (ValueError, ConnectionError) as error:
        logging.getLogger("service").error("worker not started: %s", error)
        return 1
    return 0

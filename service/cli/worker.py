"""`atlas-planner worker`: a process that runs queued jobs (see `service/jobs/worker.py`).

Owns: turning the command's flags into the settings (the environment's, with the flag's
database URL) and the worker's options, and logging to stderr. Must not: import the solver
or procrastinate before the command runs.
"""

import argparse
import logging


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker until SIGINT or SIGTERM; 1 when it cannot start."""
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from service.jobs.worker import WorkerOptions, run_worker
    from service.settings import Settings, get_settings

    settings = (Settings(database_url=args.database_url) if args.database_url
                else get_settings())
    options = WorkerOptions(concurrency=args.concurrency or settings.solver_threads,
                            heartbeat_s=args.heartbeat, stalled_after_s=args.stalled_after)
    try:
        run_worker(settings, options)
    except (ValueError, ConnectionError) as error:
        logging.getLogger("service").error("worker not started: %s", error)
        return 1
    return 0

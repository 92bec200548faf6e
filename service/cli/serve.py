"""`atlas-planner serve`: the HTTP service under uvicorn.

Owns: the uvicorn options taken from the settings (keep-alive, request-head and worker
health-check timeouts, the largest head), the JSON log configuration, the folder where
several workers' metrics meet (`metrics_folder`), and starting uvicorn with the app
factory, so each worker builds its app. Must not: import the app or prometheus_client
(workers do, after the folder is set in their environment).
"""

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

SERVE_STARTED_ENV = "ATLAS_SERVE_STARTED_AT"
"""When this command started (`service.jobs.local` reads it; not imported from there, as
this module must not import the app's modules before uvicorn starts the workers)."""

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess folder variable (`service/metrics.py`)."""


def metrics_folder(workers: int) -> str | None:
    """Where the workers' metrics meet, set in the environment they inherit: the folder
    already named there, emptied of an earlier run's series (prometheus_client's rule), or
    with several workers a fresh temporary one; None with one worker and none named."""
    named = os.environ.get(METRICS_DIR_ENV)
    if named:
        folder = Path(named)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):
            stale.unlink()
        return named
    if workers <= 1:
        return None
    fresh = tempfile.mkdtemp(prefix="atlas-metrics-")
    os.environ[METRICS_DIR_ENV] = fresh
    return fresh


def server_timeouts() -> dict[str, Any]:
    """uvicorn's keep-alive, request-head and worker health-check timeouts from the
    settings."""
    from service.server import protocol_factory
    from service.settings import get_settings

    settings = get_settings()
    return {"http": protocol_factory(settings.header_read_timeout_s),
            "timeout_keep_alive": settings.keep_alive_timeout_s,
            "timeout_worker_healthcheck": settings.worker_start_timeout_s,
            "h11_max_incomplete_event_size": settings.max_header_bytes}


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP service under uvicorn (the app is built per worker by the factory)."""
    import uvicorn

    from service.logging_json import uvicorn_log_config

    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    if args.sqlite_path:
        os.environ["ATLAS_SQLITE_PATH"] = args.sqlite_path
    os.environ["ATLAS_LOG_LEVEL"] = args.log_level.upper()
    os.environ[SERVE_STARTED_ENV] = repr(time.time())  # the embedded job runner's epoch
    named = os.environ.get(METRICS_DIR_ENV)
    folder = metrics_folder(args.workers)
    try:
        uvicorn.run("service.app:create_app", factory=True, host=args.host, port=args.port,
                    workers=args.workers, log_level=args.log_level, proxy_headers=True,
                    log_config=uvicorn_log_config(args.log_level),
                    **server_timeouts())
    finally:
        if folder is not None and not named:  # the temporary folder made for this run
            shutil.rmtree(folder, ignore_errors=True)
    return 0

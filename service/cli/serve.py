"""`atlas-planner serve`: the HTTP service under uvicorn.

Owns: the uvicorn options taken from the settings (keep-alive, request-head and worker
health-check timeouts, the largest head) and starting uvicorn with the app factory, so each
worker builds its app. Must not: import the app (workers do).
"""

import argparse
import os
from typing import Any


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
    uvicorn.run("service.app:create_app", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level=args.log_level, proxy_headers=True,
                log_config=uvicorn_log_config(args.log_level),
                **server_timeouts())
    return 0

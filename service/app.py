"""The FastAPI application factory.

Owns: `create_app(settings)`: the routers, the lab page (`GET /` redirects to it), the
problem+json handlers, the request-id, body-size, body-read-timeout and CORS middleware, the
OpenAPI document and its offline Swagger UI and ReDoc pages, logging set-up, and the
lifespan that opens the database behind the store gate (creating the schema when it answers;
the service starts degraded when it does not), starts the solver pool and the solver's
import (`service/solver_calls.py`) and closes them at shutdown. It also installs what the
observability modules own (security headers, metrics, JSON logs). Must not: do anything at
import: `service.app:app` is built on first access, and building it does no I/O (the
lifespan does); nor import the solver.
"""

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi_offline import FastAPIOffline
from sqlalchemy import Engine

from service import search_caches, solver_calls
from service.deps import ServiceContext
from service.header_limit import HeaderLimitMiddleware
from service.jobs.retention import prune_logged, prune_loop
from service.jobs.runtime import start_job_queue, stop_job_queue
from service.large_bodies import LargeBodyGate
from service.logging_json import install_json_logging
from service.metrics import install_metrics
from service.middleware import RequestContextMiddleware, install_cors
from service.openapi import install_openapi, operation_id
from service.persistence.db import StoreTimeouts, make_engine
from service.persistence.gate import StoreGate
from service.planning import Planner
from service.pool import SolverPool
from service.problems import install_problem_handlers
from service.routes import (
    calibration,
    catalog,
    collectives,
    estimates,
    health,
    jobs,
    lab,
    mesh,
    moe,
    moe_buffers,
    pictures,
    pipeline,
    plans,
    reference,
    remote_activations,
    rl_seesaw,
    run_level,
)
from service.routes.health import SERVICE_VERSION
from service.security_headers import install_security_headers
from service.settings import Settings, get_settings

logger = logging.getLogger(__name__)

DESCRIPTION = """\
Plans parallel LLM training: give a model, a GPU cluster and a training recipe; get the best
TP / PP / DP / CP / EP mesh, pipeline schedule, micro-batch, ZeRO stage and activation policy
the cost model can prove, with the numbers behind it.

Units: bytes (integers), seconds, FLOP, bytes/s, FLOP/s. Every figure is a deterministic
model, not a measurement. Errors are RFC 9457 `application/problem+json` with a stable
`code` (see `GET /problems/{code}`).
"""

TAGS = [
    {"name": "plans", "description": "Search for a plan, store it, read it back."},
    {"name": "jobs", "description": "Searches as jobs: submit, watch progress, cancel."},
    {"name": "estimates", "description": "Score one given configuration."},
    {"name": "pipeline", "description": "Pipeline schedules: simulate and optimise."},
    {"name": "moe", "description": "MoE expert placement."},
    {"name": "lab", "description": "What-if labs: memory by phase of colocated RL, remote "
                                   "activation offload across pipeline ranks."},
    {"name": "catalog", "description": "GPU, node and model presets; config ingestion."},
    {"name": "health", "description": "Liveness and problem-code documentation."},
]


def create_app(settings: Settings | None = None, *, planner: Planner | None = None) -> FastAPI:
    """Build the app (cheap: no I/O until the lifespan starts).

    Args:
        settings: configuration; default `get_settings()` (the environment).
        planner: the plan function; default the library's `solver.plan` (imported by the
            lifespan in a thread of its own, so the app answers meanwhile).
    """
    config = settings if settings is not None else get_settings()
    plan_fn: Planner = planner if planner is not None else solver_calls.plan
    install_json_logging(config.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine, store = _open_store(config)
        pool = SolverPool(threads=config.solver_threads, queue=config.solver_queue,
                          retry_after_s=config.retry_after_s, on_idle=search_caches.release)
        threading.Thread(target=solver_calls.preload, name="atlas-solver-import",
                         daemon=True).start()
        app.state.context = ServiceContext(settings=config, engine=engine, store=store,
                                           pool=pool, planner=plan_fn)
        app.state.job_queue = await start_job_queue(config, engine=engine, store=store,
                                                    planner=plan_fn)
        await prune_logged(config, store)
        pruning = asyncio.create_task(prune_loop(config, store), name="atlas-job-retention")
        logger.info("atlas-planner %s ready (%d solver threads, queue %d)", SERVICE_VERSION,
                    config.solver_threads, config.solver_queue)
        try:
            yield
        finally:
            pruning.cancel()
            await stop_job_queue(app.state.job_queue)
            pool.shutdown()
            store.shutdown()
            engine.dispose()

    # Swagger UI and ReDoc from the files fastapi-offline ships: /docs needs no network.
    app = FastAPIOffline(title="atlas-planner", version=SERVICE_VERSION,
                         description=DESCRIPTION, openapi_tags=TAGS, lifespan=lifespan,
                         redoc_url=None, generate_unique_id_function=operation_id)
    reference.install_redoc(app)
    _install_middleware(app, config)
    for routes in (plans, jobs, pictures, estimates, run_level, collectives, mesh, pipeline,
                   moe, moe_buffers, rl_seesaw, remote_activations, calibration, catalog,
                   health):
        app.include_router(routes.router)
    lab.install_lab(app)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        """The service's front page is the lab (`GET /lab`)."""
        return RedirectResponse("/lab", status_code=307)

    install_openapi(app)
    return app


def _install_middleware(app: FastAPI, config: Settings) -> None:
    """The problem handlers and the middleware every request passes, in their order."""
    install_problem_handlers(app)
    app.add_middleware(RequestContextMiddleware, max_body_bytes=config.max_body_bytes,
                       body_read_timeout_s=config.body_read_timeout_s)
    install_cors(app, config.cors_origin_list())
    app.add_middleware(HeaderLimitMiddleware, max_header_bytes=config.max_header_bytes)
    app.add_middleware(LargeBodyGate, threshold_bytes=config.large_body_bytes,
                       slots=config.large_body_slots, retry_after_s=config.retry_after_s)
    install_metrics(app)
    install_security_headers(app)


def _open_store(config: Settings) -> tuple[Engine, StoreGate]:
    """The store's engine and the gate every request reaches it through, its schema
    prepared."""
    engine = make_engine(config.resolved_database_url(), StoreTimeouts(
        connect_s=config.store_connect_timeout_s,
        statement_s=config.store_statement_timeout_s,
        pool_s=config.store_pool_timeout_s))
    store = StoreGate(engine, threads=config.store_threads,
                      timeout_s=config.read_timeout_s(),
                      write_timeout_s=config.write_timeout_s(),
                      retry_after_s=config.retry_after_s)
    store.prepare()
    return engine, store


@cache
def _default_app() -> FastAPI:
    return create_app()


def __getattr__(name: str) -> FastAPI:
    """`service.app:app`: the app of the environment's settings, built on first access."""
    if name == "app":
        return _default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app"]

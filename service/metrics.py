"""Prometheus metrics: GET /metrics in the text exposition format, by prometheus_client.

Owns: one registry per app (`install_metrics(app)`), the middleware that counts every
answer by method, route template and status and times it, the problem codes answered
(read from the `code` member of problem+json bodies), the answers the store failed (a 503
`store-unavailable`, or a plan answered unstored with `X-Plan-Stored: false`), and the
solver pool's and store gate's occupancy (searches running, queued, capacity; store calls
admitted), and the jobs in each state (read from the store when scraped: jobs are shared by
every replica and worker, so each scrape reports the same totals). In one process the
occupancy is read when scraped. Under `serve --workers N` (prometheus_client's
multiprocess mode, on when `PROMETHEUS_MULTIPROC_DIR` is set: `service/cli/serve.py` sets
it) each worker writes its series to files there, any worker's scrape sums them all, and
the occupancy gauges are each worker's value at its last request or scrape, summed over
the live workers. Must not: change answers, or label by raw path (an unrouted path is
labelled `unrouted`, so random URLs cannot grow the series without bound).
"""

import json
import os
import time
from collections.abc import Iterator

from fastapi import FastAPI, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector
from starlette.datastructures import Headers
from starlette.routing import Mount

from service.middleware import ASGIApp, Message, Receive, Scope, Send
from service.problems import PROBLEM_MEDIA_TYPE

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                     60.0, 120.0)
"""Histogram bounds in seconds: lookups take milliseconds, searches up to the 60 s limit."""

MAX_PROBLEM_BYTES = 65_536
"""Largest problem body read for its code (problems are a few hundred bytes)."""

CLIENT_GONE = 499
"""The status label of a request whose client disconnected before any answer (nginx's
code; the handling was cancelled, nothing was sent)."""

UNROUTED = "unrouted"
"""The route label of a request no route matched (404s, refusals before routing)."""


MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's variable: the folder the worker processes write their series to."""

OCCUPANCY = {
    "atlas_solver_searches_running": "Searches on a solver thread now.",
    "atlas_solver_searches_queued": "Admitted searches waiting for a solver thread.",
    "atlas_solver_capacity": "Searches admitted at most (threads + queue); the next is "
                             "refused 503 overloaded.",
    "atlas_store_calls_admitted": "Store calls running or waiting now.",
    "atlas_store_capacity": "Store calls admitted at most.",
}
"""The occupancy gauges and their help texts."""


def occupancy(app: FastAPI) -> dict[str, float] | None:
    """The `OCCUPANCY` values of the app's pool and store now; None before its lifespan
    started them."""
    context = getattr(app.state, "context", None)
    if context is None:
        return None
    pool, store = context.pool, context.store
    admitted = pool.admitted
    running = min(admitted, pool.threads)
    return {"atlas_solver_searches_running": running,
            "atlas_solver_searches_queued": admitted - running,
            "atlas_solver_capacity": pool.capacity,
            "atlas_store_calls_admitted": store.admitted,
            "atlas_store_capacity": store.capacity}


class _OccupancyCollector(Collector):
    """The occupancy, read when scraped (one process)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = occupancy(self.app)
        for name, value in (values or {}).items():
            yield GaugeMetricFamily(name, OCCUPANCY[name], value=value)


JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
"""The states `atlas_jobs` reports (0 where no job is in one)."""


class _JobsCollector(Collector):
    """Jobs by state, counted in the store when scraped; nothing when the store does not
    answer (its failure is counted by the requests that meet it)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        context = getattr(self.app.state, "context", None)
        if context is None:
            return
        from service.jobs.store import counts_by_state

        try:
            counts = context.store.call_sync(counts_by_state, what="count the jobs")
        except Exception:  # noqa: BLE001 - a scrape must not fail on the store
            return
        family = GaugeMetricFamily("atlas_jobs", "Jobs in each state now (all replicas).",
                                   labels=["state"])
        for state in JOB_STATES:
            family.add_metric([state], counts.get(state, 0))
        yield family


class ServiceMetrics:
    """The app's registry and the series its middleware and occupancy feed."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.multiprocess = bool(os.environ.get(MULTIPROCESS_DIR_ENV))
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("atlas_http_requests", "HTTP answers by method, route "
                                "template and status.", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("atlas_http_request_duration_seconds", "Seconds from the "
                                 "request's arrival to the end of its answer, by method and "
                                 "route template.", ["method", "route"],
                                 buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.problems = Counter("atlas_problems", "Problem answers by problem code.",
                                ["code"], registry=self.registry)
        self.store_failures = Counter("atlas_store_failures", "Answers the plan store failed: "
                                      "'unavailable' (503 store-unavailable) or 'plan_not_"
                                      "stored' (a plan answered with X-Plan-Stored: false).",
                                      ["outcome"], registry=self.registry)
        self._gauges: dict[str, Gauge] = {}
        if self.multiprocess:
            self._gauges = {name: Gauge(name, text, multiprocess_mode="livesum",
                                        registry=self.registry)
                            for name, text in OCCUPANCY.items()}
        else:
            self.registry.register(_OccupancyCollector(app))
            self.registry.register(_JobsCollector(app))

    def note_occupancy(self) -> None:
        """Write this worker's occupancy to its gauges (multiprocess mode only: in one
        process the collector reads it when scraped)."""
        values = occupancy(self.app) if self.multiprocess else None
        for name, value in (values or {}).items():
            self._gauges[name].set(value)

    def exposition(self) -> bytes:
        """The text of GET /metrics: this process's registry, or every worker's series."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        self.note_occupancy()
        merged = CollectorRegistry()
        MultiProcessCollector(merged)
        merged.register(_JobsCollector(self.app))
        return generate_latest(merged)

    def process_ended(self) -> None:
        """Drop this worker's occupancy from the sums (multiprocess mode)."""
        if self.multiprocess:
            mark_process_dead(os.getpid())


def route_label(scope: Scope, root_path: str = "") -> str:
    """The template of the route that handled `scope` (`/v1/plans/{plan_id}`), a mount's
    path with `/{path}` for its files (a mount extends the scope's `root_path`, which was
    `root_path` on arrival), or `UNROUTED`."""
    route = scope.get("route")
    if isinstance(route, Mount):
        return f"{route.path}/{{path}}"
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    mounted = str(scope.get("root_path", ""))
    if len(mounted) > len(root_path) and mounted.startswith(root_path):
        return f"{mounted[len(root_path):]}/{{path}}"
    return UNROUTED


def _problem_code(body: bytes) -> str | None:
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) else None


class MetricsMiddleware:
    """Counts and times every HTTP answer."""

    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._watch_lifespan(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.metrics.note_occupancy()
        start = time.perf_counter()
        root_path = str(scope.get("root_path", ""))
        status = CLIENT_GONE  # until an answer starts: the client left before one
        problem: bytearray | None = None

        async def observe(message: Message) -> None:
            nonlocal status, problem
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = Headers(raw=message.get("headers", []))
                if headers.get("content-type", "").startswith(PROBLEM_MEDIA_TYPE):
                    problem = bytearray()
                if headers.get("x-plan-stored") == "false":
                    self.metrics.store_failures.labels(outcome="plan_not_stored").inc()
            elif message["type"] == "http.response.body" and problem is not None \
                    and len(problem) <= MAX_PROBLEM_BYTES:
                problem.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, observe)
        except BaseException:
            if status == CLIENT_GONE:
                status = 500  # the server error middleware answers it
            raise
        finally:
            self._record(scope, route_label(scope, root_path), status, problem,
                         time.perf_counter() - start)
            self.metrics.note_occupancy()

    def _watch_lifespan(self, send: Send) -> Send:
        """`send`, noting the occupancy once the app has started (its capacity counts from
        then on) and dropping it once the app has stopped."""

        async def watched(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                self.metrics.note_occupancy()
            elif message["type"] == "lifespan.shutdown.complete":
                self.metrics.process_ended()

        return watched

    def _record(self, scope: Scope, route: str, status: int, problem: bytearray | None,
                seconds: float) -> None:
        method = str(scope.get("method", ""))
        self.metrics.requests.labels(method=method, route=route, status=str(status)).inc()
        self.metrics.latency.labels(method=method, route=route).observe(seconds)
        code = _problem_code(bytes(problem)) if problem is not None else None
        if code is not None:
            self.metrics.problems.labels(code=code).inc()
            if code == "store-unavailable":
                self.metrics.store_failures.labels(outcome="unavailable").inc()


def install_metrics(app: FastAPI) -> ServiceMetrics:
    """Add the middleware (call it after the request-id middleware, so refusals made there
    are counted) and GET /metrics (left out of the OpenAPI document: it is for Prometheus,
    not for API clients)."""
    metrics = ServiceMetrics(app)
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.get("/metrics", include_in_schema=False)
    def metrics_page() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return metrics


__all__ = ["CLIENT_GONE", "LATENCY_BUCKETS_S", "MULTIPROCESS_DIR_ENV", "OCCUPANCY", "UNROUTED",
           "MetricsMiddleware", "ServiceMetrics", "install_metrics", "occupancy", "route_label"]

"""Shared helpers of the service tests: an in-process HTTP client and a scripted planner.

The client drives the ASGI app through httpx's ASGI transport on a blocking portal (a
private event loop thread), with the app's lifespan entered, so tests are synchronous and
may send requests from several threads at once.
"""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI
from pydantic import BaseModel
from serving import serve_in_thread

from api_schemas.parallel import ParallelConfig
from api_schemas.plan import Explanation, PlanResponse, PlanStatus, SolverStats
from api_schemas.requests import PlanRequest
from models.errors import InfeasibleError
from service.settings import Settings

LOADED_HOST_STORE_TIMEOUT_S = 30.0
"""Store wait of the test apps whose subject is not the store's timeout: the service's 1 s
default answers 503 store-unavailable when a loaded CI host delays a SQLite call by a
second. Tests of the store timeout set their own (tests/faults)."""
LOADED_HOST_GRACE_S = 60.0
"""Wall-clock grace of the test apps whose subject is not the solver's time limit: the
service's 10 s default answers 503 solver-time-limit when a loaded host stretches a search's
wrap-up (scoring, exports, storing) past it. Tests of the limit set it to 0."""
LOADED_HOST_COMPUTE_TIMEOUT_S = 300.0
"""Wait for a pipeline simulation's pool thread (the service's default is 30 s)."""


def load_tolerant_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings on `database_url` whose outcome does not depend on the host's speed: store
    wait, time-limit grace and simulation wait generous (`overrides` replace them where a
    test is about them)."""
    values: dict[str, Any] = {"store_timeout_s": LOADED_HOST_STORE_TIMEOUT_S,
                              "time_limit_grace_s": LOADED_HOST_GRACE_S,
                              "compute_timeout_s": LOADED_HOST_COMPUTE_TIMEOUT_S, **overrides}
    return Settings(database_url=database_url, **values)


class PortalTransport(httpx.BaseTransport):
    """A synchronous httpx transport that runs requests on the portal's event loop."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self._inner = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._portal = portal

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()

        async def send() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            inner = httpx.Request(request.method, request.url, headers=request.headers,
                                  content=body)
            response = await self._inner.handle_async_request(inner)
            content = b"".join([chunk async for chunk in response.stream])  # type: ignore[union-attr]
            return response.status_code, response.headers.raw, content

        status, headers, content = self._portal.call(send)
        return httpx.Response(status, headers=headers, content=content)


@contextmanager
def serve_in_process(app: FastAPI) -> Iterator[httpx.Client]:
    """An httpx client bound to `app`, with the app's lifespan running around it."""
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(app.router.lifespan_context(app)), \
            httpx.Client(transport=PortalTransport(app, portal),
                         base_url="http://testserver") as client:
        yield client


serve_over_http = serve_in_thread
"""Serve an app with uvicorn on a free loopback port in a thread; yields its base URL."""


@dataclass
class ScriptedPlanner:
    """A stand-in for `solver.plan` whose behaviour each test chooses.

    It records every request it receives, can wait on an event (to hold a search open),
    sleep, raise `InfeasibleError`, answer "no plan within the time limit", and otherwise
    returns a plan that pins tp from the request's constraints.
    """

    infeasible: bool = False
    out_of_time: bool = False
    sleep_s: float = 0.0
    gate: threading.Event | None = None
    calls: list[PlanRequest] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)

    def __call__(self, request: PlanRequest, *,
                 progress: Callable[[str], None] | None = None) -> PlanResponse:
        self.calls.append(request)
        self.started.set()
        if progress is not None:
            progress("scripted search started")
        if self.gate is not None:
            self.gate.wait(timeout=120)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.infeasible:
            raise InfeasibleError(
                "stage 0 needs 95.1 GiB but 80.0 GiB fit", diagnostics={
                    "binding": "memory", "stage": 0, "over_bytes": 16_428_000_000,
                    "relaxations": ["use 2x the GPUs", "allow full recompute"]})
        if self.out_of_time:
            return PlanResponse(
                status=PlanStatus.UNKNOWN, model_name="scripted", gpu="h100-sxm5-80gb",
                explanation=Explanation(summary="no plan was found within the time limit"),
                solver=SolverStats(wall_time_s=request.solver.time_limit_s, candidates=40,
                                   evaluated=2, status="time_limit", unexamined=38))
        pinned = request.constraints.tp
        tp = pinned if isinstance(pinned, int) and not isinstance(pinned, bool) and pinned > 0 \
            else 8
        world = request.cluster.num_nodes * (request.cluster.gpus_per_node or 8)
        parallel = ParallelConfig(tp=tp, pp=1, dp=max(1, world // tp))
        preset = getattr(request.model, "preset", "explicit")
        gpu = request.cluster.gpu if isinstance(request.cluster.gpu, str) else "custom"
        return PlanResponse(
            status=PlanStatus.OPTIMAL, model_name=preset, gpu=gpu, world_size=world,
            parallel=parallel, num_micro_batches=4,
            explanation=Explanation(summary=f"tp={tp} chosen by the scripted planner"),
            solver=SolverStats(wall_time_s=0.001, candidates=3, evaluated=3, gap=0.0,
                               status="optimal"))


def post_answers_as(client: httpx.Client, path: str, body: dict[str, Any],
                    library: Callable[[Any], BaseModel], request_type: type[BaseModel]
                    ) -> dict[str, Any]:
    """POST `body` to `path`; check it answers 200 with what `library` returns for the same
    request, parsed as `request_type`; the answer's JSON."""
    response = client.post(path, json=body)
    assert response.status_code == 200
    expected = library(request_type.model_validate(body))
    answer: dict[str, Any] = response.json()
    assert answer == expected.model_dump(mode="json")
    return answer


def plan_body(**overrides: Any) -> dict[str, Any]:
    """A small plan request (8 H100 nodes, Llama 3.1 70B); keys replaced by `overrides`."""
    body: dict[str, Any] = {
        "model": {"preset": "llama-3.1-70b"},
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "sequence_length": 8192},
        "solver": {"time_limit_s": 5, "top_k": 3},
    }
    body.update(overrides)
    return body


SMALL_MESH: dict[str, Any] = {
    "cluster": {"num_nodes": 2, "gpus_per_node": 8},
    "parallel": {"tp": 4, "pp": 2, "dp": 2}, "order": "tp-cp-ep-dp-pp", "max_ranks": 16}
"""A mesh request of 16 ranks on 2 nodes (TP4 x PP2 x DP2), every rank listed."""

LLAMA_70B_RUN: dict[str, Any] = {
    "model": {"preset": "llama-3.1-70b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 128},
    "training": {"global_batch_size": 1024, "sequence_length": 8192},
    "parallel": {"tp": 8, "pp": 4, "dp": 32, "recompute": "selective"},
    "token_budget": 15_000_000_000_000}
"""A run estimate of a given configuration (no search): Llama 3.1 70B on 1,024 H100s (TP8 x
PP4 x DP32, selective recompute), 15T tokens at Llama 3's failure rate."""

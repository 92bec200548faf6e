"""Run-level answers: time and cost to train, the GPU frontier, sensitivity.

Owns: POST /v1/run/estimate (and its picture POST /v1/run/estimate.svg), POST /v1/frontier
and POST /v1/sensitivity (schema in -> bounds and time-limit clamping -> `solver.run_level`
with the service's planner, in the solver pool -> schema out). Their searches split the
request's clamped `solver.time_limit_s`. A `cluster.profile` is replaced by the stored
profile's constants first, as in plans and evaluate. Must not: search on the event loop,
store results or build error bodies.
"""

from collections.abc import Callable
from functools import partial
from typing import Annotated, TypeVar

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel

from api_schemas.problems import ProblemCode
from api_schemas.requests import PlanRequest
from api_schemas.run_level import (
    FrontierRequest,
    FrontierResponse,
    RunEstimateRequest,
    RunEstimateResponse,
    SensitivityRequest,
    SensitivityResponse,
)
from service import limits
from service.calibration import apply_profile
from service.core import call_core
from service.deps import ContextDep, ServiceContext
from service.media import (
    AcceptHeader,
    FormatQuery,
    json_or_svg,
    svg_response,
    svg_responses,
)
from service.openapi import problem_responses
from service.pictures import checkpoint_svg
from service.searches import run_search
from service.settings import Settings
from service.solver_calls import estimate_run, frontier, sensitivity

router = APIRouter(tags=["run"])

_SMALL_RUN = {
    "model": {"preset": "llama-3.1-8b"},
    "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
    "training": {"global_batch_size": 64, "sequence_length": 4096},
    "constraints": {"gpu_hour_price": 2.5},
    "solver": {"time_limit_s": 5},
}
"""Llama 3.1 8B on one H100 node: small enough to answer within seconds."""

RUN_ESTIMATE_EXAMPLES = {"llama-3.1-8b": {
    "summary": "Llama 3.1 8B on 8 H100s: 1T tokens at 2.5 per GPU-hour",
    "value": {**_SMALL_RUN, "token_budget": 1_000_000_000_000}}}
FRONTIER_EXAMPLES = {"llama-3.1-8b": {
    "summary": "Llama 3.1 8B on 1, 2 or 4 H100 nodes",
    "value": {**_SMALL_RUN, "num_nodes_options": [1, 2, 4]}}}
SENSITIVITY_EXAMPLES = {"llama-3.1-8b": {
    "summary": "Llama 3.1 8B on 8 H100s, each factor -20% and +20%",
    "value": {**_SMALL_RUN, "deltas": [-0.2, 0.2]}}}

RunEstimateBody = Annotated[RunEstimateRequest, Body(openapi_examples=RUN_ESTIMATE_EXAMPLES)]
FrontierBody = Annotated[FrontierRequest, Body(openapi_examples=FRONTIER_EXAMPLES)]
SensitivityBody = Annotated[SensitivityRequest, Body(openapi_examples=SENSITIVITY_EXAMPLES)]

_SEARCH_PROBLEMS: tuple[ProblemCode, ...] = (
    "invalid-spec", "solver-time-limit", "overloaded", "store-unavailable")
"""What the frontier and sensitivity searches may answer besides their result."""
_ESTIMATE_PROBLEMS: tuple[ProblemCode, ...] = (
    "invalid-spec", "no-feasible-plan", "solver-time-limit", "overloaded", "store-unavailable")
"""What the run estimate may answer besides its result, as JSON or as a picture."""
_ESTIMATE_PICTURE = "The checkpoint-interval picture."

RequestT = TypeVar("RequestT", bound=PlanRequest)
ResultT = TypeVar("ResultT", bound=BaseModel)


def _bounded(request: RequestT, settings: Settings) -> RequestT:
    """Check the plan bounds and clamp the time limit and workers as plans do."""
    limits.check_cluster(request.cluster, settings)
    limits.check_training(request.training, settings)
    limits.check_model_input(request.model, settings)
    given = request.solver.model_fields_set if "solver" in request.model_fields_set else set()
    solver = request.solver.model_copy(update={
        "time_limit_s": limits.clamp_time_limit(
            request.solver.time_limit_s if "time_limit_s" in given else None, settings),
        "num_workers": min(request.solver.num_workers, settings.max_search_workers)})
    return request.model_copy(update={"solver": solver})


async def _answer(request: RequestT, fn: Callable[..., ResultT], *, kind: str,
                  context: ServiceContext) -> ResultT:
    """The named profile applied, bounds, then `fn(request, planner=...)` in the solver pool;
    finite figures only."""
    request = await apply_profile(request, store=context.store)
    bounded = _bounded(request, context.settings)
    work = partial(call_core, partial(fn, planner=context.planner))
    result = await run_search(bounded, work, kind=kind, pool=context.pool,
                              timeout_s=bounded.solver.time_limit_s
                              + context.settings.time_limit_grace_s)
    limits.require_finite(result)
    return result


@router.post("/v1/run/estimate", summary="Time and cost to train on a token budget",
             response_model=RunEstimateResponse,
             responses=svg_responses(
                 "The run estimate (JSON) or the picture of goodput against checkpoint interval "
                 "(`?format=svg` or `Accept: image/svg+xml`).",
                 _ESTIMATE_PICTURE, *_ESTIMATE_PROBLEMS))
async def run_estimate(
        request: RunEstimateBody,
        context: ContextDep,
        format: FormatQuery = None,
        accept: AcceptHeader = None,
) -> RunEstimateResponse | Response:
    """Search the best plan (or score the given `parallel` configuration) and turn its
    predicted step time into the run: steps for `token_budget` tokens, wall time, GPU-hours
    and, with `constraints.gpu_hour_price`, the cost; with checkpoints and failures, the
    checkpoint size and save time, Young's and Daly's optimal intervals and the goodput at
    intervals around them (`reliability`). A deterministic model, not a measurement."""
    estimate = await _answer(request, estimate_run, kind="run-estimate", context=context)
    return json_or_svg(estimate, format, accept,
                       draw=lambda report: checkpoint_svg(report.reliability),
                       filename="checkpoint-interval.svg")


@router.post("/v1/run/estimate.svg", summary="Goodput against checkpoint interval (SVG)",
             response_class=Response,
             responses=svg_responses(
                 "Goodput against checkpoint interval, with Young's and Daly's optima (what "
                 "`POST /v1/run/estimate?format=svg` answers).",
                 _ESTIMATE_PICTURE, *_ESTIMATE_PROBLEMS))
async def run_estimate_svg(request: RunEstimateBody, context: ContextDep) -> Response:
    """The run estimate of `POST /v1/run/estimate`, its reliability drawn as SVG."""
    estimate = await _answer(request, estimate_run, kind="run-estimate", context=context)
    return svg_response(checkpoint_svg(estimate.reliability),
                        filename="checkpoint-interval.svg")


@router.post("/v1/frontier", summary="GPU count against step time and cost",
             responses=problem_responses(*_SEARCH_PROBLEMS))
async def gpu_frontier(request: FrontierBody, context: ContextDep) -> FrontierResponse:
    """One search per allowed cluster size (`num_nodes_options`), each with an equal share
    of the time limit, and which sizes are Pareto-optimal in GPUs, step time and GPU-hours
    per step."""
    for num_nodes in request.num_nodes_options:
        limits.check_cluster(request.cluster.model_copy(update={"num_nodes": num_nodes}),
                             context.settings)
    return await _answer(request, frontier, kind="frontier", context=context)


@router.post("/v1/sensitivity", summary="How the plan moves with bandwidth, HBM, kernels",
             responses=problem_responses(*_SEARCH_PROBLEMS))
async def plan_sensitivity(request: SensitivityBody, context: ContextDep
                           ) -> SensitivityResponse:
    """The plan on the cluster as given, then with network bandwidth, HBM capacity and
    kernel efficiency each changed by every delta (default -20% and +20%), each search with
    an equal share of the time limit: the plan that wins at each point, and whether the
    baseline layout still fits there and how fast it is."""
    return await _answer(request, sensitivity, kind="sensitivity", context=context)


__all__ = ["FRONTIER_EXAMPLES", "RUN_ESTIMATE_EXAMPLES", "SENSITIVITY_EXAMPLES", "router"]

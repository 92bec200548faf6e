"""Pipeline schedules: simulate a handcrafted schedule, or optimise one under a memory limit.

Owns: POST /v1/pipeline/simulate and its picture POST /v1/pipeline/simulate.svg (schema in
-> `models.core.pipeline.requests.simulate_request` -> schema out, on a request thread) and POST
/v1/pipeline/optimize (the CP-SAT optimizer `solver.schedule.requests.optimize_request` in
the solver pool, time limit clamped), with the bounds on timeline size. Must not: generate
or simulate schedules itself.
"""

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Body, Query, Response

from api_schemas.pipeline import (
    PipelineOptimizeRequest,
    PipelineOptimizeResponse,
    PipelineSimulateRequest,
    PipelineSimulateResponse,
)
from service import limits
from service.core import call_core
from service.deps import ContextDep
from service.media import (
    AcceptHeader,
    Format,
    svg_content,
    svg_response,
    svg_responses,
    trace_example,
    wanted_format,
)
from service.openapi import problem_responses
from service.pipeline_answer import simulate_answer
from service.searches import run_search, with_clamped_time_limit
from service.settings import Settings
from service.solver_calls import optimize_request
from service.trace import TraceDocument

router = APIRouter(tags=["pipeline"])

_DURATIONS_405B = {"F": 0.0105, "B": 0.0112, "W": 0.0098}
"""Per-chunk op times in seconds of a 126-layer model split into 8 x 2 chunks (illustrative
of Llama 3.1 405B on H100s at micro-batch 1, sequence 8192)."""

SIMULATE_EXAMPLES = {
    "interleaved-8x2": {
        "summary": "Interleaved 1F1B, 8 ranks x 2 chunks, 32 micro-batches",
        "value": {"schedule": "interleaved_1f1b", "num_stages": 8, "num_micro_batches": 32,
                  "num_chunks": 2, "durations": _DURATIONS_405B, "p2p_latency_s": 2.0e-5,
                  "include_timeline": False},
    },
    "zb-h1-4x8": {
        "summary": "ZB-H1 on 4 ranks, 8 micro-batches, with the timeline",
        "value": {"schedule": "zb_h1", "num_stages": 4, "num_micro_batches": 8,
                  "durations": {"F": 1.0, "B": 1.0, "W": 1.0}},
    },
}

OPTIMIZE_EXAMPLES = {
    "zb-h1-memory-10": {
        "summary": "Best order of ZB-H1's placement on 8 ranks within 10 in-flight stages",
        "value": {"schedule": "zb_h1", "num_stages": 8, "num_micro_batches": 32,
                  "durations": {"F": 0.021, "B": 0.025, "W": 0.017}, "memory_limit": 10,
                  "time_limit_s": 10, "include_timeline": False},
    },
}


def check_pipeline_bounds(request: PipelineSimulateRequest | PipelineOptimizeRequest,
                          settings: Settings, *, ops_bound: str) -> None:
    """Stages, micro-batches and timeline size within the documented bounds."""
    named = limits.bounds(settings)
    limits.check_bound(request.num_stages, named["pipeline_stages"], field="num_stages",
                       what="the pipeline ranks")
    limits.check_bound(request.num_micro_batches, named["micro_batches"],
                       field="num_micro_batches", what="the micro-batches")
    ops = 3 * request.num_stages * request.num_micro_batches * request.num_chunks
    limits.check_bound(ops, named[ops_bound], field="num_chunks",
                       what="the ops to schedule (3 x stages x micro-batches x chunks)")
    if request.include_timeline:
        limits.check_bound(ops, named["timeline_ops"], field="include_timeline",
                           what="the ops a timeline would list (3 x stages x micro-batches x "
                           "chunks); set include_timeline to false for the summary only")


@router.post("/v1/pipeline/simulate", summary="Timeline, bubble and in-flight activations",
             response_model=PipelineSimulateResponse | TraceDocument,
             responses={200: {"description": "The simulation (JSON, `PipelineSimulateResponse`), "
                              "its timeline picture (`?format=svg` or `Accept: image/svg+xml`) "
                              "or its Chrome Trace Event JSON (`?format=trace`, "
                              "`TraceDocument`).",
                              "content": {**svg_content("The timeline picture."),
                                          "application/json": {"examples": {
                                              "trace": {"summary": "?format=trace (shortened)",
                                                        "value": trace_example()}}}}},
                        **problem_responses("invalid-spec", "solver-time-limit", "overloaded")})
async def pipeline_simulate(
    request: Annotated[PipelineSimulateRequest, Body(openapi_examples=SIMULATE_EXAMPLES)],
    context: ContextDep,
    format: Annotated[Format | None, Query(
        description="'json' (default), 'svg' (the timeline picture) or 'trace' (Chrome "
        "Trace Event JSON for Perfetto); without it, `Accept: image/svg+xml` selects "
        "SVG.")] = None,
    accept: AcceptHeader = None,
) -> PipelineSimulateResponse | Response:
    """Generate the schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1/H2, ZB-V, DualPipe,
    DualPipeV, Chimera) for p ranks, m micro-batches and v chunks, and simulate it with the
    given op times: makespan, bubble, peak in-flight activations per rank, every op's start
    and end, the critical path and the messages between ranks (a deterministic model, not a
    measurement). As a picture or a trace, the timeline is always included."""
    answer = wanted_format(format, accept)
    body = await _simulation(request, context, answer)
    if answer == Format.SVG:
        return svg_response(body.decode("utf-8"), filename="timeline.svg")
    if answer == Format.TRACE:
        return Response(content=body, media_type="application/json",
                        headers={"Content-Disposition": 'attachment; filename="trace.json"'})
    return Response(content=body, media_type="application/json")


@router.post("/v1/pipeline/simulate.svg", summary="A simulated schedule's timeline (SVG)",
             response_class=Response,
             responses=svg_responses(
                 "One lane per pipeline rank: F, B and W per chunk, messages between ranks, "
                 "bubbles and the critical path; past ATLAS_MAX_TIMELINE_OPS ops, each "
                 "rank's busy spans (what `POST /v1/pipeline/simulate?format=svg` answers).",
                 "The timeline picture.",
                 "invalid-spec", "solver-time-limit", "overloaded"))
async def pipeline_simulate_svg(
    request: Annotated[PipelineSimulateRequest, Body(openapi_examples=SIMULATE_EXAMPLES)],
    context: ContextDep,
) -> Response:
    """The schedule of `POST /v1/pipeline/simulate`, simulated and drawn as SVG (a
    deterministic model, not a measurement)."""
    body = await _simulation(request, context, Format.SVG)
    return svg_response(body.decode("utf-8"), filename="timeline.svg")


async def _simulation(request: PipelineSimulateRequest, context: ContextDep,
                      answer: Format) -> bytes:
    """The simulation's answer in `answer`'s format, as bytes."""
    settings = context.settings
    check_pipeline_bounds(request, settings, ops_bound="pipeline_ops")
    if answer != Format.JSON:
        request = request.model_copy(update={"include_timeline": True})
    title = (f"{request.schedule.value}, p={request.num_stages}, m={request.num_micro_batches}, "
             f"v={request.num_chunks}")
    # In the admission-controlled pool: large simulations take seconds of CPU each, and
    # writing a 20,000-op timeline out takes about as long again, so that happens there too.
    body: bytes = await run_search(request, partial(call_core, partial(
        simulate_answer, answer=answer, title=title)), kind=f"pipeline-simulate-{answer.value}",
        pool=context.pool, timeout_s=settings.compute_timeout_s)
    return body


@router.post("/v1/pipeline/optimize", summary="Best schedule under a memory limit (CP-SAT)",
             responses=problem_responses("invalid-spec", "no-feasible-plan",
                                         "solver-time-limit", "overloaded"))
async def pipeline_optimize(
    request: Annotated[PipelineOptimizeRequest, Body(openapi_examples=OPTIMIZE_EXAMPLES)],
    context: ContextDep,
) -> PipelineOptimizeResponse:
    """The minimum-makespan order of the schedule's op placement with at most
    `memory_limit` stages of activations in flight per rank, with its proof (`optimal`) or
    its lower bound and gap; the time limit is clamped to the service's cap."""
    settings = context.settings
    check_pipeline_bounds(request, settings, ops_bound="optimize_ops")
    clamped = with_clamped_time_limit(request, requested_s=request.time_limit_s,
                                      settings=settings)
    response = await run_search(clamped, partial(call_core, optimize_request),
                                kind="pipeline-optimize",
                                pool=context.pool,
                                timeout_s=clamped.time_limit_s + settings.time_limit_grace_s)
    limits.require_finite(response)
    return response


__all__ = ["check_pipeline_bounds", "router"]

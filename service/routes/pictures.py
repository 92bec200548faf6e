"""Pictures and traces of a stored plan: its pipeline timeline, memory stack and trace.

Owns: GET /v1/plans/{plan_id}/timeline.svg, GET /v1/plans/{plan_id}/memory.svg and GET
/v1/plans/{plan_id}/trace. The timeline and the trace are the public pipeline simulator run
on the simulation the cost model ran for the plan (`solver.plan_pipeline`), drawn op by op up
to ATLAS_MAX_TIMELINE_OPS ops and as each rank's busy spans beyond it; the memory stack is
the plan's stored ledger. Each answer carries a strong ETag (`service/etags.py`). Must not:
simulate, size or render anything itself.
"""

import json
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Response
from fastapi.responses import JSONResponse

from api_schemas.pipeline import PipelineSimulateRequest, PipelineSimulateResponse
from api_schemas.plan import PlanResponse
from api_schemas.requests import PlanRequest
from models.core.pipeline.requests import simulate_request
from models.errors import InvalidSpecError
from service import limits, planning
from service.core import call_core
from service.deps import ContextDep, ServiceContext
from service.etags import ETAG_HEADER, NOT_MODIFIED, IfNoneMatch, tagged
from service.media import svg_content, svg_response, trace_content
from service.openapi import problem_responses
from service.persistence.tables import PlanRecord
from service.pictures import memory_svg, timeline_summary_svg, timeline_svg
from service.problems import LimitExceededError
from service.routes.plans import read_plan_record
from service.settings import Settings
from service.solver_calls import plan_simulation_request
from service.trace import trace_document

router = APIRouter(tags=["plans"])

PlanId = Annotated[str, Path(max_length=64, description="Plan id from POST /v1/plans.",
                             examples=["3f2b8c0d9e6a4b1c8d7e6f5a4b3c2d1e"])]

_ERRORS = {**NOT_MODIFIED,
           **problem_responses("plan-not-found", "invalid-spec", "store-unavailable",
                               body=False)}


async def _stored(context: ServiceContext, plan_id: str) -> tuple[PlanRecord, PlanResponse]:
    """The stored record and plan, read through the store gate (503 when the store is down)."""
    record = await read_plan_record(context, plan_id)
    return record, planning.stored_plan(record, created=False).response


def _title(plan: PlanResponse) -> str:
    return f"{plan.model_name or 'model'} on {plan.world_size} x {plan.gpu or 'GPU'}"


def _plan_pipeline(record: PlanRecord, plan: PlanResponse,
                   settings: Settings) -> PipelineSimulateRequest:
    """The simulate request of the plan's pipeline, within the simulator's bounds.

    Raises:
        InvalidSpecError: the plan is infeasible (it has no configuration).
        LimitExceededError: the pipeline is over a simulator bound.
    """
    if plan.parallel is None:
        raise InvalidSpecError(
            f"plan {record.id} is {plan.status.value}: it has no configuration to simulate; "
            "its explanation names what binds", field="path.plan_id")
    request = PlanRequest.model_validate(record.request_json)
    simulation = call_core(partial(plan_simulation_request, parallel=plan.parallel), request)
    p, m = simulation.num_stages, simulation.num_micro_batches
    _check(record.id, settings, p, "pipeline_stages", f"{p} pipeline stages")
    _check(record.id, settings, m, "micro_batches", f"{m} micro-batches")
    _check(record.id, settings, _ops(simulation), "pipeline_ops",
           f"{_ops(simulation):,} ops to simulate ({_shape(simulation)})")
    return simulation


def _ops(simulation: PipelineSimulateRequest) -> int:
    return 3 * simulation.num_stages * simulation.num_micro_batches * simulation.num_chunks


def _shape(simulation: PipelineSimulateRequest) -> str:
    return (f"3 x {simulation.num_stages} stages x {simulation.num_micro_batches} "
            f"micro-batches x {simulation.num_chunks} chunks")


def _check(plan_id: str, settings: Settings, value: int, name: str, what: str) -> None:
    """`value` within the bound `name`, named against the GET's own `plan_id` (the request
    has no body)."""
    bound = limits.bounds(settings)[name]
    if value > bound.value:
        raise LimitExceededError(
            f"plan_id: plan {plan_id}'s pipeline iteration has {what}, over this service's "
            f"bound of {bound.value:,} ({bound.setting}); GET /v1/plans/{plan_id} has its "
            "makespan and bubble, its timeline.svg a summary and its memory.svg its memory "
            "stack", field="path.plan_id")


def plan_simulation(record: PlanRecord, plan: PlanResponse,
                    settings: Settings) -> PipelineSimulateResponse:
    """The plan's pipeline iteration, simulated with its timeline, for a trace that lists
    every op (at most ATLAS_MAX_TIMELINE_OPS of them).

    Raises:
        InvalidSpecError: the plan is infeasible (it has no configuration).
        LimitExceededError: the pipeline or its timeline is over a documented bound.
    """
    simulation = _plan_pipeline(record, plan, settings)
    _check(record.id, settings, _ops(simulation), "timeline_ops",
           f"{_ops(simulation):,} ops to list one by one ({_shape(simulation)})")
    return call_core(simulate_request, simulation)


def plan_timeline_picture(record: PlanRecord, plan: PlanResponse, settings: Settings) -> str:
    """The plan's timeline picture: op by op up to ATLAS_MAX_TIMELINE_OPS ops, beyond it
    (up to the simulator's own bound) each rank's busy spans at the picture's resolution."""
    simulation = _plan_pipeline(record, plan, settings)
    result = call_core(simulate_request, simulation)
    title = f"Pipeline of {_title(plan)}"
    if _ops(simulation) > settings.max_timeline_ops:
        return timeline_summary_svg(result, title=title)
    return timeline_svg(result, title=title)


@router.get("/v1/plans/{plan_id}/timeline.svg", summary="A plan's pipeline timeline (SVG)",
            response_class=Response,
            responses={200: {"description": "One lane per pipeline rank: F, B and W per "
                             "chunk, messages between ranks, bubbles and the critical path; "
                             "past ATLAS_MAX_TIMELINE_OPS ops, each rank's busy spans and "
                             "bubbles at the picture's resolution.",
                             "content": svg_content("The timeline picture."),
                             "headers": ETAG_HEADER}, **_ERRORS})
async def plan_timeline_svg(plan_id: PlanId, context: ContextDep,
                            if_none_match: IfNoneMatch = None) -> Response:
    """The plan's pipeline iteration as the simulator runs it (the same op times
    `POST /v1/pipeline/simulate` returns for the plan's schedule, shape and per-stage F / B /
    W), drawn as SVG (a deterministic model, not a measurement)."""
    record, plan = await _stored(context, plan_id)

    def draw() -> str:
        return plan_timeline_picture(record, plan, context.settings)

    # Simulated and drawn in the admission-controlled pool, off the event loop.
    svg = await context.pool.run(draw, key=None, timeout_s=context.settings.compute_timeout_s)
    return tagged(svg_response(svg, filename=f"plan-{plan_id}-timeline.svg"), if_none_match)


@router.get("/v1/plans/{plan_id}/memory.svg", summary="A plan's per-stage memory (SVG)",
            response_class=Response,
            responses={200: {"description": "One stacked bar per pipeline stage, the "
                             "ledger's components as segments, the usable capacity as a line.",
                             "content": svg_content("The memory stack picture."),
                             "headers": ETAG_HEADER}, **_ERRORS})
async def plan_memory_svg(plan_id: PlanId, context: ContextDep,
                          if_none_match: IfNoneMatch = None) -> Response:
    """The plan's per-stage memory ledger (`memory` of GET /v1/plans/{plan_id}) as a
    stacked bar per stage (a deterministic model, not a measurement)."""
    record, plan = await _stored(context, plan_id)
    if plan.memory is None:
        raise InvalidSpecError(
            f"plan {record.id} is {plan.status.value}: it has no memory ledger to draw",
            field="path.plan_id")
    return tagged(svg_response(memory_svg(plan.memory, title=f"Memory of {_title(plan)}"),
                               filename=f"plan-{plan_id}-memory.svg"), if_none_match)


@router.get("/v1/plans/{plan_id}/trace", summary="A plan's pipeline iteration as a trace",
            response_class=JSONResponse,
            responses={200: {"description": "Chrome Trace Event JSON: a track per rank and "
                             "per rank's outgoing messages; open it in Perfetto or "
                             "chrome://tracing.", "content": trace_content(),
                             "headers": ETAG_HEADER}, **_ERRORS})
async def plan_trace(plan_id: PlanId, context: ContextDep,
                     if_none_match: IfNoneMatch = None) -> Response:
    """The plan's simulated pipeline iteration in the Trace Event format (`ts` and `dur` in
    microseconds; a deterministic model, not a measurement)."""
    record, plan = await _stored(context, plan_id)

    def trace() -> bytes:
        simulation = plan_simulation(record, plan, context.settings)
        document = trace_document(simulation, title=f"Pipeline of {_title(plan)}")
        return json.dumps(document, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")

    # Simulated and written in the admission-controlled pool, off the event loop.
    body = await context.pool.run(trace, key=None,
                                  timeout_s=context.settings.compute_timeout_s)
    return tagged(Response(content=body, media_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="plan-{plan_id}-trace.json"'}),
        if_none_match)


__all__ = ["plan_simulation", "plan_timeline_picture", "router"]

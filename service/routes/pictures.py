"""Pictures and traces of a stored plan: its pipeline timeline, memory stack and trace.

Owns: GET /v1/plans/{plan_id}/timeline.svg, GET /v1/plans/{plan_id}/memory.svg and GET
/v1/plans/{plan_id}/trace. The timeline and the trace are the public pipeline simulator run
on the simulation the cost model ran for the plan (`solver.plan_pipeline`); the memory stack
is the plan's stored ledger. Must not: simulate, size or render anything itself.
"""

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Engine
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from api_schemas.pipeline import PipelineSimulateRequest, PipelineSimulateResponse
from api_schemas.plan import PlanResponse
from api_schemas.requests import PlanRequest
from models.errors import InvalidSpecError
from models.pipeline.requests import simulate_request
from service import limits, planning
from service.core import call_core
from service.deps import ContextDep, ServiceContext
from service.media import svg_content, svg_response, trace_content, trace_response
from service.openapi import problem_responses
from service.persistence import repo
from service.persistence.tables import PlanRecord
from service.pictures import memory_svg, timeline_svg
from service.problems import LimitExceededError, PlanNotFoundError
from service.settings import Settings
from service.solver_calls import plan_simulation_request
from service.trace import trace_document

router = APIRouter(tags=["plans"])

PlanId = Annotated[str, Path(max_length=64, description="Plan id from POST /v1/plans.",
                             examples=["3f2b8c0d9e6a4b1c8d7e6f5a4b3c2d1e"])]

_ERRORS = problem_responses("plan-not-found", "invalid-spec", "store-unavailable", body=False)


async def _stored(context: ServiceContext, plan_id: str) -> tuple[PlanRecord, PlanResponse]:
    """The stored record and plan, read through the store gate (503 when the store is down)."""

    def read(engine: Engine) -> PlanRecord | None:
        with Session(engine) as session:
            return repo.get_plan(session=session, plan_id=plan_id)

    record = await context.store.call(read, what="read the plan")
    if record is None:
        raise PlanNotFoundError(
            f"no plan with id '{plan_id}' is stored here; list the stored plans with "
            "GET /v1/plans or create one with POST /v1/plans")
    return record, planning.stored_plan(record, created=False).response


def _title(plan: PlanResponse) -> str:
    return f"{plan.model_name or 'model'} on {plan.world_size} x {plan.gpu or 'GPU'}"


def plan_simulation(record: PlanRecord, plan: PlanResponse,
                    settings: Settings) -> PipelineSimulateResponse:
    """The plan's pipeline iteration, simulated with its timeline.

    Raises:
        InvalidSpecError: the plan is infeasible (it has no configuration).
        LimitExceededError: the timeline is larger than the documented bound.
    """
    if plan.parallel is None:
        raise InvalidSpecError(
            f"plan {record.id} is {plan.status.value}: it has no configuration to simulate; "
            "its explanation names what binds", field="path.plan_id")
    request = PlanRequest.model_validate(record.request_json)
    simulation = call_core(partial(plan_simulation_request, parallel=plan.parallel), request)
    _check_timeline_bound(record.id, simulation, settings)
    return call_core(simulate_request, simulation)


def _check_timeline_bound(plan_id: str, simulation: PipelineSimulateRequest,
                          settings: Settings) -> None:
    """The plan's pipeline within the simulator's bounds, and its ops within
    ATLAS_MAX_TIMELINE_OPS, since the timeline and the trace draw every op; named against the
    GET's own `plan_id` (the request has no body)."""
    named = limits.bounds(settings)
    p, m, v = simulation.num_stages, simulation.num_micro_batches, simulation.num_chunks
    shape = f"3 x {p} stages x {m} micro-batches x {v} chunks"
    checks = ((p, "pipeline_stages", f"{p} pipeline stages"),
              (m, "micro_batches", f"{m} micro-batches"),
              (3 * p * m * v, "pipeline_ops", f"{3 * p * m * v:,} ops to simulate ({shape})"),
              (3 * p * m * v, "timeline_ops", f"{3 * p * m * v:,} ops to draw one by one "
               f"({shape})"))
    for value, name, what in checks:
        bound = named[name]
        if value > bound.value:
            raise LimitExceededError(
                f"plan_id: plan {plan_id}'s pipeline iteration has {what}, over this "
                f"service's bound of {bound.value:,} ({bound.setting}); GET "
                f"/v1/plans/{plan_id} has its makespan and bubble, and its memory.svg its "
                "memory stack", field="path.plan_id")


@router.get("/v1/plans/{plan_id}/timeline.svg", summary="A plan's pipeline timeline (SVG)",
            response_class=Response,
            responses={200: {"description": "One lane per pipeline rank: F, B and W per "
                             "chunk, messages between ranks, bubbles and the critical path.",
                             "content": svg_content("The timeline picture.")}, **_ERRORS})
async def plan_timeline_svg(plan_id: PlanId, context: ContextDep) -> Response:
    """The plan's pipeline iteration as the simulator runs it (the same op times
    `POST /v1/pipeline/simulate` returns for the plan's schedule, shape and per-stage F / B /
    W), drawn as SVG (a deterministic model, not a measurement)."""
    record, plan = await _stored(context, plan_id)
    simulation = await run_in_threadpool(plan_simulation, record, plan, context.settings)
    return svg_response(timeline_svg(simulation, title=f"Pipeline of {_title(plan)}"),
                        filename=f"plan-{plan_id}-timeline.svg")


@router.get("/v1/plans/{plan_id}/memory.svg", summary="A plan's per-stage memory (SVG)",
            response_class=Response,
            responses={200: {"description": "One stacked bar per pipeline stage, the "
                             "ledger's components as segments, the usable capacity as a line.",
                             "content": svg_content("The memory stack picture.")}, **_ERRORS})
async def plan_memory_svg(plan_id: PlanId, context: ContextDep) -> Response:
    """The plan's per-stage memory ledger (`memory` of GET /v1/plans/{plan_id}) as a
    stacked bar per stage (a deterministic model, not a measurement)."""
    record, plan = await _stored(context, plan_id)
    if plan.memory is None:
        raise InvalidSpecError(
            f"plan {record.id} is {plan.status.value}: it has no memory ledger to draw",
            field="path.plan_id")
    return svg_response(memory_svg(plan.memory, title=f"Memory of {_title(plan)}"),
                        filename=f"plan-{plan_id}-memory.svg")


@router.get("/v1/plans/{plan_id}/trace", summary="A plan's pipeline iteration as a trace",
            response_class=JSONResponse,
            responses={200: {"description": "Chrome Trace Event JSON: a track per rank and "
                             "per rank's outgoing messages; open it in Perfetto or "
                             "chrome://tracing.", "content": trace_content()}, **_ERRORS})
async def plan_trace(plan_id: PlanId, context: ContextDep) -> JSONResponse:
    """The plan's simulated pipeline iteration in the Trace Event format (`ts` and `dur` in
    microseconds; a deterministic model, not a measurement)."""
    record, plan = await _stored(context, plan_id)
    simulation = await run_in_threadpool(plan_simulation, record, plan, context.settings)
    return trace_response(trace_document(simulation, title=f"Pipeline of {_title(plan)}"),
                          filename=f"plan-{plan_id}-trace.json")


__all__ = ["plan_simulation", "router"]

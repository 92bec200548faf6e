"""Plans: search, store, read back, list.

Owns: POST /v1/plans (201 + Location for a new plan, 200 + Location when an identical
request was already answered, 422 no-feasible-plan with the stored plan's id when the search
proves infeasibility; 503 store-unavailable with Retry-After when the search finished but its
plan could not be stored, never a 200 without an id), GET /v1/plans/{plan_id} and GET
/v1/plans, every store call through the store gate (503 store-unavailable when it does not
answer); a stored plan is answered with its ETag (`service/etags.py`). Must not: solve on
the event loop, touch the database outside the gate, or build error bodies.
"""

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from sqlalchemy import Engine
from sqlmodel import Session

from api_schemas.plan import PlanResponse, PlanStatus
from api_schemas.requests import PLAN_REQUEST_EXAMPLE, PlanRequest
from service import planning
from service.calibration import apply_profile
from service.deps import ContextDep, ServiceContext
from service.etags import ETAG_HEADER, NOT_MODIFIED, IfNoneMatch, tagged
from service.media import model_response
from service.openapi import problem_responses
from service.persistence import repo
from service.persistence.repo import PlanPage
from service.persistence.storable import text_problem
from service.persistence.tables import PlanRecord
from service.problems import InfeasiblePlanError, PlanNotFoundError, StoreUnavailableError
from service.schemas import PlanList, PlanSummary

router = APIRouter(tags=["plans"])

PLAN_EXAMPLES = {
    "llama-3.1-70b": {
        "summary": "Llama 3.1 70B on 64 H100s, 512 x 8K tokens per step",
        "value": PLAN_REQUEST_EXAMPLE,
    },
}

MAX_PAGE = 200
"""Largest page of GET /v1/plans."""

MAX_OFFSET = 10**9
"""Largest offset of GET /v1/plans (keeps the SQL integer in range)."""

_LOCATION = {"Location": {"description": "URL of the stored plan.",
                          "schema": {"type": "string"}}}

_READ_BACK = {"ReadPlan": {
    "operationRef": "#/paths/~1v1~1plans~1{plan_id}/get",
    "parameters": {"plan_id": "$response.body#/id"},
    "description": "Read the stored plan back by its id."}}


def _check_text(value: str | None, *, loc: tuple[str, str]) -> None:
    """Refuse a path or query value a store could not compare (422 naming it)."""
    reason = text_problem(value) if value is not None else None
    if reason is not None:
        raise RequestValidationError([{"loc": loc, "msg": reason, "type": "value_error",
                                       "input": value}])


@router.post(
    "/v1/plans", status_code=201, summary="Search for the best parallel plan",
    responses={
        201: {"description": "A new plan was searched for and stored.", "headers": _LOCATION,
              "links": _READ_BACK},
        200: {"description": "An identical request was answered before; the stored plan.",
              "model": PlanResponse, "headers": _LOCATION,
              "links": _READ_BACK},
        **problem_responses("invalid-spec", "no-feasible-plan", "solver-time-limit",
                            "overloaded", "store-unavailable"),
    },
)
async def create_plan(
    request: Annotated[PlanRequest, Body(openapi_examples=PLAN_EXAMPLES)],
    context: ContextDep, response: Response,
) -> PlanResponse:
    """Search TP / PP / DP / CP / EP, schedule, micro-batch, ZeRO and activation policy for
    the best plan under the objective, and store it. Identical requests (after defaults and
    limit clamping) are answered from the store; identical requests in flight share one
    search. An infeasible outcome is stored too and answered with 422 no-feasible-plan whose
    `instance` is the stored plan's id. `cluster.profile` applies a stored calibration
    profile (its newest version's constants, which are part of the request's hash)."""
    request = await apply_profile(request, store=context.store)
    stored = await planning.create_plan(request, settings=context.settings,
                                        store=context.store, pool=context.pool,
                                        planner=context.planner)
    if stored.infeasible:
        summary = stored.response.explanation.summary
        where = (f"it is stored as plan {stored.plan_id}" if stored.plan_id is not None else
                 "the store was unavailable, so it is not stored")
        raise InfeasiblePlanError(
            f"no configuration satisfies the request: {summary}; {where}; `diagnostics` and "
            "`explanation.relaxations` name what binds and the smallest changes that make a "
            "plan exist",
            plan_id=stored.plan_id, diagnostics=stored.diagnostics,
            explanation=stored.response.explanation.model_dump(mode="json"))
    if not stored.stored:
        # A plan without an id cannot be read back, listed or shared: answered as the store
        # fault it is. Its write may still land; the same request then reads it back.
        raise StoreUnavailableError(
            "the search finished but the plan store could not store its plan; retry the same "
            f"request after {context.settings.retry_after_s} s (if the write landed late, it "
            "is answered from the store; GET /healthz says when the store is writable again)",
            retry_after_s=context.settings.retry_after_s)
    response.headers["Location"] = f"/v1/plans/{stored.plan_id}"
    if not stored.created:
        response.status_code = 200
    return stored.response


@router.get("/v1/plans/{plan_id}", summary="Read a stored plan", response_model=PlanResponse,
            responses={200: {"description": "The stored plan.", "headers": ETAG_HEADER},
                       **NOT_MODIFIED,
                       **problem_responses("plan-not-found", "store-unavailable", body=False)})
async def read_plan(
    plan_id: Annotated[str, Path(max_length=64, description="Plan id from POST /v1/plans.",
                                 examples=["3f2b8c0d9e6a4b1c8d7e6f5a4b3c2d1e"])],
    context: ContextDep, if_none_match: IfNoneMatch = None,
) -> Response:
    """The plan exactly as it was served when stored (infeasible plans included), with a
    strong ETag: 304 with no body when `If-None-Match` names it."""
    _check_text(plan_id, loc=("path", "plan_id"))

    record = await read_plan_record(context, plan_id)
    plan = planning.stored_plan(record, created=False).response
    return tagged(model_response(plan), if_none_match)


@router.get("/v1/plans", summary="List stored plans",
            responses=problem_responses("store-unavailable", body=False))
async def list_plans(
    context: ContextDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Plans to skip.")] = 0,
    model: Annotated[str | None, Query(max_length=200, description="Only plans for this "
                                       "model (preset id or config name).",
                                       examples=["llama-3.1-70b"])] = None,
    gpu: Annotated[str | None, Query(max_length=200, description="Only plans on this GPU id.",
                                     examples=["h100-sxm5-80gb"])] = None,
    status: Annotated[PlanStatus | None, Query(description="Only plans with this "
                                               "status.")] = None,
) -> PlanList:
    """Stored plans, newest first, `limit` at a time from `offset`; `next_offset` is null on
    the last page."""
    _check_text(model, loc=("query", "model"))
    _check_text(gpu, loc=("query", "gpu"))

    def read(engine: Engine) -> PlanPage:
        with Session(engine) as session:
            return repo.list_plans(session=session, limit=limit, offset=offset,
                                   model_name=model, gpu=gpu,
                                   status=status.value if status is not None else None)

    page = await context.store.call(read, what="list the plans")
    items = []
    for record in page.records:
        served = planning.stored_plan(record, created=False).response
        items.append(PlanSummary(
            id=record.id, status=served.status, model_name=record.model_name, gpu=record.gpu,
            world_size=record.world_size, objective=record.objective,
            created_at=served.created_at or record.created_at, parallel=served.parallel,
            step_time_s=served.time.step_time_s if served.time else None,
            tokens_per_s=served.throughput.tokens_per_s if served.throughput else None,
            summary=served.explanation.summary))
    end = offset + len(items)
    return PlanList(items=items, total=page.total, limit=limit, offset=offset,
                    next_offset=end if end < page.total else None)


async def read_plan_record(context: ServiceContext, plan_id: str) -> PlanRecord:
    """The stored record of a plan, read through the store gate (503 when the store is
    down); PlanNotFoundError when no plan has the id."""

    def read(engine: Engine) -> PlanRecord | None:
        with Session(engine) as session:
            return repo.get_plan(session=session, plan_id=plan_id)

    record = await context.store.call(read, what="read the plan")
    if record is None:
        raise PlanNotFoundError(
            f"no plan with id '{plan_id}' is stored here; list the stored plans with "
            "GET /v1/plans or create one with POST /v1/plans")
    return record


__all__ = ["router"]

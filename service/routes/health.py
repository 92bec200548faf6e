"""Liveness, database reachability, and the documentation of each problem code.

Owns: GET /healthz and GET /problems/{code} (the target of every problem's `type`).
Must not: touch plans.
"""

from typing import Annotated, get_args

from fastapi import APIRouter, Path, Response

from api_schemas.problems import ProblemCode
from service.deps import ContextDep
from service.openapi import problem_responses
from service.persistence.db import probe_database
from service.problems import (
    PROBLEM_DESCRIPTIONS,
    PROBLEM_STATUS,
    PROBLEM_TITLES,
    StoreUnavailableError,
)
from service.schemas import HealthReport, ProblemInfo

router = APIRouter(tags=["health"])

SERVICE_VERSION = "0.1.0"


@router.get(
    "/healthz", summary="Liveness and database reachability",
    responses={503: {"description": "The database does not answer (within the store "
                     "timeout).", "model": HealthReport,
                     "headers": {"Retry-After": {"description": "Seconds to wait before "
                                                 "retrying.", "schema": {"type": "string"}}}},
               **problem_responses(params=False, body=False)},
)
async def healthz(context: ContextDep, response: Response) -> HealthReport:
    """200 with `status: ok` when the process runs and the plan table answers a trivial
    query (re-created first if the database came back empty); 503 with `status: degraded`
    and Retry-After when the database does not answer within the store timeout."""
    try:
        await context.store.call(probe_database, what="answer the health probe")
        reachable = True
    except StoreUnavailableError as error:
        reachable = False
        response.headers["Retry-After"] = str(error.retry_after_s)
    if not reachable:
        response.status_code = 503
    return HealthReport(status="ok" if reachable else "degraded",
                        database="ok" if reachable else "unreachable",
                        database_backend=context.engine.url.get_backend_name(),
                        version=SERVICE_VERSION)


@router.get("/problems/{code}", summary="What a problem code means",
            responses=problem_responses(body=False))
async def problem_info(
    code: Annotated[ProblemCode, Path(description="A problem code, e.g. 'invalid-spec'.",
                                      examples=["no-feasible-plan"])],
) -> ProblemInfo:
    """The status, title and meaning of a problem code (each problem's `type` links here)."""
    return ProblemInfo(code=code, status=PROBLEM_STATUS[code], title=PROBLEM_TITLES[code],
                       description=PROBLEM_DESCRIPTIONS[code])


ALL_PROBLEM_CODES: tuple[ProblemCode, ...] = get_args(ProblemCode)

__all__ = ["ALL_PROBLEM_CODES", "SERVICE_VERSION", "router"]

"""RFC 9457 problem details: the one table from problem code to HTTP status, and the handlers.

Owns: `PROBLEM_STATUS` (code -> status), the fixed titles, the service's own error types
(plan not found, payload too large, overloaded, input over a documented bound, search past
its time limit, infeasible plan stored), and the exception handlers that turn every failure
into `application/problem+json`. Must not: let a traceback or exception text of an
unexpected error reach a client; routes never build error bodies themselves.
"""

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api_schemas.problems import ProblemCode
from models.errors import PlannerError

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"

PROBLEM_STATUS: dict[ProblemCode, int] = {
    "invalid-request": 422,
    "invalid-spec": 422,
    "no-feasible-plan": 422,
    "solver-time-limit": 503,
    "plan-not-found": 404,
    "profile-not-found": 404,
    "payload-too-large": 413,
    "overloaded": 503,
    "large-bodies-busy": 503,
    "store-unavailable": 503,
    "job-not-found": 404,
    "job-finished": 409,
    "internal": 500,
}
"""The only code -> HTTP status table. Routing errors (unknown path, wrong method) keep the
status the router chose (404, 405) under the code `invalid-request`; an undecodable body
(FastAPI's 400) is answered as `invalid-request` with 422 like any other invalid body."""

PROBLEM_TITLES: dict[ProblemCode, str] = {
    "invalid-request": "The request does not match the API schema",
    "invalid-spec": "The specification breaks a domain rule",
    "no-feasible-plan": "No plan satisfies the request",
    "solver-time-limit": "The search reached its time limit without an answer",
    "plan-not-found": "No stored plan has this id",
    "profile-not-found": "No calibration profile has this name",
    "payload-too-large": "The request body is larger than the service accepts",
    "overloaded": "Every solver thread is busy",
    "large-bodies-busy": "Too many large request bodies are being served",
    "store-unavailable": "The plan store does not answer",
    "job-not-found": "No job has this id",
    "job-finished": "The job has already finished",
    "internal": "Internal error",
}

PROBLEM_DESCRIPTIONS: dict[ProblemCode, str] = {
    "invalid-request": "The body, path or query failed validation or exceeds a documented "
    "bound; `errors` lists each field path with what is wrong.",
    "invalid-spec": "The request is well-formed but a domain rule fails (unknown preset, "
    "tp not dividing the heads, ...); `detail` names the value and the fix.",
    "no-feasible-plan": "The search proved that no configuration fits; the infeasible plan "
    "is stored (`instance` is its id) and `diagnostics` says what binds.",
    "solver-time-limit": "The search ran out of time before finding a plan; retry later "
    "(Retry-After) or with a larger `solver.time_limit_s`.",
    "plan-not-found": "The plan id is unknown to this store.",
    "profile-not-found": "No calibration profile of this name (or version) is stored; "
    "GET /v1/calibration/profiles lists them, POST /v1/calibration/runs fits one.",
    "payload-too-large": "The body exceeds the configured maximum (ATLAS_MAX_BODY_BYTES).",
    "overloaded": "The solver pool and its queue are full; retry after Retry-After seconds.",
    "large-bodies-busy": "The body is over ATLAS_LARGE_BODY_BYTES and ATLAS_LARGE_BODY_SLOTS "
    "such requests are already being served; it was refused before its body was read. "
    "Retry after Retry-After seconds.",
    "store-unavailable": "The plan database is unreachable, refuses connections, is missing or "
    "does not answer within the store timeout; retry after Retry-After seconds. Endpoints "
    "that need no database keep answering; a plan search that finishes meanwhile is answered "
    "with this problem too (its write may still land when the database answers; resending "
    "the same request then returns the stored plan).",
    "job-not-found": "The job id is unknown to this store (POST /v1/jobs submits one).",
    "job-finished": "The job is done or failed, so there is nothing to cancel; its result "
    "or problem stays readable with GET /v1/jobs/{id}.",
    "internal": "An unexpected failure; it is logged with the request id given here.",
}

_RETRY_CODES: frozenset[ProblemCode] = frozenset({"overloaded", "large-bodies-busy",
                                                  "solver-time-limit", "store-unavailable"})


def problem_type(code: ProblemCode, *, docs_base: str = "") -> str:
    """The `type` URI of a code: `<docs_base>/problems/<code>` (served by the API)."""
    return f"{docs_base}/problems/{code}"


class PlanNotFoundError(PlannerError):
    """The plan id is not in the store."""

    code: ProblemCode = "plan-not-found"


class ProfileNotFoundError(PlannerError):
    """No calibration profile of the name (or version) is stored."""

    code: ProblemCode = "profile-not-found"


class JobNotFoundError(PlannerError):
    """The job id is not in the store."""

    code: ProblemCode = "job-not-found"


class JobFinishedError(PlannerError):
    """The job to cancel is already done or failed."""

    code: ProblemCode = "job-finished"


class PayloadTooLargeError(PlannerError):
    """The body exceeds the configured maximum."""

    code: ProblemCode = "payload-too-large"


class RetryLaterError(PlannerError):
    """A refusal the client may retry after `retry_after_s` seconds (its Retry-After)."""

    def __init__(self, detail: str, *, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class OverloadedError(RetryLaterError):
    """The solver pool and its queue are full."""

    code: ProblemCode = "overloaded"


class StoreUnavailableError(RetryLaterError):
    """The plan store failed or did not answer within the store timeout."""

    code: ProblemCode = "store-unavailable"


class SolveTimeoutError(RetryLaterError):
    """A search did not return within its time limit plus the grace period."""

    code: ProblemCode = "solver-time-limit"

    def __init__(self, detail: str, *, time_limit_s: float, retry_after_s: int) -> None:
        super().__init__(detail, retry_after_s=retry_after_s)
        self.time_limit_s = time_limit_s


class LimitExceededError(PlannerError):
    """An input is over a documented service bound (world size, layers, experts, ...)."""

    code: ProblemCode = "invalid-request"


class InfeasiblePlanError(PlannerError):
    """The search proved infeasibility; the infeasible plan was stored under `plan_id` (None
    when the store was unavailable)."""

    code: ProblemCode = "no-feasible-plan"

    def __init__(self, detail: str, *, plan_id: str | None,
                 diagnostics: dict[str, Any] | None,
                 explanation: dict[str, Any]) -> None:
        super().__init__(detail, diagnostics=diagnostics)
        self.plan_id = plan_id
        self.explanation = explanation


def problem_response(code: ProblemCode, *, detail: str, instance: str | None,
                     status: int | None = None, headers: Mapping[str, str] | None = None,
                     **members: Any) -> JSONResponse:
    """An `application/problem+json` response for a code (status from the table)."""
    status_code = status if status is not None else PROBLEM_STATUS[code]
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": PROBLEM_TITLES[code],
        "status": status_code,
        "detail": detail,
        "instance": instance,
        "code": code,
    }
    body.update({key: value for key, value in members.items() if value is not None})
    return JSONResponse(body, status_code=status_code, headers=headers,
                        media_type=PROBLEM_MEDIA_TYPE)


def _request_id(request: Request) -> str | None:
    value = getattr(request.state, "request_id", None)
    return value if isinstance(value, str) else None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LIBRARY_LINK = re.compile(r"\s*For further information visit https://errors\.pydantic\.dev/\S*")
"""The line pydantic appends to a nested validation error's text: it names the installed
pydantic version, which an answer must not disclose."""


def without_library_links(message: str) -> str:
    """`message` without pydantic's documentation links (and the version inside them)."""
    return _LIBRARY_LINK.sub("", message)


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors():
        loc = [part if isinstance(part, int) else str(part) for part in err.get("loc", ())]
        msg = without_library_links(str(err.get("msg", "invalid value")))
        if "input" in err and err.get("type") != "missing":
            msg = f"{msg} (got {_short(err['input'])})"
        errors.append({"loc": loc, "msg": msg, "type": str(err.get("type", "value_error"))})
    return errors


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _field_errors(exc)
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"]) or "request"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    detail = f"{where}: {first['msg']}{more}; fix the listed fields and resend"
    return problem_response("invalid-request", detail=detail, instance=request.url.path,
                            errors=errors)


_LOCATIONS = ("path", "query", "header")
"""First parts of a `PlannerError.field` that are a request location, not a body field."""


def _planner_error_members(exc: PlannerError) -> tuple[dict[str, Any], dict[str, str]]:
    members: dict[str, Any] = {"diagnostics": exc.diagnostics}
    headers: dict[str, str] = {}
    if exc.field:
        # A field is a body path unless it names where else it is ("path.plan_id").
        parts: list[str | int] = list(exc.field.split("."))
        loc = parts if parts[0] in _LOCATIONS else ["body", *parts]
        members["errors"] = [{"loc": loc, "msg": exc.detail, "type": exc.code}]
    if isinstance(exc, InfeasiblePlanError):
        members["plan_id"] = exc.plan_id
        members["explanation"] = exc.explanation
        if exc.plan_id is not None:
            headers["Location"] = f"/v1/plans/{exc.plan_id}"
        else:
            headers["X-Plan-Stored"] = "false"
    if isinstance(exc, SolveTimeoutError):
        members["time_limit_s"] = exc.time_limit_s
    if exc.code in _RETRY_CODES:
        headers["Retry-After"] = str(getattr(exc, "retry_after_s", 1))
    return members, headers


async def _on_planner_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PlannerError)
    code: ProblemCode = exc.code if exc.code in PROBLEM_STATUS else "internal"
    if code == "internal":
        return await _on_unexpected_error(request, exc)
    members, headers = _planner_error_members(exc)
    instance = (exc.plan_id if isinstance(exc, InfeasiblePlanError) and exc.plan_id
                else request.url.path)
    return problem_response(code, detail=exc.detail, instance=instance, headers=headers,
                            **members)


def _unparsable_body_reason(exc: StarletteHTTPException) -> tuple[str, str]:
    """Why a body could not be parsed, from the parser's own error: (reason, error type)."""
    cause = exc.__cause__
    if isinstance(cause, RecursionError):
        too_deep = ("the JSON is nested too deeply to parse (the limit is several hundred "
                    "levels of arrays or objects; no request of this API needs more than ten)")
        return too_deep, "json_too_deep"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        too_long = ("an integer has more digits than the parser converts (4300); no field "
                    "of this API takes more than 20 digits")
        return too_long, "json_integer_too_long"
    if isinstance(cause, UnicodeDecodeError):
        return (f"the body is not UTF-8 ({cause.reason} at byte {cause.start})",
                "body_not_utf8")
    return str(exc.detail), "body_unreadable"


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code >= 500:
        return await _on_unexpected_error(request, exc)
    if exc.status_code == 400:
        # FastAPI answers 400 when the body cannot be decoded at all (invalid UTF-8, an
        # integer too long to convert, nesting deeper than the parser's recursion limit).
        reason, kind = _unparsable_body_reason(exc)
        return problem_response(
            "invalid-request", instance=request.url.path,
            detail=f"body: {reason}; send a UTF-8 JSON object matching the schema",
            errors=[{"loc": ["body"], "msg": reason, "type": kind}])
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    detail = (f"{request.method} {request.url.path}: {exc.detail}; see /docs for the "
              "endpoints and their methods")
    if exc.status_code == 405:
        detail = (f"{request.method} {request.url.path}: {exc.detail}; this path takes "
                  f"{headers['Allow']}")
    return problem_response("invalid-request", detail=detail, instance=request.url.path,
                            status=exc.status_code, headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app answers on this request's path (the router's own
    405 names only the first route whose path matched, e.g. POST for /v1/plans although GET
    lists the plans there)."""
    return [method for method in _METHODS if any(
        route.matches({**request.scope, "method": method})[0] == Match.FULL
        for route in request.app.router.routes)]


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def _on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    request_id = _request_id(request)
    logger.error("unhandled error on %s %s (request id %s)", request.method, request.url.path,
                 request_id, exc_info=exc)
    headers = {"X-Request-ID": request_id} if request_id else None
    detail = ("the service failed unexpectedly; the failure is logged under request id "
              f"{request_id}: quote it when reporting the problem")
    return problem_response("internal", detail=detail, instance=request.url.path,
                            headers=headers, request_id=request_id)


def install_problem_handlers(app: FastAPI) -> None:
    """Route every failure of `app` through the problem+json handlers."""
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(PlannerError, _on_planner_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected_error)


__all__ = [
    "PROBLEM_DESCRIPTIONS",
    "PROBLEM_MEDIA_TYPE",
    "PROBLEM_STATUS",
    "PROBLEM_TITLES",
    "InfeasiblePlanError",
    "JobFinishedError",
    "JobNotFoundError",
    "LimitExceededError",
    "OverloadedError",
    "PayloadTooLargeError",
    "PlanNotFoundError",
    "ProfileNotFoundError",
    "RetryLaterError",
    "SolveTimeoutError",
    "StoreUnavailableError",
    "allowed_methods",
    "without_library_links",
    "install_problem_handlers",
    "problem_response",
    "problem_type",
]

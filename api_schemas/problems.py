"""RFC 9457 problem details: the closed set of error codes and the error body.

Owns: the stable `code` vocabulary every layer raises and the JSON shape of an error.
Must not: map codes to HTTP statuses (that table lives in `service/problems.py` only).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api_schemas.plan import Explanation

ProblemCode = Literal[
    "invalid-request",
    "invalid-spec",
    "no-feasible-plan",
    "solver-time-limit",
    "plan-not-found",
    "profile-not-found",
    "payload-too-large",
    "overloaded",
    "large-bodies-busy",
    "store-unavailable",
    "job-not-found",
    "job-finished",
    "internal",
]


class FieldError(BaseModel):
    """One validation failure with the path of the offending field."""

    loc: list[str | int] = Field(description="Path of the field, e.g. ['body', 'parallel', 'tp'].")
    msg: str = Field(description="What is wrong and how to fix it.")
    type: str = Field(default="value_error", description="Machine-readable error kind.")


class ProblemDetail(BaseModel):
    """An RFC 9457 `application/problem+json` body."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="URI naming the problem code.",
                      examples=["/problems/invalid-spec"])
    title: str = Field(description="Fixed, short summary of the problem code.")
    status: int = Field(description="HTTP status code.", examples=[422])
    detail: str = Field(description="What went wrong, with the offending value and the fix.")
    instance: str | None = Field(default=None, description="The request path or plan id.")
    code: ProblemCode = Field(description="Stable machine-readable code.")
    errors: list[FieldError] | None = Field(default=None, description="Field errors, if any.")
    diagnostics: dict[str, Any] | None = Field(
        default=None, description="Solver diagnostics for no-feasible-plan."
    )
    plan_id: str | None = Field(
        default=None, description="no-feasible-plan from POST /v1/plans: id of the stored "
        "infeasible plan (also in `instance` and the Location header).")
    explanation: Explanation | None = Field(
        default=None, description="no-feasible-plan from POST /v1/plans: the plan's "
        "explanation (summary, binding constraints, smallest relaxations).")
    time_limit_s: float | None = Field(
        default=None, description="solver-time-limit: the limit the search ran under.")


__all__ = ["FieldError", "ProblemCode", "ProblemDetail"]

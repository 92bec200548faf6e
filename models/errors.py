"""Errors the cost model raises for user input it cannot accept.

Owns: the exception hierarchy carrying a stable `ProblemCode`. Every message names the
offending value and the fix. Must not: know about HTTP (the status table is in the service).
"""

from typing import Any

from api_schemas.problems import ProblemCode


class PlannerError(ValueError):
    """Base of every domain error; `code` is the stable problem code."""

    code: ProblemCode = "internal"

    def __init__(self, detail: str, *, field: str | None = None,
                 diagnostics: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.diagnostics = diagnostics


class InvalidSpecError(PlannerError):
    """A specification is well-formed but violates a domain rule (e.g. tp does not divide
    the attention heads)."""

    code: ProblemCode = "invalid-spec"


class InfeasibleError(PlannerError):
    """No configuration satisfies the request; `diagnostics` says what binds and by how much."""

    code: ProblemCode = "no-feasible-plan"


__all__ = ["InfeasibleError", "InvalidSpecError", "PlannerError"]

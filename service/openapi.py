"""The OpenAPI document: problem+json error responses and their shared schema.

Owns: `problem_responses(...)`, the `responses=` entry each route declares for the problem
codes it can answer, and `install_openapi(app)`, which adds the `ProblemDetail` and
`FieldError` schemas (and the `TraceDocument` of the trace answers) to the components.
Must not: change routes or request schemas.
"""

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api_schemas.problems import FieldError, ProblemCode, ProblemDetail
from service.openapi_enums import name_enums
from service.problems import PROBLEM_MEDIA_TYPE, PROBLEM_STATUS, PROBLEM_TITLES
from service.trace import TraceDocument

_PROBLEM_REF = {"$ref": "#/components/schemas/ProblemDetail"}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "string"}}}


def problem_responses(*codes: ProblemCode, params: bool = True,
                      body: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for the given codes plus `internal`, `invalid-request` when the
    route takes parameters or a body, and `payload-too-large` when it takes a body."""
    wanted: list[ProblemCode] = [*codes, "internal"]
    if params or body:
        wanted.append("invalid-request")
    if body:
        wanted.append("payload-too-large")
    by_status: dict[int, list[ProblemCode]] = {}
    for code in wanted:
        by_status.setdefault(PROBLEM_STATUS[code], [])
        if code not in by_status[PROBLEM_STATUS[code]]:
            by_status[PROBLEM_STATUS[code]].append(code)
    responses: dict[int | str, dict[str, Any]] = {}
    for status, status_codes in sorted(by_status.items()):
        text = "; ".join(f"`{c}`: {PROBLEM_TITLES[c]}" for c in status_codes)
        entry: dict[str, Any] = {"description": f"Problem details ({text}).",
                                 "content": {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}}}
        if status == 503:
            entry["headers"] = _RETRY_AFTER
        responses[status] = entry
    return responses


def install_openapi(app: FastAPI) -> None:
    """Generate the schema once, with the problem schemas in its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes,
                             tags=app.openapi_tags)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (ProblemDetail, FieldError, TraceDocument):
            generated = model.model_json_schema(ref_template="#/components/schemas/{model}",
                                                mode="serialization")
            for name, definition in generated.pop("$defs", {}).items():
                components.setdefault(name, definition)
            components[model.__name__] = generated
        schema = name_enums(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


__all__ = ["install_openapi", "problem_responses"]

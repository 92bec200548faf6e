"""The OpenAPI document: problem+json error responses and their shared schema.

Owns: `problem_responses(...)`, the `responses=` entry each route declares for the problem
codes it can answer, `operation_id(route)` (each operation's stable name: its handler's
name, so generated clients get `create_plan`, not one derived from the path), and
`install_openapi(app)`, which adds the `ProblemDetail` and `FieldError` schemas (and the
`TraceDocument` of the trace answers, and the bodies routes parse off the event loop) to
the components and refuses a repeated operation id.
Must not: change routes or request schemas.
"""

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from api_schemas.moe import MoePlacementRequest
from api_schemas.problems import FieldError, ProblemCode, ProblemDetail
from service.openapi_enums import name_enums
from service.problems import PROBLEM_MEDIA_TYPE, PROBLEM_STATUS, PROBLEM_TITLES
from service.trace import TraceDocument

OFF_LOOP_BODIES: tuple[type[BaseModel], ...] = (MoePlacementRequest,)
"""Request bodies that routes parse themselves, off the event loop (`service.offloop_body`):
FastAPI does not see them, so their schemas are added to the components here."""

_PROBLEM_REF = {"$ref": "#/components/schemas/ProblemDetail"}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "string"}}}


def problem_responses(*codes: ProblemCode, params: bool = True,
                      body: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses for the given codes plus `internal`, `invalid-request` when the
    route takes parameters or a body, and `payload-too-large` and `large-bodies-busy` (the
    large-body gate) when it takes a body."""
    wanted: list[ProblemCode] = [*codes, "internal"]
    if params or body:
        wanted.append("invalid-request")
    if body:
        wanted += ["payload-too-large", "large-bodies-busy"]
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


def operation_id(route: APIRoute) -> str:
    """The route's OpenAPI `operationId`: its handler's name (`create_plan`), which generated
    clients turn into their function names; renaming a handler renames the operation."""
    return route.name


def _check_unique_operation_ids(schema: dict[str, Any]) -> None:
    seen: dict[str, str] = {}
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            name = operation.get("operationId")
            if name in seen:
                raise ValueError(f"operationId {name!r} of {method.upper()} {path} is also "
                                 f"{seen[name]}'s: give the handler another name")
            seen[name] = f"{method.upper()} {path}"


def _title_split_models(schema: dict[str, Any]) -> None:
    """Give the two halves of a model that is both read and returned distinct titles.

    Such a model (a `ParallelConfig` given to /v1/evaluate and returned in every plan) has a
    `-Input` component, whose defaulted fields are optional, and an `-Output` one, where
    every field is required (the answer always holds them). Both keep the model's title,
    and generators that name classes by title would then make one class of the two."""
    for name, component in schema.get("components", {}).get("schemas", {}).items():
        for suffix in ("-Input", "-Output"):
            if name.endswith(suffix):
                component["title"] = name.removesuffix(suffix) + suffix[1:]


def install_openapi(app: FastAPI) -> None:
    """Generate the schema once, with the problem schemas in its components (the app is built
    with `generate_unique_id_function=operation_id`)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes,
                             tags=app.openapi_tags)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
            (model, "serialization") for model in (ProblemDetail, FieldError, TraceDocument)]
        models += [(model, "validation") for model in OFF_LOOP_BODIES]
        for model, mode in models:
            generated = model.model_json_schema(ref_template="#/components/schemas/{model}",
                                                mode=mode)
            for name, definition in generated.pop("$defs", {}).items():
                components.setdefault(name, definition)
            components[model.__name__] = generated
        schema = name_enums(schema)
        _title_split_models(schema)
        _check_unique_operation_ids(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


__all__ = ["install_openapi", "operation_id", "problem_responses"]

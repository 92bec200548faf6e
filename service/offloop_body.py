"""Request bodies parsed and validated off the event loop, for routes that take large ones.

Owns: `parse_body(model, body)` (pydantic's `model_validate_json`, one pass from bytes to
the model, its failures turned into FastAPI's `RequestValidationError` with locations under
`body`, so they are answered 422 invalid-request like any other body), for a route to call
on a worker thread with the bytes it received, and `json_body_openapi(model, examples)`, the
`requestBody` entry such a route declares (FastAPI documents only the bodies it parses
itself). Why: FastAPI parses and
validates a declared body on the event loop (`json.loads`, then pydantic on the objects);
for a 58-layer MoE placement (4.75 MB) that is about 0.4 s of the loop per request, during
which /healthz and every other answer waits. Must not: decide what a valid body is (the
model does), or admit requests (the large-body gate and the solver pool do).
"""

from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_body(model: type[ModelT], body: bytes) -> ModelT:
    """`body` (JSON bytes) as `model`, or `RequestValidationError` naming the fields."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        errors = [{**err, "loc": ("body", *err.get("loc", ()))}
                  for err in error.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def json_body_openapi(model: type[BaseModel], examples: dict[str, Any]) -> dict[str, Any]:
    """The `openapi_extra` of a route that reads `model` with `read_body`: its required JSON
    request body, referring to the model's component (`service.openapi` adds it)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"},
        "examples": examples}}}}


__all__ = ["json_body_openapi", "parse_body"]

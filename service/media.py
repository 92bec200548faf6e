"""Content negotiation for the pictures and traces: `?format=` or `Accept`, and the
responses and OpenAPI entries of SVG and Trace Event JSON.

Owns: `Format` (json | svg | trace), the `?format=` and `Accept` parameters (`FormatQuery`,
`AcceptHeader`), `wanted_format(format, accept)`, `json_or_svg(report, ...)`, `svg_response(svg,
filename)`, `trace_response(document, filename)` and the OpenAPI `responses=` entries with
examples (`svg_content`, `svg_responses`, `trace_content`). Must not: render or
compute anything.
"""

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from fastapi import Header, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api_schemas.problems import ProblemCode
from service.openapi import problem_responses
from service.pictures.svg import MODEL_LABEL
from service.trace import TraceDocument

SVG_MEDIA_TYPE = "image/svg+xml"
JSON_MEDIA_TYPE = "application/json"

SVG_EXAMPLE = ('<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" '
               'role="img" aria-labelledby="timeline-title timeline-desc" width="1210" '
               'height="250" viewBox="0 0 1210 250" data-label="' + MODEL_LABEL + '">'
               '<title id="timeline-title">Pipeline timeline</title>'
               '<rect class="op" data-stage="0" data-op="F" data-micro-batch="0" '
               'data-chunk="0" data-start="0.0" data-end="1.0" x="86" y="64" width="100" '
               'height="26" fill="#3b82f6"/>...<text class="model-label">Pipeline timeline: '
               + MODEL_LABEL + '</text></svg>')
"""A shortened SVG answer, for the OpenAPI examples."""


class Format(StrEnum):
    """What a picture-capable endpoint answers with."""

    JSON = "json"
    SVG = "svg"
    TRACE = "trace"


def wanted_format(requested: Format | None, accept: str | None) -> Format:
    """`?format=` when given, else SVG when `Accept` names image/svg+xml, else JSON."""
    if requested is not None:
        return requested
    if accept and SVG_MEDIA_TYPE in accept.lower():
        return Format.SVG
    return Format.JSON


FormatQuery = Annotated[Format | None, Query(
    description="'json' (default) or 'svg'; without it, `Accept: image/svg+xml` selects SVG.")]
"""The `?format=` parameter of an endpoint that answers JSON or SVG."""

AcceptHeader = Annotated[str | None, Header(include_in_schema=False)]
"""The `Accept` header `wanted_format` reads when `?format=` is not given."""


def svg_response(svg: str, *, filename: str) -> Response:
    """An SVG document, inline, with a file name for saving."""
    return Response(content=svg, media_type=SVG_MEDIA_TYPE,
                    headers={"Content-Disposition": f'inline; filename="{filename}"'})


Report = TypeVar("Report")


def json_or_svg(report: Report, requested: Format | None, accept: str | None, *,
                        draw: Callable[[Report], str], filename: str) -> Report | Response:
    """`report` itself (JSON), or its picture `draw(report)` as an SVG named `filename` when
    `wanted_format` says SVG."""
    if wanted_format(requested, accept) == Format.SVG:
        return svg_response(draw(report), filename=filename)
    return report


def model_response(result: BaseModel) -> Response:
    """`result` as JSON, serialised once by pydantic. For an answer already built from its
    own response model and checked finite (`limits.require_finite`): FastAPI would otherwise
    dump it to Python objects and validate them again, which for a million-route placement
    took longer than planning it."""
    return Response(content=result.model_dump_json(), media_type="application/json")


def trace_response(document: dict[str, Any], *, filename: str) -> JSONResponse:
    """A Trace Event JSON object, as a download named `filename`."""
    return JSONResponse(content=document,
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def svg_content(description: str) -> dict[str, Any]:
    """The OpenAPI content entry of an SVG answer."""
    return {SVG_MEDIA_TYPE: {"schema": {"type": "string", "description": description},
                             "example": SVG_EXAMPLE}}


def svg_responses(description: str, picture: str,
                  *problems: ProblemCode) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses=` of a route that answers a picture: its 200 entry, the picture
    beside its response model's JSON (`POST /v1/mesh?format=svg`) or alone (`POST
    /v1/mesh.svg`: one media type, so client generators, which keep one per response, keep
    the picture), and the `problem_responses` of `problems`."""
    return {200: {"description": description, "content": svg_content(picture)},
            **problem_responses(*problems)}


def trace_example() -> dict[str, Any]:
    """The `TraceDocument` schema's example."""
    examples: list[dict[str, Any]] = TraceDocument.model_json_schema()["examples"]
    return examples[0]


def trace_content() -> dict[str, Any]:
    """The OpenAPI content entry of a Trace Event JSON answer."""
    return {JSON_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/TraceDocument"},
                              "example": trace_example()}}


__all__ = [
    "JSON_MEDIA_TYPE",
    "SVG_MEDIA_TYPE",
    "Format",
    "svg_content",
    "svg_responses",
    "svg_response",
    "trace_content",
    "trace_example",
    "trace_response",
    "wanted_format",
]

"""The pipeline simulation's answer, built on a solver-pool thread.

Owns: simulating a checked request and turning the result into the bytes of its answer
(JSON, the timeline SVG or Chrome trace JSON), with the finiteness check, all in one
computation for the solver pool, so that neither the simulation nor the serialisation of a
20,000-op timeline (about 10 MB of SVG) runs on the event loop. Must not: check bounds,
simulate schedules itself (`models.core.pipeline`) or build HTTP responses.
"""

import json

from api_schemas.pipeline import PipelineSimulateRequest
from models.core.pipeline.requests import simulate_request
from service import limits
from service.media import Format
from service.pictures import timeline_svg
from service.trace import trace_document


def simulate_answer(request: PipelineSimulateRequest, *, answer: Format,
                    title: str) -> bytes:
    """The simulation as `answer` asks: its JSON (`PipelineSimulateResponse`), its timeline
    picture (SVG text, UTF-8) or its trace (Trace Event JSON, written as Starlette's
    JSONResponse writes it).

    Raises:
        InvalidSpecError: the simulation has a non-finite figure.
    """
    response = simulate_request(request)
    limits.require_finite(response)
    if answer == Format.SVG:
        return timeline_svg(response, title=title).encode("utf-8")
    if answer == Format.TRACE:
        return json.dumps(trace_document(response, title=title), ensure_ascii=False,
                          allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")
    return response.model_dump_json().encode("utf-8")


__all__ = ["simulate_answer"]

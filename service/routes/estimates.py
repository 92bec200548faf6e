"""Scoring one given configuration: the evaluation and the memory lab.

Owns: POST /v1/evaluate, POST /v1/ledger/memory and its picture POST /v1/ledger/memory.svg
(schema in -> `solver.evaluate` /
`solver.memory_report` -> schema out, on a request thread: no search), with their bounds;
evaluate reads a named calibration profile through the store gate. Must not: search or
write to the store.
"""

from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Body, Response

from api_schemas.plan import MemoryReport, PlanResponse
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, EvaluateRequest
from service import limits
from service.calibration import apply_profile
from service.deps import ContextDep, SettingsDep
from service.media import (
    AcceptHeader,
    FormatQuery,
    json_or_svg,
    svg_response,
    svg_responses,
)
from service.openapi import problem_responses
from service.pictures import memory_svg
from service.solver_calls import evaluate, memory_report

router = APIRouter(tags=["estimates"])

EVALUATE_EXAMPLES = {
    "llama-3.1-405b": {
        "summary": "Llama 3.1 405B on 16,384 H100s (TP8 x PP16 x DP128)",
        "value": EVALUATE_REQUEST_EXAMPLE,
    },
}

EvaluateBody = Annotated[EvaluateRequest, Body(openapi_examples=EVALUATE_EXAMPLES)]


@router.post("/v1/evaluate", summary="Score one configuration: memory, time, fixes",
             responses=problem_responses("invalid-spec", "store-unavailable"))
async def evaluate_configuration(request: EvaluateBody, context: ContextDep) -> PlanResponse:
    """Check a configuration you already have: whether it fits (status `feasible`) or not
    (`infeasible`, still 200), the per-stage memory ledger, the step-time breakdown and its
    bottleneck, throughput and MFU, and the smallest changes that make it fit or run faster
    (as `alternatives` and `explanation.relaxations`). A broken mesh rule (tp not dividing
    the heads, degrees not matching the cluster) is 422 invalid-spec naming a valid
    alternative. `cluster.profile` applies a stored calibration profile (its newest
    version's constants)."""
    request = await apply_profile(request, store=context.store)
    limits.check_configuration(request, context.settings)
    return await to_thread.run_sync(limits.finite_answer, evaluate, request)


@router.post("/v1/ledger/memory", summary="Per-GPU memory ledger of one configuration",
             response_model=MemoryReport,
             responses=svg_responses(
                 "The ledger (JSON) or its per-stage memory stack (`?format=svg` or `Accept: "
                 "image/svg+xml`).",
                 "The memory stack picture.",
                 "invalid-spec"))
def ledger_memory(
    request: EvaluateBody, settings: SettingsDep,
    format: FormatQuery = None,
    accept: AcceptHeader = None,
) -> MemoryReport | Response:
    """The memory lab: per pipeline stage, the bytes of parameters, gradients, optimizer
    states, activations at the schedule's peak and buffers, itemised, with the capacity
    after headroom and the binding stage. Takes the evaluate request."""
    return json_or_svg(_memory_ledger(request, settings), format, accept, draw=memory_svg,
                       filename="memory.svg")


@router.post("/v1/ledger/memory.svg", summary="Per-GPU memory stack of one configuration (SVG)",
             response_class=Response,
             responses=svg_responses(
                 "One stacked bar per pipeline stage, the ledger's components as segments, "
                 "the usable capacity as a line (what `POST /v1/ledger/memory?format=svg` "
                 "answers).", "The memory stack picture.",
                 "invalid-spec"))
def ledger_memory_svg(request: EvaluateBody, settings: SettingsDep) -> Response:
    """The memory ledger of `POST /v1/ledger/memory` drawn as SVG (a deterministic model,
    not a measurement)."""
    return svg_response(memory_svg(_memory_ledger(request, settings)), filename="memory.svg")


def _memory_ledger(request: EvaluateRequest, settings: SettingsDep) -> MemoryReport:
    limits.check_configuration(request, settings)
    return limits.finite_answer(memory_report, request)


__all__ = ["router"]

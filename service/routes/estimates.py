"""Scoring one given configuration: the memory lab (and the evaluation once it lands).

Owns: POST /v1/ledger/memory. Must not: search or store.
"""

from typing import Annotated

from fastapi import APIRouter, Body

from api_schemas.plan import MemoryReport
from api_schemas.requests import EVALUATE_REQUEST_EXAMPLE, EvaluateRequest
from service import limits
from service.deps import SettingsDep
from service.openapi import problem_responses
from solver import memory_report

router = APIRouter(tags=["estimates"])

EVALUATE_EXAMPLES = {
    "llama-3.1-405b": {
        "summary": "Llama 3.1 405B on 16,384 H100s (TP8 x PP16 x DP128)",
        "value": EVALUATE_REQUEST_EXAMPLE,
    },
}

EvaluateBody = Annotated[EvaluateRequest, Body(openapi_examples=EVALUATE_EXAMPLES)]


def check_evaluate_bounds(request: EvaluateRequest, settings: SettingsDep) -> None:
    """The documented bounds of an evaluate-shaped request."""
    limits.check_cluster(request.cluster, settings)
    limits.check_training(request.training, settings)
    limits.check_parallel(request.parallel, request.training, settings)
    limits.check_model_input(request.model, settings)


@router.post("/v1/ledger/memory", summary="Per-GPU memory ledger of one configuration",
             responses=problem_responses("invalid-spec"))
def ledger_memory(request: EvaluateBody, settings: SettingsDep) -> MemoryReport:
    """The memory lab: per pipeline stage, the bytes of parameters, gradients, optimizer
    states, activations at the schedule's peak and buffers, itemised, with the capacity
    after headroom and the binding stage. Takes the evaluate request."""
    check_evaluate_bounds(request, settings)
    return memory_report(request)


__all__ = ["check_evaluate_bounds", "router"]

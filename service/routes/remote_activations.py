"""The memory lab's remote-offload what-if: stored activations moved into other pipeline
ranks' spare memory.

Owns: POST /v1/lab/remote-activations (the evaluate request in ->
`models.labs.remote_activations_report.remote_activations_report` -> schema out), with the bounds
of the configuration. Must not: size or time anything itself.
"""

from typing import Annotated

from fastapi import APIRouter, Body

from api_schemas.remote_activations import RemoteActivationsResponse
from api_schemas.requests import EvaluateRequest
from models.labs.remote_activations_report import remote_activations_report
from service import limits
from service.deps import SettingsDep
from service.openapi import problem_responses

router = APIRouter(tags=["lab"])

REMOTE_EXAMPLES = {
    "llama-3.1-70b-interleaved": {
        "summary": "Llama 3.1 70B on 64 H100s, TP8 x PP8 interleaved 1F1B (v=2): the front "
                   "ranks hold the most activations",
        "value": {"model": {"preset": "llama-3.1-70b"},
                  "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
                  "training": {"global_batch_size": 64, "sequence_length": 8192},
                  "parallel": {"tp": 8, "pp": 8, "dp": 1, "vpp": 2, "micro_batch_size": 1,
                               "schedule": "interleaved_1f1b", "zero_stage": 1,
                               "sequence_parallel": True, "recompute": "none"}},
    },
}


@router.post("/v1/lab/remote-activations",
             summary="What-if: stored activations moved to other pipeline ranks' spare memory",
             responses=problem_responses("invalid-spec"))
def remote_activations(
    request: Annotated[EvaluateRequest, Body(openapi_examples=REMOTE_EXAMPLES)],
    settings: SettingsDep,
) -> RemoteActivationsResponse:
    """Takes the evaluate request. Per pipeline rank, the memory ledger's GPU total before
    and after the ranks holding the most stored activations keep part of them in the spare
    memory of the ranks holding the least (Kimi K3's remote activation balancing), bounded
    by each receiver's free memory at its own peak; and the bytes each sender moves per step
    with their time over the link between pipeline ranks, next to the same bytes over the
    host link (a deterministic model, not a measurement)."""
    limits.check_configuration(request, settings)
    return limits.finite_answer(remote_activations_report, request)


__all__ = ["REMOTE_EXAMPLES", "router"]

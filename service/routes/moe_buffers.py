"""MoE receive buffers: DeepEP-style worst case against MoonEP's fixed size.

Owns: POST /v1/moe/buffers (schema in -> `models.core.moe.buffer_report.buffer_report` -> schema
out). Must not: size buffers itself.
"""

from typing import Annotated

from fastapi import APIRouter, Body

from api_schemas.moe_buffers import MoeBufferRequest, MoeBufferResponse
from models.core.moe.buffer_report import buffer_report
from service.core import call_core
from service.openapi import problem_responses

router = APIRouter(tags=["moe"])

BUFFER_EXAMPLES = {
    "deepseek-v3-layer": {
        "summary": "DeepSeek-V3-like layer: 8K tokens per rank, top-8, EP64, BF16 rows, "
                   "an 8 GiB budget",
        "value": {"tokens_per_rank": 8192, "top_k": 8, "ep_size": 64, "experts_per_rank": 4,
                  "hidden_size": 7168, "bytes_per_elem": 2, "token_padding": 128,
                  "budget_bytes": 8589934592},
    },
}


@router.post("/v1/moe/buffers", summary="Receive buffer: DeepEP worst case vs MoonEP",
             responses=problem_responses("invalid-spec"))
def moe_buffers(
    request: Annotated[MoeBufferRequest, Body(openapi_examples=BUFFER_EXAMPLES)],
) -> MoeBufferResponse:
    """Rows and bytes a rank reserves to receive one layer's dispatch: sized for the
    worst-case imbalance of a copy-free path (S*K*R, DeepEP-style) or fixed by exact balance
    (S*K plus padding, MoonEP); with a budget, which of the two fits (a deterministic model,
    not a measurement)."""
    return call_core(buffer_report, request)


__all__ = ["router"]

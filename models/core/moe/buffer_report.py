"""The receive-buffer comparison behind POST /v1/moe/buffers: request in, response out.

Owns: `buffer_report(request)`, which sizes both buffers with
`models.core.moe.balance.receive_buffer_rows` and checks them against the budget. Must not: know
HTTP.
"""

from api_schemas.moe_buffers import MoeBufferRequest, MoeBufferResponse
from models.core.moe.balance import receive_buffer_rows

SOURCE = ("Kimi K3, arXiv:2607.24653, Sec. 5.2.1 (DeepEP's copy-free worst case S*K*R "
          "against MoonEP's S*K); MoonEP padding per expert group")


def buffer_report(request: MoeBufferRequest) -> MoeBufferResponse:
    """Both receive buffers of one layer's dispatch and whether each fits the budget.

    Raises:
        InvalidSpecError: a non-positive size.
    """
    sizes = receive_buffer_rows(
        tokens_per_rank=request.tokens_per_rank, top_k=request.top_k,
        ep_size=request.ep_size, experts_per_rank=request.experts_per_rank,
        hidden_size=request.hidden_size, bytes_per_elem=request.bytes_per_elem,
        token_padding=request.token_padding)
    budget = request.budget_bytes
    return MoeBufferResponse(
        deepep_worst_case_rows=sizes.deepep_worst_case_rows,
        deepep_worst_case_bytes=sizes.deepep_worst_case_bytes,
        moonep_rows=sizes.moonep_rows, moonep_padded_rows=sizes.moonep_padded_rows,
        moonep_padded_bytes=sizes.moonep_padded_bytes,
        ratio=sizes.deepep_worst_case_bytes / sizes.moonep_padded_bytes,
        budget_bytes=budget,
        deepep_fits=None if budget is None else sizes.deepep_worst_case_bytes <= budget,
        moonep_fits=None if budget is None else sizes.moonep_padded_bytes <= budget,
        source=SOURCE)


__all__ = ["buffer_report"]

"""Request and response of POST /v1/moe/buffers: the per-rank receive buffer one MoE layer's
dispatch needs, DeepEP-style (sized for the worst-case imbalance) against MoonEP (fixed by
exact balance).

Owns: the shapes only. Must not: size anything (`models.core.moe.buffer_report` does).
"""

from pydantic import ConfigDict, Field

from api_schemas._base import ResultModel, SpecModel
from api_schemas.units import Bytes, PositiveInt


class MoeBufferRequest(SpecModel):
    """One MoE layer's dispatch on one expert-parallel group."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra={"examples": [{
        "tokens_per_rank": 8192, "top_k": 8, "ep_size": 64, "experts_per_rank": 4,
        "hidden_size": 7168, "bytes_per_elem": 2, "token_padding": 128,
        "budget_bytes": 8589934592}]})

    tokens_per_rank: PositiveInt = Field(description="S: tokens routed from each rank.",
                                         examples=[8192])
    top_k: PositiveInt = Field(description="K: experts per token.", examples=[8])
    ep_size: PositiveInt = Field(description="R: ranks of the expert-parallel group.",
                                 examples=[64])
    experts_per_rank: PositiveInt = Field(description="Home experts per rank (E/R).",
                                          examples=[4])
    hidden_size: PositiveInt = Field(description="Elements per token row.", examples=[7168])
    bytes_per_elem: PositiveInt = Field(default=2, description="Bytes per element of a "
                                        "dispatched row (2 for BF16, 1 for FP8).", examples=[2])
    token_padding: PositiveInt = Field(default=1, description="Rows each expert group is "
                                       "padded to (MoonEP alignment).", examples=[128])
    budget_bytes: Bytes | None = Field(default=None, description="Memory a rank can give the "
                                       "receive buffer; when set, the answer says which "
                                       "buffer fits.", examples=[8589934592])


class MoeBufferResponse(ResultModel):
    """Rows and bytes of each receive buffer, and whether each fits the budget."""

    deepep_worst_case_rows: int = Field(description="S*K*R: every assignment of every source "
                                        "on one rank (copy-free layout).")
    deepep_worst_case_bytes: Bytes = Field(description="Those rows in bytes.")
    moonep_rows: int = Field(description="S*K: the load exact balance fixes.")
    moonep_padded_rows: int = Field(description="S*K plus per-expert-group padding, aligned.")
    moonep_padded_bytes: Bytes = Field(description="The padded rows in bytes.")
    ratio: float = Field(description="deepep_worst_case_bytes / moonep_padded_bytes.")
    budget_bytes: Bytes | None = Field(default=None, description="The budget given.")
    deepep_fits: bool | None = Field(default=None, description="Worst-case buffer within the "
                                     "budget (null without a budget).")
    moonep_fits: bool | None = Field(default=None, description="MoonEP buffer within the "
                                     "budget (null without a budget).")
    source: str = Field(description="Where the sizes come from.")


__all__ = ["MoeBufferRequest", "MoeBufferResponse"]

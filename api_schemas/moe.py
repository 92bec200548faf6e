"""Request and response of POST /v1/moe/placement (MoonEP redundant-expert placement).

Owns: the contract names `num_experts`, `top_k`, `tokens` in and `rank_loads`,
`redundant_experts`, `routes` (`source`, `expert`, `destination`, `tokens`), `wall_time_s`
out, plus the added accounting fields: rank balance after placement, and apart from it the
expert work inside each rank (tokens per expert, tile-padded rows, and with a GPU and the
expert shape the sum of its experts' GEMM times and their maximum over ranks); and the
batch form, `layers` in (one matrix per MoE layer) and one placement per layer out. Must not:
plan anything; domain checks that need the whole matrix (E divisible by R, equal row sums)
are made by `solver.placement`.
"""

from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, model_validator

from api_schemas._base import ResultModel, SpecModel
from api_schemas.dtypes import DType
from api_schemas.units import Bytes, NonNegativeInt, PositiveInt, Seconds, TimeLimitSeconds


class PlacementPlanner(StrEnum):
    """Which planner answers a placement request."""

    CONSTRUCTIVE = "constructive"
    """Fast online planner (fill each underloaded rank once); sub-millisecond at EP64."""
    EXACT = "exact"
    """CP-SAT reference: provably fewest redundant experts, then fewest remote tokens.
    For small instances (E <= 32, R <= 8); larger ones may stop at the time limit."""


class RouteListing(StrEnum):
    """Which token routes a placement response lists."""

    ALL = "all"
    """Every route: one per positive (source, expert, destination)."""
    SHARED = "shared"
    """Only the routes of experts with tokens computed off their home rank (the splits a
    dispatcher needs); every other token goes to its expert's home rank, as the counts say."""
    NONE = "none"
    """No routes (loads, replicas and traffic only)."""


class PlacementStatus(StrEnum):
    """How good the returned placement is known to be."""

    OPTIMAL = "optimal"
    """Fewest redundant experts, proven (by CP-SAT, or by meeting the per-rank lower bound)."""
    FEASIBLE = "feasible"
    """Balanced and within the E/R bound, optimality not proven."""


_EXAMPLE_TOKENS = [
    [6, 2, 1, 1, 2, 1, 2, 1],
    [5, 3, 2, 0, 1, 2, 1, 2],
    [4, 4, 1, 1, 2, 0, 2, 2],
    [6, 3, 0, 2, 1, 1, 2, 1],
]


TokenMatrix = Annotated[list[list[NonNegativeInt]], Field(min_length=1)]
"""One layer's counts: at least one row (rank), like `tokens`."""


class MoePlacementRequest(SpecModel):
    """Token counts of one MoE layer and micro-batch (or of several layers), as the router
    produced them."""

    num_experts: PositiveInt = Field(
        description="Routed experts E; rank r homes experts r*E/R .. (r+1)*E/R - 1.",
        examples=[8],
    )
    top_k: PositiveInt = Field(description="Experts per token K.", examples=[2])
    tokens: list[list[NonNegativeInt]] | None = Field(
        default=None, min_length=1,
        description="R rows of E counts: tokens[r][e] = tokens on source rank r routed to "
        "expert e. Every row sums to S*K (S tokens per rank). Give `tokens` (one layer) or "
        "`layers` (several).",
        examples=[_EXAMPLE_TOKENS],
    )
    layers: list[TokenMatrix] | None = Field(
        default=None, min_length=1,
        description="Instead of `tokens`: one matrix per MoE layer of a model, each shaped "
        "like `tokens` (the same R rows of E counts; within a layer every row sums to that "
        "layer's S*K). The answer is then `{\"layers\": [one placement per layer], "
        "\"wall_time_s\"}`. Constructive planner only.",
        examples=[[_EXAMPLE_TOKENS, _EXAMPLE_TOKENS]],
    )
    planner: PlacementPlanner = Field(
        default=PlacementPlanner.CONSTRUCTIVE,
        description="'constructive' (online) or 'exact' (CP-SAT reference).",
    )
    routes: RouteListing = Field(
        default=RouteListing.ALL,
        description="Which routes the answer lists: 'all' (default, every positive (source, "
        "expert, destination)), 'shared' (only experts with replicas: every other token goes "
        "to its expert's home rank; at E=256, R=64 about an eighth of the routes) or 'none'. "
        "The listing, not the planning, dominates a large answer's time and size.",
        examples=["shared"],
    )
    expert_weight_bytes: Bytes = Field(
        default=0,
        description="Bytes of one expert's weights, for `prefetch_bytes` (DeepSeek-V3 expert "
        "in BF16: 3 x 7168 x 2048 x 2 = 88080384).",
        examples=[88080384],
    )
    expert_grad_bytes: Bytes = Field(
        default=0,
        description="Bytes of one expert's gradient, for `grad_reduce_bytes` (fp32 gradients "
        "of the same expert: 176160768).",
        examples=[176160768],
    )
    time_limit_s: TimeLimitSeconds = Field(
        default=10.0,
        description="CP-SAT time limit per phase of the exact planner (ignored otherwise).",
    )
    tile_rows: PositiveInt = Field(
        default=128, le=4096,
        description="GEMM tile rows each expert's tokens are padded to (MoonEP "
        "token_padding).", examples=[128])
    gpu: str | None = Field(
        default=None, max_length=100,
        description="GPU preset id, to time each rank's expert GEMMs; needs hidden_size and "
        "expert_ffn_hidden_size too. Null: rows only.", examples=["h100-sxm5-80gb"])
    hidden_size: PositiveInt | None = Field(
        default=None, le=1_000_000, description="Model hidden size h (expert GEMM input).",
        examples=[7168])
    expert_ffn_hidden_size: PositiveInt | None = Field(
        default=None, le=1_000_000, description="Routed expert intermediate width f.",
        examples=[2048])
    compute_dtype: DType = Field(default=DType.BF16,
                                 description="GEMM input format for the expert times.")

    @model_validator(mode="after")
    def _rows_have_num_experts(self) -> Self:
        if (self.tokens is None) == (self.layers is None):
            raise ValueError("give the token counts either as `tokens` (one layer) or as "
                             "`layers` (several), not both and not neither")
        matrices = [("tokens", self.tokens)] if self.tokens is not None else \
            [(f"layers[{i}]", x) for i, x in enumerate(self.layers or [])]
        for name, matrix in matrices:
            if len(matrix) != len(matrices[0][1]):
                raise ValueError(f"{name} has {len(matrix)} rows but layers[0] has "
                                 f"{len(matrices[0][1])}: every layer needs one row per rank")
            for r, row in enumerate(matrix):
                if len(row) != self.num_experts:
                    raise ValueError(
                        f"{name}[{r}] has {len(row)} counts but num_experts={self.num_experts}: "
                        "give one count per expert in every row"
                    )
        if self.layers is not None and self.planner == PlacementPlanner.EXACT:
            raise ValueError("the exact planner takes one layer per request (`tokens`); "
                             "`layers` are planned by the constructive planner")
        if self.top_k > self.num_experts:
            raise ValueError(
                f"top_k={self.top_k} exceeds num_experts={self.num_experts}: lower top_k"
            )
        shape = (self.gpu, self.hidden_size, self.expert_ffn_hidden_size)
        if any(x is not None for x in shape) and any(x is None for x in shape):
            raise ValueError("timing the expert GEMMs needs gpu, hidden_size and "
                             "expert_ffn_hidden_size together (or none of them)")
        return self


class MoeRoute(ResultModel):
    """Tokens of one expert sent from one source rank to one destination rank."""

    source: NonNegativeInt = Field(
        description="Source rank (where the tokens live).", examples=[1]
    )
    expert: NonNegativeInt = Field(description="Expert id.", examples=[0])
    destination: NonNegativeInt = Field(
        description="Rank that computes them (the home rank or a rank hosting a replica).",
        examples=[1],
    )
    tokens: PositiveInt = Field(description="Number of tokens.", examples=[5])


class MoePlacementResponse(ResultModel):
    """A placement with exact balance and its accounting."""

    planner: PlacementPlanner = Field(description="Planner that produced the placement.")
    status: PlacementStatus = Field(description="'optimal' (proven) or 'feasible'.")
    tokens_per_rank: PositiveInt = Field(
        description="S, from S*K*R = total assignments.", examples=[8]
    )
    capacity_per_rank: PositiveInt = Field(
        description="S*K, the load every rank receives.", examples=[16]
    )
    rank_loads: list[NonNegativeInt] = Field(
        description="Tokens each rank computes (all equal to S*K).", examples=[[16, 16, 16, 16]]
    )
    redundant_experts: list[list[NonNegativeInt]] = Field(
        description="Per rank, the foreign experts it hosts (prefetched); at most E/R each.",
        examples=[[[], [0], [1], [1]]],
    )
    routes: list[MoeRoute] = Field(
        description="Every positive (source, expert, destination) token flow the request's "
        "`routes` listing asks for (all of them by default); per listed (source, expert) the "
        "tokens sum to the request's count.",
        examples=[[{"source": 0, "expert": 0, "destination": 0, "tokens": 6},
                   {"source": 1, "expert": 0, "destination": 1, "tokens": 5}]],
    )
    routes_listed: RouteListing = Field(
        default=RouteListing.ALL,
        description="Which routes `routes` holds: 'all', 'shared' (experts with replicas "
        "only) or 'none'.",
    )
    num_redundant_experts: NonNegativeInt = Field(
        description="Replicas over all ranks.", examples=[3]
    )
    max_redundant_per_rank: NonNegativeInt = Field(
        description="Replicas on the busiest rank.", examples=[1]
    )
    redundant_bound_per_rank: PositiveInt = Field(
        description="E/R (Kimi K3 Sec. 5.2.1).", examples=[2]
    )
    lower_bound_per_rank: list[NonNegativeInt] = Field(
        description="Fewest replicas each rank needs in any exactly balanced placement.",
        examples=[[0, 1, 1, 1]],
    )
    bound_holds: bool = Field(
        description="lower_bound_per_rank <= hosted replicas <= E/R on every rank."
    )
    remote_tokens: NonNegativeInt = Field(
        description="Tokens whose destination differs from their source rank.", examples=[37]
    )
    migrated_tokens: NonNegativeInt = Field(
        description="Tokens computed on a replica instead of their expert's home rank.",
        examples=[17],
    )
    prefetch_bytes: Bytes = Field(
        description="Expert weights copied to replicas (forward).", examples=[264241152]
    )
    grad_reduce_bytes: Bytes = Field(
        description="Replica gradients reduced back to home ranks (backward).",
        examples=[528482304],
    )
    no_redundancy_imbalance: float = Field(
        ge=1.0, description="Max/mean rank load with every expert on its home rank only.",
        examples=[2.0625],
    )
    wall_time_s: Seconds = Field(
        description="Planner wall time, validation and routes included.", examples=[0.0006]
    )
    rank_load_imbalance: float = Field(
        ge=1.0, description="Rank balance after placement: max/mean of "
        "rank_loads (1.0 = every rank computes S*K tokens).", examples=[1.0])
    rank_expert_tokens: list[list[NonNegativeInt]] = Field(
        description="Per rank, the tokens it computes for each expert "
        "(R rows of E counts, from the routes): the skew left inside each rank.",
        examples=[[[6, 2, 0, 0, 0, 0, 0, 0]]])
    rank_gemm_rows: list[NonNegativeInt] = Field(
        description="Per rank, GEMM rows after padding each expert's "
        "tokens to whole tiles (`tile_rows`).", examples=[[256, 384, 256, 384]])
    gemm_rows_imbalance: float = Field(
        ge=1.0, description="Intra-rank expert skew in rows: max/mean of "
        "rank_gemm_rows (can exceed 1 while rank_load_imbalance is 1).", examples=[1.2])
    rank_expert_gemm_s: list[Seconds] | None = Field(
        default=None, description="Per rank, the sum of its experts' forward GEMM times "
        "(gate+up and down, each expert at its padded rows); null without gpu and shapes.",
        examples=[[0.00031, 0.00042, 0.00031, 0.00042]])
    expert_gemm_makespan_s: Seconds | None = Field(
        default=None, description="Max over ranks of rank_expert_gemm_s: the layer's "
        "forward expert time, set by the slowest rank.", examples=[0.00042])
    expert_gemm_imbalance: float | None = Field(
        default=None, ge=1.0, description="Max/mean of rank_expert_gemm_s.", examples=[1.15])


class MoePlacementLayersResponse(ResultModel):
    """Placements of several layers, answered together (request with `layers`)."""

    layers: list[MoePlacementResponse] = Field(
        description="One placement per layer, in request order; each layer's `wall_time_s` "
        "is its share (the call's planning time over the layers).")
    wall_time_s: Seconds = Field(
        description="Planner wall time of all layers together, validation and routes "
        "included.", examples=[0.02])


__all__ = [
    "MoePlacementLayersResponse",
    "MoePlacementRequest",
    "MoePlacementResponse",
    "MoeRoute",
    "PlacementPlanner",
    "PlacementStatus",
    "RouteListing",
]

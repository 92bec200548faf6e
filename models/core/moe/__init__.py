"""Mixture-of-experts costs of expert parallelism (pure functions, no solver).

Owns: all-to-all payload and its intra/inter-node split (`traffic`), load imbalance,
receive buffers, capacity and redundant-expert traffic (`balance`), the expert GEMM rows
and time inside a rank (`expert_gemm`), the host side of a dropless MoE layer (token-count
synchronisation, per-expert launches, CUDA graph regions: `host_issue`), and the synthetic
routing skews used by tests and benchmarks (`skew`). Must not: import `solver` or
OR-Tools, or compute collective times.
"""

from models.core.moe.balance import (
    CapacityOutcome,
    CapacityPolicy,
    ReceiveBuffer,
    RedundantExpertTraffic,
    capacity_outcome,
    expert_capacity,
    expert_weight_bytes,
    home_rank_loads,
    imbalance_factor,
    receive_buffer_rows,
    redundant_expert_traffic,
)
from models.core.moe.expert_gemm import (
    DEFAULT_TILE_ROWS,
    expert_forward_gemm_s,
    padded_rows,
    rank_expert_gemm_s,
)
from models.core.moe.skew import (
    RoutingSkew,
    SkewKind,
    expert_popularity,
    routing_counts,
    sample_routing,
    tight_redundancy_bound,
    tight_routing_counts,
    tight_tokens_per_rank,
)
from models.core.moe.traffic import (
    AllToAllPayload,
    DispatchDedup,
    EpRouting,
    EpTrafficSplit,
    all_to_all_payload,
    ep_dispatch_split,
    expected_distinct_groups,
    experts_per_node_at_ib_parity,
    max_experts_at_same_ib_cost,
)

__all__ = [
    "DEFAULT_TILE_ROWS",
    "expert_forward_gemm_s",
    "padded_rows",
    "rank_expert_gemm_s",
    "AllToAllPayload",
    "CapacityOutcome",
    "CapacityPolicy",
    "DispatchDedup",
    "EpRouting",
    "EpTrafficSplit",
    "ReceiveBuffer",
    "RedundantExpertTraffic",
    "RoutingSkew",
    "SkewKind",
    "all_to_all_payload",
    "capacity_outcome",
    "ep_dispatch_split",
    "expected_distinct_groups",
    "expert_capacity",
    "expert_popularity",
    "expert_weight_bytes",
    "experts_per_node_at_ib_parity",
    "home_rank_loads",
    "imbalance_factor",
    "max_experts_at_same_ib_cost",
    "receive_buffer_rows",
    "redundant_expert_traffic",
    "routing_counts",
    "sample_routing",
    "tight_redundancy_bound",
    "tight_routing_counts",
    "tight_tokens_per_rank",
]

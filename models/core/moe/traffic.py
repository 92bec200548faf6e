"""Expert-parallel all-to-all traffic: payload bytes and their intra/inter-node split.

Owns: the bytes one EP rank sends in the dispatch and combine all-to-alls of one MoE layer
(hidden rows, FP8 scales, routing metadata), the expected number of copies of a token that
cross the inter-node network or NVLink under unrestricted and node-limited routing, with
and without DeepSeek-V3's one-IB-copy-per-node forwarding, the worst cases, and the
"experts per token at equal IB cost" arithmetic of DeepSeek-V3. Must not: turn bytes into
time (collective timing lives with the collectives model) or plan placements.

Counting basis (stated once, used throughout): bytes a single source rank sends for one MoE
layer in the forward pass. Dispatch sends each token to its experts; combine returns the
same rows. The backward pass repeats the pair with gradients (dispatch's backward is a
combine and vice versa), which the step-time model accounts for.
"""

import math
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from models.errors import InvalidSpecError

ROUTING_INDEX_BYTES = 4
"""int32 expert index per (token, expert) assignment (MoonEP README: `topk_experts_sk`
[S, K] int32)."""
ROUTING_WEIGHT_BYTES = 4
"""fp32 gate weight per assignment (MoonEP README: `route_weights_sk` [S, K] fp32)."""
FP8_SCALE_BLOCK = 128
"""Elements per FP8 scale along the hidden dim: DeepSeek-V3 arXiv:2412.19437 Sec. 3.3.1
(1x128 tile-wise activation quantisation)."""
FP8_SCALE_BYTES = 4
"""One fp32 scale per 1x128 tile (DeepSeek-V3 Sec. 3.3.1)."""


class DispatchDedup(StrEnum):
    """How many copies of one token a source sends."""

    PER_EXPERT = "per_expert"
    """One copy per (token, expert) assignment: the seed formula tokens x top_k x width."""
    PER_RANK = "per_rank"
    """One copy per distinct destination rank (a rank holding two chosen experts gets one)."""
    PER_NODE = "per_node"
    """DeepSeek-V3: one IB copy per distinct destination node, forwarded over NVLink to the
    ranks of that node holding the token's experts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllToAllPayload:
    """Bytes one source rank sends in one MoE layer's forward dispatch and combine."""

    assignments: int
    """S x K rows (one per token-expert assignment)."""
    dispatch_bytes: int
    """Hidden rows of the dispatch at its precision."""
    dispatch_scale_bytes: int
    """Per-tile scales of an FP8 dispatch (0 for 16-bit dispatch)."""
    metadata_bytes: int
    """Expert index and gate weight per assignment."""
    combine_bytes: int
    """Hidden rows returned by the combine at its precision."""
    total_bytes: int
    """Sum of the four above (every assignment counted, those that stay on-rank included)."""
    off_rank_bytes: int
    """Expected share that leaves the rank under uniform routing: total x (R-1)/R."""


def all_to_all_payload(
    *, tokens_per_rank: int, top_k: int, hidden_size: int, ep_size: int,
    dispatch_bytes_per_elem: int = 2, combine_bytes_per_elem: int = 2,
    fp8_scales: bool = False,
) -> AllToAllPayload:
    """Dispatch + combine payload of one MoE layer for one source rank (forward).

    payload = S*K*H*(b_dispatch + b_combine) + S*K*(index + weight) + FP8 scales
    (S*K*ceil(H/128)*4 when the dispatch is FP8).

    Source: seed ledger Sec. 6.1 (payload proportional to tokens x top_k x width x bytes,
    plus routing metadata); DeepSeek-V3 arXiv:2412.19437 Sec. 3.3.1 and 3.2.2 (FP8 dispatch
    with 1x128 scales, BF16 combine); DeepEP README benchmark setting (4096 tokens, hidden
    7168, top-8, FP8 dispatch, BF16 combine).
    Legend: S=tokens_per_rank, K=top_k, H=hidden_size, R=ep_size.
    Assumes: no capacity padding (see `capacity_outcome` for padded or dropping layouts).

    Raises:
        InvalidSpecError: on a non-positive size.
    """
    for name, value in (("tokens_per_rank", tokens_per_rank), ("top_k", top_k),
                        ("hidden_size", hidden_size), ("ep_size", ep_size),
                        ("dispatch_bytes_per_elem", dispatch_bytes_per_elem),
                        ("combine_bytes_per_elem", combine_bytes_per_elem)):
        if value < 1:
            raise InvalidSpecError(f"{name}={value} must be at least 1", field=name)
    s, k, h, r = tokens_per_rank, top_k, hidden_size, ep_size
    rows = s * k
    dispatch = rows * h * dispatch_bytes_per_elem
    scales = rows * math.ceil(h / FP8_SCALE_BLOCK) * FP8_SCALE_BYTES if fp8_scales else 0
    metadata = rows * (ROUTING_INDEX_BYTES + ROUTING_WEIGHT_BYTES)
    combine = rows * h * combine_bytes_per_elem
    total = dispatch + scales + metadata + combine
    return AllToAllPayload(
        assignments=rows, dispatch_bytes=dispatch, dispatch_scale_bytes=scales,
        metadata_bytes=metadata, combine_bytes=combine, total_bytes=total,
        off_rank_bytes=total * (r - 1) // r,
    )


def expected_distinct_groups(
    *, num_experts: int, num_groups: int, top_k: int, eligible_groups: int | None = None
) -> float:
    """Expected number of distinct groups holding a token's K experts.

    The K experts are drawn uniformly without replacement from the E/G * g experts of
    g = `eligible_groups` groups (all G when None); a group is empty with probability
    C(n - E/G, K) / C(n, K), n = g * E/G, so the mean is g * (1 - C(n - E/G, K) / C(n, K)).
    Legend: E=num_experts, G=num_groups (ranks or nodes), K=top_k, g=eligible_groups.
    Assumes: uniform routing over the eligible groups (balanced router).

    Raises:
        InvalidSpecError: when G does not divide E or K exceeds the eligible experts.
    """
    g = num_groups if eligible_groups is None else eligible_groups
    if num_groups < 1 or num_experts % num_groups:
        raise InvalidSpecError(
            f"num_groups={num_groups} must divide num_experts={num_experts}", field="num_groups"
        )
    if not 1 <= g <= num_groups:
        raise InvalidSpecError(
            f"eligible_groups={g} must lie in [1, {num_groups}]", field="eligible_groups"
        )
    per_group = num_experts // num_groups
    pool = g * per_group
    if not 1 <= top_k <= pool:
        raise InvalidSpecError(
            f"top_k={top_k} must lie in [1, {pool}] (experts on the eligible groups)",
            field="top_k",
        )
    empty = Fraction(math.comb(pool - per_group, top_k), math.comb(pool, top_k))
    return float(g * (1 - empty))


@dataclass(frozen=True, slots=True, kw_only=True)
class EpTrafficSplit:
    """Expected copies per token and bytes per source rank of one dispatch, by link."""

    num_nodes: int
    inter_node_copies_per_token: float
    """Copies of one token that cross the inter-node network (IB)."""
    intra_node_copies_per_token: float
    """Copies moved over NVLink (direct in-node sends plus IB-to-NVLink forwards)."""
    inter_node_bytes: int
    intra_node_bytes: int
    worst_case_inter_node_copies: int
    """Largest inter-node copy count any single token can cause."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpRouting:
    """How one expert-parallel group routes a token: the experts it draws, over how many
    ranks and nodes, and how many copies of it a source sends (`ep_dispatch_split`)."""

    top_k: int
    num_experts: int
    ep_size: int
    ranks_per_node: int
    max_nodes_per_token: int | None = None
    """Node-limited routing's M (DeepSeek-V3: 4); None: every node of the group."""
    dedup: DispatchDedup = DispatchDedup.PER_NODE


def ep_dispatch_split(routing: EpRouting, *, tokens_per_rank: int, hidden_size: int,
                      bytes_per_elem: int) -> EpTrafficSplit:
    """Inter-node (IB) and intra-node (NVLink) copies of one dispatch, in expectation.

    With N = R / ranks_per_node nodes, node-limited routing draws a token's K experts from
    M chosen nodes (DeepSeek-V3: M = 4); unrestricted routing is M = N. By symmetry a token's
    copies land on a remote node with probability (N-1)/N, so:
    PER_EXPERT: IB = K(N-1)/N, NVLink = K(rpn-1)/R;
    PER_RANK:   IB = D_rank (N-1)/N, NVLink = D_rank (rpn-1)/R;
    PER_NODE:   IB = D_node (N-1)/N, NVLink = D_rank (rpn-1)/rpn (each destination rank but
    the IB landing GPU of its node gets an NVLink copy), where D_rank and D_node are the
    expected distinct ranks and nodes of `expected_distinct_groups`.

    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.2 (node-limited routing, at most 4 nodes;
    IB to the same in-node index, then NVLink forwarding) and Sec. 2.1.2 (node-limited
    routing); DeepEP (per-rank deduplicated normal kernels).
    Legend: S=tokens_per_rank, K=top_k, E=num_experts, R=ep_size, rpn=ranks_per_node,
    M=max_nodes_per_token, N=R/rpn.
    Assumes: EP ranks are node-contiguous; the router is balanced within the M nodes and the
    M nodes are a uniform subset (independent of the source rank).

    Raises:
        InvalidSpecError: on sizes that do not divide or an M outside [1, N].
    """
    n, m = _routed_nodes(routing)
    k, rpn, ep_size, num_experts = (routing.top_k, routing.ranks_per_node, routing.ep_size,
                                    routing.num_experts)
    d_node = expected_distinct_groups(num_experts=num_experts, num_groups=n, top_k=k,
                                      eligible_groups=m)
    ranks_eligible = m * rpn
    d_rank = expected_distinct_groups(num_experts=num_experts, num_groups=ep_size, top_k=k,
                                      eligible_groups=ranks_eligible)
    remote = (n - 1) / n
    if routing.dedup == DispatchDedup.PER_EXPERT:
        ib, nvl, worst = k * remote, k * (rpn - 1) / ep_size, k if n > 1 else 0
    elif routing.dedup == DispatchDedup.PER_RANK:
        worst = min(k, (n - 1) * rpn, m * rpn)
        ib, nvl = d_rank * remote, d_rank * (rpn - 1) / ep_size
    else:
        ib, nvl, worst = d_node * remote, d_rank * (rpn - 1) / rpn, min(k, n - 1, m)
    row_bytes = hidden_size * bytes_per_elem
    return EpTrafficSplit(
        num_nodes=n, inter_node_copies_per_token=ib, intra_node_copies_per_token=nvl,
        inter_node_bytes=round(tokens_per_rank * ib * row_bytes),
        intra_node_bytes=round(tokens_per_rank * nvl * row_bytes),
        worst_case_inter_node_copies=worst,
    )


def _routed_nodes(routing: EpRouting) -> tuple[int, int]:
    """(N, M): the nodes of the EP group and those a token's experts are drawn from.

    Raises:
        InvalidSpecError: on sizes that do not divide or an M outside [1, N].
    """
    ranks_per_node, ep_size = routing.ranks_per_node, routing.ep_size
    if ranks_per_node < 1 or ep_size % ranks_per_node:
        raise InvalidSpecError(
            f"ranks_per_node={ranks_per_node} must divide ep_size={ep_size}: EP groups are "
            "assumed node-contiguous", field="ranks_per_node",
        )
    if routing.num_experts % ep_size:
        raise InvalidSpecError(
            f"ep_size={ep_size} must divide num_experts={routing.num_experts}", field="ep_size"
        )
    n = ep_size // ranks_per_node
    m = n if routing.max_nodes_per_token is None else routing.max_nodes_per_token
    if not 1 <= m <= n:
        raise InvalidSpecError(
            f"max_nodes_per_token={m} must lie in [1, {n}] (nodes in the EP group)",
            field="max_nodes_per_token",
        )
    return n, m


def experts_per_node_at_ib_parity(
    *, nvlink_bandwidth_bytes_per_s: float, ib_bandwidth_bytes_per_s: float
) -> float:
    """Experts per node a token can reach over NVLink while its one IB copy is in flight.

    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.2 (NVLink 160 GB/s is about 3.2x IB
    50 GB/s, so a token can select on average 3.2 experts per node at no extra cost).
    Legend: ratio = NVLink bandwidth / IB bandwidth.
    """
    if ib_bandwidth_bytes_per_s <= 0 or nvlink_bandwidth_bytes_per_s <= 0:
        raise InvalidSpecError("bandwidths must be positive", field="ib_bandwidth_bytes_per_s")
    return nvlink_bandwidth_bytes_per_s / ib_bandwidth_bytes_per_s


def max_experts_at_same_ib_cost(
    *, max_nodes_per_token: int, nvlink_bandwidth_bytes_per_s: float,
    ib_bandwidth_bytes_per_s: float,
) -> int:
    """Routed experts per token that keep node-limited IB traffic unchanged (rounded).

    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.2 ("a maximum of 13 experts (4 nodes x
    3.2 experts/node)").
    Legend: M=max_nodes_per_token; result = round(M x NVLink/IB).
    """
    if max_nodes_per_token < 1:
        raise InvalidSpecError(
            f"max_nodes_per_token={max_nodes_per_token} must be at least 1",
            field="max_nodes_per_token",
        )
    per_node = experts_per_node_at_ib_parity(
        nvlink_bandwidth_bytes_per_s=nvlink_bandwidth_bytes_per_s,
        ib_bandwidth_bytes_per_s=ib_bandwidth_bytes_per_s,
    )
    return round(max_nodes_per_token * per_node)


__all__ = [
    "AllToAllPayload",
    "DispatchDedup",
    "EpTrafficSplit",
    "all_to_all_payload",
    "ep_dispatch_split",
    "expected_distinct_groups",
    "experts_per_node_at_ib_parity",
    "max_experts_at_same_ib_cost",
]

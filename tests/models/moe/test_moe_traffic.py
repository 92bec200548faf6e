"""All-to-all payload and the intra/inter-node split (models/core/moe/traffic.py)."""

import math

import numpy as np
import pytest

from models.core.moe import (
    DispatchDedup,
    EpRouting,
    all_to_all_payload,
    ep_dispatch_split,
    expected_distinct_groups,
    experts_per_node_at_ib_parity,
    max_experts_at_same_ib_cost,
)
from models.errors import InvalidSpecError

# DeepSeek-V3 training layout (arXiv:2412.19437 Sec. 3.2): 256 routed experts, top-8,
# 64-way EP over 8 nodes of 8 GPUs, at most 4 nodes per token.
DSV3 = {"num_experts": 256, "top_k": 8, "ep_size": 64, "ranks_per_node": 8}


def test_all_to_all_payload_pins_formula() -> None:
    """DeepEP's benchmark setting (4096 tokens, hidden 7168, top-8, FP8 dispatch with 1x128
    fp32 scales, BF16 combine); the byte counts are hand-computed from the formula."""
    p = all_to_all_payload(tokens_per_rank=4096, top_k=8, hidden_size=7168, ep_size=64,
                           dispatch_bytes_per_elem=1, combine_bytes_per_elem=2, fp8_scales=True)
    rows = 4096 * 8
    assert p.assignments == rows == 32768
    assert p.dispatch_bytes == rows * 7168 == 234_881_024
    assert p.dispatch_scale_bytes == rows * 56 * 4 == 7_340_032
    assert p.metadata_bytes == rows * 8 == 262_144
    assert p.combine_bytes == rows * 7168 * 2 == 469_762_048
    assert p.total_bytes == 712_245_248
    assert p.off_rank_bytes == 712_245_248 * 63 // 64


def test_all_to_all_payload_is_linear_in_tokens_and_top_k() -> None:
    base = all_to_all_payload(tokens_per_rank=512, top_k=2, hidden_size=1024, ep_size=8)
    double_k = all_to_all_payload(tokens_per_rank=512, top_k=4, hidden_size=1024, ep_size=8)
    double_s = all_to_all_payload(tokens_per_rank=1024, top_k=2, hidden_size=1024, ep_size=8)
    assert double_k.total_bytes == double_s.total_bytes == 2 * base.total_bytes
    assert base.dispatch_scale_bytes == 0  # 16-bit dispatch carries no scales


def test_all_to_all_payload_rejects_non_positive_sizes() -> None:
    with pytest.raises(InvalidSpecError, match="top_k=0"):
        all_to_all_payload(tokens_per_rank=8, top_k=0, hidden_size=8, ep_size=2)


def _simulate_distinct_remote_nodes(
    *, num_experts: int, num_nodes: int, top_k: int, max_nodes: int, tokens: int, seed: int
) -> float:
    """Monte Carlo of node-limited routing: pick M nodes, then K experts among theirs."""
    rng = np.random.default_rng(seed)
    per_node = num_experts // num_nodes
    total = 0
    for _ in range(tokens):
        nodes = rng.choice(num_nodes, size=max_nodes, replace=False)
        pool = (nodes[:, None] * per_node + np.arange(per_node)).ravel()
        experts = rng.choice(pool, size=top_k, replace=False)
        source_node = rng.integers(num_nodes)
        hit = set((experts // per_node).tolist())
        total += len(hit - {int(source_node)})
    return total / tokens


def test_expected_distinct_groups_closed_form() -> None:
    assert expected_distinct_groups(num_experts=64, num_groups=8, top_k=1) == 1.0
    # K = all eligible experts: every eligible group is hit
    assert expected_distinct_groups(num_experts=16, num_groups=4, top_k=8,
                                    eligible_groups=2) == 2.0
    # E=256, 8 groups, K=8: 8 * (1 - C(224, 8)/C(256, 8))
    want = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert expected_distinct_groups(num_experts=256, num_groups=8, top_k=8) == pytest.approx(want)


@pytest.mark.parametrize("max_nodes", [8, 4, 2])
def test_inter_node_copies_match_simulation(max_nodes: int) -> None:
    split = ep_dispatch_split(EpRouting(max_nodes_per_token=max_nodes, **DSV3),
                              tokens_per_rank=1, hidden_size=1, bytes_per_elem=1)
    simulated = _simulate_distinct_remote_nodes(num_experts=256, num_nodes=8, top_k=8,
                                                max_nodes=max_nodes, tokens=6000, seed=max_nodes)
    assert split.inter_node_copies_per_token == pytest.approx(simulated, rel=0.03)


def test_node_limited_routing_cuts_inter_node_bytes_by_expected_factor() -> None:
    """DeepSeek-V3 layout: limiting a token to M=4 of 8 nodes cuts its expected IB copies
    from 8(1 - C(224,8)/C(256,8)) * 7/8 to 4(1 - C(96,8)/C(128,8)) * 7/8, a factor of
    about 1.46; the worst case drops from min(K, N-1) = 7 to M = 4 copies."""
    free = ep_dispatch_split(EpRouting(**DSV3), tokens_per_rank=4096, hidden_size=7168,
                             bytes_per_elem=1)
    limited = ep_dispatch_split(EpRouting(max_nodes_per_token=4, **DSV3), tokens_per_rank=4096,
                                hidden_size=7168, bytes_per_elem=1)
    unrestricted_nodes = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    limited_nodes = 4 * (1 - math.comb(96, 8) / math.comb(128, 8))
    factor = unrestricted_nodes / limited_nodes
    assert factor == pytest.approx(1.459, abs=1e-3)
    assert free.inter_node_bytes / limited.inter_node_bytes == pytest.approx(factor, rel=1e-6)
    assert limited.inter_node_bytes == round(4096 * limited_nodes * 7 / 8 * 7168)
    assert (free.worst_case_inter_node_copies, limited.worst_case_inter_node_copies) == (7, 4)


def test_per_node_forwarding_cuts_ib_copies_against_per_expert_sends() -> None:
    """One IB copy per destination node instead of one per remote expert (DeepSeek-V3)."""
    per_expert, per_rank, per_node = (
        ep_dispatch_split(EpRouting(max_nodes_per_token=4, dedup=dedup, **DSV3),
                          tokens_per_rank=1, hidden_size=1, bytes_per_elem=1)
        for dedup in (DispatchDedup.PER_EXPERT, DispatchDedup.PER_RANK, DispatchDedup.PER_NODE))
    assert per_expert.inter_node_copies_per_token == pytest.approx(8 * 7 / 8)
    assert (per_expert.inter_node_copies_per_token > per_rank.inter_node_copies_per_token
            > per_node.inter_node_copies_per_token)
    # forwarding moves the fan-out to NVLink: every destination rank but the landing GPU
    assert per_node.intra_node_copies_per_token > per_rank.intra_node_copies_per_token


def test_max_experts_at_same_ib_cost_matches_DSV3() -> None:
    """DeepSeek-V3 Sec. 3.2.2: NVLink 160 GB/s is about 3.2x IB 50 GB/s, so a token can
    reach 3.2 experts per node and 'a maximum of 13 experts (4 nodes x 3.2 experts/node)'."""
    nvlink, ib = 160e9, 50e9
    assert experts_per_node_at_ib_parity(
        nvlink_bandwidth_bytes_per_s=nvlink, ib_bandwidth_bytes_per_s=ib) == pytest.approx(3.2)
    assert max_experts_at_same_ib_cost(max_nodes_per_token=4, nvlink_bandwidth_bytes_per_s=nvlink,
                                       ib_bandwidth_bytes_per_s=ib) == 13


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"ranks_per_node": 3}, "ranks_per_node=3"),
     ({"max_nodes_per_token": 9}, "max_nodes_per_token=9"),
     ({"num_experts": 100}, "ep_size=64")],
)
def test_ep_dispatch_split_rejects_bad_layouts(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidSpecError, match=message):
        ep_dispatch_split(EpRouting(**{**DSV3, **kwargs}), tokens_per_rank=8, hidden_size=8,
                          bytes_per_elem=2)

"""Imbalance, receive buffers, capacity and redundant-expert traffic (core/moe/balance.py)."""

import pytest

from models.core.moe import (
    CapacityPolicy,
    capacity_outcome,
    expert_capacity,
    expert_weight_bytes,
    home_rank_loads,
    imbalance_factor,
    receive_buffer_rows,
    redundant_expert_traffic,
)
from models.errors import InvalidSpecError


def test_imbalance_factor_is_max_over_mean() -> None:
    assert imbalance_factor([4, 4, 4, 4]) == 1.0
    assert imbalance_factor([8, 4, 2, 2]) == 2.0
    with pytest.raises(InvalidSpecError, match="positive sum"):
        imbalance_factor([0, 0])


def test_home_rank_loads_sums_contiguous_home_experts() -> None:
    assert home_rank_loads([1, 2, 3, 4, 5, 6], num_ranks=3).tolist() == [3, 7, 11]
    with pytest.raises(InvalidSpecError, match="num_ranks=4"):
        home_rank_loads([1, 2, 3, 4, 5, 6], num_ranks=4)


def test_receive_buffer_rows_matches_K3_ratio() -> None:
    """Kimi K3 Sec. 5.2.1: a DeepEP-style worst case needs S*K*R rows, MoonEP S*K; with the
    MoonEP README's Buffer(S=4096, K=8, E=256, R=8, token_padding=128) that is 8x, and the
    padded size is align_up(32768 + 2*32*127, 128) = 40960 rows."""
    buf = receive_buffer_rows(tokens_per_rank=4096, top_k=8, ep_size=8, experts_per_rank=32,
                              hidden_size=7168, bytes_per_elem=2, token_padding=128)
    assert buf.moonep_rows == 32768
    assert buf.deepep_worst_case_rows == 8 * 32768
    assert buf.moonep_padded_rows == 40960
    assert buf.deepep_worst_case_bytes == 8 * 32768 * 7168 * 2
    assert buf.moonep_padded_bytes == 40960 * 7168 * 2


def test_expert_capacity_matches_SWITCH() -> None:
    """Switch Transformer Fig. 3: 6 tokens on 3 experts give 2 slots each at capacity
    factor 1.0 and 3 at 1.5."""
    assert expert_capacity(num_tokens=6, num_experts=3, top_k=1, capacity_factor=1.0) == 2
    assert expert_capacity(num_tokens=6, num_experts=3, top_k=1, capacity_factor=1.5) == 3


def test_expert_capacity_matches_GSHARD() -> None:
    """GShard Sec. 2.2: top-2 gating gives each expert 2N/E slots per group (factor 1)."""
    assert expert_capacity(num_tokens=1024, num_experts=16, top_k=2, capacity_factor=1.0) == 128
    # fractional capacities round up
    assert expert_capacity(num_tokens=10, num_experts=3, top_k=1, capacity_factor=1.0) == 4


def test_capacity_outcome_drop_and_pad() -> None:
    drop = capacity_outcome([5, 1, 0], capacity_tokens=2)
    assert (drop.processed_tokens, drop.dropped_tokens) == (3, 3)
    assert (drop.computed_rows, drop.padding_rows) == (6, 3)
    assert drop.drop_frac == 0.5
    pad = capacity_outcome([5, 1, 0], policy=CapacityPolicy.PAD_TO_MAX)
    assert (pad.capacity_tokens, pad.dropped_tokens, pad.computed_rows, pad.padding_rows) == (
        5, 0, 15, 9)
    with pytest.raises(InvalidSpecError, match="capacity_tokens=None"):
        capacity_outcome([1, 2])


def test_redundant_expert_traffic_counts_weights_and_fp32_grads() -> None:
    """A DeepSeek-V3 routed expert: 3 matrices of 7168 x 2048, BF16 weights, fp32 grads."""
    weights = expert_weight_bytes(hidden_size=7168, expert_ffn_hidden_size=2048, bytes_per_param=2)
    grads = expert_weight_bytes(hidden_size=7168, expert_ffn_hidden_size=2048, bytes_per_param=4)
    assert weights == 88_080_384
    traffic = redundant_expert_traffic(num_redundant=3, experts_per_rank=4,
                                       weight_bytes_per_expert=weights, grad_bytes_per_expert=grads)
    assert traffic.prefetch_bytes == 3 * 88_080_384
    assert traffic.grad_reduce_bytes == 3 * 176_160_768
    assert traffic.prefetch_pool_bytes_per_rank == 4 * (88_080_384 + 176_160_768)

"""Routing-skew generator (models/core/moe/skew.py)."""

import numpy as np
import pytest

from models.core.moe import (
    RoutingSkew,
    SkewKind,
    expert_popularity,
    routing_counts,
    sample_routing,
    tight_redundancy_bound,
    tight_routing_counts,
    tight_tokens_per_rank,
)
from models.errors import InvalidSpecError

SHAPE = {"num_experts": 32, "num_ranks": 4, "top_k": 4, "tokens_per_rank": 256}
SAMPLED = [SkewKind.UNIFORM, SkewKind.ZIPF, SkewKind.LOGNORMAL, SkewKind.HOT_EXPERT,
           SkewKind.HOT_RANK]


@pytest.mark.parametrize("kind", SAMPLED)
def test_sampled_routing_is_deterministic_and_well_formed(kind: SkewKind) -> None:
    skew = RoutingSkew(kind=kind)
    a = routing_counts(skew, seed=7, **SHAPE)
    b = routing_counts(skew, seed=7, **SHAPE)
    other_batch = routing_counts(skew, seed=7, batch=1, **SHAPE)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, other_batch)
    assert a.shape == (4, 32)
    assert np.all(a.sum(axis=1) == 256 * 4)
    # K distinct experts per token: no expert gets more than S from one rank
    assert a.max() <= 256


def test_lognormal_sigma_two_is_more_skewed_than_sigma_one() -> None:
    def max_over_mean(sigma: float) -> float:
        pop = [expert_popularity(RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=sigma),
                                 num_experts=256, num_ranks=8, seed=s) for s in range(20)]
        return float(np.mean([p.max() * p.size for p in pop]))
    assert max_over_mean(2.0) > 2 * max_over_mean(1.0) > 2.0


def test_hot_expert_and_hot_rank_are_hot() -> None:
    hot = routing_counts(RoutingSkew(kind=SkewKind.HOT_EXPERT, hot_factor=1000.0), seed=3,
                         **SHAPE)
    totals = hot.sum(axis=0)
    # sampled without replacement: the hot expert is in (almost) every token, never twice
    assert totals.max() <= 4 * 256
    assert totals.max() >= 0.99 * 4 * 256
    rank = routing_counts(RoutingSkew(kind=SkewKind.HOT_RANK, hot_factor=8.0), seed=3, **SHAPE)
    loads = rank.sum(axis=0).reshape(4, 8).sum(axis=1)
    assert loads.max() > 2 * np.median(loads)


def test_sample_routing_needs_enough_positive_weights() -> None:
    with pytest.raises(InvalidSpecError, match="top_k=3"):
        sample_routing(np.array([0.5, 0.5, 0.0, 0.0]), num_ranks=2, tokens_per_rank=4, top_k=3,
                       seed=0)


@pytest.mark.parametrize(("e", "r", "bound"), [(256, 64, 4), (384, 16, 23), (32, 8, 4), (8, 4, 2)])
def test_tight_redundancy_bound_values(e: int, r: int, bound: int) -> None:
    """ceil(E(R-1)/R^2): 256*63/4096 = 3.94 -> 4; 384*15/256 = 22.5 -> 23."""
    assert tight_redundancy_bound(num_experts=e, num_ranks=r) == bound


def test_tight_construction_shape() -> None:
    s = tight_tokens_per_rank(num_experts=32, num_ranks=8, top_k=4, at_least=10)
    assert s >= 10 and (s * 4) % 28 == 0
    counts = tight_routing_counts(num_experts=32, num_ranks=8, top_k=4, tokens_per_rank=s)
    assert np.all(counts[:, :4] == 0)
    assert np.all(counts[:, 4:] == s * 4 // 28)
    assert np.all(counts.sum(axis=1) == s * 4)


def test_tight_construction_refuses_indivisible_sizes_with_a_fix() -> None:
    with pytest.raises(InvalidSpecError, match="use tokens_per_rank=7"):
        tight_routing_counts(num_experts=32, num_ranks=8, top_k=4, tokens_per_rank=5)
    with pytest.raises(InvalidSpecError, match="num_ranks >= 2"):
        tight_routing_counts(num_experts=4, num_ranks=1, top_k=1, tokens_per_rank=4)


def test_popularity_rejects_bad_parameters() -> None:
    with pytest.raises(InvalidSpecError, match="sigma"):
        expert_popularity(RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=-1.0), num_experts=8,
                          num_ranks=2, seed=0)
    with pytest.raises(InvalidSpecError, match="num_experts=9"):
        expert_popularity(RoutingSkew(kind=SkewKind.UNIFORM), num_experts=9, num_ranks=2, seed=0)
    with pytest.raises(InvalidSpecError, match="tight"):
        expert_popularity(RoutingSkew(kind=SkewKind.TIGHT), num_experts=8, num_ranks=2, seed=0)

"""Property tests of the constructive planner: exact balance, the E/R bound, conservation.

Hypothesis draws >= 600 instances per rule: random Dirichlet rows, sparse rows, every
routing skew of the generator, and the tight construction of Kimi K3 Appendix E.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_invariants import check_placement

from models.moe import (
    RoutingSkew,
    SkewKind,
    routing_counts,
    tight_redundancy_bound,
    tight_routing_counts,
    tight_tokens_per_rank,
)
from solver.placement import ConstructiveRule, plan_constructive

WEIGHT_BYTES, GRAD_BYTES = 1000, 2000


@st.composite
def instances(draw: st.DrawFn) -> tuple[str, np.ndarray, int]:
    """(kind, counts [R, E], top_k)."""
    kind = draw(st.sampled_from(["dirichlet", "sparse", "skew", "tight", "one_expert"]))
    r = draw(st.integers(2 if kind == "tight" else 1, 8))
    m = draw(st.integers(1, 6))
    e = r * m
    k = draw(st.integers(1, min(e, 8)))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if kind == "tight":
        k = min(k, (r - 1) * m)
        s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=k,
                                  at_least=draw(st.integers(1, 40)))
        return kind, tight_routing_counts(num_experts=e, num_ranks=r, top_k=k,
                                          tokens_per_rank=s), k
    s = draw(st.integers(1, 64))
    if kind == "skew":
        skew = RoutingSkew(kind=draw(st.sampled_from([x for x in SkewKind if x != SkewKind.TIGHT])),
                           sigma=draw(st.sampled_from([0.5, 1.0, 2.0, 5.0])))
        return kind, routing_counts(skew, num_experts=e, num_ranks=r, top_k=k,
                                    tokens_per_rank=s, seed=seed), k
    if kind == "one_expert":
        counts = np.zeros((r, e), dtype=np.int64)
        counts[:, draw(st.integers(0, e - 1))] = s * k
        return kind, counts, k
    alpha = draw(st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    if kind == "sparse":
        probs = np.zeros((r, e))
        for row in probs:
            row[rng.choice(e, size=draw(st.integers(1, e)), replace=False)] = 1.0
        probs /= probs.sum(axis=1, keepdims=True)
    else:
        probs = rng.dirichlet(np.full(e, alpha), size=r)
    counts = np.stack([rng.multinomial(s * k, p) for p in probs]).astype(np.int64)
    return kind, counts, k


@pytest.mark.parametrize("rule", list(ConstructiveRule))
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=instances())
def test_constructive_placement_invariants(rule: ConstructiveRule,
                                           case: tuple[str, np.ndarray, int]) -> None:
    kind, counts, k = case
    res = plan_constructive(counts, top_k=k, weight_bytes_per_expert=WEIGHT_BYTES,
                            grad_bytes_per_expert=GRAD_BYTES, rule=rule)
    check_placement(res, counts)
    assert res.prefetch_bytes == res.num_redundant * WEIGHT_BYTES
    if kind == "tight":
        r, e = counts.shape
        bound = tight_redundancy_bound(num_experts=e, num_ranks=r)
        assert res.lower_bound_per_rank[0] == bound
        assert len(res.redundant_experts[0]) >= bound
        assert res.max_redundant_per_rank >= bound


@pytest.mark.parametrize(("e", "r"), [(256, 64), (384, 16), (32, 8), (12, 3)])
def test_tight_construction_at_benchmark_sizes(e: int, r: int) -> None:
    s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=8, at_least=512)
    counts = tight_routing_counts(num_experts=e, num_ranks=r, top_k=8, tokens_per_rank=s)
    bound = tight_redundancy_bound(num_experts=e, num_ranks=r)
    for rule in ConstructiveRule:
        res = plan_constructive(counts, top_k=8, weight_bytes_per_expert=WEIGHT_BYTES,
                                grad_bytes_per_expert=GRAD_BYTES, rule=rule)
        check_placement(res, counts)
        assert bound <= len(res.redundant_experts[0]) <= e // r


def test_cover_rule_beats_reference_on_the_tight_construction() -> None:
    """Filling rank 0 from one donor chains overshoots; the cover rule spreads them."""
    s = tight_tokens_per_rank(num_experts=32, num_ranks=8, top_k=4, at_least=64)
    counts = tight_routing_counts(num_experts=32, num_ranks=8, top_k=4, tokens_per_rank=s)
    ref = plan_constructive(counts, top_k=4, rule=ConstructiveRule.REFERENCE)
    cover = plan_constructive(counts, top_k=4, rule=ConstructiveRule.COVER)
    assert (ref.num_redundant, cover.num_redundant) == (16, 7)
    assert cover.migrated_tokens < ref.migrated_tokens

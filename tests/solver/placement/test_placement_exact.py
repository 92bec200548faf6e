"""The exact CP-SAT reference: proofs on small cases, never worse than constructive."""

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_invariants import check_placement

from models.core.moe import (
    RoutingSkew,
    SkewKind,
    routing_counts,
    tight_redundancy_bound,
    tight_routing_counts,
    tight_tokens_per_rank,
)
from solver.cpsat import SolverConfig, SolveStatus
from solver.placement import ConstructiveRule, ExactObjective, plan_constructive, plan_exact
from solver.placement.exact import max_zero_sum_parts, transfer_lower_bound
from solver.placement.problem import placement_problem

CONFIG = SolverConfig(max_time_s=5.0, num_workers=1, random_seed=0)


def test_max_zero_sum_parts() -> None:
    assert max_zero_sum_parts([3, -3, 2, -2, 1, -1]) == 3
    assert max_zero_sum_parts([5, -2, -3]) == 1
    assert max_zero_sum_parts([4, 4, -8, -1, 1]) == 2


@pytest.mark.parametrize(("e", "r"), [(8, 4), (16, 4), (12, 6), (32, 8)])
def test_exact_needs_the_tight_bound_on_the_tight_construction(e: int, r: int) -> None:
    """Kimi K3 Appendix E: the busiest rank needs exactly ceil(E(R-1)/R^2) replicas."""
    s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=2, at_least=8)
    counts = tight_routing_counts(num_experts=e, num_ranks=r, top_k=2, tokens_per_rank=s)
    exact = plan_exact(counts, top_k=2, objective=ExactObjective.MAX_PER_RANK,
                       minimize_remote=False, config=CONFIG)
    bound = tight_redundancy_bound(num_experts=e, num_ranks=r)
    assert exact.status == SolveStatus.OPTIMAL
    assert exact.objective == exact.best_bound == bound
    assert exact.placement.max_redundant_per_rank == bound
    check_placement(exact.placement, counts)
    constructive = plan_constructive(counts, top_k=2)
    assert constructive.max_redundant_per_rank >= bound


@pytest.mark.parametrize("kind", [SkewKind.LOGNORMAL, SkewKind.HOT_RANK, SkewKind.ZIPF])
@pytest.mark.parametrize("seed", [0, 1])
def test_exact_proves_optimality_at_e32_r8(kind: SkewKind, seed: int) -> None:
    counts = routing_counts(RoutingSkew(kind=kind, sigma=1.0), num_experts=32, num_ranks=8,
                            top_k=4, tokens_per_rank=64, seed=seed)
    exact = plan_exact(counts, top_k=4, minimize_remote=False, config=CONFIG)
    assert exact.status == SolveStatus.OPTIMAL
    assert exact.objective == exact.best_bound == exact.placement.num_redundant
    for rule in ConstructiveRule:
        assert exact.objective <= plan_constructive(counts, top_k=4, rule=rule).num_redundant
    check_placement(exact.placement, counts)


def _cases(*, ranks: tuple[int, int], per_rank: tuple[int, int], top_k: tuple[int, int],
           tokens: tuple[int, int]) -> dict[str, st.SearchStrategy[Any]]:
    """The arguments of `_dirichlet_counts`: ranks, experts per rank, top-k and tokens per
    rank drawn from these ranges, any seed, one of three concentrations."""
    return {"r": st.integers(*ranks), "m": st.integers(*per_rank), "k": st.integers(*top_k),
            "s": st.integers(*tokens), "seed": st.integers(0, 2**31 - 1),
            "alpha": st.sampled_from([0.1, 0.5, 2.0])}


def _dirichlet_counts(r: int, m: int, k: int, s: int, seed: int, alpha: float
                      ) -> tuple[int, np.ndarray]:
    """Top-k clamped to the r x m experts, and r ranks' routed counts of s tokens each drawn
    from a Dirichlet(alpha) mix over the experts."""
    k = min(k, r * m)
    rng = np.random.default_rng(seed)
    return k, np.stack([rng.multinomial(s * k, rng.dirichlet(np.full(r * m, alpha)))
                        for _ in range(r)])


# Fixed examples (derandomize): once in a full-suite run, OR-Tools 9.15's native solve
# aborted the process inside these generated cases (SIGABRT, no CP-SAT message; 1,200 random
# cases of the same draw run alone did not reproduce it), so CI runs the same cases each time.
@settings(max_examples=40, deadline=None, derandomize=True)
@given(**_cases(ranks=(1, 8), per_rank=(1, 4), top_k=(1, 4), tokens=(1, 24)))
def test_exact_is_optimal_and_never_worse_on_small_cases(
    r: int, m: int, k: int, s: int, seed: int, alpha: float
) -> None:
    k, counts = _dirichlet_counts(r, m, k, s, seed, alpha)
    exact = plan_exact(counts, top_k=k, minimize_remote=False, config=CONFIG)
    assert exact.status == SolveStatus.OPTIMAL
    assert not exact.used_fallback
    check_placement(exact.placement, counts)
    for rule in ConstructiveRule:
        assert exact.objective <= plan_constructive(counts, top_k=k, rule=rule).num_redundant


@settings(max_examples=15, deadline=None, derandomize=True)  # fixed examples: see above
@given(**_cases(ranks=(2, 4), per_rank=(1, 3), top_k=(1, 3), tokens=(1, 16)))
def test_exact_remote_tokens_never_exceed_constructive_at_equal_redundancy(
    r: int, m: int, k: int, s: int, seed: int, alpha: float
) -> None:
    k, counts = _dirichlet_counts(r, m, k, s, seed, alpha)
    exact = plan_exact(counts, top_k=k, config=CONFIG)
    assert exact.traffic_status == SolveStatus.OPTIMAL
    check_placement(exact.placement, counts)
    for rule in ConstructiveRule:
        constructive = plan_constructive(counts, top_k=k, rule=rule)
        if constructive.num_redundant == exact.placement.num_redundant:
            assert exact.placement.remote_tokens <= constructive.remote_tokens


def test_transfer_bound_is_tight_without_zero_sum_subsets() -> None:
    """Balances (-91, -17, -6, -28, -18, 36, -49, 173) have no zero-sum proper subset: any
    balanced placement links all 8 ranks, so it needs at least 7 replicas."""
    counts = routing_counts(RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=1.0), num_experts=32,
                            num_ranks=8, top_k=4, tokens_per_rank=64, seed=0)
    problem = placement_problem(counts, top_k=4)
    assert (problem.home_loads - problem.capacity).tolist() == [-91, -17, -6, -28, -18, 36,
                                                                  -49, 173]
    assert transfer_lower_bound(problem) == 7
    assert plan_exact(counts, top_k=4, minimize_remote=False, config=CONFIG).objective == 7


def test_exact_minimises_remote_tokens_second() -> None:
    counts = routing_counts(RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=2.0), num_experts=16,
                            num_ranks=4, top_k=2, tokens_per_rank=32, seed=4)
    exact = plan_exact(counts, top_k=2, config=CONFIG)
    assert exact.traffic_status == SolveStatus.OPTIMAL
    first_phase = plan_exact(counts, top_k=2, minimize_remote=False, config=CONFIG)
    assert exact.placement.num_redundant == first_phase.placement.num_redundant
    assert exact.placement.remote_tokens <= first_phase.placement.remote_tokens
    assert exact.placement.remote_tokens <= plan_constructive(counts, top_k=2).remote_tokens

"""EPLB re-implementation (README fixture) and the baselines on actual batches."""

import numpy as np
import pytest

from models.core.moe import RoutingSkew, SkewKind, expert_popularity, routing_counts, sample_routing
from models.errors import InvalidSpecError
from solver.placement import (
    eplb_loads,
    eplb_rank_loads,
    no_redundancy_loads,
    plan_constructive,
    rebalance_experts,
)

# deepseek-ai/EPLB README example: 2 layers x 12 experts, 16 replicas, 4 groups, 2 nodes, 8 GPUs
README_WEIGHT = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                 [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
README_PHY2LOG = [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                  [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]
README_LOGCNT = [[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1], [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]]


def test_rebalance_experts_matches_EPLB_readme() -> None:
    plan = rebalance_experts(README_WEIGHT, num_replicas=16, num_groups=4, num_nodes=2,
                             num_gpus=8)
    assert plan.phy2log.tolist() == README_PHY2LOG
    assert plan.logcnt.tolist() == README_LOGCNT
    # log2phy is the inverse map, padded with -1
    for layer in range(2):
        for e in range(12):
            slots = [int(s) for s in plan.log2phy[layer, e] if s >= 0]
            assert len(slots) == plan.logcnt[layer, e]
            assert all(plan.phy2log[layer, s] == e for s in slots)


def test_global_policy_balances_the_planned_load() -> None:
    """With one group and one node, EPLB's plan evaluated on its own statistic is close to
    balanced (water-filling then LPT packing)."""
    weight = np.array(README_WEIGHT[1], dtype=np.int64)
    plan = rebalance_experts(weight[None, :], num_replicas=16, num_groups=1, num_nodes=1,
                             num_gpus=4)
    loads = eplb_rank_loads(plan, weight)
    assert int(loads.sum()) == int(weight.sum())
    assert loads.max() / loads.mean() < 1.1
    assert set(plan.phy2log[0].tolist()) == set(range(12))  # every expert keeps a slot


def test_rebalance_experts_rejects_bad_sizes() -> None:
    with pytest.raises(InvalidSpecError, match="num_replicas=15"):
        rebalance_experts(README_WEIGHT, num_replicas=15, num_groups=4, num_nodes=2, num_gpus=8)


def test_baselines_on_an_actual_batch() -> None:
    """EPLB planned from history only balances in expectation; MoonEP is exact per batch."""
    skew = RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=2.0)
    shape = {"num_ranks": 8, "tokens_per_rank": 512, "top_k": 4}
    popularity = expert_popularity(skew, num_experts=64, num_ranks=8, seed=11)
    history = sum(sample_routing(popularity, seed=11, batch=b, **shape).sum(axis=0)
                  for b in range(1, 4))
    batch = routing_counts(skew, num_experts=64, seed=11, batch=0, **shape)
    none = no_redundancy_loads(batch, top_k=4)
    eplb = eplb_loads(batch, top_k=4, history=history, redundant_per_rank=2)
    moonep = plan_constructive(batch, top_k=4)
    assert int(none.rank_loads.sum()) == int(eplb.rank_loads.sum()) == 8 * 512 * 4
    assert none.imbalance > eplb.imbalance > 1.0
    assert moonep.balanced

"""Invariants every placement must satisfy and the brute-force redundancy lower bound,
shared by the placement tests."""

import numpy as np

from solver.placement import PlacementResult, redundancy_lower_bounds


def brute_force_bounds(counts: np.ndarray) -> list[int]:
    """Per rank, the fewest foreign experts, largest first, whose tokens cover its deficit
    (capacity minus its home experts' tokens), counted one by one: the reference of
    `redundancy_lower_bounds`."""
    r, e = counts.shape
    m = e // r
    totals = counts.sum(axis=0)
    capacity = int(counts[0].sum())
    out = []
    for d in range(r):
        deficit = capacity - int(totals[d * m:(d + 1) * m].sum())
        foreign = sorted((int(t) for x, t in enumerate(totals) if x // m != d), reverse=True)
        n = 0
        while deficit > 0:
            deficit -= foreign[n]
            n += 1
        out.append(n)
    return out


def check_placement(res: PlacementResult, counts: np.ndarray) -> None:
    """Every invariant the planner promises."""
    p = res.problem
    r, e = counts.shape
    m = e // r
    assert np.all(res.rank_loads == p.capacity), "every rank receives exactly S*K"
    assert np.array_equal(res.allocation.sum(axis=0), res.rank_loads), "loads of the allocation"
    assert np.array_equal(res.lower_bound_per_rank, redundancy_lower_bounds(p))
    hosted = np.array([len(x) for x in res.redundant_experts])
    assert np.all(hosted <= m), "at most E/R redundant experts per rank"
    assert np.all(hosted >= res.lower_bound_per_rank)
    assert res.bound_holds and res.balanced
    routes = res.routes
    assert np.all(routes.tokens > 0)
    assert len(routes) == routes.tokens.size
    shared = routes.shared_rows  # the trailing rows: every route of an expert with replicas
    assert np.array_equal(np.stack((routes.source, routes.expert, routes.destination,
                                    routes.tokens))[:, routes.tokens.size - shared.shape[1]:],
                          shared)
    with_replicas = {x for xs in res.redundant_experts for x in xs}
    assert set(shared[1].tolist()) == with_replicas
    by_source = np.zeros((r, e), dtype=np.int64)
    np.add.at(by_source, (routes.source, routes.expert), routes.tokens)
    assert np.array_equal(by_source, counts), "tokens conserved per (source, expert)"
    by_dest = np.zeros((e, r), dtype=np.int64)
    np.add.at(by_dest, (routes.expert, routes.destination), routes.tokens)
    assert np.array_equal(by_dest, res.allocation)
    foreign = routes.destination != routes.expert // m
    listed = {(d, x) for d, xs in enumerate(res.redundant_experts) for x in xs}
    assert listed == set(zip(routes.destination[foreign].tolist(),
                             routes.expert[foreign].tolist(), strict=True))
    assert res.num_redundant == len(listed)
    assert res.migrated_tokens == int(routes.tokens[foreign].sum())
    assert res.remote_tokens == int(routes.tokens[routes.source != routes.destination].sum())
    assert res.prefetch_bytes == res.num_redundant * p.weight_bytes_per_expert
    assert res.grad_reduce_bytes == res.num_redundant * p.grad_bytes_per_expert

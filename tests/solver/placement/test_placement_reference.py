"""The vectorised routes, accounting and lower bounds against straightforward references.

The references below are written for clarity, one expert and one rank at a time: routes by
local-first then north-west matching per expert (`problem.routes_from_allocation`'s
definition), replicas, migrated and remote tokens read off the routes, and lower bounds by
taking the largest foreign experts one by one. Hypothesis draws random count matrices and
random exactly balanced allocations (not only the constructive planner's), alone and as
batches of layers.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_invariants import brute_force_bounds

from solver.placement import (
    ConstructiveRule,
    PlacementResult,
    build_results,
    placement_layers,
    placement_problem,
    plan_constructive,
    plan_constructive_layers,
    routes_from_allocation,
)


def reference_routes(counts: np.ndarray, alloc: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(source, expert, destination, tokens) in the documented order: row-major over
    (source, expert) for experts computed only at home, then per shared expert its local
    routes, then per shared expert the north-west matching of what is left."""
    r, e = counts.shape
    m = e // r
    shared = [x for x in range(e) if alloc[x, x // m] != counts[:, x].sum()]
    head = [(d, x, x // m, int(counts[d, x])) for d in range(r) for x in range(e)
            if x not in shared and counts[d, x] > 0]
    local, matched = [], []
    for x in shared:
        supply = [int(v) for v in counts[:, x]]
        demand = [int(v) for v in alloc[x]]
        for d in range(r):
            keep = min(supply[d], demand[d])
            if keep > 0:
                local.append((d, x, d, keep))
                supply[d] -= keep
                demand[d] -= keep
    for x in shared:
        supply = [int(v) for v in counts[:, x]]
        demand = [int(v) for v in alloc[x]]
        for d in range(r):
            keep = min(supply[d], demand[d])
            supply[d] -= keep
            demand[d] -= keep
        i = j = 0
        while True:
            while i < r and supply[i] == 0:
                i += 1
            while j < r and demand[j] == 0:
                j += 1
            if i == r or j == r:
                break
            amount = min(supply[i], demand[j])
            matched.append((i, x, j, amount))
            supply[i] -= amount
            demand[j] -= amount
    return head + local + matched


def check_against_reference(counts: np.ndarray, alloc: np.ndarray, res: PlacementResult) -> None:
    r, e = counts.shape
    m = e // r
    routes = reference_routes(counts, alloc)
    got = res.routes
    assert list(zip(got.source.tolist(), got.expert.tolist(), got.destination.tolist(),
                    got.tokens.tolist(), strict=True)) == routes
    hosted = [sorted({x for _, x, d, _ in routes if d == rank and x // m != rank})
              for rank in range(r)]
    assert [list(x) for x in res.redundant_experts] == hosted
    assert res.num_redundant == sum(map(len, hosted))
    assert res.migrated_tokens == sum(t for _, x, d, t in routes if d != x // m)
    assert res.remote_tokens == sum(t for s, _, d, t in routes if s != d)
    assert res.lower_bound_per_rank.tolist() == brute_force_bounds(counts)
    assert res.rank_loads.tolist() == alloc.sum(axis=0).tolist()


@st.composite
def counts_and_allocation(draw: st.DrawFn, r: int | None = None, e: int | None = None
                          ) -> tuple[np.ndarray, np.ndarray, int]:
    """(counts [R, E], a random exactly balanced allocation [E, R], top_k)."""
    r = r or draw(st.integers(1, 6))
    e = e or r * draw(st.integers(1, 4))
    k = draw(st.integers(1, min(e, 4)))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    s = draw(st.integers(1, 24))
    probs = rng.dirichlet(np.full(e, draw(st.sampled_from([0.05, 0.5, 5.0]))), size=r)
    counts = np.stack([rng.multinomial(s * k, p) for p in probs]).astype(np.int64)
    if draw(st.booleans()):  # the constructive planner's allocation
        alloc = plan_constructive(counts, top_k=k).allocation
        return counts, alloc, k
    # random: deal every token of every expert to a rank with room left (exact balance)
    room = [s * k] * r
    alloc = np.zeros((e, r), dtype=np.int64)
    for x in rng.permutation(e).tolist():
        for _ in range(int(counts[:, x].sum())):
            open_ranks = [d for d in range(r) if room[d] > 0]
            d = open_ranks[int(rng.integers(len(open_ranks)))] if rng.random() < 0.3 else \
                max(open_ranks, key=lambda d: (d == x // (e // r), room[d]))
            alloc[x, d] += 1
            room[d] -= 1
    return counts, alloc, k


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=counts_and_allocation())
def test_one_layer_matches_the_reference(case: tuple[np.ndarray, np.ndarray, int]) -> None:
    counts, alloc, k = case
    problem = placement_problem(counts, top_k=k)
    res = build_results(placement_layers(counts[None], top_k=k), alloc[None], planner="x",
                        wall_time_s=0.0)[0]
    check_against_reference(counts, alloc, res)
    routes = routes_from_allocation(problem, alloc)
    assert np.array_equal(routes.tokens, res.routes.tokens)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.tuples(st.integers(1, 5), st.integers(1, 4)), data=st.data())
def test_batches_of_layers_match_the_reference(shape: tuple[int, int],
                                               data: st.DataObject) -> None:
    r, m = shape
    cases = [data.draw(counts_and_allocation(r, r * m)) for _ in range(data.draw(
        st.integers(1, 6)))]
    k = cases[0][2]
    layers = [c for c in cases if c[2] == k]
    counts = np.stack([c[0] for c in layers])
    # the capacity must be a multiple of top_k in every layer: use top_k=1 for the batch
    results = build_results(placement_layers(counts, top_k=1), np.stack([c[1] for c in layers]),
                            planner="x", wall_time_s=0.0)
    for (c, alloc, _), res in zip(layers, results, strict=True):
        check_against_reference(c, alloc, res)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=counts_and_allocation())
def test_constructive_layers_match_the_reference(case: tuple[np.ndarray, np.ndarray, int]
                                                 ) -> None:
    counts, _, k = case
    for rule in ConstructiveRule:
        res = plan_constructive_layers(np.stack([counts, counts[::-1]]), top_k=k, rule=rule)
        for layer, x in zip((counts, counts[::-1]), res, strict=True):
            check_against_reference(layer, x.allocation, x)


def test_flat_cell_split_matches_divmod_with_and_without_its_tables() -> None:
    from solver.placement.routes import SPLIT_TABLE_CELLS, _split_cells

    rng = np.random.default_rng(5)
    for rows, columns in [(1, 1), (3, 64), (33, 64), (4096, 64), (SPLIT_TABLE_CELLS, 2)]:
        cells = rng.integers(0, rows * columns, size=500)
        row, column = _split_cells(cells, rows, columns)
        expected_row, expected_column = np.divmod(cells, columns)
        assert np.array_equal(row, expected_row) and np.array_equal(column, expected_column)

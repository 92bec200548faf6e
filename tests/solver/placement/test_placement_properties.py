"""Property tests of the constructive planner: exact balance, the E/R bound, conservation.

Hypothesis draws >= 600 instances per rule: random Dirichlet rows, sparse rows, every
routing skew of the generator, and the tight construction of Kimi K3 Appendix E. Batches of
layers planned in one call must equal each layer planned alone (also every skew at the
benchmark's E=256, R=64 over more than one chunk of layers, field by field); the per-rank
lower bounds (one layer, and all layers at once) must equal a brute-force count. The
cover rule's two ways of ordering candidate experts (plain Python for few, numpy for many)
must give the same moves, and either takes the tightest cover when several experts cover a
receiver.
"""

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_invariants import brute_force_bounds, check_placement

from models.core.moe import (
    RoutingSkew,
    SkewKind,
    routing_counts,
    tight_redundancy_bound,
    tight_routing_counts,
    tight_tokens_per_rank,
)
from solver.placement import (
    ConstructiveRule,
    PlacementResult,
    constructive,
    placement_layers,
    placement_problem,
    plan_constructive,
    plan_constructive_layers,
    redundancy_lower_bounds,
)
from solver.placement.constructive import LAYERS_PER_CHUNK
from solver.placement.problem import (
    _needy_bounds,
    _prefix_bounds,
    balanced_lower_bounds,
    layer_lower_bounds,
)

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


@st.composite
def layer_batches(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """(counts [L, R, E], top_k): layers of one shape with their own S and skew."""
    r = draw(st.integers(1, 6))
    e = r * draw(st.integers(1, 5))
    k = draw(st.integers(1, min(e, 6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    layers = []
    for _ in range(draw(st.integers(1, 9))):  # more than one chunk of layers
        s = draw(st.integers(1, 48))
        probs = rng.dirichlet(np.full(e, draw(st.sampled_from([0.05, 0.5, 5.0]))), size=r)
        layers.append(np.stack([rng.multinomial(s * k, p) for p in probs]))
    return np.stack(layers).astype(np.int64), k


@pytest.mark.parametrize("rule", list(ConstructiveRule))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=layer_batches())
def test_all_layers_in_one_call_equal_each_layer_alone(
        rule: ConstructiveRule, case: tuple[np.ndarray, int]) -> None:
    counts, k = case
    results = plan_constructive_layers(counts, top_k=k, weight_bytes_per_expert=WEIGHT_BYTES,
                                       grad_bytes_per_expert=GRAD_BYTES, rule=rule)
    assert len(results) == counts.shape[0]
    for layer, res in zip(counts, results, strict=True):
        check_placement(res, layer)
        alone = plan_constructive(layer, top_k=k, weight_bytes_per_expert=WEIGHT_BYTES,
                                  grad_bytes_per_expert=GRAD_BYTES, rule=rule)
        assert np.array_equal(res.allocation, alone.allocation)
        for column in ("source", "expert", "destination", "tokens"):
            assert np.array_equal(getattr(res.routes, column), getattr(alone.routes, column))
        assert np.array_equal(res.lower_bound_per_rank, alone.lower_bound_per_rank)
        assert (res.redundant_experts, res.remote_tokens, res.migrated_tokens) == \
            (alone.redundant_experts, alone.remote_tokens, alone.migrated_tokens)


@settings(max_examples=200, deadline=None)
@given(case=layer_batches())
def test_lower_bounds_of_one_and_of_all_layers_match_brute_force(
        case: tuple[np.ndarray, int]) -> None:
    """Every way of counting a layer's bounds agrees with the brute force: all layers
    together, one layer's problem, and each of the two ways one layer's bounds are counted
    (the direct count up to `NEEDY_CELLS`, the prefix search above it), on every layer."""
    counts, k = case
    batch = placement_layers(counts, top_k=k)
    m = counts.shape[2] // counts.shape[1]
    together = layer_lower_bounds(batch.expert_tokens, batch.home_loads, batch.capacity, m)
    for x, (layer, problem, bounds) in enumerate(
            zip(counts, batch.problems, together, strict=True)):
        expected = brute_force_bounds(layer)
        assert redundancy_lower_bounds(problem).tolist() == expected
        assert bounds.tolist() == expected
        deficit = np.maximum(batch.capacity[x] - batch.home_loads[x], 0)
        assert _needy_bounds(batch.expert_tokens[x], deficit, m).tolist() == expected
        assert _prefix_bounds(batch.expert_tokens[x:x + 1], deficit[None], m)[0].tolist() == \
            expected
        assert _prefix_bounds(batch.expert_tokens[x:x + 1], deficit[None], m)[0].tolist() == \
            expected


@settings(max_examples=200, deadline=None)
@given(case=layer_batches(), rule=st.sampled_from(list(ConstructiveRule)))
def test_bounds_from_a_balanced_plans_replicas_match_brute_force(
        case: tuple[np.ndarray, int], rule: ConstructiveRule) -> None:
    """The constructive planner's bounds come from its replica counts
    (`balanced_lower_bounds`): they equal the brute force, for all layers at once and for
    each layer alone, and so does the shortcut given any hosted counts of at least the
    bound."""
    counts, k = case
    batch = placement_layers(counts, top_k=k)
    m = counts.shape[2] // counts.shape[1]
    expected = np.array([brute_force_bounds(layer) for layer in counts])
    results = plan_constructive_layers(counts, top_k=k, rule=rule)
    assert np.array_equal(np.stack([x.lower_bound_per_rank for x in results]), expected)
    for layer, res in zip(counts, results, strict=True):
        alone = plan_constructive(layer, top_k=k, rule=rule)
        assert alone.lower_bound_per_rank.tolist() == res.lower_bound_per_rank.tolist()
    for extra in (0, 1, 2):
        hosted = expected + extra * (expected > 0)
        got = balanced_lower_bounds(batch.expert_tokens, batch.home_loads, batch.capacity, m,
                                    hosted)
        assert np.array_equal(got, expected)
        for x in range(counts.shape[0]):
            one = balanced_lower_bounds(batch.expert_tokens[x:x + 1], batch.home_loads[x:x + 1],
                                        batch.capacity[x:x + 1], m, hosted[x:x + 1])
            assert np.array_equal(one[0], expected[x])


def test_a_needy_ranks_own_large_expert_never_counts_toward_its_bound() -> None:
    """Rank 0 (E=16, R=4, capacity 16) keeps one expert of 8 tokens and lacks 8; every
    foreign expert holds 5 or 4, so it needs two of them. Its own expert, larger than any
    foreign one, would cover the deficit in one if it were counted. Planned alone and in a
    batch of layers (where each rank needing two or more is bounded in one pass), the
    bound is the brute force's 2."""
    totals = [8, 0, 0, 0] + [5] * 8 + [4] * 4
    counts = np.zeros((4, 16), dtype=np.int64)
    for e, tokens in enumerate(totals):  # spread over the sources, then rows evened to 16
        for t in range(tokens):
            counts[(e + t) % 4, e] += 1
    while counts.sum(axis=1).max() > 16:
        rich, poor = int(counts.sum(axis=1).argmax()), int(counts.sum(axis=1).argmin())
        e = int(np.flatnonzero(counts[rich])[0])
        counts[rich, e] -= 1
        counts[poor, e] += 1
    assert counts.sum(axis=1).tolist() == [16] * 4
    assert brute_force_bounds(counts)[0] == 2
    layers = np.stack([counts, counts, counts])
    batch = placement_layers(layers, top_k=1)
    hosted = np.array([[2, 0, 0, 0]] * 3)
    got = balanced_lower_bounds(batch.expert_tokens, batch.home_loads, batch.capacity, 4,
                                hosted)
    assert got[:, 0].tolist() == [2, 2, 2]
    for res in plan_constructive_layers(layers, top_k=1):
        assert res.lower_bound_per_rank.tolist() == brute_force_bounds(counts)
        check_placement(res, counts)


def test_tight_layers_keep_the_tight_bound_in_one_call() -> None:
    """The tight construction of Kimi K3 Appendix E, as every layer of a batch."""
    s = tight_tokens_per_rank(num_experts=256, num_ranks=64, top_k=8, at_least=512)
    tight = tight_routing_counts(num_experts=256, num_ranks=64, top_k=8, tokens_per_rank=s)
    uniform = routing_counts(RoutingSkew(kind=SkewKind.UNIFORM), num_experts=256, num_ranks=64,
                             top_k=8, tokens_per_rank=s, seed=1)
    results = plan_constructive_layers(np.stack([tight, uniform, tight]), top_k=8)
    bound = tight_redundancy_bound(num_experts=256, num_ranks=64)
    for layer, res in zip((tight, uniform, tight), results, strict=True):
        check_placement(res, layer)
    for res in (results[0], results[2]):
        assert res.lower_bound_per_rank[0] == bound <= len(res.redundant_experts[0]) <= 4


def _same_placement(got: PlacementResult, alone: PlacementResult) -> None:
    """Every field of two placements is equal, arrays with their dtype and shape."""
    def same_array(x: np.ndarray, y: np.ndarray) -> None:
        assert x.dtype == y.dtype and np.array_equal(x, y)

    for name in ("counts", "expert_tokens", "home_loads"):
        same_array(getattr(got.problem, name), getattr(alone.problem, name))
    for name in ("top_k", "num_ranks", "num_experts", "experts_per_rank", "tokens_per_rank",
                 "capacity", "weight_bytes_per_expert", "grad_bytes_per_expert"):
        assert getattr(got.problem, name) == getattr(alone.problem, name)
    for name in ("allocation", "rank_loads", "lower_bound_per_rank"):
        same_array(getattr(got, name), getattr(alone, name))
    same_array(got.routes.shared_rows, alone.routes.shared_rows)
    for column in ("source", "expert", "destination", "tokens"):
        same_array(getattr(got.routes, column), getattr(alone.routes, column))
    for name in ("planner", "redundant_experts", "num_redundant", "max_redundant_per_rank",
                 "redundant_bound_per_rank", "migrated_tokens", "remote_tokens",
                 "prefetch_bytes", "grad_reduce_bytes"):
        assert getattr(got, name) == getattr(alone, name), name


@pytest.fixture(scope="module")
def skewed_layers() -> list[np.ndarray]:
    """Every skew at the benchmark's E=256, R=64, K=8 (the tight construction first),
    cycled to more layers than one chunk holds."""
    e, r, k = 256, 64, 8
    skews = [RoutingSkew(kind=SkewKind.UNIFORM), RoutingSkew(kind=SkewKind.ZIPF),
             RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=1.0),
             RoutingSkew(kind=SkewKind.LOGNORMAL, sigma=2.0),
             RoutingSkew(kind=SkewKind.HOT_EXPERT), RoutingSkew(kind=SkewKind.HOT_RANK)]
    s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=k, at_least=256)
    kinds = [tight_routing_counts(num_experts=e, num_ranks=r, top_k=k, tokens_per_rank=s)] + [
        routing_counts(skew, num_experts=e, num_ranks=r, top_k=k, tokens_per_rank=256, seed=i)
        for i, skew in enumerate(skews)]
    return [kinds[i % len(kinds)] for i in range(LAYERS_PER_CHUNK + 3)]


@pytest.mark.parametrize("rule", list(ConstructiveRule))
def test_every_skew_over_several_chunks_equals_each_layer_alone(
        rule: ConstructiveRule, skewed_layers: list[np.ndarray]) -> None:
    """One call over more than one chunk of layers equals each layer planned alone."""
    results = plan_constructive_layers(np.stack(skewed_layers), top_k=8,
                                       weight_bytes_per_expert=WEIGHT_BYTES,
                                       grad_bytes_per_expert=GRAD_BYTES, rule=rule)
    assert len(results) == len(skewed_layers) > LAYERS_PER_CHUNK
    for layer, res in zip(skewed_layers, results, strict=True):
        alone = plan_constructive(layer, top_k=8, weight_bytes_per_expert=WEIGHT_BYTES,
                                  grad_bytes_per_expert=GRAD_BYTES, rule=rule)
        check_placement(res, layer)
        _same_placement(res, alone)


def _cover_moves(counts: np.ndarray, top_k: int, small: int) -> tuple[tuple[list[int], ...], int]:
    """The cover rule's moves with `SMALL_CANDIDATES` set to `small`, and how many times the
    candidates were ordered."""
    problem = placement_problem(counts, top_k=top_k)
    calls = []
    ordered = constructive._CoverState._candidates

    def counted(state: constructive._CoverState) -> tuple[list[int], list[int]]:
        calls.append(1)
        return ordered(state)

    with mock.patch.object(constructive, "SMALL_CANDIDATES", small), \
            mock.patch.object(constructive._CoverState, "_candidates", counted):
        state = constructive._CoverState(problem).run()
    return (state.moved_expert, state.moved_to, state.moved_tokens), len(calls)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=instances())
def test_python_and_numpy_candidate_orders_give_the_same_moves(
        case: tuple[str, np.ndarray, int]) -> None:
    """`_candidates` sorts few candidates in Python and many with numpy: forced either way,
    the planner makes the same moves (ties included: tight and one-expert instances)."""
    _, counts, k = case
    assert _cover_moves(counts, k, small=10**9)[0] == _cover_moves(counts, k, small=-1)[0]


@pytest.mark.parametrize(("e", "r", "skew"), [
    (256, 64, SkewKind.TIGHT), (384, 16, SkewKind.TIGHT), (384, 16, SkewKind.HOT_RANK)])
def test_candidate_orders_agree_where_the_benchmark_needs_them(
        e: int, r: int, skew: SkewKind) -> None:
    """At the benchmark's sizes, on the routings that need several whole experts per
    receiver, both orders give the same moves, and the candidates are in fact ordered."""
    if skew == SkewKind.TIGHT:
        s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=8, at_least=512)
        counts = tight_routing_counts(num_experts=e, num_ranks=r, top_k=8, tokens_per_rank=s)
    else:
        counts = routing_counts(RoutingSkew(kind=skew, hot_factor=32.0), num_experts=e,
                                num_ranks=r, top_k=8, tokens_per_rank=1024, seed=3)
    by_python, calls = _cover_moves(counts, 8, small=10**9)
    by_numpy, _ = _cover_moves(counts, 8, small=-1)
    assert calls > 0
    assert by_python == by_numpy


@pytest.mark.parametrize("small", [10**9, -1])
@pytest.mark.parametrize(("donor_excess", "expected"), [
    (20, (4, 0, 10)),  # both covers leave 10 on donor 2: the last-listed (fewest tokens)
    (5, (4, 0, 10)),   # no safe cover (5 < 10): the last-listed cover all the same
])
def test_fill_many_takes_the_tightest_cover(small: int, donor_excess: int,
                                            expected: tuple[int, int, int]) -> None:
    """A receiver short of 10 tokens whose top donor's experts (2 and 1 tokens left) cannot
    cover it: experts 5 (15 left) and 4 (12 left) of donor 2 can, and the tightest is taken,
    in either candidate order."""
    counts = np.full((3, 6), 4, dtype=np.int64)
    state = constructive._CoverState(placement_problem(counts, top_k=1))
    state.bal = [-10, 30, donor_excess]
    state.rem = [0, 0, 2, 1, 12, 15]
    with mock.patch.object(constructive, "SMALL_CANDIDATES", small):
        state._fill_many(0, 10)
    assert (state.moved_expert, state.moved_to, state.moved_tokens) == (
        [expected[0]], [expected[1]], [expected[2]])

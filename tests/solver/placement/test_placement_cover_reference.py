"""The cover rule's placements against a reference written one step at a time.

`reference_cover_allocation` restates the COVER rule of `solver.placement.constructive`
for clarity, with no heaps, no batched takes and no numpy ordering: each step fills the
most underloaded rank (lowest index on ties) from the most overloaded donor's covering
expert with most of the receiver's own tokens (capped at the deficit), the fewest tokens
left on ties, the lowest index after that; or, when no expert of that donor covers the
deficit, takes the listed experts of all donors whole until one covers what is left, and
that piece from the tightest cover whose donor keeps an excess >= 0 (the last-listed on
ties), else from the last-listed cover. The planner's allocation must equal it on every
routing skew at the benchmark's sizes and on the property tests' random instances.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_placement_properties import instances

from models.core.moe import (
    RoutingSkew,
    SkewKind,
    routing_counts,
    tight_routing_counts,
    tight_tokens_per_rank,
)
from solver.placement import plan_constructive

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import bench_moe_placement  # noqa: E402 - the benchmarks folder is not a package


class _Reference:
    """Balances, remaining expert tokens and the allocation of the reference."""

    def __init__(self, counts: np.ndarray) -> None:
        self.counts = counts
        r, e = counts.shape
        self.m = e // r
        self.rem = [int(x) for x in counts.sum(axis=0)]
        capacity = int(counts[0].sum())
        self.bal = [sum(self.rem[d * self.m:(d + 1) * self.m]) - capacity for d in range(r)]
        self.alloc = np.zeros((e, r), dtype=np.int64)
        for x, tokens in enumerate(self.rem):
            self.alloc[x, x // self.m] = tokens

    def move(self, x: int, u: int, tokens: int) -> None:
        self.rem[x] -= tokens
        self.bal[x // self.m] -= tokens
        self.bal[u] += tokens
        self.alloc[x, x // self.m] -= tokens
        self.alloc[x, u] += tokens

    def listed(self) -> list[int]:
        """Experts with tokens left on donors: by tokens (largest first), place among the
        donor's own by tokens, donor excess (largest first), index."""
        keyed = []
        for d, excess in enumerate(self.bal):
            if excess <= 0:
                continue
            own = sorted((x for x in range(d * self.m, (d + 1) * self.m) if self.rem[x] > 0),
                         key=lambda x: (-self.rem[x], x))
            keyed += [(-self.rem[x], place, -excess, x) for place, x in enumerate(own)]
        return [key[3] for key in sorted(keyed)]

    def fill_many(self, u: int, q: int) -> None:
        listed = self.listed()
        tokens = {x: self.rem[x] for x in listed}
        while tokens[listed[0]] < q:
            x = listed.pop(0)
            q -= tokens[x]
            self.move(x, u, tokens[x])
        covers = [x for x in listed if tokens[x] >= q]
        safe = [x for x in covers if self.bal[x // self.m] - q >= 0]
        if safe:
            least = min(self.bal[x // self.m] - q for x in safe)
            pick = [x for x in safe if self.bal[x // self.m] - q == least][-1]
        else:
            pick = covers[-1]
        self.move(pick, u, q)

    def step(self) -> None:
        u = min((b, d) for d, b in enumerate(self.bal) if b < 0)[1]
        q = -self.bal[u]
        h = min((-b, d) for d, b in enumerate(self.bal) if b > 0)[1]
        covers = [x for x in range(h * self.m, (h + 1) * self.m) if self.rem[x] >= q]
        if covers:
            pick = max(covers, key=lambda x: (min(int(self.counts[u, x]), q), -self.rem[x],
                                              -x))
            self.move(pick, u, q)
        else:
            self.fill_many(u, q)


def reference_cover_allocation(counts: np.ndarray) -> np.ndarray:
    """[E, R] allocation of the cover rule, one step at a time."""
    state = _Reference(np.asarray(counts, dtype=np.int64))
    while any(b < 0 for b in state.bal):
        state.step()
    return state.alloc


SKEWS = [skew for skew in bench_moe_placement.SKEWS if skew.kind != SkewKind.TIGHT]
"""The benchmark's routing skews that `routing_counts` draws (the tight construction has
its own test below)."""


@pytest.mark.parametrize(("e", "r"), [(256, 64), (384, 16)])
@pytest.mark.parametrize("skew", SKEWS, ids=lambda s: f"{s.kind.value}")
def test_every_skew_at_benchmark_sizes_matches_the_reference(
        e: int, r: int, skew: RoutingSkew) -> None:
    for seed in range(3):
        counts = routing_counts(skew, num_experts=e, num_ranks=r, top_k=8,
                                tokens_per_rank=1024, seed=seed)
        planned = plan_constructive(counts, top_k=8).allocation
        assert np.array_equal(planned, reference_cover_allocation(counts)), seed


@pytest.mark.parametrize(("e", "r"), [(256, 64), (384, 16), (32, 8)])
def test_tight_construction_matches_the_reference(e: int, r: int) -> None:
    """Where receivers take several experts whole."""
    s = tight_tokens_per_rank(num_experts=e, num_ranks=r, top_k=8, at_least=512)
    counts = tight_routing_counts(num_experts=e, num_ranks=r, top_k=8, tokens_per_rank=s)
    planned = plan_constructive(counts, top_k=8).allocation
    assert np.array_equal(planned, reference_cover_allocation(counts))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=instances())
def test_random_instances_match_the_reference(case: tuple[str, np.ndarray, int]) -> None:
    _, counts, k = case
    planned = plan_constructive(counts, top_k=k).allocation
    assert np.array_equal(planned, reference_cover_allocation(counts))

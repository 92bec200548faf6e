"""The `PlacementResult` every planner returns and its accounting: loads, replicas,
routes, traffic and the lower bound, for one problem or every layer of a `LayerBatch`.

Owns: `PlacementResult`, `build_result`, `build_results`, `layer_accounts`. Must not:
choose an allocation (the planners do). Vocabulary: as `solver.placement.problem`.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.core.moe import redundant_expert_traffic
from solver.placement.problem import (
    IntArray,
    LayerBatch,
    PlacementProblem,
    balanced_lower_bounds,
    layer_lower_bounds,
    single_layer,
)
from solver.placement.routes import Routes, SharedCells, layer_routes, shape_index, shared_cells


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementResult:
    """One placement and its accounting."""

    planner: str
    """'constructive', 'exact', or a baseline name."""
    problem: PlacementProblem
    allocation: IntArray
    """[E, R] tokens of expert e computed on rank d."""
    rank_loads: IntArray
    """[R] tokens each rank computes (exactly S*K for a balanced plan)."""
    redundant_experts: tuple[tuple[int, ...], ...]
    """Per rank, the foreign experts it hosts (sorted)."""
    routes: Routes
    num_redundant: int
    max_redundant_per_rank: int
    redundant_bound_per_rank: int
    """E/R (Kimi K3 Sec. 5.2.1)."""
    lower_bound_per_rank: IntArray
    """[R] `redundancy_lower_bounds`."""
    migrated_tokens: int
    """Tokens computed on a replica rather than on their expert's home rank."""
    remote_tokens: int
    """Tokens whose destination differs from their source rank (network traffic)."""
    prefetch_bytes: int
    grad_reduce_bytes: int
    wall_time_s: float

    @property
    def balanced(self) -> bool:
        """Every rank computes exactly S*K tokens."""
        return bool(np.all(self.rank_loads == self.problem.capacity))

    @property
    def bound_holds(self) -> bool:
        """The lower bound <= hosted replicas <= E/R on every rank."""
        counts = np.array([len(x) for x in self.redundant_experts], dtype=np.int64)
        return bool(np.all(counts <= self.redundant_bound_per_rank)
                    and np.all(counts >= self.lower_bound_per_rank))


def build_result(
    problem: PlacementProblem, alloc: IntArray, *, planner: str, wall_time_s: float,
    lower_bounds: IntArray | None = None,
) -> PlacementResult:
    """Account for an allocation: loads, replicas, routes, traffic and bound.

    `alloc` must be non-negative with row e summing to T_e (every planner's allocation).
    """
    bounds = None if lower_bounds is None else lower_bounds[None]
    return build_results(single_layer(problem), alloc[None], planner=planner,
                         wall_time_s=wall_time_s, lower_bounds=bounds)[0]


def build_results(
    batch: LayerBatch, alloc: IntArray, *, planner: str, wall_time_s: float,
    lower_bounds: IntArray | None = None,
) -> list[PlacementResult]:
    """`build_result` of every layer of a batch: alloc [L, E, R], lower bounds [L, R].

    Each layer's result carries `wall_time_s` as given.
    """
    return [PlacementResult(planner=planner, wall_time_s=wall_time_s, **fields)
            for fields in layer_accounts(batch, alloc, lower_bounds)]


def _replicas(shared: SharedCells, home_of: IntArray, layers: int, r: int
              ) -> tuple[list[list[tuple[int, ...]]], list[int], IntArray]:
    """Per layer and rank the foreign experts the rank hosts (sorted), per layer the tokens
    computed on them (migrated), and [L, R] how many each rank hosts, from the shared
    experts' cells."""
    foreign = (shared.rank != home_of[shared.expert[shared.row]]).nonzero()[0]
    row = shared.row[foreign]
    hosted: list[list[tuple[int, ...]]] = [[()] * r for _ in range(layers)]
    rank = shared.rank[foreign]
    moved = shared.tokens[foreign]
    # cells come row-major over (layer, expert, rank): each rank's experts come sorted
    if layers == 1:  # no layer index to read
        alone = hosted[0]
        for d, y in zip(rank.tolist(), shared.expert[row].tolist(), strict=True):
            alone[d] += (y,)
        per_rank = np.bincount(rank, minlength=r).reshape(1, r)
        return hosted, [int(np.add.reduce(moved))], per_rank
    layer = shared.layer[row]
    for x, d, y in zip(layer.tolist(), rank.tolist(), shared.expert[row].tolist(), strict=True):
        hosted[x][d] += (y,)
    per_rank = np.bincount(layer * r + rank, minlength=layers * r).reshape(layers, r)
    per_layer = np.zeros(layers, dtype=np.int64)
    np.add.at(per_layer, layer, moved)
    return hosted, per_layer.tolist(), per_rank


def layer_accounts(batch: LayerBatch, alloc: IntArray, lower_bounds: IntArray | None = None,
                   *, balanced: bool = False) -> list[dict[str, Any]]:
    """The fields of each layer's `PlacementResult` but `planner` and `wall_time_s`
    (a planner that times itself adds them once the accounting is done).

    `balanced`: every allocation is known to give each rank exactly S*K (the constructive
    planner's, by construction); the rank loads are then the capacity, not summed, and the
    lower bounds follow from the replica counts (`balanced_lower_bounds`)."""
    layers, r, e = batch.counts.shape
    m = e // r
    index = shape_index(r, e)
    shared = shared_cells(batch, alloc)
    hosted, migrated, per_rank_hosted = _replicas(shared, index.home_of, layers, r)
    routes, kept = layer_routes(batch, shared)
    remote = (batch.capacity * r - kept).tolist()  # every layer routes R*S*K tokens
    if balanced:
        rank_loads = batch.capacity.repeat(r).reshape(layers, r)
        if lower_bounds is None:
            lower_bounds = balanced_lower_bounds(batch.expert_tokens, batch.home_loads,
                                                 batch.capacity, m, per_rank_hosted)
    else:
        rank_loads = np.add.reduce(alloc, axis=1)
    if lower_bounds is None:
        lower_bounds = layer_lower_bounds(batch.expert_tokens, batch.home_loads, batch.capacity,
                                          m)
    accounts = []
    for x, p in enumerate(batch.problems):
        per_rank = tuple(hosted[x])
        num_redundant = sum(map(len, per_rank))
        traffic = redundant_expert_traffic(
            num_redundant=num_redundant, experts_per_rank=m,
            weight_bytes_per_expert=p.weight_bytes_per_expert,
            grad_bytes_per_expert=p.grad_bytes_per_expert,
        )
        accounts.append({
            "problem": p, "allocation": alloc[x], "rank_loads": rank_loads[x],
            "redundant_experts": per_rank, "routes": routes[x], "num_redundant": num_redundant,
            "max_redundant_per_rank": max(map(len, per_rank)),
            "redundant_bound_per_rank": m, "lower_bound_per_rank": lower_bounds[x],
            "migrated_tokens": migrated[x], "remote_tokens": remote[x],
            "prefetch_bytes": traffic.prefetch_bytes,
            "grad_reduce_bytes": traffic.grad_reduce_bytes,
        })
    return accounts


__all__ = [
    "PlacementResult",
    "build_result",
    "build_results",
    "layer_accounts",
]

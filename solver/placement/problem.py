"""The redundant-expert placement problem, its lower bound, routes and result type.

Owns: validation of a token-count matrix [R, E] into a `PlacementProblem` (S follows from
the counts), the per-rank lower bound on redundant experts, turning an allocation
alloc[e, d] (tokens of expert e computed on rank d) into token routes (source, expert,
destination, tokens) with the most source-local routing that allocation admits, and the
`PlacementResult` every planner returns; all of it also for a `LayerBatch` of L layers of
one shape at once (`placement_layers`, `build_results`), with index arrays cached per shape.
Must not: choose an allocation (the planners do).

Vocabulary. Rank r's home experts are r*m .. r*m+m-1 with m = E/R. A redundant expert (a
replica) is an expert with tokens computed on a rank other than its home. A route is
remote when its source rank differs from its destination rank (the tokens cross the
network); a migrated token is one computed on a replica instead of the home rank.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from models.errors import InvalidSpecError
from models.moe import redundant_expert_traffic

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementProblem:
    """A validated placement instance (arrays are read-only)."""

    counts: IntArray
    """[R, E] tokens of source rank r routed to expert e."""
    top_k: int
    num_ranks: int
    num_experts: int
    experts_per_rank: int
    """m = E/R home experts per rank, also the bound on redundant experts per rank."""
    tokens_per_rank: int
    """S, from S*K*R = total assignments."""
    capacity: int
    """S*K: the exact load every rank receives."""
    expert_tokens: IntArray
    """[E] T_e = sum over sources."""
    home_loads: IntArray
    """[R] load of each rank's home experts (the no-redundancy rank loads)."""
    weight_bytes_per_expert: int
    grad_bytes_per_expert: int


def placement_problem(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0,
) -> PlacementProblem:
    """Validate a count matrix and derive S, the capacity and the home loads.

    Args:
        counts: [R, E] non-negative integers (nested lists or an array).
        top_k: K experts per token.
        weight_bytes_per_expert: bytes of one expert's weights (for prefetch bytes).
        grad_bytes_per_expert: bytes of one expert's gradient (for reduce bytes).

    Raises:
        InvalidSpecError: naming the field, the value and the fix.
    """
    try:
        arr = np.asarray(counts)
    except ValueError as exc:
        raise InvalidSpecError(
            "tokens must be a rectangular matrix: R rows of E counts each", field="tokens"
        ) from exc
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InvalidSpecError(
            f"tokens has shape {arr.shape}; expected R rows of E counts each", field="tokens"
        )
    return _validated(arr[None], top_k=top_k, weight_bytes_per_expert=weight_bytes_per_expert,
                      grad_bytes_per_expert=grad_bytes_per_expert, field="tokens").problems[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerBatch:
    """Placement problems of L layers of one shape on shared read-only arrays.

    Layer l's `PlacementProblem` holds views of row l of each array.
    """

    counts: IntArray
    """[L, R, E] tokens of source rank r routed to expert e in layer l."""
    expert_tokens: IntArray
    """[L, E]."""
    home_loads: IntArray
    """[L, R]."""
    capacity: IntArray
    """[L] S*K of each layer."""
    problems: tuple[PlacementProblem, ...]


def placement_layers(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0,
) -> LayerBatch:
    """Validate the count matrices of L layers of one shape (all layers of a model).

    Args:
        counts: [L, R, E] non-negative integers; every layer has R rows of E counts, and
            within a layer all rows sum to the same S*K.
        top_k: K experts per token.
        weight_bytes_per_expert, grad_bytes_per_expert: as in `placement_problem`.

    Raises:
        InvalidSpecError: naming the field `layers`, the layer, the value and the fix.
    """
    return validated_layers(layers_array(counts), top_k=top_k,
                            weight_bytes_per_expert=weight_bytes_per_expert,
                            grad_bytes_per_expert=grad_bytes_per_expert)


def layers_array(counts: object) -> npt.NDArray[Any]:
    """The [L, R, E] array of a batch's counts, before the checks of `validated_layers`.

    Raises:
        InvalidSpecError: on ragged or non-3-D counts (field `layers`).
    """
    try:
        arr = np.asarray(counts)
    except ValueError as exc:
        raise InvalidSpecError(
            "layers must hold L matrices of one shape: R rows of E counts each",
            field="layers",
        ) from exc
    if arr.ndim != 3 or min(arr.shape) < 1:
        raise InvalidSpecError(
            f"layers has shape {arr.shape}; expected L layers of R rows of E counts each",
            field="layers",
        )
    return arr


def validated_layers(
    arr: npt.NDArray[Any], *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0, first_layer: int = 0,
) -> LayerBatch:
    """`placement_layers` on layers first_layer .. of a `layers_array` (errors name the
    layer by its index in the whole batch)."""
    return _validated(arr, top_k=top_k, weight_bytes_per_expert=weight_bytes_per_expert,
                      grad_bytes_per_expert=grad_bytes_per_expert, field="layers",
                      first_layer=first_layer)


def _validated(
    raw: npt.NDArray[Any], *, top_k: int, weight_bytes_per_expert: int,
    grad_bytes_per_expert: int, field: str, first_layer: int = 0,
) -> LayerBatch:
    """Checks of `placement_problem` on [L, R, E] at once; a single matrix (field `tokens`)
    is named `tokens`, layer l of a batch `layers[first_layer + l]`."""

    def name(layer: int) -> str:
        return field if field == "tokens" else f"{field}[{first_layer + layer}]"

    if raw.dtype.kind not in "iu" and not (raw.dtype.kind == "f" and np.all(raw == np.round(raw))):
        raise InvalidSpecError(f"{field} must hold integers", field=field)
    arr: IntArray = raw.astype(np.int64)
    layers, r, e = (int(x) for x in arr.shape)
    if int(arr.min()) < 0:
        layer, src, exp = np.argwhere(arr < 0)[0]
        raise InvalidSpecError(
            f"{name(layer)}[{src}][{exp}]={int(arr[layer, src, exp])} is negative: counts "
            "must be >= 0", field=field,
        )
    if e % r:
        raise InvalidSpecError(
            f"num_experts={e} is not divisible by the {r} ranks (rows of {field}): each rank "
            "must home E/R experts", field=field,
        )
    if top_k < 1 or top_k > e:
        raise InvalidSpecError(f"top_k={top_k} must lie in [1, {e}]", field="top_k")
    if weight_bytes_per_expert < 0 or grad_bytes_per_expert < 0:
        raise InvalidSpecError("expert byte sizes must be >= 0", field="expert_weight_bytes")
    rows = arr.sum(axis=2)
    uneven = rows != rows[:, :1]
    if uneven.any():
        layer, bad = (int(x) for x in np.argwhere(uneven)[0])
        raise InvalidSpecError(
            f"row {bad} of {name(layer)} sums to {int(rows[layer, bad])} but row 0 sums to "
            f"{int(rows[layer, 0])}: every rank holds S tokens with K choices each, so all "
            "rows must sum to S*K", field=field,
        )
    capacity = rows[:, 0]
    wrong = (capacity == 0) | (capacity % top_k != 0)
    if wrong.any():
        layer = int(np.argmax(wrong))
        raise InvalidSpecError(
            f"each row{'' if field == 'tokens' else f' of {name(layer)}'} sums to "
            f"{int(capacity[layer])}, which must be a positive multiple of top_k={top_k} "
            "(S tokens x K experts)", field=field,
        )
    m = e // r
    expert_tokens = arr.sum(axis=1)
    home = expert_tokens.reshape(layers, r, m).sum(axis=2)
    for x in (arr, expert_tokens, home, capacity):
        x.setflags(write=False)
    problems = tuple(
        PlacementProblem(
            counts=arr[layer], top_k=top_k, num_ranks=r, num_experts=e, experts_per_rank=m,
            tokens_per_rank=cap // top_k, capacity=cap, expert_tokens=expert_tokens[layer],
            home_loads=home[layer], weight_bytes_per_expert=weight_bytes_per_expert,
            grad_bytes_per_expert=grad_bytes_per_expert,
        ) for layer, cap in enumerate(capacity.tolist()))
    return LayerBatch(counts=arr, expert_tokens=expert_tokens, home_loads=home,
                      capacity=capacity, problems=problems)


def layer_slice(batch: LayerBatch, start: int, stop: int) -> LayerBatch:
    """Layers start .. stop-1 of a batch (views)."""
    return LayerBatch(counts=batch.counts[start:stop],
                      expert_tokens=batch.expert_tokens[start:stop],
                      home_loads=batch.home_loads[start:stop], capacity=batch.capacity[start:stop],
                      problems=batch.problems[start:stop])


def single_layer(problem: PlacementProblem) -> LayerBatch:
    """A batch of one layer on views of the problem's arrays."""
    p = problem
    capacity = np.asarray([p.capacity], dtype=np.int64)
    return LayerBatch(counts=p.counts[None], expert_tokens=p.expert_tokens[None],
                      home_loads=p.home_loads[None], capacity=capacity, problems=(p,))


def redundancy_lower_bounds(problem: PlacementProblem) -> IntArray:
    """[R] fewest redundant experts each rank needs in any exactly balanced placement.

    Rank d computes S*K tokens; its home experts supply at most their load G_d, so at least
    max(0, S*K - G_d) come from foreign experts holding at most T_e tokens each. The bound
    is the fewest foreign experts, largest first, whose totals reach that deficit.
    Source: our derivation; it equals ceil(E(R-1)/R^2) on the tight construction of Kimi K3,
    arXiv:2607.24653, Appendix E.
    """
    p = problem
    deficit = np.maximum(p.capacity - p.home_loads, 0)
    bounds = np.zeros(p.num_ranks, dtype=np.int64)
    needy = np.flatnonzero(deficit)
    if needy.size == 0:
        return bounds
    order = np.argsort(-p.expert_tokens, kind="stable")
    sorted_tokens = p.expert_tokens[order]
    foreign = (order // p.experts_per_rank)[None, :] != needy[:, None]
    supply = np.where(foreign, sorted_tokens[None, :], 0)
    before = np.cumsum(supply, axis=1) - supply
    bounds[needy] = np.sum(foreign & (before < deficit[needy, None]), axis=1)
    return bounds


def layer_lower_bounds(expert_tokens: IntArray, home_loads: IntArray, capacity: IntArray,
                  m: int) -> IntArray:
    """`redundancy_lower_bounds` of L layers at once: tokens [L, E], home loads [L, R],
    capacities [L] and m home experts per rank give [L, R].

    With the experts sorted by load (c_j = the j largest loads summed), a prefix of length
    j that holds k of rank d's own experts (O_k = their loads) supplies c_j - O_k foreign
    tokens. For each k the shortest prefix reaching the deficit follows from one binary
    search; the first k whose prefix still holds exactly k own experts gives the fewest
    foreign experts, j - k. This needs [L, R, m+1] work instead of [L, R, E].
    """
    layers, e = expert_tokens.shape
    r = home_loads.shape[1]
    base = np.arange(layers, dtype=np.int64)[:, None]
    order = np.argsort(-expert_tokens, axis=1, kind="stable") + base * e
    # per layer the running totals, shifted so that all layers form one sorted array
    shift = base * (int(expert_tokens.sum(axis=1).max()) + 1)
    cum = np.cumsum(expert_tokens.ravel()[order], axis=1) + shift
    position = np.empty(layers * e, dtype=np.int64)
    position[order.ravel()] = np.tile(np.arange(e, dtype=np.int64), layers)
    own_pos = np.sort(position.reshape(layers, r, m), axis=2)
    # own experts in position order are own experts by load, largest first
    own_cum = np.cumsum(-np.sort(-expert_tokens.reshape(layers, r, m), axis=2), axis=2)
    deficit = np.maximum(capacity[:, None] - home_loads, 0)
    need = np.empty((layers, r, m + 1), dtype=np.int64)
    need[:, :, 0] = deficit
    need[:, :, 1:] = own_cum + deficit[:, :, None]
    need += shift[:, :, None]
    shortest = np.searchsorted(cum.ravel(), need.ravel()).reshape(need.shape) + 1
    shortest -= (base * e)[:, :, None]
    lo = np.empty_like(need)
    lo[:, :, 0] = 0
    lo[:, :, 1:] = own_pos + 1
    hi = np.empty_like(need)
    hi[:, :, :m] = own_pos
    hi[:, :, m] = e
    prefix = np.maximum(shortest, lo)
    valid = prefix <= hi
    first = np.argmax(valid, axis=2)
    bounds = np.take_along_axis(prefix, first[:, :, None], axis=2)[:, :, 0] - first
    return np.where(deficit > 0, bounds, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Routes:
    """Token routes as parallel columns (one row per positive (source, expert, dest))."""

    source: IntArray
    expert: IntArray
    destination: IntArray
    tokens: IntArray


@dataclass(frozen=True, slots=True)
class ShapeIndex:
    """Index arrays of an [R, E] instance shape, shared by every layer of that shape."""

    experts: IntArray
    """[E] 0 .. E-1."""
    home_of: IntArray
    """[E] home rank of each expert (e // m)."""
    cells: IntArray
    """[3, R*E] per cell of the row-major count matrix: source rank, expert, home rank."""
    diagonal: IntArray
    """[E] flat index of cell (home_of[e], e): the tokens an expert's home rank sends itself."""


@lru_cache(maxsize=16)
def shape_index(num_ranks: int, num_experts: int) -> ShapeIndex:
    """The (read-only, cached) index arrays of an [R, E] shape."""
    m = num_experts // num_ranks
    experts = np.arange(num_experts, dtype=np.int64)
    home_of = experts // m
    source, expert = np.divmod(np.arange(num_ranks * num_experts, dtype=np.int64), num_experts)
    cells = np.stack((source, expert, expert // m))
    arrays = (experts, home_of, cells, home_of * num_experts + experts)
    for arr in arrays:
        arr.setflags(write=False)
    return ShapeIndex(*arrays)


def routes_from_allocation(problem: PlacementProblem, alloc: IntArray) -> Routes:
    """Split each expert's tokens over its destinations, keeping tokens local first.

    For an expert with replicas, source d sends min(C[d, e], alloc[e, d]) tokens to itself
    (they never leave the rank); the remaining supply and demand are matched in rank order
    (north-west corner). This maximises local tokens for the given allocation, since the
    local amount of each rank cannot exceed that minimum. An expert without replicas takes
    every positive count to its home rank. Routes come row-major over (source, expert) for
    experts without replicas, then the local and the matched routes of shared experts.
    `alloc` must be non-negative with row e summing to T_e.
    """
    batch, allocs = single_layer(problem), alloc[None]
    layer, shared = _shared_experts(batch, allocs)
    return _layer_routes(batch, allocs, layer, shared)[0][0]


def _shared_experts(batch: LayerBatch, alloc: IntArray) -> tuple[IntArray, IntArray]:
    """(layer, expert) pairs, in order, with tokens computed off the expert's home rank."""
    _, r, e = batch.counts.shape
    index = shape_index(r, e)
    on_home = alloc[:, index.experts, index.home_of]
    layer, expert = np.nonzero(on_home != batch.expert_tokens)
    return layer, expert


def _layer_routes(batch: LayerBatch, alloc: IntArray, layer: IntArray, shared: IntArray
                  ) -> tuple[list[Routes], IntArray]:
    """`routes_from_allocation` of every layer, and [L] tokens that stay on their source.

    All layers go through each numpy step together (the north-west matching works per
    expert row, so rows of different layers never mix). Local tokens are the home rank's
    own counts of unshared experts plus the local-first amounts of shared ones: the
    matching never pairs a rank with itself, since after the local step a rank has residual
    supply or residual demand, not both.
    """
    layers, r, e = batch.counts.shape
    index = shape_index(r, e)
    flat = batch.counts.reshape(layers, r * e)
    mask = flat > 0
    mask.reshape(layers, r, e)[layer, :, shared] = False
    picked = np.flatnonzero(mask)
    head_ends = np.cumsum(np.count_nonzero(mask, axis=1)) if layers > 1 else [picked.size]
    cell = picked if layers == 1 else \
        picked - np.repeat(np.arange(layers) * (r * e), np.diff(head_ends, prepend=0))
    head = np.empty((4, picked.size), dtype=np.int64)
    np.take(index.cells, cell, axis=1, out=head[:3], mode="clip")
    np.take(flat, picked, out=head[3], mode="clip")
    diagonal = flat[:, index.diagonal]
    kept = diagonal.sum(axis=1)
    if shared.size == 0:
        parts = [head[:, a:b] for a, b in zip([0, *head_ends[:-1]], head_ends, strict=True)]
        return [Routes(source=x[0], expert=x[1], destination=x[2], tokens=x[3])
                for x in parts], kept
    supply = batch.counts[layer, :, shared]
    demand = alloc[layer, shared, :]
    local = np.minimum(supply, demand)
    xs, ds = np.nonzero(local)
    local_tokens = local[xs, ds]
    nw_row, nw = _north_west(supply - local, demand - local)
    np.subtract.at(kept, layer, diagonal[layer, shared])
    np.add.at(kept, layer[xs], local_tokens)
    kept_block = np.stack((ds, shared[xs], ds, local_tokens))
    matched_block = np.stack((nw[0], shared[nw_row], nw[1], nw[2]))
    if layers == 1:
        cols = np.concatenate((head, kept_block, matched_block), axis=1)
        return [Routes(source=cols[0], expert=cols[1], destination=cols[2],
                       tokens=cols[3])], kept
    bounds = np.arange(layers + 1)
    kept_ends = np.searchsorted(layer[xs], bounds)
    matched_ends = np.searchsorted(layer[nw_row], bounds)
    head_bounds = [0, *np.asarray(head_ends).tolist()]
    routes = []
    for x in range(layers):
        cols = np.concatenate((head[:, head_bounds[x]:head_bounds[x + 1]],
                               kept_block[:, kept_ends[x]:kept_ends[x + 1]],
                               matched_block[:, matched_ends[x]:matched_ends[x + 1]]), axis=1)
        routes.append(Routes(source=cols[0], expert=cols[1], destination=cols[2],
                             tokens=cols[3]))
    return routes, kept


def _north_west(
    supply: IntArray, demand: IntArray
) -> tuple[IntArray, tuple[IntArray, IntArray, IntArray]]:
    """Match per-expert supply [n, R] and demand [n, R] (equal row sums) in rank order:
    (row, (source rank, destination rank, tokens)) per piece.

    Laid end to end, the positive supply cells and the positive demand cells each tile
    [0, total); every piece between consecutive cut points of the two tilings is one route,
    in the first supply cell and the first demand cell whose running totals reach its end.
    """
    s_row, s_rank = np.nonzero(supply)
    d_row, d_rank = np.nonzero(demand)
    cum_s = np.cumsum(supply[s_row, s_rank])
    both = np.concatenate((cum_s, np.cumsum(demand[d_row, d_rank])))
    order = np.argsort(both, kind="stable")  # two sorted runs; supply first on ties
    cuts = both[order]
    is_demand = order >= cum_s.size
    demand_before: IntArray = np.cumsum(is_demand) - is_demand
    keep = ~is_demand
    keep[:1] = True
    keep[1:] |= cuts[1:] != cuts[:-1]  # a demand cut equal to a supply cut adds no piece
    demand_before = demand_before[keep]
    supply_before = np.flatnonzero(keep) - demand_before
    cuts = cuts[keep]
    lengths = cuts.copy()
    lengths[1:] -= cuts[:-1]
    row = s_row[supply_before]
    assert np.array_equal(row, d_row[demand_before]), \
        "supply and demand rows must balance per expert"
    return row, (s_rank[supply_before], d_rank[demand_before], lengths)


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
    layers, r, e = batch.counts.shape
    m = e // r
    index = shape_index(r, e)
    layer, shared = _shared_experts(batch, alloc)
    hosted_rows = alloc[layer, shared, :] > 0
    hosted_rows[np.arange(shared.size), index.home_of[shared]] = False
    row, dest = np.nonzero(hosted_rows)
    lay, exp = layer[row], shared[row]
    order = np.lexsort((exp, dest, lay))
    hosted: list[list[list[int]]] = [[[] for _ in range(r)] for _ in range(layers)]
    for x, d, y in zip(lay[order].tolist(), dest[order].tolist(), exp[order].tolist(),
                       strict=True):
        hosted[x][d].append(y)
    migrated = np.zeros(layers, dtype=np.int64)
    np.add.at(migrated, lay, alloc[lay, exp, dest])
    routes, kept = _layer_routes(batch, alloc, layer, shared)
    rank_loads = alloc.sum(axis=1)
    remote = batch.expert_tokens.sum(axis=1) - kept
    if lower_bounds is None:
        lower_bounds = redundancy_lower_bounds(batch.problems[0])[None] if layers == 1 else \
            layer_lower_bounds(batch.expert_tokens, batch.home_loads, batch.capacity, m)
    results = []
    for x, p in enumerate(batch.problems):
        per_rank = tuple(tuple(y) for y in hosted[x])
        num_redundant = sum(len(y) for y in per_rank)
        traffic = redundant_expert_traffic(
            num_redundant=num_redundant, experts_per_rank=m,
            weight_bytes_per_expert=p.weight_bytes_per_expert,
            grad_bytes_per_expert=p.grad_bytes_per_expert,
        )
        results.append(PlacementResult(
            planner=planner, problem=p, allocation=alloc[x], rank_loads=rank_loads[x],
            redundant_experts=per_rank, routes=routes[x], num_redundant=num_redundant,
            max_redundant_per_rank=max(len(y) for y in per_rank), redundant_bound_per_rank=m,
            lower_bound_per_rank=lower_bounds[x], migrated_tokens=int(migrated[x]),
            remote_tokens=int(remote[x]), prefetch_bytes=traffic.prefetch_bytes,
            grad_reduce_bytes=traffic.grad_reduce_bytes, wall_time_s=wall_time_s,
        ))
    return results


__all__ = [
    "PlacementProblem",
    "PlacementResult",
    "Routes",
    "LayerBatch",
    "ShapeIndex",
    "build_result",
    "build_results",
    "placement_layers",
    "placement_problem",
    "layer_lower_bounds",
    "layer_slice",
    "layers_array",
    "redundancy_lower_bounds",
    "routes_from_allocation",
    "shape_index",
    "single_layer",
    "validated_layers",
]

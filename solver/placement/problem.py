"""The redundant-expert placement problem and its lower bound.

Owns: validation of a token-count matrix [R, E] into a `PlacementProblem` (S follows from
the counts) and the per-rank lower bound on redundant experts, both also for a `LayerBatch`
of L layers of one shape at once (`placement_layers`, `layer_lower_bounds`; from a balanced
placement's replica counts, `balanced_lower_bounds`). The routes of
an allocation are `solver.placement.routes`; the `PlacementResult` every planner returns,
`solver.placement.results`. Must not: choose an allocation (the planners do).

Vocabulary. Rank r's home experts are r*m .. r*m+m-1 with m = E/R. A redundant expert (a
replica) is an expert with tokens computed on a rank other than its home. A route is
remote when its source rank differs from its destination rank (the tokens cross the
network); a migrated token is one computed on a replica instead of the home rank.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from models.errors import InvalidSpecError

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
    return matrix_batch(counts, top_k=top_k, weight_bytes_per_expert=weight_bytes_per_expert,
                        grad_bytes_per_expert=grad_bytes_per_expert).problems[0]


def matrix_batch(
    counts: object, *, top_k: int, weight_bytes_per_expert: int = 0,
    grad_bytes_per_expert: int = 0,
) -> "LayerBatch":
    """`placement_problem` as a batch of one layer (errors name the field `tokens`)."""
    return validated_layers(matrix_array(counts), top_k=top_k,
                            weight_bytes_per_expert=weight_bytes_per_expert,
                            grad_bytes_per_expert=grad_bytes_per_expert, field="tokens")


def matrix_array(counts: object) -> npt.NDArray[Any]:
    """A single count matrix as a [1, R, E] array, before the checks of `validated_layers`.

    Raises:
        InvalidSpecError: on a ragged or non-2-D matrix (field `tokens`).
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
    return arr[None]


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
    grad_bytes_per_expert: int = 0, first_layer: int = 0, field: str = "layers",
    out: IntArray | None = None,
) -> LayerBatch:
    """`placement_layers` on layers first_layer .. of a `layers_array` (errors name the
    layer by its index in the whole batch), or on a `matrix_array` with field `tokens`.

    The batch holds a read-only int64 copy of the counts: a new array, or `out` ([L, R, E],
    written in place) when given.
    """
    return _validated(arr, top_k=top_k, weight_bytes_per_expert=weight_bytes_per_expert,
                      grad_bytes_per_expert=grad_bytes_per_expert, field=field,
                      first_layer=first_layer, out=out)


def _capacities(arr: IntArray, *, top_k: int, field: str,
                name: Callable[[int], str]) -> IntArray:
    """[L] S*K of each layer: every row of a layer sums to it, a positive multiple of K."""
    rows = np.add.reduce(arr, axis=2)  # ufunc reductions skip the ndarray.sum wrapper
    uneven = rows != rows[:, :1]
    if uneven.any():
        layer, bad = (int(x) for x in np.argwhere(uneven)[0])
        raise InvalidSpecError(
            f"row {bad} of {name(layer)} sums to {int(rows[layer, bad])} but row 0 sums to "
            f"{int(rows[layer, 0])}: every rank holds S tokens with K choices each, so all "
            "rows must sum to S*K", field=field,
        )
    capacity: IntArray = rows[:, 0]
    capacities = capacity.tolist()
    wrong = [cap == 0 or cap % top_k != 0 for cap in capacities]
    if any(wrong):
        layer = wrong.index(True)
        raise InvalidSpecError(
            f"each row{'' if field == 'tokens' else f' of {name(layer)}'} sums to "
            f"{int(capacity[layer])}, which must be a positive multiple of top_k={top_k} "
            "(S tokens x K experts)", field=field,
        )
    return capacity


def _validated(
    raw: npt.NDArray[Any], *, top_k: int, weight_bytes_per_expert: int,
    grad_bytes_per_expert: int, field: str, first_layer: int = 0, out: IntArray | None = None,
) -> LayerBatch:
    """Checks of `placement_problem` on [L, R, E] at once; a single matrix (field `tokens`)
    is named `tokens`, layer l of a batch `layers[first_layer + l]`."""

    def name(layer: int) -> str:
        return field if field == "tokens" else f"{field}[{first_layer + layer}]"

    if raw.dtype.kind not in "iu" and not (raw.dtype.kind == "f" and np.all(raw == np.round(raw))):
        raise InvalidSpecError(f"{field} must hold integers", field=field)
    if out is None:
        arr: IntArray = raw.astype(np.int64)
    else:
        np.copyto(out, raw, casting="unsafe")  # as astype: floats are whole here
        arr = out
    layers, r, e = arr.shape
    if int(np.minimum.reduce(arr, axis=None)) < 0:
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
    capacity = _capacities(arr, top_k=top_k, field=field, name=name)
    capacities = capacity.tolist()
    m = e // r
    expert_tokens = np.add.reduce(arr, axis=1)
    home = np.add.reduce(expert_tokens.reshape(layers, r, m), axis=2)
    for x in (arr, expert_tokens, home, capacity):
        x.setflags(write=False)
    problems = tuple(
        PlacementProblem(
            counts=arr[layer], top_k=top_k, num_ranks=r, num_experts=e, experts_per_rank=m,
            tokens_per_rank=cap // top_k, capacity=cap, expert_tokens=expert_tokens[layer],
            home_loads=home[layer], weight_bytes_per_expert=weight_bytes_per_expert,
            grad_bytes_per_expert=grad_bytes_per_expert,
        ) for layer, cap in enumerate(capacities))
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
    return _needy_bounds(p.expert_tokens, np.maximum(p.capacity - p.home_loads, 0),
                         p.experts_per_rank)


NEEDY_CELLS = 4096
"""Most [needy ranks, E] cells for which one layer's bounds are counted directly
(`_needy_bounds`) rather than by `_prefix_bounds`. Best of timeit batches on a 2-core host
(load average 3.4), E=256, R=64: 1 / 32 / 63 needy ranks took 18 / 40 / 62 us directly and
36-37 us by prefix; E=384, R=16, 8 needy: 27 and 37 us; E=1024, 32 needy: 117 and 60 us."""


def _needy_bounds(expert_tokens: IntArray, deficit: IntArray, m: int) -> IntArray:
    """`redundancy_lower_bounds` from one layer's tokens [E] and deficits [R]: [needy, E]
    work, a dozen numpy calls (fewer than `_prefix_bounds` on one layer)."""
    bounds = np.zeros(deficit.size, dtype=np.int64)
    needy = np.flatnonzero(deficit)
    if needy.size == 0:
        return bounds
    order = np.argsort(-expert_tokens, kind="stable")
    sorted_tokens = expert_tokens[order]
    foreign = (order // m)[None, :] != needy[:, None]
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
    deficit = np.maximum(capacity[:, None] - home_loads, 0)
    quick = _covered_by_one_expert(expert_tokens, deficit, m)
    if quick is not None:
        return quick
    layers, e = expert_tokens.shape
    if layers == 1 and np.count_nonzero(deficit) * e <= NEEDY_CELLS:
        single: IntArray = _needy_bounds(expert_tokens[0], deficit[0], m)[None]
        return single
    return _prefix_bounds(expert_tokens, deficit, m)


FEW_COUNTED_RANKS = 2
"""Most ranks of one layer whose bounds `balanced_lower_bounds` counts one by one
(`_one_rank_bound`, about 6 us each at E=256) rather than with `_needy_bounds` (about 15 us
for a few ranks)."""


def _one_rank_bound(expert_tokens: IntArray, deficit: int, d: int, m: int) -> int:
    """Rank d's `redundancy_lower_bounds` (deficit > 0): the fewest of the other ranks'
    experts, largest first, whose tokens reach the deficit."""
    foreign = np.concatenate((expert_tokens[:d * m], expert_tokens[d * m + m:]))
    foreign.sort()
    reached = foreign[::-1].cumsum()
    return int(reached.searchsorted(deficit)) + 1


def balanced_lower_bounds(expert_tokens: IntArray, home_loads: IntArray, capacity: IntArray,
                          m: int, hosted: IntArray) -> IntArray:
    """`layer_lower_bounds` [L, R] given a balanced placement of each layer that hosts
    `hosted` [L, R] foreign experts per rank (every rank computes exactly S*K).

    Such a placement meets every bound, so 0 <= bound <= hosted, and a rank with a deficit
    needs at least one foreign expert: a rank without deficit has bound 0, one with a
    deficit that hosts a single replica has bound 1. Only ranks with a deficit hosting two
    or more are counted (one by one up to `FEW_COUNTED_RANKS` in a layer planned alone,
    else `_needy_bounds` on those ranks; over several layers, all together in
    `_counted_rank_bounds` while they average at most `FEW_COUNTED_RANKS` a layer that has
    any, else `layer_lower_bounds` on the layers that hold such ranks); on the random skews
    no rank is, on the tight construction one.
    """
    short = capacity[:, None] - home_loads  # the deficit where positive
    needy = short > 0
    bounds: IntArray = needy.astype(np.int64)
    counted = needy & (hosted > 1)
    if expert_tokens.shape[0] == 1:
        ranks = counted[0].nonzero()[0]
        if ranks.size <= FEW_COUNTED_RANKS:
            for d in ranks.tolist():
                bounds[0, d] = _one_rank_bound(expert_tokens[0], int(short[0, d]), d, m)
            return bounds
        bounds[0] = np.where(counted[0], _needy_bounds(
            expert_tokens[0], np.where(counted[0], short[0], 0), m), bounds[0])
        return bounds
    if not counted.any():
        return bounds
    with_counted = counted.any(axis=1)
    layer, rank = counted.nonzero()
    if layer.size <= FEW_COUNTED_RANKS * int(np.count_nonzero(with_counted)):
        bounds[layer, rank] = _counted_rank_bounds(expert_tokens, short, layer, rank, m)
        return bounds
    some = np.flatnonzero(with_counted)
    full = layer_lower_bounds(expert_tokens[some], home_loads[some], capacity[some], m)
    bounds[some] = full
    return bounds


def _counted_rank_bounds(expert_tokens: IntArray, short: IntArray, layer: IntArray,
                         rank: IntArray, m: int) -> IntArray:
    """`_one_rank_bound` of each (layer, rank) pair at once: each pair's row of the layer's
    expert tokens [E] with the rank's own experts zeroed, sorted, summed from the largest;
    the bound is one more than the prefixes short of the deficit. The zeros sort last and
    never reach it: a deficit is at most S*K, which the other ranks' tokens cover. On the
    tight construction in every layer of a batch (one such rank a layer) this replaces
    `layer_lower_bounds` on all of them."""
    pairs = layer.size
    rows = expert_tokens[layer]  # [pairs, E], a copy
    rows.reshape(pairs, short.shape[1], m)[np.arange(pairs), rank] = 0
    rows.sort(axis=1)
    reached = rows[:, ::-1].cumsum(axis=1)
    out: IntArray = np.count_nonzero(reached < short[layer, rank][:, None], axis=1) + 1
    return out


def _covered_by_one_expert(expert_tokens: IntArray, deficit: IntArray,
                           m: int) -> IntArray | None:
    """The bounds (0 or 1) when the largest foreign expert covers every rank's deficit,
    else None."""
    layers = expert_tokens.shape[0]
    r = deficit.shape[1]
    # the usual case first: the largest foreign expert covers every deficit (bound 0 or 1);
    # it is the largest expert, or for that expert's own rank the largest of another rank
    per_rank = expert_tokens.reshape(layers, r, m).max(axis=2)
    if r > 1:  # quicker sufficient test: every rank has a foreign expert >= the 2nd largest
        second = np.partition(per_rank, r - 2, axis=1)[:, r - 2:r - 1]
        if (deficit <= second).all():
            quick: IntArray = (deficit > 0).astype(np.int64)
            return quick
    largest = np.maximum.reduce(per_rank, axis=1)
    if (deficit > largest[:, None]).any():  # a deficit beyond every expert (the tight case)
        return None
    top = per_rank.argmax(axis=1)
    rows = np.arange(layers)
    per_rank[rows, top] = -1
    largest_foreign = np.empty((layers, r), dtype=np.int64)
    largest_foreign[...] = largest[:, None]
    largest_foreign[rows, top] = per_rank.max(axis=1) if r > 1 else 0
    if (deficit <= largest_foreign).all():
        covered: IntArray = (deficit > 0).astype(np.int64)
        return covered
    return None


def _prefix_bounds(expert_tokens: IntArray, deficit: IntArray, m: int) -> IntArray:
    """The bounds by a binary search per number of own experts (`layer_lower_bounds`)."""
    layers, e = expert_tokens.shape
    r = deficit.shape[1]
    # all layers as one sequence: layer l's experts sorted by load at l*e .. l*e+e-1
    order = np.argsort(-expert_tokens, axis=1, kind="stable")
    if layers > 1:
        order += np.arange(0, layers * e, e, dtype=np.int64)[:, None]
    order = order.ravel()
    sorted_tokens = expert_tokens.ravel()[order]
    cum = np.cumsum(sorted_tokens.reshape(layers, e), axis=1)
    position = np.empty(layers * e, dtype=np.int64)
    position[order] = np.arange(layers * e, dtype=np.int64)  # index in the whole sequence
    own_pos = np.sort(position.reshape(layers, r, m), axis=2)
    # own experts in position order are own experts by load, largest first
    need = np.empty((layers, r, m + 1), dtype=np.int64)
    need[:, :, 0] = deficit
    np.cumsum(sorted_tokens[own_pos], axis=2, out=need[:, :, 1:])
    need[:, :, 1:] += deficit[:, :, None]
    if layers > 1:  # shift each layer's totals past the previous layer's
        shift = np.arange(layers, dtype=np.int64)[:, None] * (int(cum[:, -1].max()) + 1)
        cum += shift
        need += shift[:, :, None]
    prefix = np.searchsorted(cum.ravel(), need)  # shortest prefix - 1, in the sequence
    prefix += 1
    lo = np.empty_like(need)
    lo[:, :, 0] = np.arange(0, layers * e, e, dtype=np.int64)[:, None]
    np.add(own_pos, 1, out=lo[:, :, 1:])
    np.maximum(prefix, lo, out=prefix)
    hi = np.empty_like(need)
    hi[:, :, :m] = own_pos
    hi[:, :, m] = lo[:, :, 0] + e
    first = np.argmax(prefix <= hi, axis=2)
    # prefix[l, d, first[l, d]] through the flat array (take_along_axis costs more here)
    at = np.arange(0, layers * r * (m + 1), m + 1, dtype=np.int64).reshape(layers, r)
    at += first
    bounds = prefix.ravel().take(at)
    bounds -= first
    bounds -= lo[:, :, 0]
    bounds[deficit == 0] = 0
    return bounds


__all__ = [
    "IntArray",
    "PlacementProblem",
    "LayerBatch",
    "placement_layers",
    "placement_problem",
    "balanced_lower_bounds",
    "layer_lower_bounds",
    "layer_slice",
    "layers_array",
    "matrix_array",
    "matrix_batch",
    "redundancy_lower_bounds",
    "single_layer",
    "validated_layers",
]

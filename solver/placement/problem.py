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

from models.core.moe import redundant_expert_traffic
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
    rows = np.add.reduce(arr, axis=2)  # ufunc reductions skip the ndarray.sum wrapper
    uneven = rows != rows[:, :1]
    if uneven.any():
        layer, bad = (int(x) for x in np.argwhere(uneven)[0])
        raise InvalidSpecError(
            f"row {bad} of {name(layer)} sums to {int(rows[layer, bad])} but row 0 sums to "
            f"{int(rows[layer, 0])}: every rank holds S tokens with K choices each, so all "
            "rows must sum to S*K", field=field,
        )
    capacity = rows[:, 0]
    capacities = capacity.tolist()
    wrong = [cap == 0 or cap % top_k != 0 for cap in capacities]
    if any(wrong):
        layer = wrong.index(True)
        raise InvalidSpecError(
            f"each row{'' if field == 'tokens' else f' of {name(layer)}'} sums to "
            f"{int(capacity[layer])}, which must be a positive multiple of top_k={top_k} "
            "(S tokens x K experts)", field=field,
        )
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
    deficit = np.maximum(capacity[:, None] - home_loads, 0)
    # the usual case first: the largest foreign expert covers every deficit (bound 0 or 1);
    # it is the largest expert, or for that expert's own rank the largest of another rank
    per_rank = expert_tokens.reshape(layers, r, m).max(axis=2)
    if r > 1:  # quicker sufficient test: every rank has a foreign expert >= the 2nd largest
        second = np.partition(per_rank, r - 2, axis=1)[:, r - 2:r - 1]
        if (deficit <= second).all():
            quick: IntArray = (deficit > 0).astype(np.int64)
            return quick
    top = per_rank.argmax(axis=1)
    rows = np.arange(layers)
    largest = per_rank[rows, top]
    per_rank[rows, top] = -1
    largest_foreign = np.empty((layers, r), dtype=np.int64)
    largest_foreign[...] = largest[:, None]
    largest_foreign[rows, top] = per_rank.max(axis=1) if r > 1 else 0
    if (deficit <= largest_foreign).all():
        covered: IntArray = (deficit > 0).astype(np.int64)
        return covered
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


class Routes:
    """Token routes as parallel columns (one row per positive (source, expert, destination)).

    Rows of experts without replicas come first, row-major over (source, expert), then the
    local and the matched rows of shared experts. The first kind is every positive count
    of the matrix outside the shared experts' columns, sent to the expert's home rank: it
    is kept as that count matrix and turned into columns on the first read of a column
    (a dispatcher needs only the shared experts' splits; the columns are a view for
    people and checks). The shared experts' rows are computed with the placement.
    """

    __slots__ = ("_counts", "_shared_experts", "_shared_rows", "_columns")

    def __init__(self, counts: IntArray, shared_experts: IntArray, shared_rows: IntArray) -> None:
        """counts: [R, E] (read-only); shared_experts: the experts with tokens computed off
        their home rank; shared_rows: [4, n] source, expert, destination and tokens of their
        routes."""
        self._counts = counts
        self._shared_experts = shared_experts
        self._shared_rows = shared_rows
        self._columns: IntArray | None = None

    @property
    def shared_rows(self) -> IntArray:
        """[4, n] source, expert, destination and tokens of the shared experts' routes."""
        return self._shared_rows

    def _expanded(self) -> IntArray:
        if self._columns is None:
            r, e = self._counts.shape
            index = shape_index(r, e)
            mask = self._counts > 0
            mask[:, self._shared_experts] = False
            cells = np.flatnonzero(mask)
            n_head = cells.size
            cols = np.empty((4, n_head + self._shared_rows.shape[1]), dtype=np.int64)
            for i in range(3):
                np.take(index.cells[i], cells, out=cols[i, :n_head], mode="clip")
            np.take(self._counts, cells, out=cols[3, :n_head], mode="clip")
            cols[:, n_head:] = self._shared_rows
            cols.setflags(write=False)
            self._columns = cols
        return self._columns

    @property
    def source(self) -> IntArray:
        """[n] source rank of each route."""
        column: IntArray = self._expanded()[0]
        return column

    @property
    def expert(self) -> IntArray:
        """[n] expert of each route."""
        column: IntArray = self._expanded()[1]
        return column

    @property
    def destination(self) -> IntArray:
        """[n] rank computing each route's tokens."""
        column: IntArray = self._expanded()[2]
        return column

    @property
    def tokens(self) -> IntArray:
        """[n] tokens of each route (all positive)."""
        column: IntArray = self._expanded()[3]
        return column

    def __len__(self) -> int:
        if self._columns is not None:
            expanded: int = self._columns.shape[1]
            return expanded
        shared: int = self._shared_rows.shape[1]
        return int(np.count_nonzero(self._counts)) - int(
            np.count_nonzero(self._counts[:, self._shared_experts])) + shared


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
    allocation_home: IntArray
    """[E] flat index of cell (e, home_of[e]) of an [E, R] allocation: what stays at home."""


@lru_cache(maxsize=16)
def shape_index(num_ranks: int, num_experts: int) -> ShapeIndex:
    """The (read-only, cached) index arrays of an [R, E] shape."""
    m = num_experts // num_ranks
    experts = np.arange(num_experts, dtype=np.int64)
    home_of = experts // m
    source, expert = np.divmod(np.arange(num_ranks * num_experts, dtype=np.int64), num_experts)
    cells = np.stack((source, expert, expert // m))
    arrays = (experts, home_of, cells, home_of * num_experts + experts,
              experts * num_ranks + home_of)
    for arr in arrays:
        arr.setflags(write=False)
    return ShapeIndex(*arrays)


SPLIT_TABLE_CELLS = 1 << 18
"""Largest [rows, columns] shape whose flat-index lookup tables `_split_cells` keeps (two
int64 tables, 4 MiB): 16 layers' shared experts at E = 256, R = 64; larger batches divide."""


@lru_cache(maxsize=8)
def _row_major_split(columns: int, rows: int) -> tuple[IntArray, IntArray]:
    """Row and column of every flat index into a row-major [rows, columns] array (read-only,
    cached): a lookup in these is several times quicker than an integer divmod."""
    row, column = np.divmod(np.arange(rows * columns, dtype=np.int64), columns)
    row.setflags(write=False)
    column.setflags(write=False)
    return row, column


def _split_cells(cells: IntArray, rows: int, columns: int) -> tuple[IntArray, IntArray]:
    """(row, column) of flat indices `cells` into a row-major [rows, columns] array; the
    lookup tables are cached for the next power of two of `rows`, up to
    `SPLIT_TABLE_CELLS`."""
    table_rows = 1 << max(rows - 1, 0).bit_length()
    if table_rows * columns > SPLIT_TABLE_CELLS:
        split: tuple[IntArray, IntArray] = np.divmod(cells, columns)
        return split
    row, column = _row_major_split(columns, table_rows)
    return row.take(cells), column.take(cells)


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
    return _layer_routes(batch, _shared_cells(batch, allocs))[0][0]


@dataclass(frozen=True, slots=True)
class _SharedCells:
    """The allocation rows of shared experts (tokens computed off the expert's home rank),
    one row per (layer, expert) in that order, and their positive cells row-major."""

    layer: IntArray
    """[n] layer of each shared row."""
    expert: IntArray
    """[n] expert of each shared row."""
    cell: IntArray
    """[c] flat index of each positive cell in the [n, R] shared rows."""
    row: IntArray
    """[c] shared row of each positive cell."""
    rank: IntArray
    """[c] rank computing the cell's tokens."""
    tokens: IntArray
    """[c] tokens of the cell."""


def _shared_cells(batch: LayerBatch, alloc: IntArray) -> _SharedCells:
    """The positive allocation cells of every shared expert of every layer."""
    layers, r, e = batch.counts.shape
    index = shape_index(r, e)
    on_home = alloc.reshape(layers, e * r)[:, index.allocation_home]
    layer, expert = (on_home != batch.expert_tokens).nonzero()
    rows = alloc[layer, expert, :].ravel()
    cells = (rows > 0).nonzero()[0]  # quicker than a 2-D nonzero; alloc >= 0
    row, rank = _split_cells(cells, expert.size, r)
    return _SharedCells(layer, expert, cells, row, rank, rows.take(cells))


def _layer_bounds(keys: IntArray, layers: int) -> list[int]:
    """Start offsets (and the end) of each layer's run in a sequence sorted by layer."""
    return [int(x) for x in np.searchsorted(keys, np.arange(layers + 1))]


def _layer_routes(batch: LayerBatch, shared: _SharedCells) -> tuple[list[Routes], IntArray]:
    """`routes_from_allocation` of every layer, and [L] tokens that stay on their source.

    All layers go through each numpy step together (the north-west matching works per
    shared row, so rows of different layers never mix); each layer's shared-expert routes
    are then written into one [4, n] array whose rows are the route columns. Local tokens
    are the home rank's own counts of unshared experts plus the local-first amounts of
    shared ones: the matching never pairs a rank with itself, since after the local step a
    rank has residual supply or residual demand, not both.
    """
    layers, r, e = batch.counts.shape
    index = shape_index(r, e)
    flat = batch.counts.reshape(layers, r * e)
    kept = np.add.reduce(flat[:, index.diagonal], axis=1)
    lay, exp = shared.layer, shared.expert
    cell_row, cell_rank = shared.row, shared.rank
    # local first: each allocation cell keeps min(own count, cell tokens) on its own rank
    supply = batch.counts[lay, :, exp]  # [n, R], a copy
    flat_supply = supply.reshape(-1)  # a view: the copy is C-contiguous
    own = flat_supply.take(shared.cell)
    local = np.minimum(own, shared.tokens)
    flat_supply[shared.cell] = own - local
    on = local.nonzero()[0]
    local_row, local_rank, local_tokens = cell_row[on], cell_rank[on], local[on]
    if exp.size:
        home_counts = flat[lay, index.diagonal[exp]]
        if layers == 1:
            kept += int(np.add.reduce(local_tokens)) - int(np.add.reduce(home_counts))
        else:
            np.add.at(kept, lay[local_row], local_tokens)
            np.subtract.at(kept, lay, home_counts)
    left = shared.tokens - local
    wanted = left.nonzero()[0]
    nw_row, nw_source, nw_dest, nw_tokens = _north_west(
        supply, cell_row[wanted], cell_rank[wanted], left[wanted])
    if layers == 1:
        shared_at, local_at, nw_at = [0, exp.size], [0, on.size], [0, nw_row.size]
    else:
        shared_at = _layer_bounds(lay, layers)
        local_at = _layer_bounds(lay[local_row], layers)
        nw_at = _layer_bounds(lay[nw_row], layers)
    routes = []
    for x in range(layers):
        a, b = local_at[x], local_at[x + 1]
        c, d = nw_at[x], nw_at[x + 1]
        n_local = b - a
        cols = np.empty((4, n_local + d - c), dtype=np.int64)
        cols[0, :n_local] = cols[2, :n_local] = local_rank[a:b]
        cols[1, :n_local] = exp[local_row[a:b]]
        cols[3, :n_local] = local_tokens[a:b]
        tail = cols[:, n_local:]
        tail[0] = nw_source[c:d]
        tail[1] = exp[nw_row[c:d]]
        tail[2] = nw_dest[c:d]
        tail[3] = nw_tokens[c:d]
        cols.setflags(write=False)
        routes.append(Routes(batch.counts[x], exp[shared_at[x]:shared_at[x + 1]], cols))
    return routes, kept


def _north_west(supply: IntArray, d_row: IntArray, d_rank: IntArray, d_tokens: IntArray
                ) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Match per-row supply [n, R] with positive demand cells (row, rank, tokens; row-major,
    equal row sums) in rank order: (row, source rank, destination rank, tokens) per piece.

    Laid end to end, the positive supply cells and the demand cells each tile [0, total);
    every piece between consecutive cut points of the two tilings is one route. Each
    supply cell is one piece, cut further where a demand cell ends strictly inside it; a
    piece belongs to the first demand cell whose running total reaches its end. Demand
    cell k ends at piece at[k] + (inner cuts before k), where at[k] is the supply cell its
    end falls in (a demand end that meets a supply cell's end is that cell's last piece,
    and no later inner cut lies in the same cell), so the pieces of demand k are the run
    between the previous demand's end and its own.
    """
    s_cell = (supply > 0).ravel().nonzero()[0]  # supply is >= 0
    cum_s = supply.ravel().take(s_cell).cumsum()
    cum_d = d_tokens.cumsum()
    at = cum_s.searchsorted(cum_d)  # the supply cell each demand cut falls in
    is_inner = cum_s[at] != cum_d
    inner = is_inner.nonzero()[0]
    pieces = np.bincount(at[inner], minlength=cum_s.size)
    pieces += 1
    cuts = cum_s.repeat(pieces)  # a cell's last piece ends where the cell ends
    cuts[at[inner] + np.arange(inner.size)] = cum_d[inner]
    lengths = np.empty_like(cuts)
    lengths[:1] = cuts[:1]
    np.subtract(cuts[1:], cuts[:-1], out=lengths[1:])
    end = is_inner.cumsum()  # inner cuts up to and including k
    end -= is_inner
    end += at  # the piece where demand k ends
    per_demand = np.empty_like(end)
    per_demand[:1] = end[:1] + 1
    np.subtract(end[1:], end[:-1], out=per_demand[1:])
    row, source = _split_cells(s_cell.repeat(pieces), *supply.shape)
    return row, source, d_rank.repeat(per_demand), lengths


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


def _replicas(shared: _SharedCells, home_of: IntArray, layers: int, r: int
              ) -> tuple[list[list[tuple[int, ...]]], list[int]]:
    """Per layer and rank the foreign experts the rank hosts (sorted), and per layer the
    tokens computed on them (migrated), from the shared experts' cells."""
    foreign = (shared.rank != home_of[shared.expert[shared.row]]).nonzero()[0]
    row = shared.row[foreign]
    hosted: list[list[tuple[int, ...]]] = [[()] * r for _ in range(layers)]
    # cells come row-major over (layer, expert, rank): each rank's experts come sorted
    for x, d, y in zip(shared.layer[row].tolist(), shared.rank[foreign].tolist(),
                       shared.expert[row].tolist(), strict=True):
        hosted[x][d] += (y,)
    moved = shared.tokens[foreign]
    if layers == 1:
        return hosted, [int(np.add.reduce(moved))]
    per_layer = np.zeros(layers, dtype=np.int64)
    np.add.at(per_layer, shared.layer[row], moved)
    return hosted, per_layer.tolist()


def layer_accounts(batch: LayerBatch, alloc: IntArray, lower_bounds: IntArray | None = None
                   ) -> list[dict[str, Any]]:
    """The fields of each layer's `PlacementResult` but `planner` and `wall_time_s`
    (a planner that times itself adds them once the accounting is done)."""
    layers, r, e = batch.counts.shape
    m = e // r
    index = shape_index(r, e)
    shared = _shared_cells(batch, alloc)
    hosted, migrated = _replicas(shared, index.home_of, layers, r)
    routes, kept = _layer_routes(batch, shared)
    rank_loads = np.add.reduce(alloc, axis=1)
    remote = (batch.capacity * r - kept).tolist()  # every layer routes R*S*K tokens
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
    "PlacementProblem",
    "PlacementResult",
    "Routes",
    "LayerBatch",
    "ShapeIndex",
    "build_result",
    "build_results",
    "placement_layers",
    "placement_problem",
    "layer_accounts",
    "layer_lower_bounds",
    "layer_slice",
    "layers_array",
    "matrix_array",
    "matrix_batch",
    "redundancy_lower_bounds",
    "routes_from_allocation",
    "shape_index",
    "single_layer",
    "validated_layers",
]

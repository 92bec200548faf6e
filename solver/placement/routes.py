"""Token routes of a placement: turning an allocation alloc[e, d] (tokens of expert e
computed on rank d) into routes (source, expert, destination, tokens) with the most
source-local routing that allocation admits, for one problem or a `LayerBatch` at once, with
index arrays kept per shape on the search's memo (`shape_index`).

Owns: `Routes`, `routes_from_allocation` and the batched routing `solver.placement.results`
accounts with. Must not: choose an allocation (the planners do). Vocabulary: as
`solver.placement.problem`.
"""

from dataclasses import dataclass

import numpy as np

from models.core.search_memo import current_memo, kept
from solver.placement.problem import IntArray, LayerBatch, PlacementProblem, single_layer


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
            index = _cell_index(r, e)
            mask = self._counts > 0
            mask[:, self._shared_experts] = False
            cells = np.flatnonzero(mask)
            n_head = cells.size
            cols = np.empty((4, n_head + self._shared_rows.shape[1]), dtype=np.int64)
            for i in range(3):
                np.take(index[i], cells, out=cols[i, :n_head], mode="clip")
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
    diagonal: IntArray
    """[E] flat index of cell (home_of[e], e): the tokens an expert's home rank sends itself."""
    allocation_home: IntArray
    """[E] flat index of cell (e, home_of[e]) of an [E, R] allocation: what stays at home."""


def shape_index(num_ranks: int, num_experts: int) -> ShapeIndex:
    """The read-only index arrays of an [R, E] shape (kept on the search's memo)."""
    memo = current_memo()
    key = ("shape", num_ranks, num_experts)
    found: ShapeIndex = kept(memo.index_arrays, key,
                             lambda: _shape_index(num_ranks, num_experts))
    return found


def _shape_index(num_ranks: int, num_experts: int) -> ShapeIndex:
    m = num_experts // num_ranks
    experts = np.arange(num_experts, dtype=np.int64)
    home_of = experts // m
    arrays = (experts, home_of, home_of * num_experts + experts, experts * num_ranks + home_of)
    for arr in arrays:
        arr.setflags(write=False)
    return ShapeIndex(*arrays)


def _cell_index(num_ranks: int, num_experts: int) -> IntArray:
    """[3, R*E] per cell of a row-major [R, E] count matrix: source rank, expert, home rank
    (read-only, kept on the search's memo). Apart from `shape_index`: only the expansion of
    routes into columns reads it."""
    memo = current_memo()
    found: IntArray = kept(memo.index_arrays,
                           ("cells", num_ranks, num_experts),
                           lambda: _cells(num_ranks, num_experts))
    return found


def _cells(num_ranks: int, num_experts: int) -> IntArray:
    source, expert = np.divmod(np.arange(num_ranks * num_experts, dtype=np.int64), num_experts)
    cells = np.stack((source, expert, expert // (num_experts // num_ranks)))
    cells.setflags(write=False)
    return cells


SPLIT_TABLE_CELLS = 1 << 18
"""Largest [rows, columns] shape whose flat-index lookup tables `_split_cells` keeps (two
int64 tables, 4 MiB): 16 layers' shared experts at E = 256, R = 64; larger batches divide."""


def _row_major_split(columns: int, rows: int) -> tuple[IntArray, IntArray]:
    """Row and column of every flat index into a row-major [rows, columns] array (read-only,
    kept on the search's memo): a lookup in these is several times quicker than an integer
    divmod."""
    memo = current_memo()
    key = ("row-major", columns, rows)
    found: tuple[IntArray, IntArray] = kept(
        memo.index_arrays, key,
        lambda: _row_major_arrays(columns, rows))
    return found


def _row_major_arrays(columns: int, rows: int) -> tuple[IntArray, IntArray]:
    row, column = np.divmod(np.arange(rows * columns, dtype=np.int64), columns)
    row.setflags(write=False)
    column.setflags(write=False)
    return row, column


def _split_cells(cells: IntArray, rows: int, columns: int) -> tuple[IntArray, IntArray]:
    """(row, column) of flat indices `cells` into a row-major [rows, columns] array: by a
    shift and a mask when `columns` is a power of two, else from lookup tables kept for the
    next power of two of `rows`, up to `SPLIT_TABLE_CELLS`."""
    if columns & (columns - 1) == 0:  # a power of two: a shift and a mask, quicker still
        shift = columns.bit_length() - 1
        return cells >> shift, cells & (columns - 1)
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
    return layer_routes(batch, shared_cells(batch, allocs))[0][0]


@dataclass(frozen=True, slots=True)
class SharedCells:
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


def shared_cells(batch: LayerBatch, alloc: IntArray) -> SharedCells:
    """The positive allocation cells of every shared expert of every layer."""
    layers, r, e = batch.counts.shape
    index = shape_index(r, e)
    on_home = alloc.reshape(layers, e * r)[:, index.allocation_home]
    layer, expert = (on_home != batch.expert_tokens).nonzero()
    # [n, R] rows, flat; one layer's by a take, quicker than the fancy index
    rows = alloc[0].take(expert, axis=0).ravel() if layers == 1 else \
        alloc[layer, expert, :].ravel()
    cells = (rows > 0).nonzero()[0]  # quicker than a 2-D nonzero; alloc >= 0
    row, rank = _split_cells(cells, expert.size, r)
    return SharedCells(layer, expert, cells, row, rank, rows.take(cells))


def _layer_bounds(keys: IntArray, layers: int) -> list[int]:
    """Start offsets (and the end) of each layer's run in a sequence sorted by layer."""
    return [int(x) for x in np.searchsorted(keys, np.arange(layers + 1))]


def layer_routes(batch: LayerBatch, shared: SharedCells) -> tuple[list[Routes], IntArray]:
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
    if layers == 1:  # [n, R], a C-contiguous copy; a take of columns is quicker here
        supply = batch.counts[0].take(exp, axis=1).T.copy()
    else:
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
        cols = _route_columns(exp, (local_rank[a:b], local_row[a:b], local_tokens[a:b]),
                              (nw_source[c:d], nw_row[c:d], nw_dest[c:d], nw_tokens[c:d]))
        routes.append(Routes(batch.counts[x], exp[shared_at[x]:shared_at[x + 1]], cols))
    return routes, kept


def _route_columns(exp: IntArray, local: tuple[IntArray, IntArray, IntArray],
                   matched: tuple[IntArray, IntArray, IntArray, IntArray]) -> IntArray:
    """One layer's shared-expert routes as a read-only [4, n] array (source, expert,
    destination, tokens): first the tokens kept on their rank (`local`: rank, shared row,
    tokens), then the north-west pieces (`matched`: source, row, destination, tokens)."""
    rank, row, tokens = local
    n_local = rank.size
    cols = np.empty((4, n_local + matched[0].size), dtype=np.int64)
    cols[0, :n_local] = cols[2, :n_local] = rank
    cols[1, :n_local] = exp[row]
    cols[3, :n_local] = tokens
    tail = cols[:, n_local:]
    tail[0] = matched[0]
    tail[1] = exp[matched[1]]
    tail[2] = matched[2]
    tail[3] = matched[3]
    cols.setflags(write=False)
    return cols


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
    between the previous demand's end and its own. Without inner cuts (the tight
    construction's demands all end with a supply cell) the pieces are the supply cells.
    """
    s_cell = (supply > 0).ravel().nonzero()[0]  # supply is >= 0
    s_tokens = supply.ravel().take(s_cell)
    cum_s = s_tokens.cumsum()
    cum_d = d_tokens.cumsum()
    at = cum_s.searchsorted(cum_d)  # the supply cell each demand cut falls in
    is_inner = cum_s.take(at) != cum_d
    inner = is_inner.nonzero()[0]
    if inner.size == 0:  # every demand ends with a supply cell: each cell is one piece
        per_cell = np.empty_like(at)
        per_cell[:1] = at[:1] + 1
        np.subtract(at[1:], at[:-1], out=per_cell[1:])
        row, source = _split_cells(s_cell, *supply.shape)
        return row, source, d_rank.repeat(per_cell), s_tokens
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


__all__ = [
    "SharedCells",
    "Routes",
    "ShapeIndex",
    "layer_routes",
    "routes_from_allocation",
    "shared_cells",
    "shape_index",
]

"""Property tests of the routes' north-west matching: it equals a plain two-pointer walk per
shared row on random supplies and demands, with demand cuts inside supply cells and without
(the quick path where every piece is a supply cell), and at a power-of-two and another rank
count (the two ways flat cells are split into rows and ranks)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from models.core.search_memo import search_memo
from solver.placement.routes import _north_west


def _walked(supply: np.ndarray, d_row: np.ndarray, d_rank: np.ndarray,
            d_tokens: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(row, source, destination, tokens) pieces: per row, supplies and demands in rank
    order, each piece as much as both the current supply and demand have left."""
    pieces = []
    for row in range(supply.shape[0]):
        left = [[int(x), int(t)] for x, t in enumerate(supply[row]) if t > 0]
        demands = [[int(d), int(t)] for x, d, t in zip(d_row, d_rank, d_tokens, strict=True)
                   if x == row]
        i = 0
        for dest, want in demands:
            while want > 0:
                source, have = left[i]
                take = min(have, want)
                pieces.append((row, source, dest, take))
                want -= take
                left[i][1] -= take
                if left[i][1] == 0:
                    i += 1
    return pieces


@st.composite
def matchings(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(supply [n, R], demand rows, ranks, tokens): demand cells row-major, equal row sums;
    `whole` demands are unions of consecutive supply cells (no inner cuts)."""
    n = draw(st.integers(1, 6))
    r = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16]))
    whole = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    supply = rng.integers(0, 5, size=(n, r)) * rng.integers(0, 2, size=(n, r))
    supply[:, rng.integers(0, r)] += 1  # every row supplies something
    rows, ranks, tokens = [], [], []
    for row in range(n):
        cells = [int(t) for t in supply[row] if t > 0]
        if whole:
            cut = sorted(set(rng.integers(1, len(cells), size=rng.integers(0, len(cells)))))
            sizes = [sum(x) for x in np.split(np.array(cells), cut)] if cells else []
        else:
            total = sum(cells)
            cut = sorted(set(rng.integers(1, total, size=rng.integers(0, total)).tolist())) \
                if total > 1 else []
            sizes = np.diff([0, *cut, total]).tolist()
        dest = np.sort(rng.choice(r, size=min(len(sizes), r), replace=False)).tolist()
        if len(dest) < len(sizes):  # fewer ranks than demands: merge the tail into the last
            sizes = [*sizes[:len(dest) - 1], sum(sizes[len(dest) - 1:])]
        rows += [row] * len(sizes)
        ranks += dest
        tokens += [int(x) for x in sizes]
    as_array = [np.asarray(x, dtype=np.int64) for x in (rows, ranks, tokens)]
    return supply.astype(np.int64), *as_array


@settings(max_examples=300, deadline=None)
@given(case=matchings())
def test_north_west_equals_a_two_pointer_walk(
        case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    supply, d_row, d_rank, d_tokens = case
    with search_memo():
        got = _north_west(supply.copy(), d_row, d_rank, d_tokens)
    assert all(x.dtype == np.int64 for x in got)
    assert list(zip(*(x.tolist() for x in got), strict=True)) == \
        _walked(supply, d_row, d_rank, d_tokens)

"""How many micro-batches each chunk of a rank holds, counted from the schedule's op order.

Owns: `InFlightProfile` (per rank: the peak micro-batch x chunk count until W and until B,
and every per-chunk live vector that can be the byte peak) and `in_flight_profile`, which
builds it once per (schedule, p, m, v, N) from the generated order. Must not: size
activations (the memory ledger passes its per-chunk bytes to `peak_bytes`) or time ops.

Why the order suffices (the simulator's metrics, `metrics.py`): every allocation (an F
start) and release (a W or BW end) of a rank lies on a boundary of the rank's own ops, so
the live set when a row starts is its list prefix's allocations minus releases, plus the
row's own allocation; durations do not move it. The byte peak over time is then
max over rows of sum_c live_c x bytes_c, and only rows whose live vector is not dominated
by another row's (componentwise) can reach it: those vectors are kept, so any chunk
sizes, even or not, get the exact peak from a few dot products.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.ops import OpKind, PipelineProgram
from models.core.pipeline.registry import shared_program
from models.core.search_memo import current_memo, kept
from models.errors import InvalidSpecError

IntArray = npt.NDArray[np.int64]
CountArray = npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlightProfile:
    """Activations a schedule keeps on each rank, per local chunk (index as in the layout:
    looped chunk c = stage c p + d; V chunk 0 = stage d, 1 = stage 2p-1-d; bidirectional
    chunk 0 = the first pipe's stage, 1 = the second pipe's)."""

    num_chunks: int
    """Local chunks per rank (bidirectional: one per pipe)."""
    peak_chunks: tuple[int, ...]
    """Per rank: peak micro-batch x chunk activations held until W (or BW)."""
    peak_until_b_chunks: tuple[int, ...]
    """Per rank: the same, held until B (or BW)."""
    live_vectors: tuple[tuple[tuple[int, ...], ...], ...]
    """Per rank: the undominated per-chunk live counts at the start of an allocating op."""
    chunk_peaks_until_b: tuple[tuple[int, ...], ...]
    """Per rank and local chunk: the most micro-batches that chunk holds until B at once."""
    first_stage_chunks: tuple[tuple[int, ...], ...]
    """Per rank: its local chunks that run a pipe's first stage (where the embedding is)."""
    last_stage_chunks: tuple[tuple[int, ...], ...]
    """Per rank: its local chunks that run a pipe's last stage (the head and loss)."""
    _arrays: dict[int, IntArray] = field(default_factory=dict, compare=False, hash=False,
                                         repr=False)
    """Per rank, `live_vectors` as one integer matrix (built on first use)."""
    _dominance: dict[tuple[int, int], bool] = field(default_factory=dict, compare=False,
                                                     hash=False, repr=False)
    """Answers of `dominates`, memoised."""
    _largest_counts: dict[int, int] = field(default_factory=dict, compare=False, hash=False,
                                            repr=False)
    """Per rank, the largest total of one live vector (built on first use)."""

    def _matrix(self, rank: int) -> IntArray:
        matrix = self._arrays.get(rank)
        if matrix is None:
            matrix = np.array(self.live_vectors[rank], dtype=np.int64).reshape(
                len(self.live_vectors[rank]), self.num_chunks)
            self._arrays[rank] = matrix
        return matrix

    def peak_bytes(self, rank: int, chunk_bytes: Sequence[int]) -> int:
        """Peak bytes rank `rank` holds until W when chunk c of it stores chunk_bytes[c] per
        micro-batch (exact for uneven chunks): the largest dot product of a live vector with
        the chunk sizes, as one integer matrix product (Python integers where the product
        could leave the 63-bit range).

        Raises:
            InvalidSpecError: `chunk_bytes` does not give one size per local chunk.
        """
        if len(chunk_bytes) != self.num_chunks:
            raise InvalidSpecError(
                f"{len(chunk_bytes)} chunk sizes for a schedule with {self.num_chunks} chunks "
                "per rank: give one per chunk", field="chunk_bytes")
        vectors = self.live_vectors[rank]
        if not vectors:
            return 0
        largest = max(chunk_bytes, default=0)
        if largest >= 0 and min(chunk_bytes, default=0) == largest:
            # Every chunk stores the same bytes: the largest dot product is those bytes
            # times the largest live vector's total.
            count = self._largest_counts.get(rank)
            if count is None:
                count = self._largest_counts[rank] = max(map(sum, vectors))
            return largest * count
        if len(vectors) == 1:
            return sum([n * b for n, b in zip(vectors[0], chunk_bytes, strict=True)])
        if min(chunk_bytes, default=0) < 0 or largest * self.peak_chunks[rank] >= 2**62:
            return max(sum(n * b for n, b in zip(vec, chunk_bytes, strict=True))
                       for vec in vectors)
        return int((self._matrix(rank) @ np.asarray(chunk_bytes, dtype=np.int64)).max())

    def dominates(self, rank: int, other: int) -> bool:
        """True when every live vector of `other` is at most (chunk by chunk) some live
        vector of `rank`: for any non-negative chunk sizes, `other` then holds at most the
        peak bytes of `rank` (`peak_bytes` is a maximum of non-negative dot products)."""
        key = (rank, other)
        answer = self._dominance.get(key)
        if answer is None:
            mine, theirs = self._matrix(rank), self._matrix(other)
            if theirs.shape[0] == 0:
                answer = True
            elif mine.shape[0] == 0:
                answer = False
            else:
                covered = np.all(mine[None, :, :] >= theirs[:, None, :], axis=2)
                answer = bool(np.all(np.any(covered, axis=1)))
            self._dominance[key] = answer
        return answer

    def peak_counts(self, rank: int) -> tuple[int, ...]:
        """The per-chunk counts at the count peak of `rank` (the vector with most units)."""
        return max(self.live_vectors[rank], key=sum, default=(0,) * self.num_chunks)


def in_flight_profile(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                      num_chunks: int = 1, group_size: int | None = None) -> InFlightProfile:
    """The in-flight profile of `schedule`'s generated order (kept per parameters on the
    search's memo).

    Source: the generators of this package (each cites its schedule's reference order);
    counts as in `metrics.py` (live from the start of F to the end of W or BW; releases
    before allocations at equal times).
    Legend: p=num_stages, m=num_micro_batches, v=num_chunks, N=group_size.

    Raises:
        InvalidSpecError: the schedule refuses these parameters.
    """
    key = (schedule, num_stages, num_micro_batches, num_chunks, group_size)
    memo = current_memo()
    return kept(memo.in_flight, key,
                lambda: profile_of(shared_program(*key)))


def profile_of(program: PipelineProgram) -> InFlightProfile:
    """The in-flight profile of any program (generated or optimised)."""
    place = program.placement
    kind = program.kind
    is_fb = kind == OpKind.FB
    has_f = (kind == OpKind.F) | is_fb
    bj = np.where(is_fb, program.pair_micro_batch, program.micro_batch)
    bs = np.where(is_fb, program.pair_stage, program.stage)
    f_chunk = place.stage_chunk[place.micro_batch_pipe[program.micro_batch], program.stage]
    b_chunk = place.stage_chunk[place.micro_batch_pipe[bj], bs]
    w_chunk = np.where(kind == OpKind.W, f_chunk, b_chunk)
    releases_w = (kind == OpKind.W) | (kind == OpKind.BW) | is_fb
    releases_b = (kind == OpKind.B) | (kind == OpKind.BW) | is_fb
    num_chunks = int(place.stage_chunk.max()) + 1
    offsets = program.rank_offsets
    ranks = program.num_ranks
    # Every rank at once, chunk-major (one row per chunk, so the prefix sums run along
    # contiguous memory): live counts are prefix sums restarted at each rank's first row.
    alloc = _one_hot(f_chunk, has_f, num_chunks)
    live = _live_at_start(alloc, _one_hot(w_chunk, releases_w, num_chunks), offsets)
    live_b = _live_at_start(alloc, _one_hot(b_chunk, releases_b, num_chunks), offsets)
    peaks = _rank_max(live.sum(axis=0), offsets).tolist()
    peaks_b = _rank_max(live_b.sum(axis=0), offsets).tolist()
    chunk_b = [tuple(row) for row in _rank_max(live_b, offsets).T.tolist()]
    # An allocating row followed on its rank by another, with no release between, is
    # dominated by that next row's vector (its live set plus one more), so only the last
    # row of each run of allocations can be undominated.
    followed = np.append(has_f[1:], False) & ~releases_w
    followed[offsets[1:][offsets[1:] > offsets[:-1]] - 1] = False
    candidates = np.flatnonzero(has_f & ~followed)
    candidate_live = live[:, candidates].T
    cuts = np.searchsorted(candidates, offsets)
    vectors = [_undominated(candidate_live[cuts[r]:cuts[r + 1]]) for r in range(ranks)]
    pipes = range(place.stage_rank.shape[0])
    ends = [
        tuple(sorted({int(place.stage_chunk[pipe, s]) for pipe in pipes
                      if int(place.stage_rank[pipe, s]) == r}))
        for s in (0, place.num_stages - 1) for r in range(program.num_ranks)
    ]
    return InFlightProfile(num_chunks=num_chunks, peak_chunks=tuple(peaks),
                           peak_until_b_chunks=tuple(peaks_b), live_vectors=tuple(vectors),
                           chunk_peaks_until_b=tuple(chunk_b),
                           first_stage_chunks=tuple(ends[:ranks]),
                           last_stage_chunks=tuple(ends[ranks:]))


def _one_hot(chunk: IntArray, mask: npt.NDArray[np.bool_], num_chunks: int) -> CountArray:
    """[chunks, rows]: 1 where a masked row touches that chunk (32-bit counts: half the
    memory traffic of the prefix sums over long lists)."""
    out = np.zeros((num_chunks, chunk.shape[0]), dtype=np.int32)
    rows = np.flatnonzero(mask)
    out[chunk[rows], rows] = 1
    return out


def _live_at_start(alloc: CountArray, release: CountArray, offsets: IntArray) -> CountArray:
    """[chunks, rows] live counts when each row starts: its rank's list prefix before it
    plus its own allocation (its release happens at its end)."""
    net = alloc - release
    prefix = np.zeros((net.shape[0], net.shape[1] + 1), dtype=np.int32)
    np.cumsum(net, axis=1, out=prefix[:, 1:])
    live: CountArray = prefix[:, :-1] + alloc
    live -= np.repeat(prefix[:, offsets[:-1]], np.diff(offsets), axis=1)
    return live


def _rank_max(values: CountArray, offsets: IntArray) -> IntArray:
    """Per rank (the last axis), the largest of its rows' values (0 where it holds none,
    or all are below 0)."""
    out = np.zeros((*values.shape[:-1], offsets.shape[0] - 1), dtype=np.int64)
    nonempty = offsets[1:] > offsets[:-1]
    if values.shape[-1]:
        out[..., nonempty] = np.maximum.reduceat(values, offsets[:-1][nonempty], axis=-1)
    maxed: IntArray = np.maximum(out, 0)
    return maxed


def _undominated(vectors: CountArray) -> tuple[tuple[int, ...], ...]:
    """The distinct vectors no other vector dominates componentwise."""
    if vectors.shape[0] == 0:
        return ()
    unique = _unique_rows(vectors)
    if unique.shape[1] == 1:
        return ((int(unique.max()),),)
    # Only a vector with a larger total can dominate another; compare in blocks.
    unique = unique[np.argsort(-unique.sum(axis=1), kind="stable")]
    keep = np.ones(unique.shape[0], dtype=bool)
    for lo in range(0, unique.shape[0], 256):
        block = unique[lo:lo + 256]
        ge = np.all(unique[None, :, :] >= block[:, None, :], axis=2)
        gt = np.any(unique[None, :, :] > block[:, None, :], axis=2)
        keep[lo:lo + 256] = ~np.any(ge & gt, axis=1)
    # tolist: Python integers in one C call per matrix, not one generator step per entry.
    return tuple(map(tuple, unique[keep].tolist()))


def _unique_rows(vectors: CountArray) -> CountArray:
    """`np.unique(vectors, axis=0)` (distinct rows in lexicographic order) for non-negative
    counts, through one integer per row (the row's digits in base max + 1, the first column
    most significant, so the integers sort as the rows do) where that integer fits in 63
    bits."""
    base = int(vectors.max()) + 1
    width = vectors.shape[1]
    if int(vectors.min()) < 0 or base ** width >= 2**63:
        out: CountArray = np.unique(vectors, axis=0)
        return out
    weights = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
    _, first = np.unique(vectors @ weights, return_index=True)
    picked: CountArray = vectors[first]
    return picked


__all__ = ["InFlightProfile", "in_flight_profile", "profile_of"]

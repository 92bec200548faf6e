"""Replay of a recorded op order: a pipeline program's makespan for new durations, by running
its ops in the order the event loop ran them once (`models.core.pipeline.simulator`).

Owns: the flat form of a recorded order (`VisitOrder`, `visit_order`) and the passes over it
(`replay`, `replay_local`, `wave_replay`). Whether a head op is blocked depends only on which
outputs have been written, never on the durations, so the order is a property of the
program; a pass repeats the event loop's sums in that order without its blocking checks and
gives the same floats. Must not: compile programs, run the event loop or decide when a replay
is asked for (`simulate_makespan` does).

Two copies of the ready times serve a P2P latency: the outputs as written (read on the same
rank) and plus the latency (read across ranks), so the latency is added once per output, not
once per read. Without a latency (the search's bounds ask for most makespans so) the second
copy would hold the same floats, and the passes keep one (`replay_local`, and `wave_replay`
on `VisitOrder.local_waves`): writing two slots an op rather than four, op by op 1.29-1.35
times faster on 1F1B, interleaved 1F1B and DualPipeV orders of 1,024-8,192 ops (2-core x86
host, best of 30 passes).
"""

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
OrderArray = npt.NDArray[np.int32]
"""A recorded op order as (rank, first row, stop row) stretches, one row each; an order the
waves recorded (`_wave_loop`) has one op per stretch and a fourth column, its wave."""
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

Wave = tuple[int, int, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]
"""One wave of a recorded order: its first and stop position and the seven columns of its
ops."""
LocalWave = tuple[int, int, IntArray, IntArray, IntArray, IntArray, IntArray]
"""One wave with the five columns of `VisitOrder.local`."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class VisitOrder:
    """The order in which the event loop ran a program's ops, as flat columns.

    `columns` holds seven lists, the i-th entry of each for the i-th op run: its rank, its
    forward-input slot, its input-gradient slot, its two output slots, and the same two
    plus `num_slots`. A dependency on another rank reads its slot plus `num_slots`:
    `replay` keeps a second copy of the ready times with the P2P latency already added, so
    that an op's start is two reads and a max (`op_index` maps each op back to the
    program's row, to permute durations). The same-rank prerequisite (F for B, B for W) is
    left out: the rank ran it earlier in its own list, so it ended no later than the rank's
    free time, which the start already takes. Lists rather than a tuple per op: one
    conversion per column, and the replay's `zip` reuses its tuple. Made from `array` on the
    first `replay` (with P2P latency): the search's bounds replay without latency
    (`replay_local`, its own five columns) or by waves, and never read them."""

    op_index: IntArray
    columns: list[list[int]] = field(default_factory=list)
    array: IntArray
    """The seven columns as one [7, ops] array, which `local` and `local_waves` are made
    from when first asked for."""
    segments: OrderArray
    """The stretches the order was built from, as an array: a program compiled again from
    the same op lists may be given them (`CompiledProgram.segments`) and replay at once."""
    waves: list[Wave] | None = None
    """For an order recorded by waves whose waves are wide (`visit_order`'s
    `wave_min_width`): per wave, its first and stop position in the order and the seven
    columns of its ops as arrays (`wave_replay` runs a wave in numpy; `columns` is then left
    empty)."""
    local: list[list[int]] = field(default_factory=list)
    """For a replay without P2P latency (`replay_local`), made on its first one: five of the
    columns, the rank, the two input slots without the `num_slots` shift and the two output
    slots."""
    local_waves: list[LocalWave] = field(default_factory=list)
    """The same for `waves`, made on its first replay without latency."""


def visit_order(columns: IntArray, cross_prev: BoolArray, cross_next: BoolArray, *,
                num_slots: int, segments: list[tuple[int, int, int]] | OrderArray,
                wave_min_width: int) -> VisitOrder:
    """The flat op order of `segments` ((rank, first row, stop row) as the loop ran them,
    with the wave of each where the waves recorded it) over a compiled program's [6, rows]
    `columns` (rank, the three input slots, the two output slots) and whether each row's
    forward input and input gradient come from another rank; by waves where they average
    `wave_min_width` ops or more."""
    given = np.asarray(segments, dtype=np.int64)
    wave_of = given[:, 3] if given.ndim == 2 and given.shape[1] == 4 else None
    bounds = given[:, :3] if wave_of is not None else given.reshape(-1, 3)
    lengths = bounds[:, 2] - bounds[:, 1]
    # Row k of the order is segment i's first row plus k's offset within that segment.
    shift = bounds[:, 1] - (np.cumsum(lengths) - lengths)
    index = np.repeat(shift, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    rank, dep_prev, dep_next, _, out_a, out_b = columns[:, index]
    flat = np.stack([rank, dep_prev + num_slots * cross_prev[index],
                     dep_next + num_slots * cross_next[index], out_a, out_b,
                     out_a + num_slots, out_b + num_slots])
    kept = given.astype(np.int32) if wave_of is not None else bounds.astype(np.int32)
    if wave_of is None or index.size < wave_min_width * (int(wave_of[-1]) + 1):
        return VisitOrder(op_index=index, array=flat, segments=kept)
    # One op per stretch, in wave order: a wave's ops are a run of the order.
    edges = np.flatnonzero(np.diff(wave_of)) + 1
    starts = [0, *edges.tolist()]
    stops = [*edges.tolist(), index.size]
    waves: list[Wave] = [(lo, hi, *flat[:, lo:hi])
                         for lo, hi in zip(starts, stops, strict=True)]
    return VisitOrder(op_index=index, array=flat, segments=kept, waves=waves)


def _unshifted(order: VisitOrder, num_slots: int) -> tuple[IntArray, IntArray]:
    """The order's two input-slot columns without the `num_slots` shift of a read across
    ranks."""
    prev, after = order.array[1], order.array[2]
    return prev - num_slots * (prev >= num_slots), after - num_slots * (after >= num_slots)


def _far_columns(order: VisitOrder) -> list[list[int]]:
    """`VisitOrder.columns`, made on first use (one assignment, as `_local_columns`)."""
    if not order.columns:
        order.columns[:] = order.array.tolist()
    return order.columns


def _local_columns(order: VisitOrder, num_slots: int) -> list[list[int]]:
    """`VisitOrder.local`, made on first use (one assignment: a thread beside it reads the
    whole list or none)."""
    if not order.local:
        prev, after = _unshifted(order, num_slots)
        rank, _, _, out_a, out_b = order.array[:5]
        order.local[:] = np.stack([rank, prev, after, out_a, out_b]).tolist()
    return order.local


def _local_waves(order: VisitOrder, num_slots: int) -> list[LocalWave]:
    """`VisitOrder.local_waves`, made on first use (as `_local_columns`)."""
    assert order.waves is not None
    if not order.local_waves:
        prev, after = _unshifted(order, num_slots)
        order.local_waves[:] = [(lo, hi, r, prev[lo:hi], after[lo:hi], a, b)
                                for lo, hi, r, _, _, a, b, _, _ in order.waves]
    return order.local_waves


def replay(order: VisitOrder, durations: FloatArray, p2p_latency_s: float,
           num_slots: int, num_ranks: int) -> list[float]:
    """Each rank's finish time, running the ops in a recorded order (`VisitOrder`): the
    event loop's arithmetic without its blocking checks, which that order never needs.

    The ready times are kept twice: as written (read on the same rank) and plus the P2P
    latency (read across ranks), each sum the same float the event loop forms when it reads
    an output from another rank."""
    ready = [math.inf] * (2 * num_slots)
    ready[num_slots - 2] = 0.0
    free = [0.0] * num_ranks
    for r, d_prev, d_next, a, b, a_far, b_far, dur in zip(
            *_far_columns(order), durations[order.op_index].tolist(), strict=True):
        t = ready[d_prev]
        x = ready[d_next]
        if x > t:
            t = x
        x = free[r]
        if x > t:
            t = x
        t += dur
        free[r] = t
        ready[a] = t
        ready[b] = t
        x = t + p2p_latency_s
        ready[a_far] = x
        ready[b_far] = x
    return free


def replay_local(order: VisitOrder, durations: FloatArray, num_slots: int,
                 num_ranks: int) -> list[float]:
    """`replay` without P2P latency: an output read on another rank is the float written
    (plus 0.0, the same float), so one copy of the ready times serves every read and the
    pass writes two slots an op, not four (`VisitOrder.local`)."""
    ready = [math.inf] * num_slots
    ready[num_slots - 2] = 0.0
    free = [0.0] * num_ranks
    for r, d_prev, d_next, a, b, dur in zip(
            *_local_columns(order, num_slots), durations[order.op_index].tolist(), strict=True):
        t = ready[d_prev]
        x = ready[d_next]
        t = x if x > t else t
        x = free[r]
        free[r] = ready[a] = ready[b] = t = (x if x > t else t) + dur
    return free


def wave_replay(order: VisitOrder, durations: FloatArray, p2p_latency_s: float,
                num_slots: int, num_ranks: int) -> list[float]:
    """`replay` a wave at a time (`VisitOrder.waves`): every op of a wave reads only
    outputs of earlier waves and its rank's free time, so a wave is one maximum of the same
    values per op, then the same sums, over numpy arrays. Without a latency, on one copy of
    the ready times (`VisitOrder.local_waves`)."""
    assert order.waves is not None
    waves: list[Wave] | list[LocalWave] = (order.waves if p2p_latency_s
                                           else _local_waves(order, num_slots))
    ready = np.full((2 if p2p_latency_s else 1) * num_slots, math.inf)
    ready[num_slots - 2] = 0.0
    free = np.zeros(num_ranks)
    dur = durations[order.op_index]
    maximum = np.maximum
    for lo, hi, r, d_prev, d_next, a, b, *far in waves:
        t = maximum(ready[d_prev], ready[d_next])
        maximum(t, free[r], out=t)
        t += dur[lo:hi]
        free[r] = t
        ready[a] = t
        ready[b] = t
        if far:
            t += p2p_latency_s
            ready[far[0]] = t
            ready[far[1]] = t
    out: list[float] = free.tolist()
    return out


__all__ = [
    "BoolArray",
    "FloatArray",
    "IntArray",
    "LocalWave",
    "OrderArray",
    "VisitOrder",
    "Wave",
    "replay",
    "replay_local",
    "visit_order",
    "wave_replay",
]

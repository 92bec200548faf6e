"""What a simulated schedule costs: timeline, makespan, both bubbles, idle, activation peaks.

Owns: `simulate` (program + durations -> `SimulationResult`), `Timeline` and the metric
definitions. Must not: change start times (the simulator's `run` decides them).

Two bubble definitions are in use and are kept apart by name:
- *global*: `idle_s[r] = makespan - busy[r]` and `global_bubble_fraction = 1 - sum busy /
  (ranks x makespan)`; right when the iteration ends in a synchronising step.
- *span* (Zero Bubble arXiv:2401.10241, whose code scores each stage's own span):
  `span_bubble_s[r] = last_end[r] - first_start[r] - busy[r]`; `span_bubble_fraction` is the
  worst rank's span bubble over its span.
Activations are counted per rank as events: a micro-batch x chunk is live from the start
of its F to the end of its releasing op (W or BW until W; B or BW until B); releases are
processed before allocations at equal times. All of a rank's events sit on boundaries of
its own ops, so the peaks follow from the rank's order alone (not from the durations).
"""

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.core.pipeline.costs import ActivationSizes, OpDurations
from models.core.pipeline.ops import OpKind, PipelineProgram
from models.core.pipeline.simulator import CompiledProgram, compile_program, op_durations, run

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineEntry:
    """One scheduled op; an FB pair carries its backward half in the `backward_*` fields."""

    stage: int
    """Pipeline rank."""
    op: str
    """'F', 'B', 'W', 'BW' or 'FB'."""
    micro_batch: int
    chunk: int
    """Local chunk index on the rank (DualPipe: 0 = forward direction, 1 = reverse)."""
    virtual_stage: int
    """Stage index in layer order within the micro-batch's pipe."""
    start_s: float
    end_s: float
    backward_micro_batch: int | None = None
    backward_chunk: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Timeline:
    """Start and end of every op, as columns in the program's row order."""

    program: PipelineProgram
    rank: IntArray
    chunk: IntArray
    pair_chunk: IntArray
    start_s: FloatArray
    end_s: FloatArray

    def entries(self) -> list[TimelineEntry]:
        """Row objects sorted by rank then start time (the issue order)."""
        prog = self.program
        kinds = [OpKind(k).name for k in range(len(OpKind))]
        rows = zip(self.rank.tolist(), prog.kind.tolist(), prog.micro_batch.tolist(),
                   self.chunk.tolist(), prog.stage.tolist(), self.start_s.tolist(),
                   self.end_s.tolist(), prog.pair_micro_batch.tolist(),
                   self.pair_chunk.tolist(), strict=True)
        return [
            TimelineEntry(stage=r, op=kinds[k], micro_batch=j, chunk=c, virtual_stage=s,
                          start_s=t0, end_s=t1,
                          backward_micro_batch=pj if k == OpKind.FB else None,
                          backward_chunk=pc if k == OpKind.FB else None)
            for r, k, j, c, s, t0, t1, pj, pc in rows
        ]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SimulationResult:
    """Timing and memory of one simulated iteration; per-rank tuples are indexed by rank."""

    makespan_s: float
    busy_s: tuple[float, ...]
    idle_s: tuple[float, ...]
    """Global definition: makespan - busy."""
    span_bubble_s: tuple[float, ...]
    """Span definition: last end - first start - busy."""
    global_bubble_fraction: float
    span_bubble_fraction: float
    peak_in_flight_chunks: tuple[int, ...]
    """Micro-batch x chunk activations held until W (or BW)."""
    peak_until_b_chunks: tuple[int, ...]
    """Micro-batch x chunk activations held until B (or BW)."""
    peak_in_flight: tuple[float, ...]
    """`peak_in_flight_chunks` in full-stage units (divided by the chunks per unit)."""
    peak_until_b: tuple[float, ...]
    peak_activation_bytes: tuple[int, ...] | None
    """Peak bytes held when activation sizes were given (B frees its part, W the rest)."""
    timeline: Timeline

    @property
    def max_span_bubble_s(self) -> float:
        """The worst rank's span bubble (the Zero Bubble papers' score)."""
        return max(self.span_bubble_s)


def simulate(program: PipelineProgram | CompiledProgram, durations: OpDurations, *,
             p2p_latency_s: float = 0.0,
             activation_sizes: ActivationSizes | None = None) -> SimulationResult:
    """Run `program` as soon as possible and measure it.

    Args:
        program: the op lists (or their compiled form, to reuse across calls).
        durations: per-stage, per-kind op durations.
        p2p_latency_s: latency added to every dependency between different ranks.
        activation_sizes: per-stage activation bytes; enables `peak_activation_bytes`.

    Raises:
        ScheduleDeadlockError: the lists cannot all run (the stuck ops are named).
        InvalidSpecError: inconsistent program or inputs.
    """
    compiled = program if isinstance(program, CompiledProgram) else compile_program(program)
    prog = compiled.program
    dur = op_durations(compiled, durations)
    start_list, free = run(compiled, dur, p2p_latency_s=p2p_latency_s)
    start = np.asarray(start_list)
    end = start + dur
    offsets = prog.rank_offsets
    makespan = max(free) if free else 0.0
    busy = np.add.reduceat(dur, offsets[:-1]) if prog.num_ops else np.zeros(prog.num_ranks)
    span = end[offsets[1:] - 1] - start[offsets[:-1]]
    span_bubble = span - busy
    total = prog.num_ranks * makespan
    worst = np.where(span > 0, span_bubble / np.where(span > 0, span, 1.0), 0.0)
    until_w, until_b, peak_bytes = _activation_peaks(compiled, activation_sizes)
    unit = prog.chunks_per_stage_unit
    return SimulationResult(
        makespan_s=makespan, busy_s=tuple(busy.tolist()),
        idle_s=tuple((makespan - busy).tolist()), span_bubble_s=tuple(span_bubble.tolist()),
        global_bubble_fraction=float(1.0 - busy.sum() / total) if total > 0 else 0.0,
        span_bubble_fraction=float(worst.max()),
        peak_in_flight_chunks=tuple(until_w.tolist()),
        peak_until_b_chunks=tuple(until_b.tolist()),
        peak_in_flight=tuple((until_w / unit).tolist()),
        peak_until_b=tuple((until_b / unit).tolist()),
        peak_activation_bytes=None if peak_bytes is None else tuple(peak_bytes.tolist()),
        timeline=_timeline(compiled, start, end),
    )


def _activation_peaks(compiled: CompiledProgram,
                      sizes: ActivationSizes | None) -> tuple[IntArray, IntArray, IntArray | None]:
    """Peaks until W, until B, and in bytes, per rank.

    Every allocation (an F start) and every release (a B or W end) of a rank happens at a
    boundary of one of that rank's own ops, so the rank's list order is the time order:
    the live count when a row starts is the sum over earlier rows of (allocations +
    releases), plus the row's own allocation. Releases of a row that ends exactly when the
    next row starts thus come first, as the module docstring requires.
    """
    prog = compiled.program
    fs, bs, ws = compiled.forward_stage, compiled.input_grad_stage, compiled.weight_stage
    alloc = (fs >= 0).astype(np.int64)
    until_w = _list_peak(prog.rank_offsets, alloc, -(ws >= 0).astype(np.int64))
    until_b = _list_peak(prog.rank_offsets, alloc, -(bs >= 0).astype(np.int64))
    if sizes is None:
        return until_w, until_b, None
    held, freed = sizes.per_stage(prog.placement.num_stages)
    held_bytes = np.where(fs >= 0, held[np.maximum(fs, 0)], 0)
    freed_bytes = (np.where(bs >= 0, freed[np.maximum(bs, 0)], 0)
                   + np.where(ws >= 0, held[np.maximum(ws, 0)] - freed[np.maximum(ws, 0)], 0))
    return until_w, until_b, _list_peak(prog.rank_offsets, held_bytes, -freed_bytes)


def _list_peak(offsets: IntArray, alloc: IntArray, release: IntArray) -> IntArray:
    """Max over each rank's rows of (live before the row + the row's allocation).

    Every rank releases all it allocates, so one running sum restarts at 0 on each rank.
    """
    total = alloc + release
    before = np.cumsum(total) - total
    if total.shape[0] == 0:
        return np.zeros(offsets.shape[0] - 1, dtype=np.int64)
    return np.maximum(np.maximum.reduceat(before + alloc, offsets[:-1]), 0)


def _timeline(compiled: CompiledProgram, start: FloatArray, end: FloatArray) -> Timeline:
    prog = compiled.program
    place = prog.placement
    rank = np.repeat(np.arange(prog.num_ranks), np.diff(prog.rank_offsets))
    chunk = place.stage_chunk[place.micro_batch_pipe[prog.micro_batch], prog.stage]
    is_fb = prog.kind == OpKind.FB
    pj = np.where(is_fb, prog.pair_micro_batch, 0)
    ps = np.where(is_fb, prog.pair_stage, 0)
    pair_chunk = np.where(is_fb, place.stage_chunk[place.micro_batch_pipe[pj], ps], -1)
    return Timeline(program=prog, rank=rank, chunk=chunk, pair_chunk=pair_chunk,
                    start_s=start, end_s=end)


__all__ = ["SimulationResult", "Timeline", "TimelineEntry", "simulate"]

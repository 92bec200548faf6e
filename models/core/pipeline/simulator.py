"""The deterministic discrete-event core: run every rank's op list as soon as possible.

Owns: `compile_program` (checks a program's invariants and turns it into integer-indexed
dependency arrays, once per program), `run` (the event loop, or waves on wide programs),
`simulate_makespan` (the fast path the planner calls many times) and
`ScheduleDeadlockError`. Must not: compute metrics beyond start times (see `metrics.py`) or
choose an order.

Semantics (reference Sec. 1.2-1.3). The head op of a rank's list starts at
max(rank free time, end of each dependency + latency) and runs without pre-emption.
Dependencies: F(j,s) needs F(j,s-1); B or BW(j,s) needs F(j,s) and the input gradient of
(j,s+1) from whichever B or BW produced it; W(j,s) needs B(j,s); an FB pair needs the union
of its halves' dependencies and publishes both at its end. A dependency between different
ranks adds the P2P latency, one on the same rank adds 0.

Event loop. Every dependency is an index into one flat array of "ready times" (F outputs,
then input-gradient outputs, then a sentinel that is always 0), so an op's start is three
indexed reads and a max; an unfinished output is +inf, so a blocked head is detected by
its start being infinite. A blocked rank registers on the one output it waits for and is
woken when that output is written, so each op is visited a constant number of times.

Waves. On a program of `WAVE_MIN_RANKS` ranks or more the first run advances every rank at
once instead: each wave runs, on every rank whose head op has all its inputs written, that
op (numpy over the ranks), and stops when a wave runs nothing. An op's start is the same
maximum of the same sums as in the event loop, so the floats are the same; the op order it
records is the waves' (`_wave_loop`).

Replay. Whether a head is blocked depends only on which outputs have been written, never on
the durations, so the order in which the event loop runs the ops is a property of the
program. The first makespan of a program records it (as stretches of one rank's ops); later
makespans of the same program replay that order as one flat pass with no blocking checks
(`VisitOrder`, `simulate_makespan`), several times faster than the event loop
(`benchmarks/bench_pipeline_simulator.py`): the same sums, and so the same floats, without
the reads that cannot change a maximum (an op's same-rank prerequisite ended before the rank
was free) and with the latency added once per output rather than once per read. A program
compiled again from the same op lists may be given the order recorded before
(`VisitOrder.segments`) and replay from its first makespan. An order the waves recorded
keeps each op's wave; where the waves are wide (`WAVE_REPLAY_MIN_WIDTH`), the replay runs
a wave at a time in numpy, the same arithmetic again. The passes themselves are
`models.core.pipeline.replay`'s (without P2P latency, on one copy of the ready times).
"""

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from models.core.pipeline.costs import OpDurations
from models.core.pipeline.ops import OpKind, PipelineProgram
from models.core.pipeline.replay import (
    BoolArray,
    FloatArray,
    IntArray,
    OrderArray,
    VisitOrder,
    visit_order,
)
from models.core.pipeline.replay import replay as _replay
from models.core.pipeline.replay import replay_local as _replay_local
from models.core.pipeline.replay import wave_replay as _wave_replay
from models.errors import InvalidSpecError


class ScheduleDeadlockError(InvalidSpecError):
    """The op lists cannot all run: each stuck rank's head waits on an op that never runs."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class CompiledProgram:
    """A program's dependency structure as flat integer arrays (independent of durations)."""

    program: PipelineProgram
    offsets: list[int]
    cross_prev: BoolArray
    cross_next: BoolArray
    num_slots: int
    forward_stage: IntArray
    """Virtual stage of the op's forward part, -1 if none."""
    input_grad_stage: IntArray
    """Virtual stage of the op's B part (B, BW, FB backward), -1 if none."""
    weight_stage: IntArray
    """Virtual stage of the op's W part (W, BW, FB backward), -1 if none."""
    columns: IntArray
    """[6, ops]: each row's rank, `dep_prev`, `dep_next`, `dep_local`, `out_a` and `out_b`
    as one array (`_visit_order` permutes it into the replay order in one step)."""
    segments: list[list[tuple[int, int, int]] | OrderArray] = field(default_factory=list)
    """The event loop's op order as (rank, first row, stop row) stretches, kept by the first
    recording run that completes (empty before), or given by whoever compiled the program
    from a recorded order of the same program (`VisitOrder.segments`)."""
    visit: list["VisitOrder"] = field(default_factory=list)
    """That order as flat columns, built when a second makespan is asked for (a program
    simulated once never pays for it)."""
    stage_counts: list[FloatArray] = field(default_factory=list)
    """Per rank and virtual stage, how many F, B and W parts its ops run: a [3, ranks,
    stages] array, built on first use (`rank_work_s`)."""
    makespans: dict[tuple[OpDurations, float], float] = field(default_factory=dict)
    """Makespans already replayed, by (durations, P2P latency): the planner scores plans
    whose ops last alike (ZeRO stages 0-2, a storage choice that moves no op) more than
    once. Emptied when it reaches `MAKESPAN_MEMO_SIZE` entries."""
    row_lists: list["RowLists"] = field(default_factory=list)
    """`columns`' dependency and output rows as Python lists (`rows`), built the first time
    the event loop or a critical-path walk reads them: a program of `WAVE_MIN_RANKS` ranks
    or more runs by waves and replays in numpy, and never does."""

    @property
    def rows(self) -> "RowLists":
        """`dep_prev`, `dep_local`, `dep_next`, `out_a` and `out_b` as Python lists, for
        the loops that read them one row at a time."""
        if not self.row_lists:
            c = self.columns
            self.row_lists.append(RowLists(dep_prev=c[1].tolist(), dep_local=c[3].tolist(),
                                           dep_next=c[2].tolist(), out_a=c[4].tolist(),
                                           out_b=c[5].tolist()))
        return self.row_lists[0]


class RowLists(NamedTuple):
    """A compiled program's per-row ready-time slots as lists (`CompiledProgram.rows`)."""

    dep_prev: list[int]
    """Ready-time index of the forward input (F(j,s-1)) or the sentinel."""
    dep_local: list[int]
    """Ready-time index of the same-rank prerequisite (F for B, B for W) or the sentinel."""
    dep_next: list[int]
    """Ready-time index of the incoming input gradient (B(j,s+1)) or the sentinel."""
    out_a: list[int]
    """Ready-time slot the row's end writes (its F output or input gradient; the trash slot
    for a W)."""
    out_b: list[int]
    """Second slot an FB pair's end writes (its backward's input gradient), else trash."""


MAKESPAN_MEMO_SIZE = 1024
"""Makespans one compiled program keeps (`CompiledProgram.makespans`)."""

WAVE_REPLAY_MIN_WIDTH = 20
"""Ops per wave, on average, from which an order the waves recorded is replayed a wave at a
time (`replay.wave_replay`) rather than op by op (`replay.replay`). Measured on a 2-core
x86 host (best of five replays with new durations and a P2P latency; ops per wave in
brackets): 1F1B on 16 ranks x 128 micro-batches (14.3) 1.9 ms op by op, 2.3 ms by waves;
DualPipeV on 16 ranks (14.8) 0.8 and 1.0 ms; interleaved 1F1B (4 chunks) on 16 ranks (15.1)
3.1 and 2.6 ms; 1F1B on 21 ranks (18.2) 1.5 and 1.5 ms; ZB-H1 on 24 ranks (22.6) 2.4 and 2.0
ms; 1F1B on 35 ranks x 256 (30.9) 10.5 and 5.0 ms; ZB-V on 32 ranks (31.4) 14.7 and 8.1 ms;
interleaved 1F1B (4 chunks) on 32 ranks x 256 (31.1) 26.6 and 10.9 ms."""

WAVE_MIN_RANKS = 12
"""Ranks from which a program's first run goes by waves (`_wave_loop`) rather than by the
event loop. A wave costs about a dozen numpy calls whatever its width, and runs up to one op
per rank; the event loop about 2 us per op. Measured on a 2-core x86 host (first run of a
compiled program, makespan and recorded order; durations random per virtual stage, P2P
latency 0.01): 1F1B on 8 ranks x 64 micro-batches 3.3 ms by the event loop and 2.7 ms by
waves, interleaved 1F1B (4 chunks) on 8 ranks 5.4 and 7.7 ms, 1F1B on 16 ranks x 128 13.3
and 7.6 ms, on 35 ranks x 256 51 and 8.7 ms, ZB-V on 32 ranks x 256 75 and 28 ms,
interleaved 1F1B (4 chunks) on 32 ranks x 256 139 and 33 ms."""


def _visit_order(c: CompiledProgram,
                 segments: list[tuple[int, int, int]] | OrderArray) -> VisitOrder:
    """The flat op order of `segments` ((rank, first row, stop row) as the loop ran them,
    with the wave of each where the waves recorded it), replayed a wave at a time where its
    waves average `WAVE_REPLAY_MIN_WIDTH` ops or more (`models.core.pipeline.replay`)."""
    return visit_order(c.columns, c.cross_prev, c.cross_next, num_slots=c.num_slots,
                       segments=segments, wave_min_width=WAVE_REPLAY_MIN_WIDTH)


def compile_program(program: PipelineProgram) -> CompiledProgram:
    """Check `program`'s invariants and build its dependency arrays.

    Raises:
        InvalidSpecError: an op sits on the wrong rank, or an F lacks exactly one B/BW,
            or a W has no split B (or is duplicated).
    """
    place = program.placement
    num_s, num_mb = place.num_stages, place.num_micro_batches
    atoms = num_s * num_mb
    sentinel, trash = 2 * atoms, 2 * atoms + 1
    kind = program.kind
    is_fb = kind == OpKind.FB
    has_f = (kind == OpKind.F) | is_fb
    has_b = (kind == OpKind.B) | (kind == OpKind.BW) | is_fb
    bj = np.where(is_fb, program.pair_micro_batch, program.micro_batch)
    bs = np.where(is_fb, program.pair_stage, program.stage)
    j, s = program.micro_batch, program.stage
    rank_of_row = np.repeat(np.arange(program.num_ranks), np.diff(program.rank_offsets))
    _check_ranges(program, bj, bs)
    fpipe, bpipe = place.micro_batch_pipe[j], place.micro_batch_pipe[bj]
    _check_ranks(program, rank_of_row, place.stage_rank[fpipe, s], place.stage_rank[bpipe, bs],
                 has_f, has_b | (kind == OpKind.W))
    _check_counts(program, has_f=has_f, has_b=has_b, fatom=j * num_s + s, batom=bj * num_s + bs,
                  atoms=atoms)
    prev_ok = has_f & (s > 0)
    prev_rank = place.stage_rank[fpipe, np.maximum(s - 1, 0)]
    dep_prev = np.where(prev_ok, j * num_s + s - 1, sentinel)
    next_ok = has_b & (bs < num_s - 1)
    next_rank = place.stage_rank[bpipe, np.minimum(bs + 1, num_s - 1)]
    dep_next = np.where(next_ok, atoms + bj * num_s + bs + 1, sentinel)
    dep_local = np.where(has_b, bj * num_s + bs,
                         np.where(kind == OpKind.W, atoms + j * num_s + s, sentinel))
    out_a = np.where(has_f, j * num_s + s,
                     np.where(kind == OpKind.W, trash, atoms + bj * num_s + bs))
    out_b = np.where(is_fb, atoms + bj * num_s + bs, trash)
    has_w = (kind == OpKind.W) | (kind == OpKind.BW) | is_fb
    columns = np.stack([rank_of_row, dep_prev, dep_next, dep_local, out_a, out_b]).astype(
        np.int64, copy=False)
    return CompiledProgram(
        program=program, offsets=program.rank_offsets.tolist(), columns=columns,
        cross_prev=prev_ok & (prev_rank != rank_of_row),
        cross_next=next_ok & (next_rank != rank_of_row), num_slots=2 * atoms + 2,
        forward_stage=np.where(has_f, s, -1),
        input_grad_stage=np.where(has_b, bs, -1),
        weight_stage=np.where(has_w, np.where(kind == OpKind.W, s, bs), -1),
    )


def op_durations(compiled: CompiledProgram, durations: OpDurations) -> FloatArray:
    """Duration of every row: F, B, W or their sums; an FB pair may be overridden."""
    num_s = compiled.program.placement.num_stages
    fwd, inp, wgt = durations.per_stage(num_s)
    fs, bs, ws = compiled.forward_stage, compiled.input_grad_stage, compiled.weight_stage
    dur = (np.where(fs >= 0, fwd[np.maximum(fs, 0)], 0.0)
           + np.where(bs >= 0, inp[np.maximum(bs, 0)], 0.0)
           + np.where(ws >= 0, wgt[np.maximum(ws, 0)], 0.0))
    if durations.overlapped_pair_s is not None:
        dur = np.where(compiled.program.kind == OpKind.FB, durations.overlapped_pair_s, dur)
    return dur


def rank_work_s(compiled: CompiledProgram, durations: OpDurations) -> FloatArray:
    """Each rank's total op time (the sum of its ops' durations, `op_durations`), from
    per-rank counts of F, B and W parts on each virtual stage kept on the program, so that
    asking for it again costs a product of small arrays rather than a pass over every op."""
    num_s = compiled.program.placement.num_stages
    if durations.overlapped_pair_s is not None:
        # Paired ops take their own duration: sum the rows.
        totals = np.concatenate(([0.0], np.cumsum(op_durations(compiled, durations))))
        offsets = np.asarray(compiled.offsets)
        return np.asarray(totals[offsets[1:]] - totals[offsets[:-1]], dtype=np.float64)
    if not compiled.stage_counts:
        ranks = len(compiled.offsets) - 1
        rank_of_row = np.repeat(np.arange(ranks), np.diff(compiled.offsets))
        counts = np.zeros((3, ranks, num_s))
        for part, stage in enumerate((compiled.forward_stage, compiled.input_grad_stage,
                                      compiled.weight_stage)):
            has = stage >= 0
            np.add.at(counts[part], (rank_of_row[has], stage[has]), 1.0)
        compiled.stage_counts.append(counts)
    counts = compiled.stage_counts[0]
    fwd, inp, wgt = durations.per_stage(num_s)
    return np.asarray(counts[0] @ fwd + counts[1] @ inp + counts[2] @ wgt, dtype=np.float64)


def run(compiled: CompiledProgram, durations: FloatArray, *,
        p2p_latency_s: float = 0.0, record: bool = False,
        with_starts: bool = True) -> tuple[list[float], list[float]]:
    """Start time of every row and the finish time of every rank; with `record`, a run that
    completes also keeps its op order in `compiled.segments` (for `simulate_makespan`).
    Without `with_starts`, a run by waves leaves the start times out (an empty list): a
    caller after the finish times only does not pay for a list of every row's.

    Raises:
        ScheduleDeadlockError: some rank's head op can never start; lists the stuck ops.
    """
    if not (math.isfinite(p2p_latency_s) and p2p_latency_s >= 0.0):
        raise InvalidSpecError(f"p2p_latency_s={p2p_latency_s} must be finite and >= 0",
                               field="p2p_latency_s")
    offsets = compiled.offsets
    num_ranks = len(offsets) - 1
    if num_ranks >= WAVE_MIN_RANKS:
        start_s, free = _wave_loop(compiled, durations, p2p_latency_s, record=record)
        return (start_s.tolist() if with_starts else []), free
    lat_prev = (compiled.cross_prev * p2p_latency_s).tolist()
    lat_next = (compiled.cross_next * p2p_latency_s).tolist()
    ready = [math.inf] * compiled.num_slots
    ready[compiled.num_slots - 2] = 0.0
    start = [0.0] * len(durations)
    heads = offsets[:-1]
    free = [0.0] * num_ranks
    segments: list[tuple[int, int, int]] = []
    _event_loop(compiled, durations.tolist(), lat_prev, lat_next, ready, start, heads, free,
                segments)
    stuck = [r for r in range(num_ranks) if heads[r] < offsets[r + 1]]
    if stuck:
        raise _deadlock(compiled, stuck, heads)
    if record and not compiled.segments:
        compiled.segments.append(segments)
    return start, free


def _event_loop(c: CompiledProgram, dur: list[float], lat_prev: list[float],
                lat_next: list[float], ready: list[float], start: list[float],
                heads: list[int], free: list[float],
                segments: list[tuple[int, int, int]]) -> None:
    """Advance every rank until all lists are done or every unfinished head is blocked;
    each stretch of one rank's ops run in turn is appended to `segments`."""
    inf = math.inf
    d_prev, d_local, d_next, out_a, out_b = c.rows
    offsets = c.offsets
    waiting: dict[int, list[int]] = {}
    stack = list(range(len(heads) - 1, -1, -1))
    while stack:
        r = stack.pop()
        u, stop, t_free = heads[r], offsets[r + 1], free[r]
        first = u
        while u < stop:
            # `if x > t: t = x` is max(t, x) (the first of equals is kept, NaN never wins
            # over a number already held), without a call.
            t = ready[d_prev[u]] + lat_prev[u]
            x = ready[d_next[u]] + lat_next[u]
            if x > t:
                t = x
            x = ready[d_local[u]]
            if x > t:
                t = x
            if t == inf:
                # Register on the first unwritten input (a latency is finite, so one is).
                blocker = d_prev[u]
                if ready[blocker] != inf:
                    blocker = d_next[u]
                    if ready[blocker] != inf:
                        blocker = d_local[u]
                waiting.setdefault(blocker, []).append(r)
                break
            if t_free > t:
                t = t_free
            start[u] = t
            t_free = t + dur[u]
            a, b = out_a[u], out_b[u]
            ready[a] = t_free
            ready[b] = t_free
            if waiting:
                if a in waiting:
                    stack.extend(waiting.pop(a))
                if b in waiting:
                    stack.extend(waiting.pop(b))
            u += 1
        heads[r], free[r] = u, t_free
        if u > first:
            segments.append((r, first, u))


def _wave_loop(c: CompiledProgram, durations: FloatArray, p2p_latency_s: float, *,
               record: bool) -> tuple[FloatArray, list[float]]:
    """`run` by waves (`WAVE_MIN_RANKS`): in each wave every rank whose head op has all its
    inputs written runs it, starting at the largest of its inputs' ready times (plus the
    P2P latency from another rank) and its rank's free time, the event loop's arithmetic
    on numpy arrays; outputs written in a wave are read from the next one. The order kept
    with `record` lists each wave's ops by rank, one stretch per op.

    Raises:
        ScheduleDeadlockError: a wave runs nothing while some rank still has ops.
    """
    rank_of, d_prev, d_next, d_local, out_a, out_b = c.columns
    lat_prev = c.cross_prev * p2p_latency_s
    lat_next = c.cross_next * p2p_latency_s
    bounds = np.asarray(c.offsets, dtype=np.int64)
    heads, stops = bounds[:-1].copy(), bounds[1:]
    free = np.zeros(stops.size)
    ready = np.full(c.num_slots, math.inf)
    ready[c.num_slots - 2] = 0.0
    start = np.zeros(durations.size)
    waves: list[IntArray] = []
    active = (heads < stops).nonzero()[0]
    while active.size:
        u = heads[active]
        t = np.maximum(ready[d_prev[u]] + lat_prev[u], ready[d_next[u]] + lat_next[u])
        np.maximum(t, ready[d_local[u]], out=t)
        runs = t != math.inf
        if not runs.all():
            if not runs.any():
                raise _deadlock(c, active.tolist(), heads.tolist())
            u, t, ranks = u[runs], t[runs], active[runs]
        else:
            ranks = active
        np.maximum(t, free[ranks], out=t)
        start[u] = t
        t += durations[u]
        ready[out_a[u]] = t
        ready[out_b[u]] = t
        free[ranks] = t
        heads[ranks] += 1
        waves.append(u)
        active = active[heads[active] < stops[active]]
    if record and not c.segments and waves:
        order = np.concatenate(waves)
        wave = np.repeat(np.arange(len(waves)), [w.size for w in waves])
        c.segments.append(np.stack([rank_of[order], order, order + 1, wave], axis=1)
                          .astype(np.int32))
    return start, free.tolist()


def simulate_makespan(compiled: CompiledProgram, durations: OpDurations, *,
                      p2p_latency_s: float = 0.0) -> float:
    """Makespan only (no timeline or metrics): for callers that simulate many times.

    Raises:
        ScheduleDeadlockError: the lists cannot all run.
    """
    key = (durations, p2p_latency_s)
    known = compiled.makespans.get(key)
    if known is not None:
        return known
    dur = op_durations(compiled, durations)
    if compiled.segments and math.isfinite(p2p_latency_s) and p2p_latency_s >= 0.0:
        if not compiled.visit:
            compiled.visit.append(_visit_order(compiled, compiled.segments[0]))
        order = compiled.visit[0]
        ranks = len(compiled.offsets) - 1
        if order.waves is not None:
            free = _wave_replay(order, dur, p2p_latency_s, compiled.num_slots, ranks)
        elif p2p_latency_s == 0.0:
            free = _replay_local(order, dur, compiled.num_slots, ranks)
        else:
            free = _replay(order, dur, p2p_latency_s, compiled.num_slots, ranks)
    else:
        _, free = run(compiled, dur, p2p_latency_s=p2p_latency_s, record=True,
                      with_starts=False)
    makespan = max(free) if free else 0.0
    if len(compiled.makespans) >= MAKESPAN_MEMO_SIZE:
        compiled.makespans.clear()  # one call, safe beside other threads' lookups
    compiled.makespans[key] = makespan
    return makespan


def _deadlock(c: CompiledProgram, stuck: list[int], heads: list[int]) -> ScheduleDeadlockError:
    ops = [f"rank {r}: {c.program.describe(heads[r])} (op {heads[r] - c.offsets[r]} of its list)"
           for r in stuck]
    return ScheduleDeadlockError(
        "the op lists deadlock; each stuck rank waits on an op that cannot run first: "
        + "; ".join(ops) + ". Reorder the lists so every dependency is issued earlier.",
        field="schedule", diagnostics={"stuck_ops": ops})


def _check_ranges(program: PipelineProgram, bj: IntArray, bs: IntArray) -> None:
    place = program.placement
    for name, arr, hi in (("micro_batch", program.micro_batch, place.num_micro_batches),
                          ("stage", program.stage, place.num_stages),
                          ("pair micro_batch", bj, place.num_micro_batches),
                          ("pair stage", bs, place.num_stages)):
        if arr.size and (arr.min() < 0 or arr.max() >= hi):
            raise InvalidSpecError(f"a program row has {name} outside [0, {hi})", field=name)


def _check_ranks(program: PipelineProgram, rank_of_row: IntArray, f_rank: IntArray,
                 b_rank: IntArray, has_f: BoolArray, has_bw: BoolArray) -> None:
    wrong = (has_f & (f_rank != rank_of_row)) | (has_bw & (b_rank != rank_of_row))
    if np.any(wrong):
        row = int(np.argmax(wrong))
        raise InvalidSpecError(
            f"op {program.describe(row)} is listed on rank {int(rank_of_row[row])} but its "
            "stage runs elsewhere: move it to the rank of its stage", field="schedule")


def _check_counts(program: PipelineProgram, *, has_f: BoolArray, has_b: BoolArray,
                  fatom: IntArray, batom: IntArray, atoms: int) -> None:
    kind = program.kind
    num_s = program.placement.num_stages
    watom = program.micro_batch * num_s + program.stage
    f_count = np.bincount(fatom[has_f], minlength=atoms)
    b_count = np.bincount(batom[has_b], minlength=atoms)
    split = np.bincount(batom[kind == OpKind.B], minlength=atoms)
    w_count = np.bincount(watom[kind == OpKind.W], minlength=atoms)
    for label, bad in (("F", f_count != 1), ("B or BW", b_count != f_count),
                       ("W", w_count != split)):
        if np.any(bad):
            atom = int(np.argmax(bad))
            raise InvalidSpecError(
                f"micro-batch {atom // num_s} on stage {atom % num_s} has the wrong number of "
                f"{label} ops: every micro-batch needs one F per stage and one BW, or one B "
                "followed by one W", field="schedule")


__all__ = [
    "MAKESPAN_MEMO_SIZE",
    "WAVE_MIN_RANKS",
    "WAVE_REPLAY_MIN_WIDTH",
    "CompiledProgram",
    "OrderArray",
    "RowLists",
    "ScheduleDeadlockError",
    "VisitOrder",
    "compile_program",
    "op_durations",
    "rank_work_s",
    "run",
    "simulate_makespan",
]

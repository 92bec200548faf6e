"""The handcrafted Zero Bubble schedules: ZB-H1, ZB-H2 and ZB-V, one traits record each.

Owns: the per-rank F / B / W orders of these schedules (B is the input gradient, W the
weight gradient; splitting them lets W fill bubbles), their parameter rules, closed forms
and records (`ZB_H1`, `ZB_H2`, `ZBV`). Must not: check the parameters every schedule shares
(the registry does) or time anything.
"""

from collections import deque

import numpy as np

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.ops import (
    IntArray,
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    linear_placement,
    v_placement,
)
from models.core.pipeline.traits import (
    FrameworkNames,
    ScheduleTraits,
    StagePlacement,
    no_rule,
    require,
)

_F, _B, _W = int(OpKind.F), int(OpKind.B), int(OpKind.W)
Row = tuple[int, int, int, int, int]
_STEP_KINDS = np.array([[_F, _B, _W]], dtype=np.int64)
"""The ops of one ZB-H1 step, F, B and W, of which a step issues those it has."""


def zb_h1(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """ZB-H1: 1F1B with B and W split and rank d's Ws delayed by d iterations.

    Rank d: p-1-d warm-up forwards; steady F(w+k), B(k) and, once k >= d, W(oldest);
    drain B(k), W(oldest); flush the remaining Ws. Keeps p micro-batches until W on every
    rank, p-d until B.

    Source: Zero Bubble arXiv:2401.10241 Sec. 3.1 (Fig. 3 top) and Table 2.
    Legend: p=num_stages, m=num_micro_batches, d=rank.
    """
    builder = ProgramBuilder(linear_placement(num_ranks=num_stages,
                                              num_micro_batches=num_micro_batches))
    steps = np.arange(num_micro_batches, dtype=np.int64)
    kinds = _STEP_KINDS.repeat(num_micro_batches, axis=0)
    for d in range(num_stages):
        builder.set_rank_columns(d, *_zb_h1_rank(num_stages, d, steps, kinds))
    return builder.build(schedule=PipelineSchedule.ZB_H1, chunks_per_stage_unit=1)


def _zb_h1_rank(p: int, d: int, steps: IntArray,
                kinds: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Rank d's ZB-H1 list as columns (kind, micro-batch, stage): 1F1B's min(p-1-d, m)
    warm-up forwards, then per step k an F while forwards remain, B(k) and, from step d on
    (or once the forwards are done), the oldest W; then the Ws left, oldest first. The Ws go
    in B order, so the W of a step is the count of Ws before it. `steps`: 0 .. m-1;
    `kinds`: F, B, W on each of the m steps (shared by the ranks)."""
    m = steps.shape[0]
    warmup = min(p - 1 - d, m)
    has_f = steps < m - warmup
    has_w = (steps >= d) | ~has_f
    issued = int(has_w.sum())
    mask = np.stack([has_f, np.ones(m, dtype=bool), has_w], axis=1)
    values = np.stack([steps + warmup, steps, np.cumsum(has_w) - has_w], axis=1)
    kind = np.concatenate([np.full(warmup, _F, dtype=np.int64),
                           kinds[mask],
                           np.full(m - issued, _W, dtype=np.int64)])
    micro_batch = np.concatenate([steps[:warmup], values[mask], steps[issued:]])
    return kind, micro_batch, np.full(kind.shape[0], d, dtype=np.int64)


def zb_h2(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """ZB-H2: up to 2p-1 micro-batches in flight until W, W pushed to the tail.

    Rank d: w = min(m, 2(p-1-d)+1) warm-up forwards; then for each k: B(k) and, while
    forwards remain, W(oldest) first if (forwards - Ws) >= 2p-1, then the next F; once the
    forwards are done, W(oldest); flush the remaining Ws.

    Source: Zero Bubble arXiv:2401.10241 Sec. 3.1 (Fig. 3 bottom, the "parallelogram") and
    Table 2 (peak (2p-1) M_B).
    Legend: p=num_stages, m=num_micro_batches, d=rank.
    Deviation: the paper gives the shape and the formulas, not an order; this construction
    is the one the reference specification checks against those formulas.
    """
    p, m = num_stages, num_micro_batches
    cap = 2 * p - 1
    builder = ProgramBuilder(linear_placement(num_ranks=p, num_micro_batches=m))
    for d in range(p):
        rows = builder.rank(d)
        issued = min(m, 2 * (p - 1 - d) + 1)
        rows.extend((_F, j, d, -1, -1) for j in range(issued))
        pending: deque[int] = deque()
        weights_done = 0
        for k in range(m):
            rows.append((_B, k, d, -1, -1))
            pending.append(k)
            if issued < m:
                if issued - weights_done >= cap:
                    rows.append((_W, pending.popleft(), d, -1, -1))
                    weights_done += 1
                rows.append((_F, issued, d, -1, -1))
                issued += 1
            else:
                rows.append((_W, pending.popleft(), d, -1, -1))
                weights_done += 1
        rows.extend((_W, j, d, -1, -1) for j in pending)
    return builder.build(schedule=PipelineSchedule.ZB_H2, chunks_per_stage_unit=1)


def zbv(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """ZB-V: two chunks per rank in a V, the fixed order of torch `ScheduleZBVZeroBubble`.

    Rank d holds stage d (chunk 0) and stage 2P-1-d (chunk 1). The order is built for
    n = max(2P-1, m) micro-batches and ops of micro-batches >= m are dropped.

    Source: Zero Bubble arXiv:2401.10241 Sec. 6 (ZB-V, peak 2P chunks = P M_B); order of
    torch.distributed.pipelining `ScheduleZBVZeroBubble._calculate_single_rank_operations`.
    Legend: P=num_stages, m=num_micro_batches, d=rank.
    Assumes: zero bubble per rank only when F = B = W (the reference Sec. 4 item 5).
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(v_placement(num_ranks=p, num_micro_batches=m))
    for d in range(p):
        kind, micro_batch, stage = _zbv_rank(p=p, d=d, n=max(2 * p - 1, m))
        kept = micro_batch < m
        builder.set_rank_columns(d, kind[kept], micro_batch[kept], stage[kept])
    return builder.build(schedule=PipelineSchedule.ZBV, chunks_per_stage_unit=2)


# The six op streams of a ZB-V rank: (kind, chunk), chunk 0 on stage d, chunk 1 on 2P-1-d.
_F0, _F1, _B0, _B1, _W0, _W1 = range(6)
_STREAM_KIND = np.array([_F, _F, _B, _B, _W, _W], dtype=np.int64)


def _zbv_rank(*, p: int, d: int, n: int) -> tuple[IntArray, IntArray, IntArray]:
    """Rank d's order for n micro-batches as columns (kind, micro-batch, stage).

    The torch order is a sequence of phases, each a short pattern of streams repeated a
    known number of times (each op of a stream takes its next micro-batch): 2(P-d)-1
    forwards of chunk 0; d x (F1, F0); P-d x (F1, B1, W1); the steady state
    (F0, B0, W0, F1, B1, W1) until n chunk-0 forwards are issued, then (B0, W0, F1, B1, W1)
    until chunk 1 has as many; d x (B0, B1); P-d x (B0, W0); the weight gradients left on
    chunk 1, then on chunk 0."""
    issued = [0] * 6
    phases: list[tuple[tuple[int, ...], int]] = []

    def phase(streams: tuple[int, ...], times: int) -> None:
        times = max(times, 0)
        phases.append((streams, times))
        for stream in streams:
            issued[stream] += times

    phase((_F0,), 2 * (p - d) - 1)
    phase((_F1, _F0), d)
    phase((_F1, _B1, _W1), p - d)
    phase((_F0, _B0, _W0, _F1, _B1, _W1), n - issued[_F0])
    phase((_B0, _W0, _F1, _B1, _W1), issued[_F0] - issued[_F1])
    phase((_B0, _B1), d)
    phase((_B0, _W0), p - d)
    phase((_W1,), issued[_B1] - issued[_W1])
    phase((_W0,), issued[_B0] - issued[_W0])
    streams, micro_batch = [], []
    before = np.zeros(6, dtype=np.int64)
    for pattern, times in phases:
        if times == 0:
            continue
        ids = np.asarray(pattern, dtype=np.int64)
        # `np.tile(x, times)` of a row x and `np.repeat`, as the array methods (no Python
        # wrapper frames: ranks x phases of them per generated order).
        streams.append(ids[None, :].repeat(times, axis=0).reshape(-1))
        micro_batch.append(before[ids][None, :].repeat(times, axis=0).reshape(-1)
                           + np.arange(times, dtype=np.int64).repeat(len(pattern)))
        before[ids] += times
    stream = np.concatenate(streams)
    stage = np.where(stream % 2 == 1, 2 * p - 1 - d, d)
    return _STREAM_KIND[stream], np.concatenate(micro_batch), stage


def _zb_h1_rule(p: int, m: int, _v: int, _n: int | None) -> None:
    """torch `Schedule1F1B`'s rule, which ZB-H1's 1F1B skeleton shares: m >= p."""
    require(m >= p, "num_micro_batches", m,
            f"schedule='zb_h1' needs at least as many micro-batches as ranks: use "
            f"num_micro_batches >= num_stages={p}")


def _zb_h1_bubble(p: int, _m: int, f: float, b: float, w: float,
                  _pair: float) -> tuple[float, float]:
    """Global idle (p-1) max(F, B, F+B-W), span (p-1) max(B, F+B-W): the paper's
    (p-1)(F+B-W) of Table 2 when W <= min(F, B), exact for every ratio on this order."""
    return (p - 1) * max(f, b, f + b - w), (p - 1) * max(b, f + b - w)


def _zb_h2_bubble(p: int, m: int, f: float, b: float, w: float,
                  _pair: float) -> tuple[float, float] | None:
    """For m >= 2p-1: span (p-1) max(0, F+B-2W, B-F) (Table 2's (p-1)(F+B-2W) when
    W <= F) and global idle (p-1) max(F, F+B-2W, B-F) (the forward stagger)."""
    if m < 2 * p - 1:
        return None
    lag = b - f
    return (p - 1) * max(f, f + b - 2 * w, lag), (p - 1) * max(0.0, f + b - 2 * w, lag)


def _zbv_bubble(p: int, m: int, f: float, b: float, w: float,
                pair: float) -> tuple[float, float] | None:
    """Idle (p-1) F with span bubble 0, only for F = B = W and m >= 2p-1 (Sec. 6; the
    reference Sec. 4 item 5: the fixed torch order is zero-bubble only at equal costs)."""
    if f == b == w and pair == f + b + w and m >= 2 * p - 1:
        return (p - 1) * f, 0.0
    return None


_NO_ZB_IN_MEGATRON = (
    "Megatron-LM core_v0.14.0 has no zero-bubble schedule (backward split into input and "
    "weight gradients)")

ZB_H1 = ScheduleTraits(
    schedule=PipelineSchedule.ZB_H1, placement=StagePlacement.LINEAR, fixed_chunks=1,
    weight_copies=1, split_backward=True, overlapped_pairs=False, takes_group_size=False,
    generator=lambda p, m, _v, _n: zb_h1(num_stages=p, num_micro_batches=m),
    rule=_zb_h1_rule, peak_form=lambda p, m, _v, _d, _n: min(p, m),
    peak_until_b_form=lambda p, m, _v, d, _n: min(p - d, m), bubble_form=_zb_h1_bubble,
    exports=FrameworkNames(
        megatron_native=False,
        megatron_note=f"schedule 'zb_h1': {_NO_ZB_IN_MEGATRON}; exported as non-interleaved "
                      "1F1B with the planned layer split, so the bubble is larger than "
                      "planned; ZB-H1 needs a framework extension (e.g. the Zero Bubble "
                      "authors' Megatron-LM fork)",
        torchtitan="InterleavedZeroBubble",
        torchtitan_note="torch's InterleavedZeroBubble implements ZB-1P, the 1F1B-memory "
                        "zero-bubble schedule; with one stage per rank it is the ZB-H1 of "
                        "the plan",
        torchtitan_fallback="", deepspeed_native=False),
    source="Zero Bubble arXiv:2401.10241 Sec. 3.1 and Table 2 (p M_B; (p-i+1) M_B until B)")

ZB_H2 = ScheduleTraits(
    schedule=PipelineSchedule.ZB_H2, placement=StagePlacement.LINEAR, fixed_chunks=1,
    weight_copies=1, split_backward=True, overlapped_pairs=False, takes_group_size=False,
    generator=lambda p, m, _v, _n: zb_h2(num_stages=p, num_micro_batches=m),
    rule=no_rule, peak_form=lambda p, m, _v, _d, _n: min(2 * p - 1, m),
    peak_until_b_form=lambda p, m, _v, d, _n: min(2 * p - 2 * d - 1, m),
    bubble_form=_zb_h2_bubble,
    exports=FrameworkNames(
        megatron_native=False,
        megatron_note=f"schedule 'zb_h2': {_NO_ZB_IN_MEGATRON}; exported as non-interleaved "
                      "1F1B with the planned layer split (larger bubble, fewer micro-batches "
                      "in flight than planned); ZB-H2 needs a framework extension",
        torchtitan="InterleavedZeroBubble",
        torchtitan_note="NOT the planned ZB-H2: torch has no ZB-H2 class; "
                        "InterleavedZeroBubble (ZB-1P) keeps 1F1B memory and leaves a larger "
                        "bubble",
        torchtitan_fallback="schedule 'zb_h2' has no torch class; InterleavedZeroBubble "
                            "(ZB-1P) is exported, with 1F1B memory and a larger bubble than "
                            "planned",
        deepspeed_native=False),
    source="Zero Bubble arXiv:2401.10241 Sec. 3.1 and Table 2 ((2p-1) M_B)")

ZBV = ScheduleTraits(
    schedule=PipelineSchedule.ZBV, placement=StagePlacement.V_SHAPE, fixed_chunks=2,
    weight_copies=1, split_backward=True, overlapped_pairs=False, takes_group_size=False,
    generator=lambda p, m, _v, _n: zbv(num_stages=p, num_micro_batches=m),
    rule=no_rule,
    peak_form=lambda p, m, _v, d, _n: min(m, 2 * p - d - 1) + min(m, d + 1),
    peak_until_b_form=None, bubble_form=_zbv_bubble,
    exports=FrameworkNames(
        megatron_native=False,
        megatron_note="schedule 'zbv': Megatron-LM core_v0.14.0 has no ZB-V schedule, and its "
                      "layout string places virtual stage i on rank i mod pp, so the V "
                      "placement (rank r holds stages r and 2pp-1-r) cannot be written; "
                      "exported as non-interleaved 1F1B with the planned per-rank layer "
                      "counts; ZB-V needs a framework extension",
        torchtitan="ZBVZeroBubble", torchtitan_note="V placement: rank r runs stages r and "
                                                    "2pp-1-r",
        torchtitan_fallback="", deepspeed_native=False),
    source="Zero Bubble arXiv:2401.10241 Sec. 6 (2p chunks = p M_B for m >= 2p-1; fewer "
           "micro-batches hold min(m, 2p-d-1) + min(m, d+1) chunks)")


__all__ = ["ZBV", "ZB_H1", "ZB_H2", "zb_h1", "zb_h2", "zbv"]

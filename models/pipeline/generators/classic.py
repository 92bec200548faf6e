"""Generators of the classic flush schedules: GPipe, 1F1B and interleaved 1F1B.

Owns: the per-rank op orders of these three schedules. Must not: validate parameters (the
dispatcher in `generators/__init__.py` does) or time anything.
"""

import logging

from api_schemas.parallel import PipelineSchedule
from models.pipeline.ops import (
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    linear_placement,
    looped_placement,
)

logger = logging.getLogger(__name__)

_F, _BW = int(OpKind.F), int(OpKind.BW)


def gpipe(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """GPipe: every forward, then every fused backward in ascending micro-batch order.

    Source: GPipe arXiv:1811.06965 Sec. 2.2; the ascending backward order is torch
    `ScheduleGPipe`'s (descending gives the same makespan).
    Legend: p=num_stages, m=num_micro_batches.
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(linear_placement(num_ranks=p, num_micro_batches=m))
    for d in range(p):
        rows = builder.rank(d)
        rows.extend((_F, j, d, -1, -1) for j in range(m))
        rows.extend((_BW, j, d, -1, -1) for j in range(m))
    return builder.build(schedule=PipelineSchedule.GPIPE, chunks_per_stage_unit=1)


def one_f_one_b(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """1F1B (PipeDream-Flush): p-1-d warm-up forwards, then F/BW pairs, then the drain.

    Source: Megatron-LM arXiv:2104.04473 Sec. 2.2.1 (Fig. 4 top); warm-up count of
    Megatron-LM `get_pp_rank_microbatches` (p - rank - 1).
    Legend: p=num_stages, m=num_micro_batches, d=rank.
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(linear_placement(num_ranks=p, num_micro_batches=m))
    for d in range(p):
        rows = builder.rank(d)
        warmup = min(p - 1 - d, m)
        rows.extend((_F, j, d, -1, -1) for j in range(warmup))
        for k in range(m - warmup):
            rows.append((_F, warmup + k, d, -1, -1))
            rows.append((_BW, k, d, -1, -1))
        rows.extend((_BW, k, d, -1, -1) for k in range(m - warmup, m))
    return builder.build(schedule=PipelineSchedule.ONE_F_ONE_B, chunks_per_stage_unit=1)


def interleaved_order(*, num_micro_batches: int, num_chunks: int,
                      group_size: int) -> list[tuple[int, int]]:
    """Megatron's forward table: (micro-batch, chunk) in groups of N micro-batches.

    Within each group every micro-batch runs chunk 0, then chunk 1, ...; the last group
    ends at m.

    Source: Megatron-LM `get_schedule_table` (microbatch_group_size_per_vp_stage = N).
    Legend: m=num_micro_batches, v=num_chunks, N=group_size.
    """
    m, v, n = num_micro_batches, num_chunks, group_size
    table: list[tuple[int, int]] = []
    for first in range(0, m, n):
        last = min(first + n, m)
        table.extend((j, c) for c in range(v) for j in range(first, last))
    return table


def interleaved(*, num_stages: int, num_micro_batches: int, num_chunks: int,
                group_size: int) -> PipelineProgram:
    """Interleaved 1F1B with v chunks per rank (looped placement, chunk c = stage c p + d).

    Rank d runs w = min(2(p-1-d) + (v-1) N, v m) forwards of the forward table, then
    alternates F(T[w+k]) and BW(Tb[k]), then drains; Tb is T with chunk c -> v-1-c.

    Source: Megatron-LM arXiv:2104.04473 Sec. 2.2.2; warm-up of Megatron-LM
    `get_pp_rank_microbatches` and order of `get_schedule_table`.
    Legend: p=num_stages, m=num_micro_batches, v=num_chunks, N=group_size, d=rank.
    """
    p, m, v = num_stages, num_micro_batches, num_chunks
    placement = looped_placement(num_ranks=p, num_chunks=v, num_micro_batches=m)
    builder = ProgramBuilder(placement)
    table = interleaved_order(num_micro_batches=m, num_chunks=v, group_size=group_size)
    total = v * m
    for d in range(p):
        fwd = [(_F, j, c * p + d, -1, -1) for j, c in table]
        bwd = [(_BW, j, (v - 1 - c) * p + d, -1, -1) for j, c in table]
        warmup = min(2 * (p - 1 - d) + (v - 1) * group_size, total)
        rows = builder.rank(d)
        rows.extend(fwd[:warmup])
        steady = total - warmup
        paired = fwd[warmup:] + bwd[:steady]  # the right length; interleave F and BW below
        paired[0::2] = fwd[warmup:]
        paired[1::2] = bwd[:steady]
        rows.extend(paired)
        rows.extend(bwd[steady:])
    return builder.build(schedule=PipelineSchedule.INTERLEAVED_1F1B, chunks_per_stage_unit=v)


__all__ = ["gpipe", "interleaved", "interleaved_order", "one_f_one_b"]

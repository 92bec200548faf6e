"""Generators of the handcrafted Zero Bubble schedules: ZB-H1, ZB-H2 and ZB-V.

Owns: the per-rank F / B / W orders of these schedules (B is the input gradient, W the
weight gradient; splitting them lets W fill bubbles). Must not: validate parameters or time
anything.
"""

import logging
from collections import deque

from api_schemas.parallel import PipelineSchedule
from models.pipeline.ops import (
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    linear_placement,
    v_placement,
)

logger = logging.getLogger(__name__)

_F, _B, _W = int(OpKind.F), int(OpKind.B), int(OpKind.W)
Row = tuple[int, int, int, int, int]


def zb_h1(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """ZB-H1: 1F1B with B and W split and rank d's Ws delayed by d iterations.

    Rank d: p-1-d warm-up forwards; steady F(w+k), B(k) and, once k >= d, W(oldest);
    drain B(k), W(oldest); flush the remaining Ws. Keeps p micro-batches until W on every
    rank, p-d until B.

    Source: Zero Bubble arXiv:2401.10241 Sec. 3.1 (Fig. 3 top) and Table 2.
    Legend: p=num_stages, m=num_micro_batches, d=rank.
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(linear_placement(num_ranks=p, num_micro_batches=m))
    for d in range(p):
        rows = builder.rank(d)
        warmup = min(p - 1 - d, m)
        rows.extend((_F, j, d, -1, -1) for j in range(warmup))
        pending: deque[int] = deque()
        for k in range(m):
            if k < m - warmup:
                rows.append((_F, warmup + k, d, -1, -1))
            rows.append((_B, k, d, -1, -1))
            pending.append(k)
            if k >= d or k >= m - warmup:
                rows.append((_W, pending.popleft(), d, -1, -1))
        rows.extend((_W, j, d, -1, -1) for j in pending)
    return builder.build(schedule=PipelineSchedule.ZB_H1, chunks_per_stage_unit=1)


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
        rows = builder.rank(d)
        rows.extend(row for row in _zbv_rank(p=p, d=d, n=max(2 * p - 1, m)) if row[1] < m)
    return builder.build(schedule=PipelineSchedule.ZBV, chunks_per_stage_unit=2)


def _zbv_rank(*, p: int, d: int, n: int) -> list[Row]:
    s0, s1 = d, 2 * p - 1 - d
    count = {(_F, 0): 0, (_F, 1): 0, (_B, 0): 0, (_B, 1): 0, (_W, 0): 0, (_W, 1): 0}
    rows: list[Row] = []

    def emit(kind: int, chunk: int) -> None:
        j = count[(kind, chunk)]
        count[(kind, chunk)] = j + 1
        rows.append((kind, j, s1 if chunk else s0, -1, -1))

    for _ in range(2 * (p - d) - 1):
        emit(_F, 0)
    for _ in range(d):
        emit(_F, 1)
        emit(_F, 0)
    for _ in range(p - d):
        emit(_F, 1)
        emit(_B, 1)
        emit(_W, 1)
    while count[(_F, 1)] < count[(_F, 0)] or count[(_F, 0)] < n:
        if count[(_F, 0)] < n:
            emit(_F, 0)
        emit(_B, 0)
        emit(_W, 0)
        emit(_F, 1)
        emit(_B, 1)
        emit(_W, 1)
    for _ in range(d):
        emit(_B, 0)
        emit(_B, 1)
    for _ in range(p - d):
        emit(_B, 0)
        emit(_W, 0)
    while count[(_W, 1)] < count[(_B, 1)]:
        emit(_W, 1)
    while count[(_W, 0)] < count[(_B, 0)]:
        emit(_W, 0)
    return rows


__all__ = ["zb_h1", "zb_h2", "zbv"]

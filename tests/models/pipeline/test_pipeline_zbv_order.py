"""The ZB-V op lists (built phase by phase with array operations) against the order written
op by op from the rank loop of torch's `ScheduleZBVZeroBubble`: six streams (F, B, W on
chunk 0 = stage d and chunk 1 = stage 2p-1-d), each op taking its stream's next
micro-batch, for n = max(2p-1, m) micro-batches, ops of micro-batches >= m dropped."""

import numpy as np
import pytest

from models.core.pipeline.generators.zero_bubble import zbv
from models.core.pipeline.ops import OpKind

_F, _B, _W = int(OpKind.F), int(OpKind.B), int(OpKind.W)


def _reference_rank(p: int, d: int, n: int) -> list[tuple[int, int, int]]:
    stages = (d, 2 * p - 1 - d)
    issued: dict[tuple[int, int], int] = {}
    rows: list[tuple[int, int, int]] = []

    def op(kind: int, chunk: int) -> None:
        j = issued.get((kind, chunk), 0)
        issued[(kind, chunk)] = j + 1
        rows.append((kind, j, stages[chunk]))

    def count(kind: int, chunk: int) -> int:
        return issued.get((kind, chunk), 0)

    for _ in range(2 * (p - d) - 1):
        op(_F, 0)
    for _ in range(d):
        op(_F, 1)
        op(_F, 0)
    for _ in range(p - d):
        op(_F, 1)
        op(_B, 1)
        op(_W, 1)
    while count(_F, 1) < count(_F, 0) or count(_F, 0) < n:
        if count(_F, 0) < n:
            op(_F, 0)
        op(_B, 0)
        op(_W, 0)
        op(_F, 1)
        op(_B, 1)
        op(_W, 1)
    for _ in range(d):
        op(_B, 0)
        op(_B, 1)
    for _ in range(p - d):
        op(_B, 0)
        op(_W, 0)
    while count(_W, 1) < count(_B, 1):
        op(_W, 1)
    while count(_W, 0) < count(_B, 0):
        op(_W, 0)
    return rows


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 16])
def test_zbv_lists_follow_the_rank_loop_op_by_op(p: int) -> None:
    for m in sorted({1, p, 2 * p - 2, 2 * p - 1, 2 * p, 3 * p + 1, 8 * p + 3}):
        if m < 1:
            continue
        program = zbv(num_stages=p, num_micro_batches=m)
        for d in range(p):
            expected = [row for row in _reference_rank(p, d, max(2 * p - 1, m)) if row[1] < m]
            lo, hi = int(program.rank_offsets[d]), int(program.rank_offsets[d + 1])
            got = list(zip(program.kind[lo:hi].tolist(), program.micro_batch[lo:hi].tolist(),
                           program.stage[lo:hi].tolist(), strict=True))
            assert got == expected, (p, m, d)
        assert np.all(program.pair_micro_batch == -1) and program.kind.dtype == np.int64

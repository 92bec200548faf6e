"""The interleaved 1F1B op lists (built with array operations) against the order written
row by row from Megatron-LM's schedule table: rank d runs
w = min(2(p-1-d) + (v-1) N, v m) forwards of the table T, then alternates F(T[w+k]) and
BW(Tb[k]), then drains (Tb is T with chunk c -> v-1-c; stage of chunk c on rank d: c p + d)."""

import numpy as np
import pytest

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.generators.classic import interleaved, interleaved_order
from models.core.pipeline.ops import OpKind
from models.core.pipeline.registry import generate_program


def _reference_ranks(p: int, m: int, v: int, n: int) -> list[list[tuple[int, int, int]]]:
    table = interleaved_order(num_micro_batches=m, num_chunks=v, group_size=n)
    total = v * m
    ranks = []
    for d in range(p):
        fwd = [(int(OpKind.F), j, c * p + d) for j, c in table]
        bwd = [(int(OpKind.BW), j, (v - 1 - c) * p + d) for j, c in table]
        warmup = min(2 * (p - 1 - d) + (v - 1) * n, total)
        steady = total - warmup
        rows = fwd[:warmup]
        for k in range(steady):
            rows += [fwd[warmup + k], bwd[k]]
        ranks.append(rows + bwd[steady:])
    return ranks


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("v", [2, 3, 5, 8])
def test_interleaved_lists_follow_the_schedule_table_row_by_row(p: int, v: int) -> None:
    for m in sorted({p, p + 1, 2 * p, 3 * p + 2, 8 * p}):
        for n in sorted({p, min(m, 2 * p)}):
            program = interleaved(num_stages=p, num_micro_batches=m, num_chunks=v, group_size=n)
            for d, rows in enumerate(_reference_ranks(p, m, v, n)):
                lo, hi = int(program.rank_offsets[d]), int(program.rank_offsets[d + 1])
                got = list(zip(program.kind[lo:hi].tolist(), program.micro_batch[lo:hi].tolist(),
                               program.stage[lo:hi].tolist(), strict=True))
                assert got == rows, (p, m, v, n, d)
            assert np.all(program.pair_micro_batch == -1) and np.all(program.pair_stage == -1)
            assert program.kind.dtype == np.int64 and program.chunks_per_stage_unit == v


def test_megatron_first_rank_of_two_with_two_chunks_and_four_micro_batches() -> None:
    # p = 2, v = 2, m = 4, N = 2: rank 0 warms up with 2(p-1) + (v-1)N = 4 forwards
    # (F0 F1 of chunk 0, then of chunk 1), then alternates, then drains.
    program = generate_program(PipelineSchedule.INTERLEAVED_1F1B, num_stages=2,
                               num_micro_batches=4, num_chunks=2)
    assert program.rank_ops(0) == ["F0.0", "F1.0", "F0.2", "F1.2", "F2.0", "BW0.2", "F3.0",
                                   "BW1.2", "F2.2", "BW0.0", "F3.2", "BW1.0", "BW2.2",
                                   "BW3.2", "BW2.0", "BW3.0"]

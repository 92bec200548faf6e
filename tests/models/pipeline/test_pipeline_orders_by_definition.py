"""The per-rank orders the generators build as array columns (1F1B, ZB-H1), checked against
their definitions spelled out op by op, for micro-batch counts below, at and above the rank
count where the schedule allows them."""

from collections.abc import Callable

import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import generate_program


def _one_f_one_b(p: int, m: int, d: int) -> list[str]:
    """Rank d of 1F1B: the forwards of micro-batches 0 .. w-1 (w = min(p-1-d, m)), then
    F(w + k) and BW(k) alternating for k < m - w, then the backwards of the rest (Megatron-LM
    arXiv:2104.04473 Sec. 2.2.1)."""
    w = min(p - 1 - d, m)
    ops = [f"F{j}.{d}" for j in range(w)]
    for k in range(m - w):
        ops += [f"F{w + k}.{d}", f"BW{k}.{d}"]
    return ops + [f"BW{k}.{d}" for k in range(m - w, m)]


def _zb_h1(p: int, m: int, d: int) -> list[str]:
    """Rank d of ZB-H1: 1F1B's warm-up forwards; per step k an F while forwards remain, B(k)
    and, from step d on (or once the forwards are done), the oldest W; the Ws left (Zero
    Bubble arXiv:2401.10241 Sec. 3.1, Fig. 3 top)."""
    w = min(p - 1 - d, m)
    ops = [f"F{j}.{d}" for j in range(w)]
    pending: list[int] = []
    for k in range(m):
        if k < m - w:
            ops.append(f"F{w + k}.{d}")
        ops.append(f"B{k}.{d}")
        pending.append(k)
        if k >= d or k >= m - w:
            ops.append(f"W{pending.pop(0)}.{d}")
    return ops + [f"W{j}.{d}" for j in pending]


DEFINITIONS: dict[S, tuple[Callable[[int, int, int], list[str]], bool]] = {
    S.ONE_F_ONE_B: (_one_f_one_b, True),
    S.ZB_H1: (_zb_h1, False),
}
"""Each schedule's definition and whether it runs fewer micro-batches than ranks."""


@pytest.mark.parametrize("schedule", list(DEFINITIONS))
@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 21])
def test_the_generated_lists_follow_their_definition(schedule: S, p: int) -> None:
    definition, few = DEFINITIONS[schedule]
    counts = [m for m in (1, 2, p - 1, p, p + 1, 2 * p, 3 * p + 2) if m >= (1 if few else p)]
    for m in counts:
        program = generate_program(schedule, num_stages=p, num_micro_batches=m)
        for d in range(p):
            assert program.rank_ops(d) == definition(p, m, d), (schedule, p, m, d)

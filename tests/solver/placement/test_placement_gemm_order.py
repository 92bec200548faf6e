"""Intra-rank expert-GEMM tile schedules: fixed order, LPT and CP-SAT."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.errors import InvalidSpecError
from solver.cpsat import SolverConfig, SolveStatus
from solver.placement import gemm_tiles, schedule_exact, schedule_fixed_order, schedule_lpt

CONFIG = SolverConfig(max_time_s=5.0, num_workers=1, random_seed=0)


def test_gemm_tiles_split_full_and_partial() -> None:
    tiles = gemm_tiles([300, 0, 128], tile_rows=128, tile_overhead_rows=16)
    assert [(t.expert, t.rows, t.cost) for t in tiles] == [
        (0, 128, 144), (0, 128, 144), (0, 44, 60), (2, 128, 144)]
    with pytest.raises(InvalidSpecError, match="expert_tokens\\[1\\]=-1"):
        gemm_tiles([1, -1])


def test_schedule_lpt_matches_GRAHAM69() -> None:
    """Graham (1969): with W=3 workers and jobs 5,5,4,4,3,3,3 LPT gives 11 where the
    optimum is 9, the ratio 4/3 - 1/(3W) = 11/9 of the tight example."""
    jobs = [5, 5, 4, 4, 3, 3, 3]
    lpt = schedule_lpt(jobs, num_workers=3, tile_rows=16)
    exact = schedule_exact(jobs, num_workers=3, tile_rows=16, config=CONFIG)
    assert (lpt.makespan, exact.makespan) == (11, 9)
    assert exact.status == SolveStatus.OPTIMAL
    assert lpt.makespan / exact.makespan == pytest.approx(4 / 3 - 1 / 9)
    fixed = schedule_fixed_order(jobs, num_workers=3, tile_rows=16)
    assert fixed.worker_loads == (12, 8, 7)


@settings(max_examples=30, deadline=None)
@given(tokens=st.lists(st.integers(0, 700), min_size=1, max_size=8),
       workers=st.integers(1, 8), overhead=st.sampled_from([0, 16, 64]))
def test_exact_schedule_is_optimal_and_bounds_hold(tokens: list[int], workers: int,
                                                   overhead: int) -> None:
    kw = {"num_workers": workers, "tile_rows": 128, "tile_overhead_rows": overhead}
    fixed = schedule_fixed_order(tokens, **kw)
    lpt = schedule_lpt(tokens, **kw)
    exact = schedule_exact(tokens, config=CONFIG, **kw)
    assert exact.status == SolveStatus.OPTIMAL
    assert exact.makespan <= min(fixed.makespan, lpt.makespan)
    assert exact.makespan >= exact.lower_bound >= lpt.lower_bound
    # Graham's LPT guarantee
    assert lpt.makespan <= (4 / 3 - 1 / (3 * workers)) * exact.makespan + 1e-9
    for schedule in (fixed, lpt, exact):
        assert sum(schedule.worker_loads) == sum(t.cost for t in schedule.tiles)
        loads = np.zeros(workers, dtype=np.int64)
        np.add.at(loads, list(schedule.worker_of_tile), [t.cost for t in schedule.tiles])
        assert tuple(loads.tolist()) == schedule.worker_loads


def test_lpt_and_exact_shorten_a_skewed_rank_left_unbalanced_by_fixed_order() -> None:
    """Rank balance is not kernel balance (seed Sec. 6.5): 4096 rows on one rank, skewed
    over six experts, 34 tiles of 128 rows (+32 overhead) on 8 workers."""
    tokens = [2000, 1000, 500, 300, 200, 96]
    kw = {"num_workers": 8, "tile_rows": 128, "tile_overhead_rows": 32}
    fixed = schedule_fixed_order(tokens, **kw)
    lpt = schedule_lpt(tokens, **kw)
    exact = schedule_exact(tokens, config=CONFIG, **kw)
    assert len(fixed.tiles) == 34
    assert (fixed.makespan, lpt.makespan, exact.makespan) == (768, 696, 672)
    assert exact.status == SolveStatus.OPTIMAL

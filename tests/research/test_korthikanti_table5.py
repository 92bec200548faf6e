"""Korthikanti et al. 2022 (arXiv:2205.05198) Table 5 as the term-by-term study evaluates it
(`research/korthikanti_table5.py`): the configurations of Table 3 and Sec. 6, and the what-if
wait for the slowest GPU over ranks of unequal compute."""

import pytest

from models.core.step_time.variability import GPU_SPEED_CV
from research import korthikanti_table5 as t5

ROWS = {row["id"]: row for row in t5.table5_rows()}


@pytest.mark.parametrize("mode", ["sp-selective", "full-recompute"])
def test_the_1t_rows_run_table_3s_pipeline_without_interleaving(mode: str) -> None:
    # Table 3: 1T, 128 layers, t = 8, p = 64, 512 GPUs, global batch 512, micro-batch 1.
    # Sec. 6 prints the interleaved schedule for the 175B and 530B models only.
    assert t5.configuration(ROWS[f"korthikanti2022-t5-1t-{mode}"]) == {
        "tp": 8, "pp": 64, "vpp": 1, "micro_batch": 1, "micro_batches": 512,
        "layers_per_rank": 2}


def test_the_other_rows_take_table_3_and_the_three_chunks_of_sec_6() -> None:
    # Table 3: 22B p = 1, batch 4 of micro-batch 4; 175B p = 8, batch 64; 530B p = 35,
    # batch 280; Sec. 6: three interleaved stages for 175B and 530B.
    assert t5.configuration(ROWS["korthikanti2022-t5-22b-sp-selective"]) == {
        "tp": 8, "pp": 1, "vpp": 1, "micro_batch": 4, "micro_batches": 1,
        "layers_per_rank": 48}
    big = [t5.configuration(ROWS[f"korthikanti2022-t5-{size}-sp-selective"])
           for size in ("175b", "530b")]
    assert [(c["pp"], c["vpp"], c["micro_batches"]) for c in big] == [(8, 3, 64),
                                                                      (35, 3, 280)]


def test_the_what_if_wait_is_the_models_wait_on_equal_ranks() -> None:
    # Tippett (1925): the largest of 100 standard normal draws averages 2.50759; ten equal
    # ranks of ten GPUs are 100 draws.
    wait = t5.heterogeneous_wait_s([0.1] * 10, gpus_per_rank=10, micro_batches=50)
    assert wait == pytest.approx(50 * 0.1 * GPU_SPEED_CV * 2.50759, rel=2e-3)


def test_a_heavier_rank_absorbs_the_spread_of_the_lighter_ones() -> None:
    # One rank 8% heavier among 64 ranks of 8 GPUs (the 1T row's output-layer rank): the
    # pipeline waits only for that rank's slowest GPU, Tippett's 1.42360 for 8 draws, not
    # for the slowest of all 512 GPUs (3.04).
    ranks = [0.1] * 63 + [0.108]
    wait = t5.heterogeneous_wait_s(ranks, gpus_per_rank=8, micro_batches=1)
    assert wait == pytest.approx(0.108 * GPU_SPEED_CV * 1.42360, rel=0.02)
    equal = t5.heterogeneous_wait_s([0.1] * 64, gpus_per_rank=8, micro_batches=1)
    assert wait < 0.6 * equal


def test_over_unequal_ranks_the_wait_can_shrink_as_the_heaviest_rank_grows() -> None:
    # Four level ranks of two GPUs wait for the slowest of 8 draws (Tippett 1.42360); one
    # rank 5% heavier sets the pace with its own 2 GPUs (1 / sqrt(pi) = 0.56419), so its
    # added work (recomputation, say) shrinks the wait: a search floor over policies cannot
    # take the wait of the mesh without a policy (CALIBRATION.md, "The wait per pipeline
    # rank, tried in the model and not kept").
    level = t5.heterogeneous_wait_s([0.1] * 4, gpus_per_rank=2, micro_batches=1)
    assert level == pytest.approx(0.1 * GPU_SPEED_CV * 1.42360, rel=2e-3)
    apart = t5.heterogeneous_wait_s([0.1] * 3 + [0.105], gpus_per_rank=2, micro_batches=1)
    assert apart < 0.6 * level
    assert apart >= 0.105 * GPU_SPEED_CV * 0.56419 * (1 - 2e-3)

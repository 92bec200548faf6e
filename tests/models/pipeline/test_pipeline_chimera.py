"""Chimera (Li & Hoefler, SC'21): two 1F1B pipelines in opposite directions on one set of
ranks, against the numbers the paper prints and the reference note's simulated values."""

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from api_schemas.parallel import PipelineSchedule as S
from models.catalog.presets import cluster_preset, model_preset
from models.core.memory import memory_ledger
from models.core.pipeline import (
    OpDurations,
    closed_form,
    generate_program,
    in_flight_profile,
    peak_in_flight_chunks,
    simulate,
    validate_schedule,
)
from models.errors import InvalidSpecError

# Chimera counts a forward and a backward as one slot each (F = B + W here).
SLOTS = OpDurations.uniform(forward_s=1.0, backward_input_s=0.5, backward_weight_s=0.5)


@pytest.mark.parametrize(("d", "n"), [(4, 4), (6, 6), (8, 8), (12, 12), (4, 8), (8, 16),
                                      (8, 32), (16, 64)])
def test_bubble_ratio_is_the_papers_d_minus_2_over_2n_plus_d_minus_2(d: int, n: int) -> None:
    """arXiv:2107.06925 Table 2: bubble ratio (D-2)/(2N+D-2); e.g. D = N = 4 gives 0.2."""
    result = simulate(generate_program(S.CHIMERA, num_stages=d, num_micro_batches=n), SLOTS)
    assert result.global_bubble_fraction == pytest.approx((d - 2) / (2 * n + d - 2))
    assert result.makespan_s == pytest.approx(2 * n + d - 2)
    form = closed_form(S.CHIMERA, num_stages=d, num_micro_batches=n, forward_s=1.0,
                       backward_input_s=0.5, backward_weight_s=0.5)
    assert form is not None
    assert form.makespan_s == pytest.approx(result.makespan_s)


def test_d4_n4_bubble_ratio_is_one_fifth() -> None:
    result = simulate(generate_program(S.CHIMERA, num_stages=4, num_micro_batches=4), SLOTS)
    assert result.global_bubble_fraction == pytest.approx(0.2)


@pytest.mark.parametrize("d", [4, 6, 8, 12])
def test_activations_with_n_equal_d_stay_in_the_papers_range(d: int) -> None:
    """arXiv:2107.06925 Table 2: activations per worker in [(D/2+1) M_a, D M_a] for N = D."""
    result = simulate(generate_program(S.CHIMERA, num_stages=d, num_micro_batches=d), SLOTS)
    assert min(result.peak_in_flight_chunks) == d // 2 + 1
    assert max(result.peak_in_flight_chunks) == d


def test_reference_values_of_the_flat_merge() -> None:
    """Reference Sec. 3.1/3.2 [sim]: D=4, N=8 makespan 18, peaks 5,5,5,5; D=8, N=16: 38.
    The flat merge holds D+1 micro-batches per rank once N >= 2D."""
    small = simulate(generate_program(S.CHIMERA, num_stages=4, num_micro_batches=8), SLOTS)
    assert small.makespan_s == 18.0
    assert small.peak_in_flight_chunks == (5, 5, 5, 5)
    large = simulate(generate_program(S.CHIMERA, num_stages=8, num_micro_batches=16), SLOTS)
    assert large.makespan_s == 38.0
    assert set(large.peak_in_flight_chunks) == {9}


def test_peak_closed_form_matches_the_merged_order_on_the_whole_grid() -> None:
    """min(D+1, N/2 + 1 + min(d, D-1-d)) against the counted order, every even D <= 16, N <= 64."""
    for d in range(2, 17, 2):
        for n in range(d, 65, 2):
            profile = in_flight_profile(S.CHIMERA, num_stages=d, num_micro_batches=n)
            assert profile.peak_chunks == tuple(
                peak_in_flight_chunks(S.CHIMERA, num_stages=d, num_micro_batches=n, stage=r)
                for r in range(d))


def test_closed_form_is_none_when_a_forward_is_not_one_backward_slot() -> None:
    assert closed_form(S.CHIMERA, num_stages=4, num_micro_batches=8, forward_s=1.0,
                       backward_input_s=1.0, backward_weight_s=1.0) is None


@pytest.mark.parametrize(("d", "n", "field"), [(3, 6, "num_stages"), (4, 7, "num_micro_batches"),
                                               (4, 2, "num_micro_batches")])
def test_chimera_refuses_odd_ranks_odd_or_too_few_micro_batches(d: int, n: int,
                                                                field: str) -> None:
    with pytest.raises(InvalidSpecError) as caught:
        validate_schedule(S.CHIMERA, num_stages=d, num_micro_batches=n)
    assert caught.value.field == field


def test_chimera_keeps_two_weight_replicas_like_dualpipe() -> None:
    """Each rank holds stage r of the down pipe and stage D-1-r of the up pipe (2x weights)."""
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=64, sequence_length=4096)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    weights = {}
    for schedule in (S.ONE_F_ONE_B, S.CHIMERA, S.DUALPIPE):
        ledger = memory_ledger(spec, training, ParallelConfig(pp=4, dp=2, schedule=schedule),
                               cluster)
        weights[schedule] = ledger.stages[1].bytes_of("parameters")
    assert weights[S.CHIMERA] == weights[S.DUALPIPE] == 2 * weights[S.ONE_F_ONE_B]

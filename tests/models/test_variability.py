"""The wait for the slowest GPU (`models.core.step_time.variability`) and its breakdown term."""

import pytest

from api_schemas import ParallelConfig, TrainingSpec
from models.catalog.presets import cluster_preset, model_preset
from models.core.step_time import estimate_step
from models.core.step_time.step_terms import SLOWEST_GPU
from models.core.step_time.variability import (
    GPU_SPEED_CV,
    expected_max_standard_normal,
    slowest_gpu_share,
)


@pytest.mark.parametrize(("n", "printed"), [(2, 0.56419), (10, 1.53875), (100, 2.50759)])
def test_expected_maximum_reproduces_tippetts_table(n: int, printed: float) -> None:
    # Tippett (1925), Biometrika 17, Table: mean of the largest of n standard normal draws
    # (n = 2 is 1 / sqrt(pi)).
    assert expected_max_standard_normal(n) == pytest.approx(printed, abs=2e-5)


def test_one_gpu_waits_for_nobody_and_the_wait_grows_like_sqrt_log_n() -> None:
    assert slowest_gpu_share(1) == 0.0
    shares = [slowest_gpu_share(n) for n in (2, 8, 128, 1024, 16384)]
    assert shares == sorted(shares)
    # sqrt(2 ln n) is the leading term: the gap to it closes slowly from below.
    assert 0.8 < expected_max_standard_normal(16384) / (2 * 9.7041) ** 0.5 < 0.92
    with pytest.raises(ValueError):
        expected_max_standard_normal(0)


def test_the_cv_reads_the_8_percent_spread_as_tukeys_whisker_span() -> None:
    # Sinha et al. SC'22: 8% average variation, outliers excluded. Tukey's whiskers of a normal
    # population lie 2.698 standard deviations either side of the median.
    assert GPU_SPEED_CV * 2 * 2.698 == pytest.approx(0.08, rel=1e-3)


def test_the_step_books_the_wait_in_its_own_term_growing_with_the_job() -> None:
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=16, sequence_length=8192)
    parallel = ParallelConfig(dp=8, zero_stage=1, micro_batch_size=2, recompute="selective")
    small = estimate_step(spec, training, parallel,
                          cluster_preset("h100-sxm5-80gb", num_nodes=1))
    busy = small.compute_s + small.recompute_s  # one pipeline rank: its mean is its own
    assert small.overheads_s[SLOWEST_GPU] == pytest.approx(slowest_gpu_share(8) * busy)
    assert sum(small.breakdown_s.values()) == pytest.approx(small.step_time_s)
    big = estimate_step(spec, training.model_copy(update={"global_batch_size": 256}),
                        parallel.model_copy(update={"dp": 128}),
                        cluster_preset("h100-sxm5-80gb", num_nodes=16))
    assert big.overheads_s[SLOWEST_GPU] > small.overheads_s[SLOWEST_GPU]
    one = estimate_step(spec, training.model_copy(update={"global_batch_size": 2}),
                        parallel.model_copy(update={"dp": 1}),
                        cluster_preset("h100-sxm5-80gb", num_nodes=1))
    assert SLOWEST_GPU not in one.overheads_s


def test_the_wait_is_the_same_for_every_split_of_the_layers() -> None:
    # A rank's mean compute over the pipeline: moving layers between stages keeps it.
    spec = model_preset("llama-3.1-8b")
    training = TrainingSpec(global_batch_size=32, sequence_length=4096)
    cluster = cluster_preset("h100-sxm5-80gb", num_nodes=1)
    even = ParallelConfig(pp=4, dp=2, micro_batch_size=1)
    uneven = even.model_copy(update={"layers_per_stage": (5, 9, 9, 9)})
    waits = [estimate_step(spec, training, p, cluster).overheads_s[SLOWEST_GPU]
             for p in (even, uneven)]
    assert waits[0] == pytest.approx(waits[1], rel=1e-9)

"""Checkpoints and failures: the figures Young (1974), Daly (2006) and Llama 3 print."""

import math

import pytest

from api_schemas import TrainingSpec
from api_schemas.dtypes import DType
from api_schemas.run_level import LLAMA3_FAILURES_PER_GPU_HOUR
from models.catalog.presets import model_preset
from models.core.params import count_parameters
from models.labs.reliability import (
    CheckpointPolicy,
    checkpoint_size,
    checkpoint_write,
    daly_interval_s,
    expected_wall_time_s,
    job_mtbf_s,
    run_reliability,
    young_interval_s,
)

MINUTE = 60.0


@pytest.mark.parametrize(("mtbf_min", "printed_min", "last_digit"),
                         [(24 * 60, 117, 1.0), (6 * 60, 57, 1.0), (15, 9.1, 0.1)])
def test_daly_interval_reproduces_the_papers_figures(mtbf_min: float, printed_min: float,
                                                      last_digit: float) -> None:
    """Daly 2006, Figs. 3-5: delta = 5 min, R = 10 min; tau_opt = 117, 57 and 9.1 min
    (printed to the last digit shown)."""
    tau = daly_interval_s(checkpoint_s=5 * MINUTE, mtbf_s=mtbf_min * MINUTE) / MINUTE
    assert tau == pytest.approx(printed_min, abs=last_digit / 2)


@pytest.mark.parametrize("mtbf_min", [15.0, 6 * 60.0, 24 * 60.0])
def test_daly_interval_is_near_the_minimum_of_the_wall_time(mtbf_min: float) -> None:
    """The perturbation solution sits at the numerical minimum of the complete cost function
    (within 2% of the wall time), and Young's first-order interval never does better."""
    delta, restart, mtbf, solve = 5 * MINUTE, 10 * MINUTE, mtbf_min * MINUTE, 500 * 3600.0

    def wall(tau: float) -> float:
        return expected_wall_time_s(solve_s=solve, interval_s=tau, checkpoint_s=delta,
                                    restart_s=restart, mtbf_s=mtbf)

    grid = [mtbf * 10 ** (k / 400 - 3) for k in range(1, 1600)]
    best = min(wall(tau) for tau in grid)
    daly = wall(daly_interval_s(checkpoint_s=delta, mtbf_s=mtbf))
    assert 0.9999 * daly <= best and daly <= 1.02 * best
    assert wall(young_interval_s(checkpoint_s=delta, mtbf_s=mtbf)) >= best


def test_llama3_job_mtbf_is_about_three_hours() -> None:
    """Llama 3 (arXiv:2407.21783 Sec. 3.3.4): 419 unexpected interruptions in 54 days on
    16,384 GPUs, one every 3.09 h."""
    mtbf = job_mtbf_s(world_size=16_384, failures_per_gpu_hour=LLAMA3_FAILURES_PER_GPU_HOUR)
    assert mtbf / 3600 == pytest.approx(54 * 24 / 419, rel=1e-9)
    assert mtbf / 3600 == pytest.approx(3.09, abs=0.01)
    assert job_mtbf_s(world_size=8_192, failures_per_gpu_hour=LLAMA3_FAILURES_PER_GPU_HOUR) \
        == pytest.approx(2 * mtbf)


def test_checkpoint_holds_weights_master_and_moments() -> None:
    """Mixed-precision Adam: 2 + 4 + 8 = 14 bytes per parameter (ZeRO arXiv:1910.02054
    Sec. 3.1 without the gradients); BF16 moments (DeepSeek-V3) halve the moments."""
    spec = model_preset("llama-3.1-405b")
    params = count_parameters(spec).total
    size = checkpoint_size(spec, TrainingSpec(global_batch_size=16, sequence_length=8192))
    assert size.total_bytes == pytest.approx(14 * params, rel=1e-9)
    bf16 = checkpoint_size(spec, TrainingSpec(global_batch_size=16, sequence_length=8192,
                                              optimizer_state_dtype=DType.BF16))
    assert bf16.moments_bytes == pytest.approx(size.moments_bytes / 2, rel=1e-9)


def test_async_save_blocks_only_for_the_host_copy() -> None:
    spec = model_preset("llama-3.1-70b")
    size = checkpoint_size(spec, TrainingSpec(global_batch_size=16, sequence_length=8192))
    links = {"gpus_per_node": 8, "node_storage_bandwidth_bytes_per_s": 1e10,
             "host_link_bytes_per_s": 5e10}
    sync = checkpoint_write(size, world_size=1024, storage_bandwidth_bytes_per_s=1e11,
                            async_save=False, **links)
    async_ = checkpoint_write(size, world_size=1024, storage_bandwidth_bytes_per_s=1e11,
                              async_save=True, **links)
    assert sync.blocking_s == sync.write_s == pytest.approx(size.total_bytes / 1e11)
    # One node cannot use the whole store: its own links bound the write.
    alone = checkpoint_write(size, world_size=8, storage_bandwidth_bytes_per_s=1e11,
                             async_save=False, **links)
    assert alone.write_s == pytest.approx(size.total_bytes / 1e10)
    assert async_.blocking_s == pytest.approx(math.ceil(size.total_bytes / 1024) / 5e10)
    assert async_.blocking_s < sync.blocking_s


def test_more_gpus_fail_more_often_and_lose_more_goodput() -> None:
    spec = model_preset("llama-3.1-70b")
    training = TrainingSpec(global_batch_size=512, sequence_length=8192)
    goodputs = []
    for world in (512, 4096, 32768):
        run = run_reliability(spec, training, world_size=world, gpus_per_node=8,
                              solve_s=30 * 86400.0, policy=CheckpointPolicy(
                                  failures_per_gpu_hour=LLAMA3_FAILURES_PER_GPU_HOUR,
                                  storage_bandwidth_bytes_per_s=2e12,
                                  node_storage_bandwidth_bytes_per_s=1e11,
                                  host_link_bytes_per_s=5e10,
                                  async_save=False, restart_s=600.0))
        assert run.wall_time_s > run.solve_s
        assert run.expected_failures == pytest.approx(run.wall_time_s / run.mtbf_s)
        goodputs.append(run.goodput)
    assert goodputs[0] > goodputs[1] > goodputs[2] > 0.5

"""Calibration on the real cost model: runs generated with known constants plus noise are
fitted back within their stated uncertainty; impossible runs and unphysical fits are
refused with the field and the reason."""

from typing import Any

import pytest

from api_schemas.calibration import CalibrationRunsRequest
from models.catalog.kernels import PROFILES
from models.errors import InvalidSpecError
from models.evidence.calibration import CalibrationRefused
from research.calibrate_cluster import CONFIGS, GPU, generated_runs
from solver.calibration import calibrate, scale_limits


def body(runs: list[dict[str, Any]]) -> CalibrationRunsRequest:
    return CalibrationRunsRequest.model_validate({"profile": "test", "gpu": GPU,
                                                  "runs": runs})


def test_generated_runs_are_fitted_back_within_their_stated_uncertainty() -> None:
    true_scale, true_overhead = 0.85, 0.30
    result = calibrate(body(generated_runs(true_scale, true_overhead, 0.02, seed=1)))
    fit = result.fit
    scale, overhead = fit.gemm_efficiency_scale, fit.step_overhead_s
    assert abs(scale.value - true_scale) <= 3 * scale.standard_error
    assert abs(overhead.value - true_overhead) <= 3 * overhead.standard_error
    assert 0 < scale.standard_error < 0.05 and 0 < overhead.standard_error < 0.05
    assert scale.leave_one_out_min <= scale.value <= scale.leave_one_out_max
    # The uncalibrated model misses these runs by tens of percent; held out, the fit by ~2%.
    assert fit.uncalibrated_relative_error > 0.15
    assert fit.leave_one_out_relative_error < 0.04
    assert fit.fitted_relative_error <= fit.leave_one_out_relative_error
    assert result.family == "hopper"
    assert fit.gemm_peak_frac["bf16"] == pytest.approx(
        PROFILES["hopper"].gemm_peak_frac[next(iter(PROFILES["hopper"].gemm_peak_frac))]
        * scale.value)
    assert result.constants.gemm_efficiency_scale == scale.value


def test_noise_free_runs_give_the_constants_back_closely() -> None:
    result = calibrate(body(generated_runs(1.1, 0.05, 0.0, seed=0)))
    assert result.constants.gemm_efficiency_scale == pytest.approx(1.1, rel=0.01)
    assert result.constants.step_overhead_s == pytest.approx(0.05, abs=0.01)


def test_a_step_faster_than_the_peak_flop_bound_is_refused() -> None:
    runs = generated_runs(1.0, 0.0, 0.0, seed=0, configs=CONFIGS[:4])
    runs[1]["step_time_s"] = 0.05
    with pytest.raises(CalibrationRefused) as refused:
        calibrate(body(runs))
    assert refused.value.field == "runs.1.step_time_s"
    assert "physically impossible" in refused.value.detail
    assert "100% of the dense bf16 peak" in refused.value.detail


def test_a_peak_memory_above_the_gpu_is_refused() -> None:
    runs = generated_runs(1.0, 0.0, 0.0, seed=0, configs=CONFIGS[:4])
    runs[2]["peak_memory_bytes"] = 200 * 2**30
    with pytest.raises(CalibrationRefused) as refused:
        calibrate(body(runs))
    assert refused.value.field == "runs.2.peak_memory_bytes"


def test_runs_needing_more_than_the_peak_are_refused_with_the_reason() -> None:
    """Times at 60% of the model's: allowed by the peak-FLOP bound run by run, but no
    eta_max at or below 100% of peak explains them all."""
    runs = generated_runs(1.0, 0.0, 0.0, seed=0)
    hi = scale_limits(PROFILES["hopper"])[1]
    for run in runs:
        run["step_time_s"] *= 0.6
    with pytest.raises(CalibrationRefused) as refused:
        calibrate(body(runs))
    assert refused.value.field == "runs"
    assert "upper limit" in refused.value.detail and f"{hi:.4g}" in refused.value.detail


def test_a_broken_run_names_its_field() -> None:
    runs = generated_runs(1.0, 0.0, 0.0, seed=0, configs=CONFIGS[:4])
    runs[0]["parallel"]["tp"] = 3
    with pytest.raises(InvalidSpecError) as refused:
        calibrate(body(runs))
    assert refused.value.detail.startswith("runs.0")


def test_four_runs_are_enough_and_three_are_refused() -> None:
    result = calibrate(body(generated_runs(0.9, 0.1, 0.01, seed=3, configs=CONFIGS[:4])))
    assert result.fit.num_runs == 4
    with pytest.raises(ValueError, match="at least 4"):
        body(generated_runs(0.9, 0.1, 0.01, seed=3, configs=CONFIGS[:3]))

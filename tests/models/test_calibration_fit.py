"""The calibration fit on tabulated curves: known constants plus noise come back within
their stated standard errors, and unphysical constants are reported."""

import math
import random

import pytest

from models.errors import InvalidSpecError
from models.evidence.calibration import (
    RunCurve,
    fit_constants,
    leave_one_out,
    physical_problems,
)

LIMITS = (0.15, 1.5)
SCALES = tuple(LIMITS[0] * (LIMITS[1] / LIMITS[0]) ** (k / 16) for k in range(17))


def curve(fixed: float, gemm: float, measured: float) -> RunCurve:
    """T(s) = fixed + gemm / s, tabulated at SCALES (exactly linear in 1/s)."""
    return RunCurve(measured_s=measured, scales=SCALES,
                    model_s=tuple(fixed + gemm / s for s in SCALES))


def synthetic(scale: float, overhead: float, sigma: float, seed: int) -> list[RunCurve]:
    rng = random.Random(seed)
    shapes = [(0.1, 0.5), (0.3, 2.0), (1.0, 6.0), (0.05, 0.2), (2.0, 20.0), (0.5, 1.0),
              (0.2, 9.0), (1.5, 3.0)]
    return [curve(f, g, (f + g / scale + overhead) * math.exp(rng.gauss(0.0, sigma)))
            for f, g in shapes]


def test_noise_free_runs_give_the_constants_back() -> None:
    fit = fit_constants(synthetic(0.8, 0.25, 0.0, 0), scale_limits=LIMITS)
    assert fit.scale == pytest.approx(0.8, rel=1e-5)
    assert fit.overhead_s == pytest.approx(0.25, abs=1e-5)
    assert fit.rss < 1e-12


def test_stated_standard_errors_cover_the_true_constants() -> None:
    """Over 200 noisy draws of 8 runs, truth lies within 1 and 2 stated standard errors as
    often as a Student t with n - 2 = 6 dof says (64% and 91%; binomial spread +-7%)."""
    draws = 200
    within = {("scale", 1): 0, ("scale", 2): 0, ("overhead", 1): 0, ("overhead", 2): 0}
    for seed in range(draws):
        fit = fit_constants(synthetic(0.9, 0.4, 0.03, seed), scale_limits=LIMITS)
        assert not physical_problems(fit, scale_limits=LIMITS, limit_reasons=("f", "p"))
        z_scale = abs(fit.scale - 0.9) / fit.scale_se
        z_overhead = abs(fit.overhead_s - 0.4) / fit.overhead_se
        for k in (1, 2):
            within["scale", k] += z_scale < k
            within["overhead", k] += z_overhead < k
    for name in ("scale", "overhead"):
        assert 0.55 <= within[name, 1] / draws <= 0.78, within
        assert 0.85 <= within[name, 2] / draws <= 0.98, within


def test_leave_one_out_predicts_each_held_out_run() -> None:
    curves = synthetic(0.9, 0.4, 0.02, 7)
    for (fit, predicted), held in zip(leave_one_out(curves, scale_limits=LIMITS), curves,
                                      strict=True):
        assert abs(fit.scale - 0.9) < 0.1
        assert abs(predicted / held.measured_s - 1.0) < 0.1


def test_runs_faster_than_the_peak_allows_are_refused() -> None:
    fit = fit_constants(synthetic(3.0, 0.1, 0.0, 0), scale_limits=LIMITS)
    problems = physical_problems(fit, scale_limits=LIMITS, limit_reasons=("floor", "peak"))
    assert len(problems) == 1 and "upper limit" in problems[0] and "peak" in problems[0]


def test_a_clearly_negative_overhead_is_refused() -> None:
    fit = fit_constants(synthetic(0.8, -0.05, 0.001, 0), scale_limits=LIMITS)
    assert fit.overhead_s < 0
    problems = physical_problems(fit, scale_limits=LIMITS, limit_reasons=("floor", "peak"))
    assert any("negative" in p for p in problems)


def test_a_zero_overhead_with_noise_is_clamped_not_refused() -> None:
    clamped = 0
    for seed in range(8):
        fit = fit_constants(synthetic(0.8, 0.0, 0.02, seed), scale_limits=LIMITS)
        clamped += fit.clamped_overhead
        problems = physical_problems(fit, scale_limits=LIMITS, limit_reasons=("f", "p"))
        assert fit.clamped_overhead or fit.overhead_s >= 0 or problems
        if fit.clamped_overhead:
            assert fit.overhead_s == 0.0 and abs(fit.scale - 0.8) <= 3 * fit.scale_se
            assert not problems
    assert clamped >= 2


def test_fewer_than_three_runs_are_refused() -> None:
    with pytest.raises(InvalidSpecError, match="at least 3"):
        fit_constants(synthetic(0.8, 0.1, 0.0, 0)[:2], scale_limits=LIMITS)

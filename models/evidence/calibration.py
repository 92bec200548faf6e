"""Fitting a cluster's calibration constants to its measured step times.

Owns: the least-squares fit of the GEMM efficiency level (a multiplier s on the GPU family's
eta_max, `models.catalog.kernels.calibrated_profile`) and a fixed per-step overhead o to measured
step times, with standard errors, leave-one-out predictions and the physical limits a fit
may not cross. Pure: each run arrives as its model step time tabulated over s (the caller
runs the cost model); nothing here reads or writes anything. Must not: evaluate
configurations (`solver/calibration.py`) or store profiles (`service/`).

Model and fit (one documented formula):
    t_i(s, o) = T_i(s) + o,   minimise  sum_i (ln t_i(s, o) - ln m_i)^2
where m_i is run i's measured step time and T_i(s) the cost model's step time with the GEMM
efficiency scaled by s, interpolated linearly in 1/s between the tabulated scales (the GEMM
term of `models.catalog.kernels.gemm_time_s` is exactly linear in 1/s; the rest of the step does not
depend on s, or through pipeline and overlap maxima only piecewise). Log residuals weight
every run by its relative error, so a 60 s step does not drown a 2 s one. The overhead is
solved for each s in closed-form Newton steps and s by golden-section search on [s_lo, s_hi]
(the physical range). Standard errors are the Gauss-Newton covariance
sigma^2 (J^T J)^-1 with sigma^2 = RSS / (n - 2). Source: nonlinear least squares and its
asymptotic covariance, Seber and Wild, "Nonlinear Regression" (Wiley 1989), Sec. 2.1-2.2;
leave-one-out cross-validation, Stone (1974) J. R. Stat. Soc. B 36(2):111-147.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from models.errors import InvalidSpecError
from models.evidence.scale_fit import golden_section

SCALE_TOLERANCE = 1e-6
"""Relative width at which the golden-section search over s stops."""

NEGATIVE_OVERHEAD_SIGMAS = 3.0
"""A fitted overhead below zero by more than this many standard errors is refused as
unphysical; one within it is clamped to zero and s refitted (noise around a zero overhead)."""

AT_LIMIT_REL = 1e-4
"""A fitted s within this relative distance of a physical limit is taken as pushing past it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCurve:
    """One measured run and the cost model's step time over the GEMM efficiency scale."""

    measured_s: float
    scales: tuple[float, ...]
    """Increasing GEMM efficiency scales at which the model was evaluated."""
    model_s: tuple[float, ...]
    """Model step time without any calibrated overhead at each scale (seconds)."""

    def model_at(self, scale: float) -> float:
        """T(s), linear in 1/s between tabulated scales (clamped at the ends)."""
        xs = self.scales
        if scale <= xs[0]:
            return self.model_s[0]
        if scale >= xs[-1]:
            return self.model_s[-1]
        for k in range(1, len(xs)):
            if scale <= xs[k]:
                a, b = 1.0 / xs[k - 1], 1.0 / xs[k]
                w = (1.0 / scale - a) / (b - a)
                return self.model_s[k - 1] + w * (self.model_s[k] - self.model_s[k - 1])
        return self.model_s[-1]

    def slope_at(self, scale: float) -> float:
        """dT/ds of the interpolant (one-sided at the ends of the table)."""
        xs = self.scales
        k = 1
        while k < len(xs) - 1 and scale > xs[k]:
            k += 1
        a, b = 1.0 / xs[k - 1], 1.0 / xs[k]
        d_t_d_inv = (self.model_s[k] - self.model_s[k - 1]) / (b - a)
        return d_t_d_inv * (-1.0 / (scale * scale))


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    """The least-squares constants of one set of runs."""

    scale: float
    overhead_s: float
    scale_se: float
    overhead_se: float
    rss: float
    """Sum of squared log residuals."""
    clamped_overhead: bool
    """The unconstrained overhead was negative within noise and was set to zero."""


class CalibrationRefused(InvalidSpecError):
    """A fit that would set a constant outside its physical limits."""


def _objective(curves: Sequence[RunCurve], scale: float, overhead: float) -> float:
    total = 0.0
    for c in curves:
        t = c.model_at(scale) + overhead
        if t <= 0:
            return math.inf
        total += (math.log(t) - math.log(c.measured_s)) ** 2
    return total


def best_overhead(curves: Sequence[RunCurve], scale: float) -> float:
    """The overhead minimising the log residuals at a given scale (Newton on the 1-D
    derivative, kept where every predicted time stays positive)."""
    models = [c.model_at(scale) for c in curves]
    logs = [math.log(c.measured_s) for c in curves]
    floor = -min(models) * (1.0 - 1e-9)
    # Start from the mean additive gap, then Newton on g(o) = sum r_i / t_i.
    o = max(floor * 0.5, sum(c.measured_s - t for c, t in zip(curves, models, strict=True))
            / len(curves))
    for _ in range(100):
        g = 0.0
        h = 0.0
        for t0, y in zip(models, logs, strict=True):
            t = t0 + o
            r = math.log(t) - y
            g += r / t
            h += (1.0 - r) / (t * t)
        if h <= 0:
            h = sum(1.0 / ((t0 + o) ** 2) for t0 in models)
        step = g / h
        new = o - step
        if new <= floor:
            new = (o + floor) / 2.0
        if abs(new - o) <= 1e-12 * max(1.0, abs(o)):
            o = new
            break
        o = new
    return o


def _golden(curves: Sequence[RunCurve], lo: float, hi: float, *, clamp: bool) -> float:
    def cost(s: float) -> float:
        o = best_overhead(curves, s)
        return _objective(curves, s, max(0.0, o) if clamp else o)

    # Coarse scan first (the objective may have more than one dip over a wide range).
    n = 48
    grid = [lo * (hi / lo) ** (k / n) for k in range(n + 1)]
    return golden_section(
        cost, grid, converged=lambda a, b: (b - a) <= SCALE_TOLERANCE * max(1.0, abs(b)))


def _standard_errors(curves: Sequence[RunCurve], scale: float, overhead: float,
                     rss: float, *, free_overhead: bool) -> tuple[float, float]:
    """Gauss-Newton standard errors of (s, o) from J^T J and sigma^2 = RSS / dof."""
    n = len(curves)
    params = 2 if free_overhead else 1
    dof = max(1, n - params)
    sigma2 = rss / dof
    a = b = c = 0.0  # J^T J = [[a, b], [b, c]]
    for curve in curves:
        t = curve.model_at(scale) + overhead
        js = curve.slope_at(scale) / t
        jo = 1.0 / t
        a += js * js
        b += js * jo
        c += jo * jo
    if not free_overhead:
        return (math.sqrt(sigma2 / a) if a > 0 else math.inf), 0.0
    det = a * c - b * b
    if det <= 1e-12 * max(a * c, 1e-300):
        return math.inf, math.inf
    return math.sqrt(sigma2 * c / det), math.sqrt(sigma2 * a / det)


def fit_constants(curves: Sequence[RunCurve], *, scale_limits: tuple[float, float]) -> Fit:
    """Least-squares (s, o) over `curves` with s searched in `scale_limits` (see the module
    docstring). A negative overhead within `NEGATIVE_OVERHEAD_SIGMAS` standard errors of
    zero is clamped to zero and s refitted alone.

    Raises:
        InvalidSpecError: fewer than three runs or a table that is not increasing.
    """
    if len(curves) < 3:
        raise InvalidSpecError("a calibration needs at least 3 runs (two constants and one "
                               "degree of freedom for their uncertainty)", field="runs")
    lo, hi = scale_limits
    scale = _golden(curves, lo, hi, clamp=False)
    overhead = best_overhead(curves, scale)
    rss = _objective(curves, scale, overhead)
    scale_se, overhead_se = _standard_errors(curves, scale, overhead, rss, free_overhead=True)
    clamped = False
    if overhead < 0 and overhead >= -NEGATIVE_OVERHEAD_SIGMAS * overhead_se:
        clamped = True
        scale = _golden(curves, lo, hi, clamp=True)
        overhead = 0.0
        rss = _objective(curves, scale, 0.0)
        scale_se, _ = _standard_errors(curves, scale, 0.0, rss, free_overhead=False)
    return Fit(scale=scale, overhead_s=overhead, scale_se=scale_se, overhead_se=overhead_se,
               rss=rss, clamped_overhead=clamped)


def fit_overhead(curves: Sequence[RunCurve], *, scale: float, scale_se: float) -> Fit:
    """The per-step overhead alone, least squares on log step time with the GEMM efficiency
    scale held at `scale` (set elsewhere, e.g. by GEMM microbenchmarks, with standard error
    `scale_se`); the overhead's standard error is the one-parameter Gauss-Newton one with
    sigma^2 = RSS / (n - 1). A negative overhead within `NEGATIVE_OVERHEAD_SIGMAS` standard
    errors of zero is clamped to zero.

    Raises:
        InvalidSpecError: fewer than two runs.
    """
    if len(curves) < 2:
        raise InvalidSpecError("an overhead fit needs at least 2 runs", field="runs")
    overhead = best_overhead(curves, scale)
    rss = _objective(curves, scale, overhead)
    jo2 = sum(1.0 / (c.model_at(scale) + overhead) ** 2 for c in curves)
    overhead_se = math.sqrt(rss / (len(curves) - 1) / jo2) if jo2 > 0 else math.inf
    clamped = overhead < 0 and overhead >= -NEGATIVE_OVERHEAD_SIGMAS * overhead_se
    if clamped:
        overhead = 0.0
        rss = _objective(curves, scale, 0.0)
    return Fit(scale=scale, overhead_s=overhead, scale_se=scale_se, overhead_se=overhead_se,
               rss=rss, clamped_overhead=clamped)


def physical_problems(fit: Fit, *, scale_limits: tuple[float, float],
                      limit_reasons: tuple[str, str]) -> list[str]:
    """Why a fit's constants are unphysical (empty when they are not).

    Args:
        scale_limits: the lowest and highest admissible s.
        limit_reasons: what each limit means in words ("10% of the dense peak", ...).
    """
    lo, hi = scale_limits
    problems = []
    if fit.scale <= lo * (1.0 + AT_LIMIT_REL):
        problems.append(
            f"the GEMM efficiency scale runs into its lower limit {lo:.4g} ({limit_reasons[0]}): "
            "the measured steps are slower than any admissible GEMM efficiency explains")
    if fit.scale >= hi * (1.0 - AT_LIMIT_REL):
        problems.append(
            f"the GEMM efficiency scale runs into its upper limit {hi:.4g} ({limit_reasons[1]}): "
            "the measured steps are faster than the model allows at 100% of the dense peak")
    if fit.overhead_s < 0:
        problems.append(
            f"the per-step overhead comes out at {fit.overhead_s:.4g} s (standard error "
            f"{fit.overhead_se:.2g} s), negative beyond noise: the model's other terms "
            "(communication, bubble) are larger than these runs show")
    return problems


def relative_error(predicted: float, measured: float) -> float:
    """|predicted / measured - 1|."""
    return abs(predicted / measured - 1.0)


def leave_one_out(curves: Sequence[RunCurve], *, scale_limits: tuple[float, float],
                  fixed_scale: tuple[float, float] | None = None) -> list[tuple[Fit, float]]:
    """For each run, the fit on the other runs and its prediction of the held-out run
    (`fixed_scale`: (scale, standard error) held, only the overhead refitted)."""
    out = []
    for i, held in enumerate(curves):
        rest = [c for j, c in enumerate(curves) if j != i]
        fit = (fit_constants(rest, scale_limits=scale_limits) if fixed_scale is None else
               fit_overhead(rest, scale=fixed_scale[0], scale_se=fixed_scale[1]))
        out.append((fit, held.model_at(fit.scale) + fit.overhead_s))
    return out


__all__ = [
    "AT_LIMIT_REL",
    "NEGATIVE_OVERHEAD_SIGMAS",
    "CalibrationRefused",
    "Fit",
    "RunCurve",
    "best_overhead",
    "fit_constants",
    "fit_overhead",
    "leave_one_out",
    "physical_problems",
    "relative_error",
]

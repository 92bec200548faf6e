"""Fitting the fixed host issue time of an MoE layer forward to measured step times.

Owns: the least-squares fit of h, the eager host time to issue one MoE layer forward
(`models.core.moe.host_issue.MOE_HOST_ISSUE_S`, which a calibration profile may replace;
CUDA graphs of the runs' recipes shorten it as `graphed_host_saving_s` says), jointly with
the GEMM efficiency scale s and the per-step overhead o of `models.evidence.calibration`; its
standard error, its leave-one-out fits, whether the runs identify it, and its physical
limits. Pure: each run arrives as its model step time tabulated over (h, s) (the caller runs
the cost model). Must not: evaluate configurations (`solver/calibration.py`) or store
profiles (`service/`).

Model and fit (one documented formula):
    t_i(s, o, h) = T_i(s, h) + o,   minimise  sum_i (ln t_i - ln m_i)^2
where T_i(s, h) is the cost model's step time with every MoE layer forward taking the
longer of its GPU time and h plus its per-expert launches
(`models.core.moe.host_issue.moe_host_idle_s`), interpolated linearly in h between
tabulated values (T is piecewise linear in h: a sum of maxima) and in 1/s as in
`models.evidence.calibration`. For each h, (s, o) are fitted as there (`fit_constants`, or
`fit_overhead` with s held by GEMM microbenchmarks); h minimises the
profiled residual, by a scan over the table and golden-section search between the best
point's neighbours. Standard errors: the Gauss-Newton covariance sigma^2 (J^T J)^-1 over the
free parameters, sigma^2 = RSS / (n - p). Minimising over (s, o) for each h and then over
h reaches the joint least-squares minimum. Source: nonlinear least squares and its
covariance, Seber and Wild, "Nonlinear Regression" (Wiley 1989), Sec. 2.1-2.2;
leave-one-out, Stone (1974) J. R. Stat. Soc. B 36(2):111-147.

Identification: h moves a run's step only while an MoE layer forward is host-bound
(dT/dh > 0); a dense run or a GPU-bound MoE run says nothing about it. h is fitted only when
at least `MIN_HOST_BOUND_MOE_RUNS` runs are host-bound at the fitted value and its standard
error is finite; otherwise the caller keeps the published constant and says why.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.evidence.calibration import AT_LIMIT_REL, Fit, RunCurve
from models.evidence.scale_fit import golden_section

MIN_HOST_BOUND_MOE_RUNS = 3
"""Host-bound MoE runs needed before h is fitted: one more than the two constants h shares
the MoE runs' residuals with (s, o), so that h is not set by one or two runs."""

HOST_BOUND_MIN_SLOPE = 1.0
"""A run is host-bound when its step time grows by at least this many seconds per second of
h (at least one MoE layer forward per step waits on the host)."""

ISSUE_GRID_LOW_S = 2.5e-4
"""Smallest non-zero h of the table (0.25 ms, about 1/30 of the published 7.4 ms)."""

ISSUE_GRID_RATIO = 1.5
"""Ratio between consecutive non-zero h of the table (log-spaced up to the physical limit)."""

ISSUE_TOLERANCE_S = 1e-5
"""Width (seconds) at which the golden-section search over h stops (0.01 ms, a tenth of the
smallest standard error the recovery check states)."""

LOO_BRACKET_STEPS = 2
"""Table steps either side of the full fit's h that a leave-one-out fit scans (one run moves
h by a fraction of its standard error, far less than a step of 50%)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSurface:
    """One measured run and the cost model's step time over (h, s)."""

    measured_s: float
    issues: tuple[float, ...]
    """Increasing h at which the model was tabulated (one value for a dense run)."""
    rows: tuple[RunCurve, ...]
    """The run's step time over s at each h (`RunCurve`), one per entry of `issues`."""
    moe_forwards: int
    """MoE layer forwards one rank issues per step at least (MoE layers on the busiest
    pipeline rank x micro-batches); 0 for a dense run."""

    def curve_at(self, issue: float) -> RunCurve:
        """The run's step time over s at h = `issue` (linear in h, clamped at the ends)."""
        xs = self.issues
        if len(xs) == 1 or issue <= xs[0]:
            return self.rows[0]
        if issue >= xs[-1]:
            return self.rows[-1]
        k = 1
        while issue > xs[k]:
            k += 1
        w = (issue - xs[k - 1]) / (xs[k] - xs[k - 1])
        a, b = self.rows[k - 1], self.rows[k]
        return RunCurve(measured_s=self.measured_s, scales=a.scales,
                        model_s=tuple(x + w * (y - x) for x, y in zip(a.model_s, b.model_s,
                                                                      strict=True)))

    def model_at(self, scale: float, issue: float) -> float:
        """T(s, h) without the per-step overhead."""
        return self.curve_at(issue).model_at(scale)

    def issue_slope(self, scale: float, issue: float) -> float:
        """dT/dh at (s, h): the slope of the table's segment to the right of h (the left one
        at the table's end); 0 for a dense run."""
        xs = self.issues
        if len(xs) == 1:
            return 0.0
        k = 1
        while k < len(xs) - 1 and issue >= xs[k]:
            k += 1
        return ((self.rows[k].model_at(scale) - self.rows[k - 1].model_at(scale))
                / (xs[k] - xs[k - 1]))


@dataclass(frozen=True, slots=True, kw_only=True)
class IssueFit:
    """The joint fit: h with its standard error, and (s, o) at that h."""

    issue_s: float
    issue_se: float
    fit: Fit
    host_bound_runs: int
    """Runs host-bound at the fitted h (`HOST_BOUND_MIN_SLOPE`)."""


def issue_limit(surfaces: Sequence[RunSurface]) -> float:
    """The largest physical h: no MoE run's measured step can be shorter than the host's
    issue of its rank's MoE layer forwards (min over MoE runs of measured step / MoE
    forwards per step); infinite without MoE runs."""
    return min((s.measured_s / s.moe_forwards for s in surfaces if s.moe_forwards > 0),
               default=math.inf)


def issue_grid(limit: float) -> tuple[float, ...]:
    """The h of the table: 0, then log-spaced from `ISSUE_GRID_LOW_S` by `ISSUE_GRID_RATIO`,
    ending at `limit`."""
    grid = [0.0]
    h = ISSUE_GRID_LOW_S
    while h < limit:
        grid.append(h)
        h *= ISSUE_GRID_RATIO
    grid.append(limit)
    return tuple(grid)


def host_bound_runs(surfaces: Sequence[RunSurface], scale: float, issue: float) -> int:
    """Runs whose step moves with h at (s, h)."""
    return sum(s.issue_slope(scale, issue) >= HOST_BOUND_MIN_SLOPE for s in surfaces)


def _issue_se(surfaces: Sequence[RunSurface], fit: Fit, issue: float, *,
              free_scale: bool) -> float:
    """Gauss-Newton standard error of h with (s, o) free where they were fitted."""
    free_overhead = not fit.clamped_overhead
    rows = []
    for surface in surfaces:
        curve = surface.curve_at(issue)
        t = curve.model_at(fit.scale) + fit.overhead_s
        row = [surface.issue_slope(fit.scale, issue) / t]
        if free_scale:
            row.append(curve.slope_at(fit.scale) / t)
        if free_overhead:
            row.append(1.0 / t)
        rows.append(row)
    jac = np.array(rows)
    dof = len(surfaces) - jac.shape[1]
    if dof < 1:
        return math.inf
    jtj = jac.T @ jac
    if np.linalg.cond(jtj) > 1e12:
        return math.inf
    cov = np.linalg.inv(jtj) * (fit.rss / dof)
    return float(math.sqrt(max(0.0, float(cov[0, 0]))))


def fit_with_issue(surfaces: Sequence[RunSurface], *,
                   fit_at: Callable[[Sequence[RunCurve]], Fit], free_scale: bool,
                   near: float | None = None) -> IssueFit:
    """Least-squares (h, s, o) (see the module docstring): `fit_at` fits (s, o), or o alone
    (`free_scale` False), to the runs' curves at one h; h is searched over [0, the tables'
    largest h], or within `LOO_BRACKET_STEPS` table steps of `near` (a warm start)."""
    grid = max((s.issues for s in surfaces), key=len)
    if near is not None:
        at = min(range(len(grid)), key=lambda k: abs(grid[k] - near))
        grid = grid[max(0, at - LOO_BRACKET_STEPS):at + LOO_BRACKET_STEPS + 1]

    def cost(issue: float) -> float:
        return fit_at([s.curve_at(issue) for s in surfaces]).rss

    issue = golden_section(cost, grid, converged=lambda a, b: b - a <= ISSUE_TOLERANCE_S)
    fit = fit_at([s.curve_at(issue) for s in surfaces])
    return IssueFit(issue_s=issue, issue_se=_issue_se(surfaces, fit, issue,
                                                      free_scale=free_scale),
                    fit=fit, host_bound_runs=host_bound_runs(surfaces, fit.scale, issue))


def issue_problems(result: IssueFit, surfaces: Sequence[RunSurface], *,
                   limit: float) -> list[str]:
    """Why a fitted h is unphysical (empty when it is not): it runs into the physical limit
    (`issue_limit`), or into 0 while the runs are still host-bound there, so the best value
    would be negative."""
    problems = []
    h = result.issue_s
    if h >= limit * (1.0 - AT_LIMIT_REL):
        problems.append(
            f"the MoE layer host issue time runs into its upper limit {limit * 1e3:.4g} ms (the "
            "shortest measured step over its rank's MoE layer forwards per step): the MoE runs "
            "are slower than any admissible host time explains")
    at_zero = h <= ISSUE_GRID_LOW_S * AT_LIMIT_REL
    if at_zero and host_bound_runs(surfaces, result.fit.scale, 0.0) >= MIN_HOST_BOUND_MOE_RUNS:
        problems.append(
            "the MoE layer host issue time comes out at or below 0 s while "
            f"{host_bound_runs(surfaces, result.fit.scale, 0.0)} runs are host-bound even "
            "without it (their per-expert launches alone): a negative host time is not "
            "physical; the model's other MoE terms are larger than these runs show")
    return problems


def issue_leave_one_out(surfaces: Sequence[RunSurface], *,
                        fit_at: Callable[[Sequence[RunCurve]], Fit],
                        free_scale: bool, near: float) -> list[tuple[IssueFit, float]]:
    """For each run, the joint fit on the other runs (h searched near the full fit's `near`,
    `LOO_BRACKET_STEPS`) and its prediction of the held-out run."""
    out = []
    for i, held in enumerate(surfaces):
        rest = [s for j, s in enumerate(surfaces) if j != i]
        result = fit_with_issue(rest, fit_at=fit_at, free_scale=free_scale, near=near)
        out.append((result, held.model_at(result.fit.scale, result.issue_s)
                    + result.fit.overhead_s))
    return out


__all__ = [
    "HOST_BOUND_MIN_SLOPE",
    "ISSUE_GRID_LOW_S",
    "ISSUE_GRID_RATIO",
    "ISSUE_TOLERANCE_S",
    "LOO_BRACKET_STEPS",
    "MIN_HOST_BOUND_MOE_RUNS",
    "IssueFit",
    "RunSurface",
    "fit_with_issue",
    "host_bound_runs",
    "issue_grid",
    "issue_leave_one_out",
    "issue_limit",
    "issue_problems",
]

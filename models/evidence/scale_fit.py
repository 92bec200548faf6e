"""One multiplier fitted to measured times by least squares on log ratios.

Owns: the golden-section search on ln x and the Gauss-Newton standard error that
`models.evidence.microbenchmarks` uses for its link and attention scales (its docstring
states the fit). Pure.
Source: Seber and Wild, "Nonlinear Regression" (Wiley 1989), Sec. 2.1-2.2.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

SCALE_SEARCH_LO = 0.02
"""Lowest link or attention multiplier searched (a link at 2% of its rating is broken, not
calibrated)."""

SEARCH_TOLERANCE = 1e-7
"""Width in ln(scale) at which the golden-section search stops."""


def _golden_log(cost: Callable[[float], float], lo: float, hi: float) -> float:
    """Minimise cost(x) over [lo, hi] by a coarse log grid, then golden section on ln x."""
    a, b = math.log(lo), math.log(hi)
    grid = [a + (b - a) * k / 60 for k in range(61)]
    values = [cost(math.exp(g)) for g in grid]
    best = min(range(len(grid)), key=values.__getitem__)
    a, b = grid[max(0, best - 1)], grid[min(60, best + 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = cost(math.exp(c)), cost(math.exp(d))
    while b - a > SEARCH_TOLERANCE:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = cost(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = cost(math.exp(d))
    mid = math.exp((a + b) / 2.0)
    return min((math.exp(grid[best]), mid), key=cost)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleFit:
    """One fitted multiplier."""

    value: float
    standard_error: float
    rss: float
    num_entries: int
    uncalibrated_error: float
    fitted_error: float
    at_upper_limit: bool
    sensitivity: float
    """Largest |d ln model_i / d ln x| over the entries."""


def fit_scale(models: Sequence[Callable[[float], float]], measured: Sequence[float], *,
              upper: float) -> ScaleFit:
    """The multiplier x in [SCALE_SEARCH_LO, upper] minimising sum (ln m_i(x) - ln y_i)^2,
    with its Gauss-Newton standard error (module docstring); m_i are model times."""
    logs = [math.log(y) for y in measured]

    def cost(x: float) -> float:
        return sum((math.log(m(x)) - ly) ** 2 for m, ly in zip(models, logs, strict=True))

    x = _golden_log(cost, SCALE_SEARCH_LO, upper)
    rss = cost(x)
    n = len(models)
    h = 1e-4
    jac = [(math.log(m(x * math.exp(h))) - math.log(m(x * math.exp(-h)))) / (2 * h)
           for m in models]
    sj = sum(j * j for j in jac)
    if n > 1 and sj > 0:
        se = x * math.sqrt(rss / (n - 1) / sj)
    else:
        se = -1.0 if sj > 0 else math.inf
    unc = sum(abs(m(1.0) / y - 1) for m, y in zip(models, measured, strict=True)) / n
    fitted = sum(abs(m(x) / y - 1) for m, y in zip(models, measured, strict=True)) / n
    return ScaleFit(value=x, standard_error=se, rss=rss, num_entries=n,
                    uncalibrated_error=unc, fitted_error=fitted,
                    at_upper_limit=x >= upper * (1 - 1e-4),
                    sensitivity=max(abs(j) for j in jac))


__all__ = ["SCALE_SEARCH_LO", "SEARCH_TOLERANCE", "ScaleFit", "fit_scale"]

"""One multiplier fitted to measured times by least squares on log ratios.

Owns: the golden-section search (`golden_section`, also the step-time calibration's) and,
on ln x, and the Gauss-Newton standard error that
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


GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
"""The golden-section ratio, (sqrt 5 - 1) / 2."""


def golden_section(cost: Callable[[float], float], grid: Sequence[float], *,
                   converged: Callable[[float, float], bool]) -> float:
    """The point of least cost: the grid point of least cost and its two neighbours bracket
    a golden-section search, run until `converged(a, b)` holds for the bracket [a, b];
    returns the better of that grid point and the bracket's midpoint."""
    values = [cost(x) for x in grid]
    best = min(range(len(grid)), key=values.__getitem__)
    a, b = grid[max(0, best - 1)], grid[min(len(grid) - 1, best + 1)]
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = cost(c), cost(d)
    while not converged(a, b):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = cost(d)
    return min((grid[best], (a + b) / 2.0), key=cost)


def _golden_log(cost: Callable[[float], float], lo: float, hi: float) -> float:
    """Minimise cost(x) over [lo, hi] by a coarse log grid, then golden section on ln x."""
    a, b = math.log(lo), math.log(hi)
    grid = [a + (b - a) * k / 60 for k in range(61)]
    return math.exp(golden_section(lambda g: cost(math.exp(g)), grid,
                                   converged=lambda a, b: b - a <= SEARCH_TOLERANCE))


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


__all__ = ["GOLDEN", "SCALE_SEARCH_LO", "SEARCH_TOLERANCE", "ScaleFit", "fit_scale",
           "golden_section"]

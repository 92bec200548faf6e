"""The one place where the schedule optimizer turns seconds into CP-SAT integer ticks.

Owns: `TimeScale` and `time_scale`. Durations and the P2P latency become integer ticks of
`quantum_s` seconds, always rounded up, so a schedule feasible in ticks stays feasible (and
no slower) when re-timed with the true durations. Must not: build any model.

Quantum. If every value is an integer multiple of a common quantum q with at most
`MAX_EXACT_TICKS` ticks for the largest value (q is searched among min_value / k for
k = 1..`MAX_EXACT_DIVISOR`), that q is used and the conversion is exact (unit costs,
(1, 2, 1), (1, 1.5, 0.5), ... are exact). Otherwise q = largest value /
`FALLBACK_TICKS_PER_LARGEST`, every value rounds up by less than one tick (< 0.1% of the
largest duration), and `inflation` = max over values of ticks x q / value >= 1 bounds the
distortion: an optimum T* with true durations satisfies T* >= bound_ticks x q / inflation,
because scaling a true schedule by `inflation` makes every op at least as long as its
rounded-up duration.
"""

import logging
import math
from dataclasses import dataclass

logger = logging.getLogger(__name__)

MAX_EXACT_TICKS = 4000
"""Largest tick count the exact quantum may give the longest duration."""
MAX_EXACT_DIVISOR = 64
"""Exact quanta tried: the smallest positive value divided by 1..64."""
FALLBACK_TICKS_PER_LARGEST = 1000
"""Ticks of the longest duration when no exact quantum exists (rounding < 0.1%)."""
_REL_TOL = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeScale:
    """Seconds per tick and how faithful the conversion is."""

    quantum_s: float
    exact: bool
    inflation: float
    """max(ticks x quantum / value) over positive values; 1.0 when exact."""

    def ticks(self, value_s: float) -> int:
        """`value_s` in ticks, rounded up (exact values land on their integer)."""
        x = value_s / self.quantum_s
        nearest = round(x)
        if abs(x - nearest) <= _REL_TOL * max(1.0, abs(x)):
            return int(nearest)
        return math.ceil(x)

    def seconds(self, ticks: float) -> float:
        """`ticks` back in seconds."""
        return ticks * self.quantum_s


def time_scale(values_s: list[float]) -> TimeScale:
    """The tick quantum for these durations and latency (see the module docstring)."""
    positive = [v for v in values_s if v > 0.0]
    if not positive:
        return TimeScale(quantum_s=1.0, exact=True, inflation=1.0)
    smallest, largest = min(positive), max(positive)
    for k in range(1, MAX_EXACT_DIVISOR + 1):
        q = smallest / k
        if largest / q > MAX_EXACT_TICKS:
            break
        if all(_is_multiple(v, q) for v in positive):
            return TimeScale(quantum_s=q, exact=True, inflation=1.0)
    q = largest / FALLBACK_TICKS_PER_LARGEST
    scale = TimeScale(quantum_s=q, exact=False, inflation=1.0)
    inflation = max(scale.ticks(v) * q / v for v in positive)
    logger.debug("inexact time quantum %.3g s, inflation %.6f", q, inflation)
    return TimeScale(quantum_s=q, exact=False, inflation=inflation)


def _is_multiple(value: float, quantum: float) -> bool:
    x = value / quantum
    return abs(x - round(x)) <= _REL_TOL * max(1.0, x)


__all__ = ["TimeScale", "time_scale"]

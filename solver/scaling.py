"""The only place floats become CP-SAT integers, and integers become floats again.

Owns: the fixed quanta of the per-stage policy model (1 MiB, 1 microsecond; costs round up,
capacities and savings down, so a plan feasible after rounding is feasible in bytes and
seconds too) and the adaptive tick scale of the schedule optimizer (`TimeScale`,
`time_scale`). Must not: build any model.

Schedule ticks. Durations and the P2P latency become integer ticks of `quantum_s` seconds,
always rounded up, so a schedule feasible in ticks stays feasible (and no slower) when
re-timed with the true durations. If every value is an integer multiple of a common quantum
q with at most `MAX_EXACT_TICKS` ticks for the largest value (q is searched among
min_value / k for k = 1..`MAX_EXACT_DIVISOR`), that q is used and the conversion is exact
(unit costs, (1, 2, 1), (1, 1.5, 0.5), ... are exact). Otherwise q = largest value /
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

MEMORY_QUANTUM_BYTES = 2**20
"""One CP-SAT memory unit: 1 MiB."""

TIME_QUANTUM_S = 1e-6
"""One CP-SAT time unit: 1 microsecond."""

MAX_COEFFICIENT = 2**40
"""Largest coefficient allowed, so coefficient x domain stays far inside int64."""


def cost_bytes(value: float) -> int:
    """A memory cost in quanta, rounded up."""
    return _check(math.ceil(value / MEMORY_QUANTUM_BYTES))


def capacity_bytes(value: float) -> int:
    """A memory capacity in quanta, rounded down."""
    return _check(math.floor(value / MEMORY_QUANTUM_BYTES))


def saved_bytes(value: float) -> int:
    """A memory saving in quanta, rounded down (never credits more than the exact bytes)."""
    return _check(math.floor(value / MEMORY_QUANTUM_BYTES))


def cost_time(value_s: float) -> int:
    """A duration in quanta, rounded up."""
    return _check(math.ceil(value_s / TIME_QUANTUM_S))


def seconds(quanta: float) -> float:
    """A duration read back from the model, in seconds."""
    return quanta * TIME_QUANTUM_S


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


def _check(value: int) -> int:
    if abs(value) > MAX_COEFFICIENT:
        from models.errors import InvalidSpecError

        raise InvalidSpecError(
            f"a CP-SAT coefficient of {value} exceeds {MAX_COEFFICIENT}; the problem is too "
            "large to scale exactly (reduce the model or cluster size)", field="solver")
    return value


__all__ = [
    "FALLBACK_TICKS_PER_LARGEST",
    "MAX_COEFFICIENT",
    "MAX_EXACT_DIVISOR",
    "MAX_EXACT_TICKS",
    "MEMORY_QUANTUM_BYTES",
    "TIME_QUANTUM_S",
    "TimeScale",
    "capacity_bytes",
    "cost_bytes",
    "cost_time",
    "saved_bytes",
    "seconds",
    "time_scale",
]

"""The only place floats become CP-SAT integers.

Costs round up and capacities down, so a plan that is feasible after rounding is feasible
in bytes and seconds too.
"""

import math

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


def cost_time(value_s: float) -> int:
    """A duration in quanta, rounded up."""
    return _check(math.ceil(value_s / TIME_QUANTUM_S))


def _check(value: int) -> int:
    if abs(value) > MAX_COEFFICIENT:
        from models.errors import InvalidSpecError

        raise InvalidSpecError(
            f"a CP-SAT coefficient of {value} exceeds {MAX_COEFFICIENT}; the problem is too "
            "large to scale exactly (reduce the model or cluster size)", field="solver")
    return value


__all__ = ["MAX_COEFFICIENT", "MEMORY_QUANTUM_BYTES", "TIME_QUANTUM_S", "capacity_bytes",
           "cost_bytes", "cost_time"]

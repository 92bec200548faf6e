"""CP-SAT scaling: costs round up, capacities and savings down, read-backs invert exactly."""

import pytest

from models.errors import InvalidSpecError
from solver.scaling import (
    MAX_COEFFICIENT,
    MEMORY_QUANTUM_BYTES,
    capacity_bytes,
    cost_bytes,
    cost_time,
    saved_bytes,
    seconds,
)


def test_memory_costs_round_up_and_capacities_and_savings_down() -> None:
    just_over = MEMORY_QUANTUM_BYTES + 1
    assert cost_bytes(just_over) == 2
    assert capacity_bytes(just_over) == 1
    assert saved_bytes(just_over) == 1
    assert cost_bytes(80 * 2**30) == capacity_bytes(80 * 2**30) == 80 * 1024


def test_times_round_up_and_read_back_in_seconds() -> None:
    assert cost_time(1.5e-6) == 2
    assert seconds(cost_time(0.25)) == pytest.approx(0.25)
    assert seconds(cost_time(1.0000001)) >= 1.0000001


def test_a_coefficient_past_the_limit_is_refused() -> None:
    with pytest.raises(InvalidSpecError, match="too large"):
        cost_bytes(float(MEMORY_QUANTUM_BYTES) * (MAX_COEFFICIENT + 1))

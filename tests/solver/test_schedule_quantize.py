"""The one float -> tick conversion of the schedule optimizer."""

import pytest

from solver.scaling import FALLBACK_TICKS_PER_LARGEST, time_scale


@pytest.mark.parametrize(("values", "quantum"), [
    ([1.0, 1.0, 1.0, 0.0], 1.0),
    ([1.0, 2.0, 1.0], 1.0),
    ([1.0, 1.5, 0.5], 0.5),
    ([1.0, 1.2, 0.8], 0.2),
    ([0.25, 0.5, 0.125, 0.0], 0.125),
    ([3e-3, 4.5e-3, 1.5e-3], 1.5e-3),
])
def test_exact_quantum_when_values_share_one(values: list[float], quantum: float) -> None:
    scale = time_scale(values)
    assert scale.exact
    assert scale.quantum_s == pytest.approx(quantum)
    assert scale.inflation == 1.0
    for v in values:
        assert scale.seconds(scale.ticks(v)) == pytest.approx(v)


def test_inexact_values_round_up_within_one_tick() -> None:
    values = [1.0, 1.0 + 1 / 3, 0.7071]
    scale = time_scale(values)
    assert not scale.exact
    assert scale.quantum_s == pytest.approx(max(values) / FALLBACK_TICKS_PER_LARGEST)
    for v in values:
        assert v <= scale.seconds(scale.ticks(v)) < v + scale.quantum_s
    assert scale.inflation == pytest.approx(max(scale.seconds(scale.ticks(v)) / v
                                                for v in values))
    assert 1.0 < scale.inflation < 1.002


def test_all_zero_durations_get_a_unit_quantum() -> None:
    scale = time_scale([0.0, 0.0])
    assert (scale.quantum_s, scale.exact, scale.ticks(0.0)) == (1.0, True, 0)

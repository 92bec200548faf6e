"""The CP-SAT schedule optimizer: proofs on small pipelines, never worse than handcrafted."""

import itertools

import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import OpDurations, generate_program, simulate
from models.errors import InfeasibleError, InvalidSpecError
from solver.cpsat import SolverConfig, SolveStatus
from solver.schedule import optimize_schedule, optimizer

CONFIG = SolverConfig(max_time_s=600.0, deterministic_time_limit=20.0, num_workers=1,
                      random_seed=0)
"""Bounded by CP-SAT's deterministic work, not the clock, so that a loaded machine reaches
the same statuses (the wall limit is only a safety net)."""
UNIT = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0)
F1B2W1 = OpDurations.uniform(forward_s=1.0, backward_input_s=2.0, backward_weight_s=1.0)


@pytest.mark.parametrize("durations", [UNIT, F1B2W1], ids=["unit", "F1-B2-W1"])
def test_optimizer_proves_optimality_for_every_p_le_4_m_le_8(durations: OpDurations) -> None:
    for p, m in itertools.product(range(1, 5), range(1, 9)):
        for limit in sorted({1, p, p + 1, 2 * p}):
            result = optimize_schedule(S.ONE_F_ONE_B, num_stages=p, num_micro_batches=m,
                                       durations=durations, memory_limit=limit, config=CONFIG)
            assert result.status == SolveStatus.OPTIMAL, (p, m, limit)
            assert result.gap == 0.0
            assert result.lower_bound_s == result.makespan_s
            assert max(result.simulation.peak_in_flight_chunks) <= limit
            assert result.makespan_s <= result.baseline_makespan_s


def _handcrafted_within(schedules: list[S], *, p: int, m: int, v: int,
                        durations: OpDurations, limit_chunks: int) -> list[float]:
    makespans = []
    for schedule in schedules:
        chunks = 1 if schedule == S.DUALPIPE else v
        try:
            program = generate_program(schedule, num_stages=p, num_micro_batches=m,
                                       num_chunks=chunks)
        except InvalidSpecError:
            continue
        result = simulate(program, durations)
        if max(result.peak_in_flight_chunks) <= limit_chunks:
            makespans.append(result.makespan_s)
    return makespans


LINEAR = [S.GPIPE, S.ONE_F_ONE_B, S.ZB_H1, S.ZB_H2]
NEVER_WORSE = [
    # schedule, handcrafted family, p, m, v, (F, B, W), limit in full-stage units
    (S.ZB_H1, LINEAR, 4, 8, 1, (1.0, 2.0, 1.0), 4),
    (S.ZB_H2, LINEAR, 4, 8, 1, (1.0, 2.0, 1.0), 7),
    (S.ZB_H1, LINEAR, 3, 6, 1, (1.0, 1.5, 0.5), 5),
    (S.GPIPE, LINEAR, 4, 6, 1, (1.0, 1.0, 1.0), 6),
    (S.INTERLEAVED_1F1B, [S.INTERLEAVED_1F1B], 4, 8, 2, (0.5, 0.5, 0.5), 6),
    (S.ZBV, [S.ZBV, S.DUALPIPEV], 4, 8, 2, (0.5, 1.0, 0.5), 4),
    (S.DUALPIPEV, [S.ZBV, S.DUALPIPEV], 3, 6, 2, (0.5, 0.5, 0.5), 4),
    (S.DUALPIPE, [S.DUALPIPE], 4, 8, 1, (1.0, 1.0, 1.0), 5),
]


@pytest.mark.parametrize(("schedule", "family", "p", "m", "v", "costs", "limit"), NEVER_WORSE)
def test_optimizer_is_never_worse_than_a_handcrafted_schedule_within_the_limit(
        schedule: S, family: list[S], p: int, m: int, v: int,
        costs: tuple[float, float, float], limit: float) -> None:
    f, b, w = costs
    durations = OpDurations.uniform(forward_s=f, backward_input_s=b, backward_weight_s=w)
    result = optimize_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                               durations=durations, memory_limit=limit, config=CONFIG)
    chunks = int(limit * (1 if schedule == S.DUALPIPE else v))
    baselines = _handcrafted_within(family, p=p, m=m, v=v, durations=durations,
                                    limit_chunks=chunks)
    assert baselines, "the test case must have a handcrafted schedule within the limit"
    assert result.makespan_s <= min(baselines) + 1e-9
    assert result.baseline_makespan_s == pytest.approx(min(baselines))
    assert result.status == SolveStatus.OPTIMAL
    assert max(result.simulation.peak_in_flight_chunks) <= chunks


def test_optimizer_beats_zb_h1_between_p_and_2p_minus_1() -> None:
    """p=4, m=8, (F,B,W) = (1,2,1): ZB-H1 (limit 4) takes 38, ZB-H2 (7) 35; with a limit of
    5 or 6 no handcrafted schedule improves on 38 but the optimum is 37 and 36."""
    for limit, best in ((5, 37.0), (6, 36.0)):
        result = optimize_schedule(S.ZB_H1, num_stages=4, num_micro_batches=8,
                                   durations=F1B2W1, memory_limit=limit, config=CONFIG)
        assert (result.status, result.makespan_s, result.baseline_makespan_s) == \
               (SolveStatus.OPTIMAL, best, 38.0)


def test_optimizer_finds_zero_bubble_interleaving_within_megatron_memory() -> None:
    """Interleaved placement, p=4, m=8, v=2: Megatron's order takes 28.5 with 11 chunks;
    the optimum under 8 chunks (4 stage units) reaches the work bound 24 + 3 x 0.5."""
    half = OpDurations.uniform(forward_s=0.5, backward_input_s=0.5, backward_weight_s=0.5)
    result = optimize_schedule(S.INTERLEAVED_1F1B, num_stages=4, num_micro_batches=8,
                               num_chunks=2, durations=half, memory_limit=4, config=CONFIG)
    assert (result.status, result.makespan_s, result.memory_limit_chunks) == \
           (SolveStatus.OPTIMAL, 25.5, 8)
    assert result.baseline_schedule is None  # Megatron's 11 chunks do not fit


def test_optimizer_reports_a_gap_at_the_time_limit() -> None:
    """A limit between p and 2p-1 is the hard regime: FEASIBLE, honest bound, small gap."""
    short = SolverConfig(max_time_s=600.0, deterministic_time_limit=0.5, num_workers=1,
                         random_seed=0)
    result = optimize_schedule(S.ZB_H1, num_stages=8, num_micro_batches=24, durations=F1B2W1,
                               memory_limit=12, config=short)
    assert result.status == SolveStatus.FEASIBLE
    assert 0.0 < result.gap < 0.06
    assert result.lower_bound_s < result.makespan_s <= result.baseline_makespan_s


def test_cooldown_bound_proves_zb_h1_optimal_whenever_w_le_f() -> None:
    """Limit p, W <= F: warm-up idle (p-1)B plus cool-down idle (p-1)(F-W) is ZB-H1's
    (p-1)(F+B-W), so no search is needed."""
    durations = OpDurations.uniform(forward_s=1.0, backward_input_s=1.2, backward_weight_s=0.8)
    result = optimize_schedule(S.ZB_H1, num_stages=8, num_micro_batches=32, durations=durations,
                               memory_limit=8, config=CONFIG)
    assert (result.method, result.status) == ("bound-attained", SolveStatus.OPTIMAL)
    assert result.makespan_s == pytest.approx(32 * 3.0 + 7 * 1.4)


def test_windowed_model_for_large_m_keeps_a_valid_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the size threshold only warm-up and cool-down are reordered; the answer is
    still feasible, never worse, and reaches the optimum where the bound is attained."""
    monkeypatch.setattr(optimizer, "MAX_FULL_MODEL_OPS", 10)
    result = optimize_schedule(S.ZB_H1, num_stages=4, num_micro_batches=32, durations=F1B2W1,
                               memory_limit=5, config=CONFIG)
    assert result.method == "cp-sat-windows"
    assert result.makespan_s == 133.0  # the full model's optimum; ZB-H1 takes 134
    assert result.status == SolveStatus.OPTIMAL


def test_handcrafted_schedule_at_the_bound_needs_no_search() -> None:
    """ZB-H2 meets the rank-(p-1) bound (p-1)F + m(F+B+W) at limit 2p-1."""
    result = optimize_schedule(S.ZB_H2, num_stages=8, num_micro_batches=64, durations=F1B2W1,
                               memory_limit=16, config=CONFIG)
    assert (result.method, result.status, result.makespan_s) == \
           ("bound-attained", SolveStatus.OPTIMAL, 7 + 64 * 4)
    assert result.baseline_schedule == S.ZB_H2


def test_inexact_durations_round_up_and_deflate_the_bound() -> None:
    durations = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0 + 1 / 3,
                                    backward_weight_s=0.7071)
    result = optimize_schedule(S.ZB_H1, num_stages=3, num_micro_batches=4, durations=durations,
                               memory_limit=3, config=CONFIG)
    assert not result.quantization_exact
    assert result.lower_bound_s <= result.makespan_s <= result.baseline_makespan_s
    assert result.time_quantum_s == pytest.approx((1.0 + 1 / 3) / 1000)


def test_a_limit_below_one_micro_batch_is_infeasible() -> None:
    half = OpDurations.uniform(forward_s=0.5, backward_input_s=0.5, backward_weight_s=0.5)
    with pytest.raises(InfeasibleError) as caught:
        optimize_schedule(S.INTERLEAVED_1F1B, num_stages=4, num_micro_batches=8, num_chunks=2,
                          durations=half, memory_limit=0.5, config=CONFIG)
    assert caught.value.diagnostics == {"needed_chunks": 2, "allowed_chunks": 1}
    assert "at least 1" in caught.value.detail


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"memory_limit": 0.0}, "memory_limit"),
    ({"durations": OpDurations.uniform(forward_s=1.0, backward_input_s=1.0,
                                       backward_weight_s=1.0, overlapped_pair_s=2.0)},
     "overlapped_pair_s"),
    ({"num_chunks": 2}, "num_chunks"),
])
def test_optimizer_refuses_bad_input(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"num_stages": 4, "num_micro_batches": 8, "durations": UNIT,
                               "memory_limit": 4.0, "config": CONFIG}
    args.update(kwargs)
    with pytest.raises(InvalidSpecError) as caught:
        optimize_schedule(S.ZB_H1, **args)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_latency_is_part_of_the_optimised_model() -> None:
    """1F1B is latency sensitive (16c at p=4, m=8); the optimum within p in flight is not."""
    result = optimize_schedule(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=8,
                               durations=UNIT, memory_limit=4, p2p_latency_s=0.5,
                               config=CONFIG)
    one_f_one_b = simulate(generate_program(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=8),
                           UNIT, p2p_latency_s=0.5)
    assert one_f_one_b.makespan_s == 33 + 16 * 0.5
    assert result.status == SolveStatus.OPTIMAL
    assert result.makespan_s < one_f_one_b.makespan_s
    assert result.makespan_s == pytest.approx(result.simulation.makespan_s)

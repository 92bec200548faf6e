"""The analytic lower bound of the schedule optimizer and the handcrafted hints."""

import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import OpDurations, generate_program, simulate
from solver.scaling import time_scale
from solver.schedule.candidates import hint_starts, placement_for
from solver.schedule.instance import build_instance, heads_and_tails, lower_bound_ticks
from solver.schedule.optimizer import program_from_starts


def _instance(schedule: S, p: int, m: int, v: int, costs: tuple[float, float, float],
              limit: int, latency: float = 0.0):  # type: ignore[no-untyped-def]
    f, b, w = costs
    durations = OpDurations.uniform(forward_s=f, backward_input_s=b, backward_weight_s=w)
    placement, _ = placement_for(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    scale = time_scale([f, b, w, latency])
    inst = build_instance(placement, durations, p2p_latency_s=latency, scale=scale,
                          memory_limit_chunks=limit)
    return inst, durations


def test_warmup_bound_proves_zb_h1_optimal_at_limit_p() -> None:
    """(F,B,W) = (1,2,1), limit p: before rank 0's first B (at pF + (p-1)B) only p forwards
    fit, so makespan >= pF + (p-1)B + m(F+B+W) - pF = 2(p-1) + 4m, ZB-H1's makespan."""
    p, m = 8, 64
    inst, durations = _instance(S.ZB_H1, p, m, 1, (1.0, 2.0, 1.0), p)
    head, tail = heads_and_tails(inst)
    assert lower_bound_ticks(inst, head, tail) == 2 * (p - 1) + 4 * m
    zb_h1 = simulate(generate_program(S.ZB_H1, num_stages=p, num_micro_batches=m), durations)
    assert zb_h1.makespan_s == 2 * (p - 1) + 4 * m


def test_rank_load_bound_is_the_forward_stagger() -> None:
    """Unit costs, limit 2p: the last rank starts at (p-1)F and does 3m work."""
    inst, _ = _instance(S.ZB_H2, 4, 8, 1, (1.0, 1.0, 1.0), 8)
    head, tail = heads_and_tails(inst)
    assert lower_bound_ticks(inst, head, tail) == 3 + 24


@pytest.mark.parametrize(("schedule", "p", "m", "v"), [
    (S.ZB_H2, 4, 8, 1), (S.INTERLEAVED_1F1B, 4, 8, 2), (S.ZBV, 4, 8, 2),
    (S.DUALPIPEV, 3, 6, 2), (S.DUALPIPE, 4, 8, 1)])
def test_hint_round_trips_through_the_atomic_model(schedule: S, p: int, m: int, v: int) -> None:
    """A handcrafted timeline becomes F/B/W start ticks and back without getting slower,
    and its makespan is at least the analytic bound."""
    inst, _ = _instance(schedule, p, m, v, (1.0, 2.0, 1.0), 4 * p, latency=1.0)
    ticks = OpDurations.uniform(forward_s=1.0, backward_input_s=2.0, backward_weight_s=1.0)
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    timed = simulate(program, ticks, p2p_latency_s=1.0)
    starts = hint_starts(inst, program, timed)
    for o, preds in enumerate(inst.preds):
        assert all(starts[o] >= starts[q] + lag for q, lag in preds)
    again = simulate(program_from_starts(inst, starts, chunks_per_stage_unit=v), ticks,
                     p2p_latency_s=1.0)
    assert again.makespan_s <= timed.makespan_s
    assert again.peak_in_flight_chunks == timed.peak_in_flight_chunks
    head, tail = heads_and_tails(inst)
    assert lower_bound_ticks(inst, head, tail) <= timed.makespan_s

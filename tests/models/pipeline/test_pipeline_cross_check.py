"""The simulator against the closed forms, generator invariants, and the DualPipeV identity.

Reference Sec. 5: invariants for every generator on a small grid, every closed form under
its stated conditions, DualPipeV(P, m) idle == DualPipe(2P, 2m) idle.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import (
    OpDurations,
    OpKind,
    PipelineProgram,
    SimulationResult,
    closed_form,
    generate_program,
    peak_in_flight_chunks,
    peak_in_flight_until_b_chunks,
    simulate,
)
from models.errors import InvalidSpecError

CHUNK_CHOICES = {S.INTERLEAVED_1F1B: (2, 3), S.ZBV: (2,), S.DUALPIPEV: (2,)}
COSTS = [(1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 1.0, 2.0), (2.0, 1.0, 0.5), (1.0, 0.5, 0.7),
         (1.0, 1.5, 0.5), (1.0, 0.25, 0.75)]
"""(1, 0.25, 0.75) has F = B + W, Chimera's slot model (its closed form's case)."""


def _grid(schedule: S) -> list[tuple[int, int, int]]:
    cases = []
    for p, m in itertools.product((1, 2, 3, 4, 6), range(1, 14)):
        for v in CHUNK_CHOICES.get(schedule, (1,)):
            try:
                generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
            except InvalidSpecError:
                continue
            cases.append((p, m, v))
    return cases


def _check_invariants(program: PipelineProgram, result: SimulationResult) -> None:
    """Each op once, F before B before W, no overlap on a rank (reference Sec. 5 item 1)."""
    kind = program.kind
    tl = result.timeline
    for r in range(program.num_ranks):
        lo, hi = program.rank_offsets[r], program.rank_offsets[r + 1]
        assert np.all(tl.start_s[lo + 1:hi] >= tl.end_s[lo:hi - 1] - 1e-12)
    num_b = np.count_nonzero(kind == OpKind.B)
    assert num_b == np.count_nonzero(kind == OpKind.W)
    starts: dict[tuple[str, int, int], float] = {}
    for i in range(program.num_ops):
        k, j, s = OpKind(int(kind[i])), int(program.micro_batch[i]), int(program.stage[i])
        if k == OpKind.FB:
            starts[("F", j, s)] = tl.start_s[i]
            j, s = int(program.pair_micro_batch[i]), int(program.pair_stage[i])
            k = OpKind.BW
        key = ("B" if k == OpKind.BW else k.name, j, s)
        assert key not in starts
        starts[key] = tl.start_s[i]
    place = program.placement
    assert len(starts) == place.num_stages * place.num_micro_batches * 2 + num_b
    for (name, j, s), t in starts.items():
        if name == "B":
            assert t >= starts[("F", j, s)]
        if name == "W":
            assert t >= starts[("B", j, s)]
        if name == "F" and s > 0:
            assert t >= starts[("F", j, s - 1)]


@pytest.mark.parametrize("schedule", list(S))
def test_every_generator_keeps_the_invariants_on_a_small_grid(schedule: S) -> None:
    durations = OpDurations.uniform(forward_s=1.0, backward_input_s=1.5, backward_weight_s=0.5)
    for p, m, v in _grid(schedule):
        program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
        _check_invariants(program, simulate(program, durations, p2p_latency_s=0.3))


@pytest.mark.parametrize("schedule", list(S))
def test_closed_forms_match_the_simulator_wherever_they_claim_exactness(schedule: S) -> None:
    exact_cases = 0
    for (p, m, v), (f, b, w) in itertools.product(_grid(schedule), COSTS):
        program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
        result = simulate(program, OpDurations.uniform(forward_s=f, backward_input_s=b,
                                                       backward_weight_s=w))
        form = closed_form(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                           forward_s=f, backward_input_s=b, backward_weight_s=w)
        if form is None:
            continue
        exact_cases += 1
        assert result.makespan_s == pytest.approx(form.makespan_s)
        assert result.idle_s == pytest.approx((form.bubble_s,) * p)
        assert result.max_span_bubble_s == pytest.approx(form.span_bubble_s, abs=1e-9)
    assert exact_cases > 0


@pytest.mark.parametrize("schedule", list(S))
def test_peak_closed_forms_match_the_simulator(schedule: S) -> None:
    unit = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0)
    for p, m, v in _grid(schedule):
        result = simulate(generate_program(schedule, num_stages=p, num_micro_batches=m,
                                           num_chunks=v), unit)
        kw = {"num_stages": p, "num_micro_batches": m, "num_chunks": v}
        assert result.peak_in_flight_chunks == tuple(
            peak_in_flight_chunks(schedule, stage=d, **kw) for d in range(p))
        assert result.peak_until_b_chunks == tuple(
            peak_in_flight_until_b_chunks(schedule, stage=d, **kw) for d in range(p))


def test_one_group_of_fewer_micro_batches_than_stages_has_no_flush_closed_form() -> None:
    # m < p in one group: chunk c + 1 of a micro-batch waits for chunk c on the last rank,
    # so the flush bubble (p - 1)(F + B + W) is not the makespan; the order is simulated.
    p, m, v = 8, 4, 2
    program = generate_program(S.INTERLEAVED_1F1B, num_stages=p, num_micro_batches=m,
                               num_chunks=v, group_size=m)
    result = simulate(program, OpDurations.uniform(forward_s=0.5, backward_input_s=0.7,
                                                   backward_weight_s=0.4))
    assert closed_form(S.INTERLEAVED_1F1B, num_stages=p, num_micro_batches=m, num_chunks=v,
                       forward_s=0.5, backward_input_s=0.7, backward_weight_s=0.4,
                       group_size=m) is None
    assert result.peak_in_flight_chunks == tuple(
        peak_in_flight_chunks(S.INTERLEAVED_1F1B, num_stages=p, num_micro_batches=m,
                              num_chunks=v, stage=d, group_size=m) for d in range(p))
    assert result.peak_in_flight_chunks[0] == v * m  # every unit of every micro-batch


@pytest.mark.parametrize(("p", "m", "v", "n"), [(2, 6, 2, 3), (4, 12, 3, 6), (4, 10, 2, 6),
                                                (3, 9, 4, 3), (4, 16, 2, 8)])
def test_interleaved_closed_forms_hold_for_other_group_sizes(p: int, m: int, v: int,
                                                             n: int) -> None:
    program = generate_program(S.INTERLEAVED_1F1B, num_stages=p, num_micro_batches=m,
                               num_chunks=v, group_size=n)
    f, b, w = 0.5, 0.7, 0.4
    result = simulate(program, OpDurations.uniform(forward_s=f, backward_input_s=b,
                                                   backward_weight_s=w))
    form = closed_form(S.INTERLEAVED_1F1B, num_stages=p, num_micro_batches=m, num_chunks=v,
                       forward_s=f, backward_input_s=b, backward_weight_s=w, group_size=n)
    assert form is not None
    assert result.makespan_s == pytest.approx(form.makespan_s)
    assert result.peak_in_flight_chunks == tuple(
        peak_in_flight_chunks(S.INTERLEAVED_1F1B, num_stages=p, num_micro_batches=m,
                              num_chunks=v, stage=d, group_size=n) for d in range(p))


costs = st.floats(min_value=0.1, max_value=3.0, allow_nan=False)


@settings(deadline=None, max_examples=25, derandomize=True)
@given(p=st.integers(1, 4), extra=st.integers(0, 3), f=costs, b=costs, w=costs,
       overlap=st.floats(0.0, 1.0))
def test_dualpipev_idle_equals_dualpipe_on_twice_the_ranks(p: int, extra: int, f: float,
                                                           b: float, w: float,
                                                           overlap: float) -> None:
    """Reference Sec. 2.10: DualPipeV(P, m) idles exactly as DualPipe(2P, 2m), for any
    costs and overlap model (F&B anywhere between max(F, B+W) and F+B+W)."""
    m = 2 * p + extra
    pair = f + b + w - overlap * min(f, b + w)
    durations = OpDurations.uniform(forward_s=f, backward_input_s=b, backward_weight_s=w,
                                    overlapped_pair_s=pair)
    v_result = simulate(generate_program(S.DUALPIPEV, num_stages=p, num_micro_batches=m,
                                         num_chunks=2), durations)
    d_result = simulate(generate_program(S.DUALPIPE, num_stages=2 * p,
                                         num_micro_batches=2 * m), durations)
    assert max(v_result.idle_s) == pytest.approx(max(d_result.idle_s))


def test_dualpipev_unit_costs_idle_and_peak() -> None:
    """Reference Sec. 5 item 3: F=B=W=1, F&B=3: idle 2(P-1) and peak 2P+1 chunks."""
    unit = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0)
    for p in (1, 2, 3, 5):
        result = simulate(generate_program(S.DUALPIPEV, num_stages=p, num_micro_batches=2 * p + 1,
                                           num_chunks=2), unit)
        assert result.idle_s == pytest.approx((2.0 * (p - 1),) * p)
        assert result.peak_in_flight_chunks == (2 * p + 1,) * p


def test_schedules_whose_stage_0_starts_first_and_ends_last_agree_on_both_bubbles() -> None:
    """Reference Sec. 5 item 6: span bubble = worst idle for these schedules."""
    durations = OpDurations.uniform(forward_s=1.0, backward_input_s=1.3, backward_weight_s=0.6)
    for schedule, v in ((S.GPIPE, 1), (S.ONE_F_ONE_B, 1), (S.ZB_H1, 1),
                        (S.INTERLEAVED_1F1B, 2), (S.DUALPIPE, 1), (S.DUALPIPEV, 2)):
        result = simulate(generate_program(schedule, num_stages=4, num_micro_batches=8,
                                           num_chunks=v), durations)
        assert result.max_span_bubble_s == pytest.approx(max(result.idle_s))

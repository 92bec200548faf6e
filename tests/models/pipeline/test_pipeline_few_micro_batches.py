"""1F1B with fewer micro-batches than ranks (m < p), as Megatron-LM and DeepSpeed run it.

Reference values derived by hand with the rules of the reference schedule specification
(Sec. 1.2-1.3, the start-time rule `models/core/pipeline/simulator.py` cites, and the 1F1B
generator of its Sec. 2.2, warm-up min(p-1-d, m)), p = 4, unit costs F = B = W = 1 (BW = 2),
no latency:

- m = 1: rank d runs F0 at d; the backward starts on the last rank at 4 and crosses the
  ranks in 2 each: BW0 at 4, 6, 8, 10 on ranks 3, 2, 1, 0; makespan 12.
- m = 2: ranks 0 and 1 run both forwards in the warm-up (min(3, 2) = min(2, 2) = 2), rank 2
  one, rank 3 none; the last rank runs F0 3, BW0 4, F1 6, BW1 7 and the backward of
  micro-batch 1 then crosses ranks 2, 1, 0 at 9, 11, 13; makespan 15.

Both are (m+p-1)(F+B+W), 4 x 3 and 5 x 3: the last rank starts at (p-1)F, runs its m F/BW
pairs back to back, and the last backward crosses the other p-1 ranks.
"""

import itertools

import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import (
    OpDurations,
    closed_form,
    compile_program,
    generate_program,
    in_flight_profile,
    peak_in_flight_chunks,
    simulate,
    simulate_makespan,
)

UNIT = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0)

HAND = {
    # m: (per-rank op order with start times, makespan, busy per rank, peaks until W)
    1: (["F0.0@0 BW0.0@10", "F0.1@1 BW0.1@8", "F0.2@2 BW0.2@6", "F0.3@3 BW0.3@4"],
        12.0, 3.0, [1, 1, 1, 1]),
    2: (["F0.0@0 F1.0@1 BW0.0@10 BW1.0@13", "F0.1@1 F1.1@2 BW0.1@8 BW1.1@11",
         "F0.2@2 F1.2@3 BW0.2@6 BW1.2@9", "F0.3@3 BW0.3@4 F1.3@6 BW1.3@7"],
        15.0, 6.0, [2, 2, 2, 1]),
}


@pytest.mark.parametrize("m", sorted(HAND))
def test_one_f_one_b_with_fewer_micro_batches_than_ranks_matches_the_hand_timeline(
        m: int) -> None:
    ranks, makespan, busy, peaks = HAND[m]
    program = generate_program(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=m)
    result = simulate(program, UNIT)
    for d, expected in enumerate(ranks):
        lo, hi = int(program.rank_offsets[d]), int(program.rank_offsets[d + 1])
        text = " ".join(f"{program.describe(i)}@{result.timeline.start_s[i]:g}"
                        for i in range(lo, hi))
        assert text == expected, d
    assert result.makespan_s == pytest.approx(makespan)
    form = closed_form(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=m, forward_s=1.0,
                       backward_input_s=1.0, backward_weight_s=1.0)
    assert form is not None
    assert (form.makespan_s, form.busy_s, form.bubble_s) == pytest.approx(
        (makespan, busy, makespan - busy))
    assert [peak_in_flight_chunks(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=m, stage=d)
            for d in range(4)] == peaks
    assert list(in_flight_profile(S.ONE_F_ONE_B, num_stages=4,
                                  num_micro_batches=m).peak_chunks) == peaks


@pytest.mark.parametrize(("p", "costs"), list(itertools.product(
    (2, 3, 5, 8), ((1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 0.5, 2.5), (2.0, 1.0, 0.0)))))
def test_one_f_one_b_closed_form_holds_for_every_m_below_p(
        p: int, costs: tuple[float, float, float]) -> None:
    """(m+p-1)(F+B+W) and the peak min(p-d, m) for every m < p and four cost ratios."""
    f, b, w = costs
    durations = OpDurations.uniform(forward_s=f, backward_input_s=b, backward_weight_s=w)
    for m in range(1, p):
        program = generate_program(S.ONE_F_ONE_B, num_stages=p, num_micro_batches=m)
        makespan = simulate_makespan(compile_program(program), durations)
        assert makespan == pytest.approx((m + p - 1) * (f + b + w))
        profile = in_flight_profile(S.ONE_F_ONE_B, num_stages=p, num_micro_batches=m)
        assert list(profile.peak_chunks) == [min(p - d, m) for d in range(p)]


"""Closed forms: the published formulas and the reference values of p=4, m=8 and p=8, m=16.

The simulator cross-checks each of these in test_pipeline_cross_check.py.
"""

import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import (
    closed_form,
    closed_form_bubble,
    closed_form_makespan,
    peak_in_flight,
    peak_in_flight_chunks,
    peak_in_flight_until_b,
)
from models.errors import InvalidSpecError

CHUNKS = {S.INTERLEAVED_1F1B: 2, S.ZBV: 2, S.DUALPIPEV: 2}


def _peaks(schedule: S, p: int, m: int, v: int = 1) -> list[float]:
    return [peak_in_flight(schedule, num_stages=p, num_micro_batches=m, num_chunks=v, stage=d)
            for d in range(p)]


def test_closed_form_matches_NAR21_bubble_fraction() -> None:
    """Megatron-LM arXiv:2104.04473 Sec. 2.2.1: bubble / ideal time = (p-1)/m; with v
    chunks (Sec. 2.2.2) it is (1/v)(p-1)/m. Here p=8, m=32 gives 7/32 and 7/64."""
    f, b, w = 1.0, 1.3, 0.7
    for schedule in (S.GPIPE, S.ONE_F_ONE_B):
        cf = closed_form(schedule, num_stages=8, num_micro_batches=32, forward_s=f,
                         backward_input_s=b, backward_weight_s=w)
        assert cf is not None
        assert cf.bubble_s / cf.busy_s == pytest.approx(7 / 32)
    v = 2
    cf = closed_form(S.INTERLEAVED_1F1B, num_stages=8, num_micro_batches=32, num_chunks=v,
                     forward_s=f / v, backward_input_s=b / v, backward_weight_s=w / v)
    assert cf is not None
    assert cf.bubble_s / cf.busy_s == pytest.approx(7 / 64)


def test_closed_form_matches_QI24_table2() -> None:
    """Zero Bubble arXiv:2401.10241 Table 2: 1F1B (p-1)(F+B+W), ZB-H1 (p-1)(F+B-W),
    ZB-H2 (p-1)(F+B-2W) (per-stage span bubble); peaks p M_B and (2p-1) M_B."""
    p, m, f, b, w = 8, 24, 1.0, 1.2, 0.8
    kw = {"num_stages": p, "num_micro_batches": m, "forward_s": f, "backward_input_s": b,
          "backward_weight_s": w}
    assert closed_form_bubble(S.ONE_F_ONE_B, **kw) == pytest.approx((p - 1) * (f + b + w))
    assert closed_form_bubble(S.ZB_H1, **kw) == pytest.approx((p - 1) * (f + b - w))
    zb_h2 = closed_form(S.ZB_H2, **kw)
    assert zb_h2 is not None
    assert zb_h2.span_bubble_s == pytest.approx((p - 1) * (f + b - 2 * w))
    assert _peaks(S.ONE_F_ONE_B, p, m)[0] == p
    assert _peaks(S.ZB_H1, p, m) == [p] * p
    assert _peaks(S.ZB_H2, p, m) == [2 * p - 1] * p


def test_peak_in_flight_until_b_matches_QI24_worker_memory() -> None:
    """Zero Bubble Sec. 3.1: worker i holds (p-i+1) M_B + (i-1) M_W under ZB-H1 and
    (2p-2i+1) M_B + (2i-2) M_W under ZB-H2 (i = stage + 1)."""
    p, m = 4, 8
    for d in range(p):
        i = d + 1
        h1_b = peak_in_flight_until_b(S.ZB_H1, num_stages=p, num_micro_batches=m, stage=d)
        h1_w = peak_in_flight(S.ZB_H1, num_stages=p, num_micro_batches=m, stage=d)
        assert (h1_b, h1_w - h1_b) == (p - i + 1, i - 1)
        h2_b = peak_in_flight_until_b(S.ZB_H2, num_stages=p, num_micro_batches=m, stage=d)
        h2_w = peak_in_flight(S.ZB_H2, num_stages=p, num_micro_batches=m, stage=d)
        assert (h2_b, h2_w - h2_b) == (2 * p - 2 * i + 1, 2 * i - 2)


def test_closed_form_matches_DSV3_table2() -> None:
    """DeepSeek-V3 arXiv:2412.19437 Table 2: DualPipe bubble (PP/2-1)(F&B+B-3W) with B the
    full backward, activation PP+1 (1F1B: PP). Exact case: F = B_input = W, F&B = F+B+W."""
    for pp in (4, 8, 16):
        f = 1.0
        pair, full_b, w = 3.0, 2.0, 1.0
        bubble = closed_form_bubble(S.DUALPIPE, num_stages=pp, num_micro_batches=2 * pp,
                                    forward_s=f, backward_input_s=1.0, backward_weight_s=w)
        assert bubble == pytest.approx((pp / 2 - 1) * (pair + full_b - 3 * w))
        assert _peaks(S.DUALPIPE, pp, 2 * pp) == [pp + 1] * pp
        assert _peaks(S.ONE_F_ONE_B, pp, 2 * pp)[0] == pp


def test_peak_in_flight_matches_GPIPE_all_micro_batches() -> None:
    """GPipe arXiv:1811.06965 Sec. 2.3: every rank stores all m micro-batches."""
    assert _peaks(S.GPIPE, 4, 8) == [8.0] * 4


REFERENCE_P4_M8 = {
    # schedule: (makespan, idle, span bubble, peaks until W in stage units) from
    # pipeline-schedules reference Sec. 3.1 (unit stage costs, chunk cost 1/v).
    S.GPIPE: (33, 9, 9, [8, 8, 8, 8]),
    S.ONE_F_ONE_B: (33, 9, 9, [4, 3, 2, 1]),
    S.INTERLEAVED_1F1B: (28.5, 4.5, 4.5, [5.5, 4.5, 3.5, 2.5]),
    S.ZB_H1: (27, 3, 3, [4, 4, 4, 4]),
    S.ZB_H2: (27, 3, 0, [7, 7, 7, 7]),
    S.ZBV: (25.5, 1.5, 0, [4, 4, 4, 4]),
    S.DUALPIPE: (26, 2, 2, [5, 5, 5, 5]),
    S.DUALPIPEV: (27, 3, 3, [4.5, 4.5, 4.5, 4.5]),
}

REFERENCE_P8_M16 = {
    # Sec. 3.2 (makespan, idle); peaks from the notes of the same table.
    S.GPIPE: (69, 21, None),
    S.ONE_F_ONE_B: (69, 21, [8, 7, 6, 5, 4, 3, 2, 1]),
    S.INTERLEAVED_1F1B: (58.5, 10.5, [c / 2 for c in (23, 21, 19, 17, 15, 13, 11, 9)]),
    S.ZB_H1: (55, 7, [8] * 8),
    S.ZB_H2: (55, 7, [15] * 8),
    S.ZBV: (51.5, 3.5, [8] * 8),
    S.DUALPIPE: (54, 6, [9] * 8),
    S.DUALPIPEV: (55, 7, [8.5] * 8),
}


@pytest.mark.parametrize("schedule", list(REFERENCE_P4_M8))
def test_closed_form_reproduces_reference_p4_m8(schedule: S) -> None:
    v = CHUNKS.get(schedule, 1)
    makespan, idle, span, peaks = REFERENCE_P4_M8[schedule]
    cf = closed_form(schedule, num_stages=4, num_micro_batches=8, num_chunks=v,
                     forward_s=1 / v, backward_input_s=1 / v, backward_weight_s=1 / v)
    assert cf is not None
    assert (cf.makespan_s, cf.bubble_s, cf.span_bubble_s) == pytest.approx((makespan, idle, span))
    assert _peaks(schedule, 4, 8, v) == peaks


@pytest.mark.parametrize("schedule", list(REFERENCE_P8_M16))
def test_closed_form_reproduces_reference_p8_m16(schedule: S) -> None:
    v = CHUNKS.get(schedule, 1)
    makespan, idle, peaks = REFERENCE_P8_M16[schedule]
    cf = closed_form(schedule, num_stages=8, num_micro_batches=16, num_chunks=v,
                     forward_s=1 / v, backward_input_s=1 / v, backward_weight_s=1 / v)
    assert cf is not None
    assert (cf.makespan_s, cf.bubble_s) == pytest.approx((makespan, idle))
    if peaks is not None:
        assert _peaks(schedule, 8, 16, v) == pytest.approx(peaks)


def test_closed_form_is_none_outside_its_exact_case() -> None:
    kw = {"num_stages": 4, "num_micro_batches": 8, "forward_s": 1.0,
          "backward_input_s": 2.0, "backward_weight_s": 1.0}
    assert closed_form_makespan(S.DUALPIPE, **kw) is None
    assert closed_form_makespan(S.DUALPIPEV, num_chunks=2, **kw) is None
    assert closed_form_makespan(S.ZBV, num_chunks=2, **kw) is None
    assert closed_form_makespan(S.ZB_H2, num_stages=4, num_micro_batches=6, forward_s=1.0,
                                backward_input_s=1.0, backward_weight_s=1.0) is None
    assert closed_form_makespan(S.DUALPIPE, num_stages=4, num_micro_batches=8, forward_s=1.0,
                                backward_input_s=1.0, backward_weight_s=1.0,
                                overlapped_pair_s=2.0) is None


def test_zb_h1_bubble_switches_to_p_minus_1_times_b_when_w_exceeds_f() -> None:
    """Reference Sec. 4 item 4: with W > F the canonical ZB-H1 order idles (p-1) B."""
    bubble = closed_form_bubble(S.ZB_H1, num_stages=4, num_micro_batches=8, forward_s=1.0,
                                backward_input_s=1.5, backward_weight_s=2.0)
    assert bubble == pytest.approx(3 * 1.5)


def test_interleaved_peak_uses_the_group_size() -> None:
    """Megatron warm-up 2(p-1-d) + (v-1) N, plus the forward issued with the first B."""
    chunks = peak_in_flight_chunks(S.INTERLEAVED_1F1B, num_stages=4, num_micro_batches=12,
                                   num_chunks=3, stage=1, group_size=6)
    assert chunks == 2 * 2 + 2 * 6 + 1


def test_peak_in_flight_refuses_a_stage_outside_the_pipeline() -> None:
    with pytest.raises(InvalidSpecError, match="stage=4"):
        peak_in_flight(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=8, stage=4)

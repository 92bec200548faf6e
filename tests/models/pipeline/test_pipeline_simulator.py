"""The discrete-event simulator: golden timelines, deadlocks, invariants, latency, memory."""

import re

import numpy as np
import pytest

from api_schemas.parallel import PipelineSchedule as S
from models.core.pipeline import (
    ActivationSizes,
    OpDurations,
    OpKind,
    ProgramBuilder,
    ScheduleDeadlockError,
    compile_program,
    generate_program,
    simulate,
    simulate_makespan,
    simulator,
)
from models.core.pipeline.ops import linear_placement
from models.errors import InvalidSpecError

UNIT = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0)
F, B, W, BW = int(OpKind.F), int(OpKind.B), int(OpKind.W), int(OpKind.BW)


def _rank_text(schedule: S, p: int, m: int, rank: int, v: int = 1) -> str:
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    result = simulate(program, UNIT)
    lo, hi = int(program.rank_offsets[rank]), int(program.rank_offsets[rank + 1])
    return " ".join(f"{program.describe(i)}@{result.timeline.start_s[i]:g}"
                    for i in range(lo, hi))


# Reference Sec. 3.3 (p=4, m=8, unit costs), written as kind, micro-batch.stage@start. For
# DualPipe the reverse pipe's micro-batch j' is micro-batch 4 + j here.
GOLDEN = [
    (S.ONE_F_ONE_B, 0, "F0.0@0 F1.0@1 F2.0@2 F3.0@3 BW0.0@10 F4.0@12 BW1.0@13 F5.0@15 BW2.0@16 "
     "F6.0@18 BW3.0@19 F7.0@21 BW4.0@22 BW5.0@25 BW6.0@28 BW7.0@31"),
    (S.ONE_F_ONE_B, 3, " ".join(f"F{k}.3@{3 + 3 * k} BW{k}.3@{4 + 3 * k}" for k in range(8))),
    (S.ZB_H1, 0, "F0.0@0 F1.0@1 F2.0@2 F3.0@3 B0.0@7 W0.0@8 F4.0@9 B1.0@10 W1.0@11 F5.0@12 "
     "B2.0@13 W2.0@14 F6.0@15 B3.0@16 W3.0@17 F7.0@18 B4.0@19 W4.0@20 B5.0@21 W5.0@22 "
     "B6.0@23 W6.0@24 B7.0@25 W7.0@26"),
    (S.ZB_H1, 3, "F0.3@3 B0.3@4 F1.3@5 B1.3@6 F2.3@7 B2.3@8 F3.3@9 B3.3@10 W0.3@11 F4.3@12 "
     "B4.3@13 W1.3@14 F5.3@15 B5.3@16 W2.3@17 F6.3@18 B6.3@19 W3.3@20 F7.3@21 B7.3@22 "
     "W4.3@23 W5.3@24 W6.3@25 W7.3@26"),
    (S.ZB_H2, 0, "F0.0@0 F1.0@1 F2.0@2 F3.0@3 F4.0@4 F5.0@5 F6.0@6 B0.0@7 W0.0@8 F7.0@9 "
     + " ".join(f"B{k}.0@{8 + 2 * k} W{k}.0@{9 + 2 * k}" for k in range(1, 8))),
    (S.ZB_H2, 3, " ".join(f"F{k}.3@{3 + 2 * k} B{k}.3@{4 + 2 * k}" for k in range(7))
     + " W0.3@17 F7.3@18 B7.3@19 " + " ".join(f"W{k}.3@{19 + k}" for k in range(1, 8))),
    (S.DUALPIPE, 0, "F0.0@0 F1.0@1 F2.0@2 F4.3@3 B4.3@4 W4.3@5 F5.3@6 F3.0&BW5.3@7 "
     "F6.3&BW0.0@11 BW6.3@14 F7.3&BW1.0@17 BW7.3@20 B2.0@22 W2.0@23 B3.0@24 W3.0@25"),
    (S.DUALPIPE, 1, "F0.1@1 F4.2@2 F1.1@3 F5.2@4 F2.1@5 BW4.2@6 F6.2&BW0.1@8 F3.1&BW5.2@11 "
     "F7.2&BW1.1@14 BW6.2@17 BW2.1@19 B7.2@22 B3.1@23 W7.2@24 W3.1@25"),
]


@pytest.mark.parametrize(("schedule", "rank", "expected"), GOLDEN)
def test_simulate_reproduces_the_reference_golden_timelines(schedule: S, rank: int,
                                                            expected: str) -> None:
    assert _rank_text(schedule, 4, 8, rank) == expected


def test_dualpipev_p2_m4_replays_dualpipe_pp4_m8_start_for_start() -> None:
    """Reference Sec. 3.3: the V is DualPipe cut in half; same kinds at the same times."""
    for rank in (0, 1):
        v_ops = _rank_text(S.DUALPIPEV, 2, 4, rank, v=2).split()
        d_ops = _rank_text(S.DUALPIPE, 4, 8, rank).split()
        assert [_kind_at(op) for op in v_ops] == [_kind_at(op) for op in d_ops]


def _kind_at(op: str) -> tuple[str, str]:
    """'F3.0&BW5.3@7' -> ('F&BW', '7')."""
    text, start = op.split("@")
    return re.sub(r"[\d.]", "", text), start


def _two_rank_program(rows0: list[tuple[int, int, int]], rows1: list[tuple[int, int, int]],
                      m: int = 1) -> ProgramBuilder:
    builder = ProgramBuilder(linear_placement(num_ranks=2, num_micro_batches=m))
    builder.rank(0).extend((k, j, s, -1, -1) for k, j, s in rows0)
    builder.rank(1).extend((k, j, s, -1, -1) for k, j, s in rows1)
    return builder


def test_deadlock_is_reported_with_the_stuck_ops() -> None:
    # Rank 0 wants BW1 before F1 can reach rank 1, whose list starts with F1.
    builder = _two_rank_program([(F, 0, 0), (BW, 1, 0), (F, 1, 0), (BW, 0, 0)],
                                [(F, 1, 1), (BW, 1, 1), (F, 0, 1), (BW, 0, 1)], m=2)
    program = builder.build(schedule=None, chunks_per_stage_unit=1)
    with pytest.raises(ScheduleDeadlockError) as caught:
        simulate(program, UNIT)
    stuck = caught.value.diagnostics["stuck_ops"]  # type: ignore[index]
    assert stuck == ["rank 0: BW1.0 (op 1 of its list)", "rank 1: F1.1 (op 0 of its list)"]


@pytest.mark.parametrize("wave_min_ranks", [1, 10**9], ids=["waves", "event loop"])
def test_w_before_its_b_on_the_same_rank_is_a_deadlock(
        wave_min_ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulator, "WAVE_MIN_RANKS", wave_min_ranks)
    builder = _two_rank_program([(F, 0, 0), (W, 0, 0), (B, 0, 0)],
                                [(F, 0, 1), (BW, 0, 1)])
    with pytest.raises(ScheduleDeadlockError, match="W0.0"):
        simulate(builder.build(schedule=None, chunks_per_stage_unit=1), UNIT)


@pytest.mark.parametrize(("rows0", "words"), [
    ([(F, 0, 0)], "wrong number of B or BW"),
    ([(F, 0, 0), (F, 0, 0), (BW, 0, 0)], "wrong number of F"),
    ([(F, 0, 0), (BW, 0, 0), (W, 0, 0)], "wrong number of W"),
    ([(F, 0, 0), (B, 0, 0)], "wrong number of W"),
    ([(F, 0, 1), (BW, 0, 0)], "listed on rank 0"),
])
def test_compile_refuses_broken_invariants(rows0: list[tuple[int, int, int]],
                                           words: str) -> None:
    builder = _two_rank_program(rows0, [(F, 0, 1), (BW, 0, 1)])
    with pytest.raises(InvalidSpecError, match=words):
        compile_program(builder.build(schedule=None, chunks_per_stage_unit=1))


def test_gpipe_latency_adds_two_hops_per_stage() -> None:
    """Reference Sec. 2.1: GPipe's makespan grows by 2(p-1)c."""
    program = compile_program(generate_program(S.GPIPE, num_stages=4, num_micro_batches=8))
    base = simulate_makespan(program, UNIT)
    assert simulate_makespan(program, UNIT, p2p_latency_s=0.25) == pytest.approx(base + 6 * 0.25)


def test_1f1b_is_latency_sensitive_beyond_two_hops() -> None:
    """Reference Sec. 2.2: p=4, m=8 grows by 16c, far more than 2(p-1)c = 6c."""
    program = compile_program(generate_program(S.ONE_F_ONE_B, num_stages=4,
                                               num_micro_batches=8))
    assert simulate_makespan(program, UNIT, p2p_latency_s=0.1) == pytest.approx(33 + 16 * 0.1)


def test_v_turn_on_the_last_rank_has_no_latency() -> None:
    """Stage P-1 and P share the last rank: the hand-off there is local."""
    program = compile_program(generate_program(S.ZBV, num_stages=1, num_micro_batches=3,
                                               num_chunks=2))
    assert simulate_makespan(program, UNIT, p2p_latency_s=5.0) == pytest.approx(18.0)


def test_per_stage_durations_make_the_slowest_stage_bind() -> None:
    """A head-heavy last stage (1F1B, p=4): makespan = m x slowest + the others' fill."""
    durations = OpDurations(forward_s=(1.0, 1.0, 1.0, 2.0), backward_input_s=(1.0, 1.0, 1.0, 2.0),
                            backward_weight_s=(1.0,))
    result = simulate(generate_program(S.ONE_F_ONE_B, num_stages=4, num_micro_batches=8),
                      durations)
    assert result.busy_s == (24.0, 24.0, 24.0, 40.0)
    assert result.makespan_s == pytest.approx(40 + 3 * 3)
    assert result.idle_s[3] == pytest.approx(9.0)


def test_overlapped_pair_duration_shortens_dualpipe() -> None:
    """Reference Sec. 4 item 1: with perfect overlap (F&B = max) DualPipe PP=4 idles 1."""
    program = generate_program(S.DUALPIPE, num_stages=4, num_micro_batches=8)
    overlapped = OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0,
                                     overlapped_pair_s=2.0)
    result = simulate(program, overlapped)
    assert max(result.idle_s) == pytest.approx(1.0)


def test_activation_bytes_split_b_and_w_releases() -> None:
    """ZB-H1 p=4, m=8, B frees 3 of 4 bytes: rank d peaks at 4(p-d) + 1 x d bytes."""
    program = generate_program(S.ZB_H1, num_stages=4, num_micro_batches=8)
    sizes = ActivationSizes(forward_bytes=(4,), freed_by_input_grad_bytes=(3,))
    result = simulate(program, UNIT, activation_sizes=sizes)
    assert result.peak_activation_bytes == tuple(4 * (4 - d) + d for d in range(4))
    assert result.peak_until_b_chunks == (4, 3, 2, 1)
    assert result.peak_in_flight_chunks == (4, 4, 4, 4)


def test_activation_sizes_are_checked() -> None:
    program = generate_program(S.GPIPE, num_stages=2, num_micro_batches=2)
    sizes = ActivationSizes(forward_bytes=(1,), freed_by_input_grad_bytes=(2,))
    with pytest.raises(InvalidSpecError, match="freed_by_input_grad_bytes"):
        simulate(program, UNIT, activation_sizes=sizes)


@pytest.mark.parametrize(("durations", "field"), [
    (OpDurations(forward_s=(1.0, 2.0), backward_input_s=(1.0,), backward_weight_s=(1.0,)),
     "forward_s"),
    (OpDurations.uniform(forward_s=-1.0, backward_input_s=1.0, backward_weight_s=1.0),
     "forward_s"),
    (OpDurations.uniform(forward_s=1.0, backward_input_s=1.0, backward_weight_s=1.0,
                         overlapped_pair_s=float("nan")), "overlapped_pair_s"),
])
def test_durations_are_checked(durations: OpDurations, field: str) -> None:
    program = generate_program(S.GPIPE, num_stages=4, num_micro_batches=2)
    with pytest.raises(InvalidSpecError) as caught:
        simulate(program, durations)
    assert caught.value.field == field


def test_negative_latency_is_refused() -> None:
    program = generate_program(S.GPIPE, num_stages=2, num_micro_batches=2)
    with pytest.raises(InvalidSpecError, match="p2p_latency_s"):
        simulate(program, UNIT, p2p_latency_s=-1.0)


def test_timeline_entries_carry_both_halves_of_a_pair() -> None:
    program = generate_program(S.DUALPIPE, num_stages=4, num_micro_batches=8)
    entries = simulate(program, UNIT).timeline.entries()
    pair = next(e for e in entries if e.op == "FB")
    assert (pair.stage, pair.micro_batch, pair.chunk, pair.start_s, pair.end_s) == (0, 3, 0, 7, 10)
    assert (pair.backward_micro_batch, pair.backward_chunk) == (5, 1)
    singles = [e for e in entries if e.op != "FB"]
    assert all(e.backward_micro_batch is None for e in singles)
    assert len(entries) == program.num_ops


def test_span_and_global_bubbles_are_named_apart() -> None:
    """Reference Sec. 5 item 6: ZB-H2's span bubble is below its global idle."""
    result = simulate(generate_program(S.ZB_H2, num_stages=4, num_micro_batches=8), UNIT)
    assert result.max_span_bubble_s == 0.0
    assert result.span_bubble_fraction == 0.0
    assert result.idle_s == (3.0, 3.0, 3.0, 3.0)
    assert result.global_bubble_fraction == pytest.approx(3 / 27)


def test_compiled_program_is_reusable_across_durations() -> None:
    compiled = compile_program(generate_program(S.ONE_F_ONE_B, num_stages=4,
                                                num_micro_batches=8))
    slow = OpDurations.uniform(forward_s=2.0, backward_input_s=2.0, backward_weight_s=2.0)
    assert simulate_makespan(compiled, UNIT) == 33.0
    assert simulate_makespan(compiled, slow) == 66.0
    assert np.isclose(simulate(compiled, slow).makespan_s, 66.0)


# Reference Sec. 3.1 (p=4, m=8) and Sec. 3.2 (p=8, m=16), unit stage costs (chunk cost
# 1/v), F&B = F + B + W: makespan, idle per rank, global bubble ratio, span bubble, peaks
# until W and until B in chunks. DualPipeV "cost 1" rows use chunk cost 1.
REFERENCE_TABLE = [
    (S.GPIPE, 4, 8, 1, 1.0, 33, 9, 0.2727, 9, (8,) * 4, (8,) * 4),
    (S.ONE_F_ONE_B, 4, 8, 1, 1.0, 33, 9, 0.2727, 9, (4, 3, 2, 1), (4, 3, 2, 1)),
    (S.INTERLEAVED_1F1B, 4, 8, 2, 0.5, 28.5, 4.5, 0.1579, 4.5, (11, 9, 7, 5), (11, 9, 7, 5)),
    (S.INTERLEAVED_1F1B, 4, 8, 4, 0.25, 26.25, 2.25, 0.0857, 2.25, (19, 17, 15, 13),
     (19, 17, 15, 13)),
    (S.ZB_H1, 4, 8, 1, 1.0, 27, 3, 0.1111, 3, (4,) * 4, (4, 3, 2, 1)),
    (S.ZB_H2, 4, 8, 1, 1.0, 27, 3, 0.1111, 0, (7,) * 4, (7, 5, 3, 1)),
    (S.ZBV, 4, 8, 2, 0.5, 25.5, 1.5, 0.0588, 0, (8,) * 4, (8,) * 4),
    (S.DUALPIPE, 4, 8, 1, 1.0, 26, 2, 0.0769, 2, (5,) * 4, (5,) * 4),
    (S.DUALPIPEV, 4, 8, 2, 1.0, 54, 6, 0.1111, 6, (9,) * 4, (9,) * 4),
    (S.DUALPIPEV, 4, 8, 2, 0.5, 27, 3, 0.1111, 3, (9,) * 4, (9,) * 4),
    (S.DUALPIPEV, 2, 8, 2, 1.0, 50, 2, 0.04, 2, (5,) * 2, (5,) * 2),
    (S.GPIPE, 8, 16, 1, 1.0, 69, 21, None, None, None, None),
    (S.ONE_F_ONE_B, 8, 16, 1, 1.0, 69, 21, None, None, (8, 7, 6, 5, 4, 3, 2, 1), None),
    (S.INTERLEAVED_1F1B, 8, 16, 2, 0.5, 58.5, 10.5, None, None,
     (23, 21, 19, 17, 15, 13, 11, 9), None),
    (S.ZB_H1, 8, 16, 1, 1.0, 55, 7, None, None, (8,) * 8, None),
    (S.ZB_H2, 8, 16, 1, 1.0, 55, 7, None, 0, (15,) * 8, None),
    (S.ZBV, 8, 16, 2, 0.5, 51.5, 3.5, None, 0, (16,) * 8, None),
    (S.DUALPIPE, 8, 16, 1, 1.0, 54, 6, None, None, (9,) * 8, None),
    (S.DUALPIPEV, 8, 16, 2, 0.5, 55, 7, None, None, (17,) * 8, None),
]


@pytest.mark.parametrize(("schedule", "p", "m", "v", "cost", "makespan", "idle", "ratio",
                          "span", "until_w", "until_b"), REFERENCE_TABLE)
def test_simulate_reproduces_the_reference_tables(
        schedule: S, p: int, m: int, v: int, cost: float, makespan: float, idle: float,
        ratio: float | None, span: float | None, until_w: tuple[int, ...] | None,
        until_b: tuple[int, ...] | None) -> None:
    durations = OpDurations.uniform(forward_s=cost, backward_input_s=cost,
                                    backward_weight_s=cost)
    result = simulate(generate_program(schedule, num_stages=p, num_micro_batches=m,
                                       num_chunks=v), durations)
    assert result.makespan_s == pytest.approx(makespan)
    assert result.idle_s == pytest.approx((idle,) * p)
    if ratio is not None:
        assert result.global_bubble_fraction == pytest.approx(ratio, abs=5e-5)
    if span is not None:
        assert result.max_span_bubble_s == pytest.approx(span)
    if until_w is not None:
        assert result.peak_in_flight_chunks == until_w
    if until_b is not None:
        assert result.peak_until_b_chunks == until_b


REPLAY_SHAPES = [(S.GPIPE, 4, 8, 1), (S.ONE_F_ONE_B, 4, 8, 1), (S.ONE_F_ONE_B, 8, 13, 1),
                 (S.INTERLEAVED_1F1B, 4, 8, 2), (S.INTERLEAVED_1F1B, 4, 12, 3),
                 (S.ZB_H1, 4, 8, 1), (S.ZB_H2, 4, 8, 1), (S.ZBV, 4, 8, 2),
                 (S.DUALPIPE, 4, 8, 1), (S.DUALPIPEV, 4, 8, 2), (S.CHIMERA, 4, 8, 1)]


@pytest.mark.parametrize(("schedule", "p", "m", "v"), REPLAY_SHAPES,
                         ids=lambda x: str(getattr(x, "value", x)))
def test_replayed_order_gives_the_event_loops_makespan_to_the_bit(schedule: S, p: int, m: int,
                                                                 v: int) -> None:
    """The first run records the event loop's op order; later makespans replay it. With
    uneven per-stage durations, with and without a P2P latency, the two agree exactly, every
    time."""
    rng = np.random.default_rng(7)
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    compiled = compile_program(program)
    stages = program.placement.num_stages
    assert not compiled.segments and not compiled.visit
    for trial in range(5):
        durations = OpDurations(forward_s=tuple(rng.uniform(0.5, 2.0, stages)),
                                backward_input_s=tuple(rng.uniform(0.5, 3.0, stages)),
                                backward_weight_s=tuple(rng.uniform(0.0, 1.5, stages)))
        latency = [0.0, 0.05, 0.3, 0.0, 1.7][trial]
        fresh = compile_program(program)  # no recorded order: the event loop itself
        expected = simulate_makespan(fresh, durations, p2p_latency_s=latency)
        assert fresh.segments and not fresh.visit, "a completed run records its order"
        assert simulate_makespan(compiled, durations, p2p_latency_s=latency) == expected
        assert compiled.segments and bool(compiled.visit) == (trial > 0)


def test_a_shape_compiled_again_replays_its_kept_order_to_the_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a shape's program has replayed, its order is kept on the search memo by shape;
    the program compiled again (its compiled form let go) is given it and never runs the
    event loop, and every makespan equals the event loop's on a fresh compile."""
    from models.core.search_memo import current_memo
    from models.core.step_time import makespan

    shape = (S.ZBV, 6, 24, 2, None)
    current_memo().op_orders.pop(shape, None)
    makespan.compiled_schedule.cache_clear()
    rng = np.random.default_rng(3)
    durations = [OpDurations(forward_s=tuple(rng.uniform(0.5, 2.0, 12)),
                             backward_input_s=tuple(rng.uniform(0.5, 3.0, 12)),
                             backward_weight_s=tuple(rng.uniform(0.0, 1.5, 12)))
                 for _ in range(3)]
    for d in durations[:2]:
        makespan.pipeline_makespan(S.ZBV, num_stages=6, num_micro_batches=24, num_chunks=2,
                                   durations=d, p2p_latency_s=0.01)
    kept = current_memo().op_orders[shape]
    makespan.compiled_schedule.cache_clear()
    loops: list[int] = []
    original = simulator._event_loop

    def counted(*args: object) -> None:
        loops.append(1)
        original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(simulator, "_event_loop", counted)
    again = makespan.compiled_schedule(*shape)
    assert again.segments == [kept]
    for d in durations:
        fresh = compile_program(generate_program(S.ZBV, num_stages=6, num_micro_batches=24,
                                                 num_chunks=2))
        expected = simulate_makespan(fresh, d, p2p_latency_s=0.01)
        assert makespan.pipeline_makespan(S.ZBV, num_stages=6, num_micro_batches=24,
                                          num_chunks=2, durations=d,
                                          p2p_latency_s=0.01) == expected
    assert len(loops) == len(durations)  # the fresh compiles' own runs only


def test_a_repeated_makespan_is_answered_from_the_memo_and_the_memo_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The second ask of the same durations and latency replays nothing; another latency
    is its own entry; a full memo is emptied before it grows past its size."""
    compiled = compile_program(generate_program(S.ONE_F_ONE_B, num_stages=4,
                                                num_micro_batches=8))
    assert simulate_makespan(compiled, UNIT) == 33.0
    replays: list[int] = []
    original = simulator._replay

    def counted(*args: object, **kwargs: object) -> list[float]:
        replays.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(simulator, "_replay", counted)
    assert simulate_makespan(compiled, UNIT) == 33.0
    assert not replays
    assert simulate_makespan(compiled, UNIT, p2p_latency_s=0.1) == pytest.approx(33 + 16 * 0.1)
    assert len(replays) == 1 and len(compiled.makespans) == 2
    monkeypatch.setattr(simulator, "MAKESPAN_MEMO_SIZE", 2)
    slow = OpDurations.uniform(forward_s=2.0, backward_input_s=2.0, backward_weight_s=2.0)
    assert simulate_makespan(compiled, slow) == 66.0
    assert list(compiled.makespans.values()) == [66.0]


def test_a_deadlocked_program_records_no_order_and_still_reports() -> None:
    builder = _two_rank_program([(F, 0, 0), (BW, 1, 0), (F, 1, 0), (BW, 0, 0)],
                                [(F, 1, 1), (BW, 1, 1), (F, 0, 1), (BW, 0, 1)], m=2)
    compiled = compile_program(builder.build(schedule=None, chunks_per_stage_unit=1))
    for _ in range(2):
        with pytest.raises(ScheduleDeadlockError):
            simulate_makespan(compiled, UNIT)
    assert not compiled.segments and not compiled.visit


WAVE_SHAPES = [*REPLAY_SHAPES, (S.ONE_F_ONE_B, 16, 40, 1), (S.INTERLEAVED_1F1B, 12, 24, 2),
               (S.ZBV, 12, 30, 2), (S.DUALPIPE, 12, 24, 1)]


@pytest.mark.parametrize(("schedule", "p", "m", "v"), WAVE_SHAPES,
                         ids=lambda x: str(getattr(x, "value", x)))
def test_waves_start_every_op_when_the_event_loop_does_to_the_bit(
        schedule: S, p: int, m: int, v: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first run by waves gives every op the event loop's start and every rank its free
    time, float for float, on every schedule, with uneven stages and a P2P latency; the
    order it records replays to the same makespan."""
    rng = np.random.default_rng(11)
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    stages = program.placement.num_stages
    for latency in (0.0, 0.07, 1.3):
        durations = OpDurations(forward_s=tuple(rng.uniform(0.5, 2.0, stages)),
                                backward_input_s=tuple(rng.uniform(0.5, 3.0, stages)),
                                backward_weight_s=tuple(rng.uniform(0.0, 1.5, stages)))
        runs = {}
        for threshold in (1, 10**9):  # waves always, then the event loop always
            monkeypatch.setattr(simulator, "WAVE_MIN_RANKS", threshold)
            compiled = compile_program(program)
            dur = simulator.op_durations(compiled, durations)
            runs[threshold] = simulator.run(compiled, dur, p2p_latency_s=latency, record=True)
            if threshold == 1:
                replayed = simulator._replay(
                    simulator._visit_order(compiled, compiled.segments[0]), dur, latency,
                    compiled.num_slots, len(compiled.offsets) - 1)
        assert runs[1] == runs[10**9]
        assert replayed == runs[1][1]


def test_waves_report_a_deadlock_with_the_event_loops_stuck_ops(
        monkeypatch: pytest.MonkeyPatch) -> None:
    builder = _two_rank_program([(F, 0, 0), (BW, 1, 0), (F, 1, 0), (BW, 0, 0)],
                                [(F, 1, 1), (BW, 1, 1), (F, 0, 1), (BW, 0, 1)], m=2)
    compiled = compile_program(builder.build(schedule=None, chunks_per_stage_unit=1))
    monkeypatch.setattr(simulator, "WAVE_MIN_RANKS", 1)
    with pytest.raises(ScheduleDeadlockError) as caught:
        simulate_makespan(compiled, UNIT)
    stuck = caught.value.diagnostics["stuck_ops"]  # type: ignore[index]
    assert stuck == ["rank 0: BW1.0 (op 1 of its list)", "rank 1: F1.1 (op 0 of its list)"]
    assert not compiled.segments


@pytest.mark.parametrize(("schedule", "p", "m", "v"), WAVE_SHAPES,
                         ids=lambda x: str(getattr(x, "value", x)))
def test_a_wave_replay_gives_the_op_by_op_replays_makespan_to_the_bit(
        schedule: S, p: int, m: int, v: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """An order the waves recorded replays a wave at a time to the floats of the op-by-op
    replay and of a fresh first run, with new durations and latencies each time, also on a
    program compiled again and given that order."""
    monkeypatch.setattr(simulator, "WAVE_MIN_RANKS", 1)
    rng = np.random.default_rng(5)
    program = generate_program(schedule, num_stages=p, num_micro_batches=m, num_chunks=v)
    stages = program.placement.num_stages
    by_waves, one_by_one = compile_program(program), compile_program(program)
    trials = [OpDurations(forward_s=tuple(rng.uniform(0.5, 2.0, stages)),
                          backward_input_s=tuple(rng.uniform(0.5, 3.0, stages)),
                          backward_weight_s=tuple(rng.uniform(0.0, 1.5, stages)))
              for _ in range(4)]
    for width, compiled in ((1, by_waves), (10**9, one_by_one)):
        monkeypatch.setattr(simulator, "WAVE_REPLAY_MIN_WIDTH", width)
        simulate_makespan(compiled, trials[0], p2p_latency_s=0.2)  # the first run
        assert compiled.segments[0].shape[1] == 4 and compiled.visit == []
        simulate_makespan(compiled, trials[0], p2p_latency_s=0.3)  # a replay: its order
    given = compile_program(program)
    given.segments.append(by_waves.segments[0])
    monkeypatch.setattr(simulator, "WAVE_REPLAY_MIN_WIDTH", 1)
    for durations, latency in zip(trials[1:], (0.0, 0.05, 1.1), strict=True):
        fresh = compile_program(program)
        expected = simulate_makespan(fresh, durations, p2p_latency_s=latency)
        assert simulate_makespan(by_waves, durations, p2p_latency_s=latency) == expected
        assert simulate_makespan(given, durations, p2p_latency_s=latency) == expected
        assert simulate_makespan(one_by_one, durations, p2p_latency_s=latency) == expected
    assert by_waves.visit[0].waves is not None and given.visit[0].waves is not None
    assert one_by_one.visit[0].waves is None


def test_per_row_lists_are_made_only_by_the_passes_that_read_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled program's per-row Python lists are made by the event loop, not by the
    compilation, a run by waves or a replay by waves or without latency; an order's latency
    columns by the op-by-op replay with latency only. Each pass gives the same makespan as
    the event loop, whatever it made."""
    program = generate_program(S.ONE_F_ONE_B, num_stages=6, num_micro_batches=12)
    rng = np.random.default_rng(3)
    durations = OpDurations(forward_s=tuple(rng.uniform(0.5, 2.0, 6)),
                            backward_input_s=tuple(rng.uniform(0.5, 3.0, 6)),
                            backward_weight_s=tuple(rng.uniform(0.0, 1.5, 6)))
    monkeypatch.setattr(simulator, "WAVE_MIN_RANKS", 10**9)
    by_events = compile_program(program)
    assert by_events.row_lists == []
    expected = {latency: simulate_makespan(compile_program(program), durations,
                                           p2p_latency_s=latency) for latency in (0.0, 0.2)}
    simulate_makespan(by_events, durations, p2p_latency_s=0.2)
    assert by_events.row_lists and by_events.rows.dep_prev == by_events.columns[1].tolist()
    monkeypatch.setattr(simulator, "WAVE_MIN_RANKS", 1)
    monkeypatch.setattr(simulator, "WAVE_REPLAY_MIN_WIDTH", 10**9)
    by_waves = compile_program(program)
    assert simulate_makespan(by_waves, durations, p2p_latency_s=0.2) == expected[0.2]
    assert simulate_makespan(by_waves, durations, p2p_latency_s=0.0) == expected[0.0]
    assert by_waves.row_lists == [] and by_waves.visit[0].columns == []
    again = OpDurations(forward_s=durations.forward_s[::-1],
                        backward_input_s=durations.backward_input_s,
                        backward_weight_s=durations.backward_weight_s)
    replayed = simulate_makespan(by_waves, again, p2p_latency_s=0.2)
    assert replayed == simulate_makespan(compile_program(program), again, p2p_latency_s=0.2)
    assert by_waves.visit[0].columns == by_waves.visit[0].array.tolist()

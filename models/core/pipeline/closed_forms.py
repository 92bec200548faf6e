"""Closed forms of the handcrafted pipeline schedules: activation peaks, bubble, makespan.

Owns: the published and derived formulas for the peak number of micro-batch activations a
rank holds and for the bubble and makespan with uniform stages and zero P2P latency, each
with its source and the conditions under which the discrete-event simulator reproduces it
exactly (tests pin every one). Must not: simulate; where no exact closed form exists the
makespan functions return None and the caller simulates.

Units. Durations are per op of one chunk (a rank holding v chunks runs v x m forwards of
cost `forward_s` each), as in the API. Activation peaks are in full-stage units: one unit is
one micro-batch's activations over L/p layers (L layers, p ranks), i.e. the 1F1B stage of the
same model on the same ranks; a rank holding v chunks of L/(p v) layers counts each chunk as
1/v. DualPipe keeps two stages of L/p layers per rank (one per direction, 2x parameters) and
a micro-batch passes one of them, so its chunk unit is a full-stage unit.
"""

from dataclasses import dataclass
from typing import NotRequired, TypedDict, Unpack

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.in_flight import in_flight_profile
from models.core.pipeline.registry import schedule_traits, validate_schedule
from models.errors import InvalidSpecError


class StageShape(TypedDict):
    """The keywords of `peak_in_flight_chunks` (its legend: p, m, v, d, N), as the other
    in-flight peaks take them too."""

    num_stages: int
    num_micro_batches: int
    num_chunks: NotRequired[int]
    stage: int
    group_size: NotRequired[int | None]


def peak_in_flight_chunks(
    schedule: PipelineSchedule,
    *,
    num_stages: int,
    num_micro_batches: int,
    num_chunks: int = 1,
    stage: int,
    group_size: int | None = None,
) -> int:
    """Peak micro-batch x chunk activations rank `stage` holds until their W (or fused BW).

    The schedule's closed form where its record has one, else the count of its generated
    order (`in_flight.in_flight_profile`); tests pin every closed form to that count.

    Source: GPipe arXiv:1811.06965 Sec. 2 (all m micro-batches stored); Megatron-LM
    arXiv:2104.04473 Sec. 2.2.1 (1F1B keeps at most p in flight); interleaved warm-up of
    Megatron-LM `get_pp_rank_microbatches` (2(p-1-d) + (v-1)N forwards before the first
    backward); Zero Bubble arXiv:2401.10241 Table 2 (ZB-H1 p M_B, ZB-H2 (2p-1) M_B) and
    Sec. 6 (ZB-V 2p chunks = p M_B, for m >= 2p-1; fewer micro-batches hold
    min(m, 2p-d-1) + min(m, d+1) chunks); DeepSeek-V3 arXiv:2412.19437 Table 2 (DualPipe PP+1).
    Legend: p=num_stages, m=num_micro_batches, v=num_chunks, d=stage, N=group_size,
    P=num_stages for the V placements.
    Assumes: the generators of this package (the reference orders); counts are events
    "live from the start of F to the end of W or BW", releases before allocations.
    Deviation: DualPipeV (2P+1 chunks) is not in DeepSeek-V3 Table 2; it is the simulated
    value of the cut-in-half schedule, equal to DualPipe's PP+1 with PP = 2P.

    Raises:
        InvalidSpecError: the schedule refuses these parameters, or `stage` is out of range.
    """
    p, m, v, d = num_stages, num_micro_batches, num_chunks, stage
    _check(schedule, p=p, m=m, v=v, stage=d, group_size=group_size)
    form = schedule_traits(schedule).peak_form
    if form is not None:
        return form(p, m, v, d, group_size)
    profile = in_flight_profile(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                                group_size=group_size)
    return profile.peak_chunks[d]


def rank_peaks_in_flight_chunks(schedule: PipelineSchedule, *, num_stages: int,
                                num_micro_batches: int, num_chunks: int = 1,
                                group_size: int | None = None) -> tuple[int, ...]:
    """`peak_in_flight_chunks` of every rank 0..p-1, the parameters checked once.

    Source: as `peak_in_flight_chunks`.
    Legend: as `peak_in_flight_chunks`.

    Raises:
        InvalidSpecError: the schedule refuses these parameters.
    """
    p, m, v = num_stages, num_micro_batches, num_chunks
    validate_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                      group_size=group_size)
    form = schedule_traits(schedule).peak_form
    if form is not None:
        return tuple([form(p, m, v, d, group_size) for d in range(p)])
    return in_flight_profile(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                             group_size=group_size).peak_chunks


def peak_in_flight_until_b_chunks(schedule: PipelineSchedule,
                                  **shape: Unpack[StageShape]) -> int:
    """Peak micro-batch x chunk activations rank `stage` holds until their B (or fused BW).

    B frees the activations the input gradient needs (M_B in the Zero Bubble paper); W frees
    the residual M_W. The two peaks differ only where W is deferred past B.

    Source: Zero Bubble arXiv:2401.10241 Table 2 and Sec. 3.1: worker i holds
    (p-i+1) M_B + (i-1) M_W under ZB-H1 and (2p-2i+1) M_B + (2i-2) M_W under ZB-H2.
    Legend: p=num_stages, i=stage+1, m=num_micro_batches; M_B-units = this function,
    M_W-units = `peak_in_flight_chunks` minus this function.
    Assumes: the generators of this package; for the other schedules W follows its B
    without another forward in between, so this equals `peak_in_flight_chunks`.

    Raises:
        InvalidSpecError: the schedule refuses these parameters, or `stage` is out of range.
    """
    traits = schedule_traits(schedule)
    if traits.peak_until_b_form is None:
        return peak_in_flight_chunks(schedule, **shape)
    p, m, d = shape["num_stages"], shape["num_micro_batches"], shape["stage"]
    v, group_size = shape.get("num_chunks", 1), shape.get("group_size")
    _check(schedule, p=p, m=m, v=v, stage=d, group_size=group_size)
    return traits.peak_until_b_form(p, m, v, d, group_size)


def peak_in_flight(schedule: PipelineSchedule, **shape: Unpack[StageShape]) -> float:
    """Peak in-flight activations (held until W) on rank `stage`, in full-stage units.

    Equals `peak_in_flight_chunks` / v (see the module docstring for the unit). Examples
    with p=4, m=8: GPipe 8; 1F1B 4, 3, 2, 1; interleaved v=2 5.5, 4.5, 3.5, 2.5; ZB-H1 4;
    ZB-H2 7; ZB-V 4; DualPipe 5; DualPipeV 4.5.

    Source: as `peak_in_flight_chunks`.
    Legend: v=num_chunks (1 for DualPipe, whose two stages per rank are full stages).
    """
    return peak_in_flight_chunks(schedule, **shape) / shape.get("num_chunks", 1)


def peak_in_flight_until_b(schedule: PipelineSchedule,
                           **shape: Unpack[StageShape]) -> float:
    """Peak activations held until B on rank `stage`, in full-stage units (M_B units).

    Source: as `peak_in_flight_until_b_chunks`.
    Legend: v=num_chunks.
    """
    return peak_in_flight_until_b_chunks(schedule, **shape) / shape.get("num_chunks", 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosedForm:
    """Exact timing of a schedule with uniform stages and zero P2P latency."""

    makespan_s: float
    """Iteration time on the global clock (first op starts at 0)."""
    busy_s: float
    """Compute time of every rank (all ranks do the same work)."""
    bubble_s: float
    """Idle time of each rank on the global clock: makespan - busy."""
    span_bubble_s: float
    """Largest per-rank idle inside the rank's own span (Zero Bubble definition)."""


class ClosedFormShape(TypedDict):
    """The keywords of `closed_form` (its legend), as `closed_form_makespan` and
    `closed_form_bubble` take them too."""

    num_stages: int
    num_micro_batches: int
    num_chunks: NotRequired[int]
    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    overlapped_pair_s: NotRequired[float | None]
    group_size: NotRequired[int | None]


def closed_form(
    schedule: PipelineSchedule,
    *,
    num_stages: int,
    num_micro_batches: int,
    num_chunks: int = 1,
    forward_s: float,
    backward_input_s: float,
    backward_weight_s: float,
    overlapped_pair_s: float | None = None,
    group_size: int | None = None,
) -> ClosedForm | None:
    """Makespan and bubbles where a closed form is exact (zero latency, uniform stages).

    Source: GPipe/1F1B arXiv:2104.04473 Sec. 2.2.1, bubble (p-1)(F+B+W) for B+W the full
    backward; interleaved Sec. 2.2.2, (p-1)(F+B+W)/v in stage costs = (p-1)(F+B+W) in chunk
    costs; Zero Bubble arXiv:2401.10241 Table 2, ZB-H1 (p-1)(F+B-W) and ZB-H2
    (p-1)(F+B-2W); DeepSeek-V3 arXiv:2412.19437 Table 2, DualPipe (PP/2-1)(F&B+B-3W) with B
    the full backward.
    Legend: p=PP=num_stages, m=num_micro_batches, v=num_chunks, F=forward_s,
    B=backward_input_s, W=backward_weight_s, F&B=overlapped_pair_s (default F+B+W).
    Assumes: the generators of this package, P2P latency 0, equal per-chunk costs.
    Deviation: the paper forms assume the papers' regime (W <= F <= B for ZB); the forms
    below are the ones the simulator reproduces exactly for every cost ratio:
    ZB-H1 global idle (p-1) max(F, B, F+B-W) and span bubble (p-1) max(B, F+B-W), both
    the paper's (p-1)(F+B-W) when W <= min(F, B);
    ZB-H2 (m >= 2p-1) span bubble (p-1) max(0, F+B-2W, B-F), the paper's when W <= F, and
    global idle (p-1) max(F, F+B-2W, B-F) (the forward stagger); ZB-V idle (p-1)F with
    span bubble 0, only for F = B = W and m >= 2p-1; DualPipe and DualPipeV only for
    F = B = W without overlap gain (DualPipeV on P ranks is DualPipe on 2P ranks).

    Returns:
        The exact timing, or None where no closed form is exact (simulate instead).
    """
    p, m, v = num_stages, num_micro_batches, num_chunks
    validate_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                      group_size=group_size)
    f, b, w = forward_s, backward_input_s, backward_weight_s
    pair = f + b + w if overlapped_pair_s is None else overlapped_pair_s
    busy = v * m * (f + b + w)
    bubble = _bubble(schedule, p=p, m=m, f=f, b=b, w=w, pair=pair)
    if bubble is None:
        return None
    idle, span = bubble
    return ClosedForm(makespan_s=busy + idle, busy_s=busy, bubble_s=idle, span_bubble_s=span)


def _bubble(schedule: PipelineSchedule, *, p: int, m: int, f: float, b: float, w: float,
            pair: float) -> tuple[float, float] | None:
    """(global idle, span bubble) per rank from the schedule's record, or None."""
    form = schedule_traits(schedule).bubble_form
    return None if form is None else form(p, m, f, b, w, pair)


def closed_form_makespan(schedule: PipelineSchedule,
                         **shape: Unpack[ClosedFormShape]) -> float | None:
    """The exact makespan where `closed_form` has one, else None (simulate instead).

    Source: as `closed_form`.
    Legend: as `closed_form`.
    """
    result = closed_form(schedule, **shape)
    return None if result is None else result.makespan_s


def closed_form_bubble(schedule: PipelineSchedule,
                       **shape: Unpack[ClosedFormShape]) -> float | None:
    """Idle time per rank on the global clock (makespan - busy), or None if not exact.

    Source: as `closed_form`.
    Legend: as `closed_form`.
    """
    result = closed_form(schedule, **shape)
    return None if result is None else result.bubble_s


def _check(schedule: PipelineSchedule, *, p: int, m: int, v: int, stage: int,
           group_size: int | None) -> None:
    validate_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=v,
                      group_size=group_size)
    if not 0 <= stage < p:
        raise InvalidSpecError(
            f"stage={stage} is not a pipeline rank: use 0 <= stage < num_stages={p}",
            field="stage",
        )


__all__ = [
    "ClosedForm",
    "closed_form",
    "closed_form_bubble",
    "closed_form_makespan",
    "peak_in_flight",
    "peak_in_flight_chunks",
    "peak_in_flight_until_b",
    "peak_in_flight_until_b_chunks",
    "rank_peaks_in_flight_chunks",
    "validate_schedule",
]

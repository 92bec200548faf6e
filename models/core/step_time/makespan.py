"""The pipeline makespan of one step from per-virtual-stage op durations.

Owns: compiling a schedule's op lists once per shape, the exact extrapolation of long
steady states, the number of model chunks a schedule places per rank, and the mapping of
each rank's chunks onto the simulator's virtual stages. Must not: compute op durations
(`models.core.step_time.stage`) or generate schedules (`models.core.pipeline`).
"""

from functools import lru_cache

from api_schemas.parallel import ParallelConfig, PipelineSchedule
from models.core.compute import OpTimes
from models.core.layout import num_virtual_stages
from models.core.pipeline import (
    OpDurations,
    StagePlacement,
    compile_program,
    schedule_traits,
    shared_program,
    simulate_makespan,
    validate_schedule,
)
from models.core.pipeline.simulator import CompiledProgram, rank_work_s
from models.core.search_memo import current_memo
from models.errors import InvalidSpecError

EXTRAPOLATION_MIN_ROUNDS = 12
"""Above this many micro-batches per pipeline rank, the makespan is extrapolated."""


@lru_cache(maxsize=256)
def compiled_schedule(schedule: PipelineSchedule, num_stages: int, num_micro_batches: int,
                      num_chunks: int, group_size: int | None = None) -> CompiledProgram:
    """The schedule's op lists compiled once per shape (reused across durations). A shape
    compiled again after its program was let go (the sizes of a frontier come back to the
    shapes of smaller ones) is given the op order a run of it recorded (`_simulated`), so
    that its first makespan replays rather than runs the event loop."""
    compiled = compile_program(shared_program(schedule, num_stages, num_micro_batches,
                                              num_chunks, group_size))
    order = current_memo().op_orders.get(
        (schedule, num_stages, num_micro_batches, num_chunks, group_size))
    if order is not None:
        compiled.segments.append(order)
    return compiled


def _simulated(schedule: PipelineSchedule, p: int, m: int, num_chunks: int,
               group_size: int | None, durations: OpDurations, p2p_latency_s: float) -> float:
    """`simulate_makespan` of the shape's compiled program; its op order, once the program
    has one as an array (`VisitOrder.segments`), kept on the memo in force by the shape."""
    compiled = compiled_schedule(schedule, p, m, num_chunks, group_size)
    span = simulate_makespan(compiled, durations, p2p_latency_s=p2p_latency_s)
    if compiled.visit:
        orders = current_memo().op_orders
        shape = (schedule, p, m, num_chunks, group_size)
        if shape not in orders:
            orders[shape] = compiled.visit[0].segments
    return span


SIMULATED_SHAPES_SIZE = 4096
"""Shapes `pipeline_makespan` remembers having simulated (emptied when full)."""

_SIMULATED_SHAPES: set[tuple[object, ...]] = set()


def pipeline_makespan(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                      num_chunks: int, durations: OpDurations, p2p_latency_s: float,
                      group_size: int | None = None) -> float:
    """Simulated makespan, extrapolated exactly for long steady states.

    A fixed-order schedule with identical micro-batches settles into a periodic steady
    state, after which each further micro-batch adds the same time. For m > 12 p (12 N with
    an interleaving group N) the makespan is simulated at three shorter lengths (4, 6 and 8
    periods, with m's remainder so interleaved groups match); when the three are affine to
    1e-9 and the line at m is not below the busiest rank's work at m, the line is extended
    to m, otherwise the full length is simulated. Either way the value is the simulator's.
    The second test catches a run still shrinking its bubble at the three lengths (a rank
    idle at first whose idle time falls by the same amount per period): extended, such a
    line drops below the work of its busiest rank, which no schedule can (ZB-V on 8 ranks
    with a heavier last stage and 128 micro-batches: line 6.543 s, rank 0's work 6.588 s).
    """
    p, m = num_stages, num_micro_batches
    if len(_SIMULATED_SHAPES) >= SIMULATED_SHAPES_SIZE:
        _SIMULATED_SHAPES.clear()
    _SIMULATED_SHAPES.add((schedule, p, m, num_chunks, group_size))
    period = group_size or p  # interleaved groups repeat every N micro-batches
    if m <= EXTRAPOLATION_MIN_ROUNDS * period:
        return _simulated(schedule, p, m, num_chunks, group_size, durations, p2p_latency_s)
    rest = m % period
    lengths = [k * period + rest for k in (4, 6, 8)]
    try:
        for length in lengths:
            validate_schedule(schedule, num_stages=p, num_micro_batches=length,
                              num_chunks=num_chunks, group_size=group_size)
    except InvalidSpecError:
        lengths = []
    if lengths:
        spans = [_simulated(schedule, p, length, num_chunks, group_size, durations,
                            p2p_latency_s) for length in lengths]
        first, second = spans[1] - spans[0], spans[2] - spans[1]
        if abs(first - second) <= 1e-9 * max(1.0, spans[2]):
            line = spans[2] + (m - lengths[2]) * second / (lengths[2] - lengths[1])
            longest = compiled_schedule(schedule, p, lengths[2], num_chunks, group_size)
            busiest = float(rank_work_s(longest, durations).max(initial=0.0))
            if line >= busiest * m / lengths[2] * (1 - 1e-9):
                return line
    return _simulated(schedule, p, m, num_chunks, group_size, durations, p2p_latency_s)


def first_run_units(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                    num_chunks: int, group_size: int | None = None) -> int:
    """Micro-batch x chunk x rank units the first simulation of `pipeline_makespan` runs for
    this shape (the longest of the three extrapolation lengths where it extrapolates), or 0
    where `pipeline_makespan` has simulated the shape recently (its op order is recorded
    and a new simulation replays it): for callers that weigh a simulation against other
    work."""
    if (schedule, num_stages, num_micro_batches, num_chunks, group_size) in _SIMULATED_SHAPES:
        return 0
    period = group_size or num_stages
    m = num_micro_batches
    if m > EXTRAPOLATION_MIN_ROUNDS * period:
        m = 8 * period + m % period
    return m * num_chunks * num_stages


def schedule_chunks(parallel: ParallelConfig) -> int:
    """Model chunks per rank the simulator runs (the schedule's record): 2 for V shapes, vpp
    for interleaving, else 1 (bidirectional directions are one simulator stage each)."""
    return schedule_traits(parallel.schedule).num_chunks(parallel.vpp)


def crossings_per_micro_batch(parallel: ParallelConfig) -> float:
    """Share of a rank's chunks each micro-batch crosses: 1/2 under bidirectional schedules
    (one of the two mirrored copies), else 1."""
    return 1.0 / schedule_traits(parallel.schedule).num_pipes


def virtual_stage_durations(parallel: ParallelConfig,
                            ranks: list[tuple[int, tuple[OpTimes, ...]]]) -> OpDurations:
    """Per-virtual-stage F/B/W in layer order for the simulator, from each rank's chunk
    times (the slowest rank decides a virtual stage held twice)."""
    count = num_virtual_stages(parallel)
    forward = [0.0] * count
    backward = [0.0] * count
    weight = [0.0] * count
    p = parallel.pp
    placement = schedule_traits(parallel.schedule).placement
    for stage, chunk_times in ranks:
        for chunk_index, times in enumerate(chunk_times):
            if placement == StagePlacement.BIDIRECTIONAL:
                v = stage if chunk_index == 0 else p - 1 - stage
            elif placement == StagePlacement.V_SHAPE:
                v = stage if chunk_index == 0 else 2 * p - 1 - stage
            else:
                v = chunk_index * p + stage
            forward[v] = max(forward[v], times.forward_s)
            backward[v] = max(backward[v], times.backward_input_s)
            weight[v] = max(weight[v], times.backward_weight_s)
    return OpDurations(forward_s=tuple(forward), backward_input_s=tuple(backward),
                       backward_weight_s=tuple(weight))


__all__ = [
    "EXTRAPOLATION_MIN_ROUNDS",
    "compiled_schedule",
    "crossings_per_micro_batch",
    "first_run_units",
    "pipeline_makespan",
    "schedule_chunks",
    "virtual_stage_durations",
]

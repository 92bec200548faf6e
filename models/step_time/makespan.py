"""The pipeline makespan of one step from per-virtual-stage op durations.

Owns: compiling a schedule's op lists once per shape, the exact extrapolation of long
steady states, the number of model chunks a schedule places per rank, and the mapping of
each rank's chunks onto the simulator's virtual stages. Must not: compute op durations
(`models.step_time.stage`) or generate schedules (`models.pipeline`).
"""

from functools import lru_cache

from api_schemas.parallel import ParallelConfig, PipelineSchedule
from models.compute import OpTimes
from models.errors import InvalidSpecError
from models.layout import num_virtual_stages
from models.pipeline import (
    OpDurations,
    compile_program,
    generate_program,
    simulate_makespan,
    validate_schedule,
)
from models.pipeline.simulator import CompiledProgram

S = PipelineSchedule
V_SHAPED = (S.ZBV, S.DUALPIPEV)

EXTRAPOLATION_MIN_ROUNDS = 12
"""Above this many micro-batches per pipeline rank, the makespan is extrapolated."""


@lru_cache(maxsize=256)
def compiled_schedule(schedule: PipelineSchedule, num_stages: int, num_micro_batches: int,
                      num_chunks: int) -> CompiledProgram:
    """The schedule's op lists compiled once per shape (reused across durations)."""
    program = generate_program(schedule, num_stages=num_stages,
                               num_micro_batches=num_micro_batches, num_chunks=num_chunks)
    return compile_program(program)


def pipeline_makespan(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                      num_chunks: int, durations: OpDurations, p2p_latency_s: float) -> float:
    """Simulated makespan, extrapolated exactly for long steady states.

    A fixed-order schedule with identical micro-batches settles into a periodic steady
    state, after which each further micro-batch adds the same time. For m > 12 p the
    makespan is simulated at three shorter lengths (4p, 6p and 8p, with m's remainder mod p
    so interleaved groups match); when the three are affine to 1e-9 the line is extended to
    m, otherwise the full length is simulated. Either way the value is the simulator's.
    """
    p, m = num_stages, num_micro_batches
    if m <= EXTRAPOLATION_MIN_ROUNDS * p:
        compiled = compiled_schedule(schedule, p, m, num_chunks)
        return simulate_makespan(compiled, durations, p2p_latency_s=p2p_latency_s)
    rest = m % p
    lengths = [k * p + rest for k in (4, 6, 8)]
    try:
        for length in lengths:
            validate_schedule(schedule, num_stages=p, num_micro_batches=length,
                              num_chunks=num_chunks)
    except InvalidSpecError:
        lengths = []
    if lengths:
        spans = [simulate_makespan(compiled_schedule(schedule, p, length, num_chunks),
                                   durations, p2p_latency_s=p2p_latency_s)
                 for length in lengths]
        first, second = spans[1] - spans[0], spans[2] - spans[1]
        if abs(first - second) <= 1e-9 * max(1.0, spans[2]):
            return spans[2] + (m - lengths[2]) * second / (lengths[2] - lengths[1])
    compiled = compiled_schedule(schedule, p, m, num_chunks)
    return simulate_makespan(compiled, durations, p2p_latency_s=p2p_latency_s)


def schedule_chunks(parallel: ParallelConfig) -> int:
    """Model chunks per rank the simulator runs: 2 for V shapes, vpp for interleaving, else
    1 (DualPipe's two directions are one simulator stage each)."""
    if parallel.schedule in V_SHAPED:
        return 2
    return parallel.vpp if parallel.schedule == S.INTERLEAVED_1F1B else 1


def crossings_per_micro_batch(parallel: ParallelConfig) -> float:
    """Share of a rank's chunks each micro-batch crosses: 1/2 under DualPipe (one of the two
    mirrored copies), else 1."""
    return 0.5 if parallel.schedule == S.DUALPIPE else 1.0


def virtual_stage_durations(parallel: ParallelConfig,
                            ranks: list[tuple[int, tuple[OpTimes, ...]]]) -> OpDurations:
    """Per-virtual-stage F/B/W in layer order for the simulator, from each rank's chunk
    times (the slowest rank decides a virtual stage held twice)."""
    count = num_virtual_stages(parallel)
    forward = [0.0] * count
    backward = [0.0] * count
    weight = [0.0] * count
    p = parallel.pp
    for stage, chunk_times in ranks:
        for chunk_index, times in enumerate(chunk_times):
            if parallel.schedule == S.DUALPIPE:
                v = stage if chunk_index == 0 else p - 1 - stage
            elif parallel.schedule in V_SHAPED:
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
    "V_SHAPED",
    "compiled_schedule",
    "crossings_per_micro_batch",
    "pipeline_makespan",
    "schedule_chunks",
    "virtual_stage_durations",
]

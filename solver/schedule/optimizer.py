"""Minimum-makespan pipeline schedules under a per-rank activation memory limit (CP-SAT).

Owns: `optimize_schedule` and its result `ScheduleOptimum`. Must not: import OR-Tools
(the model goes through `solver.cpsat`) or change the simulator's semantics: every answer
is re-timed by the simulator with the true float durations.

What is optimised. The placement of stages on ranks is the one of the given schedule
(linear, looped, V or bidirectional); the optimizer chooses every rank's order of atomic
F, B and W ops. Memory: a micro-batch x chunk is live from the start of its F to the end
of its W (the simulator's "peak until W"); the limit is in full-stage units, as
`models.core.pipeline.peak_in_flight`, i.e. L = floor(memory_limit x chunks per unit) chunks.

Why in-order chains lose nothing (constraint C2 of `formulation.py`). Micro-batches of a
pipe are identical. Take any feasible schedule and, on every stage and for every kind,
give the k-th slot in time to micro-batch k. The k-th F slot of stage s starts after k
distinct micro-batches finished F on stage s-1 (each of the first k slots had its own
input), so after the k-th F end there plus the latency; the same holds for B against B of
stage s+1 and F of stage s, and for W against B. Ranks keep the same busy slots, so no
overlap appears, and the live activations of a rank at any time (F starts minus W ends)
are unchanged. So an optimal schedule exists in which micro-batches run in order.

Large instances. Above `MAX_FULL_MODEL_OPS` atomic ops the optimizer fixes the ops of the
middle micro-batches at the start times of the best handcrafted schedule (its steady
state) and lets CP-SAT reorder the first and last `WINDOW_MICRO_BATCHES` micro-batches of
each pipe (warm-up and cool-down) freely (`windows.py`); any answer is feasible, and the
lower bound is the analytic one of `instance.py`, valid for the unrestricted problem, so
the reported gap is honest. The bubble of a pipeline lives in its warm-up and cool-down,
and the analytic bound's excess over the work does not grow with m, so the gap shrinks
as m grows.
"""

import logging
import math
import time
from dataclasses import dataclass, replace

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline import OpDurations, PipelineProgram, ProgramBuilder, simulate
from models.core.pipeline.metrics import SimulationResult
from models.core.pipeline.ops import OpKind, Placement
from models.errors import InfeasibleError, InvalidSpecError
from solver import cancel
from solver.cpsat import SolverConfig, SolveStatus, solve
from solver.scaling import TimeScale, time_scale
from solver.schedule.candidates import candidate_programs, hint_starts, placement_for
from solver.schedule.formulation import build_cp_model
from solver.schedule.instance import (
    KIND_B,
    KIND_F,
    KIND_W,
    ScheduleInstance,
    build_instance,
    heads_and_tails,
    lower_bound_ticks,
)
from solver.schedule.windows import steady_state_ops

logger = logging.getLogger(__name__)

MAX_FULL_MODEL_OPS = 3600
"""Above this many atomic ops only the warm-up and cool-down windows are reordered."""
WINDOW_MICRO_BATCHES = 6
"""Micro-batches per pipe at each end that stay free in the windowed model."""
POSTPROCESS_RESERVE_S = 0.15
"""Wall time kept back from CP-SAT for re-timing the answer (the limit is end to end)."""
MIN_SOLVE_S = 0.05
_EPS = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ScheduleOptimum:
    """The best schedule found, with its proof (OPTIMAL) or its bound and gap (FEASIBLE)."""

    status: SolveStatus
    makespan_s: float
    """Makespan of `program` re-simulated with the true durations."""
    lower_bound_s: float
    """A proven lower bound on the optimal makespan (true durations)."""
    gap: float
    """(makespan - lower bound) / makespan; 0 when optimal."""
    program: PipelineProgram
    simulation: SimulationResult
    baseline_schedule: PipelineSchedule | None
    """Best handcrafted schedule within the limit (None: only the serial order fits)."""
    baseline_makespan_s: float
    memory_limit_chunks: int
    time_quantum_s: float
    quantization_exact: bool
    method: str
    """'bound-attained', 'cp-sat' or 'cp-sat-windows'."""
    wall_time_s: float


def optimize_schedule(
    schedule: PipelineSchedule,
    *,
    num_stages: int,
    num_micro_batches: int,
    num_chunks: int = 1,
    durations: OpDurations,
    memory_limit: float,
    p2p_latency_s: float = 0.0,
    config: SolverConfig | None = None,
) -> ScheduleOptimum:
    """The minimum-makespan F / B / W order for `schedule`'s placement under a memory limit.

    Args:
        schedule: fixes the placement (and the handcrafted baselines) to optimise.
        num_stages: pipeline ranks p.
        num_micro_batches: micro-batches m.
        num_chunks: chunks per rank v (as in `generate_program`).
        durations: per-stage op durations; an overlapped F&B duration is not modelled.
        memory_limit: peak in-flight activations per rank, in full-stage units.
        p2p_latency_s: latency of every dependency between different ranks.
        config: workers, seed and the time limit, which bounds the whole call (CP-SAT gets
            what is left after the setup, less `POSTPROCESS_RESERVE_S`).

    Raises:
        InvalidSpecError: bad parameters, or an overlapped pair duration was given.
        InfeasibleError: the limit is below what one micro-batch needs on a rank.
        Cancelled: the thread's cancellation token was set (checked between steps; the
            CP-SAT run stops at once).
    """
    started = time.perf_counter()
    if durations.overlapped_pair_s is not None:
        raise InvalidSpecError(
            "the optimizer schedules F, B and W separately and models no F&B overlap gain: "
            "omit overlapped_pair_s", field="overlapped_pair_s")
    setup = _setup(schedule, num_stages=num_stages, num_micro_batches=num_micro_batches,
                   num_chunks=num_chunks, durations=durations, memory_limit=memory_limit,
                   p2p_latency_s=p2p_latency_s)
    baseline = _best_candidate(schedule, setup.inst, durations, p2p_latency_s=p2p_latency_s,
                               unit=setup.unit)
    program, result = baseline.program, baseline.result
    method, status, bound = "bound-attained", SolveStatus.OPTIMAL, setup.bound
    if baseline.hint_makespan_ticks > bound:
        status, bound, method, found, timed = _solved(
            setup, baseline, durations, p2p_latency_s=p2p_latency_s,
            config=_remaining_budget(config or SolverConfig(), started=started))
        if timed.makespan_s < result.makespan_s - _EPS:
            program, result = found, timed
    status, lower = _final_status(status, result.makespan_s, bound, setup.inst.scale)
    optimal = status == SolveStatus.OPTIMAL
    return ScheduleOptimum(
        status=status, makespan_s=result.makespan_s,
        lower_bound_s=result.makespan_s if optimal else lower,
        gap=0.0 if optimal else max(0.0, (result.makespan_s - lower) / result.makespan_s),
        program=program, simulation=result, baseline_schedule=baseline.schedule,
        baseline_makespan_s=baseline.makespan_s, memory_limit_chunks=setup.limit,
        time_quantum_s=setup.inst.scale.quantum_s, quantization_exact=setup.inst.scale.exact,
        method=method, wall_time_s=time.perf_counter() - started)


def _remaining_budget(config: SolverConfig, *, started: float) -> SolverConfig:
    """The config with CP-SAT's limit cut to what is left of `config.max_time_s` overall."""
    left = config.max_time_s - (time.perf_counter() - started) - POSTPROCESS_RESERVE_S
    return replace(config, max_time_s=max(MIN_SOLVE_S, left))


def _chunks_per_micro_batch(placement: Placement) -> int:
    """Chunks one micro-batch keeps on a rank at once (all its stages on that rank)."""
    most = 0
    for ranks in placement.stage_rank.tolist():
        most = max(most, max(ranks.count(r) for r in set(ranks)))
    return most


def _limit_chunks(memory_limit: float, *, unit: int, placement_chunks: int) -> int:
    if not memory_limit > 0:
        raise InvalidSpecError(f"memory_limit={memory_limit} must be > 0 (full-stage units)",
                               field="memory_limit")
    chunks = int(memory_limit * unit + 1e-9)
    if chunks < placement_chunks:
        raise InfeasibleError(
            f"memory_limit={memory_limit} allows {chunks} chunk activations per rank, but one "
            f"micro-batch holds {placement_chunks} at once: raise memory_limit to at least "
            f"{placement_chunks / unit:g}", field="memory_limit",
            diagnostics={"needed_chunks": placement_chunks, "allowed_chunks": chunks})
    return chunks


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Baseline:
    schedule: PipelineSchedule | None
    program: PipelineProgram
    result: SimulationResult
    makespan_s: float
    hint: list[int]
    hint_makespan_ticks: int


def _best_candidate(schedule: PipelineSchedule, inst: ScheduleInstance,
                    durations: OpDurations, *, p2p_latency_s: float, unit: int) -> _Baseline:
    """The best handcrafted program within the limit, timed in ticks (hint) and seconds."""
    place, scale = inst.placement, inst.scale
    tick_durations = _tick_durations(inst)
    latency_ticks = float(scale.ticks(p2p_latency_s))
    best: _Baseline | None = None
    for name, program in candidate_programs(
            schedule, num_stages=place.num_ranks, num_micro_batches=place.num_micro_batches,
            chunks_per_stage_unit=unit, placement=place):
        cancel.check()
        in_ticks = simulate(program, tick_durations, p2p_latency_s=latency_ticks)
        true = simulate(program, durations, p2p_latency_s=p2p_latency_s)
        limit = inst.memory_limit_chunks
        if max(in_ticks.peak_in_flight_chunks) > limit or \
                max(true.peak_in_flight_chunks) > limit:
            continue
        ticks = round(in_ticks.makespan_s)
        if best is None or (ticks, true.makespan_s) < (best.hint_makespan_ticks,
                                                       best.makespan_s):
            best = _Baseline(schedule=name, program=program, result=true,
                             makespan_s=true.makespan_s,
                             hint=hint_starts(inst, program, in_ticks), hint_makespan_ticks=ticks)
    assert best is not None, "the serial order fits every limit that passed _limit_chunks"
    return best


def _tick_durations(inst: ScheduleInstance) -> OpDurations:
    """The instance's integer durations as an `OpDurations` (for simulating in ticks)."""
    num_s = inst.placement.num_stages
    j0 = inst.pipe_micro_batches[0][0]
    per_kind = [tuple(float(inst.duration[inst.op(k, j0, s)]) for s in range(num_s))
                for k in (KIND_F, KIND_B, KIND_W)]
    return OpDurations(forward_s=per_kind[0], backward_input_s=per_kind[1],
                       backward_weight_s=per_kind[2])


@dataclass(frozen=True, slots=True, kw_only=True)
class _Setup:
    """The instance of one `optimize_schedule` call and its bounds, in ticks."""

    inst: ScheduleInstance
    unit: int
    """Chunks per full-stage unit of the placement."""
    limit: int
    """In-flight chunks per rank."""
    head: list[int]
    tail: list[int]
    bound: int


def _setup(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
           num_chunks: int, durations: OpDurations, memory_limit: float,
           p2p_latency_s: float) -> _Setup:
    placement, unit = placement_for(schedule, num_stages=num_stages,
                                    num_micro_batches=num_micro_batches, num_chunks=num_chunks)
    limit = _limit_chunks(memory_limit, unit=unit,
                          placement_chunks=_chunks_per_micro_batch(placement))
    fwd, inp, wgt = durations.per_stage(placement.num_stages)
    scale = time_scale([*fwd.tolist(), *inp.tolist(), *wgt.tolist(), p2p_latency_s])
    inst = build_instance(placement, durations, p2p_latency_s=p2p_latency_s, scale=scale,
                          memory_limit_chunks=limit)
    cancel.check()
    head, tail = heads_and_tails(inst)
    bound = lower_bound_ticks(inst, head, tail)
    cancel.check()
    return _Setup(inst=inst, unit=unit, limit=limit, head=head, tail=tail, bound=bound)


def _solved(setup: _Setup, baseline: _Baseline, durations: OpDurations, *,
            p2p_latency_s: float, config: SolverConfig
            ) -> tuple[SolveStatus, int, str, PipelineProgram, SimulationResult]:
    """CP-SAT from the baseline's hint: (status, proven bound in ticks, method, the order
    found and its re-timed simulation)."""
    inst = setup.inst
    status, bound, starts, method = _solve(
        inst, head=setup.head, tail=setup.tail, bound=setup.bound, hint=baseline.hint,
        horizon=baseline.hint_makespan_ticks, config=config)
    cancel.check()
    found = program_from_starts(inst, starts, chunks_per_stage_unit=setup.unit)
    timed = simulate(found, durations, p2p_latency_s=p2p_latency_s)
    # The live count at each F start depends only on the rank's order, so re-timing
    # keeps the peak the model constrained.
    assert max(timed.peak_in_flight_chunks) <= setup.limit, "re-timed order exceeds the limit"
    return status, bound, method, found, timed


def _final_status(status: SolveStatus, makespan_s: float, bound: int,
                  scale: TimeScale) -> tuple[SolveStatus, float]:
    """Optimal when the makespan meets the bound in seconds; a proof on rounded ticks is
    only feasible. Returns the status and the bound in seconds."""
    lower = _true_bound(bound, scale)
    if makespan_s <= lower + _EPS * max(1.0, lower):
        status = SolveStatus.OPTIMAL
    elif status == SolveStatus.OPTIMAL and not scale.exact:
        status = SolveStatus.FEASIBLE
    return status, lower


def _solve(inst: ScheduleInstance, *, head: list[int], tail: list[int], bound: int,
           hint: list[int], horizon: int,
           config: SolverConfig) -> tuple[SolveStatus, int, list[int], str]:
    """Run CP-SAT; returns (status, proven bound in ticks, start ticks, method).

    The windowed model restricts the search, so its bound is not a bound of the problem and
    only the analytic one is returned with it.
    """
    windowed = inst.num_ops > MAX_FULL_MODEL_OPS
    rigid = steady_state_ops(inst, window=WINDOW_MICRO_BATCHES) if windowed else None
    cancel.check()
    model, v = build_cp_model(inst, head=head, tail=tail, horizon=horizon, lower_bound=bound,
                              hint=hint, rigid=rigid)
    outcome = solve(model, config)
    method = "cp-sat-windows" if windowed else "cp-sat"
    if not outcome.has_solution:
        logger.info("CP-SAT returned %s; keeping the handcrafted hint", outcome.status)
        return SolveStatus.FEASIBLE, bound, hint, method
    starts = [int(outcome.solver.value(x)) for x in v.start]
    if windowed:
        return SolveStatus.FEASIBLE, bound, starts, method
    proven = math.ceil(outcome.best_bound - 1e-6) if outcome.best_bound is not None else bound
    return outcome.status, max(bound, proven), starts, method


def _true_bound(bound_ticks: int, scale: TimeScale) -> float:
    """A lower bound in seconds for the true durations (see `solver/scaling.py: time_scale`)."""
    return scale.seconds(bound_ticks) / scale.inflation


def program_from_starts(inst: ScheduleInstance, starts: list[int], *,
                        chunks_per_stage_unit: int) -> PipelineProgram:
    """Every rank's ops sorted by start tick (ties: F before B before W, then data order)."""
    builder = ProgramBuilder(inst.placement)
    kinds = (int(OpKind.F), int(OpKind.B), int(OpKind.W))

    def key(o: int) -> tuple[int, int, int, int]:
        s = inst.stage[o]
        return starts[o], inst.kind[o], -s if inst.kind[o] == KIND_B else s, inst.micro_batch[o]

    for o in sorted(range(inst.num_ops), key=key):
        builder.rank(inst.rank[o]).append((kinds[inst.kind[o]], inst.micro_batch[o],
                                           inst.stage[o], -1, -1))
    return builder.build(schedule=None, chunks_per_stage_unit=chunks_per_stage_unit)


__all__ = ["MAX_FULL_MODEL_OPS", "WINDOW_MICRO_BATCHES", "ScheduleOptimum", "optimize_schedule",
           "program_from_starts"]

"""Handcrafted starting points of the optimizer and the placement each schedule implies.

Owns: `placement_for` (the stage placement the optimizer keeps fixed), `candidate_programs`
(every handcrafted schedule with that placement that accepts the parameters, plus the
"serial" order that fits any feasible memory limit) and `hint_starts` (a simulated
timeline as start ticks of the atomic F / B / W ops). Must not: build the CP-SAT model.
"""

import logging

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline import (
    SCHEDULES,
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    StagePlacement,
    generate_program,
    schedule_traits,
)
from models.core.pipeline.metrics import SimulationResult
from models.core.pipeline.ops import (
    Placement,
    bidirectional_placement,
    linear_placement,
    looped_placement,
    v_placement,
)
from models.errors import InvalidSpecError
from solver.schedule.instance import KIND_B, KIND_F, KIND_W, ScheduleInstance

logger = logging.getLogger(__name__)



def family_of(schedule: PipelineSchedule) -> StagePlacement:
    """The placement family of a schedule (its record's placement).

    Raises:
        InvalidSpecError: an unknown schedule.
    """
    return schedule_traits(schedule).placement


def family_members(schedule: PipelineSchedule) -> tuple[PipelineSchedule, ...]:
    """Every registered schedule sharing `schedule`'s placement, in registry order."""
    family = family_of(schedule)
    return tuple(name for name, traits in SCHEDULES.items() if traits.placement == family)


def placement_for(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                  num_chunks: int) -> tuple[Placement, int]:
    """The placement of `schedule` and its chunks per full-stage unit.

    Raises:
        InvalidSpecError: the placement cannot hold these parameters.
    """
    p, m, v = num_stages, num_micro_batches, num_chunks
    traits = schedule_traits(schedule)
    if p < 1 or m < 1:
        raise InvalidSpecError(f"num_stages={p} and num_micro_batches={m} must be >= 1",
                               field="num_stages")
    if traits.fixed_chunks is not None:
        _require_chunks(schedule, v, traits.fixed_chunks)
    family = traits.placement
    if family == StagePlacement.LINEAR:
        return linear_placement(num_ranks=p, num_micro_batches=m), 1
    if family == StagePlacement.LOOPED:
        if v < 2:
            raise InvalidSpecError(f"num_chunks={v}: interleaving needs num_chunks >= 2",
                                   field="num_chunks")
        return looped_placement(num_ranks=p, num_chunks=v, num_micro_batches=m), v
    if family == StagePlacement.V_SHAPE:
        return v_placement(num_ranks=p, num_micro_batches=m), 2
    if p % 2 or m % 2:
        raise InvalidSpecError(
            f"schedule='{schedule}' needs even num_stages and num_micro_batches (got {p}, {m})",
            field="num_micro_batches")
    return bidirectional_placement(num_ranks=p, num_micro_batches=m), 1


def _require_chunks(schedule: PipelineSchedule, got: int, want: int) -> None:
    if got != want:
        raise InvalidSpecError(f"schedule='{schedule}' places {want} chunk(s) per rank: set "
                               f"num_chunks={want} (got {got})", field="num_chunks")


def candidate_programs(schedule: PipelineSchedule, *, num_stages: int, num_micro_batches: int,
                       chunks_per_stage_unit: int,
                       placement: Placement) -> list[tuple[PipelineSchedule | None,
                                                            PipelineProgram]]:
    """Handcrafted programs sharing `schedule`'s placement, plus the serial order (None)."""
    found: list[tuple[PipelineSchedule | None, PipelineProgram]] = []
    for member in family_members(schedule):
        try:
            found.append((member, generate_program(
                member, num_stages=num_stages, num_micro_batches=num_micro_batches,
                num_chunks=_chunks_of(member, placement))))
        except InvalidSpecError as err:
            logger.debug("candidate %s skipped: %s", member, err.detail)
    found.append((None, serial_program(placement, chunks_per_stage_unit=chunks_per_stage_unit)))
    return found


def _chunks_of(schedule: PipelineSchedule, placement: Placement) -> int:
    """Chunks per rank of `schedule` on this placement (its fixed count, else the
    placement's stages per rank)."""
    fixed = schedule_traits(schedule).fixed_chunks
    return fixed if fixed is not None else placement.num_stages // placement.num_ranks


def serial_program(placement: Placement, *, chunks_per_stage_unit: int) -> PipelineProgram:
    """One micro-batch at a time: its forwards, its backwards, its weight gradients.

    Holds only one micro-batch's chunks per rank, so it fits every feasible memory limit.
    """
    builder = ProgramBuilder(placement)
    num_s = placement.num_stages
    for j in range(placement.num_micro_batches):
        ranks = placement.stage_rank[int(placement.micro_batch_pipe[j])]
        for s in range(num_s):
            builder.rank(int(ranks[s])).append((int(OpKind.F), j, s, -1, -1))
        for s in range(num_s - 1, -1, -1):
            builder.rank(int(ranks[s])).append((int(OpKind.BW), j, s, -1, -1))
    return builder.build(schedule=None, chunks_per_stage_unit=chunks_per_stage_unit)


def hint_starts(inst: ScheduleInstance, program: PipelineProgram,
                result: SimulationResult) -> list[int]:
    """Start ticks of every atomic op of a timeline simulated in ticks.

    A fused BW becomes B then W back to back; an FB pair becomes F, then B, then W.
    """
    starts = [0] * inst.num_ops
    tl = result.timeline
    for row in range(program.num_ops):
        kind = int(program.kind[row])
        t = round(float(tl.start_s[row]))
        j, s = int(program.micro_batch[row]), int(program.stage[row])
        if kind in (OpKind.F, OpKind.FB):
            f = inst.op(KIND_F, j, s)
            starts[f] = t
            t += inst.duration[f]
            if kind == OpKind.F:
                continue
            j, s = int(program.pair_micro_batch[row]), int(program.pair_stage[row])
        if kind == OpKind.W:
            starts[inst.op(KIND_W, j, s)] = t
            continue
        b = inst.op(KIND_B, j, s)
        starts[b] = t
        if kind != OpKind.B:
            starts[inst.op(KIND_W, j, s)] = t + inst.duration[b]
    return starts


__all__ = ["candidate_programs", "family_members", "family_of", "hint_starts", "placement_for",
           "serial_program"]

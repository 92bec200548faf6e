"""Generators: one per handcrafted schedule, each emitting every rank's ordered op list.

Owns: `generate_program`, the dispatcher that validates parameters and calls the generator
of a `PipelineSchedule`. Must not: time anything (the simulator does).
"""

from api_schemas.parallel import PipelineSchedule
from models.pipeline.generators.classic import gpipe, interleaved, interleaved_order, one_f_one_b
from models.pipeline.generators.dualpipe import dualpipe, dualpipev
from models.pipeline.generators.zero_bubble import zb_h1, zb_h2, zbv
from models.pipeline.ops import PipelineProgram
from models.pipeline.validation import interleaved_group_size, validate_schedule


def generate_program(
    schedule: PipelineSchedule,
    *,
    num_stages: int,
    num_micro_batches: int,
    num_chunks: int = 1,
    group_size: int | None = None,
) -> PipelineProgram:
    """The per-rank op lists of `schedule` for p ranks, m micro-batches, v chunks per rank.

    Args:
        schedule: the schedule name.
        num_stages: pipeline ranks p.
        num_micro_batches: micro-batches m per iteration (DualPipe: both directions).
        num_chunks: chunks per rank v (interleaved >= 2; ZB-V and DualPipeV 2; else 1).
        group_size: interleaved micro-batch group N (None: N = p).

    Raises:
        InvalidSpecError: the schedule refuses these parameters (see `validate_schedule`).
    """
    p, m = num_stages, num_micro_batches
    validate_schedule(schedule, num_stages=p, num_micro_batches=m, num_chunks=num_chunks,
                      group_size=group_size)
    if schedule == PipelineSchedule.GPIPE:
        return gpipe(num_stages=p, num_micro_batches=m)
    if schedule == PipelineSchedule.ONE_F_ONE_B:
        return one_f_one_b(num_stages=p, num_micro_batches=m)
    if schedule == PipelineSchedule.INTERLEAVED_1F1B:
        n = interleaved_group_size(num_stages=p, group_size=group_size)
        return interleaved(num_stages=p, num_micro_batches=m, num_chunks=num_chunks,
                           group_size=n)
    if schedule == PipelineSchedule.ZB_H1:
        return zb_h1(num_stages=p, num_micro_batches=m)
    if schedule == PipelineSchedule.ZB_H2:
        return zb_h2(num_stages=p, num_micro_batches=m)
    if schedule == PipelineSchedule.ZBV:
        return zbv(num_stages=p, num_micro_batches=m)
    if schedule == PipelineSchedule.DUALPIPE:
        return dualpipe(num_stages=p, num_micro_batches=m)
    return dualpipev(num_stages=p, num_micro_batches=m)


__all__ = [
    "dualpipe",
    "dualpipev",
    "generate_program",
    "gpipe",
    "interleaved",
    "interleaved_order",
    "one_f_one_b",
    "zb_h1",
    "zb_h2",
    "zbv",
]

"""The registry of pipeline schedules: the one place that maps a schedule name to its record.

Owns: `SCHEDULES` (one `ScheduleTraits` per `PipelineSchedule`), `schedule_traits` (the
lookup; an unknown name is an error, never another schedule's numbers), `validate_schedule`
(the parameter rules every schedule shares, then the schedule's own), `generate_program` and
`shared_program` (the same op lists, generated once per shape for the memory profile and
the simulator alike). Must not: hold any schedule's facts itself (each record lives with
its generator).

Adding a schedule: write its module under `generators/` with the generator, its rules, its
closed forms (or none) and its record, add the name to `PipelineSchedule` and the record
to `SCHEDULES` below.
"""

from functools import lru_cache

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.generators.chimera import CHIMERA
from models.core.pipeline.generators.classic import GPIPE, INTERLEAVED_1F1B, ONE_F_ONE_B
from models.core.pipeline.generators.dualpipe import DUALPIPE, DUALPIPEV
from models.core.pipeline.generators.zero_bubble import ZB_H1, ZB_H2, ZBV
from models.core.pipeline.ops import PipelineProgram
from models.core.pipeline.traits import ScheduleTraits, require
from models.errors import InvalidSpecError

SCHEDULES: dict[PipelineSchedule, ScheduleTraits] = {
    traits.schedule: traits
    for traits in (GPIPE, ONE_F_ONE_B, INTERLEAVED_1F1B, ZB_H1, ZB_H2, ZBV, DUALPIPE,
                   DUALPIPEV, CHIMERA)
}

_BY_VALUE: dict[str, ScheduleTraits] = {str(name): traits for name, traits in SCHEDULES.items()}
"""`SCHEDULES` by the schedules' string values (a member looks itself up by its value)."""

_CHUNK_WORDS = {1: "one chunk", 2: "two chunks"}


def schedule_traits(schedule: PipelineSchedule | str) -> ScheduleTraits:
    """The record of `schedule`.

    Raises:
        InvalidSpecError: the name is not a registered schedule (the message lists them).
    """
    # A member (or its string value: the enum is a str enum, so both hash alike) is found
    # without converting the name, which the cost model does for every rank and layer.
    found = _BY_VALUE.get(schedule) if isinstance(schedule, str) else None
    if found is not None:
        return found
    try:
        return SCHEDULES[PipelineSchedule(schedule)]
    except (ValueError, KeyError):
        known = ", ".join(f"'{name}'" for name in SCHEDULES)
        raise InvalidSpecError(f"schedule='{schedule}' is not a known pipeline schedule: use "
                               f"one of {known}", field="schedule") from None


def validate_schedule(
    schedule: PipelineSchedule,
    *,
    num_stages: int,
    num_micro_batches: int,
    num_chunks: int = 1,
    group_size: int | None = None,
) -> None:
    """Refuse parameters the schedule cannot run, naming the field, the value and the fix.

    The shared rules: at least one rank, micro-batch and chunk; a group size only where
    the schedule interleaves; the chunk count of schedules that fix it (one per rank for
    linear and bidirectional placements, two for the V). Then the schedule's own rules,
    from its reference implementation (each rule's docstring names it).

    Args:
        schedule: the schedule name.
        num_stages: pipeline ranks p (the PP degree).
        num_micro_batches: micro-batches m per iteration (bidirectional: both directions).
        num_chunks: model chunks per rank v.
        group_size: interleaving micro-batch group N; None means N = p (Megatron default).

    Raises:
        InvalidSpecError: the combination is impossible; the message says how to fix it.
    """
    traits = schedule_traits(schedule)
    p, m, v = num_stages, num_micro_batches, num_chunks
    if p < 1 or m < 1 or v < 1:  # the shared rules, tested before any call
        require(p >= 1, "num_stages", p, "give at least one pipeline rank")
        require(m >= 1, "num_micro_batches", m, "give at least one micro-batch")
        require(v >= 1, "num_chunks", v, "give at least one chunk per rank")
    if group_size is not None and not traits.takes_group_size:
        raise InvalidSpecError(
            f"group_size={group_size} only applies to interleaved schedules, got "
            f"schedule='{schedule}': drop group_size", field="group_size")
    fixed = traits.fixed_chunks
    if fixed is not None:
        require(v == fixed, "num_chunks", v,
                f"schedule='{schedule}' places exactly "
                f"{_CHUNK_WORDS.get(fixed, f'{fixed} chunks')} per rank "
                f"({traits.placement} placement): set num_chunks={fixed}")
    traits.rule(p, m, v, group_size)


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
        num_micro_batches: micro-batches m per iteration (bidirectional: both directions).
        num_chunks: chunks per rank v (interleaved >= 2; V shapes 2; else 1).
        group_size: interleaved micro-batch group N (None: N = p).

    Raises:
        InvalidSpecError: the schedule refuses these parameters (see `validate_schedule`).
    """
    validate_schedule(schedule, num_stages=num_stages, num_micro_batches=num_micro_batches,
                      num_chunks=num_chunks, group_size=group_size)
    return schedule_traits(schedule).generator(num_stages, num_micro_batches, num_chunks,
                                               group_size)


SHARED_PROGRAMS = 16
"""Generated programs `shared_program` keeps (the most recent shapes): a search asks for a
shape's order twice in a row, for its in-flight memory profile and for its simulation, and a
program of 128 ranks and 256 micro-batches takes about 3 MB."""


@lru_cache(maxsize=SHARED_PROGRAMS)
def shared_program(schedule: PipelineSchedule, num_stages: int, num_micro_batches: int,
                   num_chunks: int = 1, group_size: int | None = None) -> PipelineProgram:
    """`generate_program`'s result for these parameters, generated once per shape and shared
    by its readers: its columns are made read-only, so no reader can change another's.

    Raises:
        InvalidSpecError: as `generate_program` (a refusal is not kept).
    """
    program = generate_program(schedule, num_stages=num_stages,
                               num_micro_batches=num_micro_batches, num_chunks=num_chunks,
                               group_size=group_size)
    for column in (program.rank_offsets, program.kind, program.micro_batch, program.stage,
                   program.pair_micro_batch, program.pair_stage):
        column.flags.writeable = False
    return program


__all__ = ["SCHEDULES", "generate_program", "schedule_traits", "shared_program",
           "validate_schedule"]

"""Which (schedule, p, m, v) combinations a pipeline schedule accepts.

Owns: `validate_schedule`, the single place that refuses impossible schedule parameters with
the reason and the fix. Must not: build op lists or time anything (generators and the
simulator call this first).

The rules come from the reference implementations of each schedule:
- 1F1B and ZB-H1: torch `Schedule1F1B` refuses fewer micro-batches than ranks (m < p).
- Interleaved 1F1B: Megatron-LM `get_schedule_table` groups micro-batches in groups of N
  (`microbatch_group_size_per_vp_stage`, default p) and refuses N < p, N > m, and a last
  group of size `0 < m mod N < p`, which would leave dependency bubbles.
- DualPipe (deepseek-ai/DualPipe `dualpipe.py`): even PP, even m, m >= 2 PP; each rank holds
  one stage per direction (two copies of parameters).
- DualPipeV (`dualpipev.py`) and ZB-V (torch `ScheduleZBVZeroBubble`): exactly two chunks
  per rank in a V; DualPipeV also needs m >= 2 P.
"""

import logging

from api_schemas.parallel import PipelineSchedule
from models.errors import InvalidSpecError

logger = logging.getLogger(__name__)

V_SHAPED_CHUNKS = 2
"""Chunks per rank of the V placements (ZB-V, DualPipeV): stage d and stage 2P-1-d."""

_SINGLE_CHUNK = (
    PipelineSchedule.GPIPE,
    PipelineSchedule.ONE_F_ONE_B,
    PipelineSchedule.ZB_H1,
    PipelineSchedule.ZB_H2,
    PipelineSchedule.DUALPIPE,
)


def validate_schedule(
    schedule: PipelineSchedule,
    *,
    num_stages: int,
    num_micro_batches: int,
    num_chunks: int = 1,
    group_size: int | None = None,
) -> None:
    """Refuse parameters the schedule cannot run, naming the field, the value and the fix.

    Args:
        schedule: the schedule name.
        num_stages: pipeline ranks p (the PP degree).
        num_micro_batches: micro-batches m per iteration (for DualPipe, both directions).
        num_chunks: model chunks per rank v (interleaved: >= 2; ZB-V and DualPipeV: 2).
        group_size: interleaved 1F1B micro-batch group N; None means N = p (Megatron default).

    Raises:
        InvalidSpecError: the combination is impossible; the message says how to fix it.
    """
    p, m, v = num_stages, num_micro_batches, num_chunks
    _require(p >= 1, "num_stages", p, "give at least one pipeline rank")
    _require(m >= 1, "num_micro_batches", m, "give at least one micro-batch")
    _require(v >= 1, "num_chunks", v, "give at least one chunk per rank")
    if group_size is not None and schedule != PipelineSchedule.INTERLEAVED_1F1B:
        raise InvalidSpecError(
            f"group_size={group_size} only applies to schedule='interleaved_1f1b', "
            f"got schedule='{schedule}': drop group_size",
            field="group_size",
        )
    if schedule in _SINGLE_CHUNK:
        _require(v == 1, "num_chunks", v,
                 f"schedule='{schedule}' places one chunk per rank: set num_chunks=1 "
                 "(use 'interleaved_1f1b', 'zbv' or 'dualpipev' for more chunks)")
    if schedule in (PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.ZB_H1):
        _require(m >= p, "num_micro_batches", m,
                 f"schedule='{schedule}' needs at least as many micro-batches as ranks: "
                 f"use num_micro_batches >= num_stages={p}")
    elif schedule == PipelineSchedule.INTERLEAVED_1F1B:
        _validate_interleaved(p=p, m=m, v=v, group_size=group_size)
    elif schedule == PipelineSchedule.ZBV:
        _require(v == V_SHAPED_CHUNKS, "num_chunks", v,
                 "schedule='zbv' places exactly two chunks per rank in a V: set num_chunks=2")
    elif schedule == PipelineSchedule.DUALPIPE:
        _validate_dualpipe(p=p, m=m)
    elif schedule == PipelineSchedule.DUALPIPEV:
        _require(v == V_SHAPED_CHUNKS, "num_chunks", v,
                 "schedule='dualpipev' places exactly two chunks per rank in a V: "
                 "set num_chunks=2")
        _require(m >= 2 * p, "num_micro_batches", m,
                 f"schedule='dualpipev' needs num_micro_batches >= 2 x num_stages = {2 * p}")


def interleaved_group_size(*, num_stages: int, group_size: int | None) -> int:
    """The interleaved micro-batch group N: the given value, or p (Megatron's default)."""
    return num_stages if group_size is None else group_size


def _validate_interleaved(*, p: int, m: int, v: int, group_size: int | None) -> None:
    _require(v >= 2, "num_chunks", v,
             "schedule='interleaved_1f1b' needs num_chunks >= 2 (with one chunk use '1f1b')")
    _require(p >= 2, "num_stages", p,
             "schedule='interleaved_1f1b' needs num_stages >= 2 (one rank has no pipeline)")
    n = interleaved_group_size(num_stages=p, group_size=group_size)
    _require(n >= p, "group_size", n,
             f"the micro-batch group must hold at least num_stages={p} micro-batches: "
             f"use group_size >= {p}")
    _require(n <= m, "num_micro_batches", m,
             f"interleaving with micro-batch group size {n} needs num_micro_batches >= {n}: "
             f"raise num_micro_batches to a multiple of {n}")
    tail = m % n
    _require(tail == 0 or tail >= p, "num_micro_batches", m,
             f"the last micro-batch group would hold {tail} < num_stages={p} micro-batches "
             f"(dependency bubbles): use a multiple of {n}, e.g. {m - tail} or {m - tail + n}")


def _validate_dualpipe(*, p: int, m: int) -> None:
    _require(p % 2 == 0, "num_stages", p,
             "schedule='dualpipe' pairs rank r with rank PP-1-r: use an even num_stages")
    _require(m % 2 == 0, "num_micro_batches", m,
             "schedule='dualpipe' feeds half the micro-batches from each end: "
             "use an even num_micro_batches")
    _require(m >= 2 * p, "num_micro_batches", m,
             f"schedule='dualpipe' needs num_micro_batches >= 2 x num_stages = {2 * p}")


def _require(ok: bool, field: str, value: int, fix: str) -> None:
    if not ok:
        raise InvalidSpecError(f"{field}={value} is not allowed: {fix}", field=field)


__all__ = ["V_SHAPED_CHUNKS", "interleaved_group_size", "validate_schedule"]

"""The classic flush schedules: GPipe, 1F1B and interleaved 1F1B, one traits record each.

Owns: the per-rank op orders of these three schedules, their parameter rules, their closed
forms and their records (`GPIPE`, `ONE_F_ONE_B`, `INTERLEAVED_1F1B`). Must not: check the
parameters every schedule shares (the registry does) or time anything.
"""

import numpy as np
import numpy.typing as npt

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.ops import (
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    linear_placement,
    looped_placement,
)
from models.core.pipeline.traits import (
    FrameworkNames,
    ScheduleTraits,
    StagePlacement,
    no_rule,
    refuse,
)

_F, _BW = int(OpKind.F), int(OpKind.BW)


_FORWARD_KIND = np.array([_F], dtype=np.int64)
_BACKWARD_KIND = np.array([_BW], dtype=np.int64)
_ALTERNATING = np.array([[_F, _BW]], dtype=np.int64)


def _kinds(warmup: int, steady: int) -> npt.NDArray[np.int64]:
    """The kind column of a 1F1B-shaped list: `warmup` forwards, `steady` F/BW pairs, then
    `warmup` fused backwards (`np.concatenate` and array methods: no Python wrapper frames,
    one set per rank of every generated order)."""
    return np.concatenate([_FORWARD_KIND.repeat(warmup),
                           _ALTERNATING.repeat(steady, axis=0).reshape(-1),
                           _BACKWARD_KIND.repeat(warmup)])


def _merged(forward: npt.NDArray[np.int64], backward: npt.NDArray[np.int64],
            warmup: int) -> npt.NDArray[np.int64]:
    """A value column (micro-batch or stage) of the same list: the first `warmup` forward
    values, then forward value warm-up + k beside backward value k, then the backward values
    left (`forward` and `backward` in issue order, of one length)."""
    steady = forward.shape[0] - warmup
    return np.concatenate([
        forward[:warmup],
        np.concatenate([forward[warmup:, None], backward[:steady, None]], axis=1).reshape(-1),
        backward[steady:]])


def gpipe(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """GPipe: every forward, then every fused backward in ascending micro-batch order.

    Source: GPipe arXiv:1811.06965 Sec. 2.2; the ascending backward order is torch
    `ScheduleGPipe`'s (descending gives the same makespan).
    Legend: p=num_stages, m=num_micro_batches.
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(linear_placement(num_ranks=p, num_micro_batches=m))
    for d in range(p):
        rows = builder.rank(d)
        rows.extend((_F, j, d, -1, -1) for j in range(m))
        rows.extend((_BW, j, d, -1, -1) for j in range(m))
    return builder.build(schedule=PipelineSchedule.GPIPE, chunks_per_stage_unit=1)


def one_f_one_b(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """1F1B (PipeDream-Flush): min(p-1-d, m) warm-up forwards, then F/BW pairs, then the
    drain.

    Any m >= 1: with fewer micro-batches than ranks (m < p) the ranks d <= p-1-m run every
    forward in the warm-up and then every backward, the others pair m - (p-1-d) of them.
    With uniform stages and no latency the makespan is still (m+p-1)(F+B+W): the last rank
    starts at (p-1)F, runs its m F/BW pairs back to back, and the last backward then crosses
    the other p-1 ranks, (p-1)F + m(F+B+W) + (p-1)(B+W) (derived here; the simulator
    reproduces it, tests/models/pipeline/test_pipeline_few_micro_batches.py).
    Source: Megatron-LM arXiv:2104.04473 Sec. 2.2.1 (Fig. 4 top); warm-up count of
    Megatron-LM core_v0.14.0 megatron/core/pipeline_parallel/schedules.py
    `forward_backward_pipelining_without_interleaving` (min(p - rank - 1, m), no lower
    limit on m); DeepSpeed 0.19.8 deepspeed/runtime/pipe/schedule.py `TrainSchedule.steps`
    (2(m + p - 1) steps for any m). torch `Schedule1F1B` refuses m < p: a framework
    capability (`schedule:1f1b:few_micro_batches` in models/data/frameworks.json), not a
    rule of the schedule.
    Legend: p=num_stages, m=num_micro_batches, d=rank.
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(linear_placement(num_ranks=p, num_micro_batches=m))
    batches = np.arange(m, dtype=np.int64)
    for d in range(p):
        # The warm-up forwards (Megatron-LM `get_pp_rank_microbatches`: p - rank - 1 of
        # them), then F(warm-up + k) and BW(k) alternating, then the drain, as array columns
        # (a 21-rank list of 176 micro-batches in 0.3 ms rather than 2.3 ms as rows).
        warmup = min(p - 1 - d, m)
        builder.set_rank_columns(d, _kinds(warmup, m - warmup),
                                 _merged(batches, batches, warmup),
                                 np.full(2 * m, d, dtype=np.int64))
    return builder.build(schedule=PipelineSchedule.ONE_F_ONE_B, chunks_per_stage_unit=1)


def interleaved_order(*, num_micro_batches: int, num_chunks: int,
                      group_size: int) -> list[tuple[int, int]]:
    """Megatron's forward table: (micro-batch, chunk) in groups of N micro-batches.

    Within each group every micro-batch runs chunk 0, then chunk 1, ...; the last group
    ends at m.

    Source: Megatron-LM `get_schedule_table` (microbatch_group_size_per_vp_stage = N).
    Legend: m=num_micro_batches, v=num_chunks, N=group_size.
    """
    m, v, n = num_micro_batches, num_chunks, group_size
    table: list[tuple[int, int]] = []
    for first in range(0, m, n):
        last = min(first + n, m)
        table.extend([(j, c) for c in range(v) for j in range(first, last)])
    return table


def interleaved(*, num_stages: int, num_micro_batches: int, num_chunks: int,
                group_size: int) -> PipelineProgram:
    """Interleaved 1F1B with v chunks per rank (looped placement, chunk c = stage c p + d).

    Rank d runs w = min(2(p-1-d) + (v-1) N, v m) forwards of the forward table, then
    alternates F(T[w+k]) and BW(Tb[k]), then drains; Tb is T with chunk c -> v-1-c.

    Source: Megatron-LM arXiv:2104.04473 Sec. 2.2.2; warm-up of Megatron-LM
    `get_pp_rank_microbatches` and order of `get_schedule_table`.
    Legend: p=num_stages, m=num_micro_batches, v=num_chunks, N=group_size, d=rank.
    """
    p, m, v = num_stages, num_micro_batches, num_chunks
    placement = looped_placement(num_ranks=p, num_chunks=v, num_micro_batches=m)
    builder = ProgramBuilder(placement)
    table = np.array(interleaved_order(num_micro_batches=m, num_chunks=v,
                                       group_size=group_size), dtype=np.int64).reshape(-1, 2)
    batches, chunks = table[:, 0], table[:, 1]
    total = v * m
    for d in range(p):
        # Columns of the list: warm-up forwards, then F and BW alternating, then the drain.
        warmup = min(2 * (p - 1 - d) + (v - 1) * group_size, total)
        forward_stage, backward_stage = chunks * p + d, (v - 1 - chunks) * p + d
        builder.set_rank_columns(d, _kinds(warmup, total - warmup),
                                 _merged(batches, batches, warmup),
                                 _merged(forward_stage, backward_stage, warmup))
    return builder.build(schedule=PipelineSchedule.INTERLEAVED_1F1B, chunks_per_stage_unit=v)


def interleaved_group_size(*, num_stages: int, group_size: int | None) -> int:
    """The interleaved micro-batch group N: the given value, or p (Megatron's default)."""
    return num_stages if group_size is None else group_size


def _interleaved_rule(p: int, m: int, v: int, group_size: int | None) -> None:
    """Megatron-LM `get_schedule_table` groups micro-batches by N (default p) and refuses
    N < p, N > m and a last group of size 0 < m mod N < p (dependency bubbles). One group
    of all m < p micro-batches (N = m) is the exception: Llama 3's schedule runs "fewer
    micro-batches than the number of stages" (arXiv:2407.21783 Sec. 3.3.2), as torch's
    flexible `ScheduleInterleaved1F1B` does with one round (N = m // max(1, m // p) = m)."""
    # Each rule is tested before its message is built (the search checks this rule for
    # every interleaved shape it bounds).
    if v < 2:
        refuse("num_chunks", v,
               "schedule='interleaved_1f1b' needs num_chunks >= 2 (with one chunk use '1f1b')")
    if p < 2:
        refuse("num_stages", p,
               "schedule='interleaved_1f1b' needs num_stages >= 2 (one rank has no pipeline)")
    n = interleaved_group_size(num_stages=p, group_size=group_size)
    if n == m < p:
        return
    if n < p:
        refuse("group_size", n,
               f"the micro-batch group must hold at least num_stages={p} micro-batches "
               f"(or all of them when fewer, group_size = num_micro_batches): use group_size "
               f">= {p}")
    if n > m:
        refuse("num_micro_batches", m,
               f"interleaving with micro-batch group size {n} needs num_micro_batches >= "
               f"{n}: raise num_micro_batches to a multiple of {n}"
               + (f", or set group_size={m} to run all {m} in one group" if m < p else ""))
    tail = m % n
    if tail and tail < p:
        refuse("num_micro_batches", m,
               f"the last micro-batch group would hold {tail} < num_stages={p} micro-batches "
               f"(dependency bubbles): use a multiple of {n}, e.g. {m - tail} or "
               f"{m - tail + n}")


def _flush_bubble(p: int, _m: int, f: float, b: float, w: float,
                  _pair: float) -> tuple[float, float]:
    """(p-1)(F+B+W) in chunk costs, idle and span alike (arXiv:2104.04473 Sec. 2.2)."""
    idle = (p - 1) * (f + b + w)
    return idle, idle


def _interleaved_bubble(p: int, m: int, f: float, b: float, w: float,
                        pair: float) -> tuple[float, float] | None:
    """The flush bubble where a group fills the pipeline (m >= p); with one group of m < p
    micro-batches a chunk waits for its predecessor's last rank (dependency bubbles), so
    there is no closed form: None (the order is simulated)."""
    return None if m < p else _flush_bubble(p, m, f, b, w, pair)


def _interleaved_peak(p: int, m: int, v: int, d: int, n: int | None) -> int:
    """min(v m, 2(p-1-d) + (v-1) N + 1): the warm-up of `get_pp_rank_microbatches` plus the
    first steady forward (also for one group of m < p micro-batches, N = m: torch
    `_get_warmup_ops` with one round)."""
    return min(v * m, 2 * (p - 1 - d) + (v - 1) * interleaved_group_size(
        num_stages=p, group_size=n) + 1)


_GPIPE_MEGATRON = (
    "schedule 'gpipe': Megatron-LM core_v0.14.0 has no GPipe schedule and runs "
    "non-interleaved 1F1B instead: same bubble, but at most pp micro-batches in flight "
    "instead of all of them, so activation memory is lower than planned")

GPIPE = ScheduleTraits(
    schedule=PipelineSchedule.GPIPE, placement=StagePlacement.LINEAR, fixed_chunks=1,
    weight_copies=1, split_backward=False, overlapped_pairs=False, takes_group_size=False,
    generator=lambda p, m, _v, _n: gpipe(num_stages=p, num_micro_batches=m),
    rule=no_rule, peak_form=lambda _p, m, _v, _d, _n: m, peak_until_b_form=None,
    bubble_form=_flush_bubble,
    exports=FrameworkNames(megatron_native=False, megatron_note=_GPIPE_MEGATRON,
                           torchtitan="GPipe", torchtitan_note="", torchtitan_fallback="",
                           deepspeed_native=False),
    source="GPipe arXiv:1811.06965 Sec. 2.2 (all m micro-batches stored)",
    forwards_before_backwards=True)

ONE_F_ONE_B = ScheduleTraits(
    schedule=PipelineSchedule.ONE_F_ONE_B, placement=StagePlacement.LINEAR, fixed_chunks=1,
    weight_copies=1, split_backward=False, overlapped_pairs=False, takes_group_size=False,
    generator=lambda p, m, _v, _n: one_f_one_b(num_stages=p, num_micro_batches=m),
    rule=no_rule, peak_form=lambda p, m, _v, d, _n: min(p - d, m),
    peak_until_b_form=None, bubble_form=_flush_bubble,
    exports=FrameworkNames(megatron_native=True, megatron_note="", torchtitan="1F1B",
                           torchtitan_note="", torchtitan_fallback="",
                           deepspeed_native=True),
    source="Megatron-LM arXiv:2104.04473 Sec. 2.2.1 (1F1B keeps at most p - d in flight, "
           "min(p - d, m) with fewer micro-batches than ranks)")

INTERLEAVED_1F1B = ScheduleTraits(
    schedule=PipelineSchedule.INTERLEAVED_1F1B, placement=StagePlacement.LOOPED,
    fixed_chunks=None, weight_copies=1, split_backward=False, overlapped_pairs=False,
    takes_group_size=True,
    generator=lambda p, m, v, n: interleaved(
        num_stages=p, num_micro_batches=m, num_chunks=v,
        group_size=interleaved_group_size(num_stages=p, group_size=n)),
    rule=_interleaved_rule, peak_form=_interleaved_peak, peak_until_b_form=None,
    bubble_form=_interleaved_bubble,
    exports=FrameworkNames(megatron_native=True, megatron_note="",
                           torchtitan="Interleaved1F1B", torchtitan_note="",
                           torchtitan_fallback="", deepspeed_native=False),
    source="Megatron-LM arXiv:2104.04473 Sec. 2.2.2; `get_pp_rank_microbatches`")


__all__ = [
    "GPIPE",
    "INTERLEAVED_1F1B",
    "ONE_F_ONE_B",
    "gpipe",
    "interleaved",
    "interleaved_group_size",
    "interleaved_order",
    "one_f_one_b",
]

"""DualPipe and DualPipeV (the "cut-in-half" V variant), one traits record each.

Owns: the eight-step per-rank order of deepseek-ai/DualPipe, shared by both schedules (the
bidirectional one on PP ranks and the V-shaped one on P ranks), their parameter rules,
closed forms and records (`DUALPIPE`, `DUALPIPEV`). Must not: check the parameters every
schedule shares (the registry does) or time anything.
"""

from collections import deque
from dataclasses import dataclass
from itertools import count

from api_schemas.parallel import PipelineSchedule
from models.core.pipeline.ops import (
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    bidirectional_placement,
    v_placement,
)
from models.core.pipeline.traits import FrameworkNames, ScheduleTraits, StagePlacement, require

_F, _B, _W, _BW, _FB = (int(k) for k in OpKind)
Row = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Phase:
    """One of a rank's two stage roles: its stage and the micro-batch ids it serves."""

    stage: int
    first_micro_batch: int


class _RankOrder:
    """Counters and the weight-gradient FIFO of one rank while its list is built."""

    def __init__(self, phases: tuple[_Phase, _Phase]) -> None:
        self.phases = phases
        self.stages = (phases[0].stage, phases[1].stage)
        # Each phase's next forward and next backward micro-batch id (`next` on a counter is
        # one C call per op of the order).
        self.forwards = (count(phases[0].first_micro_batch), count(phases[1].first_micro_batch))
        self.backwards = (count(phases[0].first_micro_batch),
                          count(phases[1].first_micro_batch))
        self.weights: deque[tuple[int, int]] = deque()
        self.rows: list[Row] = []

    def forward(self, phase: int, times: int = 1) -> None:
        """`times` forwards of `phase`, one after another."""
        counter, stage, append = self.forwards[phase], self.stages[phase], self.rows.append
        for _ in range(times):
            append((_F, next(counter), stage, -1, -1))

    def backward(self, phase: int, *, split: bool) -> None:
        j, s = next(self.backwards[phase]), self.stages[phase]
        if split:
            self.rows.append((_B, j, s, -1, -1))
            self.weights.append((j, s))
        else:
            self.rows.append((_BW, j, s, -1, -1))

    def weight(self, times: int = 1) -> None:
        """`times` weight gradients, the oldest queued first."""
        popleft, append = self.weights.popleft, self.rows.append
        for _ in range(times):
            j, s = popleft()
            append((_W, j, s, -1, -1))

    def pair(self, forward_phase: int, backward_phase: int) -> None:
        self.rows.append((_FB, next(self.forwards[forward_phase]), self.stages[forward_phase],
                          next(self.backwards[backward_phase]), self.stages[backward_phase]))

    def steady_pairs(self, times: int) -> None:
        """`times` x (pair(0, 1), pair(1, 0)): the steady state, in one call."""
        (f0, f1), (b0, b1), (s0, s1) = self.forwards, self.backwards, self.stages
        append = self.rows.append
        for _ in range(times):
            append((_FB, next(f0), s0, next(b1), s1))
            append((_FB, next(f1), s1, next(b0), s0))


def _eight_steps(order: _RankOrder, *, n: int, h: int, per_pipe: int, middle: bool) -> None:
    """DualPipe's per-rank order; phase 0 is the role near the start (stage h).

    Source: deepseek-ai/DualPipe `dualpipe.py` (steps 1-8 of `step`), as specified in the
    reference Sec. 2.9.
    Legend: n=PP/2 (P for DualPipeV), h=half-rank, per_pipe=M micro-batches per phase.
    """
    order.forward(0, 2 * (n - h - 1))
    for _ in range(h + 1):
        order.forward(0)
        order.forward(1)
    for _ in range(n - h - 1):
        order.backward(1, split=True)
        order.weight()
        order.forward(1)
    steady = per_pipe - 2 * n + h + 1
    if steady > 0 and middle:
        # Upstream issues the first pair of the middle ranks unoverlapped.
        order.forward(0)
        order.backward(1, split=False)
        order.pair(1, 0)
        steady -= 1
    order.steady_pairs(steady)
    for _ in range(n - h - 1):
        order.backward(1, split=False)
        order.pair(1, 0)
    for i in range(2 * (h + 1)):
        order.backward(1 - i % 2, split=i >= h + 1)
    for _ in range(n - h - 1):
        order.weight()
        order.backward(0, split=True)
    order.weight(h + 1)
    assert not order.weights, "DualPipe order left weight gradients queued"


def dualpipe(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """DualPipe on PP ranks: two pipes in opposite directions, m/2 micro-batches each.

    Source: DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.1 (Fig. 5) and Table 2; order of
    deepseek-ai/DualPipe `dualpipe.py`.
    Legend: PP=num_stages, m=num_micro_batches, r=rank, h=min(r, PP-1-r).
    """
    pp, m = num_stages, num_micro_batches
    n, per_pipe = pp // 2, m // 2
    builder = ProgramBuilder(bidirectional_placement(num_ranks=pp, num_micro_batches=m))
    for r in range(pp):
        h = min(r, pp - 1 - r)
        down = _Phase(stage=r, first_micro_batch=0)
        up = _Phase(stage=pp - 1 - r, first_micro_batch=per_pipe)
        phases = (down, up) if r < n else (up, down)
        order = _RankOrder(phases)
        _eight_steps(order, n=n, h=h, per_pipe=per_pipe, middle=h == n - 1)
        builder.rank(r).extend(order.rows)
    return builder.build(schedule=PipelineSchedule.DUALPIPE, chunks_per_stage_unit=1)


def dualpipev(*, num_stages: int, num_micro_batches: int) -> PipelineProgram:
    """DualPipeV on P ranks: DualPipe's order on a V of 2P stages (h = r, n = P, M = m).

    Source: deepseek-ai/DualPipe `dualpipev.py`; torch `ScheduleDualPipeV` builds the same
    list. The last rank (r = P-1) plays DualPipe's middle rank.
    Legend: P=num_stages, m=num_micro_batches, r=rank.
    """
    p, m = num_stages, num_micro_batches
    builder = ProgramBuilder(v_placement(num_ranks=p, num_micro_batches=m))
    for r in range(p):
        phases = (_Phase(stage=r, first_micro_batch=0),
                  _Phase(stage=2 * p - 1 - r, first_micro_batch=0))
        order = _RankOrder(phases)
        _eight_steps(order, n=p, h=r, per_pipe=m, middle=r == p - 1)
        builder.rank(r).extend(order.rows)
    return builder.build(schedule=PipelineSchedule.DUALPIPEV, chunks_per_stage_unit=2)


def _dualpipe_rule(p: int, m: int, _v: int, _n: int | None) -> None:
    """deepseek-ai/DualPipe `dualpipe.py`: even PP, even m, m >= 2 PP."""
    require(p % 2 == 0, "num_stages", p,
            "schedule='dualpipe' pairs rank r with rank PP-1-r: use an even num_stages")
    require(m % 2 == 0, "num_micro_batches", m,
            "schedule='dualpipe' feeds half the micro-batches from each end: "
            "use an even num_micro_batches")
    require(m >= 2 * p, "num_micro_batches", m,
            f"schedule='dualpipe' needs num_micro_batches >= 2 x num_stages = {2 * p}")


def _dualpipev_rule(p: int, m: int, _v: int, _n: int | None) -> None:
    """deepseek-ai/DualPipe `dualpipev.py`: m >= 2P."""
    require(m >= 2 * p, "num_micro_batches", m,
            f"schedule='dualpipev' needs num_micro_batches >= 2 x num_stages = {2 * p}")


def _dualpipe_idle(pp: int, f: float, b: float, w: float,
                   pair: float) -> tuple[float, float] | None:
    """(PP/2-1)(F&B + B - 3W) with B the full backward (DeepSeek-V3 Table 2), exact only
    for F = B = W without overlap gain (the reference Sec. 4 item 1)."""
    if not (f == b == w and pair == f + b + w):
        return None
    idle = (pp / 2 - 1) * (pair + (b + w) - 3 * w)
    return idle, idle


_DUALPIPE_MEGATRON = (
    "schedule 'dualpipe': DualPipe (DeepSeek-V3, arXiv:2412.19437 Sec. 3.2.1) is not in "
    "Megatron-LM core_v0.14.0; exported as non-interleaved 1F1B with the forward-direction "
    "split; the mirrored weight copy, the bidirectional feed and the overlap of forward and "
    "backward chunks need a framework extension")

DUALPIPE = ScheduleTraits(
    schedule=PipelineSchedule.DUALPIPE, placement=StagePlacement.BIDIRECTIONAL,
    fixed_chunks=1, weight_copies=2, split_backward=True, overlapped_pairs=True,
    takes_group_size=False,
    generator=lambda p, m, _v, _n: dualpipe(num_stages=p, num_micro_batches=m),
    rule=_dualpipe_rule, peak_form=lambda p, _m, _v, _d, _n: p + 1, peak_until_b_form=None,
    bubble_form=lambda p, _m, f, b, w, pair: _dualpipe_idle(p, f, b, w, pair),
    exports=FrameworkNames(
        megatron_native=False, megatron_note=_DUALPIPE_MEGATRON, torchtitan="1F1B",
        torchtitan_note="fallback: DualPipe (two weight copies, bidirectional) has no "
                        "torch.distributed.pipelining class",
        torchtitan_fallback="schedule 'dualpipe' has no torch.distributed.pipelining class; "
                            "exported as 1F1B with the forward-direction split ('dualpipev' "
                            "is the torch variant)",
        deepspeed_native=False),
    source="DeepSeek-V3 arXiv:2412.19437 Sec. 3.2.1 and Table 2 (PP+1 activations, 2x "
           "parameters)")

DUALPIPEV = ScheduleTraits(
    schedule=PipelineSchedule.DUALPIPEV, placement=StagePlacement.V_SHAPE, fixed_chunks=2,
    weight_copies=1, split_backward=True, overlapped_pairs=True, takes_group_size=False,
    generator=lambda p, m, _v, _n: dualpipev(num_stages=p, num_micro_batches=m),
    rule=_dualpipev_rule, peak_form=lambda p, _m, _v, _d, _n: 2 * p + 1,
    peak_until_b_form=None,
    # Cut in half: DualPipeV on P ranks is DualPipe on 2P ranks.
    bubble_form=lambda p, _m, f, b, w, pair: _dualpipe_idle(2 * p, f, b, w, pair),
    exports=FrameworkNames(
        megatron_native=False,
        megatron_note="schedule 'dualpipev': DualPipeV is not in Megatron-LM core_v0.14.0 "
                      "and its V placement cannot be written as a layout string; exported as "
                      "non-interleaved 1F1B with the planned per-rank layer counts; the F/B "
                      "overlap and the V placement need a framework extension",
        torchtitan="DualPipeV",
        torchtitan_note="V placement; needs PyTorch 2.9 or newer (pytorch#159591)",
        torchtitan_fallback="", deepspeed_native=False),
    source="deepseek-ai/DualPipe `dualpipev.py`; 2P+1 chunks is the simulated peak of the "
           "cut-in-half order (DualPipe's PP+1 with PP = 2P)")


__all__ = ["DUALPIPE", "DUALPIPEV", "dualpipe", "dualpipev"]

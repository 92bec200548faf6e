"""Generators of DualPipe and DualPipeV (the "cut-in-half" V variant).

Owns: the eight-step per-rank order of deepseek-ai/DualPipe, shared by both schedules: the
bidirectional one on PP ranks and the V-shaped one on P ranks. Must not: validate
parameters or time anything.
"""

import logging
from collections import deque
from dataclasses import dataclass

from api_schemas.parallel import PipelineSchedule
from models.pipeline.ops import (
    OpKind,
    PipelineProgram,
    ProgramBuilder,
    bidirectional_placement,
    v_placement,
)

logger = logging.getLogger(__name__)

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
        self.forwards = [0, 0]
        self.backwards = [0, 0]
        self.weights: deque[tuple[int, int]] = deque()
        self.rows: list[Row] = []

    def _next_f(self, phase: int) -> tuple[int, int]:
        ph = self.phases[phase]
        j = ph.first_micro_batch + self.forwards[phase]
        self.forwards[phase] += 1
        return j, ph.stage

    def _next_b(self, phase: int) -> tuple[int, int]:
        ph = self.phases[phase]
        j = ph.first_micro_batch + self.backwards[phase]
        self.backwards[phase] += 1
        return j, ph.stage

    def forward(self, phase: int) -> None:
        j, s = self._next_f(phase)
        self.rows.append((_F, j, s, -1, -1))

    def backward(self, phase: int, *, split: bool) -> None:
        j, s = self._next_b(phase)
        if split:
            self.rows.append((_B, j, s, -1, -1))
            self.weights.append((j, s))
        else:
            self.rows.append((_BW, j, s, -1, -1))

    def weight(self) -> None:
        j, s = self.weights.popleft()
        self.rows.append((_W, j, s, -1, -1))

    def pair(self, forward_phase: int, backward_phase: int) -> None:
        jf, sf = self._next_f(forward_phase)
        jb, sb = self._next_b(backward_phase)
        self.rows.append((_FB, jf, sf, jb, sb))


def _eight_steps(order: _RankOrder, *, n: int, h: int, per_pipe: int, middle: bool) -> None:
    """DualPipe's per-rank order; phase 0 is the role near the start (stage h).

    Source: deepseek-ai/DualPipe `dualpipe.py` (steps 1-8 of `step`), as specified in the
    reference Sec. 2.9.
    Legend: n=PP/2 (P for DualPipeV), h=half-rank, per_pipe=M micro-batches per phase.
    """
    for _ in range(2 * (n - h - 1)):
        order.forward(0)
    for _ in range(h + 1):
        order.forward(0)
        order.forward(1)
    for _ in range(n - h - 1):
        order.backward(1, split=True)
        order.weight()
        order.forward(1)
    for i in range(per_pipe - 2 * n + h + 1):
        if i == 0 and middle:
            # Upstream issues the first pair of the middle ranks unoverlapped.
            order.forward(0)
            order.backward(1, split=False)
        else:
            order.pair(0, 1)
        order.pair(1, 0)
    for _ in range(n - h - 1):
        order.backward(1, split=False)
        order.pair(1, 0)
    for i in range(2 * (h + 1)):
        order.backward(1 - i % 2, split=i >= h + 1)
    for _ in range(n - h - 1):
        order.weight()
        order.backward(0, split=True)
    for _ in range(h + 1):
        order.weight()
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


__all__ = ["dualpipe", "dualpipev"]

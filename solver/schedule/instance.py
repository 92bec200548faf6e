"""The scheduling instance the optimizer solves: atomic F / B / W ops in integer ticks.

Owns: `ScheduleInstance` (ops, ranks, tick durations, precedence lags, in-order chains),
`build_instance`, longest-path heads and tails, and the analytic lower bound. Must not:
import OR-Tools (the CP-SAT model is in `formulation.py`).

Ops. For micro-batch j and virtual stage s there are three ops, F, B (input gradient) and
W (weight gradient); a fused BW is a B immediately followed by its W, and an overlapped
F&B pair is an F immediately followed by a BW, so every handcrafted schedule is a point of
this model (with no overlap gain). Op index: (kind x M + j) x S + s.

Lower bound (all valid for the true problem, in ticks):
- critical path: max over ops of head + tail (heads/tails are longest paths ignoring ranks);
- rank load: min head on the rank + its work;
- warm-up: let t_r be the earliest possible start of any B on rank r. Before t_r no W has
  ended on r, so at most L chunks can have started their F (the memory limit), and only
  F's can run on r before t_r: makespan >= t_r + work_r - min(L, #F_r) x max F_r.
- cool-down (one pipe, one stage per rank, m > L): after the last F on rank r ends at
  tau, the last micro-batch's B on r cannot start before tau + C_r (its round trip
  through the later stages). Only B and W of the other micro-batches in flight at tau,
  at most L - 1 of them, can run meanwhile, so r idles at least
  C_r - (L-1)(B_r + W_r) in [tau, tau + C_r]. With m > L some F starts after t_r, so this
  window follows t_r and its idle adds to the warm-up bound. (With W <= F and L = p this
  makes ZB-H1 provably optimal: (p-1)B + (p-1)(F-W) = (p-1)(F+B-W).)
"""

from dataclasses import dataclass

from models.core.pipeline.costs import OpDurations
from models.core.pipeline.ops import Placement
from solver.scaling import TimeScale

KIND_F, KIND_B, KIND_W = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ScheduleInstance:
    """Atomic ops of one pipeline iteration with integer durations and precedences."""

    placement: Placement
    scale: TimeScale
    memory_limit_chunks: int
    kind: list[int]
    micro_batch: list[int]
    stage: list[int]
    rank: list[int]
    duration: list[int]
    preds: list[list[tuple[int, int]]]
    """For each op: (predecessor op, minimum start-to-start lag in ticks)."""
    topo_order: list[int]
    pipe_micro_batches: list[list[int]]
    """Micro-batches of each pipe in order (the in-order chains run along these)."""

    @property
    def num_ops(self) -> int:
        """Number of atomic ops (3 x micro-batches x virtual stages)."""
        return len(self.kind)

    def op(self, kind: int, micro_batch: int, stage: int) -> int:
        """Index of op (kind, micro_batch, stage)."""
        place = self.placement
        return (kind * place.num_micro_batches + micro_batch) * place.num_stages + stage

    def ops_on_rank(self, rank: int) -> list[int]:
        """All ops that run on `rank`."""
        return [o for o in range(self.num_ops) if self.rank[o] == rank]


def build_instance(placement: Placement, durations: OpDurations, *, p2p_latency_s: float,
                   scale: TimeScale, memory_limit_chunks: int) -> ScheduleInstance:
    """Ops, tick durations and precedences (data flow plus in-order chains) of a placement."""
    num_s, num_m = placement.num_stages, placement.num_micro_batches
    fwd, inp, wgt = durations.per_stage(num_s)
    ticks = [[scale.ticks(float(x)) for x in arr] for arr in (fwd, inp, wgt)]
    lat = scale.ticks(p2p_latency_s)
    pipes = [[j for j in range(num_m) if int(placement.micro_batch_pipe[j]) == pipe]
             for pipe in range(placement.stage_rank.shape[0])]
    n = 3 * num_m * num_s
    kind, mb, st, rank, dur = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    order: list[int] = []

    def idx(k: int, j: int, s: int) -> int:
        return (k * num_m + j) * num_s + s

    for pipe, members in enumerate(pipes):
        ranks = [int(r) for r in placement.stage_rank[pipe]]
        for pos, j in enumerate(members):
            prev = members[pos - 1] if pos else None
            for k, stages in ((KIND_F, range(num_s)), (KIND_B, range(num_s - 1, -1, -1)),
                              (KIND_W, range(num_s))):
                for s in stages:
                    o = idx(k, j, s)
                    kind[o], mb[o], st[o], rank[o], dur[o] = k, j, s, ranks[s], ticks[k][s]
                    order.append(o)
                    if prev is not None:
                        preds[o].append((idx(k, prev, s), ticks[k][s]))
            for s in range(num_s):
                hop_in = lat if s > 0 and ranks[s - 1] != ranks[s] else 0
                if s > 0:
                    preds[idx(KIND_F, j, s)].append((idx(KIND_F, j, s - 1),
                                                     ticks[KIND_F][s - 1] + hop_in))
                preds[idx(KIND_B, j, s)].append((idx(KIND_F, j, s), ticks[KIND_F][s]))
                if s < num_s - 1:
                    hop_back = lat if ranks[s + 1] != ranks[s] else 0
                    preds[idx(KIND_B, j, s)].append((idx(KIND_B, j, s + 1),
                                                     ticks[KIND_B][s + 1] + hop_back))
                preds[idx(KIND_W, j, s)].append((idx(KIND_B, j, s), ticks[KIND_B][s]))
    return ScheduleInstance(placement=placement, scale=scale,
                            memory_limit_chunks=memory_limit_chunks, kind=kind, micro_batch=mb,
                            stage=st, rank=rank, duration=dur, preds=preds, topo_order=order,
                            pipe_micro_batches=pipes)


def heads_and_tails(inst: ScheduleInstance) -> tuple[list[int], list[int]]:
    """Earliest start of each op, and the least time from its start to the makespan."""
    head = [0] * inst.num_ops
    for o in inst.topo_order:
        for p, lag in inst.preds[o]:
            head[o] = max(head[o], head[p] + lag)
    tail = list(inst.duration)
    for o in reversed(inst.topo_order):
        for p, lag in inst.preds[o]:
            tail[p] = max(tail[p], lag + tail[o])
    return head, tail


def warmup_chunks_before_first_b(inst: ScheduleInstance, rank: int) -> tuple[int, int]:
    """(F ops on `rank`, longest F on `rank`) for the warm-up bound."""
    fs = [o for o in inst.ops_on_rank(rank) if inst.kind[o] == KIND_F]
    return len(fs), max(inst.duration[o] for o in fs)


def cooldown_idle_ticks(inst: ScheduleInstance, rank: int) -> int:
    """Idle forced on `rank` after its last F (the cool-down term of the module docstring).

    Applies to one pipe with one stage per rank and more micro-batches than the limit L;
    0 elsewhere.
    """
    ranks = [int(r) for r in inst.placement.stage_rank[0]]
    num_f, _ = warmup_chunks_before_first_b(inst, rank)
    if len(inst.pipe_micro_batches) != 1 or len(set(ranks)) != len(ranks) \
            or num_f <= inst.memory_limit_chunks:
        return 0
    last, s = inst.pipe_micro_batches[0][-1], ranks.index(rank)
    f_last, b_last = inst.op(KIND_F, last, s), inst.op(KIND_B, last, s)
    trip = _own_chain_ticks(inst, source=f_last, target=b_last) - inst.duration[f_last]
    fill = (inst.memory_limit_chunks - 1) * (inst.duration[b_last]
                                             + inst.duration[inst.op(KIND_W, last, s)])
    return max(0, trip - fill)


def _own_chain_ticks(inst: ScheduleInstance, *, source: int, target: int) -> int:
    """Least start-to-start time from `source` to `target` through ops of one micro-batch."""
    j = inst.micro_batch[source]
    start = {source: 0}
    for o in inst.topo_order:
        if inst.micro_batch[o] != j or o in start:
            continue
        reached = [start[p] + lag for p, lag in inst.preds[o] if p in start]
        if reached:
            start[o] = max(reached)
    return start[target]


def lower_bound_ticks(inst: ScheduleInstance, head: list[int], tail: list[int]) -> int:
    """The analytic lower bound of the module docstring, in ticks."""
    bound = max(h + t for h, t in zip(head, tail, strict=True))
    for r in range(inst.placement.num_ranks):
        ops = inst.ops_on_rank(r)
        if not ops:
            continue
        work = sum(inst.duration[o] for o in ops)
        bound = max(bound, min(head[o] for o in ops) + work)
        first_b = min(head[o] for o in ops if inst.kind[o] == KIND_B)
        num_f, longest_f = warmup_chunks_before_first_b(inst, r)
        bound = max(bound, first_b + work - min(inst.memory_limit_chunks, num_f) * longest_f
                    + cooldown_idle_ticks(inst, r))
    return bound


__all__ = [
    "KIND_B",
    "KIND_F",
    "KIND_W",
    "ScheduleInstance",
    "build_instance",
    "heads_and_tails",
    "lower_bound_ticks",
]

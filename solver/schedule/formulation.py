"""The CP-SAT model of minimum-makespan pipeline scheduling under a memory limit.

Owns: `build_cp_model` and `ScheduleVars`. Must not: import OR-Tools directly (it uses
`solver.cpsat`) or convert seconds (ticks come from `solver/scaling.py` through the instance).

Formulation (all times in integer ticks; O = ops, R = ranks, rank(o), d(o) its duration):
  variables  x_o in [head_o, H - tail_o]            start of op o (H = best known makespan)
             I_o = [x_o, x_o + d(o))                fixed-size interval
             A_js = [x_F(j,s), x_W(j,s) + d(W))      activation lifetime of (j, s)
             T                                      makespan
  minimise   T
  C1  x_o >= x_p + lag(p, o)     data flow: F(j,s-1) -> F(j,s); F(j,s), B(j,s+1) -> B(j,s);
                                 B(j,s) -> W(j,s); lag = d(p) + P2P latency across ranks
  C2  x_o(j,s) >= x_o(j',s) + d  in-order: on each stage and kind, micro-batches of a pipe
                                 run in order (no loss of optimality, see optimizer.py)
  C3  NoOverlap({I_o : rank(o) = r})                         for every rank r
  C4  Cumulative({A_js : rank(s) = r}, demand 1, capacity L)  for every rank r (memory)
  C5  T >= x_W + d(W)             for every W (every F precedes its B precedes its W)
  C6  T >= t_r + work_r - min(L, #F_r) max F_r + idle_r,  t_r = min over B on r of x_B
      (warm-up cut; idle_r is the cool-down idle of `instance.cooldown_idle_ticks`)
  C7  T >= LB                     the analytic lower bound of `instance.py` (redundant)
"""

from dataclasses import dataclass

from solver import cancel
from solver.cpsat import CpModel, IntervalVar, IntVar
from solver.schedule.instance import (
    KIND_B,
    KIND_F,
    KIND_W,
    ScheduleInstance,
    cooldown_idle_ticks,
    warmup_chunks_before_first_b,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleVars:
    """The decision variables: one start per op and the makespan."""

    start: list[IntVar]
    makespan: IntVar
    lifetime: dict[int, IntVar]
    """Activation lifetime (F start to W end) keyed by the F op."""
    first_b: list[IntVar]
    """Earliest B start on each rank (for the warm-up cut)."""


def build_cp_model(inst: ScheduleInstance, *, head: list[int], tail: list[int],
                   horizon: int, lower_bound: int, hint: list[int] | None = None,
                   rigid: list[int] | None = None) -> tuple[CpModel, ScheduleVars]:
    """Constraints C1-C7 of the module docstring.

    Args:
        inst: the ops, durations and precedences.
        head: earliest start of each op; tail: least time from its start to the end.
        horizon: makespan of a known schedule (nothing later is searched).
        lower_bound: a valid lower bound on the makespan (C7).
        hint: start ticks of a feasible schedule, hinted on every variable.
        rigid: ops that keep their hinted times up to one shift per rank (the windowed
            model of `windows.py`).
    """
    model = CpModel()
    start = [model.new_int_var(head[o], max(head[o], horizon - tail[o]), f"x[{o}]")
             for o in range(inst.num_ops)]
    if rigid:
        if hint is None:
            raise ValueError("rigid ops need a hint to take their relative times from")
        add_rigid_blocks(model, inst, start, rigid=rigid, hint=hint,
                         low=head, high=[max(h, horizon - t) for h, t in zip(head, tail,
                                                                            strict=True)])
    makespan = model.new_int_var(lower_bound, max(lower_bound, horizon), "makespan")
    v = ScheduleVars(start=start, makespan=makespan, lifetime={}, first_b=[])
    # Large instances take seconds to build: stop between steps once nobody waits.
    cancel.check()
    add_precedences(model, inst, v)
    cancel.check()
    add_rank_no_overlap(model, inst, v)
    add_memory_limit(model, inst, v, horizon=horizon)
    cancel.check()
    add_makespan_definition(model, inst, v)
    add_warmup_cut(model, inst, v, horizon=horizon)
    model.minimize(makespan)
    if hint is not None:
        cancel.check()
        add_complete_hint(model, inst, v, hint)
    return model, v


def add_complete_hint(model: CpModel, inst: ScheduleInstance, v: ScheduleVars,
                      hint: list[int]) -> None:
    """Hint every variable (starts, lifetimes, first B, makespan) so CP-SAT can take the
    hinted schedule as its first solution without search."""
    for o, value in enumerate(hint):
        model.add_hint(v.start[o], value)
    for o, size in v.lifetime.items():
        w = inst.op(KIND_W, inst.micro_batch[o], inst.stage[o])
        model.add_hint(size, hint[w] + inst.duration[w] - hint[o])
    for r, first_b in enumerate(v.first_b):
        model.add_hint(first_b, min(hint[o] for o in inst.ops_on_rank(r)
                                    if inst.kind[o] == KIND_B))
    model.add_hint(v.makespan, max(h + inst.duration[o] for o, h in enumerate(hint)))


def add_rigid_blocks(model: CpModel, inst: ScheduleInstance, start: list[IntVar], *,
                     rigid: list[int], hint: list[int], low: list[int],
                     high: list[int]) -> None:
    """x_o = hint_o + shift_r for the rigid ops o of each rank r (one block per rank);
    `low`/`high` are the start domains, which bound each shift."""
    by_rank: dict[int, list[int]] = {}
    for o in rigid:
        by_rank.setdefault(inst.rank[o], []).append(o)
    for r, ops in sorted(by_rank.items()):
        least = max(low[o] - hint[o] for o in ops)
        most = min(high[o] - hint[o] for o in ops)
        shift = model.new_int_var(min(least, 0), max(most, 0), f"shift[{r}]")
        model.add_hint(shift, 0)
        for o in ops:
            model.add(start[o] == shift + hint[o])


def add_precedences(model: CpModel, inst: ScheduleInstance, v: ScheduleVars) -> None:
    """C1 and C2: x_o >= x_p + lag for data flow and for the in-order chains."""
    for o, preds in enumerate(inst.preds):
        for p, lag in preds:
            model.add(v.start[o] >= v.start[p] + lag)


def add_rank_no_overlap(model: CpModel, inst: ScheduleInstance, v: ScheduleVars) -> None:
    """C3: the ops of one rank never overlap."""
    for r in range(inst.placement.num_ranks):
        intervals = [model.new_fixed_size_interval_var(v.start[o], inst.duration[o], f"I[{o}]")
                     for o in inst.ops_on_rank(r)]
        model.add_no_overlap(intervals)


def add_memory_limit(model: CpModel, inst: ScheduleInstance, v: ScheduleVars, *,
                     horizon: int) -> None:
    """C4: at most L micro-batch x chunk activations live on a rank (F start to W end)."""
    by_rank: dict[int, list[IntervalVar]] = {}
    for o in range(inst.num_ops):
        if inst.kind[o] != KIND_F:
            continue
        j, s = inst.micro_batch[o], inst.stage[o]
        w = inst.op(KIND_W, j, s)
        least = inst.duration[o] + inst.duration[inst.op(KIND_B, j, s)] + inst.duration[w]
        size = model.new_int_var(least, max(least, horizon), f"life[{j},{s}]")
        v.lifetime[o] = size
        interval = model.new_interval_var(v.start[o], size, v.start[w] + inst.duration[w],
                                          f"A[{j},{s}]")
        by_rank.setdefault(inst.rank[o], []).append(interval)
    for intervals in by_rank.values():
        if len(intervals) > inst.memory_limit_chunks:
            model.add_cumulative(intervals, [1] * len(intervals), inst.memory_limit_chunks)


def add_makespan_definition(model: CpModel, inst: ScheduleInstance, v: ScheduleVars) -> None:
    """C5: the makespan is at least the end of every W."""
    for o in range(inst.num_ops):
        if inst.kind[o] == KIND_W:
            model.add(v.makespan >= v.start[o] + inst.duration[o])


def add_warmup_cut(model: CpModel, inst: ScheduleInstance, v: ScheduleVars, *,
                   horizon: int) -> None:
    """C6: before a rank's first B only L forwards fit, so the rest of its work follows it.

    With in-order chains the first B of a stage is that of the pipe's first micro-batch.
    """
    leaders = {pipe[0] for pipe in inst.pipe_micro_batches if pipe}
    for r in range(inst.placement.num_ranks):
        ops = inst.ops_on_rank(r)
        firsts = [v.start[o] for o in ops
                  if inst.kind[o] == KIND_B and inst.micro_batch[o] in leaders]
        work = sum(inst.duration[o] for o in ops)
        num_f, longest_f = warmup_chunks_before_first_b(inst, r)
        first_b = model.new_int_var(0, horizon, f"firstB[{r}]")
        v.first_b.append(first_b)
        model.add_min_equality(first_b, firsts)
        model.add(v.makespan >= first_b + work - min(inst.memory_limit_chunks, num_f) * longest_f
                  + cooldown_idle_ticks(inst, r))


__all__ = [
    "ScheduleVars",
    "add_makespan_definition",
    "add_memory_limit",
    "add_precedences",
    "add_rank_no_overlap",
    "add_warmup_cut",
    "build_cp_model",
]

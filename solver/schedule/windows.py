"""The large-instance restriction: keep the steady state, reorder warm-up and cool-down.

Owns: `restrict_to_windows`. Must not: claim optimality; a restricted model only yields
feasible schedules, and the optimizer pairs them with the analytic lower bound.

On each rank, the ops of micro-batches outside the first and last `window` micro-batches of
their pipe (the steady state) are chained in the order the hint runs them. The chain is
satisfied by the hint, so the restricted model stays feasible, and CP-SAT's search is
spent where the bubbles are: the warm-up and cool-down ops, which stay free.
"""

import logging

from solver.cpsat import CpModel
from solver.schedule.formulation import ScheduleVars
from solver.schedule.instance import ScheduleInstance

logger = logging.getLogger(__name__)


def restrict_to_windows(model: CpModel, inst: ScheduleInstance, v: ScheduleVars, *,
                        hint: list[int], window: int) -> int:
    """Chain the steady-state ops of every rank in hint order; returns the chained ops."""
    middle: set[int] = set()
    for members in inst.pipe_micro_batches:
        middle.update(members[window:len(members) - window])
    chained = 0
    for r in range(inst.placement.num_ranks):
        ops = sorted((o for o in inst.ops_on_rank(r) if inst.micro_batch[o] in middle),
                     key=lambda o: (hint[o], inst.kind[o]))
        for prev, nxt in zip(ops, ops[1:], strict=False):
            model.add(v.start[nxt] >= v.start[prev] + inst.duration[prev])
        chained += len(ops)
    logger.debug("windowed model: %d of %d ops chained", chained, inst.num_ops)
    return chained


__all__ = ["restrict_to_windows"]
